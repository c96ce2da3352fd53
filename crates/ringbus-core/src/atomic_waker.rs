//! A single waker slot that one party registers into and any party wakes.
//!
//! This is the well-known `AtomicWaker` algorithm (as in `futures-util` and tokio), written
//! against this crate's [`sync`](crate::sync) shim so loom can check it together with the ring.
//!
//! `state` is a two-bit lock:
//! - `WAITING`: nobody touches `waker`; a registrar may take the `REGISTERING` bit, a waker the
//!   `WAKING` bit.
//! - `REGISTERING`: the registrar owns `waker`. A concurrent `wake` only sets `WAKING`; the
//!   registrar sees it when it releases and wakes the waker it just stored itself, so no wake-up
//!   is lost.
//! - `WAKING`: a waker owns `waker` (it takes it out). A concurrent registrar wakes its own
//!   waker at once instead of storing it: the wake-up it is waiting for may be this one.

use std::fmt;
use std::task::Waker;

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

const WAITING: usize = 0;
const REGISTERING: usize = 0b01;
const WAKING: usize = 0b10;

pub(crate) struct AtomicWaker {
    /// The lock bits above. Acquire on taking a bit, Release on giving it back, so the
    /// accesses to `waker` of successive owners are ordered.
    state: AtomicUsize,
    /// Owned by whoever holds `REGISTERING` or `WAKING` alone.
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: `waker` is only touched by the holder of the state lock (see the module docs), and
// `Waker` is `Send + Sync`.
unsafe impl Send for AtomicWaker {}
// SAFETY: as above.
unsafe impl Sync for AtomicWaker {}

impl AtomicWaker {
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` to be woken by the next [`wake`](Self::wake).
    ///
    /// Only one party registers at a time (the reader or writer owning the slot, through
    /// `&mut`); wakes may race with it freely.
    pub(crate) fn register(&self, waker: &Waker) {
        match self
            .state
            .compare_exchange(WAITING, REGISTERING, Ordering::Acquire, Ordering::Acquire)
            .unwrap_or_else(|actual| actual)
        {
            WAITING => {
                // A waker's `clone` (or the old waker's drop) is user code and may panic: the
                // lock is then given back as the panic unwinds, or the slot would stay
                // REGISTERING for good, and no later reader of the slot could be woken.
                let unlock = GiveBack(self);
                // SAFETY: we hold REGISTERING; a concurrent `wake` only sets its bit and
                // leaves `waker` to us.
                self.waker.with_mut(|cell| unsafe {
                    match &*cell {
                        Some(old) if old.will_wake(waker) => {}
                        _ => *cell = Some(waker.clone()),
                    }
                });
                std::mem::forget(unlock);
                if let Err(actual) = self.state.compare_exchange(
                    REGISTERING,
                    WAITING,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // A wake arrived while we held the lock: it is ours to deliver.
                    debug_assert_eq!(actual, REGISTERING | WAKING);
                    // SAFETY: still REGISTERING: nobody else touches `waker`.
                    let taken = self.waker.with_mut(|cell| unsafe { (*cell).take() });
                    self.state.swap(WAITING, Ordering::AcqRel);
                    if let Some(w) = taken {
                        w.wake();
                    }
                }
            }
            WAKING => {
                // A wake is in progress and may be the one we wait for: poll again. (Under
                // loom, first let the waking thread go on: re-polling at once is a spin on its
                // progress, which a model with non-yielding spin hints would explore forever.)
                #[cfg(ringbus_loom)]
                loom::thread::yield_now();
                waker.wake_by_ref();
            }
            state => {
                // Another registration at the same time: impossible through `&mut` owners.
                debug_assert!(state == REGISTERING || state == REGISTERING | WAKING);
            }
        }
    }

    /// Wakes the registered waker, if any.
    pub(crate) fn wake(&self) {
        if let Some(waker) = self.take() {
            waker.wake();
        }
    }

    /// Takes the registered waker out, if any, without waking it.
    pub(crate) fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, Ordering::AcqRel) {
            WAITING => {
                // SAFETY: we hold WAKING alone; registrars back off (see module docs).
                let waker = self.waker.with_mut(|cell| unsafe { (*cell).take() });
                self.state.fetch_and(!WAKING, Ordering::Release);
                waker
            }
            _ => None,
        }
    }
}

/// Gives `REGISTERING` back if a registration unwinds (see `register`). A wake that arrived
/// meanwhile is dropped with it: the registration it was meant for never completed.
struct GiveBack<'a>(&'a AtomicWaker);

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        self.0.state.swap(WAITING, Ordering::AcqRel);
    }
}

impl fmt::Debug for AtomicWaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicWaker").finish_non_exhaustive()
    }
}
