//! The link: one Redis server that exports chosen local topics to streams and imports others
//! through consumer groups.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Client;
use ringbus::Bus;
use ringbus_link::engine::{redacted_url, refuse_echo, Runtime};
use ringbus_link::ids::next_link_id;
use ringbus_link::{Codec, Json, LONGEST_WAIT};

use crate::conn::Conn;
use crate::error::{check_name, LinkError};
use crate::options::StreamOptions;
use crate::shared::LinkShared;
use crate::stats::{Counters, LinkCloseReport, LinkStats};
use crate::{export, import};

/// Builds a [`Link`]: where to connect, under which key prefix, with which stream settings.
///
/// Its `Debug` output never shows the URL's password.
///
/// ```no_run
/// # async fn demo(bus: &ringbus::Bus) -> Result<(), ringbus_redis::LinkError> {
/// use ringbus_redis::{Link, StreamOptions};
/// let link = Link::builder("redis://:s3cret@127.0.0.1:6379")
///     .prefix("shop")
///     .streams(StreamOptions { max_deliver: 3, ..StreamOptions::default() })
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
    streams: StreamOptions,
    max_message_bytes: usize,
    connection_timeout: Duration,
    response_timeout: Duration,
    /// PEM: the certificate authority a `rediss://` server's certificate must chain to.
    #[cfg(feature = "tls")]
    tls_root: Option<Vec<u8>>,
}

impl LinkBuilder {
    fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: "ringbus".to_string(),
            dead_letter_prefix: None,
            streams: StreamOptions::default(),
            max_message_bytes: 1024 * 1024,
            connection_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            #[cfg(feature = "tls")]
            tls_root: None,
        }
    }

    /// With a `rediss://` URL: trust the certificate authority in `pem` (PEM text) instead
    /// of the system's trust store, for a server whose certificate a private CA signed. The
    /// server's certificate is still verified, name included.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// The `redis` client for the URL (and the root certificate, if any).
    fn client(&self) -> Result<Client, LinkError> {
        #[cfg(feature = "tls")]
        if let Some(root) = &self.tls_root {
            let certificates = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root.clone()),
            };
            return Client::build_with_tls(self.url.as_str(), certificates)
                .map_err(LinkError::connect);
        }
        Client::open(self.url.as_str()).map_err(LinkError::connect)
    }

    /// The key prefix: topic `t` travels in the stream `<prefix>:t`. Default: `ringbus`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where dead letters go: the stream `<dead_letter_prefix>:<topic>`. Default:
    /// `<prefix>-dead`.
    pub fn dead_letter_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.dead_letter_prefix = Some(prefix.into());
        self
    }

    /// Stream and consumer-group settings.
    pub fn streams(mut self, options: StreamOptions) -> Self {
        self.streams = options.clamped();
        self
    }

    /// The largest body accepted from or sent to Redis. Default: 1 MiB.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// How long connecting may take. Default: 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout.min(LONGEST_WAIT);
        self
    }

    /// How long a command may wait for its answer (a blocking read: past its `BLOCK`)
    /// before the connection is taken for lost and made anew. Default: 5 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout.min(LONGEST_WAIT);
        self
    }

    /// Connects (a `PING`, so a refused password or an unreachable server is an `Err` here),
    /// checking the prefixes first. Once connected, the link reconnects by itself whenever a
    /// connection drops.
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
                reason: "it must differ from the topic prefix",
            });
        }
        check_name(&self.streams.group, "group")?;
        if let Some(consumer) = &self.streams.consumer {
            check_name(consumer, "consumer")?;
        }
        let client = self.client()?;
        let counters = Arc::new(Counters::default());
        let commands = Conn::new(
            client.clone(),
            self.connection_timeout,
            Some(self.response_timeout),
            counters.clone(),
            "commands".to_string(),
        );
        commands
            .query::<()>(&redis::cmd("PING"))
            .await
            .map_err(LinkError::connect)?;
        let id = next_link_id();
        let consumer = self.streams.consumer.clone().unwrap_or_else(|| id.clone());
        tracing::info!(link = %id, prefix = %self.prefix, "ringbus-redis link connected");
        Ok(Link {
            inner: Arc::new(LinkShared {
                id,
                consumer,
                bus: bus.clone(),
                client,
                commands,
                prefix: self.prefix,
                dead_letter_prefix,
                streams: self.streams,
                max_message_bytes: self.max_message_bytes,
                connection_timeout: self.connection_timeout,
                response_timeout: self.response_timeout,
                counters,
                runtime: Runtime::new(),
            }),
        })
    }
}

impl fmt::Debug for LinkBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("LinkBuilder");
        d.field("url", &redacted_url(&self.url))
            .field("prefix", &self.prefix)
            .field("dead_letter_prefix", &self.dead_letter_prefix)
            .field("streams", &self.streams)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout);
        #[cfg(feature = "tls")]
        d.field(
            "tls_root_certificate",
            &self
                .tls_root
                .as_ref()
                .map(|pem| format!("{} bytes", pem.len())),
        );
        d.finish()
    }
}

/// A link between a local [`Bus`] and Redis Streams: chosen topics go out
/// ([`export`](Self::export)), come in ([`import`](Self::import)), or both
/// ([`link_both`](Self::link_both)).
///
/// The bus stays the router: exports are bus subscribers that add each message to the
/// topic's stream (`XADD <prefix>:<topic>`); imports read the stream through a consumer group
/// (`XREADGROUP`) and publish what arrives into the bus, through its normal backpressure, so
/// the local subscribers handle it like any other message. An import acknowledges a message
/// (`XACK`) only once every local subscriber has handled it.
///
/// Close it with [`close`](Self::close): imports stop reading, what they hold is settled,
/// exports are flushed. Dropping a link without closing it stops its imports (what they held
/// is claimed again after [`StreamOptions::claim_idle`]); its exports stay subscribed until
/// the bus closes.
pub struct Link {
    pub(crate) inner: Arc<LinkShared>,
}

impl Link {
    /// Starts building a link to the server at `url`: `redis://[user:password@]host:port[/db]`
    /// (or `rediss://` with the `tls` feature).
    pub fn builder(url: impl Into<String>) -> LinkBuilder {
        LinkBuilder::new(url)
    }

    /// This link's id (the origin field of its exports).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// This link's consumer name in the groups it reads.
    pub fn consumer(&self) -> &str {
        &self.inner.consumer
    }

    /// The stream key topic `topic` travels in, or why it cannot.
    pub fn stream_key(&self, topic: &str) -> Result<String, LinkError> {
        check_name(topic, "topic")?;
        Ok(self.inner.stream_key(topic))
    }

    /// The dead-letter stream key of `topic`, or why it cannot be one.
    pub fn dead_letter_key(&self, topic: &str) -> Result<String, LinkError> {
        check_name(topic, "topic")?;
        Ok(self.inner.dead_letter_key(topic))
    }

    /// The underlying `redis` client, for what the link does not cover.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// A snapshot of the counters and the connection state.
    pub fn stats(&self) -> LinkStats {
        self.inner.counters.snapshot()
    }

    /// Adds every message published to local topic `topic` to the stream `<prefix>:<topic>`,
    /// JSON-encoded.
    ///
    /// The topic is checked now. Each message is handed to Redis before the next (an export
    /// keeps the topic's order), and re-sent while Redis is unreachable, for up to
    /// [`StreamOptions::publish_retry_for`]; a message whose encoding fails (or that is too
    /// large) is logged without its body, counted, and not sent.
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

    /// Adds the messages of every local topic that `pattern` matches, present and future, to
    /// the topics' own streams `<prefix>:<topic>`, JSON-encoded: as [`export`](Self::export)
    /// exports one topic, in its order, from the moment this returns (or the moment the topic
    /// is made). A pattern is NATS-style (see [`ringbus::Pattern`]). A matching topic whose
    /// name cannot be part of a stream key (whitespace, `:`, over 200 bytes) has its messages
    /// counted in `export_errors`, not sent. (There is no pattern import: see
    /// [`import`](Self::import).)
    ///
    /// # Errors
    ///
    /// [`LinkError::BadName`] for a malformed pattern; [`LinkError::AlreadyLinked`] if this
    /// link exports a topic the pattern matches, by name or by another pattern;
    /// [`LinkError::Bus`] if a matching topic carries another type.
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
        check_name(pattern, "topic pattern")?;
        ringbus_link::engine::parse_pattern(pattern)?;
        let start = async { export::start_pattern::<T, C>(&self.inner, pattern, codec) };
        self.inner.runtime.add_export(pattern, start).await
    }

    /// Publishes every message of the stream `<prefix>:<topic>` into the local topic,
    /// JSON-decoded, reading as a consumer of the group [`StreamOptions::group`].
    ///
    /// Instances that import a topic with the same group share its messages (each goes to
    /// one of them); with their own groups, each sees every message
    /// ([`import_shared`](Self::import_shared) names the group per topic). A group made by
    /// this call starts at the beginning of the stream: messages exported before it (and
    /// while this process was down) are delivered too.
    ///
    /// Each message is acknowledged once every local subscriber has handled it. A handler
    /// failure gives it back, to be delivered again after [`StreamOptions::nack_delay`]; a
    /// message held by a consumer that died is claimed by a live one after
    /// [`StreamOptions::claim_idle`]; after [`StreamOptions::max_deliver`] deliveries the
    /// message goes to the dead-letter stream. Register the local handlers first: a message
    /// handled by no subscriber is acknowledged at once.
    ///
    /// At least once: a message handled but not acknowledged (the process died in between,
    /// or Redis was unreachable) is handled again, so handlers must be idempotent. A second
    /// stream entry with an id this import handed to the bus recently (an export re-sent
    /// after a lost answer, or one [`Envelope`](crate::Envelope) id published twice) is
    /// dropped ([`StreamOptions::dedup_window`]), in this process only.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the group may exist on the server with no task
    /// reading it (it keeps the messages for a later import).
    ///
    /// There is no pattern import over Redis: `XREADGROUP` reads named streams only (the
    /// crate's README says why a periodic search for new keys is not offered instead).
    pub async fn import<T>(&self, topic: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        let group = self.inner.streams.group.clone();
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
        let group = self.inner.streams.group.clone();
        self.import_shared_with(topic, &group, codec).await
    }

    /// Imports `topic` as a consumer of the group `group`: instances in one group share the
    /// topic's messages (competing consumers), each group sees every message.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(bus: &ringbus::Bus) -> Result<(), ringbus_redis::LinkError> {
    /// let link = ringbus_redis::Link::builder("redis://127.0.0.1:6379").connect(bus).await?;
    /// // Every instance of the billing service joins "billing": each order is billed once.
    /// link.import_shared::<u64>("orders", "billing").await?;
    /// // Every instance keeps its own audit trail: a group of its own sees every order.
    /// link.import_shared::<u64>("audit", &format!("audit-{}", link.consumer())).await?;
    /// # Ok(()) }
    /// ```
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
        check_name(group, "group")?;
        let start = import::start::<T, C>(&self.inner, topic, group, codec);
        self.inner.runtime.add_import(topic, start).await
    }

    /// Links `topic` both ways: local messages go out, remote ones come in, and imported
    /// messages are never exported again (nor are this link's own exports imported). The
    /// message type must record that it was imported ([`Envelope`](crate::Envelope) does),
    /// or this is [`LinkError::EchoLoop`]. Give each process its own group
    /// ([`import_shared`](Self::import_shared) semantics), so each sees the others' messages.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(bus: &ringbus::Bus) -> Result<(), ringbus_redis::LinkError> {
    /// use ringbus_redis::{Envelope, Link, StreamOptions};
    /// let link = Link::builder("redis://127.0.0.1:6379")
    ///     .streams(StreamOptions { group: "chat-node-1".into(), ..StreamOptions::default() })
    ///     .connect(bus)
    ///     .await?;
    /// link.link_both::<Envelope<String>>("chat").await?;
    /// # Ok(()) }
    /// ```
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
    /// 1. stop reading: each import stops taking messages from Redis, lets the local
    ///    handlers finish what it handed them, and settles it (acknowledged, given back, or
    ///    dead-lettered), then leaves its groups if it holds nothing there;
    /// 2. flush the exports: every message published locally before this call is added to
    ///    its stream (XADD answered).
    ///
    /// The local bus stays open: close it afterwards. What the deadline cut is in the report;
    /// what an import held unsettled stays pending and is claimed after `claim_idle`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the link is left half closed (imports stopped,
    /// exports possibly unsubscribed). Bound it with `timeout` instead.
    pub async fn close(&self, timeout: Duration) -> LinkCloseReport {
        let link = &self.inner;
        // Nothing is left to do after the imports and exports: each command's connection
        // closes when its last user drops it.
        let nothing_more = |_deadline, cut_at| async move { cut_at };
        let (counters, name) = (&link.counters, ("ringbus-redis", link.id.as_str()));
        let stats = || counters.snapshot();
        let runtime = &link.runtime;
        runtime
            .close(name, timeout, nothing_more, &counters.state, stats)
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
            .field("consumer", &self.inner.consumer)
            .field("prefix", &self.inner.prefix)
            .field("state", &self.inner.counters.snapshot().state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_show() {
        let builder = super::Link::builder("redis://u:hunter2@h:1");
        assert!(!format!("{builder:?}").contains("hunter2"));
    }
}
