//! `Context`: a deadline and/or a cancellation signal for a publish, as Go's `ctx`, and the
//! span its handler spans are children of.

use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Span;

/// When a publish should give up: a deadline, a cancellation signal, both, or neither.
///
/// The counterpart of the `ctx` in Go's `Publish(ctx, ...)`. [`Context::new`] never cancels.
/// A context built from a [`CancellationToken`] lets a service's existing shutdown tree cancel
/// publishes (the bus re-exports `tokio_util`'s as `ringbus::CancellationToken`, so no
/// dependency on `tokio_util` is needed for it). Dropping a publish future cancels it as well, without any context.
///
/// # Deadlines and tokio's time driver
///
/// A deadline is waited for on tokio's time driver, as [`tokio::time::sleep_until`] does
/// (and follows tokio's clock, paused in tests). A publish that has a deadline:
/// - where no tokio runtime is reachable (a plain thread, another executor) is
///   [`PublishError::NoRuntime`](crate::PublishError::NoRuntime), the message given back,
///   unless the deadline has already passed (then `Cancelled`). From a plain thread, enter a
///   runtime that runs on other threads first ([`tokio::runtime::Handle::enter`]);
/// - on a runtime built without its time driver panics when it has to wait, as tokio's
///   timers do ("timers are disabled"): tokio cannot be asked whether a runtime has one.
///
/// A context with only a cancellation token needs no timer.
///
/// ```
/// use std::time::Duration;
/// use ringbus::{CancellationToken, Context};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let shutdown = CancellationToken::new();
/// let ctx = Context::new()
///     .with_timeout(Duration::from_millis(50))
///     .with_cancellation(shutdown.child_token());
/// assert!(!ctx.is_done());
/// shutdown.cancel();
/// assert!(ctx.is_done());
/// # }
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "a Context limits nothing until it is passed to a publish (`publish_with(&ctx, ..)`)"]
pub struct Context {
    deadline: Option<Instant>,
    token: Option<CancellationToken>,
    /// The parent of the handler spans of what is published with it.
    parent: Option<Span>,
}

/// [`Context::new`], for the publishes without a context: a static, so a publish has no
/// context to drop (with a span in it, dropping one is a call on every publish).
pub(crate) static NEVER: Context = Context::new();

impl Context {
    /// A context that never ends.
    pub const fn new() -> Self {
        Self {
            deadline: None,
            token: None,
            parent: None,
        }
    }

    /// Ends `timeout` from now (or earlier, if it already had an earlier deadline).
    ///
    /// Reads tokio's clock, so in tests with paused time the deadline follows that clock.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        let deadline = Instant::now().checked_add(timeout);
        match deadline {
            Some(d) => self.with_deadline(d),
            None => self, // so far away it never comes
        }
    }

    /// Ends at `deadline` (or earlier, if it already had an earlier deadline).
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(match self.deadline {
            Some(d) => d.min(deadline),
            None => deadline,
        });
        self
    }

    /// Ends when `token` is cancelled. A context holds one token; use
    /// [`CancellationToken::child_token`] to tie it to a tree.
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Makes `span` the parent of the `ringbus.handle` span of every handler call on a
    /// message published with this context, as Go's `ctx` carries a trace. It limits
    /// nothing.
    ///
    /// The handlers run in their subscribers' tasks, after the publish returned; without a
    /// parent their spans have the one current in that task (usually none). A bridge that
    /// publishes what it received from another process uses this to continue that
    /// process's trace (`ringbus-nats`, feature `otel`). The bus keeps the span open until
    /// every subscriber present at the publish has made its handler span from it, or the
    /// topic has published a ring's worth of messages after it (a subscriber that skipped
    /// it, left, or made no span); a disabled span (nobody listens) is not kept.
    ///
    /// Honoured by [`Topic::publish_with`](crate::Topic::publish_with),
    /// [`Bus::publish_with`](crate::Bus::publish_with) and
    /// [`Topic::publish_tracked`](crate::Topic::publish_tracked); a batch publish ignores it.
    /// Such a publish takes a lock and allocates for its entry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::new();
    /// let _audit = bus.subscribe("orders", |_: &u64| async {})?;
    /// let received = tracing::info_span!("received", order = 7);
    /// let ctx = ringbus::Context::new().with_parent(received);
    /// bus.publish_with(&ctx, "orders", 7u64).await?; // audit's span is a child of `received`
    /// # Ok(()) }
    /// ```
    pub fn with_parent(mut self, span: Span) -> Self {
        self.parent = Some(span);
        self
    }

    /// The parent given with [`with_parent`](Self::with_parent), if any.
    pub fn parent(&self) -> Option<&Span> {
        self.parent.as_ref()
    }

    /// The parent to register for a publish: given, and enabled.
    #[inline]
    pub(crate) fn live_parent(&self) -> Option<&Span> {
        self.parent.as_ref().filter(|span| !span.is_disabled())
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// True if the context never ends (no deadline, no token): publishes skip the select.
    pub(crate) fn is_never(&self) -> bool {
        self.deadline.is_none() && self.token.is_none()
    }

    /// True if the context can be waited for from here: it has no deadline, or a tokio
    /// runtime is reachable to time it (see [`Context`], "Deadlines").
    pub(crate) fn timer_reachable(&self) -> bool {
        self.deadline.is_none() || crate::time::runtime_reachable()
    }

    /// True once the deadline has passed or the token is cancelled.
    pub fn is_done(&self) -> bool {
        self.token.as_ref().is_some_and(|t| t.is_cancelled())
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Completes when the context ends; never, for [`Context::new`].
    ///
    /// # Panics
    ///
    /// With a deadline, when first polled where no tokio runtime is reachable or on a runtime
    /// built without its time driver, as [`tokio::time::sleep_until`] does.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn done(&self) {
        match (self.deadline, &self.token) {
            (None, None) => std::future::pending().await,
            (Some(d), None) => sleep_until(d).await,
            (None, Some(t)) => t.cancelled().await,
            (Some(d), Some(t)) => {
                tokio::select! {
                    _ = sleep_until(d) => {}
                    _ = t.cancelled() => {}
                }
            }
        }
    }
}

impl From<CancellationToken> for Context {
    fn from(token: CancellationToken) -> Self {
        Context::new().with_cancellation(token)
    }
}
