//! Imports: a consumer per imported topic reads the topic's queue and publishes what arrives
//! into the local bus; each message is acknowledged once every local subscriber handled it.
//!
//! What every at-least-once engine does the same way (hand over in order, the dedup window,
//! settle in order, stop) is `ringbus_link::import`; this module is the RabbitMQ side of it,
//! `impl Inbound for Import`:
//!
//! - **Queue.** The durable queue `<prefix>.<group>.<topic>`, bound to the topic exchange
//!   `<prefix>` with the topic as its key: instances of one group compete for its messages.
//! - **Deliveries.** A classic queue says only whether a message was delivered before
//!   (`redelivered`), not how often: the import counts the redeliveries it sees itself, per
//!   message id (`Counts`, as many ids as the dedup window, at least 1,024), in memory. A
//!   message that comes back to another process, or after a restart, starts its count again
//!   at 2: a message that kills its process every time is never dead-lettered by count.
//!   Where a queue gives `x-delivery-count`, that count is used.
//! - **Take.** `basic.consume` with manual acks and a prefetch of `max_in_flight`; a lost
//!   channel or connection is noticed by the consumer's end, and a new consumer is made on a
//!   new connection (RabbitMQ delivers again what the old one held).
//! - **Settle.** `basic.ack`; give back: `basic.nack` with requeue, at once, or after
//!   `nack_delay` (the message stays with this consumer meanwhile); dead-letter: publish a
//!   copy, with the reason, to the exchange `<dead_letter_prefix>` (confirmed), where the
//!   queue `<dead_letter_prefix>.<topic>` keeps it, then ack the original.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Consumer};
use ringbus_link::engine::ImportTask;
use ringbus_link::import::{self, Count, Destination, Inbound, Redeliver, Shared, Stands};
use ringbus_link::names::DEAD_REASON;
use ringbus_link::Codec;

use crate::error::LinkError;
use crate::export::{confirm_channel, publish_confirmed};
use crate::shared::LinkShared;
use crate::stats::add;
use crate::wire::{decode, earlier_deliveries, header, message_id, origin};

/// Declares the durable queue `queue` and binds it to the link's exchange under `name` (a
/// topic), or under `pattern` in AMQP's syntax; declares the dead-letter queue of `name`
/// (the topic or the pattern), bound to the dead-letter exchange under the topic. A
/// pattern's dead-letter queue is not bound: a wildcard binding would also take other
/// imports' dead letters, so its import sends them to the queue itself. Idempotent.
pub(crate) async fn declare(
    link: &LinkShared,
    channel: &Channel,
    queue: &str,
    name: &str,
    pattern: Option<&ringbus::Pattern>,
) -> Result<(), lapin::Error> {
    let binding = pattern.map_or_else(|| name.to_string(), binding);
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.into(), durable, FieldTable::default())
        .await?;
    channel
        .queue_bind(
            queue.into(),
            link.prefix.as_str().into(),
            binding.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let dead = link.dead_letter_queue(name);
    channel
        .queue_declare(dead.as_str().into(), durable, FieldTable::default())
        .await?;
    if pattern.is_some() {
        return Ok(());
    }
    channel
        .queue_bind(
            dead.as_str().into(),
            link.dead_letter_prefix.as_str().into(),
            name.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

/// Starts importing `topic` from the queue of `group`.
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
    start_into(link, topic, None, group, Destination::Topic(local), codec).await
}

/// Starts importing every topic that `pattern` matches from the queue of `group`, each
/// message into the topic its routing key names.
pub(crate) async fn start_pattern<T, C>(
    link: &Arc<LinkShared>,
    pattern: ringbus::Pattern,
    group: &str,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let into = Destination::Named(link.bus.clone());
    start_into(
        link,
        &pattern.to_string(),
        Some(pattern),
        group,
        into,
        codec,
    )
    .await
}

/// AMQP's topic binding for `pattern`: `*` is one word in both; NATS's `>` (one word or
/// more) is `*.#`, as AMQP's `#` alone also matches none.
fn binding(pattern: &ringbus::Pattern) -> String {
    pattern
        .as_str()
        .split('.')
        .map(|token| if token == ">" { "*.#" } else { token })
        .collect::<Vec<_>>()
        .join(".")
}

async fn start_into<T, C>(
    link: &Arc<LinkShared>,
    name: &str,
    pattern: Option<ringbus::Pattern>,
    group: &str,
    into: Destination<T>,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let queue = link.queue(name, group);
    let channel = link.conn.channel().await.map_err(LinkError::connect)?;
    declare(link, &channel, &queue, name, pattern.as_ref())
        .await
        .map_err(|e| LinkError::setup(e.to_string()))?;
    let import = Import {
        link: link.clone(),
        topic: name.to_string(),
        pattern,
        queue,
        publisher: tokio::sync::Mutex::new(None),
        waiting: Arc::new(Mutex::new(BTreeSet::new())),
    };
    // The consumer is made here, so a message published once this returns is delivered.
    let consumer = import
        .consume(&channel)
        .await
        .map_err(|e| LinkError::setup(e.to_string()))?;
    tracing::info!(topic = name, queue = %import.queue, "ringbus-rabbitmq: importing");
    let reader = Reader {
        consumer: Some(consumer),
        generation: 0,
        retry: Duration::from_millis(50),
        counts: Counts::new(link.queues.dedup_window.max(1024)),
    };
    let task = import::spawn(import, reader, into, codec);
    Ok(ImportTask::new(task, "ringbus-rabbitmq"))
}

/// One import: its topic (or pattern), its queue, and a channel for its dead letters.
struct Import {
    link: Arc<LinkShared>,
    /// The topic imported, or the pattern.
    topic: String,
    /// A pattern import's pattern: each message goes to the topic its routing key names.
    pattern: Option<ringbus::Pattern>,
    queue: String,
    /// The confirm channel dead letters go out on, made when first needed.
    publisher: tokio::sync::Mutex<Option<Channel>>,
    /// The deliveries (consumer, tag) given back `Later` whose nack has not been sent yet.
    waiting: Arc<Mutex<BTreeSet<(u64, u64)>>>,
}

/// The set under its mutex: a panic cannot leave a set of numbers inconsistent.
fn lock(waiting: &Mutex<BTreeSet<(u64, u64)>>) -> MutexGuard<'_, BTreeSet<(u64, u64)>> {
    waiting.lock().unwrap_or_else(|e| e.into_inner())
}

/// The consuming side of an import.
struct Reader {
    /// The consumer, made again (on a new channel) once it ends.
    consumer: Option<Consumer>,
    /// How many consumers were made before this one: delivery tags count per channel.
    generation: u64,
    /// The wait after a failed consume, doubled up to 1 s.
    retry: Duration,
    /// The deliveries seen of recent message ids.
    counts: Counts,
}

/// A delivery, with the consumer it came from and which delivery of its message it is.
struct Taken {
    delivery: Delivery,
    generation: u64,
    deliveries: u64,
}

/// How many times this import was given each of the last `capacity` message ids.
struct Counts {
    capacity: usize,
    order: VecDeque<String>,
    seen: HashMap<String, u64>,
}

impl Counts {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            order: VecDeque::new(),
            seen: HashMap::new(),
        }
    }

    /// Which delivery of its message `delivery` is: the queue's own count where it keeps
    /// one; else 1 for a first delivery, and for a redelivery one more than this import saw
    /// (at least 2).
    fn count(&mut self, delivery: &Delivery) -> u64 {
        let earlier = earlier_deliveries(&delivery.properties);
        if earlier > 0 || !delivery.redelivered {
            return earlier + 1;
        }
        let Some(id) = message_id(&delivery.properties) else {
            return 2;
        };
        if let Some(seen) = self.seen.get_mut(id) {
            *seen += 1;
            return *seen;
        }
        self.seen.insert(id.to_string(), 2);
        self.order.push_back(id.to_string());
        if self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        2
    }
}

impl Import {
    /// Sets the prefetch and starts consuming on `channel`; the connection keeps the
    /// consumer until it closes.
    async fn consume(&self, channel: &Channel) -> Result<Consumer, lapin::Error> {
        let prefetch = u16::try_from(self.link.queues.max_in_flight).unwrap_or(u16::MAX);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                format!("{}.{}", self.link.id, self.topic).into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        self.link.conn.keep_consumer(channel, &consumer).await;
        Ok(consumer)
    }

    /// A new consumer on a new channel (after the last one ended), or `None` (counted and
    /// logged) if the connection is not back yet.
    async fn consume_again(&self) -> Option<Consumer> {
        let channel = match self.link.conn.channel().await {
            Ok(channel) => channel,
            Err(e) => {
                tracing::debug!(topic = %self.topic, error = %e, "ringbus-rabbitmq: cannot reconnect yet");
                return None;
            }
        };
        let made = async {
            declare(
                &self.link,
                &channel,
                &self.queue,
                &self.topic,
                self.pattern.as_ref(),
            )
            .await?;
            self.consume(&channel).await
        };
        match made.await {
            Ok(consumer) => Some(consumer),
            Err(e) => {
                tracing::warn!(topic = %self.topic, error = %e, "ringbus-rabbitmq: cannot consume again yet");
                None
            }
        }
    }

    /// Whether a delivery of the same consumer before `tag` waits for its delayed nack.
    fn waiting_before(&self, (generation, tag): (u64, u64)) -> bool {
        lock(&self.waiting)
            .range((generation, 0)..(generation, tag))
            .next()
            .is_some()
    }

    fn delay(&self, when: Redeliver) -> Duration {
        match when {
            Redeliver::Now => Duration::ZERO,
            Redeliver::Later => self.link.queues.nack_delay,
        }
    }
}

impl Import {
    /// The local topic of `taken`: the import's topic, or the one its routing key names if
    /// the import's pattern matches it.
    fn local_topic<'m>(&'m self, taken: &'m Taken) -> Option<&'m str> {
        match &self.pattern {
            None => Some(&self.topic),
            Some(pattern) => routed(pattern, taken),
        }
    }
}

/// The topic `taken`'s routing key names, if `pattern` matches it.
fn routed<'m>(pattern: &ringbus::Pattern, taken: &'m Taken) -> Option<&'m str> {
    let key = taken.delivery.routing_key.as_str();
    pattern.matches(key).then_some(key)
}

impl Inbound for Import {
    type Message = Taken;
    type Key = (u64, u64);
    type Reader = Reader;

    const ENGINE: &'static str = "ringbus-rabbitmq";

    fn shared(&self) -> Shared<'_> {
        Shared {
            topic: &self.topic,
            link_id: &self.link.id,
            held: &self.link.runtime.held,
            stop: &self.link.runtime.stop_imports,
        }
    }

    fn count(&self, what: Count, n: u64) {
        self.link
            .counters
            .of(what)
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    fn max_in_flight(&self) -> usize {
        self.link.queues.max_in_flight
    }

    fn dedup_window(&self) -> usize {
        self.link.queues.dedup_window
    }

    /// The next delivery, and those the consumer has ready after it, up to `room`.
    async fn take(&self, reader: &mut Reader, room: usize) -> Vec<Taken> {
        let consumer = match &mut reader.consumer {
            Some(consumer) => consumer,
            None => match self.consume_again().await {
                Some(consumer) => {
                    reader.generation += 1;
                    reader.retry = Duration::from_millis(50);
                    reader.consumer.insert(consumer)
                }
                None => {
                    tokio::time::sleep(reader.retry).await;
                    reader.retry = (reader.retry * 2).min(Duration::from_secs(1));
                    return Vec::new();
                }
            },
        };
        let (deliveries, stands) = import::take_ready(consumer, room).await;
        if !matches!(stands, Stands::Open) {
            // The channel or the connection is gone: RabbitMQ delivers again what this
            // consumer held; a new one is made at the next take.
            if let Stands::Failed(e) = &stands {
                tracing::warn!(topic = %self.topic, error = %e, "ringbus-rabbitmq: the consumer failed; consuming again");
            }
            add(&self.link.counters.import_errors);
            reader.consumer = None;
            self.link.conn.check().await;
        }
        deliveries
            .into_iter()
            .map(|delivery| Taken {
                deliveries: reader.counts.count(&delivery),
                delivery,
                generation: reader.generation,
            })
            .collect()
    }

    fn origin<'m>(&self, taken: &'m Taken) -> Option<&'m str> {
        origin(&taken.delivery.properties)
    }

    fn message_id<'m>(&self, taken: &'m Taken) -> Option<&'m str> {
        message_id(&taken.delivery.properties)
    }

    fn header<'m>(&self, taken: &'m Taken, name: &str) -> Option<&'m str> {
        header(&taken.delivery.properties, name)
    }

    /// A first delivery's consumer and tag; none for a redelivery, which is never a
    /// duplicate of its own first delivery.
    fn key(&self, taken: &Taken) -> Option<(u64, u64)> {
        (!taken.delivery.redelivered && self.deliveries(taken) == 1)
            .then_some((taken.generation, taken.delivery.delivery_tag))
    }

    fn deliveries(&self, taken: &Taken) -> u64 {
        taken.deliveries
    }

    fn is_last(&self, taken: &Taken) -> bool {
        self.deliveries(taken) >= u64::from(self.link.queues.max_deliver.max(1))
    }

    fn delivered_too_often(&self, taken: &Taken) -> Option<String> {
        let max_deliver = u64::from(self.link.queues.max_deliver.max(1));
        let deliveries = self.deliveries(taken);
        (deliveries > max_deliver).then(|| {
            format!(
                "delivered {deliveries} times, more than max_deliver ({max_deliver}): its \
                 consumers died or stalled while handling it"
            )
        })
    }

    fn topic_of<'m>(&self, taken: &'m Taken) -> Option<&'m str> {
        routed(self.pattern.as_ref()?, taken)
    }

    fn decode<T, C: Codec<T>>(&self, codec: &C, taken: &Taken) -> Result<T, String> {
        let delivery = &taken.delivery;
        let Some(topic) = self.local_topic(taken) else {
            return Err(format!(
                "its routing key {:?} is not a topic of this import",
                taken.delivery.routing_key.as_str()
            ));
        };
        decode(
            codec,
            topic,
            &delivery.properties,
            &delivery.data,
            self.link.max_message_bytes,
        )
        .map_err(|reason| format!("{reason} (queue {})", self.queue))
    }

    /// One `basic.ack` with `multiple` per run of messages from one consumer: the settler
    /// settles in delivery order, so every earlier delivery of that consumer is settled
    /// already (acked, dead-lettered, or nacked), except one given back `Later` whose nack is
    /// still waiting: then each message is acked alone, or the multiple ack would take it.
    async fn ack(&self, taken: &[Taken]) -> bool {
        let mut all = true;
        for run in taken.chunk_by(|a, b| a.generation == b.generation) {
            let Some(last) = run.last() else { continue };
            let tag = (last.generation, last.delivery.delivery_tag);
            let multiple = run.len() > 1 && !self.waiting_before(tag);
            let (acks, options) = if multiple {
                (
                    std::slice::from_ref(last),
                    BasicAckOptions { multiple: true },
                )
            } else {
                (run, BasicAckOptions::default())
            };
            for message in acks {
                if let Err(e) = message.delivery.acker.ack(options).await {
                    add(&self.link.counters.ack_errors);
                    tracing::warn!(topic = %self.topic, error = %e, "ringbus-rabbitmq: an ack failed; the message will be delivered again");
                    all = false;
                }
            }
        }
        all
    }

    async fn give_back(&self, taken: &Taken, when: Redeliver) -> bool {
        let acker = taken.delivery.acker.clone();
        let delay = self.delay(when);
        let requeue = BasicNackOptions {
            requeue: true,
            multiple: false,
        };
        if delay.is_zero() {
            return acker.nack(requeue).await.is_ok();
        }
        // Held by this consumer meanwhile (and kept out of multiple acks: `waiting`); a close
        // (or a lost connection) before the delay passes hands it back to RabbitMQ at once.
        let tag = (taken.generation, taken.delivery.delivery_tag);
        let waiting = self.waiting.clone();
        lock(&waiting).insert(tag);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = acker.nack(requeue).await;
            lock(&waiting).remove(&tag);
        });
        true
    }

    async fn dead_letter(&self, taken: &Taken, reason: &str) -> bool {
        let delivery = &taken.delivery;
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        let one_line: String = reason.chars().filter(|c| !c.is_control()).collect();
        headers.insert(DEAD_REASON.into(), AMQPValue::LongString(one_line.into()));
        let properties = delivery.properties.clone().with_headers(headers);
        let pattern_queue;
        let (exchange, key) = match &self.pattern {
            None => (self.link.dead_letter_prefix.as_str(), self.topic.as_str()),
            // Through the default exchange, straight to the pattern's own queue.
            Some(_) => {
                pattern_queue = self.link.dead_letter_queue(&self.topic);
                ("", pattern_queue.as_str())
            }
        };
        let mut publisher = self.publisher.lock().await;
        let stored = async {
            let channel = match publisher.as_ref() {
                Some(channel) => channel.clone(),
                None => publisher.insert(confirm_channel(&self.link).await?).clone(),
            };
            publish_confirmed(&channel, exchange, key, &delivery.data, properties).await
        };
        match stored.await {
            Ok(true) => self.ack(std::slice::from_ref(taken)).await,
            failed => {
                // A channel that failed is made again; one that carried a refusal (a nack)
                // still works, and stays open with the connection (see `Conn`).
                if failed.is_err() {
                    *publisher = None;
                }
                tracing::error!(topic = %self.topic, result = ?failed, "ringbus-rabbitmq: dead-lettering failed; the message will be delivered again");
                self.give_back(taken, Redeliver::Later).await;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use lapin::message::Delivery;
    use lapin::types::{AMQPValue, FieldTable};
    use lapin::BasicProperties;

    use super::Counts;

    fn delivery(id: &str, redelivered: bool, earlier: Option<i64>) -> Delivery {
        let mut headers = FieldTable::default();
        headers.insert("Ringbus-Id".into(), AMQPValue::LongString(id.into()));
        if let Some(n) = earlier {
            headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(n));
        }
        let mut d = Delivery::mock(1, "x".into(), "t".into(), redelivered, Vec::new());
        d.properties = BasicProperties::default().with_headers(headers);
        d
    }

    #[test]
    fn redeliveries_are_counted_per_id_and_a_queue_count_wins() {
        let mut counts = Counts::new(2);
        assert_eq!(counts.count(&delivery("a", false, None)), 1);
        assert_eq!(counts.count(&delivery("a", true, None)), 2);
        assert_eq!(counts.count(&delivery("a", true, None)), 3);
        assert_eq!(counts.count(&delivery("b", true, None)), 2);
        assert_eq!(counts.count(&delivery("c", true, None)), 2);
        // "a" was the oldest of three ids in a window of two: forgotten, counted from 2.
        assert_eq!(counts.count(&delivery("a", true, None)), 2);
        assert_eq!(counts.count(&delivery("d", true, Some(6))), 7);
    }
}
