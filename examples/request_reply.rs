//! Request/reply: a pricing service answers quotes on the "prices" topic, declared with
//! `#[subscriber("prices", reply)]`; a caller asks with `topic.request_with(&ctx, msg)` and
//! gets the reply, or an error that says why not: the replier failed, nobody answered, or
//! the deadline passed (the late reply is then dropped and counted, never handed to the next
//! request).
//!
//! `cargo run --release --example request_reply`

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ringbus::{subscriber, Bus, Context, Request, RequestError, State};

#[derive(Debug)]
struct Quote {
    symbol: &'static str,
    quantity: u32,
}

/// A slow price feed: while `slow` is set, a lookup takes 200 ms.
#[derive(Default)]
struct Feed {
    slow: AtomicBool,
}

/// Answers a quote with its price in cents, or an error the caller receives.
#[subscriber("prices", reply)]
async fn price(quote: &Quote, feed: State<Feed>) -> Result<u64, String> {
    if feed.slow.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cents = match quote.symbol {
        "ACME" => 1_250,
        "INIT" => 99,
        other => return Err(format!("unknown symbol {other}")),
    };
    Ok(cents * u64::from(quote.quantity))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bus = Bus::builder().state(Feed::default()).build();
    let feed = bus.state::<Feed>().ok_or("the feed is registered above")?;
    let prices = bus.topic::<Request<Quote, u64>>("prices")?;

    // Before any replier: an error at once, with the quote back.
    let quote = Quote {
        symbol: "ACME",
        quantity: 1,
    };
    match prices.request(quote).await {
        Err(RequestError::NoResponders(quote)) => println!("no pricer yet for {quote:?}"),
        other => return Err(format!("expected NoResponders, got {other:?}").into()),
    }

    let pricer = bus.register(price)?;
    let ctx = Context::new().with_timeout(Duration::from_millis(100));
    let cents = prices
        .request_with(
            &ctx,
            Quote {
                symbol: "ACME",
                quantity: 4,
            },
        )
        .await?;
    println!("4 ACME cost {cents} cents");
    assert_eq!(cents, 5_000);

    match prices
        .request(Quote {
            symbol: "ZZZ",
            quantity: 1,
        })
        .await
    {
        Err(RequestError::Failed(why)) => println!("the pricer failed: {why}"),
        other => return Err(format!("expected Failed, got {other:?}").into()),
    }

    // A slow feed: the request times out; its reply comes later and is dropped, counted.
    feed.slow.store(true, Ordering::Relaxed);
    let ctx = Context::new().with_timeout(Duration::from_millis(50));
    match prices
        .request_with(
            &ctx,
            Quote {
                symbol: "INIT",
                quantity: 1,
            },
        )
        .await
    {
        Err(RequestError::Timeout(None)) => println!("timed out waiting for the pricer"),
        other => return Err(format!("expected Timeout, got {other:?}").into()),
    }
    feed.slow.store(false, Ordering::Relaxed);
    // The next request gets its own reply, not the late one (99).
    let cents = prices
        .request(Quote {
            symbol: "INIT",
            quantity: 3,
        })
        .await?;
    println!("3 INIT cost {cents} cents");
    assert_eq!(cents, 297);

    bus.close().await;
    let stats = pricer.stats();
    println!(
        "pricer: {} handled, {} failed, {} late replies dropped",
        stats.handled, stats.errors, stats.late_replies
    );
    assert_eq!(stats.late_replies, 1);
    Ok(())
}
