//! The idle policy, [`BusBuilder::remove_idle`](crate::BusBuilder::remove_idle): topics that
//! nothing holds and nobody publishes to are removed after a while, without a thread of the
//! bus's own and without a cost on the publish path.
//!
//! # How it works
//!
//! Each time a topic is made, the bus looks at the next [`SLOTS`] slots of its registry (a
//! cursor goes round the shards) and, for each topic there, updates its [`IdleMark`]: a topic
//! seen held (an `Arc` beyond the registry's own) is not idle; one seen free for the first
//! time, or whose count of publishes moved since it was last seen, is idle from now; one seen
//! free with the same count, idle for at least the policy's time, is removed (by
//! `Bus::remove`, which looks for holders again). So a topic is removed within one round of
//! the cursor after its time is up, and only while topics are being made: a bus whose topics
//! come and go makes them all the time, and `Bus::remove_unused` sweeps on demand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::map::Cursor;

/// Registry slots a sweep looks at: a table is at most half used, so about 16 topics (up to
/// 32 where entries cluster).
pub(crate) const SLOTS: usize = 32;

/// `IdleMark::since` of a topic not seen idle.
const NOT_IDLE: u64 = u64::MAX;

/// Since when a sweep has seen a topic idle.
#[derive(Debug)]
pub(crate) struct IdleMark {
    /// Nanoseconds from the bus's start; `NOT_IDLE` if not seen idle.
    since: AtomicU64,
    /// The topic's count of publishes when `since` was set.
    published: AtomicU64,
}

impl IdleMark {
    pub(crate) fn new() -> Self {
        Self {
            since: AtomicU64::new(NOT_IDLE),
            published: AtomicU64::new(0),
        }
    }

    /// Records what a sweep sees at `now` (nanoseconds from the bus's start): whether the topic
    /// is `held`, and its count of publishes. Returns how long it has been idle, or `None` if
    /// it is not idle or became so only now. Sweeps are serialised (`Sweep::cursor`), so the
    /// two fields are written by one at a time; Relaxed is enough.
    pub(crate) fn look(&self, now: u64, held: bool, published: u64) -> Option<Duration> {
        if held {
            self.since.store(NOT_IDLE, Ordering::Relaxed);
            return None;
        }
        let since = self.since.load(Ordering::Relaxed);
        if since == NOT_IDLE || self.published.load(Ordering::Relaxed) != published {
            self.since.store(now, Ordering::Relaxed);
            self.published.store(published, Ordering::Relaxed);
            return None;
        }
        Some(Duration::from_nanos(now.saturating_sub(since)))
    }
}

/// The state of a bus's idle policy.
#[derive(Debug)]
pub(crate) struct Sweep {
    /// How long a topic stays idle before it is removed.
    pub(crate) after: Duration,
    /// Where the next sweep looks; a sweep that finds another under way skips its turn.
    pub(crate) cursor: Mutex<Cursor>,
    /// The zero of `IdleMark` times.
    started: Instant,
}

impl Sweep {
    pub(crate) fn new(after: Duration) -> Self {
        Self {
            after,
            cursor: Mutex::new(Cursor::default()),
            started: Instant::now(),
        }
    }

    /// Now, as `IdleMark` counts.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(NOT_IDLE - 1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::IdleMark;

    #[test]
    fn a_topic_is_idle_from_when_it_was_first_seen_free_and_unpublished() {
        let mark = IdleMark::new();
        // First seen free: idle from now, not yet for any time.
        assert_eq!(mark.look(10, false, 5), None);
        assert_eq!(mark.look(25, false, 5), Some(Duration::from_nanos(15)));
        // A publish since: idle again from now.
        assert_eq!(mark.look(30, false, 6), None);
        assert_eq!(mark.look(40, false, 6), Some(Duration::from_nanos(10)));
        // Held: not idle; free again: idle from then.
        assert_eq!(mark.look(50, true, 6), None);
        assert_eq!(mark.look(60, false, 6), None);
        assert_eq!(mark.look(61, false, 6), Some(Duration::from_nanos(1)));
    }
}
