//! The link: one NATS connection that exports chosen local topics and imports others.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::{Client, ConnectOptions, Event};
use ringbus::Bus;
use ringbus_link::engine::{refuse_echo, Runtime};
use ringbus_link::ids::next_link_id;
use ringbus_link::LONGEST_WAIT;
use tokio_util::sync::CancellationToken;

use crate::codec::{Codec, Json};
use crate::error::LinkError;
use crate::options::{Auth, JetStreamOptions, Mode, Sharing, Tls};
use crate::shared::LinkShared;
use crate::stats::{add, ConnectionState, Counters, LinkCloseReport, LinkStats};
use crate::{export, import, subject};

/// Builds a [`Link`]: where to connect, with which credentials and TLS, and under which
/// subject prefix.
///
/// ```no_run
/// # async fn demo(bus: &ringbus::Bus) -> Result<(), ringbus_nats::LinkError> {
/// use ringbus_nats::{Auth, Link, Mode};
/// let link = Link::builder("nats://127.0.0.1:4222")
///     .auth(Auth::user_password("orders-svc", "s3cret"))
///     .prefix("shop")
///     .connect(bus)
///     .await?;
/// link.export::<u64>("orders", Mode::JetStream).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a LinkBuilder does nothing until `.connect(&bus).await`"]
pub struct LinkBuilder {
    url: String,
    auth: Auth,
    tls: Tls,
    prefix: String,
    dead_letter_prefix: Option<String>,
    name: Option<String>,
    jetstream: JetStreamOptions,
    import_buffer: usize,
    max_message_bytes: Option<usize>,
    connection_timeout: Duration,
    request_timeout: Duration,
}

impl LinkBuilder {
    fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth: Auth::None,
            tls: Tls::default(),
            prefix: "ringbus".to_string(),
            dead_letter_prefix: None,
            name: None,
            jetstream: JetStreamOptions::default(),
            import_buffer: 4096,
            max_message_bytes: None,
            connection_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Credentials (default: none).
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// TLS settings (default: TLS only if the server asks for it).
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = tls;
        self
    }

    /// The subject prefix: topic `t` travels on `<prefix>.t`. Default: `ringbus`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where JetStream dead letters go: `<dead_letter_prefix>.<topic>`. Default:
    /// `<prefix>-dead`.
    pub fn dead_letter_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.dead_letter_prefix = Some(prefix.into());
        self
    }

    /// The connection's name, as the server shows it.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// JetStream settings.
    pub fn jetstream(mut self, options: JetStreamOptions) -> Self {
        self.jetstream = options.clamped();
        self
    }

    /// Messages the client buffers per core import while the local bus applies
    /// backpressure. Beyond it the client drops messages and reports a slow consumer, which
    /// the link logs and counts. Default: 4096.
    pub fn import_buffer(mut self, messages: usize) -> Self {
        self.import_buffer = messages.max(1);
        self
    }

    /// The largest body accepted from or sent to NATS. Default: the server's `max_payload`.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = Some(bytes);
        self
    }

    /// How long connecting may take. Default: 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout.min(LONGEST_WAIT);
        self
    }

    /// The longest a request sent by [`Link::export_requests`] waits for its answer when
    /// its requester's context has no sooner deadline; past it the requester receives
    /// `RequestError::Timeout(None)`. Also the answering side's bound for a request that
    /// carries no deadline. Default: 10 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Connects, checking the prefixes first. A refused password or an unreachable server is
    /// an `Err` here. Once connected, the client reconnects by itself whenever the
    /// connection drops.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops the connection being made.
    pub async fn connect(self, bus: &Bus) -> Result<Link, LinkError> {
        subject::check(&self.prefix, "prefix")?;
        let dead_letter_prefix = self
            .dead_letter_prefix
            .clone()
            .unwrap_or_else(|| format!("{}-dead", self.prefix));
        subject::check(&dead_letter_prefix, "dead-letter prefix")?;
        if dead_letter_prefix == self.prefix
            || dead_letter_prefix.starts_with(&format!("{}.", self.prefix))
        {
            return Err(LinkError::BadName {
                what: "dead-letter prefix",
                name: dead_letter_prefix,
                reason: "it must not lie under the topic prefix",
            });
        }
        let counters = Arc::new(Counters::default());
        let closed = CancellationToken::new();
        let options = self
            .connect_options(counters.clone(), closed.clone())
            .await?;
        // "a,b,c": one server list (async-nats parses a `&str` as a single URL).
        let urls: Vec<&str> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        let client = options.connect(urls).await.map_err(LinkError::connect)?;
        counters.state.set(ConnectionState::Connected);
        let id = next_link_id();
        let max_message_bytes = self
            .max_message_bytes
            .unwrap_or_else(|| client.server_info().max_payload);
        let jetstream = jetstream::new(client.clone());
        let stream_name = self
            .jetstream
            .stream
            .clone()
            .unwrap_or_else(|| subject::durable_name(&[&self.prefix]).to_ascii_uppercase());
        tracing::info!(
            link = %id,
            prefix = %self.prefix,
            server = %client.server_info().server_id,
            "ringbus-nats link connected"
        );
        Ok(Link {
            inner: Arc::new(LinkShared {
                id,
                bus: bus.clone(),
                client,
                jetstream,
                prefix: self.prefix,
                dead_letter_prefix,
                stream_name,
                js: self.jetstream,
                max_message_bytes,
                request_timeout: self.request_timeout,
                counters,
                closed,
                runtime: Runtime::new(),
                stream_setup: tokio::sync::Mutex::new(()),
            }),
        })
    }

    async fn connect_options(
        &self,
        counters: Arc<Counters>,
        closed: CancellationToken,
    ) -> Result<ConnectOptions, LinkError> {
        let mut options = match &self.auth {
            Auth::None => ConnectOptions::new(),
            Auth::UserPassword { user, password } => {
                ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            Auth::Token(token) => ConnectOptions::with_token(token.clone()),
            Auth::NKey(seed) => ConnectOptions::with_nkey(seed.clone()),
            Auth::CredsFile(path) => ConnectOptions::with_credentials_file(path)
                .await
                .map_err(LinkError::connect)?,
        };
        if self.tls.required {
            options = options.require_tls(true);
        }
        for root in &self.tls.root_certificates {
            options = options.add_root_certificates(root.clone());
        }
        if let Some((cert, key)) = &self.tls.client_certificate {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if let Some(name) = &self.name {
            options = options.name(name);
        }
        Ok(options
            // A core import never sees what this connection exported.
            .no_echo()
            .subscription_capacity(self.import_buffer)
            .connection_timeout(self.connection_timeout)
            .event_callback(move |event| {
                on_event(&counters, &closed, event);
                async {}
            }))
    }
}

/// Connection events: logged, counted, and the state kept for `stats`.
fn on_event(counters: &Counters, closed: &CancellationToken, event: Event) {
    match event {
        Event::Connected => {
            add(&counters.connects);
            counters.state.set(ConnectionState::Connected);
            tracing::info!("ringbus-nats: connected to NATS");
        }
        Event::Disconnected => {
            add(&counters.disconnects);
            counters.state.set(ConnectionState::Disconnected);
            tracing::warn!("ringbus-nats: disconnected from NATS; reconnecting");
        }
        Event::SlowConsumer(sid) => {
            add(&counters.slow_consumer);
            tracing::warn!(
                subscription = sid,
                "ringbus-nats: slow consumer, the client dropped messages for a core import \
                 (raise import_buffer or speed up its handlers)"
            );
        }
        Event::Closed => {
            counters.state.set(ConnectionState::Closed);
            closed.cancel();
            tracing::info!("ringbus-nats: connection closed");
        }
        Event::LameDuckMode => {
            tracing::warn!("ringbus-nats: the server is entering lame duck mode");
        }
        Event::Draining => tracing::debug!("ringbus-nats: draining the connection"),
        Event::ServerError(e) => {
            add(&counters.client_errors);
            tracing::warn!(error = %e, "ringbus-nats: server error");
        }
        Event::ClientError(e) => {
            add(&counters.client_errors);
            tracing::warn!(error = %e, "ringbus-nats: client error");
        }
    }
}

/// A link between a local [`Bus`] and NATS: chosen topics go out ([`export`](Self::export)),
/// come in ([`import`](Self::import)), or both ([`link_both`](Self::link_both)).
///
/// The bus stays the router: exports are bus subscribers that hand each message to NATS;
/// imports publish what arrives into the bus, through its normal backpressure, so the local
/// subscribers handle it like any other message. Topic `t` travels on subject
/// `<prefix>.t`, with the topic, the message id and user headers as NATS headers.
///
/// Close it with [`close`](Self::close): imports stop, what is held is settled, exports are
/// flushed and acknowledged, then the connection drains. Dropping a link without closing it
/// stops its imports; its exports stay subscribed until the bus closes.
pub struct Link {
    pub(crate) inner: Arc<LinkShared>,
}

impl Link {
    /// Starts building a link to the server at `url` (for instance `nats://127.0.0.1:4222`).
    /// Several comma-separated URLs (the nodes of a cluster) are one server list: the client
    /// connects to one of them and, when that server is lost, reconnects to another (and to
    /// any node the servers announce).
    pub fn builder(url: impl Into<String>) -> LinkBuilder {
        LinkBuilder::new(url)
    }

    /// This link's id (the origin of its JetStream exports).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The NATS subject topic `topic` travels on, or why it cannot.
    pub fn subject(&self, topic: &str) -> Result<String, LinkError> {
        subject::subject(&self.inner.prefix, topic)
    }

    /// The dead-letter subject of `topic` (JetStream).
    pub fn dead_letter_subject(&self, topic: &str) -> Result<String, LinkError> {
        subject::subject(&self.inner.dead_letter_prefix, topic)
    }

    /// The JetStream stream's name.
    pub fn stream_name(&self) -> &str {
        &self.inner.stream_name
    }

    /// The underlying `async-nats` client, for what the link does not cover.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// A snapshot of the counters and the connection state.
    pub fn stats(&self) -> LinkStats {
        self.inner.counters.snapshot()
    }

    /// Sends every message published to local topic `topic` to NATS, JSON-encoded.
    ///
    /// The topic is checked now: a name NATS cannot route is an `Err` here, not at the first
    /// message. Messages published from now on go out; a message whose encoding fails (or
    /// that is too large) is logged without its body, counted, and not sent.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in [`Mode::JetStream`] (the stream may be created and the topic left
    /// unlinked, free to export again); dropping it in [`Mode::Core`] leaves nothing linked.
    pub async fn export<T>(&self, topic: &str, mode: Mode) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.export_with(topic, mode, Json).await
    }

    /// As [`export`](Self::export), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`export`](Self::export).
    pub async fn export_with<T, C>(
        &self,
        topic: &str,
        mode: Mode,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        let subject = self.subject(topic)?;
        let start = export::start::<T, C>(&self.inner, topic, subject, mode, codec);
        self.inner.runtime.add_export(topic, start).await
    }

    /// Sends every message of every local topic that `pattern` matches, present and future,
    /// to core NATS, JSON-encoded: each to the subject `<prefix>.<topic>`. A pattern is
    /// NATS-style (see [`ringbus::Pattern`]); each matching topic is exported as
    /// [`export`](Self::export) exports one, in its order, from the moment this returns (or
    /// the moment the topic is made). [`export_pattern_with`](Self::export_pattern_with)
    /// exports over JetStream.
    ///
    /// A topic already exported by name, or by a pattern that shares a topic with this one,
    /// is [`LinkError::AlreadyLinked`]: no message goes out twice. A matching topic of another
    /// type refuses the export ([`LinkError::Bus`]); one made later with another type is
    /// refused at its making.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it leaves nothing linked.
    ///
    /// ```no_run
    /// # async fn demo(link: ringbus_nats::Link) -> Result<(), ringbus_nats::LinkError> {
    /// // orders.eu.created, orders.us.paid, ...: each to `<prefix>.<topic>`.
    /// link.export_pattern::<String>("orders.>").await?;
    /// # Ok(()) }
    /// ```
    pub async fn export_pattern<T>(&self, pattern: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.export_pattern_with(pattern, Mode::Core, Json).await
    }

    /// As [`export_pattern`](Self::export_pattern), in `mode`, with `codec`. In
    /// [`Mode::JetStream`] the link's stream takes the subjects `<prefix>.<pattern>` (in
    /// place of the single topics' subjects it covers), and each message is confirmed by the
    /// server as [`export`](Self::export) confirms one, through one ack window for the
    /// pattern. The stream then stores whatever is published on those subjects, by anyone:
    /// keep core topics and request topics out of a JetStream pattern (see
    /// [`import_pattern_as`](Self::import_pattern_as)). Patterns that overlap without one
    /// covering the other (`*.eu` and `orders.*`), linked over one stream by two links or
    /// processes with the same prefix, cannot both be its subjects: the second is a
    /// [`LinkError::Setup`] naming the stream's subjects. An export the bus refuses (a
    /// matching topic carries another type: [`LinkError::Bus`]) gives the stream's subjects
    /// back as they were, the dead letters' subject excepted.
    ///
    /// # Cancel safety
    ///
    /// As [`export`](Self::export) in the same mode: not cancel safe in
    /// [`Mode::JetStream`] (the stream may take the subjects and the pattern be left
    /// unlinked, free to export again).
    ///
    /// ```no_run
    /// # async fn demo(link: ringbus_nats::Link) -> Result<(), ringbus_nats::LinkError> {
    /// use ringbus_nats::{Json, Mode};
    /// link.export_pattern_with::<String, _>("orders.>", Mode::JetStream, Json).await?;
    /// # Ok(()) }
    /// ```
    pub async fn export_pattern_with<T, C>(
        &self,
        pattern: &str,
        mode: Mode,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        subject::check_pattern(pattern)?;
        let start = export::start_pattern::<T, C>(&self.inner, pattern, mode, codec);
        self.inner.runtime.add_export(pattern, start).await
    }

    /// Publishes every message arriving on the subject of `topic` into the local topic,
    /// JSON-decoded; the local subscribers handle it as any other message.
    ///
    /// This is the fan-out import ([`Sharing::FanOut`]): on [`Mode::Core`] every instance that
    /// imports the topic sees every message. On [`Mode::JetStream`] the durable consumer
    /// `<durable>_<topic>` keeps the place, so instances with their own
    /// [`JetStreamOptions::durable`] name each see every message, and instances with the same
    /// name (the default is the same everywhere) share them. To divide a topic's messages
    /// between instances explicitly, use [`import_shared`](Self::import_shared).
    ///
    /// In [`Mode::JetStream`], messages exported before this call (and while this process
    /// was down) are delivered too, and each one is acked once every local subscriber has
    /// handled it. Register the local handlers first: a message handled by no subscriber is
    /// acked at once.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the subscription or consumer may exist on the server
    /// with no task reading it (JetStream keeps the messages for a later import, which the
    /// topic, left unlinked, is free to make).
    pub async fn import<T>(&self, topic: &str, mode: Mode) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.import_as(topic, mode, Sharing::FanOut, Json).await
    }

    /// As [`import`](Self::import), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_with<T, C>(
        &self,
        topic: &str,
        mode: Mode,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        self.import_as(topic, mode, Sharing::FanOut, codec).await
    }

    /// Imports `topic` shared with the other instances in `group` (competing consumers): each
    /// message goes to one instance of the group, instead of to every instance.
    ///
    /// - [`Mode::Core`]: the link joins the NATS queue group `group` on the topic's subject;
    ///   the server hands each message to one member. At most once: a message in flight to
    ///   an instance when it dies, or dropped by the client for a slow importer, is lost.
    ///   Plain (fan-out) importers of the same subject still receive every message.
    /// - [`Mode::JetStream`]: the instances pull from one durable consumer,
    ///   `<group>_<topic>` (the group names it in place of [`JetStreamOptions::durable`]).
    ///   Each message is delivered to one of them and acked there after its local handlers
    ///   ran; a message an instance took and did not ack (it died, or took longer than
    ///   [`JetStreamOptions::ack_wait`]) is delivered to an instance again after `ack_wait`.
    ///   At least once: the handlers of a message that was handled but not acked run again
    ///   elsewhere, so they must be idempotent.
    ///
    /// Instances in different groups (or fan-out importers) each receive every message. The
    /// group must be usable in a NATS subject: an empty name, whitespace or a wildcard is a
    /// [`LinkError::BadName`] here.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_shared<T>(
        &self,
        topic: &str,
        mode: Mode,
        group: &str,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.import_as(topic, mode, Sharing::shared(group), Json)
            .await
    }

    /// Imports `topic` fan-out or shared, as `sharing` says, with `codec`: the general form
    /// of [`import`](Self::import), [`import_with`](Self::import_with) and
    /// [`import_shared`](Self::import_shared), for a choice made in configuration.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn import_as<T, C>(
        &self,
        topic: &str,
        mode: Mode,
        sharing: Sharing,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        let subject = self.subject(topic)?;
        if let Sharing::Shared(group) = &sharing {
            subject::check(group, "queue group")?;
        }
        let start = import::start::<T, C>(&self.inner, topic, subject, mode, &sharing, codec);
        self.inner.runtime.add_import(topic, start).await
    }

    /// Publishes every message arriving on a subject that matches `<prefix>.<pattern>` into
    /// the local topic the subject names (`<prefix>.orders.eu` into `orders.eu`), JSON-decoded;
    /// each topic is made on its first message, so a local
    /// [`subscribe_pattern`](ringbus::Bus::subscribe_pattern) of the same pattern handles them
    /// all. Core NATS, fan-out: every importing instance sees every message;
    /// [`import_pattern_as`](Self::import_pattern_as) imports over JetStream, or shared.
    ///
    /// The pattern is NATS's: `*` one token, `>` (last) the rest; a malformed one is
    /// [`LinkError::BadName`] here. A message whose topic carries another type locally is
    /// logged, counted in `bad_input` and dropped; the import goes on. A name or pattern this
    /// link imports already that shares a topic with this one is [`LinkError::AlreadyLinked`];
    /// two links importing overlapping subjects each get every message.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the subscription may exist on the server with no
    /// task reading it; the pattern, left unlinked, is free to import again.
    pub async fn import_pattern<T>(&self, pattern: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.import_pattern_as(pattern, Mode::Core, Sharing::FanOut, Json)
            .await
    }

    /// As [`import_pattern`](Self::import_pattern), in `mode`, fan-out or shared (as
    /// [`import_as`](Self::import_as)), with `codec`.
    ///
    /// In [`Mode::JetStream`] the link's stream takes the subjects `<prefix>.<pattern>`, and
    /// one durable consumer reads them: `<durable>_pattern_<pattern>`, or
    /// `<group>_pattern_<pattern>` when shared, with `.` spelled `_`, `*` `any` and `>` `rest`
    /// (`ringbus_pattern_orders_rest` for `orders.>`). Each message is settled as
    /// [`import`](Self::import) settles one: acked once every local subscriber of its topic
    /// handled it. A message whose topic carries another type locally, or that does not
    /// decode, is dead-lettered to `<dead_letter_prefix>.<topic>`; the import goes on.
    ///
    /// The stream stores whatever is published on those subjects, by anyone: keep core topics
    /// and request topics out of a JetStream pattern. A request to a subject the stream holds
    /// is answered by JetStream's own acknowledgement, which the requester takes for the
    /// reply; a core export it holds comes back through this import.
    ///
    /// # Cancel safety
    ///
    /// As [`import_pattern`](Self::import_pattern). In [`Mode::JetStream`] the stream may
    /// already hold the pattern's subjects, and keeps their messages for a later import.
    ///
    /// ```no_run
    /// # async fn demo(link: ringbus_nats::Link) -> Result<(), ringbus_nats::LinkError> {
    /// use ringbus_nats::{Json, Mode, Sharing};
    /// link.import_pattern_as::<String, _>("orders.>", Mode::JetStream, Sharing::FanOut, Json)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn import_pattern_as<T, C>(
        &self,
        pattern: &str,
        mode: Mode,
        sharing: Sharing,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T>,
    {
        subject::check_pattern(pattern)?;
        if let Sharing::Shared(group) = &sharing {
            subject::check(group, "queue group")?;
        }
        let subject = format!("{}.{pattern}", self.inner.prefix);
        let start =
            import::start_pattern::<T, C>(&self.inner, pattern, subject, mode, &sharing, codec);
        self.inner.runtime.add_import(pattern, start).await
    }

    /// Links `topic` both ways: local messages go out, remote ones come in, and imported
    /// messages are never exported again. The message type must record that it was imported
    /// ([`Envelope`](crate::Envelope) does), or this is [`LinkError::EchoLoop`]. Over
    /// JetStream, give each process its own [`JetStreamOptions::durable`] name.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn link_both<T>(&self, topic: &str, mode: Mode) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        Json: Codec<T>,
    {
        self.link_both_with(topic, mode, Json).await
    }

    /// As [`link_both`](Self::link_both), with another codec.
    ///
    /// # Cancel safety
    ///
    /// As [`import`](Self::import).
    pub async fn link_both_with<T, C>(
        &self,
        topic: &str,
        mode: Mode,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        C: Codec<T> + Clone,
    {
        refuse_echo(topic, &codec)?;
        self.export_with(topic, mode, codec.clone()).await?;
        self.import_with(topic, mode, codec).await
    }

    /// Closes the link, in order, within `timeout`:
    /// 1. stop importing, let the local handlers finish what was imported and settle it
    ///    (JetStream: ack, or nack for redelivery);
    /// 2. flush the exports: every message published locally before this call is handed to
    ///    NATS, and (JetStream) its server ack awaited; a request export
    ///    ([`export_requests`](Self::export_requests)) waits for the answers to the requests
    ///    it sent (an answering import stopped taking requests in step 1 and answered those
    ///    it took);
    /// 3. one request round trip to the server, so everything sent before it was processed;
    /// 4. drain the connection and wait for it to close.
    ///
    /// The local bus stays open: close it afterwards. What the deadline cut is in the report.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the link is left half closed (imports stopped,
    /// exports possibly unsubscribed). Bound it with `timeout` instead.
    pub async fn close(&self, timeout: Duration) -> LinkCloseReport {
        let link = &self.inner;
        let round_trip_and_drain = |deadline, mut cut_at: Option<&'static str>| async move {
            // 3. A request round trip: the server has processed everything sent before it.
            if cut_at.is_none() {
                match tokio::time::timeout_at(deadline, link.round_trip()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "ringbus-nats close: the flush round trip failed");
                        cut_at = Some("round trip");
                    }
                    Err(_) => cut_at = Some("round trip"),
                }
            }
            // 4. Drain the connection and wait for its closed event.
            if let Err(e) = link.client.drain().await {
                tracing::warn!(error = %e, "ringbus-nats close: drain failed");
            }
            let closed = tokio::time::timeout_at(deadline, link.closed.cancelled()).await;
            cut_at.or(closed.err().map(|_| "draining the connection"))
        };
        let (counters, name) = (&link.counters, ("ringbus-nats", link.id.as_str()));
        let stats = || counters.snapshot();
        let runtime = &link.runtime;
        runtime
            .close(name, timeout, round_trip_and_drain, &counters.state, stats)
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
            .field("prefix", &self.inner.prefix)
            .field("state", &self.inner.counters.snapshot().state)
            .finish_non_exhaustive()
    }
}
