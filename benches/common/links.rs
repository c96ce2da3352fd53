//! What the link benches (`nats.rs`, `redis.rs`, `rabbitmq.rs`) share: the message and the
//! counting handlers, the three systems and the two half links, the interleaved rounds of a
//! cell, the statistics of their samples, the table, the JSON figures and the ratio goal, and
//! the writing of a bench's key of `results.json` and the table of its page. Included by each
//! as `#[path = "common/links.rs"] mod links;`, beside `common/mod.rs` (not a bench target of
//! its own). Each bench brings its engine's wiring: its cells, its round ([`LinkBench`]) and its
//! goals.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ringbus::{subscriber, Bus, State, Subscription};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::common::{loadavg, max, median, min, sig3, utc_now, CpuTicks};

/// How long a round may take before it counts as failed.
pub(crate) const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The message and the counting handlers
// ---------------------------------------------------------------------------------------------

/// The payload: a string of the cell's size; JSON makes it a body two bytes longer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Payload {
    pub(crate) body: String,
}

/// The body a payload of `size` bytes has on the wire is its JSON string: this text in quotes.
pub(crate) fn payload_text(size: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..size)
        .map(|i| char::from(ALPHABET[(i * 7 + i / 13) % ALPHABET.len()]))
        .collect()
}

/// A raw peer's message id, `<tag>-<n>` as the link's, written straight into a string of the
/// right size as the link writes its own (`ringbus_link::ids`), not through `format!`.
pub(crate) fn raw_id(tag: &str, n: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    let mut id = String::with_capacity(tag.len() + 1 + digits.len());
    id.push_str(tag);
    id.push('-');
    id.push_str(digits);
    id
}

/// What the `raw-json` client sends for one message: a `Payload` made from `text` and encoded
/// as the link's `Json` codec encodes it (the link's publisher makes a `Payload` per message,
/// and its export encodes each).
pub(crate) fn encode_payload(text: &str) -> Vec<u8> {
    let msg = Payload {
        body: text.to_owned(),
    };
    serde_json::to_vec(&msg).expect("a string always encodes")
}

/// What the `raw-json` receiver does with one body, as the link's import does: decodes the
/// `Payload`; its length, or `usize::MAX` (counted as a wrong body) if it does not decode.
pub(crate) fn decoded_len(body: &[u8]) -> usize {
    serde_json::from_slice::<Payload>(body).map_or(usize::MAX, |p| p.body.len())
}

/// Counts what a receiver got and notes when the last one arrived.
#[derive(Clone)]
pub(crate) struct Tally(Arc<TallyInner>);

struct TallyInner {
    expected: u64,
    /// The length every body must have.
    size: usize,
    seen: AtomicU64,
    bad: AtomicU64,
    done_at: OnceLock<Instant>,
    done: Notify,
}

impl Tally {
    pub(crate) fn new(expected: u64, size: usize) -> Self {
        Self(Arc::new(TallyInner {
            expected,
            size,
            seen: AtomicU64::new(0),
            bad: AtomicU64::new(0),
            done_at: OnceLock::new(),
            done: Notify::new(),
        }))
    }

    /// Counts one message of `len` bytes; true for the last one expected.
    pub(crate) fn record(&self, len: usize) -> bool {
        let t = &self.0;
        if len != t.size {
            t.bad.fetch_add(1, Ordering::Relaxed);
        }
        if t.seen.fetch_add(1, Ordering::AcqRel) + 1 == t.expected {
            let _ = t.done_at.set(Instant::now());
            t.done.notify_one();
            return true;
        }
        false
    }

    pub(crate) fn seen(&self) -> u64 {
        self.0.seen.load(Ordering::Acquire)
    }

    /// When the last expected message arrived; or why not: `lost` said messages were lost
    /// (checked every 100 ms), or the timeout passed.
    pub(crate) async fn wait(&self, lost: impl Fn() -> Option<String>) -> Result<Instant, String> {
        let deadline = tokio::time::Instant::now() + ROUND_TIMEOUT;
        let done = self.0.done.notified();
        let mut done = std::pin::pin!(done);
        loop {
            match tokio::time::timeout(Duration::from_millis(100), done.as_mut()).await {
                Ok(()) => break,
                Err(_) => {
                    if let Some(why) = lost() {
                        return Err(format!(
                            "{why}; {} of {} arrived",
                            self.seen(),
                            self.0.expected
                        ));
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!(
                            "only {} of {} messages arrived within {ROUND_TIMEOUT:?}",
                            self.seen(),
                            self.0.expected
                        ));
                    }
                }
            }
        }
        self.0
            .done_at
            .get()
            .copied()
            .ok_or_else(|| "notified before the last message".to_string())
    }

    /// Every message arrived exactly once with its full body.
    pub(crate) fn verify(&self) -> Result<(), String> {
        let (seen, bad) = (self.seen(), self.0.bad.load(Ordering::Relaxed));
        if seen != self.0.expected || bad != 0 {
            return Err(format!(
                "received {seen} of {} messages ({bad} with a wrong body)",
                self.0.expected
            ));
        }
        Ok(())
    }
}

/// The full bus's handler: an `async fn(&Msg)` with shared state, registered with
/// `bus.register(count)`.
#[subscriber("bench")]
pub(crate) async fn count(msg: &Payload, tally: State<Tally>) {
    tally.record(msg.body.len());
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// The bench's own arguments (`quick`, `diag`, `key=value`), without cargo's `--bench`.
pub(crate) struct Args(Vec<String>);

impl Args {
    pub(crate) fn parse() -> Self {
        Self(
            std::env::args()
                .skip(1)
                .filter(|a| !a.starts_with("--"))
                .collect(),
        )
    }

    /// Whether the word `name` was given.
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }

    /// The value of `key=value`.
    pub(crate) fn value(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    }

    /// The number of `key=N`, or `default`.
    ///
    /// # Panics
    ///
    /// If the value is not a number.
    pub(crate) fn num(&self, key: &str, default: u64) -> u64 {
        self.value(key)
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{key}={v}: not a number"))
            })
            .unwrap_or(default)
    }

    /// The systems named by `systems=a,b` (profiling some of them).
    pub(crate) fn systems(&self) -> Option<Vec<String>> {
        self.value("systems")
            .map(|v| v.split(',').map(str::to_string).collect())
    }
}

// ---------------------------------------------------------------------------------------------
// Systems, samples, rounds
// ---------------------------------------------------------------------------------------------

/// One side of a round: the raw client moving bytes, the raw client moving the typed message
/// (encoding and decoding each as the link's codec does), the link on a thin bus, or the link
/// on a bus used as an application uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Raw,
    RawJson,
    Link,
    Bus,
}

impl Side {
    /// Whether this raw side encodes and decodes each message (`raw-json`).
    pub(crate) fn typed(self) -> bool {
        self == Side::RawJson
    }

    /// The length a raw receiver records for `body`: the body's own, or (`raw-json`) the
    /// decoded payload's.
    pub(crate) fn received_len(self, body: &[u8]) -> usize {
        if self.typed() {
            decoded_len(body)
        } else {
            body.len()
        }
    }

    /// The length every message a raw receiver records has, for a payload of `size` bytes:
    /// the JSON body is two quotes longer than the decoded text.
    pub(crate) fn expected_len(self, size: usize) -> usize {
        if self.typed() {
            size
        } else {
            size + 2
        }
    }
}

/// A system: who sends and who receives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct System {
    pub(crate) name: &'static str,
    pub(crate) send: Side,
    pub(crate) recv: Side,
}

pub(crate) const RAW: System = System {
    name: "raw",
    send: Side::Raw,
    recv: Side::Raw,
};
/// The raw client doing the link's codec work: each message encoded on send and decoded on
/// receipt (JSON, as the link's default codec), the rest wired as `raw`.
pub(crate) const RAW_JSON: System = System {
    name: "raw-json",
    send: Side::RawJson,
    recv: Side::RawJson,
};
pub(crate) const LINK: System = System {
    name: "link",
    send: Side::Link,
    recv: Side::Link,
};
pub(crate) const BUS: System = System {
    name: "bus",
    send: Side::Bus,
    recv: Side::Bus,
};
/// Diagnostics: the link on one side only.
pub(crate) const EXPORT_ONLY: System = System {
    name: "export-only",
    send: Side::Link,
    recv: Side::Raw,
};
pub(crate) const IMPORT_ONLY: System = System {
    name: "import-only",
    send: Side::Raw,
    recv: Side::Link,
};

/// The systems of a run: the four, with `diag` also the half links, or those named in
/// `only` (profiling one of them).
pub(crate) fn systems(diag: bool, only: Option<&[String]>) -> Vec<System> {
    let all = [RAW, RAW_JSON, LINK, BUS, EXPORT_ONLY, IMPORT_ONLY];
    match only {
        Some(only) => all
            .into_iter()
            .filter(|s| only.iter().any(|n| n == s.name))
            .collect(),
        None if diag => all.to_vec(),
        None => vec![RAW, RAW_JSON, LINK, BUS],
    }
}

/// What one round measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) secs: f64,
    pub(crate) client_cpu_ns: u64,
    pub(crate) server_cpu_ns: u64,
    /// Share of the machine's CPU time used by other processes (not this one, not the
    /// server, not stolen by the hypervisor) during the round.
    pub(crate) foreign: f64,
}

pub(crate) trait OrFail<T> {
    fn or_fail(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn or_fail(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// Polls `done` every millisecond; returns `since` if it already holds.
pub(crate) async fn poll_until(
    since: Instant,
    what: &str,
    done: impl Fn() -> bool,
) -> Result<Instant, String> {
    if done() {
        return Ok(since);
    }
    let deadline = Instant::now() + ROUND_TIMEOUT;
    loop {
        tokio::time::sleep(Duration::from_millis(1)).await;
        if done() {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            return Err(format!("{what} within {ROUND_TIMEOUT:?}"));
        }
    }
}

/// CPU time of every thread of process `pid` (nanoseconds, from `schedstat`).
pub(crate) fn cpu_ns(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The publishing loop of one round: when it has published everything it returns, with the
/// time its last publish was confirmed if it awaits the confirmations itself.
pub(crate) type Publishing = JoinHandle<Result<Option<Instant>, String>>;

/// The receiving side of a round (a raw client, or a link into a bus).
pub(crate) trait RoundReceiver: Sized {
    type Cell;

    /// When the last message was received (and acknowledged, where the mode acknowledges).
    async fn wait(&mut self, cell: Self::Cell) -> Result<Instant, String>;

    /// Checks the counts, then closes.
    async fn finish(self, cell: Self::Cell) -> Result<(), String>;

    /// Tears down a round that failed, without checking anything.
    async fn abandon(self);
}

/// The publishing side of a round.
pub(crate) trait RoundSender: Sized {
    type Cell;

    /// When every publish was done (and confirmed, where the mode confirms), given the
    /// publishing loop and when the receiver was done; `since` if already.
    async fn wait(
        &self,
        task: Publishing,
        cell: Self::Cell,
        since: Instant,
    ) -> Result<Instant, String>;

    /// Checks the counts, then closes.
    async fn finish(self, cell: Self::Cell) -> Result<(), String>;

    /// Tears down a round that failed, without checking anything.
    async fn abandon(self);
}

/// A bus counted by `tally`: its only subscriber to `bench` is a closure (`Side::Link`: the
/// bus as thin as the link's API allows) or the `#[subscriber]` `count` (`Side::Bus`: as an
/// application writes it).
pub(crate) fn counting_bus(side: Side, tally: &Tally) -> Result<(Bus, Subscription), String> {
    let bus = Bus::builder().state(tally.clone()).build();
    let subscription = if side == Side::Link {
        let counted = tally.clone();
        bus.subscribe("bench", move |p: &Payload| {
            counted.record(p.body.len());
            std::future::ready(())
        })
    } else {
        bus.register(count)
    }
    .or_fail("subscribe")?;
    Ok((bus, subscription))
}

/// Publishes `n` payloads of `text` into `bus`'s topic `bench`: through a resolved topic
/// handle (`Side::Link`) or by name (`Side::Bus`).
pub(crate) fn publish_into(
    bus: &Bus,
    side: Side,
    text: String,
    n: u64,
) -> Result<Publishing, String> {
    let bus = bus.clone();
    Ok(if side == Side::Link {
        let topic = bus.topic::<Payload>("bench").or_fail("topic")?;
        tokio::spawn(async move {
            for _ in 0..n {
                let msg = Payload { body: text.clone() };
                topic.publish(msg).await.or_fail("publish")?;
            }
            Ok(None)
        })
    } else {
        tokio::spawn(async move {
            for _ in 0..n {
                let msg = Payload { body: text.clone() };
                bus.publish("bench", msg).await.or_fail("publish")?;
            }
            Ok(None)
        })
    })
}

/// Waits for the publishing loop: what it returned.
pub(crate) async fn published(task: Publishing) -> Result<Option<Instant>, String> {
    match tokio::time::timeout(ROUND_TIMEOUT, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("publisher panicked: {e}")),
        Err(_) => Err("the publisher did not finish".to_string()),
    }
}

/// How long tearing down a failed round's link (then its bus) may take.
pub(crate) const ABANDON_WITHIN: Duration = Duration::from_secs(5);

/// Tears down a link of a failed round, without checking anything: `closed` (its close,
/// bounded by the link itself with [`ABANDON_WITHIN`]), then its bus, for at most
/// [`ABANDON_WITHIN`].
pub(crate) async fn abandon_link<R>(closed: impl Future<Output = R>, bus: Bus) {
    closed.await;
    let _ = tokio::time::timeout(ABANDON_WITHIN, bus.close()).await;
}

/// When a raw receiver's task saw the last message (and settled it), or why not: it failed
/// or panicked, `lost` said messages were lost (checked every 100 ms), or `tally` still
/// lacked messages after [`ROUND_TIMEOUT`].
pub(crate) async fn raw_received(
    task: &mut JoinHandle<Result<Instant, String>>,
    tally: &Tally,
    lost: impl Fn() -> Option<String>,
) -> Result<Instant, String> {
    let deadline = tokio::time::Instant::now() + ROUND_TIMEOUT;
    let expected = tally.0.expected;
    loop {
        match tokio::time::timeout(Duration::from_millis(100), &mut *task).await {
            Ok(Ok(r)) => return r,
            Ok(Err(e)) => return Err(format!("raw receiver panicked: {e}")),
            Err(_) => {
                if let Some(why) = lost() {
                    return Err(format!("{why}; {} of {expected} arrived", tally.seen()));
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!(
                        "only {} of {expected} messages arrived within {ROUND_TIMEOUT:?}",
                        tally.seen()
                    ));
                }
            }
        }
    }
}

/// Sets up one round, the receiver first (torn down if the sender cannot be set up), then
/// times it, from `start` (which spawns the publishing loop) until both sides are done, with
/// the CPU time this process and the server (`server_pid`) spent meanwhile; then checks and
/// closes both sides (untimed). A failure tears both down.
pub(crate) async fn measure<C, R, S>(
    receiver: impl Future<Output = Result<R, String>>,
    sender: impl Future<Output = Result<S, String>>,
    cell: C,
    server_pid: Option<u32>,
    start: impl FnOnce(&S) -> Result<Publishing, String>,
) -> Result<Sample, String>
where
    C: Copy,
    R: RoundReceiver<Cell = C>,
    S: RoundSender<Cell = C>,
{
    let mut rx = receiver.await?;
    let tx = match sender.await {
        Ok(tx) => tx,
        Err(e) => {
            rx.abandon().await;
            return Err(e);
        }
    };
    let server = server_pid.map(|p| p.to_string()).unwrap_or_default();
    let (client0, server0, machine0) = (cpu_ns("self"), cpu_ns(&server), CpuTicks::now());
    let begun = Instant::now();
    let measured = match start(&tx) {
        Ok(task) => match rx.wait(cell).await {
            Ok(received) => tx.wait(task, cell, received).await,
            Err(e) => {
                task.abort();
                Err(e)
            }
        },
        Err(e) => Err(e),
    };
    let end = match measured {
        Ok(end) => end,
        Err(e) => {
            tx.abandon().await;
            rx.abandon().await;
            return Err(e);
        }
    };
    let (client1, server1, machine1) = (cpu_ns("self"), cpu_ns(&server), CpuTicks::now());
    let sent = tx.finish(cell).await;
    let received = rx.finish(cell).await;
    sent?;
    received?;
    let (client_cpu_ns, server_cpu_ns) = (
        client1.saturating_sub(client0),
        server1.saturating_sub(server0),
    );
    Ok(Sample {
        secs: (end - begun).as_secs_f64(),
        client_cpu_ns,
        server_cpu_ns,
        foreign: machine0.foreign_since(&machine1, server_cpu_ns).0,
    })
}

/// A cell of a link bench: a mode of the engine, a payload size, messages per round.
pub(crate) trait Cell: Copy {
    /// The mode's name (`core`, `jetstream`, `streams`).
    fn mode(&self) -> &'static str;
    /// The payload's size in bytes (its body on the wire is 2 bytes longer).
    fn size(&self) -> usize;
    fn messages(&self) -> u64;
}

/// An engine's rounds.
pub(crate) trait LinkBench {
    type Cell: Cell;

    /// Runs `system` once over `cell`.
    async fn round(&self, system: System, cell: Self::Cell) -> Result<Sample, String>;

    /// Whether a round that failed with `error` is run again (and listed) rather than
    /// aborting its cell, `reruns` rounds of the cell having been run again already.
    fn rerun(&self, error: &str, reruns: usize) -> bool {
        let _ = (error, reruns);
        false
    }
}

/// Runs every cell: in each, one warm-up round per system (none when `quick`), then `rounds`
/// rounds of every system in turn (`raw link bus raw link bus ...`).
pub(crate) async fn run_cells<B: LinkBench>(
    bench: &B,
    cells: &[B::Cell],
    systems: &[System],
    rounds: usize,
    quick: bool,
) -> Vec<CellResult<B::Cell>> {
    let mut results = Vec::new();
    for &cell in cells {
        let mut result = CellResult {
            cell,
            systems: systems.iter().map(|s| (*s, Vec::new())).collect(),
            failed: None,
            reruns: Vec::new(),
        };
        println!(
            "{} {} B, {} messages per round:",
            cell.mode(),
            cell.size(),
            cell.messages()
        );
        let warmup = usize::from(!quick);
        'rounds: for r in 0..warmup + rounds {
            let mut line = format!("  round {r}{}:", if r < warmup { " (warm-up)" } else { "" });
            for (i, system) in systems.iter().enumerate() {
                let mut outcome = bench.round(*system, cell).await;
                while let Err(e) = &outcome {
                    if !bench.rerun(e, result.reruns.len()) {
                        break;
                    }
                    eprintln!("  ({} round {r} run again: {e})", system.name);
                    result
                        .reruns
                        .push(format!("{} round {r}: {e}", system.name));
                    outcome = bench.round(*system, cell).await;
                }
                match outcome {
                    Ok(sample) => {
                        let _ = write!(
                            line,
                            " {} {}{}",
                            system.name,
                            fmt_rate(cell.messages() as f64 / sample.secs),
                            if sample.foreign > 0.05 {
                                format!(" (other processes {:.0}% CPU)", sample.foreign * 100.0)
                            } else {
                                String::new()
                            }
                        );
                        if r >= warmup {
                            result.systems[i].1.push(sample);
                        }
                    }
                    Err(e) => {
                        println!("{line}");
                        let why = format!("{} round {r}: {e}", system.name);
                        eprintln!("  ABORTED {} {} B: {why}", cell.mode(), cell.size());
                        result.failed = Some(why);
                        break 'rounds;
                    }
                }
            }
            println!("{line}");
        }
        results.push(result);
    }
    results
}

// ---------------------------------------------------------------------------------------------
// Statistics and the report
// ---------------------------------------------------------------------------------------------

pub(crate) fn spread(v: &[f64]) -> (f64, f64, f64) {
    (median(v), min(v), max(v))
}

pub(crate) fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

pub(crate) fn fmt_spread((m, lo, hi): (f64, f64, f64), f: impl Fn(f64) -> String) -> String {
    format!("{} [{}–{}]", f(m), f(lo), f(hi))
}

/// The figures of one cell: per system, its rounds in run order.
pub(crate) struct CellResult<C> {
    pub(crate) cell: C,
    pub(crate) systems: Vec<(System, Vec<Sample>)>,
    pub(crate) failed: Option<String>,
    /// Rounds that failed and were run again (see [`LinkBench::rerun`]).
    pub(crate) reruns: Vec<String>,
}

impl<C: Cell> CellResult<C> {
    pub(crate) fn rates(&self, name: &str) -> Vec<f64> {
        self.systems
            .iter()
            .find(|(s, _)| s.name == name)
            .map(|(_, v)| {
                v.iter()
                    .map(|s| self.cell.messages() as f64 / s.secs)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Per round: `name`'s rate over raw's rate in the same round.
    pub(crate) fn ratios(&self, name: &str) -> Vec<f64> {
        self.ratios_to(name, "raw")
    }

    /// Per round: `name`'s rate over `base`'s rate in the same round.
    pub(crate) fn ratios_to(&self, name: &str, base: &str) -> Vec<f64> {
        let (a, b) = (self.rates(name), self.rates(base));
        a.iter().zip(&b).map(|(a, b)| a / b).collect()
    }

    pub(crate) fn cpu_us_per_msg(&self, name: &str, server: bool) -> Vec<f64> {
        self.systems
            .iter()
            .find(|(s, _)| s.name == name)
            .map(|(_, v)| {
                v.iter()
                    .map(|s| {
                        let ns = if server {
                            s.server_cpu_ns
                        } else {
                            s.client_cpu_ns
                        };
                        ns as f64 / 1e3 / self.cell.messages() as f64
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The names of the systems that ran, in table order.
pub(crate) fn names(systems: &[System]) -> Vec<&'static str> {
    systems.iter().map(|s| s.name).collect()
}

pub(crate) fn triple_json((m, lo, hi): (f64, f64, f64), round_to: impl Fn(f64) -> f64) -> Value {
    json!({"median": round_to(m), "min": round_to(lo), "max": round_to(hi)})
}

pub(crate) fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A whole run of a link bench: every cell's figures, how long it took and the machine's load
/// around it.
pub(crate) struct Run<C> {
    pub(crate) results: Vec<CellResult<C>>,
    pub(crate) duration: Duration,
    pub(crate) load_start: [f64; 3],
    pub(crate) load_end: [f64; 3],
}

impl<C: Cell> Run<C> {
    /// Runs `cells` (the bench's run of every cell) to the end on a tokio multi-thread
    /// runtime with 2 workers, noting the load average before and after.
    pub(crate) fn on_runtime(cells: impl Future<Output = Vec<CellResult<C>>>) -> Self {
        if cfg!(debug_assertions) {
            eprintln!("warning: debug assertions are on; these figures are not for publication");
        }
        let started = Instant::now();
        let load_start = loadavg();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let results = rt.block_on(cells);
        let duration = started.elapsed();
        let load_end = loadavg();
        drop(rt);
        Self {
            results,
            duration,
            load_start,
            load_end,
        }
    }

    /// Prints the run's length and load; `Err` with the exit code when nothing is to be
    /// written: 1 after a failed cell, 0 for a `partial` run (quick, diag, profiling) of the
    /// bench whose page is `page`.
    pub(crate) fn summary(&self, rounds: usize, partial: bool, page: &str) -> Result<(), i32> {
        println!(
            "{rounds} rounds per cell, {:.0} s in all; load average {:.2} at the start, {:.2} at \
             the end",
            self.duration.as_secs_f64(),
            self.load_start[0],
            self.load_end[0]
        );
        if self.results.iter().any(|r| r.failed.is_some()) {
            eprintln!("a cell failed: nothing written");
            return Err(1);
        }
        if partial {
            println!("(quick, diag or partial run: results.json and {page} left unchanged)");
            return Err(0);
        }
        Ok(())
    }

    /// The `run` object of a bench's key in `results.json`, as far as every link bench
    /// shares it (the bench adds its `runtime` and `settings`).
    pub(crate) fn json(&self, command: &str, rounds: usize) -> Value {
        json!({
            "command": command,
            "date": utc_now(),
            "duration_s": (self.duration.as_secs_f64() * 10.0).round() / 10.0,
            "rounds": rounds,
            "warmup_rounds": 1,
            "order": "cell by cell; in each cell one warm-up round per system, then rounds raw, link, bus, raw, link, bus, ...",
            "rounds_rerun": self
                .results
                .iter()
                .flat_map(|r| {
                    r.reruns
                        .iter()
                        .map(move |s| format!("{} {} B: {s}", r.cell.mode(), r.cell.size()))
                })
                .collect::<Vec<_>>(),
            "foreign_cpu_share_max_round": foreign_max(&self.results),
            "load_average_start": self.load_start,
            "load_average_end": self.load_end,
        })
    }
}

/// A goal verdict on the per-round ratios link/`base` (`raw`, or `raw-json`: the raw client
/// doing the same codec work): whether every cell of `results` met `criterion` (given their
/// median, min and max; `null` when no cell measured both), and a line per cell.
pub(crate) fn ratio_goal<'a, C: Cell + 'a>(
    results: impl IntoIterator<Item = &'a CellResult<C>>,
    base: &str,
    criterion: impl Fn((f64, f64, f64)) -> bool,
) -> (Value, String) {
    let (mut met, mut measured) = (true, false);
    let mut lines = String::new();
    for r in results.into_iter().filter(|r| r.failed.is_none()) {
        let (raw, link) = (r.rates(base), r.rates("link"));
        if raw.is_empty() || link.is_empty() {
            continue;
        }
        measured = true;
        let ratio = spread(&r.ratios_to("link", base));
        let ok = criterion(ratio);
        met &= ok;
        let (raw_m, raw_lo, raw_hi) = spread(&raw);
        let _ = writeln!(
            lines,
            "- {} {} B: link/{base} {:.2} [{:.2}–{:.2}]; link median {} vs {base} {} [{}–{}]: {}",
            r.cell.mode(),
            r.cell.size(),
            ratio.0,
            ratio.1,
            ratio.2,
            fmt_rate(median(&link)),
            fmt_rate(raw_m),
            fmt_rate(raw_lo),
            fmt_rate(raw_hi),
            if ok { "met" } else { "NOT met" }
        );
    }
    (if measured { json!(met) } else { Value::Null }, lines)
}

/// The largest share of the machine other processes used in any round.
pub(crate) fn foreign_max<C>(results: &[CellResult<C>]) -> f64 {
    r3(results
        .iter()
        .flat_map(|r| {
            r.systems
                .iter()
                .flat_map(|(_, v)| v.iter().map(|s| s.foreign))
        })
        .fold(0.0, f64::max))
}

/// The rates and ratios table, then the CPU per message of this process and of `server`
/// (`nats-server`, `redis-server`, `rabbitmq-server`).
pub(crate) fn table<C: Cell>(results: &[CellResult<C>], names: &[&str], server: &str) -> String {
    let mut t = String::new();
    let _ = write!(t, "| mode | payload (body on the wire) | messages/round |");
    for n in names {
        let _ = write!(t, " {n} msgs/s |");
    }
    for n in names.iter().filter(|n| **n != "raw") {
        let _ = write!(t, " {n}/raw |");
    }
    let same_work = names.contains(&"raw-json") && names.contains(&"link");
    if same_work {
        let _ = write!(t, " link/raw-json |");
    }
    let _ = writeln!(t);
    let cols = 3 + names.len() * 2 - 1 + usize::from(same_work);
    let _ = writeln!(t, "|{}", "---|".repeat(cols));
    for r in results {
        let _ = write!(
            t,
            "| {} | {} B ({} B) | {} |",
            r.cell.mode(),
            r.cell.size(),
            r.cell.size() + 2,
            r.cell.messages()
        );
        if let Some(why) = &r.failed {
            let _ = writeln!(t, " failed: {why} |");
            continue;
        }
        for n in names {
            let _ = write!(t, " {} |", fmt_spread(spread(&r.rates(n)), fmt_rate));
        }
        for n in names.iter().filter(|n| **n != "raw") {
            let _ = write!(
                t,
                " {} |",
                fmt_spread(spread(&r.ratios(n)), |x| format!("{x:.2}"))
            );
        }
        if same_work {
            let _ = write!(
                t,
                " {} |",
                fmt_spread(spread(&r.ratios_to("link", "raw-json")), |x| format!(
                    "{x:.2}"
                ))
            );
        }
        let _ = writeln!(t);
    }
    let _ = writeln!(
        t,
        "\nCPU per message, µs (median [min–max] of the rounds): this process (publisher, \
         receiver and both clients) / the {server} process.\n"
    );
    let _ = write!(t, "| mode | payload |");
    for n in names {
        let _ = write!(t, " {n} client | {n} server |");
    }
    let _ = writeln!(t);
    let _ = writeln!(t, "|{}", "---|".repeat(2 + names.len() * 2));
    for r in results.iter().filter(|r| r.failed.is_none()) {
        let _ = write!(t, "| {} | {} B |", r.cell.mode(), r.cell.size());
        for n in names {
            let us = |x: f64| format!("{x:.2}");
            let _ = write!(
                t,
                " {} | {} |",
                fmt_spread(spread(&r.cpu_us_per_msg(n, false)), us),
                fmt_spread(spread(&r.cpu_us_per_msg(n, true)), us)
            );
        }
        let _ = writeln!(t);
    }
    t
}

/// Every system's figures of every cell that did not fail.
pub(crate) fn figures_json<C: Cell>(results: &[CellResult<C>]) -> Vec<Value> {
    let mut out = Vec::new();
    for r in results.iter().filter(|r| r.failed.is_none()) {
        for (system, samples) in &r.systems {
            let rates = r.rates(system.name);
            let mut f = json!({
                "mode": r.cell.mode(),
                "payload_bytes": r.cell.size(),
                "body_bytes_on_wire": r.cell.size() + 2,
                "messages_per_round": r.cell.messages(),
                "system": system.name,
                "unit": "messages per second",
                "median": sig3(median(&rates)),
                "min": sig3(min(&rates)),
                "max": sig3(max(&rates)),
                "rounds": rates.iter().map(|x| sig3(*x)).collect::<Vec<_>>(),
                "lost": 0,
                "foreign_cpu_share_max": r3(samples.iter().map(|s| s.foreign).fold(0.0, f64::max)),
                "client_cpu_us_per_msg": triple_json(spread(&r.cpu_us_per_msg(system.name, false)), r3),
                "server_cpu_us_per_msg": triple_json(spread(&r.cpu_us_per_msg(system.name, true)), r3),
            });
            if system.name != "raw" {
                f["ratio_to_raw"] = triple_json(spread(&r.ratios(system.name)), r3);
            }
            if system.name == "link" && !r.rates("raw-json").is_empty() {
                f["ratio_to_raw_json"] = triple_json(spread(&r.ratios_to("link", "raw-json")), r3);
            }
            out.push(f);
        }
    }
    out
}

/// Writes `value` as the `key` key of `docs/benchmarks/results.json` and `table` between the
/// markers of `docs/benchmarks/<key>.md`; false (said on stderr) if either failed.
pub(crate) fn publish(key: &str, value: Value, table: &str) -> bool {
    let docs = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/benchmarks"));
    if let Err(e) = write_results(&docs.join("results.json"), key, value) {
        eprintln!("{e}");
        return false;
    }
    println!("wrote the \"{key}\" key of docs/benchmarks/results.json");
    let page = format!("{key}.md");
    match update_page(&docs.join(&page), &format!("{key}-bench"), table) {
        Ok(true) => println!("updated the table in docs/benchmarks/{page}"),
        Ok(false) => println!("docs/benchmarks/{page} has no table markers: paste the table"),
        Err(e) => {
            eprintln!("{e}");
            return false;
        }
    }
    true
}

/// Replaces the text between the markers `<!-- {marker}:table -->` and
/// `<!-- /{marker}:table -->` of the page at `path`, if it has them.
fn update_page(path: &std::path::Path, marker: &str, table: &str) -> Result<bool, String> {
    let start = format!("<!-- {marker}:table -->");
    let end = format!("<!-- /{marker}:table -->");
    let page = match std::fs::read_to_string(path) {
        Ok(p) => p,
        Err(_) => return Ok(false),
    };
    let (Some(a), Some(b)) = (page.find(&start), page.find(&end)) else {
        return Ok(false);
    };
    if b < a {
        return Ok(false);
    }
    let updated = format!("{}{start}\n{table}{}", &page[..a], &page[b..]);
    std::fs::write(path, updated).or_fail("write the page")?;
    Ok(true)
}

/// Sets the top-level `key` of `results.json`, keeping every other key as it is.
fn write_results(path: &std::path::Path, key: &str, value: Value) -> Result<(), String> {
    let text = std::fs::read_to_string(path).or_fail("read results.json")?;
    let mut results: Value = serde_json::from_str(&text).or_fail("parse results.json")?;
    let Some(map) = results.as_object_mut() else {
        return Err("results.json is not an object".into());
    };
    map.insert(key.into(), value);
    let mut body = serde_json::to_string_pretty(&results).or_fail("serialise")?;
    body.push('\n');
    std::fs::write(path, body).or_fail("write results.json")
}
