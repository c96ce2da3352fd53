//! Imports: a task per imported topic or pattern publishes what arrives from NATS into the
//! local bus.
//!
//! Core: a subscription (no echo on the connection), or with [`Sharing::Shared`] a queue
//! subscription in the group (the server hands each message to one member); each message is
//! decoded and published with the bus's backpressure, while the client buffers up to
//! `import_buffer` messages.
//! JetStream: a durable pull consumer with explicit acks (`<durable>_<topic>`, or
//! `<group>_<topic>` when shared: instances pulling from one consumer compete for its
//! messages; `<durable>_pattern_<pattern>` for a pattern, its wildcards spelled `any` and
//! `rest`, each message going to the local topic its subject names); each message is
//! published with a delivery receipt and settled once every local subscriber has handled it
//! (`ringbus_link::engine::Settlement`): acked; dead-lettered and terminated when a handler
//! gave up on it (after its own retries), so the handlers that succeeded never see it again;
//! nacked with a delay when a subscriber ended before handling it, or the bus refused it
//! (dead-lettered at the last delivery the consumer allows).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::StreamExt;
use ringbus::{Context, Topic};
use ringbus_link::engine::ImportTask;
use ringbus_link::import::{self, Count, Inbound, Redeliver, Shared, Stands};

use crate::codec::{Codec, ERROR_HEADER, ID_HEADER, NATS_MSG_ID};
use crate::error::LinkError;
use crate::options::{Mode, Sharing};
use crate::shared::LinkShared;
use crate::stats::add;
use crate::wire::{decode, known, origin, BadInput};

/// Decodes a message from NATS for local topic `topic`; a refused one is logged (never with
/// its body) and counted.
pub(crate) fn take<T, C: Codec<T>>(
    link: &LinkShared,
    codec: &C,
    topic: &str,
    subject: &str,
    message: &async_nats::Message,
) -> Result<T, BadInput> {
    let decoded = decode(
        codec,
        topic,
        message.headers.as_ref(),
        &message.payload,
        link.max_message_bytes,
    );
    if let Err(reason) = &decoded {
        add(&link.counters.bad_input);
        tracing::warn!(
            topic = %topic,
            subject = %subject,
            reason = %reason,
            "ringbus-nats: refused a message from NATS"
        );
    }
    decoded
}

/// Starts importing `topic`.
pub(crate) async fn start<T, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    subject: String,
    mode: Mode,
    sharing: &Sharing,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let local = link.bus.topic::<T>(topic)?;
    let task = match mode {
        Mode::Core => {
            let subscriber = core_subscribe(link, &subject, sharing).await?;
            tokio::spawn(core_loop(
                link.clone(),
                Destination::Topic(local),
                codec,
                subscriber,
            ))
        }
        Mode::JetStream => {
            let owner = sharing.group().unwrap_or(&link.js.durable);
            let durable = crate::subject::durable_name(&[owner, topic]);
            let (inbound, reader) = jetstream_import(link, topic, subject, durable, None).await?;
            import::spawn(inbound, reader, import::Destination::Topic(local), codec)
        }
    };
    tracing::info!(topic = %topic, ?mode, group = ?sharing.group(), "ringbus-nats: importing");
    Ok(ImportTask::new(task, "ringbus-nats"))
}

/// The durable consumer of a JetStream import of `name` (a topic, or with `pattern_prefix`
/// a pattern) reading `subject`, made if missing, and the import that reads it.
async fn jetstream_import(
    link: &Arc<LinkShared>,
    name: &str,
    subject: String,
    durable: String,
    pattern_prefix: Option<usize>,
) -> Result<(JetStreamImport, Pulls), LinkError> {
    let config = pull::Config {
        durable_name: Some(durable.clone()),
        filter_subject: subject.clone(),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: link.js.ack_wait,
        max_deliver: i64::from(link.js.max_deliver.max(1)),
        max_ack_pending: link.js.max_in_flight.max(1) as i64,
        ..Default::default()
    };
    let change = link.stream(&subject).await?;
    let consumer = match durable_consumer(&change.stream, name, &config).await {
        Ok(consumer) => consumer,
        Err(e) => {
            // A refused import leaves the stream storing what it stored before.
            change.undo().await;
            return Err(e);
        }
    };
    drop(change);
    let allowed = deliveries_allowed(&consumer, &config);
    let inbound = JetStreamImport {
        link: link.clone(),
        topic: name.to_string(),
        allowed,
        pattern_prefix,
    };
    let reader = Pulls {
        consumer,
        messages: None,
        retry: Duration::from_millis(100),
    };
    Ok((inbound, reader))
}

/// The durable consumer `config` names, made if missing; a setup error if one of that name
/// reads another subject.
async fn durable_consumer(
    stream: &jetstream::stream::Stream,
    name: &str,
    config: &pull::Config,
) -> Result<jetstream::consumer::Consumer<pull::Config>, LinkError> {
    let (durable, subject) = (
        config.durable_name.as_deref().unwrap_or_default(),
        &config.filter_subject,
    );
    let consumer: jetstream::consumer::Consumer<pull::Config> = stream
        .get_or_create_consumer(durable, config.clone())
        .await
        .map_err(|e| LinkError::setup(e.to_string()))?;
    // The name keeps only letters, digits and '-' of the topic or pattern, so two can map to
    // one consumer ("orders.eu" and "orders_eu"): one that already reads another subject is
    // not ours, and reading it would take the other's messages (and leave ours unread).
    let reads = &consumer.cached_info().config.filter_subject;
    if reads != subject {
        return Err(LinkError::setup(format!(
            "the durable consumer \"{durable}\" for \"{name}\" already reads \"{reads}\", \
             not \"{subject}\": two topics or patterns map to that name (it keeps only \
             letters, digits and '-'); rename one, or import it with another durable name \
             or group"
        )));
    }
    Ok(consumer)
}

/// The deliveries `consumer` allows a message, which the import dead-letters on the last
/// of. A durable consumer that exists keeps its settings: it may be shared with other
/// processes (a group, or one durable name), and the server refuses some changes. Where its
/// `ack_wait`, `max_deliver` or `max_ack_pending` differ from this link's options (`config`),
/// the link follows the consumer's, and says so.
fn deliveries_allowed(
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    config: &pull::Config,
) -> i64 {
    let had = &consumer.cached_info().config;
    let kept = (had.ack_wait, had.max_deliver, had.max_ack_pending);
    let asked = (config.ack_wait, config.max_deliver, config.max_ack_pending);
    if kept != asked {
        tracing::warn!(
            consumer = ?config.durable_name,
            ?kept,
            ?asked,
            "ringbus-nats: the durable consumer exists with another ack_wait, max_deliver or \
             max_ack_pending; it keeps them, and this link dead-letters on the last delivery \
             it allows (delete the consumer, or use another durable name, to apply the \
             link's)"
        );
    }
    had.max_deliver
}

/// Subscribes to `subject` (in the queue group, when shared) and waits until the server
/// knows the subscription: a message sent right after the import returns is delivered.
pub(crate) async fn core_subscribe(
    link: &LinkShared,
    subject: &str,
    sharing: &Sharing,
) -> Result<async_nats::Subscriber, LinkError> {
    let subscribed = match sharing {
        Sharing::FanOut => link.client.subscribe(subject.to_string()).await,
        Sharing::Shared(group) => {
            link.client
                .queue_subscribe(subject.to_string(), group.clone())
                .await
        }
    };
    let subscriber = subscribed.map_err(|e| LinkError::setup(e.to_string()))?;
    link.round_trip()
        .await
        .map_err(|e| LinkError::setup(e.to_string()))?;
    Ok(subscriber)
}

/// Starts importing every subject matching `subject` (the prefix and a topic pattern) into
/// the local topic named by the subject less `prefix.`.
pub(crate) async fn start_pattern<T, C>(
    link: &Arc<LinkShared>,
    pattern: &str,
    subject: String,
    mode: Mode,
    sharing: &Sharing,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    let prefix_len = subject.len() - pattern.len();
    let task = match mode {
        Mode::Core => {
            let subscriber = core_subscribe(link, &subject, sharing).await?;
            tokio::spawn(core_loop(
                link.clone(),
                Destination::Named { prefix_len },
                codec,
                subscriber,
            ))
        }
        Mode::JetStream => {
            let owner = sharing.group().unwrap_or(&link.js.durable);
            // Wildcards are spelled out: "orders.*" and "orders.>" need consumers of their own.
            let spelled = pattern.replace('*', "any").replace('>', "rest");
            let durable = crate::subject::durable_name(&[owner, "pattern", &spelled]);
            let (inbound, reader) =
                jetstream_import(link, pattern, subject, durable, Some(prefix_len)).await?;
            let into = import::Destination::Named(link.bus.clone());
            import::spawn(inbound, reader, into, codec)
        }
    };
    tracing::info!(pattern = %pattern, ?mode, group = ?sharing.group(), "ringbus-nats: importing a pattern");
    Ok(ImportTask::new(task, "ringbus-nats"))
}

/// Where a core import publishes what arrives.
enum Destination<T> {
    /// Its one topic.
    Topic(Topic<T>),
    /// A pattern import: the topic each message's subject names, past the prefix's
    /// `prefix_len` bytes (the server delivers only subjects `<prefix>.<topic>` that match).
    Named { prefix_len: usize },
}

/// A core import's loop: decode each message and publish it with the bus's backpressure. A
/// topic's import stops when the bus refuses a message; a pattern import stops only when the
/// bus closes, a refused message (a topic of another type) costing that message alone.
async fn core_loop<T, C>(
    link: Arc<LinkShared>,
    into: Destination<T>,
    codec: C,
    mut subscriber: async_nats::Subscriber,
) where
    T: Send + Sync + 'static,
    C: Codec<T>,
{
    loop {
        let message = tokio::select! {
            biased;
            _ = link.runtime.stop_imports.cancelled() => break,
            m = subscriber.next() => match m {
                Some(m) => m,
                None => break,
            },
        };
        let subject = message.subject.as_str();
        let topic = match &into {
            Destination::Topic(local) => local.name(),
            Destination::Named { prefix_len } => subject.get(*prefix_len..).unwrap_or_default(),
        };
        let Ok(msg) = take::<T, C>(&link, &codec, topic, subject, &message) else {
            continue;
        };
        // Not cancelled by the close: a message taken from NATS is handed over.
        let ctx = crate::otel::context(topic, subject, message.headers.as_ref());
        let sent = match &into {
            Destination::Topic(local) => local.publish_with(&ctx, msg).await,
            Destination::Named { .. } => link.bus.publish_with(&ctx, topic, msg).await,
        };
        match sent {
            Ok(()) => add(&link.counters.imported),
            Err(e)
                if matches!(into, Destination::Named { .. })
                    && !matches!(e, ringbus::PublishError::Closed(_)) =>
            {
                add(&link.counters.bad_input);
                tracing::warn!(
                    topic = %topic,
                    error = %e,
                    "ringbus-nats: the local bus refused an import; the pattern import goes on"
                );
            }
            Err(e) => {
                tracing::warn!(
                    topic = %topic,
                    error = %e,
                    "ringbus-nats: the local bus refused an import; stopping this import"
                );
                break;
            }
        }
    }
    if let Err(e) = subscriber.unsubscribe().await {
        tracing::debug!(error = %e, "ringbus-nats: unsubscribe failed");
    }
}

/// A JetStream import of one topic or pattern: the durable consumer's messages, settled as
/// `ringbus_link::import` says.
struct JetStreamImport {
    link: Arc<LinkShared>,
    /// The topic, or the pattern, imported.
    topic: String,
    /// The deliveries the consumer allows (see `deliveries_allowed`); below 1, any number.
    allowed: i64,
    /// A pattern import: each message's local topic is its subject past these bytes (the
    /// prefix and its dot).
    pattern_prefix: Option<usize>,
}

impl JetStreamImport {
    /// The local topic of `message`: the one its subject names, or the import's own.
    fn local_topic<'m>(&'m self, message: &'m jetstream::Message) -> &'m str {
        self.topic_of(message).unwrap_or(&self.topic)
    }
}

/// The pulling side of a JetStream import: the consumer and its current stream of pulls.
struct Pulls {
    consumer: jetstream::consumer::Consumer<pull::Config>,
    /// Made on the first take, and anew after a pull error or its end.
    messages: Option<pull::Stream>,
    /// The wait after a failed pull, doubled up to 2 s.
    retry: Duration,
}

impl Inbound for JetStreamImport {
    type Message = jetstream::Message;
    /// Unused: the stream drops a second message with one message id itself (its duplicate
    /// window), so the import's window is off.
    type Key = u64;
    type Reader = Pulls;

    const ENGINE: &'static str = "ringbus-nats";

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
            // The import's window is off (`dedup_window` 0): never counted.
            Count::Duplicates => return,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn max_in_flight(&self) -> usize {
        self.link.js.max_in_flight
    }

    fn dedup_window(&self) -> usize {
        0
    }

    /// The next message of the stream of pulls, and those the client has ready after it, up
    /// to `room`.
    async fn take(&self, pulls: &mut Pulls, room: usize) -> Vec<jetstream::Message> {
        let messages = match &mut pulls.messages {
            Some(messages) => messages,
            None => {
                let made = pulls
                    .consumer
                    .stream()
                    .max_messages_per_batch(self.link.js.pull_batch.max(1))
                    .heartbeat(Duration::from_secs(5))
                    .expires(Duration::from_secs(30))
                    .messages()
                    .await;
                match made {
                    Ok(messages) => pulls.messages.insert(messages),
                    Err(e) => {
                        add(&self.link.counters.import_errors);
                        tracing::warn!(topic = %self.topic, error = %e, "ringbus-nats: JetStream pull failed; retrying");
                        tokio::time::sleep(pulls.retry).await;
                        pulls.retry = (pulls.retry * 2).min(Duration::from_secs(2));
                        return Vec::new();
                    }
                }
            }
        };
        let (taken, stands) = import::take_ready(messages, room).await;
        if !taken.is_empty() {
            pulls.retry = Duration::from_millis(100);
        }
        match stands {
            Stands::Open => {}
            // A missed heartbeat or a broken pull: start a new stream of pulls (the durable
            // consumer keeps the place; anything the old stream had buffered is delivered
            // again after the ack wait).
            Stands::Failed(e) => {
                add(&self.link.counters.import_errors);
                tracing::warn!(topic = %self.topic, error = %e, "ringbus-nats: JetStream pull error; pulling anew");
                pulls.messages = None;
            }
            // The stream of pulls ended (for instance the consumer was recreated): start a
            // new one.
            Stands::Ended => pulls.messages = None,
        }
        taken
    }

    fn origin<'m>(&self, message: &'m jetstream::Message) -> Option<&'m str> {
        origin(message.headers.as_ref())
    }

    fn message_id<'m>(&self, message: &'m jetstream::Message) -> Option<&'m str> {
        message
            .headers
            .as_ref()
            .and_then(|h| known(h, ID_HEADER))
            .map(|v| v.as_str())
    }

    fn key(&self, _message: &jetstream::Message) -> Option<u64> {
        None
    }

    fn deliveries(&self, message: &jetstream::Message) -> u64 {
        message
            .info()
            .map_or(1, |i| u64::try_from(i.delivered).unwrap_or(1))
    }

    /// The last delivery the consumer allows: the server would not deliver it again.
    fn is_last(&self, message: &jetstream::Message) -> bool {
        let delivered = i64::try_from(self.deliveries(message)).unwrap_or(i64::MAX);
        self.allowed > 0 && delivered >= self.allowed
    }

    fn topic_of<'m>(&self, message: &'m jetstream::Message) -> Option<&'m str> {
        self.pattern_prefix.and_then(|n| message.subject.get(n..))
    }

    fn decode<T, C: Codec<T>>(&self, codec: &C, message: &jetstream::Message) -> Result<T, String> {
        decode(
            codec,
            self.local_topic(message),
            message.headers.as_ref(),
            &message.payload,
            self.link.max_message_bytes,
        )
        .map_err(|reason| format!("{reason} (subject {})", message.subject))
    }

    fn context(&self, message: &jetstream::Message) -> Context {
        crate::otel::context(
            self.local_topic(message),
            &message.subject,
            message.headers.as_ref(),
        )
    }

    async fn ack(&self, messages: &[jetstream::Message]) -> bool {
        let mut all = true;
        for message in messages {
            all &= settle(&self.link, message, AckKind::Ack).await;
        }
        all
    }

    async fn give_back(&self, message: &jetstream::Message, when: Redeliver) -> bool {
        let delay = match when {
            Redeliver::Now => None,
            Redeliver::Later => Some(self.link.js.nack_delay),
        };
        settle(&self.link, message, AckKind::Nak(delay)).await
    }

    async fn dead_letter(&self, message: &jetstream::Message, reason: &str) -> bool {
        dead_letter(&self.link, self.local_topic(message), message, reason).await
    }
}

/// Sends an ack of `kind`; false (logged and counted) if it could not be sent.
async fn settle(link: &LinkShared, message: &jetstream::Message, kind: AckKind) -> bool {
    match message.ack_with(kind).await {
        Ok(()) => true,
        Err(e) => {
            add(&link.counters.ack_errors);
            tracing::warn!(error = %e, "ringbus-nats: could not settle a JetStream message");
            false
        }
    }
}

/// Copies `message` to the dead-letter subject of `topic` (with the reason as a header) and
/// terminates it. False if the copy was not stored.
async fn dead_letter(
    link: &LinkShared,
    topic: &str,
    message: &jetstream::Message,
    reason: &str,
) -> bool {
    let subject = match crate::subject::subject(&link.dead_letter_prefix, topic) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "ringbus-nats: no dead-letter subject");
            settle(link, message, AckKind::Term).await;
            return false;
        }
    };
    let mut headers = message.headers.clone().unwrap_or_default();
    // The copy is a message of its own: the original's dedup id would make the stream drop it.
    if let Some(id) = known(&headers, NATS_MSG_ID).map(|v| v.to_string()) {
        if let Ok(v) = format!("{id}.dead").parse::<async_nats::HeaderValue>() {
            headers.insert(NATS_MSG_ID, v);
        }
    }
    let one_line: String = reason.chars().filter(|c| !c.is_control()).collect();
    if let Ok(v) = one_line.parse::<async_nats::HeaderValue>() {
        headers.insert(ERROR_HEADER, v);
    }
    let stored = match link
        .jetstream
        .publish_with_headers(subject.clone(), headers, message.payload.clone())
        .await
    {
        Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match stored {
        Ok(()) => {
            settle(link, message, AckKind::Term).await;
            true
        }
        Err(e) => {
            // Not stored: leave it to the server's redelivery rather than lose it.
            tracing::error!(topic, %subject, error = %e, "ringbus-nats: dead-lettering failed; the message will be delivered again");
            settle(link, message, AckKind::Nak(Some(link.js.nack_delay))).await;
            false
        }
    }
}
