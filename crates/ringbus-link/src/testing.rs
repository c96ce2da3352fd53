//! What the link engines' own tests share (feature `testing`, which the engines turn on in
//! their dev-dependencies): bounded waits, a subscriber that
//! forwards to a channel, a codec that panics on cue, and compile-time `Send`/`Sync`
//! assertions.
//!
//! Waits are bounded by deadlines that fail the test; none is a sleep standing in for an
//! event.

use std::future::Future;
use std::time::Duration;

use ringbus::{Bus, Subscription};
use tokio::sync::mpsc;

use crate::{Codec, CodecError, Json, Meta};

/// The longest a test waits for an event.
pub const WAIT: Duration = Duration::from_secs(20);

/// Polls `cond` until it holds, failing the test after [`WAIT`].
///
/// # Panics
///
/// When `cond` does not hold within [`WAIT`]; the message names `what`.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {WAIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A subscriber of `topic` on `bus` that sends every message it handles to the returned
/// channel.
///
/// # Panics
///
/// When the bus refuses the subscription (a closed bus, or `topic` carries another type).
pub fn forwarding(bus: &Bus, topic: &str) -> (Subscription, mpsc::UnboundedReceiver<u64>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sub = bus
        .subscribe(topic, move |n: &u64| {
            let _ = tx.send(*n);
            async {}
        })
        .unwrap();
    (sub, rx)
}

/// JSON for `u64`, except that encoding 13 and decoding the body `14` panic: a codec is
/// user code, and one that panics must cost its message only.
#[derive(Clone, Copy, Debug)]
pub struct Touchy;

impl Codec<u64> for Touchy {
    fn encode(&self, msg: &u64, body: &mut Vec<u8>, meta: &mut Meta) -> Result<(), CodecError> {
        assert_ne!(*msg, 13, "Touchy cannot encode 13");
        Codec::<u64>::encode(&Json, msg, body, meta)
    }

    fn decode(&self, body: &[u8], meta: Meta) -> Result<u64, CodecError> {
        assert_ne!(body, b"14", "Touchy cannot decode 14");
        Codec::<u64>::decode(&Json, body, meta)
    }
}

/// Compiles only if `T` is `Send`.
pub fn assert_send<T: Send>() {}

/// Compiles only if `T` is `Sync`.
pub fn assert_sync<T: Sync>() {}

/// Compiles only if `T` is `Unpin`.
pub fn assert_unpin<T: Unpin>() {}

/// Compiles only if the future `F` is `Send` (so a service can spawn it); never polls it.
pub fn assert_send_future<F: Future + Send>(_: F) {}

/// Asserts at compile time that each type is `Send`, `Sync` and `Unpin`, in the manner of
/// tokio's `tests/async_send_sync.rs`: if the call builds, they hold.
///
/// ```
/// ringbus_link::send_sync_unpin!(ringbus_link::Json, ringbus_link::Headers);
/// ```
#[macro_export]
macro_rules! send_sync_unpin {
    ($($ty:ty),* $(,)?) => {
        $(
            $crate::testing::assert_send::<$ty>();
            $crate::testing::assert_sync::<$ty>();
            $crate::testing::assert_unpin::<$ty>();
        )*
    };
}
