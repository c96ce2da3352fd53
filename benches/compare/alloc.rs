//! A counting global allocator, switched on only for the timed window of a run.
//!
//! Outside a window an allocation costs one relaxed load more than the system allocator's.
//! Inside it, every allocation (and reallocation) in the process, on any thread, bumps one
//! shared counter: the systems that allocate on their hot path pay a contended increment per
//! allocation, which is part of what they are measured for; the ones that do not allocate pay
//! nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ops::AddAssign;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::stopwatch::Stopwatch;

/// The allocator: the system allocator, counting while [`COUNTING`] is set.
pub(crate) struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

#[inline]
fn count() {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator unchanged; the only addition is a
// counter, which neither allocates nor touches the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `alloc`'s contract, which is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The timed window of one run: wall time and allocations (all threads) in between.
pub(crate) struct Window {
    start: Instant,
    allocations: u64,
}

/// What a [`Window`] measured.
#[derive(Clone, Copy, Default)]
pub(crate) struct Timed {
    pub(crate) elapsed: Duration,
    pub(crate) allocations: u64,
}

/// Summing the windows of a run timed in several (`read_batch`'s laps).
impl AddAssign for Timed {
    fn add_assign(&mut self, more: Self) {
        self.elapsed += more.elapsed;
        self.allocations += more.allocations;
    }
}

impl Stopwatch for Window {
    type Reading = Timed;

    /// Starts counting and the clock.
    fn start() -> Self {
        COUNTING.store(true, Ordering::SeqCst);
        let allocations = ALLOCATIONS.load(Ordering::SeqCst);
        Self {
            start: Instant::now(),
            allocations,
        }
    }

    /// Stops the clock, then counting: elapsed time and allocations in the window.
    fn stop(self) -> Timed {
        let elapsed = self.start.elapsed();
        COUNTING.store(false, Ordering::SeqCst);
        let allocations = ALLOCATIONS.load(Ordering::SeqCst) - self.allocations;
        Timed {
            elapsed,
            allocations,
        }
    }
}
