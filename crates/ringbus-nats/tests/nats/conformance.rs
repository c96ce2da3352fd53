//! One conformance suite, four transports: the in-process bus alone, two buses linked over
//! NATS core through the in-memory stand-in (`testing::MemoryNats`), over NATS core through
//! a `nats-server`, and over JetStream. Each case checks the promises its mode makes (see the
//! crate docs): what every mode promises is checked in all four, and what core promises is
//! checked against the stand-in as against the real server.
//!
//! Every `nats-server` case starts its own server on 127.0.0.1 (see `ringbus_nats::testing`);
//! without the binary those cases skip with a message, unless `REQUIRE_NATS=1` (as in CI).
//! The stand-in's cases always run, before them.
//! Waits are bounded by timeouts that fail the test; none is a sleep standing in for an event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringbus::{Bus, Context, PublishError};
use ringbus_nats::testing::{MemoryNats, NatsServer};
use ringbus_nats::{Envelope, JetStreamOptions, Link, Mode};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const TOPIC: &str = "items";
const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Item {
    n: u64,
    data: Vec<u8>,
}

type Msg = Envelope<Item>;

fn item(n: u64) -> Msg {
    Envelope::new(Item { n, data: vec![] })
}

/// What a subscriber saw: id, headers and body of each message, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    id: String,
    headers: Vec<(String, String)>,
    body: Item,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    InProcess,
    /// NATS core through `MemoryNats`.
    Memory,
    Core,
    JetStream,
}

// The cases that need no nats-server first: a case returns at the first kind that skips.
const ALL: [Kind; 4] = [Kind::InProcess, Kind::Memory, Kind::Core, Kind::JetStream];

/// A handler's verdict on a message: `Ok`, or fail this delivery.
type Verdict = Arc<dyn Fn(&Msg, u32) -> bool + Send + Sync>;

/// One publisher side and one subscriber side, linked as `kind` says.
struct Pair {
    kind: Kind,
    server: Option<NatsServer>,
    memory: Option<MemoryNats>,
    publisher: Bus,
    subscriber: Bus,
    pub_link: Option<Link>,
    sub_link: Option<Link>,
    seen: mpsc::UnboundedReceiver<Seen>,
    /// Deliveries per message number (attempts, with failures).
    attempts: Arc<Mutex<BTreeMap<u64, u32>>>,
}

fn js_options() -> JetStreamOptions {
    JetStreamOptions {
        max_deliver: 3,
        nack_delay: Duration::from_millis(200),
        ack_wait: Duration::from_secs(5),
        ..JetStreamOptions::default()
    }
}

async fn connect(url: String, bus: &Bus) -> Link {
    Link::builder(url)
        .prefix("conf")
        .jetstream(js_options())
        .connect(bus)
        .await
        .unwrap()
}

impl Pair {
    async fn new(kind: Kind) -> Option<Pair> {
        Self::with_verdict(kind, Arc::new(|_, _| true)).await
    }

    /// `None` when the case must skip (no nats-server, and not required).
    async fn with_verdict(kind: Kind, verdict: Verdict) -> Option<Pair> {
        let server = match kind {
            Kind::InProcess | Kind::Memory => None,
            Kind::Core | Kind::JetStream => Some(NatsServer::start()?),
        };
        let memory = match kind {
            Kind::Memory => Some(MemoryNats::start().expect("a loopback port")),
            _ => None,
        };
        let publisher = Bus::new();
        let subscriber = if kind == Kind::InProcess {
            publisher.clone()
        } else {
            Bus::new()
        };
        let (tx, seen) = mpsc::unbounded_channel();
        let attempts = Arc::new(Mutex::new(BTreeMap::new()));
        let counts = attempts.clone();
        subscriber
            .subscribe(TOPIC, move |m: &Msg| {
                let attempt = {
                    let mut counts = counts.lock().unwrap();
                    let a = counts.entry(m.body().n).or_insert(0);
                    *a += 1;
                    *a
                };
                let ok = verdict(m, attempt);
                if ok {
                    let _ = tx.send(Seen {
                        id: m.id().to_string(),
                        headers: m
                            .headers()
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        body: m.body().clone(),
                    });
                }
                async move {
                    if ok {
                        Ok(())
                    } else {
                        Err("refused by the test")
                    }
                }
            })
            .unwrap();
        let url = match (&server, &memory) {
            (Some(server), _) => Some(server.url()),
            (_, Some(memory)) => Some(memory.url()),
            _ => None,
        };
        let (pub_link, sub_link) = match url {
            Some(url) => {
                let mode = if kind == Kind::JetStream {
                    Mode::JetStream
                } else {
                    Mode::Core
                };
                let pub_link = connect(url.clone(), &publisher).await;
                let sub_link = connect(url, &subscriber).await;
                sub_link.import::<Msg>(TOPIC, mode).await.unwrap();
                pub_link.export::<Msg>(TOPIC, mode).await.unwrap();
                (Some(pub_link), Some(sub_link))
            }
            _ => (None, None),
        };
        Some(Pair {
            kind,
            server,
            memory,
            publisher,
            subscriber,
            pub_link,
            sub_link,
            seen,
            attempts,
        })
    }

    async fn publish(&self, msg: Msg) {
        self.publisher.publish(TOPIC, msg).await.unwrap();
    }

    async fn next(&mut self) -> Seen {
        match tokio::time::timeout(WAIT, self.seen.recv()).await {
            Ok(Some(seen)) => seen,
            other => panic!("{:?}: no message within {WAIT:?} ({other:?})", self.kind),
        }
    }

    /// Receives until message `n` arrives; returns everything received on the way.
    async fn until(&mut self, n: u64) -> Vec<Seen> {
        let mut got = Vec::new();
        loop {
            let seen = self.next().await;
            let done = seen.body.n == n;
            got.push(seen);
            if done {
                return got;
            }
        }
    }

    fn attempts(&self, n: u64) -> u32 {
        self.attempts.lock().unwrap().get(&n).copied().unwrap_or(0)
    }

    /// Closes the publisher's link (flushing exports), then the subscriber's, then the buses.
    async fn close(self) -> Self {
        if let Some(link) = &self.pub_link {
            let report = link.close(WAIT).await;
            assert!(report.complete, "{:?}: {report:?}", self.kind);
        }
        self.publisher.close().await;
        self
    }

    async fn close_subscriber(&mut self) {
        if let Some(link) = &self.sub_link {
            let report = link.close(WAIT).await;
            assert!(report.complete, "{:?}: {report:?}", self.kind);
        }
        self.subscriber.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_round_trip_of_payload_id_and_headers() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            return;
        };
        let data: Vec<u8> = (0..=255).collect();
        let msg = Envelope::new(Item { n: 1, data })
            .with_id("order-42")
            .with_header("Tenant", "acme")
            .unwrap()
            .with_header("Trace-Id", "a1b2-c3; q=\"x\"")
            .unwrap();
        let expected = Seen {
            id: "order-42".into(),
            headers: vec![
                ("Tenant".into(), "acme".into()),
                ("Trace-Id".into(), "a1b2-c3; q=\"x\"".into()),
            ],
            body: msg.body().clone(),
        };
        pair.publish(msg).await;
        assert_eq!(pair.next().await, expected, "{kind:?}");
        pair.close().await.close_subscriber().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_nats_cannot_carry_is_refused_in_every_mode() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            return;
        };
        for (name, value) in [
            ("Bad Name", "v"),
            ("Colon:Name", "v"),
            ("Multi", "line\r\nbreak"),
            ("Padded", " v "),
            ("Nats-Msg-Id", "mine"),
            ("Ringbus-Topic", "other"),
        ] {
            let err = item(0).with_header(name, value).unwrap_err();
            assert!(
                err.to_string().contains("cannot be sent over NATS"),
                "{err}"
            );
        }
        // An id NATS cannot carry fails the export (logged, counted), and the link goes on.
        pair.publish(item(1).with_id("two\r\nlines")).await;
        pair.publish(item(2)).await;
        let got = pair.until(2).await;
        let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
        match kind {
            Kind::InProcess => assert_eq!(ns, [1, 2]),
            _ => {
                assert_eq!(ns, [2], "{kind:?}");
                let stats = pair.pub_link.as_ref().unwrap().stats();
                assert_eq!(stats.export_errors, 1, "{kind:?}: {stats:?}");
            }
        }
        pair.close().await.close_subscriber().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_with_one_subscriber_and_no_loss_right_after_linking() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            return;
        };
        // Published the moment the link is made: nothing may be lost in any mode.
        const N: u64 = 500;
        for n in 0..N {
            pair.publish(item(n)).await;
        }
        let got = pair.until(N - 1).await;
        let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
        assert_eq!(ns, (0..N).collect::<Vec<_>>(), "{kind:?}");
        pair.close().await.close_subscriber().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_publish_is_not_delivered() {
    for kind in ALL {
        let Some(mut pair) = Pair::new(kind).await else {
            return;
        };
        let token = ringbus::CancellationToken::new();
        token.cancel();
        let ctx = Context::new().with_cancellation(token);
        match pair.publisher.publish_with(&ctx, TOPIC, item(1)).await {
            Err(PublishError::Cancelled(back)) => assert_eq!(back.body().n, 1),
            other => panic!("{kind:?}: expected Cancelled, got {other:?}"),
        }
        pair.publish(item(2)).await;
        let got = pair.until(2).await;
        assert_eq!(got.len(), 1, "{kind:?}: {got:?}");
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
        assert_eq!(pair.attempts(1), 0, "{kind:?}");
    }
}

/// Polls `cond` until it holds or `WAIT` passes (a bounded wait on a condition).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {WAIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_finishes_in_flight_work_within_its_deadline_and_later_publishes_error() {
    for kind in ALL {
        // A handler slow enough that work is still queued when close begins.
        let verdict: Verdict = Arc::new(|_, _| {
            std::thread::sleep(Duration::from_micros(200));
            true
        });
        let Some(pair) = Pair::with_verdict(kind, verdict).await else {
            return;
        };
        const N: u64 = 300;
        for n in 0..N {
            pair.publish(item(n)).await;
        }
        // The publisher's side closes first: its exports are flushed (and, on JetStream,
        // acknowledged) before close returns.
        let mut pair = pair.close().await;
        match pair.publisher.publish(TOPIC, item(N)).await {
            Err(PublishError::Closed(back)) => assert_eq!(back.body().n, N),
            other => panic!("{kind:?}: expected Closed, got {other:?}"),
        }
        if let Some(link) = &pair.pub_link {
            let stats = link.stats();
            assert_eq!(stats.exported, N, "{kind:?}: {stats:?}");
            if kind == Kind::JetStream {
                assert_eq!(stats.export_acked, N, "{kind:?}: {stats:?}");
            }
        }
        // Everything crossed; the subscriber's side closes while its handler is still busy
        // with the queue, and returns only once all of it is handled.
        let got = pair.until(N - 1).await;
        assert_eq!(got.len() as u64, N, "{kind:?}");
        pair.close_subscriber().await;
        if kind == Kind::JetStream {
            let stats = pair.sub_link.as_ref().unwrap().stats();
            assert_eq!((stats.imported, stats.acked), (N, N), "{kind:?}: {stats:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_nacks_with_delay_then_delivers_again() {
    // Message 1 fails on its first delivery only.
    let verdict: Verdict = Arc::new(|m, attempt| !(m.body().n == 1 && attempt == 1));
    let Some(mut pair) = Pair::with_verdict(Kind::JetStream, verdict).await else {
        return;
    };
    let started = tokio::time::Instant::now();
    pair.publish(item(1)).await;
    let got = pair.next().await;
    assert_eq!(got.body.n, 1);
    assert_eq!(pair.attempts(1), 2);
    // The redelivery waited for the nack delay.
    assert!(started.elapsed() >= js_options().nack_delay);
    let pair = pair.close().await;
    let stats = pair.sub_link.as_ref().unwrap().stats();
    assert_eq!(stats.nacked, 1, "{stats:?}");
    let mut pair = pair;
    pair.close_subscriber().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_dead_letters_after_max_deliveries() {
    // Message 1 always fails; message 2 is fine.
    let verdict: Verdict = Arc::new(|m, _| m.body().n != 1);
    let Some(mut pair) = Pair::with_verdict(Kind::JetStream, verdict).await else {
        return;
    };
    pair.publish(item(1).with_id("doomed")).await;
    pair.publish(item(2)).await;
    assert_eq!(pair.next().await.body.n, 2);
    let sub_link = pair.sub_link.as_ref().unwrap();
    eventually("message 1 dead-lettered", || {
        sub_link.stats().dead_lettered == 1
    })
    .await;
    assert_eq!(pair.attempts(1), js_options().max_deliver);

    // The dead letter keeps the body and headers, and says why.
    let js = async_nats::jetstream::new(sub_link.client().clone());
    let stream = js.get_stream(sub_link.stream_name()).await.unwrap();
    let dead = stream
        .get_last_raw_message_by_subject(&sub_link.dead_letter_subject(TOPIC).unwrap())
        .await
        .unwrap();
    let body: Item = serde_json::from_slice(&dead.payload).unwrap();
    assert_eq!(body.n, 1);
    let headers = dead.headers;
    assert_eq!(headers.get("Ringbus-Id").unwrap().as_str(), "doomed");
    let reason = headers.get("Ringbus-Dead-Reason").unwrap().as_str();
    assert!(reason.contains("delivery 3"), "{reason}");
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_dedups_a_re_sent_id() {
    let Some(mut pair) = Pair::new(Kind::JetStream).await else {
        return;
    };
    pair.publish(item(1).with_id("once")).await;
    pair.publish(item(2).with_id("once")).await; // a re-send of "once": dropped by the server
    pair.publish(item(3)).await;
    let got = pair.until(3).await;
    let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
    assert_eq!(ns, [1, 3]);
    let pair = pair.close().await;
    let stats = pair.pub_link.as_ref().unwrap().stats();
    assert_eq!(stats.export_duplicates, 1, "{stats:?}");
    let mut pair = pair;
    pair.close_subscriber().await;
}

/// The exports in flight at the kill lose their acks; they are re-sent with the same id, and
/// every message arrives at least once (duplicates are allowed, and counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_loses_nothing_across_a_server_kill_and_restart() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
    let Some(mut pair) = Pair::new(Kind::JetStream).await else {
        return;
    };
    const N: u64 = 400;
    let publisher = pair.publisher.clone();
    let publishing = tokio::spawn(async move {
        for n in 0..N {
            publisher.publish(TOPIC, item(n)).await.unwrap();
            if n % 50 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    // Kill the server (SIGKILL) once some messages went through, and bring it back on the
    // same port with the same store.
    let first = pair.next().await;
    let mut server = pair.server.take().unwrap();
    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    pair.server = Some(server);
    publishing.await.unwrap();

    let mut count: BTreeMap<u64, u32> = BTreeMap::new();
    *count.entry(first.body.n).or_default() += 1;
    while count.len() < N as usize {
        let seen = pair.next().await;
        *count.entry(seen.body.n).or_default() += 1;
    }
    let duplicates: u32 = count.values().map(|c| c - 1).sum();
    eprintln!("jetstream restart: {N} messages, {duplicates} delivered more than once");
    let pair = pair.close().await;
    let stats = pair.pub_link.as_ref().unwrap().stats();
    assert!(stats.disconnects >= 1 && stats.connects >= 1, "{stats:?}");
    let mut pair = pair;
    pair.close_subscriber().await;
}

/// After a lost connection: waits until both links are connected again, then publishes
/// until a message arrives (at most once: what was sent before the subscription was back
/// on the server may be lost).
async fn delivers_again_after_reconnecting(pair: &mut Pair) {
    let (pub_link, sub_link) = (
        pair.pub_link.as_ref().unwrap(),
        pair.sub_link.as_ref().unwrap(),
    );
    eventually("both links reconnected", || {
        let (p, s) = (pub_link.stats(), sub_link.stats());
        p.disconnects >= 1
            && s.disconnects >= 1
            && p.state == ringbus_nats::ConnectionState::Connected
            && s.state == ringbus_nats::ConnectionState::Connected
    })
    .await;
    // At most once: messages sent before the subscription is back on the server may be
    // lost, so publish until one arrives.
    let mut n = 1;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        pair.publish(item(n)).await;
        match tokio::time::timeout(Duration::from_millis(100), pair.seen.recv()).await {
            Ok(Some(seen)) => {
                assert!(seen.body.n >= 1);
                break;
            }
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "no delivery after reconnecting"
            ),
        }
        n += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_is_still_linked_after_a_server_restart() {
    let Some(mut pair) = Pair::new(Kind::Core).await else {
        return;
    };
    pair.publish(item(0)).await;
    assert_eq!(pair.next().await.body.n, 0);
    let mut server = pair.server.take().unwrap();
    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    pair.server = Some(server);
    delivers_again_after_reconnecting(&mut pair).await;
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_core_is_still_linked_after_its_connections_drop() {
    let Some(mut pair) = Pair::new(Kind::Memory).await else {
        unreachable!("the stand-in never skips");
    };
    pair.publish(item(0)).await;
    assert_eq!(pair.next().await.body.n, 0);
    pair.memory.as_ref().unwrap().drop_connections();
    delivers_again_after_reconnecting(&mut pair).await;
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_refuses_jetstream_with_an_error_that_says_so() {
    let memory = MemoryNats::start().expect("a loopback port");
    let bus = Bus::new();
    let link = connect(memory.url(), &bus).await;
    for linked in [
        link.export::<Msg>("a", Mode::JetStream).await,
        link.import::<Msg>("b", Mode::JetStream).await,
    ] {
        match linked {
            Err(ringbus_nats::LinkError::JetStream(why)) => {
                assert!(why.contains("MemoryNats"), "{why}")
            }
            other => panic!("expected a JetStream error, got {other:?}"),
        }
    }
    // Refused without linking anything: the topics can be linked in core mode.
    link.export::<Msg>("a", Mode::Core).await.unwrap();
    link.import::<Msg>("b", Mode::Core).await.unwrap();
    assert!(link.close(WAIT).await.complete);
    bus.close().await;
}
