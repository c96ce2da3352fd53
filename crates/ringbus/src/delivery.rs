//! Delivery receipts: [`Topic::publish_tracked`](crate::Topic::publish_tracked) returns a
//! [`Delivery`] that resolves once every subscriber present at the publish has handled the
//! message, saying how many handlers failed on it.
//!
//! "Present at the publish": running as the publish takes the topic's writer (a subscriber
//! that ended before is not counted; one that ends while the publish waits for room is, as
//! missed if it never handled the message), and joined at or before the message's position.
//!
//! This is what a bridge needs to acknowledge a message upstream only after it was handled
//! locally (the NATS link acks a JetStream message this way). It costs the topic's
//! subscribers nothing while no receipt is outstanding: one relaxed load per message.
//!
//! The protocol rides on the bus's progress notification (the one `close` waits on; see
//! `progress.rs`, where its handshake is loom-checked):
//! - A receipt is registered under the topic's writer lock *before* the message is written:
//!   the bus's `progress_watchers` goes up and the position gets an entry in `failures`.
//!   The ring's publication (release) then carries both to any subscriber that reads the
//!   message (acquire).
//! - A subscriber whose handler fails (or panics) counts the failure in `failures` *before*
//!   it stores its new position; after storing it, it notifies the bus's `progress` while
//!   `progress_watchers` is non-zero (and always when its task ends).
//! - [`Delivery::wait`] (woken by any topic's progress while it waits, it looks again)
//!   creates a `Notified` before looking at the positions; `Notify`
//!   guarantees that a `notify_waiters` after that creation wakes it, and one before it is
//!   visible in the positions it then reads (`notify_waiters` is a SeqCst read-modify-write
//!   after the position store; creating the `Notified` is a SeqCst load of the same word).

use std::fmt;
use std::sync::Arc;

use crate::shared::{SubShared, Tracker};

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
        // Unfenced: the receipt was counted before its message was published (module docs).
        let (handled, missed) = self
            .tracker
            .state
            .progress
            .wait_for(false, || self.counts())
            .await;
        self.delivered(handled, missed)
    }

    /// How it went, if every subscriber present at the publish has handled the message or
    /// ended without handling it by now; `None` if one still has it ahead. Never waits: for a
    /// caller that settles a run of receipts together (say, with one acknowledgement) and
    /// waits only on the first that is not done.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let bus = ringbus::Bus::new();
    /// let _sub = bus.subscribe("t", async |_: &u64| {}).unwrap();
    /// let topic = bus.topic::<u64>("t").unwrap();
    /// let receipt = topic.publish_tracked(&ringbus::Context::new(), 1).await.unwrap();
    /// assert_eq!(receipt.try_outcome(), None); // the subscriber has not run yet
    /// bus.wait_idle().await;
    /// assert!(receipt.try_outcome().is_some_and(|d| d.is_ok()));
    /// # }
    /// ```
    pub fn try_outcome(&self) -> Option<Delivered> {
        // The look `wait` makes first: a subscriber's count is read with Acquire (see
        // `SubShared::position`), so `Some` means handled; right after the last subscriber
        // finished it may still say `None`, and `wait` then returns at once.
        let (handled, missed) = self.counts()?;
        Some(self.delivered(handled, missed))
    }

    /// `(handled, missed)` once no subscriber present at the publish still has the message
    /// ahead of it.
    fn counts(&self) -> Option<(usize, usize)> {
        let (mut done, mut gone) = (0, 0);
        for sub in &self.subscribers {
            // Read before the position: once a task has ended, its position is final.
            let ended = sub.done.is_cancelled();
            if sub.position() > self.position {
                done += 1;
            } else if ended {
                gone += 1;
            } else {
                return None;
            }
        }
        Some((done, gone))
    }

    fn delivered(&self, handled: usize, missed: usize) -> Delivered {
        let failed = self.tracker.failures_at(self.position);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use crate::{Bus, Context, PublishError};

    /// A receipt abandoned in any way (publish cancelled while waiting for room, publish
    /// future dropped, `Delivery` dropped unwaited) leaves no watcher behind, so the
    /// subscribers stop notifying; the abandoned publishes reach no subscriber.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn abandoned_receipts_leave_no_watcher() {
        let bus = Bus::builder().capacity(1).build();
        let gate = Arc::new(Semaphore::new(0));
        let held = gate.clone();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let _sub = bus
            .subscribe("t", move |n: &u32| {
                log.lock().unwrap().push(*n);
                let held = held.clone();
                async move {
                    held.acquire()
                        .await
                        .map(|p| p.forget())
                        .map_err(|_| "closed")
                }
            })
            .unwrap();
        let topic = bus.topic::<u32>("t").unwrap();
        // The subscriber holds message 0 in its handler, and with it the topic's one slot.
        topic.publish(0).await.unwrap();
        assert_eq!(bus.progress_watchers(), 0);

        let ctx = Context::new().with_timeout(Duration::from_millis(20));
        match topic.publish_tracked(&ctx, 2).await {
            Err(PublishError::Cancelled(2)) => {}
            other => panic!("expected Cancelled(2), got {other:?}"),
        }
        assert_eq!(
            bus.progress_watchers(),
            0,
            "a cancelled publish kept its receipt"
        );

        {
            let never = Context::new();
            let pending = topic.publish_tracked(&never, 3);
            tokio::pin!(pending);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(std::future::Future::poll(pending.as_mut(), &mut cx).is_pending());
            assert_eq!(
                bus.progress_watchers(),
                1,
                "registered while waiting for room"
            );
        }
        assert_eq!(
            bus.progress_watchers(),
            0,
            "a dropped publish kept its receipt"
        );

        gate.add_permits(2);
        let receipt = topic.publish_tracked(&Context::new(), 4).await.unwrap();
        assert_eq!(bus.progress_watchers(), 1);
        drop(receipt);
        assert_eq!(
            bus.progress_watchers(),
            0,
            "a dropped Delivery kept its receipt"
        );
        gate.add_permits(8);
        bus.close().await;
        // All or nothing: the cancelled and the dropped publish reached no one.
        assert_eq!(*seen.lock().unwrap(), [0, 4]);
    }
}
