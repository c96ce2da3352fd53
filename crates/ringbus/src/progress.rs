//! The bus's progress notification: subscribers say they handled messages; `close` and
//! delivery receipts wait for a condition on the subscribers' positions.
//!
//! # Protocol
//!
//! A subscriber stores its new position (Release) and then calls [`Progress::progressed`]:
//! the light half of the asymmetric fence, then a look at `watchers`; only while someone
//! watches does it notify (a `notify_waiters`), so a bus nobody waits on pays one relaxed
//! load per message.
//!
//! A waiter is counted in `watchers` first ([`Progress::watch`]), then loops in
//! [`Progress::wait_for`]: create and enable a `Notified`, look at the positions, sleep on
//! the `Notified` if the condition does not hold. `Notify` guarantees that a
//! `notify_waiters` after the `Notified` was created wakes it, and one before is visible in
//! the positions read after (its counter is a SeqCst read-modify-write after the position
//! store; creating the `Notified` is a SeqCst load of it). What is left is that the
//! subscriber must see `watchers != 0`:
//!
//! - A **receipt** (`Delivery`) is counted before its message is written to the ring, so
//!   every subscriber that reads the message (Acquire, through the ring) sees the count. No
//!   fence needed on the waiting side: `wait_for(false, ..)`.
//! - **`close`** starts watching while subscribers run. Its count and a subscriber's position
//!   are a store-buffering pair: `wait_for(true, ..)` runs the heavy fence before each look,
//!   pairing with the light fence in `progressed`, so either the subscriber sees the count, or
//!   `close` sees the position.
//!
//! Both are loom-checked as written here (`loom_tests` below; under loom, `Notify` is a
//! stand-in with tokio's contract, see `sync`).

use std::fmt;

use crate::sync::{AtomicUsize, Notify, Ordering};

pub(crate) struct Progress {
    /// Waiters: `close` (once it waits for the subscribers) and each outstanding receipt.
    /// Changed Relaxed by the waiters (ordered by the fence or the ring, see the module
    /// docs); read Relaxed, after the light fence, by subscribers.
    watchers: AtomicUsize,
    /// Notified by subscribers while `watchers` is non-zero, and when their task ends.
    notify: Notify,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Self {
            watchers: AtomicUsize::new(0),
            notify: Notify::new(),
        }
    }

    /// Called by a subscriber after it stored its new position (or ended).
    #[inline]
    pub(crate) fn progressed(&self) {
        // Pairs with the heavy fence in `wait_for(true, ..)`: either we see its watcher, or it
        // sees the position we stored before this.
        ringbus_core::__private::light_fence();
        if self.watchers.load(Ordering::Relaxed) != 0 {
            self.notify.notify_waiters();
        }
    }

    /// Counts a waiter: from here on subscribers notify (see the module docs for when they
    /// are sure to see it).
    pub(crate) fn watch(&self) {
        self.watchers.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes back a [`watch`](Self::watch).
    pub(crate) fn unwatch(&self) {
        self.watchers.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many watch now.
    pub(crate) fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Relaxed)
    }

    /// Waits until `ready` returns `Some`, looking again after each progress. The caller
    /// watches (see [`watch`](Self::watch)). `fenced`: the watch may have begun while
    /// subscribers ran (close), so each look is preceded by the heavy fence.
    ///
    /// Cancel safe: it only looks.
    pub(crate) async fn wait_for<R>(
        &self,
        fenced: bool,
        mut ready: impl FnMut() -> Option<R>,
    ) -> R {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if fenced {
                ringbus_core::__private::heavy_fence();
            }
            if let Some(r) = ready() {
                return r;
            }
            notified.await;
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Progress")
            .field("watchers", &self.watchers())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, ringbus_loom))]
mod loom_tests {
    use super::Progress;
    use loom::future::block_on;
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// A subscriber's side, as `subscriber/task.rs` runs it: handle, store the position (Release),
    /// then `progressed`.
    fn handle(progress: &Progress, position: &AtomicU64, to: u64) {
        position.store(to, Ordering::Release);
        progress.progressed();
    }

    /// `close` starts watching while a subscriber works through two messages: it must see
    /// the subscriber catch up (or be woken when it does). Without the heavy fence in
    /// `wait_for`, the watch and the position store race, and the wake-up is lost.
    #[test]
    fn loom_close_sees_the_subscriber_catch_up() {
        loom::model(|| {
            let progress = Arc::new(Progress::new());
            let position = Arc::new(AtomicU64::new(0));
            let subscriber = {
                let (progress, position) = (progress.clone(), position.clone());
                thread::spawn(move || {
                    for to in 1..=2 {
                        handle(&progress, &position, to);
                    }
                })
            };
            progress.watch();
            block_on(progress.wait_for(true, || {
                (position.load(Ordering::Acquire) >= 2).then_some(())
            }));
            progress.unwatch();
            subscriber.join().unwrap();
        });
    }

    /// A delivery receipt, counted before its message is published: the subscriber that reads
    /// the message (Acquire through the ring, here `published`) sees the watcher and wakes the
    /// receipt, which looks without a fence.
    #[test]
    fn loom_receipt_sees_its_message_handled() {
        loom::model(|| {
            let progress = Arc::new(Progress::new());
            let published = Arc::new(AtomicU64::new(0));
            let position = Arc::new(AtomicU64::new(0));
            let subscriber = {
                let (progress, published, position) =
                    (progress.clone(), published.clone(), position.clone());
                thread::spawn(move || {
                    // The subscriber's wait for the message, as the ring's reader sees it.
                    while published.load(Ordering::Acquire) == 0 {
                        loom::thread::yield_now();
                    }
                    handle(&progress, &position, 1);
                })
            };
            progress.watch(); // `Tracker::watch`, under the writer, before the write
            published.store(1, Ordering::Release); // the ring's commit
            block_on(progress.wait_for(false, || {
                (position.load(Ordering::Acquire) >= 1).then_some(())
            }));
            progress.unwatch();
            subscriber.join().unwrap();
        });
    }
}
