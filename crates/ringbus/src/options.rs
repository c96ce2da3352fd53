//! What a subscriber is asked for: [`SubscribeOptions`], and the [`RetryPolicy`] and
//! dead-letter topic ([`DeadLetter`]) it may carry. Plain data: `retry` runs the policy,
//! `subscriber` the rest.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::topic::Topic;

/// The largest topic capacity: see [`BusBuilder::MAX_CAPACITY`](crate::BusBuilder::MAX_CAPACITY).
pub(crate) const MAX_CAPACITY: usize = 1 << 30;

/// `capacity`, or a panic that names the limit it passes (see [`MAX_CAPACITY`]).
#[track_caller]
pub(crate) fn checked_capacity(capacity: usize) -> usize {
    assert!(
        capacity <= MAX_CAPACITY,
        "ringbus: a topic capacity of {capacity} messages is more than \
         BusBuilder::MAX_CAPACITY ({MAX_CAPACITY})"
    );
    capacity
}

/// How a subscriber runs: its name (for logs and stats), the capacity of the topic if this
/// subscriber creates it, an optional stall timeout, and an optional retry policy and
/// dead-letter topic.
#[derive(Clone, Debug, Default)]
#[must_use = "options do nothing until passed to `subscribe_with` or `subscribe_batch`"]
pub struct SubscribeOptions {
    pub(crate) name: Option<String>,
    pub(crate) capacity: Option<usize>,
    pub(crate) stall_timeout: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) dead_letter: Option<DeadLetterTo>,
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
    ///
    /// # Panics
    ///
    /// If `capacity` is larger than
    /// [`BusBuilder::MAX_CAPACITY`](crate::BusBuilder::MAX_CAPACITY), as
    /// [`BusBuilder::capacity`](crate::BusBuilder::capacity).
    #[track_caller]
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = Some(checked_capacity(capacity));
        self
    }

    /// Detach this subscriber when one handler call stays pending longer than `timeout`: its
    /// handler future is dropped at its next yield, its place in the topic released (so
    /// publishers stop waiting for it), a `tracing` warning logged and the detach counted.
    /// Without it (the default), a slow subscriber makes publishers wait: no message is lost.
    ///
    /// It detaches a handler that waits (its future is pending), not one that blocks its
    /// thread (`std::thread::sleep`, blocking I/O, a long computation without an `.await`):
    /// such a handler never yields, so neither the timer nor anything else on its worker runs
    /// until it returns (on a `current_thread` runtime, nothing at all). Run blocking work
    /// with [`tokio::task::spawn_blocking`] and await its handle: the handler then waits, and
    /// the timeout applies.
    ///
    /// It runs on tokio's time driver, as `tokio::time` does: on a runtime built without
    /// one, subscribing with it panics (tokio's "timers are disabled"), at subscribe.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout);
        self
    }

    /// Retry a message the handler failed on (an `Err`, or a panic if the policy says so),
    /// with exponential backoff and jitter: see [`RetryPolicy`] for the schedule, and for
    /// what a retrying subscriber means for order (kept: the next message waits), for
    /// publishers (it gates them like a slow handler) and for `close`. After the last
    /// attempt the message goes to the [dead-letter topic](Self::dead_letter), if any, and
    /// the failure is logged and counted as without retries. Retries are counted in
    /// [`SubscriberStats::retries`](crate::SubscriberStats::retries).
    ///
    /// The backoff sleeps run on tokio's time driver, as `tokio::time` does: on a runtime
    /// built without one, subscribing with a retry policy panics (tokio's "timers are
    /// disabled"), at subscribe. A
    /// [stall timeout](Self::stall_timeout) covers a message's whole handling, its retries
    /// and sleeps included. Batch subscribers do not retry: `subscribe_batch` with a retry
    /// policy is [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use ringbus::{with_state, Bus, RetryPolicy, SubscribeOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::new();
    /// let options = SubscribeOptions::new()
    ///     .retry(RetryPolicy::new(3).backoff(Duration::from_millis(1)));
    /// // Fails on its first call, succeeds on the second.
    /// let flaky = with_state(AtomicU32::new(0), async |calls: &AtomicU32, _: &u64| {
    ///     if calls.fetch_add(1, Ordering::Relaxed) == 0 { Err("not yet") } else { Ok(()) }
    /// });
    /// let sub = bus.subscribe_with("jobs", options, flaky)?;
    /// bus.publish("jobs", 1u64).await?;
    /// bus.close().await;
    /// let stats = sub.stats();
    /// assert_eq!((stats.handled, stats.errors, stats.retries), (1, 1, 1));
    /// # Ok(()) }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Publish a message the handler gave up on (after the last attempt of the
    /// [retry policy](Self::retry), or after its one call without one) to `topic`, as a
    /// [`DeadLetter`] carrying a copy of the message, the error text, the topic, the
    /// subscriber's name and the number of attempts.
    ///
    /// The handle is resolved by the caller (`bus.topic::<DeadLetter<T>>("name")?`), so a
    /// name already used for another type is an `Err` there; subscribing a handler of
    /// another message type than `T` with it is [`Error::TypeMismatch`](crate::Error).
    /// The dead letter is a copy because the handler only ever saw `&T` in place: hence
    /// `T: Clone` (a topic of `Arc<M>` makes the copy a reference count). Making it
    /// allocates (the copy, the error text and the subscriber's name).
    ///
    /// The dead letter is published with `publish`, so it waits for room in the dead-letter
    /// topic (the subscriber takes no other message meanwhile), and is accepted while the
    /// bus drains (as any handler's publish). One that cannot be published (a
    /// [strict](crate::BusBuilder::strict) bus and no subscriber on the dead-letter topic, a
    /// closed bus, a panicking `clone`) is logged at `error` and counted in
    /// [`SubscriberStats::dead_letter_failures`](crate::SubscriberStats::dead_letter_failures);
    /// it never panics. Each one published counts in
    /// [`SubscriberStats::dead_lettered`](crate::SubscriberStats::dead_lettered).
    ///
    /// # Examples
    ///
    /// See [`DeadLetter`].
    pub fn dead_letter<T: Clone + Send + Sync + 'static>(
        mut self,
        topic: &Topic<DeadLetter<T>>,
    ) -> Self {
        self.dead_letter = Some(DeadLetterTo::new(topic));
        self
    }
}

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
    pub(crate) attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
    multiplier: f64,
    jitter: bool,
    pub(crate) panics: bool,
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
    pub(crate) fn sleep_for(&self, retry: u32, random: u64) -> Duration {
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
    pub(crate) name: Arc<str>,
    /// `type_name::<DeadLetter<T>>()`.
    pub(crate) carries: &'static str,
    pub(crate) sink: Arc<dyn Any + Send + Sync>,
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
pub(crate) struct Sink<T> {
    pub(crate) topic: Topic<DeadLetter<T>>,
    pub(crate) clone: fn(&T) -> T,
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
