//! What happens when a subscriber is slow: publishers wait (nothing is lost), `try_publish`
//! says `Full` and gives the message back, a publish bounded by a `Context` deadline gives the
//! message back as `Cancelled`, and a subscriber that stalls past its stall timeout is
//! detached so it cannot hold publishers forever.
//!
//! Run with `cargo run --release --example backpressure`.

use std::time::Duration;

use ringbus::{Bus, Context, PublishError, SubscribeOptions};
use std::sync::Arc;
use tokio::sync::Semaphore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The bus reports errors, panics, stalls and drain reports as `tracing` events: print them.
    tracing_subscriber::fmt().with_target(false).init();
    let bus = Bus::builder().capacity(4).build();

    // A subscriber that handles one message per permit we hand out.
    let gate = Arc::new(Semaphore::new(0));
    let slow = bus.subscribe("metrics", {
        let gate = gate.clone();
        move |_: &u64| {
            let gate = gate.clone();
            async move {
                if let Ok(permit) = gate.acquire().await {
                    permit.forget();
                }
            }
        }
    })?;

    // The topic holds 4 messages (the subscriber also holds the one it is on).
    let mut accepted: u64 = 0;
    while bus.try_publish("metrics", accepted).is_ok() {
        accepted += 1;
    }
    match bus.try_publish("metrics", 99u64) {
        Err(PublishError::Full(back)) => {
            println!("try_publish: Full, got {back} back after {accepted} accepted")
        }
        other => return Err(format!("expected Full, got {other:?}").into()),
    }

    // A publish bounded by a deadline: the subscriber does not move, so it gives up.
    let ctx = Context::new().with_timeout(Duration::from_millis(20));
    match bus.publish_with(&ctx, "metrics", 100u64).await {
        Err(PublishError::Cancelled(back)) => {
            println!("publish_with: Cancelled after 20 ms, got {back} back")
        }
        other => return Err(format!("expected Cancelled, got {other:?}").into()),
    }

    // A plain publish waits; releasing the subscriber lets it through.
    let waiting = tokio::spawn({
        let bus = bus.clone();
        async move { bus.publish("metrics", 101u64).await }
    });
    gate.add_permits(1);
    waiting.await??;
    println!("publish: waited for room, then went through");

    // A wedged subscriber with a stall timeout is detached; publishers go on.
    let wedged = bus.subscribe_with(
        "alerts",
        SubscribeOptions::new()
            .name("wedged")
            .stall_timeout(Duration::from_millis(50)),
        |_: &u32| std::future::pending::<()>(),
    )?;
    for alert in 0..16u32 {
        bus.publish("alerts", alert).await?; // would wait forever without the stall timeout
    }
    let stats = wedged.stats();
    println!(
        "stall timeout: subscriber '{}' detached: {} (publishers no longer wait for it)",
        wedged.name(),
        stats.detached
    );
    if !stats.detached {
        return Err("the wedged subscriber was not detached".into());
    }

    // Let the slow subscriber finish, then close: everything accepted is handled.
    gate.add_permits(1_000);
    bus.close().await;
    println!(
        "closed: the slow subscriber handled {} messages",
        slow.stats().handled
    );
    Ok(())
}
