//! What every topic and subscriber of a bus shares with it: [`BusState`], and the
//! process-wide sequence of subscriber ids.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::current::current;
use crate::progress::Progress;
use crate::stats::Unhandled;

/// What every topic of a bus shares (kept apart from the registry so topics do not keep it
/// alive in a cycle).
pub(crate) struct BusState {
    /// Set once by `close`; publishes check it first.
    pub(crate) closed: AtomicBool,
    /// Cancelled by `close`: wakes publishers that wait for room or for the writer.
    pub(crate) closing: CancellationToken,
    /// The subscribers' progress, which `close` and delivery receipts wait on (see
    /// `progress.rs`).
    pub(crate) progress: Progress,
    pub(crate) capacity: usize,
    pub(crate) spin: u32,
    pub(crate) max_subscribers: usize,
    pub(crate) stall_timeout: Option<Duration>,
    /// Strict routing: a publish to a topic with no subscriber is refused
    /// ([`PublishError::NoSubscriber`](crate::PublishError::NoSubscriber)) instead of counted
    /// as unrouted.
    pub(crate) strict: bool,
    /// The subscribers whose task panicked outside a handler call, by id, with what each
    /// left (see `SubShared::crashed`), for `close_with`'s report. Kept apart from the
    /// topics' lists, which drop ended subscribers and feed delivery receipts.
    pub(crate) crashed: std::sync::Mutex<Vec<(u64, Unhandled)>>,
}

/// Process-unique subscriber ids, so a handler's `close` recognises its own task whatever bus
/// it closes.
static NEXT_SUBSCRIBER_ID: AtomicU64 = AtomicU64::new(1);

impl BusState {
    /// Called by a subscriber after it handled a message (or ended): wakes `close` if it is
    /// waiting for the subscribers to catch up.
    #[inline]
    pub(crate) fn progressed(&self) {
        self.progress.progressed();
    }

    /// True when publishes from here are refused: the bus is closing and this is not one of
    /// its handlers (they may still publish while it drains, so chains of topics finish; a
    /// handler of another bus is refused like any other outsider).
    #[inline]
    pub(crate) fn refuses(&self) -> bool {
        self.closed.load(Ordering::Acquire) && !self.in_own_handler()
    }

    /// True when called from inside one of this bus's handlers (a handler of another bus is
    /// an outsider here).
    #[inline]
    pub(crate) fn in_own_handler(&self) -> bool {
        current().is_some_and(|current| current.bus == std::ptr::from_ref(self) as usize)
    }
}

pub(crate) fn next_subscriber_id() -> u64 {
    NEXT_SUBSCRIBER_ID.fetch_add(1, Ordering::Relaxed)
}
