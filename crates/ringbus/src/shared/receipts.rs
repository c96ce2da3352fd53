//! The delivery receipts of one topic ([`Tracker`]): the state behind
//! [`Delivery`](crate::Delivery), whose protocol `delivery.rs` describes.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, MutexGuard};

use super::BusState;
use crate::map::Fnv;

/// The receipts of one topic.
pub(crate) struct Tracker {
    pub(crate) state: Arc<BusState>,
    /// Handler failures per watched position.
    failures: Mutex<Failures>,
}

/// Handler failures per watched position: ring positions are numbers the bus makes, so the
/// crate's fast hash serves.
type Failures = HashMap<u64, usize, BuildHasherDefault<Fnv>>;

impl Tracker {
    pub(crate) fn new(state: Arc<BusState>) -> Self {
        Self {
            state,
            failures: Mutex::new(Failures::default()),
        }
    }

    fn failures(&self) -> MutexGuard<'_, Failures> {
        // Only counters live in the map: a panic cannot leave it inconsistent.
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The handler failures counted so far for the receipt at `position`.
    pub(crate) fn failures_at(&self, position: u64) -> usize {
        self.failures().get(&position).copied().unwrap_or(0)
    }

    /// Registers a receipt for `position`, before the message is written there.
    pub(crate) fn watch(&self, position: u64) {
        self.failures().insert(position, 0);
        self.state.progress.watch();
    }

    /// Drops the receipt for `position`.
    pub(crate) fn unwatch(&self, position: u64) {
        self.failures().remove(&position);
        self.state.progress.unwatch();
    }

    /// A handler failed on the messages at `start..start + len`. Called before the
    /// subscriber stores its new position; the error path, so it may take the lock.
    pub(crate) fn failed(&self, start: u64, len: u64) {
        let range = start..start.saturating_add(len);
        for (_, n) in self
            .failures()
            .iter_mut()
            .filter(|(p, _)| range.contains(p))
        {
            *n += 1;
        }
    }
}

impl fmt::Debug for Tracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracker")
            .field("receipts", &self.failures().len())
            .finish_non_exhaustive()
    }
}
