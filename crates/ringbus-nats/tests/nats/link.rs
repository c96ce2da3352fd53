//! The link's checks at wiring time, credentials, bad input from the wire, and links both
//! ways, against a real `nats-server` on 127.0.0.1 (skipped without one unless
//! `REQUIRE_NATS=1`).

use std::time::Duration;

use ringbus::Bus;
use ringbus_link::testing::{eventually, forwarding, Touchy, WAIT};
use ringbus_nats::testing::{NatsServer, ServerOptions};
use ringbus_nats::{Auth, Envelope, JetStreamOptions, Json, Link, LinkError, Mode, Sharing};
use tokio::sync::mpsc;

async fn recv<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("nothing within the wait")
        .expect("channel closed")
}

/// Receives `n` messages `(topic, k)` for each topic of `bases`, and checks that each topic's
/// are its base and the `n - 1` numbers after it, in order.
async fn expect_in_order(
    rx: &mut mpsc::UnboundedReceiver<(String, u64)>,
    bases: &[(&str, u64)],
    n: u64,
) {
    let mut got = Vec::new();
    for _ in 0..bases.len() as u64 * n {
        got.push(recv(rx).await);
    }
    for &(topic, base) in bases {
        let seen: Vec<u64> = got
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, k)| *k)
            .collect();
        assert_eq!(seen, (base..base + n).collect::<Vec<_>>(), "{topic}");
    }
}

/// A subscriber of `pattern` on `bus` sending each `(topic, n)` it handles to the receiver.
fn forwarding_pattern(
    bus: &Bus,
    pattern: &str,
) -> (
    ringbus::Subscription,
    mpsc::UnboundedReceiver<(String, u64)>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sub = bus
        .subscribe_pattern(pattern, move |topic: &str, n: &u64| {
            let _ = tx.send((topic.to_string(), *n));
            async {}
        })
        .unwrap();
    (sub, rx)
}

/// A JetStream link (memory storage, `js` otherwise) on `bus` under `prefix`.
async fn js_link(server: &NatsServer, prefix: &str, js: JetStreamOptions, bus: &Bus) -> Link {
    Link::builder(server.url())
        .prefix(prefix)
        .jetstream(JetStreamOptions {
            memory_storage: true,
            ..js
        })
        .connect(bus)
        .await
        .unwrap()
}

/// A bus exporting `topic` over JetStream under `prefix`, and its link.
async fn exporting(
    server: &NatsServer,
    prefix: &str,
    js: JetStreamOptions,
    topic: &str,
) -> (Bus, Link) {
    let bus = Bus::new();
    let link = js_link(server, prefix, js, &bus).await;
    link.export::<u64>(topic, Mode::JetStream).await.unwrap();
    (bus, link)
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_at_connect_and_secrets_stay_out_of_debug() {
    let Some(server) =
        NatsServer::start_with(ServerOptions::new().user_password("svc", "right-secret"))
    else {
        return;
    };
    let bus = Bus::new();
    let wrong = Link::builder(server.url())
        .auth(Auth::user_password("svc", "wrong-secret"))
        .connect(&bus)
        .await;
    let err = wrong.expect_err("a wrong password must not connect");
    assert!(matches!(err, LinkError::Connect(_)), "{err:?}");
    let text = err.to_string().to_lowercase();
    assert!(text.contains("authorization"), "{text}");
    assert!(!format!("{err:?}{err}").contains("wrong-secret"));

    let builder = Link::builder(server.url()).auth(Auth::user_password("svc", "right-secret"));
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("right-secret") && shown.contains("redacted"),
        "{shown}"
    );
    let link = builder
        .connect(&bus)
        .await
        .expect("the right password connects");
    assert!(!format!("{link:?}").contains("right-secret"));
    assert!(link.close(WAIT).await.complete);
    for auth in [
        Auth::Token("tok-secret".into()),
        Auth::NKey("SUAseed-secret".into()),
    ] {
        assert!(!format!("{auth:?}").contains("secret"), "{auth:?}");
    }
}

#[tokio::test]
async fn bad_topics_and_prefixes_are_refused_when_the_link_is_made() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let bus = Bus::new();
    let err = Link::builder(server.url())
        .prefix("bad prefix")
        .connect(&bus)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LinkError::BadName { what: "prefix", .. }),
        "{err}"
    );
    let link = Link::builder(server.url()).connect(&bus).await.unwrap();
    for topic in ["", "a b", "a.>", "x..y"] {
        let err = link.export::<u64>(topic, Mode::Core).await.unwrap_err();
        assert!(
            matches!(err, LinkError::BadName { what: "topic", .. }),
            "{err}"
        );
        let err = link
            .import::<u64>(topic, Mode::JetStream)
            .await
            .unwrap_err();
        assert!(
            matches!(err, LinkError::BadName { what: "topic", .. }),
            "{err}"
        );
    }
    link.export::<u64>("ok", Mode::Core).await.unwrap();
    let err = link.export::<u64>("ok", Mode::Core).await.unwrap_err();
    assert!(matches!(err, LinkError::AlreadyLinked { .. }), "{err}");
    // Both ways with a type that cannot tell imports apart would loop forever: refused.
    let err = link.link_both::<u64>("loop", Mode::Core).await.unwrap_err();
    assert!(matches!(err, LinkError::EchoLoop { .. }), "{err}");
    assert!(link.close(WAIT).await.complete);
    let err = link.export::<u64>("late", Mode::Core).await.unwrap_err();
    assert!(matches!(err, LinkError::Closed), "{err}");
    bus.close().await;
}

/// Garbage on a linked subject: counted, logged, dead-lettered on JetStream; the link goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_from_the_wire_is_counted_and_never_stalls_the_link() {
    for mode in [Mode::Core, Mode::JetStream] {
        let Some(server) = NatsServer::start() else {
            return;
        };
        let bus = Bus::new();
        let (_sub, mut rx) = forwarding(&bus, "n");
        let link = Link::builder(server.url()).connect(&bus).await.unwrap();
        link.import::<u64>("n", mode).await.unwrap();
        let subject = link.subject("n").unwrap();
        let raw = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(raw.clone());
        let mut good = async_nats::HeaderMap::new();
        good.insert("Ringbus-Topic", "n");
        good.insert("Ringbus-Id", "1");
        let mut wrong_topic = good.clone();
        wrong_topic.insert("Ringbus-Topic", "other");
        let send = |headers: Option<async_nats::HeaderMap>, body: &'static str| {
            let (raw, js, subject) = (raw.clone(), js.clone(), subject.clone());
            async move {
                match (mode, headers) {
                    (Mode::Core, Some(h)) => raw
                        .publish_with_headers(subject, h, body.into())
                        .await
                        .unwrap(),
                    (Mode::Core, None) => raw.publish(subject, body.into()).await.unwrap(),
                    (Mode::JetStream, Some(h)) => {
                        js.publish_with_headers(subject, h, body.into())
                            .await
                            .unwrap()
                            .await
                            .unwrap();
                    }
                    (Mode::JetStream, None) => {
                        js.publish(subject, body.into())
                            .await
                            .unwrap()
                            .await
                            .unwrap();
                    }
                }
            }
        };
        send(None, "7").await; // no headers
        send(Some(good.clone()), "{not json").await; // does not decode
        send(Some(wrong_topic), "7").await; // another topic's header
        send(Some(good.clone()), "42").await; // fine
        raw.flush().await.unwrap();
        assert_eq!(recv(&mut rx).await, 42, "{mode:?}");
        eventually("bad input counted", || link.stats().bad_input == 3).await;
        if mode == Mode::JetStream {
            eventually("bad input dead-lettered", || {
                link.stats().dead_lettered == 3
            })
            .await;
        }
        assert!(link.close(WAIT).await.complete);
        bus.close().await;
    }
}

/// "No limit" said as `Duration::MAX`, in every wait a link is given: the link works (each
/// such wait counts as `ringbus_link::LONGEST_WAIT`) instead of overflowing when it turns
/// them into instants or into the server's nanoseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_without_a_limit_are_taken_as_very_long_ones() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let endless = JetStreamOptions {
        nack_delay: Duration::MAX,
        ack_wait: Duration::MAX,
        publish_retry_for: Duration::MAX,
        duplicate_window: Duration::MAX,
        ..JetStreamOptions::default()
    };
    let connect = |bus: Bus| {
        let (url, js) = (server.url(), endless.clone());
        async move {
            Link::builder(url)
                .connection_timeout(Duration::MAX)
                .request_timeout(Duration::MAX)
                .jetstream(js)
                .connect(&bus)
                .await
                .unwrap()
        }
    };
    let (sender, receiver) = (Bus::new(), Bus::new());
    let (_sub, mut rx) = forwarding(&receiver, "n");
    let import = connect(receiver.clone()).await;
    import.import::<u64>("n", Mode::JetStream).await.unwrap();
    let export = connect(sender.clone()).await;
    export.export::<u64>("n", Mode::JetStream).await.unwrap();
    sender.publish("n", 7u64).await.unwrap();
    assert_eq!(recv(&mut rx).await, 7);
    eventually("acked", || import.stats().acked == 1).await;
    assert!(export.close(Duration::MAX).await.complete);
    assert!(import.close(Duration::MAX).await.complete);
    sender.close().await;
    receiver.close().await;
}

/// A codec is user code, and one that panics costs its message only: counted as an export
/// error on the way out and as bad input on the way in, and the link goes on. (A decoding
/// panic used to end the import's task: nothing more came in, and its close reported it
/// complete.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codec_that_panics_costs_its_message_only() {
    for mode in [Mode::Core, Mode::JetStream] {
        let Some(server) = NatsServer::start() else {
            return;
        };
        let (sender, receiver) = (Bus::new(), Bus::new());
        let (_sub, mut rx) = forwarding(&receiver, "n");
        let import = Link::builder(server.url())
            .connect(&receiver)
            .await
            .unwrap();
        import.import_with("n", mode, Touchy).await.unwrap();
        let export = Link::builder(server.url()).connect(&sender).await.unwrap();
        export.export_with("n", mode, Touchy).await.unwrap();
        // One batch: the export's failure on 13 must not cost 14, 42 and 43.
        sender
            .publish_batch("n", [13u64, 14, 42, 43])
            .await
            .unwrap();
        assert_eq!(recv(&mut rx).await, 42, "{mode:?}");
        assert_eq!(recv(&mut rx).await, 43, "{mode:?}");
        eventually("the export error counted", || {
            export.stats().export_errors == 1
        })
        .await;
        eventually("the bad input counted", || import.stats().bad_input == 1).await;
        // The export counts a message once its publish returned, which may be after the
        // import has already handed it on.
        eventually("the three others exported", || export.stats().exported == 3).await;
        assert!(export.close(WAIT).await.complete, "{mode:?}");
        assert!(import.close(WAIT).await.complete, "{mode:?}");
        sender.close().await;
        receiver.close().await;
    }
}

/// Two processes, one topic linked both ways: each handles the other's messages once and its
/// own once; nothing echoes back and forth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_linked_both_ways_does_not_echo() {
    for mode in [Mode::Core, Mode::JetStream] {
        let Some(server) = NatsServer::start() else {
            return;
        };
        let mut sides = Vec::new();
        for name in ["a", "b"] {
            let bus = Bus::new();
            let (tx, rx) = mpsc::unbounded_channel();
            let _sub = bus
                .subscribe("chat", move |m: &Envelope<String>| {
                    let _ = tx.send(m.body().clone());
                    async {}
                })
                .unwrap();
            // Each process reads the stream through a durable consumer of its own (a shared
            // durable would split the messages between them).
            let js = ringbus_nats::JetStreamOptions {
                durable: format!("side-{name}"),
                ..Default::default()
            };
            let link = Link::builder(server.url())
                .name(name)
                .jetstream(js)
                .connect(&bus)
                .await
                .unwrap();
            link.link_both::<Envelope<String>>("chat", mode)
                .await
                .unwrap();
            sides.push((bus, link, rx));
        }
        let [(bus_a, link_a, mut rx_a), (bus_b, link_b, mut rx_b)] =
            <[_; 2]>::try_from(sides).ok().unwrap();
        bus_a
            .publish("chat", Envelope::new("from a".to_string()))
            .await
            .unwrap();
        assert_eq!(recv(&mut rx_a).await, "from a");
        assert_eq!(recv(&mut rx_b).await, "from a");
        // A marker from b: once a has it, any echo of "from a" would have arrived before it.
        bus_b
            .publish("chat", Envelope::new("from b".to_string()))
            .await
            .unwrap();
        assert_eq!(recv(&mut rx_b).await, "from b");
        assert_eq!(
            recv(&mut rx_a).await,
            "from b",
            "{mode:?}: an echo arrived first"
        );
        assert!(link_a.close(WAIT).await.complete);
        assert!(link_b.close(WAIT).await.complete);
        bus_a.close().await;
        bus_b.close().await;
        assert!(
            rx_a.try_recv().is_err() && rx_b.try_recv().is_err(),
            "{mode:?}: echoes"
        );
        let skipped = link_a.stats().echo_skipped + link_b.stats().echo_skipped;
        assert!(
            skipped >= 2,
            "{mode:?}: imports not recognised as such ({skipped})"
        );
    }
}

/// A call that links a topic, dropped before it finished (here after its first poll, on a
/// current-thread runtime, so it was waiting on the server), leaves the topic free to link
/// again: it is not `AlreadyLinked` for the rest of the link's life.
#[tokio::test]
async fn a_link_call_dropped_midway_leaves_the_topic_free_to_link_again() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let bus = Bus::new();
    let link = js_link(&server, "dropped", JetStreamOptions::default(), &bus).await;
    tokio::select! {
        biased;
        r = link.import::<u64>("t", Mode::JetStream) => panic!("finished on its first poll: {r:?}"),
        () = std::future::ready(()) => {}
    }
    link.import::<u64>("t", Mode::JetStream)
        .await
        .expect("the dropped import left the topic claimed");
    tokio::select! {
        biased;
        r = link.export::<u64>("t", Mode::JetStream) => panic!("finished on its first poll: {r:?}"),
        () = std::future::ready(()) => {}
    }
    link.export::<u64>("t", Mode::JetStream)
        .await
        .expect("the dropped export left the topic claimed");
    assert!(link.close(WAIT).await.complete);
}

/// Windows larger than a tokio channel can hold (`usize::MAX`: "unbounded") are taken as the
/// largest one can: the export and the import work, rather than `export` panicking and the
/// import's task dying with `import` already returned `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_too_large_for_a_channel_are_taken_as_the_largest() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let wide = || JetStreamOptions {
        ack_window: usize::MAX,
        max_in_flight: usize::MAX,
        ..JetStreamOptions::default()
    };
    let (out_bus, out) = exporting(&server, "wide", wide(), "t").await;
    let in_bus = Bus::new();
    let (_sub, mut rx) = forwarding(&in_bus, "t");
    let inn = js_link(&server, "wide", wide(), &in_bus).await;
    inn.import::<u64>("t", Mode::JetStream).await.unwrap();
    out_bus.publish("t", 7u64).await.unwrap();
    assert_eq!(recv(&mut rx).await, 7);
    assert!(inn.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
}

/// Two topics whose JetStream consumer names are the same ("orders.eu" and "orders_eu": the
/// name keeps only letters, digits and '-'): importing the second is a clear error, not a
/// second reader of the first's consumer that takes its messages and leaves its own unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_topics_with_one_consumer_name_are_an_error_not_a_shared_consumer() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let (out_bus, out) =
        exporting(&server, "clash", JetStreamOptions::default(), "orders.eu").await;
    let in_bus = Bus::new();
    let (_sub, mut rx) = forwarding(&in_bus, "orders.eu");
    let inn = js_link(&server, "clash", JetStreamOptions::default(), &in_bus).await;
    inn.import::<u64>("orders.eu", Mode::JetStream)
        .await
        .unwrap();
    match inn.import::<u64>("orders_eu", Mode::JetStream).await {
        Err(LinkError::Setup(why)) => assert!(why.to_string().contains("already reads"), "{why}"),
        other => panic!("expected a clash error, got {other:?}"),
    }
    // The refused import took its subject back out of the stream.
    assert_eq!(
        stream_subjects(&server, &inn).await,
        ["clash-dead.>", "clash.orders.eu"]
    );
    for n in 0..20u64 {
        out_bus.publish("orders.eu", n).await.unwrap();
    }
    for n in 0..20u64 {
        assert_eq!(recv(&mut rx).await, n);
    }
    assert_eq!(inn.stats().dead_lettered, 0);
    assert!(inn.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
}

/// A durable consumer that exists keeps its settings (it may be shared with other processes),
/// and the link dead-letters on the last delivery *it* allows. Here an earlier run made it
/// allowing 2 deliveries, and the link now asks for 3: the link used to wait for a third
/// delivery that the server never made, and the message was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_consumer_keeps_its_settings_and_the_link_follows_them() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let js = |max_deliver| JetStreamOptions {
        max_deliver,
        nack_delay: Duration::from_millis(50),
        ..JetStreamOptions::default()
    };
    let earlier_bus = Bus::new();
    let earlier = js_link(&server, "again", js(2), &earlier_bus).await;
    earlier.import::<u64>("t", Mode::JetStream).await.unwrap();
    assert!(earlier.close(WAIT).await.complete);

    let (out_bus, out) = exporting(&server, "again", js(3), "t").await;
    // Strict, with no subscriber: every delivery is refused, and the last is dead-lettered.
    let in_bus = Bus::builder().strict(true).build();
    let inn = js_link(&server, "again", js(3), &in_bus).await;
    inn.import::<u64>("t", Mode::JetStream).await.unwrap();
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = raw.get_stream("AGAIN").await.unwrap();
    let consumer = stream.consumer_info("ringbus_t").await.unwrap();
    assert_eq!(consumer.config.max_deliver, 2, "the consumer was changed");
    out_bus.publish("t", 7u64).await.unwrap();
    eventually("the message dead-lettered on its second delivery", || {
        inn.stats().dead_lettered == 1
    })
    .await;
    assert_eq!(inn.stats().nacked, 1, "{:?}", inn.stats());
    assert!(inn.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
}

/// A stream made beforehand (by an operator, or another tool) whose wildcard subject already
/// covers the topic's is used as it is: adding the topic's own subject would overlap, which
/// the server refuses. It is given only the dead letters' subject, unless another stream
/// already holds the dead letters; so is a stream the link makes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_wildcard_covers_the_topic_is_used_as_it_is() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let make = |name: &str, subject: &str| async_nats::jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        storage: async_nats::jetstream::stream::StorageType::Memory,
        ..Default::default()
    };
    // (prefix, a wildcard stream made first, a dead-letter stream made first)
    for (prefix, wildcard, dead_stream) in [
        ("wild", true, false),
        ("own", true, true),
        ("fresh", false, true),
    ] {
        let bus = Bus::new();
        let link = js_link(&server, prefix, JetStreamOptions::default(), &bus).await;
        let mut expected = vec![format!("{prefix}.t")];
        if wildcard {
            let premade = make(link.stream_name(), &format!("{prefix}.>"));
            raw.create_stream(premade).await.unwrap();
            expected = vec![format!("{prefix}.>")];
        }
        if dead_stream {
            let dead = make(&format!("{prefix}-DEAD"), &format!("{prefix}-dead.>"));
            raw.create_stream(dead).await.unwrap();
        } else {
            expected.push(format!("{prefix}-dead.>"));
        }
        link.export::<u64>("t", Mode::JetStream).await.unwrap();
        bus.publish("t", 7u64).await.unwrap();
        eventually("the export acked", || link.stats().export_acked == 1).await;
        let mut stream = raw.get_stream(link.stream_name()).await.unwrap();
        let info = stream.info().await.unwrap();
        assert_eq!(info.config.subjects, expected, "{prefix}");
        assert_eq!(info.state.messages, 1);
        assert!(link.close(WAIT).await.complete);
    }
}

/// On a strict bus, a JetStream message that arrives while its topic has no local subscriber
/// is refused by the bus (`NoSubscriber`) and delivered again; on the last delivery the
/// consumer allows it is dead-lettered, not left where the server
/// will never deliver it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_refused_by_a_strict_bus_is_dead_lettered_after_its_last_delivery() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let js = || JetStreamOptions {
        max_deliver: 2,
        nack_delay: Duration::from_millis(50),
        ..JetStreamOptions::default()
    };
    let (out_bus, out) = exporting(&server, "strict", js(), "t").await;
    let in_bus = Bus::builder().strict(true).build();
    let inn = js_link(&server, "strict", js(), &in_bus).await;
    inn.import::<u64>("t", Mode::JetStream).await.unwrap();
    out_bus.publish("t", 7u64).await.unwrap();
    eventually("the refused message dead-lettered", || {
        inn.stats().dead_lettered == 1
    })
    .await;
    let stats = inn.stats();
    assert_eq!((stats.nacked, stats.imported), (1, 0), "{stats:?}");
    assert!(inn.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
}

/// A pattern import (`orders.>`) brings every matching subject into the local topic it names,
/// made on its first message, where a local pattern subscriber (`orders.*`) handles it with its
/// topic; subjects that do not match stay out, and a local topic of another type refuses its
/// message only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_import_brings_every_matching_topic_in() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let (remote, local) = (Bus::new(), Bus::new());
    let out = Link::builder(server.url()).connect(&remote).await.unwrap();
    for topic in ["orders.eu", "orders.us", "orders.eu.paid", "billing"] {
        out.export::<u64>(topic, Mode::Core).await.unwrap();
    }
    let inbound = Link::builder(server.url()).connect(&local).await.unwrap();
    for bad in ["orders..x", "orders.>.x", "ord*"] {
        assert!(
            matches!(
                inbound.import_pattern::<u64>(bad).await,
                Err(LinkError::BadName { .. })
            ),
            "{bad}"
        );
    }
    // A local topic of another type under the import's pattern: its messages are refused, not
    // the rest.
    local.topic::<String>("orders.x.text").unwrap();
    out.export::<u64>("orders.x.text", Mode::Core)
        .await
        .unwrap();
    let (_sub, mut rx) = forwarding_pattern(&local, "orders.*");
    inbound.import_pattern::<u64>("orders.>").await.unwrap();
    assert!(matches!(
        inbound.import_pattern::<u64>("orders.>").await,
        Err(LinkError::AlreadyLinked { .. })
    ));

    // The refused message first, seen refused before the rest are sent: exports of different
    // topics are not ordered with each other.
    remote.publish("orders.x.text", 0u64).await.unwrap();
    eventually("the other type's message refused", || {
        inbound.stats().bad_input == 1
    })
    .await;
    remote.publish("orders.eu.paid", 1u64).await.unwrap();
    remote.publish("billing", 2u64).await.unwrap();
    for i in 0..10u64 {
        remote.publish("orders.eu", 100 + i).await.unwrap();
        remote.publish("orders.us", 200 + i).await.unwrap();
    }
    expect_in_order(&mut rx, &[("orders.eu", 100), ("orders.us", 200)], 10).await;
    // orders.eu.paid was imported too (into a topic nobody here subscribes to).
    eventually("every match imported", || inbound.stats().imported == 21).await;
    assert!(inbound.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
    local.close().await;
    remote.close().await;
    // Nothing outside the pattern was imported.
    assert!(rx.try_recv().is_err());
    let topics: Vec<String> = local.stats().topics.into_iter().map(|t| t.name).collect();
    assert!(topics.iter().any(|t| t == "orders.eu.paid"), "{topics:?}");
    assert!(!topics.iter().any(|t| t == "billing"), "{topics:?}");
}

/// A pattern export sends every matching topic, made before or after it, each to its own
/// subject and in its order, and nothing else; a name or pattern it shares a topic with is
/// not exported again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_export_sends_every_matching_topic_out() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let (remote, local) = (Bus::new(), Bus::new());
    remote.topic::<u64>("orders.eu").unwrap();
    let out = Link::builder(server.url()).connect(&remote).await.unwrap();
    assert!(matches!(
        out.export_pattern::<u64>("orders..x").await,
        Err(LinkError::BadName { .. })
    ));
    out.export_pattern::<u64>("orders.*").await.unwrap();
    let already = |r: Result<(), LinkError>| matches!(r, Err(LinkError::AlreadyLinked { .. }));
    assert!(already(out.export::<u64>("orders.eu", Mode::Core).await));
    assert!(already(out.export_pattern::<u64>("*.us").await));
    assert!(already(out.export_pattern::<u64>("orders.>").await));
    // A matching topic of another type refuses the next pattern export at once.
    remote.topic::<String>("jobs.text").unwrap();
    assert!(matches!(
        out.export_pattern::<u64>("jobs.*").await,
        Err(LinkError::Bus(ringbus::Error::PatternMismatch(_)))
    ));

    let inbound = Link::builder(server.url()).connect(&local).await.unwrap();
    let (_sub, mut rx) = forwarding_pattern(&local, ">");
    inbound.import_pattern::<u64>(">").await.unwrap();
    for i in 0..10u64 {
        remote.publish("orders.eu", 100 + i).await.unwrap();
        remote.publish("orders.us", 200 + i).await.unwrap(); // made by this publish
        remote.publish("orders.eu.paid", i).await.unwrap();
        remote.publish("billing", i).await.unwrap();
    }
    expect_in_order(&mut rx, &[("orders.eu", 100), ("orders.us", 200)], 10).await;
    assert!(out.close(WAIT).await.complete);
    assert_eq!(out.stats().exported, 20);
    assert!(inbound.close(WAIT).await.complete);
    local.close().await;
    remote.close().await;
    assert!(rx.try_recv().is_err(), "{:?}", rx.try_recv());
}

/// Patterns over JetStream, at least once. The pattern export puts `<prefix>.orders.>` in the
/// stream (made beforehand, without the dead letters' subject) in place of the topic subject
/// it covers, with the dead letters' subject, and stores every matching topic's
/// messages, those of topics made after it included. A pattern import made later still gets
/// them all (the stream kept them), each into the local topic its subject names, in order.
/// Each is acked once handled. The one whose local topic has another type is dead-lettered
/// to that topic's dead-letter subject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_travel_over_jetstream_at_least_once() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let (remote, local) = (Bus::new(), Bus::new());
    let out = js_link(&server, "jsp", JetStreamOptions::default(), &remote).await;
    // The stream exists already, holding one topic the pattern covers.
    let raw = premade_stream(&server, &out, "jsp.orders.eu").await;
    remote.topic::<u64>("orders.eu").unwrap();
    out.export_pattern_with::<u64, _>("orders.>", Mode::JetStream, Json)
        .await
        .unwrap();
    let mut stream = raw.get_stream(out.stream_name()).await.unwrap();
    let mut subjects = stream.info().await.unwrap().config.subjects.clone();
    subjects.sort();
    assert_eq!(subjects, ["jsp-dead.>", "jsp.orders.>"]);

    for i in 0..10u64 {
        remote.publish("orders.eu", 100 + i).await.unwrap();
        remote.publish("orders.us", 200 + i).await.unwrap(); // made by this publish
        remote.publish("billing", i).await.unwrap();
    }
    remote.publish("orders.x.text", 0u64).await.unwrap();
    eventually("every match stored", || out.stats().export_acked == 21).await;
    // `billing` is not the pattern's: not exported at all.
    let stats = out.stats();
    assert_eq!((stats.exported, stats.export_errors), (21, 0), "{stats:?}");

    local.topic::<String>("orders.x.text").unwrap();
    let (_sub, mut rx) = forwarding_pattern(&local, "orders.*");
    let inbound = js_link(&server, "jsp", JetStreamOptions::default(), &local).await;
    inbound
        .import_pattern_as::<u64, _>("orders.>", Mode::JetStream, Sharing::FanOut, Json)
        .await
        .unwrap();
    expect_in_order(&mut rx, &[("orders.eu", 100), ("orders.us", 200)], 10).await;
    eventually("each acked, the other type's dead-lettered", || {
        let stats = inbound.stats();
        (stats.acked, stats.dead_lettered) == (20, 1)
    })
    .await;
    stream
        .get_last_raw_message_by_subject("jsp-dead.orders.x.text")
        .await
        .expect("the dead letter, under its topic");
    let consumer = stream
        .consumer_info("ringbus_pattern_orders_rest")
        .await
        .unwrap();
    assert_eq!(consumer.config.filter_subject, "jsp.orders.>");
    assert!(inbound.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
    local.close().await;
    assert!(rx.try_recv().is_err(), "{:?}", rx.try_recv());
}

/// `link`'s stream, made beforehand (in memory) holding only `subject`, as an operator or
/// an older link would have left it; and a raw JetStream context.
async fn premade_stream(
    server: &NatsServer,
    link: &Link,
    subject: &str,
) -> async_nats::jetstream::Context {
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    raw.create_stream(async_nats::jetstream::stream::Config {
        name: link.stream_name().to_string(),
        subjects: vec![subject.to_string()],
        storage: async_nats::jetstream::stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    raw
}

/// The subjects of `link`'s stream, sorted.
async fn stream_subjects(server: &NatsServer, link: &Link) -> Vec<String> {
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let mut stream = raw.get_stream(link.stream_name()).await.unwrap();
    let mut subjects = stream.info().await.unwrap().config.subjects.clone();
    subjects.sort();
    subjects
}

/// A JetStream export refused by the bus (a topic, or a topic the pattern matches, carries
/// another type) leaves the link's stream holding what it held: without the take-back it kept
/// storing every message under the refused subjects, in place of the ones they replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_export_leaves_the_stream_as_it_was() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let bus = Bus::new();
    bus.topic::<String>("orders.eu").unwrap();
    bus.topic::<String>("billing").unwrap();
    let out = js_link(&server, "jsr", JetStreamOptions::default(), &bus).await;
    premade_stream(&server, &out, "jsr.orders.eu").await;
    let refused = out
        .export_pattern_with::<u64, _>("orders.>", Mode::JetStream, Json)
        .await;
    assert!(matches!(refused, Err(LinkError::Bus(_))), "{refused:?}");
    // The dead-letter subject the link added stays: the link's imports need it.
    assert_eq!(
        stream_subjects(&server, &out).await,
        ["jsr-dead.>", "jsr.orders.eu"]
    );
    let refused = out.export::<u64>("billing", Mode::JetStream).await;
    assert!(matches!(refused, Err(LinkError::Bus(_))), "{refused:?}");
    assert_eq!(
        stream_subjects(&server, &out).await,
        ["jsr-dead.>", "jsr.orders.eu"]
    );
    // A stream the refused export made keeps only the dead letters' subject.
    let fresh = js_link(&server, "jsf", JetStreamOptions::default(), &bus).await;
    let refused = fresh.export::<u64>("billing", Mode::JetStream).await;
    assert!(matches!(refused, Err(LinkError::Bus(_))), "{refused:?}");
    assert_eq!(stream_subjects(&server, &fresh).await, ["jsf-dead.>"]);
    assert!(fresh.close(WAIT).await.complete);
    // The same calls with the right type take the subjects.
    out.export_pattern_with::<String, _>("orders.>", Mode::JetStream, Json)
        .await
        .unwrap();
    assert_eq!(
        stream_subjects(&server, &out).await,
        ["jsr-dead.>", "jsr.orders.>"]
    );
    assert!(out.close(WAIT).await.complete);
}

/// Makes the stream of `link` (made with `prefix`) hold its dead-letter subjects only, so that
/// every export's publish finds no stream. Returns a JetStream context of its own, the stream,
/// and the config that gives the subjects back.
async fn exports_find_no_stream(
    server: &NatsServer,
    link: &Link,
    prefix: &str,
) -> (
    async_nats::jetstream::Context,
    async_nats::jetstream::stream::Stream,
    async_nats::jetstream::stream::Config,
) {
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let mut stream = raw.get_stream(link.stream_name()).await.unwrap();
    let held = stream.info().await.unwrap().config.clone();
    let without = async_nats::jetstream::stream::Config {
        subjects: vec![format!("{prefix}-dead.>")],
        ..held.clone()
    };
    raw.update_stream(without).await.unwrap();
    (raw, stream, held)
}

/// A pattern export's messages whose ack fails are sent again each to its own topic's subject,
/// naming its own topic. The stream is made to drop the pattern's subjects after the export
/// started, so every publish finds no stream; once the export has re-sent, the subjects are
/// given back and each message is stored, once, under the subject of its topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_exports_resends_go_to_each_messages_own_subject() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let bus = Bus::new();
    let js = JetStreamOptions {
        publish_retry_for: Duration::from_secs(60),
        ..JetStreamOptions::default()
    };
    let out = js_link(&server, "jsre", js, &bus).await;
    out.export_pattern_with::<u64, _>("orders.*", Mode::JetStream, Json)
        .await
        .unwrap();
    let (raw, mut stream, held) = exports_find_no_stream(&server, &out, "jsre").await;
    for i in 0..3u64 {
        bus.publish("orders.eu", 100 + i).await.unwrap();
        bus.publish("orders.us", 200 + i).await.unwrap();
    }
    eventually("every export re-sent", || out.stats().export_retries >= 6).await;
    assert_eq!(out.stats().export_acked, 0);
    raw.update_stream(held).await.unwrap();
    eventually("every export acked", || out.stats().export_acked == 6).await;
    let stats = out.stats();
    assert_eq!((stats.exported, stats.export_errors), (6, 0), "{stats:?}");
    let stored = stream.info().await.unwrap().state.messages;
    assert_eq!(stored, 6);
    // The re-sends may land in any order: each message under its own topic's subject.
    let mut bodies = Vec::new();
    for sequence in 1..=6 {
        let message = stream.get_raw_message(sequence).await.unwrap();
        let body: u64 = serde_json::from_slice(&message.payload).unwrap();
        let topic = if body >= 200 {
            "orders.us"
        } else {
            "orders.eu"
        };
        assert_eq!(message.subject.as_str(), format!("jsre.{topic}"), "{body}");
        let named = message.headers.get(ringbus_link::names::TOPIC);
        assert_eq!(named.map(|v| v.as_str()), Some(topic), "{body}");
        bodies.push(body);
    }
    bodies.sort();
    assert_eq!(bodies, [100, 101, 102, 200, 201, 202]);
    assert!(out.close(WAIT).await.complete);
}

/// A JetStream export that is never acked is given up once `publish_retry_for` has passed
/// since it was first sent: re-sent meanwhile, then counted as an export error, and the close
/// finds nothing left awaiting an ack. The stream drops the export's subject after the export
/// started, so every publish finds no stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_never_acked_is_given_up_after_publish_retry_for() {
    let Some(server) = NatsServer::start() else {
        return;
    };
    let bus = Bus::new();
    let js = JetStreamOptions {
        publish_retry_for: Duration::from_secs(1),
        ..JetStreamOptions::default()
    };
    let out = js_link(&server, "jsgu", js, &bus).await;
    out.export_with::<u64, _>("orders", Mode::JetStream, Json)
        .await
        .unwrap();
    let (_raw, mut stream, _held) = exports_find_no_stream(&server, &out, "jsgu").await;
    bus.publish("orders", 1u64).await.unwrap();
    bus.publish("orders", 2u64).await.unwrap();
    eventually("both exports given up", || out.stats().export_errors == 2).await;
    let stats = out.stats();
    assert_eq!(stats.export_acked, 0, "{stats:?}");
    assert!(stats.export_retries >= 2, "each re-sent first: {stats:?}");
    assert_eq!(stream.info().await.unwrap().state.messages, 0);
    let report = out.close(WAIT).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(report.stats.export_errors, 2, "{report:?}");
}
