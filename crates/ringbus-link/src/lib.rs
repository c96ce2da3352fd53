//! What every link engine of [`ringbus`](https://docs.rs/ringbus) shares: how a message is
//! encoded ([`Codec`], [`Json`] by default), its user [`Headers`], the [`Envelope`] that
//! carries an id and headers with a body, and the names and ids the engines write.
//!
//! `ringbus-nats`, `ringbus-redis` and `ringbus-rabbitmq` re-export these items, so
//! `ringbus_nats::Envelope` and `ringbus_rabbitmq::Envelope` are one type: a codec written once
//! serves every engine, and a topic can move from one engine to another without touching its
//! message types.
//!
//! - [`Codec`]: a message to a body plus [`Meta`] (id and headers), and back.
//! - [`Json`]: the default codec (`serde_json`).
//! - [`Headers`], [`HeaderError`]: user headers, checked when inserted.
//! - [`Envelope`]: a body with an id and headers, which records that it was imported.
//! - [`names`], [`ids`], [`wire`]: for engines: the reserved names they write, message ids,
//!   and the checks every wire format makes around its framing.
//! - `LinkError`, `CloseReport`, `ConnectionState` (feature `engine`): the error of every
//!   engine's link, what its `close` did, and the state of its connection (kept by an
//!   engine in a `State`).
//! - `engine` (feature `engine`): for engines: what their runtimes share (claims on linked
//!   topics, the import task, the first steps of a close), `import`: the at-least-once
//!   import written once, over an engine's `Inbound`, and `server`: what their test-server
//!   harnesses share.
//! - `testing` (feature `testing`): what the engines' own tests share.
//!
//! ```
//! use ringbus_link::{Codec, Envelope, Json, Meta};
//!
//! let order = Envelope::new(42u64).with_id("order-42").with_header("Tenant", "acme")?;
//! let (mut body, mut meta) = (Vec::new(), Meta::default());
//! Json.encode(&order, &mut body, &mut meta)?;
//! assert_eq!(body, b"42");
//! assert_eq!(meta.id.as_deref(), Some("order-42"));
//!
//! let back: Envelope<u64> = Json.decode(&body, meta)?;
//! assert_eq!((back.id(), *back.body()), ("order-42", 42));
//! assert!(back.is_imported()); // what a link decodes is marked as imported
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod codec;
#[cfg(feature = "engine")]
pub mod engine;
#[cfg(feature = "engine")]
mod error;
pub mod ids;
#[cfg(feature = "engine")]
pub mod import;
pub mod names;
#[cfg(feature = "engine")]
pub mod otel;
#[cfg(feature = "engine")]
mod report;
#[cfg(feature = "engine")]
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;
pub mod wire;

pub use codec::{Codec, CodecError, Envelope, HeaderError, Headers, Json, Meta};
#[cfg(feature = "engine")]
pub use error::LinkError;
#[cfg(feature = "engine")]
pub use report::{CloseReport, ConnectionState, State};

/// The longest wait a link takes as given: 30 years. A longer one in a link's options, such
/// as `Duration::MAX` for "no limit", counts as this. Engines turn waits into instants and
/// into their servers' milliseconds or nanoseconds, where a longer one would overflow.
pub const LONGEST_WAIT: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 30);
