//! The bus (`ringbus`) against the buses a user would build from the usual channels instead,
//! side by side in one run.
//!
//! Scenarios (names from `/work/shared/BENCHMARKS.md`, one criterion group each, every system
//! of a scenario in the same group):
//!
//! | group | what |
//! |---|---|
//! | `publish/1`, `publish/10`, `publish/100` | one topic, N subscribers |
//! | `publish_topics` | 100 topics, one subscriber each; message `i` goes to topic `i % 100` |
//! | `publish_unbuffered` | one topic, one subscriber; ringbus capacity 0, the peers capacity 1 |
//! | `publish_parallel` | one topic, one subscriber, 16 publisher tasks at once |
//! | `publish_parallel_topics` | as `publish_topics`, from 16 publisher tasks at once |
//! | `subscribe` | subscribe to an existing topic, then unsubscribe (wait for the task's end) |
//!
//! Systems, wired as a user would wire them, every topic holding 1024 `u64` messages unless
//! the scenario says otherwise:
//!
//! - `ringbus`: `bus.publish(name, msg).await` by name; `ringbus/topic` publishes through a
//!   resolved [`Topic`] handle instead (`topic.publish(msg).await`). Subscribers are
//!   `bus.subscribe(name, |m: &u64| ...)` closures.
//! - `tokio-broadcast`: `std::sync::RwLock<HashMap<String, tokio::sync::broadcast::Sender<u64>>>`;
//!   a publish takes the read lock and `send`s. Lossy: a subscriber a lap behind gets
//!   `Lagged(n)`; the losses are counted, checked (`received + lost == published`) and
//!   printed as `LOSSES ...` lines after each benchmark.
//! - `async-broadcast`: the same map over `async_broadcast` (overflow off, so publishers wait:
//!   backpressure; `await_active` off, so a topic without subscribers drops, as the others
//!   do). The map holds `Arc`s so a publish clones one out of the read lock and awaits
//!   `broadcast_direct` without holding it (a `std` guard cannot cross an `.await` in a
//!   spawned task). `broadcast_direct` / `recv_direct` are the crate's allocation-free forms.
//! - `tokio-mpsc-fanout`: a topic map of copy-on-write `Arc<Vec<tokio::sync::mpsc::Sender>>`,
//!   one bounded channel per subscriber; a publish sends to each in turn (`send().await`), the
//!   design of Go buses.
//!
//! Every subscriber only counts: its own counter (a cache-padded count and sum, written with
//! a plain load and store by the subscriber alone), never one shared with other subscribers.
//!
//! # Method
//!
//! One tokio multi-thread runtime with 2 worker threads runs everything: the subscribers are
//! tasks on it, and so are the publishers. Each benchmark builds its bus and subscribers once
//! (untimed) and keeps them across its criterion samples. A sample (`iter_custom(n)`) spawns a
//! publisher task that publishes the next `n` messages (values are the running message
//! indices; message `i` goes to topic `i % topics`) and times only that: from before the first
//! publish until the last one returned (with 16 publishers: from before they are spawned until
//! all of them are joined; publisher `p` publishes the indices `p, p + 16, ...` of the
//! sample). Then, untimed, the benchmark waits until every subscriber has counted every
//! message of its topic so far (the lossy peer: counted or been told it lost), so no sample
//! inherits the previous one's backlog. After the last sample the bus is closed (ringbus with
//! `close().await`, which drains; the peers by dropping their senders and joining every
//! subscriber task, which drains its queue first), and every subscriber's count and sum are
//! checked against what was published to its topic (the lossy peer: received + reported lost
//! == published). The benchmark prints a `CHECKED` line with the totals; one that delivered
//! nothing fails.
//!
//! The backpressured systems can never be more than a queue ahead of their slowest subscriber,
//! so their figure is also the sustained throughput of the whole pipeline. tokio's broadcast
//! never waits: its figure is the publisher's cost alone, with the losses shown beside it.
//!
//! Criterion's iteration is one publish call (`Throughput::Elements(1)`), whatever the number
//! of subscribers it reaches; for `subscribe` it is one subscribe + unsubscribe.
//!
//! Unsubscribing: ringbus's `Subscription::unsubscribe().await` lets the subscriber handle
//! what was queued for it, then waits for its task; the mpsc fan-out removes the channel from
//! the topic and joins the task (which drains the channel first); the broadcast peers have no
//! draining leave, so they abort the task and join it, which is what their users do.
//!
//! Allocations per subscribe + unsubscribe are not measured here (that needs a counting global
//! allocator, which would tax every system in this binary): `tests/alloc_bus.rs` does.
//!
//! Build flags: run with `RUSTFLAGS` cleared, e.g. `RUSTFLAGS= cargo bench --bench bus`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use crossbeam_utils::CachePadded;
use ringbus::{Bus, SubscribeOptions, Subscription, Topic};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// Queue capacity of every system unless a scenario says otherwise.
const CAP: usize = 1024;

/// Publisher tasks in the parallel scenarios.
const PUBLISHERS: u64 = 16;

/// Topics in the `*_topics` scenarios.
const TOPICS: usize = 100;

// ---------------------------------------------------------------------------------------------
// Counting subscribers and checking what they counted
// ---------------------------------------------------------------------------------------------

/// What one subscriber saw.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    sum: AtomicU64,
    /// Messages the system told this subscriber it lost (the lossy peer only).
    lost: AtomicU64,
    /// Subscriber tasks (handlers) that ended: bumped when a [`Counter`] is dropped.
    ended: AtomicU64,
}

/// The handler's state: one per subscriber, owned by its task (or its handler closure).
struct Counter(Arc<CachePadded<Tally>>);

impl Counter {
    /// Counts one message. Only this subscriber writes its tally, so a load and a store do
    /// (no read-modify-write on the delivery path).
    #[inline]
    fn add(&self, v: u64) {
        let t = &self.0;
        t.count
            .store(t.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        t.sum.store(
            t.sum.load(Ordering::Relaxed).wrapping_add(v),
            Ordering::Relaxed,
        );
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

/// A topic-based bus as the benchmark drives it. Topics are given by index into the names
/// the bus was built with; every implementation looks them up by name, as its users would
/// (except `ringbus/topic`, whose point is the resolved handle).
trait System: Send + Sync + Sized + 'static {
    /// True if a subscriber may lose messages (and is told how many).
    const LOSSY: bool;
    /// A running subscriber.
    type Sub: Send + 'static;

    /// A bus whose topics `names` exist and hold `capacity` messages.
    fn build(capacity: usize, names: &[String]) -> Self;
    /// Subscribes `counter` to topic `topic`.
    fn subscribe(&self, topic: usize, counter: Counter) -> Self::Sub;
    /// Unsubscribes and waits for the subscriber's task to end.
    fn unsubscribe(&self, sub: Self::Sub) -> impl Future<Output = ()> + Send;
    /// Publishes `msg` to topic `topic`.
    fn publish(&self, topic: usize, msg: u64) -> impl Future<Output = ()> + Send;
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

/// ringbus, publishing by name.
struct Ringbus {
    bus: Bus,
    names: Vec<String>,
}

impl System for Ringbus {
    const LOSSY: bool = false;
    type Sub = Subscription;

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
        self.bus
            .subscribe(&self.names[topic], move |m: &u64| {
                counter.add(*m);
                std::future::ready(())
            })
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

    async fn close(&self, subs: Vec<Subscription>) {
        drop(subs); // a dropped Subscription runs on until the bus closes
        self.bus.close().await;
    }
}

/// ringbus, publishing (and subscribing) through resolved `Topic` handles.
struct RingbusTopic {
    bus: Bus,
    topics: Vec<Topic<u64>>,
}

impl System for RingbusTopic {
    const LOSSY: bool = false;
    type Sub = Subscription;

    fn build(capacity: usize, names: &[String]) -> Self {
        let bus = Bus::builder().capacity(capacity).build();
        let topics = names
            .iter()
            .map(|name| bus.topic::<u64>(name).expect("make topic"))
            .collect();
        Self { bus, topics }
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> Subscription {
        self.topics[topic]
            .subscribe(SubscribeOptions::new(), move |m: &u64| {
                counter.add(*m);
                std::future::ready(())
            })
            .expect("subscribe")
    }

    async fn unsubscribe(&self, sub: Subscription) {
        sub.unsubscribe().await;
    }

    async fn publish(&self, topic: usize, msg: u64) {
        self.topics[topic].publish(msg).await.expect("publish");
    }

    async fn close(&self, subs: Vec<Subscription>) {
        drop(subs);
        self.bus.close().await;
    }
}

/// A topic map over `tokio::sync::broadcast` (lossy).
struct TokioBroadcast {
    capacity: usize,
    names: Vec<String>,
    topics: RwLock<HashMap<String, tokio::sync::broadcast::Sender<u64>>>,
}

impl System for TokioBroadcast {
    const LOSSY: bool = true;
    type Sub = JoinHandle<()>;

    fn build(capacity: usize, names: &[String]) -> Self {
        let bus = Self {
            capacity: capacity.max(1),
            names: names.to_vec(),
            topics: RwLock::new(HashMap::new()),
        };
        let mut topics = bus.topics.write().unwrap();
        for name in names {
            topics.insert(
                name.clone(),
                tokio::sync::broadcast::channel(bus.capacity).0,
            );
        }
        drop(topics);
        bus
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> JoinHandle<()> {
        use tokio::sync::broadcast::error::RecvError;
        let name = &self.names[topic];
        let found = self
            .topics
            .read()
            .unwrap()
            .get(name)
            .map(|tx| tx.subscribe());
        let mut rx = match found {
            Some(rx) => rx,
            None => self
                .topics
                .write()
                .unwrap()
                .entry(name.clone())
                .or_insert_with(|| tokio::sync::broadcast::channel(self.capacity).0)
                .subscribe(),
        };
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
        sub.abort();
        let _ = sub.await;
    }

    async fn publish(&self, topic: usize, msg: u64) {
        if let Some(tx) = self.topics.read().unwrap().get(&self.names[topic]) {
            let _ = tx.send(msg); // Err only when there is no subscriber
        }
    }

    async fn close(&self, subs: Vec<JoinHandle<()>>) {
        self.topics.write().unwrap().clear(); // the receivers drain, then see Closed
        join_all(subs).await;
    }
}

/// One `async_broadcast` channel of a topic, kept open by an inactive receiver.
struct AsyncBroadcastTopic {
    tx: async_broadcast::Sender<u64>,
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

/// A topic map over `async_broadcast` with backpressure.
struct AsyncBroadcast {
    capacity: usize,
    names: Vec<String>,
    topics: RwLock<HashMap<String, Arc<AsyncBroadcastTopic>>>,
}

impl System for AsyncBroadcast {
    const LOSSY: bool = false;
    type Sub = JoinHandle<()>;

    fn build(capacity: usize, names: &[String]) -> Self {
        let capacity = capacity.max(1);
        let topics = names
            .iter()
            .map(|name| (name.clone(), AsyncBroadcastTopic::new(capacity)))
            .collect();
        Self {
            capacity,
            names: names.to_vec(),
            topics: RwLock::new(topics),
        }
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> JoinHandle<()> {
        let name = &self.names[topic];
        let found = self.topics.read().unwrap().get(name).cloned();
        let topic = match found {
            Some(topic) => topic,
            None => self
                .topics
                .write()
                .unwrap()
                .entry(name.clone())
                .or_insert_with(|| AsyncBroadcastTopic::new(self.capacity))
                .clone(),
        };
        let mut rx = topic.tx.new_receiver();
        drop(topic);
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
        let topic = self.topics.read().unwrap().get(&self.names[topic]).cloned();
        if let Some(topic) = topic {
            let _ = topic.tx.broadcast_direct(msg).await;
        }
    }

    async fn close(&self, subs: Vec<JoinHandle<()>>) {
        self.topics.write().unwrap().clear(); // last sender gone: receivers drain, then Closed
        join_all(subs).await;
    }
}

/// A topic's subscribers in the mpsc fan-out bus: (subscriber id, its channel).
type Fanout = Arc<Vec<(u64, tokio::sync::mpsc::Sender<u64>)>>;

/// A topic map of bounded `tokio::sync::mpsc` channels, one per subscriber.
struct MpscFanout {
    capacity: usize,
    names: Vec<String>,
    next_id: AtomicU64,
    topics: RwLock<HashMap<String, Fanout>>,
}

impl System for MpscFanout {
    const LOSSY: bool = false;
    type Sub = (usize, u64, JoinHandle<()>);

    fn build(capacity: usize, names: &[String]) -> Self {
        let topics = names
            .iter()
            .map(|name| (name.clone(), Fanout::default()))
            .collect();
        Self {
            capacity: capacity.max(1),
            names: names.to_vec(),
            next_id: AtomicU64::new(0),
            topics: RwLock::new(topics),
        }
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> Self::Sub {
        let (tx, mut rx) = tokio::sync::mpsc::channel(self.capacity);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut topics = self.topics.write().unwrap();
            let subs = topics.entry(self.names[topic].clone()).or_default();
            let mut next = Vec::with_capacity(subs.len() + 1);
            next.extend(subs.iter().cloned());
            next.push((id, tx));
            *subs = Arc::new(next);
        }
        let task = tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                counter.add(m);
            }
        });
        (topic, id, task)
    }

    async fn unsubscribe(&self, (topic, id, task): Self::Sub) {
        {
            let mut topics = self.topics.write().unwrap();
            if let Some(subs) = topics.get_mut(&self.names[topic]) {
                let next = subs.iter().filter(|(i, _)| *i != id).cloned().collect();
                *subs = Arc::new(next);
            }
        }
        // Its channel's last sender is gone: the task drains it, then ends.
        task.await.expect("a subscriber task panicked");
    }

    async fn publish(&self, topic: usize, msg: u64) {
        let subs = self.topics.read().unwrap().get(&self.names[topic]).cloned();
        if let Some(subs) = subs {
            for (_, tx) in subs.iter() {
                let _ = tx.send(msg).await; // Err only if the subscriber is gone
            }
        }
    }

    async fn close(&self, subs: Vec<Self::Sub>) {
        self.topics.write().unwrap().clear();
        join_all(subs.into_iter().map(|(_, _, task)| task).collect()).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Driving a scenario
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Scenario {
    topics: usize,
    subscribers_per_topic: usize,
    capacity: usize,
    publishers: u64,
}

/// Publishes the messages `first, first + step, ...` below `end`, message `i` to topic
/// `i % topics`.
async fn publish_share<S: System>(sys: &S, topics: usize, first: u64, step: u64, end: u64) {
    let topics = topics as u64;
    let dt = step % topics;
    let (mut i, mut t) = (first, first % topics);
    while i < end {
        sys.publish(t as usize, i).await;
        i += step;
        t += dt;
        if t >= topics {
            t -= topics;
        }
    }
}

/// Publishes the messages `from..from + n` as the scenario says; returns the time the
/// publishing took.
async fn drive<S: System>(sys: Arc<S>, sc: Scenario, from: u64, n: u64) -> Duration {
    let end = from + n;
    if sc.publishers == 1 {
        let start = Instant::now();
        publish_share(&*sys, sc.topics, from, 1, end).await;
        return start.elapsed();
    }
    let start = Instant::now();
    let tasks: Vec<_> = (0..sc.publishers)
        .map(|p| {
            let sys = sys.clone();
            tokio::spawn(async move {
                publish_share(&*sys, sc.topics, from + p, sc.publishers, end).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a publisher panicked");
    }
    start.elapsed()
}

fn topic_names(n: usize) -> Vec<String> {
    (0..n).map(|t| format!("topic-{t}")).collect()
}

/// How long a subscriber may take to count what was published before the benchmark fails.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// One benchmark's bus and subscribers, kept across its criterion samples (so a sample's wall
/// time is its publishing and the drain, not the set-up, and criterion sizes samples right).
struct Harness<S: System> {
    sys: Arc<S>,
    sc: Scenario,
    subs: Vec<S::Sub>,
    /// Each subscriber's topic and tally.
    tallies: Vec<(usize, Arc<CachePadded<Tally>>)>,
    /// Messages published so far: `0..published`.
    published: u64,
}

impl<S: System> Harness<S> {
    fn new(rt: &Runtime, sc: Scenario) -> Self {
        let _runtime = rt.enter(); // subscribers are tasks on `rt`
        let sys = Arc::new(S::build(sc.capacity, &topic_names(sc.topics)));
        let mut subs = Vec::new();
        let mut tallies = Vec::new();
        for t in 0..sc.topics {
            for _ in 0..sc.subscribers_per_topic {
                let tally = tally();
                subs.push(sys.subscribe(t, Counter(tally.clone())));
                tallies.push((t, tally));
            }
        }
        Self {
            sys,
            sc,
            subs,
            tallies,
            published: 0,
        }
    }

    /// One criterion sample: publishes the next `n` messages from a task on the runtime
    /// (timed), then waits, untimed, until every subscriber counted (or was told it lost)
    /// every message of its topic.
    fn sample(&mut self, rt: &Runtime, system: &str, n: u64) -> Duration {
        let driver = drive(self.sys.clone(), self.sc, self.published, n);
        let elapsed = rt
            .block_on(rt.spawn(driver))
            .expect("the publisher panicked");
        self.published += n;
        self.settle(system);
        elapsed
    }

    /// Waits until every subscriber has accounted for everything published so far.
    fn settle(&self, system: &str) {
        let start = Instant::now();
        for (i, (t, tally)) in self.tallies.iter().enumerate() {
            let (want, _) = expected(self.published, self.sc.topics as u64, *t as u64);
            loop {
                let seen = tally.count.load(Ordering::Acquire) + tally.lost.load(Ordering::Acquire);
                if seen >= want {
                    break;
                }
                assert!(
                    start.elapsed() < SETTLE_LIMIT,
                    "{system}: subscriber {i} of topic {t} accounted for {seen} of {want} messages \
                     after {SETTLE_LIMIT:?}"
                );
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Closes the bus (untimed), checks every subscriber's count and sum, and reports.
    fn finish(self, rt: &Runtime, id: &str) {
        let Self {
            sys,
            sc,
            subs,
            tallies,
            published,
        } = self;
        rt.block_on(sys.close(subs));
        // ringbus's close returns when every subscriber task is done with its ring; the task
        // drops its handler (and so its counter) a moment later.
        let start = Instant::now();
        while !tallies
            .iter()
            .all(|(_, t)| t.ended.load(Ordering::Acquire) == 1)
        {
            assert!(
                start.elapsed() < SETTLE_LIMIT,
                "{id}: a subscriber never ended"
            );
            std::thread::sleep(Duration::from_micros(50));
        }
        let (mut lost_total, mut deliveries) = (0, 0);
        for (i, (t, tally)) in tallies.iter().enumerate() {
            let (want, want_sum) = expected(published, sc.topics as u64, *t as u64);
            let got = tally.count.load(Ordering::Acquire);
            let lost = tally.lost.load(Ordering::Acquire);
            deliveries += want;
            lost_total += lost;
            if S::LOSSY {
                assert_eq!(
                    got + lost,
                    want,
                    "{id}: subscriber {i} of topic {t}: received {got} + lost {lost} != published {want}"
                );
            } else {
                assert_eq!(
                    (got, lost),
                    (want, 0),
                    "{id}: subscriber {i} of topic {t} handled {got} of {want} (lost {lost})"
                );
                assert_eq!(
                    tally.sum.load(Ordering::Acquire),
                    want_sum,
                    "{id}: subscriber {i} of topic {t} handled the wrong messages"
                );
            }
        }
        assert!(
            published > 0 && deliveries > 0,
            "{id}: nothing was delivered"
        );
        eprintln!(
            "CHECKED {id}: {published} messages published, {deliveries} subscriber-deliveries \
             accounted for ({} subscribers)",
            tallies.len()
        );
        if S::LOSSY {
            let pct = 100.0 * lost_total as f64 / deliveries as f64;
            eprintln!(
                "LOSSES {id}: {lost_total} of {deliveries} subscriber-deliveries lost to Lagged \
                 ({pct:.2}%)"
            );
        }
    }
}

/// One criterion sample of `subscribe`: `n` subscribe + unsubscribe pairs on an existing
/// topic (timed), then a check that `n` subscriber tasks ran and ended.
fn run_subscribe<S: System>(rt: &Runtime, n: u64, system: &str) -> Duration {
    rt.block_on(async {
        let names = topic_names(1);
        let sys = Arc::new(S::build(CAP, &names));
        let tally = tally();
        let elapsed = tokio::spawn({
            let (sys, tally) = (sys.clone(), tally.clone());
            async move {
                let start = Instant::now();
                for _ in 0..n {
                    let sub = sys.subscribe(0, Counter(tally.clone()));
                    sys.unsubscribe(sub).await;
                }
                start.elapsed()
            }
        })
        .await
        .expect("the subscribing task panicked");
        sys.close(Vec::new()).await;
        assert_eq!(
            tally.ended.load(Ordering::Acquire),
            n,
            "{system}: not every subscriber ended"
        );
        elapsed
    })
}

// ---------------------------------------------------------------------------------------------
// Criterion
// ---------------------------------------------------------------------------------------------

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn bench_system<S: System>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    group: &str,
    system: &str,
    sc: Scenario,
) {
    let mut harness: Option<Harness<S>> = None;
    g.bench_function(system, |b| {
        let h = harness.get_or_insert_with(|| Harness::new(rt, sc));
        b.iter_custom(|n| h.sample(rt, system, n));
    });
    if let Some(h) = harness {
        h.finish(rt, &format!("{group}/{system}"));
    }
}

fn scenario(c: &mut Criterion, rt: &Runtime, group: &str, sc: Scenario) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Flat);
    bench_system::<Ringbus>(&mut g, rt, group, "ringbus", sc);
    bench_system::<RingbusTopic>(&mut g, rt, group, "ringbus/topic", sc);
    bench_system::<TokioBroadcast>(&mut g, rt, group, "tokio-broadcast", sc);
    bench_system::<AsyncBroadcast>(&mut g, rt, group, "async-broadcast", sc);
    bench_system::<MpscFanout>(&mut g, rt, group, "tokio-mpsc-fanout", sc);
    g.finish();
}

fn subscribe_system<S: System>(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, system: &str) {
    g.bench_function(system, |b| {
        b.iter_custom(|n| run_subscribe::<S>(rt, n, system));
    });
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let one_topic = |subscribers| Scenario {
        topics: 1,
        subscribers_per_topic: subscribers,
        capacity: CAP,
        publishers: 1,
    };
    for n in [1, 10, 100] {
        scenario(c, &rt, &format!("publish/{n}"), one_topic(n));
    }
    let topics = Scenario {
        topics: TOPICS,
        ..one_topic(1)
    };
    scenario(c, &rt, "publish_topics", topics);
    // ringbus's capacity 0 is unbuffered (a publish returns once the handler has run); the
    // peers cannot go below 1 (`build` raises 0 to 1).
    let unbuffered = Scenario {
        capacity: 0,
        ..one_topic(1)
    };
    scenario(c, &rt, "publish_unbuffered", unbuffered);
    let parallel = Scenario {
        publishers: PUBLISHERS,
        ..one_topic(1)
    };
    scenario(c, &rt, "publish_parallel", parallel);
    let parallel_topics = Scenario {
        publishers: PUBLISHERS,
        ..topics
    };
    scenario(c, &rt, "publish_parallel_topics", parallel_topics);

    let mut g = c.benchmark_group("subscribe");
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Flat);
    subscribe_system::<Ringbus>(&mut g, &rt, "ringbus");
    subscribe_system::<RingbusTopic>(&mut g, &rt, "ringbus/topic");
    subscribe_system::<TokioBroadcast>(&mut g, &rt, "tokio-broadcast");
    subscribe_system::<AsyncBroadcast>(&mut g, &rt, "async-broadcast");
    subscribe_system::<MpscFanout>(&mut g, &rt, "tokio-mpsc-fanout");
    g.finish();
}

criterion_group! {
    name = bus;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    targets = benches
}
criterion_main!(bus);
