//! The ground floor: the plain state a bus, its topics and its subscribers' tasks share, with
//! the few operations on it that every layer above needs. Nothing here knows of a topic's
//! ring, a handler, or the bus's registry.
//!
//! - [`BusState`]: what every topic of a bus shares with it (closed, progress, settings).
//! - [`SubShared`]: a subscriber's counters, its unsubscribe request and its end.
//! - [`Tracker`]: a topic's delivery receipts.
//! - [`current()`]: which subscriber's task this thread is polling (a thread-local).

mod bus;
mod current;
mod receipts;
mod subscriber;

pub(crate) use bus::{next_subscriber_id, BusState};
pub(crate) use current::{current, Current, Polling};
pub(crate) use receipts::Tracker;
pub(crate) use subscriber::{Counters, SubShared, IDLE, POLLING};
