//! The bus scenarios: `ringbus` against topic maps a performance-minded tokio user would
//! build from the usual channels, wired by `common/bus_peers.rs` as `benches/bus.rs` wires
//! them (the same subscribers that only count, the same `dashmap` topic maps), plus the
//! `kanal` and `flume` fan-outs.
//!
//! A round builds a fresh bus and its subscribers (untimed), publishes the round's messages
//! from a task (timed: the publishing side only), closes the bus (untimed; every system drains
//! what was queued before its subscriber tasks end) and checks every subscriber's count and
//! sum exactly; the lossy `tokio-broadcast` must account for each message as received or
//! reported lost, and its losses are returned.
//!
//! Publishing by name and through handles resolved once are separate scenarios: `publish/1`
//! and `publish/1/resolved`, and so on (the `/resolved` ones for every scenario where a
//! lookup is a real part of a publish's cost: one subscriber per topic; with 10 or 100
//! subscribers a lookup is shared by that many sends, and an unbuffered publish waits for
//! its handler). Subscribing with a task (like for like: a subscriber that handles messages)
//! and subscribing a bare receiver (the peers' cheapest subscribe, spawning nothing; ringbus
//! has no such form) are separate scenarios too, and both record how many tasks one
//! subscription keeps alive, measured (see [`tasks_per_subscription`]).

use tokio::runtime::Runtime;

use std::sync::Arc;

use crate::alloc::Window;
use crate::bus_peers::{
    self, AsyncBroadcast, Channel, Counter, FanoutBus, Ringbus, RingbusBatch, Shape, System,
    TokioBroadcast, TokioMpsc, PUBLISHERS, TOPICS,
};
use crate::stopwatch::Stopwatch;
use crate::{Case, Outcome, Scenario, CAP};

/// The fewest messages a publish round may have: four laps of a queue.
const MIN_OPS: u64 = 4 * CAP as u64;

// ---------------------------------------------------------------------------------------------
// The fan-out's other channels (the systems `bus.rs` runs too are in `common/bus_peers.rs`)
// ---------------------------------------------------------------------------------------------

/// `kanal` (capacity 0 is a rendezvous channel), raw (`Kanal`) or spending tokio's
/// cooperative budget as ringbus must (`KanalBudget`, guarantee 11): one unit per send, one
/// per up to 8 messages received (`consume_budget`). kanal's futures know nothing of tokio, so
/// raw kanal's publisher yields only when a queue is full and its subscriber only when its
/// queue is empty: `kanal-fanout-budget` is the like-for-like peer, raw kanal stays beside it.
struct KanalChannel<const BUDGET: bool>;

type Kanal = KanalChannel<false>;
type KanalBudget = KanalChannel<true>;

impl<const BUDGET: bool> Channel for KanalChannel<BUDGET> {
    type Tx = kanal::AsyncSender<u64>;
    type Rx = kanal::AsyncReceiver<u64>;
    const MIN_CAPACITY: usize = 0;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        kanal::bounded_async(capacity)
    }

    async fn send(tx: &Self::Tx, msg: u64) -> bool {
        let sent = tx.send(msg).await.is_ok();
        if BUDGET {
            tokio::task::coop::consume_budget().await;
        }
        sent
    }

    /// `recv` for the first message, then `drain_into` for what else is there.
    async fn consume(rx: Self::Rx, counter: Counter) {
        let mut buf = Vec::new();
        while let Ok(m) = rx.recv().await {
            counter.add(m);
            if buf.capacity() == 0 {
                buf = bus_peers::batch_buffer();
            }
            let _ = rx.drain_into(&mut buf);
            let taken = 1 + buf.len();
            for m in buf.drain(..) {
                counter.add(m);
            }
            if BUDGET {
                for _ in 0..taken.div_ceil(8) {
                    tokio::task::coop::consume_budget().await;
                }
            }
        }
    }
}

/// `kanal-fanout-budget` whose send returns only once the subscriber has handled the
/// message, as ringbus's unbuffered publish does: the subscriber answers each message on a
/// second channel, of capacity 1 so that answering never waits for the publisher. It runs
/// in `publish_unbuffered` only, where it is the like-for-like peer (a rendezvous send
/// returns once the message is taken, before it is handled).
struct KanalAcked;

impl Channel for KanalAcked {
    /// The messages out, and the answers back.
    type Tx = (kanal::AsyncSender<u64>, kanal::AsyncReceiver<()>);
    type Rx = (kanal::AsyncReceiver<u64>, kanal::AsyncSender<()>);
    const MIN_CAPACITY: usize = 0;

    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        let (tx, rx) = kanal::bounded_async(capacity);
        let (handled_tx, handled_rx) = kanal::bounded_async(1);
        ((tx, handled_rx), (rx, handled_tx))
    }

    async fn send((tx, handled): &Self::Tx, msg: u64) -> bool {
        let sent = tx.send(msg).await.is_ok() && handled.recv().await.is_ok();
        tokio::task::coop::consume_budget().await;
        sent
    }

    /// One message at a time: each is answered before the next is taken.
    async fn consume((rx, handled): Self::Rx, counter: Counter) {
        while let Ok(m) = rx.recv().await {
            counter.add(m);
            let _ = handled.send(()).await;
            tokio::task::coop::consume_budget().await;
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

    /// `recv_async` for the first message, then `try_iter` for what else is there (flume's
    /// `drain` takes the lock only once, but hands over the channel's queue itself, which the
    /// next send then allocates again).
    async fn consume(rx: Self::Rx, counter: Counter) {
        while let Ok(m) = rx.recv_async().await {
            counter.add(m);
            for m in rx.try_iter() {
                counter.add(m);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One round
// ---------------------------------------------------------------------------------------------

/// One round of a publish scenario: a fresh bus and subscribers (untimed), `0..n` published
/// (timed), the bus closed and every subscriber checked (untimed).
fn publish_round<S: System>(rt: &Runtime, system: &str, shape: Shape, n: u64) -> Outcome {
    let (sys, subs, tallies) = bus_peers::wire::<S>(rt, shape);
    let publisher = bus_peers::publish_timed::<Window, S>(sys.clone(), shape, 0, n);
    let timed = rt
        .block_on(rt.spawn(publisher))
        .expect("the publisher panicked");
    bus_peers::close(rt, system, &*sys, subs, &tallies);
    let (lost, deliveries) = bus_peers::check::<S>(system, &tallies, shape, n);
    Outcome::new(timed, n, lost, deliveries)
}

/// One round of `subscribe`: `n` subscribe + unsubscribe pairs on an existing topic (timed),
/// then a check that `n` subscribers ran and ended, and the tasks one subscription keeps
/// alive.
fn subscribe_round<S: System>(rt: &Runtime, system: &str, n: u64) -> Outcome {
    let (timed, tasks) = bus_peers::subscribe_round::<Window, S>(rt, system, n);
    Outcome::new(timed, n, 0, 0).tasks(tasks)
}

/// A subscription without a task: the receiver alone, the peers' cheapest subscribe (a
/// broadcast receiver; a channel in the fan-out's list), which a user polls from a task they
/// already have. ringbus has no such form: its subscriptions are handler tasks.
trait Bare: System {
    type Rx: Send + 'static;
    /// A receiver of topic `topic`.
    fn subscribe_bare(&self, topic: usize) -> Self::Rx;
    /// Unsubscribes `rx` (drops it; the fan-out also takes its channel out of the list).
    fn unsubscribe_bare(&self, topic: usize, rx: Self::Rx);
    /// How many receivers topic `topic` has.
    fn receivers(&self, topic: usize) -> usize;
}

impl Bare for TokioBroadcast {
    type Rx = tokio::sync::broadcast::Receiver<u64>;

    fn subscribe_bare(&self, topic: usize) -> Self::Rx {
        self.receiver(topic)
    }

    fn unsubscribe_bare(&self, _: usize, rx: Self::Rx) {
        drop(rx);
    }

    fn receivers(&self, topic: usize) -> usize {
        self.0.with(topic, |tx| tx.receiver_count()).unwrap_or(0)
    }
}

impl Bare for AsyncBroadcast {
    type Rx = async_broadcast::Receiver<u64>;

    fn subscribe_bare(&self, topic: usize) -> Self::Rx {
        self.receiver(topic)
    }

    fn unsubscribe_bare(&self, _: usize, rx: Self::Rx) {
        drop(rx);
    }

    fn receivers(&self, topic: usize) -> usize {
        self.0.with(topic, |t| t.tx.receiver_count()).unwrap_or(0)
    }
}

impl<C: Channel> Bare for FanoutBus<C> {
    type Rx = (u64, C::Rx);

    fn subscribe_bare(&self, topic: usize) -> Self::Rx {
        self.join(topic)
    }

    fn unsubscribe_bare(&self, topic: usize, (id, rx): Self::Rx) {
        self.leave(topic, id);
        drop(rx);
    }

    fn receivers(&self, topic: usize) -> usize {
        self.map.with(topic, |subs| subs.len()).unwrap_or(0)
    }
}

/// One round of `subscribe_receiver` for a peer: `n` bare subscribe + unsubscribe pairs on an
/// existing topic from a task on `rt` (timed). Checked untimed: the last pair's subscribe
/// added a receiver (its unsubscribe waits until after the clock stops), and none is left at
/// the end.
fn bare_round<S: Bare>(rt: &Runtime, system: &'static str, n: u64) -> Outcome {
    let sys = Arc::new(S::build(CAP, &bus_peers::topic_names(1)));
    let timed = rt
        .block_on(rt.spawn({
            let sys = sys.clone();
            async move {
                let window = Window::start();
                for _ in 1..n {
                    let rx = sys.subscribe_bare(0);
                    sys.unsubscribe_bare(0, rx);
                }
                let rx = sys.subscribe_bare(0);
                let timed = window.stop();
                assert_eq!(sys.receivers(0), 1, "{system}: subscribed no receiver");
                sys.unsubscribe_bare(0, rx);
                timed
            }
        }))
        .expect("the subscribing task panicked");
    assert_eq!(
        sys.receivers(0),
        0,
        "{system}: receivers left after unsubscribing"
    );
    let s = &*sys;
    let tasks = bus_peers::tasks_alive(rt, || {
        let rx = s.subscribe_bare(0);
        move || s.unsubscribe_bare(0, rx)
    });
    Outcome::new(timed, n, 0, 0).tasks(tasks)
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
        publish_case::<RingbusBatch>(rt, "ringbus-batch", shape),
        publish_case::<TokioBroadcast>(rt, "tokio-broadcast", shape),
        publish_case::<AsyncBroadcast>(rt, "async-broadcast", shape),
        publish_case::<FanoutBus<TokioMpsc>>(rt, "tokio-mpsc-fanout", shape),
        publish_case::<FanoutBus<Kanal>>(rt, "kanal-fanout", shape),
        publish_case::<FanoutBus<KanalBudget>>(rt, "kanal-fanout-budget", shape),
        publish_case::<FanoutBus<Flume>>(rt, "flume-fanout", shape),
    ]
}

fn subscribe_case<'a, S: System>(rt: &'a Runtime, system: &'static str) -> Case<'a> {
    Case::new(system, move |n| subscribe_round::<S>(rt, system, n))
}

fn bare_case<'a, S: Bare>(rt: &'a Runtime, system: &'static str) -> Case<'a> {
    Case::new(system, move |n| bare_round::<S>(rt, system, n))
}

/// The bus scenarios, on `rt` (a multi-thread runtime with 2 workers).
pub(crate) fn scenarios(rt: &Runtime) -> Vec<Scenario<'_>> {
    let one = Shape::one_topic;
    let topics = one(1).topics(TOPICS);
    let publish = |name: &str, family, shape, min_ops| Scenario {
        name: name.to_string(),
        family,
        unit: "publish",
        min_ops,
        cases: publish_cases(rt, shape),
    };
    // ringbus's capacity 0 is unbuffered (a publish returns once the handler ran); kanal and
    // flume go to 0 too (rendezvous: a send returns once a receiver took the message), and
    // kanal-acked waits for the handler as ringbus does; tokio's channels and
    // async-broadcast stop at 1 (queued).
    let mut unbuffered = publish(
        "publish_unbuffered",
        "bus-publish",
        one(1).capacity(0),
        1_000,
    );
    unbuffered.cases.push(publish_case::<FanoutBus<KanalAcked>>(
        rt,
        "kanal-acked",
        one(1).capacity(0),
    ));
    let parallel = one(1).publishers(PUBLISHERS);
    let parallel_topics = topics.publishers(PUBLISHERS);
    let subscribe = |name: &str, cases| Scenario {
        name: name.to_string(),
        family: "bus-subscribe",
        unit: "subscribe + unsubscribe",
        min_ops: 200,
        cases,
    };
    vec![
        publish("publish/1", "bus-publish", one(1), MIN_OPS),
        publish(
            "publish/1/resolved",
            "bus-publish",
            one(1).resolved(),
            MIN_OPS,
        ),
        publish("publish/10", "bus-publish", one(10), MIN_OPS),
        publish("publish/100", "bus-publish", one(100), MIN_OPS),
        publish("publish_topics", "bus-publish", topics, MIN_OPS),
        publish(
            "publish_topics/resolved",
            "bus-publish",
            topics.resolved(),
            MIN_OPS,
        ),
        unbuffered,
        publish("publish_parallel", "bus-parallel", parallel, MIN_OPS),
        publish(
            "publish_parallel/resolved",
            "bus-parallel",
            parallel.resolved(),
            MIN_OPS,
        ),
        publish(
            "publish_parallel_topics",
            "bus-parallel",
            parallel_topics,
            MIN_OPS,
        ),
        publish(
            "publish_parallel_topics/resolved",
            "bus-parallel",
            parallel_topics.resolved(),
            MIN_OPS,
        ),
        subscribe(
            "subscribe",
            vec![
                subscribe_case::<Ringbus>(rt, "ringbus"),
                subscribe_case::<RingbusBatch>(rt, "ringbus-batch"),
                subscribe_case::<TokioBroadcast>(rt, "tokio-broadcast"),
                subscribe_case::<AsyncBroadcast>(rt, "async-broadcast"),
                subscribe_case::<FanoutBus<TokioMpsc>>(rt, "tokio-mpsc-fanout"),
                subscribe_case::<FanoutBus<Kanal>>(rt, "kanal-fanout"),
                subscribe_case::<FanoutBus<KanalBudget>>(rt, "kanal-fanout-budget"),
                subscribe_case::<FanoutBus<Flume>>(rt, "flume-fanout"),
            ],
        ),
        // The peers' receivers alone, beside ringbus's (only) subscribe: what the issue's
        // "spawns nothing" comparison measured. The tasks column says who spawns.
        subscribe(
            "subscribe_receiver",
            vec![
                subscribe_case::<Ringbus>(rt, "ringbus"),
                bare_case::<TokioBroadcast>(rt, "tokio-broadcast"),
                bare_case::<AsyncBroadcast>(rt, "async-broadcast"),
                bare_case::<FanoutBus<TokioMpsc>>(rt, "tokio-mpsc-fanout"),
                bare_case::<FanoutBus<Kanal>>(rt, "kanal-fanout"),
                bare_case::<FanoutBus<Flume>>(rt, "flume-fanout"),
            ],
        ),
    ]
}
