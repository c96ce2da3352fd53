//! A small service on the bus: two `#[subscriber]` handlers on "orders" (one of them
//! publishes a receipt for each order to "receipts"), a third handler on "receipts", a burst
//! of orders, and a graceful close that handles everything queued.
//!
//! Run with `cargo run --release --example quickstart`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ringbus::{subscriber, Bus, State};

#[derive(Debug)]
struct Order {
    id: u64,
    cents: u64,
}

#[derive(Debug)]
struct Receipt {
    order: u64,
    cents: u64,
}

#[derive(Debug)]
struct Declined(u64);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "order {} declined: amount is zero", self.0)
    }
}

/// Totals shared by the handlers, registered once on the bus builder.
#[derive(Default)]
struct Ledger {
    audited: AtomicU64,
    receipts: AtomicU64,
    revenue: AtomicU64,
}

/// Reads each order in place (no clone, no copy).
#[subscriber("orders")]
async fn audit(order: &Order, ledger: State<Ledger>) {
    debug_assert!(order.id > 0);
    ledger.audited.fetch_add(1, Ordering::Relaxed);
}

/// Bills each order; the receipt it returns is published to "receipts", and a declined order
/// is logged and counted as a handler error.
#[subscriber("orders", publish("receipts"), name = "billing")]
async fn bill(order: &Order) -> Result<Receipt, Declined> {
    if order.cents == 0 {
        return Err(Declined(order.id));
    }
    Ok(Receipt {
        order: order.id,
        cents: order.cents,
    })
}

#[subscriber("receipts")]
async fn bookkeeping(receipt: &Receipt, ledger: State<Ledger>) {
    debug_assert!(receipt.order > 0);
    ledger.receipts.fetch_add(1, Ordering::Relaxed);
    ledger.revenue.fetch_add(receipt.cents, Ordering::Relaxed);
}

const ORDERS: u64 = 200_000;
/// Every this many orders one is free (declined by billing).
const FREE_EVERY: u64 = 50_000;

#[tokio::main]
async fn main() -> Result<(), ringbus::Error> {
    // The bus reports errors, panics, stalls and drain reports as `tracing` events: print them.
    tracing_subscriber::fmt().with_target(false).init();
    let bus = Bus::builder()
        .capacity(1024)
        .state(Ledger::default())
        .build();
    let _audit = bus.register(audit)?;
    let _billing = bus.register(bill)?;
    let _bookkeeping = bus.register(bookkeeping)?;

    // A burst of orders through a resolved topic handle (no lookup per publish). A few orders
    // are free, and billing declines them: each decline is logged (a `tracing` warn event,
    // printed by the subscriber installed above) and counted in the stats.
    let orders = bus.topic::<Order>("orders")?;
    let started = Instant::now();
    for id in 1..=ORDERS {
        let cents = if id % FREE_EVERY == 0 {
            0
        } else {
            100 + id % 900
        };
        orders.publish(Order { id, cents }).await?;
    }
    let published = started.elapsed();

    // Refuses new orders, then returns once every queued order and receipt is handled.
    bus.close().await;
    let total = started.elapsed();

    let stats = bus.stats();
    for topic in &stats.topics {
        println!("topic {:<9} published {:>7}", topic.name, topic.published);
        for sub in &topic.subscribers {
            println!(
                "  {:<12} handled {:>7}, errors {:>5}, panics {}",
                sub.name, sub.handled, sub.errors, sub.panics
            );
        }
    }
    let ledger = bus.state::<Ledger>().expect("registered on the builder");
    println!(
        "audited {} orders, {} receipts worth {} cents",
        ledger.audited.load(Ordering::Relaxed),
        ledger.receipts.load(Ordering::Relaxed),
        ledger.revenue.load(Ordering::Relaxed)
    );
    println!(
        "published {ORDERS} orders in {:.1} ms ({:.2} M/s); closed and drained after {:.1} ms",
        published.as_secs_f64() * 1e3,
        ORDERS as f64 / published.as_secs_f64() / 1e6,
        total.as_secs_f64() * 1e3
    );

    let expected_receipts = ORDERS - ORDERS / FREE_EVERY;
    if ledger.audited.load(Ordering::Relaxed) != ORDERS
        || ledger.receipts.load(Ordering::Relaxed) != expected_receipts
    {
        eprintln!("lost messages");
        std::process::exit(1);
    }
    Ok(())
}
