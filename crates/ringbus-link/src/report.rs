//! What every engine's link reports of itself: the state of its connection
//! ([`ConnectionState`], kept by an engine in a [`State`]) and what its `close` did
//! ([`CloseReport`], over the engine's counters).

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The state of a link's connection to its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// Connected.
    Connected,
    /// The connection was lost; the link connects again (each engine's docs say when).
    Disconnected,
    /// Closed by the link's `close`.
    Closed,
}

const CONNECTED: u8 = 0;
const DISCONNECTED: u8 = 1;
const CLOSED: u8 = 2;

/// A link's [`ConnectionState`], read and set from any task. Once closed it stays closed: a
/// connection task that sees its connection come back or go after the close does not undo
/// it.
#[derive(Debug)]
pub struct State(AtomicU8);

impl State {
    /// Disconnected: the link has not connected yet.
    pub fn new() -> Self {
        Self(AtomicU8::new(DISCONNECTED))
    }

    /// The state now.
    pub fn get(&self) -> ConnectionState {
        match self.0.load(Ordering::Relaxed) {
            CONNECTED => ConnectionState::Connected,
            DISCONNECTED => ConnectionState::Disconnected,
            _ => ConnectionState::Closed,
        }
    }

    /// Records `state`, unless the link is closed.
    pub fn set(&self, state: ConnectionState) {
        let value = match state {
            ConnectionState::Connected => CONNECTED,
            ConnectionState::Disconnected => DISCONNECTED,
            ConnectionState::Closed => CLOSED,
        };
        // Relaxed: the state is a report, nothing is published through it.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now != CLOSED).then_some(value)
            });
    }
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

/// What a link's `close` did; `S` is the engine's counters (its `LinkStats`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CloseReport<S> {
    /// True if every step finished, inside the deadline.
    pub complete: bool,
    /// The step the deadline cut, if any (also "settling imports" if an import's task had
    /// ended by a panic: what it held was not settled; and "closing the connection" if the
    /// connection ended in an error instead of the server's answer to its close).
    pub cut_at: Option<&'static str>,
    /// Imports handed to the bus and not settled (acked, given back or dead-lettered) when
    /// the deadline passed; the server delivers them again (each engine's docs say when).
    pub unsettled_imports: u64,
    /// Exports not confirmed when the deadline passed, at most: still queued for the server
    /// (as counted when the close reached them) or awaiting its answer.
    pub unacked_exports: u64,
    /// The counters at the end.
    pub stats: S,
    /// How long the close took.
    pub elapsed: Duration,
}

#[cfg(test)]
mod tests {
    use super::{ConnectionState, State};

    #[test]
    fn a_closed_state_stays_closed() {
        let state = State::new();
        assert_eq!(state.get(), ConnectionState::Disconnected);
        state.set(ConnectionState::Connected);
        assert_eq!(state.get(), ConnectionState::Connected);
        state.set(ConnectionState::Closed);
        state.set(ConnectionState::Connected);
        state.set(ConnectionState::Disconnected);
        assert_eq!(state.get(), ConnectionState::Closed);
    }
}
