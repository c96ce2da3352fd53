//! End-to-end latency percentiles, coordinated-omission aware: `just latency`.
//!
//! Every message carries the time it was *meant* to be sent, from a schedule independent of
//! how fast publishing actually goes (a fixed rate, or bursts at a fixed period). Latency is
//! measured from that intended time, so a publisher that stalls cannot hide the queueing delay
//! it causes (coordinated omission). Three figures per run, from HDR histograms:
//!
//! - end-to-end: handling time minus intended send time;
//! - writer stall: publish completion minus intended send time (how late publishing ran);
//! - reader lag: handling time minus the time the publish started (time in the queue).
//!
//! Systems: ringbus (twice: one-message handlers, and batch handlers as the fan-outs'
//! subscribers take batches), a `tokio::sync::broadcast` topic (lossy: losses reported), an
//! `async-broadcast` topic (backpressure on), and one bounded `tokio::sync::mpsc` or `kanal`
//! channel per subscriber (fan-out). Shapes: a fixed rate and bursts; 1, 4 and 8
//! subscribers. Results: a table on stdout, `docs/benchmarks/latency.md` (whose hand-written
//! sections, from the first `## ` heading on, are kept) and `docs/benchmarks/latency.json`.
//!
//! The publisher is a task on the runtime, as in a service, beside the subscriber tasks. It
//! waits for each intended send time by yielding to the runtime in a loop: a busy loop, which
//! is why it must not run on a thread of its own (see `Experiment::publisher_thread`).
//!
//! `cargo bench -p ringbus-bench --bench latency -- quick` runs shorter (for a smoke test).
//! The `LATENCY_*` variables of [`Experiment`] run chosen systems and rows, writing nothing.
//!
//! `cargo bench -p ringbus-bench --bench latency -- lifo` measures a mechanism instead of a latency: on a
//! multi-thread runtime, how many messages a publisher that always finds room has published
//! when a subscriber it woke first runs. A count, so it barely depends on the machine's load.
//! Built with `--cfg tokio_unstable` and run with `LATENCY_NO_LIFO=1`, tokio's LIFO slot is
//! off (see `main`).

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

#[path = "latency/paired.rs"]
mod paired;

#[derive(Clone, Copy, Debug)]
struct Stamp {
    /// The message's number.
    seq: u64,
    /// Nanoseconds since the run's origin when the message was meant to be sent.
    intended: u64,
    /// Nanoseconds since the origin when the publish call started.
    started: u64,
}

#[derive(Clone, Copy)]
enum Shape {
    /// `rate` messages per second, evenly spaced.
    Fixed { rate: u64 },
    /// `size` messages at once every `period`.
    Burst { size: u64, period: Duration },
}

impl Shape {
    fn name(&self) -> String {
        match self {
            Shape::Fixed { rate } => format!("fixed {}k/s", rate / 1000),
            Shape::Burst { size, period } => {
                format!("burst {size} every {} ms", period.as_millis())
            }
        }
    }

    /// The intended send time of message `i`, in ns since the origin.
    fn intended(&self, i: u64) -> u64 {
        match *self {
            Shape::Fixed { rate } => i * 1_000_000_000 / rate,
            Shape::Burst { size, period } => (i / size) * period.as_nanos() as u64,
        }
    }
}

/// What the subscribers record: end-to-end and reader lag.
struct Recorded {
    e2e: Mutex<Histogram<u64>>,
    lag: Mutex<Histogram<u64>>,
    received: AtomicU64,
}

impl Recorded {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            e2e: Mutex::new(histogram()),
            lag: Mutex::new(histogram()),
            received: AtomicU64::new(0),
        })
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 60 s, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One subscriber's local histograms, merged into the shared ones at the end.
struct Local {
    e2e: Histogram<u64>,
    lag: Histogram<u64>,
    received: u64,
}

impl Local {
    fn new() -> Self {
        Self {
            e2e: histogram(),
            lag: histogram(),
            received: 0,
        }
    }

    fn record_at(&mut self, now: u64, stamp: &Stamp) {
        let _ = self.e2e.record(now.saturating_sub(stamp.intended).max(1));
        let _ = self.lag.record(now.saturating_sub(stamp.started).max(1));
        self.received += 1;
    }

    fn merge_into(self, shared: &Recorded) {
        if let Ok(mut h) = shared.e2e.lock() {
            let _ = h.add(&self.e2e);
        }
        if let Ok(mut h) = shared.lag.lock() {
            let _ = h.add(&self.lag);
        }
        shared.received.fetch_add(self.received, Ordering::Relaxed);
    }
}

/// Where one subscriber writes the time it handled each message: plain stores into an array
/// indexed by the message's number, the same for every system, turned into histograms after
/// the run ([`recorded`]). The arrays (1.6 MB each at 200,000 messages) are the harness's,
/// not the system's: they are allocated and touched before the schedule starts, or their page
/// faults would count as publisher lateness.
#[derive(Clone)]
struct Times(Arc<[AtomicU64]>);

impl Times {
    fn new(messages: u64) -> Self {
        Self((0..messages).map(|_| AtomicU64::new(0)).collect())
    }

    /// Message `seq` is handled now.
    #[inline]
    fn handled(&self, origin: Instant, seq: u64) {
        let now = origin.elapsed().as_nanos() as u64;
        self.0[seq as usize].store(now, Ordering::Relaxed);
    }
}

/// The histograms of every subscriber's handling times, after the run. A message a subscriber
/// never handled (lost by a lossy peer, or a bug) is not counted: `finish` checks the count.
fn recorded(shape: Shape, started_at: &[u64], subscribers: Vec<Times>) -> Arc<Recorded> {
    let recorded = Recorded::new();
    for times in subscribers {
        let mut local = Local::new();
        for (seq, at) in times.0.iter().enumerate() {
            let at = at.load(Ordering::Relaxed);
            if at == 0 {
                continue;
            }
            let stamp = Stamp {
                seq: seq as u64,
                intended: shape.intended(seq as u64),
                started: started_at[seq],
            };
            local.record_at(at, &stamp);
        }
        local.merge_into(&recorded);
    }
    recorded
}

struct Run {
    system: &'static str,
    shape: String,
    subscribers: usize,
    e2e: Histogram<u64>,
    stall: Histogram<u64>,
    lag: Histogram<u64>,
    lost: u64,
}

/// Waits (spinning, yielding to the runtime) until `origin + at`.
async fn wait_until(origin: Instant, at: u64) {
    let deadline = origin + Duration::from_nanos(at);
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
}

/// ringbus with its subscribers spinning as the bus's default had them spin until
/// 2026-12-02 (`Bus::builder().spin(16)`): an experiment only (see `Experiment`).
const RINGBUS_SPIN16: &str = "ringbus-spin16";

/// ringbus with batch subscribers (`subscribe_batch`), as the fan-out peers take what is
/// queued in one go (`recv_many`, `drain_into`).
const RINGBUS_BATCH: &str = "ringbus-batch";

/// A ringbus run, as `name`; `spin`: the bus's `spin`, if not its default; `batch`: its
/// subscribers are batch subscribers.
async fn run_ringbus(
    name: &'static str,
    spin: Option<u32>,
    batch: bool,
    shape: Shape,
    messages: u64,
    subscribers: usize,
) -> Run {
    let mut builder = ringbus::Bus::builder().capacity(CAPACITY);
    if let Some(spin) = spin {
        builder = builder.spin(spin);
    }
    let bus = builder.build();
    let handled_at: Vec<Times> = (0..subscribers).map(|_| Times::new(messages)).collect();
    let origin = Instant::now();
    let mut subs = Vec::new();
    for times in &handled_at {
        let times = times.clone();
        let sub = if batch {
            bus.subscribe_batch(
                "latency",
                ringbus::SubscribeOptions::new(),
                move |stamps: ringbus::Batch<'_, Stamp>| {
                    stamps.iter().for_each(|s| times.handled(origin, s.seq));
                    std::future::ready(())
                },
            )
        } else {
            bus.subscribe("latency", move |stamp: &Stamp| {
                times.handled(origin, stamp.seq);
                std::future::ready(())
            })
        };
        subs.push(sub.expect("subscribe"));
    }
    let topic = bus.topic::<Stamp>("latency").expect("topic");
    let mut stall = histogram();
    let mut started_at = Vec::with_capacity(messages as usize);
    for seq in 0..messages {
        let intended = shape.intended(seq);
        wait_until(origin, intended).await;
        let started = origin.elapsed().as_nanos() as u64;
        started_at.push(started);
        topic
            .publish(Stamp {
                seq,
                intended,
                started,
            })
            .await
            .expect("publish");
        let done = origin.elapsed().as_nanos() as u64;
        let _ = stall.record(done.saturating_sub(intended).max(1));
    }
    bus.close().await;
    let recorded = recorded(shape, &started_at, handled_at);
    drop(subs);
    finish(name, shape, subscribers, messages, recorded, stall, 0)
}

/// A peer as the latency runs drive it: one publishing side, one receiver per subscriber.
trait Peer {
    const NAME: &'static str;
    type Tx;
    type Rx: Send + 'static;
    /// The publishing side and `subscribers` receivers; a lossy peer counts its losses in
    /// `lost`.
    fn build(subscribers: usize, lost: &Arc<AtomicU64>) -> (Self::Tx, Vec<Self::Rx>);
    /// Publishes to every subscriber (waiting for room, where the peer has backpressure).
    fn publish(tx: &Self::Tx, stamp: Stamp) -> impl Future<Output = ()>;
    /// Handles every message until the publishing side is gone and all was read, taking
    /// what is there in one go with the peer's batch receive where it has one (as the
    /// comparison runner's subscribers do).
    fn consume(
        rx: Self::Rx,
        handle: impl FnMut(Stamp) + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static;
}

/// A fan-out subscriber's batch buffer, allocated before the schedule starts.
fn batch_buffer() -> Vec<Stamp> {
    Vec::with_capacity(CAPACITY)
}

/// Every system's queue: 1024 messages.
const CAPACITY: usize = 1024;

/// `tokio::sync::broadcast`: lossy, so a lagging subscriber counts what it lost.
struct TokioBroadcast;

impl Peer for TokioBroadcast {
    const NAME: &'static str = "tokio-broadcast";
    type Tx = tokio::sync::broadcast::Sender<Stamp>;
    type Rx = (tokio::sync::broadcast::Receiver<Stamp>, Arc<AtomicU64>);

    fn build(subscribers: usize, lost: &Arc<AtomicU64>) -> (Self::Tx, Vec<Self::Rx>) {
        let (tx, _) = tokio::sync::broadcast::channel(CAPACITY);
        let rxs = (0..subscribers)
            .map(|_| (tx.subscribe(), lost.clone()))
            .collect();
        (tx, rxs)
    }

    async fn publish(tx: &Self::Tx, stamp: Stamp) {
        let _ = tx.send(stamp);
    }

    /// One message at a time: tokio's broadcast has no batch receive.
    async fn consume((mut rx, lost): Self::Rx, mut handle: impl FnMut(Stamp) + Send + 'static) {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match rx.recv().await {
                Ok(stamp) => handle(stamp),
                Err(RecvError::Lagged(n)) => {
                    lost.fetch_add(n, Ordering::Relaxed);
                }
                Err(RecvError::Closed) => return,
            }
        }
    }
}

/// `async-broadcast`, with backpressure (the publisher waits for room).
struct AsyncBroadcast;

impl Peer for AsyncBroadcast {
    const NAME: &'static str = "async-broadcast";
    type Tx = async_broadcast::Sender<Stamp>;
    type Rx = async_broadcast::Receiver<Stamp>;

    fn build(subscribers: usize, _lost: &Arc<AtomicU64>) -> (Self::Tx, Vec<Self::Rx>) {
        let (mut tx, rx) = async_broadcast::broadcast(CAPACITY);
        tx.set_overflow(false); // the default, stated
        let rxs = (0..subscribers).map(|_| rx.clone()).collect();
        (tx, rxs) // `rx` is dropped here: only the subscribers' receivers hold messages
    }

    /// `broadcast_direct` and `recv_direct`: the crate's allocation-free forms, as the
    /// comparison runner wires it.
    async fn publish(tx: &Self::Tx, stamp: Stamp) {
        tx.broadcast_direct(stamp).await.expect("broadcast");
    }

    /// One message at a time: `async-broadcast` has no batch receive.
    async fn consume(mut rx: Self::Rx, mut handle: impl FnMut(Stamp) + Send + 'static) {
        while let Ok(stamp) = rx.recv_direct().await {
            handle(stamp);
        }
    }
}

/// One bounded channel per subscriber (what Go buses do); a publish sends to each in turn.
struct Fanout<C>(std::marker::PhantomData<C>);

/// A channel for [`Fanout`].
trait Channel {
    const NAME: &'static str;
    type Tx;
    type Rx: Send + 'static;
    fn channel() -> (Self::Tx, Self::Rx);
    fn send(tx: &Self::Tx, stamp: Stamp) -> impl Future<Output = ()>;
    fn consume(
        rx: Self::Rx,
        handle: impl FnMut(Stamp) + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static;
}

impl<C: Channel> Peer for Fanout<C> {
    const NAME: &'static str = C::NAME;
    type Tx = Vec<C::Tx>;
    type Rx = C::Rx;

    fn build(subscribers: usize, _lost: &Arc<AtomicU64>) -> (Self::Tx, Vec<Self::Rx>) {
        (0..subscribers).map(|_| C::channel()).unzip()
    }

    async fn publish(txs: &Self::Tx, stamp: Stamp) {
        for tx in txs {
            C::send(tx, stamp).await;
        }
    }

    fn consume(
        rx: Self::Rx,
        handle: impl FnMut(Stamp) + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        C::consume(rx, handle)
    }
}

/// `tokio::sync::mpsc`.
struct TokioMpsc;

impl Channel for TokioMpsc {
    const NAME: &'static str = "tokio-mpsc-fanout";
    type Tx = tokio::sync::mpsc::Sender<Stamp>;
    type Rx = tokio::sync::mpsc::Receiver<Stamp>;

    fn channel() -> (Self::Tx, Self::Rx) {
        tokio::sync::mpsc::channel(CAPACITY)
    }

    async fn send(tx: &Self::Tx, stamp: Stamp) {
        tx.send(stamp).await.expect("send");
    }

    /// `recv_many`: everything there, in one go.
    async fn consume(mut rx: Self::Rx, mut handle: impl FnMut(Stamp) + Send + 'static) {
        let mut buf = batch_buffer();
        while rx.recv_many(&mut buf, CAPACITY).await > 0 {
            buf.drain(..).for_each(&mut handle);
        }
    }
}

/// `kanal`'s async channel, raw (`Kanal`) or spending tokio's cooperative budget as ringbus
/// must (`KanalBudget`, guarantee 11): one unit per send, one per up to 8 messages received.
struct KanalChannel<const BUDGET: bool>;

type Kanal = KanalChannel<false>;
type KanalBudget = KanalChannel<true>;

impl<const BUDGET: bool> Channel for KanalChannel<BUDGET> {
    const NAME: &'static str = if BUDGET {
        "kanal-fanout-budget"
    } else {
        "kanal-fanout"
    };
    type Tx = kanal::AsyncSender<Stamp>;
    type Rx = kanal::AsyncReceiver<Stamp>;

    fn channel() -> (Self::Tx, Self::Rx) {
        kanal::bounded_async(CAPACITY)
    }

    async fn send(tx: &Self::Tx, stamp: Stamp) {
        tx.send(stamp).await.expect("send");
        if BUDGET {
            tokio::task::coop::consume_budget().await;
        }
    }

    /// `recv` for the first message, then `drain_into` for what else is there.
    async fn consume(rx: Self::Rx, mut handle: impl FnMut(Stamp) + Send + 'static) {
        let mut buf = batch_buffer();
        while let Ok(stamp) = rx.recv().await {
            handle(stamp);
            let _ = rx.drain_into(&mut buf);
            let taken = 1 + buf.len();
            buf.drain(..).for_each(&mut handle);
            if BUDGET {
                for _ in 0..taken.div_ceil(8) {
                    tokio::task::coop::consume_budget().await;
                }
            }
        }
    }
}

/// One run of a peer: its subscribers as tasks recording what they receive, the publisher on
/// the schedule.
async fn run_peer<P: Peer>(shape: Shape, messages: u64, subscribers: usize) -> Run {
    let lost = Arc::new(AtomicU64::new(0));
    let handled_at: Vec<Times> = (0..subscribers).map(|_| Times::new(messages)).collect();
    let origin = Instant::now();
    let (tx, rxs) = P::build(subscribers, &lost);
    let tasks: Vec<_> = rxs
        .into_iter()
        .zip(&handled_at)
        .map(|(rx, times)| {
            let times = times.clone();
            tokio::spawn(P::consume(rx, move |stamp| {
                times.handled(origin, stamp.seq)
            }))
        })
        .collect();
    let mut stall = histogram();
    let mut started_at = Vec::with_capacity(messages as usize);
    for seq in 0..messages {
        let intended = shape.intended(seq);
        wait_until(origin, intended).await;
        let started = origin.elapsed().as_nanos() as u64;
        started_at.push(started);
        let stamp = Stamp {
            seq,
            intended,
            started,
        };
        P::publish(&tx, stamp).await;
        let done = origin.elapsed().as_nanos() as u64;
        let _ = stall.record(done.saturating_sub(intended).max(1));
    }
    drop(tx);
    for t in tasks {
        t.await.expect("a subscriber panicked");
    }
    let recorded = recorded(shape, &started_at, handled_at);
    let lost = lost.load(Ordering::Relaxed);
    finish(P::NAME, shape, subscribers, messages, recorded, stall, lost)
}

fn finish(
    system: &'static str,
    shape: Shape,
    subscribers: usize,
    messages: u64,
    recorded: Arc<Recorded>,
    stall: Histogram<u64>,
    lost: u64,
) -> Run {
    let received = recorded.received.load(Ordering::Relaxed);
    let expected = messages * subscribers as u64;
    assert_eq!(
        received + lost,
        expected,
        "{system}: {received} received + {lost} lost != {expected} published"
    );
    let take =
        |m: &Mutex<Histogram<u64>>| m.lock().map(|h| h.clone()).unwrap_or_else(|_| histogram());
    Run {
        system,
        shape: shape.name(),
        subscribers,
        e2e: take(&recorded.e2e),
        stall,
        lag: take(&recorded.lag),
        lost,
    }
}

/// Blocks per row (see `main`; two in a `quick` run). The verdict prints how often an A/A
/// comparison would pass every row with this many blocks and with more, which says whether
/// the machine allows a fair verdict at all (see `latency.md`).
const BLOCKS: usize = 20;

/// Pilot blocks per row (one in a `quick` run): the peers alone, to pick each quantile's
/// comparator for the verdict before the blocks it is judged on.
const PILOT_BLOCKS: usize = 3;

/// ringbus run a second time in every block: the A/A comparison, which says how often the
/// verdict would fail a system level with its comparator.
const RINGBUS_AA: &str = "ringbus-aa";

/// An experiment instead of the published run, from the environment; such a run writes
/// nothing. `LATENCY_SYSTEMS=ringbus,ringbus-spin16,tokio-broadcast` (names from `SYSTEMS`, or
/// `ringbus-spin16`: ringbus with `Bus::builder().spin(16)`), `LATENCY_ROWS=fixed/8,burst/1`
/// (shape and subscribers), `LATENCY_BLOCKS=15`. It prints every block's e2e p99 and p99.9.
/// `LATENCY_SEED=n` repeats a run's random orders (any run; it writes as usual).
#[derive(Default)]
struct Experiment {
    systems: Option<Vec<String>>,
    rows: Option<Vec<String>>,
    blocks: Option<usize>,
    /// `LATENCY_PUBLISHER=thread`: the publisher runs where this bench ran it until
    /// 2026-12-02, in `Runtime::block_on` on the main thread, outside the runtime's two
    /// workers. Its wait for the next intended time is a busy loop, so the machine's 2 cores
    /// then had 3 busy threads, and the kernel took a worker (and the subscriber tasks it
    /// held) off its core for a time slice now and then: millisecond tails in every system
    /// (see `docs/benchmarks/latency.md`).
    publisher_thread: bool,
    /// `LATENCY_MESSAGES=n`: messages per run (100,000 in a full run).
    messages: Option<u64>,
}

impl Experiment {
    fn from_env() -> Self {
        let list = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
        };
        let systems: Option<Vec<String>> = list("LATENCY_SYSTEMS");
        for name in systems.iter().flatten() {
            assert!(
                SYSTEMS.contains(&name.as_str())
                    || [RINGBUS_SPIN16, RINGBUS_BATCH].contains(&name.as_str()),
                "LATENCY_SYSTEMS: no system {name:?} (there are {SYSTEMS:?} and {RINGBUS_SPIN16})"
            );
        }
        let rows: Option<Vec<String>> = list("LATENCY_ROWS");
        for row in rows.iter().flatten() {
            let known = ["fixed", "burst"]
                .iter()
                .any(|kind| [1, 4, 8].iter().any(|n| *row == format!("{kind}/{n}")));
            assert!(
                known,
                "LATENCY_ROWS: no row {row:?} (fixed/1, fixed/4, ..., burst/8)"
            );
        }
        Self {
            systems,
            rows,
            blocks: std::env::var("LATENCY_BLOCKS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(|n: usize| n.max(1)),
            publisher_thread: std::env::var("LATENCY_PUBLISHER").is_ok_and(|v| v == "thread"),
            messages: std::env::var("LATENCY_MESSAGES")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(|n: u64| n.max(1_000)),
        }
    }

    fn is_set(&self) -> bool {
        self.systems.is_some()
            || self.rows.is_some()
            || self.blocks.is_some()
            || self.publisher_thread
            || self.messages.is_some()
    }

    /// Whether the row of `shape` with `subscribers` runs.
    fn wants(&self, shape: &Shape, subscribers: usize) -> bool {
        let kind = match shape {
            Shape::Fixed { .. } => "fixed",
            Shape::Burst { .. } => "burst",
        };
        let row = format!("{kind}/{subscribers}");
        self.rows.as_ref().is_none_or(|rows| rows.contains(&row))
    }
}

/// A percentile over the blocks of one row: the median block's value and the spread.
#[derive(Clone, Copy)]
struct Spread {
    median: u64,
    min: u64,
    max: u64,
}

impl Spread {
    fn of(mut values: Vec<u64>) -> Self {
        values.sort_unstable();
        Self {
            median: values[values.len() / 2],
            min: values[0],
            max: values[values.len() - 1],
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} [{:.1}–{:.1}]",
            us(self.median),
            us(self.min),
            us(self.max)
        )
    }
}

/// One row of the table: a system's runs in one configuration, one per block.
struct Summary {
    system: &'static str,
    shape: String,
    subscribers: usize,
    p50: Spread,
    p99: Spread,
    p999: Spread,
    max: u64,
    stall_p99: Spread,
    stall_max: u64,
    lag_p99: Spread,
    lost: u64,
}

impl Summary {
    fn of(runs: &[Run]) -> Self {
        let spread = |f: &dyn Fn(&Run) -> u64| Spread::of(runs.iter().map(f).collect());
        Self {
            system: runs[0].system,
            shape: runs[0].shape.clone(),
            subscribers: runs[0].subscribers,
            p50: spread(&|r| r.e2e.value_at_quantile(0.5)),
            p99: spread(&|r| r.e2e.value_at_quantile(0.99)),
            p999: spread(&|r| r.e2e.value_at_quantile(0.999)),
            max: runs.iter().map(|r| r.e2e.max()).max().unwrap_or(0),
            stall_p99: spread(&|r| r.stall.value_at_quantile(0.99)),
            stall_max: runs.iter().map(|r| r.stall.max()).max().unwrap_or(0),
            lag_p99: spread(&|r| r.lag.value_at_quantile(0.99)),
            lost: runs.iter().map(|r| r.lost).sum(),
        }
    }
}

/// The tolerances of the paired verdict: ringbus passes a row when, at 95 % confidence,
/// its e2e p99 is at most 10 % above the comparator's and its p99.9 at most 25 % above.
const TESTS: [(f64, f64, &str); 2] = [(0.99, 1.10, "p99"), (0.999, 1.25, "p99.9")];

/// The one-sided confidence level of the verdict's bounds is `1 - ALPHA`.
const ALPHA: f64 = 0.05;

/// Bootstrap resamples of the A/A blocks (see [`paired::pass_rate`]).
const RESAMPLES: usize = 2_000;

/// One row's paired verdict: for each ringbus wiring and quantile, the Hodges–Lehmann shift
/// of `ln(wiring / comparator)` over the row's blocks, and the same for ringbus against its
/// own second run in each block (A/A).
struct RowVerdict {
    row: String,
    /// Per test of [`TESTS`]: the comparator, the peer with the lowest median of that
    /// quantile in the row's pilot blocks (lossless ones only).
    comparators: [Option<&'static str>; 2],
    /// Per ringbus wiring, per test.
    wirings: Vec<(&'static str, [Option<paired::Shift>; 2])>,
    /// Per test: the A/A log-ratios, one per block.
    aa: [Vec<f64>; 2],
}

/// `ln(a / b)` of quantile `q` in each block.
fn log_ratios(a: &[Run], b: &[Run], q: f64) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(a, b)| {
            let (a, b) = (a.e2e.value_at_quantile(q), b.e2e.value_at_quantile(q));
            (a.max(1) as f64 / b.max(1) as f64).ln()
        })
        .collect()
}

impl RowVerdict {
    /// The verdict of a row from its pilot (peers only) and its blocks (every system, `runs`
    /// in the order of `systems`).
    fn of(row: String, pilot: &[Vec<Run>], runs: &[Vec<Run>]) -> Self {
        let comparators = TESTS.map(|(q, _, _)| {
            pilot
                .iter()
                .filter(|r| !r.is_empty() && r.iter().all(|run| run.lost == 0))
                .min_by_key(|r| {
                    Spread::of(r.iter().map(|run| run.e2e.value_at_quantile(q)).collect()).median
                })
                .map(|r| r[0].system)
        });
        let of = |name: &str| {
            runs.iter()
                .find(|r| r.first().is_some_and(|run| run.system == name))
        };
        let wirings = ["ringbus", RINGBUS_BATCH]
            .into_iter()
            .filter_map(|w| of(w).map(|r| (w, r)))
            .map(|(w, ours)| {
                let mut shifts = [None; 2];
                for (k, (q, _, _)) in TESTS.iter().enumerate() {
                    if let Some(theirs) = comparators[k].and_then(of) {
                        shifts[k] = Some(paired::shift(&log_ratios(ours, theirs, *q), ALPHA));
                    }
                }
                (w, shifts)
            })
            .collect();
        let aa = TESTS.map(|(q, _, _)| match (of("ringbus"), of(RINGBUS_AA)) {
            (Some(a), Some(b)) => log_ratios(a, b, q),
            _ => Vec::new(),
        });
        Self {
            row,
            comparators,
            wirings,
            aa,
        }
    }

    fn aa_shifts(&self) -> [paired::Shift; 2] {
        [0, 1].map(|k| paired::shift(&self.aa[k], ALPHA))
    }

    /// Whether both tests pass for `shifts`.
    fn passes(shifts: &[Option<paired::Shift>]) -> bool {
        shifts
            .iter()
            .zip(TESTS)
            .all(|(s, (_, limit, _))| s.is_some_and(|s| s.upper < limit.ln()))
    }
}

/// The verdict's section: per row and quantile the comparator, each ringbus wiring's shift
/// `exp(HL)` with its upper bound, and the A/A result with its bootstrap pass rate.
fn verdict(rows: &[RowVerdict], blocks: usize, rng: &mut paired::Rng) -> String {
    let cell = |s: Option<paired::Shift>, limit: f64| match s {
        Some(s) => format!(
            "{:.3} [≤ {:.3}] {}",
            s.estimate.exp(),
            s.upper.exp(),
            if s.upper < limit.ln() { "✔" } else { "✘" }
        ),
        None => "-".into(),
    };
    let wirings: Vec<&str> = rows
        .first()
        .map(|r| r.wirings.iter().map(|(w, _)| *w).collect())
        .unwrap_or_default();
    let mut s = format!(
        "**The paired verdict** ({blocks} blocks per row; see *How the verdict is reached*). \
         Each cell: the shift exp(HL) of the system's quantile over the comparator's, \
         [its one-sided 95 % upper bound]; ✔ when the bound is under the tolerance (p99 1.10, \
         p99.9 1.25). A/A: ringbus against its own second run in each block; *A/A pass rate*: \
         the share of {RESAMPLES} bootstrap resamples of the row's blocks in which A/A passes \
         both quantiles.\n\n| row | quantile | comparator (pilot) | {} | A/A | A/A pass rate |\n|---|---|---|{}---|---|\n",
        wirings.join(" | "),
        "---|".repeat(wirings.len())
    );
    let mut passed: Vec<usize> = vec![0; wirings.len()];
    let mut aa_passed = 0;
    // The estimated chance that A/A passes every row, for this run's blocks and for more.
    let sizes = [blocks, 2 * blocks, 4 * blocks];
    let mut aa_all = [1.0; 3];
    let limits: Vec<f64> = TESTS.iter().map(|t| t.1.ln()).collect();
    for r in rows {
        let aa = r.aa_shifts();
        let rates =
            sizes.map(|size| paired::pass_rate(&r.aa, &limits, ALPHA, (RESAMPLES, size), rng));
        for (all, rate) in aa_all.iter_mut().zip(rates) {
            *all *= rate;
        }
        let rate = rates[0];
        aa_passed += usize::from(RowVerdict::passes(&aa.map(Some)));
        for (k, (_, limit, name)) in TESTS.iter().enumerate() {
            let cells: Vec<String> = r
                .wirings
                .iter()
                .map(|(_, shifts)| cell(shifts[k], *limit))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {name} | {} | {} | {} | {} |",
                r.row,
                r.comparators[k].unwrap_or("-"),
                cells.join(" | "),
                cell(Some(aa[k]), *limit),
                if k == 0 {
                    format!("{:.0} %", rate * 100.0)
                } else {
                    String::new()
                }
            );
        }
        for (w, (_, shifts)) in r.wirings.iter().enumerate() {
            passed[w] += usize::from(RowVerdict::passes(shifts));
        }
    }
    let _ = writeln!(s);
    for (w, name) in wirings.iter().enumerate() {
        let _ = writeln!(
            s,
            "- {name} passes in {} of {} rows{}.",
            passed[w],
            rows.len(),
            if passed[w] == rows.len() {
                ": **the verdict passes**"
            } else {
                ": the verdict fails"
            }
        );
    }
    let _ = writeln!(
        s,
        "- A/A (ringbus against itself) passes in {aa_passed} of {} rows. The estimated chance \
         that an A/A run passes in every row (the product of the rows' bootstrap pass rates, \
         resampling this run's blocks): {:.0} % with {} blocks, {:.0} % with {}, {:.0} % with \
         {}. The verdict is calibrated (the test fair) when the first is at least 90 %.",
        rows.len(),
        aa_all[0] * 100.0,
        sizes[0],
        aa_all[1] * 100.0,
        sizes[1],
        aa_all[2] * 100.0,
        sizes[2],
    );
    s
}

/// Every system, in the order each configuration runs them.
const SYSTEMS: [&str; 7] = [
    "ringbus",
    RINGBUS_BATCH,
    "tokio-broadcast",
    "async-broadcast",
    "tokio-mpsc-fanout",
    "kanal-fanout",
    "kanal-fanout-budget",
];

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Messages the `lifo` experiment publishes per run.
const LIFO_MESSAGES: u64 = 200_000;

/// One run of the `lifo` experiment: how many publishes had completed when the subscriber,
/// parked before the first one, handled its first message.
fn lifo_run(runtime: &tokio::runtime::Runtime) -> u64 {
    runtime.block_on(async {
        let bus = ringbus::Bus::builder().capacity(1 << 18).build();
        let published = Arc::new(AtomicU64::new(0));
        let first = Arc::new(AtomicU64::new(u64::MAX));
        let handled = Arc::new(AtomicU64::new(0));
        let (count, seen, done) = (published.clone(), first.clone(), handled.clone());
        let _sub = bus
            .subscribe("lifo", move |&m: &u64| {
                if m != u64::MAX {
                    let now = count.load(Ordering::SeqCst);
                    let _ =
                        seen.compare_exchange(u64::MAX, now, Ordering::SeqCst, Ordering::SeqCst);
                }
                done.fetch_add(1, Ordering::SeqCst);
                std::future::ready(())
            })
            .expect("subscribe");
        // A warm-up message, handled before the publisher starts: the subscriber is then
        // caught up and parked, so the publisher's first publish wakes it.
        bus.publish("lifo", u64::MAX).await.expect("publish");
        while handled.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let topic = bus.topic::<u64>("lifo").expect("topic");
        let publisher = tokio::spawn(async move {
            for m in 0..LIFO_MESSAGES {
                topic.publish(m).await.expect("publish");
                published.fetch_add(1, Ordering::SeqCst);
            }
        });
        publisher.await.expect("publisher");
        bus.close().await;
        first.load(Ordering::SeqCst)
    })
}

/// The `lifo` experiment: 5 runs each on runtimes of 1 and 2 workers.
fn lifo_experiment(no_lifo: bool) {
    println!(
        "| workers | LIFO slot | publishes done when the woken subscriber first ran (of {LIFO_MESSAGES}), 5 runs |"
    );
    println!("|---|---|---|");
    for workers in [1, 2] {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers).enable_all();
        #[cfg(tokio_unstable)]
        if no_lifo {
            builder.disable_lifo_slot();
        }
        let runtime = builder.build().expect("runtime");
        let counts: Vec<String> = (0..5).map(|_| lifo_run(&runtime).to_string()).collect();
        let lifo = if no_lifo { "off" } else { "on" };
        println!("| {workers} | {lifo} | {} |", counts.join(", "));
    }
}

/// One run of `system` (a name from `SYSTEMS`).
async fn run_system(system: &str, shape: Shape, messages: u64, subscribers: usize) -> Run {
    match system {
        "ringbus" => run_ringbus("ringbus", None, false, shape, messages, subscribers).await,
        RINGBUS_AA => run_ringbus(RINGBUS_AA, None, false, shape, messages, subscribers).await,
        RINGBUS_BATCH => run_ringbus(RINGBUS_BATCH, None, true, shape, messages, subscribers).await,
        RINGBUS_SPIN16 => {
            run_ringbus(
                RINGBUS_SPIN16,
                Some(16),
                false,
                shape,
                messages,
                subscribers,
            )
            .await
        }
        "tokio-broadcast" => run_peer::<TokioBroadcast>(shape, messages, subscribers).await,
        "async-broadcast" => run_peer::<AsyncBroadcast>(shape, messages, subscribers).await,
        "kanal-fanout" => run_peer::<Fanout<Kanal>>(shape, messages, subscribers).await,
        "kanal-fanout-budget" => {
            run_peer::<Fanout<KanalBudget>>(shape, messages, subscribers).await
        }
        "tokio-mpsc-fanout" => run_peer::<Fanout<TokioMpsc>>(shape, messages, subscribers).await,
        other => unreachable!("no system {other:?} (`Experiment::from_env` checks the names)"),
    }
}

/// One run of `system`, its publisher a task on `runtime` (as a service publishes), or with
/// `publisher_thread`, the future `block_on` runs on the calling thread (an experiment: see
/// `Experiment::publisher_thread`).
fn run_on(
    runtime: &tokio::runtime::Runtime,
    publisher_thread: bool,
    system: &str,
    shape: Shape,
    messages: u64,
    subscribers: usize,
) -> Run {
    if publisher_thread {
        return runtime.block_on(run_system(system, shape, messages, subscribers));
    }
    let system = system.to_string();
    runtime
        .block_on(
            runtime.spawn(async move { run_system(&system, shape, messages, subscribers).await }),
        )
        .expect("the publishing task panicked")
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let no_lifo = cfg!(tokio_unstable) && std::env::var_os("LATENCY_NO_LIFO").is_some();
    if std::env::args().any(|a| a == "lifo") {
        lifo_experiment(no_lifo);
        return;
    }
    let experiment = Experiment::from_env();
    paired::self_check();
    let blocks = experiment.blocks.unwrap_or(if quick { 2 } else { BLOCKS });
    let pilot_blocks = if quick { 1 } else { PILOT_BLOCKS };
    let systems: Vec<&str> = experiment
        .systems
        .as_ref()
        .map(|s| s.iter().map(String::as_str).collect())
        .unwrap_or_else(|| SYSTEMS.to_vec());
    let (messages, rate) = if quick {
        (20_000, 100_000)
    } else {
        (100_000, 200_000)
    };
    let messages = experiment.messages.unwrap_or(messages);
    let shapes = [
        Shape::Fixed { rate },
        Shape::Burst {
            size: 512,
            period: Duration::from_millis(5),
        },
    ];
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    // An experiment, not a published figure: with RUSTFLAGS="--cfg tokio_unstable" and
    // LATENCY_NO_LIFO=1, tokio's LIFO slot is off (a task woken by a worker's running task
    // then goes to that worker's queue, where the other worker can steal it).
    #[cfg(tokio_unstable)]
    if no_lifo {
        builder.disable_lifo_slot();
    }
    if no_lifo {
        eprintln!("latency: tokio's LIFO slot disabled (experiment: nothing is written)");
    }
    let runtime = builder.build().expect("runtime");
    // One short, discarded round of every system first: one-time costs of a process (the
    // runtime's threads starting, ringbus's `membarrier` registration, the allocator's first
    // arenas) belong to no row.
    for system in &systems {
        let warm_up = Shape::Fixed { rate };
        let _ = run_on(
            &runtime,
            experiment.publisher_thread,
            system,
            warm_up,
            messages / 20,
            2,
        );
    }
    let seed = std::env::var("LATENCY_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("latency: seed {seed} (LATENCY_SEED={seed} repeats the blocks' orders)");
    let mut rng = paired::Rng::new(seed);
    let peers: Vec<&str> = systems
        .iter()
        .copied()
        .filter(|s| !s.starts_with("ringbus"))
        .collect();
    // Every block runs ringbus twice: the second run is the A/A comparison.
    let mut blocked = systems.clone();
    if systems.contains(&"ringbus") {
        blocked.push(RINGBUS_AA);
    }
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for shape in shapes {
        for subscribers in [1, 4, 8] {
            if !experiment.wants(&shape, subscribers) {
                continue;
            }
            let run = |system: &str, label: String| {
                eprintln!(
                    "latency: {} / {subscribers} subscribers / {system} ({label})",
                    shape.name()
                );
                run_on(
                    &runtime,
                    experiment.publisher_thread,
                    system,
                    shape,
                    messages,
                    subscribers,
                )
            };
            // The pilot, which picks each quantile's comparator: the peers only, in blocks.
            let mut pilot: Vec<Vec<Run>> = peers.iter().map(|_| Vec::new()).collect();
            for block in 0..pilot_blocks {
                for i in rng.order(peers.len()) {
                    let label = format!("pilot {}/{pilot_blocks}", block + 1);
                    pilot[i].push(run(peers[i], label));
                }
            }
            // Then the blocks: every system once in a fresh random order each, the first
            // block a warm-up whose runs are discarded.
            let mut runs: Vec<Vec<Run>> = blocked.iter().map(|_| Vec::new()).collect();
            for block in 0..=blocks {
                for i in rng.order(blocked.len()) {
                    let label = match block {
                        0 => "warm-up block".to_string(),
                        b => format!("block {b}/{blocks}"),
                    };
                    let r = run(blocked[i], label);
                    if block > 0 {
                        runs[i].push(r);
                    }
                }
            }
            if experiment.is_set() {
                // Each block's e2e p99 and p99.9, in µs, to see how the blocks spread.
                for r in &runs {
                    let at = |q: f64| {
                        r.iter()
                            .map(|run| format!("{:.0}", us(run.e2e.value_at_quantile(q))))
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    eprintln!(
                        "blocks: {} / {subscribers} / {}: p99 {}; p99.9 {}",
                        shape.name(),
                        r[0].system,
                        at(0.99),
                        at(0.999)
                    );
                }
            }
            let row = format!("{} / {subscribers}", shape.name());
            verdicts.push(RowVerdict::of(row, &pilot, &runs));
            rows.extend(runs.iter().map(|r| Summary::of(r)));
        }
    }

    let mut table = String::new();
    let _ = writeln!(
        table,
        "| shape | subs | system | e2e p50 | e2e p99 | e2e p99.9 | e2e max | stall p99 | stall max | lag p99 | lost |"
    );
    let _ = writeln!(table, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut json = Vec::new();
    for r in &rows {
        let _ = writeln!(
            table,
            "| {} | {} | {} | {:.1} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            r.shape,
            r.subscribers,
            r.system,
            us(r.p50.median),
            r.p99,
            r.p999,
            us(r.max),
            us(r.stall_p99.median),
            us(r.stall_max),
            us(r.lag_p99.median),
            r.lost,
        );
        json.push(format!(
            "    {{\"scenario\": \"latency/{}/{}\", \"system\": \"{}\", \"blocks\": {blocks}, \"e2e_p50_ns\": {}, \"e2e_p99_ns\": {}, \"e2e_p99_min_ns\": {}, \"e2e_p99_max_ns\": {}, \"e2e_p999_ns\": {}, \"e2e_p999_min_ns\": {}, \"e2e_p999_max_ns\": {}, \"e2e_max_ns\": {}, \"stall_p99_ns\": {}, \"stall_max_ns\": {}, \"lag_p99_ns\": {}, \"lost\": {}}}",
            r.shape.replace(' ', "_"),
            r.subscribers,
            r.system,
            r.p50.median,
            r.p99.median,
            r.p99.min,
            r.p99.max,
            r.p999.median,
            r.p999.min,
            r.p999.max,
            r.max,
            r.stall_p99.median,
            r.stall_max,
            r.lag_p99.median,
            r.lost
        ));
    }
    let verdict = verdict(&verdicts, blocks, &mut rng);
    println!("{table}");
    println!("{verdict}");

    // `cargo bench` passes `--bench`; `cargo test --benches` (a smoke run of a debug build)
    // does not: only a benchmark run writes the published figures.
    let benchmark = std::env::args().any(|a| a == "--bench");
    if quick || no_lifo || !benchmark || experiment.is_set() {
        return; // a smoke run or an experiment: do not overwrite the published figures
    }
    // The workspace's docs/benchmarks, wherever cargo runs the bench from.
    let docs = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/benchmarks"));
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    // The hand-written sections (from the first `## ` heading on) stay.
    let notes = std::fs::read_to_string(docs.join("latency.md"))
        .ok()
        .and_then(|old| old.find("\n## ").map(|at| old[at..].to_string()))
        .unwrap_or_default();
    let md = format!(
        "# Latency\n\nMeasured by `just latency` (`benches/latency.rs`) on {date}: {cpu}, {cores} cores, \
         release build, RUSTFLAGS cleared. A tokio multi-thread runtime with 2 workers; the \
         publisher and the subscribers are tasks on it; {messages} messages per run; queues \
         of 1024. *ringbus* subscribes one-message handlers (`subscribe`), *ringbus-batch* \
         batch handlers (`subscribe_batch`), as the fan-outs' subscribers take what is queued \
         with their batch calls (`recv_many`, `drain_into`); the broadcasts have none.\n\n\
         Times in microseconds. *e2e*: handling time minus the **intended** send time (from the \
         schedule, so a stalled publisher cannot hide queueing: coordinated omission is \
         accounted for). *stall*: publish completion minus intended send time. *lag*: handling \
         time minus the time the publish started. *lost*: messages a lossy peer dropped \
         (its latency covers only what arrived). Each row runs {pilot_blocks} pilot blocks of \
         the peers, then a discarded warm-up block and {blocks} blocks of every system, each \
         block every system once in a fresh random order (*ringbus-aa* is ringbus run a second \
         time, for the A/A comparison); every figure is the median over the blocks, the e2e \
         p99 and p99.9 with [min–max] over the blocks, *e2e max* and *stall max* the worst of \
         any block, *lost* the sum.\n\n{table}\n{verdict}\n\n\
         On a shared 2-core machine the tails (p99.9, max) are dominated by scheduling of the \
         publisher, the subscribers and everything else on the box; compare systems within one \
         row group, not across runs.\n{notes}"
    );
    let _ = std::fs::create_dir_all(docs);
    if let Err(e) = std::fs::write(docs.join("latency.md"), md) {
        eprintln!("could not write docs/benchmarks/latency.md: {e}");
    }
    let body = format!("{{\n  \"date\": \"{date}\",\n  \"cpu\": \"{cpu}\",\n  \"cores\": {cores},\n  \"figures\": [\n{}\n  ]\n}}\n", json.join(",\n"));
    if let Err(e) = std::fs::write(docs.join("latency.json"), body) {
        eprintln!("could not write docs/benchmarks/latency.json: {e}");
    }
}
