//! Request/reply: [`Request`], [`Replier`], [`Topic::request`] and [`Bus::reply`].
//!
//! # How it runs
//!
//! A request topic is an ordinary topic whose message type is [`Request<T, R>`]: the message
//! and a one-shot reply slot (a `tokio::sync::oneshot` sender behind a mutex). Its type
//! says what it carries, so a request topic cannot be confused with a topic of plain `T`:
//! using one for the other is the bus's usual type mismatch.
//!
//! - **The requester** ([`Topic::request_with`]) refuses at once if the topic has no
//!   subscriber (`NoResponders`, the message back). Otherwise it makes the slot and its
//!   receiver, publishes the request with a delivery receipt
//!   ([`Topic::publish_tracked`]), bounded by its [`Context`], and then waits for the
//!   first of: the reply; the receipt (every subscriber present at the publish handled the
//!   request or ended without it), after which a reply not already in the slot will never
//!   come (`Unanswered`); the end of the context (`Timeout` / `Cancelled`).
//! - **A replier** is a subscriber whose handler is [`Replying`], made at subscribe around
//!   the user's [`Replier`]: it calls it on `&request.message` (in place), then takes the
//!   sender out of the slot and sends the outcome: the reply, or the error's (or panic's)
//!   text. It then hands the error or panic on to the subscriber loop, which logs and counts
//!   it as any handler's. The plain subscriber loop is unchanged.
//! - **A responder** ([`Request::responder`]) takes the sender out of the slot and sends,
//!   through it, the receiver of a second one-shot channel (`Outcome::Forwarded`), whose
//!   sender the [`Responder`] keeps. The requester, once it has that receiver, waits on it
//!   (and its context) instead of on the receipt: the answer may come after every
//!   subscriber handled the request. A forwarding subscriber (ringbus-nats) answers from
//!   another task this way without holding up the topic. One more allocation, only for a
//!   request taken over.
//!
//! # Invariants
//!
//! - **A reply reaches only its own request.** Each request has its own slot; a slot is
//!   answered at most once (the first replier takes the sender out, under the slot's
//!   mutex). There is no queue of replies that a late one could wait in for the next
//!   request.
//! - **A late reply is dropped and counted.** A requester that stops waiting (its context
//!   ended, or its future was dropped) drops the receiver; the replier's send then fails,
//!   and the reply is dropped and counted in the replier's `late_replies`. A replier that
//!   finds the slot already empty (another replier answered) counts `duplicate_replies`.
//!   Only the replier's task writes those counters: Relaxed, they are counters.
//! - **Unanswered is decided after the reply could have come.** The replier sends before
//!   its handler returns, so before its subscriber stores its new position (Release); the
//!   receipt reads that position (Acquire), so once the receipt resolves, a reply sent is
//!   in the receiver, and `try_recv` sees it. A responder sends `Forwarded` inside the
//!   handler that took it, so the same holds for it; its answer is then awaited, not
//!   decided by the receipt.
//!
//! # Allocation
//!
//! A request allocates: the oneshot channel and the delivery receipt. Plain publishes and
//! deliveries are untouched and allocate nothing (guarantee 10).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::bus::Bus;
use crate::context::Context;
use crate::error::{Error, PublishError, RequestError};
use crate::handler::{panic_message, Handler, HandlerError};
use crate::options::SubscribeOptions;
use crate::shared::{Counters, SubShared};
use crate::stats::SubscriberStats;
use crate::subscriber::{self, Subscription};
use crate::topic::Topic;

/// An answer to a request.
enum Answer<R> {
    /// The reply.
    Reply(R),
    /// The text of the replier's error or panic.
    Failed(String),
    /// A [`Responder`] gave up waiting for the answer it forwards.
    TimedOut,
}

/// What the request's slot sends: an answer, or, when a [`Responder`] took the request over,
/// the receiver of the answer it will send later.
enum Outcome<R> {
    Answer(Answer<R>),
    Forwarded(oneshot::Receiver<Answer<R>>),
}

/// A request in flight: the message and a slot for its one reply. The message type of a
/// request topic (`bus.topic::<Request<T, R>>("prices")`).
///
/// Made by [`Topic::request`]; a [replier](Bus::reply) sees the message and answers. A
/// plain subscriber of a request topic (a handler of `&Request<T, R>`, or a stream) sees it
/// too, through [`message`](Self::message), but cannot answer: only repliers do.
pub struct Request<T, R> {
    message: T,
    /// The requester's context deadline.
    deadline: Option<Instant>,
    /// The reply's sender, taken out by the first replier. Locked once per replier, never
    /// held across an await.
    reply: Mutex<Option<oneshot::Sender<Outcome<R>>>>,
}

impl<T, R> Request<T, R> {
    /// The request's message.
    pub fn message(&self) -> &T {
        &self.message
    }

    /// True once a replier has answered it (or a [`Responder`] took it over), or its
    /// requester stopped waiting.
    pub fn is_answered(&self) -> bool {
        self.slot().as_ref().is_none_or(|tx| tx.is_closed())
    }

    /// The deadline of the requester's [`Context`], if it has one: past it, nobody waits
    /// for the reply. A subscriber that forwards requests elsewhere bounds its own wait by
    /// it.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Takes the request over: the returned [`Responder`] answers it later, from any task,
    /// after this handler returned. For subscribers that forward requests to somewhere else
    /// (another process, a worker pool) and must not hold up the topic while the answer
    /// comes; an ordinary replier ([`Bus::reply`]) answers with its return value instead.
    ///
    /// The requester then waits for the responder (bounded by its context, as always), not
    /// for the subscribers: a responder dropped without answering leaves the request
    /// [`Unanswered`](RequestError::Unanswered). Any subscriber may take it over, plain
    /// ones included; the first answer wins, and a replier that answers after the request
    /// was taken over counts a duplicate reply.
    ///
    /// `None` when there is nothing left to answer: a replier answered, another subscriber
    /// took it over, or the requester stopped waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringbus::{Bus, Request};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::new();
    /// let _forward = bus.subscribe("double", |request: &Request<u64, u64>| {
    ///     let n = *request.message();
    ///     let responder = request.responder();
    ///     // Answered by another task, after this handler returned.
    ///     tokio::spawn(async move {
    ///         if let Some(responder) = responder {
    ///             let _late = responder.reply(n * 2);
    ///         }
    ///     });
    ///     async {}
    /// })?;
    /// let double = bus.topic::<Request<u64, u64>>("double")?;
    /// assert_eq!(double.request(21).await?, 42);
    /// # Ok(()) }
    /// ```
    pub fn responder(&self) -> Option<Responder<R>> {
        let tx = self.slot().take()?;
        let (later, answer) = oneshot::channel();
        // Fails only if the requester stopped waiting: nothing to answer then.
        tx.send(Outcome::Forwarded(answer)).ok()?;
        Some(Responder {
            tx: later,
            deadline: self.deadline,
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<oneshot::Sender<Outcome<R>>>> {
        // An `Option` taken or not: a panic cannot leave it inconsistent.
        self.reply.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `outcome` to the requester, counting it in `counters` if nobody receives it
    /// (`sub` names the replier in the log).
    fn answer(&self, outcome: Answer<R>, sub: &SubShared, counters: &ReplyCounters) {
        let sender = self.slot().take();
        match sender {
            None => {
                counters.duplicate.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    topic = %sub.topic,
                    subscriber = %sub.name,
                    "ringbus reply dropped: another replier answered the request first"
                );
            }
            Some(tx) => {
                if tx.send(Outcome::Answer(outcome)).is_err() {
                    counters.late.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        topic = %sub.topic,
                        subscriber = %sub.name,
                        "ringbus reply dropped: the requester had stopped waiting"
                    );
                }
            }
        }
    }
}

impl<T: fmt::Debug, R> fmt::Debug for Request<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("message", &self.message)
            .field("answered", &self.is_answered())
            .finish()
    }
}

/// What a replier's future may resolve to: the reply `R`, or `Result<R, E>` with a
/// printable error (which the requester receives as [`RequestError::Failed`]).
#[diagnostic::on_unimplemented(
    message = "a replier returned `{Self}`, which is not a reply of type `{R}`",
    label = "a replier returns `{R}` or `Result<{R}, E>` (with `E: Display`)"
)]
pub trait ReplyOutput<R>: Send {
    /// The reply, or the error the requester is told about.
    fn into_reply(self) -> Result<R, HandlerError>;
}

impl<R: Send> ReplyOutput<R> for R {
    #[inline]
    fn into_reply(self) -> Result<R, HandlerError> {
        Ok(self)
    }
}

impl<R: Send, E: fmt::Display + Send + Sync + 'static> ReplyOutput<R> for Result<R, E> {
    #[inline]
    fn into_reply(self) -> Result<R, HandlerError> {
        self.map_err(HandlerError::new)
    }
}

/// Answers requests: takes the message `&T` in place and returns the reply `R`.
///
/// Implemented by `#[subscriber("topic", reply)]` functions and by every closure or
/// function that takes `&T` and returns a `Send` future of `R` or `Result<R, E>` (see
/// [`ReplyFn`]): an async closure `async |msg: &T| ...`, or `|msg: &T| async move { ... }`
/// (copying what it needs out of the message first), as for a [`Handler`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot answer requests of `&{T}` with `{R}`",
    label = "not a replier of `&{T}` with `{R}`",
    note = "a replier is a `#[subscriber(\"topic\", reply)]` function, or a closure `async |msg: &{T}| ...` returning `{R}` or `Result<{R}, E>`"
)]
pub trait Replier<T, R>: Send + Sync + 'static {
    /// Answers `msg`. An `Err` or a panic is sent to the requester as
    /// [`RequestError::Failed`], and logged and counted as a handler's.
    fn call<'a>(&'a self, msg: &'a T) -> impl Future<Output = Result<R, HandlerError>> + Send + 'a;
}

/// A function of `&'a T` whose future may borrow the message and resolves to a reply: what
/// a closure replier is. Implemented for every such `Fn`, so you never implement it.
pub trait ReplyFn<'a, T: 'a, R>: Fn(&'a T) -> <Self as ReplyFn<'a, T, R>>::Fut {
    /// The future a call returns.
    type Fut: Future<Output = Self::Reply> + Send + 'a;
    /// What the future resolves to.
    type Reply: ReplyOutput<R>;
}

impl<'a, T: 'a, R, F, Fut> ReplyFn<'a, T, R> for F
where
    F: Fn(&'a T) -> Fut,
    Fut: Future + Send + 'a,
    Fut::Output: ReplyOutput<R>,
{
    type Fut = Fut;
    type Reply = Fut::Output;
}

impl<T, R, F> Replier<T, R> for F
where
    T: Sync + 'static,
    R: Send + 'static,
    F: for<'a> ReplyFn<'a, T, R> + Send + Sync + 'static,
{
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(&'a self, msg: &'a T) -> impl Future<Output = Result<R, HandlerError>> + Send + 'a {
        async move { self(msg).await.into_reply() }
    }
}

/// The handler a replier's subscriber runs: the user's [`Replier`], its outcome sent to
/// the request's slot (see the module docs).
pub(crate) struct Replying<H, R> {
    replier: H,
    sub: Arc<SubShared>,
    counters: Arc<ReplyCounters>,
    _reply: PhantomData<fn() -> R>,
}

impl<H, R> Replying<H, R> {
    /// The replier `replier` for the subscriber `sub`, its counters kept for `sub`'s stats.
    fn new(replier: H, sub: &Arc<SubShared>) -> Self {
        let counters = Arc::new(ReplyCounters::default());
        sub.keep_counters(counters.clone());
        Self {
            replier,
            sub: sub.clone(),
            counters,
            _reply: PhantomData,
        }
    }

    fn answer<T>(&self, request: &Request<T, R>, outcome: Answer<R>) {
        request.answer(outcome, &self.sub, &self.counters);
    }
}

/// A replier's replies that reached no requester, counted by its [`Replying`] only.
#[derive(Debug, Default)]
struct ReplyCounters {
    /// The requester had stopped waiting.
    late: AtomicU64,
    /// Another replier had answered first.
    duplicate: AtomicU64,
}

impl Counters for ReplyCounters {
    fn report(&self, stats: &mut SubscriberStats) {
        stats.late_replies = self.late.load(Ordering::Relaxed);
        stats.duplicate_replies = self.duplicate.load(Ordering::Relaxed);
    }
}

impl<T, R, H> Handler<Request<T, R>> for Replying<H, R>
where
    T: Send + Sync + 'static,
    R: Send + 'static,
    H: Replier<T, R>,
{
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        request: &'a Request<T, R>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            // Panics are caught here only to tell the requester; they are resumed for the
            // subscriber loop, which logs and counts them.
            let call = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.replier.call(&request.message)
            })) {
                Ok(call) => call,
                Err(panic) => {
                    let text = format!("panicked: {}", panic_message(&*panic));
                    self.answer(request, Answer::Failed(text));
                    std::panic::resume_unwind(panic)
                }
            };
            match AssertUnwindSafe(call).catch_unwind().await {
                Ok(Ok(reply)) => {
                    self.answer(request, Answer::Reply(reply));
                    Ok(())
                }
                Ok(Err(error)) => {
                    self.answer(request, Answer::Failed(error.to_string()));
                    Err(error)
                }
                Err(panic) => {
                    let text = format!("panicked: {}", panic_message(&*panic));
                    self.answer(request, Answer::Failed(text));
                    std::panic::resume_unwind(panic)
                }
            }
        }
    }
}

/// `Timeout` if `ctx`'s deadline has passed, else `Cancelled` (its token).
fn ended<T>(ctx: &Context, msg: Option<T>) -> RequestError<T> {
    if ctx.deadline().is_some_and(|d| Instant::now() >= d) {
        RequestError::Timeout(msg)
    } else {
        RequestError::Cancelled(msg)
    }
}

impl Bus {
    /// Subscribes `replier` to the request topic `topic` (of [`Request<T, R>`]): it answers
    /// each [request](Topic::request) with its return value.
    ///
    /// A replier is a subscriber like any other (a tokio task, in order, gating
    /// publishers, counted in `stats()`), whose handler's return value is the reply: `R`,
    /// or `Result<R, E>`, whose `Err` the requester receives as [`RequestError::Failed`]
    /// (with the error's text; a panic too), and which is logged and counted as a
    /// handler's failure. `#[subscriber("topic", reply)]` makes one from an `async fn`.
    ///
    /// **Several repliers on one topic**: each handles every request; the first answer (a
    /// reply or a failure) wins, and the others are dropped and counted in
    /// [`SubscriberStats::duplicate_replies`](crate::SubscriberStats::duplicate_replies).
    /// A reply that comes after its requester stopped waiting is dropped and counted in
    /// [`SubscriberStats::late_replies`](crate::SubscriberStats::late_replies).
    ///
    /// With a fallible closure (`Result<R, E>`), say which `R`: `bus.reply::<Quote, Price,
    /// _>(..)`, or subscribe through the topic handle, [`Topic::reply`], whose type fixes it.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringbus::{Bus, Request};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::new();
    /// let _double = bus.reply("double", async |n: &u64| n * 2)?;
    /// let double = bus.topic::<Request<u64, u64>>("double")?;
    /// assert_eq!(double.request(21).await?, 42);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`subscribe`](Self::subscribe) (a topic of another type than `Request<T, R>` is
    /// [`Error::TypeMismatch`]).
    pub fn reply<T, R, H>(&self, topic: &str, replier: H) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        R: Send + 'static,
        H: Replier<T, R>,
    {
        self.reply_with(topic, SubscribeOptions::new(), replier)
    }

    /// [`reply`](Self::reply) with options (name, capacity, stall timeout).
    ///
    /// # Errors
    ///
    /// As [`reply`](Self::reply); also [`Error::Unsupported`] with a retry policy or a
    /// dead-letter topic: a requester waits for the outcome, so a replier does not retry.
    pub fn reply_with<T, R, H>(
        &self,
        topic: &str,
        options: SubscribeOptions,
        replier: H,
    ) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        R: Send + 'static,
        H: Replier<T, R>,
    {
        let inner = self.subscribable::<Request<T, R>>(topic, &options)?;
        Topic { inner }.reply(options, replier)
    }
}

impl<T, R> Topic<Request<T, R>>
where
    T: Send + Sync + 'static,
    R: Send + 'static,
{
    /// As [`Bus::reply_with`], without the lookup.
    ///
    /// # Errors
    ///
    /// As [`Bus::reply_with`].
    pub fn reply<H: Replier<T, R>>(
        &self,
        options: SubscribeOptions,
        replier: H,
    ) -> Result<Subscription, Error> {
        if options.retry.is_some() || options.dead_letter.is_some() {
            return Err(Error::Unsupported(
                "repliers do not retry: a retry policy or a dead-letter topic is for handlers \
                 whose outcome nobody waits for (a requester would see the first failure)",
            ));
        }
        subscriber::subscribe_made(&self.inner, options, move |sub| Replying::new(replier, sub))
    }

    /// Sends `msg` to the topic's [repliers](Bus::reply) and waits for the reply, with no
    /// deadline: [`request_with`](Self::request_with) and a [`Context::new`].
    ///
    /// It ends without a deadline too: once every subscriber present when it was sent has
    /// handled it, an answer not given is [`RequestError::Unanswered`]. Only a replier that
    /// never finishes (or a stream nobody reads) keeps it waiting: give it a deadline with
    /// `request_with` where that matters.
    ///
    /// # Cancel safety
    ///
    /// As [`request_with`](Self::request_with).
    pub async fn request(&self, msg: T) -> Result<R, RequestError<T>> {
        self.request_with(&Context::new(), msg).await
    }

    /// Sends `msg` to the topic's [repliers](Bus::reply) and waits for the first reply,
    /// until `ctx` ends.
    ///
    /// The request is published as any message (it waits for room, in order, and every
    /// subscriber sees it), wrapped in a [`Request`] with a one-shot reply slot. A request
    /// allocates (the slot and a delivery receipt); plain publishes stay allocation-free.
    ///
    /// # Errors
    ///
    /// - [`RequestError::NoResponders`]`(msg)`: the topic has no subscriber, checked before
    ///   sending (nothing waits for the deadline).
    /// - [`RequestError::Unanswered`]: every subscriber present when it was sent handled it
    ///   (or ended), and none replied.
    /// - [`RequestError::Timeout`] / [`RequestError::Cancelled`]: `ctx`'s deadline passed
    ///   or its token was cancelled; with `Some(msg)` if that was before the request was
    ///   sent. A reply that comes later is dropped and counted in the replier's
    ///   [`late_replies`](crate::SubscriberStats::late_replies), never given to another
    ///   request.
    /// - [`RequestError::Failed`]: the replier returned `Err` or panicked (its text).
    /// - [`RequestError::Closed`]`(msg)`: the bus is closed (a handler may still request
    ///   while the bus drains, as it may publish).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the request. Before the request was sent, it is all or
    /// nothing as a publish: no subscriber sees it. After, the repliers still handle it,
    /// and the reply is dropped and counted in
    /// [`late_replies`](crate::SubscriberStats::late_replies).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ringbus::{Bus, Context, Request, RequestError, SubscribeOptions};
    ///
    /// #[derive(Debug)]
    /// struct Quote { symbol: &'static str }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::new();
    /// let prices = bus.topic::<Request<Quote, u64>>("prices")?;
    /// // Nobody answers yet: an error at once, with the message back.
    /// match prices.request(Quote { symbol: "ACME" }).await {
    ///     Err(RequestError::NoResponders(quote)) => assert_eq!(quote.symbol, "ACME"),
    ///     other => panic!("{other:?}"),
    /// }
    /// let _pricer = prices.reply(SubscribeOptions::new(), async |quote: &Quote| {
    ///     if quote.symbol == "ACME" { Ok(1_250) } else { Err("unknown symbol") }
    /// })?;
    /// let ctx = Context::new().with_timeout(Duration::from_secs(1));
    /// assert_eq!(prices.request_with(&ctx, Quote { symbol: "ACME" }).await?, 1_250);
    /// match prices.request_with(&ctx, Quote { symbol: "XYZ" }).await {
    ///     Err(RequestError::Failed(why)) => assert_eq!(why, "unknown symbol"),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn request_with(&self, ctx: &Context, msg: T) -> Result<R, RequestError<T>> {
        if self.inner.subscriber_count() == 0 {
            if self.inner.state.refuses() {
                return Err(RequestError::Closed(msg));
            }
            return Err(RequestError::NoResponders(msg));
        }
        let (tx, mut rx) = oneshot::channel();
        let request = Request {
            message: msg,
            deadline: ctx.deadline(),
            reply: Mutex::new(Some(tx)),
        };
        let delivery = match self.inner.publish_tracked(ctx, request).await {
            Ok(delivery) => delivery,
            Err(e) => {
                return Err(match e {
                    PublishError::Cancelled(r) => ended(ctx, Some(r.message)),
                    PublishError::NoSubscriber(r, _) => RequestError::NoResponders(r.message),
                    PublishError::NoRuntime(r) => RequestError::NoRuntime(r.message),
                    // `Closed`; `Full` and `TypeMismatch` are not returned by a publish
                    // through a typed handle that waits for room.
                    other => RequestError::Closed(other.into_inner().message),
                });
            }
        };
        let mut handled = pin!(delivery.wait());
        let replied = if ctx.is_never() {
            tokio::select! {
                biased;
                reply = &mut rx => Some(reply),
                _ = &mut handled => None,
            }
        } else {
            tokio::select! {
                biased;
                reply = &mut rx => Some(reply),
                _ = &mut handled => None,
                _ = ctx.done() => return Err(ended(ctx, None)),
            }
        };
        // Every subscriber handled it: a reply sent is in the receiver (module docs).
        let outcome = match replied {
            Some(reply) => reply.ok(),
            None => rx.try_recv().ok(),
        };
        let answer = match outcome {
            Some(Outcome::Answer(answer)) => Some(answer),
            // Taken over by a responder: its answer comes when it comes, within `ctx`.
            Some(Outcome::Forwarded(mut later)) => {
                if ctx.is_never() {
                    later.await.ok()
                } else {
                    tokio::select! {
                        biased;
                        answer = &mut later => answer.ok(),
                        _ = ctx.done() => return Err(ended(ctx, None)),
                    }
                }
            }
            None => None,
        };
        match answer {
            Some(Answer::Reply(reply)) => Ok(reply),
            Some(Answer::Failed(text)) => Err(RequestError::Failed(text)),
            Some(Answer::TimedOut) => Err(RequestError::Timeout(None)),
            None => Err(RequestError::Unanswered),
        }
    }
}

/// The answer of one [`Request`], taken over by [`Request::responder`]: answers it from any
/// task, once.
///
/// Dropping it without answering leaves the request
/// [`Unanswered`](RequestError::Unanswered). Each answer returns whether the requester
/// received it: `false` (or `Err` with the reply back) when it had stopped waiting (its
/// context ended, or its future was dropped), which the caller may count as a late reply.
pub struct Responder<R> {
    tx: oneshot::Sender<Answer<R>>,
    deadline: Option<Instant>,
}

impl<R> Responder<R> {
    /// Answers with `reply`: the requester's `request` returns `Ok(reply)`.
    ///
    /// # Errors
    ///
    /// The reply back, if the requester had stopped waiting.
    pub fn reply(self, reply: R) -> Result<(), R> {
        self.tx
            .send(Answer::Reply(reply))
            .map_err(|answer| match answer {
                Answer::Reply(reply) => reply,
                // Sent a reply: a reply comes back.
                Answer::Failed(_) | Answer::TimedOut => unreachable!("the answer sent was a reply"),
            })
    }

    /// Answers with a failure: the requester receives [`RequestError::Failed`] with
    /// `error`'s text. False if it had stopped waiting.
    pub fn fail(self, error: impl fmt::Display) -> bool {
        self.tx.send(Answer::Failed(error.to_string())).is_ok()
    }

    /// Answers that the answer did not come in time (for instance a forwarded request whose
    /// own deadline passed first): the requester receives
    /// [`RequestError::Timeout`]`(None)`. False if it had stopped waiting.
    pub fn time_out(self) -> bool {
        self.tx.send(Answer::TimedOut).is_ok()
    }

    /// True if the requester stopped waiting: an answer would be dropped.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Waits until the requester stops waiting (its context ended, or its future was
    /// dropped), so a forwarder can give up early.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn closed(&mut self) {
        self.tx.closed().await;
    }

    /// The deadline of the requester's context, if it has one (as [`Request::deadline`]).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

impl<R> fmt::Debug for Responder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("closed", &self.is_closed())
            .field("deadline", &self.deadline)
            .finish()
    }
}
