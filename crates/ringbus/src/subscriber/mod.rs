//! Subscribers: how one is made ([`subscribe`] and its kin: checks, a ring reader, a tokio
//! task), the task's supervision ([`Supervised`]), and [`Subscription`], the handle that
//! unsubscribes. The task's loop is in `task`, the handler spans in `span`; the state a
//! subscriber shares with the rest of the bus is `shared::SubShared`.
//!
//! Each subscriber is one tokio task owning one ring `Reader`: it waits for the next
//! message, calls the handler with `&T` read in place, releases it, and repeats.
//!
//! # Stopping a task that may be inside a handler
//!
//! A bounded close that runs out of time aborts the tasks left, but tokio can only drop a
//! task between two polls: a handler that does not yield keeps its task running. So that
//! the close reports what is true, the task's future is wrapped in [`Supervised`], which
//! keeps `polls` at `POLLING` for the length of each poll. `SubShared::stop` (the close)
//! turns `IDLE` into `STOPPED` with a compare-and-swap: won, no poll is under way and none
//! will run the task's code again (a stopped task's next poll, which the abort schedules,
//! ends it without running its code), so it handles nothing more; lost, a poll is under way
//! (a handler call that has not yielded, or the loop between two messages), and the task is
//! reported running: it stops after that handler call (`stop_at` is lowered to 0) or at the
//! abort.

mod span;
mod task;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ringbus_core::Reader;
use tokio::task::JoinHandle;

pub(crate) use task::poll_next;

use crate::error::Error;
use crate::handler::{panic_message, BatchHandler, Handler};
use crate::observe;
use crate::options::SubscribeOptions;
use crate::shared::{current, BusState, Current, Polling, SubShared, IDLE, POLLING};
use crate::stats::SubscriberStats;
use crate::topic::{AnyTopic, Topic, TopicInner};

/// The stall timeout a subscriber with `options` gets on the bus `state`; `NoRuntime` where
/// no runtime is reachable to run the subscriber.
///
/// # Panics
///
/// With a stall timeout or a retry policy (whose backoff sleeps), on a runtime built
/// without its time driver: tokio's panic, raised here at subscribe rather than later in
/// the subscriber's task (see `time`).
pub(crate) fn runnable(
    state: &BusState,
    options: &SubscribeOptions,
) -> Result<Option<Duration>, Error> {
    if !crate::time::runtime_reachable() {
        return Err(Error::NoRuntime);
    }
    let timeout = options.stall_timeout.or(state.stall_timeout);
    if timeout.is_some() || options.retry.is_some() {
        crate::time::require_driver();
    }
    Ok(timeout)
}

/// Subscribes `handler` to `topic`, one message a call: wrapped in a retry policy or a
/// dead-letter topic if `options` has either (see `retry`), else run as it is.
pub(crate) fn subscribe<T, H>(
    topic: &Arc<TopicInner<T>>,
    mut options: SubscribeOptions,
    handler: H,
) -> Result<Subscription, Error>
where
    T: Send + Sync + 'static,
    H: Handler<T>,
{
    // Checked before `prepare` takes the retry policy out of `options`: its backoff sleeps
    // on tokio's timer (`spawn` checks again, for the stall timeout, on every route).
    runnable(&topic.state, &options)?;
    if let Some(retry) = crate::retry::prepare::<T>(&mut options)? {
        return spawn(topic, options, move |reader, sub| {
            task::run(reader, retry.wrap(handler, sub.clone()), sub)
        });
    }
    spawn(topic, options, move |reader, sub| {
        task::run(reader, handler, sub)
    })
}

/// Subscribes the handler `make` builds from the subscriber's shared state (for wrappers
/// that count in it, such as a replier: see `reply`). No retry wrapper: the caller refuses
/// those options.
pub(crate) fn subscribe_made<T, H, M>(
    topic: &Arc<TopicInner<T>>,
    options: SubscribeOptions,
    make: M,
) -> Result<Subscription, Error>
where
    T: Send + Sync + 'static,
    H: Handler<T>,
    M: FnOnce(&Arc<SubShared>) -> H,
{
    spawn(topic, options, move |reader, sub| {
        let handler = make(&sub);
        task::run(reader, handler, sub)
    })
}

/// Refuses the options a batch subscriber cannot honour: a retry policy, a dead-letter topic.
pub(crate) fn batch_options(options: &SubscribeOptions) -> Result<(), Error> {
    if options.retry.is_some() || options.dead_letter.is_some() {
        return Err(Error::Unsupported(
            "batch subscribers do not retry: a retry policy or a dead-letter topic is for \
             subscribers that handle one message at a time",
        ));
    }
    Ok(())
}

/// Subscribes a batch handler to `topic`: every message one look finds, in one call.
pub(crate) fn subscribe_batch<T, H>(
    topic: &Arc<TopicInner<T>>,
    options: SubscribeOptions,
    handler: H,
) -> Result<Subscription, Error>
where
    T: Send + Sync + 'static,
    H: BatchHandler<T>,
{
    batch_options(&options)?;
    spawn(topic, options, move |reader, sub| {
        task::run_batch(reader, handler, sub)
    })
}

/// Joins a subscriber to `topic` and spawns its task, `task(reader, sub)`, supervised.
fn spawn<T, F, Fut>(
    topic: &Arc<TopicInner<T>>,
    options: SubscribeOptions,
    task: F,
) -> Result<Subscription, Error>
where
    T: Send + Sync + 'static,
    F: FnOnce(Reader<T>, Arc<SubShared>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let stall_timeout = runnable(&topic.state, &options)?;
    if let Some(requested) = options.capacity {
        if requested != topic.capacity {
            return Err(Error::CapacityMismatch {
                topic: topic.name.clone(),
                capacity: topic.capacity,
                requested,
            });
        }
    }
    let (reader, sub) = topic.join(options.name, stall_timeout, false)?;
    let handle = runtime.spawn(Supervised {
        sub: sub.clone(),
        task: task(reader, sub.clone()),
    });
    let _ = sub.abort.set(handle.abort_handle());
    let (name, started) = (topic.name.clone(), sub.clone());
    observe::emit(move || {
        tracing::debug!(topic = %name, subscriber = %started.name, "ringbus subscriber started");
    });
    Ok(Subscription(Kind::Topic {
        sub,
        topic: topic.clone(),
        task: handle,
    }))
}

impl<T: Send + Sync + 'static> Topic<T> {
    /// As [`Bus::subscribe_with`](crate::Bus::subscribe_with), without the lookup.
    pub fn subscribe<H: Handler<T>>(
        &self,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error> {
        subscribe(&self.inner, options, handler)
    }
}

pin_project_lite::pin_project! {
    /// A subscriber's task future, its polls tracked in `SubShared::polls` (see the module
    /// docs). A future of its own because it runs code around every poll of the task: the
    /// poll-state exchange, `CURRENT`, and the panic guard.
    struct Supervised<F> {
        sub: Arc<SubShared>,
        #[pin]
        task: F,
    }
}

impl<F: Future<Output = ()>> Future for Supervised<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let this = self.project();
        let polls = &this.sub.polls;
        // Acquire/Release: only the exclusion with `SubShared::stop` matters here.
        if polls
            .compare_exchange(IDLE, POLLING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Stopped: end here, without running the task's code (dropping it ends the
            // subscriber). It was aborted as well, which schedules this poll.
            return Poll::Ready(());
        }
        let polling = Polling::enter(Current {
            id: this.sub.id,
            bus: Arc::as_ptr(&this.sub.bus) as usize,
        });
        // The handler's calls catch their own panics (guarantee 6); this one catches the
        // rest: a tracing layer or a metrics recorder that panics while the task runs.
        // Unwind safe as asserted: a task whose poll unwound is never polled again.
        let poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| this.task.poll(cx)));
        drop(polling);
        // Release: pairs with the compare-and-swap in `SubShared::stop`.
        polls.store(IDLE, Ordering::Release);
        poll.unwrap_or_else(|panic| {
            // The task cannot go on from a poll that unwound: it ends here. Its `Running` was
            // dropped by the unwinding and counted what it left (then the crash is recorded
            // here), or is dropped with the future and records it then.
            this.sub.crash.get_or_init(|| panic_message(&*panic).into());
            if this.sub.crashed().is_some() {
                // `Running` was dropped unwinding: its metrics are ended here.
                this.sub.log_crash(true);
            }
            Poll::Ready(())
        })
    }
}

/// A running subscriber: of one topic, or of every topic a pattern matches
/// ([`Bus::subscribe_pattern`](crate::Bus::subscribe_pattern)).
///
/// Dropping it leaves the subscriber running until the bus closes (as dropping a tokio
/// `JoinHandle` leaves its task running). [`unsubscribe`](Self::unsubscribe) stops it.
pub struct Subscription(Kind);

enum Kind {
    Topic {
        sub: Arc<SubShared>,
        topic: Arc<dyn AnyTopic>,
        task: JoinHandle<()>,
    },
    /// One subscriber per matched topic (see `pattern`).
    Pattern(Arc<dyn Followers>),
}

/// A pattern subscription's followers, one subscriber per matched topic, as its
/// [`Subscription`] sees them (implemented in `pattern`, a layer above).
pub(crate) trait Followers: Send + Sync + fmt::Debug {
    fn id(&self) -> u64;
    fn name(&self) -> &str;
    fn pattern(&self) -> &str;
    /// The topics followed, in the order they were met.
    fn topics(&self) -> Vec<String>;
    /// The followers' counters, summed (flags: any follower's).
    fn stats(&self) -> SubscriberStats;
    /// True once no topic can be followed any more and every follower has ended.
    fn is_finished(&self) -> bool;
    /// Stops following new topics and cuts every follower (`Subscription::cut`); returns
    /// them, to wait for.
    fn leave(&self) -> Vec<Subscription>;
}

impl Subscription {
    pub(crate) fn pattern(shared: Arc<dyn Followers>) -> Self {
        Self(Kind::Pattern(shared))
    }

    /// The subscriber's id, unique within the process.
    pub fn id(&self) -> u64 {
        match &self.0 {
            Kind::Topic { sub, .. } => sub.id,
            Kind::Pattern(p) => p.id(),
        }
    }

    /// The subscriber's name, as in logs and stats.
    pub fn name(&self) -> &str {
        match &self.0 {
            Kind::Topic { sub, .. } => &sub.name,
            Kind::Pattern(p) => p.name(),
        }
    }

    /// The topic, or a pattern subscription's pattern.
    pub fn topic(&self) -> &str {
        match &self.0 {
            Kind::Topic { sub, .. } => &sub.topic,
            Kind::Pattern(p) => p.pattern(),
        }
    }

    /// The topics it handles: its topic, or every topic its pattern has matched so far, in
    /// the order they were met.
    pub fn topics(&self) -> Vec<String> {
        match &self.0 {
            Kind::Topic { sub, .. } => vec![sub.topic.to_string()],
            Kind::Pattern(p) => p.topics(),
        }
    }

    /// A snapshot of this subscriber's counters; a pattern subscription's are the sums over
    /// its topics (and a flag is set if it is for any of them).
    pub fn stats(&self) -> SubscriberStats {
        match &self.0 {
            Kind::Topic { sub, topic, .. } => sub.stats(topic.published()),
            Kind::Pattern(p) => p.stats(),
        }
    }

    /// True once the subscriber's task has ended (unsubscribed, closed, or detached), or can
    /// run no handler again (stopped by a bounded close). A pattern subscription: once it
    /// can meet no new topic (unsubscribed, or the bus closing) and every topic's task has.
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            Kind::Topic { sub, .. } => sub.ended(),
            Kind::Pattern(p) => p.is_finished(),
        }
    }

    /// Stops the subscriber: it handles every message that was in its topic when this was
    /// called (every publish that had returned `Ok` by then), then leaves the topic and its
    /// task ends. A message that lands after the call is not handled by it, even if its
    /// publish began before (one waiting for room, say): the cut is the topic's count at the
    /// call. A publisher waiting for room because of this subscriber is released as it works
    /// through (and then leaves) its queue.
    ///
    /// A pattern subscription stops following new topics at the call, and cuts each of its
    /// topics as above.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the request is made when this is first polled; dropping the future only
    /// stops waiting for the tasks to finish.
    ///
    /// Called from inside this subscriber's own handler, it makes the request and returns
    /// without waiting for that handler's task (which cannot end while it runs the handler
    /// that waits); for a pattern, without waiting for any of its topics' tasks.
    pub async fn unsubscribe(self) {
        match self.0 {
            Kind::Topic { sub, topic, task } => {
                sub.cut_at(topic.published());
                join(&sub, task).await;
            }
            Kind::Pattern(p) => {
                let followers = p.leave();
                // From inside one of its own handlers: waiting for the other followers could
                // wait for one that waits for room this handler's topic makes.
                let inside = current().is_some_and(|current| {
                    followers
                        .iter()
                        .any(|f| f.shared().is_some_and(|s| s.id == current.id))
                });
                if inside {
                    return;
                }
                for follower in followers {
                    if let Kind::Topic { sub, task, .. } = follower.0 {
                        join(&sub, task).await;
                    }
                }
            }
        }
    }

    /// The cut `unsubscribe` makes, without waiting (a pattern's followers, all cut before any
    /// is waited for).
    pub(crate) fn cut(&self) {
        if let Kind::Topic { sub, topic, .. } = &self.0 {
            sub.cut_at(topic.published());
        }
    }

    /// A one-topic subscriber's shared state (`None` for a pattern).
    pub(crate) fn shared(&self) -> Option<&Arc<SubShared>> {
        match &self.0 {
            Kind::Topic { sub, .. } => Some(sub),
            Kind::Pattern(_) => None,
        }
    }
}

/// Waits for the task of the subscriber `sub` to end, unless it is the caller's own.
async fn join(sub: &SubShared, task: JoinHandle<()>) {
    if current().is_some_and(|current| current.id == sub.id) {
        return;
    }
    // Only the task's own panic would make this an error, and the task catches handler
    // panics; an abort (bus close with a deadline) is an end like any other.
    let _ = task.await;
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Topic { sub, .. } => f
                .debug_struct("Subscription")
                .field("id", &sub.id)
                .field("name", &&*sub.name)
                .field("topic", &&*sub.topic)
                .finish(),
            Kind::Pattern(p) => p.fmt(f),
        }
    }
}
