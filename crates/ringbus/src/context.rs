//! `Context`: a deadline and/or a cancellation signal for a publish, as Go's `ctx`.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// When a publish should give up: a deadline, a cancellation signal, both, or neither.
///
/// The counterpart of the `ctx` in Go's `Publish(ctx, ...)`. [`Context::new`] never cancels.
/// A context built from a [`CancellationToken`] lets a service's existing shutdown tree cancel
/// publishes. Dropping a publish future cancels it as well, without any context.
///
/// Deadlines use tokio's timer inside a runtime (which must have time enabled:
/// `#[tokio::main]` and `Builder::enable_all` do that) and a helper thread outside any runtime.
///
/// ```
/// use std::time::Duration;
/// use ringbus::Context;
/// use tokio_util::sync::CancellationToken;
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
}

impl Context {
    /// A context that never ends.
    pub const fn new() -> Self {
        Self {
            deadline: None,
            token: None,
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

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// True if the context never ends (no deadline, no token): publishes skip the select.
    pub(crate) fn is_never(&self) -> bool {
        self.deadline.is_none() && self.token.is_none()
    }

    /// True once the deadline has passed or the token is cancelled.
    pub fn is_done(&self) -> bool {
        self.token.as_ref().is_some_and(|t| t.is_cancelled())
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Completes when the context ends; never, for [`Context::new`].
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

/// Waits until `deadline`: on tokio's timer inside a runtime, on a helper thread outside one
/// (a publish with a deadline from a plain thread must not panic).
async fn sleep_until(deadline: Instant) {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep_until(deadline).await;
    } else {
        off_runtime::Sleep::new(deadline.into_std()).await;
    }
}

mod off_runtime {
    //! A deadline without a runtime: a helper thread sleeps and wakes the task. Only used when
    //! a publish with a deadline has to wait outside any tokio runtime.

    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};
    use std::time::Instant;

    #[derive(Default)]
    struct State {
        fired: bool,
        waker: Option<Waker>,
    }

    pub(super) struct Sleep {
        deadline: Instant,
        state: Option<Arc<Mutex<State>>>,
    }

    impl Sleep {
        pub(super) fn new(deadline: Instant) -> Self {
            Self {
                deadline,
                state: None,
            }
        }
    }

    impl Future for Sleep {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if Instant::now() >= self.deadline {
                return Poll::Ready(());
            }
            let deadline = self.deadline;
            let state = self.state.get_or_insert_with(|| {
                let state = Arc::new(Mutex::new(State::default()));
                let timer = state.clone();
                let spawned = std::thread::Builder::new()
                    .name("ringbus-deadline".into())
                    .spawn(move || {
                        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                        let mut s = timer.lock().unwrap_or_else(|e| e.into_inner());
                        s.fired = true;
                        if let Some(w) = s.waker.take() {
                            w.wake();
                        }
                    });
                if spawned.is_err() {
                    // No thread for the timer: end the wait now rather than never.
                    state.lock().unwrap_or_else(|e| e.into_inner()).fired = true;
                }
                state
            });
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            if s.fired {
                return Poll::Ready(());
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl From<CancellationToken> for Context {
    fn from(token: CancellationToken) -> Self {
        Context::new().with_cancellation(token)
    }
}
