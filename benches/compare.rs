//! The side-by-side comparison runner: every scenario of the suite's benchmark rules for
//! `ringbus` and each peer, in interleaved rounds, with results published as
//! `docs/benchmarks/results.json`, the page `docs/benchmarks/README.md` rendered from it, and the
//! README's headline table.
//!
//! ```text
//! just bench                 full run (under 10 min on 2 cores): writes docs/benchmarks/
//! just bench quick           5 rounds, fewer messages (under 3 min): writes target/tmp/compare-quick/
//! just bench render          redraws docs/benchmarks/README.md, *.svg and the README's headline
//!                            table from results.json
//! just bench publish/10 ...  only the scenarios whose name contains one of the words
//!                            (written to target/tmp/compare-partial/)
//! Run without `--bench` (as `cargo test --benches` does), it makes one tiny round of every
//! scenario, checked as usual, and writes to target/tmp/compare-smoke/.
//!
//! options: --rounds N, --target-ms N (timed window per round), --system NAME (only that
//! system; repeatable), --out DIR, --list
//! ```
//!
//! Systems: `ringbus`, `tokio-broadcast`, `async-broadcast`, `tokio-mpsc-fanout`,
//! `kanal-fanout`, `kanal-fanout-budget` (kanal spending tokio's budget as ringbus must),
//! `flume-fanout`, and `disruptor` for the ring scenarios. The bus scenarios
//! are in `compare/bus.rs`, the ring ones in `compare/ring.rs`, their systems' wiring (shared
//! with the criterion benches `bus.rs` and `ring.rs`) in `common/bus_peers.rs` and
//! `common/ring_peers.rs`, the JSON and the page in `compare/report.rs`, the counting
//! allocator (the runs' timed `Window`) in `compare/alloc.rs`, the statistics and the
//! machine's description (shared with `nats.rs` and `redis.rs`) in `common/mod.rs`.
//!
//! First every scenario warms every system up, which also sizes its rounds: the system runs
//! with 8x more operations each time until one run lasts an eighth of the target window
//! (400 ms in a full run, 50 ms in a quick one), and its round size is then fixed so that a
//! round lasts about the target. Then the rounds, round-major: each round runs every
//! scenario, and within a scenario every system once in a fixed order (A B C ... A B C ...),
//! timing the publishing side, then checking every delivery untimed (see the module docs of
//! `bus` and `ring`). So each scenario's rounds are spread over the whole run.
//!
//! Build flags: the recipe clears `RUSTFLAGS`; the run records what it saw.

use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "compare/alloc.rs"]
mod alloc;
#[path = "compare/bus.rs"]
mod bus;
#[path = "common/bus_peers.rs"]
mod bus_peers;
#[path = "common/mod.rs"]
mod common;
#[path = "compare/report.rs"]
mod report;
#[path = "compare/ring.rs"]
mod ring;
#[path = "common/ring_peers.rs"]
mod ring_peers;
#[path = "common/stopwatch.rs"]
mod stopwatch;

use common::median;
use report::{fmt_ns, Figure};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Queue capacity of every system unless a scenario says otherwise.
pub(crate) const CAP: usize = 1024;

/// What one run of one system measured.
pub(crate) struct Outcome {
    /// The timed window: the publishing side.
    pub(crate) elapsed: Duration,
    /// Operations in the window (publish calls, items, or subscribe + unsubscribe pairs).
    pub(crate) ops: u64,
    /// Allocations on any thread during the window.
    pub(crate) allocations: u64,
    /// Deliveries a lossy system reported lost.
    pub(crate) lost: u64,
    /// Deliveries due (messages times the subscribers each reaches).
    pub(crate) deliveries: u64,
    /// Tasks one subscription keeps alive, measured (the subscribe scenarios only).
    pub(crate) tasks: Option<u64>,
}

impl Outcome {
    /// What `ops` operations timed in a window measured; `lost` of `deliveries` due were lost.
    pub(crate) fn new(timed: alloc::Timed, ops: u64, lost: u64, deliveries: u64) -> Self {
        Self {
            elapsed: timed.elapsed,
            ops,
            allocations: timed.allocations,
            lost,
            deliveries,
            tasks: None,
        }
    }

    /// With the tasks one subscription keeps alive.
    pub(crate) fn tasks(self, tasks: u64) -> Self {
        Self {
            tasks: Some(tasks),
            ..self
        }
    }
}

/// One system of a scenario: a name and a run of `n` messages.
pub(crate) struct Case<'a> {
    system: &'static str,
    run: Box<dyn FnMut(u64) -> Outcome + 'a>,
}

impl<'a> Case<'a> {
    pub(crate) fn new(system: &'static str, run: impl FnMut(u64) -> Outcome + 'a) -> Self {
        Self {
            system,
            run: Box::new(run),
        }
    }
}

/// A scenario and its systems.
pub(crate) struct Scenario<'a> {
    pub(crate) name: String,
    pub(crate) family: &'static str,
    /// What one operation is ("publish", "item", ...).
    pub(crate) unit: &'static str,
    /// The smallest number of operations a round may have (the calibration starts there).
    pub(crate) min_ops: u64,
    pub(crate) cases: Vec<Case<'a>>,
}

/// Rounds and target window (ms) of a full run: about 8.5 minutes on 2 cores.
const FULL: (usize, u64) = (9, 400);
/// The same for `quick`: about 35 seconds.
const QUICK: (usize, u64) = (5, 50);

/// The most operations one round may have.
const MAX_OPS: u64 = 1 << 30;

/// A round size near `ops` (two significant digits, at least `min`).
fn round_size(ops: f64, min: u64) -> u64 {
    let ops = ops.clamp(min as f64, MAX_OPS as f64) as u64;
    let scale = 10u64.pow((ops.max(1).ilog10()).saturating_sub(1));
    (ops / scale * scale).max(min)
}

struct Options {
    quick: bool,
    /// Run as a test (`cargo test --benches`, no `--bench`): one tiny round, nothing published.
    smoke: bool,
    /// How long a system's timed window should last in a round.
    target: Duration,
    render: bool,
    list: bool,
    rounds: usize,
    filters: Vec<String>,
    /// Only these systems (for profiling one of them).
    systems: Vec<String>,
    out: Option<PathBuf>,
}

fn options() -> Options {
    let mut o = Options {
        quick: false,
        smoke: !std::env::args().any(|a| a == "--bench"),
        target: Duration::ZERO,
        render: false,
        list: false,
        rounds: 0,
        filters: Vec::new(),
        systems: Vec::new(),
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "quick" => o.quick = true,
            "render" => o.render = true,
            "--list" | "list" => o.list = true,
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds N")
            }
            "--target-ms" => {
                o.target = Duration::from_millis(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--target-ms N"),
                )
            }
            "--system" => o.systems.push(args.next().expect("--system NAME")),
            "--out" => o.out = Some(args.next().expect("--out DIR").into()),
            // cargo bench passes `--bench`; other harness flags mean nothing here.
            a if a.starts_with('-') => {}
            a => o.filters.push(a.to_string()),
        }
    }
    if o.smoke {
        o.quick = true;
        o.rounds = 1;
        o.target = Duration::from_millis(1);
    }
    if o.rounds == 0 {
        o.rounds = if o.quick { QUICK.0 } else { FULL.0 };
    }
    if o.target.is_zero() {
        o.target = Duration::from_millis(if o.quick { QUICK.1 } else { FULL.1 });
    }
    assert!(o.rounds >= 1, "--rounds must be at least 1");
    o
}

fn docs_dir() -> PathBuf {
    // This package lives in benches/; the published figures in the workspace's docs/.
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/benchmarks")).to_path_buf()
}

/// Where a run writes: the published directory only for a full, unfiltered run.
fn out_dir(o: &Options) -> PathBuf {
    if let Some(out) = &o.out {
        return out.clone();
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    if o.smoke {
        tmp.join("compare-smoke")
    } else if !o.filters.is_empty() || !o.systems.is_empty() {
        tmp.join("compare-partial")
    } else if o.quick {
        tmp.join("compare-quick")
    } else {
        docs_dir()
    }
}

/// The progress line: rewritten in place on a terminal, one line per round of a scenario
/// otherwise.
struct Progress {
    tty: bool,
    start: Instant,
    scenarios: usize,
}

impl Progress {
    fn prefix(&self, round: &str, k: usize, name: &str) -> String {
        let s = self.start.elapsed().as_secs();
        format!(
            "[{round} {}/{} {:2}:{:02}] {name}:",
            k + 1,
            self.scenarios,
            s / 60,
            s % 60
        )
    }

    fn scenario_start(&self, round: &str, k: usize, name: &str) {
        if !self.tty {
            eprint!("{}", self.prefix(round, k, name));
        }
    }

    fn system(&self, round: &str, k: usize, name: &str, system: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{} {system}", self.prefix(round, k, name));
        } else {
            let _ = write!(err, " {system}");
        }
        let _ = err.flush();
    }

    fn scenario_end(&self) {
        if !self.tty {
            eprintln!();
        }
    }

    fn clear(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Prints a scenario's figures as they are done.
fn print_scenario(figures: &[Figure]) {
    let Some(first) = figures.first() else { return };
    let ringbus = figures.iter().find(|f| f.system == "ringbus");
    println!(
        "{} ({} per round, ns per {}):",
        first.scenario, first.messages, first.unit
    );
    for f in figures {
        let ratio = match ringbus {
            Some(r) if r.system != f.system => {
                let q = report::ratios(&f.rounds_ns, &r.rounds_ns);
                let lo = q.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = q.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{:6.2}x [{lo:.2}, {hi:.2}]", median(&q))
            }
            _ => format!("{:>6}", "1"),
        };
        let lost = if f.lost > 0 {
            format!(
                "  lost {:.1}%",
                100.0 * f.lost as f64 / f.deliveries.max(1) as f64
            )
        } else {
            String::new()
        };
        let tasks = f
            .tasks
            .map_or(String::new(), |t| format!("  tasks/subscription {t}"));
        let lo = f.rounds_ns.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = f.rounds_ns.iter().copied().fold(0.0, f64::max);
        println!(
            "  {:18} {:>10} [{:>10} - {:>10}]  peer/ringbus {ratio}  allocs/op {:.3}{lost}{tasks}",
            f.system,
            fmt_ns(median(&f.rounds_ns)),
            fmt_ns(lo),
            fmt_ns(hi),
            median(&f.allocs_per_op)
        );
    }
}

/// Runs the scenarios; returns the figures and the run's facts.
///
/// Round-major: first every scenario warms up and sizes its rounds, then each round runs
/// every scenario, and within a scenario every system once (A B C ...). A scenario's rounds
/// are so spread over the whole run: a state of the machine that lasts minutes (this VM has
/// some) shows as spread between rounds instead of shifting one scenario as a whole.
fn measure(o: &Options, scenarios: &mut [Scenario<'_>]) -> (Vec<Figure>, Value) {
    let progress = Progress {
        tty: std::io::stderr().is_terminal(),
        start: Instant::now(),
        scenarios: scenarios.len(),
    };
    let load_start = common::loadavg();
    let cpu_start = common::CpuTicks::now();
    let mut load_max = load_start[0];
    // Warm-up and calibration: each system runs with 8x more operations until one run lasts
    // an eighth of the target; its round size is then fixed for every round.
    let mut figures: Vec<Vec<Figure>> = Vec::with_capacity(scenarios.len());
    for (k, sc) in scenarios.iter_mut().enumerate() {
        progress.scenario_start("warm-up", k, &sc.name);
        let mut done = Vec::with_capacity(sc.cases.len());
        for case in &mut sc.cases {
            progress.system("warm-up", k, &sc.name, case.system);
            let mut n = sc.min_ops;
            let per_op = loop {
                let out = (case.run)(n);
                if out.elapsed >= o.target / 8 || n >= MAX_OPS {
                    break out.elapsed.as_nanos() as f64 / n as f64;
                }
                n = (n * 8).min(MAX_OPS);
            };
            done.push(Figure {
                scenario: sc.name.clone(),
                family: sc.family,
                unit: sc.unit,
                system: case.system,
                messages: round_size(o.target.as_nanos() as f64 / per_op.max(0.01), sc.min_ops),
                rounds_ns: Vec::new(),
                allocs_per_op: Vec::new(),
                lost: 0,
                deliveries: 0,
                tasks: None,
            });
        }
        progress.scenario_end();
        figures.push(done);
    }
    let mut foreign_per_round = Vec::with_capacity(o.rounds);
    for round in 0..o.rounds {
        let label = format!("round {}/{}", round + 1, o.rounds);
        let cpu_round = common::CpuTicks::now();
        for (k, (sc, done)) in scenarios.iter_mut().zip(&mut figures).enumerate() {
            progress.scenario_start(&label, k, &sc.name);
            for (case, fig) in sc.cases.iter_mut().zip(done.iter_mut()) {
                progress.system(&label, k, &sc.name, case.system);
                let n = fig.messages;
                let out = (case.run)(n);
                assert_eq!(
                    out.ops, n,
                    "{}: ran {} of {n} operations",
                    case.system, out.ops
                );
                fig.rounds_ns
                    .push(out.elapsed.as_nanos() as f64 / out.ops as f64);
                fig.allocs_per_op
                    .push(out.allocations as f64 / out.ops as f64);
                fig.lost += out.lost;
                fig.deliveries += out.deliveries;
                if let Some(t) = out.tasks {
                    fig.tasks = Some(fig.tasks.map_or(t, |f: u64| f.max(t)));
                }
            }
            progress.scenario_end();
            load_max = load_max.max(common::loadavg()[0]);
        }
        let (foreign, _) = cpu_round.foreign_since(&common::CpuTicks::now(), 0);
        foreign_per_round.push((foreign * 1000.0).round() / 1000.0);
    }
    progress.clear();
    for done in &figures {
        print_scenario(done);
    }
    let (foreign, steal) = cpu_start.foreign_since(&common::CpuTicks::now(), 0);
    let command = std::iter::once("just bench".to_string())
        .chain(std::env::args().skip(1).filter(|a| a != "--bench"))
        .collect::<Vec<_>>()
        .join(" ");
    let run = json!({
        "command": command,
        "mode": if o.quick { "quick" } else { "full" },
        "order": "round-major: every scenario warms up first; then each round runs every \
                  scenario, each scenario every system once",
        "rounds": o.rounds,
        "target_window_ms": o.target.as_millis() as u64,
        "duration_s": progress.start.elapsed().as_secs_f64().round(),
        "load_average_start": load_start,
        "load_average_end": common::loadavg(),
        "load_average_1m_max": load_max,
        "foreign_cpu_share": (foreign * 1000.0).round() / 1000.0,
        "foreign_cpu_share_per_round": foreign_per_round,
        "steal_cpu_share": (steal * 1000.0).round() / 1000.0,
    });
    (figures.into_iter().flatten().collect(), run)
}

/// `docs/benchmarks/latency.json`, if `just latency` has written it.
fn latency() -> Value {
    let path = docs_dir().join("latency.json");
    match std::fs::read_to_string(&path) {
        Ok(s) => serde_json::from_str(&s).unwrap_or_else(|e| {
            eprintln!("ignoring {}: {e}", path.display());
            Value::Null
        }),
        Err(_) => Value::Null,
    }
}

/// Puts the current `latency.json` (if there is one) into `dir/results.json`.
fn fold_latency(dir: &Path) -> std::io::Result<()> {
    let lat = latency();
    if lat.is_null() {
        return Ok(());
    }
    let path = dir.join("results.json");
    let mut results: Value =
        serde_json::from_str(&std::fs::read_to_string(&path)?).map_err(std::io::Error::other)?;
    if results["latency"] != lat {
        results["latency"] = lat;
        let mut body = serde_json::to_string_pretty(&results).map_err(std::io::Error::other)?;
        body.push('\n');
        std::fs::write(&path, body)?;
    }
    Ok(())
}

/// The crates whose versions `results.json` records.
const CRATES: &[&str] = &[
    "ringbus",
    "ringbus-core",
    "tokio",
    "async-broadcast",
    "kanal",
    "flume",
    "disruptor",
    "crossbeam-utils",
    "plotters",
];

fn write_results(dir: &Path, figures: &[Figure], run: Value) -> std::io::Result<PathBuf> {
    let objects: Vec<Value> = figures
        .iter()
        .map(|f| {
            let ringbus = figures
                .iter()
                .find(|r| r.scenario == f.scenario && r.system == "ringbus");
            report::figure_json(f, ringbus)
        })
        .collect();
    let path = dir.join("results.json");
    // The "nats", "redis" and "rabbitmq" keys are `benches/nats.rs`'s, `benches/redis.rs`'s and
    // `benches/rabbitmq.rs`'s (`just nats-bench`, `just redis-bench`, `just rabbitmq-bench`):
    // kept from the file replaced.
    let mut old = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .unwrap_or(Value::Null);
    let mut results = json!({
        "about": "ringbus beside its peers: every figure is the time per operation on the \
                  publishing side (median, min and max of the interleaved rounds, \
                  rounds_ns in run order); ratio_to_ringbus = peer / ringbus per round. \
                  Written by benches/compare.rs; README.md is rendered from this file.",
        "machine": common::machine(CRATES),
        "run": run,
        "figures": objects,
        "latency": latency(),
    });
    for key in ["nats", "redis", "rabbitmq"] {
        let kept = old[key].take();
        if !kept.is_null() {
            results[key] = kept;
        }
    }
    std::fs::create_dir_all(dir)?;
    let mut body = serde_json::to_string_pretty(&results).map_err(std::io::Error::other)?;
    body.push('\n');
    std::fs::write(&path, body)?;
    Ok(path)
}

fn main() {
    let o = options();
    let dir = out_dir(&o);
    if o.render {
        let dir = o.out.clone().unwrap_or_else(docs_dir);
        fold_latency(&dir).expect("fold latency.json into results.json");
        report::render(&dir).unwrap_or_else(|e| panic!("render {}: {e}", dir.display()));
        println!("rendered {}", dir.join("README.md").display());
        return;
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: debug assertions are on; these figures are not for publication");
    }
    let bus_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // For 32 and 128 ring readers: one worker, one core for all the readers.
    let reader_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("ring-readers")
        .build()
        .expect("tokio runtime");
    let mut scenarios = bus::scenarios(&bus_rt);
    scenarios.extend(ring::scenarios(&reader_rt));
    if !o.filters.is_empty() {
        // A filter that names a scenario exactly selects it alone; otherwise it is a substring.
        let names: Vec<String> = scenarios.iter().map(|s| s.name.clone()).collect();
        scenarios.retain(|s| {
            o.filters.iter().any(|f| {
                if names.contains(f) {
                    s.name == *f
                } else {
                    s.name.contains(f.as_str())
                }
            })
        });
        assert!(!scenarios.is_empty(), "no scenario matches {:?}", o.filters);
    }
    if !o.systems.is_empty() {
        for s in &mut scenarios {
            s.cases.retain(|c| o.systems.iter().any(|n| n == c.system));
        }
        scenarios.retain(|s| !s.cases.is_empty());
        assert!(!scenarios.is_empty(), "no system matches {:?}", o.systems);
    }
    if o.list {
        for s in &scenarios {
            let systems: Vec<_> = s.cases.iter().map(|c| c.system).collect();
            println!("{:28} {}", s.name, systems.join(" "));
        }
        return;
    }
    println!(
        "{} scenarios, {} rounds each ({} run){}",
        scenarios.len(),
        o.rounds,
        if o.smoke {
            "smoke: run without --bench"
        } else if o.quick {
            "quick"
        } else {
            "full"
        },
        match std::env::var("RUSTFLAGS") {
            Ok(v) if !v.is_empty() => format!("; warning: RUSTFLAGS={v}"),
            _ => String::new(),
        }
    );
    let (figures, run) = measure(&o, &mut scenarios);
    drop(scenarios);
    let path = write_results(&dir, &figures, run).expect("write results.json");
    report::render(&dir).expect("render the page");
    println!(
        "wrote {} and {}",
        path.display(),
        dir.join("README.md").display()
    );
}
