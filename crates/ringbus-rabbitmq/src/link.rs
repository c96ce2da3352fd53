//! The link: one RabbitMQ connection that exports chosen local topics to a topic exchange
//! and imports others from queues bound to it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::ExchangeDeclareOptions;
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use ringbus::Bus;
use ringbus_link::engine::{redacted_url, refuse_echo, Runtime};
use ringbus_link::ids::next_link_id;
use ringbus_link::{Codec, Json, LONGEST_WAIT};

use crate::conn::Conn;
use crate::error::{check_name, check_pattern, LinkError};
use crate::options::QueueOptions;
use crate::shared::LinkShared;
use crate::stats::{Counters, LinkCloseReport, LinkStats};
use crate::{export, import};

/// Builds a [`Link`]: where to connect, under which exchange, with which queue settings.
///
/// Its `Debug` output never shows the URL's password.
///
/// ```no_run
/// # async fn demo(bus: &ringbus::Bus) -> Result<(), ringbus_rabbitmq::LinkError> {
/// use ringbus_rabbitmq::{Link, QueueOptions};
/// let mut queues = QueueOptions::default();
/// queues.max_deliver = 3;
/// let link = Link::builder("amqp://guest:guest@127.0.0.1:5672/%2f")
///     .prefix("shop")
///     .queues(queues)
///     .connect(bus)
///     .await?;
/// link.export::<u64>("orders").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a LinkBuilder does nothing until `.connect(&bus).await`"]
pub struct LinkBuilder {
    url: String,
    prefix: String,
    dead_letter_prefix: Option<String>,
    queues: QueueOptions,
    max_message_bytes: usize,
    connection_timeout: Duration,
}

impl LinkBuilder {
    fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: "ringbus".to_string(),
            dead_letter_prefix: None,
            queues: QueueOptions::default(),
            max_message_bytes: 1024 * 1024,
            connection_timeout: Duration::from_secs(5),
        }
    }

    /// The topic exchange topics travel through, and the start of every queue name: topic
    /// `t` goes to the exchange `<prefix>` with routing key `t`. Default: `ringbus`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The exchange dead letters go to (and the start of the dead-letter queues'
    /// names, `<dead_letter_prefix>.<topic>`). Default: `<prefix>-dead`.
    pub fn dead_letter_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.dead_letter_prefix = Some(prefix.into());
        self
    }

    /// Queue, redelivery and dedup settings.
    pub fn queues(mut self, options: QueueOptions) -> Self {
        self.queues = options.clamped();
        self
    }

    /// The largest body accepted from or sent to RabbitMQ. Default: 1 MiB.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// How long connecting may take. Default: 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout.min(LONGEST_WAIT);
        self
    }

    /// Connects and declares the link's two exchanges (durable topic exchanges), checking the
    /// names first: a refused password or an unreachable server is an `Err` here. Once
    /// connected, the link connects again by itself whenever the connection is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops the connection being made.
    pub async fn connect(self, bus: &Bus) -> Result<Link, LinkError> {
        check_name(&self.prefix, "prefix")?;
        let dead_letter_prefix = self
            .dead_letter_prefix
            .clone()
            .unwrap_or_else(|| format!("{}-dead", self.prefix));
        check_name(&dead_letter_prefix, "dead-letter prefix")?;
        if dead_letter_prefix == self.prefix {
            return Err(LinkError::BadName {
                what: "dead-letter prefix",
                name: dead_letter_prefix,
                reason: "it must differ from the prefix",
            });
        }
        check_name(&self.queues.group, "group")?;
        let id = next_link_id();
        let counters = Arc::new(Counters::default());
        let conn = Conn::new(
            self.url.clone(),
            id.clone(),
            self.connection_timeout,
            counters.clone(),
        );
        let channel = conn.channel().await.map_err(LinkError::connect)?;
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        for exchange in [&self.prefix, &dead_letter_prefix] {
            channel
                .exchange_declare(
                    exchange.as_str().into(),
                    ExchangeKind::Topic,
                    durable,
                    FieldTable::default(),
                )
                .await
                .map_err(|e| LinkError::setup(e.to_string()))?;
        }
        let _ = channel.close(200, "declared".into()).await;
        tracing::info!(link = %id, exchange = %self.prefix, "ringbus-rabbitmq link connected");
        Ok(Link {
            inner: Arc::new(LinkShared {
                id,
                bus: bus.clone(),
                conn,
                prefix: self.prefix,
                dead_letter_prefix,
                queues: self.queues,
                max_message_bytes: self.max_message_bytes,
                counters,
                runtime: Runtime::new(),
            }),
        })
    }
}

impl fmt::Debug for LinkBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkBuilder")
            .field("url", &redacted_url(&self.url))
            .field("prefix", &self.prefix)
            .field("dead_letter_prefix", &self.dead_letter_prefix)
            .field("queues", &self.queues)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("connection_timeout", &self.connection_timeout)
            .finish()
    }
}

/// A link between a local [`Bus`] and RabbitMQ: chosen topics go out
/// ([`export`](Self::export)), come in ([`import`](Self::import)), or both
/// ([`link_both`](Self::link_both)).
///
/// The bus stays the router: exports are bus subscribers that publish each message to the
/// topic exchange `<prefix>` with the topic as routing key (publisher confirms); imports
/// consume the durable queue `<prefix>.<group>.<topic>` and publish what arrives into
/// the bus, through its normal backpressure. An import acknowledges a message only once
/// every local subscriber has handled it.
///
/// Close it with [`close`](Self::close): imports stop consuming, what they hold is settled,
/// exports are flushed and confirmed, then the connection closes. Dropping a link without
/// closing it stops its imports; its exports stay subscribed until the bus closes.
pub struct Link {
    pub(crate) inner: Arc<LinkShared>,
}

impl Link {
    /// Starts building a link to the server at `url`:
    /// `amqp://[user:password@]host[:port][/vhost]` (the default vhost is `/`, written
    /// `%2f`).
    pub fn builder(url: impl Into<String>) -> LinkBuilder {
        LinkBuilder::new(url)
    }

    /// This link's id (the origin header of its exports).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The topic exchange the exports go to.
    pub fn exchange(&self) -> &str {
        &self.inner.prefix
    }

    /// The topic exchange dead letters go to.
    pub fn dead_letter_exchange(&self) -> &str {
        &self.inner.dead_letter_prefix
    }

    /// The queue the group `group` reads `topic` from, or why it cannot be one.
    pub fn queue(&self, topic: &str, group: &str) -> Result<String, LinkError> {
        check_name(topic, "topic")?;
        check_name(group, "group")?;
        Ok(self.inner.queue(topic, group))
    }

    /// The queue that keeps the dead letters of `topic`, or why it cannot be one.
    pub fn dead_letter_queue(&self, topic: &str) -> Result<String, LinkError> {
        check_name(topic, "topic")?;
        Ok(self.inner.dead_letter_queue(topic))
    }

    /// A snapshot of the counters and the connection state.
    pub fn stats(&self) -> LinkStats {
        self.inner.counters.snapshot()
    }

    /// Publishes every message published to local topic `topic` to the exchange, routing key
    /// `topic`, JSON-encoded.
    ///
    /// The topic is checked now. Queued messages are published in parts of at most
    /// [`QueueOptions::publish_window`], each part's confirms awaited before the next (an
    /// export keeps the topic's order), and sent again after a lost connection, for up to
    /// [`QueueOptions::publish_retry_for`]; a message whose encoding fails (or that is too
    /// large) is logged without its body, counted, and not sent. A message routed to no queue
    /// (no import bound yet) is dropped by RabbitMQ.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it does not wait; dropping it leaves nothing linked.
    pub async fn export<T>(&self, topic: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.export_with(topic, Json).await
    }

    /// As [`export`](Self::export), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`export`](Self::export).
    pub async fn export_with<T, C>(&self, topic: &str, codec: C) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        check_name(topic, "topic")?;
        let start = async { export::start::<T, C>(&self.inner, topic, codec) };
        self.inner.runtime.add_export(topic, start).await
    }

    /// Sends every message of every local topic that `pattern` matches, present and future,
    /// to the topic exchange, JSON-encoded, each under its topic's routing key: as
    /// [`export`](Self::export) sends one topic, in its order, from the moment this returns
    /// (or the moment the topic is made). A pattern is NATS-style (see [`ringbus::Pattern`]).
    /// Each of the pattern's topics has a confirm channel of its own, a batch at a time; a
    /// quarter of the channels the connection allows (511 of RabbitMQ's default 2,047) stay
    /// open for the most recently used topics. When that many are open, a new topic's first
    /// batch first closes the least recently used half of those not in use (together, waiting
    /// at most 5 s), and a topic used less lately opens its channel again (two more round
    /// trips).
    ///
    /// # Errors
    ///
    /// [`LinkError::BadName`] for a malformed pattern (or one with AMQP's `#`);
    /// [`LinkError::AlreadyLinked`] if this link exports a topic the pattern matches, by name
    /// or by another pattern; [`LinkError::Bus`] if a matching topic carries another type
    /// (one made later with another type is refused at its making).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it leaves nothing linked.
    pub async fn export_pattern<T>(&self, pattern: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.export_pattern_with(pattern, Json).await
    }

    /// As [`export_pattern`](Self::export_pattern), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`export_pattern`](Self::export_pattern).
    pub async fn export_pattern_with<T, C>(&self, pattern: &str, codec: C) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        check_pattern(pattern)?;
        let start = async { export::start_pattern::<T, C>(&self.inner, pattern, codec) };
        self.inner.runtime.add_export(pattern, start).await
    }

    /// Publishes every message of the queue `<prefix>.<group>.<topic>` into the local topic,
    /// JSON-decoded, with the group [`QueueOptions::group`].
    ///
    /// Instances that import a topic with the same group share its messages (each goes to one
    /// of them); with their own groups, each sees every message
    /// ([`import_shared`](Self::import_shared) names the group per topic). The queue is made
    /// (and bound) by the first import: messages exported before that are not kept.
    ///
    /// Each message is acknowledged once every local subscriber has handled it. A handler
    /// that gives up on it (after its own retry policy) has it dead-lettered at once; a
    /// message a subscriber never got to handle is given back, to be delivered again after
    /// [`QueueOptions::nack_delay`]; after [`QueueOptions::max_deliver`] deliveries it is
    /// dead-lettered. Register the local handlers first: a message handled by no subscriber
    /// is acknowledged at once.
    ///
    /// At least once: a message handled but not acknowledged (the process died in between, or
    /// the connection was lost) is handled again, so handlers must be idempotent. A second
    /// copy of a message id this import handed to the bus recently (an export re-sent after a
    /// lost confirm) is dropped ([`QueueOptions::dedup_window`]), in this process only.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the queue may exist on the server with no consumer
    /// (it keeps the messages for a later import).
    pub async fn import<T>(&self, topic: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        let group = self.inner.queues.group.clone();
        self.import_shared_with(topic, &group, Json).await
    }

    /// As [`import`](Self::import), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_with<T, C>(&self, topic: &str, codec: C) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        let group = self.inner.queues.group.clone();
        self.import_shared_with(topic, &group, codec).await
    }

    /// Imports `topic` from the queue of the group `group`: instances in one group share the
    /// topic's messages (competing consumers), each group sees every message.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_shared<T>(&self, topic: &str, group: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.import_shared_with(topic, group, Json).await
    }

    /// As [`import_shared`](Self::import_shared), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_shared_with<T, C>(
        &self,
        topic: &str,
        group: &str,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        check_name(topic, "topic")?;
        self.check_queue_names(topic, "topic", group)?;
        let start = import::start::<T, C>(&self.inner, topic, group, codec);
        self.inner.runtime.add_import(topic, start).await
    }

    /// Imports every topic that `pattern` matches, present and future, into the local topic
    /// of the same name: NATS-style tokens split on `.`, `*` for one token, `>` for every
    /// token left (see [`ringbus::Pattern`]). The queue `<prefix>.<group>.<pattern>` (the
    /// link's [`QueueOptions::group`]) is bound to the topic exchange with the pattern in
    /// AMQP's syntax (`>` is `*.#`), so the broker routes every matching export to it; its
    /// dead letters go to `<dead_letter_prefix>.<pattern>`.
    ///
    /// Every promise of [`import`](Self::import) holds, per message; messages keep their
    /// order within a topic, not across topics. A local topic of another type under the
    /// pattern refuses its messages: each is dead-lettered at once (counted in
    /// [`LinkStats::bad_input`](crate::LinkStats::bad_input)), the other topics unaffected.
    ///
    /// # Errors
    ///
    /// [`LinkError::BadName`] for a malformed pattern (or one with AMQP's `#`, or a queue name
    /// over 255 bytes); [`LinkError::AlreadyLinked`] if this link imports the pattern already;
    /// [`LinkError::Connect`] / [`LinkError::Setup`] if the queue could not be made.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    ///
    /// ```no_run
    /// # async fn demo(link: ringbus_rabbitmq::Link) -> Result<(), ringbus_rabbitmq::LinkError> {
    /// use ringbus_rabbitmq::Envelope;
    ///
    /// // orders.eu.created, orders.us.paid, ...: each into its own local topic.
    /// link.import_pattern::<Envelope<String>>("orders.>").await?;
    /// # Ok(()) }
    /// ```
    pub async fn import_pattern<T>(&self, pattern: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        let group = self.inner.queues.group.clone();
        self.import_pattern_shared_with(pattern, &group, Json).await
    }

    /// As [`import_pattern`](Self::import_pattern), from the queue of the group `group`
    /// (instances of one group share the messages, as
    /// [`import_shared`](Self::import_shared)), with the codec `codec`.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_pattern_shared_with<T, C>(
        &self,
        pattern: &str,
        group: &str,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        let parsed = check_pattern(pattern)?;
        self.check_queue_names(pattern, "topic pattern", group)?;
        let start = import::start_pattern::<T, C>(&self.inner, parsed, group, codec);
        self.inner.runtime.add_import(pattern, start).await
    }

    /// Checks `group`, and that the queue names made for `name` (`what`: a topic or a
    /// pattern) fit AMQP's 255 bytes.
    fn check_queue_names(
        &self,
        name: &str,
        what: &'static str,
        group: &str,
    ) -> Result<(), LinkError> {
        check_name(group, "group")?;
        for queue in [
            self.inner.queue(name, group),
            self.inner.dead_letter_queue(name),
        ] {
            if queue.len() > 255 {
                return Err(LinkError::BadName {
                    what,
                    name: name.escape_debug().to_string(),
                    reason: "a queue name it makes would be longer than AMQP's 255 bytes",
                });
            }
        }
        Ok(())
    }

    /// Links `topic` both ways: local messages go out, remote ones come in, and imported
    /// messages are never exported again (nor are this link's own exports imported). The
    /// message type must record that it was imported ([`Envelope`](crate::Envelope) does),
    /// or this is [`LinkError::EchoLoop`]. Give each process its own group, so each sees the
    /// others' messages.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn link_both<T>(&self, topic: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.link_both_with(topic, Json).await
    }

    /// As [`link_both`](Self::link_both), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn link_both_with<T, C>(&self, topic: &str, codec: C) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T> + Clone,
    {
        refuse_echo(topic, &codec)?;
        self.export_with(topic, codec.clone()).await?;
        self.import_with(topic, codec).await
    }

    /// Closes the link, in order, within `timeout`:
    /// 1. stop consuming: each import lets the local handlers finish what it handed them
    ///    and settles it (acknowledged, given back, or dead-lettered);
    /// 2. flush the exports: every message published locally before this call is published
    ///    to RabbitMQ and confirmed;
    /// 3. close the connection (RabbitMQ delivers again whatever it still held); the
    ///    channels close with it.
    ///
    /// The local bus stays open: close it afterwards. What the deadline cut, or a close the
    /// server did not answer because the connection failed, is in the report.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the link is left half closed (imports stopped,
    /// exports possibly unsubscribed). Bound it with `timeout` instead.
    pub async fn close(&self, timeout: Duration) -> LinkCloseReport {
        let link = &self.inner;
        let close_connection = |deadline, cut_at: Option<&'static str>| async move {
            let closed = tokio::time::timeout_at(deadline, link.conn.close()).await;
            cut_at.or((closed != Ok(true)).then_some("closing the connection"))
        };
        let (counters, name) = (&link.counters, ("ringbus-rabbitmq", link.id.as_str()));
        let stats = || counters.snapshot();
        let runtime = &link.runtime;
        runtime
            .close(name, timeout, close_connection, &counters.state, stats)
            .await
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.inner.runtime.stop_imports.cancel();
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("id", &self.inner.id)
            .field("exchange", &self.inner.prefix)
            .field("state", &self.inner.counters.snapshot().state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_show() {
        let builder = super::Link::builder("amqp://u:hunter2@h:1/%2f");
        assert!(!format!("{builder:?}").contains("hunter2"));
    }
}
