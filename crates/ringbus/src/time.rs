//! The bus's timers run on tokio's time driver, as `tokio::time` does (guarantee 9).
//!
//! Every timer of the bus (a [`Context`](crate::Context) deadline, a subscriber's stall
//! timeout, a retry policy's backoff, a bounded close's grace) is a `tokio::time` timer of
//! the runtime reachable where it is made. The bus changes nothing process-wide to work
//! around what a runtime lacks: no panic hook, no helper thread.
//!
//! Two cases are told apart:
//! - No tokio runtime is reachable (a plain thread, another executor): detected with
//!   `Handle::try_current`, and refused with an `Err` where the operation returns one
//!   (`NoRuntime`).
//! - A runtime built without its time driver (`enable_time` / `enable_all` not called):
//!   tokio (1.54) offers no way to ask a runtime whether it has one short of making a timer,
//!   which panics. So the bus does what `tokio::time` does: making the timer panics, with
//!   tokio's message ("timers are disabled. Call `enable_time` ..."). Where the timer would
//!   otherwise first be made inside a subscriber's task, long after the call that asked for
//!   it, the bus makes one up front ([`require_driver`]), so the panic comes from that call.

use std::time::Duration;

/// True if a tokio runtime is reachable from here: a timer can be made (if that runtime has
/// a time driver).
pub(crate) fn runtime_reachable() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Makes a timer and drops it, so that a runtime without a time driver panics here, with
/// tokio's message, rather than later in a task.
///
/// # Panics
///
/// As [`tokio::time::sleep`]: outside a runtime, or on one built without its time driver.
pub(crate) fn require_driver() {
    drop(tokio::time::sleep(Duration::ZERO));
}
