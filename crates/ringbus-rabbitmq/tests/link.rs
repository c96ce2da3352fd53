//! The RabbitMQ link on a real server: what the conformance suite does not cover.

use std::time::Duration;

use ringbus::Bus;
use ringbus_link::testing::{eventually, WAIT};
use ringbus_rabbitmq::testing::RabbitServer;
use ringbus_rabbitmq::{Envelope, Link, LinkError, QueueOptions};
use tokio::sync::mpsc;

type Msg = Envelope<u64>;

async fn server() -> Option<RabbitServer> {
    tokio::task::spawn_blocking(RabbitServer::start)
        .await
        .unwrap()
}

/// A link of `bus` to `server`, under the prefix `t`.
async fn link(server: &RabbitServer, bus: &Bus) -> Link {
    link_with(server, bus, QueueOptions::default()).await
}

/// [`link`] with `queues`.
async fn link_with(server: &RabbitServer, bus: &Bus, queues: QueueOptions) -> Link {
    Link::builder(server.url())
        .prefix("t")
        .queues(queues)
        .connect(bus)
        .await
        .unwrap()
}

/// Two buses linked through `server` on `topic`: `publisher` exports it, `subscriber` imports
/// it into a subscriber that sends each message's body to `seen`.
struct Pair {
    publisher: Bus,
    p: Link,
    s: Link,
    seen: mpsc::UnboundedReceiver<u64>,
    _sub: ringbus::Subscription,
}

/// A subscriber to `topic` on `bus` that sends each message's body to the receiver.
fn forward(bus: &Bus, topic: &str) -> (ringbus::Subscription, mpsc::UnboundedReceiver<u64>) {
    let (tx, seen) = mpsc::unbounded_channel();
    let sub = bus
        .subscribe(topic, move |m: &Msg| {
            let _ = tx.send(*m.body());
            async {}
        })
        .unwrap();
    (sub, seen)
}

impl Pair {
    async fn new(server: &RabbitServer, topic: &str) -> Self {
        Self::with(server, topic, QueueOptions::default()).await
    }

    /// [`Pair::new`], the publisher's link with `queues`.
    async fn with(server: &RabbitServer, topic: &str, queues: QueueOptions) -> Self {
        let (publisher, subscriber) = (Bus::new(), Bus::new());
        let (_sub, seen) = forward(&subscriber, topic);
        let (p, s) = (
            link_with(server, &publisher, queues).await,
            link(server, &subscriber).await,
        );
        s.import::<Msg>(topic).await.unwrap();
        p.export::<Msg>(topic).await.unwrap();
        Pair {
            publisher,
            p,
            s,
            seen,
            _sub,
        }
    }

    /// The next body the subscriber saw.
    async fn next(&mut self) -> Option<u64> {
        tokio::time::timeout(WAIT, self.seen.recv()).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_reconnected_to_and_messages_cross_again() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_test_writer()
        .try_init();
    let Some(mut server) = server().await else {
        return;
    };
    let mut pair = Pair::new(&server, "n").await;
    // Names a queue name cannot be made of unambiguously, or that make one too long.
    for (topic, group) in [("z", "x.y"), (&*"t".repeat(200), &*"g".repeat(60))] {
        let refused = pair.s.import_shared::<Msg>(topic, group).await;
        assert!(
            matches!(refused, Err(LinkError::BadName { .. })),
            "{refused:?}"
        );
    }
    pair.publisher.publish("n", Msg::new(0)).await.unwrap();
    assert_eq!(pair.next().await, Some(0));
    server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    let mut n = 1;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        pair.publisher.publish("n", Msg::new(n)).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), pair.seen.recv()).await {
            Ok(Some(got)) if got > 0 => break,
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "no delivery after the restart: {:?} {:?}",
                pair.p.stats(),
                pair.s.stats()
            ),
        }
        n += 1;
    }
    eventually("both links connected again", || {
        pair.p.stats().disconnects >= 1 && pair.s.stats().disconnects >= 1
    })
    .await;
    assert!(pair.p.close(WAIT).await.complete);
    assert!(pair.s.close(WAIT).await.complete);
    drop(server);
}

/// Closing a link right after its exports and imports let go of their channels finishes
/// cleanly, every time: the connection's close is answered by the server, not cut by an
/// error of a channel closing beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_right_after_the_channels_are_let_go_is_clean() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_test_writer()
        .try_init();
    let Some(server) = server().await else {
        return;
    };
    // Forty closes: the failure this guards against is a race, seen in some closes only.
    for round in 0..20 {
        let topic = format!("c{round}");
        let mut pair = Pair::new(&server, &topic).await;
        pair.publisher
            .publish(&topic, Msg::new(round))
            .await
            .unwrap();
        assert_eq!(pair.next().await, Some(round));
        let (p, s) = (pair.p.close(WAIT).await, pair.s.close(WAIT).await);
        assert!(p.complete && s.complete, "round {round}: {p:?} {s:?}");
    }
}

/// A message published while RabbitMQ is down is published again, not given up, while the
/// server is unreachable (within `publish_retry_for`), and is stored and delivered once the
/// server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_made_while_the_server_is_down_is_delivered_once_it_is_back() {
    let Some(mut server) = server().await else {
        return;
    };
    let mut pair = Pair::new(&server, "d").await;
    pair.publisher.publish("d", Msg::new(1)).await.unwrap();
    assert_eq!(pair.next().await, Some(1));
    server = tokio::task::spawn_blocking(move || {
        server.kill();
        server
    })
    .await
    .unwrap();
    pair.publisher.publish("d", Msg::new(2)).await.unwrap();
    // The publish fails with a lost connection: it is sent again, not counted as an error.
    eventually("a failed export seen", || {
        let stats = pair.p.stats();
        stats.export_retries >= 1 || stats.export_errors >= 1
    })
    .await;
    assert_eq!(pair.p.stats().export_errors, 0, "{:?}", pair.p.stats());
    server = tokio::task::spawn_blocking(move || {
        server.start_again();
        server
    })
    .await
    .unwrap();
    // Message 1 may come again (at least once: its ack may not have been stored at the kill).
    loop {
        match pair.next().await {
            Some(1) => continue,
            got => {
                assert_eq!(got, Some(2));
                break;
            }
        }
    }
    // The confirm may be counted a moment after the delivery.
    eventually("both confirmed", || pair.p.stats().exported == 2).await;
    assert!(pair.p.close(WAIT).await.complete);
    assert!(pair.s.close(WAIT).await.complete);
    drop(server);
}

/// A batch larger than the publish window goes out in parts, each confirmed before the next:
/// every message arrives, in order, each exported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_publish_window_goes_out_whole_and_in_order() {
    const N: u64 = 20;
    let Some(server) = server().await else {
        return;
    };
    let mut queues = QueueOptions::default();
    queues.publish_window = 3;
    let mut pair = Pair::with(&server, "w", queues).await;
    // All at once, so that the export's batch holds more than one window.
    let published = pair
        .publisher
        .publish_batch("w", (0..N).map(Msg::new))
        .await
        .unwrap();
    assert_eq!(published, N);
    for expected in 0..N {
        assert_eq!(pair.next().await, Some(expected), "{:?}", pair.p.stats());
    }
    // Closed first: a confirm is counted after its message may already have arrived.
    assert!(pair.p.close(WAIT).await.complete);
    let stats = pair.p.stats();
    assert_eq!((stats.exported, stats.export_retries), (N, 0));
    assert!(pair.s.close(WAIT).await.complete);
}

/// A message given back for later (refused by a strict bus with no subscriber yet) stays
/// unacknowledged with its consumer for `nack_delay`; the messages handled meanwhile are
/// acknowledged together, and that acknowledgement must not take the waiting one with it: it
/// comes back and is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_leaves_a_message_waiting_to_be_given_back() {
    const MORE: u64 = 50;
    let Some(server) = server().await else {
        return;
    };
    let (publisher, subscriber) = (Bus::new(), Bus::builder().strict(true).build());
    let mut queues = QueueOptions::default();
    queues.nack_delay = Duration::from_secs(2);
    let s = link_with(&server, &subscriber, queues).await;
    let p = link(&server, &publisher).await;
    s.import::<Msg>("n").await.unwrap();
    p.export::<Msg>("n").await.unwrap();
    publisher.publish("n", Msg::new(0)).await.unwrap();
    eventually("message 0 refused and given back for later", || {
        s.stats().nacked == 1
    })
    .await;
    let (_sub, mut seen) = forward(&subscriber, "n");
    // Many at once, so that the import settles them in runs of more than one (acked
    // together): one at a time, each could be acked alone and the check would see nothing.
    let more = publisher
        .publish_batch("n", (1..=MORE).map(Msg::new))
        .await
        .unwrap();
    assert_eq!(more, MORE);
    let mut got = Vec::new();
    while got.len() < 1 + MORE as usize {
        got.push(
            tokio::time::timeout(WAIT, seen.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    got.sort_unstable();
    assert!(got.iter().copied().eq(0..=MORE), "{got:?} {:?}", s.stats());
    assert!(p.close(WAIT).await.complete);
    assert!(s.close(WAIT).await.complete);
}

/// A pattern import: every exported topic the pattern matches comes in, each into its own
/// local topic and in its order; `>` needs at least one token (as in NATS, unlike AMQP's `#`);
/// a local topic of another type has its messages dead-lettered, the rest unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_import_brings_every_matching_topic_in() {
    let Some(server) = server().await else {
        return;
    };
    let (remote, local) = (Bus::new(), Bus::new());
    let out = link(&server, &remote).await;
    let exported = [
        "orders.eu",
        "orders.us",
        "orders.eu.paid",
        "orders.x.text",
        "orders",
        "billing",
        "orders.end",
    ];
    for topic in exported {
        out.export::<Msg>(topic).await.unwrap();
    }
    let inbound = link(&server, &local).await;
    for bad in ["orders..x", "orders.>.x", "ord*", "orders.#", "a b.*"] {
        assert!(
            matches!(
                inbound.import_pattern::<Msg>(bad).await,
                Err(LinkError::BadName { .. })
            ),
            "{bad}"
        );
    }
    local.topic::<Envelope<String>>("orders.x.text").unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let _sub = local
        .subscribe_pattern("orders.*", move |topic: &str, m: &Msg| {
            let _ = tx.send((topic.to_string(), *m.body()));
            async {}
        })
        .unwrap();
    inbound.import_pattern::<Msg>("orders.>").await.unwrap();
    assert!(matches!(
        inbound.import_pattern::<Msg>("orders.>").await,
        Err(LinkError::AlreadyLinked { .. })
    ));

    // The refused message first, seen dead-lettered before the rest are sent: exports of
    // different topics are not ordered with each other.
    remote.publish("orders.x.text", Msg::new(0)).await.unwrap();
    eventually("the other type's message dead-lettered", || {
        let stats = inbound.stats();
        stats.bad_input == 1 && stats.dead_lettered == 1
    })
    .await;
    remote.publish("orders.eu.paid", Msg::new(1)).await.unwrap();
    remote.publish("orders", Msg::new(2)).await.unwrap();
    remote.publish("billing", Msg::new(3)).await.unwrap();
    for i in 0..10u64 {
        remote
            .publish("orders.eu", Msg::new(100 + i))
            .await
            .unwrap();
        remote
            .publish("orders.us", Msg::new(200 + i))
            .await
            .unwrap();
    }
    // Every export confirmed (so in the import's queue), then one more behind them all: once
    // it is handled, everything before it was handed over.
    eventually("every export confirmed", || out.stats().exported == 24).await;
    remote.publish("orders.end", Msg::new(999)).await.unwrap();
    let mut got = Vec::new();
    while got.last() != Some(&("orders.end".to_string(), 999)) {
        let next = tokio::time::timeout(WAIT, rx.recv()).await;
        got.push(
            next.expect("a message within WAIT")
                .expect("the subscriber"),
        );
    }
    assert_eq!(got.len(), 21, "{got:?}");
    for (topic, base) in [("orders.eu", 100), ("orders.us", 200)] {
        let seen: Vec<u64> = got
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(seen, (base..base + 10).collect::<Vec<_>>(), "{topic}");
    }
    // orders.eu.paid was imported too (into a topic nobody here subscribes to); orders and
    // billing were not.
    assert_eq!(inbound.stats().imported, 22);
    assert!(inbound.close(WAIT).await.complete);
    assert!(out.close(WAIT).await.complete);
    local.close().await;
    remote.close().await;
    let topics: Vec<String> = local.stats().topics.into_iter().map(|t| t.name).collect();
    assert!(topics.iter().any(|t| t == "orders.eu.paid"), "{topics:?}");
    for unmatched in ["orders", "billing"] {
        assert!(!topics.iter().any(|t| t == unmatched), "{topics:?}");
    }
    assert_eq!(inbound.stats().bad_input, 1);
    // The dead letter is in the pattern's own dead-letter queue, with its topic.
    let queue = inbound.dead_letter_queue("orders.>").unwrap();
    let dead = basic_get_all(&server, &queue).await;
    assert_eq!(dead.len(), 1, "{queue}");
    let topic =
        dead[0]
            .properties
            .headers()
            .as_ref()
            .and_then(|h| match h.inner().get("Ringbus-Topic") {
                Some(lapin::types::AMQPValue::LongString(s)) => Some(s.to_string()),
                _ => None,
            });
    assert_eq!(topic.as_deref(), Some("orders.x.text"));
}

/// Takes every message of `queue`.
async fn basic_get_all(server: &RabbitServer, queue: &str) -> Vec<lapin::message::Delivery> {
    let properties = lapin::ConnectionProperties::default();
    let connection = lapin::Connection::connect(&server.url(), properties)
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let mut got = Vec::new();
    let no_ack = lapin::options::BasicGetOptions { no_ack: true };
    while let Some(message) = channel.basic_get(queue.into(), no_ack).await.unwrap() {
        got.push(message.delivery);
    }
    let _ = connection.close(200, "read".into()).await;
    got
}

/// A pattern export over ever new topics closes the channels of the topics it has not used
/// lately: on a connection allowed 40 channels, 120 topics, one after the other, each get
/// their message out, none counted as an export error. (Each topic used to keep a channel
/// for good: the 41st found the connection out of channels.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_over_many_topics_does_not_run_the_connection_out_of_channels() {
    const TOPICS: u64 = 120;
    let Some(server) = server().await else {
        return;
    };
    let bus = Bus::new();
    let mut queues = QueueOptions::default();
    queues.publish_retry_for = Duration::from_secs(1);
    let out = Link::builder(format!("{}?channel_max=40", server.url()))
        .prefix("t")
        .queues(queues)
        .connect(&bus)
        .await
        .unwrap();
    out.export_pattern::<Msg>("many.*").await.unwrap();
    for i in 0..TOPICS {
        bus.publish(&format!("many.{i}"), Msg::new(i))
            .await
            .unwrap();
        eventually("the message exported or given up", || {
            let stats = out.stats();
            stats.exported + stats.export_errors == i + 1
        })
        .await;
        let stats = out.stats();
        assert_eq!(stats.export_errors, 0, "topic {i}: {stats:?}");
    }
    assert!(out.close(WAIT).await.complete);
}
