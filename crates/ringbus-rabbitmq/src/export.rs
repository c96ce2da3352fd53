//! Exports: a bus batch subscriber per exported topic publishes the local messages to the
//! link's topic exchange, with the topic as the routing key.
//!
//! The handler takes what is queued for it at once (a bus batch), encodes each message,
//! publishes them on a channel in confirm mode, then awaits their confirms, in parts of at
//! most `publish_window` messages: the subscriber's queue is the export's buffer, the bus's
//! backpressure its flow control, and the link pays one round trip per part, not per
//! message. A message whose publish or confirm failed (a lost connection) is published again,
//! on a new channel, for up to `publish_retry_for`; a copy RabbitMQ stored twice carries the
//! same message id, which the importers' dedup window drops. A message that cannot be
//! encoded, or that RabbitMQ refuses (a nack), is counted in `export_errors` and logged; the
//! others of its batch still go.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::maybe_done;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::Channel;
use lapin::Confirmation;
use ringbus::{Batch, BatchHandler, HandlerError, SubscribeOptions, TopicBatchHandler};
use ringbus_link::engine::SubscribedExport;
use ringbus_link::Codec;
use tokio::time::Instant;

use crate::error::{check_name, LinkError};
use crate::shared::LinkShared;
use crate::stats::add;
use crate::wire::{encode, properties, ExportError, Outgoing};

/// Opens a channel in confirm mode on the link's connection.
pub(crate) async fn confirm_channel(link: &LinkShared) -> Result<Channel, String> {
    let channel = link.conn.channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(channel)
}

/// Publishes `body` with `properties` to `exchange` under `routing_key` on `channel`, and
/// waits for its confirm: `Ok(true)` confirmed, `Ok(false)` refused by RabbitMQ (a nack),
/// `Err` lost on the way (send it again).
pub(crate) async fn publish_confirmed(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: lapin::BasicProperties,
) -> Result<bool, String> {
    let confirm = channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .map_err(|e| e.to_string())?;
    match confirm.await.map_err(|e| e.to_string())? {
        Confirmation::Ack(_) | Confirmation::NotRequested => Ok(true),
        Confirmation::Nack(_) => Ok(false),
    }
}

/// Runs `futures` together, first polling each in the order given (and again in that order
/// at each wake-up), and returns their outputs in that order. A small `join_all` whose polling
/// order is part of its contract: a publish queues its frames at its first poll.
async fn in_order<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut running: Vec<_> = futures.map(|f| Box::pin(maybe_done(f))).collect();
    poll_fn(|cx| {
        let mut done = true;
        for future in &mut running {
            done &= future.as_mut().poll(cx).is_ready();
        }
        if done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    running
        .iter_mut()
        .filter_map(|future| future.as_mut().take_output())
        .collect()
}

/// What every export's handler shares: the link and the codec.
struct Exporter<T, C> {
    link: Arc<LinkShared>,
    codec: C,
    _message: PhantomData<fn(&T)>,
}

/// The channel a topic's last batch went out on, kept while it works. A topic's subscriber
/// calls its handler once at a time, so the lock is never contended.
type ChannelSlot = tokio::sync::Mutex<Option<Channel>>;

impl<T: Send + Sync + 'static, C: Codec<T>> Exporter<T, C> {
    fn new(link: &Arc<LinkShared>, codec: C) -> Self {
        Self {
            link: link.clone(),
            codec,
            _message: PhantomData,
        }
    }

    /// Publishes `batch` and waits for its confirms, a part of at most `publish_window` at a
    /// time. `Err` names the first message that was not stored (each one is counted and
    /// logged).
    async fn export(
        &self,
        topic: &str,
        slot: &ChannelSlot,
        batch: Batch<'_, T>,
    ) -> Result<(), ExportError> {
        let link = &self.link;
        let mut first_error = None;
        let mut pending: Vec<(Outgoing, Vec<u8>)> = Vec::with_capacity(batch.len());
        for msg in batch.iter() {
            if self.codec.is_imported(msg) {
                add(&link.counters.echo_skipped);
                continue;
            }
            let mut body = Vec::new();
            match encode(&self.codec, msg, link.max_message_bytes, &mut body) {
                Ok(message) => pending.push((message, body)),
                Err(e) => self.failed(topic, &mut first_error, None, e),
            }
        }
        let mut progress = Instant::now();
        let mut backoff = Duration::from_millis(20);
        let mut channel = slot.lock().await;
        while !pending.is_empty() {
            let before = pending.len();
            let sent = self
                .send(topic, &mut channel, &mut pending, &mut first_error)
                .await;
            if pending.len() < before {
                progress = Instant::now();
                backoff = Duration::from_millis(20);
            }
            let Err(lost) = sent else { continue };
            *channel = None;
            if progress.elapsed() >= link.queues.publish_retry_for {
                for (message, _) in pending.drain(..) {
                    let error = ExportError::Send(lost.clone());
                    self.failed(topic, &mut first_error, Some(&message.id), error);
                }
                break;
            }
            add(&link.counters.export_retries);
            tracing::debug!(topic, messages = pending.len(), error = %lost, "ringbus-rabbitmq: publishing again after a lost connection");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Publishes the first `publish_window` messages of `pending` on the channel (made first
    /// if there is none) and awaits their confirms, removing each message settled (confirmed
    /// or refused). `Err` when the channel failed: what is left in `pending` goes again.
    async fn send(
        &self,
        topic: &str,
        channel: &mut Option<Channel>,
        pending: &mut Vec<(Outgoing, Vec<u8>)>,
        first_error: &mut Option<ExportError>,
    ) -> Result<(), String> {
        let link = &self.link;
        let ch = match channel {
            Some(ch) => ch.clone(),
            None => {
                let ch = confirm_channel(link).await?;
                *channel = Some(ch.clone());
                ch
            }
        };
        // Every publish of the batch is started before any is awaited: each queues its frames
        // at its first poll, and `in_order` makes those first polls in the topic's order, so
        // lapin's I/O thread writes the batch together (awaiting each write before starting
        // the next cost a socket write and two thread wake-ups per message).
        let part = pending.len().min(link.queues.publish_window);
        let publishes = pending[..part].iter().map(|(message, body)| {
            ch.basic_publish(
                link.prefix.as_str().into(),
                topic.into(),
                BasicPublishOptions::default(),
                body,
                properties(message, topic, &link.id),
            )
        });
        let mut confirms = Vec::with_capacity(part);
        for published in in_order(publishes).await {
            confirms.push(published.map_err(|e| e.to_string())?);
        }
        let mut settled = 0;
        let mut result = Ok(());
        for confirm in confirms {
            match confirm.await {
                Ok(Confirmation::Ack(_) | Confirmation::NotRequested) => {
                    add(&link.counters.exported);
                }
                Ok(Confirmation::Nack(_)) => {
                    let id = pending[settled].0.id.clone();
                    let refused = ExportError::Send("RabbitMQ refused it (a nack)".into());
                    self.failed(topic, first_error, Some(&id), refused);
                }
                Err(e) => {
                    result = Err(e.to_string());
                    break;
                }
            }
            settled += 1;
        }
        pending.drain(..settled);
        result
    }

    /// Counts and logs a message that was not exported; keeps the batch's first error.
    fn failed(
        &self,
        topic: &str,
        first: &mut Option<ExportError>,
        id: Option<&str>,
        error: ExportError,
    ) {
        add(&self.link.counters.export_errors);
        tracing::warn!(topic, id, error = %error, "ringbus-rabbitmq: message not exported");
        first.get_or_insert(error);
    }
}

/// The handler of one topic's export.
struct TopicExport<T, C> {
    topic: Arc<str>,
    channel: ChannelSlot,
    exporter: Exporter<T, C>,
}

impl<T: Send + Sync + 'static, C: Codec<T>> BatchHandler<T> for TopicExport<T, C> {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            let exported = self
                .exporter
                .export(&self.topic, &self.channel, batch)
                .await;
            exported.map_err(HandlerError::new)
        }
    }
}

/// The handler of a pattern's export: each batch under its own topic's routing key, on the
/// topic's own channel (a topic retrying after a lost connection holds up no other).
struct PatternExport<T, C> {
    channels: std::sync::Mutex<Channels>,
    exporter: Exporter<T, C>,
}

/// The channels of a pattern's topics. A topic keeps its channel while an export uses it or
/// it is among the most recently used: once there are as many as a pattern keeps (see
/// [`kept_channels`]), a new topic's first takes out the least recently used half of those
/// not in use, to be closed, so that a pattern over ever new topics does not run the
/// connection out of channels.
#[derive(Default)]
struct Channels {
    /// Each topic's channel, and when it was last handed out.
    slots: HashMap<Arc<str>, (Arc<ChannelSlot>, u64)>,
    /// Counts the hand-outs.
    tick: u64,
}

impl Channels {
    /// The channel of `topic`, if it has one.
    fn get(&mut self, topic: &str) -> Option<Arc<ChannelSlot>> {
        self.tick += 1;
        let tick = self.tick;
        let (slot, used) = self.slots.get_mut(topic)?;
        *used = tick;
        Some(slot.clone())
    }

    /// The channel of `topic`, made if it has none, while at most `kept` are kept; and the
    /// channels taken out to make room, to be closed.
    fn add(&mut self, topic: &str, kept: usize) -> (Arc<ChannelSlot>, Vec<Arc<ChannelSlot>>) {
        if let Some(slot) = self.get(topic) {
            return (slot, Vec::new());
        }
        let mut out = Vec::new();
        if self.slots.len() >= kept {
            // Slots are handed out only under the map's lock (here and in `get`): one that
            // only the map holds is not in use, and nobody can take it before it is out.
            let mut idle: Vec<(u64, Arc<str>)> = self
                .slots
                .iter()
                .filter(|(_, (slot, _))| Arc::strong_count(slot) == 1)
                .map(|(topic, (_, used))| (*used, topic.clone()))
                .collect();
            idle.sort_unstable();
            let oldest = idle.len().div_ceil(2);
            out.extend(
                idle.iter()
                    .take(oldest)
                    .filter_map(|(_, topic)| self.slots.remove(topic))
                    .map(|(slot, _)| slot),
            );
        }
        let slot = Arc::new(ChannelSlot::default());
        self.slots.insert(topic.into(), (slot.clone(), self.tick));
        (slot, out)
    }
}

/// How many channels a pattern's topics keep on a connection that allows `channel_max` (as
/// negotiated: lapin reports a server without a limit as 65,535; unknown while there is no
/// connection, then RabbitMQ's default, 2,047): a quarter, the rest being for the link's
/// other exports, its imports and its other patterns.
fn kept_channels(channel_max: Option<u16>) -> usize {
    usize::from(channel_max.unwrap_or(2047) / 4).max(1)
}

/// The longest a new topic's first batch waits for the channels taken out to close.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// Closes the channels of `slots`, which no export uses any more: together, for at most
/// [`CLOSE_WITHIN`] (a channel left open closes with its connection).
async fn close_channels(slots: Vec<Arc<ChannelSlot>>) {
    let closes = slots.into_iter().map(|slot| async move {
        if let Some(channel) = slot.lock().await.take() {
            // One already closed, or on a connection going away, has nothing left to close.
            let _ = channel.close(200, "not used lately".into()).await;
        }
    });
    let n = closes.len();
    if tokio::time::timeout(CLOSE_WITHIN, futures_util::future::join_all(closes))
        .await
        .is_err()
    {
        tracing::debug!(
            channels = n,
            "ringbus-rabbitmq: channels not used lately not closed in time"
        );
    }
}

impl<T: Send + Sync + 'static, C: Codec<T>> TopicBatchHandler<T> for PatternExport<T, C> {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        topic: &'a str,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            // A routing key is at most 255 bytes: a topic name the by-name export would
            // refuse has its messages counted as not exported.
            if let Err(e) = check_name(topic, "topic") {
                let n = batch.len() as u64;
                self.exporter
                    .link
                    .counters
                    .export_errors
                    .fetch_add(n, Ordering::Relaxed);
                tracing::warn!(topic, error = %e, messages = n, "ringbus-rabbitmq: messages not exported");
                return Err(HandlerError::new(e));
            }
            // A panic cannot leave the map inconsistent: each change is one insert or remove.
            let channels = || self.channels.lock().unwrap_or_else(|e| e.into_inner());
            let known = channels().get(topic);
            let slot = match known {
                Some(slot) => slot,
                None => {
                    let kept = kept_channels(self.exporter.link.conn.channel_max().await);
                    let (slot, out) = channels().add(topic, kept);
                    close_channels(out).await;
                    slot
                }
            };
            let exported = self.exporter.export(topic, &slot, batch).await;
            exported.map_err(HandlerError::new)
        }
    }
}

/// Starts exporting `topic`.
pub(crate) fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    codec: C,
) -> Result<SubscribedExport, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let exporter = TopicExport {
        topic: Arc::from(topic),
        channel: ChannelSlot::default(),
        exporter: Exporter::<T, C>::new(link, codec),
    };
    let options = SubscribeOptions::new().name(format!("rabbitmq-export:{topic}"));
    let subscription = link.bus.subscribe_batch(topic, options, exporter)?;
    tracing::info!(topic, exchange = %link.prefix, "ringbus-rabbitmq: exporting");
    Ok(SubscribedExport {
        engine: "ringbus-rabbitmq",
        topic: topic.to_string(),
        subscription,
    })
}

/// Starts exporting every topic `pattern` matches, present and future, each under its own
/// routing key.
pub(crate) fn start_pattern<T, C>(
    link: &Arc<LinkShared>,
    pattern: &str,
    codec: C,
) -> Result<SubscribedExport, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let exporter = PatternExport {
        channels: std::sync::Mutex::default(),
        exporter: Exporter::<T, C>::new(link, codec),
    };
    let options = SubscribeOptions::new().name(format!("rabbitmq-export:{pattern}"));
    let subscription = link
        .bus
        .subscribe_pattern_batch(pattern, options, exporter)?;
    tracing::info!(pattern, exchange = %link.prefix, "ringbus-rabbitmq: exporting a pattern");
    Ok(SubscribedExport {
        engine: "ringbus-rabbitmq",
        topic: pattern.to_string(),
        subscription,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{kept_channels, Channels};

    /// Once as many channels are kept as allowed, a new topic's takes out the least recently
    /// used half of those not in use, never one an export holds, and keeps the rest.
    #[test]
    fn a_new_topic_takes_out_the_least_recently_used_idle_channels() {
        let mut channels = Channels::default();
        let topics = ["a", "b", "c", "d", "e", "f"];
        for topic in topics {
            let (_, out) = channels.add(topic, topics.len());
            assert!(out.is_empty(), "{topic}: room for every topic");
        }
        // `a`, the least recently used, is in use; `c` was used again since.
        let in_use = channels.get("a").unwrap();
        channels.slots.get_mut("a").unwrap().1 = 0;
        assert!(channels.get("c").is_some());
        let (_, out) = channels.add("g", topics.len());
        // Idle: b, d, e, f, c (least recent first); half of them, rounded up, go.
        assert_eq!(out.len(), 3);
        let mut kept: Vec<&str> = channels.slots.keys().map(|t| &**t).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["a", "c", "f", "g"]);
        assert!(Arc::ptr_eq(&in_use, &channels.get("a").unwrap()));
        // A topic that has its channel gets it back, whatever is kept.
        let (again, out) = channels.add("g", 1);
        assert!(out.is_empty());
        assert!(Arc::ptr_eq(&again, &channels.get("g").unwrap()));
    }

    #[test]
    fn a_pattern_keeps_a_quarter_of_the_connections_channels() {
        assert_eq!(kept_channels(Some(2047)), 511);
        assert_eq!(kept_channels(None), 511);
        assert_eq!(kept_channels(Some(40)), 10);
        assert_eq!(kept_channels(Some(2)), 1);
    }
}
