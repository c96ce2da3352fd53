//! Which subscriber's task this thread is polling, if any.
//!
//! Which subscriber (and so which bus) this thread is polling is kept in a thread-local,
//! `CURRENT`, set by `subscriber::Supervised` around each poll of a subscriber's task. Three
//! decisions read it: `Bus::close` and `Bus::wait_idle` called from inside a handler do not
//! wait for that handler's own bus (they would wait for themselves); a closed bus still accepts
//! the publishes of its own handlers while it drains (`BusState::refuses`); and `unsubscribe`
//! from inside a subscriber's own handler does not wait for its task. These calls are the
//! public API called from user code, which has no parameter to carry the caller's identity, so
//! the identity cannot be passed as explicit data without changing that API.

use std::cell::Cell;

thread_local! {
    /// The subscriber whose task this thread is polling, so `close` called from inside a
    /// handler does not wait for itself, and its bus lets it publish while draining (see
    /// `BusState::refuses`). Set by `subscriber::Supervised` for the length of each poll.
    ///
    /// A thread-local set around the poll rather than a `tokio::task_local!` scope: the
    /// scope would make every task's future bigger, and tokio moves a task's future several
    /// times while it spawns and ends it (see `subscriber::task::Stall`).
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// The subscriber whose task this thread is polling (inside its handler, or its loop), if any.
#[inline]
pub(crate) fn current() -> Option<Current> {
    CURRENT.with(Cell::get)
}

/// A subscriber's task as [`current`] gives it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Current {
    /// The subscriber's process-unique id.
    pub(crate) id: u64,
    /// Its bus (`BusState`'s address: the task holds the state, so it stays this bus's).
    pub(crate) bus: usize,
}

/// Sets [`CURRENT`] until dropped, then puts back what was there (also when a poll unwinds).
pub(crate) struct Polling(Option<Current>);

impl Polling {
    pub(crate) fn enter(current: Current) -> Self {
        Self(CURRENT.with(|c| c.replace(Some(current))))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}
