//! The bus systems as the bus benchmarks wire them, shared by the criterion bench (`bus.rs`)
//! and the comparison runner (`compare/bus.rs`): subscribers that only count, the `System`
//! trait with `ringbus` and the topic maps a performance-minded tokio user would build from
//! the usual channels (tokio broadcast, async-broadcast, the fan-out of one bounded channel
//! per subscriber), the publishing side of a run (by name, or through handles resolved once)
//! and the checks of what every subscriber counted.
//!
//! Every peer gets its strongest reasonable wiring, each choice argued where it is made: a
//! sharded map (`dashmap`, hashed as ringbus hashes names) for lookups by name, handles
//! resolved once for the rows that publish through them, the channels' batch receives in
//! the subscribers, allocation-free send and receive forms where a crate has both.
//!
//! Included as `#[path = "common/bus_peers.rs"] mod bus_peers;` next to
//! `#[path = "common/stopwatch.rs"] mod stopwatch;`; the includer defines `CAP`, the queue
//! capacity of every system. What only one of them runs stays there: `ringbus/topic` in
//! `bus.rs`, the `kanal` and `flume` channels of the fan-out and the subscriptions without a
//! task in `compare/bus.rs`.

use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use ringbus::{Bus, Subscription, Topic};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::stopwatch::Stopwatch;
use crate::CAP;

/// Publisher tasks in the parallel scenarios.
pub(crate) const PUBLISHERS: u64 = 16;
/// Topics in the `*_topics` scenarios.
pub(crate) const TOPICS: usize = 100;
/// How long closing a bus (draining it) may take before the run fails.
const CLOSE_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Subscribers that only count
// ---------------------------------------------------------------------------------------------

/// What one subscriber saw.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) count: AtomicU64,
    sum: AtomicU64,
    /// Messages the system told this subscriber it lost (the lossy peer only).
    pub(crate) lost: AtomicU64,
    /// Subscriber tasks (handlers) that ended: bumped when a [`Counter`] is dropped.
    ended: AtomicU64,
}

/// Each subscriber's topic and tally.
pub(crate) type Tallies = Vec<(usize, Arc<CachePadded<Tally>>)>;

/// The handler's state: one per subscriber, owned by its task (or its handler closure).
pub(crate) struct Counter(Arc<CachePadded<Tally>>);

impl Counter {
    /// Counts one message. Only this subscriber writes its tally, so a load and a store do
    /// (no read-modify-write on the delivery path).
    #[inline]
    pub(crate) fn add(&self, v: u64) {
        let t = &self.0;
        t.count
            .store(t.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        t.sum.store(
            t.sum.load(Ordering::Relaxed).wrapping_add(v),
            Ordering::Relaxed,
        );
    }

    /// The counter as a `ringbus` handler closure.
    pub(crate) fn handler(self) -> impl Fn(&u64) -> std::future::Ready<()> + Send + Sync + 'static {
        move |m: &u64| {
            self.add(*m);
            std::future::ready(())
        }
    }

    /// The counter as a `ringbus` batch handler closure (`subscribe_batch`): one count and
    /// one sum per batch, as the fan-outs' subscribers count what one batch receive took.
    pub(crate) fn batch_handler(
        self,
    ) -> impl Fn(ringbus::Batch<'_, u64>) -> std::future::Ready<()> + Send + Sync + 'static {
        move |batch: ringbus::Batch<'_, u64>| {
            let (n, sum) = batch
                .iter()
                .fold((0u64, 0u64), |(n, sum), &m| (n + 1, sum.wrapping_add(m)));
            let t = &self.0;
            t.count
                .store(t.count.load(Ordering::Relaxed) + n, Ordering::Relaxed);
            t.sum.store(
                t.sum.load(Ordering::Relaxed).wrapping_add(sum),
                Ordering::Relaxed,
            );
            std::future::ready(())
        }
    }

    fn lose(&self, n: u64) {
        let t = &self.0;
        t.lost
            .store(t.lost.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::AcqRel);
    }
}

fn tally() -> Arc<CachePadded<Tally>> {
    Arc::new(CachePadded::new(Tally::default()))
}

/// How many of the messages `0..n` go to topic `t` of `topics` (message `i` goes to `i %
/// topics`), and the wrapping sum of their values.
fn expected(n: u64, topics: u64, t: u64) -> (u64, u64) {
    if t >= n {
        return (0, 0);
    }
    let count = (n - t).div_ceil(topics);
    let (c, t, m) = (u128::from(count), u128::from(t), u128::from(topics));
    let sum = t * c + m * c * (c - 1) / 2;
    (count, sum as u64)
}

// ---------------------------------------------------------------------------------------------
// The systems
// ---------------------------------------------------------------------------------------------

/// A topic-based bus as the benchmarks drive it. Topics are given by index into the names
/// the bus was built with. Two ways to publish, each its own row: by name
/// ([`publish`](System::publish): every implementation looks the name up, as its users
/// would), and through a handle resolved once before the clock starts
/// ([`resolve`](System::resolve) and [`publish_to`](System::publish_to): ringbus's `Topic`,
/// a peer's sender or subscriber list), as a user who keeps a handle would.
pub(crate) trait System: Send + Sync + Sized + 'static {
    /// True if a subscriber may lose messages (and is told how many).
    const LOSSY: bool;
    /// A running subscriber.
    type Sub: Send + 'static;
    /// A topic resolved once: what a publisher keeps instead of the topic's name.
    type Handle: Send + Sync + 'static;

    /// A bus whose topics `names` exist and hold `capacity` messages (or the system's
    /// smallest capacity, if that is more).
    fn build(capacity: usize, names: &[String]) -> Self;
    /// Subscribes `counter` to topic `topic`.
    fn subscribe(&self, topic: usize, counter: Counter) -> Self::Sub;
    /// Unsubscribes and waits for the subscriber's task to end.
    fn unsubscribe(&self, sub: Self::Sub) -> impl Future<Output = ()> + Send;
    /// Publishes `msg` to topic `topic`, looked up by name.
    fn publish(&self, topic: usize, msg: u64) -> impl Future<Output = ()> + Send;
    /// Resolves topic `topic` once, after its subscribers joined.
    fn resolve(&self, topic: usize) -> Self::Handle;
    /// Publishes `msg` through a resolved topic.
    fn publish_to(&self, topic: &Self::Handle, msg: u64) -> impl Future<Output = ()> + Send;
    /// Stops the bus; returns once every subscriber handled what it was sent and its task
    /// ended.
    fn close(&self, subs: Vec<Self::Sub>) -> impl Future<Output = ()> + Send;
}

/// Joins subscriber tasks, failing the benchmark if one panicked.
async fn join_all(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        task.await.expect("a subscriber task panicked");
    }
}

/// FNV-1a, the hash ringbus's own topic registry applies to names (`ringbus::bus::Fnv`), so
/// that a lookup by name compares the maps, not the hash functions: the std default
/// (SipHash-1-3, built against hash flooding) took about twice as long on names like these
/// (`topic-42`) when measured here, and a user who cares about a publish's cost would not
/// keep it for a map of names they chose.
pub(crate) struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A topic map as a performance-minded user writes one: topic name to `T` in a
/// `dashmap::DashMap` (sharded locks: publishers to different topics take different locks,
/// never one lock every publisher shares), every operation looking the topic up by name.
///
/// A lookup holds its shard's read lock only while it runs synchronous code: no system here
/// awaits under it (a publisher waiting for room while holding a shard's read lock would
/// block every subscribe to that shard, and the worker thread it runs on, for as long as it
/// waits). Where a publish awaits, it clones the topic's `Arc` out first and awaits holding
/// no lock.
pub(crate) struct TopicMap<T> {
    /// The capacity of a topic's channels.
    capacity: usize,
    names: Vec<String>,
    topics: DashMap<String, T, BuildHasherDefault<Fnv>>,
}

impl<T> TopicMap<T> {
    /// A map holding `make(capacity)` for each of `names`.
    fn new(capacity: usize, names: &[String], make: impl Fn(usize) -> T) -> Self {
        let topics = DashMap::with_hasher(BuildHasherDefault::default());
        for n in names {
            topics.insert(n.clone(), make(capacity));
        }
        Self {
            capacity,
            names: names.to_vec(),
            topics,
        }
    }

    /// `get` of topic `topic` under its shard's read lock; `None` if the map does not hold
    /// it.
    pub(crate) fn with<R>(&self, topic: usize, get: impl FnOnce(&T) -> R) -> Option<R> {
        self.topics.get(self.names[topic].as_str()).map(|e| get(&e))
    }

    /// `get` of topic `topic`, found under its shard's read lock, or else made
    /// (`make(capacity)`) under the write lock: a subscribe to a topic the bus was not built
    /// with.
    pub(crate) fn lookup<R>(
        &self,
        topic: usize,
        make: impl FnOnce(usize) -> T,
        get: impl Fn(&T) -> R,
    ) -> R {
        if let Some(r) = self.with(topic, &get) {
            return r;
        }
        let name = self.names[topic].clone();
        get(&self
            .topics
            .entry(name)
            .or_insert_with(|| make(self.capacity)))
    }

    /// `change` of topic `topic` under its shard's write lock, the topic made
    /// (`make(capacity)`) first if the map does not hold it. The name is cloned (allocated)
    /// only in that case.
    fn update<R>(
        &self,
        topic: usize,
        make: impl FnOnce(usize) -> T,
        change: impl FnOnce(&mut T) -> R,
    ) -> R {
        let name = &self.names[topic];
        match self.topics.get_mut(name.as_str()) {
            Some(mut e) => change(&mut e),
            None => change(
                &mut self
                    .topics
                    .entry(name.clone())
                    .or_insert_with(|| make(self.capacity)),
            ),
        }
    }

    /// Drops every topic (and so the map's senders).
    fn clear(&self) {
        self.topics.clear();
    }
}

/// `ringbus`: `bus.publish(name, msg).await` by name, `topic.publish(msg).await` through a
/// resolved `Topic<u64>`; subscribers are `bus.subscribe` closures, or with `BATCH`
/// ([`RingbusBatch`]) `bus.subscribe_batch` closures.
pub(crate) struct Ringbus<const BATCH: bool = false> {
    bus: Bus,
    names: Vec<String>,
}

/// `ringbus-batch`: [`Ringbus`] with batch subscribers (`bus.subscribe_batch`): each takes
/// what is queued for it in one handler call, as the fan-outs' subscribers take what their
/// channel holds with its batch receive (`recv_many`, `drain_into`, `try_iter`). Publishing
/// is the same.
pub(crate) type RingbusBatch = Ringbus<true>;

impl<const BATCH: bool> System for Ringbus<BATCH> {
    const LOSSY: bool = false;
    type Sub = Subscription;
    type Handle = Topic<u64>;

    fn build(capacity: usize, names: &[String]) -> Self {
        let bus = Bus::builder().capacity(capacity).build();
        for name in names {
            bus.topic::<u64>(name).expect("make topic");
        }
        Self {
            bus,
            names: names.to_vec(),
        }
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> Subscription {
        let name = &self.names[topic];
        if BATCH {
            self.bus.subscribe_batch(
                name,
                ringbus::SubscribeOptions::new(),
                counter.batch_handler(),
            )
        } else {
            self.bus.subscribe(name, counter.handler())
        }
        .expect("subscribe")
    }

    async fn unsubscribe(&self, sub: Subscription) {
        sub.unsubscribe().await;
    }

    async fn publish(&self, topic: usize, msg: u64) {
        self.bus
            .publish(&self.names[topic], msg)
            .await
            .expect("publish");
    }

    fn resolve(&self, topic: usize) -> Topic<u64> {
        self.bus.topic::<u64>(&self.names[topic]).expect("topic")
    }

    async fn publish_to(&self, topic: &Topic<u64>, msg: u64) {
        topic.publish(msg).await.expect("publish");
    }

    async fn close(&self, subs: Vec<Subscription>) {
        drop(subs); // a dropped Subscription runs on until the bus closes
        self.bus.close().await;
    }
}

/// `tokio-broadcast`: a [`TopicMap`] of `broadcast::Sender`s; lossy (`Lagged`).
///
/// A publish is `send` (synchronous: it never waits, and unlike tokio's other channels it
/// spends none of the task's cooperative budget), then `tokio::task::coop::consume_budget()`:
/// without it the publishing task never yields, and its subscriber, woken by the first send
/// into the LIFO slot of the publisher's worker (which the other worker cannot steal from,
/// and is not even notified of), does not run until the publisher is done: it then receives
/// the last queue's worth and is told it lost everything else (the "100 % lost" of
/// `publish/1`). A user sees their subscriber receive nothing and adds a yield point;
/// `consume_budget` is tokio's own for it, and makes this publisher exactly as cooperative as
/// ringbus's and tokio mpsc's (guarantee 11): a yield after tokio's budget of 128 sends.
pub(crate) struct TokioBroadcast(pub(crate) TopicMap<tokio::sync::broadcast::Sender<u64>>);

fn broadcast_topic(capacity: usize) -> tokio::sync::broadcast::Sender<u64> {
    tokio::sync::broadcast::channel(capacity).0
}

impl TokioBroadcast {
    /// A receiver of topic `topic` (no task).
    pub(crate) fn receiver(&self, topic: usize) -> tokio::sync::broadcast::Receiver<u64> {
        self.0.lookup(topic, broadcast_topic, |tx| tx.subscribe())
    }
}

impl System for TokioBroadcast {
    const LOSSY: bool = true;
    type Sub = JoinHandle<()>;
    type Handle = tokio::sync::broadcast::Sender<u64>;

    fn build(capacity: usize, names: &[String]) -> Self {
        Self(TopicMap::new(capacity.max(1), names, broadcast_topic))
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> JoinHandle<()> {
        use tokio::sync::broadcast::error::RecvError;
        let mut rx = self.receiver(topic);
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(m) => counter.add(m),
                    Err(RecvError::Lagged(n)) => counter.lose(n),
                    Err(RecvError::Closed) => break,
                }
            }
        })
    }

    async fn unsubscribe(&self, sub: JoinHandle<()>) {
        sub.abort(); // no draining leave: what its users do
        let _ = sub.await;
    }

    async fn publish(&self, topic: usize, msg: u64) {
        self.0.with(topic, |tx| {
            let _ = tx.send(msg); // Err only when there is no subscriber
        });
        tokio::task::coop::consume_budget().await; // see the type's docs
    }

    /// A clone of the topic's sender.
    fn resolve(&self, topic: usize) -> Self::Handle {
        self.0.with(topic, Clone::clone).expect("topic")
    }

    async fn publish_to(&self, tx: &Self::Handle, msg: u64) {
        let _ = tx.send(msg);
        tokio::task::coop::consume_budget().await;
    }

    async fn close(&self, subs: Vec<JoinHandle<()>>) {
        self.0.clear(); // the receivers drain, then see Closed
        join_all(subs).await;
    }
}

/// One `async_broadcast` channel of a topic, kept open by an inactive receiver.
pub(crate) struct AsyncBroadcastTopic {
    pub(crate) tx: async_broadcast::Sender<u64>,
    _open: async_broadcast::InactiveReceiver<u64>,
}

impl AsyncBroadcastTopic {
    fn new(capacity: usize) -> Arc<Self> {
        let (mut tx, rx) = async_broadcast::broadcast(capacity);
        tx.set_overflow(false); // the default, stated: publishers wait for room
        tx.set_await_active(false);
        Arc::new(Self {
            tx,
            _open: rx.deactivate(),
        })
    }
}

/// `async-broadcast`: a [`TopicMap`] of `async_broadcast` channels with backpressure;
/// `Arc`ed entries, so a publish by name clones one out of the map and awaits
/// `broadcast_direct` holding no lock. `broadcast_direct` / `recv_direct` are the crate's
/// allocation-free forms. The crate spends no tokio budget: a publisher yields when its
/// queue is full, which on one topic is every queue's worth.
pub(crate) struct AsyncBroadcast(pub(crate) TopicMap<Arc<AsyncBroadcastTopic>>);

impl AsyncBroadcast {
    /// A receiver of topic `topic` (no task).
    pub(crate) fn receiver(&self, topic: usize) -> async_broadcast::Receiver<u64> {
        self.0
            .lookup(topic, AsyncBroadcastTopic::new, |t| t.tx.new_receiver())
    }
}

impl System for AsyncBroadcast {
    const LOSSY: bool = false;
    type Sub = JoinHandle<()>;
    /// A clone of the topic's `Arc` (its sender, kept open by the map's inactive receiver).
    type Handle = Arc<AsyncBroadcastTopic>;

    fn build(capacity: usize, names: &[String]) -> Self {
        Self(TopicMap::new(
            capacity.max(1),
            names,
            AsyncBroadcastTopic::new,
        ))
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> JoinHandle<()> {
        let mut rx = self.receiver(topic);
        tokio::spawn(async move {
            loop {
                match rx.recv_direct().await {
                    Ok(m) => counter.add(m),
                    Err(async_broadcast::RecvError::Overflowed(n)) => counter.lose(n),
                    Err(async_broadcast::RecvError::Closed) => break,
                }
            }
        })
    }

    async fn unsubscribe(&self, sub: JoinHandle<()>) {
        sub.abort();
        let _ = sub.await;
    }

    async fn publish(&self, topic: usize, msg: u64) {
        if let Some(topic) = self.0.with(topic, Arc::clone) {
            let _ = topic.tx.broadcast_direct(msg).await;
        }
    }

    fn resolve(&self, topic: usize) -> Self::Handle {
        self.0.with(topic, Arc::clone).expect("topic")
    }

    async fn publish_to(&self, topic: &Self::Handle, msg: u64) {
        let _ = topic.tx.broadcast_direct(msg).await;
    }

    async fn close(&self, subs: Vec<JoinHandle<()>>) {
        self.0.clear(); // last sender gone: receivers drain, then Closed
        join_all(subs).await;
    }
}

/// A bounded channel with an async send and receive, for the fan-out buses.
pub(crate) trait Channel: Send + Sync + 'static {
    type Tx: Clone + Send + Sync + 'static;
    type Rx: Send + 'static;
    /// The smallest capacity the channel supports.
    const MIN_CAPACITY: usize;
    fn channel(capacity: usize) -> (Self::Tx, Self::Rx);
    /// Sends, waiting for room; false if the receiver is gone.
    fn send(tx: &Self::Tx, msg: u64) -> impl Future<Output = bool> + Send;
    /// Counts every message until the channel is closed and drained, taking what is there
    /// in one go with the channel's batch receive where it has one (`recv_many`,
    /// `drain_into`, `try_iter`), into a buffer sized when the first message arrives (a
    /// subscriber that never receives allocates none).
    fn consume(rx: Self::Rx, counter: Counter) -> impl Future<Output = ()> + Send;
}

/// A subscriber's batch buffer: room for a full queue plus the senders that may be waiting
/// (16 publishers), so no batch receive grows it.
pub(crate) fn batch_buffer() -> Vec<u64> {
    Vec::with_capacity(CAP + PUBLISHERS as usize)
}

/// `tokio::sync::mpsc` (capacity at least 1).
pub(crate) struct TokioMpsc;

impl Channel for TokioMpsc {
    type Tx = tokio::sync::mpsc::Sender<u64>;
    type Rx = tokio::sync::mpsc::Receiver<u64>;
    const MIN_CAPACITY: usize = 1;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        tokio::sync::mpsc::channel(capacity)
    }

    async fn send(tx: &Self::Tx, msg: u64) -> bool {
        tx.send(msg).await.is_ok()
    }

    async fn consume(mut rx: Self::Rx, counter: Counter) {
        let Some(m) = rx.recv().await else { return };
        counter.add(m);
        let mut buf = batch_buffer();
        while rx.recv_many(&mut buf, CAP).await > 0 {
            for m in buf.drain(..) {
                counter.add(m);
            }
        }
    }
}

/// A topic's subscribers in a fan-out bus: (subscriber id, its channel), one allocation.
pub(crate) type Fanout<C> = Arc<[(u64, <C as Channel>::Tx)]>;

/// The Go-bus design: a [`TopicMap`] of copy-on-write subscriber lists, one bounded channel
/// per subscriber; a publish sends to each in turn and waits for room in each. By name, a
/// publish clones the topic's list (an `Arc`) out of the map; the resolved handle is that
/// list, taken once after the subscribers joined: a snapshot that would miss a later
/// subscriber (ringbus's `Topic` would not), which no scenario has, so it is this design's
/// best case.
pub(crate) struct FanoutBus<C: Channel> {
    next_id: AtomicU64,
    pub(crate) map: TopicMap<Fanout<C>>,
}

impl<C: Channel> FanoutBus<C> {
    /// A new channel in topic `topic`'s list: its id and receiver (no task).
    pub(crate) fn join(&self, topic: usize) -> (u64, C::Rx) {
        let (tx, rx) = C::channel(self.map.capacity);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let empty = |_| Fanout::<C>::from(Vec::new());
        self.map.update(topic, empty, |subs| {
            *subs = subs.iter().cloned().chain([(id, tx)]).collect();
        });
        (id, rx)
    }

    /// Takes channel `id` out of topic `topic`'s list (its receiver then sees the channel
    /// closed once drained). The new list is collected from an iterator of known length, so
    /// it is allocated once, in place (a `filter` would collect into a `Vec` first).
    pub(crate) fn leave(&self, topic: usize, id: u64) {
        let empty = |_| Fanout::<C>::from(Vec::new());
        self.map.update(topic, empty, |subs| {
            if let Some(k) = subs.iter().position(|(i, _)| *i == id) {
                *subs = subs[..k].iter().chain(&subs[k + 1..]).cloned().collect();
            }
        });
    }
}

impl<C: Channel> System for FanoutBus<C> {
    const LOSSY: bool = false;
    type Sub = (usize, u64, JoinHandle<()>);
    type Handle = Fanout<C>;

    fn build(capacity: usize, names: &[String]) -> Self {
        let capacity = capacity.max(C::MIN_CAPACITY);
        Self {
            next_id: AtomicU64::new(0),
            map: TopicMap::new(capacity, names, |_| Fanout::<C>::from(Vec::new())),
        }
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> Self::Sub {
        let (id, rx) = self.join(topic);
        (topic, id, tokio::spawn(C::consume(rx, counter)))
    }

    async fn unsubscribe(&self, (topic, id, task): Self::Sub) {
        self.leave(topic, id);
        // Its channel's last sender is gone: the task drains it, then ends.
        task.await.expect("a subscriber task panicked");
    }

    async fn publish(&self, topic: usize, msg: u64) {
        if let Some(subs) = self.map.with(topic, Arc::clone) {
            for (_, tx) in subs.iter() {
                let _ = C::send(tx, msg).await; // false only if the subscriber is gone
            }
        }
    }

    fn resolve(&self, topic: usize) -> Self::Handle {
        self.map.with(topic, Arc::clone).expect("topic")
    }

    async fn publish_to(&self, subs: &Self::Handle, msg: u64) {
        for (_, tx) in subs.iter() {
            let _ = C::send(tx, msg).await;
        }
    }

    async fn close(&self, subs: Vec<Self::Sub>) {
        self.map.clear();
        join_all(subs.into_iter().map(|(_, _, task)| task).collect()).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Running a system
// ---------------------------------------------------------------------------------------------

/// The shape of a publish scenario.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    topics: usize,
    subscribers_per_topic: usize,
    capacity: usize,
    publishers: u64,
    /// Publish through handles resolved once (`System::resolve`) instead of by name.
    resolved: bool,
}

impl Shape {
    /// One topic with `subscribers` subscribers, `CAP` messages deep, one publisher.
    pub(crate) fn one_topic(subscribers: usize) -> Self {
        Self {
            topics: 1,
            subscribers_per_topic: subscribers,
            capacity: CAP,
            publishers: 1,
            resolved: false,
        }
    }

    /// `topics` topics, each with the subscribers of this shape; message `i` goes to topic
    /// `i % topics`.
    pub(crate) fn topics(self, topics: usize) -> Self {
        Self { topics, ..self }
    }

    /// Every topic `capacity` messages deep.
    pub(crate) fn capacity(self, capacity: usize) -> Self {
        Self { capacity, ..self }
    }

    /// `publishers` publisher tasks at once.
    pub(crate) fn publishers(self, publishers: u64) -> Self {
        Self { publishers, ..self }
    }

    /// Publishing through handles resolved once before the clock starts (ringbus's `Topic`,
    /// the peers' senders or subscriber lists), not by name.
    pub(crate) fn resolved(self) -> Self {
        Self {
            resolved: true,
            ..self
        }
    }

    /// How many of the messages `0..published` go to topic `topic`, and the wrapping sum of
    /// their values.
    pub(crate) fn expected(&self, published: u64, topic: usize) -> (u64, u64) {
        expected(published, self.topics as u64, topic as u64)
    }
}

pub(crate) fn topic_names(n: usize) -> Vec<String> {
    (0..n).map(|t| format!("topic-{t}")).collect()
}

/// Builds the bus of `shape` and its subscribers (as tasks on `rt`).
pub(crate) fn wire<S: System>(rt: &Runtime, shape: Shape) -> (Arc<S>, Vec<S::Sub>, Tallies) {
    let _runtime = rt.enter(); // subscribers are tasks on `rt`
    let sys = Arc::new(S::build(shape.capacity, &topic_names(shape.topics)));
    let mut subs = Vec::new();
    let mut tallies = Vec::new();
    for t in 0..shape.topics {
        for _ in 0..shape.subscribers_per_topic {
            let tally = tally();
            subs.push(sys.subscribe(t, Counter(tally.clone())));
            tallies.push((t, tally));
        }
    }
    (sys, subs, tallies)
}

/// Every topic of `shape` resolved once, if the shape publishes through handles.
type Handles<S> = Option<Arc<Vec<<S as System>::Handle>>>;

/// Publishes the messages `first, first + step, ...` below `end`, message `i` to topic
/// `i % topics`: through `handles` if there are, else by name.
async fn publish_share<S: System>(
    sys: &S,
    handles: &Handles<S>,
    topics: usize,
    first: u64,
    step: u64,
    end: u64,
) {
    let topics = topics as u64;
    let dt = step % topics;
    let (mut i, mut t) = (first, first % topics);
    while i < end {
        match handles {
            Some(h) => sys.publish_to(&h[t as usize], i).await,
            None => sys.publish(t as usize, i).await,
        }
        i += step;
        t += dt;
        if t >= topics {
            t -= topics;
        }
    }
}

/// Publishes the messages `from..from + n` as the shape says, inside the timed window: with
/// one publisher from before its first publish to after its last; with many (publisher `p`
/// publishing `from + p, from + p + publishers, ...`), from before they are spawned until the
/// last is joined. A shape that publishes through handles resolves every topic once before
/// the window opens (every subscriber has joined by then), as a user resolves a topic once
/// and keeps the handle; its publishers share them (a handle is only read).
pub(crate) async fn publish_timed<W: Stopwatch, S: System>(
    sys: Arc<S>,
    shape: Shape,
    from: u64,
    n: u64,
) -> W::Reading {
    let end = from + n;
    let handles: Handles<S> = shape
        .resolved
        .then(|| Arc::new((0..shape.topics).map(|t| sys.resolve(t)).collect()));
    if shape.publishers == 1 {
        let window = W::start();
        publish_share(&*sys, &handles, shape.topics, from, 1, end).await;
        return window.stop();
    }
    let window = W::start();
    let tasks: Vec<_> = (0..shape.publishers)
        .map(|p| {
            let (sys, handles) = (sys.clone(), handles.clone());
            tokio::spawn(async move {
                let (topics, step) = (shape.topics, shape.publishers);
                publish_share(&*sys, &handles, topics, from + p, step, end).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a publisher panicked");
    }
    window.stop()
}

/// Waits (untimed) until every tally's handler was dropped, `want` in all.
fn wait_ended(system: &str, tallies: &[&Tally], want: u64) {
    let start = Instant::now();
    loop {
        let ended: u64 = tallies
            .iter()
            .map(|t| t.ended.load(Ordering::Acquire))
            .sum();
        if ended >= want {
            assert_eq!(ended, want, "{system}: more subscribers ended than ran");
            return;
        }
        assert!(
            start.elapsed() < CLOSE_LIMIT,
            "{system}: {ended} of {want} subscribers ended after {CLOSE_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Closes the bus (untimed; every system drains what was queued before its subscriber tasks
/// end) and waits until every subscriber's handler was dropped. (ringbus's close returns when
/// every subscriber task is done with its ring; the task drops its handler a moment later.)
pub(crate) fn close<S: System>(
    rt: &Runtime,
    system: &str,
    sys: &S,
    subs: Vec<S::Sub>,
    tallies: &Tallies,
) {
    rt.block_on(async {
        tokio::time::timeout(CLOSE_LIMIT, sys.close(subs))
            .await
            .unwrap_or_else(|_| panic!("{system}: close did not finish in {CLOSE_LIMIT:?}"))
    });
    let refs: Vec<&Tally> = tallies.iter().map(|(_, t)| &***t).collect();
    wait_ended(system, &refs, refs.len() as u64);
}

/// Checks every subscriber's count and sum against the messages `0..published` of its topic
/// exactly; a subscriber of a lossy system that was told it lost messages must account for
/// each as received or lost. Returns (lost, deliveries due).
pub(crate) fn check<S: System>(
    system: &str,
    tallies: &Tallies,
    shape: Shape,
    published: u64,
) -> (u64, u64) {
    let (mut lost, mut deliveries) = (0, 0);
    for (i, (t, tally)) in tallies.iter().enumerate() {
        let (want, want_sum) = shape.expected(published, *t);
        let got = tally.count.load(Ordering::Acquire);
        let l = tally.lost.load(Ordering::Acquire);
        deliveries += want;
        lost += l;
        if l == 0 {
            assert_eq!(
                (got, tally.sum.load(Ordering::Acquire)),
                (want, want_sum),
                "{system}: subscriber {i} of topic {t} handled {got} of {want} (or the wrong \
                 messages)"
            );
        } else {
            assert!(S::LOSSY, "{system}: subscriber {i} lost {l} messages");
            assert_eq!(
                got + l,
                want,
                "{system}: subscriber {i} of topic {t}: received {got} + lost {l} != {want}"
            );
        }
    }
    assert!(deliveries > 0, "{system}: nothing was delivered");
    (lost, deliveries)
}

/// `subscribe`: `n` subscribe + unsubscribe pairs on an existing topic from a task on `rt`
/// (timed), then a check that `n` subscribers ran and ended. Returns the window's reading
/// and the tasks one subscription keeps alive (see [`tasks_alive`]).
pub(crate) fn subscribe_round<W: Stopwatch, S: System>(
    rt: &Runtime,
    system: &str,
    n: u64,
) -> (W::Reading, u64) {
    let sys = Arc::new(S::build(CAP, &topic_names(1)));
    let tally = tally();
    let timed = rt
        .block_on(rt.spawn({
            let (sys, tally) = (sys.clone(), tally.clone());
            async move {
                let window = W::start();
                for _ in 0..n {
                    let sub = sys.subscribe(0, Counter(tally.clone()));
                    sys.unsubscribe(sub).await;
                }
                window.stop()
            }
        }))
        .expect("the subscribing task panicked");
    let (s, t) = (&*sys, &tally);
    let tasks = tasks_alive(rt, || {
        let sub = s.subscribe(0, Counter(t.clone()));
        move || rt.block_on(s.unsubscribe(sub))
    });
    rt.block_on(sys.close(Vec::new()));
    wait_ended(system, &[&tally], n + 3);
    (timed, tasks)
}

/// How many more tasks are alive on `rt` while what `hold` made is held (`hold` returns its
/// release), measured untimed after a round, not taken from the wiring's word: the runtime's
/// count of alive tasks (`RuntimeMetrics::num_alive_tasks`) with it held, less the count
/// before. A task of the round that ends late would lower one reading, never raise it, so the
/// highest of 3 is kept.
pub(crate) fn tasks_alive<R: FnOnce()>(rt: &Runtime, mut hold: impl FnMut() -> R) -> u64 {
    let metrics = rt.metrics();
    let _runtime = rt.enter();
    (0..3)
        .map(|_| {
            let before = metrics.num_alive_tasks();
            let release = hold();
            let during = metrics.num_alive_tasks();
            release();
            during.saturating_sub(before) as u64
        })
        .max()
        .unwrap_or(0)
}
