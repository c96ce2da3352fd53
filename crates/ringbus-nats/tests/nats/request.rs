//! Request/reply across ringbus-nats: a requester on one bus, the same `#[subscriber(..,
//! reply)]` replier on another, linked by `export_requests` / `import_requests`. Each case
//! runs through the in-memory stand-in (`testing::MemoryNats`) and through a real
//! `nats-server` (skipped without one unless `REQUIRE_NATS=1`): replies reach their own
//! requests, concurrently; a replier's failure is `Failed`; nobody answering is
//! `Unanswered`; a deadline is `Timeout`, and the reply that comes later is dropped and
//! counted, never given to the next request; shared imports answer each request once,
//! fan-out imports each answer (the extra answers counted late); a close waits for the
//! answers of requests already sent.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::StreamExt;
use ringbus::{subscriber, Bus, Context, Request, RequestError};
use ringbus_nats::testing::{MemoryNats, NatsServer};
use ringbus_nats::{Link, LinkStats};
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(20);

type Prices = Request<u32, u64>;

#[subscriber("prices", reply)]
async fn price(quantity: &u32) -> Result<u64, String> {
    match *quantity {
        0 => Err("a quantity of 0 has no price".to_string()),
        n => Ok(u64::from(n) * 10),
    }
}

/// Where the links connect: the stand-in, or a `nats-server`.
enum Server {
    Memory(MemoryNats),
    Nats(NatsServer),
}

impl Server {
    fn url(&self) -> String {
        match self {
            Server::Memory(m) => m.url(),
            Server::Nats(n) => n.url(),
        }
    }
}

/// The stand-in first, then a `nats-server` if there is one.
fn servers() -> impl Iterator<Item = Server> {
    let memory = std::iter::once_with(|| Server::Memory(MemoryNats::start().expect("a port")));
    memory.chain(std::iter::from_fn({
        let mut tried = false;
        move || {
            if std::mem::replace(&mut tried, true) {
                return None;
            }
            NatsServer::start().map(Server::Nats)
        }
    }))
}

struct Side {
    bus: Bus,
    link: Link,
}

async fn side(server: &Server, timeout: Duration) -> Side {
    let bus = Bus::new();
    let link = Link::builder(server.url())
        .prefix("req")
        .request_timeout(timeout)
        .connect(&bus)
        .await
        .unwrap();
    Side { bus, link }
}

impl Side {
    async fn close(self) -> LinkStats {
        let report = self.link.close(WAIT).await;
        assert!(report.complete, "{report:?}");
        self.bus.close().await;
        report.stats
    }
}

/// A side that sends its requests of "prices" to NATS.
async fn asking_side(server: &Server, request_timeout: Duration) -> Side {
    let asking = side(server, request_timeout).await;
    asking
        .link
        .export_requests::<u32, u64>("prices")
        .await
        .unwrap();
    asking
}

/// A requester side (its link's `request_timeout` as given) and an answering side, on
/// whose bus `serve` subscribes the replier (returning what it made).
async fn linked_pair<S>(
    server: &Server,
    request_timeout: Duration,
    serve: impl FnOnce(&Bus) -> S,
) -> (S, Side, Side) {
    let answering = side(server, WAIT).await;
    let served = serve(&answering.bus);
    answering
        .link
        .import_requests::<u32, u64>("prices")
        .await
        .unwrap();
    (
        served,
        asking_side(server, request_timeout).await,
        answering,
    )
}

/// A requester side and one answering side with `price` registered.
async fn pair(server: &Server) -> (Side, Side) {
    let (_price, asking, answering) =
        linked_pair(server, WAIT, |bus| bus.register(price).unwrap()).await;
    (asking, answering)
}

fn ctx(timeout: Duration) -> Context {
    Context::new().with_timeout(timeout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_gets_its_own_reply_and_failures_reach_the_requester() {
    for server in servers() {
        let (asking, answering) = pair(&server).await;
        let prices = asking.bus.topic::<Prices>("prices").unwrap();
        // Concurrent requests: the export does not wait for one answer before the next.
        let asked = join_all((1..=200u32).map(|n| {
            let prices = prices.clone();
            async move { (n, prices.request_with(&ctx(WAIT), n).await) }
        }))
        .await;
        for (n, reply) in asked {
            assert_eq!(reply.unwrap(), u64::from(n) * 10);
        }
        match prices.request_with(&ctx(WAIT), 0).await {
            Err(RequestError::Failed(why)) => assert_eq!(why, "a quantity of 0 has no price"),
            other => panic!("expected Failed, got {other:?}"),
        }
        let (asked, answered) = (asking.close().await, answering.close().await);
        assert_eq!(asked.requests_sent, 201, "{asked:?}");
        assert_eq!(answered.requests_served, 201, "{answered:?}");
        assert_eq!(
            (
                asked.late_replies,
                asked.request_timeouts,
                asked.no_responders
            ),
            (0, 0, 0),
            "{asked:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_is_unanswered_without_waiting_for_the_deadline() {
    for server in servers() {
        // Nobody imports the topic: NATS says "no responders".
        let asking = asking_side(&server, WAIT).await;
        let prices = asking.bus.topic::<Prices>("prices").unwrap();
        let started = tokio::time::Instant::now();
        let asked = prices.request_with(&ctx(WAIT), 1).await;
        assert!(matches!(asked, Err(RequestError::Unanswered)), "{asked:?}");
        assert!(started.elapsed() < WAIT / 2);
        assert_eq!(asking.link.stats().no_responders, 1);

        // A process imports it but has no replier.
        let answering = side(&server, WAIT).await;
        answering
            .link
            .import_requests::<u32, u64>("prices")
            .await
            .unwrap();
        let asked = prices.request_with(&ctx(WAIT), 1).await;
        assert!(matches!(asked, Err(RequestError::Unanswered)), "{asked:?}");
        assert!(started.elapsed() < WAIT / 2);
        asking.close().await;
        answering.close().await;
    }
}

/// A replier that waits for a permit of `gate` before answering `n * 10`.
fn gated(gate: Arc<Semaphore>) -> impl ringbus::Replier<u32, u64> {
    move |n: &u32| {
        let (n, gate) = (*n, gate.clone());
        async move {
            gate.acquire().await.expect("open").forget();
            u64::from(n) * 10
        }
    }
}

/// A requester side (with `request_timeout`) and an answering side whose replier is
/// [`gated`] by the returned semaphore (no permits yet).
async fn gated_pair(
    server: &Server,
    request_timeout: Duration,
) -> (Arc<Semaphore>, ringbus::Subscription, Side, Side) {
    let gate = Arc::new(Semaphore::new(0));
    let replier = gated(gate.clone());
    let (replier, asking, answering) = linked_pair(server, request_timeout, |bus| {
        bus.reply("prices", replier).unwrap()
    })
    .await;
    (gate, replier, asking, answering)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_is_a_timeout_and_the_answering_side_gives_up_too() {
    for server in servers() {
        // The link's own bound (no deadline on the request), then the requester's deadline.
        let (gate, replier, asking, answering) =
            gated_pair(&server, Duration::from_millis(300)).await;
        let prices = asking.bus.topic::<Prices>("prices").unwrap();
        let asked = prices.request(1).await;
        assert!(
            matches!(asked, Err(RequestError::Timeout(None))),
            "{asked:?}"
        );
        let asked = prices
            .request_with(&ctx(Duration::from_millis(100)), 2)
            .await;
        assert!(
            matches!(asked, Err(RequestError::Timeout(None))),
            "{asked:?}"
        );
        // The answering side gives up at the time it was told, measured from when the
        // request reached it: it answers "timeout" to both.
        let deadline = tokio::time::Instant::now() + WAIT;
        while answering.link.stats().requests_served < 2 {
            assert!(tokio::time::Instant::now() < deadline, "no timeout answers");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        gate.add_permits(3);
        assert_eq!(prices.request_with(&ctx(WAIT), 3).await.unwrap(), 30);
        answering.bus.wait_idle().await;
        // Its own requests had ended when the replier answered 1 and 2: those answers were
        // dropped there.
        assert_eq!(replier.stats().late_replies, 2, "{:?}", replier.stats());
        let asked = asking.close().await;
        answering.close().await;
        // Each of 1 and 2 timed out once: here, or there first (answered "timeout"). The
        // answer that came second, if any, was late.
        assert_eq!(asked.request_timeouts, 2, "{asked:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reply_is_dropped_and_counted_never_given_to_the_next_request() {
    for server in servers() {
        // The answering side is a plain NATS client that answers 1 only after 2 arrived.
        let raw = async_nats::connect(server.url()).await.unwrap();
        let mut requests = raw.subscribe("req.prices").await.unwrap();
        raw.flush().await.unwrap();
        let asking = asking_side(&server, WAIT).await;
        let prices = asking.bus.topic::<Prices>("prices").unwrap();
        // Long enough for the request to be sent on a loaded machine (a deadline that passes
        // before it is sent is `Timeout(Some(request))`), short enough to keep the test quick.
        let asked = prices
            .request_with(&ctx(Duration::from_millis(1000)), 1)
            .await;
        assert!(
            matches!(asked, Err(RequestError::Timeout(None))),
            "{asked:?}"
        );
        let second = tokio::spawn({
            let prices = prices.clone();
            async move { prices.request_with(&ctx(WAIT), 2).await }
        });
        let mut reply_to = Vec::new();
        for _ in 0..2 {
            let request = tokio::time::timeout(WAIT, requests.next())
                .await
                .unwrap()
                .unwrap();
            reply_to.push(request.reply.unwrap());
        }
        for (to, body) in reply_to.into_iter().zip(["111", "20"]) {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Ringbus-Topic", "prices");
            headers.insert("Ringbus-Id", "raw");
            raw.publish_with_headers(to, headers, body.into())
                .await
                .unwrap();
        }
        raw.flush().await.unwrap();
        assert_eq!(second.await.unwrap().unwrap(), 20);
        let asked = asking.close().await;
        assert_eq!(
            (asked.request_timeouts, asked.late_replies),
            (1, 1),
            "{asked:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_imports_answer_each_request_once_and_fan_out_imports_each_answer() {
    const N: u32 = 50;
    for server in servers() {
        for shared in [true, false] {
            let mut answering = Vec::new();
            for _ in 0..2 {
                let side = side(&server, WAIT).await;
                side.bus.register(price).unwrap();
                if shared {
                    side.link
                        .import_requests_shared::<u32, u64>("prices", "pricers")
                        .await
                        .unwrap();
                } else {
                    side.link
                        .import_requests::<u32, u64>("prices")
                        .await
                        .unwrap();
                }
                answering.push(side);
            }
            let asking = side(&server, WAIT).await;
            asking
                .link
                .export_requests::<u32, u64>("prices")
                .await
                .unwrap();
            let prices = asking.bus.topic::<Prices>("prices").unwrap();
            for n in 1..=N {
                assert_eq!(
                    prices.request_with(&ctx(WAIT), n).await.unwrap(),
                    u64::from(n) * 10
                );
            }
            // Shared: one answer per request. Fan-out: two, and the second finds its request
            // answered: dropped and counted late. (Waited for: the extra answers may still
            // be on their way when the requests have returned.)
            let (served, late) = if shared { (N, 0) } else { (2 * N, N) };
            let counts = || {
                let served: u64 = answering
                    .iter()
                    .map(|s| s.link.stats().requests_served)
                    .sum();
                (served, asking.link.stats().late_replies)
            };
            let deadline = tokio::time::Instant::now() + WAIT;
            while counts() != (u64::from(served), u64::from(late)) {
                assert!(tokio::time::Instant::now() < deadline, "{:?}", counts());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            for side in answering {
                side.close().await;
            }
            // Nothing more came.
            assert_eq!(asking.close().await.late_replies, u64::from(late));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_waits_for_the_answers_of_requests_already_sent() {
    for server in servers() {
        let (gate, _replier, asking, answering) = gated_pair(&server, WAIT).await;
        let prices = asking.bus.topic::<Prices>("prices").unwrap();
        let asked = tokio::spawn(async move { prices.request_with(&ctx(WAIT), 4).await });
        // Sent, not answered: the close waits for the answer.
        while asking.link.stats().requests_sent == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let closing = tokio::spawn(async move {
            let report = asking.link.close(WAIT).await;
            (report, asking.bus)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!closing.is_finished(), "close did not wait for the answer");
        gate.add_permits(1);
        assert_eq!(asked.await.unwrap().unwrap(), 40);
        let (report, bus) = closing.await.unwrap();
        assert!(report.complete, "{report:?}");
        bus.close().await;
        answering.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_topic_is_linked_one_way_per_link() {
    let memory = MemoryNats::start().unwrap();
    let server = Server::Memory(memory);
    let asking = asking_side(&server, WAIT).await;
    // Imported too, its requests would go out again through the export.
    for again in [
        asking.link.import_requests::<u32, u64>("prices").await,
        asking.link.export_requests::<u32, u64>("prices").await,
    ] {
        assert!(
            matches!(again, Err(ringbus_nats::LinkError::AlreadyLinked { .. })),
            "{again:?}"
        );
    }
    // A topic of another type is refused, and leaves it unclaimed.
    asking.bus.topic::<u32>("plain").unwrap();
    let err = asking.link.import_requests::<u32, u64>("plain").await;
    assert!(
        matches!(err, Err(ringbus_nats::LinkError::Bus(_))),
        "{err:?}"
    );
    asking
        .link
        .import::<u32>("plain", ringbus_nats::Mode::Core)
        .await
        .unwrap();
    asking.close().await;
}

/// A `request_timeout` past what the clock can represent (`Duration::MAX`: no bound of the
/// link's own) leaves the requester's context to bound the wait: the request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timeout_too_long_for_the_clock_is_no_bound() {
    for server in servers() {
        let (_price, asking, answering) =
            linked_pair(&server, Duration::MAX, |bus| bus.register(price).unwrap()).await;
        let prices = asking.bus.topic::<Prices>("prices").unwrap();
        assert_eq!(prices.request_with(&ctx(WAIT), 3).await.unwrap(), 30);
        let asked = asking.close().await;
        answering.close().await;
        assert_eq!(asked.requests_sent, 1, "{asked:?}");
    }
}
