//! A subscriber's task: its loop, the guard around each handler call, the stall timer, and
//! what it leaves behind when it ends.
//!
//! # One loop
//!
//! Every subscriber task runs [`handle`], generic over how it hands messages to its handler
//! ([`Dispatch`]: one message a call, or a whole ring batch) and over whether it makes a span
//! per call ([`Trace`]: plain or traced). Both are type parameters, so each combination is
//! its own monomorphised state machine: the plain loop holds no span and tests no level per
//! message. The task switches between the plain and the traced form only where it would wait.

use std::future::{poll_fn, Future};
use std::mem::ManuallyDrop;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ringbus_core::{self as ring, Reader};
use tracing::Span;

use super::span;
use crate::coop;
use crate::handler::{panic_message, Batch, BatchHandler, Handler, HandlerError};
use crate::observe::Outcome;
use crate::shared::SubShared;

/// The most messages a one-message subscriber takes from the ring at once (a unit of tokio's
/// budget pays for [`coop::PER_UNIT`] of them, so a run spends 16 of the 128 units).
///
/// The messages of a run come from one ring batch: the task looks at the ring (and at the
/// stop position, and spends its first unit of budget) once per run rather than once per
/// message, and releases each message as soon as it is handled (`ring::Batch::release`), as a
/// `ReadGuard` would, so a waiting publisher has its room as soon as the slowest subscriber is
/// done with a message. Releasing once per run instead would be cheaper, but then a publisher
/// that began to wait during a handler call would wait for the next call too.
const RUN: usize = 128;

enum Failure {
    Err(HandlerError),
    Panic(String),
}

/// How a handler call ended. A failure's details are put aside in the caller's slot (see
/// [`guarded`]), so the loop moves one byte per message, not a whole failure: a result that
/// big, moved through the task's state, was stored in words and read back in one wider load
/// that the CPU cannot forward from those stores, which stalled the loop (see the commit that
/// made `Called`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Called {
    /// It returned `Ok`.
    Done,
    /// It returned an error or panicked: the [`Failure`] is in the slot.
    Failed,
    /// It stalled past the stall timeout (and was dropped).
    Stalled,
}

impl Outcome {
    /// How the call that ended with `failure` went.
    #[inline]
    fn of(failure: &Option<Failure>) -> Self {
        match failure {
            None => Outcome::Ok,
            Some(Failure::Err(_)) => Outcome::Error,
            Some(Failure::Panic(_)) => Outcome::Panic,
        }
    }
}

/// Polls for a message before the stop position: `true` once there is one, `false` once the
/// ring is closed and drained or the stop position is reached. The wait of a subscriber's
/// loop ([`next_or_switch`]) and of a [`Stream`](crate::Stream).
///
/// Spends one unit of the task's cooperative budget per message found (see `coop`). The
/// unit is taken before looking, as tokio's channels do: with the budget spent, it yields
/// rather than look, which also keeps a subscriber that yields from parking (and its
/// publisher from waking it) when the publisher has yielded too. The unit is given back when
/// there is no message (it then parks, which is a yield).
pub(crate) fn poll_next<T>(
    reader: &mut Reader<T>,
    sub: &SubShared,
    cx: &mut std::task::Context<'_>,
) -> Poll<bool> {
    poll_next_or(reader, sub, cx, || false)
}

/// [`poll_next`], asking `switch` where the task would wait (no message, or its budget
/// spent): `true` ends the wait before it begins, with `false` (no message).
#[inline]
fn poll_next_or<T>(
    reader: &mut Reader<T>,
    sub: &SubShared,
    cx: &mut std::task::Context<'_>,
    mut switch: impl FnMut() -> bool,
) -> Poll<bool> {
    if reader.position() >= sub.stop_at.load(Ordering::Acquire) {
        return Poll::Ready(false);
    }
    let Poll::Ready(unit) = tokio::task::coop::poll_proceed(cx) else {
        return if switch() {
            Poll::Ready(false)
        } else {
            Poll::Pending
        };
    };
    match reader.poll_ready(cx) {
        Poll::Ready(ready) => {
            unit.made_progress();
            Poll::Ready(ready.is_ok())
        }
        // Not waiting after all: the reader's registration costs at most a spurious wake-up.
        Poll::Pending if switch() => Poll::Ready(false),
        Poll::Pending => {
            sub.waker.register(cx.waker());
            // Registered before looking: an unsubscribe after this look wakes us.
            if reader.position() >= sub.stop_at.load(Ordering::Acquire) {
                Poll::Ready(false)
            } else {
                Poll::Pending
            }
        }
    }
}

/// The wait of [`handle`]: where it would wait, it looks at tracing's level first and, if
/// that asks for the other form of the loop (`R`), sets `switched` and says `false` (no
/// message). While messages are there it looks at nothing more than [`poll_next`] does.
fn next_or_switch<'a, R: Trace, T>(
    reader: &'a mut Reader<T>,
    sub: &'a SubShared,
    switched: &'a mut bool,
) -> impl Future<Output = bool> + 'a {
    poll_fn(move |cx| {
        poll_next_or(reader, sub, cx, || {
            let switch = span::spans_wanted() != R::TRACED;
            *switched = switch;
            switch
        })
    })
}

/// Runs one handler call: `call` makes its future (a hand-written `Handler::call` may
/// panic right there), which is polled once inline (no timer for handlers that finish at
/// once), then under the stall timeout, if any. Panics are caught, in `call` and in the
/// future alike; a failure is put in `failure` (which must be empty), and the result says
/// how the call ended.
async fn guarded<C, F>(call: C, stall: &mut Stall, failure: &mut Option<Failure>) -> Called
where
    C: FnOnce() -> F,
    F: Future<Output = Result<(), HandlerError>>,
{
    let call = match std::panic::catch_unwind(AssertUnwindSafe(call)) {
        Ok(call) => call,
        Err(panic) => return Called::failed(failure, panic),
    };
    let mut call = pin!(call);
    let mut poll = |cx: &mut std::task::Context<'_>| poll_caught(call.as_mut(), failure, cx);
    match poll_fn(|cx| Poll::Ready(poll(cx))).await {
        Poll::Ready(called) => called,
        Poll::Pending => stall.wait(poll_fn(poll)).await.unwrap_or(Called::Stalled),
    }
}

/// [`guarded`] in `span`: entered around `call` and around each poll of its future (never
/// held across an await), as `tracing::Instrument` would, without taking the span by value
/// (the caller records a failure on it afterwards).
///
/// A function of its own, called only by the traced form of the loop when the span is
/// enabled: entering a span, even a disabled one, is not free, and the plain form pays
/// nothing for spans.
async fn guarded_in<C, F>(
    call: C,
    stall: &mut Stall,
    span: &Span,
    failure: &mut Option<Failure>,
) -> Called
where
    C: FnOnce() -> F,
    F: Future<Output = Result<(), HandlerError>>,
{
    let made = {
        let _in_span = span.enter();
        std::panic::catch_unwind(AssertUnwindSafe(call))
    };
    let call = match made {
        Ok(call) => call,
        Err(panic) => return Called::failed(failure, panic),
    };
    let mut call = pin!(call);
    let mut poll = |cx: &mut std::task::Context<'_>| {
        let _in_span = span.enter();
        poll_caught(call.as_mut(), failure, cx)
    };
    match poll_fn(|cx| Poll::Ready(poll(cx))).await {
        Poll::Ready(called) => called,
        Poll::Pending => stall.wait(poll_fn(poll)).await.unwrap_or(Called::Stalled),
    }
}

impl Called {
    /// A call that panicked with `panic`, put in `failure`.
    #[cold]
    fn failed(failure: &mut Option<Failure>, panic: Box<dyn std::any::Any + Send>) -> Self {
        *failure = Some(Failure::Panic(panic_message(&*panic)));
        Called::Failed
    }
}

/// Polls a handler call's future under a panic guard: `futures`' `CatchUnwind`, except that
/// what leaves the guard is one byte (see [`Called`]), the failure going to `failure`.
#[inline]
fn poll_caught<F: Future<Output = Result<(), HandlerError>>>(
    call: Pin<&mut F>,
    failure: &mut Option<Failure>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Called> {
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| match call.poll(cx) {
        Poll::Ready(Ok(())) => Poll::Ready(Called::Done),
        Poll::Ready(Err(error)) => {
            *failure = Some(Failure::Err(error));
            Poll::Ready(Called::Failed)
        }
        Poll::Pending => Poll::Pending,
    }));
    match polled {
        Ok(poll) => poll,
        Err(panic) => Poll::Ready(Called::failed(failure, panic)),
    }
}

/// A subscriber's stall timeout, and the timer that times it: made the first time a handler
/// call does not finish at once, then reset for each such call. One allocation per subscriber
/// that has a timeout and a handler that waits, rather than a `tokio::time::Timeout` in the
/// task's future: that would make every task's future bigger, and tokio moves a task's
/// future several times while it spawns and ends it, a cost every subscribe pays.
pub(crate) struct Stall {
    timeout: Option<Duration>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stall {
    pub(crate) fn new(timeout: Option<Duration>) -> Self {
        Self {
            timeout,
            timer: None,
        }
    }

    /// Runs `call` to its end, or until the stall timeout passes (`None`), as
    /// `tokio::time::timeout` would: the call is polled before the timer, and if the call
    /// spent the last of the task's budget, the timer is polled outside the budget (a timer
    /// polled with none left never fires, and a handler that spends its budget on every poll
    /// would never be timed out).
    async fn wait<F: Future>(&mut self, call: F) -> Option<F::Output> {
        let mut call = pin!(call);
        let Some(timeout) = self.timeout else {
            return Some(call.await);
        };
        let Some(deadline) = tokio::time::Instant::now().checked_add(timeout) else {
            // Past what the clock can represent (`Duration::MAX`): it never passes.
            return Some(call.await);
        };
        let timer = match &mut self.timer {
            Some(timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        poll_fn(|cx| {
            let had_budget = tokio::task::coop::has_budget_remaining();
            if let Poll::Ready(output) = call.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            let timer = timer.as_mut();
            if had_budget && !tokio::task::coop::has_budget_remaining() {
                Pin::new(&mut tokio::task::unconstrained(timer))
                    .poll(cx)
                    .map(|()| None)
            } else {
                timer.poll(cx).map(|()| None)
            }
        })
        .await
    }
}

/// Detaches the subscriber after a stall: it takes no further message, and publishers no
/// longer wait for it. Counted and logged at `warn`.
fn detach(sub: &SubShared) {
    sub.detached.store(true, Ordering::Relaxed);
    sub.metrics.detached();
    tracing::warn!(
        topic = %sub.topic,
        subscriber = %sub.name,
        timeout = ?sub.stall_timeout,
        "ringbus subscriber stalled past its stall timeout and was detached; \
         publishers no longer wait for it"
    );
}

/// The task of a one-message-at-a-time subscriber: [`run_loop`] with one message a call.
pub(crate) fn run<T, H>(
    reader: Reader<T>,
    handler: H,
    sub: Arc<SubShared>,
) -> impl Future<Output = ()> + Send + 'static
where
    T: Send + Sync + 'static,
    H: Handler<T>,
{
    run_loop(reader, One(handler), sub)
}

/// The task of a batch subscriber: [`run_loop`] with what one look found in one call.
pub(crate) fn run_batch<T, H>(
    reader: Reader<T>,
    handler: H,
    sub: Arc<SubShared>,
) -> impl Future<Output = ()> + Send + 'static
where
    T: Send + Sync + 'static,
    H: BatchHandler<T>,
{
    run_loop(reader, Many(handler), sub)
}

/// The task of a subscriber: [`handle`] in its plain or its traced form, switching between
/// them where the task would wait.
///
/// Whether handler calls get a span (some tracing subscriber listens at `DEBUG`: see
/// `observe`) is decided where the task would wait, not per call: the task runs
/// `handle::<_, _, Plain>` (no span code at all) or `handle::<_, _, Traced>`, and looks at
/// tracing's level only when it finds no message or has spent tokio's budget; if the level
/// asks for the other form, it goes there instead of waiting. So a message that is there
/// costs no level check. A tracing subscriber installed while the task waits, or while it
/// keeps finding messages, is seen at its next wait: the messages until then run as before
/// (`tests/spans_switch.rs`).
fn run_loop<T, D>(
    reader: Reader<T>,
    delivery: D,
    sub: Arc<SubShared>,
) -> impl Future<Output = ()> + Send + 'static
where
    T: Send + Sync + 'static,
    D: Dispatch<T>,
{
    // An `async` block over one `Running` made out here, not an `async fn`: an `async fn`
    // keeps each argument twice in its future (as passed, and as the body's local), and every
    // task's future would carry the copies (see `Stall` for why its size matters).
    let mut running = Running::new(reader, sub);
    async move {
        let mut handled = 0;
        let mut traced = span::spans_wanted();
        loop {
            let Running { reader, sub, stall } = &mut running;
            let step = if traced {
                // Boxed: the traced loop's future is bigger than the plain one's, and every
                // task would carry it. One allocation each time the task takes the traced
                // path (at its start, or when tracing's level changes).
                Box::pin(handle::<T, D, Traced>(
                    reader, &delivery, sub, stall, handled,
                ))
                .await
            } else {
                handle::<T, D, Plain>(reader, &delivery, sub, stall, handled).await
            };
            match step {
                Step::Switch(now) => {
                    handled = now;
                    traced = !traced;
                }
                // Dropping `running` leaves the ring, then marks the subscriber ended.
                Step::End => return,
            }
        }
    }
}

/// What a subscriber's task owns: its reader, its shared state and its stall timer. Dropped
/// however the task ends (it returns, panics or is aborted): the reader first, which leaves
/// the ring, then the subscriber is marked ended, so whoever waits for that (`unsubscribe`,
/// `close`) finds it gone from the topic.
struct Running<T> {
    reader: ManuallyDrop<Reader<T>>,
    sub: Arc<SubShared>,
    stall: Stall,
}

impl<T> Running<T> {
    fn new(reader: Reader<T>, sub: Arc<SubShared>) -> Self {
        Self {
            reader: ManuallyDrop::new(reader),
            stall: Stall::new(sub.stall_timeout),
            sub,
        }
    }
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        // Dropped by a panic's unwinding (out of a poll: `Supervised` logs the crash once it
        // caught the panic), or with a future whose poll panicked (logged here).
        // A runtime dropped while its thread unwinds from some other panic counts its tasks'
        // messages left too: true of them as well. Nothing here may panic while unwinding
        // (that aborts): no user code (a metrics recorder, a tracing layer) runs then.
        let unwinding = std::thread::panicking();
        let crashed = self.sub.crash.get().is_some();
        if crashed || unwinding {
            // What was published for it (up to the writer's cursor) and not handled.
            let published = self.reader.position() + self.reader.lag();
            self.sub.count_crash(self.sub.owed(published));
        }
        // SAFETY: dropped here once, and `self.reader` is not used again: this is `Running`'s
        // own drop.
        unsafe { ManuallyDrop::drop(&mut self.reader) };
        self.sub.done.cancel();
        self.sub.bus.progressed();
        // User code last: a recorder or layer that panics here skips nothing of ours.
        if !unwinding {
            self.sub.metrics.ended();
            if crashed {
                self.sub.log_crash(false);
            }
        }
    }
}

/// Why [`handle`] returned.
enum Step {
    /// Where the task would wait, tracing's level asked for the other form of the loop; this
    /// many messages handled in all.
    Switch(u64),
    /// The subscriber is done: stopped, closed and drained, or detached.
    End,
}

/// How a subscriber hands what it takes from the ring to its handler: one message a call
/// ([`One`]) or all that one look found in one call ([`Many`]).
trait Dispatch<T>: Send + Sync + 'static {
    /// The messages of one handler call, borrowed from the ring batch.
    type Messages<'a>: Send
    where
        T: 'a;

    /// True if one call takes the whole ring batch; false if the batch is handed out one
    /// message a call, the budget spent message by message.
    const WHOLE: bool;

    /// How many of the `limit` messages left before the stop position to take from the ring
    /// at once (at least one: the task's first unit of budget pays for it).
    fn take(reader: &Reader<T>, limit: u64, cx: &mut std::task::Context<'_>) -> usize;

    /// The messages of the next call, and how many they are: `None` once `batch` is empty.
    fn messages<'a>(batch: &'a ring::Batch<'_, T>) -> Option<(Self::Messages<'a>, u64)>;

    /// How many messages the next call takes from `batch` (not empty).
    fn len(batch: &ring::Batch<'_, T>) -> u64;

    /// Makes the handler's call on `messages`.
    fn call<'a>(
        &'a self,
        messages: Self::Messages<'a>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;

    /// The `ringbus.handle` span of a call on the `len` messages from `position` on.
    fn span(sub: &SubShared, position: u64, len: u64) -> Span;
}

/// One message a handler call ([`Handler`]).
struct One<H>(H);

impl<T: Send + Sync + 'static, H: Handler<T>> Dispatch<T> for One<H> {
    type Messages<'a>
        = &'a T
    where
        T: 'a;

    const WHOLE: bool = false;

    #[inline]
    fn take(_: &Reader<T>, limit: u64, _: &mut std::task::Context<'_>) -> usize {
        limit.min(RUN as u64) as usize
    }

    #[inline]
    fn messages<'a>(batch: &'a ring::Batch<'_, T>) -> Option<(&'a T, u64)> {
        batch.get(0).map(|message| (message, 1))
    }

    #[inline]
    fn len(_: &ring::Batch<'_, T>) -> u64 {
        1
    }

    #[inline]
    fn call<'a>(
        &'a self,
        message: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self.0.call(message)
    }

    #[inline]
    fn span(sub: &SubShared, position: u64, _: u64) -> Span {
        span::handle_span(sub, position)
    }
}

/// Every message one look found, in one handler call ([`BatchHandler`]).
struct Many<H>(H);

impl<T: Send + Sync + 'static, H: BatchHandler<T>> Dispatch<T> for Many<H> {
    type Messages<'a>
        = Batch<'a, T>
    where
        T: 'a;

    const WHOLE: bool = true;

    /// What is there, up to `limit`, and as much of it as the budget pays for: the task's
    /// first unit (spent by `next_or_switch`) pays for the first `PER_UNIT` messages; the rest is paid
    /// here (see `coop`). The reader's lag is at least 1 here: `next_or_switch` saw a message, and the
    /// writer's cursor only grows.
    #[inline]
    fn take(reader: &Reader<T>, limit: u64, cx: &mut std::task::Context<'_>) -> usize {
        let limit = limit.min(reader.lag()).min(usize::MAX as u64) as usize;
        let more = limit.saturating_sub(coop::PER_UNIT);
        limit.min(coop::PER_UNIT + coop::pay_for(cx, more))
    }

    #[inline]
    fn messages<'a>(batch: &'a ring::Batch<'_, T>) -> Option<(Batch<'a, T>, u64)> {
        let (first, second) = batch.as_slices();
        (!batch.is_empty()).then_some((Batch { first, second }, batch.len() as u64))
    }

    #[inline]
    fn len(batch: &ring::Batch<'_, T>) -> u64 {
        batch.len() as u64
    }

    #[inline]
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self.0.call(batch)
    }

    fn span(sub: &SubShared, position: u64, len: u64) -> Span {
        span::batch_span(sub, position, len)
    }
}

/// Whether the loop makes a `ringbus.handle` span per handler call: [`Plain`] has no span
/// code at all, [`Traced`] makes the span when its callsite is enabled (a tracing subscriber
/// may want `DEBUG` but not ours). Two types rather than a flag, so the plain loop's state
/// machine does not even hold the traced call's future.
trait Trace {
    /// What `observe::spans_wanted` says while this form is the right one.
    const TRACED: bool;

    /// A call's span, if it has one.
    type Span;

    /// The span `make` makes, if this form makes spans and its callsite is enabled.
    fn span(make: impl FnOnce() -> Span) -> Self::Span;

    /// The span to record a failure on.
    fn as_span(span: &Self::Span) -> Option<&Span>;
}

/// The loop without spans: nobody listens at `DEBUG`.
struct Plain;

impl Trace for Plain {
    const TRACED: bool = false;
    type Span = ();

    #[inline]
    fn span(_: impl FnOnce() -> Span) {}

    #[inline]
    fn as_span(_: &()) -> Option<&Span> {
        None
    }
}

/// The loop with a `ringbus.handle` span per handler call.
struct Traced;

impl Trace for Traced {
    const TRACED: bool = true;
    type Span = Option<Span>;

    #[inline]
    fn span(make: impl FnOnce() -> Span) -> Option<Span> {
        span::span_if_enabled(make)
    }

    #[inline]
    fn as_span(span: &Option<Span>) -> Option<&Span> {
        span.as_ref()
    }
}

/// The subscriber's loop: handles messages until the subscriber is done or, where it would
/// wait, tracing's level asks for the other form (`R`) of the loop.
///
/// Each turn takes what is there, up to the stop position, as one ring batch ([`RUN`] at most
/// for one-message calls), hands it to the handler as `D` says, and releases each call's
/// messages as soon as that call is done, as a `ReadGuard` would: a waiting publisher has its
/// room as soon as the slowest subscriber is done with a message.
async fn handle<T, D, R>(
    reader: &mut Reader<T>,
    delivery: &D,
    sub: &SubShared,
    stall: &mut Stall,
    mut handled: u64,
) -> Step
where
    T: Send + Sync + 'static,
    D: Dispatch<T>,
    R: Trace,
{
    let mut switched = false;
    // A failed call's details, taken out right after the call (see `Called`).
    let mut failure: Option<Failure> = None;
    while next_or_switch::<R, T>(reader, sub, &mut switched).await {
        // An unsubscribe may have lowered `stop_at` since `next_or_switch` looked, even below our
        // position: then `next_or_switch` says stop, rather than this underflow or hand out nothing.
        let stop_at = sub.stop_at.load(Ordering::Acquire);
        let Some(limit) = stop_at.checked_sub(reader.position()).filter(|&n| n > 0) else {
            continue;
        };
        let take = poll_fn(|cx| Poll::Ready(D::take(reader, limit, cx))).await;
        let Ok(mut batch) = reader.try_recv_batch(take) else {
            continue;
        };
        // `next_or_switch`'s unit pays for the turn's first `PER_UNIT` messages (see `coop`).
        let turn_began = handled;
        loop {
            let Some((messages, len)) = D::messages(&batch) else {
                break;
            };
            let began = sub.metrics.clock();
            let span = R::span(|| D::span(sub, sub.start + handled, len));
            let call = || delivery.call(messages);
            let called = match R::as_span(&span) {
                None => guarded(call, stall, &mut failure).await,
                Some(span) => guarded_in(call, stall, span, &mut failure).await,
            };
            if called == Called::Stalled {
                detach(sub);
                return Step::End;
            }
            let len = D::len(&batch);
            batch.release(len as usize);
            let lag = || {
                let position = sub.start + handled + len;
                sub.owed_from(position, position + batch.lag())
            };
            sub.metrics
                .handled(began, len, || Outcome::of(&failure), lag);
            if called == Called::Failed {
                if let Some(failure) = failure.take() {
                    record(sub, failure, R::as_span(&span), sub.start + handled, len);
                }
            }
            handled += len;
            sub.handled.store(handled, Ordering::Release); // pairs with `position`
            sub.bus.progressed();
            // The next message of the batch, if the task may go on: not past the stop
            // position (a bounded close lowers it to 0), and paid for: after every
            // `PER_UNIT` messages of the turn, one more unit (refused: the task was woken,
            // and yields at `next_or_switch`).
            if D::WHOLE || sub.start + handled >= sub.stop_at.load(Ordering::Acquire) {
                break;
            }
            if (handled - turn_began) % coop::PER_UNIT as u64 == 0
                && !poll_fn(|cx| Poll::Ready(coop::spend(cx).is_ready())).await
            {
                break;
            }
        }
        // The rest is read again.
        batch.truncate(0);
    }
    if switched {
        Step::Switch(handled)
    } else {
        Step::End
    }
}

/// Counts and logs a failed handler call on the `len` messages at `start..`, and records
/// the failure on its `span`, if it has one. Called before the new position is stored
/// (receipts rely on it).
#[cold]
fn record(sub: &SubShared, failure: Failure, span: Option<&Span>, start: u64, len: u64) {
    sub.tracker.failed(start, len);
    let none = Span::none();
    let span = span.unwrap_or(&none);
    let _in_span = span.enter();
    match failure {
        Failure::Err(error) => {
            sub.errors.fetch_add(1, Ordering::Relaxed);
            sub.metrics.error();
            span.record("error", tracing::field::display(&error));
            tracing::warn!(
                topic = %sub.topic,
                subscriber = %sub.name,
                %error,
                "ringbus handler returned an error; going on with the next message"
            );
        }
        Failure::Panic(message) => {
            sub.panics.fetch_add(1, Ordering::Relaxed);
            sub.metrics.panic();
            span.record("panic", tracing::field::display(&message));
            tracing::error!(
                topic = %sub.topic,
                subscriber = %sub.name,
                panic = %message,
                "ringbus handler panicked; going on with the next message"
            );
        }
    }
}
