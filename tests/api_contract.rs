//! The example of `shared/API.md`, as users write it, compiled and run: the public names and
//! shapes other code relies on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ringbus::{subscriber, Bus, Context, PublishError};

#[derive(Debug)]
struct Order {
    id: u64,
    cents: u64,
}

#[derive(Debug)]
struct Receipt {
    order: u64,
}

#[derive(Debug)]
struct BillingError;

impl std::fmt::Display for BillingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("billing failed")
    }
}

static AUDITED: AtomicU64 = AtomicU64::new(0);

#[subscriber("orders")]
async fn audit(order: &Order) {
    tracing::info!(id = order.id, "audited");
    AUDITED.fetch_add(1, Ordering::Relaxed);
}

#[subscriber("orders", publish("receipts"))]
async fn bill(order: &Order) -> Result<Receipt, BillingError> {
    if order.cents == 0 {
        return Err(BillingError);
    }
    Ok(Receipt { order: order.id })
}

#[tokio::test]
async fn the_api_md_example_runs() -> Result<(), ringbus::Error> {
    let bus = Bus::builder().capacity(1024).build();
    bus.register(audit)?;
    bus.register(bill)?;
    let receipts = Arc::new(AtomicU64::new(0));
    let sub = bus.subscribe("receipts", {
        let receipts = receipts.clone();
        move |r: &Receipt| {
            assert!(r.order > 0);
            let receipts = receipts.clone();
            async move {
                receipts.fetch_add(1, Ordering::Relaxed);
            }
        }
    })?;

    bus.publish("orders", Order { id: 1, cents: 500 }).await?;
    let ctx = Context::new().with_timeout(std::time::Duration::from_millis(50));
    match bus
        .publish_with(&ctx, "orders", Order { id: 2, cents: 9 })
        .await
    {
        Err(PublishError::Cancelled(order)) => panic!("there was room for {order:?}"),
        other => other?,
    }
    let orders = bus.topic::<Order>("orders")?;
    orders.publish(Order { id: 3, cents: 1 }).await?;
    orders.try_publish(Order { id: 4, cents: 1 })?;

    // Unsubscribe only once the receipts of the four orders have been published, so the
    // test knows what the subscriber must have handled.
    while bus.topic::<Receipt>("receipts")?.published() < 4 {
        tokio::task::yield_now().await;
    }
    sub.unsubscribe().await;
    assert_eq!(receipts.load(Ordering::Relaxed), 4);
    bus.close().await;
    assert_eq!(AUDITED.load(Ordering::Relaxed), 4);
    Ok(())
}
