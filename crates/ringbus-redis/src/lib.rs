//! Links topics of a local [`ringbus`] bus to Redis Streams, so the same handlers run across
//! processes and machines, at least once.
//!
//! The bus stays the router and the in-process transport; a [`Link`] is one Redis server
//! (through the `redis` crate) that exports chosen topics (each local message is added to
//! the topic's stream, `XADD <prefix>:<topic>`), imports others (read through a consumer
//! group with `XREADGROUP` and published into the local bus, where the local subscribers
//! handle them like any other), or links a topic both ways.
//!
//! | | Redis Streams |
//! |---|---|
//! | delivery | at least once: handlers must be idempotent |
//! | export | what is queued for the export goes as one pipeline of `XADD`s (one round trip per batch, not per message), in the topic's order; a message that cannot be sent costs only itself; re-sent after a lost connection for up to `publish_retry_for`; streams trimmed to about `max_len` entries |
//! | import | a consumer group; acknowledged (`XACK`) once every local subscriber handled the message; a handler that gives up on it (after its own retries) has it dead-lettered at once; one a subscriber never handled is given back for `nack_delay`; a dead consumer's messages are claimed (`XAUTOCLAIM`) after `claim_idle`; after `max_deliver` deliveries the message goes to the dead-letter stream |
//! | dedup | an import drops a second entry with a message id it handed to the bus within its `dedup_window` (in this process) |
//! | echo | the origin field filters out the link's own exports |
//!
//! The codec, [`Headers`] and [`Envelope`] are those of every ringbus link (they live in
//! `ringbus-link`; `ringbus_nats::Envelope` is the same type), so a message type crosses NATS
//! and Redis alike.
//!
//! ```no_run
//! use ringbus::Bus;
//! use ringbus_redis::Link;
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
//! let link = Link::builder("redis://127.0.0.1:6379").prefix("shop").connect(&bus).await?;
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
//! - [`StreamOptions`]: consumer groups, redelivery, dead letters, trimming, dedup.
//! - [`LinkStats`], [`LinkCloseReport`], [`ConnectionState`]: what it did.
//! - `testing::RedisServer` (feature `testing`): a real `redis-server` for tests.
//!
//! Bad input from the stream (a body that does not decode, missing fields, an oversized
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
pub use options::StreamOptions;
pub use ringbus_link::{Codec, CodecError, Envelope, HeaderError, Headers, Json, Meta};
pub use stats::{ConnectionState, LinkCloseReport, LinkStats};
