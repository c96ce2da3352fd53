//! `WriterLock`: the async mutex publishers take turns at a topic's ring writer with.
//!
//! Uncontended, locking is one compare-and-swap and unlocking another, with no mutex taken
//! (tokio's `Mutex` takes its waiter list's lock on every unlock). A publisher that finds it
//! held parks its task in a FIFO of wakers; the unlocker wakes the first.
//!
//! # Algorithm
//!
//! `state` holds `LOCKED` (someone owns the value) and `CONTENDED` (the waiter list may be
//! non-empty). Every change of `CONTENDED` and every enqueue happen under the `waiters` lock,
//! and all changes of `state` are read-modify-writes, so they have one total order:
//!
//! - A waiter, holding `waiters`, sets `CONTENDED`, *then* looks at `LOCKED`: if the lock was
//!   released meanwhile it retries instead of sleeping. Otherwise the releaser's CAS from
//!   `LOCKED` to 0 fails (it sees `CONTENDED`), so the releaser takes `waiters`, which it can
//!   only get after the waiter enqueued itself, and wakes it. No wake-up is lost.
//! - The releaser pops the first waiter and marks it notified (removed from the list). A
//!   notified waiter whose future is dropped before it locked passes the wake-up on to the next
//!   waiter, so a cancelled publisher never strands the ones behind it.
//! - Acquisition is not strictly FIFO: a newcomer may take the lock between the release and the
//!   woken waiter's poll (barging), which keeps the uncontended path short.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

const LOCKED: u8 = 0b01;
const CONTENDED: u8 = 0b10;

pub(crate) struct WriterLock<T> {
    state: AtomicU8,
    /// Waiting tasks, by the key their future holds. Also guards `CONTENDED` and `next_key`.
    waiters: Mutex<Waiters>,
    value: UnsafeCell<T>,
}

struct Waiters {
    queue: VecDeque<(u64, Waker)>,
    next_key: u64,
}

// SAFETY: `value` is only reached through a `WriterGuard`, and the `LOCKED` bit makes guards
// exclusive; `T: Send` lets the value be used from whichever thread holds the guard.
unsafe impl<T: Send> Send for WriterLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for WriterLock<T> {}

impl<T> WriterLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            state: AtomicU8::new(0),
            waiters: Mutex::new(Waiters {
                queue: VecDeque::new(),
                next_key: 0,
            }),
            value: UnsafeCell::new(value),
        }
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // Nothing panics while holding it; recover the data if something ever did.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock if it is free.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<WriterGuard<'_, T>> {
        let mut s = self.state.load(Ordering::Relaxed);
        while s & LOCKED == 0 {
            // Acquire: pairs with the Release of the previous unlock, so its writes to the
            // value happen before ours.
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(WriterGuard { lock: self }),
                Err(now) => s = now,
            }
        }
        None
    }

    /// Waits for the lock.
    ///
    /// Cancel safe: a dropped future holds no place in the queue and passes on a wake-up it
    /// was given.
    #[inline]
    pub(crate) fn lock(&self) -> Lock<'_, T> {
        Lock {
            lock: self,
            key: None,
        }
    }

    fn unlock(&self) {
        // Release: our writes to the value happen before the next owner's.
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        self.unlock_slow();
    }

    #[cold]
    fn unlock_slow(&self) {
        let mut waiters = self.waiters();
        let next = waiters.queue.pop_front();
        let still = if waiters.queue.is_empty() {
            0
        } else {
            CONTENDED
        };
        // Release, as in `unlock`. Under `waiters`, so `CONTENDED` matches the queue.
        self.state.store(still, Ordering::Release);
        drop(waiters);
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }

    /// Wakes the first waiter, if any (a notified waiter giving up passes its turn on).
    fn wake_next(&self) {
        let mut waiters = self.waiters();
        if self.state.load(Ordering::Relaxed) & LOCKED != 0 {
            // The owner's unlock will wake the next one.
            return;
        }
        let next = waiters.queue.pop_front();
        if waiters.queue.is_empty() {
            self.state.fetch_and(!CONTENDED, Ordering::Relaxed);
        }
        drop(waiters);
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }
}

impl<T> fmt::Debug for WriterLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterLock")
            .field(
                "locked",
                &(self.state.load(Ordering::Relaxed) & LOCKED != 0),
            )
            .finish_non_exhaustive()
    }
}

/// Future of [`WriterLock::lock`].
pub(crate) struct Lock<'a, T> {
    lock: &'a WriterLock<T>,
    /// Our key in the queue while we may be in it.
    key: Option<u64>,
}

impl<'a, T> Future for Lock<'a, T> {
    type Output = WriterGuard<'a, T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WriterGuard<'a, T>> {
        let this = self.get_mut();
        let lock = this.lock;
        loop {
            if let Some(guard) = lock.try_lock() {
                if let Some(key) = this.key.take() {
                    // We may still be queued (woken spuriously, or barged in): leave.
                    let mut waiters = lock.waiters();
                    waiters.queue.retain(|(k, _)| *k != key);
                    if waiters.queue.is_empty() {
                        lock.state.fetch_and(!CONTENDED, Ordering::Relaxed);
                    }
                }
                return Poll::Ready(guard);
            }
            let mut waiters = lock.waiters();
            // Set CONTENDED before the last look at LOCKED: see the module docs.
            let s = lock.state.fetch_or(CONTENDED, Ordering::Acquire);
            if s & LOCKED == 0 {
                continue; // released meanwhile: try again
            }
            match this.key {
                Some(key) => {
                    if let Some(entry) = waiters.queue.iter_mut().find(|(k, _)| *k == key) {
                        if !entry.1.will_wake(cx.waker()) {
                            entry.1 = cx.waker().clone();
                        }
                    } else {
                        // Notified, but the lock was taken again before we got here: requeue
                        // at the front, we were next.
                        waiters.queue.push_front((key, cx.waker().clone()));
                    }
                }
                None => {
                    let key = waiters.next_key;
                    waiters.next_key += 1;
                    waiters.queue.push_back((key, cx.waker().clone()));
                    this.key = Some(key);
                }
            }
            return Poll::Pending;
        }
    }
}

impl<T> Drop for Lock<'_, T> {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut waiters = self.lock.waiters();
        let before = waiters.queue.len();
        waiters.queue.retain(|(k, _)| *k != key);
        let was_queued = waiters.queue.len() != before;
        if waiters.queue.is_empty() {
            self.lock.state.fetch_and(!CONTENDED, Ordering::Relaxed);
        }
        drop(waiters);
        if !was_queued {
            // We were notified and are giving up our turn: pass it on.
            self.lock.wake_next();
        }
    }
}

impl<T> fmt::Debug for Lock<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("queued", &self.key.is_some())
            .finish()
    }
}

/// Exclusive access to the locked value; unlocks on drop.
pub(crate) struct WriterGuard<'a, T> {
    lock: &'a WriterLock<T>,
}

impl<T> Deref for WriterGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `LOCKED` is ours.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for WriterGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for WriterGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock();
    }
}

impl<T> fmt::Debug for WriterGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WriterGuard")
    }
}

#[cfg(test)]
mod tests {
    use super::WriterLock;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn excludes_and_counts_exactly() {
        let lock = Arc::new(WriterLock::new(0u64));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let lock = lock.clone();
                tokio::spawn(async move {
                    for _ in 0..5_000 {
                        let mut g = lock.lock().await;
                        let v = *g;
                        tokio::task::yield_now().await; // hold it across a yield
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*lock.lock().await, 40_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancelled_waiters_pass_their_turn_on() {
        let lock = Arc::new(WriterLock::new(0u64));
        let tasks: Vec<_> = (0..8u64)
            .map(|i| {
                let lock = lock.clone();
                tokio::spawn(async move {
                    let mut got = 0;
                    for j in 0..2_000u64 {
                        if (i + j) % 3 == 0 {
                            // A lock attempt cancelled at once, queued or notified or not.
                            let attempt = lock.lock();
                            let _ = tokio::time::timeout(std::time::Duration::ZERO, attempt).await;
                            continue;
                        }
                        let mut g = lock.lock().await;
                        *g += 1;
                        got += 1;
                    }
                    got
                })
            })
            .collect();
        let mut expected = 0;
        for t in tasks {
            expected += t.await.unwrap();
        }
        // Nobody was stranded (the test ends), and every increment was exclusive.
        assert_eq!(*lock.lock().await, expected);
    }

    #[test]
    fn try_lock_is_exclusive() {
        let lock = WriterLock::new(());
        let g = lock.try_lock().expect("free");
        assert!(lock.try_lock().is_none());
        drop(g);
        assert!(lock.try_lock().is_some());
    }
}
