//! Retries with backoff and a dead-letter topic: a payment handler whose gateway fails now
//! and then is retried with exponential backoff; an order it cannot charge after three
//! attempts goes to "orders.dead" with the error, where another handler files it. The same
//! policy written on `SubscribeOptions` for a closure handler, and the counters in `stats()`.
//!
//! `cargo run --release --example retry`

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ringbus::{subscriber, with_state, Bus, DeadLetter, RetryPolicy, SubscribeOptions};

#[derive(Debug, Clone)]
struct Order {
    id: u64,
    cents: u64,
}

/// A payment gateway that refuses every second call, and every call for a card it declines.
#[derive(Default)]
struct Gateway {
    calls: AtomicU32,
}

impl Gateway {
    fn charge(&self, order: &Order) -> Result<(), String> {
        if order.cents > 10_000 {
            return Err(format!("card declined for {} cents", order.cents));
        }
        if self.calls.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
            return Err("gateway timed out".to_string());
        }
        Ok(())
    }
}

// Three attempts in all: 10 ms, then 20 ms (with jitter: between half and all of that).
// After the last one the order goes to "orders.dead" as a `DeadLetter<Order>`.
#[subscriber(
    "orders",
    retry(attempts = 3, backoff = "10ms"),
    dead_letter("orders.dead")
)]
async fn charge(order: &Order, gateway: ringbus::State<Gateway>) -> Result<(), String> {
    gateway.charge(order)?;
    tracing::info!(order = order.id, "charged");
    Ok(())
}

#[subscriber("orders.dead")]
async fn file(dead: &DeadLetter<Order>) {
    tracing::warn!(
        order = dead.message.id,
        subscriber = %dead.subscriber,
        attempts = dead.attempts,
        error = %dead.error,
        "filed for a human to look at"
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();
    let bus = Bus::builder().state(Gateway::default()).build();
    let charging = bus.register(charge)?;
    bus.register(file)?;

    // The same, spelled on `SubscribeOptions`, for a closure handler on another topic.
    let dead = bus.topic::<DeadLetter<Order>>("orders.dead")?;
    let options = SubscribeOptions::new()
        .name("refund")
        .retry(
            RetryPolicy::new(2)
                .backoff(Duration::from_millis(5))
                .jitter(false),
        )
        .dead_letter(&dead);
    let refunding = bus.subscribe_with(
        "refunds",
        options,
        with_state(
            Gateway::default(),
            async |gateway: &Gateway, order: &Order| gateway.charge(order),
        ),
    )?;

    for id in 1..=4 {
        bus.publish("orders", Order { id, cents: 500 }).await?;
    }
    let declined = |id| Order { id, cents: 99_999 };
    bus.publish("orders", declined(5)).await?;
    bus.publish("refunds", declined(6)).await?;
    bus.close().await; // waits for the retries and the dead letters' handler

    let (c, r) = (charging.stats(), refunding.stats());
    println!(
        "charge: {} handled, {} retries, {} dead-lettered; refund: {} retries, {} dead-lettered",
        c.handled, c.retries, c.dead_lettered, r.retries, r.dead_lettered
    );
    assert_eq!((c.handled, c.dead_lettered), (5, 1));
    assert_eq!((r.retries, r.dead_lettered), (1, 1));
    Ok(())
}
