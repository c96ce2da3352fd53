//! The timed window of the peer wiring shared by the criterion benches and the comparison
//! runner (`bus_peers.rs`, `ring_peers.rs`): the criterion benches read the clock alone
//! ([`Instant`]); the runner also counts allocations (`compare/alloc.rs`'s `Window`).
//! Included as `#[path = "common/stopwatch.rs"] mod stopwatch;` by `bus.rs`, `ring.rs` and
//! `compare.rs`.

use std::ops::AddAssign;
use std::time::{Duration, Instant};

/// A timed window: started just before the timed part of a run, stopped just after it.
pub(crate) trait Stopwatch: Send + Sized + 'static {
    /// What the window measured; summed over the windows of a run timed in several.
    type Reading: Default + AddAssign + Send + 'static;

    /// Opens the window.
    fn start() -> Self;
    /// Closes it.
    fn stop(self) -> Self::Reading;
}

/// The clock alone: the wall time in the window.
impl Stopwatch for Instant {
    type Reading = Duration;

    #[inline]
    fn start() -> Self {
        Instant::now()
    }

    #[inline]
    fn stop(self) -> Duration {
        self.elapsed()
    }
}
