//! Links topics of a local [`ringbus`] bus to NATS subjects, so the same handlers run across
//! processes and machines.
//!
//! The bus stays the router and the in-process transport; a [`Link`] is one NATS
//! connection (through the NATS team's `async-nats` client) that exports chosen topics
//! (local messages go out), imports others (messages from NATS are published into the local
//! bus, where the local subscribers handle them like any other), or links a topic both ways.
//!
//! Each topic picks its [`Mode`] when it is linked:
//!
//! | | [`Mode::Core`] | [`Mode::JetStream`] |
//! |---|---|---|
//! | delivery | at most once | at least once (handlers must be idempotent) |
//! | export | handed to the client, no ack | server ack awaited in bounded windows; re-sent with the same id until acked (server dedup) |
//! | import | subscription; the client buffers up to `import_buffer` messages, beyond which it drops and reports a slow consumer (logged, counted) | durable pull consumer; acked once every local subscriber handled the message; a handler that gives up on it (after its own retries) has it dead-lettered at once; one a subscriber never handled is nacked with a delay, and after `max_deliver` deliveries goes to the dead-letter subject |
//! | echo | the connection never receives its own messages (no-echo) | the origin header filters the link's own exports |
//!
//! When several instances of a service import one topic, each import is fan-out (every
//! instance sees every message: [`Link::import`]) or shared (each message goes to one instance
//! of a group: [`Link::import_shared`], a NATS queue group on core, one durable consumer on
//! JetStream); see [`Sharing`].
//!
//! Topic `t` travels on `<prefix>.t`. The body is encoded by a [`Codec`] ([`Json`] by
//! default); the topic, the message id and user [`Headers`] travel as NATS headers. An
//! [`Envelope`] carries an id and headers with its body, and records that it was imported,
//! which a topic linked both ways needs.
//!
//! ```no_run
//! use ringbus::Bus;
//! use ringbus_nats::{Link, Mode};
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
//! let link = Link::builder("nats://127.0.0.1:4222").prefix("shop").connect(&bus).await?;
//! link.import::<Order>("orders", Mode::JetStream).await?;   // orders from other processes
//! link.export::<Receipt>("receipts", Mode::Core).await?;    // receipts to them
//! // ... run ...
//! let report = link.close(Duration::from_secs(5)).await;     // settle, flush, drain
//! assert!(report.complete);
//! bus.close().await;
//! # Ok(()) }
//! ```
//!
//! **Request/reply** crosses too: [`Link::export_requests`] sends the requests of a local
//! request topic (`ringbus::Request<T, R>`) out as NATS requests, and
//! [`Link::import_requests`] (or [`import_requests_shared`](Link::import_requests_shared))
//! answers them with the local `#[subscriber("topic", reply)]` repliers of another process.
//! The requester's deadline crosses with the request; timeouts, no responders and late
//! replies map to `ringbus::RequestError` and are counted in [`LinkStats`].
//!
//! **Tests without a `nats-server`** (feature `testing`, for your `[dev-dependencies]`):
//! `testing::MemoryNats` is a NATS core server inside the test process that links connect to
//! as to a real one (core mode, request/reply, queue groups; not JetStream). The `testing`
//! module shows how to test a service and its link with it, and starts real `nats-server`s
//! too (`NatsServer`, `NatsCluster`).
//!
//! Bad input from the wire (a body that does not decode, missing headers, an oversized
//! message) is logged without its body and counted ([`LinkStats::bad_input`]); on JetStream
//! it is dead-lettered. It never panics and never stalls the link.

/// The crate's README (shown on crates.io), its Rust examples compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

mod codec;
mod error;
mod export;
mod import;
mod link;
mod options;
mod otel;
mod request;
mod shared;
mod stats;
mod subject;
mod task;
#[cfg(feature = "testing")]
pub mod testing;
mod wire;

pub use codec::{Codec, CodecError, Envelope, HeaderError, Headers, Json, Meta};
pub use error::LinkError;
pub use link::{Link, LinkBuilder};
pub use options::{Auth, JetStreamOptions, Mode, Sharing, Tls};
pub use stats::{ConnectionState, LinkCloseReport, LinkStats};
