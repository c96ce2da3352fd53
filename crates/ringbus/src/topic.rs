//! One topic: one ring, its writer shared by publishers in turn, its subscribers.
//!
//! Publishers take turns at the ring's single [`Writer`] through an async mutex: the
//! critical section is a room check, a slot write and a cursor store; a publisher that finds
//! the ring full waits for room *holding* the lock, so publishes stay in the order they began,
//! and the publishers behind it wait parked on the mutex, not spinning.
//!
//! That wait for room (and an unbuffered topic's wait for its message to be handled) is the
//! only time a publisher holds the lock across a suspension, and it marks the lock *parked*
//! for as long (`WriterGuard::park`). So a holder that is not parked is running and lets go
//! within its critical section, and `try_publish`, which cannot suspend, waits for it; a
//! parked holder means the ring is full, and `try_publish` says `Full` at once. Every new
//! await under the lock must go through `park`, or `try_publish` could wait for a task that
//! is not running (on a current-thread runtime: forever).

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use ringbus_core::{AllocError, Builder, Full, Stage, Writer};
use tokio::time::Instant;

use crate::bus::{Bus, BusState, Unresolved};
use crate::context::Context;
use crate::coop;
use crate::delivery::{Delivery, Tracker};
use crate::error::{Error, PublishError, Unpublished};
use crate::handler::{BatchHandler, Handler, SubscribeOptions};
use crate::lock::{WriterGuard, WriterLock};
use crate::observe::{self, TopicMetrics};
use crate::parent::Parents;
use crate::stats::{SubscriberStats, TopicStats, Unhandled};
use crate::subscriber::{self, SubShared, Subscription};

pub(crate) struct TopicInner<T> {
    pub(crate) name: Arc<str>,
    /// The capacity asked for; 0 makes the topic unbuffered (a ring of one slot, and a
    /// publish waits until every subscriber has handled its message).
    capacity: usize,
    /// `None` once the bus closed this topic.
    writer: WriterLock<Option<Writer<T>>>,
    stage: Stage<T>,
    subscribers: Mutex<Vec<Arc<SubShared>>>,
    pub(crate) state: Arc<BusState>,
    /// Delivery receipts (`publish_tracked`).
    tracker: Arc<Tracker>,
    /// The parent spans given to publishes (`Context::with_parent`), shared with the
    /// subscribers (see `parent`).
    parents: Arc<Parents>,
    /// Messages published while the topic had no subscriber (they reach nobody). Written
    /// under the writer lock, read by `stats`: Relaxed, it is a counter.
    unrouted: AtomicU64,
    /// Set by the first unrouted publish, which logs it (a `warn` event): once per topic.
    unrouted_logged: AtomicBool,
    /// Its metric handles (feature `metrics`; nothing without it).
    metrics: TopicMetrics,
}

/// The type-erased face of a topic, for the registry, `stats` and `close`.
pub(crate) trait AnyTopic: Send + Sync + 'static {
    fn message_type(&self) -> &'static str;
    fn published(&self) -> u64;
    /// The subscriber tasks (not the streams: `close` does not wait for those).
    fn subscribers(&self) -> Vec<Arc<SubShared>>;
    fn stats(&self) -> TopicStats;
    /// Closes the ring (drops the writer), waiting for the publisher holding it, if any.
    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
    /// Takes the writer once and lets it go: called by `close` after it set `closed`, so
    /// that every publish from outside the handlers that passed its closed check (made
    /// holding the writer: see `admit`) has made its message visible.
    fn wait_publishers(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
    /// Stops every subscriber still running (`SubShared::stop`), and says which ones are
    /// still in a poll. What each left is counted by the caller once the topics are closed
    /// (`Bus::close_with`): a handler met in its call may yet finish it, and publish.
    fn stop_subscribers(&self) -> Vec<(Arc<SubShared>, Unhandled)>;
}

impl<T: Send + Sync + 'static> TopicInner<T> {
    /// A topic with its ring, or the error of a ring that cannot be allocated (see
    /// [`RingTooLarge`](crate::RingTooLarge)). The ring starts with empty slots: what is not
    /// published to yet costs address space, not memory.
    pub(crate) fn new(
        name: Arc<str>,
        capacity: usize,
        state: Arc<BusState>,
    ) -> Result<Self, AllocError> {
        let (writer, stage) = Builder::new(capacity.max(1))
            .spin(state.spin)
            .max_readers(state.max_subscribers)
            .try_build_lazy()?;
        Ok(Self {
            capacity,
            parents: Arc::new(Parents::new(writer.capacity())),
            writer: WriterLock::new(Some(writer)),
            stage,
            subscribers: Mutex::new(Vec::new()),
            tracker: Arc::new(Tracker::new(state.clone())),
            state,
            unrouted: AtomicU64::new(0),
            unrouted_logged: AtomicBool::new(false),
            metrics: TopicMetrics::new(&name),
            name,
        })
    }

    /// True when no subscriber would see a message published now. One Relaxed load of the
    /// ring's reader count, under the writer lock: a subscriber whose `subscribe` returned
    /// before the publish began is counted (same thread: program order; another thread: the
    /// synchronisation that ordered the two). A subscriber joining during the publish may or
    /// may not be, as it may or may not see the message.
    #[inline]
    fn unrouted_now(&self) -> bool {
        self.stage.readers() == 0
    }

    /// A publish of `n` messages found no subscriber: refused with the message back in strict
    /// mode, else counted (and logged at `warn`, once per topic: most often the topic's name
    /// is misspelled) and let through. Off the hot path.
    #[cold]
    #[inline(never)]
    fn unrouted<M>(&self, msgs: M, n: u64) -> Result<M, PublishError<M>> {
        if self.state.strict {
            return Err(self.no_subscriber(msgs));
        }
        self.unrouted.fetch_add(n, Ordering::Relaxed);
        self.metrics.unrouted(n);
        if !self.unrouted_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "ringbus::unrouted",
                topic = %self.name,
                "ringbus: a message was published to topic \"{}\", which has no subscriber: \
                 nobody handles it (a misspelled topic?). Counted in \
                 stats().topics[..].unrouted; logged once per topic. Subscribe to the topic, \
                 or refuse such publishes with Bus::builder().strict(true); to silence this \
                 warning, filter out its target, `ringbus::unrouted` \
                 (RUST_LOG=warn,ringbus::unrouted=off)",
                self.name
            );
        }
        Ok(msgs)
    }

    /// What a strict bus says of a publish to this topic while it has no subscriber.
    #[cold]
    fn no_subscriber<M>(&self, msgs: M) -> PublishError<M> {
        PublishError::NoSubscriber(msgs, self.name.clone())
    }

    /// An unrouted publish is visible: wakes `close` and `wait_idle` to look again. Their
    /// pass saw the topic's count move, which no subscriber's progress will follow (nobody
    /// handles the message), so on an otherwise quiet bus they would wait for good. After the
    /// cursor store, so that a look after the wake-up sees the count stand still.
    #[cold]
    #[inline(never)]
    fn unrouted_published(&self) {
        self.state.progressed();
    }

    fn is_unbuffered(&self) -> bool {
        self.capacity == 0
    }

    /// Publishes `msg` (see `Bus::publish_with`): a [`Publish`] whose first poll publishes
    /// at once when nothing stands in the way, and goes on as [`publish_slow`] otherwise.
    ///
    /// [`publish_slow`]: Self::publish_slow
    #[inline]
    pub(crate) fn publish_with<'a>(
        &'a self,
        ctx: &'a Context,
        msg: T,
    ) -> impl Future<Output = Result<(), PublishError<T>>> + Send + 'a
    where
        T: Send + Sync + 'static,
    {
        Self::publish_to(self, ctx, msg)
    }

    /// `Bus::publish_with`: [`publish_with`](Self::publish_with) on the topic `name` of
    /// `bus`, looked up (and made if need be) by the future's first poll, not here: nothing
    /// happens until the future is polled, as with the `async fn` it replaces. A topic of
    /// another type is an `Err(TypeMismatch)` that gives the message back.
    #[inline]
    pub(crate) fn publish_named<'a>(
        bus: &'a Bus,
        ctx: &'a Context,
        name: &'a str,
        msg: T,
    ) -> impl Future<Output = Result<(), PublishError<T>>> + Send + 'a
    where
        T: Send + Sync + 'static,
    {
        Self::publish_to(Named { bus, name }, ctx, msg)
    }

    /// The [`Publish`] of `msg` to `topic` (see `PublishTo`).
    #[inline(always)]
    fn publish_to<'a, R>(
        topic: R,
        ctx: &'a Context,
        msg: T,
    ) -> impl Future<Output = Result<(), PublishError<T>>> + Send + 'a
    where
        T: Send + Sync + 'static,
        R: PublishTo<'a, T> + Send + 'a,
    {
        Publish::First {
            topic,
            ctx,
            msg,
            slow: Self::publish_slow,
        }
    }

    /// The first poll of a [`Publish`]: publishes `msg` now if the writer is free, the ring
    /// has room, the task has budget and nothing asks for more (a parent span, no
    /// subscriber, an unbuffered topic), and answers at once a publish the bus or `ctx`
    /// refuses. Otherwise `Err`, with the message and, if the ring was found full, the
    /// writer: the publish goes on as `publish_slow`, which waits for room at once with the
    /// writer it is handed (the unit of budget spent, as `publish_slow` spends it before it
    /// takes the writer), or else looks at everything again (nothing done, the unit given
    /// back).
    ///
    /// Handing the writer on matters: with a fresh start, every publish into a full ring
    /// scanned the readers here and again in `publish_slow`. Into a ring that a hundred
    /// subscribers keep full (`publish/100`) that made a publish about 40% slower (1.50–1.52
    /// µs against 1.06–1.08 µs, five alternated quick runs). And a fast path that only
    /// used the room the writer knew of, without a scan, fell to the slow path whenever a
    /// subscriber lagged near a full ring (`publish/1/resolved` 54–59 ns against 45–53 ns
    /// before the fast path).
    #[inline(always)]
    fn publish_now<'a>(
        &'a self,
        ctx: &Context,
        msg: T,
        cx: &mut std::task::Context<'_>,
    ) -> Result<Result<(), PublishError<T>>, NotNow<'a, T>> {
        if ctx.live_parent().is_some() || self.is_unbuffered() || self.unrouted_now() {
            return Err((msg, None));
        }
        if let Some(refused) = self.refused(ctx) {
            return Ok(Err(refused.with(msg)));
        }
        // Given back (dropped without `made_progress`) if `publish_slow` starts over; spent
        // once this publish holds the writer, whether it publishes now or waits for room.
        let Poll::Ready(unit) = tokio::task::coop::poll_proceed(cx) else {
            return Err((msg, None));
        };
        let Ok(Some(mut guard)) = self.admit() else {
            return Err((msg, None));
        };
        let Some(writer) = guard.as_mut() else {
            return Err((msg, None));
        };
        unit.made_progress();
        match writer.try_publish(msg) {
            Ok(()) => {
                self.metrics.published(1);
                Ok(Ok(()))
            }
            Err(Full(msg)) => Err((msg, Some(guard))),
        }
    }

    /// `publish_with` past its first poll's fast path: waits for the budget, the writer and
    /// room, as each requires. `full`: the fast path found the ring full holding this
    /// writer (and spent the unit of budget): the publish waits for room at once.
    async fn publish_slow<'a>(
        &'a self,
        ctx: &'a Context,
        msg: T,
        full: Option<Guard<'a, T>>,
    ) -> Result<(), PublishError<T>> {
        let (mut guard, mut msg, unrouted, mut found_full) = match full {
            Some(guard) => (guard, msg, false, true),
            None => {
                if let Some(parent) = ctx.live_parent() {
                    return self.publish_parented(ctx, parent, msg).await;
                }
                if let Some(refused) = self.refused(ctx) {
                    return Err(refused.with(msg));
                }
                // Yields here, holding nothing, once the task's budget is spent (see `coop`).
                coop::proceed().await;
                let guard = match self.admit() {
                    Ok(Some(guard)) => guard,
                    Ok(None) => match self.admit_wait(ctx).await {
                        Ok(guard) => guard,
                        Err(refused) => return Err(refused.with(msg)),
                    },
                    Err(refused) => return Err(refused.with(msg)),
                };
                let unrouted = self.unrouted_now();
                let msg = if unrouted {
                    self.unrouted(msg, 1)?
                } else {
                    msg
                };
                (guard, msg, unrouted, false)
            }
        };
        loop {
            if !found_full {
                let Some(writer) = guard.as_mut() else {
                    return Err(PublishError::Closed(msg));
                };
                match writer.try_publish(msg) {
                    Ok(()) => {
                        self.metrics.published(1);
                        if unrouted {
                            self.unrouted_published();
                        }
                        break;
                    }
                    Err(Full(back)) => msg = back,
                }
            }
            found_full = false;
            // Full: wait for room (or the end of the context, or the close).
            match self.wait_room(&mut guard, ctx).await {
                // The bus may have closed while we waited: a publisher from outside the
                // handlers must not slip in after it did.
                Wait::Room if self.state.refuses() => return Err(PublishError::Closed(msg)),
                Wait::Room => {}
                Wait::Cancelled => return Err(PublishError::Cancelled(msg)),
                Wait::Closed => return Err(PublishError::Closed(msg)),
            }
        }
        if self.is_unbuffered() {
            self.wait_handled(&mut guard).await;
        }
        Ok(())
    }

    /// Publishes with a receipt: see [`Delivery`]. The receipt is registered under the writer
    /// lock, before the message is written, and given up again if it is not written.
    ///
    /// `publish_with` repeats `write_locked` inline rather than calling it: the call (a second
    /// state machine) cost every publish 34 instructions in the cost gate.
    pub(crate) async fn publish_tracked(
        &self,
        ctx: &Context,
        msg: T,
    ) -> Result<Delivery, PublishError<T>> {
        let (mut guard, position, msg) = self.locked_for(ctx, msg).await?;
        // The subscribers present as the publish begins, taken holding the writer: one that
        // ended before is not one of them (the list keeps ended subscribers for `stats()`
        // until the next subscribe; counted, each would have been a miss). One that ends
        // while the publish waits for room still counts, as missed if it never handled it.
        let subscribers = self
            .lock_subscribers()
            .iter()
            .filter(|s| s.start <= position && !s.done.is_cancelled())
            .cloned()
            .collect();
        let watch = Watch::new(&self.tracker, position);
        let parent = ctx
            .live_parent()
            .map(|p| self.parents.register(position, p));
        self.write_locked(&mut guard, ctx, msg).await?;
        if let Some(parent) = parent {
            parent.written(self.stage.readers());
        }
        drop(guard);
        watch.keep();
        Ok(Delivery::new(self.tracker.clone(), position, subscribers))
    }

    /// `publish_with` of a message whose handler spans have a parent (`Context::with_parent`):
    /// the parent is registered under the writer lock, before the message is written (see
    /// `parent`). Off the hot path: `publish_with` only branches here.
    async fn publish_parented(
        &self,
        ctx: &Context,
        parent: &tracing::Span,
        msg: T,
    ) -> Result<(), PublishError<T>> {
        let (mut guard, position, msg) = self.locked_for(ctx, msg).await?;
        let registered = self.parents.register(position, parent);
        self.write_locked(&mut guard, ctx, msg).await?;
        registered.written(self.stage.readers());
        Ok(())
    }

    /// The start of the publishes off the hot path: refused at once or admitted (see
    /// `refused`, `admitted`), the writer locked and open, the unrouted publish counted (or
    /// refused). Returns the guard, the position the message will have, and the message.
    async fn locked_for(
        &self,
        ctx: &Context,
        msg: T,
    ) -> Result<(Guard<'_, T>, u64, T), PublishError<T>> {
        if let Some(refused) = self.refused(ctx) {
            return Err(refused.with(msg));
        }
        coop::proceed().await;
        let mut guard = match self.admitted(ctx).await {
            Ok(guard) => guard,
            Err(refused) => return Err(refused.with(msg)),
        };
        let Some(writer) = guard.as_mut() else {
            return Err(PublishError::Closed(msg));
        };
        let position = writer.published();
        let msg = if self.unrouted_now() {
            self.unrouted(msg, 1)?
        } else {
            msg
        };
        Ok((guard, position, msg))
    }

    /// The room loop of a publish, with the writer locked: as in `publish_with`.
    async fn write_locked(
        &self,
        guard: &mut Guard<'_, T>,
        ctx: &Context,
        mut msg: T,
    ) -> Result<(), PublishError<T>> {
        loop {
            let Some(writer) = guard.as_mut() else {
                return Err(PublishError::Closed(msg));
            };
            match writer.try_publish(msg) {
                Ok(()) => {
                    self.metrics.published(1);
                    if self.unrouted_now() {
                        self.unrouted_published();
                    }
                    break;
                }
                Err(Full(back)) => msg = back,
            }
            match self.wait_room(guard, ctx).await {
                Wait::Room if self.state.refuses() => return Err(PublishError::Closed(msg)),
                Wait::Room => {}
                Wait::Cancelled => return Err(PublishError::Cancelled(msg)),
                Wait::Closed => return Err(PublishError::Closed(msg)),
            }
        }
        if self.is_unbuffered() {
            self.wait_handled(guard).await;
        }
        Ok(())
    }

    /// Publishes `msg` if the topic has room now, without suspending.
    ///
    /// `Full` means the slowest subscriber's queue is full, and nothing else (see `lock`):
    /// - The writer free, it is the ring's answer.
    /// - Held by a publisher that is running (a few instructions of ours, or user code we run
    ///   there), we wait for it: spinning, then yielding the thread, never suspending.
    ///   Giving up after a few spins said `Full` whenever a holder was preempted inside the
    ///   lock, on a topic with room.
    /// - Held by a publisher parked waiting for room (the only way a holder suspends), the
    ///   queue is full, counting that publisher's message, which goes in first: `Full`.
    /// - Held by this thread (user code run under the writer, such as a message's `Drop` as
    ///   its slot is reused or a `publish_batch` iterator, publishing to the same topic): the
    ///   room is the outer publish's to fill, and waiting would never end: `Full`.
    pub(crate) fn try_publish(&self, msg: T) -> Result<(), PublishError<T>> {
        let Some(mut guard) = self.writer.lock_unless_parked() else {
            if self.state.refuses() {
                return Err(PublishError::Closed(msg));
            }
            self.metrics.full();
            return Err(PublishError::Full(msg));
        };
        // Under the writer, as in `admit`.
        if self.state.refuses() {
            return Err(PublishError::Closed(msg));
        }
        let Some(writer) = guard.as_mut() else {
            return Err(PublishError::Closed(msg));
        };
        let unrouted = self.unrouted_now();
        let msg = if unrouted {
            self.unrouted(msg, 1)?
        } else {
            msg
        };
        match writer.try_publish(msg) {
            Ok(()) => {
                self.metrics.published(1);
                if unrouted {
                    self.unrouted_published();
                }
                Ok(())
            }
            Err(Full(msg)) => {
                self.metrics.full();
                Err(PublishError::Full(msg))
            }
        }
    }

    pub(crate) async fn publish_batch<I>(
        &self,
        ctx: &Context,
        msgs: I,
    ) -> Result<u64, PublishError<Unpublished<I::IntoIter>>>
    where
        I: IntoIterator<Item = T>,
    {
        let mut msgs = msgs.into_iter();
        if self.is_unbuffered() {
            // One message at a time, each taken from the iterator before it is refused or
            // published: a refused one goes back in front of the rest.
            let mut n = 0;
            loop {
                let Some(msg) = msgs.next() else {
                    return Ok(n);
                };
                if let Err(e) = self.publish_with(ctx, msg).await {
                    return Err(e.map(|refused| Unpublished::with_refused(refused, msgs)));
                }
                n += 1;
            }
        }
        self.publish_chunks(ctx, Unpublished::new(msgs)).await
    }

    /// `publish_batch` on a buffered topic: chunks of what fits, each with one cursor store.
    /// It takes a message from the iterator only where there is room for it (and budget to
    /// pay for it), except to learn whether a chunk that filled the ring was the last: that
    /// message goes back in front of the rest (`Unpublished::put_back`), so an error gives back
    /// every message not published, in order.
    async fn publish_chunks<I: Iterator<Item = T>>(
        &self,
        ctx: &Context,
        mut msgs: Unpublished<I>,
    ) -> Result<u64, PublishError<Unpublished<I>>> {
        let mut total = 0;
        // Messages the budget units already spent pay for (see `coop`).
        let mut credit = 0;
        loop {
            if let Some(refused) = self.refused(ctx) {
                return Err(refused.with(msgs));
            }
            if credit == 0 {
                // Yields here, holding nothing, once the task's budget is spent.
                coop::proceed().await;
                credit = coop::PER_UNIT;
            }
            let mut guard = match self.admitted(ctx).await {
                Ok(guard) => guard,
                Err(refused) => return Err(refused.with(msgs)),
            };
            loop {
                let Some(writer) = guard.as_mut() else {
                    return Err(PublishError::Closed(msgs));
                };
                // A strict bus refuses what is left of the batch; otherwise each chunk
                // published while nobody subscribes is counted.
                let unrouted = self.unrouted_now();
                if unrouted && self.state.strict {
                    return Err(self.no_subscriber(msgs));
                }
                let room = writer.remaining() as u64;
                if room > 0 {
                    // Takes at most `room` messages from the iterator, with one cursor store,
                    // paying for them as it goes; stops early when the budget is spent.
                    let (n, spent) = poll_fn(|cx| {
                        let mut budgeted = coop::Budgeted::new(&mut msgs, cx, &mut credit);
                        let n = writer.try_publish_batch(&mut budgeted);
                        Poll::Ready((n, budgeted.spent))
                    })
                    .await;
                    total += n;
                    self.metrics.published(n);
                    if unrouted && n > 0 {
                        let _ = self.unrouted((), n);
                        self.unrouted_published();
                    }
                    if spent {
                        // Let go of the writer, then yield (other publishes may land
                        // between this batch's chunks).
                        break;
                    }
                    if n < room {
                        return Ok(total); // the iterator ran dry
                    }
                    // The chunk filled the ring: wait for room only if there is more to
                    // publish (a batch that fits exactly is done). The look ahead is paid for
                    // as any message taken (then credited back: it is taken again later).
                    let (next, spent) = poll_fn(|cx| {
                        let mut budgeted = coop::Budgeted::new(&mut msgs, cx, &mut credit);
                        let next = budgeted.next();
                        Poll::Ready((next, budgeted.spent))
                    })
                    .await;
                    match next {
                        Some(next) => {
                            msgs.put_back(next);
                            credit += 1;
                        }
                        None if spent => break, // let go of the writer, then yield
                        None => return Ok(total),
                    }
                    continue;
                }
                match self.wait_room(&mut guard, ctx).await {
                    Wait::Room if self.state.refuses() => return Err(PublishError::Closed(msgs)),
                    Wait::Room => {}
                    Wait::Cancelled => return Err(PublishError::Cancelled(msgs)),
                    Wait::Closed => return Err(PublishError::Closed(msgs)),
                }
            }
        }
    }

    /// Refuses a publish at once, before it spends anything: if the bus refuses it, `ctx`
    /// is done, or `ctx` has a deadline that no runtime here can time. Every publish starts
    /// here.
    #[inline]
    fn refused(&self, ctx: &Context) -> Option<Refused> {
        if self.state.refuses() {
            return Some(Refused::Closed);
        }
        if !ctx.is_never() {
            if ctx.is_done() {
                self.cancelled(Duration::ZERO);
                return Some(Refused::Cancelled);
            }
            if !ctx.timer_reachable() {
                return Some(Refused::NoRuntime);
            }
        }
        None
    }

    /// A publish was cancelled through its context after waiting `waited`: counted and
    /// logged (see `observe`).
    #[cold]
    #[inline(never)]
    fn cancelled(&self, waited: Duration) {
        self.metrics.cancelled();
        observe::cancelled(&self.name, waited);
    }

    /// Takes the writer if it is free (`Ok(Some)`), refusing if the bus now refuses the
    /// publish; `Ok(None)`: wait for it with `admit_wait`. Every publish goes through here,
    /// after `refused`. Split in two so the uncontended publish runs no second state machine
    /// (the cost gate sees one).
    ///
    /// The closed check that counts is made holding the writer, here and in `admit_wait`:
    /// `close` passes through every writer once after it set `closed` (`wait_publishers`),
    /// so a publisher from outside the handlers that got in before has made its message
    /// visible by then, and one that comes after sees `closed`. (Checked before the writer
    /// only, a publisher could pass the check, stall, and write after the drain had found
    /// everything handled: its message then reached no chained topic.)
    #[inline]
    fn admit(&self) -> Result<Option<Guard<'_, T>>, Refused> {
        self.writer
            .try_lock_unless(|| self.state.refuses())
            .map_err(|_| Refused::Closed)
    }

    /// `admit`, then `admit_wait` if the writer is taken: for the publishes off the hot path.
    async fn admitted(&self, ctx: &Context) -> Result<Guard<'_, T>, Refused> {
        match self.admit()? {
            Some(guard) => Ok(guard),
            None => self.admit_wait(ctx).await,
        }
    }

    /// Waits for the writer (until `ctx` ends), then refuses if the bus closed meanwhile.
    ///
    /// A holder that is not parked is running its few instructions on another thread (see
    /// the module docs), so it is waited for there, as `try_publish` does: parking the task
    /// and being woken by the unlock would cost a task switch per contended publish. Only a
    /// parked holder (the ring is full), one on this thread, or a queue already waiting (first
    /// come, first served) is waited for asleep, in the lock's queue.
    async fn admit_wait(&self, ctx: &Context) -> Result<Guard<'_, T>, Refused> {
        let guard = if let Some(guard) = self.writer.lock_if_running() {
            guard
        } else if ctx.is_never() {
            self.writer.lock().await
        } else {
            let since = Instant::now();
            tokio::select! {
                biased;
                _ = ctx.done() => {
                    self.cancelled(since.elapsed());
                    return Err(Refused::Cancelled);
                }
                guard = self.writer.lock() => guard,
            }
        };
        if self.state.refuses() {
            return Err(Refused::Closed);
        }
        Ok(guard)
    }

    /// Waits for room in the ring, the end of `ctx`, or the bus closing (which only stops
    /// publishers from outside the handlers: see `BusState::refuses`). The writer stays
    /// locked, marked parked: `try_publish` meanwhile says `Full` at once.
    ///
    /// Counts the topic found full, and records the wait (room found, or cancelled) with how
    /// long it took (see `observe`). Only ever called on a full ring, so the clock is read
    /// off the hot path.
    async fn wait_room(&self, guard: &mut Guard<'_, T>, ctx: &Context) -> Wait {
        self.metrics.full();
        let since = Instant::now();
        let wait = self.wait_room_untimed(guard, ctx).await;
        match wait {
            Wait::Room => observe::waited(&self.name, since.elapsed()),
            Wait::Cancelled => self.cancelled(since.elapsed()),
            Wait::Closed => {}
        }
        wait
    }

    /// `wait_room` without the count and the event.
    async fn wait_room_untimed(&self, guard: &mut Guard<'_, T>, ctx: &Context) -> Wait {
        let mut parked = guard.park();
        let Some(writer) = parked.as_mut() else {
            return Wait::Closed;
        };
        let refused = async {
            self.state.closing.cancelled().await;
            if !self.state.refuses() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            biased;
            _ = refused => Wait::Closed,
            _ = ctx.done() => Wait::Cancelled,
            _ = writer.ready(1) => Wait::Room,
        }
    }

    /// An unbuffered topic's publish, its message in: waits until every subscriber has
    /// handled it (its one slot is free again). Not cancellable by the context: the message
    /// will be handled, so the publish has happened. A close stops the wait (the drain
    /// handles it). The ring is full meanwhile, so the writer stays locked, marked parked.
    async fn wait_handled(&self, guard: &mut Guard<'_, T>) {
        let mut parked = guard.park();
        let Some(writer) = parked.as_mut() else {
            return;
        };
        tokio::select! {
            biased;
            _ = self.state.closing.cancelled() => {}
            _ = writer.ready(1) => {}
        }
    }

    pub(crate) fn subscribe<H: Handler<T>>(
        self: &Arc<Self>,
        mut options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error> {
        // Checked before `prepare` takes the retry policy out of `options`: its backoff
        // sleeps on tokio's timer (`spawn` checks again, for the stall timeout, on every
        // route).
        self.state.stall_timeout(&options)?;
        // A retry policy or dead-letter topic wraps the handler (see `retry`); the plain
        // subscriber runs its handler as it is.
        if let Some(retry) = crate::retry::prepare::<T>(&mut options)? {
            return self.spawn(options, move |reader, sub| {
                subscriber::run(reader, retry.wrap(handler, sub.clone()), sub)
            });
        }
        self.spawn(options, move |reader, sub| {
            subscriber::run(reader, handler, sub)
        })
    }

    /// Subscribes the handler `make` builds from the subscriber's shared state (for wrappers
    /// that count in it, such as a replier: see `reply`). No retry wrapper: the caller
    /// refuses those options.
    pub(crate) fn subscribe_made<H, M>(
        self: &Arc<Self>,
        options: SubscribeOptions,
        make: M,
    ) -> Result<Subscription, Error>
    where
        H: Handler<T>,
        M: FnOnce(&Arc<SubShared>) -> H,
    {
        self.spawn(options, move |reader, sub| {
            let handler = make(&sub);
            subscriber::run(reader, handler, sub)
        })
    }

    pub(crate) fn subscribe_batch<H: BatchHandler<T>>(
        self: &Arc<Self>,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error> {
        if options.retry.is_some() || options.dead_letter.is_some() {
            return Err(Error::Unsupported(
                "batch subscribers do not retry: a retry policy or a dead-letter topic is for \
                 subscribers that handle one message at a time",
            ));
        }
        self.spawn(options, move |reader, sub| {
            subscriber::run_batch(reader, handler, sub)
        })
    }

    fn spawn<F, Fut>(
        self: &Arc<Self>,
        options: SubscribeOptions,
        task: F,
    ) -> Result<Subscription, Error>
    where
        F: FnOnce(ringbus_core::Reader<T>, Arc<SubShared>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let stall_timeout = self.state.stall_timeout(&options)?;
        if let Some(requested) = options.capacity {
            if requested != self.capacity {
                return Err(Error::CapacityMismatch {
                    topic: self.name.clone(),
                    capacity: self.capacity,
                    requested,
                });
            }
        }
        let (reader, sub) = self.join(options.name, stall_timeout, false)?;
        let handle = runtime.spawn(subscriber::Supervised {
            sub: sub.clone(),
            task: task(reader, sub.clone()),
        });
        let _ = sub.abort.set(handle.abort_handle());
        tracing::debug!(topic = %self.name, subscriber = %sub.name, "ringbus subscriber started");
        Ok(Subscription {
            sub,
            topic: self.clone(),
            task: handle,
        })
    }

    /// Joins a new subscriber (a task's or a stream's) to the ring and to the list `stats()`,
    /// `close` and receipts read: refused once the bus refuses publishes. `named` is the name
    /// asked for (else `<topic>#<id>`); `pull`: a stream's.
    pub(crate) fn join(
        &self,
        named: Option<String>,
        stall_timeout: Option<Duration>,
        pull: bool,
    ) -> Result<(ringbus_core::Reader<T>, Arc<SubShared>), Error> {
        if self.state.refuses() {
            return Err(Error::Closed);
        }
        let reader = self.stage.reader().map_err(|_| Error::TooManySubscribers {
            topic: self.name.clone(),
            max: self.state.max_subscribers,
        })?;
        let id = crate::bus::next_subscriber_id();
        let sub = SubShared::new(
            self.state.clone(),
            self.tracker.clone(),
            self.parents.clone(),
            id,
            named,
            self.name.clone(),
            reader.position(),
            stall_timeout,
        );
        let sub = Arc::new(if pull { sub.pulled() } else { sub });
        {
            // Finished subscribers are kept for `stats()` only until the next subscribe, so
            // churn does not grow the list without bound.
            let mut subscribers = self.lock_subscribers();
            subscribers.retain(|s| !s.done.is_cancelled());
            subscribers.push(sub.clone());
        }
        Ok((reader, sub))
    }

    /// The subscribers that would see a message published now: tasks and streams.
    pub(crate) fn subscriber_count(&self) -> usize {
        self.stage.readers()
    }

    fn lock_subscribers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<SubShared>>> {
        // The list is only pushed to and cloned; a panic cannot leave it inconsistent.
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The topic's writer, locked.
type Guard<'a, T> = WriterGuard<'a, Option<Writer<T>>>;

/// What `TopicInner::publish_now` hands `publish_slow` when it could not publish at once:
/// the message, and the writer if it found the ring full.
type NotNow<'a, T> = (T, Option<Guard<'a, T>>);

/// A receipt registered for a publish in progress: given up if the publish does not finish.
struct Watch<'a> {
    tracker: &'a Tracker,
    position: u64,
}

impl<'a> Watch<'a> {
    fn new(tracker: &'a Tracker, position: u64) -> Self {
        tracker.watch(position);
        Self { tracker, position }
    }

    /// The publish finished: the receipt is handed to a `Delivery`.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.tracker.unwatch(self.position);
    }
}

/// Why `admit` let a publish not in.
enum Refused {
    Closed,
    Cancelled,
    NoRuntime,
}

pin_project_lite::pin_project! {
    /// The future of [`TopicInner::publish_with`]. Not polled yet, it holds the message
    /// (`First`); its first poll publishes it at once when it can (`publish_now`), and
    /// otherwise makes `publish_slow`'s future (`slow`) and goes on with it (`Slow`).
    ///
    /// `R` is the topic as the first poll finds it (`PublishTo`): the topic itself, or, for
    /// `Bus::publish_with`, a name the first poll looks up (`Named`). By name, that replaced
    /// two `async fn`s around this future: `bus/publish_by_name1` 506 -> 456 instructions a
    /// message in the cost gate (and `bus/publish1` 336 -> 326, the compiler inlining the
    /// handle's first poll differently).
    ///
    /// A hand-written first step rather than an `async fn` all the way: on the hot path (a
    /// free writer and room) it spares the state machine's moves and drop. In the cost gate
    /// (`bus/publish1`), 377 instructions a message became 355, and 347 with the `Topic`
    /// handle's `publish` a plain function returning this future rather than an `async fn`
    /// around it (a second state machine).
    ///
    /// Cancel safe as `publish_slow` is: dropped in `First`, the message is dropped with it
    /// and no subscriber sees it; the first poll publishes it and returns `Ready`, or hands
    /// it to `slow` unpublished (with the writer, if it found the ring full: `slow` then
    /// waits for room as `publish_slow` always did after finding it full).
    #[project = PublishProj]
    #[project_replace = PublishReplace]
    pub(crate) enum Publish<'a, T, S, F, R = &'a TopicInner<T>> {
        First { topic: R, ctx: &'a Context, msg: T, slow: S },
        Slow { #[pin] fut: F },
        Done,
    }
}

/// The topic of a [`Publish`], as its first poll finds it: a topic already resolved (a
/// `Topic` handle's publish), or a name on a bus (`Bus::publish`), looked up then.
pub(crate) trait PublishTo<'a, T> {
    fn topic(self) -> Result<&'a TopicInner<T>, Unresolved>;
}

impl<'a, T> PublishTo<'a, T> for &'a TopicInner<T> {
    #[inline(always)]
    fn topic(self) -> Result<&'a TopicInner<T>, Unresolved> {
        Ok(self)
    }
}

/// A topic by name: `Bus::publish`'s.
pub(crate) struct Named<'a> {
    bus: &'a Bus,
    name: &'a str,
}

impl<'a, T: Send + Sync + 'static> PublishTo<'a, T> for Named<'a> {
    #[inline(always)]
    fn topic(self) -> Result<&'a TopicInner<T>, Unresolved> {
        self.bus.resolve::<T>(self.name, None)
    }
}

impl<'a, T, S, F, R> Future for Publish<'a, T, S, F, R>
where
    R: PublishTo<'a, T>,
    T: Send + Sync + 'static,
    S: FnOnce(&'a TopicInner<T>, &'a Context, T, Option<Guard<'a, T>>) -> F,
    F: Future<Output = Result<(), PublishError<T>>>,
{
    type Output = Result<(), PublishError<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        if let PublishProj::Slow { fut } = self.as_mut().project() {
            return fut.poll(cx);
        }
        let PublishReplace::First {
            topic,
            ctx,
            msg,
            slow,
        } = self.as_mut().project_replace(Publish::Done)
        else {
            panic!("`Publish` polled after it completed");
        };
        let topic = match topic.topic() {
            Ok(topic) => topic,
            Err(e) => return Poll::Ready(Err(e.refuse(msg))),
        };
        match topic.publish_now(ctx, msg, cx) {
            Ok(done) => Poll::Ready(done),
            Err((msg, full)) => {
                self.set(Publish::Slow {
                    fut: slow(topic, ctx, msg, full),
                });
                match self.project() {
                    PublishProj::Slow { fut } => fut.poll(cx),
                    _ => unreachable!("just set"),
                }
            }
        }
    }
}

impl Refused {
    /// The error that gives `msg` back.
    fn with<M>(self, msg: M) -> PublishError<M> {
        match self {
            Refused::Closed => PublishError::Closed(msg),
            Refused::Cancelled => PublishError::Cancelled(msg),
            Refused::NoRuntime => PublishError::NoRuntime(msg),
        }
    }
}

enum Wait {
    Room,
    Cancelled,
    Closed,
}

impl<T: Send + Sync + 'static> AnyTopic for TopicInner<T> {
    fn message_type(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn published(&self) -> u64 {
        self.stage.published()
    }

    fn subscribers(&self) -> Vec<Arc<SubShared>> {
        // Streams are pulled at their reader's pace: `close` neither waits for them nor
        // stops them (see `stream.rs`).
        let subscribers = self.lock_subscribers();
        subscribers.iter().filter(|s| !s.pull).cloned().collect()
    }

    fn stats(&self) -> TopicStats {
        let published = self.published();
        let subscribers = self.lock_subscribers().clone();
        TopicStats {
            name: self.name.to_string(),
            message_type: self.message_type(),
            capacity: self.capacity,
            published,
            unrouted: self.unrouted.load(Ordering::Relaxed),
            subscribers: subscribers
                .iter()
                .map(|s| s.stats(published))
                .collect::<Vec<SubscriberStats>>(),
        }
    }

    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            // Publishers waiting for room see `closing` and let go of the writer at once.
            *self.writer.lock().await = None;
        })
    }

    fn wait_publishers(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        // Publishers from outside waiting for room see `closing` and let go at once; one
        // from a handler keeps it until it has room, which the drain waits for anyway.
        Box::pin(async move {
            drop(self.writer.lock().await);
        })
    }

    fn stop_subscribers(&self) -> Vec<(Arc<SubShared>, Unhandled)> {
        self.subscribers()
            .into_iter()
            .filter(|s| !s.done.is_cancelled())
            .map(|s| {
                let unhandled = Unhandled {
                    topic: self.name.to_string(),
                    subscriber: s.name.to_string(),
                    messages: 0,
                    running: !s.stop(),
                };
                (s, unhandled)
            })
            .collect()
    }
}

impl<T> fmt::Debug for TopicInner<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topic")
            .field("name", &&*self.name)
            .field("type", &std::any::type_name::<T>())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}
