//! Delivery receipts: [`Topic::publish_tracked`](crate::Topic::publish_tracked) returns a
//! [`Delivery`] that resolves once every subscriber present at the publish has handled the
//! message, saying how many handlers failed on it.
//!
//! This is what a bridge needs to acknowledge a message upstream only after it was handled
//! locally (the NATS link acks a JetStream message this way). It costs the topic's
//! subscribers nothing while no receipt is outstanding: one relaxed load per message.
//!
//! The protocol:
//! - A receipt is registered under the topic's writer lock *before* the message is written:
//!   `watching` goes up and the position gets an entry in `failures`. The ring's publication
//!   (release) then carries both to any subscriber that reads the message (acquire).
//! - A subscriber whose handler fails (or panics) on a watched position counts it in
//!   `failures` *before* it stores its new position, and after storing the position it
//!   notifies `progress` while `watching` is non-zero (and always when its task ends).
//! - [`Delivery::wait`] creates a `Notified` before looking at the positions; `Notify`
//!   guarantees that a `notify_waiters` after that creation wakes it, and one before it is
//!   visible in the positions it then reads (`notify_waiters` is a SeqCst read-modify-write
//!   after the position store; creating the `Notified` is a SeqCst load of the same word).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::subscriber::SubShared;

/// The receipts of one topic.
pub(crate) struct Tracker {
    /// Receipts outstanding. While non-zero, subscribers notify `progress` per message.
    watching: AtomicUsize,
    /// Handler failures per watched position.
    failures: Mutex<HashMap<u64, usize>>,
    progress: Notify,
}

impl Tracker {
    pub(crate) fn new() -> Self {
        Self {
            watching: AtomicUsize::new(0),
            failures: Mutex::new(HashMap::new()),
            progress: Notify::new(),
        }
    }

    fn failures(&self) -> MutexGuard<'_, HashMap<u64, usize>> {
        // Only counters live in the map: a panic cannot leave it inconsistent.
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a receipt for `position`, before the message is written there.
    pub(crate) fn watch(&self, position: u64) {
        self.failures().insert(position, 0);
        self.watching.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the receipt for `position`.
    pub(crate) fn unwatch(&self, position: u64) {
        self.failures().remove(&position);
        self.watching.fetch_sub(1, Ordering::Relaxed);
    }

    /// A handler failed on the messages at `start..start + len`. Called before the
    /// subscriber stores its new position; rare (the error path), so it may take the lock.
    pub(crate) fn failed(&self, start: u64, len: u64) {
        if self.watching.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut failures = self.failures();
        if len <= failures.len() as u64 {
            for position in start..start + len {
                if let Some(n) = failures.get_mut(&position) {
                    *n += 1;
                }
            }
        } else {
            for (_, n) in failures
                .iter_mut()
                .filter(|(p, _)| (start..start + len).contains(p))
            {
                *n += 1;
            }
        }
    }

    /// A subscriber stored a new position: wakes the receipts, if any.
    #[inline]
    pub(crate) fn progressed(&self) {
        if self.watching.load(Ordering::Relaxed) != 0 {
            self.progress.notify_waiters();
        }
    }

    /// A subscriber's task ended: wakes the receipts whatever `watching` says.
    pub(crate) fn ended(&self) {
        self.progress.notify_waiters();
    }
}

impl fmt::Debug for Tracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracker")
            .field("watching", &self.watching.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A receipt for one published message: [`wait`](Self::wait) resolves once every subscriber
/// that was subscribed when it was published has handled it (or ended without doing so).
///
/// Made by [`Topic::publish_tracked`](crate::Topic::publish_tracked). Dropping it gives up
/// the receipt, not the message: the message is delivered either way.
#[must_use = "a Delivery does nothing unless waited on; drop it if the outcome does not matter"]
pub struct Delivery {
    tracker: Arc<Tracker>,
    position: u64,
    subscribers: Vec<Arc<SubShared>>,
}

impl Delivery {
    pub(crate) fn new(
        tracker: Arc<Tracker>,
        position: u64,
        subscribers: Vec<Arc<SubShared>>,
    ) -> Self {
        Self {
            tracker,
            position,
            subscribers,
        }
    }

    /// The message's position in its topic (0 for the first message ever published there).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Waits until every subscriber present at the publish has handled the message, or ended
    /// without handling it (unsubscribed before it, detached after a stall, or aborted by a
    /// bounded close), and says how it went.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches. Dropping the future (or the `Delivery`) changes nothing
    /// for the message or its subscribers.
    pub async fn wait(self) -> Delivered {
        let (handled, missed) = loop {
            let notified = self.tracker.progress.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let (mut done, mut gone, mut pending) = (0, 0, false);
            for sub in &self.subscribers {
                if sub.position() > self.position {
                    done += 1;
                } else if sub.done.is_cancelled() {
                    // It may have handled the message just before it ended.
                    if sub.position() > self.position {
                        done += 1;
                    } else {
                        gone += 1;
                    }
                } else {
                    pending = true;
                    break;
                }
            }
            if !pending {
                break (done, gone);
            }
            notified.await;
        };
        let failed = self
            .tracker
            .failures()
            .get(&self.position)
            .copied()
            .unwrap_or(0);
        Delivered {
            subscribers: self.subscribers.len(),
            handled,
            failed,
            missed,
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.tracker.unwatch(self.position);
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("position", &self.position)
            .field("subscribers", &self.subscribers.len())
            .finish()
    }
}

/// How a tracked message went: see [`Delivery::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Delivered {
    /// Subscribers present at the publish.
    pub subscribers: usize,
    /// Of those, how many handled it (successfully or not).
    pub handled: usize,
    /// Of those that handled it, how many handlers returned `Err` or panicked.
    pub failed: usize,
    /// Subscribers that ended without handling it.
    pub missed: usize,
}

impl Delivered {
    /// True when every subscriber present at the publish handled it without error (also true
    /// when there was none).
    pub fn is_ok(&self) -> bool {
        self.failed == 0 && self.missed == 0
    }
}
