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

/// `BusStats`'s table: a line per topic with the slowest subscriber's lag and the sums of
/// errors, panics and detached subscribers, columns as wide as their widest cell.
#[tokio::test]
async fn bus_stats_display_is_a_table_of_the_topics() {
    let bus = Bus::new();
    assert_eq!(bus.stats().to_string(), "no topics\n");
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let held = std::sync::Mutex::new(Some(held));
    let _slow = bus
        .subscribe("orders.created", move |_: &u64| {
            let held = held.lock().unwrap().take();
            async move {
                if let Some(held) = held {
                    let _ = held.await;
                }
            }
        })
        .unwrap();
    let _failing = bus
        .subscribe("orders.created", async |n: &u64| -> Result<(), String> {
            Err(format!("no {n}"))
        })
        .unwrap();
    let _b = bus.subscribe("b", async |_: &String| {}).unwrap();
    for n in 0..3u64 {
        bus.publish("orders.created", n).await.unwrap();
    }
    // The failing subscriber handles all three; the slow one is held in its first call.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while bus.stats().topics[1].subscribers[1].handled < 3 {
        assert!(std::time::Instant::now() < deadline, "{:?}", bus.stats());
        tokio::task::yield_now().await;
    }
    let table = bus.stats().to_string();
    assert_eq!(
        table,
        "topic           type                   subscribers  published  unrouted  lag  errors  panics  detached\n\
         b               alloc::string::String            1          0         0    0       0       0         0\n\
         orders.created  u64                              2          3         0    3       3       0         0\n",
        "\n{table}"
    );
    drop(release);
    bus.close().await;
}

/// A misspelled topic shows in the table: its publishes are counted under `unrouted`
/// (issue 33).
#[tokio::test]
async fn bus_stats_display_shows_unrouted_publishes() {
    let bus = Bus::new();
    let _sub = bus.subscribe("orders", async |_: &u64| {}).unwrap();
    bus.publish("order", 1u64).await.unwrap();
    bus.publish("order", 2u64).await.unwrap();
    bus.close().await;
    assert_eq!(
        bus.stats().to_string(),
        "topic   type  subscribers  published  unrouted  lag  errors  panics  detached\n\
         order   u64             0          2         2    0       0       0         0\n\
         orders  u64             1          0         0    0       0       0         0\n\
         closed\n"
    );
}

/// A topic name of any length fits the table: a cell longer than 64 characters is cut to
/// 64, its middle elided with `…`, so the table stays readable (issue 34: a name of more
/// than 65,535 bytes made the padding panic, and `App` logs this table at shutdown).
#[tokio::test]
async fn bus_stats_display_elides_a_long_topic_name() {
    let bus = Bus::new();
    // Multi-byte characters: the cut falls between characters, and widths count characters.
    let long = format!("{}{}é", "a".repeat(40_000), "é".repeat(30_000));
    bus.publish(&long, 7u64).await.unwrap();
    let table = bus.stats().to_string();
    let elided = format!("{}…{}", "a".repeat(31), "é".repeat(32));
    assert_eq!(elided.chars().count(), 64);
    assert_eq!(
        table,
        format!(
            "{:<64}  type  subscribers  published  unrouted  lag  errors  panics  detached\n\
             {elided}  u64             0          1         1    0       0       0         0\n",
            "topic"
        )
    );
    assert_eq!(
        bus.stats().topics[0].name,
        long,
        "the stats keep the whole name"
    );
}
