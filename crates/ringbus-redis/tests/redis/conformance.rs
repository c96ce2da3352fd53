//! The conformance cases of `ringbus-nats` (tests/nats/conformance.rs), run over the
//! in-process bus alone and over Redis Streams: two buses, one exporting and one importing a
//! topic through a `redis-server`. What every link promises is checked on both; what only
//! an at-least-once link promises (redelivery, dead letters, dedup, no loss across a server
//! kill) on Redis.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::streams::StreamRangeReply;
use ringbus::{Bus, Context, PublishError};
use ringbus_redis::testing::{RedisServer, ServerOptions};
use ringbus_redis::{ConnectionState, Envelope, Link, StreamOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::{eventually, WAIT};

const TOPIC: &str = "items";

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
    Redis,
}

const ALL: [Kind; 2] = [Kind::InProcess, Kind::Redis];

/// A handler's verdict on a message: `Ok`, or fail this delivery.
type Verdict = Arc<dyn Fn(&Msg, u32) -> bool + Send + Sync>;

/// One publisher side and one subscriber side, linked as `kind` says.
struct Pair {
    kind: Kind,
    server: Option<RedisServer>,
    publisher: Bus,
    subscriber: Bus,
    pub_link: Option<Link>,
    sub_link: Option<Link>,
    seen: mpsc::UnboundedReceiver<Seen>,
    /// Deliveries per message number (attempts, with failures).
    attempts: Arc<Mutex<BTreeMap<u64, u32>>>,
}

pub(crate) fn stream_options() -> StreamOptions {
    StreamOptions {
        max_deliver: 3,
        nack_delay: Duration::from_millis(200),
        claim_idle: Duration::from_secs(2),
        ..StreamOptions::default()
    }
}

async fn connect(url: String, bus: &Bus) -> Link {
    Link::builder(url)
        .prefix("conf")
        .streams(stream_options())
        .connect(bus)
        .await
        .unwrap()
}

impl Pair {
    async fn new(kind: Kind) -> Option<Pair> {
        Self::with(kind, ServerOptions::new(), Arc::new(|_, _| true)).await
    }

    async fn with_verdict(kind: Kind, verdict: Verdict) -> Option<Pair> {
        Self::with(kind, ServerOptions::new(), verdict).await
    }

    /// `None` when the case must skip (no redis-server, and not required).
    async fn with(kind: Kind, options: ServerOptions, verdict: Verdict) -> Option<Pair> {
        let server = match kind {
            Kind::InProcess => None,
            Kind::Redis => Some(RedisServer::start_with(options)?),
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
        let (pub_link, sub_link) = match &server {
            Some(server) => {
                let pub_link = connect(server.url(), &publisher).await;
                let sub_link = connect(server.url(), &subscriber).await;
                sub_link.import::<Msg>(TOPIC).await.unwrap();
                pub_link.export::<Msg>(TOPIC).await.unwrap();
                (Some(pub_link), Some(sub_link))
            }
            None => (None, None),
        };
        Some(Pair {
            kind,
            server,
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

    fn sub_link(&self) -> &Link {
        self.sub_link.as_ref().unwrap()
    }

    fn pub_link(&self) -> &Link {
        self.pub_link.as_ref().unwrap()
    }

    /// Closes the publisher's link (flushing exports), then its bus.
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
async fn a_header_a_link_cannot_carry_is_refused_in_every_mode() {
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
            assert!(err.to_string().contains("cannot be sent over"), "{err}");
        }
        // An id no link can carry fails the export (logged, counted), and the link goes on.
        pair.publish(item(1).with_id("two\r\nlines")).await;
        pair.publish(item(2)).await;
        let got = pair.until(2).await;
        let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
        match kind {
            Kind::InProcess => assert_eq!(ns, [1, 2]),
            Kind::Redis => {
                assert_eq!(ns, [2], "{kind:?}");
                let stats = pair.pub_link().stats();
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
        // The publisher's side closes first: its exports are all added before close returns.
        let mut pair = pair.close().await;
        match pair.publisher.publish(TOPIC, item(N)).await {
            Err(PublishError::Closed(back)) => assert_eq!(back.body().n, N),
            other => panic!("{kind:?}: expected Closed, got {other:?}"),
        }
        if let Some(link) = &pair.pub_link {
            let stats = link.stats();
            assert_eq!(stats.exported, N, "{kind:?}: {stats:?}");
        }
        let got = pair.until(N - 1).await;
        assert_eq!(got.len() as u64, N, "{kind:?}");
        // Every message was handled; the close settles (acks) what the import still holds.
        pair.close_subscriber().await;
        if kind == Kind::Redis {
            let stats = pair.sub_link().stats();
            assert_eq!((stats.imported, stats.acked), (N, N), "{kind:?}: {stats:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gives_back_with_delay_then_delivers_again() {
    // Message 1 fails on its first delivery only.
    let verdict: Verdict = Arc::new(|m, attempt| !(m.body().n == 1 && attempt == 1));
    let Some(mut pair) = Pair::with_verdict(Kind::Redis, verdict).await else {
        return;
    };
    let started = tokio::time::Instant::now();
    pair.publish(item(1)).await;
    let got = pair.next().await;
    assert_eq!(got.body.n, 1);
    assert_eq!(pair.attempts(1), 2);
    // The redelivery waited for the nack delay.
    assert!(started.elapsed() >= stream_options().nack_delay);
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
    let stats = pair.sub_link().stats();
    assert_eq!(
        (stats.nacked, stats.claimed, stats.acked),
        (1, 1, 1),
        "{stats:?}"
    );
}

/// The entries of stream `key`, through the link's own client.
pub(crate) async fn entries(link: &Link, key: &str) -> StreamRangeReply {
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
pub(crate) fn field(entry: &redis::streams::StreamId, name: &str) -> String {
    match entry.map.get(name) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("field {name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dead_letters_after_max_deliveries() {
    // Message 1 always fails; message 2 is fine.
    let verdict: Verdict = Arc::new(|m, _| m.body().n != 1);
    let Some(mut pair) = Pair::with_verdict(Kind::Redis, verdict).await else {
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
    assert_eq!(pair.attempts(1), stream_options().max_deliver);

    // The dead letter keeps the body and id, and says why.
    let dead = entries(sub_link, &sub_link.dead_letter_key(TOPIC).unwrap()).await;
    assert_eq!(dead.ids.len(), 1, "{dead:?}");
    let body: Item = serde_json_body(&field(&dead.ids[0], "Ringbus-Body"));
    assert_eq!(body.n, 1);
    assert_eq!(field(&dead.ids[0], "Ringbus-Id"), "doomed");
    let reason = field(&dead.ids[0], "Ringbus-Dead-Reason");
    assert!(reason.contains("delivery 3"), "{reason}");
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
}

/// `{"n":1,"data":[]}` back to an `Item` (the test reads JSON without serde_json: the two
/// fields are all it needs).
fn serde_json_body(json: &str) -> Item {
    let n = json
        .split("\"n\":")
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("not an Item: {json}"));
    Item { n, data: vec![] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_drops_a_re_sent_id_within_the_dedup_window() {
    let Some(mut pair) = Pair::new(Kind::Redis).await else {
        return;
    };
    pair.publish(item(1).with_id("once")).await;
    pair.publish(item(2).with_id("once")).await; // a re-send of "once": dropped on import
    pair.publish(item(3)).await;
    let got = pair.until(3).await;
    let ns: Vec<u64> = got.iter().map(|s| s.body.n).collect();
    assert_eq!(ns, [1, 3]);
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
    let stats = pair.sub_link().stats();
    assert_eq!((stats.duplicates, stats.acked), (1, 2), "{stats:?}");
    // Both entries were stored: the dedup is the importer's.
    assert_eq!(pair.pub_link().stats().exported, 3);
}

/// Exports in flight at the kill lose their answers; they are re-sent with the same id, and
/// every message arrives at least once (the dedup window drops most copies). Then the link
/// still carries new messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_loses_nothing_across_a_server_kill_and_restart_and_stays_linked() {
    let Some(mut pair) = Pair::with(
        Kind::Redis,
        ServerOptions::new().persistent(true),
        Arc::new(|_, _| true),
    )
    .await
    else {
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
    // same port with the same append-only file.
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
    eprintln!("redis restart: {N} messages, {duplicates} delivered more than once");

    // Still linked: a message published now arrives.
    pair.publish(item(N)).await;
    let after = pair.until(N).await;
    assert!(after.iter().all(|s| s.body.n <= N));
    let (p, s) = (pair.pub_link().stats(), pair.sub_link().stats());
    assert!(p.disconnects >= 1 && p.connects >= 2, "{p:?}");
    assert!(s.disconnects >= 1 && s.connects >= 2, "{s:?}");
    assert_eq!(p.state, ConnectionState::Connected);
    let mut pair = pair.close().await;
    pair.close_subscriber().await;
}
