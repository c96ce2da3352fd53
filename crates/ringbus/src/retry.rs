//! Retries with backoff, and the dead-letter topic: [`RetryPolicy`], [`DeadLetter`].
//!
//! # How it runs
//!
//! A subscriber given a retry policy or a dead-letter topic runs its handler wrapped in a
//! [`Retrying`] handler, made at subscribe; a subscriber without either runs its handler as
//! before, so the plain subscriber loop pays nothing for this module. The wrapper is a
//! [`Handler`] like any other: the subscriber task calls it once per message, and it calls
//! the user's handler up to `attempts` times on the same `&T`, borrowed in place from the
//! ring, sleeping on tokio's timer between attempts. The message's slot is released only
//! when the wrapper returns, so:
//!
//! - **Order**: message n+1 is not handed to the handler before message n has finished its
//!   attempts (and its dead letter, if any, was published).
//! - **Backpressure**: a retrying subscriber holds its place in the topic like a slow handler:
//!   publishers wait for it once its queue is full. A stall timeout, if the subscriber has
//!   one, covers the whole of a message's handling, backoff sleeps included.
//! - **Close and unsubscribe** follow their drain rules: `close()` and `unsubscribe()` wait
//!   for the retries of a message in flight (it is an accepted message, not yet handled); a
//!   bounded `close_with` whose context ends during a backoff sleep stops the subscriber at
//!   that sleep (a yield, so it is stopped at once), and the message is reported unhandled in
//!   the [`CloseReport`](crate::CloseReport), not dead-lettered.
//!
//! # Counting
//!
//! Every failed handler call counts in `errors` or `panics` (the retried ones in the wrapper,
//! the last one in the subscriber loop, which also marks the message failed for delivery
//! receipts); every retry counts in `retries`, every dead letter published in
//! `dead_lettered`, every dead letter that could not be published in `dead_letter_failures`
//! (and is logged at `error`). Only the task writes them (Relaxed: they are counters).
//!
//! # Allocation
//!
//! A retry allocates nothing of its own (the timer lives in the wrapper's future). A dead
//! letter allocates: the copy of the message (`T::clone`), the error text and the
//! subscriber's name.

use std::any::Any;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use crate::error::{Error, TypeMismatch};
use crate::handler::{panic_message, Handler, HandlerError};
use crate::options::{DeadLetter, RetryPolicy, Sink, SubscribeOptions};
use crate::shared::{Counters, SubShared};
use crate::stats::SubscriberStats;
use crate::topic::Topic;

/// Makes the wrapper a subscriber of `T` with `options` runs, if it has a retry policy or a
/// dead-letter topic (taken out of `options`); `Ok(None)` if it has neither.
///
/// # Errors
///
/// [`Error::TypeMismatch`] if the dead-letter topic carries dead letters of another type.
pub(crate) fn prepare<T: Send + Sync + 'static>(
    options: &mut SubscribeOptions,
) -> Result<Option<Prepared<T>>, Error> {
    if options.retry.is_none() && options.dead_letter.is_none() {
        return Ok(None);
    }
    let sink = match options.dead_letter.take() {
        None => None,
        Some(to) => Some(to.sink.downcast::<Sink<T>>().map_err(|_| {
            Error::TypeMismatch(TypeMismatch {
                topic: to.name.clone(),
                expected: to.carries,
                found: std::any::type_name::<DeadLetter<T>>(),
            })
        })?),
    };
    let policy = options.retry.take().unwrap_or_else(|| RetryPolicy::new(1));
    Ok(Some(Prepared { policy, sink }))
}

/// What [`prepare`] found: the policy and the dead-letter sink.
pub(crate) struct Prepared<T> {
    policy: RetryPolicy,
    sink: Option<Arc<Sink<T>>>,
}

impl<T> Prepared<T> {
    /// The wrapper around `handler` for the subscriber `sub`.
    pub(crate) fn wrap<H>(self, handler: H, sub: Arc<SubShared>) -> Retrying<T, H> {
        let mut seed = std::collections::hash_map::RandomState::new().build_hasher();
        seed.write_u64(sub.id);
        let counters = Arc::new(RetryCounters::default());
        sub.keep_counters(counters.clone());
        Retrying {
            handler,
            policy: self.policy,
            sink: self.sink,
            sub,
            counters,
            random: AtomicU64::new(seed.finish()),
        }
    }
}

/// A handler run under a retry policy, with an optional dead-letter topic (see the module
/// docs).
pub(crate) struct Retrying<T, H> {
    handler: H,
    policy: RetryPolicy,
    sink: Option<Arc<Sink<T>>>,
    sub: Arc<SubShared>,
    counters: Arc<RetryCounters>,
    /// The jitter generator's state (splitmix64). Only the subscriber's task uses it, one
    /// call at a time: Relaxed.
    random: AtomicU64,
}

/// A retrying subscriber's own counters, kept by its [`Retrying`] only.
#[derive(Debug, Default)]
struct RetryCounters {
    /// Attempts made again after a failed one.
    retries: AtomicU64,
    /// Dead letters published.
    dead_lettered: AtomicU64,
    /// Dead letters that could not be published.
    dead_letter_failures: AtomicU64,
}

impl Counters for RetryCounters {
    fn report(&self, stats: &mut SubscriberStats) {
        stats.retries = self.retries.load(Ordering::Relaxed);
        stats.dead_lettered = self.dead_lettered.load(Ordering::Relaxed);
        stats.dead_letter_failures = self.dead_letter_failures.load(Ordering::Relaxed);
    }
}

/// How one attempt failed.
enum Failure {
    Err(HandlerError),
    /// The panic's payload, to be resumed after the last attempt, and its message.
    Panic(Box<dyn Any + Send>, String),
}

impl<T, H> Retrying<T, H> {
    /// splitmix64: a fresh uniform `u64` per call.
    fn next_random(&self) -> u64 {
        let state = self
            .random
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl<T, H> Retrying<T, H>
where
    T: Send + Sync + 'static,
    H: Handler<T>,
{
    /// One handler call, its panics caught (in `call` itself and in its future).
    async fn attempt(&self, msg: &T) -> Result<(), Failure> {
        let call = match std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.call(msg))) {
            Ok(call) => call,
            Err(panic) => {
                let text = panic_message(&*panic);
                return Err(Failure::Panic(panic, text));
            }
        };
        match AssertUnwindSafe(call).catch_unwind().await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Failure::Err(error)),
            Err(panic) => {
                let text = panic_message(&*panic);
                Err(Failure::Panic(panic, text))
            }
        }
    }

    /// Publishes the dead letter for `msg` to `sink`; logs and counts a failure to.
    /// (`error` and `panicked` describe the failure, which is not `Sync`: a reference to it
    /// cannot be held across the publish.)
    #[cold]
    async fn dead_letter(
        &self,
        sink: &Sink<T>,
        msg: &T,
        error: String,
        panicked: bool,
        attempts: u32,
    ) {
        // The clone is the user's code: a panic in it is caught and counted as a failed
        // dead letter, not as the handler's.
        let message = match std::panic::catch_unwind(AssertUnwindSafe(|| (sink.clone)(msg))) {
            Ok(message) => message,
            Err(panic) => {
                self.dead_letter_failed(&sink.topic, &panic_message(&*panic));
                return;
            }
        };
        let letter = DeadLetter {
            message,
            error,
            panicked,
            topic: self.sub.topic.clone(),
            subscriber: Arc::from(&*self.sub.name),
            attempts,
        };
        match sink.topic.publish(letter).await {
            Ok(()) => {
                self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    topic = %self.sub.topic,
                    subscriber = %self.sub.name,
                    dead_letter = %sink.topic.name(),
                    attempts,
                    "ringbus message dead-lettered"
                );
            }
            Err(e) => self.dead_letter_failed(&sink.topic, &e.to_string()),
        }
    }

    #[cold]
    fn dead_letter_failed(&self, to: &Topic<DeadLetter<T>>, error: &str) {
        self.counters
            .dead_letter_failures
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            topic = %self.sub.topic,
            subscriber = %self.sub.name,
            dead_letter = %to.name(),
            %error,
            "ringbus could not publish a dead letter; the message is dropped"
        );
    }

    /// Counts and logs a failed attempt that will be retried after `delay`.
    #[cold]
    fn retrying(&self, failure: &Failure, attempt: u32, delay: Duration) {
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        let (topic, subscriber, of) = (&self.sub.topic, &self.sub.name, self.policy.attempts);
        match failure {
            Failure::Err(error) => {
                self.sub.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    %topic, %subscriber, %error, attempt, of, ?delay,
                    "ringbus handler returned an error; retrying"
                );
            }
            Failure::Panic(_, panic) => {
                self.sub.panics.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    %topic, %subscriber, %panic, attempt, of, ?delay,
                    "ringbus handler panicked; retrying"
                );
            }
        }
    }
}

impl<T, H> Handler<T> for Retrying<T, H>
where
    T: Send + Sync + 'static,
    H: Handler<T>,
{
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        msg: &'a T,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a {
        async move {
            let mut attempt = 1;
            let failure = loop {
                let failure = match self.attempt(msg).await {
                    Ok(()) => return Ok(()),
                    Err(failure) => failure,
                };
                let retry = attempt < self.policy.attempts
                    && (self.policy.panics || matches!(failure, Failure::Err(_)));
                if !retry {
                    break failure;
                }
                let delay = self.policy.sleep_for(attempt, self.next_random());
                self.retrying(&failure, attempt, delay);
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                attempt += 1;
            };
            if let Some(sink) = &self.sink {
                let (error, panicked) = match &failure {
                    Failure::Err(error) => (error.to_string(), false),
                    Failure::Panic(_, text) => (text.clone(), true),
                };
                self.dead_letter(sink, msg, error, panicked, attempt).await;
            }
            // The last failure goes to the subscriber loop, which logs and counts it as it
            // would without retries: an error returned, a panic resumed (it catches it).
            match failure {
                Failure::Err(error) => Err(error),
                Failure::Panic(panic, _) => std::panic::resume_unwind(panic),
            }
        }
    }
}
