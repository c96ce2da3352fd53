//! Every accepted form of `#[subscriber]`, registered on a real bus and run.

use ringbus::{subscriber, Batch, Bus, Request, State};

#[derive(Debug, Clone)]
struct Order {
    id: u64,
}

#[derive(Debug)]
struct Receipt {
    order: u64,
}

struct Db {
    prefix: &'static str,
}

#[derive(Debug)]
struct BillingError;

impl std::fmt::Display for BillingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("billing failed")
    }
}

const ORDERS: &str = "orders";

/// Reads the order in place.
#[subscriber("orders")]
async fn audit(order: &Order) {
    assert!(order.id > 0);
}

#[subscriber(ORDERS, publish("receipts"), name = "billing", capacity = 64, stall_timeout = "5s")]
async fn bill(order: &Order, db: State<Db>) -> Result<Receipt, BillingError> {
    if db.prefix.is_empty() {
        return Err(BillingError);
    }
    Ok(Receipt { order: order.id })
}

#[subscriber("orders", publish("copies"))]
async fn copy(order: Order) -> Order {
    order
}

#[subscriber("receipts", batch)]
async fn receipts(batch: Batch<'_, Receipt>) -> Result<(), BillingError> {
    assert!(batch.iter().all(|r| r.order > 0));
    Ok(())
}

#[subscriber("orders", crate = "::ringbus", stall_timeout = std::time::Duration::from_millis(10))]
async fn with_path(_order: &Order) {}

/// Retries with every setting, and a dead-letter topic (`Order: Clone`).
#[subscriber(
    "orders",
    retry(attempts = 4, backoff = "1ms", max_backoff = std::time::Duration::from_millis(5), multiplier = 1.5, jitter = false, panics = true),
    dead_letter("orders.dead")
)]
async fn retrying(order: &Order) -> Result<(), BillingError> {
    if order.id == 0 {
        return Err(BillingError);
    }
    Ok(())
}

/// A dead-letter topic alone, for a message taken by value.
#[subscriber("orders", dead_letter("orders.dead.copies"))]
async fn dead_copies(_order: Order) {}

/// A replier with state, taking the message by value; and a fallible one.
#[subscriber("order.totals", reply, name = "totals", stall_timeout = "1s")]
async fn total(order: Order, db: State<Db>) -> String {
    format!("{}{}", db.prefix, order.id)
}

#[subscriber("order.checks", reply, crate = "::ringbus")]
async fn check(order: &Order) -> Result<u64, BillingError> {
    if order.id == 0 {
        return Err(BillingError);
    }
    Ok(order.id)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).state(Db { prefix: "r" }).build();
        let _ = bus.register(audit).unwrap();
        let _ = bus.register(bill).unwrap();
        let _ = bus.register(copy).unwrap();
        let _ = bus.register(receipts).unwrap();
        let _ = bus.register(with_path).unwrap();
        let _ = bus.register(retrying).unwrap();
        let _ = bus.register(dead_copies).unwrap();
        let _ = bus.register(total).unwrap();
        let _ = bus.register(check).unwrap();
        bus.publish("orders", Order { id: 1 }).await.unwrap();
        let totals = bus.topic::<Request<Order, String>>("order.totals").unwrap();
        assert_eq!(totals.request(Order { id: 7 }).await.unwrap(), "r7");
        let checks = bus.topic::<Request<Order, u64>>("order.checks").unwrap();
        assert_eq!(checks.request(Order { id: 3 }).await.unwrap(), 3);
        assert!(checks.request(Order { id: 0 }).await.is_err());
        bus.close().await;
        let stats = bus.stats();
        let topic = stats.topics.iter().find(|t| t.name == "receipts").unwrap();
        assert_eq!(topic.published, 1);
        let topic = stats.topics.iter().find(|t| t.name == "orders.dead").unwrap();
        assert_eq!(topic.published, 0);
    });
}
