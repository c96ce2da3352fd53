//! Every publish route of a topic: the hand-written first poll of `publish` ([`Publish`]),
//! the waits for the writer and for room, `try_publish`, receipts, parented publishes and
//! batches (see the topic's module docs for the writer's protocol).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ringbus_core::Full;
use tokio::time::Instant;

use super::{Guard, Slot, TopicInner};
use crate::context::Context;
use crate::coop;
use crate::delivery::Delivery;
use crate::error::{PublishError, Unpublished, Unresolved};
use crate::observe;
use crate::shared::Tracker;

impl<T: Send + Sync + 'static> TopicInner<T> {
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

    /// The [`Publish`] of `msg` to `topic` (see `PublishTo`).
    #[inline]
    pub(crate) fn publish_to<'a, R>(
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
    /// The writer is handed on so that a publish into a full ring scans the readers once,
    /// not here and again in `publish_slow`. And `try_publish` here scans the readers when
    /// the room the writer knew of is spent, so a subscriber lagging near a full ring does
    /// not send every publish down the slow path.
    #[inline]
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
        let Some(writer) = guard.open() else {
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
        let (mut guard, msg, unrouted) = match full {
            Some(mut guard) => {
                if let Err(refused) = self.wait_room(&mut guard, ctx).await {
                    return Err(refused.with(msg));
                }
                (guard, msg, false)
            }
            None => {
                if let Some(parent) = ctx.live_parent() {
                    return self.publish_parented(ctx, parent, msg).await;
                }
                let (guard, _, msg, unrouted) = self.locked_for(ctx, msg).await?;
                (guard, msg, unrouted)
            }
        };
        self.write_locked(&mut guard, ctx, msg, unrouted).await
    }

    /// Publishes with a receipt: see [`Delivery`]. The receipt is registered under the writer
    /// lock, before the message is written, and given up again if it is not written.
    pub(crate) async fn publish_tracked(
        &self,
        ctx: &Context,
        msg: T,
    ) -> Result<Delivery, PublishError<T>> {
        let (mut guard, position, msg, unrouted) = self.locked_for(ctx, msg).await?;
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
            .and_then(|p| self.register_parent(position, p));
        self.write_locked(&mut guard, ctx, msg, unrouted).await?;
        if let Some(parent) = parent {
            parent.written(self.subscriber_count());
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
        let (mut guard, position, msg, unrouted) = self.locked_for(ctx, msg).await?;
        let registered = self.register_parent(position, parent);
        self.write_locked(&mut guard, ctx, msg, unrouted).await?;
        if let Some(registered) = registered {
            registered.written(self.subscriber_count());
        }
        Ok(())
    }

    /// Registers `parent` for the message about to be written at `position`, holding the
    /// writer; `None` while the topic has no ring (no subscriber will see the message).
    fn register_parent(
        &self,
        position: u64,
        parent: &tracing::Span,
    ) -> Option<crate::parent::Registered<'_>> {
        let ring = self.ring()?;
        Some(ring.parents.register(position, parent))
    }

    /// The start of a publish off the fast path: refused at once or admitted (see `refused`,
    /// `admitted`), the budget spent, the writer locked and open, the unrouted publish
    /// counted (or refused). Returns the guard, the position the message will have, the
    /// message, and whether the topic had no subscriber.
    async fn locked_for(
        &self,
        ctx: &Context,
        msg: T,
    ) -> Result<(Guard<'_, T>, u64, T, bool), PublishError<T>> {
        if let Some(refused) = self.refused(ctx) {
            return Err(refused.with(msg));
        }
        // Yields here, holding nothing, once the task's budget is spent (see `coop`).
        coop::proceed().await;
        let mut guard = match self.admitted(ctx).await {
            Ok(guard) => guard,
            Err(refused) => return Err(refused.with(msg)),
        };
        let position = match &mut *guard {
            Slot::Open(writer) => writer.published(),
            Slot::Idle => self.unrouted.load(Ordering::Relaxed),
            Slot::Closed => return Err(PublishError::Closed(msg)),
        };
        let unrouted = self.unrouted_now();
        let msg = if unrouted {
            self.unrouted(msg, 1)?
        } else {
            msg
        };
        Ok((guard, position, msg, unrouted))
    }

    /// Writes `msg` with the writer locked, waiting for room as long as it takes (see
    /// `wait_room`); then, on an unbuffered topic, waits until it is handled. `unrouted`: the
    /// topic had no subscriber (its count moves with nobody to follow it).
    async fn write_locked(
        &self,
        guard: &mut Guard<'_, T>,
        ctx: &Context,
        mut msg: T,
        unrouted: bool,
    ) -> Result<(), PublishError<T>> {
        loop {
            match self.write(guard, msg) {
                Ok(()) => {
                    self.metrics.published(1);
                    if unrouted {
                        self.unrouted_published();
                    }
                    break;
                }
                Err(Written::Full(back)) => msg = back,
                Err(Written::Closed(back)) => return Err(PublishError::Closed(back)),
            }
            if let Err(refused) = self.wait_room(guard, ctx).await {
                return Err(refused.with(msg));
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
        if matches!(*guard, Slot::Closed) {
            return Err(PublishError::Closed(msg));
        }
        let unrouted = self.unrouted_now();
        let msg = if unrouted {
            self.unrouted(msg, 1)?
        } else {
            msg
        };
        match self.write(&mut guard, msg) {
            Ok(()) => {
                self.metrics.published(1);
                if unrouted {
                    self.unrouted_published();
                }
                Ok(())
            }
            Err(Written::Full(msg)) => {
                self.metrics.full();
                Err(PublishError::Full(msg))
            }
            Err(Written::Closed(msg)) => Err(PublishError::Closed(msg)),
        }
    }

    /// Writes `msg` into the ring if it has room, holding the writer. Without a ring (no
    /// subscriber has joined yet) nobody can see it: it is dropped, counted as published by
    /// the caller's `unrouted`.
    fn write(&self, guard: &mut Guard<'_, T>, msg: T) -> Result<(), Written<T>> {
        match &mut **guard {
            Slot::Open(writer) => writer
                .try_publish(msg)
                .map_err(|Full(msg)| Written::Full(msg)),
            Slot::Idle => {
                drop(msg);
                Ok(())
            }
            Slot::Closed => Err(Written::Closed(msg)),
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
                if matches!(*guard, Slot::Closed) {
                    return Err(PublishError::Closed(msgs));
                }
                // A strict bus refuses what is left of the batch; otherwise each chunk
                // published while nobody subscribes is counted.
                let unrouted = self.unrouted_now();
                if unrouted && self.state.strict {
                    return Err(self.no_subscriber(msgs));
                }
                // Without a ring (no subscriber yet), room for everything: dropped unseen.
                let room = guard.open().map_or(u64::MAX, |w| w.remaining() as u64);
                if room > 0 {
                    // Takes at most `room` messages from the iterator, with one cursor store,
                    // paying for them as it goes; stops early when the budget is spent.
                    let (n, spent) = poll_fn(|cx| {
                        let mut budgeted = coop::Budgeted::new(&mut msgs, cx, &mut credit);
                        let n = match guard.open() {
                            Some(writer) => writer.try_publish_batch(&mut budgeted),
                            None => budgeted.by_ref().count() as u64,
                        };
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
                if let Err(refused) = self.wait_room(&mut guard, ctx).await {
                    return Err(refused.with(msgs));
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
    /// after `refused`. Split in two so the uncontended publish runs no second state
    /// machine.
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
    /// Every publish route waits for room here. `Err` if it has to give up: the context
    /// ended, or the bus closed (also while it waited: a publisher from outside the handlers
    /// must not slip in after that).
    ///
    /// Counts the topic found full, and records the wait (room found, or cancelled) with how
    /// long it took (see `observe`). Only ever called on a full ring, so the clock is read
    /// off the hot path.
    async fn wait_room(&self, guard: &mut Guard<'_, T>, ctx: &Context) -> Result<(), Refused> {
        self.metrics.full();
        let since = Instant::now();
        match self.wait_room_untimed(guard, ctx).await {
            Wait::Room => observe::waited(&self.name, since.elapsed()),
            Wait::Cancelled => {
                self.cancelled(since.elapsed());
                return Err(Refused::Cancelled);
            }
            Wait::Closed => return Err(Refused::Closed),
        }
        if self.state.refuses() {
            return Err(Refused::Closed);
        }
        Ok(())
    }

    /// `wait_room` without the count and the event.
    async fn wait_room_untimed(&self, guard: &mut Guard<'_, T>, ctx: &Context) -> Wait {
        // Only a ring's writer parks: a parked holder tells a first join that the ring exists
        // (see `TopicInner::make_ring`).
        if guard.open().is_none() {
            return Wait::Closed;
        }
        let mut parked = guard.park();
        let Some(writer) = parked.open() else {
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
        // Without a ring nobody handles the message; and only a ring's writer parks (see
        // `wait_room_untimed`).
        if guard.open().is_none() {
            return;
        }
        let mut parked = guard.park();
        let Some(writer) = parked.open() else {
            return;
        };
        // `close` sets `closed`, then wakes the ring's writer: checked after each poll of
        // `ready` that parked, the close is seen or its wake-up comes.
        let closed = poll_fn(|_| {
            if self.state.closed.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        tokio::select! {
            biased;
            _ = writer.ready(1) => {}
            _ = closed => {}
        }
    }
}

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

/// Why `TopicInner::write` did not write a message, giving it back.
enum Written<T> {
    Full(T),
    Closed(T),
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
    /// `Bus::publish_with`, a name the first poll looks up (`Named`), so that a publish by
    /// name runs this one future rather than an `async fn` around it.
    ///
    /// A hand-written first step rather than an `async fn` all the way: on the hot path (a
    /// free writer and room) it spares the state machine's moves and drop, which an
    /// interleaved measurement found worth more than 10% on `publish/1/resolved`
    /// (`docs/notes/publish-route-2026-12.md`).
    ///
    /// Cancel safe as `publish_slow` is: dropped in `First`, the message is dropped with it
    /// and no subscriber sees it; the first poll publishes it and returns `Ready`, or hands
    /// it to `slow` unpublished (with the writer, if it found the ring full: `slow` then
    /// waits for room as `publish_slow` always did after finding it full).
    #[project = PublishProj]
    #[project_replace = PublishReplace]
    pub(crate) enum Publish<'a, T, S, F, R = &'a TopicInner<T>> {
        First { topic: R, ctx: &'a Context, msg: T, slow: S },
        // `owned` keeps the topic `fut` borrows alive (see `Resolved::own`); declared after
        // `fut`, so dropped after it.
        Slow { #[pin] fut: F, owned: Option<Arc<TopicInner<T>>> },
        Done,
    }
}

/// The topic of a [`Publish`], as its first poll finds it: a topic already resolved (a
/// `Topic` handle's publish), or a name on a bus (`Bus::publish`), looked up then.
pub(crate) trait PublishTo<'a, T> {
    fn topic(self) -> Result<Resolved<'a, T>, Unresolved>;
}

impl<'a, T> PublishTo<'a, T> for &'a TopicInner<T> {
    #[inline]
    fn topic(self) -> Result<Resolved<'a, T>, Unresolved> {
        Ok(Resolved::held(self))
    }
}

/// A topic as a publish found it. `topic` is valid for `'a` when the caller holds it (a
/// `Topic` handle) or the bus never removes topics; on a bus whose topics can be removed, it
/// is valid while `owned` lives: while this does, and after [`own`](Self::own) while the
/// `Arc` it returns does.
pub(crate) struct Resolved<'a, T> {
    pub(crate) topic: &'a TopicInner<T>,
    owned: Option<Arc<TopicInner<T>>>,
}

impl<'a, T> Resolved<'a, T> {
    /// A topic valid for `'a`.
    #[inline]
    pub(crate) fn held(topic: &'a TopicInner<T>) -> Self {
        Self { topic, owned: None }
    }

    /// A topic of a removable bus, kept by `owned`.
    #[inline]
    pub(crate) fn owned(owned: Arc<TopicInner<T>>) -> Self {
        // SAFETY: `topic` points into `owned`'s allocation, which lives while `owned` does;
        // `owned` goes with `topic` (the struct's docs) until `own` hands it to a caller that
        // keeps it as long as it uses `topic`.
        let topic = unsafe { &*Arc::as_ptr(&owned) };
        Self {
            topic,
            owned: Some(owned),
        }
    }

    /// What keeps `topic` valid from now on, for a caller that keeps it across an `.await`:
    /// `None` when it is valid for `'a` anyway.
    #[inline]
    pub(crate) fn own(self) -> Option<Arc<TopicInner<T>>> {
        self.owned
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
        if let PublishProj::Slow { fut, .. } = self.as_mut().project() {
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
        let resolved = match topic.topic() {
            Ok(resolved) => resolved,
            Err(e) => return Poll::Ready(Err(e.refuse(msg))),
        };
        let topic = resolved.topic;
        match topic.publish_now(ctx, msg, cx) {
            Ok(done) => Poll::Ready(done),
            Err((msg, full)) => {
                let owned = resolved.own();
                self.set(Publish::Slow {
                    fut: slow(topic, ctx, msg, full),
                    owned,
                });
                match self.project() {
                    PublishProj::Slow { fut, .. } => fut.poll(cx),
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
