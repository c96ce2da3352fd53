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
//!   resolved [`Topic`] handle instead (`topic.publish(msg).await`) and subscribes through
//!   it. Subscribers are `bus.subscribe(name, |m: &u64| ...)` closures.
//!   `ringbus-batch` publishes as `ringbus` does, to batch subscribers
//!   (`bus.subscribe_batch`), as the fan-outs' subscribers take what is queued in one go.
//! - `tokio-broadcast`: a `dashmap::DashMap<String, tokio::sync::broadcast::Sender<u64>>`
//!   (hashed with FNV-1a, as ringbus hashes names); a publish `send`s under the shard's read
//!   lock, then spends a unit of tokio's cooperative budget (without it the publisher never
//!   yields and its subscriber never runs: see `TokioBroadcast` in `common/bus_peers.rs`).
//!   Lossy: a subscriber a lap behind gets `Lagged(n)`; the losses are counted, checked
//!   (`received + lost == published`) and printed as `LOSSES ...` lines after each benchmark.
//! - `async-broadcast`: the same map over `async_broadcast` (overflow off, so publishers wait:
//!   backpressure; `await_active` off, so a topic without subscribers drops, as the others
//!   do). The map holds `Arc`s so a publish clones one out and awaits `broadcast_direct`
//!   holding no lock. `broadcast_direct` / `recv_direct` are the crate's allocation-free forms.
//! - `tokio-mpsc-fanout`: the same map of copy-on-write `Arc<[tokio::sync::mpsc::Sender]>`,
//!   one bounded channel per subscriber; a publish sends to each in turn (`send().await`), the
//!   design of Go buses; a subscriber takes what is there with `recv_many`.
//!
//! The comparison runner (`compare.rs`) also runs every system through handles resolved once
//! (`System::resolve`); here only `ringbus/topic` does.
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
//! Build flags: run with `RUSTFLAGS` cleared, e.g. `RUSTFLAGS= cargo bench -p ringbus-bench --bench bus`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use ringbus::{Bus, SubscribeOptions, Subscription, Topic};
use tokio::runtime::Runtime;

#[path = "common/bus_peers.rs"]
mod bus_peers;
#[path = "common/stopwatch.rs"]
mod stopwatch;

use bus_peers::{
    AsyncBroadcast, Counter, FanoutBus, Ringbus, RingbusBatch, Shape, System, Tallies,
    TokioBroadcast, TokioMpsc, PUBLISHERS, TOPICS,
};

/// Queue capacity of every system unless a scenario says otherwise.
const CAP: usize = 1024;

// ---------------------------------------------------------------------------------------------
// ringbus through resolved handles (the other systems are in `common/bus_peers.rs`)
// ---------------------------------------------------------------------------------------------

/// ringbus, subscribing through resolved `Topic` handles (the `subscribe` group's
/// `ringbus/topic`; the publish groups' `ringbus/topic` is [`Ringbus`] through
/// `System::resolve`, which is this type's `publish` too).
struct RingbusTopic {
    bus: Bus,
    topics: Vec<Topic<u64>>,
}

impl System for RingbusTopic {
    const LOSSY: bool = false;
    type Sub = Subscription;
    /// The index of a handle it holds.
    type Handle = usize;

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
            .subscribe(SubscribeOptions::new(), counter.handler())
            .expect("subscribe")
    }

    async fn unsubscribe(&self, sub: Subscription) {
        sub.unsubscribe().await;
    }

    async fn publish(&self, topic: usize, msg: u64) {
        self.topics[topic].publish(msg).await.expect("publish");
    }

    fn resolve(&self, topic: usize) -> usize {
        topic
    }

    async fn publish_to(&self, topic: &usize, msg: u64) {
        self.publish(*topic, msg).await;
    }

    async fn close(&self, subs: Vec<Subscription>) {
        drop(subs);
        self.bus.close().await;
    }
}

/// The mpsc fan-out: one bounded `tokio::sync::mpsc` channel per subscriber.
type MpscFanout = FanoutBus<TokioMpsc>;

// ---------------------------------------------------------------------------------------------
// Driving a scenario
// ---------------------------------------------------------------------------------------------

/// How long a subscriber may take to count what was published before the benchmark fails.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// One benchmark's bus and subscribers, kept across its criterion samples (so a sample's wall
/// time is its publishing and the drain, not the set-up, and criterion sizes samples right).
struct Harness<S: System> {
    sys: Arc<S>,
    shape: Shape,
    subs: Vec<S::Sub>,
    tallies: Tallies,
    /// Messages published so far: `0..published`.
    published: u64,
}

impl<S: System> Harness<S> {
    fn new(rt: &Runtime, shape: Shape) -> Self {
        let (sys, subs, tallies) = bus_peers::wire(rt, shape);
        Self {
            sys,
            shape,
            subs,
            tallies,
            published: 0,
        }
    }

    /// One criterion sample: publishes the next `n` messages from a task on the runtime
    /// (timed), then waits, untimed, until every subscriber counted (or was told it lost)
    /// every message of its topic.
    fn sample(&mut self, rt: &Runtime, system: &str, n: u64) -> Duration {
        let driver =
            bus_peers::publish_timed::<Instant, S>(self.sys.clone(), self.shape, self.published, n);
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
            let (want, _) = self.shape.expected(self.published, *t);
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
            shape,
            subs,
            tallies,
            published,
        } = self;
        bus_peers::close(rt, id, &*sys, subs, &tallies);
        let (lost, deliveries) = bus_peers::check::<S>(id, &tallies, shape, published);
        eprintln!(
            "CHECKED {id}: {published} messages published, {deliveries} subscriber-deliveries \
             accounted for ({} subscribers)",
            tallies.len()
        );
        if S::LOSSY {
            let pct = 100.0 * lost as f64 / deliveries as f64;
            eprintln!(
                "LOSSES {id}: {lost} of {deliveries} subscriber-deliveries lost to Lagged \
                 ({pct:.2}%)"
            );
        }
    }
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
    shape: Shape,
) {
    let mut harness: Option<Harness<S>> = None;
    g.bench_function(system, |b| {
        let h = harness.get_or_insert_with(|| Harness::new(rt, shape));
        b.iter_custom(|n| h.sample(rt, system, n));
    });
    if let Some(h) = harness {
        h.finish(rt, &format!("{group}/{system}"));
    }
}

fn scenario(c: &mut Criterion, rt: &Runtime, group: &str, shape: Shape) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Flat);
    bench_system::<Ringbus>(&mut g, rt, group, "ringbus", shape);
    // Publishing through `Topic` handles resolved once (`System::resolve`).
    let resolved = shape.resolved();
    bench_system::<Ringbus>(&mut g, rt, group, "ringbus/topic", resolved);
    // Batch subscribers (`subscribe_batch`), as the fan-outs' subscribers use their batch
    // receive.
    bench_system::<RingbusBatch>(&mut g, rt, group, "ringbus-batch", shape);
    bench_system::<TokioBroadcast>(&mut g, rt, group, "tokio-broadcast", shape);
    bench_system::<AsyncBroadcast>(&mut g, rt, group, "async-broadcast", shape);
    bench_system::<MpscFanout>(&mut g, rt, group, "tokio-mpsc-fanout", shape);
    g.finish();
}

fn subscribe_system<S: System>(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, system: &str) {
    g.bench_function(system, |b| {
        b.iter_custom(|n| bus_peers::subscribe_round::<Instant, S>(rt, system, n).0);
    });
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    for n in [1, 10, 100] {
        scenario(c, &rt, &format!("publish/{n}"), Shape::one_topic(n));
    }
    let topics = Shape::one_topic(1).topics(TOPICS);
    scenario(c, &rt, "publish_topics", topics);
    // ringbus's capacity 0 is unbuffered (a publish returns once the handler has run); the
    // peers cannot go below 1 (`build` raises 0 to 1).
    let unbuffered = Shape::one_topic(1).capacity(0);
    scenario(c, &rt, "publish_unbuffered", unbuffered);
    let parallel = Shape::one_topic(1).publishers(PUBLISHERS);
    scenario(c, &rt, "publish_parallel", parallel);
    let parallel_topics = topics.publishers(PUBLISHERS);
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
