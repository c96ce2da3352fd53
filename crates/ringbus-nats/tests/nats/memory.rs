//! The in-memory stand-in (`testing::MemoryNats`) as a service's tests use it: a whole
//! service (its handlers, its link's imports, exports and request imports) tested against a
//! second bus standing for the rest of the system, with no `nats-server`; and a topic
//! linked both ways, which relies on the server honouring no-echo; and its refusal of
//! JetStream. The core-mode conformance cases run through it too (the shared suite,
//! `conformance/tests/links`), as do the request/reply cases (`request.rs`).

use std::time::Duration;

use ringbus::testing::Recorder;
use ringbus::{subscriber, Bus, Context, Request, RequestError};
use ringbus_nats::testing::MemoryNats;
use ringbus_nats::{Envelope, Link, Mode};
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(10);

// ---- The service under test: bills orders, answers price requests. ----

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    cents: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order: u64,
}

#[subscriber("orders", publish("receipts"))]
async fn bill(order: &Order) -> Result<Receipt, String> {
    if order.cents == 0 {
        return Err(format!("order {} is free", order.id));
    }
    Ok(Receipt { order: order.id })
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Sku(String);

#[subscriber("prices", reply)]
async fn price(sku: &Sku) -> Result<u64, String> {
    match sku.0.as_str() {
        "tea" => Ok(350),
        other => Err(format!("no price for {other}")),
    }
}

/// What the service's `main` does with its bus and link, given a URL.
async fn start_billing(url: String) -> Result<(Bus, Link), Box<dyn std::error::Error>> {
    let bus = Bus::new();
    bus.register(bill)?;
    bus.register(price)?;
    let link = Link::builder(url).prefix("shop").connect(&bus).await?;
    link.import::<Order>("orders", Mode::Core).await?;
    link.export::<Receipt>("receipts", Mode::Core).await?;
    link.import_requests::<Sku, u64>("prices").await?;
    Ok((bus, link))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_service_is_tested_without_a_nats_server() {
    let nats = MemoryNats::start().unwrap();
    let (billing, billing_link) = start_billing(nats.url()).await.unwrap();

    // The rest of the system, as the test sees it: a bus linked the other way round.
    let world = Bus::new();
    let receipts = Recorder::<Receipt>::new(&world, "receipts").unwrap();
    let link = Link::builder(nats.url())
        .prefix("shop")
        .connect(&world)
        .await
        .unwrap();
    link.export::<Order>("orders", Mode::Core).await.unwrap();
    link.import::<Receipt>("receipts", Mode::Core)
        .await
        .unwrap();
    link.export_requests::<Sku, u64>("prices").await.unwrap();

    assert_eq!(nats.connections(), 2);
    for (id, cents) in [(1, 500), (2, 0), (3, 100)] {
        world.publish("orders", Order { id, cents }).await.unwrap();
    }
    assert_eq!(
        receipts.wait_for(2).await,
        [Receipt { order: 1 }, Receipt { order: 3 }]
    );

    let prices = world.topic::<Request<Sku, u64>>("prices").unwrap();
    let ctx = Context::new().with_timeout(WAIT);
    assert_eq!(
        prices.request_with(&ctx, Sku("tea".into())).await.unwrap(),
        350
    );
    match prices.request_with(&ctx, Sku("gold".into())).await {
        Err(RequestError::Failed(why)) => assert_eq!(why, "no price for gold"),
        other => panic!("expected Failed, got {other:?}"),
    }

    // The free order was refused by the handler there, logged and counted.
    billing.wait_idle().await;
    let stats = billing.stats();
    let orders = stats.topics.iter().find(|t| t.name == "orders").unwrap();
    let billed = orders.subscribers.iter().map(|s| s.errors).sum::<u64>();
    assert_eq!(billed, 1);

    assert!(link.close(WAIT).await.complete);
    assert!(billing_link.close(WAIT).await.complete);
    world.close().await;
    billing.close().await;
    receipts.assert_recorded(&[Receipt { order: 1 }, Receipt { order: 3 }]);
    // Closed links are gone from the server (their threads end with their sockets).
    let deadline = tokio::time::Instant::now() + WAIT;
    while nats.connections() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "{nats:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(nats.delivered() >= 7, "{nats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_linked_both_ways_does_not_echo_through_the_stand_in() {
    let nats = MemoryNats::start().unwrap();
    let mut sides = Vec::new();
    for _ in 0..2 {
        let bus = Bus::new();
        let seen = Recorder::<Envelope<String>>::new(&bus, "chat").unwrap();
        let link = Link::builder(nats.url()).connect(&bus).await.unwrap();
        link.link_both::<Envelope<String>>("chat", Mode::Core)
            .await
            .unwrap();
        sides.push((bus, link, seen));
    }
    let body = |e: &Envelope<String>| e.body().clone();
    sides[0]
        .0
        .publish("chat", Envelope::new("from a".to_string()))
        .await
        .unwrap();
    // A marker from b: once a has it, an echo of "from a" would have come before it.
    sides[1]
        .0
        .publish("chat", Envelope::new("from b".to_string()))
        .await
        .unwrap();
    for (bus, link, seen) in sides {
        let got: Vec<String> = seen.wait_for(2).await.iter().map(body).collect();
        assert!(link.close(WAIT).await.complete);
        bus.wait_idle().await;
        let all: Vec<String> = seen.recorded().iter().map(body).collect();
        assert_eq!(all.len(), 2, "an echo: {all:?}");
        assert!(got.contains(&"from a".to_string()) && got.contains(&"from b".to_string()));
        bus.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_refuses_jetstream_with_an_error_that_says_so() {
    let memory = MemoryNats::start().expect("a loopback port");
    let bus = Bus::new();
    let link = Link::builder(memory.url())
        .prefix("conf")
        .connect(&bus)
        .await
        .unwrap();
    for linked in [
        link.export::<Envelope<u64>>("a", Mode::JetStream).await,
        link.import::<Envelope<u64>>("b", Mode::JetStream).await,
    ] {
        match linked {
            Err(ringbus_nats::LinkError::Setup(why)) => {
                assert!(why.to_string().contains("MemoryNats"), "{why}")
            }
            other => panic!("expected a JetStream error, got {other:?}"),
        }
    }
    // Refused without linking anything: the topics can be linked in core mode.
    link.export::<Envelope<u64>>("a", Mode::Core).await.unwrap();
    link.import::<Envelope<u64>>("b", Mode::Core).await.unwrap();
    assert!(link.close(WAIT).await.complete);
    bus.close().await;
}
