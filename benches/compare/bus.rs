//! The bus scenarios: `ringbus` against topic maps a tokio user would build from the usual
//! channels, wired as in `benches/bus.rs` (same subscribers that only count, same topic maps)
//! plus the `kanal` and `flume` fan-outs.
//!
//! A round builds a fresh bus and its subscribers (untimed), publishes the round's messages
//! from a task (timed: the publishing side only), closes the bus (untimed; every system drains
//! what was queued before its subscriber tasks end) and checks every subscriber's count and
//! sum exactly; the lossy `tokio-broadcast` must account for each message as received or
//! reported lost, and its losses are returned.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use ringbus::{Bus, Subscription};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::alloc::Window;
use crate::{Case, Outcome, Scenario, CAP};

/// Publisher tasks in the parallel scenarios.
const PUBLISHERS: u64 = 16;
/// Topics in the `*_topics` scenarios.
const TOPICS: usize = 100;
/// The fewest messages a publish round may have: four laps of a queue.
const MIN_OPS: u64 = 4 * CAP as u64;
/// How long closing a bus (draining it) may take before the run fails.
const CLOSE_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Subscribers that only count
// ---------------------------------------------------------------------------------------------

/// What one subscriber saw.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    sum: AtomicU64,
    /// Messages the system told this subscriber it lost (the lossy peer only).
    lost: AtomicU64,
    /// 1 once the subscriber's handler (and so its [`Counter`]) was dropped.
    ended: AtomicU64,
}

/// A subscriber's handler state, owned by its task or handler closure.
struct Counter(Arc<CachePadded<Tally>>);

impl Counter {
    /// Counts one message: only this subscriber writes its tally, so a load and a store do.
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

/// How many of the messages `0..n` go to topic `t` of `topics` (message `i` to `i % topics`),
/// and the wrapping sum of their values.
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

/// A topic-based bus as the scenarios drive it; topics are indices into the names it was
/// built with, and every system looks them up by name per publish, as its users would.
trait System: Send + Sync + Sized + 'static {
    /// A running subscriber.
    type Sub: Send + 'static;

    /// A bus whose topics `names` exist and hold `capacity` messages (or the system's
    /// smallest capacity, if that is more).
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

async fn join_all(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        task.await.expect("a subscriber task panicked");
    }
}

/// `ringbus`: `bus.publish(name, msg).await`, subscribers are `bus.subscribe` closures.
struct Ringbus {
    bus: Bus,
    names: Vec<String>,
}

impl System for Ringbus {
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

/// `tokio-broadcast`: `RwLock<HashMap<String, broadcast::Sender>>`; lossy (`Lagged`).
struct TokioBroadcast {
    capacity: usize,
    names: Vec<String>,
    topics: RwLock<HashMap<String, tokio::sync::broadcast::Sender<u64>>>,
}

impl System for TokioBroadcast {
    type Sub = JoinHandle<()>;

    fn build(capacity: usize, names: &[String]) -> Self {
        let capacity = capacity.max(1);
        let topics = names
            .iter()
            .map(|n| (n.clone(), tokio::sync::broadcast::channel(capacity).0))
            .collect();
        Self {
            capacity,
            names: names.to_vec(),
            topics: RwLock::new(topics),
        }
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
        sub.abort(); // no draining leave: what its users do
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

/// One `async_broadcast` channel, kept open by an inactive receiver.
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

/// `async-broadcast`: the same map over `async_broadcast` with backpressure; `Arc`ed entries
/// so a publish does not hold the lock across its `.await`.
struct AsyncBroadcast {
    capacity: usize,
    names: Vec<String>,
    topics: RwLock<HashMap<String, Arc<AsyncBroadcastTopic>>>,
}

impl System for AsyncBroadcast {
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

/// A bounded channel with an async send and receive, for the fan-out buses.
trait Channel: Send + Sync + 'static {
    type Tx: Clone + Send + Sync + 'static;
    type Rx: Send + 'static;
    /// The smallest capacity the channel supports.
    const MIN_CAPACITY: usize;
    fn channel(capacity: usize) -> (Self::Tx, Self::Rx);
    /// Sends, waiting for room; false if the receiver is gone.
    fn send(tx: &Self::Tx, msg: u64) -> impl Future<Output = bool> + Send;
    /// Counts every message until the channel is closed and drained.
    fn consume(rx: Self::Rx, counter: Counter) -> impl Future<Output = ()> + Send;
}

/// `tokio::sync::mpsc` (capacity at least 1).
struct TokioMpsc;

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
        while let Some(m) = rx.recv().await {
            counter.add(m);
        }
    }
}

/// `kanal` (capacity 0 is a rendezvous channel).
struct Kanal;

impl Channel for Kanal {
    type Tx = kanal::AsyncSender<u64>;
    type Rx = kanal::AsyncReceiver<u64>;
    const MIN_CAPACITY: usize = 0;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        kanal::bounded_async(capacity)
    }

    async fn send(tx: &Self::Tx, msg: u64) -> bool {
        tx.send(msg).await.is_ok()
    }

    async fn consume(rx: Self::Rx, counter: Counter) {
        while let Ok(m) = rx.recv().await {
            counter.add(m);
        }
    }
}

/// `flume` (capacity 0 is a rendezvous channel).
struct Flume;

impl Channel for Flume {
    type Tx = flume::Sender<u64>;
    type Rx = flume::Receiver<u64>;
    const MIN_CAPACITY: usize = 0;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        flume::bounded(capacity)
    }

    async fn send(tx: &Self::Tx, msg: u64) -> bool {
        tx.send_async(msg).await.is_ok()
    }

    async fn consume(rx: Self::Rx, counter: Counter) {
        while let Ok(m) = rx.recv_async().await {
            counter.add(m);
        }
    }
}

/// A topic's subscribers in a fan-out bus: (subscriber id, its channel).
type Fanout<C> = Arc<Vec<(u64, <C as Channel>::Tx)>>;

/// The Go-bus design: a topic map of copy-on-write subscriber lists, one bounded channel per
/// subscriber; a publish sends to each in turn and waits for room in each.
struct FanoutBus<C: Channel> {
    capacity: usize,
    names: Vec<String>,
    next_id: AtomicU64,
    topics: RwLock<HashMap<String, Fanout<C>>>,
}

impl<C: Channel> System for FanoutBus<C> {
    type Sub = (usize, u64, JoinHandle<()>);

    fn build(capacity: usize, names: &[String]) -> Self {
        let topics = names
            .iter()
            .map(|name| (name.clone(), Arc::new(Vec::new())))
            .collect();
        Self {
            capacity: capacity.max(C::MIN_CAPACITY),
            names: names.to_vec(),
            next_id: AtomicU64::new(0),
            topics: RwLock::new(topics),
        }
    }

    fn subscribe(&self, topic: usize, counter: Counter) -> Self::Sub {
        let (tx, rx) = C::channel(self.capacity);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut topics = self.topics.write().unwrap();
            let subs = topics.entry(self.names[topic].clone()).or_default();
            let mut next = Vec::with_capacity(subs.len() + 1);
            next.extend(subs.iter().cloned());
            next.push((id, tx));
            *subs = Arc::new(next);
        }
        (topic, id, tokio::spawn(C::consume(rx, counter)))
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
                let _ = C::send(tx, msg).await; // false only if the subscriber is gone
            }
        }
    }

    async fn close(&self, subs: Vec<Self::Sub>) {
        self.topics.write().unwrap().clear();
        join_all(subs.into_iter().map(|(_, _, task)| task).collect()).await;
    }
}

// ---------------------------------------------------------------------------------------------
// One round
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Shape {
    topics: usize,
    subscribers_per_topic: usize,
    capacity: usize,
    publishers: u64,
}

fn topic_names(n: usize) -> Vec<String> {
    (0..n).map(|t| format!("topic-{t}")).collect()
}

/// Publishes `first, first + step, ...` below `end`, message `i` to topic `i % topics`.
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

/// Publishes `0..n` as the shape says, inside the timed window: with one publisher from
/// before its first publish to after its last; with many, from before they are spawned until
/// the last is joined.
async fn publish_timed<S: System>(sys: Arc<S>, shape: Shape, n: u64) -> (Duration, u64) {
    if shape.publishers == 1 {
        let window = Window::start();
        publish_share(&*sys, shape.topics, 0, 1, n).await;
        return window.stop();
    }
    let window = Window::start();
    let tasks: Vec<_> = (0..shape.publishers)
        .map(|p| {
            let sys = sys.clone();
            tokio::spawn(async move {
                publish_share(&*sys, shape.topics, p, shape.publishers, n).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a publisher panicked");
    }
    window.stop()
}

/// Waits (untimed) until every tally's handler was dropped.
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

/// One round of a publish scenario.
fn publish_round<S: System>(rt: &Runtime, system: &str, shape: Shape, n: u64) -> Outcome {
    let names = topic_names(shape.topics);
    let (sys, subs, tallies) = {
        let _runtime = rt.enter(); // subscribers are tasks on `rt`
        let sys = Arc::new(S::build(shape.capacity, &names));
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
    };
    let (elapsed, allocations) = rt
        .block_on(rt.spawn(publish_timed(sys.clone(), shape, n)))
        .expect("the publisher panicked");
    rt.block_on(async {
        tokio::time::timeout(CLOSE_LIMIT, sys.close(subs))
            .await
            .unwrap_or_else(|_| panic!("{system}: close did not finish in {CLOSE_LIMIT:?}"))
    });
    let refs: Vec<&Tally> = tallies.iter().map(|(_, t)| &***t).collect();
    wait_ended(system, &refs, refs.len() as u64);
    let (mut lost, mut deliveries) = (0, 0);
    for (i, (t, tally)) in tallies.iter().enumerate() {
        let (want, want_sum) = expected(n, shape.topics as u64, *t as u64);
        let got = tally.count.load(Ordering::Acquire);
        let l = tally.lost.load(Ordering::Acquire);
        deliveries += want;
        lost += l;
        if l == 0 {
            assert_eq!(
                (got, tally.sum.load(Ordering::Acquire)),
                (want, want_sum),
                "{system}: subscriber {i} of topic {t} handled the wrong messages"
            );
        } else {
            assert!(
                system == "tokio-broadcast",
                "{system}: subscriber {i} lost {l} messages"
            );
            assert_eq!(
                got + l,
                want,
                "{system}: subscriber {i} of topic {t}: received {got} + lost {l} != {want}"
            );
        }
    }
    assert!(deliveries > 0, "{system}: nothing was delivered");
    Outcome {
        elapsed,
        ops: n,
        allocations,
        lost,
        deliveries,
    }
}

/// One round of `subscribe`: `n` subscribe + unsubscribe pairs on an existing topic (timed),
/// then a check that `n` subscribers ran and ended.
fn subscribe_round<S: System>(rt: &Runtime, system: &str, n: u64) -> Outcome {
    let sys = Arc::new(S::build(CAP, &topic_names(1)));
    let tally = tally();
    let (elapsed, allocations) = rt
        .block_on(rt.spawn({
            let (sys, tally) = (sys.clone(), tally.clone());
            async move {
                let window = Window::start();
                for _ in 0..n {
                    let sub = sys.subscribe(0, Counter(tally.clone()));
                    sys.unsubscribe(sub).await;
                }
                window.stop()
            }
        }))
        .expect("the subscribing task panicked");
    rt.block_on(sys.close(Vec::new()));
    wait_ended(system, &[&tally], n);
    Outcome {
        elapsed,
        ops: n,
        allocations,
        lost: 0,
        deliveries: 0,
    }
}

// ---------------------------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------------------------

fn publish_case<'a, S: System>(rt: &'a Runtime, system: &'static str, shape: Shape) -> Case<'a> {
    Case::new(system, move |n| publish_round::<S>(rt, system, shape, n))
}

fn publish_cases(rt: &Runtime, shape: Shape) -> Vec<Case<'_>> {
    vec![
        publish_case::<Ringbus>(rt, "ringbus", shape),
        publish_case::<TokioBroadcast>(rt, "tokio-broadcast", shape),
        publish_case::<AsyncBroadcast>(rt, "async-broadcast", shape),
        publish_case::<FanoutBus<TokioMpsc>>(rt, "tokio-mpsc-fanout", shape),
        publish_case::<FanoutBus<Kanal>>(rt, "kanal-fanout", shape),
        publish_case::<FanoutBus<Flume>>(rt, "flume-fanout", shape),
    ]
}

fn subscribe_case<'a, S: System>(rt: &'a Runtime, system: &'static str) -> Case<'a> {
    Case::new(system, move |n| subscribe_round::<S>(rt, system, n))
}

/// The bus scenarios, on `rt` (a multi-thread runtime with 2 workers).
pub(crate) fn scenarios(rt: &Runtime) -> Vec<Scenario<'_>> {
    let one = |subscribers| Shape {
        topics: 1,
        subscribers_per_topic: subscribers,
        capacity: CAP,
        publishers: 1,
    };
    let topics = Shape {
        topics: TOPICS,
        ..one(1)
    };
    let publish = |name: &str, family, shape, min_ops| Scenario {
        name: name.to_string(),
        family,
        unit: "publish",
        min_ops,
        cases: publish_cases(rt, shape),
    };
    vec![
        publish("publish/1", "bus-publish", one(1), MIN_OPS),
        publish("publish/10", "bus-publish", one(10), MIN_OPS),
        publish("publish/100", "bus-publish", one(100), MIN_OPS),
        publish("publish_topics", "bus-publish", topics, MIN_OPS),
        // ringbus's capacity 0 is unbuffered (a publish returns once the handler ran); kanal
        // and flume go to 0 too (rendezvous: a send returns once a receiver took the
        // message); tokio's channels and async-broadcast stop at 1 (queued).
        publish(
            "publish_unbuffered",
            "bus-publish",
            Shape {
                capacity: 0,
                ..one(1)
            },
            1_000,
        ),
        publish(
            "publish_parallel",
            "bus-parallel",
            Shape {
                publishers: PUBLISHERS,
                ..one(1)
            },
            MIN_OPS,
        ),
        publish(
            "publish_parallel_topics",
            "bus-parallel",
            Shape {
                publishers: PUBLISHERS,
                ..topics
            },
            MIN_OPS,
        ),
        Scenario {
            name: "subscribe".to_string(),
            family: "bus-subscribe",
            unit: "subscribe + unsubscribe",
            min_ops: 200,
            cases: vec![
                subscribe_case::<Ringbus>(rt, "ringbus"),
                subscribe_case::<TokioBroadcast>(rt, "tokio-broadcast"),
                subscribe_case::<AsyncBroadcast>(rt, "async-broadcast"),
                subscribe_case::<FanoutBus<TokioMpsc>>(rt, "tokio-mpsc-fanout"),
                subscribe_case::<FanoutBus<Kanal>>(rt, "kanal-fanout"),
                subscribe_case::<FanoutBus<Flume>>(rt, "flume-fanout"),
            ],
        },
    ]
}
