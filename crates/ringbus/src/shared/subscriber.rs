//! A subscriber's state shared with the rest of the bus: [`SubShared`].
//!
//! Counters that only the subscriber's task writes (plain stores, read by `stats()` and
//! `close`), the unsubscribe request (`stop_at`, a position) with the waker that delivers it,
//! the poll state a bounded close stops the task by (see `subscriber`, "Stopping a task that
//! may be inside a handler"), and a flag set when the task has ended.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::{BusState, Tracker};
use crate::observe::SubMetrics;
use crate::parent::Parents;
use crate::stats::{SubscriberStats, Unhandled};

/// No unsubscribe requested.
pub(crate) const RUNNING: u64 = u64::MAX;

/// `SubShared::lost` of a task that did not crash.
const NOT_CRASHED: u64 = u64::MAX;

/// `SubShared::polls`: the task is not being polled.
pub(crate) const IDLE: u8 = 0;
/// The task is being polled.
pub(crate) const POLLING: u8 = 1;
/// Stopped by a bounded close between two polls: it is never polled into its code again.
pub(crate) const STOPPED: u8 = 2;

pub(crate) struct SubShared {
    /// The bus, for `BusState::progressed`.
    pub(crate) bus: Arc<BusState>,
    /// The topic's delivery receipts.
    pub(crate) tracker: Arc<Tracker>,
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
    pub(crate) stop_at: AtomicU64,
    /// The cut of `unsubscribe` alone (`RUNNING` until called): what the subscriber owes
    /// ends there. Kept apart from `stop_at`, which a bounded close lowers to 0 to stop the
    /// task; its report still counts what was owed up to the cut (`owed`).
    cut: AtomicU64,
    /// Wakes the task for `stop_at`.
    pub(crate) waker: AtomicWaker,
    /// Set when the task has ended (for whatever reason).
    pub(crate) done: Done,
    /// Set right after spawning.
    pub(crate) abort: OnceLock<AbortHandle>,
    /// `IDLE`, `POLLING` (the task is being polled) or `STOPPED` (by a bounded close): see
    /// the module docs.
    pub(crate) polls: AtomicU8,
    pub(crate) stall_timeout: Option<Duration>,
    /// A pull subscriber (a [`Stream`](crate::Stream)), not a task: `close` does not wait
    /// for it (see `stream.rs`).
    pub(crate) pull: bool,
    /// Set if the task panicked outside a handler call (see `Supervised`): the panic's
    /// message.
    pub(crate) crash: OnceLock<Box<str>>,
    /// The messages such a task left unhandled, counted as it ended (by `Running`'s drop),
    /// or `NOT_CRASHED`.
    lost: AtomicU64,
    /// Its metric handles (feature `metrics`; nothing without it), used by the task only.
    pub(crate) metrics: SubMetrics,
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
    pub(crate) fn count_crash(&self, left: u64) {
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
    pub(crate) fn log_crash(&self, end_metrics: bool) {
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
    pub(crate) fn stop_at(&self, position: u64) {
        self.stop_at.fetch_min(position, Ordering::AcqRel);
        self.waker.wake();
    }

    /// `unsubscribe`'s request: the subscriber owes what is before `position` (the cut), and
    /// stops there.
    pub(crate) fn cut_at(&self, position: u64) {
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
    pub(crate) fn owed_from(&self, position: u64, published: u64) -> u64 {
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
