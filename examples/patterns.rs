//! Topic patterns: topics named by entity and event (`orders.eu.created`,
//! `orders.us.paid`), an auditor that follows every order topic with `orders.>`, a per-region
//! counter on `orders.*.paid` told which topic each message came from, and a
//! `#[subscriber("orders.*.created")]` function. Topics made after the subscriptions are
//! followed too; a topic of another type that matches a pattern is refused with the message
//! back.
//!
//! `cargo run --release --example patterns`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ringbus::{subscriber, Bus, PublishError};

#[derive(Debug)]
struct Order {
    id: u64,
    cents: u64,
}

/// Every new order, whatever its region: not told the topic.
#[subscriber("orders.*.created")]
async fn welcome(order: &Order) {
    if order.id % 250 == 0 {
        tracing::info!(order = order.id, "new order");
    }
}

#[tokio::main]
async fn main() -> Result<(), ringbus::Error> {
    tracing_subscriber::fmt().with_target(false).init();
    let bus = Bus::builder().capacity(256).build();

    // Follows every topic under `orders.`, present and future.
    let audit = bus.subscribe_pattern("orders.>", async |topic: &str, order: &Order| {
        tracing::debug!(topic, order = order.id, "audited");
    })?;
    // Told the topic, so it can total per region. One handler serves every followed topic:
    // the map is shared by all of them.
    let totals = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let counted = totals.clone();
    let paid = bus.subscribe_pattern("orders.*.paid", move |topic: &str, order: &Order| {
        let mut totals = counted.lock().unwrap_or_else(|e| e.into_inner());
        *totals.entry(topic.to_string()).or_default() += order.cents;
        std::future::ready(())
    })?;
    let welcomed = bus.register(welcome)?;

    // These topics do not exist yet: each is followed from the moment it is made.
    for id in 0..1_000u64 {
        let region = ["eu", "us", "apac"][id as usize % 3];
        bus.publish(&format!("orders.{region}.created"), Order { id, cents: 0 })
            .await?;
        bus.publish(&format!("orders.{region}.paid"), Order { id, cents: 500 })
            .await?;
    }

    // A matching topic of another type is refused where the two meet.
    match bus
        .publish("orders.eu.note", "not an order".to_string())
        .await
    {
        Err(PublishError::PatternMismatch(note, e)) => {
            tracing::warn!(%e, refused = %note, "kept off the order topics");
        }
        other => other?,
    }

    bus.close().await;
    tracing::info!(
        audited = audit.stats().handled,
        topics = ?audit.topics(),
        paid = paid.stats().handled,
        welcomed = welcomed.stats().handled,
        "done"
    );
    let totals = totals.lock().unwrap_or_else(|e| e.into_inner()).clone();
    tracing::info!(?totals, "cents paid per topic");
    assert_eq!(totals.values().sum::<u64>(), 500 * 1_000);
    assert_eq!(audit.stats().handled, 2_000);
    assert_eq!(paid.stats().handled, 1_000);
    assert_eq!(welcomed.stats().handled, 1_000);
    Ok(())
}
