//! The cost gate: instructions and allocations per message on the hot paths, counted under
//! `valgrind --tool=callgrind` so the figures repeat exactly, and held against the baseline
//! committed in `docs/benchmarks/cost.json`.
//!
//! ```text
//! ringbus-cost probe <scenario> <messages>   run one scenario (what callgrind measures)
//! ringbus-cost gate [--update]               measure every scenario; compare or rewrite the baseline
//! ringbus-cost list                          the scenarios
//! ```
//!
//! Per-message cost is the slope between two message counts (`N` and `2N`), so start-up
//! (runtime, allocation of the ring, spawning) drops out. Everything runs on one thread (a
//! current-thread tokio runtime for the bus), so the instruction counts do not depend on
//! scheduling. The gate fails when a scenario's instructions per message rise more than 10 %
//! over the baseline, or its allocations per message rise at all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};

use ringbus::ring::Builder;
use ringbus::Bus;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Counts allocations, so the probe can report allocations per message.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SCENARIOS: &[(&str, &str)] = &[
    ("ring/publish", "ring try_publish, no reader"),
    (
        "ring/publish_read",
        "ring try_publish then try_recv, one reader",
    ),
    (
        "ring/batch64",
        "ring publish_batch of 64 then recv_batch, one reader (per item)",
    ),
    (
        "bus/publish1",
        "bus Topic::publish with 1 subscriber, delivery included",
    ),
    (
        "bus/publish10",
        "bus Topic::publish with 10 subscribers, deliveries included",
    ),
    (
        "bus/publish_by_name1",
        "bus Bus::publish by name with 1 subscriber, delivery included",
    ),
    (
        "bus/publish_by_name1_removable",
        "bus/publish_by_name1 on a bus built with removable_topics (a reading per lookup)",
    ),
    (
        "bus/publish_by_name1_patterns",
        "bus/publish_by_name1 while 100 patterns that match other topics are subscribed",
    ),
    (
        "bus/publish1_not_interested",
        "bus/publish1 under a tracing subscriber that wants DEBUG, but not the bus's spans",
    ),
    (
        "bus/publish1_traced",
        "bus/publish1 under a tracing subscriber (the registry) that records every span",
    ),
    (
        "bus/subscribe",
        "bus subscribe then unsubscribe (per pair) on a topic with 4 subscribers",
    ),
    (
        "bus/publish_unbuffered1",
        "bus/publish1 on an unbuffered topic (capacity 0): each publish waits for the handler",
    ),
    (
        "bus/publish_by_name_idle",
        "bus Bus::publish by name to a topic nobody subscribes to (no ring: counted, dropped)",
    ),
];

/// Messages for the first count; the second is twice as many.
const N: u64 = 20_000;
/// Instructions may rise this much (relative) before the gate fails. The gate catches
/// regressions; it is not meant to choose the code's shape, so small moves pass.
const TOLERANCE: f64 = 0.10;
/// The baseline, as the messages name it (relative to the workspace root).
const BASELINE: &str = "docs/benchmarks/cost.json";
/// The baseline's file, wherever the gate is run from.
const BASELINE_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/benchmarks/cost.json");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["probe", scenario, n] => match n.parse() {
            Ok(n) => probe(scenario, n),
            Err(_) => usage(),
        },
        ["gate"] => gate(false),
        ["gate", "--update"] => gate(true),
        ["list"] => {
            for (name, what) in SCENARIOS {
                println!("{name:<22} {what}");
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: ringbus-cost probe <scenario> <messages> | gate [--update] | list");
    ExitCode::from(2)
}

/// Runs one scenario for `n` messages and prints the allocations made while it ran.
fn probe(scenario: &str, n: u64) -> ExitCode {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let checked = match scenario {
        "ring/publish" => ring_publish(n),
        "ring/publish_read" => ring_publish_read(n),
        "ring/batch64" => ring_batch(n),
        "bus/publish1" => bus_publish(n, 1, Route::Handle, 0, 1024),
        "bus/publish10" => bus_publish(n, 10, Route::Handle, 0, 1024),
        "bus/publish_by_name1" => bus_publish(n, 1, Route::Name, 0, 1024),
        "bus/publish_by_name1_removable" => bus_publish(n, 1, Route::NameRemovable, 0, 1024),
        "bus/publish_by_name1_patterns" => bus_publish(n, 1, Route::Name, 100, 1024),
        "bus/publish_unbuffered1" => bus_publish(n, 1, Route::Handle, 0, 0),
        "bus/publish_by_name_idle" => bus_publish(n, 0, Route::Name, 0, 1024),
        "bus/subscribe" => bus_subscribe(n),
        "bus/publish1_not_interested" => {
            // Interested in DEBUG (the maximum level lets the bus's check pass), not in the
            // crate's callsites: answered from tracing's cached interest.
            let filter = Targets::new()
                .with_default(LevelFilter::DEBUG)
                .with_target("ringbus", LevelFilter::OFF);
            let _default = tracing_subscriber::registry().with(filter).set_default();
            bus_publish(n, 1, Route::Handle, 0, 1024)
        }
        "bus/publish1_traced" => {
            // The registry alone: every span made, entered, exited and closed, none printed
            // (what any layer built on the registry pays before its own work).
            let _default = tracing_subscriber::registry().set_default();
            bus_publish(n, 1, Route::Handle, 0, 1024)
        }
        _ => {
            eprintln!("unknown scenario {scenario}; see `ringbus-cost list`");
            return ExitCode::from(2);
        }
    };
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    if !checked {
        eprintln!("{scenario}: the messages did not all arrive");
        return ExitCode::FAILURE;
    }
    println!("allocations {allocations}");
    ExitCode::SUCCESS
}

fn ring_publish(n: u64) -> bool {
    let (mut writer, _stage) = Builder::new(1024).build::<u64>();
    for i in 0..n {
        if writer.try_publish(std::hint::black_box(i)).is_err() {
            return false;
        }
    }
    writer.published() == n
}

fn ring_publish_read(n: u64) -> bool {
    let (mut writer, stage) = Builder::new(1024).build::<u64>();
    let Ok(mut reader) = stage.reader() else {
        return false;
    };
    let mut sum = 0;
    for i in 0..n {
        if writer.try_publish(i).is_err() {
            return false;
        }
        match reader.try_recv() {
            Ok(item) => sum += *item,
            Err(_) => return false,
        }
    }
    sum == n * (n - 1) / 2
}

fn ring_batch(n: u64) -> bool {
    let (mut writer, stage) = Builder::new(1024).build::<u64>();
    let Ok(mut reader) = stage.reader() else {
        return false;
    };
    let (mut sum, mut next) = (0, 0);
    while next < n {
        let end = n.min(next + 64);
        next += writer.try_publish_batch(&mut (next..end));
        while let Ok(batch) = reader.try_recv_batch(64) {
            sum += batch.iter().sum::<u64>();
        }
    }
    sum == n * (n - 1) / 2
}

/// How `bus_publish` publishes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Through a `Topic` handle.
    Handle,
    /// By name.
    Name,
    /// By name, on a bus built with `removable_topics`.
    NameRemovable,
}

/// `n` publishes to a topic with `subscribers` one-message subscribers, while `patterns`
/// pattern subscriptions match other topics (each has one, made first); `capacity` 0 makes
/// the topic unbuffered.
fn bus_publish(n: u64, subscribers: u64, route: Route, patterns: usize, capacity: usize) -> bool {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return false;
    };
    runtime.block_on(async {
        let builder = Bus::builder().capacity(capacity);
        let bus = if route == Route::NameRemovable {
            builder.removable_topics().build()
        } else {
            builder.build()
        };
        let handled = std::sync::Arc::new(AtomicU64::new(0));
        let mut subs = Vec::new();
        for p in 0..patterns {
            if bus.topic::<u64>(&format!("other.{p}.x")).is_err() {
                return false;
            }
            match bus.subscribe_pattern(&format!("other.{p}.*"), |_: &str, _: &u64| {
                std::future::ready(())
            }) {
                Ok(sub) => subs.push(sub),
                Err(_) => return false,
            }
        }
        for _ in 0..subscribers {
            let handled = handled.clone();
            let sub = bus.subscribe("cost", move |m: &u64| {
                handled.fetch_add(*m & 1 | 1, Ordering::Relaxed);
                std::future::ready(())
            });
            match sub {
                Ok(sub) => subs.push(sub),
                Err(_) => return false,
            }
        }
        let Ok(topic) = bus.topic::<u64>("cost") else {
            return false;
        };
        for i in 0..n {
            let sent = if route == Route::Handle {
                topic.publish(i).await
            } else {
                bus.publish("cost", i).await
            };
            if sent.is_err() {
                return false;
            }
        }
        bus.close().await;
        handled.load(Ordering::Relaxed) == n * subscribers
    })
}

/// `n` subscribe + unsubscribe pairs on a topic that has 4 other subscribers: the handler
/// task spawned, joined to the ring, stopped and ended each time.
fn bus_subscribe(n: u64) -> bool {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return false;
    };
    runtime.block_on(async {
        let bus = Bus::builder().capacity(1024).build();
        let mut others = Vec::new();
        for _ in 0..4 {
            match bus.subscribe("cost", |_: &u64| std::future::ready(())) {
                Ok(sub) => others.push(sub),
                Err(_) => return false,
            }
        }
        for _ in 0..n {
            match bus.subscribe("cost", |_: &u64| std::future::ready(())) {
                Ok(sub) => sub.unsubscribe().await,
                Err(_) => return false,
            }
        }
        let left = bus.topic::<u64>("cost").map(|t| t.subscriber_count());
        bus.close().await;
        left == Ok(4)
    })
}

/// One scenario's measured cost per message.
#[derive(Debug, Clone, Copy)]
struct Cost {
    instructions: f64,
    allocations: f64,
}

/// Instructions (callgrind's total `Ir`) and allocations of one probe run.
fn measure(exe: &str, scenario: &str, n: u64) -> Result<(u64, u64), String> {
    let out_file = std::env::temp_dir().join(format!(
        "ringbus-cost-{}-{}.out",
        scenario.replace('/', "_"),
        n
    ));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .args([exe, "probe", scenario, &n.to_string()])
        .env("RINGBUS_NO_MEMBARRIER", "1") // the same fence path on every kernel
        .output()
        .map_err(|e| {
            format!("could not run valgrind ({e}); install it (apt-get install valgrind)")
        })?;
    if !output.status.success() {
        return Err(format!(
            "{scenario}: probe failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let allocations = stdout
        .lines()
        .find_map(|l| l.strip_prefix("allocations "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("{scenario}: the probe printed no allocation count"))?;
    let profile = std::fs::read_to_string(&out_file)
        .map_err(|e| format!("{scenario}: no callgrind output: {e}"))?;
    let _ = std::fs::remove_file(&out_file);
    let instructions = profile
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary: ")
                .or_else(|| l.strip_prefix("totals: "))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{scenario}: no instruction total in the callgrind output"))?;
    Ok((instructions, allocations))
}

fn cost(exe: &str, scenario: &str) -> Result<Cost, String> {
    let (i1, a1) = measure(exe, scenario, N)?;
    let (i2, a2) = measure(exe, scenario, 2 * N)?;
    Ok(Cost {
        instructions: (i2 as f64 - i1 as f64) / N as f64,
        allocations: (a2 as f64 - a1 as f64) / N as f64,
    })
}

fn gate(update: bool) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(p) => p.display().to_string(),
        Err(e) => {
            eprintln!("cannot find this program's path: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut measured = Vec::new();
    for (scenario, _) in SCENARIOS {
        match cost(&exe, scenario) {
            Ok(c) => measured.push((*scenario, c)),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if update {
        let body = measured
            .iter()
            .map(|(s, c)| {
                format!(
                    "  \"{s}\": {{\"instructions_per_msg\": {:.2}, \"allocs_per_msg\": {:.4}}}",
                    c.instructions, c.allocations
                )
            })
            .collect::<Vec<_>>()
            .join(",\n");
        if let Err(e) = std::fs::write(BASELINE_FILE, format!("{{\n{body}\n}}\n")) {
            eprintln!("cannot write {BASELINE}: {e}");
            return ExitCode::FAILURE;
        }
        for (s, c) in &measured {
            println!(
                "{s:<22} {:>10.2} instructions/msg {:>8.4} allocs/msg",
                c.instructions, c.allocations
            );
        }
        println!("baseline written to {BASELINE}");
        return ExitCode::SUCCESS;
    }
    let baseline = match std::fs::read_to_string(BASELINE_FILE) {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "cannot read the baseline {BASELINE}: {e}; create it with `just cost-update`"
            );
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    println!(
        "{:<22} {:>12} {:>12} {:>8} {:>10}",
        "scenario", "instr/msg", "baseline", "change", "allocs/msg"
    );
    for (scenario, c) in &measured {
        let Some(base) = baseline_of(&baseline, scenario) else {
            println!(
                "{scenario:<22} {:>12.2} {:>12} (new: add it with `just cost-update`)",
                c.instructions, "-"
            );
            failed = true;
            continue;
        };
        let change = c.instructions / base.instructions - 1.0;
        let mut verdict = "ok";
        if change > TOLERANCE {
            verdict = "SLOWER";
            failed = true;
        }
        if c.allocations > base.allocations + 1e-9 {
            verdict = "ALLOCATES";
            failed = true;
        }
        println!(
            "{scenario:<22} {:>12.2} {:>12.2} {:>+7.2}% {:>10.4}  {verdict}",
            c.instructions,
            base.instructions,
            change * 100.0,
            c.allocations
        );
    }
    if failed {
        eprintln!(
            "\nThe hot path got more expensive than the baseline in {BASELINE} allows \
             (instructions +{:.0}%, or any new allocation).\nIf the rise is intended, \
             record the new costs with `just cost-update` (or \
             `cargo run --release -p ringbus-bench --bin ringbus-cost -- gate --update`) and commit the file, \
             saying why in the commit message.",
            TOLERANCE * 100.0
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The baseline entry of `scenario` in the JSON written by `gate --update`.
fn baseline_of(json: &str, scenario: &str) -> Option<Cost> {
    let start = json.find(&format!("\"{scenario}\""))?;
    let rest = &json[start..];
    let rest = &rest[..rest.find('}')?];
    let number = |key: &str| -> Option<f64> {
        let at = rest.find(&format!("\"{key}\""))? + key.len() + 2;
        let value = rest[at..].trim_start_matches([':', ' ']);
        let end = value.find([',', '}', ' ']).unwrap_or(value.len());
        value[..end].trim().parse().ok()
    };
    Some(Cost {
        instructions: number("instructions_per_msg")?,
        allocations: number("allocs_per_msg")?,
    })
}
