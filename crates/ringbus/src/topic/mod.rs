//! One topic: one ring, its writer shared by publishers in turn, its subscribers.
//!
//! A topic is made without its ring: the first subscriber to join allocates it, starting its
//! positions at the count of messages published until then (which reached nobody), so a topic
//! nobody subscribes to costs a few hundred bytes whatever its capacity. The ring is made
//! holding the writer lock, as every publish counts those messages holding it: the count it
//! starts at is exact, and every publish after it goes into the ring.
//!
//! Publishers take turns at the ring's single [`Writer`] through an async mutex: the
//! critical section is a room check, a slot write and a cursor store; a publisher that finds
//! the ring full waits for room *holding* the lock, so publishes stay in the order they began,
//! and the publishers behind it wait parked on the mutex, not spinning.
//!
//! That wait for room (and an unbuffered topic's wait for its message to be handled) is the
//! only time a publisher holds the lock across a suspension, and it marks the lock *parked*
//! for as long (`WriterGuard::park`). So a holder that is not parked is running and lets go
//! within its critical section, and `try_publish`, which cannot suspend, waits for it; a
//! parked holder means the ring is full, and `try_publish` says `Full` at once. Every new
//! await under the lock must go through `park`, or `try_publish` could wait for a task that
//! is not running (on a current-thread runtime: forever).

mod handle;
mod publish;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ringbus_core::{AllocError, Builder, Stage, Writer};

pub use handle::Topic;
pub(crate) use publish::{PublishTo, Resolved};

use crate::error::{Error, RingTooLarge};
use crate::lock::{WriterGuard, WriterLock};
use crate::observe::{self, TopicMetrics};
use crate::parent::Parents;
use crate::shared::{next_subscriber_id, BusState, SubShared, Tracker};
use crate::stats::{SubscriberStats, TopicStats, Unhandled};

pub(crate) struct TopicInner<T> {
    pub(crate) name: Arc<str>,
    /// The capacity asked for; 0 makes the topic unbuffered (a ring of one slot, and a
    /// publish waits until every subscriber has handled its message).
    pub(crate) capacity: usize,
    /// The ring's writer, once the first subscriber made it (see the module docs).
    writer: WriterLock<Slot<T>>,
    /// Set once, holding the writer lock, by the first subscriber to join.
    ring: OnceLock<Ring<T>>,
    subscribers: Mutex<Vec<Arc<SubShared>>>,
    pub(crate) state: Arc<BusState>,
    /// Delivery receipts (`publish_tracked`).
    tracker: Arc<Tracker>,
    /// Messages published while the topic had no subscriber (they reach nobody). Written
    /// under the writer lock, read by `stats` (Relaxed, it is a counter) and by the first
    /// join, holding the writer lock: until the ring is made, it is every message published.
    unrouted: AtomicU64,
    /// Set by the first unrouted publish, which logs it (a `warn` event): once per topic.
    unrouted_logged: AtomicBool,
    /// Its metric handles (feature `metrics`; nothing without it).
    metrics: TopicMetrics,
}

/// The topic's writer, as the topic goes through its life.
enum Slot<T> {
    /// No subscriber has joined yet: no ring, and a publish reaches nobody.
    Idle,
    /// The ring's writer, made by the first subscriber's join.
    Open(Writer<T>),
    /// The bus closed the topic.
    Closed,
}

impl<T> Slot<T> {
    /// The ring's writer, from the first join until the close.
    fn open(&mut self) -> Option<&mut Writer<T>> {
        match self {
            Slot::Open(writer) => Some(writer),
            Slot::Idle | Slot::Closed => None,
        }
    }
}

/// What the first subscriber's join allocates.
struct Ring<T> {
    stage: Stage<T>,
    /// The parent spans given to publishes (`Context::with_parent`), shared with the
    /// subscribers (see `parent`).
    parents: Arc<Parents>,
}

/// The type-erased face of a topic, for the registry, `stats` and `close`.
pub(crate) trait AnyTopic: Send + Sync + 'static {
    fn name(&self) -> &Arc<str>;
    fn message_type(&self) -> &'static str;
    fn published(&self) -> u64;
    /// The subscriber tasks (not the streams: `close` does not wait for those).
    fn subscribers(&self) -> Vec<Arc<SubShared>>;
    fn stats(&self) -> TopicStats;
    /// Closes the topic (drops the ring's writer, if it has one), waiting for the publisher
    /// holding it, if any.
    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
    /// Takes the writer once and lets it go: called by `close` after it set `closed`, so
    /// that every publish from outside the handlers that passed its closed check (made
    /// holding the writer: see `admit`) has made its message visible.
    fn wait_publishers(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
    /// Stops every subscriber still running (`SubShared::stop`), and says which ones are
    /// still in a poll. What each left is counted by the caller once the topics are closed
    /// (`Bus::close_with`): a handler met in its call may yet finish it, and publish.
    fn stop_subscribers(&self) -> Vec<(Arc<SubShared>, Unhandled)>;
    /// Wakes the ring's writer, if a publish holding it is parked, so that it polls again:
    /// called by `close` after it set `closed`, which an unbuffered publish waiting for its
    /// message to be handled checks after each poll (see `wait_handled`).
    fn wake_writer(&self);
}

impl<T: Send + Sync + 'static> TopicInner<T> {
    /// A topic without its ring (the first join makes it), or the error of a ring the
    /// allocator refuses now (see [`RingTooLarge`]): asked for and handed back untouched, so
    /// the topic is refused where it is made and a message published to it comes back. A
    /// ring refused later, at the first join, is that join's error.
    pub(crate) fn new(
        name: Arc<str>,
        capacity: usize,
        state: Arc<BusState>,
    ) -> Result<Self, RingTooLarge> {
        if let Err(refused) = Self::builder(capacity, &state).probe::<T>() {
            return Err(Self::too_large(name, capacity, refused));
        }
        Ok(Self {
            capacity,
            writer: WriterLock::new(Slot::Idle),
            ring: OnceLock::new(),
            subscribers: Mutex::new(Vec::new()),
            tracker: Arc::new(Tracker::new(state.clone())),
            state,
            unrouted: AtomicU64::new(0),
            unrouted_logged: AtomicBool::new(false),
            metrics: TopicMetrics::new(&name),
            name,
        })
    }

    /// What a topic says of a ring the allocator refused.
    fn too_large(topic: Arc<str>, capacity: usize, refused: AllocError) -> RingTooLarge {
        RingTooLarge {
            topic,
            capacity,
            message_size: std::mem::size_of::<T>(),
            bytes: refused.bytes,
        }
    }

    /// The ring's builder.
    fn builder(capacity: usize, state: &BusState) -> Builder {
        Builder::new(capacity.max(1))
            .spin(state.spin)
            .max_readers(state.max_subscribers)
    }

    /// True when no subscriber would see a message published now: no ring, or one Relaxed
    /// load of its reader count, under the writer lock: a subscriber whose `subscribe` returned
    /// before the publish began is counted (same thread: program order; another thread: the
    /// synchronisation that ordered the two). A subscriber joining during the publish may or
    /// may not be, as it may or may not see the message.
    #[inline]
    fn unrouted_now(&self) -> bool {
        self.subscriber_count() == 0
    }

    /// The ring, if a subscriber has made it.
    #[inline]
    fn ring(&self) -> Option<&Ring<T>> {
        self.ring.get()
    }

    /// The ring, made now if no subscriber has made it yet (see the module docs).
    fn ring_or_make(&self) -> Result<&Ring<T>, Error> {
        match self.ring() {
            Some(ring) => Ok(ring),
            None => self.make_ring(),
        }
    }

    /// Makes the ring holding the writer lock, its positions starting at the count of the
    /// messages published so far, unless another join just did.
    #[cold]
    fn make_ring(&self) -> Result<&Ring<T>, Error> {
        // No publisher parks holding the writer of a topic without a ring (it waits only for
        // room in a ring, or for its message to be handled from one), so this waits for a
        // running holder and gives up only when the holder is this thread: user code a
        // publish runs (a message's `Drop`, a `publish_batch` iterator) subscribing to the
        // topic it publishes to.
        match self.writer.lock_unless_parked() {
            Some(guard) => self.make_ring_holding(guard),
            None => self.ring().ok_or(Error::Unsupported(
                "the first subscriber of a topic cannot join from code a publish to that topic \
                 runs (a message's Drop, a publish_batch iterator)",
            )),
        }
    }

    /// The ring made now if it is not made yet, as a join makes it (`wait`), or without
    /// waiting: then `None` while a publisher holds the writer. For `subscribe_pattern`, which
    /// makes the rings of the topics it follows holding the pattern list's lock, and must not
    /// wait there for a publisher whose own code may be waiting for that lock (making a topic
    /// takes it).
    pub(crate) fn prepare_ring(&self, wait: bool) -> Option<Result<(), Error>> {
        if wait {
            return Some(self.ring_or_make().map(drop));
        }
        if self.ring().is_some() {
            return Some(Ok(()));
        }
        let guard = self.writer.try_lock()?;
        Some(self.make_ring_holding(guard).map(drop))
    }

    /// `make_ring`, holding the writer lock.
    fn make_ring_holding(&self, mut guard: Guard<'_, T>) -> Result<&Ring<T>, Error> {
        match &*guard {
            Slot::Idle => {}
            Slot::Closed => return Err(Error::Closed),
            Slot::Open(_) => return self.ring().ok_or(Error::Closed),
        }
        let published = self.unrouted.load(Ordering::Relaxed);
        let (writer, stage) = Self::builder(self.capacity, &self.state)
            .start_at(published)
            .try_build_lazy()
            .map_err(|e| {
                Error::RingTooLarge(Self::too_large(self.name.clone(), self.capacity, e))
            })?;
        let parents = Arc::new(Parents::new(writer.capacity()));
        let ring = self.ring.get_or_init(|| Ring { stage, parents });
        *guard = Slot::Open(writer);
        drop(guard);
        let (name, capacity) = (self.name.clone(), self.capacity);
        observe::emit(
            move || tracing::debug!(topic = %name, capacity, published, "ringbus topic's ring made"),
        );
        Ok(ring)
    }

    fn is_unbuffered(&self) -> bool {
        self.capacity == 0
    }

    /// Joins a new subscriber (a task's or a stream's) to the ring and to the list `stats()`,
    /// `close` and receipts read: refused once the bus refuses publishes. `named` is the name
    /// asked for (else `<topic>#<id>`); `pull`: a stream's.
    pub(crate) fn join(
        &self,
        named: Option<String>,
        stall_timeout: Option<Duration>,
        pull: bool,
    ) -> Result<(ringbus_core::Reader<T>, Arc<SubShared>), Error> {
        if self.state.refuses() {
            return Err(Error::Closed);
        }
        let ring = self.ring_or_make()?;
        let reader = ring.stage.reader().map_err(|_| Error::TooManySubscribers {
            topic: self.name.clone(),
            max: self.state.max_subscribers,
        })?;
        let id = next_subscriber_id();
        let sub = SubShared::new(
            self.state.clone(),
            self.tracker.clone(),
            ring.parents.clone(),
            id,
            named,
            self.name.clone(),
            reader.position(),
            stall_timeout,
        );
        let sub = Arc::new(if pull { sub.pulled() } else { sub });
        {
            // Finished subscribers are kept for `stats()` only until the next subscribe, so
            // churn does not grow the list without bound.
            let mut subscribers = self.lock_subscribers();
            subscribers.retain(|s| !s.done.is_cancelled());
            subscribers.push(sub.clone());
        }
        Ok((reader, sub))
    }

    /// The subscribers that would see a message published now: tasks and streams.
    #[inline]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.ring().map_or(0, |ring| ring.stage.readers())
    }

    fn lock_subscribers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<SubShared>>> {
        // The list is only pushed to and cloned; a panic cannot leave it inconsistent.
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The topic's writer, locked.
type Guard<'a, T> = WriterGuard<'a, Slot<T>>;

impl<T: Send + Sync + 'static> AnyTopic for TopicInner<T> {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn message_type(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn published(&self) -> u64 {
        match self.ring() {
            Some(ring) => ring.stage.published(),
            // Every message published so far reached nobody (see `unrouted`).
            None => self.unrouted.load(Ordering::Relaxed),
        }
    }

    fn subscribers(&self) -> Vec<Arc<SubShared>> {
        // Streams are pulled at their reader's pace: `close` neither waits for them nor
        // stops them (see `stream.rs`).
        let subscribers = self.lock_subscribers();
        subscribers.iter().filter(|s| !s.pull).cloned().collect()
    }

    fn stats(&self) -> TopicStats {
        let published = self.published();
        let subscribers = self.lock_subscribers().clone();
        TopicStats {
            name: self.name.to_string(),
            message_type: self.message_type(),
            capacity: self.capacity,
            published,
            unrouted: self.unrouted.load(Ordering::Relaxed),
            subscribers: subscribers
                .iter()
                .map(|s| s.stats(published))
                .collect::<Vec<SubscriberStats>>(),
        }
    }

    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            // Publishers waiting for room see `closing` and let go of the writer at once.
            *self.writer.lock().await = Slot::Closed;
        })
    }

    fn wait_publishers(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        // Publishers from outside waiting for room see `closing` and let go at once; one
        // from a handler keeps it until it has room, which the drain waits for anyway.
        Box::pin(async move {
            drop(self.writer.lock().await);
        })
    }

    fn wake_writer(&self) {
        if let Some(ring) = self.ring.get() {
            ring.stage.wake_writer();
        }
    }

    fn stop_subscribers(&self) -> Vec<(Arc<SubShared>, Unhandled)> {
        self.subscribers()
            .into_iter()
            .filter(|s| !s.done.is_cancelled())
            .map(|s| {
                let unhandled = Unhandled {
                    topic: self.name.to_string(),
                    subscriber: s.name.to_string(),
                    messages: 0,
                    running: !s.stop(),
                };
                (s, unhandled)
            })
            .collect()
    }
}

impl<T> fmt::Debug for TopicInner<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topic")
            .field("name", &&*self.name)
            .field("type", &std::any::type_name::<T>())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}
