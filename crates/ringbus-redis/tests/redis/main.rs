//! The Redis link's integration tests, one module per subject, in one test binary (each
//! test binary links tokio, ringbus and the Redis client anew).
//!
//! Every test starts its own `redis-server` on 127.0.0.1 (see `ringbus_redis::testing`);
//! without the binary they skip with a message, unless `REQUIRE_REDIS=1` (as in CI). Run one
//! module with `cargo test -p ringbus-redis --test redis streams::`. The cases every link
//! shares run in the shared suite, `cargo test -p ringbus-conformance`.
//! Waits are bounded by deadlines that fail the test; none is a sleep standing in for an
//! event. Where a test checks that something does *not* happen (an early ack), it gives the
//! wrong behaviour [`ABSENT`] to show itself: that window can only make such a check pass
//! when it should have failed, never the other way.

mod send_sync;
mod streams;

use std::time::Duration;

pub(crate) use ringbus_link::testing::{eventually, WAIT};

/// How long a test watches for an event that must not happen.
pub(crate) const ABSENT: Duration = Duration::from_millis(1500);

/// Polls `cond` for [`ABSENT`], failing the test as soon as it does not hold.
pub(crate) async fn throughout(what: &str, mut cond: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + ABSENT;
    while tokio::time::Instant::now() < end {
        assert!(cond(), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
