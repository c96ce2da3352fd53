//! What a subscriber runs: the [`Handler`] and [`BatchHandler`] traits, implemented by
//! `#[subscriber]` functions and by closures.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// Why a handler failed, as logged and counted by the bus.
pub struct HandlerError(Box<dyn fmt::Display + Send + Sync>);

impl HandlerError {
    /// Wraps anything printable.
    pub fn new(error: impl fmt::Display + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HandlerError({})", self.0)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a handler may return: `()` (always fine) or `Result<(), E>` with a printable error.
pub trait HandlerOutput: Send {
    /// `Err` makes the bus log a `tracing` warning and count an error for the subscriber.
    fn into_result(self) -> Result<(), HandlerError>;
}

impl HandlerOutput for () {
    #[inline]
    fn into_result(self) -> Result<(), HandlerError> {
        Ok(())
    }
}

impl<E: fmt::Display + Send + Sync + 'static> HandlerOutput for Result<(), E> {
    #[inline]
    fn into_result(self) -> Result<(), HandlerError> {
        self.map_err(HandlerError::new)
    }
}

/// Handles one message at a time, borrowed in place from the topic's ring.
///
/// Implemented by `#[subscriber]` functions (whose futures may borrow the message) and by
/// closures `Fn(&T) -> impl Future` (whose futures cannot borrow it: copy what you need out
/// of the message before the `async` block).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
/// let bus = ringbus::Bus::new();
/// let sub = bus.subscribe("ticks", |tick: &u64| {
///     let tick = *tick;
///     async move { println!("tick {tick}") }
/// })?;
/// bus.publish("ticks", 1u64).await?;
/// sub.unsubscribe().await;
/// # Ok(()) }
/// ```
pub trait Handler<T>: Send + Sync + 'static {
    /// Handles `msg`. An `Err` or a panic (in `call` itself or in the future it returns) is
    /// logged and counted; the subscriber goes on with the next message.
    fn call<'a>(&'a self, msg: &'a T)
        -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

impl<T, F, Fut> Handler<T> for F
where
    T: Sync + 'static,
    F: Fn(&T) -> Fut + Send + Sync + 'static,
    Fut: Future + Send,
    Fut::Output: HandlerOutput,
{
    // Not an `async fn`: that would need `Fut: 'a`, which closures cannot promise.
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        // The closure runs inside the future, so a panic in it is caught like one in the
        // future.
        async move { self(msg).await.into_result() }
    }
}

/// Everything a batch subscriber was given at once: at most two slices, oldest first, borrowed
/// in place from the ring. The second is non-empty only when the range wraps.
#[derive(Clone, Copy)]
pub struct Batch<'a, T> {
    pub(crate) first: &'a [T],
    pub(crate) second: &'a [T],
}

impl<'a, T> Batch<'a, T> {
    /// The two slices.
    pub fn as_slices(&self) -> (&'a [T], &'a [T]) {
        (self.first, self.second)
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.first.len() + self.second.len()
    }

    /// True if there is none (never for a batch handed to a handler).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &'a T> + 'a {
        self.first.iter().chain(self.second.iter())
    }
}

impl<T: fmt::Debug> fmt::Debug for Batch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Handles everything available at once (the batch form of [`Handler`]).
///
/// The batch is released when the future completes; an `Err` or a panic counts once for the
/// batch. Closures `Fn(Batch<'_, T>) -> impl Future` implement it.
pub trait BatchHandler<T>: Send + Sync + 'static {
    /// Handles `batch`. An `Err` or a panic (in `call` itself or in its future) counts once
    /// for the batch; the subscriber goes on.
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

impl<T, F, Fut> BatchHandler<T> for F
where
    T: Sync + 'static,
    F: Fn(Batch<'_, T>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send,
    Fut::Output: HandlerOutput,
{
    // Not an `async fn`: see the `Handler` impl for closures.
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move { self(batch).await.into_result() }
    }
}

/// How a subscriber runs: its name (for logs and stats), the capacity of the topic if this
/// subscriber creates it, and an optional stall timeout.
#[derive(Clone, Debug, Default)]
pub struct SubscribeOptions {
    pub(crate) name: Option<String>,
    pub(crate) capacity: Option<usize>,
    pub(crate) stall_timeout: Option<Duration>,
}

impl SubscribeOptions {
    /// Default options: named after the topic and a number, gating (no stall timeout).
    pub fn new() -> Self {
        Self::default()
    }

    /// The name in logs and stats.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The topic's capacity, if this subscription creates the topic. If the topic exists with
    /// another capacity, subscribing fails with [`Error::CapacityMismatch`](crate::Error).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// Detach this subscriber when one handler call stays pending longer than `timeout`: its
    /// handler future is dropped at its next yield, its place in the topic released (so
    /// publishers stop waiting for it), a `tracing` warning logged and the detach counted.
    /// Without it (the default), a slow subscriber makes publishers wait: no message is lost.
    ///
    /// It runs on tokio's timer: on a runtime built without its time driver, subscribing
    /// with it is [`Error::NoTimer`](crate::Error::NoTimer).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout);
        self
    }
}

/// A handler that knows its topic and options: what `#[subscriber]` generates, and what
/// [`Bus::register`](crate::Bus::register) takes.
pub trait Subscriber: Send + Sync + 'static {
    /// The message type.
    type Message: Send + Sync + 'static;
    /// The topic it subscribes to.
    fn topic(&self) -> &str;
    /// Its options.
    fn options(&self) -> SubscribeOptions {
        SubscribeOptions::new()
    }
    /// Subscribes it to `bus`: called by [`Bus::register`](crate::Bus::register).
    fn subscribe(self, bus: &crate::Bus) -> Result<crate::Subscription, crate::Error>;
}
