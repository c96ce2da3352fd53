//! Subscriber tasks: wait for the next message, call the handler with `&T` read in place,
//! release it, repeat. Plus [`Subscription`], the handle that unsubscribes.
//!
//! Each subscriber is one tokio task owning one ring [`Reader`]. Its state shared with the
//! rest of the bus is a [`SubShared`]: counters that only the task writes (plain stores,
//! read only by `stats()`), the unsubscribe request (`stop_at`, a position) with the waker
//! that delivers it, and a token cancelled when the task has finished.
//!
//! # Stopping a task that may be inside a handler
//!
//! A bounded close that runs out of time aborts the tasks left, but tokio can only drop a
//! task between two polls: a handler that does not yield keeps its task running. So that
//! the close reports what is true, the task's future is wrapped in [`Supervised`], which
//! keeps `polls` at `POLLING` for the length of each poll. `SubShared::stop` (the close)
//! turns `IDLE` into `STOPPED` with a compare-and-swap: won, no poll is under way and none
//! will run the task's code again (a stopped task's next poll, which the abort schedules,
//! ends it without running its code), so it handles nothing more; lost, a poll is under way (a handler
//! call that has not yielded, or the loop between two messages), and the task is reported
//! running: it stops after that handler call (`stop_at` is lowered to 0) or at the abort.
//!
//! # One loop
//!
//! Every subscriber task runs [`handle`], generic over how it hands messages to its handler
//! ([`Delivery`]: one message a call, or a whole ring batch) and over whether it makes a span
//! per call ([`Trace`]: plain or traced). Both are type parameters, so each combination is
//! its own monomorphised state machine: the plain loop holds no span and tests no level per
//! message. The task switches between the plain and the traced form only where it would wait.
//!
//! # A thread-local decides behaviour
//!
//! Which subscriber (and so which bus) this thread is polling is kept in a thread-local,
//! `CURRENT`, set by [`Supervised`] around each poll of a subscriber's task. Three decisions
//! read it: `Bus::close` and `Bus::wait_idle` called from inside a handler do not wait for
//! that handler's own bus (they would wait for themselves); a closed bus still accepts the
//! publishes of its own handlers while it drains (`BusState::refuses`); and `unsubscribe`
//! from inside a subscriber's own handler does not wait for its task. These calls are the
//! public API called from user code, which has no parameter to carry the caller's identity,
//! so the identity cannot be passed as explicit data without changing that API.

use std::cell::Cell;
use std::fmt;
use std::future::{poll_fn, Future};
use std::mem::ManuallyDrop;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use ringbus_core::{self as ring, Reader};
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Span;

use crate::bus::BusState;
use crate::coop;
use crate::delivery::Tracker;
use crate::handler::{Batch, BatchHandler, Handler, HandlerError};
use crate::observe::{self, Outcome, SubMetrics};
use crate::parent::Parents;
use crate::stats::{SubscriberStats, Unhandled};
use crate::topic::AnyTopic;

thread_local! {
    /// The subscriber whose task this thread is polling, so `close` called from inside a
    /// handler does not wait for itself, and its bus lets it publish while draining (see
    /// `BusState::refuses`). Set by [`Supervised`] for the length of each poll.
    ///
    /// A thread-local set around the poll rather than a `tokio::task_local!` scope: the
    /// scope would make every task's future bigger, and tokio moves a task's future several
    /// times while it spawns and ends it (see `Stall`).
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// The subscriber whose task this thread is polling (inside its handler, or its loop), if any.
#[inline]
pub(crate) fn current() -> Option<Current> {
    CURRENT.with(Cell::get)
}

/// A subscriber's task as [`current`] gives it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Current {
    /// The subscriber's process-unique id.
    pub(crate) id: u64,
    /// Its bus (`BusState`'s address: the task holds the state, so it stays this bus's).
    pub(crate) bus: usize,
}

/// Sets [`CURRENT`] until dropped, then puts back what was there (also when a poll unwinds).
struct Polling(Option<Current>);

impl Polling {
    fn enter(current: Current) -> Self {
        Self(CURRENT.with(|c| c.replace(Some(current))))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// No unsubscribe requested.
const RUNNING: u64 = u64::MAX;

/// `SubShared::lost` of a task that did not crash.
const NOT_CRASHED: u64 = u64::MAX;

/// The most messages a one-message subscriber takes from the ring at once (tokio's budget is
/// 128 units, one per message, so a run never outlasts a budget).
///
/// The messages of a run come from one ring batch: the task looks at the ring (and at the
/// stop position, and spends its first unit of budget) once per run rather than once per
/// message, and releases each message as soon as it is handled (`ring::Batch::release`), as a
/// `ReadGuard` would, so a waiting publisher has its room as soon as the slowest subscriber is
/// done with a message. Releasing once per run instead would be cheaper, but then a publisher
/// that began to wait during a handler call would wait for the next call too.
const RUN: usize = 128;

/// `SubShared::polls`: the task is not being polled.
const IDLE: u8 = 0;
/// The task is being polled.
const POLLING: u8 = 1;
/// Stopped by a bounded close between two polls: it is never polled into its code again.
const STOPPED: u8 = 2;

pin_project_lite::pin_project! {
    /// A subscriber's task future, its polls tracked in `SubShared::polls` (see the module
    /// docs). A future of its own because it runs code around every poll of the task: the
    /// poll-state exchange, `CURRENT`, and the panic guard.
    pub(crate) struct Supervised<F> {
        pub(crate) sub: Arc<SubShared>,
        #[pin]
        pub(crate) task: F,
    }
}

impl<F: Future<Output = ()>> Future for Supervised<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let this = self.project();
        let polls = &this.sub.polls;
        // Acquire/Release: only the exclusion with `SubShared::stop` matters here.
        if polls
            .compare_exchange(IDLE, POLLING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Stopped: end here, without running the task's code (dropping it ends the
            // subscriber). It was aborted as well, which schedules this poll.
            return Poll::Ready(());
        }
        let polling = Polling::enter(Current {
            id: this.sub.id,
            bus: Arc::as_ptr(&this.sub.bus) as usize,
        });
        // The handler's calls catch their own panics (guarantee 6); this one catches the
        // rest: a tracing layer or a metrics recorder that panics while the task runs.
        // Unwind safe as asserted: a task whose poll unwound is never polled again.
        let poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| this.task.poll(cx)));
        drop(polling);
        // Release: pairs with the compare-and-swap in `SubShared::stop`.
        polls.store(IDLE, Ordering::Release);
        poll.unwrap_or_else(|panic| {
            // The task cannot go on from a poll that unwound: it ends here. Its `Running` was
            // dropped by the unwinding and counted what it left (then the crash is recorded
            // here), or is dropped with the future and records it then.
            this.sub.crash.get_or_init(|| panic_message(&*panic).into());
            if this.sub.crashed().is_some() {
                // `Running` was dropped unwinding: its metrics are ended here.
                this.sub.log_crash(true);
            }
            Poll::Ready(())
        })
    }
}

pub(crate) struct SubShared {
    /// The bus, for `BusState::progressed`.
    bus: Arc<BusState>,
    /// The topic's delivery receipts.
    tracker: Arc<Tracker>,
    /// The topic's parent spans (`Context::with_parent`), taken when making a handler span.
    pub(crate) parents: Arc<Parents>,
    pub(crate) id: u64,
    pub(crate) name: SubName,
    pub(crate) topic: Arc<str>,
    /// The ring position this subscriber started at.
    pub(crate) start: u64,
    /// Messages handled (successfully or not). Written only by the task, with Release after
    /// each handler call: pairs with the Acquire load in `position`, so whoever sees a
    /// message counted as handled also sees what its handler published (`Bus::quiescent`
    /// relies on it).
    pub(crate) handled: AtomicU64,
    /// Handler calls that returned `Err`.
    pub(crate) errors: AtomicU64,
    /// Handler calls that panicked.
    pub(crate) panics: AtomicU64,
    /// Detached after a stall.
    pub(crate) detached: AtomicBool,
    /// The counters of the feature wrapping the handler (retries, replies), if any: set once
    /// by the wrapper as it is made, read only by `stats()`.
    counters: OnceLock<Arc<dyn Counters>>,
    /// Unsubscribe: stop before this position. `RUNNING` until requested. Release store by
    /// `unsubscribe`, Acquire load by the task.
    stop_at: AtomicU64,
    /// The cut of `unsubscribe` alone (`RUNNING` until called): what the subscriber owes
    /// ends there. Kept apart from `stop_at`, which a bounded close lowers to 0 to stop the
    /// task; its report still counts what was owed up to the cut (`owed`).
    cut: AtomicU64,
    /// Wakes the task for `stop_at`.
    waker: AtomicWaker,
    /// Set when the task has ended (for whatever reason).
    pub(crate) done: Done,
    /// Set right after spawning.
    pub(crate) abort: OnceLock<AbortHandle>,
    /// `IDLE`, `POLLING` (the task is being polled) or `STOPPED` (by a bounded close): see
    /// the module docs.
    polls: AtomicU8,
    stall_timeout: Option<Duration>,
    /// A pull subscriber (a [`Stream`](crate::Stream)), not a task: `close` does not wait
    /// for it (see `stream.rs`).
    pub(crate) pull: bool,
    /// Set if the task panicked outside a handler call (see `Supervised`): the panic's
    /// message.
    crash: OnceLock<Box<str>>,
    /// The messages such a task left unhandled, counted as it ended (by `Running`'s drop),
    /// or `NOT_CRASHED`.
    lost: AtomicU64,
    /// Its metric handles (feature `metrics`; nothing without it), used by the task only.
    metrics: SubMetrics,
}

impl SubShared {
    // One caller (`TopicInner::join`), which hands over the topic's shared pieces one by one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        bus: Arc<BusState>,
        tracker: Arc<Tracker>,
        parents: Arc<Parents>,
        id: u64,
        name: Option<String>,
        topic: Arc<str>,
        start: u64,
        stall_timeout: Option<Duration>,
    ) -> Self {
        let name = SubName::new(name, topic.clone(), id);
        Self {
            metrics: SubMetrics::new(&topic, &name),
            bus,
            tracker,
            parents,
            id,
            name,
            topic,
            start,
            handled: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            detached: AtomicBool::new(false),
            counters: OnceLock::new(),
            stop_at: AtomicU64::new(RUNNING),
            cut: AtomicU64::new(RUNNING),
            waker: AtomicWaker::new(),
            done: Done::default(),
            abort: OnceLock::new(),
            polls: AtomicU8::new(IDLE),
            stall_timeout,
            pull: false,
            crash: OnceLock::new(),
            lost: AtomicU64::new(NOT_CRASHED),
        }
    }

    /// Counts what the task of a crashed subscriber left (`left`), for `crashed` and for
    /// `close_with`'s report. Called by `Running`'s drop before the subscriber is marked
    /// ended, possibly while unwinding: no user code.
    fn count_crash(&self, left: u64) {
        // Release: before `done`, for whoever sees the task ended (`crashed`).
        self.lost.store(left, Ordering::Release);
        let unhandled = Unhandled {
            topic: self.topic.to_string(),
            subscriber: self.name.to_string(),
            messages: left,
            running: false,
        };
        self.bus
            .crashed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.id, unhandled));
    }

    /// Logs the crash of a task that panicked outside a handler call, once its panic was
    /// caught and what it left counted. Never while unwinding; a tracing layer or metrics
    /// recorder that panics again here costs the log line, nothing else. `end_metrics`:
    /// `Running`'s drop, unwinding, left its metrics to us.
    #[cold]
    fn log_crash(&self, end_metrics: bool) {
        let (Some(panic), Some(left)) = (self.crash.get(), self.crashed()) else {
            return;
        };
        // Unwind safe as asserted: only the user's recorder or layer can be left half done.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if end_metrics {
                self.metrics.ended();
            }
            tracing::error!(
                topic = %self.topic,
                subscriber = %self.name,
                panic = &**panic,
                left,
                "ringbus: the subscriber's task panicked outside its handler (in a tracing \
                 layer or a metrics recorder?) and ended; the messages it had left are not \
                 handled by it"
            );
        }));
    }

    /// If the task ended by a panic outside a handler call: the messages it left unhandled.
    /// Known once `done` is set (stored before it).
    pub(crate) fn crashed(&self) -> Option<u64> {
        Some(self.lost.load(Ordering::Acquire)).filter(|&lost| lost != NOT_CRASHED)
    }

    /// Marks a pull subscriber (a [`Stream`](crate::Stream)).
    pub(crate) fn pulled(mut self) -> Self {
        self.pull = true;
        self
    }

    /// Counts `handled` messages handled in all (Release: pairs with `position`) and tells
    /// whoever watches the subscribers' progress. For streams; the tasks store inline.
    pub(crate) fn handled_to(&self, handled: u64) {
        self.handled.store(handled, Ordering::Release);
        self.bus.progressed();
    }

    /// Marks the subscriber ended (a stream dropped or finished) and tells the watchers.
    pub(crate) fn end(&self) {
        self.done.cancel();
        self.bus.progressed();
    }

    /// True once the task can run no handler again: it has ended, or a bounded close stopped
    /// it between two polls.
    pub(crate) fn ended(&self) -> bool {
        self.done.is_cancelled() || self.polls.load(Ordering::Acquire) == STOPPED
    }

    /// Stops the task for a bounded close that ran out of time: it takes no further message,
    /// and is aborted. True if it will run no handler again; false if a poll is under way (a
    /// handler call that has not yielded cannot be stopped: the task ends after it).
    pub(crate) fn stop(&self) -> bool {
        // The compare-and-swap comes first: lowering `stop_at` and aborting both wake the
        // task, and a worker that polled it before the swap would make an idle task look
        // busy (a handler parked in a pending future would be reported running).
        let stopped = self.try_stop();
        self.stop_at(0);
        if let Some(abort) = self.abort.get() {
            abort.abort();
        }
        stopped
    }

    /// The compare-and-swap of [`stop`](Self::stop) alone, tried again by a bounded close
    /// on a task it met in the middle of a poll: true once the task is stopped between two
    /// polls or has ended (the abort ends it as soon as that poll returns).
    pub(crate) fn try_stop(&self) -> bool {
        // AcqRel: won, it reads from the task's Release store of `IDLE` after its last poll,
        // so the position we then report is final.
        match self
            .polls
            .compare_exchange(IDLE, STOPPED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == STOPPED || self.done.is_cancelled(),
        }
    }

    /// Asks the task to stop once it reaches `position`.
    fn stop_at(&self, position: u64) {
        self.stop_at.fetch_min(position, Ordering::AcqRel);
        self.waker.wake();
    }

    /// `unsubscribe`'s request: the subscriber owes what is before `position` (the cut), and
    /// stops there.
    fn cut_at(&self, position: u64) {
        // Before `stop_at`: whoever sees the task stop at the cut sees the cut as well.
        self.cut.fetch_min(position, Ordering::AcqRel);
        self.stop_at(position);
    }

    /// The position up to which this subscriber has handled its topic.
    pub(crate) fn position(&self) -> u64 {
        // Acquire: pairs with the Release stores of `handled` in the task.
        self.start + self.handled.load(Ordering::Acquire)
    }

    /// The messages published for this subscriber (the topic's count is `published`) that it
    /// has not handled: none past its `unsubscribe`'s cut, which the stats' lag and a bounded
    /// close's report both count up to.
    pub(crate) fn owed(&self, published: u64) -> u64 {
        self.owed_from(self.position(), published)
    }

    /// [`owed`](Self::owed) by the task itself, which knows its `position` before it stores
    /// it (for the lag gauge).
    fn owed_from(&self, position: u64, published: u64) -> u64 {
        let cut = self.cut.load(Ordering::Acquire);
        published.min(cut).saturating_sub(position)
    }

    pub(crate) fn stats(&self, published: u64) -> SubscriberStats {
        let detached = self.detached.load(Ordering::Relaxed);
        let mut stats = SubscriberStats {
            id: self.id,
            name: self.name.to_string(),
            handled: self.handled.load(Ordering::Relaxed),
            lag: if detached || self.done.is_cancelled() {
                0
            } else {
                self.owed(published)
            },
            errors: self.errors.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            detached,
            running: !self.ended(),
            crashed: self.crashed().is_some(),
            retries: 0,
            dead_lettered: 0,
            dead_letter_failures: 0,
            late_replies: 0,
            duplicate_replies: 0,
        };
        if let Some(counters) = self.counters.get() {
            counters.report(&mut stats);
        }
        stats
    }

    /// Keeps `counters`, the counters of the feature that wraps this subscriber's handler,
    /// for `stats()`. A subscriber has one such wrapper at most (retries and replies refuse
    /// each other); a second call is ignored.
    pub(crate) fn keep_counters(&self, counters: Arc<dyn Counters>) {
        let _ = self.counters.set(counters);
    }

    /// Counts and logs a failed handler call on the `len` messages at `start..`, and records
    /// the failure on its `span`, if it has one. Called before the new position is stored
    /// (receipts rely on it).
    #[cold]
    fn record(&self, failure: Failure, span: Option<&Span>, start: u64, len: u64) {
        self.tracker.failed(start, len);
        let none = Span::none();
        let span = span.unwrap_or(&none);
        let _in_span = span.enter();
        match failure {
            Failure::Err(error) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.metrics.error();
                span.record("error", tracing::field::display(&error));
                tracing::warn!(
                    topic = %self.topic,
                    subscriber = %self.name,
                    %error,
                    "ringbus handler returned an error; going on with the next message"
                );
            }
            Failure::Panic(message) => {
                self.panics.fetch_add(1, Ordering::Relaxed);
                self.metrics.panic();
                span.record("panic", tracing::field::display(&message));
                tracing::error!(
                    topic = %self.topic,
                    subscriber = %self.name,
                    panic = %message,
                    "ringbus handler panicked; going on with the next message"
                );
            }
        }
    }
}

impl fmt::Debug for SubShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber")
            .field("id", &self.id)
            .field("name", &&*self.name)
            .field("topic", &&*self.topic)
            .finish_non_exhaustive()
    }
}

/// Counters that a feature wrapping a subscriber's handler keeps for itself (`retry`'s
/// retries and dead letters, `reply`'s late and duplicate replies): the subscriber's shared
/// state holds only what every subscriber needs, and reads these into its stats.
pub(crate) trait Counters: Send + Sync + 'static {
    /// Adds these counters' values to `stats` (Relaxed loads: stats are a snapshot).
    fn report(&self, stats: &mut SubscriberStats);
}

/// A subscriber's name: the one it was given, or `<topic>#<id>`, made into a string only
/// when something asks for it as one (`Subscription::name`, `stats()`). Logs format it in
/// place, so a subscribe nobody names allocates no name.
pub(crate) struct SubName {
    text: OnceLock<Box<str>>,
    topic: Arc<str>,
    id: u64,
}

impl SubName {
    fn new(given: Option<String>, topic: Arc<str>, id: u64) -> Self {
        let text = OnceLock::new();
        if let Some(given) = given {
            let _ = text.set(given.into_boxed_str());
        }
        Self { text, topic, id }
    }
}

impl std::ops::Deref for SubName {
    type Target = str;

    fn deref(&self) -> &str {
        self.text
            .get_or_init(|| format!("{}#{}", self.topic, self.id).into_boxed_str())
    }
}

impl fmt::Display for SubName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text.get() {
            Some(text) => f.write_str(text),
            None => write!(f, "{}#{}", self.topic, self.id),
        }
    }
}

impl fmt::Debug for SubName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

/// Set once, when a subscriber can run no handler again; awaitable. What a
/// `CancellationToken` gave here, without its allocation.
#[derive(Debug, Default)]
pub(crate) struct Done {
    set: AtomicBool,
    notify: Notify,
}

impl Done {
    /// Sets it and wakes every waiter (once: later calls do nothing).
    pub(crate) fn cancel(&self) {
        // AcqRel: Release publishes what the task did before it ended to whoever sees the
        // flag; the swap makes only the first call notify.
        if !self.set.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }

    /// Whether it is set (Acquire: pairs with `cancel`).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Waits until it is set.
    ///
    /// Cancel safe (nothing is taken). A `Notified` receives `notify_waiters` from the moment
    /// it is made (tokio's guarantee), and it is made before the flag is looked at: a
    /// `cancel` after the look notifies it, one before it is seen by the look.
    pub(crate) async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// How a handler call failed.
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
            let switch = observe::spans_wanted() != R::TRACED;
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

/// The text of a panic's payload, for the log.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string())
}

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
    D: Delivery<T>,
{
    // An `async` block over one `Running` made out here, not an `async fn`: an `async fn`
    // keeps each argument twice in its future (as passed, and as the body's local), and every
    // task's future would carry the copies (see `Stall` for why its size matters).
    let mut running = Running::new(reader, sub);
    async move {
        let mut handled = 0;
        let mut traced = observe::spans_wanted();
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
trait Delivery<T>: Send + Sync + 'static {
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

impl<T: Send + Sync + 'static, H: Handler<T>> Delivery<T> for One<H> {
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
        observe::handle_span(sub, position)
    }
}

/// Every message one look found, in one handler call ([`BatchHandler`]).
struct Many<H>(H);

impl<T: Send + Sync + 'static, H: BatchHandler<T>> Delivery<T> for Many<H> {
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
        observe::batch_span(sub, position, len)
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
        observe::span_if_enabled(make)
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
    D: Delivery<T>,
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
                    sub.record(failure, R::as_span(&span), sub.start + handled, len);
                }
            }
            handled += len;
            sub.handled.store(handled, Ordering::Release); // pairs with `position`
            sub.bus.progressed();
            // The next message of the batch, if the task may go on: not past the stop
            // position (a bounded close lowers it to 0), and a unit of budget for it, as
            // `next_or_switch` spends (refused: the task was woken, and yields at `next_or_switch`).
            if D::WHOLE
                || sub.start + handled >= sub.stop_at.load(Ordering::Acquire)
                || !poll_fn(|cx| Poll::Ready(coop::spend(cx).is_ready())).await
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

/// A running subscriber.
///
/// Dropping it leaves the subscriber running until the bus closes (as dropping a tokio
/// `JoinHandle` leaves its task running). [`unsubscribe`](Self::unsubscribe) stops it.
pub struct Subscription {
    pub(crate) sub: Arc<SubShared>,
    pub(crate) topic: Arc<dyn AnyTopic>,
    pub(crate) task: JoinHandle<()>,
}

impl Subscription {
    /// The subscriber's id, unique within the process.
    pub fn id(&self) -> u64 {
        self.sub.id
    }

    /// The subscriber's name, as in logs and stats.
    pub fn name(&self) -> &str {
        &self.sub.name
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.sub.topic
    }

    /// A snapshot of this subscriber's counters.
    pub fn stats(&self) -> SubscriberStats {
        self.sub.stats(self.topic.published())
    }

    /// True once the subscriber's task has ended (unsubscribed, closed, or detached), or can
    /// run no handler again (stopped by a bounded close).
    pub fn is_finished(&self) -> bool {
        self.sub.ended()
    }

    /// Stops the subscriber: it handles every message that was in its topic when this was
    /// called (every publish that had returned `Ok` by then), then leaves the topic and its
    /// task ends. A message that lands after the call is not handled by it, even if its
    /// publish began before (one waiting for room, say): the cut is the topic's count at the
    /// call. A publisher waiting for room because of this subscriber is released as it works
    /// through (and then leaves) its queue.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the request is made when this is first polled; dropping the future only
    /// stops waiting for the task to finish.
    ///
    /// Called from inside this subscriber's own handler, it makes the request and returns
    /// without waiting (the task cannot end while it runs the handler that waits).
    pub async fn unsubscribe(self) {
        self.sub.cut_at(self.topic.published());
        if current().is_some_and(|current| current.id == self.sub.id) {
            return;
        }
        // Only the task's own panic would make this an error, and the task catches handler
        // panics; an abort (bus close with a deadline) is an end like any other.
        let _ = self.task.await;
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.sub.id)
            .field("name", &&*self.sub.name)
            .field("topic", &&*self.sub.topic)
            .finish()
    }
}
