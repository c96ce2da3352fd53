//! The one place this crate takes its synchronisation primitives from.
//!
//! Under `--cfg ringbus_loom` every atomic, `Arc` and spin hint comes from [loom], so the model
//! checker explores every interleaving of the protocols in this crate. Slot storage is the one
//! exception: slots hold plain `std::cell::UnsafeCell<T>` because readers borrow them as
//! contiguous slices (`&[T]`), which loom's tracked cells cannot provide. The slot protocol is
//! still checked: the loom models publish values that carry their own sequence numbers and the
//! readers assert them.
//!
//! This module also holds the *asymmetric fence* pair ([`light_fence`] / [`heavy_fence`]) that
//! keeps a store-load fence off the publish path; see their docs.
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(ringbus_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Arc,
};

#[cfg(ringbus_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Arc,
};

/// A hint for a spin loop iteration; under loom, a yield so the model can make progress.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(ringbus_loom))]
    std::hint::spin_loop();
    #[cfg(ringbus_loom)]
    loom::thread::yield_now();
}

/// A full `SeqCst` fence (the model's fence under loom).
#[inline]
pub(crate) fn full_fence() {
    #[cfg(not(ringbus_loom))]
    std::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(ringbus_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// The cheap half of the asymmetric fence, run on the hot paths (publish, reader advance).
///
/// The protocol it serves is the classic "store my progress, then look whether anyone sleeps"
/// against "announce that I sleep, then look at the progress once more". Both sides need a
/// store-load fence or a wake-up can be lost (each side's load may miss the other's store).
/// Where the kernel offers `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, the sleeping side
/// (rare) pays for both: [`heavy_fence`] forces a full barrier on every running thread of the
/// process, so the hot side needs only a compiler fence, which stops the compiler from moving
/// its load above its store. Without membarrier both sides fall back to `fence(SeqCst)`.
///
/// Under loom both halves are `fence(SeqCst)` (the fallback without membarrier, and what the pair
/// guarantees), unless the ring runs loom's asymmetric model (see [`Fences`]).
#[inline(always)]
pub(crate) fn light_fence() {
    #[cfg(not(ringbus_loom))]
    {
        if membarrier::is_available() {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        } else {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
    #[cfg(ringbus_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// The expensive half of the asymmetric fence, run only by a side that is about to park.
///
/// See [`light_fence`].
///
/// Once the process registered for `membarrier`, the light half is only a compiler fence, so a
/// failed barrier cannot fall back to a local fence (that would order nothing on the other
/// threads): it is retried, and if it keeps failing the process aborts with a message rather
/// than go on unsound.
#[inline]
pub(crate) fn heavy_fence() {
    #[cfg(not(ringbus_loom))]
    {
        if membarrier::is_available() {
            membarrier::barrier();
        } else {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
    #[cfg(ringbus_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

#[cfg(not(ringbus_loom))]
mod membarrier {
    //! `membarrier(2)` on Linux; elsewhere never available (both fence halves are then full
    //! fences).

    use std::sync::atomic::{AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const AVAILABLE: u8 = 1;
    const UNAVAILABLE: u8 = 2;

    /// Whether the process is registered for expedited private membarriers.
    ///
    /// Relaxed is enough: the state only ever moves from UNKNOWN to a final value, and every
    /// thread that reads AVAILABLE runs after the registration returned (see [`init`]).
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// True when [`barrier`] is a real process-wide barrier.
    ///
    /// The first call on any thread decides (it registers with the kernel); a ring calls
    /// [`init`] when it is built, so the publish path only ever sees a decided value.
    #[inline(always)]
    pub(super) fn is_available() -> bool {
        STATE.load(Ordering::Relaxed) == AVAILABLE
    }

    /// Decides, once per process, whether the expedited membarrier can be used.
    ///
    /// Must run before two threads can disagree about the fence in use: the ring builder
    /// calls it before a `Writer` or `Reader` exists, so every hot-path `light_fence` of that
    /// ring sees the decided value (the `Arc` that hands the ring to other threads orders it).
    pub(crate) fn init() {
        if STATE.load(Ordering::Relaxed) != UNKNOWN {
            return;
        }
        let ok = register();
        // A race between two first builders only registers twice, which the kernel allows.
        let _ = STATE.compare_exchange(
            UNKNOWN,
            if ok { AVAILABLE } else { UNAVAILABLE },
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    #[cfg(target_os = "linux")]
    fn register() -> bool {
        // From <linux/membarrier.h>.
        const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
        const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
        const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
        if std::env::var_os("RINGBUS_NO_MEMBARRIER").is_some() {
            return false;
        }
        // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
        let supported = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0) };
        if supported < 0 || supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED == 0 {
            return false;
        }
        // SAFETY: as above.
        let registered = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
            )
        };
        registered == 0
    }

    #[cfg(not(target_os = "linux"))]
    fn register() -> bool {
        false
    }

    /// Attempts of a failing barrier before the process aborts.
    const ATTEMPTS: u32 = 100;

    /// Issues the process-wide barrier. Only called once [`is_available`] said so.
    ///
    /// The registered expedited command has no documented transient failure, but a kernel
    /// may still refuse it (seccomp, a future change). Every light fence of the process is a
    /// compiler fence by now, so there is no sound way on without the barrier: retry a while,
    /// yielding, then abort with the error.
    pub(super) fn barrier() {
        let mut error = None;
        for attempt in 0..ATTEMPTS {
            match issue() {
                Ok(()) => return,
                Err(e) => error = Some(e),
            }
            if attempt > 0 {
                std::thread::yield_now();
            }
        }
        let error = error.map_or_else(|| "unknown error".to_string(), |e| e.to_string());
        eprintln!(
            "ringbus-core: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed {ATTEMPTS} times \
             after the process registered for it ({error}); the ring's fences are unsound \
             without it, so the process aborts (set RINGBUS_NO_MEMBARRIER=1 to run with full \
             fences instead)"
        );
        std::process::abort();
    }

    /// One barrier.
    fn issue() -> std::io::Result<()> {
        #[cfg(test)]
        if tests::FAIL.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(1)); // EPERM, as seccomp would
        }
        #[cfg(target_os = "linux")]
        {
            const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
            // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
            let r =
                unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) };
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        #[cfg(not(target_os = "linux"))]
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }

    #[cfg(test)]
    pub(super) mod tests {
        use super::*;
        use std::sync::atomic::AtomicBool;

        /// Makes every barrier fail (only in the child process of the test below).
        pub(in super::super) static FAIL: AtomicBool = AtomicBool::new(false);

        const CHILD: &str = "RINGBUS_TEST_MEMBARRIER_CHILD";

        /// A barrier that keeps failing after registration aborts the process with a message;
        /// it never falls back to a local fence, which would order nothing on the threads
        /// whose light fence is only a compiler fence. Run in a child process (this test's
        /// own binary), since the expected outcome is an abort.
        #[test]
        fn a_failing_barrier_aborts_instead_of_going_on_unsound() {
            if std::env::var_os(CHILD).is_some() {
                // The child: pretend registration succeeded, then make the barrier fail.
                STATE.store(AVAILABLE, Ordering::Relaxed);
                FAIL.store(true, Ordering::Relaxed);
                super::super::heavy_fence();
                println!("went on after a failed membarrier");
                return;
            }
            let output = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sync::membarrier::tests::a_failing_barrier_aborts_instead_of_going_on_unsound",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !output.status.success() && !stdout.contains("went on"),
                "the child went on after the barrier failed: {stdout}"
            );
            assert!(
                stderr.contains("membarrier") && stderr.contains("aborts"),
                "no message on the way out: {stderr}"
            );
        }
    }
}

/// Makes sure the fence strategy is decided before any ring is shared between threads.
#[inline]
pub(crate) fn init_fences() {
    #[cfg(not(ringbus_loom))]
    membarrier::init();
}

/// How a ring runs the cheap side of its fences and its spin hints.
///
/// In production this is a zero-sized nothing: [`light_fence`] and [`spin_hint`] decide for
/// themselves. Under loom a ring can be built in the *asymmetric* model
/// (`Builder::asymmetric_fences`), which runs them as they run in production once
/// `membarrier(2)` is registered: the light fence is only a compiler fence (nothing, to loom,
/// which does not reorder a thread's own steps) and a spin hint does not yield, so a waiter may
/// park before the other side moves. The heavy fence stays a `fence(SeqCst)`, weaker than
/// `membarrier`: a model in this mode must make every registration (and every join) before it
/// forks its threads, so the heavy fences are ordered by the spawn and the model checks only
/// what follows, the Dekker handshakes between the slow paths' full fences.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fences {
    #[cfg(ringbus_loom)]
    pub(crate) asymmetric: bool,
}

impl Fences {
    /// [`light_fence`], or nothing in loom's asymmetric model.
    #[inline(always)]
    pub(crate) fn light(self) {
        #[cfg(ringbus_loom)]
        if self.asymmetric {
            return;
        }
        light_fence();
    }

    /// [`spin_hint`], or nothing (no yield) in loom's asymmetric model.
    #[inline(always)]
    pub(crate) fn spin_hint(self) {
        #[cfg(ringbus_loom)]
        if self.asymmetric {
            return;
        }
        spin_hint();
    }
}

/// An `UnsafeCell` with loom's closure-based access, so model runs check the accesses.
#[cfg(not(ringbus_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(ringbus_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(ringbus_loom)]
pub(crate) use loom::cell::UnsafeCell;
