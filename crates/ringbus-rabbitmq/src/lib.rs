//! Links topics of a local [`ringbus`](https://docs.rs/ringbus) bus to RabbitMQ: a work in
//! progress. The engine is not here yet; what is here is the ground it will stand on.
//!
//! The crate will be the third link engine, beside `ringbus-nats` and `ringbus-redis`: a
//! `Link` to one RabbitMQ broker (AMQP 0-9-1, through the [`lapin`] client on tokio) that
//! exports chosen topics to the broker and imports others into the local bus, at least once,
//! with the codec, `Headers` and `Envelope` every ringbus link shares (`ringbus-link`), so a
//! message type crosses NATS, Redis and RabbitMQ alike. Its runtime will be built on the
//! engine interface the links share, which is being designed.
//!
//! What there is today:
//!
//! - `testing::RabbitServer` (feature `testing`): a real `rabbitmq-server` for tests, on
//!   free ports, isolated from any system instance, stopped (with its own `epmd`) on drop.
//!   Tests skip without the binary, unless `REQUIRE_RABBITMQ=1`.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), lapin::Error> {
//! use lapin::{Connection, ConnectionProperties};
//! use ringbus_rabbitmq::testing::RabbitServer;
//!
//! let Some(server) = RabbitServer::start() else { return Ok(()) }; // skipped: no server
//! let connection = Connection::connect(&server.url(), ConnectionProperties::default()).await?;
//! # let _ = connection;
//! # Ok(()) }
//! ```

/// The crate's README (shown on crates.io), its Rust examples compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(feature = "testing")]
pub mod testing;
