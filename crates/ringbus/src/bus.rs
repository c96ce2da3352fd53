//! [`Bus`]: the topic registry (sharded, lock-free lookups: see `map`), and the bus-wide
//! operations (publish by name, subscribe, close, stats).
//!
//! A thread-local decides behaviour here: whether the caller is one of this bus's handlers
//! (`BusState::in_own_handler`, from `shared::current`, set around each poll of a subscriber
//! task). A handler may publish while its bus drains, and its `close` starts the drain without
//! waiting for it; any other caller (another bus's handler too) is refused, or waits.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::error::{Error, PublishError, RemoveError, TypeMismatch, Unpublished, Unresolved};
use crate::handler::{BatchHandler, Handler, TopicBatchHandler, TopicHandler};
use crate::map::{Found, Kept, TopicMap};
use crate::observe;
use crate::options::SubscribeOptions;
use crate::pattern::{self, Patterns};
use crate::progress::Progress;
use crate::shared::{BusState, SubShared};
use crate::state::{State, States};
use crate::stats::{BusStats, CloseReport, Unhandled};
use crate::subscriber::{self, Subscription};
use crate::sweep::{self, IdleMark, Sweep};
use crate::topic::{AnyTopic, PublishTo, Resolved, Topic, TopicInner};

/// A registered topic: the typed object (for downcasting) and its type-erased face.
pub(crate) struct Entry {
    pub(crate) typed: Arc<dyn Any + Send + Sync>,
    erased: Arc<dyn AnyTopic>,
    /// What the idle policy's sweeps have seen of it.
    idle: IdleMark,
}

struct Inner {
    state: Arc<BusState>,
    /// Every topic, by name; lookups take no lock (see `map`).
    topics: TopicMap<Entry>,
    /// Values for `State<S>` handler parameters.
    states: States,
    /// The pattern subscriptions, matched against each topic as it is made.
    patterns: Arc<Patterns>,
    /// The idle policy, if the builder set one.
    sweep: Option<Sweep>,
}

/// The message bus: named topics, each carrying one message type, each with its own ring and
/// its subscribers running as tokio tasks.
///
/// `Bus` is `Clone` (an `Arc` inside): clone it into every task that publishes.
///
/// # Guarantees
///
/// 1. **Order.** Each subscriber handles a topic's messages in the order their publishes
///    completed.
/// 2. **No loss.** A message whose publish returned `Ok` is handled by every subscriber that
///    was subscribed when the publish began, across `close`, and across `unsubscribe` for
///    every message that was in the topic when `unsubscribe` was called: a subscriber that
///    unsubscribes handles exactly what was published to its topic before the call (every
///    publish that had returned `Ok` by then), and nothing that lands after it, even from a
///    publish that began before (say, one waiting for room).
///    One published when the topic had no subscriber reaches nobody: it is counted in
///    [`TopicStats::unrouted`](crate::TopicStats::unrouted) and logged once per topic at
///    `warn`, or refused with the message back on a [strict](BusBuilder::strict) bus.
/// 3. **All or nothing.** A failed, cancelled or dropped publish reached no subscriber; an
///    error gives the message back.
/// 4. **Backpressure.** `publish` waits while the slowest subscriber's queue is full;
///    `try_publish` returns `Full(msg)` then, and only then. A subscriber with a
///    [stall timeout](SubscribeOptions::stall_timeout) is detached instead of holding
///    publishers forever; no handler ever sees a slot being overwritten.
/// 5. **Close drains.** See [`close`](Self::close).
/// 6. **Failures stay local.** A handler's `Err` or panic is logged and counted; the
///    subscriber goes on (after retrying the message first, if it has a
///    [retry policy](SubscribeOptions::retry), and publishing it to its
///    [dead-letter topic](SubscribeOptions::dead_letter), if it has one). A panic is reported
///    twice: first Rust's panic message, by the application's panic hook as any panic is
///    (with its backtrace if `RUST_BACKTRACE` is set; the bus installs no hook), then the
///    bus's `error` event naming the topic and the subscriber.
/// 7. **Types are checked.** A topic carries one type; any other is an `Err` naming the topic
///    and both types.
/// 8. **Subscribe at any time.** A subscriber sees the messages published after `subscribe`
///    returned.
/// 9. **No runtime, no panic.** Subscribing where no tokio runtime is reachable is
///    [`Error::NoRuntime`]. Publishing and [`close`](Self::close) need no runtime; a publish
///    whose [`Context`] has a deadline does (the deadline is timed on tokio's time driver):
///    without one it is [`PublishError::NoRuntime`], the message given back.
///    Timers ([`Context`] deadlines, [stall timeouts](SubscribeOptions::stall_timeout),
///    [retry backoff](crate::RetryPolicy), a [bounded close](Self::close_with)'s grace) run on
///    tokio's time driver, as `tokio::time` does: on a runtime built without it they panic as
///    tokio's timers do (tokio cannot be asked whether a runtime has one), at subscribe for a
///    stall timeout or a retry policy. The bus changes no process-wide state: no panic hook,
///    no global `tracing` subscriber, no helper thread.
/// 10. **Zero allocations** per publish and per delivery in the steady state.
/// 11. **A good tokio neighbour.** Every publish route and every subscriber's receive loop
///     spends tokio's cooperative budget (`tokio::task::coop`), as tokio's own channels do:
///     a publisher that always finds room and a subscriber that always finds a message let
///     the other tasks of their worker run after tokio's budget of 128 operations. A batch,
///     or a subscriber's run of one-message calls, spends one unit per 8 messages, so never
///     more than 1,024 messages pass without a yield. A publisher yields holding nothing
///     (`try_publish`, which cannot yield, spends nothing).
///
/// # Examples
///
/// ```
/// use ringbus::Bus;
///
/// #[derive(Debug)]
/// struct Order { id: u64 }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ringbus::Error> {
/// let bus = Bus::builder().capacity(1024).build();
/// let _sub = bus.subscribe("orders", |order: &Order| {
///     let id = order.id;
///     async move { println!("order {id}") }
/// })?;
/// bus.publish("orders", Order { id: 1 }).await?;
/// bus.close().await; // handles order 1 before returning
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

/// Configures a [`Bus`].
#[derive(Clone)]
#[must_use = "a BusBuilder does nothing until `.build()` makes the bus"]
pub struct BusBuilder {
    states: States,
    capacity: usize,
    shards: usize,
    spin: u32,
    max_subscribers: usize,
    stall_timeout: Option<Duration>,
    strict: bool,
    removable: bool,
    remove_idle: Option<Duration>,
}

impl Default for BusBuilder {
    fn default() -> Self {
        Self {
            states: States::default(),
            capacity: 1024,
            shards: 64,
            spin: 0,
            max_subscribers: 65_536,
            stall_timeout: None,
            strict: false,
            removable: false,
            remove_idle: None,
        }
    }
}

impl BusBuilder {
    /// The largest topic capacity (2^30 messages): [`capacity`](Self::capacity) and
    /// [`SubscribeOptions::capacity`](crate::SubscribeOptions::capacity) refuse more. A topic
    /// allocates its capacity's slots when its first subscriber joins, and is made (at the
    /// first publish or subscribe naming it) only if the allocator would give them then. The
    /// limit is on messages, not bytes: a ring the process cannot have (2^30 messages of 64
    /// bytes ask for 64 GiB) is an `Err` of that publish or subscribe, or of the first
    /// subscribe should the allocator refuse only then: [`RingTooLarge`](crate::RingTooLarge),
    /// which names the topic, its capacity and the bytes asked for. A ring's empty slots are
    /// not written: memory is used as the ring fills.
    pub const MAX_CAPACITY: usize = crate::options::MAX_CAPACITY;

    /// Messages each topic holds before publishers wait (rounded up to a power of two;
    /// default 1024).
    ///
    /// 0 makes topics unbuffered: a publish waits for room (cancellable, all or nothing, as
    /// on any topic), puts the message in, then waits until every subscriber has handled it.
    /// Once the message is in it is published: that second wait ends early only if the bus
    /// closes, a `Context` no longer applies to it, and dropping the future there does not
    /// take the message back (every subscriber still handles it, exactly once).
    ///
    /// A topic whose ring (its capacity times the size of its message) cannot be allocated
    /// is an `Err` of the publish or subscribe that would make it, or of its first
    /// subscribe: see [`MAX_CAPACITY`](Self::MAX_CAPACITY).
    ///
    /// # Panics
    ///
    /// If `capacity` is larger than [`MAX_CAPACITY`](Self::MAX_CAPACITY): here, where it is
    /// set, rather than in the first publish or subscribe (as tokio's channel constructors
    /// refuse a capacity they cannot hold).
    #[track_caller]
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = crate::options::checked_capacity(capacity);
        self
    }

    /// Shards of the topic registry (default 64), rounded up to a power of two, at most
    /// 65,536. Lookups take no lock whatever the number; creating a topic locks its shard.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.max(1);
        self
    }

    /// Polls a waiting subscriber or publisher makes before parking (default 0: it parks at
    /// once, as tokio's own channels do). A task that spins holds up the other tasks of its
    /// worker, and a subscriber woken by a publisher runs on that publisher's worker (tokio's
    /// LIFO slot), so what it spins for is often the very task waiting behind it: spinning
    /// slows unbuffered publishing down and helps a busy fan-out a little
    /// (`docs/notes/latency-2026-12.md` has the side-by-side run). Worth trying with more cores
    /// than busy tasks. A subscriber spins only while spinning pays off: after 4 spins in a row
    /// that ended in a park anyway it parks at once, spinning again before one park in 16
    /// to notice when messages come close together again.
    pub fn spin(mut self, iterations: u32) -> Self {
        self.spin = iterations;
        self
    }

    /// The most subscribers one topic admits (default 65,536).
    pub fn max_subscribers(mut self, max: usize) -> Self {
        self.max_subscribers = max;
        self
    }

    /// A default stall timeout for every subscriber (see
    /// [`SubscribeOptions::stall_timeout`], which says what it cannot detach: a handler that
    /// blocks its thread). Off by default: slow subscribers make publishers wait. It is timed
    /// on tokio's time driver: subscribing on a runtime built without one then panics, as
    /// tokio's timers do.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout);
        self
    }

    /// Strict routing: a publish to a topic that has no subscriber is refused with
    /// [`PublishError::NoSubscriber`], which names the topic and gives the message back,
    /// instead of being accepted for nobody. Off by default: such a message is accepted,
    /// counted in the topic's [`unrouted`](crate::TopicStats::unrouted) and logged once per
    /// topic at `warn` level (the event's target is `ringbus::unrouted`).
    ///
    /// Strict mode catches a misspelled topic name at the first publish. It suits buses whose
    /// subscribers are registered before anything is published; a bus whose subscribers come
    /// and go, where a message for nobody is normal, keeps the default and may silence the
    /// warning by filtering out its target (`RUST_LOG=warn,ringbus::unrouted=off` with
    /// `tracing_subscriber`'s `EnvFilter`).
    ///
    /// ```
    /// use ringbus::{Bus, PublishError};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::builder().strict(true).build();
    /// let _orders = bus.subscribe("orders", async |id: &u64| println!("order {id}"))?;
    /// bus.publish("orders", 1u64).await?;
    /// match bus.publish("ordrs", 2u64).await {
    ///     Err(PublishError::NoSubscriber(back, topic)) => {
    ///         assert_eq!((back, &*topic), (2, "ordrs")); // the typo, caught
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # bus.close().await;
    /// # Ok(()) }
    /// ```
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Lets topics be removed with [`Bus::remove`], so that a bus whose topics come and go
    /// (one per order, per user, per session) gives their memory back. Off by default.
    ///
    /// The price is on lookups by name (`publish`, `try_publish`, `publish_batch` by name,
    /// `subscribe`, `topic`): each marks itself on a counter of its registry shard while it
    /// looks (an atomic add, a fence and a subtract) and clones the topic's `Arc` (two atomic
    /// operations on a line every publisher of the topic shares). Publishing through a
    /// [`Topic`] handle costs the same either way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = ringbus::Bus::builder().removable_topics().build();
    /// bus.publish("session.42", 1u64).await?; // made, and unrouted: no subscriber
    /// bus.remove("session.42")?;
    /// assert!(bus.stats().topics.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn removable_topics(mut self) -> Self {
        self.removable = true;
        self
    }

    /// Removes topics that have been idle for `after`, as the bus's sweeps saw them: a topic
    /// that one sweep found with no holder (see [`Bus::remove`]) and a sweep at least `after`
    /// later found still without one and with nothing published since. Implies
    /// [`removable_topics`](Self::removable_topics). Off by default. (A holder that came and
    /// went between two sweeps without publishing is not seen; a topic is never removed while
    /// held.)
    ///
    /// The bus has no thread of its own and the publish path pays nothing for this: each time
    /// a topic is made, the bus looks at the next 32 slots of its registry (about 16 topics, 32
    /// at most), so an idle topic is removed once its time is up and topics keep being made,
    /// as they do on a bus whose topics come and go. [`Bus::remove_unused`] removes every
    /// topic nothing holds, at once.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::PublishError<u64>> {
    /// let bus = ringbus::Bus::builder().remove_idle(Duration::from_secs(60)).build();
    /// for session in 0..1000u64 {
    ///     // Each topic is removed a minute after its last publish, as later ones are made.
    ///     bus.publish(&format!("session.{session}"), session).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remove_idle(mut self, after: Duration) -> Self {
        self.removable = true;
        self.remove_idle = Some(after);
        self
    }

    /// Registers a shared value for handlers that take a [`State<S>`](crate::State) parameter
    /// (one value per type; a second call for the same type replaces the first).
    pub fn state<S: Send + Sync + 'static>(mut self, value: S) -> Self {
        self.states.insert(value);
        self
    }

    /// Builds the bus. Needs no runtime (subscribing does).
    pub fn build(self) -> Bus {
        let state = Arc::new(BusState {
            closed: AtomicBool::new(false),
            closing: CancellationToken::new(),
            progress: Progress::new(),
            capacity: self.capacity,
            spin: self.spin,
            max_subscribers: self.max_subscribers,
            stall_timeout: self.stall_timeout,
            strict: self.strict,
            crashed: std::sync::Mutex::new(Vec::new()),
        });
        let topics = TopicMap::new(self.shards, self.removable);
        Bus {
            inner: Arc::new(Inner {
                state,
                topics,
                states: self.states,
                patterns: Arc::default(),
                sweep: self.remove_idle.map(Sweep::new),
            }),
        }
    }
}

impl fmt::Debug for BusBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusBuilder")
            .field("capacity", &self.capacity)
            .field("shards", &self.shards)
            .field("spin", &self.spin)
            .field("max_subscribers", &self.max_subscribers)
            .field("stall_timeout", &self.stall_timeout)
            .field("strict", &self.strict)
            .field("removable", &self.removable)
            .field("remove_idle", &self.remove_idle)
            .field("states", &self.states.len())
            .finish()
    }
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

/// How long a bounded close waits for a subscriber task it met in the middle of a poll
/// before reporting it running (see [`Bus::close_with`]).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(2);

/// A bounded close's grace for the tasks it met in the middle of a poll: most such polls are
/// about to return (the handler yields, or the worker thread was preempted right there), and
/// the abort ends the task as soon as one does. Waits for those tasks' end notifications
/// (`SubShared::done`) until `timer` (tokio's, made by `close_with`) fires [`STOP_GRACE`] from
/// now, then marks each that ended (or that is now between polls) as not running, so that
/// only a handler that really does not yield is reported running. Without a timer (no
/// runtime reachable) there is no grace: it only looks again.
async fn grace(
    stopped: &mut [(Arc<SubShared>, Unhandled)],
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
) {
    if !stopped.iter().any(|(_, u)| u.running) {
        return;
    }
    if let Some(mut timer) = timer {
        timer
            .as_mut()
            .reset(tokio::time::Instant::now() + STOP_GRACE);
        let ended = async {
            for (sub, _) in stopped.iter().filter(|(_, u)| u.running) {
                sub.done.cancelled().await;
            }
        };
        tokio::select! {
            _ = ended => {}
            _ = timer => {}
        }
    }
    for (sub, unhandled) in stopped.iter_mut() {
        if unhandled.running && sub.try_stop() {
            unhandled.running = false;
        }
    }
}

/// How many messages each of the `stopped` subscribers has not handled of what it owes (up
/// to its `unsubscribe`'s cut, if it was leaving: `SubShared::owed`): `per_topic[i]` of
/// them, in a row, are subscribers of `topics[i]`.
fn left_unhandled(
    topics: &[Arc<dyn AnyTopic>],
    per_topic: &[usize],
    stopped: &[(Arc<SubShared>, Unhandled)],
) -> Vec<u64> {
    let mut stopped = stopped.iter();
    let mut left = Vec::new();
    for (topic, &n) in topics.iter().zip(per_topic) {
        let published = topic.published();
        left.extend(stopped.by_ref().take(n).map(|(sub, _)| sub.owed(published)));
    }
    left
}

impl Bus {
    /// A bus with the default configuration.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configures a bus.
    pub fn builder() -> BusBuilder {
        BusBuilder::default()
    }

    /// The entry of topic `name`, made (for messages of type `T`) if it does not exist.
    #[inline]
    fn entry<T: Send + Sync + 'static>(
        &self,
        name: &str,
        capacity: Option<usize>,
    ) -> Result<Found<'_, Entry>, Unresolved> {
        loop {
            if let Some(entry) = self.inner.topics.get(name) {
                return Ok(entry);
            }
            // Looked up again once made: on a removable bus the topic may have gone since
            // (then it is made anew).
            self.create::<T>(name, capacity)?;
        }
    }

    /// Finds or makes the topic `name` for messages of type `T`: see [`Resolved`] for how
    /// long the reference lives.
    #[inline]
    pub(crate) fn resolve<T: Send + Sync + 'static>(
        &self,
        name: &str,
        capacity: Option<usize>,
    ) -> Result<Resolved<'_, T>, Unresolved> {
        let entry = match self.entry::<T>(name, capacity)?.lasting() {
            Ok(entry) => entry,
            Err(found) => {
                // A removable bus: the topic is kept by a clone of its `Arc`, taken while the
                // lookup's reading lasts, which ends here (see `map`, "Removal").
                let entry = found.get();
                return match entry.typed.clone().downcast::<TopicInner<T>>() {
                    Ok(topic) => Ok(Resolved::owned(topic)),
                    Err(_) => Err(mismatch::<T>(name, entry).into()),
                };
            }
        };
        match (*entry.typed).downcast_ref::<TopicInner<T>>() {
            Some(topic) => Ok(Resolved::held(topic)),
            None => Err(mismatch::<T>(name, entry).into()),
        }
    }

    /// [`resolve`](Self::resolve), as an `Arc` (for subscriber tasks and `Topic` handles).
    fn resolve_arc<T: Send + Sync + 'static>(
        &self,
        name: &str,
        capacity: Option<usize>,
    ) -> Result<Arc<TopicInner<T>>, Unresolved> {
        let found = self.entry::<T>(name, capacity)?;
        let entry = found.get();
        entry
            .typed
            .clone()
            .downcast::<TopicInner<T>>()
            .map_err(|_| mismatch::<T>(name, entry).into())
    }

    /// The topic a new subscriber of `topic` joins: refuses before making anything when no
    /// runtime could run the subscriber (and panics, as tokio does, when it has a stall
    /// timeout or a retry policy and the runtime has no time driver).
    pub(crate) fn subscribable<T: Send + Sync + 'static>(
        &self,
        topic: &str,
        options: &SubscribeOptions,
    ) -> Result<Arc<TopicInner<T>>, Error> {
        subscriber::runnable(&self.inner.state, options)?;
        Ok(self.resolve_arc::<T>(topic, options.capacity)?)
    }

    /// Makes the topic `name` for messages of type `T`, unless another thread just did; an
    /// `Err` if its ring cannot be allocated or a pattern that matches it takes another type
    /// (then nothing is made). Every pattern that matches follows it before it is inserted,
    /// holding the patterns' lock (see `pattern`). The caller looks it up afterwards, so that
    /// no lookup's reading is held while the events raised here run.
    #[cold]
    fn create<T: Send + Sync + 'static>(
        &self,
        name: &str,
        capacity: Option<usize>,
    ) -> Result<(), Unresolved> {
        if pattern::is_pattern(name) {
            return Err(Unresolved::WildcardTopic(name.into()));
        }
        self.sweep();
        let capacity = capacity.unwrap_or(self.inner.state.capacity);
        let _held = observe::Held::enter();
        let patterns = self.inner.patterns.read();
        // The lookup's reading ends at once (`map(drop)`): nothing below runs under it.
        let made = self.inner.topics.get_or_try_insert_with(name, || {
            let topic = TopicInner::<T>::new(name.into(), capacity, self.inner.state.clone())?;
            let topic = Arc::new(topic);
            let typed: Arc<dyn Any + Send + Sync> = topic.clone();
            pattern::check(&patterns, name, std::any::type_name::<T>(), &typed)?;
            let named: Arc<str> = name.into();
            observe::emit(move || tracing::debug!(topic = %named, r#type = std::any::type_name::<T>(), capacity, "ringbus topic created"));
            pattern::follow_new(&patterns, name, &typed);
            Ok::<_, Unresolved>(Entry {
                typed,
                erased: topic,
                idle: IdleMark::new(),
            })
        })
        .map(drop);
        drop(patterns);
        // A `quiescent` pass that saw the list of topics change is not idle, and waits for
        // progress: say there was some, or on an otherwise quiet bus `close` and `wait_idle`
        // would wait for good. (Nobody handles anything on a topic just made.)
        self.inner.state.progressed();
        made
    }

    fn topics(&self) -> Vec<Arc<dyn AnyTopic>> {
        let mut topics = Vec::new();
        self.inner
            .topics
            .for_each(|e| topics.push(e.erased.clone()));
        topics
    }

    /// A typed handle to the topic `name`, made if it does not exist yet: publishing through
    /// it skips the lookup by name.
    ///
    /// # Errors
    ///
    /// [`Error::TypeMismatch`] if the topic carries another type; [`Error::RingTooLarge`] if
    /// it did not exist and its ring could not be allocated; [`Error::PatternMismatch`] if it
    /// did not exist and a subscribed pattern that matches its name takes another type;
    /// [`Error::WildcardTopic`] if the name has a `*` or `>` token.
    pub fn topic<T: Send + Sync + 'static>(&self, name: &str) -> Result<Topic<T>, Error> {
        let inner = self.resolve_arc::<T>(name, None)?;
        Ok(Topic { inner })
    }

    /// Removes the topic `name` and frees it, on a bus built with
    /// [`removable_topics`](BusBuilder::removable_topics): for buses whose topics come and go.
    ///
    /// A topic is removed only when nothing holds it: no subscriber (a pattern subscription
    /// that follows it counts), no [`Topic`] handle, no link, no publish by name waiting in
    /// it. A publish to the name afterwards makes a new topic, as for any name.
    ///
    /// A pattern subscription holds every topic it matches for as long as it lives, so a
    /// topic that a pattern matches is removed only once the pattern is unsubscribed. A
    /// `stats`, `close` or pattern subscribe running at that moment lists every topic, holding
    /// each for an instant: the removal may then be refused, and can be tried again.
    ///
    /// It never waits for a task or for user code. It may wait for lookups by name that
    /// other threads are in the middle of (a lookup and the clone of the topic's `Arc`).
    ///
    /// # Errors
    ///
    /// [`RemoveError::InUse`] while something holds the topic, [`RemoveError::NoSuchTopic`],
    /// and [`RemoveError::NotRemovable`] on a bus built without `removable_topics`. Nothing
    /// changes then.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringbus::{Bus, RemoveError};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = Bus::builder().removable_topics().build();
    /// let sub = bus.subscribe("order.17", async |_: &u32| {})?;
    /// bus.publish("order.17", 1u32).await?;
    /// assert!(matches!(bus.remove("order.17"), Err(RemoveError::InUse { .. })));
    /// sub.unsubscribe().await; // handles the message first
    /// bus.remove("order.17")?;
    /// assert!(matches!(bus.remove("order.17"), Err(RemoveError::NoSuchTopic(_))));
    /// # Ok(()) }
    /// ```
    pub fn remove(&self, name: &str) -> Result<(), RemoveError> {
        let topics = &self.inner.topics;
        if !topics.is_removable() {
            return Err(RemoveError::NotRemovable(name.into()));
        }
        // The entry's own two `Arc`s (`typed` and `erased` share one count) and no other.
        let removed = topics.remove(name, |entry| Arc::strong_count(&entry.erased) == 2);
        match removed {
            Ok(entry) => {
                // Dropped here, outside the registry's lock: the ring's messages' `Drop`s run.
                drop(entry);
                let named: Arc<str> = name.into();
                observe::emit(move || tracing::debug!(topic = %named, "ringbus topic removed"));
                // The list of topics changed: see `create`.
                self.inner.state.progressed();
                Ok(())
            }
            Err(Kept::Missing) => Err(RemoveError::NoSuchTopic(name.into())),
            Err(Kept::InUse) => {
                let holders = topics.get(name).map_or(0, |found| {
                    Arc::strong_count(&found.get().erased).saturating_sub(2)
                });
                Err(RemoveError::InUse {
                    topic: name.into(),
                    holders,
                })
            }
        }
    }

    /// One step of the idle policy (`sweep.rs`): looks at the next few topics and removes
    /// those idle long enough. Called where a topic is made, holding nothing.
    fn sweep(&self) {
        let Some(sweep) = &self.inner.sweep else {
            return;
        };
        let mut expired = Vec::new();
        {
            // Another thread sweeping now: this one skips its turn.
            let Ok(mut cursor) = sweep.cursor.try_lock() else {
                return;
            };
            let now = sweep.now();
            self.inner.topics.visit(&mut cursor, sweep::SLOTS, |entry| {
                let held = Arc::strong_count(&entry.erased) > 2;
                let idle = entry.idle.look(now, held, entry.erased.published());
                if idle.is_some_and(|idle| idle >= sweep.after) {
                    expired.push(entry.erased.name().clone());
                }
            });
        }
        for name in expired {
            // Refused if something took the topic since: it is idle no more.
            let _ = self.remove(&name);
        }
    }

    /// Removes every topic nothing holds (see [`remove`](Self::remove)), and says how many,
    /// on a bus built with [`removable_topics`](BusBuilder::removable_topics); 0 on any other.
    /// For a service that makes a topic per entity and sweeps them from time to time.
    pub fn remove_unused(&self) -> usize {
        if !self.inner.topics.is_removable() {
            return 0;
        }
        let mut names = Vec::new();
        self.inner.topics.for_each(|entry| {
            if Arc::strong_count(&entry.erased) == 2 {
                names.push(entry.erased.name().clone());
            }
        });
        names
            .iter()
            .filter(|name| self.remove(name).is_ok())
            .count()
    }

    /// Publishes `msg` to `topic`, waiting while the slowest subscriber's queue is full.
    ///
    /// Returns once the message is in the topic: every current subscriber will handle it,
    /// in order. The topic is made if it does not exist (with no subscriber, the message
    /// reaches nobody).
    ///
    /// Each publish spends one unit of the task's tokio cooperative budget (guarantee 11):
    /// once it is spent, the publish first yields to the other tasks of its worker.
    ///
    /// Nothing happens until the returned future is first polled: that poll looks the topic
    /// up (making it if need be), and publishes at once when the topic has room.
    ///
    /// # Errors
    ///
    /// Each gives the message back: [`PublishError::Closed`] once the bus is closing,
    /// [`PublishError::TypeMismatch`] if the topic carries another type,
    /// [`PublishError::RingTooLarge`] if it did not exist and its ring could not be allocated,
    /// [`PublishError::PatternMismatch`] if it did not exist and a subscribed pattern that
    /// matches its name takes another type, [`PublishError::WildcardTopic`] if the name has a
    /// `*` or `>` token.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the all-or-nothing sense: if the future is dropped before it
    /// completes, no subscriber sees the message (it is dropped with the future).
    ///
    /// One exception, by design: on an unbuffered topic (`capacity(0)`, see
    /// [`BusBuilder::capacity`]), once the message is in, the publish waits for every
    /// subscriber to handle it, and dropping the future then does not take it back: every
    /// subscriber still handles it, exactly once.
    pub fn publish<'a, T: Send + Sync + 'static>(
        &'a self,
        topic: &'a str,
        msg: T,
    ) -> impl Future<Output = Result<(), PublishError<T>>> + Send + 'a {
        self.publish_with(&crate::context::NEVER, topic, msg)
    }

    /// [`publish`](Self::publish) that gives up when `ctx` ends: `Err(Cancelled(msg))`, and no
    /// subscriber sees the message.
    ///
    /// `ctx`'s deadline runs on tokio's time driver (see [`Context`], "Deadlines").
    ///
    /// # Errors
    ///
    /// As [`publish`](Self::publish), plus [`PublishError::Cancelled`] when `ctx` ends first,
    /// and [`PublishError::NoRuntime`] when `ctx` has a deadline (not yet passed) and no tokio
    /// runtime is reachable here to time it.
    ///
    /// # Panics
    ///
    /// When it has to wait with a deadline on a runtime built without its time driver, as
    /// tokio's timers do (guarantee 9).
    ///
    /// # Cancel safety
    ///
    /// As [`publish`](Self::publish).
    pub fn publish_with<'a, T: Send + Sync + 'static>(
        &'a self,
        ctx: &'a Context,
        topic: &'a str,
        msg: T,
    ) -> impl Future<Output = Result<(), PublishError<T>>> + Send + 'a {
        let named = Named {
            bus: self,
            name: topic,
        };
        TopicInner::publish_to(named, ctx, msg)
    }

    /// Publishes `msg` if there is room now; never waits for room, and is not `async`.
    ///
    /// `Full` means the slowest subscriber's queue is full, and nothing else. Publishers take
    /// turns at the topic's writer, so this may find it taken:
    /// - by a publisher writing its message (a few instructions, plus the `Drop` of the
    ///   message whose slot it reuses, or a `publish_batch` iterator): being contended is not
    ///   being full, so it waits for that publisher, spinning and then yielding its thread
    ///   (it never suspends a task). That publisher may have been preempted by the OS, which
    ///   is why giving up there would say `Full` on a topic with room;
    /// - by a publisher waiting for room (the only way a publisher holds the writer while
    ///   suspended, so that publishes finish in the order they began): the queue is full,
    ///   that publisher's message counted and first in line, so `Full` at once;
    /// - by this very thread, when code the bus runs while it writes (a message's `Drop`, a
    ///   `publish_batch` iterator) publishes to the same topic: `Full` at once, since the
    ///   room is that write's to fill and waiting for itself would never end.
    ///
    /// So it waits only for code running on another thread that lets go of the writer
    /// when it finishes: never for a subscriber, a timer, or another task to be scheduled.
    ///
    /// # Errors
    ///
    /// As [`publish`](Self::publish), plus [`PublishError::Full`] when the slowest
    /// subscriber's queue is full.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringbus::{Bus, PublishError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::builder().capacity(2).build();
    /// let _slow = bus.subscribe("jobs", |_: &u32| std::future::pending::<()>())?;
    /// bus.try_publish("jobs", 1u32)?;
    /// bus.try_publish("jobs", 2u32)?;
    /// match bus.try_publish("jobs", 3u32) {
    ///     Err(PublishError::Full(back)) => assert_eq!(back, 3), // the message comes back
    ///     other => panic!("expected Full, got {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_publish<T: Send + Sync + 'static>(
        &self,
        topic: &str,
        msg: T,
    ) -> Result<(), PublishError<T>> {
        match self.resolve::<T>(topic, None) {
            Ok(t) => t.topic.try_publish(msg),
            Err(e) => Err(e.refuse(msg)),
        }
    }

    /// Publishes every message of `msgs`, in order, as few cursor stores as room allows.
    /// Returns how many were published.
    ///
    /// It spends one unit of the task's tokio cooperative budget per 8 messages (guarantee
    /// 11): once the budget is spent, it lets go of the topic and yields, so at most 1,024
    /// messages pass between yields, and other publishes may land between its chunks. The
    /// iterator's `next` runs while the topic's writer is held: keep it short.
    ///
    /// # Errors
    ///
    /// The error carries every message not published, in order, as an [`Unpublished`]
    /// iterator: the one refused (if it had been taken from `msgs`) and the rest of `msgs`.
    /// Each message is all or nothing; those before were published.
    ///
    /// # Cancel safety
    ///
    /// Messages published before the future was dropped stay published; the rest are dropped.
    pub async fn publish_batch<T, I>(
        &self,
        topic: &str,
        msgs: I,
    ) -> Result<u64, PublishError<Unpublished<I::IntoIter>>>
    where
        T: Send + Sync + 'static,
        I: IntoIterator<Item = T>,
    {
        match self.resolve::<T>(topic, None) {
            Ok(resolved) => {
                let topic = resolved.topic;
                // Keeps `topic` alive across the awaits on a removable bus.
                let _owned = resolved.own();
                topic.publish_batch(&crate::context::NEVER, msgs).await
            }
            Err(e) => Err(e.refuse(Unpublished::new(msgs.into_iter()))),
        }
    }

    /// Runs `handler` for every message published to `topic` after this returns.
    ///
    /// The subscriber is a tokio task spawned on the current runtime. It gates publishers: a
    /// slow handler makes `publish` wait (see
    /// [`subscribe_with`](Self::subscribe_with) for a stall timeout). It spends one unit of
    /// its tokio cooperative budget per 8 messages (guarantee 11), so however many messages
    /// are waiting, it yields to the other tasks of its worker after at most 1,024.
    ///
    /// # Which closure
    ///
    /// The handler gets each message as `&T`, borrowed in place from the ring, and its future
    /// must be `Send`. Three closure forms do that (see [`Handler`]):
    ///
    /// - `async |msg: &T| ...`: an async closure (Rust 1.85); its future may borrow `msg`,
    ///   across awaits too. It may capture `Copy` values (`move`), but not state it uses by
    ///   reference: the compiler then says "async closure does not implement `Fn` because it
    ///   captures state from its environment". Nor may it borrow a local of the function that
    ///   subscribes, as the subscriber is a task that outlives it: the compiler then says
    ///   (E0597) "`x` does not live long enough" and "argument requires that `x` is borrowed
    ///   for `'static`", `x` being the local. For state, use the next two forms:
    ///   [`with_state`](crate::with_state) lends it to each call.
    /// - [`with_state`](crate::with_state)`(state, async |state: &S, msg: &T| ...)`: the state
    ///   is lent to each call, with the message.
    /// - `|msg: &T| { let x = ..copy out of msg..; async move { ... } }`: a closure that returns
    ///   an `async move` block. The block cannot borrow `msg` (the error is "lifetime may not
    ///   live long enough"): copy what it needs out of the message first.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use ringbus::{with_state, Bus};
    ///
    /// struct Order { id: u64, note: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// let bus = Bus::new();
    /// // Borrows the message, across an await.
    /// let log = bus.subscribe("orders", async |order: &Order| {
    ///     tokio::task::yield_now().await;
    ///     println!("order {}: {}", order.id, order.note);
    /// })?;
    /// // State lent with the message.
    /// let count = bus.subscribe(
    ///     "orders",
    ///     with_state(AtomicU64::new(0), async |seen: &AtomicU64, _: &Order| {
    ///         seen.fetch_add(1, Ordering::Relaxed);
    ///     }),
    /// )?;
    /// // Copies out, then moves its captures into the future.
    /// let total = Arc::new(AtomicU64::new(0));
    /// let sum = bus.subscribe("orders", {
    ///     let total = total.clone();
    ///     move |order: &Order| {
    ///         let (id, total) = (order.id, total.clone());
    ///         async move { total.fetch_add(id, Ordering::Relaxed); }
    ///     }
    /// })?;
    /// bus.publish("orders", Order { id: 7, note: "gift wrap".into() }).await?;
    /// bus.close().await;
    /// assert_eq!(total.load(Ordering::Relaxed), 7);
    /// # drop((log, count, sum));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoRuntime`] outside a tokio runtime,
    /// [`Error::TypeMismatch`],
    /// [`Error::RingTooLarge`] (a new topic, or the first subscriber of one, whose ring
    /// could not be allocated),
    /// [`Error::PatternMismatch`] (a new topic that a pattern of another type matches),
    /// [`Error::Unsupported`] for the first subscriber of a topic joining from code a
    /// publish to that topic runs (a message's `Drop`, a `publish_batch` iterator),
    /// [`Error::WildcardTopic`] for a name with a `*` or `>` token (a pattern: see
    /// [`subscribe_pattern`](Self::subscribe_pattern)),
    /// [`Error::Closed`].
    ///
    /// # Panics
    ///
    /// With a stall timeout (see [`BusBuilder::stall_timeout`]) or a retry policy, on a
    /// runtime built without its time driver: their timers run on it, and tokio's timers
    /// panic there (guarantee 9). Never where no runtime is reachable (`NoRuntime`).
    pub fn subscribe<T, H>(&self, topic: &str, handler: H) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: Handler<T>,
    {
        self.subscribe_with(topic, SubscribeOptions::new(), handler)
    }

    /// [`subscribe`](Self::subscribe) with options (name, capacity, stall timeout, retry
    /// policy and dead-letter topic: see [`SubscribeOptions`]).
    ///
    /// # Errors
    ///
    /// As [`subscribe`](Self::subscribe); also [`Error::TypeMismatch`] if the options'
    /// dead-letter topic carries dead letters of another message type.
    pub fn subscribe_with<T, H>(
        &self,
        topic: &str,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: Handler<T>,
    {
        subscriber::subscribe(&self.subscribable::<T>(topic, &options)?, options, handler)
    }

    /// Runs `handler` with everything available at once (a [`Batch`](crate::Batch) of two
    /// slices) for the messages published to `topic` after this returns.
    ///
    /// A batch holds at most what the task's tokio cooperative budget pays for, one unit per
    /// 8 messages (guarantee 11): at most 1,024 messages pass between two yields.
    pub fn subscribe_batch<T, H>(
        &self,
        topic: &str,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: BatchHandler<T>,
    {
        subscriber::subscribe_batch(&self.subscribable::<T>(topic, &options)?, options, handler)
    }

    /// Runs `handler` for the messages of every topic whose name matches `pattern`: the topics
    /// that exist now and every one made later, each from the moment this returns (or the
    /// moment it is made). The handler is told the topic each message came from.
    ///
    /// A pattern is NATS-style: tokens split on `.`, where `*` matches any one token and `>`
    /// (only as the last token) every token left, at least one. `orders.*` matches
    /// `orders.created` but not `orders.eu.paid`; `orders.>` matches both. Wildcards are whole
    /// tokens; tokens are not empty.
    ///
    /// The subscription is one subscriber per matched topic, each a task of its own running
    /// the same handler, with the guarantees of a [`subscribe`](Self::subscribe)r of that
    /// topic: order per topic, no loss, close drains, failures stay local. Across topics
    /// nothing is ordered: messages of two topics are handled concurrently, in any order.
    /// Matching happens here and when a topic is made, never per publish.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// use std::sync::{Arc, Mutex};
    /// use ringbus::{with_state, Bus};
    ///
    /// let bus = Bus::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// let sub = bus.subscribe_pattern("orders.*", move |topic: &str, id: &u64| {
    ///     log.lock().unwrap().push(format!("{topic}: {id}"));
    ///     async {}
    /// })?;
    /// bus.publish("orders.created", 1u64).await?; // made after the subscribe: followed
    /// bus.publish("orders.eu.paid", 2u64).await?; // two tokens after `orders`: no match
    /// bus.close().await;
    /// assert_eq!(*seen.lock().unwrap(), ["orders.created: 1"]);
    /// assert_eq!(sub.topics(), ["orders.created"]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPattern`] saying what is wrong with `pattern`;
    /// [`Error::PatternMismatch`] if a matching topic carries another type (then nothing is
    /// subscribed; a matching topic made later with another type is refused instead);
    /// [`Error::NoRuntime`] outside a tokio runtime (the followers of topics made later run
    /// on this one, wherever those topics are made); [`Error::Closed`];
    /// [`Error::Unsupported`] with a capacity in `options` (each topic has its own).
    pub fn subscribe_pattern<T, H>(&self, pattern: &str, handler: H) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: TopicHandler<T>,
    {
        self.subscribe_pattern_with(pattern, SubscribeOptions::new(), handler)
    }

    /// [`subscribe_pattern`](Self::subscribe_pattern) with options, applied to each topic's
    /// subscriber (a name, a stall timeout, a retry policy, a dead-letter topic; not a
    /// capacity).
    ///
    /// # Errors
    ///
    /// As [`subscribe_pattern`](Self::subscribe_pattern).
    pub fn subscribe_pattern_with<T, H>(
        &self,
        pattern: &str,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: TopicHandler<T>,
    {
        self.follow_pattern(pattern, options, pattern::Each(handler))
    }

    /// The batch form of [`subscribe_pattern_with`](Self::subscribe_pattern_with): each
    /// matching topic's subscriber runs `handler` with everything available at once, as
    /// [`subscribe_batch`](Self::subscribe_batch) does, told the topic.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ringbus::Error> {
    /// use std::sync::{Arc, Mutex};
    /// use ringbus::{Batch, Bus, SubscribeOptions};
    ///
    /// let bus = Bus::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// bus.subscribe_pattern_batch(
    ///     "orders.*",
    ///     SubscribeOptions::new(),
    ///     move |topic: &str, batch: Batch<'_, u64>| {
    ///         log.lock().unwrap().push((topic.to_string(), batch.len()));
    ///         async {}
    ///     },
    /// )?;
    /// bus.publish_batch("orders.created", [1u64, 2, 3]).await?;
    /// bus.close().await;
    /// let handled: usize = seen.lock().unwrap().iter().map(|(_, n)| n).sum();
    /// assert_eq!(handled, 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`subscribe_pattern`](Self::subscribe_pattern); [`Error::Unsupported`] with a retry
    /// policy or a dead-letter topic in `options` (batch subscribers do not retry).
    pub fn subscribe_pattern_batch<T, H>(
        &self,
        pattern: &str,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: TopicBatchHandler<T>,
    {
        subscriber::batch_options(&options)?;
        self.follow_pattern(pattern, options, pattern::Batches(handler))
    }

    /// Subscribes `handler` to every topic `pattern` matches (see `pattern::subscribe`).
    fn follow_pattern<T, H>(
        &self,
        pattern: &str,
        options: SubscribeOptions,
        handler: H,
    ) -> Result<Subscription, Error>
    where
        T: Send + Sync + 'static,
        H: pattern::Follow<T>,
    {
        let topics = || self.typed_topics();
        pattern::subscribe(
            &self.inner.state,
            &self.inner.patterns,
            topics,
            pattern,
            options,
            handler,
        )
    }

    /// Every topic, as a pattern meets it.
    fn typed_topics(&self) -> Vec<pattern::Met> {
        let mut topics = Vec::new();
        self.inner.topics.for_each(|e| {
            topics.push((
                e.erased.name().clone(),
                e.typed.clone(),
                e.erased.message_type(),
            ))
        });
        topics
    }

    /// Subscribes a handler that knows its topic and options, such as one made by
    /// `#[subscriber]`.
    pub fn register<S: Subscriber>(&self, subscriber: S) -> Result<Subscription, Error> {
        subscriber.subscribe(self)
    }

    /// The shared value of type `S` registered with [`BusBuilder::state`], if any.
    pub fn state<S: Send + Sync + 'static>(&self) -> Option<State<S>> {
        self.inner.states.get::<S>()
    }

    /// The subscribers' progress notification (`wait_idle` waits on it, as `close` does).
    pub(crate) fn progress(&self) -> &Progress {
        &self.inner.state.progress
    }

    /// True when called from inside one of this bus's handlers (see `wait_idle`).
    pub(crate) fn in_own_handler(&self) -> bool {
        self.inner.state.in_own_handler()
    }

    /// How many wait on the subscribers' progress (close, delivery receipts).
    #[cfg(test)]
    pub(crate) fn progress_watchers(&self) -> usize {
        self.inner.state.progress.watchers()
    }

    /// True once `close` has begun.
    pub fn is_closed(&self) -> bool {
        self.inner.state.closed.load(Ordering::Acquire)
    }

    /// Closes the bus and waits for the drain.
    ///
    /// From the first poll on, every publish from outside the handlers returns
    /// `Closed(msg)` (publishers waiting for room are released with their message). Handlers
    /// may still publish while the bus drains, so a chain of topics (a handler publishing its
    /// result, as `#[subscriber(.., publish(..))]` does) runs to its end. `close` returns once
    /// every accepted message has been handled by every subscriber and every subscriber task
    /// has finished. Idempotent: every caller waits for the same drain.
    ///
    /// Called from inside one of this bus's handlers, it starts the drain and returns at once:
    /// a handler cannot wait for a drain that needs it to return first (its own subscriber,
    /// or handlers that wait for room it would make). The drain goes on in the background;
    /// `close` from outside the handlers waits for it. A handler of another bus is outside:
    /// its `close` of this bus waits for the drain, as a task's would (if this bus's handlers
    /// wait for room in that other bus, which the calling handler holds up, bound the wait
    /// with [`close_with`](Self::close_with)).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not reopen the bus: publishes from outside keep failing with
    /// `Closed`. Call `close` again to finish the drain.
    pub async fn close(&self) {
        self.close_with(&Context::new()).await;
    }

    /// [`close`](Self::close) bounded by `ctx`: if it ends first, the subscribers still
    /// running are aborted and the report says what each left unhandled.
    ///
    /// tokio can abort a task only between two polls. A subscriber whose handler is running
    /// and has not yielded when `ctx` ends cannot be stopped at once. One met in the middle of
    /// a poll gets a grace of 2 ms to return from it (most polls take microseconds; an
    /// operating-system preemption can stretch one); one still in that poll after the grace is
    /// reported with [`running`](crate::Unhandled::running) true, takes no further message,
    /// and ends when that handler call returns (or at its next yield). Every other one is
    /// stopped before this returns: it runs no handler again.
    ///
    /// A handler that blocks its thread (`std::thread::sleep`, blocking I/O, a long
    /// computation) holds up every task of its worker, and on a `current_thread` runtime every
    /// task of the runtime: a close that runs there (or waits on its timer) cannot look
    /// before the handler returns, however early `ctx` ends. It then reports what is true
    /// when it looks: what each subscriber still owes, and [`complete`](CloseReport::complete)
    /// if that is nothing. Run blocking work with [`tokio::task::spawn_blocking`].
    ///
    /// A subscriber whose task panicked outside a handler call (a tracing layer or a metrics
    /// recorder that panics: a handler's own panic is caught) ended with messages it never
    /// handled: it is listed, with `running` false, and the report is not `complete`.
    ///
    /// From inside one of this bus's handlers, as [`close`](Self::close): the drain starts
    /// in the background (unbounded) and the report says `complete: false` with nothing
    /// listed.
    ///
    /// Its timers (`ctx`'s deadline and the grace) run on tokio's time driver. Where no
    /// runtime is reachable, a `ctx` with only a token works and gives no grace: a subscriber
    /// met in the middle of a poll is reported running.
    ///
    /// # Panics
    ///
    /// As tokio's timers do (guarantee 9): on a runtime built without its time driver, unless
    /// `ctx` never ends (as [`close`](Self::close)'s); where no runtime is reachable, if
    /// `ctx` has a deadline.
    ///
    /// # Cancel safety
    ///
    /// As [`close`](Self::close).
    pub async fn close_with(&self, ctx: &Context) -> CloseReport {
        let state = &self.inner.state;
        if !state.closed.swap(true, Ordering::AcqRel) {
            tracing::debug!("ringbus closing");
        }
        state.closing.cancel();
        for topic in self.topics() {
            topic.wake_writer();
        }
        if state.in_own_handler() {
            let bus = self.clone();
            tokio::spawn(async move { bus.drain().await });
            return CloseReport {
                complete: false,
                unfinished: Vec::new(),
            };
        }
        // The grace's timer (see `grace`), made before anything waits: on a runtime without a
        // time driver, every bounded close then panics here with tokio's message, not only
        // one that happens to meet a handler in the middle of a poll. `close` needs none.
        let grace_timer = (!ctx.is_never() && crate::time::runtime_reachable())
            .then(|| Box::pin(tokio::time::sleep(STOP_GRACE)));
        let complete = tokio::select! {
            biased;
            _ = self.drain() => true,
            _ = ctx.done() => false,
        };
        if complete {
            let crashed: Vec<Unhandled> = self.crashed().into_iter().map(|(_, u)| u).collect();
            return CloseReport {
                complete: crashed.is_empty(),
                unfinished: crashed,
            };
        }
        let topics = self.topics();
        let mut stopped = Vec::new();
        let mut per_topic = Vec::with_capacity(topics.len());
        for topic in &topics {
            let subscribers = topic.stop_subscribers();
            per_topic.push(subscribers.len());
            stopped.extend(subscribers);
        }
        grace(&mut stopped, grace_timer).await;
        for topic in &topics {
            topic.close().await;
        }
        // Counted now, not when the subscribers were stopped: a handler met in its call may
        // have finished it during the grace, and published on its way (a handler may while
        // the bus drains), also to a topic whose subscribers were stopped idle. With the
        // rings closed, no count moves any more but a still-running handler's position.
        let left = left_unhandled(&topics, &per_topic, &stopped);
        // A subscriber that crashed after it was stopped is listed once, as crashed.
        let crashed = self.crashed();
        let mut unfinished: Vec<Unhandled> = stopped
            .into_iter()
            .zip(left)
            // One stopped idle (caught up, so not in a handler) left nothing: it was still
            // running only because the rings close after the drain.
            .filter(|((sub, _), left)| *left > 0 && !crashed.iter().any(|(id, _)| *id == sub.id))
            .map(|((_, unhandled), messages)| Unhandled {
                messages,
                ..unhandled
            })
            .collect();
        unfinished.extend(crashed.into_iter().map(|(_, u)| u));
        // Nothing left and nothing running: the drain reached its end after all, as the
        // context ended (every subscriber had handled what it owed; the stop ended tasks that
        // had yet to see their closed ring). So it goes when a handler that blocks its thread
        // holds the close up past its deadline: on that thread (a `current_thread` runtime)
        // the close looks only once the handler has returned.
        let complete = unfinished.is_empty();
        if complete {
            tracing::debug!("ringbus close: its context ended as the drain finished");
        } else {
            tracing::warn!(
                unfinished = unfinished.len(),
                still_running = unfinished.iter().filter(|u| u.running).count(),
                "ringbus close ended by its context before the drain finished"
            );
        }
        CloseReport {
            complete,
            unfinished,
        }
    }

    /// The subscribers whose task panicked outside a handler call leaving messages
    /// unhandled, by id (see `SubShared::crashed`).
    fn crashed(&self) -> Vec<(u64, Unhandled)> {
        let crashed = self.inner.state.crashed.lock();
        // Only pushed to, whole entries: a panic cannot leave the list inconsistent.
        let crashed = crashed.unwrap_or_else(|e| e.into_inner());
        crashed
            .iter()
            .filter(|(_, u)| u.messages > 0)
            .cloned()
            .collect()
    }

    /// The drain of `close`: wait for quiescence, close the rings, wait for the tasks.
    async fn drain(&self) {
        let state = &self.inner.state;
        // 0. Wait for the publishes from outside the handlers that got in before `closed`
        //    was set but have not made their message visible yet: each checks `closed`
        //    holding its topic's writer (`TopicInner::admit`), so once we have held every
        //    writer, each of them either is visible in its topic's count or was refused.
        //    (Acquire/Release through the lock: a publisher that takes a writer after we let
        //    it go sees `closed`.) A topic missing from this snapshot was made by a publish
        //    or subscribe racing with `close` itself: an outside publish accepted there is
        //    still handled by its subscribers (a ring closes only once its writer is free),
        //    but what their handlers publish on is not waited for.
        for topic in self.topics() {
            topic.wait_publishers().await;
        }
        // 1. Wait until every subscriber has caught up with its topic and none is in a handler
        //    (which could still publish): nothing is in flight any more.
        //    Watching for good: the drain ends with the bus. Fenced: the watch begins while
        //    subscribers run (see `progress.rs`).
        state.progress.watch();
        state
            .progress
            .wait_for(true, || self.quiescent().then_some(()))
            .await;
        // 2. Close every ring: the subscribers read what is left, then end.
        let topics = self.topics();
        for topic in &topics {
            topic.close().await;
        }
        // 3. Wait for every subscriber task.
        for topic in &topics {
            for sub in topic.subscribers() {
                sub.done.cancelled().await;
            }
        }
    }

    /// True when every running subscriber has handled everything published to its topic, so
    /// none is in a handler, and nothing was published meanwhile.
    ///
    /// One pass over the subscribers, between two reads of every topic's count. The pass
    /// alone is not enough: a handler of a topic checked later may publish to a topic checked
    /// earlier and then finish. Any such publish changes the counts, so the pass counts only
    /// if the counts did not move across it. The second read sees such a publish: it was
    /// made visible before that handler's subscriber counted the message handled (Release),
    /// which the pass read (Acquire, `SubShared::position`). Publishes from outside the
    /// handlers are over before the first call (`drain`, step 0).
    pub(crate) fn quiescent(&self) -> bool {
        let topics = self.topics();
        let before: Vec<u64> = topics.iter().map(|t| t.published()).collect();
        let caught_up = topics.iter().zip(&before).all(|(topic, &published)| {
            topic
                .subscribers()
                .iter()
                .all(|sub| sub.done.is_cancelled() || sub.position() >= published)
        });
        let after: Vec<u64> = self.topics().iter().map(|t| t.published()).collect();
        caught_up && before == after
    }

    /// A snapshot of every topic's and subscriber's counters.
    pub fn stats(&self) -> BusStats {
        let mut topics: Vec<_> = self.topics().iter().map(|t| t.stats()).collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        BusStats {
            topics,
            closed: self.is_closed(),
        }
    }
}

fn mismatch<T>(name: &str, entry: &Entry) -> TypeMismatch {
    TypeMismatch {
        topic: name.into(),
        expected: entry.erased.message_type(),
        found: std::any::type_name::<T>(),
    }
}

impl fmt::Debug for Bus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bus")
            .field("topics", &self.topics().len())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// A topic by name: `Bus::publish`'s.
pub(crate) struct Named<'a> {
    bus: &'a Bus,
    name: &'a str,
}

impl<'a, T: Send + Sync + 'static> PublishTo<'a, T> for Named<'a> {
    #[inline]
    fn topic(self) -> Result<Resolved<'a, T>, Unresolved> {
        self.bus.resolve::<T>(self.name, None)
    }
}

/// A handler that knows its topic and options: what `#[subscriber]` generates, and what
/// [`Bus::register`](crate::Bus::register) takes.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a subscriber: `register` takes what `#[subscriber(\"topic\")]` makes",
    label = "not made by `#[subscriber]`",
    note = "put `#[subscriber(\"topic\")]` on an `async fn(&Message)`, or pass a closure to `bus.subscribe(\"topic\", async |msg: &Message| ...)`"
)]
pub trait Subscriber: Send + Sync + 'static {
    /// The message type.
    type Message: Send + Sync + 'static;
    /// The topic it subscribes to.
    fn topic(&self) -> &str;
    /// Its options.
    fn options(&self) -> SubscribeOptions {
        SubscribeOptions::new()
    }
    /// Subscribes it to `bus`: called by [`Bus::register`](crate::Bus::register).
    fn subscribe(self, bus: &crate::Bus) -> Result<crate::Subscription, crate::Error>;
}
