//! Compile-time checks that the public types of `ringbus-redis` are `Send`, `Sync` and
//! `Unpin`, and that the futures of the link's async methods are `Send` (so a service can
//! spawn them), in the manner of tokio's `tests/async_send_sync.rs`. If this file builds, they
//! hold.

#![allow(dead_code)]

use ringbus_link::send_sync_unpin;
use ringbus_link::testing::assert_send_future;
use ringbus_redis::testing::{RedisServer, ServerOptions};
use ringbus_redis::{
    ConnectionState, Envelope, Json, Link, LinkBuilder, LinkCloseReport, LinkError, LinkStats,
    StreamOptions,
};

#[test]
fn public_types_are_send_sync_and_unpin() {
    send_sync_unpin!(
        Link,
        LinkBuilder,
        LinkError,
        LinkStats,
        LinkCloseReport,
        ConnectionState,
        StreamOptions,
        Json,
        Envelope<u64>,
        RedisServer,
        ServerOptions,
    );
}

/// Never called: the futures only need to type-check as `Send`.
async fn link_futures(link: Link, bus: ringbus::Bus) {
    assert_send_future(Link::builder("redis://127.0.0.1:6379").connect(&bus));
    assert_send_future(link.import::<u64>("t"));
    assert_send_future(link.import_with::<u64, _>("t", Json));
    assert_send_future(link.import_shared::<u64>("t", "g"));
    assert_send_future(link.import_shared_with::<u64, _>("t", "g", Json));
    assert_send_future(link.export::<u64>("t"));
    assert_send_future(link.export_with::<u64, _>("t", Json));
    assert_send_future(link.link_both::<Envelope<u64>>("t"));
    assert_send_future(link.link_both_with::<Envelope<u64>, _>("t", Json));
    assert_send_future(link.close(std::time::Duration::from_secs(1)));
}

#[test]
fn link_futures_are_send() {
    // That `link_futures` compiles is the check; naming it keeps it from being dead code.
    let _ = link_futures;
}
