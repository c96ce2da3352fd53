//! The quickstart's handlers in two processes, linked through NATS with `ringbus-nats`.
//!
//! The serve side is a bus with the quickstart's `#[subscriber("orders")]` handlers (`audit`,
//! and `bill`, which publishes a receipt to "receipts"); its link imports "orders" through
//! JetStream (at least once, acked after both handlers ran) and exports "receipts" through
//! NATS core (at most once). The publish side is a bus that exports "orders" and imports
//! "receipts", where a subscriber prints them. The handlers are the ones a single-process
//! bus would run: only the link knows about NATS.
//!
//! - `cargo run -p ringbus-nats --example nats_orders`: self-contained. Starts a `nats-server` on a free
//!   local port (`apt-get install nats-server`; without one it says so and exits successfully),
//!   runs both sides in this process as two buses with two links, and checks that every order
//!   was handled and every receipt came back.
//! - Two shells, against a server of your own (`nats-server -a 127.0.0.1 -js`):
//!   `cargo run -p ringbus-nats --example nats_orders -- serve [--url nats://127.0.0.1:4222] [--count N]`
//!   (runs until Ctrl-C, or until it handled N orders), and
//!   `cargo run -p ringbus-nats --example nats_orders -- publish [--url nats://127.0.0.1:4222] [--count N]`
//!   (publishes N orders, default 5, and waits up to 10 s for their receipts). Orders
//!   published while no `serve` runs wait in JetStream; a `serve` started later handles them.

use std::collections::BTreeSet;
use std::error::Error;
use std::ops::Range;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ringbus::{subscriber, Bus, State};
use ringbus_nats::testing::NatsServer;
use ringbus_nats::{Link, LinkCloseReport, Mode};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Topic `t` travels on subject `shop.t` (both sides must agree on the prefix).
const PREFIX: &str = "shop";
const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
const DEFAULT_COUNT: u64 = 5;
/// How long `publish` waits for its receipts.
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(10);
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

/// The ids of the orders the serve side handled, in order (a JetStream import delivers at
/// least once, so an id may appear twice). A watch channel, so `serve --count` can wait.
struct Handled(watch::Sender<Vec<u64>>);

/// Reads each order in place, as in the quickstart. Handlers of a JetStream import must be
/// idempotent: after a crash (or a handler that ended before it got to the order) the order is
/// delivered again.
#[subscriber("orders")]
async fn audit(order: &Order, handled: State<Handled>) {
    println!("[serve]   order {} for {} cents", order.id, order.cents);
    handled.0.send_modify(|ids| ids.push(order.id));
}

/// Bills each order; the receipt it returns is published to "receipts" (and the link
/// exports it).
#[subscriber("orders", publish("receipts"), name = "billing")]
async fn bill(order: &Order) -> Receipt {
    Receipt {
        order: order.id,
        cents: order.cents,
    }
}

/// The serve side: the handlers on a bus, "orders" imported and "receipts" exported.
struct Server {
    bus: Bus,
    link: Link,
    handled: watch::Receiver<Vec<u64>>,
}

async fn serve_side(url: &str) -> Result<Server> {
    let (handled, watcher) = watch::channel(Vec::new());
    let bus = Bus::builder().capacity(256).state(Handled(handled)).build();
    // Handlers first: a JetStream import acks a message no subscriber is there to handle.
    bus.register(audit)?;
    bus.register(bill)?;
    let link = Link::builder(url)
        .prefix(PREFIX)
        .name("nats_orders serve")
        .connect(&bus)
        .await?;
    link.export::<Receipt>("receipts", Mode::Core).await?;
    link.import::<Order>("orders", Mode::JetStream).await?;
    Ok(Server {
        bus,
        link,
        handled: watcher,
    })
}

/// The publish side: a bus that exports "orders" and imports "receipts".
struct Publisher {
    bus: Bus,
    link: Link,
    orders: Range<u64>,
    /// The ids of `orders` whose receipt came back.
    receipts: watch::Receiver<BTreeSet<u64>>,
}

async fn publish_side(url: &str, orders: Range<u64>) -> Result<Publisher> {
    let bus = Bus::builder().capacity(256).build();
    let (receipts, watcher) = watch::channel(BTreeSet::new());
    let ours = orders.clone();
    bus.subscribe("receipts", move |receipt: &Receipt| {
        println!(
            "[publish] receipt for order {}: {} cents",
            receipt.order, receipt.cents
        );
        let (order, mine) = (receipt.order, ours.contains(&receipt.order));
        receipts.send_if_modified(|got| mine && got.insert(order));
        async {}
    })?;
    let link = Link::builder(url)
        .prefix(PREFIX)
        .name("nats_orders publish")
        .connect(&bus)
        .await?;
    // Importing before publishing: a core import sees only what is sent after it subscribed.
    link.import::<Receipt>("receipts", Mode::Core).await?;
    link.export::<Order>("orders", Mode::JetStream).await?;
    Ok(Publisher {
        bus,
        link,
        orders,
        receipts: watcher,
    })
}

impl Publisher {
    /// Publishes the orders into the local bus (the link's export hands them to JetStream),
    /// then waits until every receipt came back or the timeout passed. Returns how many came
    /// back.
    async fn run(&mut self) -> Result<usize> {
        let expected = (self.orders.end - self.orders.start) as usize;
        let topic = self.bus.topic::<Order>("orders")?;
        for id in self.orders.clone() {
            topic
                .publish(Order {
                    id,
                    cents: 100 + id % 900,
                })
                .await?;
        }
        let all_back = self.receipts.wait_for(|got| got.len() >= expected);
        // A closed channel (the subscriber gone) counts as a timeout: what came back is below.
        let _ = tokio::time::timeout(RECEIPT_TIMEOUT, all_back).await;
        let back = self.receipts.borrow().len();
        Ok(back)
    }
}

/// Closes a link, then its bus, printing the link's close report.
async fn close(side: &str, link: Link, bus: Bus) -> bool {
    let report = link.close(CLOSE_TIMEOUT).await;
    print_report(side, &report);
    bus.close().await;
    report.complete
}

fn print_report(side: &str, report: &LinkCloseReport) {
    let s = &report.stats;
    let outcome = match report.cut_at {
        None => "complete".to_string(),
        Some(step) => format!(
            "CUT while {step} ({} imports unsettled, {} exports unacked)",
            report.unsettled_imports, report.unacked_exports
        ),
    };
    // The counters that moved (JetStream acks, nacks and dead letters stay 0 on core topics).
    let counters = [
        ("exported", s.exported),
        ("acked by the server", s.export_acked),
        ("not exported", s.export_errors),
        ("imported", s.imported),
        ("acked", s.acked),
        ("nacked", s.nacked),
        ("dead-lettered", s.dead_lettered),
        ("bad input", s.bad_input),
        ("slow consumer", s.slow_consumer),
    ];
    let moved: Vec<String> = counters
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    println!(
        "[{side}] link closed in {:.1} ms, {outcome}: {}",
        report.elapsed.as_secs_f64() * 1e3,
        moved.join(", ")
    );
}

/// `serve`: runs until Ctrl-C, or until `count` orders were handled.
async fn serve(url: &str, count: Option<u64>) -> Result<()> {
    let Server {
        bus,
        link,
        mut handled,
    } = serve_side(url).await?;
    println!(
        "[serve] connected to {url}: importing {} (JetStream), exporting {} (core); {}",
        link.subject("orders")?,
        link.subject("receipts")?,
        match count {
            Some(n) => format!("stopping after {n} orders or on Ctrl-C"),
            None => "Ctrl-C to stop".to_string(),
        }
    );
    let enough = async {
        match count {
            Some(n) => {
                let _ = handled.wait_for(|ids| ids.len() as u64 >= n).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        signal = tokio::signal::ctrl_c() => {
            if let Err(e) = signal {
                eprintln!("[serve] cannot listen for Ctrl-C ({e}); stopping");
            }
        }
        () = enough => {}
    }
    let n = handled.borrow().len();
    // Close order: the link first (stop importing, let the handlers finish and ack, flush the
    // receipts), then the bus.
    let complete = close("serve", link, bus).await;
    println!("[serve] handled {n} orders");
    if !complete {
        return Err("the link did not close within its timeout".into());
    }
    Ok(())
}

/// `publish`: publishes `count` orders and waits for their receipts.
async fn publish(url: &str, count: u64) -> Result<()> {
    // Ids unique to this run (milliseconds since the epoch), so that receipts for orders of
    // an earlier run, handled late by a `serve` catching up, are not taken for ours.
    let first = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |t| t.as_millis() as u64);
    let mut publisher = publish_side(url, first..first + count).await?;
    println!(
        "[publish] connected to {url}: exporting {} (JetStream), importing {} (core)",
        publisher.link.subject("orders")?,
        publisher.link.subject("receipts")?,
    );
    let started = Instant::now();
    let back = publisher.run().await?;
    let elapsed = started.elapsed();
    let Publisher { bus, link, .. } = publisher;
    close("publish", link, bus).await;
    println!(
        "[publish] {count} orders out, {back} receipts back in {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    );
    if back as u64 != count {
        return Err(format!(
            "{} receipts missing after {} s: is `nats_orders serve` running against the same \
             server? The orders wait in JetStream until it is",
            count - back as u64,
            RECEIPT_TIMEOUT.as_secs()
        )
        .into());
    }
    Ok(())
}

/// No arguments: both sides in this process, against a server started for the demo.
async fn demo(url: &str) -> Result<()> {
    let count = DEFAULT_COUNT;
    let Server {
        bus: serve_bus,
        link: serve_link,
        handled,
    } = serve_side(url).await?;
    let mut publisher = publish_side(url, 1..count + 1).await?;
    println!(
        "two buses, two links, one nats-server at {url}; {count} orders from the publish side:"
    );
    let started = Instant::now();
    let back = publisher.run().await?;
    let elapsed = started.elapsed();

    let Publisher { bus, link, .. } = publisher;
    let mut complete = close("publish", link, bus).await;
    complete &= close("serve", serve_link, serve_bus).await;

    let handled = handled.borrow().clone();
    let missing: Vec<u64> = (1..count + 1).filter(|id| !handled.contains(id)).collect();
    println!(
        "{count} orders crossed to the serve side and {back} receipts came back in {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    );
    if !missing.is_empty() {
        return Err(format!("orders never handled by the serve side: {missing:?}").into());
    }
    if back as u64 != count {
        return Err(format!(
            "{} of {count} receipts never came back",
            count - back as u64
        )
        .into());
    }
    if !complete {
        return Err("a link did not close within its timeout".into());
    }
    Ok(())
}

enum Command {
    Demo,
    Serve { url: String, count: Option<u64> },
    Publish { url: String, count: u64 },
}

const USAGE: &str =
    "usage: nats_orders [serve [--url URL] [--count N] | publish [--url URL] [--count N]]
  no arguments: a self-contained demo against a nats-server it starts itself
  serve:        handle orders from NATS until Ctrl-C (or N orders), sending receipts back
  publish:      send N orders (default 5) and wait for their receipts
  URL defaults to nats://127.0.0.1:4222";

fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let Some(command) = args.next() else {
        return Ok(Command::Demo);
    };
    let (mut url, mut count) = (DEFAULT_URL.to_string(), None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = value,
            "--count" => match value.parse::<u64>() {
                Ok(n) if n > 0 => count = Some(n),
                _ => return Err(format!("--count needs a positive number, not {value:?}")),
            },
            _ => return Err(format!("unknown option {flag:?}")),
        }
    }
    match command.as_str() {
        "serve" => Ok(Command::Serve { url, count }),
        "publish" => Ok(Command::Publish {
            url,
            count: count.unwrap_or(DEFAULT_COUNT),
        }),
        "-h" | "--help" | "help" => Err(String::new()),
        _ => Err(format!("unknown command {command:?}")),
    }
}

fn main() -> ExitCode {
    // The bus reports errors, panics, stalls and drain reports as `tracing` events: print them.
    tracing_subscriber::fmt().with_target(false).init();
    let command = match parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("error: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // The demo's server is a child process, started (a blocking wait) before the runtime and
    // killed when `server` drops, after the runtime is done.
    let server = match command {
        Command::Demo => match NatsServer::start() {
            Some(server) => Some(server),
            None => {
                println!(
                    "nats_orders: skipped, no nats-server binary found. Install it \
                     (`apt-get install nats-server`, or a release from \
                     https://github.com/nats-io/nats-server/releases) or point NATS_SERVER_BIN \
                     at it, then run this again."
                );
                return ExitCode::SUCCESS;
            }
        },
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Demo => {
                let url = server.as_ref().map(NatsServer::url).unwrap_or_default();
                demo(&url).await
            }
            Command::Serve { url, count } => serve(&url, count).await,
            Command::Publish { url, count } => publish(&url, count).await,
        }
    });
    drop(runtime);
    drop(server);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
