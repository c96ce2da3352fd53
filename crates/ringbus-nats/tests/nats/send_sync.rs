//! Compile-time checks that the public types of `ringbus-nats` are `Send`, `Sync` and `Unpin`,
//! and that the futures of the link's async methods are `Send` (so a service can spawn them),
//! in the manner of tokio's `tests/async_send_sync.rs`. If this file builds, they hold.

#![allow(dead_code)]

use ringbus_link::send_sync_unpin;
use ringbus_link::testing::assert_send_future;
use ringbus_nats::testing::{MemoryNats, NatsCluster, NatsServer, ServerOptions};
use ringbus_nats::{
    Auth, ConnectionState, Envelope, JetStreamOptions, Json, Link, LinkBuilder, LinkCloseReport,
    LinkError, LinkStats, Mode, Sharing, Tls,
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
        Mode,
        Sharing,
        JetStreamOptions,
        Auth,
        Tls,
        Json,
        Envelope<u64>,
        NatsServer,
        NatsCluster,
        ServerOptions,
        MemoryNats,
    );
}

/// Never called: the futures only need to type-check as `Send`.
async fn link_futures(link: Link, bus: ringbus::Bus) {
    assert_send_future(Link::builder("nats://127.0.0.1:4222").connect(&bus));
    assert_send_future(link.import::<u64>("t", Mode::Core));
    assert_send_future(link.import_shared::<u64>("t", Mode::JetStream, "g"));
    assert_send_future(link.import_as::<u64, _>("t", Mode::Core, Sharing::FanOut, Json));
    assert_send_future(link.export::<u64>("t", Mode::JetStream));
    assert_send_future(link.link_both::<Envelope<u64>>("t", Mode::Core));
    assert_send_future(link.export_requests::<u64, String>("r"));
    assert_send_future(link.import_requests::<u64, String>("r"));
    assert_send_future(link.import_requests_shared::<u64, String>("r", "g"));
    assert_send_future(link.close(std::time::Duration::from_secs(1)));
}

#[test]
fn link_futures_are_send() {
    // That `link_futures` compiles is the check; naming it keeps it from being dead code.
    let _ = link_futures;
}
