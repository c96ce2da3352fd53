//! What only a consumer-group link does: claiming a dead consumer's messages, acking only
//! after handling, dead-lettering bad input, trimming, linking both ways, credentials. The
//! cases every link shares (round trip, order, close, redelivery, dead letters, dedup, a
//! server kill and restart) run in the shared suite: `cargo test -p ringbus-conformance`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::streams::StreamRangeReply;
use ringbus::Bus;
use ringbus_redis::testing::RedisServer;
use ringbus_redis::{Link, LinkError, StreamOptions};
use tokio::sync::{mpsc, Notify};

use crate::{eventually, throughout, WAIT};
use ringbus_link::testing::{forwarding, Touchy};

fn options() -> StreamOptions {
    StreamOptions {
        claim_idle: Duration::from_millis(300),
        nack_delay: Duration::from_millis(100),
        max_deliver: 3,
        ..StreamOptions::default()
    }
}

async fn link(server: &RedisServer, bus: &Bus, options: StreamOptions) -> Link {
    Link::builder(server.url())
        .prefix("s")
        .streams(options)
        .connect(bus)
        .await
        .unwrap()
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The entries of stream `key`, through the link's own client.
async fn entries(link: &Link, key: &str) -> StreamRangeReply {
    let mut conn = link
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A field of a stream entry, as text.
/// Adds an entry with `fields` to `key` as a raw client would.
async fn xadd(conn: &mut redis::aio::MultiplexedConnection, key: &str, fields: &[(&str, &[u8])]) {
    let _: String = redis::cmd("XADD")
        .arg(key)
        .arg("*")
        .arg(fields)
        .query_async(conn)
        .await
        .unwrap();
}

fn field(entry: &redis::streams::StreamId, name: &str) -> String {
    match entry.map.get(name) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("field {name}: {other:?}"),
    }
}

/// Exports `jobs` from a new bus and publishes `messages` into it while a first importer,
/// whose handler never finishes, takes them all; then that importer dies (its close cut at
/// once), leaving them pending in the group. Returns the publishing bus and its link.
async fn pending_with_a_dead_consumer(server: &RedisServer, messages: &[u64]) -> (Bus, Link) {
    let publisher = Bus::new();
    let out = link(server, &publisher, options()).await;
    out.export::<u64>("jobs").await.unwrap();
    let stuck_bus = Bus::new();
    let never = Arc::new(Notify::new());
    let _stuck = stuck_bus
        .subscribe("jobs", move |_: &u64| {
            let never = never.clone();
            async move { never.notified().await }
        })
        .unwrap();
    let stuck = stuck_bus.topic::<u64>("jobs").unwrap();
    let dying = link(server, &stuck_bus, options()).await;
    dying.import::<u64>("jobs").await.unwrap();
    for &n in messages {
        publisher.publish("jobs", n).await.unwrap();
    }
    eventually("every message taken by the first importer", || {
        stuck.published() == messages.len() as u64
    })
    .await;
    let report = dying.close(Duration::ZERO).await;
    assert!(!report.complete, "{report:?}");
    assert_eq!(dying.stats().acked, 0);
    (publisher, out)
}

/// A message whose handler had not finished when its importer died is not acknowledged: a
/// live consumer of the group claims it after `claim_idle` and handles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_held_by_a_dead_consumer_is_claimed_and_handled_elsewhere() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (publisher, out) = pending_with_a_dead_consumer(&server, &[7]).await;

    // A live consumer of the same group claims it.
    let live_bus = Bus::new();
    let (tx, mut got) = mpsc::unbounded_channel();
    let _live = live_bus
        .subscribe("jobs", move |n: &u64| {
            let _ = tx.send(*n);
            async {}
        })
        .unwrap();
    let live = link(&server, &live_bus, options()).await;
    live.import::<u64>("jobs").await.unwrap();
    let n = tokio::time::timeout(WAIT, got.recv()).await.unwrap();
    assert_eq!(n, Some(7));
    eventually("acked by the live consumer", || live.stats().acked == 1).await;
    assert_eq!(live.stats().claimed, 1);
    assert!(live.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
    live_bus.close().await;
    publisher.close().await;
}

/// A claim of a dead consumer's messages takes no more than the import's room: with
/// `max_in_flight` 2 and its handler holding them, the live import claims two of the six and
/// hands the bus two, then the rest as the first are settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_no_more_than_the_imports_room() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (_publisher, out) = pending_with_a_dead_consumer(&server, &[0, 1, 2, 3, 4, 5]).await;
    let live_bus = Bus::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    let _live = live_bus
        .subscribe("jobs", move |_: &u64| {
            let held = held.clone();
            async move { held.acquire().await.map(|p| p.forget()) }
        })
        .unwrap();
    let handed = live_bus.topic::<u64>("jobs").unwrap();
    let narrow = StreamOptions {
        max_in_flight: 2,
        ..options()
    };
    let live = link(&server, &live_bus, narrow).await;
    live.import::<u64>("jobs").await.unwrap();
    eventually("two claimed and handed to the bus", || {
        handed.published() == 2
    })
    .await;
    assert_eq!(live.stats().claimed, 2, "{:?}", live.stats());
    gate.add_permits(6);
    eventually("all six acked by the live consumer", || {
        live.stats().acked == 6
    })
    .await;
    assert_eq!(handed.published(), 6);
    assert!(live.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
}

/// A handler that is still running holds its message unacknowledged; the ack follows the
/// handler, never precedes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ack_waits_for_every_local_handler() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let bus = Bus::new();
    let gate = Arc::new(Notify::new());
    let handled = Arc::new(AtomicU64::new(0));
    let (g, h) = (gate.clone(), handled.clone());
    // Two subscribers: a fast one and one that waits for the gate.
    let _fast = bus.subscribe("t", |_: &u64| async {}).unwrap();
    let _slow = bus
        .subscribe("t", move |_: &u64| {
            let (g, h) = (g.clone(), h.clone());
            async move {
                g.notified().await;
                h.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    // The handler is held longer than `options()`'s claim idle time: this link would claim
    // its own message again (a handler must finish within `claim_idle`).
    let held = StreamOptions {
        claim_idle: Duration::from_secs(60),
        ..options()
    };
    let l = link(&server, &bus, held).await;
    l.import::<u64>("t").await.unwrap();
    let mut conn = raw(&server).await;
    let fields: Vec<(&str, &[u8])> = vec![
        ("Ringbus-Topic", b"t"),
        ("Ringbus-Id", b"x-1"),
        ("Ringbus-Body", b"5"),
    ];
    xadd(&mut conn, "s:t", &fields).await;
    eventually("imported", || l.stats().imported == 1).await;
    // The import's settler runs on its own task: give an early ack time to show itself (a
    // check made at once missed it on a loaded machine).
    throughout("no ack while the slow handler runs", || {
        l.stats().acked == 0
    })
    .await;
    // The slow handler has not run: the message is pending, not acked.
    let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg("s:t")
        .arg("ringbus")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.count(), 1, "{pending:?}");
    assert_eq!(l.stats().acked, 0);
    gate.notify_one();
    eventually("acked after the slow handler", || l.stats().acked == 1).await;
    assert_eq!(handled.load(Ordering::SeqCst), 1);
    assert!(l.close(WAIT).await.complete);
    bus.close().await;
}

/// "No limit" said as `Duration::MAX`, in every wait a link is given: the link works (each
/// such wait counts as `ringbus_link::LONGEST_WAIT`) instead of overflowing when it turns
/// them into instants or into Redis's milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_without_a_limit_are_taken_as_very_long_ones() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let endless = StreamOptions {
        claim_idle: Duration::MAX,
        nack_delay: Duration::MAX,
        block: Duration::MAX,
        publish_retry_for: Duration::MAX,
        ..StreamOptions::default()
    };
    let connect = |bus: Bus| {
        let (url, streams) = (server.url(), endless.clone());
        async move {
            Link::builder(url)
                .connection_timeout(Duration::MAX)
                .response_timeout(Duration::MAX)
                .streams(streams)
                .connect(&bus)
                .await
                .unwrap()
        }
    };
    let (sender, receiver) = (Bus::new(), Bus::new());
    let (_sub, mut got) = forwarding(&receiver, "t");
    let import = connect(receiver.clone()).await;
    import.import::<u64>("t").await.unwrap();
    let export = connect(sender.clone()).await;
    export.export::<u64>("t").await.unwrap();
    sender.publish("t", 7u64).await.unwrap();
    assert_eq!(
        tokio::time::timeout(WAIT, got.recv()).await.unwrap(),
        Some(7)
    );
    eventually("acked", || import.stats().acked == 1).await;
    assert!(export.close(Duration::MAX).await.complete);
    assert!(import.close(Duration::MAX).await.complete);
    sender.close().await;
    receiver.close().await;
}

/// A codec is user code, and one that panics costs its message only: counted as an export
/// error on the way out, as bad input (and dead-lettered) on the way in, and the link goes
/// on. (A decoding panic used to end the import's task: nothing more came in.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codec_that_panics_costs_its_message_only() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (sender, receiver) = (Bus::new(), Bus::new());
    let (_sub, mut got) = forwarding(&receiver, "t");
    let import = link(&server, &receiver, options()).await;
    import.import_with("t", Touchy).await.unwrap();
    let export = link(&server, &sender, options()).await;
    export.export_with("t", Touchy).await.unwrap();
    for n in [13u64, 14, 42, 43] {
        sender.publish("t", n).await.unwrap();
    }
    for n in [42, 43] {
        assert_eq!(
            tokio::time::timeout(WAIT, got.recv()).await.unwrap(),
            Some(n)
        );
    }
    eventually("the export error counted", || {
        export.stats().export_errors == 1
    })
    .await;
    eventually("the bad input dead-lettered", || {
        import.stats().dead_lettered == 1
    })
    .await;
    // The export counts a batch once its XADDs are answered, which may be after the import
    // has already handed the messages on.
    eventually("the three others exported", || export.stats().exported == 3).await;
    assert_eq!(import.stats().bad_input, 1);
    assert!(export.close(WAIT).await.complete);
    assert!(import.close(WAIT).await.complete);
    sender.close().await;
    receiver.close().await;
}

/// Entries that do not decode (or lack fields) are dead-lettered and counted; the good ones
/// around them are handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_wire_input_is_dead_lettered_and_counted() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let bus = Bus::new();
    let (_sub, mut got) = forwarding(&bus, "t");
    let l = link(&server, &bus, options()).await;
    l.import::<u64>("t").await.unwrap();
    let mut conn = raw(&server).await;
    let bad: [&[(&str, &[u8])]; 4] = [
        &[
            ("Ringbus-Topic", b"t"),
            ("Ringbus-Id", b"a"),
            ("Ringbus-Body", b"{not json"),
        ],
        &[("Ringbus-Topic", b"t"), ("Ringbus-Body", b"1")],
        &[
            ("Ringbus-Topic", b"other"),
            ("Ringbus-Id", b"c"),
            ("Ringbus-Body", b"1"),
        ],
        &[("junk", b"\xff\xfe")],
    ];
    for fields in bad {
        xadd(&mut conn, "s:t", fields).await;
    }
    let good: &[(&str, &[u8])] = &[
        ("Ringbus-Topic", b"t"),
        ("Ringbus-Id", b"d"),
        ("Ringbus-Body", b"42"),
    ];
    xadd(&mut conn, "s:t", good).await;
    assert_eq!(
        tokio::time::timeout(WAIT, got.recv()).await.unwrap(),
        Some(42)
    );
    eventually("4 dead letters", || l.stats().dead_lettered == 4).await;
    assert_eq!(l.stats().bad_input, 4);
    let dead = entries(&l, &l.dead_letter_key("t").unwrap()).await;
    assert_eq!(dead.ids.len(), 4);
    assert!(field(&dead.ids[0], "Ringbus-Dead-Reason").contains("does not decode"));
    // Nothing is left pending: the bad entries were acked with their dead letters.
    assert!(l.close(WAIT).await.complete);
    let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg("s:t")
        .arg("ringbus")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.count(), 0);
    bus.close().await;
}

/// MAXLEN trimming: a stream never holds more than `max_len` entries (exact trimming here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_trim_the_stream_to_max_len() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let bus = Bus::new();
    let options = StreamOptions {
        max_len: Some(10),
        exact_trim: true,
        ..options()
    };
    let l = link(&server, &bus, options).await;
    l.export::<u64>("t").await.unwrap();
    for n in 0..100u64 {
        bus.publish("t", n).await.unwrap();
    }
    assert!(l.close(WAIT).await.complete);
    assert_eq!(l.stats().exported, 100);
    let kept = entries(&l, "s:t").await;
    assert_eq!(kept.ids.len(), 10);
    assert_eq!(field(&kept.ids[0], "Ringbus-Body"), "90");
    bus.close().await;
}

/// An export sends what is queued as one pipeline of XADDs: a message in it that cannot be
/// sent is counted and logged, and costs only itself; the others are stored, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_cannot_be_exported_costs_only_itself() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    type Item = ringbus_redis::Envelope<u64>;
    let bus = Bus::new();
    let l = link(&server, &bus, options()).await;
    l.export::<Item>("t").await.unwrap();
    // One cursor store for the four: the export takes them as one batch.
    let items = [
        Item::new(1).with_id("one"),
        Item::new(2).with_id("two\r\nlines"),
        Item::new(3).with_id("three"),
        Item::new(4).with_id("four"),
    ];
    bus.publish_batch("t", items).await.unwrap();
    assert!(l.close(WAIT).await.complete);
    let stats = l.stats();
    assert_eq!((stats.exported, stats.export_errors), (3, 1), "{stats:?}");
    let stored = entries(&l, "s:t").await;
    let ids: Vec<String> = stored.ids.iter().map(|e| field(e, "Ringbus-Id")).collect();
    assert_eq!(ids, ["one", "three", "four"]);
    bus.close().await;
}

/// A message published while Redis is down is sent again, not given up, while the server is
/// unreachable (within `publish_retry_for`), and is stored once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_made_while_redis_is_down_is_stored_once_it_is_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let bus = Bus::new();
    let l = link(&server, &bus, options()).await;
    l.export::<u64>("t").await.unwrap();
    bus.publish("t", 1u64).await.unwrap();
    eventually("the first exported", || l.stats().exported == 1).await;
    server.kill();
    bus.publish("t", 2u64).await.unwrap();
    // The pipeline fails with a lost connection: it is sent again, not counted as an error.
    eventually("a failed export seen", || {
        let stats = l.stats();
        stats.export_retries >= 1 || stats.export_errors >= 1
    })
    .await;
    assert_eq!(l.stats().export_errors, 0, "{:?}", l.stats());
    server.start_again();
    eventually("the second exported", || l.stats().exported == 2).await;
    let stored = entries(&l, "s:t").await;
    let bodies: Vec<String> = stored
        .ids
        .iter()
        .map(|e| field(e, "Ringbus-Body"))
        .collect();
    assert_eq!(bodies, ["2"], "a non-persistent server restarts empty");
    assert!(l.close(WAIT).await.complete);
    bus.close().await;
}
/// A topic linked both ways between two processes: each sees the other's messages, never its
/// own back, and nothing loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_both_carries_each_way_without_echo() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    type Chat = ringbus_redis::Envelope<String>;
    let (a, b) = (Bus::new(), Bus::new());
    let (tx_a, mut seen_a) = mpsc::unbounded_channel();
    let (tx_b, mut seen_b) = mpsc::unbounded_channel();
    let _sa = a
        .subscribe("chat", move |m: &Chat| {
            let _ = tx_a.send((m.body().clone(), m.is_imported()));
            async {}
        })
        .unwrap();
    let _sb = b
        .subscribe("chat", move |m: &Chat| {
            let _ = tx_b.send((m.body().clone(), m.is_imported()));
            async {}
        })
        .unwrap();
    // Each process its own group, so each sees every message.
    let la = link(
        &server,
        &a,
        StreamOptions {
            group: "a".into(),
            ..options()
        },
    )
    .await;
    let lb = link(
        &server,
        &b,
        StreamOptions {
            group: "b".into(),
            ..options()
        },
    )
    .await;
    la.link_both::<Chat>("chat").await.unwrap();
    lb.link_both::<Chat>("chat").await.unwrap();
    match la.link_both::<u64>("plain").await {
        Err(LinkError::EchoLoop { .. }) => {}
        other => panic!("expected EchoLoop, got {other:?}"),
    }
    a.publish("chat", Chat::new("from a".into())).await.unwrap();
    b.publish("chat", Chat::new("from b".into())).await.unwrap();
    let mut got_a = vec![recv(&mut seen_a).await, recv(&mut seen_a).await];
    let mut got_b = vec![recv(&mut seen_b).await, recv(&mut seen_b).await];
    got_a.sort();
    got_b.sort();
    assert_eq!(
        got_a,
        [("from a".to_string(), false), ("from b".to_string(), true)]
    );
    assert_eq!(
        got_b,
        [("from a".to_string(), true), ("from b".to_string(), false)]
    );
    assert!(la.close(WAIT).await.complete);
    assert!(lb.close(WAIT).await.complete);
    // Each export went out once, each import came in once: nothing looped.
    let (sa, sb) = (la.stats(), lb.stats());
    assert_eq!(
        (sa.exported, sa.imported, sb.exported, sb.imported),
        (1, 1, 1, 1)
    );
    assert!(seen_a.try_recv().is_err() && seen_b.try_recv().is_err());
    a.close().await;
    b.close().await;
}

async fn recv(rx: &mut mpsc::UnboundedReceiver<(String, bool)>) -> (String, bool) {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap()
}

/// A refused password is an error at connect, and the builder's Debug never shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_connect_and_never_prints() {
    let Some(server) =
        RedisServer::start_with(ringbus_redis::testing::ServerOptions::new().password("right"))
    else {
        return;
    };
    let bus = Bus::new();
    let wrong = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let builder = Link::builder(wrong);
    assert!(!format!("{builder:?}").contains("wrong"));
    match builder.connect(&bus).await {
        Err(LinkError::Connect(e)) => assert!(!e.to_string().contains("wrong@"), "{e}"),
        other => panic!("expected a connect error, got {other:?}"),
    }
    let l = Link::builder(server.url()).connect(&bus).await.unwrap();
    assert!(!format!("{l:?}").contains("right"));
    assert!(l.close(WAIT).await.complete);
    bus.close().await;
}

/// With the `tls` feature, a `rediss://` URL makes a TLS connection (rustls with its ring
/// provider, never a panic for want of one): against a plain-text server, an `Err`.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_against_a_plain_server_is_an_error_not_a_panic() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let bus = Bus::new();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let connected = Link::builder(url)
        .connection_timeout(Duration::from_secs(2))
        .connect(&bus)
        .await;
    assert!(
        matches!(connected, Err(LinkError::Connect(_))),
        "{connected:?}"
    );
    bus.close().await;
}

/// With the `tls` feature, a `rediss://` link to a TLS-only server round-trips messages; the
/// server's certificate is verified: without the private CA that signed it, connecting fails.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_round_trips_through_a_tls_only_server_whose_certificate_is_verified() {
    use ringbus_redis::testing::ServerOptions;
    let Some(server) = RedisServer::start_with(ServerOptions::new().tls(true)) else {
        return;
    };
    assert!(server.url().starts_with("rediss://"), "{}", server.url());
    let Some(ca) = server.tls_root_certificate() else {
        panic!("a TLS server has a CA");
    };
    let bus = Bus::new();
    let untrusted = Link::builder(server.url())
        .connection_timeout(Duration::from_secs(2))
        .connect(&bus)
        .await;
    assert!(
        matches!(&untrusted, Err(LinkError::Connect(e)) if e.to_string().contains("UnknownIssuer")),
        "a certificate from an unknown CA must be refused: {untrusted:?}"
    );
    let (_sub, mut got) = forwarding(&bus, "in");
    let connect = || {
        Link::builder(server.url())
            .prefix("s")
            .streams(options())
            .tls_root_certificate(ca.clone())
            .connect(&bus)
    };
    let (out, inbound) = (connect().await.unwrap(), connect().await.unwrap());
    out.export::<u64>("out").await.unwrap();
    // What `out` exports to `s:out`, `inbound` reads back as topic "in" of the same stream.
    inbound.import::<u64>("in").await.unwrap();
    let mut conn = inbound
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for n in 0..3u64 {
        bus.publish("out", n).await.unwrap();
    }
    assert!(out.close(WAIT).await.complete);
    let exported = entries(&out, "s:out").await;
    assert_eq!(exported.ids.len(), 3);
    let fields: Vec<(&str, &[u8])> = vec![
        ("Ringbus-Topic", b"in"),
        ("Ringbus-Id", b"tls-1"),
        ("Ringbus-Body", b"42"),
    ];
    xadd(&mut conn, "s:in", &fields).await;
    let n = tokio::time::timeout(WAIT, got.recv()).await.unwrap();
    assert_eq!(n, Some(42));
    eventually("acked over TLS", || inbound.stats().acked == 1).await;
    assert!(inbound.close(WAIT).await.complete);
    bus.close().await;
}

/// An import dropped before it finished (after its first poll, on a current-thread runtime,
/// so it was waiting on the server) leaves the topic free to import again, as its docs say
/// (the group keeps the messages for a later import): not `AlreadyLinked` for good.
#[tokio::test]
async fn an_import_dropped_midway_leaves_the_topic_free_to_import_again() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let bus = Bus::new();
    let link = link(&server, &bus, options()).await;
    tokio::select! {
        biased;
        r = link.import::<u64>("t") => panic!("finished on its first poll: {r:?}"),
        () = std::future::ready(()) => {}
    }
    link.import::<u64>("t")
        .await
        .expect("the dropped import left the topic claimed");
    assert!(link.close(WAIT).await.complete);
}

/// A `max_in_flight` larger than the import can count (`usize::MAX`) is taken as the largest
/// it can: the import works, rather than its task dying with `import` already `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_too_large_for_a_channel_is_taken_as_the_largest() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let out_bus = Bus::new();
    let out = link(&server, &out_bus, options()).await;
    out.export::<u64>("t").await.unwrap();
    let in_bus = Bus::new();
    let (_sub, mut rx) = forwarding(&in_bus, "t");
    let wide = StreamOptions {
        max_in_flight: usize::MAX,
        ..options()
    };
    let inn = link(&server, &in_bus, wide).await;
    inn.import::<u64>("t").await.unwrap();
    out_bus.publish("t", 7u64).await.unwrap();
    let got = tokio::time::timeout(WAIT, rx.recv()).await;
    assert_eq!(got.ok().flatten(), Some(7));
    assert!(inn.close(WAIT).await.complete);
}

/// A pattern export adds every matching topic, made before or after it, to the topic's own
/// stream in its order, and nothing else; a topic whose name cannot be part of a stream key
/// is counted, not sent; a name the pattern covers is not exported again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_export_adds_each_matching_topic_to_its_stream() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    type Item = ringbus_redis::Envelope<u64>;
    let bus = Bus::new();
    bus.topic::<Item>("orders.eu").unwrap();
    let l = link(&server, &bus, options()).await;
    assert!(matches!(
        l.export_pattern::<Item>("orders.>.x").await,
        Err(LinkError::BadName { .. })
    ));
    l.export_pattern::<Item>("orders.*").await.unwrap();
    assert!(matches!(
        l.export::<Item>("orders.us").await,
        Err(LinkError::AlreadyLinked { .. })
    ));
    for n in 0..5u64 {
        let id = |topic: &str| format!("{topic}-{n}");
        for topic in [
            "orders.eu",
            "orders.us",
            "orders.eu.paid",
            "billing",
            "orders.a:b",
        ] {
            bus.publish(topic, Item::new(n).with_id(id(topic)))
                .await
                .unwrap();
        }
    }
    assert!(l.close(WAIT).await.complete);
    let stats = l.stats();
    assert_eq!((stats.exported, stats.export_errors), (10, 5), "{stats:?}");
    for topic in ["orders.eu", "orders.us"] {
        let stored = entries(&l, &format!("s:{topic}")).await;
        let ids: Vec<String> = stored.ids.iter().map(|e| field(e, "Ringbus-Id")).collect();
        let sent: Vec<String> = (0..5).map(|n| format!("{topic}-{n}")).collect();
        assert_eq!(ids, sent, "{topic}");
        let topics: Vec<String> = stored
            .ids
            .iter()
            .map(|e| field(e, "Ringbus-Topic"))
            .collect();
        assert!(topics.iter().all(|t| t == topic), "{topics:?}");
    }
    for unmatched in ["orders.eu.paid", "billing"] {
        assert!(entries(&l, &format!("s:{unmatched}")).await.ids.is_empty());
    }
    bus.close().await;
}
