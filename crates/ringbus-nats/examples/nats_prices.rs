//! Request/reply across processes: a pricing service's `#[subscriber("prices", reply)]`
//! replier, unchanged from one process, answers the requests of another bus through NATS.
//!
//! The pricing bus registers the replier and its link answers the NATS requests of "prices"
//! (`import_requests_shared`: with several instances, each request goes to one). The shop
//! bus's link sends its "prices" requests out (`export_requests`); the shop asks with
//! `topic.request_with(&ctx, quote)` as it would in process, and gets the reply, the
//! replier's error, a timeout (whose late reply is dropped and counted), or "unanswered"
//! once the pricing side is gone.
//!
//! `cargo run -p ringbus-nats --example nats_prices` runs both buses in this process,
//! through a `nats-server` it starts on a free local port if one is installed, else through
//! the in-memory stand-in (`ringbus_nats::testing::MemoryNats`); `-- --memory` picks the
//! stand-in.

use std::error::Error;
use std::time::Duration;

use ringbus::{subscriber, Bus, Context, Request, RequestError};
use ringbus_nats::testing::{MemoryNats, NatsServer};
use ringbus_nats::Link;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Quote {
    symbol: String,
    quantity: u32,
}

/// Answers a quote with its price in cents; "SLOW" takes 300 ms.
#[subscriber("prices", reply)]
async fn price(quote: &Quote) -> Result<u64, String> {
    let cents = match quote.symbol.as_str() {
        "ACME" => 1_250,
        "SLOW" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            10
        }
        other => return Err(format!("unknown symbol {other}")),
    };
    Ok(cents * u64::from(quote.quantity))
}

fn quote(symbol: &str, quantity: u32) -> Quote {
    Quote {
        symbol: symbol.to_string(),
        quantity,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // A real server if there is one (and --memory was not asked for), else the stand-in.
    let memory_only = std::env::args().any(|a| a == "--memory");
    let real = if memory_only {
        None
    } else {
        NatsServer::start()
    };
    let memory;
    let url = match &real {
        Some(server) => {
            println!("through a nats-server at {}", server.url());
            server.url()
        }
        None => {
            memory = MemoryNats::start()?;
            println!("through the in-memory stand-in at {}", memory.url());
            memory.url()
        }
    };

    let pricing = Bus::new();
    pricing.register(price)?;
    let pricing_link = Link::builder(&url).prefix("shop").connect(&pricing).await?;
    pricing_link
        .import_requests_shared::<Quote, u64>("prices", "pricing")
        .await?;

    let shop = Bus::new();
    let shop_link = Link::builder(&url).prefix("shop").connect(&shop).await?;
    shop_link.export_requests::<Quote, u64>("prices").await?;
    let prices = shop.topic::<Request<Quote, u64>>("prices")?;

    let ctx = Context::new().with_timeout(Duration::from_secs(2));
    let cents = prices.request_with(&ctx, quote("ACME", 2)).await?;
    println!("2 ACME: {cents} cents");
    assert_eq!(cents, 2_500);

    match prices.request_with(&ctx, quote("XYZ", 1)).await {
        Err(RequestError::Failed(why)) => println!("XYZ: failed there: {why}"),
        other => return Err(format!("expected Failed, got {other:?}").into()),
    }

    let short = Context::new().with_timeout(Duration::from_millis(100));
    match prices.request_with(&short, quote("SLOW", 1)).await {
        Err(RequestError::Timeout(None)) => println!("SLOW: no answer within 100 ms"),
        other => return Err(format!("expected Timeout, got {other:?}").into()),
    }

    // The pricing side goes away: nobody answers, and the requester is told at once.
    let report = pricing_link.close(Duration::from_secs(5)).await;
    assert!(report.complete, "{report:?}");
    pricing.close().await;
    match prices.request_with(&ctx, quote("ACME", 1)).await {
        Err(RequestError::Unanswered) => println!("ACME, pricing gone: unanswered"),
        other => return Err(format!("expected Unanswered, got {other:?}").into()),
    }

    let report = shop_link.close(Duration::from_secs(5)).await;
    assert!(report.complete, "{report:?}");
    shop.close().await;
    let stats = report.stats;
    println!(
        "shop link: {} requests sent, {} timed out, {} with no responders, {} late replies",
        stats.requests_sent, stats.request_timeouts, stats.no_responders, stats.late_replies
    );
    Ok(())
}
