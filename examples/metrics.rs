//! The bus's metrics served to Prometheus: an exporter listening on 127.0.0.1, a few orders
//! through the bus (one handler fails on one of them), then one scrape of the exporter,
//! printing the bus's lines.
//!
//! ```sh
//! cargo run --release --features metrics --example metrics
//! ```
//!
//! The exporter is `metrics-exporter-prometheus` (its HTTP listener only); any exporter of the
//! `metrics` facade works the same way. Install it before the bus makes its topics: a topic and
//! a subscriber resolve their metric handles when they are made.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};

use metrics_exporter_prometheus::PrometheusBuilder;
use ringbus::{Bus, SubscribeOptions};

#[derive(Debug)]
struct Order {
    id: u64,
    cents: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A free port on the loopback interface, then the exporter on it (it binds before
    // `install` returns, so the scrape below finds it listening).
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    PrometheusBuilder::new()
        .with_http_listener(address)
        .install()?;

    let bus = Bus::new();
    let _billing = bus.subscribe_with(
        "orders",
        SubscribeOptions::new().name("billing"),
        |order: &Order| {
            let (id, cents) = (order.id, order.cents);
            async move {
                if cents == 0 {
                    return Err(format!("order {id}: nothing to bill"));
                }
                Ok(())
            }
        },
    )?;
    for id in 1..=5 {
        let cents = if id == 3 { 0 } else { 100 * id };
        bus.publish("orders", Order { id, cents }).await?;
    }
    bus.publish("audit", "nobody listens here").await?;
    bus.close().await; // every order handled: the counters are final

    let page = tokio::task::spawn_blocking(move || scrape(address)).await??;
    println!("scraped http://{address}/metrics:");
    for line in page.lines().filter(|l| {
        l.starts_with("messaging_") || l.starts_with("ringbus_") || l.starts_with("# TYPE")
    }) {
        println!("{line}");
    }
    let published = page
        .lines()
        .any(|l| l.starts_with("messaging_client_sent_messages") && l.contains("orders"));
    if !published {
        return Err("the scrape did not show the published orders".into());
    }
    Ok(())
}

/// One `GET /metrics`, its body as text.
fn scrape(address: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(address)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(response.clone(), |(_, body)| body.to_string()))
}
