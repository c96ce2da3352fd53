//! What a subscriber runs: the [`Handler`] and [`BatchHandler`] traits, implemented by
//! `#[subscriber]` functions and by closures.

use std::fmt;
use std::future::Future;

use futures_util::FutureExt;

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
///
/// A handler that returns a message for another topic says so with `publish("topic")` on
/// `#[subscriber]` (then it returns `R` or `Result<R, E>`); without it, a value other than
/// `()` or `Result<(), E>` is a compile error that says which.
#[diagnostic::on_unimplemented(
    message = "a handler returned `{Self}`, which the bus cannot use as a handler's result",
    label = "a handler returns `()` or `Result<(), E>` (with `E: Display`)",
    note = "to publish the returned value to another topic, write `#[subscriber(\"topic\", publish(\"other_topic\"))]`",
    note = "otherwise return `()`, or `Result<(), E>` where `E: std::fmt::Display + Send + Sync + 'static`"
)]
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
/// Implemented by `#[subscriber]` functions and by every closure or function that takes `&T`
/// and returns a `Send` future of `()` or `Result<(), E>` (see [`HandlerFn`]):
///
/// - an **async closure**, `async |msg: &T| ...`, whose future may borrow the message
///   (Rust 1.85; add `move` to move captured values, such as an `Arc`, into the closure);
/// - a **closure returning a future**, `|msg: &T| async move { ... }`, whose future cannot
///   borrow the message: copy what you need out of it before the `async` block;
/// - [`with_state`]`(state, async |state: &S, msg: &T| ...)`, for an async closure that needs
///   state: on stable Rust an async closure that captures a value it uses by reference is
///   not `Fn`, and the bus cannot prove its future `Send`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
/// let bus = ringbus::Bus::new();
/// // An async closure: the future borrows the message.
/// let borrows = bus.subscribe("ticks", async |tick: &u64| println!("tick {tick}"))?;
/// // A closure returning a future: copy out first.
/// let copies = bus.subscribe("ticks", |tick: &u64| {
///     let tick = *tick;
///     async move { println!("tick {tick}") }
/// })?;
/// bus.publish("ticks", 1u64).await?;
/// borrows.unsubscribe().await;
/// copies.unsubscribe().await;
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot handle `&{T}` messages",
    label = "not a handler of `&{T}`",
    note = "a handler is a `#[subscriber]` function, an async closure `async |msg: &{T}| ...`, or a closure `|msg: &{T}| async move {{ ... }}` whose future does not borrow `msg`",
    note = "its future must be `Send`, and resolve to `()` or `Result<(), E>` (with `E: Display`)"
)]
pub trait Handler<T>: Send + Sync + 'static {
    /// Handles `msg`. An `Err` or a panic (in `call` itself or in the future it returns) is
    /// logged and counted; the subscriber goes on with the next message. A panic is reported
    /// twice: by the application's panic hook (Rust's panic message, and its backtrace if
    /// `RUST_BACKTRACE` is set), then by the bus's `error` event.
    fn call<'a>(&'a self, msg: &'a T)
        -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

/// A function of `&'a T` whose future may borrow the message for `'a`: what a closure
/// handler is. Implemented for every `Fn(&'a T) -> Fut` with a `Send` future, so you never
/// implement it yourself.
///
/// `F: for<'a> HandlerFn<'a, T>` says what `F: Fn(&T) -> Fut` cannot: that the future's type
/// may depend on the message's lifetime. Async closures (`async |msg: &T| ...`) have such
/// futures; closures that return `async move { ... }` blocks have one future type for every
/// lifetime, so their futures cannot borrow the message, and they qualify too.
pub trait HandlerFn<'a, T: 'a>: Fn(&'a T) -> <Self as HandlerFn<'a, T>>::Fut {
    /// The future a call returns.
    type Fut: Future<Output = Self::Result> + Send + 'a;
    /// What the future resolves to.
    type Result: HandlerOutput;
}

impl<'a, T: 'a, F, Fut> HandlerFn<'a, T> for F
where
    F: Fn(&'a T) -> Fut,
    Fut: Future + Send + 'a,
    Fut::Output: HandlerOutput,
{
    type Fut = Fut;
    type Result = Fut::Output;
}

impl<T, F> Handler<T> for F
where
    T: Sync + 'static,
    F: for<'a> HandlerFn<'a, T> + Send + Sync + 'static,
{
    /// Calls the closure at once; its future's output is made a `Result` as it is polled. A
    /// panic in the closure itself is raised here, where the subscriber catches it as it
    /// catches one in the future (see `subscriber::guarded`).
    #[inline]
    fn call<'a>(
        &'a self,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self(msg).map(HandlerOutput::into_result)
    }
}

/// A handler made of a state value and an async closure that borrows both the state and the
/// message: `with_state(state, async |state: &S, msg: &T| ...)`.
///
/// The form for a closure handler that needs state of its own without copying the message
/// out. On stable Rust an async closure that captures a value it uses by reference (an `Arc`,
/// a `Mutex`) is not `Fn`, so its future cannot be proven `Send` and the bus cannot spawn it
/// (the compiler says "async closure does not implement `Fn` because it captures state from
/// its environment"); handing the state to `with_state` instead leaves the closure capturing
/// nothing, and the state is lent to each call.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use ringbus::with_state;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
/// let bus = ringbus::Bus::new();
/// let sub = bus.subscribe(
///     "ticks",
///     with_state(AtomicU64::new(0), async |total: &AtomicU64, tick: &u64| {
///         total.fetch_add(*tick, Ordering::Relaxed);
///     }),
/// )?;
/// bus.publish("ticks", 1u64).await?;
/// sub.unsubscribe().await;
/// # Ok(()) }
/// ```
pub fn with_state<S, F>(state: S, handler: F) -> WithState<S, F> {
    WithState { state, handler }
}

/// A handler with a state lent to each call: made by [`with_state`].
#[derive(Clone, Debug)]
#[must_use = "a handler does nothing until passed to `subscribe`"]
pub struct WithState<S, F> {
    state: S,
    handler: F,
}

/// A function of `(&'a S, &'a T)` whose future may borrow both: what [`with_state`] takes.
/// Implemented for every such `Fn` with a `Send` future, so you never implement it yourself.
pub trait StateHandlerFn<'a, S: 'a, T: 'a>:
    Fn(&'a S, &'a T) -> <Self as StateHandlerFn<'a, S, T>>::Fut
{
    /// The future a call returns.
    type Fut: Future<Output = Self::Result> + Send + 'a;
    /// What the future resolves to.
    type Result: HandlerOutput;
}

impl<'a, S: 'a, T: 'a, F, Fut> StateHandlerFn<'a, S, T> for F
where
    F: Fn(&'a S, &'a T) -> Fut,
    Fut: Future + Send + 'a,
    Fut::Output: HandlerOutput,
{
    type Fut = Fut;
    type Result = Fut::Output;
}

impl<T, S, F> Handler<T> for WithState<S, F>
where
    T: Sync + 'static,
    S: Send + Sync + 'static,
    F: for<'a> StateHandlerFn<'a, S, T> + Send + Sync + 'static,
{
    /// As the closures' `call`: the closure runs at once (see `Handler::call` for closures).
    #[inline]
    fn call<'a>(
        &'a self,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        (self.handler)(&self.state, msg).map(HandlerOutput::into_result)
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
    pub fn iter(&self) -> impl Iterator<Item = &'a T> + use<'a, T> {
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
/// batch. Closures `|batch: Batch<'_, T>| async move { ... }` and async closures
/// `async |batch: Batch<'_, T>| ...` (whose future may borrow the batch) implement it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot handle batches of `{T}`",
    label = "not a batch handler of `{T}`",
    note = "a batch handler is a `#[subscriber(.., batch)]` function, or a closure `async |batch: ringbus::Batch<'_, {T}>| ...`",
    note = "its future must be `Send`, and resolve to `()` or `Result<(), E>` (with `E: Display`)"
)]
pub trait BatchHandler<T>: Send + Sync + 'static {
    /// Handles `batch`. An `Err` or a panic (in `call` itself or in its future) counts once
    /// for the batch; the subscriber goes on.
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

/// A function of a [`Batch`] whose future may borrow the batch: the batch form of
/// [`HandlerFn`], implemented for every `Fn(Batch<'a, T>) -> Fut` with a `Send` future.
pub trait BatchHandlerFn<'a, T: 'a>:
    Fn(Batch<'a, T>) -> <Self as BatchHandlerFn<'a, T>>::Fut
{
    /// The future a call returns.
    type Fut: Future<Output = Self::Result> + Send + 'a;
    /// What the future resolves to.
    type Result: HandlerOutput;
}

impl<'a, T: 'a, F, Fut> BatchHandlerFn<'a, T> for F
where
    F: Fn(Batch<'a, T>) -> Fut,
    Fut: Future + Send + 'a,
    Fut::Output: HandlerOutput,
{
    type Fut = Fut;
    type Result = Fut::Output;
}

impl<T, F> BatchHandler<T> for F
where
    T: Sync + 'static,
    F: for<'a> BatchHandlerFn<'a, T> + Send + Sync + 'static,
{
    /// As the one-message closures' `call`: the closure runs at once (see `Handler::call` for closures).
    #[inline]
    fn call<'a>(
        &'a self,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self(batch).map(HandlerOutput::into_result)
    }
}

/// The text of a panic's payload, for the log.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string())
}

/// Handles one message of a topic matched by a pattern, told which topic it came from: what
/// [`Bus::subscribe_pattern`](crate::Bus::subscribe_pattern) runs.
///
/// Implemented by every closure or function that takes `(&str, &T)` and returns a `Send`
/// future of `()` or `Result<(), E>` (see [`TopicHandlerFn`]), such as the async closure
/// `async |topic: &str, msg: &T| ...`, and by `#[subscriber("orders.*")]` functions.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot handle `&{T}` messages of a pattern's topics",
    label = "not a pattern handler of `&{T}`",
    note = "a pattern handler is an async closure `async |topic: &str, msg: &{T}| ...`, or a `#[subscriber(\"orders.*\")]` function",
    note = "its future must be `Send`, and resolve to `()` or `Result<(), E>` (with `E: Display`)"
)]
pub trait TopicHandler<T>: Send + Sync + 'static {
    /// Handles `msg`, published to `topic`. Failures count as a [`Handler`]'s do.
    fn call<'a>(
        &'a self,
        topic: &'a str,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

/// A function of `(&'a str, &'a T)` whose future may borrow both: what a pattern's closure
/// handler is. Implemented for every such `Fn` with a `Send` future, so you never implement it
/// yourself.
pub trait TopicHandlerFn<'a, T: 'a>:
    Fn(&'a str, &'a T) -> <Self as TopicHandlerFn<'a, T>>::Fut
{
    /// The future a call returns.
    type Fut: Future<Output = Self::Result> + Send + 'a;
    /// What the future resolves to.
    type Result: HandlerOutput;
}

impl<'a, T: 'a, F, Fut> TopicHandlerFn<'a, T> for F
where
    F: Fn(&'a str, &'a T) -> Fut,
    Fut: Future + Send + 'a,
    Fut::Output: HandlerOutput,
{
    type Fut = Fut;
    type Result = Fut::Output;
}

impl<T, F> TopicHandler<T> for F
where
    T: Sync + 'static,
    F: for<'a> TopicHandlerFn<'a, T> + Send + Sync + 'static,
{
    /// As the one-message closures' `call`: the closure runs at once.
    #[inline]
    fn call<'a>(
        &'a self,
        topic: &'a str,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self(topic, msg).map(HandlerOutput::into_result)
    }
}

/// Handles a pattern's batches, told the topic each came from (the batch form of
/// [`TopicHandler`], for [`Bus::subscribe_pattern_batch`](crate::Bus::subscribe_pattern_batch)).
///
/// Async closures `async |topic: &str, batch: Batch<'_, T>| ...` implement it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot handle batches of `{T}` of a pattern's topics",
    label = "not a pattern batch handler of `{T}`",
    note = "a pattern batch handler is an async closure `async |topic: &str, batch: ringbus::Batch<'_, {T}>| ...`",
    note = "its future must be `Send`, and resolve to `()` or `Result<(), E>` (with `E: Display`)"
)]
pub trait TopicBatchHandler<T>: Send + Sync + 'static {
    /// Handles `batch`, published to `topic`. Failures count as a [`BatchHandler`]'s do.
    fn call<'a>(
        &'a self,
        topic: &'a str,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

/// A function of `(&'a str, Batch<'a, T>)` whose future may borrow both: what a pattern's
/// closure batch handler is. Implemented for every such `Fn` with a `Send` future.
pub trait TopicBatchHandlerFn<'a, T: 'a>:
    Fn(&'a str, Batch<'a, T>) -> <Self as TopicBatchHandlerFn<'a, T>>::Fut
{
    /// The future a call returns.
    type Fut: Future<Output = Self::Result> + Send + 'a;
    /// What the future resolves to.
    type Result: HandlerOutput;
}

impl<'a, T: 'a, F, Fut> TopicBatchHandlerFn<'a, T> for F
where
    F: Fn(&'a str, Batch<'a, T>) -> Fut,
    Fut: Future + Send + 'a,
    Fut::Output: HandlerOutput,
{
    type Fut = Fut;
    type Result = Fut::Output;
}

impl<T, F> TopicBatchHandler<T> for F
where
    T: Sync + 'static,
    F: for<'a> TopicBatchHandlerFn<'a, T> + Send + Sync + 'static,
{
    fn call<'a>(
        &'a self,
        topic: &'a str,
        batch: Batch<'a, T>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self(topic, batch).map(HandlerOutput::into_result)
    }
}

/// A [`Handler`] run on a pattern's topics, not told which (what `#[subscriber("orders.*")]`
/// makes of a function that takes only the message).
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct IgnoreTopic<H>(pub H);

impl<T: Sync + 'static, H: Handler<T>> TopicHandler<T> for IgnoreTopic<H> {
    #[inline]
    fn call<'a>(
        &'a self,
        _topic: &'a str,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        self.0.call(msg)
    }
}
