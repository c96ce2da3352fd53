//! The synchronisation primitives of the bus's lock-free parts, in one place, so that under
//! `--cfg ringbus_loom` the model checker can swap them for its own (see `lock.rs`'s models).
//!
//! Only `WriterLock` goes through this shim today: it is the bus's one hand-written lock.
//! The rest of the bus is built on tokio's primitives and on `ringbus-core`'s ring, which
//! has its own loom models.

#[cfg(not(ringbus_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU8, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};

#[cfg(ringbus_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU8, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};

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
