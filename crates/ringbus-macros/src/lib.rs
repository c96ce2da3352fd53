//! Procedural macros for [ringbus](https://docs.rs/ringbus): `#[subscriber]`.
//!
//! Use them through `ringbus` (`use ringbus::subscriber;`), which re-exports them.

use proc_macro::TokenStream;

mod attr;
mod expand;

/// Turns an `async fn` taking a message by reference into a handler that
/// [`Bus::register`](https://docs.rs/ringbus/latest/ringbus/struct.Bus.html#method.register)
/// accepts.
///
/// ```ignore
/// #[subscriber("orders")]
/// async fn audit(order: &Order) { tracing::info!(id = order.id, "audited"); }
///
/// #[subscriber("orders", publish("receipts"), name = "billing", stall_timeout = "5s")]
/// async fn bill(order: &Order, db: State<Db>) -> Result<Receipt, BillingError> { /* ... */ }
///
/// bus.register(audit)?;
/// bus.register(bill)?;
/// ```
///
/// The function becomes a unit struct of the same name that implements `ringbus::Subscriber`.
///
/// - The first parameter is the message: `&T` (read in place, the fast form), `T` when
///   `T: Clone` (cloned per delivery, slower), or `Batch<'_, T>` with the `batch` argument.
/// - Further parameters are `State<S>`, filled from `Bus::builder().state(..)`; registering a
///   handler whose state was never registered is an `Err` at `register`.
/// - The return type is `()`, `Result<(), E>`, or with `publish("topic")` any `R` or
///   `Result<R, E>`, whose `R` is published to that topic. An `Err` is logged and counted.
///
/// Arguments, after the topic (a string literal or a `const`): `publish("topic")`,
/// `name = "..."`, `capacity = N`, `stall_timeout = "500ms"` (or any `Duration` expression),
/// `batch`, `reply`, `retry(..)`, `dead_letter("topic")`, `crate = "path"` (where `ringbus`
/// is re-exported under another path).
///
/// A topic with a `*` or `>` token is a pattern (`#[subscriber("orders.*")]`, see
/// [`Bus::subscribe_pattern`](https://docs.rs/ringbus/latest/ringbus/struct.Bus.html#method.subscribe_pattern)):
/// the function handles the messages of every matching topic, present and future, without
/// being told which (a closure `async |topic: &str, msg: &T| ...` given to `subscribe_pattern`
/// is). `batch` and `reply` take a topic, not a pattern: `register` refuses the pair.
///
/// `reply` makes a replier: the topic carries `ringbus::Request<T, R>`, and the return value
/// (`R`, or `Result<R, E>` whose `Err` the requester receives as
/// `ringbus::RequestError::Failed`) answers each `topic.request(msg)`. It goes with neither
/// `publish(..)`, `batch`, `retry(..)` nor `dead_letter(..)`, and needs a return value.
///
/// `retry(attempts = 3, backoff = "10ms", max_backoff = "1s", multiplier = 2.0,
/// jitter = true, panics = false)` (every setting optional; the defaults are
/// `ringbus::RetryPolicy::default()`'s) retries a failed call with exponential backoff;
/// `dead_letter("topic")` publishes a message given up on to that topic as a
/// `ringbus::DeadLetter<T>`, resolved at `register` (a topic of another type is an `Err`
/// there), and needs `T: Clone`. Neither goes with `batch`.
#[proc_macro_attribute]
pub fn subscriber(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::subscriber(args.into(), item.into()).into()
}
