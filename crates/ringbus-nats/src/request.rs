//! Request/reply across NATS: [`Link::export_requests`](crate::Link::export_requests) sends
//! a local request topic's requests out as NATS requests, and
//! [`Link::import_requests`](crate::Link::import_requests) answers NATS requests with the
//! local repliers (`#[subscriber("topic", reply)]`), so the same replier serves requests
//! from other processes.
//!
//! # How it runs
//!
//! **The requesting side** (an export) is a bus subscriber of the request topic, the
//! *forwarder*. For each [`Request`] it takes the request over
//! ([`Request::responder`]), so the requester now waits for that [`Responder`] and the
//! topic is not held up while the answer travels: the forwarder encodes the message,
//! records the responder under a fresh token with its deadline (the requester's own
//! deadline, or the link's `request_timeout` if that is sooner or there is none), and
//! publishes a NATS message with the reply subject `<inbox>.<token>` and the time left as a
//! header. One *router* task per export reads the inbox subscription (`<inbox>.*`): a reply
//! whose token is recorded answers its responder; one whose token is not (its request
//! timed out) is late, dropped and counted. The router also expires the deadlines: a
//! request whose answer did not come is answered `time_out` (the requester's
//! `RequestError::Timeout(None)`).
//!
//! **The answering side** (an import) subscribes to the topic's subject (in a queue group
//! when shared). For each NATS request it decodes the message and makes a local request
//! ([`Topic::request_with`]) bounded by the time left, so the local repliers answer it like
//! any other; up to [`IN_FLIGHT`] requests at once. The outcome goes back to the reply
//! subject: the encoded reply, or a `Ringbus-Reply-Error` header (`failed` with the error's
//! text as the body, `timeout`, or `unanswered`).
//!
//! What the requester sees: the reply; `Failed(text)` for the replier's error (or panic), a
//! request that did not decode there, or a reply that did not decode here; `Timeout(None)`
//! past its deadline or the link's `request_timeout`; `Unanswered` when nobody answered (no
//! process subscribed, NATS's "no responders", or a process with no local replier).
//!
//! # Invariants
//!
//! - **A reply reaches only its own request.** Tokens are never reused within a link (a
//!   `u64` counter), and an entry is removed from the table by whoever takes it (router or
//!   expiry) under its mutex: a responder is answered at most once, and a late reply finds
//!   no entry.
//! - **The table's mutex is never held across an await**; the router is woken by a
//!   `Notify` when an entry is added (a deadline earlier than the one it sleeps to).
//! - **The router ends** once the forwarder is gone (the export was unsubscribed by
//!   `close`: `open` turns false) and the table is empty, so `close` waits for the answers
//!   of the requests already sent, up to its deadline.
//!
//! # Allocation
//!
//! A request allocates on both sides (the encoded message, the table entry, the responder's
//! channel, the NATS message); plain exports and imports are unchanged.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::{HeaderMap, HeaderValue, StatusCode, Subject};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use ringbus::{Handler, HandlerError, Request, RequestError, Responder, SubscribeOptions, Topic};
use ringbus_link::engine::{deadline_after, Claim, ImportTask};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::codec::Codec;
use crate::codec::Json;
use crate::error::LinkError;
use crate::import::{core_subscribe, take};
use crate::link::Link;
use crate::options::Sharing;
use crate::shared::LinkShared;
use crate::stats::add;
use crate::task::ExportTask;
use crate::wire::{decode, encode};

/// The time left to the requester, in whole milliseconds: the answering side's deadline.
const TIMEOUT_HEADER: &str = "Ringbus-Timeout-Ms";
/// Set on an answer that is not a reply: `failed` (the body is the error's text),
/// `timeout` or `unanswered`.
const REPLY_ERROR_HEADER: &str = "Ringbus-Reply-Error";

/// Requests one import answers at once (the rest wait in the client's buffer).
pub(crate) const IN_FLIGHT: usize = 256;

/// The requests sent and not yet answered, by token.
struct Table<R> {
    waiting: HashMap<u64, Responder<R>>,
    /// Deadlines, earliest first; entries whose token was already answered are skipped.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// False once the forwarder is dropped: the router ends when `waiting` is empty.
    open: bool,
}

/// What the forwarder and the router share.
struct Pending<R> {
    table: Mutex<Table<R>>,
    /// Notified when an entry is added or the forwarder is dropped.
    changed: Notify,
    next_token: AtomicU64,
    /// `waiting.len()`, for `close`'s report without the lock.
    count: Arc<AtomicU64>,
}

impl<R> Pending<R> {
    fn table(&self) -> MutexGuard<'_, Table<R>> {
        // Each change is one insert or remove: a panic cannot leave it inconsistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, token: u64) -> Option<Responder<R>> {
        let taken = self.table().waiting.remove(&token);
        if taken.is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }
}

/// The handler of a request export: takes each request over and sends it to NATS.
struct Forwarder<T, R, C> {
    link: Arc<LinkShared>,
    topic: Arc<str>,
    subject: Subject,
    inbox: String,
    codec: Arc<C>,
    pending: Arc<Pending<R>>,
    _message: PhantomData<fn(&T)>,
}

impl<T, R, C> Drop for Forwarder<T, R, C> {
    fn drop(&mut self) {
        self.pending.table().open = false;
        self.pending.changed.notify_one();
    }
}

impl<T, R, C> Forwarder<T, R, C>
where
    T: Send + Sync + 'static,
    R: Send + Sync + 'static,
    C: Codec<T> + Codec<R>,
{
    async fn forward(&self, request: &Request<T, R>) -> Result<(), String> {
        // Answered by a local replier first, or its requester stopped waiting: nothing to do.
        let Some(responder) = request.responder() else {
            return Ok(());
        };
        let encoded = encode::<T, C>(
            &*self.codec,
            request.message(),
            self.link.max_message_bytes,
            0,
        )
        .and_then(|message| Ok((message.headers(&self.topic, None)?, message)));
        let (mut headers, message) = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                let e = e.to_string();
                responder.fail(&e);
                return Err(e);
            }
        };
        let now = Instant::now();
        // A `request_timeout` past what the clock can represent (`Duration::MAX`) is none.
        let ours = deadline_after(now, self.link.request_timeout);
        let deadline = responder.deadline().map_or(ours, |d| d.min(ours));
        let left = deadline.saturating_duration_since(now).as_millis().max(1);
        if let Ok(v) = left.to_string().parse::<HeaderValue>() {
            headers.insert(TIMEOUT_HEADER, v);
        }
        let token = self.pending.next_token.fetch_add(1, Ordering::Relaxed);
        {
            let mut table = self.pending.table();
            table.waiting.insert(token, responder);
            table.deadlines.push(Reverse((deadline, token)));
        }
        self.pending.count.fetch_add(1, Ordering::Relaxed);
        self.pending.changed.notify_one();
        let sent = self
            .link
            .client
            .publish_with_reply_and_headers(
                self.subject.clone(),
                format!("{}.{token}", self.inbox),
                headers,
                message.body,
            )
            .await;
        if let Err(e) = sent {
            let e = format!("NATS refused the request: {e}");
            if let Some(responder) = self.pending.take(token) {
                responder.fail(&e);
            }
            return Err(e);
        }
        add(&self.link.counters.requests_sent);
        Ok(())
    }
}

impl<T, R, C> Handler<Request<T, R>> for Forwarder<T, R, C>
where
    T: Send + Sync + 'static,
    R: Send + Sync + 'static,
    C: Codec<T> + Codec<R>,
{
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        request: &'a Request<T, R>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            self.forward(request).await.map_err(|e| {
                add(&self.link.counters.export_errors);
                tracing::warn!(
                    topic = %self.topic,
                    subject = %self.subject,
                    error = %e,
                    "ringbus-nats: request not sent"
                );
                HandlerError::new(e)
            })
        }
    }
}

/// Reads the replies of one request export and expires its deadlines (module docs).
async fn route_replies<R, C>(
    link: Arc<LinkShared>,
    topic: Arc<str>,
    codec: Arc<C>,
    pending: Arc<Pending<R>>,
    mut inbox: async_nats::Subscriber,
) where
    R: Send + Sync + 'static,
    C: Codec<R>,
{
    loop {
        let changed = pending.changed.notified();
        let next = {
            let mut table = pending.table();
            if !table.open && table.waiting.is_empty() {
                break;
            }
            // Drop the deadlines of requests already answered.
            while let Some(&Reverse((_, token))) = table.deadlines.peek() {
                if table.waiting.contains_key(&token) {
                    break;
                }
                table.deadlines.pop();
            }
            table.deadlines.peek().map(|Reverse((at, _))| *at)
        };
        let expiry = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            reply = inbox.next() => match reply {
                Some(reply) => answer(&link, &topic, &*codec, &pending, reply),
                // The connection was closed: nothing more will come.
                None => break,
            },
            () = expiry => expire(&link, &topic, &pending),
            () = changed => {}
        }
    }
    if let Err(e) = inbox.unsubscribe().await {
        tracing::debug!(error = %e, "ringbus-nats: unsubscribing a reply inbox failed");
    }
}

/// Answers the responder a reply from NATS is for, or counts it late.
fn answer<R, C: Codec<R>>(
    link: &LinkShared,
    topic: &str,
    codec: &C,
    pending: &Pending<R>,
    reply: async_nats::Message,
) {
    let token = reply
        .subject
        .rsplit('.')
        .next()
        .and_then(|t| t.parse::<u64>().ok());
    let Some(responder) = token.and_then(|t| pending.take(t)) else {
        add(&link.counters.late_replies);
        tracing::debug!(
            topic,
            "ringbus-nats: a reply came after its request timed out; dropped"
        );
        return;
    };
    if reply.status == Some(StatusCode::NO_RESPONDERS) {
        add(&link.counters.no_responders);
        // Dropped unanswered: the requester's `Unanswered`.
        drop(responder);
        return;
    }
    let error = reply
        .headers
        .as_ref()
        .and_then(|h| h.get(REPLY_ERROR_HEADER))
        .map(|v| v.as_str().to_string());
    let delivered = match error.as_deref() {
        None => match decode::<R, C>(
            codec,
            topic,
            reply.headers.as_ref(),
            &reply.payload,
            link.max_message_bytes,
        ) {
            Ok(value) => responder.reply(value).is_ok(),
            Err(reason) => {
                add(&link.counters.bad_input);
                tracing::warn!(topic, reason = %reason, "ringbus-nats: refused a reply from NATS");
                responder.fail(format!("the reply from NATS was refused: {reason}"))
            }
        },
        Some("failed") => responder.fail(String::from_utf8_lossy(&reply.payload)),
        Some("timeout") => {
            // Timed out there (it was told the time left), before it did here.
            add(&link.counters.request_timeouts);
            responder.time_out()
        }
        Some("unanswered") => {
            drop(responder);
            true
        }
        Some(other) => responder.fail(format!("an answer of unknown kind \"{other}\"")),
    };
    if !delivered {
        add(&link.counters.late_replies);
    }
}

/// Answers `time_out` to every request whose deadline has passed.
fn expire<R>(link: &LinkShared, topic: &str, pending: &Pending<R>) {
    let now = Instant::now();
    loop {
        let token = {
            let mut table = pending.table();
            match table.deadlines.peek() {
                Some(&Reverse((at, token))) if at <= now => {
                    table.deadlines.pop();
                    token
                }
                _ => return,
            }
        };
        if let Some(responder) = pending.take(token) {
            add(&link.counters.request_timeouts);
            tracing::debug!(
                topic,
                "ringbus-nats: a request's answer did not come in time"
            );
            responder.time_out();
        }
    }
}

impl Link {
    /// Sends the requests of local request topic `topic` (of [`Request<T, R>`]) to NATS, as
    /// NATS requests, and gives each requester the answer of the process that imports the
    /// topic ([`import_requests`](Self::import_requests)), JSON-encoded both ways.
    ///
    /// The requesters do not change: [`Topic::request`] / [`Topic::request_with`] on the
    /// local topic now reach the repliers of other processes. The export is a subscriber of
    /// the topic that takes each request over ([`Request::responder`]) and sends it with a
    /// reply subject of its own; it does not wait for the answer, so requests are sent as
    /// fast as they come and answered in any order. What the requester receives:
    ///
    /// - `Ok(reply)`: the remote replier's reply;
    /// - [`RequestError::Failed`]`(text)`: the remote replier returned `Err` or panicked
    ///   (its text), or the request or the reply was refused on the way (not encodable,
    ///   too large, not decodable);
    /// - [`RequestError::Timeout`]`(None)`: no answer before the requester's deadline, or
    ///   before the link's [`request_timeout`](crate::LinkBuilder::request_timeout)
    ///   (10 s) if that is sooner; the remote side is told the time left and gives up then
    ///   too. An answer that comes later is dropped and counted in
    ///   [`LinkStats::late_replies`](crate::LinkStats::late_replies), never given to
    ///   another request;
    /// - [`RequestError::Unanswered`]: nobody answered: no process imports the topic
    ///   (NATS's "no responders", counted in
    ///   [`LinkStats::no_responders`](crate::LinkStats::no_responders)), or the one that
    ///   does has no replier for it.
    ///
    /// NATS core request/reply: at most once. A request or its answer lost with a
    /// connection ends in `Timeout`. A local replier of the same topic, if any, also sees
    /// each request, and the first answer wins.
    ///
    /// # Errors
    ///
    /// A topic NATS cannot route ([`LinkError::BadName`]); a topic this link already
    /// exports or imports ([`LinkError::AlreadyLinked`]: a request topic is linked one way,
    /// since a link that did both would send the requests it imports out again); a topic of
    /// another type ([`LinkError::Bus`]); a closed link.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ringbus::{subscriber, Bus, Context, Request};
    /// use ringbus_nats::{testing::MemoryNats, Link};
    ///
    /// #[derive(Debug, serde::Serialize, serde::Deserialize)]
    /// struct Quote { symbol: String }
    ///
    /// // The pricing service's replier, unchanged from one process.
    /// #[subscriber("prices", reply)]
    /// async fn price(quote: &Quote) -> Result<u64, String> {
    ///     match quote.symbol.as_str() {
    ///         "ACME" => Ok(1_250),
    ///         other => Err(format!("unknown symbol {other}")),
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let nats = MemoryNats::start()?; // or a nats-server's URL
    /// let pricing = Bus::new();
    /// pricing.register(price)?;
    /// let pricing_link = Link::builder(nats.url()).connect(&pricing).await?;
    /// pricing_link.import_requests::<Quote, u64>("prices").await?;
    ///
    /// let shop = Bus::new();
    /// let shop_link = Link::builder(nats.url()).connect(&shop).await?;
    /// shop_link.export_requests::<Quote, u64>("prices").await?;
    /// let prices = shop.topic::<Request<Quote, u64>>("prices")?;
    /// let ctx = Context::new().with_timeout(Duration::from_secs(2));
    /// assert_eq!(prices.request_with(&ctx, Quote { symbol: "ACME".into() }).await?, 1_250);
    ///
    /// assert!(shop_link.close(Duration::from_secs(5)).await.complete);
    /// assert!(pricing_link.close(Duration::from_secs(5)).await.complete);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the reply inbox may be subscribed with no export
    /// using it (the topic is left unlinked).
    pub async fn export_requests<T, R>(&self, topic: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        R: Send + Sync + 'static,
        Json: Codec<T> + Codec<R>,
    {
        self.export_requests_with::<T, R, Json>(topic, Json).await
    }

    /// As [`export_requests`](Self::export_requests), with another codec (for the request
    /// and the reply).
    ///
    /// # Cancel safety
    ///
    /// As [`export_requests`](Self::export_requests).
    pub async fn export_requests_with<T, R, C>(
        &self,
        topic: &str,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        R: Send + Sync + 'static,
        C: Codec<T> + Codec<R>,
    {
        let subject = self.subject(topic)?;
        let claims = claim_both_ways(&self.inner, topic)?;
        let task = export::<T, R, C>(&self.inner, topic, subject, codec).await?;
        keep(claims);
        self.inner.runtime.push_export(task);
        Ok(())
    }

    /// Answers the NATS requests of `topic` (sent by other processes'
    /// [`export_requests`](Self::export_requests)) with the local repliers of request
    /// topic `topic` (of [`Request<T, R>`]: `#[subscriber("topic", reply)]`, or
    /// [`Bus::reply`](ringbus::Bus::reply)), JSON-encoded both ways.
    ///
    /// Each request from NATS becomes a local request, bounded by the time its requester
    /// has left, and its outcome goes back: the reply, the replier's failure, a timeout,
    /// or "unanswered" when the topic has no replier here. Up to 256 requests are answered
    /// at once. This is the fan-out import: every process that imports the topic answers
    /// every request, and the requester takes the first answer (the others are counted
    /// late there). To have each request answered by one instance of a service, use
    /// [`import_requests_shared`](Self::import_requests_shared).
    ///
    /// Register the repliers first: a request that arrives before is answered
    /// "unanswered". See [`export_requests`](Self::export_requests) for an example.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the subscription may exist on the server with no
    /// task reading it.
    pub async fn import_requests<T, R>(&self, topic: &str) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        R: Send + Sync + 'static,
        Json: Codec<T> + Codec<R>,
    {
        self.import_requests_as::<T, R, Json>(topic, Sharing::FanOut, Json)
            .await
    }

    /// As [`import_requests`](Self::import_requests), shared with the other instances in
    /// `group` (a NATS queue group): each request is answered by one instance of the group.
    /// The usual way to run several instances of a service that answers requests.
    ///
    /// # Cancel safety
    ///
    /// As [`import_requests`](Self::import_requests).
    pub async fn import_requests_shared<T, R>(
        &self,
        topic: &str,
        group: &str,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        R: Send + Sync + 'static,
        Json: Codec<T> + Codec<R>,
    {
        self.import_requests_as::<T, R, Json>(topic, Sharing::shared(group), Json)
            .await
    }

    /// Answers the NATS requests of `topic`, fan-out or shared as `sharing` says, with
    /// `codec`: the general form of [`import_requests`](Self::import_requests) and
    /// [`import_requests_shared`](Self::import_requests_shared).
    ///
    /// # Cancel safety
    ///
    /// As [`import_requests`](Self::import_requests).
    pub async fn import_requests_as<T, R, C>(
        &self,
        topic: &str,
        sharing: Sharing,
        codec: C,
    ) -> Result<(), LinkError>
    where
        T: Send + Sync + 'static,
        R: Send + Sync + 'static,
        C: Codec<T> + Codec<R>,
    {
        let subject = self.subject(topic)?;
        if let Sharing::Shared(group) = &sharing {
            crate::subject::check(group, "queue group")?;
        }
        let claims = claim_both_ways(&self.inner, topic)?;
        let task = import::<T, R, C>(&self.inner, topic, subject, &sharing, codec).await?;
        keep(claims);
        self.inner.runtime.push_import(task);
        Ok(())
    }
}

/// Claims a request topic in both directions: a link that exported and imported one would
/// send the requests it imports out again (its export takes over every local request). Both
/// claims are given back on drop unless [kept](keep).
fn claim_both_ways<'a>(
    link: &'a LinkShared,
    topic: &str,
) -> Result<(Claim<'a>, Claim<'a>), LinkError> {
    let export = link.runtime.claim(topic, "export")?;
    let import = link.runtime.claim(topic, "import")?;
    Ok((export, import))
}

/// The call that claimed a request topic both ways succeeded.
fn keep((export, import): (Claim<'_>, Claim<'_>)) {
    export.keep();
    import.keep();
}

/// Starts sending the requests of local topic `topic` to NATS.
async fn export<T, R, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    subject: String,
    codec: C,
) -> Result<ExportTask, LinkError>
where
    T: Send + Sync + 'static,
    R: Send + Sync + 'static,
    C: Codec<T> + Codec<R>,
{
    let local = link.bus.topic::<Request<T, R>>(topic)?;
    let inbox = link.client.new_inbox();
    let replies = link
        .client
        .subscribe(format!("{inbox}.*"))
        .await
        .map_err(|e| LinkError::setup(e.to_string()))?;
    let topic: Arc<str> = Arc::from(topic);
    let codec = Arc::new(codec);
    let count = Arc::new(AtomicU64::new(0));
    let pending = Arc::new(Pending {
        table: Mutex::new(Table {
            waiting: HashMap::new(),
            deadlines: BinaryHeap::new(),
            open: true,
        }),
        changed: Notify::new(),
        next_token: AtomicU64::new(0),
        count: count.clone(),
    });
    let router = tokio::spawn(route_replies::<R, C>(
        link.clone(),
        topic.clone(),
        codec.clone(),
        pending.clone(),
        replies,
    ));
    let forwarder = Forwarder::<T, R, C> {
        link: link.clone(),
        topic: topic.clone(),
        subject: Subject::from(subject),
        inbox,
        codec,
        pending,
        _message: PhantomData,
    };
    let options = SubscribeOptions::new().name(format!("nats-export-requests:{topic}"));
    let subscription = match local.subscribe(options, forwarder) {
        Ok(s) => s,
        Err(e) => {
            router.abort();
            return Err(e.into());
        }
    };
    tracing::info!(topic = %topic, "ringbus-nats: exporting requests");
    Ok(ExportTask::new(
        topic.to_string(),
        subscription,
        Some((router, count)),
    ))
}

/// Starts answering the NATS requests of `topic` with the local repliers.
async fn import<T, R, C>(
    link: &Arc<LinkShared>,
    topic: &str,
    subject: String,
    sharing: &Sharing,
    codec: C,
) -> Result<ImportTask, LinkError>
where
    T: Send + Sync + 'static,
    R: Send + Sync + 'static,
    C: Codec<T> + Codec<R>,
{
    let local = link.bus.topic::<Request<T, R>>(topic)?;
    let subscriber = core_subscribe(link, &subject, sharing).await?;
    let task = tokio::spawn(serve(link.clone(), local, subject, codec, subscriber));
    tracing::info!(topic = %topic, group = ?sharing.group(), "ringbus-nats: answering requests");
    Ok(ImportTask::new(task, "ringbus-nats"))
}

async fn serve<T, R, C>(
    link: Arc<LinkShared>,
    local: Topic<Request<T, R>>,
    subject: String,
    codec: C,
    mut subscriber: async_nats::Subscriber,
) where
    T: Send + Sync + 'static,
    R: Send + Sync + 'static,
    C: Codec<T> + Codec<R>,
{
    let mut answering = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            Some(()) = answering.next(), if !answering.is_empty() => {}
            _ = link.runtime.stop_imports.cancelled() => break,
            m = subscriber.next(), if answering.len() < IN_FLIGHT => match m {
                Some(m) => answering.push(serve_one(&link, &local, &subject, &codec, m)),
                None => break,
            },
        }
    }
    // Stop taking requests, answer those taken.
    if let Err(e) = subscriber.unsubscribe().await {
        tracing::debug!(error = %e, "ringbus-nats: unsubscribe failed");
    }
    while answering.next().await.is_some() {}
}

/// Answers one request from NATS through the local repliers.
async fn serve_one<T, R, C>(
    link: &LinkShared,
    local: &Topic<Request<T, R>>,
    subject: &str,
    codec: &C,
    message: async_nats::Message,
) where
    T: Send + Sync + 'static,
    R: Send + Sync + 'static,
    C: Codec<T> + Codec<R>,
{
    let Some(reply_to) = message.reply.clone() else {
        add(&link.counters.bad_input);
        tracing::warn!(topic = %local.name(), "ringbus-nats: a message without a reply subject on a request topic; dropped");
        return;
    };
    let answer = match take::<T, C>(link, codec, local.name(), subject, &message) {
        Err(reason) => Answer::Failed(format!("the request was refused: {reason}")),
        Ok(msg) => {
            let left = message
                .headers
                .as_ref()
                .and_then(|h| h.get(TIMEOUT_HEADER))
                .and_then(|v| v.as_str().parse::<u64>().ok())
                .map_or(link.request_timeout, Duration::from_millis);
            // Feature `otel`: the repliers' spans continue the requester's trace.
            let ctx = crate::otel::context(local.name(), subject, message.headers.as_ref())
                .with_timeout(left);
            match local.request_with(&ctx, msg).await {
                Ok(reply) => {
                    let encoded = encode::<R, C>(codec, &reply, link.max_message_bytes, 0)
                        .and_then(|out| Ok((out.headers(local.name(), None)?, out.body)));
                    match encoded {
                        Ok((headers, body)) => Answer::Reply(headers, body),
                        Err(e) => Answer::Failed(format!("the reply was not sent: {e}")),
                    }
                }
                Err(RequestError::Failed(text)) => Answer::Failed(text),
                Err(RequestError::Timeout(_) | RequestError::Cancelled(_)) => Answer::Timeout,
                Err(_) => Answer::Unanswered,
            }
        }
    };
    let (headers, body) = match answer {
        Answer::Reply(headers, body) => (headers, body),
        Answer::Failed(text) => (error_headers("failed"), Bytes::from(text)),
        Answer::Timeout => (error_headers("timeout"), Bytes::new()),
        Answer::Unanswered => (error_headers("unanswered"), Bytes::new()),
    };
    match link
        .client
        .publish_with_headers(reply_to, headers, body)
        .await
    {
        Ok(()) => add(&link.counters.requests_served),
        Err(e) => {
            tracing::warn!(topic = %local.name(), error = %e, "ringbus-nats: a reply was not sent");
        }
    }
}

/// An answer on its way back to NATS.
enum Answer {
    Reply(HeaderMap, Bytes),
    Failed(String),
    Timeout,
    Unanswered,
}

fn error_headers(kind: &'static str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(REPLY_ERROR_HEADER, kind);
    headers
}

impl<T, R, C> fmt::Debug for Forwarder<T, R, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarder")
            .field("topic", &self.topic)
            .field("subject", &self.subject)
            .field("waiting", &self.pending.count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
