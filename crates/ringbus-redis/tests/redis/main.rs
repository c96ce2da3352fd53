//! The Redis link's integration tests, one module per subject, in one test binary (each
//! test binary links tokio, ringbus and the Redis client anew).
//!
//! Every test starts its own `redis-server` on 127.0.0.1 (see `ringbus_redis::testing`);
//! without the binary they skip with a message, unless `REQUIRE_REDIS=1` (as in CI). Run one
//! module with `cargo test -p ringbus-redis --test redis streams::`. The cases every link
//! shares run in the shared suite, `cargo test -p ringbus-conformance`.
//! Waits are bounded by deadlines that fail the test; none is a sleep standing in for an
//! event.

mod send_sync;
mod streams;

use std::time::Duration;

/// The longest any test waits for an event.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Polls `cond` until it holds, failing the test after `WAIT`.
pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {WAIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
