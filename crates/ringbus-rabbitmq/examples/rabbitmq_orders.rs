//! The quickstart's handlers in two services, linked through RabbitMQ with
//! `ringbus-rabbitmq`.
//!
//! The billing service is a bus with a `#[subscriber("orders", publish("receipts"))]`
//! handler; its link imports "orders" from the queue `shop.billing.orders` (at least once:
//! acknowledged after the handler ran) and exports "receipts" to the exchange `shop`. The shop
//! is a bus that exports "orders" and imports "receipts" (queue `shop.shop.receipts`), where a
//! subscriber collects them. The billing handler fails the first time it sees order 3 (a
//! flaky payment provider): its retry policy tries again after 200 ms, in process, as it
//! would without RabbitMQ; the link acknowledges the order once the handler succeeded (a
//! handler that gave up would have it dead-lettered). Only the links know about RabbitMQ.
//!
//! - `cargo run -p ringbus-rabbitmq --example rabbitmq_orders`: self-contained. Starts a
//!   `rabbitmq-server` on free local ports, isolated from any system instance
//!   (`apt-get install rabbitmq-server`; without one it says so and exits successfully,
//!   unless `REQUIRE_RABBITMQ=1`), runs both services in this process, and checks that every
//!   order was billed and every receipt came back.
//! - `cargo run -p ringbus-rabbitmq --example rabbitmq_orders -- --url amqp://guest:guest@127.0.0.1:5672/%2f`:
//!   the same against a server of your own (its exchanges `shop` and `shop-dead` and queues
//!   `shop.*` and `shop-dead.*` are declared, durable, and left there).

use std::collections::BTreeSet;
use std::error::Error;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use ringbus::{subscriber, Bus, State};
use ringbus_rabbitmq::testing::RabbitServer;
use ringbus_rabbitmq::{Link, QueueOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Topic `t` travels through the exchange `shop` with routing key `t` (both services must
/// agree on the prefix).
const PREFIX: &str = "shop";
const ORDERS: u64 = 5;
/// How long the shop waits for its receipts.
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long closing a link may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

// The messages cross processes, so they are (de)serializable: the link encodes them as JSON.
#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
    cents: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Receipt {
    order: u64,
    cents: u64,
}

/// The orders the payment provider has refused once (it refuses order 3 the first time).
#[derive(Default)]
struct Provider(Mutex<BTreeSet<u64>>);

#[derive(Debug)]
struct Declined(u64);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the payment provider declined order {} (try again)",
            self.0
        )
    }
}

impl Error for Declined {}

/// Bills each order; the receipt it returns is published to "receipts" (and the link exports
/// it). An `Err` is retried once, 200 ms later, by the handler's retry policy. Handlers of an
/// at-least-once import must still be idempotent: a crash before the ack delivers again.
#[subscriber(
    "orders",
    publish("receipts"),
    name = "billing",
    retry(attempts = 2, backoff = "200ms")
)]
async fn bill(order: &Order, provider: State<Provider>) -> Result<Receipt, Declined> {
    let first_try = provider
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(order.id);
    if order.id == 3 && first_try {
        return Err(Declined(order.id));
    }
    println!("[billing] order {} for {} cents", order.id, order.cents);
    Ok(Receipt {
        order: order.id,
        cents: order.cents,
    })
}

/// Both services against the server at `url`; `Ok(())` once every receipt came back.
async fn run(url: &str) -> Result<()> {
    // `QueueOptions` is non-exhaustive: set fields on its default.
    let mut queues = QueueOptions::default();
    queues.nack_delay = Duration::from_millis(200);

    // The billing service: the handler first, then the link (an import acks what no
    // subscriber handles).
    let billing = Bus::builder().state(Provider::default()).build();
    billing.register(bill)?;
    let billing_link = Link::builder(url)
        .prefix(PREFIX)
        .queues(queues.clone())
        .connect(&billing)
        .await?;
    // The queue is declared and bound here: orders exported before it exists are not kept.
    billing_link
        .import_shared::<Order>("orders", "billing")
        .await?;
    billing_link.export::<Receipt>("receipts").await?;

    // The shop: orders out, receipts in.
    let shop = Bus::new();
    let (tx, mut receipts) = mpsc::unbounded_channel();
    let _collect = shop.subscribe("receipts", move |r: &Receipt| {
        println!(
            "[shop]    receipt for order {} ({} cents)",
            r.order, r.cents
        );
        let _ = tx.send(r.order);
        async {}
    })?;
    queues.group = "shop".into();
    let shop_link = Link::builder(url)
        .prefix(PREFIX)
        .queues(queues)
        .connect(&shop)
        .await?;
    shop_link.import::<Receipt>("receipts").await?;
    shop_link.export::<Order>("orders").await?;
    println!(
        "orders travel through the exchange {} to the queue {}, receipts back to {}",
        shop_link.exchange(),
        billing_link.queue("orders", "billing")?,
        shop_link.queue("receipts", "shop")?,
    );

    for id in 1..=ORDERS {
        shop.publish(
            "orders",
            Order {
                id,
                cents: 100 * id,
            },
        )
        .await?;
    }
    let mut missing: BTreeSet<u64> = (1..=ORDERS).collect();
    let deadline = tokio::time::Instant::now() + RECEIPT_TIMEOUT;
    while !missing.is_empty() {
        match tokio::time::timeout_at(deadline, receipts.recv()).await {
            Ok(Some(order)) => {
                missing.remove(&order);
            }
            _ => {
                return Err(
                    format!("no receipt within {RECEIPT_TIMEOUT:?} for {missing:?}").into(),
                );
            }
        }
    }

    // Shut down in order: each link stops consuming, settles, flushes; then its bus.
    let shop_report = shop_link.close(CLOSE_TIMEOUT).await;
    let billing_report = billing_link.close(CLOSE_TIMEOUT).await;
    shop.close().await;
    billing.close().await;
    let retries: u64 = billing
        .stats()
        .topics
        .iter()
        .flat_map(|t| &t.subscribers)
        .filter(|s| s.name == "billing")
        .map(|s| s.retries)
        .sum();
    let stats = &billing_report.stats;
    println!(
        "billing link: imported {}, acked {}, given back {}, dead-lettered {}, exported {}; \
         billing handler retries: {retries}",
        stats.imported, stats.acked, stats.nacked, stats.dead_lettered, stats.exported
    );
    if !(shop_report.complete && billing_report.complete) {
        return Err(format!("a close was cut: {shop_report:?} {billing_report:?}").into());
    }
    if (retries, stats.nacked) != (1, 0) {
        return Err(format!(
            "order 3 should have been retried once in process, and never given back to \
             RabbitMQ: {retries} retries, {stats:?}"
        )
        .into());
    }
    println!("every order billed, every receipt back");
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let url = match (args.next().as_deref(), args.next()) {
        (Some("--url"), Some(url)) => Some(url),
        (None, _) => None,
        _ => {
            eprintln!("usage: rabbitmq_orders [--url amqp://user:password@host:port/vhost]");
            return ExitCode::FAILURE;
        }
    };
    // Without --url: a rabbitmq-server of our own, started (a blocking wait of a few seconds)
    // before the runtime and stopped when `server` drops. None: no binary (or no Erlang
    // `epmd`), and REQUIRE_RABBITMQ unset.
    let server = match &url {
        Some(_) => None,
        None => match RabbitServer::start() {
            Some(server) => Some(server),
            None => {
                println!(
                    "no rabbitmq-server to start (apt-get install rabbitmq-server, which \
                     brings Erlang's epmd, or set RABBITMQ_SERVER_BIN): nothing to run"
                );
                return ExitCode::SUCCESS;
            }
        },
    };
    let url = url.unwrap_or_else(|| server.as_ref().map(RabbitServer::url).unwrap_or_default());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&url)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rabbitmq_orders failed: {e}");
            ExitCode::FAILURE
        }
    }
}
