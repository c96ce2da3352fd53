//! The synchronisation primitives of the bus's lock-free parts, in one place, so that under
//! `--cfg ringbus_loom` the model checker can swap them for its own (see `lock.rs`'s models).
//!
//! `WriterLock` (the bus's one hand-written lock), `Progress` (the notification `close` and
//! delivery receipts wait on) and the topic registry (`map`) go through this shim. The rest of the bus is built on tokio's
//! primitives and on `ringbus-core`'s ring, which has its own loom models. Under loom,
//! tokio's `Notify` is replaced by a stand-in with the part of its contract `Progress` relies
//! on (below).

#[cfg(not(ringbus_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicPtr, AtomicU8, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};

#[cfg(not(ringbus_loom))]
pub(crate) use tokio::sync::Notify;

#[cfg(ringbus_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicPtr, AtomicU8, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};

#[cfg(ringbus_loom)]
pub(crate) use loom_notify::Notify;

/// A stand-in for tokio's `Notify` under loom, with the contract `Progress` relies on:
/// `notify_waiters` wakes every `Notified` created before it (polled or not), and its
/// counter is a SeqCst read-modify-write that `notified()` loads (SeqCst), as in tokio.
#[cfg(ringbus_loom)]
mod loom_notify {
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Mutex;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    pub(crate) struct Notify {
        /// `notify_waiters` calls so far; changed under `waiters`.
        calls: AtomicUsize,
        waiters: Mutex<Vec<Waker>>,
    }

    impl Notify {
        pub(crate) fn new() -> Self {
            Self {
                calls: AtomicUsize::new(0),
                waiters: Mutex::new(Vec::new()),
            }
        }

        pub(crate) fn notify_waiters(&self) {
            let mut waiters = self.waiters.lock().unwrap();
            self.calls.fetch_add(1, Ordering::SeqCst);
            let woken = std::mem::take(&mut *waiters);
            drop(waiters);
            for waker in woken {
                waker.wake();
            }
        }

        pub(crate) fn notified(&self) -> Notified<'_> {
            Notified {
                notify: self,
                calls: self.calls.load(Ordering::SeqCst),
            }
        }
    }

    pub(crate) struct Notified<'a> {
        notify: &'a Notify,
        /// `calls` when this was created: any later call completes it.
        calls: usize,
    }

    impl Notified<'_> {
        /// tokio registers here; the stand-in needs nothing (`calls` already tells).
        pub(crate) fn enable(self: Pin<&mut Self>) {}
    }

    impl Future for Notified<'_> {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let mut waiters = self.notify.waiters.lock().unwrap();
            if self.notify.calls.load(Ordering::SeqCst) != self.calls {
                return Poll::Ready(());
            }
            waiters.push(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// A hint inside a spin loop; under loom, a yield so the model can make progress.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(ringbus_loom))]
    std::hint::spin_loop();
    #[cfg(ringbus_loom)]
    loom::thread::yield_now();
}

/// Gives the thread's CPU away (loom: lets the other model threads run).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(ringbus_loom))]
    std::thread::yield_now();
    #[cfg(ringbus_loom)]
    loom::thread::yield_now();
}

/// A number unique to the calling thread among the threads alive (the address of a
/// thread-local), never 0. Under loom, per model thread (loom runs them on one OS thread).
#[inline]
pub(crate) fn thread_token() -> usize {
    #[cfg(not(ringbus_loom))]
    std::thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    #[cfg(ringbus_loom)]
    loom::thread_local! {
        static TOKEN: u8 = 0;
    }
    TOKEN.with(|t| t as *const u8 as usize)
}
