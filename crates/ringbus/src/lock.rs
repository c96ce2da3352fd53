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
//!
//! # Running and parked holders (what `try_publish` may wait for)
//!
//! A holder is always in one of two states, and the lock records which:
//!
//! - **Running**: it executes synchronous code on one thread, recorded in `owner`, and lets go
//!   before its task next suspends. That code is a short stretch of the topic's (a room
//!   check, slot writes, a cursor store), plus what the bus runs for the user there: the
//!   `Drop` of a message whose slot is reused, a `publish_batch` iterator's `next`.
//! - **Parked** (`PARKED` set, through [`WriterGuard::park`]): its task is suspended holding
//!   the lock. The topic parks only while it waits for room (a full ring, or an unbuffered
//!   topic's message not yet handled), so a parked holder means the topic is full, and the
//!   message it holds goes in before any other.
//!
//! So [`lock_unless_parked`](WriterLock::lock_unless_parked) (the non-async `try_publish`,
//! and the first subscriber's join, which makes the ring) can wait for a running holder, spinning and then yielding its thread, since that holder
//! lets go after a bounded stretch of its own code, and give up at once on a parked one. It
//! also gives up at once when the running holder is its own thread (`owner` is ours: user
//! code the holder runs called back in, and waiting for itself would never end).
//!
//! `owner` is stored (Relaxed) by each new holder right after it takes the lock, again when
//! a parked holder resumes (possibly on another thread: before it clears `PARKED`, Release),
//! and cleared before each unlock. A thread reads its own token there only while it is the
//! running holder: it wrote the token itself and clears it before unlocking, so by coherence
//! it never reads its own stale token; and a holder that moved threads while parked rewrote
//! `owner` before clearing `PARKED`, which the reader loads (Acquire) before `owner`.
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::sync::{spin_hint, thread_token, yield_now, AtomicU8, AtomicUsize, Mutex, Ordering};

const LOCKED: u8 = 0b01;
const CONTENDED: u8 = 0b10;
/// The holder is suspended holding the lock (see the module docs). Set and cleared only by
/// the holder, so only while `LOCKED` is set.
const PARKED: u8 = 0b100;

/// [`WriterLock::try_lock_unless`] refused: the lock was free, but the caller's check, made
/// holding it, said no.
#[derive(Debug)]
pub(crate) struct Refusal;

pub(crate) struct WriterLock<T> {
    /// `LOCKED | CONTENDED | PARKED`.
    state: AtomicU8,
    /// The token ([`thread_token`]) of the thread running the holder's code, or 0. Written
    /// only by the holder; read by `lock_unless_parked` to recognise its own thread.
    owner: AtomicUsize,
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
            owner: AtomicUsize::new(0),
            waiters: Mutex::new(Waiters {
                queue: VecDeque::new(),
                next_key: 0,
            }),
            value: UnsafeCell::new(value),
        }
    }

    fn waiters(&self) -> crate::sync::MutexGuard<'_, Waiters> {
        // Nothing panics while holding it; recover the data if something ever did.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`try_lock`](Self::try_lock) for a publisher that a close may refuse: `refused` is
    /// asked *holding* the lock, and if it says so the lock is let go again (`Err`).
    ///
    /// This is the close-versus-publish protocol (guarantee 5): `close` sets its flag, then
    /// passes through the lock once. A publisher that took the lock before that pass
    /// published before it (the close's lock acquisition sees its write); one that takes it
    /// after sees the flag (set before the close's unlock, which our acquisition follows). A
    /// publisher that checked the flag only before locking could pass the check, stall, and
    /// publish after the close's pass. Loom-checked with this function (`loom_tests`).
    #[inline]
    pub(crate) fn try_lock_unless(
        &self,
        refused: impl FnOnce() -> bool,
    ) -> Result<Option<WriterGuard<'_, T>>, Refusal> {
        match self.try_lock() {
            Some(_) if refused() => Err(Refusal),
            guard => Ok(guard),
        }
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
                Ok(_) => {
                    // Relaxed: only this thread ever compares `owner` with its own token.
                    self.owner.store(thread_token(), Ordering::Relaxed);
                    return Some(WriterGuard { lock: self });
                }
                Err(now) => s = now,
            }
        }
        None
    }

    /// Takes the lock, waiting while its holder runs; `None` if the holder is parked (see the
    /// module docs) or is this thread. Never suspends, and never waits for a parked holder.
    #[inline]
    pub(crate) fn lock_unless_parked(&self) -> Option<WriterGuard<'_, T>> {
        match self.try_lock() {
            Some(guard) => Some(guard),
            None => self.lock_unless_parked_slow(false),
        }
    }

    /// As [`lock_unless_parked`](Self::lock_unless_parked), but also `None` while tasks
    /// queue for the lock: an async publisher then queues behind them (FIFO) rather than
    /// barge ahead of the one the last unlock woke, over and over.
    pub(crate) fn lock_if_running(&self) -> Option<WriterGuard<'_, T>> {
        self.lock_unless_parked_slow(true)
    }

    #[cold]
    fn lock_unless_parked_slow(&self, behind_queue: bool) -> Option<WriterGuard<'_, T>> {
        let me = thread_token();
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the Release clear of `PARKED` in `Parked::drop`, so a holder
            // that resumed on another thread has rewritten `owner` before we read it.
            let s = self.state.load(Ordering::Acquire);
            if s & LOCKED == 0 {
                if let Some(guard) = self.try_lock() {
                    return Some(guard);
                }
                continue;
            }
            if s & PARKED != 0
                || (behind_queue && s & CONTENDED != 0)
                || self.owner.load(Ordering::Relaxed) == me
            {
                return None;
            }
            // The holder is running on another thread: it lets go within its short critical
            // section, unless its thread is preempted, so spin a little, then give the
            // CPU away (on a machine with fewer cores than threads, possibly to the holder).
            if spins < SPINS {
                for _ in 0..1 << spins.min(6) {
                    spin_hint();
                }
                spins += 1;
            } else {
                yield_now();
            }
        }
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
        // Before the release below, so no later reader on this thread sees its own token.
        self.owner.store(0, Ordering::Relaxed);
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

/// Future of [`WriterLock::lock`]: a place in the lock's queue of wakers.
///
/// Written by hand rather than as an `async fn`, as tokio writes its semaphore's `Acquire`:
/// its `Drop` is part of the lock's protocol (leave the queue, or pass on a wake-up it was
/// given), and it needs its key from one poll to the next.
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

/// Spin rounds (of 1, 2, 4, ... 64 spin hints) before `lock_unless_parked` yields its thread.
const SPINS: u32 = 10;

/// Exclusive access to the locked value; unlocks on drop.
pub(crate) struct WriterGuard<'a, T> {
    lock: &'a WriterLock<T>,
}

impl<'a, T> WriterGuard<'a, T> {
    /// Marks the holder parked for as long as the returned value lives: the only way the
    /// lock may be held across a suspension (see the module docs).
    pub(crate) fn park(&mut self) -> Parked<'_, 'a, T> {
        // Relaxed: readers only learn "parked" from it; nothing is published with it.
        self.lock.state.fetch_or(PARKED, Ordering::Relaxed);
        Parked { guard: self }
    }
}

/// A parked holder's access to the value; un-parks on drop (the holder runs again).
pub(crate) struct Parked<'g, 'a, T> {
    guard: &'g mut WriterGuard<'a, T>,
}

impl<T> Deref for Parked<'_, '_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.guard
    }
}

impl<T> DerefMut for Parked<'_, '_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard
    }
}

impl<T> Drop for Parked<'_, '_, T> {
    fn drop(&mut self) {
        let lock = self.guard.lock;
        // The task may have resumed on another thread: it runs the holder's code from here.
        lock.owner.store(thread_token(), Ordering::Relaxed);
        // Release: pairs with the Acquire load in `lock_unless_parked_slow` (see there).
        lock.state.fetch_and(!PARKED, Ordering::Release);
    }
}

impl<T> fmt::Debug for Parked<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Parked")
    }
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

    /// `lock_unless_parked` gives up at once on a parked holder and on its own thread, and
    /// otherwise waits for a running holder (here, one on another thread) instead of giving up.
    #[test]
    fn lock_unless_parked_waits_only_for_running_holders() {
        use std::sync::mpsc;
        let lock = Arc::new(WriterLock::new(0u64));

        // Held by this thread: waiting would never end.
        let mut guard = lock.try_lock().expect("free");
        assert!(lock.lock_unless_parked().is_none());

        // Parked: another thread gives up at once.
        let parked = guard.park();
        let other = lock.clone();
        let seen = std::thread::spawn(move || other.lock_unless_parked().is_some());
        assert!(!seen.join().unwrap(), "waited for a parked holder");
        drop(parked);
        // Running again (on this thread): still ours.
        assert!(lock.lock_unless_parked().is_none());

        // Running on another thread: the waiter gets the lock once the holder lets go,
        // whenever that is.
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        drop(guard);
        let holder = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let mut g = lock.try_lock().expect("free");
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                *g += 1;
            })
        };
        held_rx.recv().unwrap();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock_unless_parked().map(|mut g| *g += 1).is_some())
        };
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(waiter.join().unwrap(), "gave up on a running holder");
        assert_eq!(*lock.try_lock().unwrap(), 2);
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

/// Loom models of the lock's protocols (`just loom`). Each checks mutual exclusion with an
/// "inside" flag that a second holder would find set, and a lost wake-up shows as a deadlock.
#[cfg(all(test, ringbus_loom))]
mod loom_tests {
    use super::WriterLock;
    use loom::future::block_on;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use loom::thread;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    /// The locked value: a counter, and a flag a holder sets on entry and clears on exit.
    #[derive(Default)]
    struct Shared {
        count: u64,
        inside: AtomicBool,
    }

    /// What a holder does: enter, count, leave (asserting it was alone).
    fn critical(value: &mut Shared) {
        assert!(
            !value.inside.swap(true, Ordering::SeqCst),
            "two holders at once"
        );
        value.count += 1;
        value.inside.store(false, Ordering::SeqCst);
    }

    /// Two tasks and a third thread's `try_lock` contend: each gets the lock once, alone, and
    /// a waiter queued behind a holder is woken by its unlock.
    #[test]
    fn loom_lock_unlock_hand_off() {
        loom::model(|| {
            let lock = Arc::new(WriterLock::new(Shared::default()));
            let tasks: Vec<_> = (0..2)
                .map(|_| {
                    let lock = lock.clone();
                    thread::spawn(move || critical(&mut block_on(lock.lock())))
                })
                .collect();
            let mut got = 2;
            if let Some(mut guard) = lock.try_lock() {
                critical(&mut guard);
                got += 1;
            }
            for t in tasks {
                t.join().unwrap();
            }
            assert_eq!(lock.try_lock().unwrap().count, got);
        });
    }

    /// A waiter that was queued, and possibly already handed the turn, gives up (its future
    /// is dropped) while the holder unlocks: the waiter behind it still gets the lock.
    #[test]
    fn loom_cancelled_waiter_passes_its_turn_on() {
        loom::model(|| {
            let lock = Arc::new(WriterLock::new(Shared::default()));
            let guard = lock.try_lock().unwrap();
            let quitter = {
                let lock = lock.clone();
                thread::spawn(move || {
                    let mut wait = pin!(lock.lock());
                    let waker = Waker::noop();
                    if let Poll::Ready(mut guard) =
                        wait.as_mut().poll(&mut Context::from_waker(waker))
                    {
                        critical(&mut guard);
                    }
                    // Dropped here: queued, notified, or holding nothing.
                })
            };
            let patient = {
                let lock = lock.clone();
                thread::spawn(move || critical(&mut block_on(lock.lock())))
            };
            drop(guard);
            quitter.join().unwrap();
            patient.join().unwrap();
            assert!(lock.try_lock().is_some());
        });
    }

    /// `lock_unless_parked` (the non-async `try_publish`) waits for a running holder but never
    /// for a parked one: here the holder parks and stays parked until the other thread has
    /// its answer, so waiting for it would never end (a deadlock, to loom).
    #[test]
    fn loom_try_lock_never_waits_for_a_parked_holder() {
        loom::model(|| {
            let lock = Arc::new(WriterLock::new(Shared::default()));
            let mut guard = lock.try_lock().unwrap();
            let trier = {
                let lock = lock.clone();
                thread::spawn(move || lock.lock_unless_parked().is_some())
            };
            let parked = guard.park();
            // Parked holders still hold the lock: nobody else got in.
            assert!(!trier.join().unwrap(), "got the lock from a parked holder");
            drop(parked);
            drop(guard);
        });
    }

    /// Close against publish (guarantee 5), as `TopicInner::admit` and `wait_publishers` run
    /// it: the closer sets its flag (AcqRel, as `Bus::close`), then passes through the lock
    /// once; a publisher checks the flag before (as `refused`), then takes the lock with
    /// `try_lock_unless`, asking the flag again holding it (Acquire, as `BusState::refuses`),
    /// or, when the lock is taken, waits for it and asks again (as `admit_wait`). Nothing is
    /// published after the closer's pass.
    #[test]
    fn loom_no_publish_after_the_close_passed_the_writer() {
        loom::model(|| {
            let lock = Arc::new(WriterLock::new(Shared::default()));
            let closed = Arc::new(AtomicBool::new(false));
            let publisher = {
                let (lock, closed) = (lock.clone(), closed.clone());
                thread::spawn(move || {
                    if closed.load(Ordering::Acquire) {
                        return;
                    }
                    let refused = || closed.load(Ordering::Acquire);
                    let guard = match lock.try_lock_unless(refused) {
                        Ok(Some(guard)) => guard,
                        Ok(None) => {
                            let guard = block_on(lock.lock());
                            if refused() {
                                return;
                            }
                            guard
                        }
                        Err(_) => return,
                    };
                    let mut guard = guard;
                    critical(&mut guard);
                })
            };
            closed.swap(true, Ordering::AcqRel);
            let at_pass = block_on(lock.lock()).count;
            publisher.join().unwrap();
            assert_eq!(
                lock.try_lock().unwrap().count,
                at_pass,
                "published after the close passed the writer"
            );
        });
    }

    /// A running holder that lets go is waited for: `lock_unless_parked` gets the lock.
    #[test]
    fn loom_try_lock_waits_for_a_running_holder() {
        loom::model(|| {
            let lock = Arc::new(WriterLock::new(Shared::default()));
            let mut guard = lock.try_lock().unwrap();
            let trier = {
                let lock = lock.clone();
                thread::spawn(move || lock.lock_unless_parked().map(|mut g| critical(&mut g)))
            };
            critical(&mut guard);
            drop(guard);
            assert!(
                trier.join().unwrap().is_some(),
                "refused by a running holder"
            );
            assert_eq!(lock.try_lock().unwrap().count, 2);
        });
    }
}
