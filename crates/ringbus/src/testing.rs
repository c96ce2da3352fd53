//! Helpers for testing a service that uses ringbus: [`Recorder`], and
//! [`Bus::wait_idle`](crate::Bus::wait_idle).
//!
//! Nothing here is behind a feature: the module depends on nothing the bus does not already
//! use, and costs nothing unless it is used (only [`Recorder`] allocates, per message it
//! records). Use it from `#[cfg(test)]` code and `tests/` alike.
//!
//! # How to test a service that uses ringbus
//!
//! Build the bus your service builds, register its handlers, and put a [`Recorder`] on each
//! topic whose output you check. Publish what the test is about; then either wait for a
//! count with [`Recorder::wait_for`], or wait until the bus is idle with
//! [`Bus::wait_idle`](crate::Bus::wait_idle) and assert on everything at once, including
//! that nothing else came out. No sleeps: `wait_idle` returns once every message published
//! so far was handled, chains included, and `wait_for` as soon as the count is reached.
//!
//! ```
//! use ringbus::testing::Recorder;
//! use ringbus::{subscriber, Bus};
//!
//! // The service under test: bills orders of 100 cents and more, and publishes a receipt.
//! #[derive(Debug)]
//! struct Order { id: u64, cents: u64 }
//! #[derive(Debug, Clone, PartialEq)]
//! struct Receipt { order: u64 }
//!
//! #[subscriber("orders", publish("receipts"))]
//! async fn bill(order: &Order) -> Result<Receipt, String> {
//!     if order.cents < 100 {
//!         return Err(format!("order {} is below the minimum", order.id));
//!     }
//!     Ok(Receipt { order: order.id })
//! }
//!
//! // The test (in a real crate: `#[tokio::test] async fn bills_orders_over_the_minimum()`).
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = Bus::new();
//! bus.register(bill)?;
//! let receipts = Recorder::<Receipt>::new(&bus, "receipts")?;
//!
//! bus.publish("orders", Order { id: 1, cents: 500 }).await?;
//! bus.publish("orders", Order { id: 2, cents: 50 }).await?; // refused by the handler
//! bus.publish("orders", Order { id: 3, cents: 100 }).await?;
//!
//! bus.wait_idle().await; // every order handled, and every receipt it produced
//! receipts.assert_recorded(&[Receipt { order: 1 }, Receipt { order: 3 }]);
//! let stats = bus.stats();
//! let orders = stats.topics.iter().find(|t| t.name == "orders").expect("the topic");
//! assert_eq!(orders.subscribers[0].errors, 1); // order 2, logged and counted
//! bus.close().await;
//! # Ok(()) }
//! ```
//!
//! A NATS-linked service is tested the same way on its local bus: publish into the topics its
//! link would import, and record the topics it would export. To test its link as well, with
//! no `nats-server`, connect it to `ringbus_nats::testing::MemoryNats` (ringbus-nats's feature
//! `testing`), a NATS core server inside the test process (its docs show a whole service
//! tested that way).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::bus::Bus;
use crate::error::Error;
use crate::options::SubscribeOptions;
use crate::subscriber::Subscription;
use crate::topic::Topic;

/// How long [`Recorder::wait_for`] waits by default before it fails the test.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// A subscriber that keeps a clone of every message its topic saw, in order, for tests.
///
/// It is an ordinary subscriber (named `recorder:<topic>` in stats): it sees what is
/// published after it was made, and gates publishers like any other (it never makes them
/// wait for long: recording is a clone and a push). It allocates per message it records.
///
/// # Examples
///
/// ```
/// use ringbus::testing::Recorder;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bus = ringbus::Bus::new();
/// let seen = Recorder::<u32>::new(&bus, "jobs")?;
/// tokio::spawn({
///     let bus = bus.clone();
///     async move {
///         for job in 1..=3u32 {
///             bus.publish("jobs", job).await.expect("open");
///         }
///     }
/// });
/// assert_eq!(seen.wait_for(3).await, [1, 2, 3]);
/// seen.assert_recorded(&[1, 2, 3]);
/// # Ok(()) }
/// ```
pub struct Recorder<T> {
    shared: Arc<Recorded<T>>,
    subscription: Subscription,
    timeout: Option<Duration>,
}

/// What the recorder's handler shares with it.
struct Recorded<T> {
    messages: Mutex<Vec<T>>,
    /// Notified (`notify_waiters`) after each message is pushed.
    pushed: Notify,
}

impl<T> Recorded<T> {
    fn messages(&self) -> MutexGuard<'_, Vec<T>> {
        // Only pushes and takes: a panic (in a `clone`) cannot leave the list inconsistent.
        self.messages.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Clone + Send + Sync + 'static> Recorder<T> {
    /// Subscribes a recorder to `topic` (made if it does not exist).
    ///
    /// # Errors
    ///
    /// As [`Bus::subscribe`]: no runtime, a type mismatch, a closed bus.
    pub fn new(bus: &Bus, topic: &str) -> Result<Self, Error> {
        Self::on(&bus.topic::<T>(topic)?)
    }

    /// Subscribes a recorder to `topic`.
    ///
    /// # Errors
    ///
    /// As [`Topic::subscribe`].
    pub fn on(topic: &Topic<T>) -> Result<Self, Error> {
        let shared = Arc::new(Recorded {
            messages: Mutex::new(Vec::new()),
            pushed: Notify::new(),
        });
        let options = SubscribeOptions::new().name(format!("recorder:{}", topic.name()));
        let subscription = topic.subscribe(options, {
            let shared = shared.clone();
            move |msg: &T| {
                shared.messages().push(msg.clone());
                shared.pushed.notify_waiters();
                std::future::ready(())
            }
        })?;
        Ok(Self {
            shared,
            subscription,
            timeout: Some(DEFAULT_WAIT),
        })
    }

    /// How long [`wait_for`](Self::wait_for) waits before it fails the test
    /// ([`DEFAULT_WAIT`] unless set); `None` waits for as long as it takes.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits until the recorder holds at least `n` messages and returns a copy of all it
    /// holds (in the order they were published).
    ///
    /// # Panics
    ///
    /// If fewer than `n` came within the [`timeout`](Self::timeout) (10 s by default), with
    /// the topic and the count in the message: a test waiting for what never comes fails
    /// instead of hanging. The timeout runs on tokio's time driver: on a runtime built
    /// without one this panics as tokio's timers do (set [`timeout(None)`](Self::timeout)
    /// there); where no runtime is reachable it waits without a timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn wait_for(&self, n: usize) -> Vec<T> {
        let wait = self.wait_until(n);
        match self.timeout {
            Some(timeout) if crate::time::runtime_reachable() => {
                match tokio::time::timeout(timeout, wait).await {
                    Ok(messages) => messages,
                    Err(_) => panic!(
                        "Recorder on topic \"{}\": waited {timeout:?} for {n} messages, got {}",
                        self.subscription.topic(),
                        self.len()
                    ),
                }
            }
            _ => wait.await,
        }
    }

    async fn wait_until(&self, n: usize) -> Vec<T> {
        loop {
            // Enabled before looking: a push after the look wakes it.
            let pushed = self.shared.pushed.notified();
            let mut pushed = std::pin::pin!(pushed);
            pushed.as_mut().enable();
            {
                let messages = self.shared.messages();
                if messages.len() >= n {
                    return messages.clone();
                }
            }
            pushed.await;
        }
    }

    /// A copy of every message recorded so far.
    pub fn recorded(&self) -> Vec<T> {
        self.shared.messages().clone()
    }

    /// Takes every message recorded so far, leaving the recorder empty (it goes on
    /// recording).
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.shared.messages())
    }

    /// Asserts that the recorder holds exactly `expected`, in order.
    ///
    /// Call it after [`Bus::wait_idle`] (or [`wait_for`](Self::wait_for)) so that every
    /// message meant to arrive has; `assert_recorded(&[])` then checks that nothing did.
    ///
    /// # Panics
    ///
    /// If it holds anything else, with both lists in the message.
    #[track_caller]
    pub fn assert_recorded(&self, expected: &[T])
    where
        T: PartialEq + fmt::Debug,
    {
        let recorded = self.shared.messages();
        assert!(
            recorded.as_slice() == expected,
            "Recorder on topic \"{}\": recorded {:?}, expected {:?}",
            self.subscription.topic(),
            recorded.as_slice(),
            expected
        );
    }

    /// Messages recorded so far.
    pub fn len(&self) -> usize {
        self.shared.messages().len()
    }

    /// True when nothing was recorded (or everything was taken).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The recorder's subscription (its id, name and stats).
    pub fn subscription(&self) -> &Subscription {
        &self.subscription
    }

    /// Stops recording (as [`Subscription::unsubscribe`]: what was in the topic at the call
    /// is recorded first) and returns everything recorded.
    ///
    /// # Cancel safety
    ///
    /// As [`Subscription::unsubscribe`]; dropped before it completes, the recorded messages
    /// are dropped with it.
    pub async fn unsubscribe(self) -> Vec<T> {
        let Self {
            shared,
            subscription,
            ..
        } = self;
        subscription.unsubscribe().await;
        std::mem::take(&mut *shared.messages())
    }
}

impl<T> fmt::Debug for Recorder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("topic", &self.subscription.topic())
            .field("recorded", &self.shared.messages().len())
            .field("timeout", &self.timeout)
            .finish()
    }
}
