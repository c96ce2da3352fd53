//! ringbus: an async, tokio-native, in-process message bus.
//!
//! Topics carry one message type each, one lock-free ring per topic; every subscriber is a
//! tokio task that runs its async handler on each message, borrowed in place from the ring
//! (no `Clone` bound, no copy). `publish` waits for room (backpressure, never loss), is
//! cancellable through a [`Context`] or by dropping it, and gives the message back in every
//! error; [`Bus::close`] refuses new messages and returns once every queued one was handled.
//!
//! **The bus reports through [`tracing`](https://docs.rs/tracing) events and prints
//! nothing itself**: a handler's error (`warn`) or panic (`error`), a detached stalled
//! subscriber, a publish to a topic with no subscriber (once per topic, at `warn`), what a
//! bounded close left unhandled. Install a subscriber (`tracing_subscriber::fmt::init()`) to
//! see them; the counts are in [`Bus::stats`]. A handler that panics is reported twice: Rust's
//! panic message comes first, printed by the application's panic hook (with its backtrace if
//! `RUST_BACKTRACE` is set) as for any panic, then the bus's `error` event.
//!
//! # Observability
//!
//! - **Spans.** Every handler call runs inside a `ringbus.handle` span at `DEBUG`, fields
//!   `topic`, `subscriber`, `position` (the message's place in its topic; a batch handler's
//!   span adds `messages`), with `error` or `panic` recorded on it when the call fails. The
//!   handler's own events are inside it. With nobody listening at `DEBUG`, the bus makes no
//!   span, and a subscriber task looks at tracing's level only where it would wait for a
//!   message: a delivery pays next to nothing for span code nobody wants. A publish
//!   whose [`Context`] carries a parent span ([`Context::with_parent`]) makes its handler
//!   spans children of it (how `ringbus-nats` continues a remote trace).
//! - **Waits.** A publish that waits for room records a `DEBUG` event with the time it waited
//!   (`waited`); a publish cancelled through its [`Context`] records one with the time it had
//!   waited.
//! - **Metrics** (feature `metrics`, off by default): counters, a lag gauge and a
//!   handler-duration histogram through the [`metrics`](https://docs.rs/metrics) facade, named
//!   after OpenTelemetry's messaging semantic conventions where one exists
//!   (`messaging.client.sent.messages`, `messaging.client.consumed.messages`,
//!   `messaging.process.duration`) and `ringbus.*` otherwise (`ringbus.topic.unrouted`,
//!   `ringbus.topic.full`, `ringbus.topic.cancelled`, `ringbus.subscriber.errors`,
//!   `ringbus.subscriber.panics`, `ringbus.subscriber.detached`, the gauge
//!   `ringbus.subscriber.lag`), labelled `messaging.system` (`ringbus`),
//!   `messaging.destination.name` (the topic), `messaging.destination.subscription.name` (the
//!   subscriber) and, on the three semantic-convention ones, `messaging.operation.name`. A
//!   topic resolves its handles when it is made, a subscriber when it subscribes, from the
//!   recorder installed then: install the exporter first.
//!
//! ```
//! use ringbus::{Bus, Context, PublishError};
//! use std::time::Duration;
//!
//! #[derive(Debug)]
//! struct Order { id: u64, cents: u64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ringbus::Error> {
//! let bus = Bus::builder().capacity(1024).build();
//! let _audit = bus.subscribe("orders", |order: &Order| {
//!     let (id, cents) = (order.id, order.cents);
//!     async move { println!("order {id}: {cents} cents") }
//! })?;
//!
//! bus.publish("orders", Order { id: 1, cents: 500 }).await?;
//! let ctx = Context::new().with_timeout(Duration::from_millis(50));
//! match bus.publish_with(&ctx, "orders", Order { id: 2, cents: 9 }).await {
//!     Err(PublishError::Cancelled(order)) => println!("nobody got {order:?}"),
//!     other => other?,
//! }
//! let orders = bus.topic::<Order>("orders")?; // resolved once, no lookup per publish
//! orders.publish(Order { id: 3, cents: 1 }).await?;
//! bus.close().await; // every order above is handled before this returns
//! # Ok(()) }
//! ```
//!
//! # The types
//!
//! - [`Bus`] (and [`BusBuilder`]): topics by name; `publish`, `publish_with`, `try_publish`,
//!   `publish_batch`, `subscribe`, `subscribe_batch`, `register`, `stream`, `close`,
//!   `wait_idle`, `stats`.
//! - [`Topic`]: a resolved, typed topic handle; its [`publish_tracked`](Topic::publish_tracked)
//!   returns a [`Delivery`], a receipt whose `wait` says once every subscriber has handled the
//!   message, and how many failed on it ([`Delivered`]): to acknowledge a message upstream only
//!   once it was handled, as a bridge does.
//! - [`App`]: runs the bus as a service (handlers, hooks, Ctrl-C / SIGTERM, bounded drain).
//! - [`subscriber`](macro@subscriber): the attribute that turns an `async fn(&Msg)` into a handler;
//!   [`State`]: shared values for handlers.
//! - [`Context`]: a deadline and/or cancellation for a publish.
//! - [`Handler`], [`BatchHandler`], [`Subscriber`]: what a subscriber runs; closures and
//!   `#[subscriber]` functions implement them. [`SubscribeOptions`]: name, capacity, stall
//!   timeout, retries.
//! - [`RetryPolicy`]: retries with exponential backoff and jitter; [`DeadLetter`]: what a
//!   subscriber publishes to its dead-letter topic when it gives up on a message.
//! - [`Request`]: the message type of a request topic; [`Topic::request`] /
//!   [`Topic::request_with`] ask, [`Bus::reply`] (or `#[subscriber("topic", reply)]`, a
//!   [`Replier`]) answers; [`RequestError`] says why there was no reply. A [`Responder`]
//!   ([`Request::responder`]) answers later, from another task: for forwarders such as
//!   `ringbus-nats`, which answers requests from other processes.
//! - [`Subscription`]: a running subscriber; `unsubscribe().await` stops it.
//! - [`Stream`] (and [`StreamRef`]): a pull subscriber, `while let Some(msg) =
//!   stream.next().await`, for code written against `tokio::sync::broadcast`.
//! - [`testing`]: [`Recorder`](testing::Recorder) and [`Bus::wait_idle`], for a service's
//!   tests.
//! - [`PublishError`] (gives the message back; a batch's, as [`Unpublished`]),
//!   [`RequestError`] (gives it back where the request was not sent), [`Error`],
//!   [`TypeMismatch`], [`RingTooLarge`].
//! - [`BusStats`], [`TopicStats`], [`SubscriberStats`], [`CloseReport`].
//! - [`ring`]: the lock-free ring under every topic, usable on its own.
//!
//! The eleven guarantees are listed on [`Bus`].

// docs.rs labels the items behind a feature (package.metadata.docs.rs sets `docsrs`).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "app")]
mod app;
mod bus;
mod context;
mod coop;
mod delivery;
mod error;
mod handler;
mod idle;
mod lock;
mod map;
mod observe;
mod options;
mod parent;
mod pattern;
mod progress;
mod reply;
mod retry;
mod shared;
mod state;
mod stats;
mod stream;
mod subscriber;
mod sweep;
mod sync;
pub mod testing;
mod time;
mod topic;

#[cfg(feature = "app")]
#[cfg_attr(docsrs, doc(cfg(feature = "app")))]
pub use app::{App, Health, HealthStatus};
pub use bus::{Bus, BusBuilder, Subscriber};
pub use context::Context;
pub use delivery::{Delivered, Delivery};
pub use error::{
    Error, PatternMismatch, PublishError, RemoveError, RequestError, RingTooLarge, TypeMismatch,
    Unpublished,
};
pub use handler::{
    with_state, Batch, BatchHandler, BatchHandlerFn, Handler, HandlerError, HandlerFn,
    HandlerOutput, StateHandlerFn, TopicBatchHandler, TopicBatchHandlerFn, TopicHandler,
    TopicHandlerFn, WithState,
};
pub use options::{DeadLetter, RetryPolicy, SubscribeOptions};
pub use pattern::Pattern;
pub use reply::{Replier, ReplyFn, ReplyOutput, Request, Responder};
pub use ringbus_core as ring;
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use ringbus_macros::subscriber;
pub use state::State;
pub use stats::{BusStats, CloseReport, SubscriberStats, TopicStats, Unhandled};
pub use stream::{Stream, StreamRef};
pub use subscriber::Subscription;
pub use tokio_util::sync::CancellationToken;
pub use topic::Topic;

/// The topic registry, exposed for the suite's registry benchmark only; not a public API.
#[doc(hidden)]
pub mod __bench {
    /// The lock-free-lookup map the bus keeps its topics in.
    #[derive(Debug)]
    pub struct TopicMap<V>(crate::map::TopicMap<V>);

    impl<V> TopicMap<V> {
        /// A map with `shards` insert locks.
        pub fn new(shards: usize) -> Self {
            Self(crate::map::TopicMap::new(shards, false))
        }

        /// A map whose entries can be removed: each lookup reads its shard.
        pub fn new_removable(shards: usize) -> Self {
            Self(crate::map::TopicMap::new(shards, true))
        }

        /// Looks `name` up and calls `f` with its value, which a removable map keeps alive
        /// for the call.
        pub fn with<R>(&self, name: &str, f: impl FnOnce(&V) -> R) -> Option<R> {
            self.0.get(name).map(|found| f(found.get()))
        }

        /// Inserts `make()` under `name` if absent.
        pub fn insert(&self, name: &str, make: impl FnOnce() -> V) {
            self.0.get_or_insert_with(name, make);
        }

        /// Looks `name` up without locking (`None` on a removable map: use `with`).
        pub fn get(&self, name: &str) -> Option<&V> {
            self.0.get(name).and_then(|found| found.lasting().ok())
        }

        /// Looks `name` up, inserting `make()` if absent.
        pub fn get_or_insert_with(&self, name: &str, make: impl FnOnce() -> V) -> &V {
            let found = self.0.get_or_insert_with(name, make);
            match found.lasting() {
                Ok(value) => value,
                Err(_) => panic!("a removable map's values are reached through `with`"),
            }
        }
    }
}

/// Used by the code `#[subscriber]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use std::future::Future;

    pub use crate::handler::IgnoreTopic;
    use crate::{Bus, Error, HandlerError, State, Topic};

    /// Whether a `#[subscriber("...")]` topic is a pattern (it has a `*` or `>` token).
    pub fn is_pattern(topic: &str) -> bool {
        crate::pattern::is_pattern(topic)
    }

    /// Publishes a handler's return value to its `publish("...")` topic.
    pub async fn forward<R: Send + Sync + 'static>(
        topic: &Topic<R>,
        value: R,
    ) -> Result<(), HandlerError> {
        topic.publish(value).await.map_err(|e| {
            HandlerError::new(format!(
                "could not publish the result to \"{}\": {e}",
                topic.name()
            ))
        })
    }

    /// `options` with the dead-letter topic `topic` (of `DeadLetter<T>`), resolved on `bus`:
    /// `dead_letter("topic")` in `#[subscriber]`. The dead letter carries a copy of the
    /// message, hence `T: Clone`.
    pub fn dead_letter<T: Clone + Send + Sync + 'static>(
        bus: &Bus,
        options: crate::SubscribeOptions,
        topic: &str,
    ) -> Result<crate::SubscribeOptions, Error> {
        Ok(options.dead_letter(&bus.topic::<crate::DeadLetter<T>>(topic)?))
    }

    /// The `State<S>` a handler asks for, or the error that says how to register it.
    pub fn state<S: Send + Sync + 'static>(bus: &Bus, subscriber: &str) -> Result<State<S>, Error> {
        bus.state::<S>().ok_or_else(|| Error::MissingState {
            subscriber: subscriber.to_string(),
            state: std::any::type_name::<S>(),
        })
    }
}

/// The crate's README (shown on crates.io), its Rust examples compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
