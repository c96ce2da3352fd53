//! Links topics of a local [`ringbus`] bus to RabbitMQ, so the same handlers run across
//! processes and machines, at least once.
//!
//! The bus stays the router and the in-process transport; a [`Link`] is one RabbitMQ
//! connection (AMQP 0-9-1, through [`lapin`] on tokio) that exports chosen topics (each
//! local message is published to the topic exchange `<prefix>` with the topic as routing
//! key), imports others (consumed from a durable queue bound to that exchange and
//! published into the local bus, where the local subscribers handle them like any other), or
//! links a topic both ways.
//!
//! | | RabbitMQ |
//! |---|---|
//! | delivery | at least once: handlers must be idempotent |
//! | export | what is queued for the export is published in parts of at most `publish_window` (256), each part's publisher confirms awaited together (one round trip per part), in the topic's order; published again after a lost connection for up to `publish_retry_for`; a message routed to no queue is dropped by RabbitMQ |
//! | import | the durable queue `<prefix>.<group>.<topic>` (one group: competing consumers; each group: every message); acknowledged once every local subscriber handled the message; a handler that gives up on it (after its own retries) has it dead-lettered at once; one a subscriber never handled is given back after `nack_delay`; after `max_deliver` deliveries it is dead-lettered (counted by the import: a classic queue does not count them) |
//! | dead letters | a copy with the reason (`Ringbus-Dead-Reason`) published to the exchange `<prefix>-dead`, kept by the queue `<prefix>-dead.<topic>` |
//! | dedup | an import drops a second copy of a message id it handed to the bus within its `dedup_window` (in this process) |
//! | echo | the origin header filters out the link's own exports |
//!
//! The codec, [`Headers`] and [`Envelope`] are those of every ringbus link (they live in
//! `ringbus-link`), so a message type crosses NATS, Redis and RabbitMQ alike.
//!
//! ```no_run
//! use ringbus::Bus;
//! use ringbus_rabbitmq::Link;
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug)]
//! struct Order { id: u64, cents: u64 }
//! #[derive(serde::Serialize, serde::Deserialize, Debug)]
//! struct Receipt { order: u64 }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = Bus::new();
//! let _audit = bus.subscribe("orders", |o: &Order| {
//!     let id = o.id;
//!     async move { println!("order {id}") }
//! })?;
//! let link = Link::builder("amqp://127.0.0.1:5672/%2f").prefix("shop").connect(&bus).await?;
//! link.import::<Order>("orders").await?;    // orders from other processes
//! link.export::<Receipt>("receipts").await?; // receipts to them
//! // ... run ...
//! let report = link.close(Duration::from_secs(5)).await; // settle, flush
//! assert!(report.complete);
//! bus.close().await;
//! # Ok(()) }
//! ```
//!
//! - [`Link`], [`LinkBuilder`]: the link and its settings.
//! - [`QueueOptions`]: groups, redelivery, dead letters, dedup.
//! - [`LinkStats`], [`LinkCloseReport`], [`ConnectionState`]: what it did.
//! - `testing::RabbitServer` (feature `testing`): a real `rabbitmq-server` for tests, on
//!   free ports, isolated from any system instance. Tests skip without the binary, unless
//!   `REQUIRE_RABBITMQ=1`.
//!
//! Bad input from the queue (a body that does not decode, missing headers, an oversized
//! message) is logged without its body, counted ([`LinkStats::bad_input`]) and
//! dead-lettered. It never panics and never stalls the link.

/// The crate's README (shown on crates.io), its Rust examples compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

mod conn;
mod error;
mod export;
mod import;
mod link;
mod options;
mod shared;
mod stats;
#[cfg(feature = "testing")]
pub mod testing;
mod wire;

pub use error::LinkError;
pub use link::{Link, LinkBuilder};
pub use options::QueueOptions;
pub use ringbus_link::{Codec, CodecError, Envelope, HeaderError, Headers, Json, Meta};
pub use stats::{ConnectionState, LinkCloseReport, LinkStats};
