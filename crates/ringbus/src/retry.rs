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
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use crate::bus::Topic;
use crate::error::{Error, TypeMismatch};
use crate::handler::{Handler, HandlerError, SubscribeOptions};
use crate::stats::SubscriberStats;
use crate::subscriber::{panic_message, Counters, SubShared};

/// How a subscriber retries a message its handler failed on: how many attempts in all, and
/// the exponential backoff (with optional jitter) between them.
///
/// The delay before retry `n` (the first retry is 1) is `backoff * multiplier^(n-1)`, at most
/// `max_backoff`; with jitter (the default) the subscriber sleeps a random time between half
/// that delay and all of it, so that subscribers failing on the same cause do not retry in
/// step. A handler `Err` is retried; a panic is retried only with
/// [`panics(true)`](Self::panics).
///
/// Give it to a subscriber with [`SubscribeOptions::retry`], or write
/// `retry(attempts = 3, backoff = "10ms")` in `#[subscriber(..)]`. The backoff sleeps run on
/// tokio's time driver, as `tokio::time` does: on a runtime built without one, subscribing
/// with a retry policy panics (tokio's "timers are disabled"), at subscribe rather than at
/// the first retry.
///
/// While a message is retried, its subscriber takes no other message (order is kept) and
/// holds its place in the topic like a slow handler (publishers wait for it once its queue
/// is full). `close()` and `unsubscribe()` wait for the retries of a message in flight; a
/// [bounded close](crate::Bus::close_with) that runs out of time during a backoff sleep
/// stops the subscriber there and reports the message unhandled.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ringbus::RetryPolicy;
///
/// let policy = RetryPolicy::new(4)
///     .backoff(Duration::from_millis(10))
///     .max_backoff(Duration::from_millis(25))
///     .jitter(false);
/// assert_eq!(policy.delay(1), Duration::from_millis(10));
/// assert_eq!(policy.delay(2), Duration::from_millis(20));
/// assert_eq!(policy.delay(3), Duration::from_millis(25)); // capped
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
    multiplier: f64,
    jitter: bool,
    panics: bool,
}

impl Default for RetryPolicy {
    /// `RetryPolicy::new(3)`.
    fn default() -> Self {
        Self::new(3)
    }
}

impl RetryPolicy {
    /// `attempts` handler calls in all per message (the first one included; 0 is taken as
    /// 1, which retries nothing), 100 ms before the first retry, doubling up to 10 s, with
    /// jitter; panics are not retried.
    pub fn new(attempts: u32) -> Self {
        Self {
            attempts: attempts.max(1),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: true,
            panics: false,
        }
    }

    /// The number of handler calls in all per message, the first one included (0 is taken
    /// as 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The delay before the first retry (default 100 ms).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The longest delay between two attempts (default 10 s).
    pub fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// What each delay is multiplied by for the next one (default 2.0). A value below 1.0,
    /// or NaN, is taken as 1.0 (a constant delay).
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        // `!(x >= 1.0)` is true for NaN too.
        self.multiplier = if multiplier >= 1.0 { multiplier } else { 1.0 };
        self
    }

    /// Sleep a random time between half the delay and all of it (default true), so that
    /// subscribers failing on the same cause do not retry in step.
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Retry a handler that panicked, as one that returned `Err` (default false: a panic
    /// ends the message's attempts at once, and it is dead-lettered if the subscriber has a
    /// dead-letter topic).
    pub fn panics(mut self, retry_panics: bool) -> Self {
        self.panics = retry_panics;
        self
    }

    /// The number of handler calls in all per message.
    pub fn max_attempts(&self) -> u32 {
        self.attempts
    }

    /// The delay before retry `retry` (the first retry is 1), before jitter: `backoff *
    /// multiplier^(retry-1)`, at most `max_backoff`. Never panics, whatever the numbers.
    pub fn delay(&self, retry: u32) -> Duration {
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let nanos = self.backoff.as_nanos() as f64 * self.multiplier.powi(exponent);
        // `as` saturates; the comparison keeps an infinite or too large delay at the cap.
        let delay = if nanos < u64::MAX as f64 {
            Duration::from_nanos(nanos.round() as u64)
        } else {
            self.max_backoff
        };
        delay.min(self.max_backoff)
    }

    /// The delay before retry `retry`, with jitter if it is on: `random` is uniform over
    /// `u64`, and the result over `[delay/2, delay]`.
    fn sleep_for(&self, retry: u32, random: u64) -> Duration {
        let delay = self.delay(retry);
        if !self.jitter {
            return delay;
        }
        let Ok(nanos) = u64::try_from(delay.as_nanos()) else {
            return delay; // over 584 years: nobody will notice the missing jitter
        };
        let half = nanos / 2;
        let extra = ((u128::from(nanos - half) * u128::from(random)) >> 64) as u64;
        Duration::from_nanos(half + extra)
    }
}

/// A message a subscriber gave up on, as published to its dead-letter topic: a copy of the
/// message, the last error, where it failed and after how many attempts.
///
/// A subscriber gets a dead-letter topic with [`SubscribeOptions::dead_letter`] (a
/// `Topic<DeadLetter<T>>` handle) or `dead_letter("topic")` in `#[subscriber(..)]`. The
/// handler saw the message as `&T` in place, so the dead letter carries a clone of it: a
/// dead-letter topic needs `T: Clone` (for a large message, a topic of `Arc<M>` makes that a
/// reference count). Making a dead letter allocates (the clone, the error text and the
/// subscriber's name); nothing else about retrying does.
///
/// # Examples
///
/// ```
/// use ringbus::{Bus, DeadLetter, RetryPolicy, SubscribeOptions};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
/// let bus = Bus::new();
/// let dead = bus.topic::<DeadLetter<u64>>("jobs.dead")?;
/// let inspect = bus.subscribe("jobs.dead", async |dead: &DeadLetter<u64>| {
///     println!("job {} failed {} times: {}", dead.message, dead.attempts, dead.error);
/// })?;
/// let options = SubscribeOptions::new()
///     .retry(RetryPolicy::new(3).backoff(Duration::from_millis(1)))
///     .dead_letter(&dead);
/// let jobs = bus.subscribe_with("jobs", options, async |job: &u64| {
///     if *job == 13 { Err("unlucky") } else { Ok(()) }
/// })?;
/// bus.publish("jobs", 13u64).await?;
/// bus.close().await; // waits for the three attempts and the dead letter's handler
/// assert_eq!(jobs.stats().retries, 2);
/// assert_eq!(jobs.stats().dead_lettered, 1);
/// # drop(inspect);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter<T> {
    /// A copy of the message.
    pub message: T,
    /// The last attempt's error (a panic's message, if it panicked).
    pub error: String,
    /// True if the last attempt panicked.
    pub panicked: bool,
    /// The topic the message was published to.
    pub topic: Arc<str>,
    /// The name of the subscriber that gave up on it.
    pub subscriber: Arc<str>,
    /// Handler calls made on it.
    pub attempts: u32,
}

/// A subscriber's dead-letter topic, resolved, its type erased so that the untyped
/// [`SubscribeOptions`] can carry it: an `Arc<Sink<T>>` inside.
#[derive(Clone)]
pub(crate) struct DeadLetterTo {
    /// The topic's name, for the type mismatch error.
    name: Arc<str>,
    /// `type_name::<DeadLetter<T>>()`.
    carries: &'static str,
    sink: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for DeadLetterTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetterTo")
            .field("topic", &&*self.name)
            .field("carries", &self.carries)
            .finish()
    }
}

/// Where a subscriber of `T` sends its dead letters, and how it copies a message.
struct Sink<T> {
    topic: Topic<DeadLetter<T>>,
    clone: fn(&T) -> T,
}

impl DeadLetterTo {
    pub(crate) fn new<T: Clone + Send + Sync + 'static>(topic: &Topic<DeadLetter<T>>) -> Self {
        Self {
            name: topic.inner.name.clone(),
            carries: std::any::type_name::<DeadLetter<T>>(),
            sink: Arc::new(Sink {
                topic: topic.clone(),
                clone: T::clone,
            }),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::RetryPolicy;
    use std::time::Duration;

    #[test]
    fn delays_grow_by_the_multiplier_up_to_the_cap() {
        let p = RetryPolicy::new(10)
            .backoff(Duration::from_millis(10))
            .max_backoff(Duration::from_millis(100))
            .multiplier(3.0);
        let delays: Vec<_> = (1..=4).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(delays, [10, 30, 90, 100]);
        // Absurd numbers neither panic nor overflow: they stay at the cap.
        assert_eq!(p.delay(u32::MAX), Duration::from_millis(100));
        let huge = RetryPolicy::new(2)
            .backoff(Duration::MAX)
            .max_backoff(Duration::MAX);
        assert_eq!(huge.delay(1), Duration::MAX);
        assert_eq!(huge.sleep_for(1, u64::MAX), Duration::MAX);
    }

    #[test]
    fn a_multiplier_below_one_or_nan_is_constant() {
        for m in [0.5, -2.0, f64::NAN] {
            let p = RetryPolicy::new(5)
                .backoff(Duration::from_millis(7))
                .multiplier(m);
            assert_eq!(p.delay(4), Duration::from_millis(7), "multiplier {m}");
        }
        let inf = RetryPolicy::new(5)
            .backoff(Duration::from_millis(7))
            .multiplier(f64::INFINITY);
        assert_eq!(inf.delay(2), Duration::from_secs(10));
    }

    #[test]
    fn jitter_stays_between_half_the_delay_and_all_of_it() {
        let p = RetryPolicy::new(3).backoff(Duration::from_millis(10));
        assert_eq!(p.sleep_for(1, 0), Duration::from_millis(5));
        assert!(p.sleep_for(1, u64::MAX) <= Duration::from_millis(10));
        assert!(p.sleep_for(1, u64::MAX) > Duration::from_micros(9_999));
        assert_eq!(
            p.clone().jitter(false).sleep_for(1, 0),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn zero_attempts_is_one() {
        assert_eq!(RetryPolicy::new(0).max_attempts(), 1);
        assert_eq!(RetryPolicy::default().attempts(0).max_attempts(), 1);
    }
}
