//! Timers that never panic (guarantee 9).
//!
//! tokio's timers panic when they are made in a runtime built without its time driver
//! (`enable_time` / `enable_all` not called), and tokio (1.54) offers no way to ask a
//! runtime whether it has one. So the bus asks by making a timer under `catch_unwind`
//! ([`tokio_timer`]): where it works, that timer is the one used, and the question costs
//! nothing; where it panics, the caller falls back (a deadline runs on a helper thread) or
//! refuses (a stall timeout needs the runtime's timer: `Error::NoTimer` at subscribe).
//!
//! The caught panic must not print: [`quietly`] sets a thread-local flag around the probe,
//! and a panic hook, installed once on the first probe, skips the panics raised while this
//! thread's flag is set and passes every other one to the hook that was installed before
//! it. Under `panic = "abort"` nothing can be caught: the bus assumes the driver is there
//! (tokio aborts with its own message if not).

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::Once;

use tokio::time::Instant;

thread_local! {
    /// True while this thread runs a probe whose panic is expected.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `probe`, catching (and not printing) a panic: `None` if it panicked.
#[cfg(panic = "unwind")]
fn quietly<R>(probe: impl FnOnce() -> R) -> Option<R> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !PROBING.with(Cell::get) {
                previous(info);
            }
        }));
    });
    PROBING.with(|p| p.set(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(probe));
    PROBING.with(|p| p.set(false));
    result.ok()
}

#[cfg(not(panic = "unwind"))]
fn quietly<R>(probe: impl FnOnce() -> R) -> Option<R> {
    Some(probe())
}

/// tokio's timer for `deadline`, if there is a runtime here and it has a time driver.
fn tokio_timer(deadline: Instant) -> Option<tokio::time::Sleep> {
    tokio::runtime::Handle::try_current().ok()?;
    quietly(|| tokio::time::sleep_until(deadline))
}

/// True if the current runtime has a time driver (false outside any runtime).
pub(crate) fn has_time_driver() -> bool {
    tokio_timer(Instant::now()).is_some()
}

/// Waits until `deadline`: on tokio's timer where there is one (it follows paused time in
/// tests), else on a helper thread (a publish with a deadline from a plain thread, or on a
/// runtime without a time driver, must not panic).
pub(crate) async fn sleep_until(deadline: Instant) {
    match tokio_timer(deadline) {
        Some(sleep) => sleep.await,
        None => off_runtime::Sleep::new(deadline.into_std()).await,
    }
}

mod off_runtime {
    //! A deadline without tokio's timer: a helper thread sleeps and wakes the task. Only used
    //! when a deadline has to be waited for outside any tokio runtime, or in one without a
    //! time driver.

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
