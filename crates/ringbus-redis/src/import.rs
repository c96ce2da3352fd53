//! Imports: a task per imported topic reads the topic's stream through a consumer group and
//! publishes what arrives into the local bus; a settler acknowledges each message once every
//! local subscriber handled it.
//!
//! What every at-least-once engine does the same way (hand over in order, the dedup window,
//! settle in order, stop) is `ringbus_link::import`; this module is the Redis side of it,
//! `impl Inbound for Import`: how entries are read and claimed, and what acks, gives back
//! and dead-letters them.
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

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::streams::{StreamAutoClaimReply, StreamId, StreamPendingCountReply, StreamRangeReply};
use redis::Value;
use ringbus_link::engine::ImportTask;
use ringbus_link::import::{self, Count, Inbound, Redeliver, Shared};
use ringbus_link::names::DEAD_REASON;
use ringbus_link::Codec;
use tokio::time::Instant;

use crate::conn::{is_connection_error, Conn};
use crate::error::LinkError;
use crate::export::xadd_cmd;
use crate::shared::LinkShared;
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

/// A stream entry id, `<milliseconds>-<sequence>`, as numbers.
type EntryId = (u64, u64);

fn entry_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
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
        .map_err(LinkError::setup)?;
    // A blocking read answers within its BLOCK; past that plus the response timeout, the
    // connection is taken for lost (a server gone without closing the socket).
    let reads = Conn::new(
        link.client.clone(),
        link.connection_timeout,
        Some(link.streams.block + link.response_timeout),
        link.counters.clone(),
        format!("reads:{topic}"),
    );
    let import = Import {
        link: link.clone(),
        topic: topic.to_string(),
        key,
        group: group.to_string(),
    };
    tracing::info!(topic, stream = %import.key, group, consumer = %link.consumer, "ringbus-redis: importing");
    let reader = Reader {
        reads,
        // A claim first: entries a dead consumer held are taken at once if idle enough.
        next_claim: Instant::now(),
        cursor: "0-0".to_string(),
        retry: Duration::from_millis(50),
    };
    let task = import::spawn(import, reader, import::Destination::Topic(local), codec);
    Ok(ImportTask::new(task, "ringbus-redis"))
}

/// The reading side of an import: its blocking connection and where its claims are.
struct Reader {
    reads: Conn,
    /// When the next `XAUTOCLAIM` is due.
    next_claim: Instant,
    /// `XAUTOCLAIM`'s cursor: `0-0` once the pending list was scanned to its end.
    cursor: String,
    /// The wait after a failed read, doubled up to 1 s.
    retry: Duration,
}

impl Inbound for Import {
    type Message = Entry;
    type Key = EntryId;
    type Reader = Reader;

    const ENGINE: &'static str = "ringbus-redis";

    fn shared(&self) -> Shared<'_> {
        Shared {
            topic: &self.topic,
            link_id: &self.link.id,
            held: &self.link.runtime.held,
            stop: &self.link.runtime.stop_imports,
        }
    }

    fn count(&self, what: Count, n: u64) {
        let counters = &self.link.counters;
        let counter = match what {
            Count::Imported => &counters.imported,
            Count::Acked => &counters.acked,
            Count::Nacked => &counters.nacked,
            Count::DeadLettered => &counters.dead_lettered,
            Count::EchoSkipped => &counters.echo_skipped,
            Count::BadInput => &counters.bad_input,
            Count::Duplicates => &counters.duplicates,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn max_in_flight(&self) -> usize {
        self.link.streams.max_in_flight
    }

    fn dedup_window(&self) -> usize {
        self.link.streams.dedup_window
    }

    /// A claim when one is due (every `claim_interval`, and until a scan of the pending list
    /// reached its end), else a blocking read until the next claim is due.
    async fn take(&self, reader: &mut Reader, room: usize) -> Vec<Entry> {
        let options = &self.link.streams;
        let taken = if Instant::now() >= reader.next_claim {
            let claimed = claim(self, &mut reader.cursor, room).await;
            if reader.cursor == "0-0" || claimed.is_err() {
                reader.next_claim = Instant::now() + options.claim_interval();
            }
            claimed
        } else {
            let block = reader
                .next_claim
                .saturating_duration_since(Instant::now())
                .min(options.block)
                .max(Duration::from_millis(1));
            read(
                self,
                &reader.reads,
                room.clamp(1, options.read_batch.max(1)),
                block,
            )
            .await
        };
        match taken {
            Ok(entries) => {
                reader.retry = Duration::from_millis(50);
                entries
            }
            Err(e) => {
                add(&self.link.counters.import_errors);
                if e.code() == Some("NOGROUP") {
                    // The stream or group is gone (deleted, or a server restarted without
                    // persistence): make them again and go on from there.
                    tracing::warn!(topic = %self.topic, "ringbus-redis: the consumer group is gone; creating it again");
                    if let Err(e) = create_group(&self.link, &self.key, &self.group).await {
                        tracing::warn!(topic = %self.topic, error = %e, "ringbus-redis: cannot create the consumer group");
                    }
                } else {
                    tracing::warn!(topic = %self.topic, error = %e, "ringbus-redis: reading the stream failed; retrying");
                }
                tokio::time::sleep(reader.retry).await;
                reader.retry = (reader.retry * 2).min(Duration::from_secs(1));
                Vec::new()
            }
        }
    }

    fn origin<'m>(&self, entry: &'m Entry) -> Option<&'m str> {
        origin(&entry.fields)
    }

    fn message_id<'m>(&self, entry: &'m Entry) -> Option<&'m str> {
        message_id(&entry.fields)
    }

    fn header<'m>(&self, entry: &'m Entry, name: &str) -> Option<&'m str> {
        std::str::from_utf8(bytes(entry.fields.get(name)?)?).ok()
    }

    fn key(&self, entry: &Entry) -> Option<EntryId> {
        entry_id(&entry.id)
    }

    fn deliveries(&self, entry: &Entry) -> u64 {
        entry.deliveries
    }

    fn is_last(&self, entry: &Entry) -> bool {
        entry.deliveries >= u64::from(self.link.streams.max_deliver.max(1))
    }

    fn delivered_too_often(&self, entry: &Entry) -> Option<String> {
        let max_deliver = u64::from(self.link.streams.max_deliver.max(1));
        (entry.deliveries > max_deliver).then(|| {
            format!(
                "delivered {} times, more than max_deliver ({max_deliver}): its consumers died \
                 or stalled while handling it",
                entry.deliveries
            )
        })
    }

    fn decode<T, C: Codec<T>>(&self, codec: &C, entry: &Entry) -> Result<T, String> {
        decode(
            codec,
            &self.topic,
            &entry.fields,
            self.link.max_message_bytes,
        )
        .map_err(|reason| format!("entry {}: {reason}", entry.id))
    }

    /// The settler needs the fields only to dead-letter the entry: freed here, on the task
    /// that made them (a free on the settler's worker is a cross-thread free), and read back
    /// in the rare case of a dead letter (`with_fields`).
    fn keep(&self, mut entry: Entry) -> Entry {
        drop(std::mem::take(&mut entry.fields));
        entry
    }

    /// One `XACK` for them all.
    async fn ack(&self, entries: &[Entry]) -> bool {
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&self.key).arg(&self.group);
        for entry in entries {
            cmd.arg(&entry.id);
        }
        settle_cmd(self, "XACK", Settling::Cmd(&cmd)).await
    }

    async fn give_back(&self, entry: &Entry, when: Redeliver) -> bool {
        let delay = match when {
            Redeliver::Now => Duration::ZERO,
            Redeliver::Later => self.link.streams.nack_delay,
        };
        give_back(self, &entry.id, delay).await
    }

    async fn dead_letter(&self, entry: &Entry, reason: &str) -> bool {
        // Not read back: it stays pending, to be claimed, handled again and settled.
        match with_fields(self, entry).await {
            Some(entry) => dead_letter(self, &entry, reason).await,
            None => false,
        }
    }

    async fn finish(&self) {
        leave_if_idle(self).await;
    }
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

/// Takes up to `room` of the entries idle in the group's pending list for `claim_idle` (given
/// back, or held by a dead consumer), with their delivery counts; `cursor` is XAUTOCLAIM's,
/// `0-0` once the pending list was scanned to its end.
async fn claim(
    import: &Import,
    cursor: &mut String,
    room: usize,
) -> Result<Vec<Entry>, redis::RedisError> {
    let link = &import.link;
    let mut cmd = redis::cmd("XAUTOCLAIM");
    cmd.arg(&import.key)
        .arg(&import.group)
        .arg(&link.consumer)
        .arg(millis(link.streams.claim_idle))
        .arg(cursor.as_str())
        .arg("COUNT")
        .arg(room.clamp(1, link.streams.read_batch.max(1)));
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
/// transaction. Not stored (false): it stays pending, to be claimed and dead-lettered again.
async fn dead_letter(import: &Import, entry: &Entry, reason: &str) -> bool {
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
    settle_cmd(import, "dead-lettering", Settling::Pipe(&pipe)).await
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
    use redis::Value;

    use super::read_reply;

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
