//! A pull subscription (`Bus::stream`) in place of a `tokio::sync::broadcast` receiver, and
//! the test helpers (`Bus::wait_idle`, `testing::Recorder`) checking a small service.
//!
//! `cargo run --release --example stream`

use ringbus::testing::Recorder;
use ringbus::{subscriber, Bus};

#[derive(Debug)]
struct Order {
    id: u64,
    cents: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct Receipt {
    order: u64,
    cents: u64,
}

#[subscriber("orders", publish("receipts"))]
async fn bill(order: &Order) -> Result<Receipt, String> {
    if order.cents == 0 {
        return Err(format!("order {} is free", order.id));
    }
    Ok(Receipt {
        order: order.id,
        cents: order.cents,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();
    let bus = Bus::builder().capacity(64).build();
    bus.register(bill)?;

    // A dashboard written against tokio's broadcast: `while let Some(..) = stream.next()`.
    // The stream gates publishers like any subscriber, so it never lags and never misses one.
    let mut receipts = bus.stream::<Receipt>("receipts")?;
    let dashboard = tokio::spawn(async move {
        let (mut count, mut cents) = (0u64, 0u64);
        while let Some(receipt) = receipts.next().await {
            count += 1;
            cents += receipt.cents;
        }
        (count, cents) // the stream ends once the bus is closed and it has read everything
    });

    // What a test of this service does: record a topic, publish, wait until the bus is
    // idle, assert. No sleeps.
    let recorded = Recorder::<Receipt>::new(&bus, "receipts")?;
    for id in 0..1_000u64 {
        bus.publish(
            "orders",
            Order {
                id,
                cents: id % 100,
            },
        )
        .await?;
    }
    bus.wait_idle().await; // every order billed and every receipt recorded; the bus stays open
    let billed = recorded.recorded();
    assert_eq!(billed.len(), 990, "the 10 free orders are refused");
    assert_eq!(billed[0], Receipt { order: 1, cents: 1 });
    println!(
        "billed {} orders; the bus is still open: {}",
        billed.len(),
        !bus.is_closed()
    );

    bus.close().await; // does not wait for the dashboard's stream; it reads to the end
    let (count, cents) = dashboard.await?;
    assert_eq!(count, 990);
    println!("dashboard saw {count} receipts, {cents} cents in all");
    print!("{}", bus.stats());
    Ok(())
}
