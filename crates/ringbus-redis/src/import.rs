//! Imports: a task per imported topic reads the topic's stream through a consumer group and
//! publishes what arrives into the local bus; a settler acknowledges each message once every
//! local subscriber handled it.
//!
//! The protocol, per import (one consumer, `<consumer>`, in the group `<group>` of the stream
//! `<prefix>:<topic>`):
//!
//! - **Read.** `XREADGROUP GROUP <group> <consumer> COUNT n BLOCK ms STREAMS <key> >` on a
//!   connection of its own (a blocking read would hold up every other command of a shared
//!   connection). Redis puts each entry it returns in the group's pending list (PEL), owned
//!   by this consumer, with a delivery count of 1.
//! - **Hand over.** Each entry is decoded and published into the bus with a delivery receipt
//!   (`Topic::publish_tracked`), at most `max_in_flight` at a time, and the receipt goes to
//!   the settler in stream order.
//! - **Settle**, in order, once every local subscriber has handled the message: `XACK` (the
//!   entry leaves the PEL). A handler gave up on it (after its own retries: see
//!   `ringbus_link::engine::Settlement`): copy it to the dead-letter stream and `XACK` it, in
//!   one `MULTI`/`EXEC`, so the handlers that succeeded never see it again. A subscriber ended
//!   before handling it: give it back, `XCLAIM ... IDLE <claim_idle - nack_delay> JUSTID`,
//!   which keeps it in the PEL but makes it look idle, so that a claim takes it again after
//!   `nack_delay`; at the last allowed delivery (`max_deliver`), dead-letter it.
//! - **Claim.** Every `claim_interval`, `XAUTOCLAIM <key> <group> <consumer> <claim_idle>`
//!   takes every entry idle in the PEL for `claim_idle`: given back by the settler, or
//!   held by a consumer that died or stalled. `XAUTOCLAIM` raises each entry's delivery count;
//!   `XPENDING` reads it back. An entry delivered more than `max_deliver` times (a message
//!   that kills its consumers) is dead-lettered without being handled.
//!
//! Invariants: an entry is acknowledged only after its receipt resolved as handled by every
//! subscriber, or after it was stored in the dead-letter stream (the same transaction), or
//! when it needs no handling (this link's own export, a duplicate id). Anything else leaves
//! it in the PEL, where a claim finds it: a message can be handled twice, never lost.
//! `held` counts receipts sent to the settler and not yet settled.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::streams::{StreamAutoClaimReply, StreamId, StreamPendingCountReply, StreamRangeReply};
use redis::Value;
use ringbus::{Context, Delivered, Delivery, PublishError, Topic};
use ringbus_link::engine::{ImportTask, Settlement};
use ringbus_link::names::DEAD_REASON;
use ringbus_link::Codec;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::conn::{is_connection_error, Conn};
use crate::error::LinkError;
use crate::export::xadd_cmd;
use crate::link::LinkShared;
use crate::stats::add;
use crate::wire::{bytes, decode, message_id, origin, Fields};

/// One stream entry taken by this consumer.
struct Entry {
    id: String,
    fields: Fields,
    /// Its delivery count (1 for a first read).
    deliveries: u64,
}

/// What every part of one import shares.
struct Import {
    link: Arc<LinkShared>,
    topic: String,
    key: String,
    group: String,
}

/// The message ids handed to the bus recently, with the entry that carried each: a second
/// entry with one of them is a duplicate (a redelivery of the same entry is not). One shared
/// copy of each message id; entry ids are kept as their two numbers.
struct Window {
    capacity: usize,
    order: VecDeque<Arc<str>>,
    entries: HashMap<Arc<str>, EntryId>,
}

/// A stream entry id, `<milliseconds>-<sequence>`, as numbers.
type EntryId = (u64, u64);

fn entry_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

impl Window {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            order: VecDeque::new(),
            entries: HashMap::new(),
        }
    }

    /// The message id this window tracks for an entry with `fields`, copied out once: none
    /// when dedup is off (`dedup_window: 0`), so an import without it copies no id.
    fn tracked(&self, fields: &Fields) -> Option<Arc<str>> {
        if self.capacity == 0 {
            return None;
        }
        message_id(fields).map(Arc::<str>::from)
    }

    fn is_duplicate(&self, message: &str, entry: &str) -> bool {
        self.entries
            .get(message)
            .is_some_and(|e| Some(*e) != entry_id(entry))
    }

    fn remember(&mut self, message: &Arc<str>, entry: &str) {
        if self.capacity == 0 || self.entries.contains_key(message) {
            return;
        }
        // Redis makes every entry id: one that is not two numbers is never remembered.
        let Some(entry) = entry_id(entry) else {
            return;
        };
        self.entries.insert(message.clone(), entry);
        self.order.push_back(message.clone());
        if self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }
}

/// Creates the group at the start of the stream (and the stream, if missing); a group that
/// exists already is kept as it is.
async fn create_group(link: &LinkShared, key: &str, group: &str) -> Result<(), redis::RedisError> {
    let mut cmd = redis::cmd("XGROUP");
    cmd.arg("CREATE")
        .arg(key)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM");
    match link.commands.query::<()>(&cmd).await {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// Starts importing `topic` as a consumer of `group`.
pub(crate) async fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    group: &str,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let local = link.bus.topic::<T>(topic)?;
    let key = link.stream_key(topic);
    create_group(link, &key, group)
        .await
        .map_err(LinkError::Group)?;
    // A blocking read answers within its BLOCK; past that plus the response timeout, the
    // connection is taken for lost (a server gone without closing the socket).
    let reads = Conn::new(
        link.client.clone(),
        link.connection_timeout,
        Some(link.streams.block + link.response_timeout),
        link.counters.clone(),
        format!("reads:{topic}"),
    );
    let import = Arc::new(Import {
        link: link.clone(),
        topic: topic.to_string(),
        key,
        group: group.to_string(),
    });
    tracing::info!(topic, stream = %import.key, group, consumer = %link.consumer, "ringbus-redis: importing");
    let task = tokio::spawn(read_loop(import, local, codec, reads));
    Ok(ImportTask::new(task, "ringbus-redis"))
}

/// Reads, claims and hands over until the link stops imports; then settles what it holds.
async fn read_loop<T, C>(import: Arc<Import>, local: Topic<T>, codec: C, reads: Conn)
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let link = &import.link;
    let options = &link.streams;
    let (to_settle, held) = mpsc::channel(options.max_in_flight.clamp(1, Semaphore::MAX_PERMITS));
    // Aborted with this task if a cut close aborts it.
    let settler = AbortOnDropHandle::new(tokio::spawn(settle_in_order(import.clone(), held)));
    let mut window = Window::new(options.dedup_window);
    let interval = options.claim_interval();
    // A claim first: entries a dead consumer held are taken at once if they are idle enough.
    let mut next_claim = Instant::now();
    let mut cursor = "0-0".to_string();
    let mut retry = Duration::from_millis(50);
    'read: while !link.stop_imports.is_cancelled() {
        let taken = if Instant::now() >= next_claim {
            let claimed = claim(&import, &mut cursor).await;
            if cursor == "0-0" || claimed.is_err() {
                next_claim = Instant::now() + interval;
            }
            claimed
        } else {
            let room = to_settle.capacity().clamp(1, options.read_batch.max(1));
            let block = next_claim
                .saturating_duration_since(Instant::now())
                .min(options.block)
                .max(Duration::from_millis(1));
            tokio::select! {
                biased;
                _ = link.stop_imports.cancelled() => break 'read,
                r = read(&import, &reads, room, block) => r,
            }
        };
        let entries = match taken {
            Ok(entries) => {
                retry = Duration::from_millis(50);
                entries
            }
            Err(e) => {
                add(&link.counters.import_errors);
                if e.code() == Some("NOGROUP") {
                    // The stream or group is gone (deleted, or a server restarted without
                    // persistence): make them again and go on from there.
                    tracing::warn!(topic = %import.topic, "ringbus-redis: the consumer group is gone; creating it again");
                    if let Err(e) = create_group(link, &import.key, &import.group).await {
                        tracing::warn!(topic = %import.topic, error = %e, "ringbus-redis: cannot create the consumer group");
                    }
                } else {
                    tracing::warn!(topic = %import.topic, error = %e, "ringbus-redis: reading the stream failed; retrying");
                }
                tokio::select! {
                    _ = link.stop_imports.cancelled() => break 'read,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let mut entries = entries.into_iter();
        while let Some(entry) = entries.next() {
            let permit = tokio::select! {
                biased;
                _ = link.stop_imports.cancelled() => None,
                p = to_settle.reserve() => p.ok(),
            };
            let Some(permit) = permit else {
                // Stopping: what this batch still holds goes back at once, for any consumer.
                for rest in std::iter::once(entry).chain(entries) {
                    give_back(&import, &rest.id, Duration::ZERO).await;
                }
                break 'read;
            };
            if !hand_over(&import, &local, &codec, &mut window, entry, permit).await {
                break 'read;
            }
        }
    }
    // Stop reading (the blocking read was dropped above), then settle what is held.
    drop(to_settle);
    let _ = settler.await;
    leave_if_idle(&import).await;
}

/// New entries for this consumer, waiting up to `block` for some.
async fn read(
    import: &Import,
    reads: &Conn,
    count: usize,
    block: Duration,
) -> Result<Vec<Entry>, redis::RedisError> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&import.group)
        .arg(&import.link.consumer)
        .arg("COUNT")
        .arg(count)
        .arg("BLOCK")
        .arg(u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1))
        .arg("STREAMS")
        .arg(&import.key)
        .arg(">");
    let reply: Value = reads.query(&cmd).await?;
    read_reply(reply)
}

/// The entries of an XREADGROUP reply (RESP2 arrays or a RESP3 map), walked in place: the
/// `redis` crate's `StreamReadReply` copies the whole reply once and builds a map per entry.
fn read_reply(reply: Value) -> Result<Vec<Entry>, redis::RedisError> {
    let bad = |what: &'static str| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "an XREADGROUP reply",
            what.to_string(),
        ))
    };
    let streams: Vec<Value> = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|s| match s {
                Value::Array(mut key_entries) if key_entries.len() == 2 => key_entries
                    .pop()
                    .ok_or_else(|| bad("a stream without entries")),
                _ => Err(bad("a stream is not a [key, entries] pair")),
            })
            .collect::<Result<_, _>>()?,
        Value::Map(streams) => streams.into_iter().map(|(_, entries)| entries).collect(),
        _ => return Err(bad("neither an array nor a map")),
    };
    let mut entries = Vec::new();
    for stream in streams {
        let Value::Array(stream) = stream else {
            return Err(bad("a stream's entries are not an array"));
        };
        entries.reserve(stream.len());
        for entry in stream {
            let Value::Array(pair) = entry else {
                return Err(bad("an entry is not an [id, fields] pair"));
            };
            let mut pair = pair.into_iter();
            let (Some(id), Some(fields), None) = (pair.next(), pair.next(), pair.next()) else {
                return Err(bad("an entry is not an [id, fields] pair"));
            };
            let id = match id {
                Value::BulkString(id) => {
                    String::from_utf8(id).map_err(|_| bad("an entry id is not text"))?
                }
                Value::SimpleString(id) => id,
                _ => return Err(bad("an entry id is not text")),
            };
            // An entry deleted while pending has no fields (`Nil`): nothing to decode, and
            // `decode` dead-letters it as missing its body.
            let fields = match fields {
                Value::Nil => Fields::default(),
                other => Fields::from_reply(other)
                    .ok_or_else(|| bad("an entry's fields are not name/value pairs"))?,
            };
            entries.push(Entry {
                id,
                fields,
                deliveries: 1,
            });
        }
    }
    Ok(entries)
}

/// Takes the entries idle in the group's pending list for `claim_idle` (given back, or held by
/// a dead consumer), with their delivery counts; `cursor` is XAUTOCLAIM's, `0-0` once the
/// pending list was scanned to its end.
async fn claim(import: &Import, cursor: &mut String) -> Result<Vec<Entry>, redis::RedisError> {
    let link = &import.link;
    let mut cmd = redis::cmd("XAUTOCLAIM");
    cmd.arg(&import.key)
        .arg(&import.group)
        .arg(&link.consumer)
        .arg(millis(link.streams.claim_idle))
        .arg(cursor.as_str())
        .arg("COUNT")
        .arg(link.streams.read_batch.max(1));
    let reply: StreamAutoClaimReply = link.commands.query(&cmd).await?;
    *cursor = reply.next_stream_id;
    if !reply.deleted_ids.is_empty() {
        for _ in &reply.deleted_ids {
            add(&link.counters.trimmed);
        }
        tracing::warn!(
            topic = %import.topic,
            count = reply.deleted_ids.len(),
            "ringbus-redis: pending messages were trimmed from the stream before they were handled"
        );
    }
    let (Some(first), Some(last)) = (reply.claimed.first(), reply.claimed.last()) else {
        return Ok(Vec::new());
    };
    let mut pending = redis::cmd("XPENDING");
    pending
        .arg(&import.key)
        .arg(&import.group)
        .arg(&first.id)
        .arg(&last.id)
        .arg(reply.claimed.len())
        .arg(&link.consumer);
    let counts: StreamPendingCountReply = link.commands.query(&pending).await?;
    let counts: HashMap<String, u64> = counts
        .ids
        .into_iter()
        .map(|p| (p.id, p.times_delivered as u64))
        .collect();
    for _ in &reply.claimed {
        add(&link.counters.claimed);
    }
    Ok(reply
        .claimed
        .into_iter()
        .map(|StreamId { id, map, .. }| Entry {
            deliveries: counts.get(&id).copied().unwrap_or(2),
            id,
            fields: map.into_iter().collect(),
        })
        .collect())
}

/// Decides what to do with one entry, and hands it to the bus if it is to be handled. False
/// when the import must stop (the bus is closed).
async fn hand_over<T, C>(
    import: &Import,
    local: &Topic<T>,
    codec: &C,
    window: &mut Window,
    entry: Entry,
    permit: mpsc::Permit<'_, (Delivery, Entry)>,
) -> bool
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let link = &import.link;
    if origin(&entry.fields) == Some(link.id.as_str()) {
        // Our own export, back from the stream: not for us.
        add(&link.counters.echo_skipped);
        ack(import, &entry.id).await;
        return true;
    }
    let max_deliver = u64::from(link.streams.max_deliver.max(1));
    if entry.deliveries > max_deliver {
        let reason = format!(
            "delivered {} times, more than max_deliver ({max_deliver}): its consumers died or \
             stalled while handling it",
            entry.deliveries
        );
        dead_letter(import, &entry, &reason).await;
        return true;
    }
    let msg = match decode(codec, local.name(), &entry.fields, link.max_message_bytes) {
        Ok(msg) => msg,
        Err(reason) => {
            add(&link.counters.bad_input);
            tracing::warn!(topic = %import.topic, entry = %entry.id, reason = %reason, "ringbus-redis: refused a stream entry");
            dead_letter(import, &entry, &reason.to_string()).await;
            return true;
        }
    };
    let message = window.tracked(&entry.fields);
    if let Some(message) = &message {
        if window.is_duplicate(message, &entry.id) {
            add(&link.counters.duplicates);
            tracing::debug!(topic = %import.topic, id = %message, "ringbus-redis: dropped a duplicate");
            ack(import, &entry.id).await;
            return true;
        }
    }
    // Not cancelled by the close: a message read from Redis is handed over.
    match local.publish_tracked(&Context::new(), msg).await {
        Ok(delivery) => {
            add(&link.counters.imported);
            if let Some(message) = &message {
                window.remember(message, &entry.id);
            }
            link.held.fetch_add(1, Ordering::Relaxed);
            // The settler needs the fields only to dead-letter the entry: freed here, on the
            // task that made them (a free on the settler's worker is a cross-thread free),
            // and read back in the rare case of a dead letter (`with_fields`).
            let mut entry = entry;
            drop(std::mem::take(&mut entry.fields));
            permit.send((delivery, entry));
            true
        }
        Err(PublishError::Closed(_)) => {
            // The bus is closing: give it back for another consumer, at once.
            give_back(import, &entry.id, Duration::ZERO).await;
            false
        }
        Err(e) => {
            tracing::warn!(topic = %import.topic, error = %e, "ringbus-redis: the local bus refused an import");
            give_back(import, &entry.id, link.streams.nack_delay).await;
            true
        }
    }
}

/// The most entries one `XACK` acknowledges.
const ACK_BATCH: usize = 256;

/// Settles held imports in the order they were handed to the bus. The entries handled
/// without a failure are acknowledged together, with one `XACK`, whenever the settler would
/// otherwise wait (the channel is empty, or the next receipt is not done yet), before a
/// failure is settled, and every [`ACK_BATCH`] entries: never before every local subscriber
/// handled them (one `XACK` per entry made the import a round trip per message).
async fn settle_in_order(import: Arc<Import>, mut held: mpsc::Receiver<(Delivery, Entry)>) {
    let mut handled: Vec<String> = Vec::new();
    while let Some(first) = held.recv().await {
        let mut next = Some(first);
        while let Some((delivery, entry)) = next.take() {
            let outcome = match delivery.try_outcome() {
                Some(outcome) => outcome,
                None => {
                    ack_all(&import, &mut handled).await;
                    delivery.wait().await
                }
            };
            if outcome.is_ok() {
                handled.push(entry.id);
                if handled.len() >= ACK_BATCH {
                    ack_all(&import, &mut handled).await;
                }
            } else {
                ack_all(&import, &mut handled).await;
                settle(&import, &entry, outcome).await;
                import.link.held.fetch_sub(1, Ordering::Relaxed);
            }
            next = held.try_recv().ok();
        }
        ack_all(&import, &mut handled).await;
    }
}

/// Acknowledges `entries` (all handled by every local subscriber) with one `XACK`, and
/// empties the list.
async fn ack_all(import: &Import, entries: &mut Vec<String>) {
    if entries.is_empty() {
        return;
    }
    let mut cmd = redis::cmd("XACK");
    cmd.arg(&import.key).arg(&import.group).arg(&entries[..]);
    let n = entries.len() as u64;
    if settle_cmd(import, "XACK", Settling::Cmd(&cmd)).await {
        import.link.counters.acked.fetch_add(n, Ordering::Relaxed);
    }
    import.link.held.fetch_sub(n, Ordering::Relaxed);
    entries.clear();
}

/// Acks, gives back or dead-letters one import after the local subscribers handled it (see
/// `Settlement`: a handler that gave up dead-letters it, one that never got it gives it back).
async fn settle(import: &Import, entry: &Entry, outcome: Delivered) {
    let link = &import.link;
    let last = entry.deliveries >= u64::from(link.streams.max_deliver.max(1));
    let reason = match Settlement::of(outcome.subscribers, outcome.failed, outcome.missed) {
        Settlement::Ack => {
            if ack(import, &entry.id).await {
                add(&link.counters.acked);
            }
            return;
        }
        Settlement::DeadLetter(why) => format!("{why} on delivery {}", entry.deliveries),
        Settlement::Redeliver(why) if last => {
            format!("{why} on delivery {} (the last allowed)", entry.deliveries)
        }
        Settlement::Redeliver(why) => {
            tracing::debug!(topic = %import.topic, deliveries = entry.deliveries, reason = %why, "ringbus-redis: a subscriber did not handle a message; delivering again later");
            if give_back(import, &entry.id, link.streams.nack_delay).await {
                add(&link.counters.nacked);
            }
            return;
        }
    };
    // Not read back: it stays pending, to be claimed, handled again and settled.
    if let Some(entry) = with_fields(import, entry).await {
        dead_letter(import, &entry, &reason).await;
    }
}

/// `entry` with its fields, read back from the stream (the import freed them: see
/// `hand_over`). `None` (logged) if they could not be read: the entry then stays pending.
async fn with_fields(import: &Import, entry: &Entry) -> Option<Entry> {
    if entry.fields.iter().next().is_some() {
        return Some(Entry {
            id: entry.id.clone(),
            fields: entry.fields.clone(),
            deliveries: entry.deliveries,
        });
    }
    let mut cmd = redis::cmd("XRANGE");
    cmd.arg(&import.key).arg(&entry.id).arg(&entry.id);
    match import.link.commands.query::<StreamRangeReply>(&cmd).await {
        Ok(reply) => reply
            .ids
            .into_iter()
            .next()
            .map(|StreamId { id, map, .. }| Entry {
                id,
                fields: map.into_iter().collect(),
                deliveries: entry.deliveries,
            }),
        Err(e) => {
            tracing::warn!(topic = %import.topic, error = %e, "ringbus-redis: could not read an entry back to dead-letter it; it stays pending");
            None
        }
    }
}

/// Runs a settling command, again after each lost connection, for up to `claim_idle` (by
/// then another consumer may have claimed the entry). False (logged and counted) if it
/// never went through: the entry stays pending and is claimed again.
async fn settle_cmd(import: &Import, what: &str, command: Settling<'_>) -> bool {
    let link = &import.link;
    let started = Instant::now();
    let mut backoff = Duration::from_millis(20);
    loop {
        let result = match command {
            Settling::Cmd(cmd) => link.commands.query::<()>(cmd).await,
            Settling::Pipe(pipe) => link.commands.query_pipe::<()>(pipe).await,
        };
        match result {
            Ok(()) => return true,
            Err(e) if is_connection_error(&e) && started.elapsed() < link.streams.claim_idle => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                add(&link.counters.ack_errors);
                tracing::warn!(topic = %import.topic, error = %e, "ringbus-redis: {what} failed; the message stays pending");
                return false;
            }
        }
    }
}

/// A settling command: one command, or a transaction.
#[derive(Clone, Copy)]
enum Settling<'a> {
    Cmd(&'a redis::Cmd),
    Pipe(&'a redis::Pipeline),
}

/// XACK.
async fn ack(import: &Import, entry: &str) -> bool {
    let mut cmd = redis::cmd("XACK");
    cmd.arg(&import.key).arg(&import.group).arg(entry);
    settle_cmd(import, "XACK", Settling::Cmd(&cmd)).await
}

/// Keeps the entry pending but makes it look idle, so a claim takes it after `delay`.
async fn give_back(import: &Import, entry: &str, delay: Duration) -> bool {
    let link = &import.link;
    let idle = link.streams.claim_idle.saturating_sub(delay);
    let mut cmd = redis::cmd("XCLAIM");
    cmd.arg(&import.key)
        .arg(&import.group)
        .arg(&link.consumer)
        .arg(0)
        .arg(entry)
        .arg("IDLE")
        .arg(millis(idle))
        .arg("JUSTID");
    settle_cmd(import, "XCLAIM (give back)", Settling::Cmd(&cmd)).await
}

/// Copies the entry to the dead-letter stream, with `reason`, and acknowledges it, in one
/// transaction. Not stored: it stays pending, to be claimed and dead-lettered again.
async fn dead_letter(import: &Import, entry: &Entry, reason: &str) {
    let link = &import.link;
    let mut fields: Vec<(String, Vec<u8>)> = entry
        .fields
        .iter()
        .filter(|(name, _)| *name != DEAD_REASON)
        .filter_map(|(name, value)| Some((name.to_string(), bytes(value)?.to_vec())))
        .collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let one_line: String = reason.chars().filter(|c| !c.is_control()).collect();
    fields.push((DEAD_REASON.to_string(), one_line.into_bytes()));
    let dead_key = link.dead_letter_key(&import.topic);
    let mut pipe = redis::pipe();
    pipe.atomic()
        .add_command(xadd_cmd(
            link,
            &dead_key,
            fields.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        ))
        .ignore()
        .cmd("XACK")
        .arg(&import.key)
        .arg(&import.group)
        .arg(&entry.id)
        .ignore();
    let id = message_id(&entry.fields);
    if settle_cmd(import, "dead-lettering", Settling::Pipe(&pipe)).await {
        add(&link.counters.dead_lettered);
        tracing::warn!(topic = %import.topic, id = ?id, stream = %dead_key, reason, "ringbus-redis: message dead-lettered");
    }
}

/// Leaves the group if this consumer holds nothing in it: a link that closed cleanly leaves
/// no consumer behind.
async fn leave_if_idle(import: &Import) {
    let link = &import.link;
    let mut pending = redis::cmd("XPENDING");
    pending
        .arg(&import.key)
        .arg(&import.group)
        .arg("-")
        .arg("+")
        .arg(1)
        .arg(&link.consumer);
    let Ok(held) = link
        .commands
        .query::<StreamPendingCountReply>(&pending)
        .await
    else {
        return;
    };
    if held.ids.is_empty() {
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("DELCONSUMER")
            .arg(&import.key)
            .arg(&import.group)
            .arg(&link.consumer);
        if let Err(e) = link.commands.query::<()>(&cmd).await {
            tracing::debug!(error = %e, "ringbus-redis: could not leave the group");
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redis::Value;

    use super::{read_reply, Fields, Window};

    #[test]
    fn the_window_drops_other_entries_with_a_seen_id_and_forgets_the_oldest() {
        let id = |s: &str| -> Arc<str> { Arc::from(s) };
        let mut w = Window::new(2);
        w.remember(&id("a"), "1-0");
        assert!(
            !w.is_duplicate("a", "1-0"),
            "a redelivery of one entry is not a duplicate"
        );
        assert!(w.is_duplicate("a", "2-0"));
        w.remember(&id("b"), "3-0");
        w.remember(&id("c"), "4-0");
        assert!(!w.is_duplicate("a", "5-0"), "forgotten past the capacity");
        assert!(w.is_duplicate("c", "6-0"));
        let mut off = Window::new(0);
        off.remember(&id("a"), "1-0");
        assert!(!off.is_duplicate("a", "2-0"));
        let fields: Fields = [(
            ringbus_link::names::ID.to_string(),
            Value::BulkString(b"m".to_vec()),
        )]
        .into_iter()
        .collect();
        assert_eq!(w.tracked(&fields).as_deref(), Some("m"));
        assert_eq!(off.tracked(&fields), None, "no id copied with dedup off");
    }

    #[test]
    fn a_read_reply_is_walked_in_either_shape_and_a_bad_one_is_an_error() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry =
            |id: &str| Value::Array(vec![b(id), Value::Array(vec![b("Ringbus-Id"), b("m")])]);
        let resp2 = Value::Array(vec![Value::Array(vec![
            b("s:t"),
            Value::Array(vec![entry("1-0"), entry("2-0")]),
        ])]);
        let got = read_reply(resp2).unwrap();
        let ids: Vec<&str> = got.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["1-0", "2-0"]);
        assert_eq!(got[1].fields.get("Ringbus-Id"), Some(&b("m")));
        let resp3 = Value::Map(vec![(b("s:t"), Value::Array(vec![entry("3-1")]))]);
        assert_eq!(read_reply(resp3).unwrap()[0].id, "3-1");
        assert!(read_reply(Value::Nil).unwrap().is_empty());
        let deleted = Value::Array(vec![Value::Array(vec![
            b("s:t"),
            Value::Array(vec![Value::Array(vec![b("4-0"), Value::Nil])]),
        ])]);
        assert!(read_reply(deleted).unwrap()[0]
            .fields
            .get("Ringbus-Body")
            .is_none());
        for bad in [
            Value::Int(3),
            Value::Array(vec![Value::Array(vec![b("s:t")])]),
            Value::Array(vec![Value::Array(vec![
                b("s:t"),
                Value::Array(vec![b("1-0")]),
            ])]),
            Value::Array(vec![Value::Array(vec![
                b("s:t"),
                Value::Array(vec![Value::Array(vec![Value::Int(1), Value::Nil])]),
            ])]),
        ] {
            assert!(read_reply(bad.clone()).is_err(), "{bad:?}");
        }
    }
}
