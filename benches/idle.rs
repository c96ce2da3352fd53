//! What 1,000 parked readers cost while nothing is published.
//!
//! Two rounds: 1,000 async tasks on a tokio runtime blocked in `Reader::recv().await`, then
//! 1,000 OS threads blocked in `Reader::blocking_recv`. Each round lets the readers settle
//! (spin out and park), then measures the process's CPU time over one idle second, then
//! publishes one item and checks that every reader woke and received it.
//!
//! CPU time is read from procfs with std alone: `utime + stime` of `/proc/self/stat` (whole
//! process, in clock ticks; 100 Hz on Linux, so 10 ms resolution) and, for nanosecond
//! resolution, the sum of the first field of `/proc/self/task/*/schedstat` over every thread
//! except the measuring one (its own reads of those files would be counted otherwise). The
//! voluntary and involuntary context switches of those threads are summed the same way: a
//! truly parked reader makes none.
//!
//! `cargo bench -p ringbus-bench --bench idle` runs the full measurement; without `--bench` (as under
//! `cargo test -p ringbus-bench --benches`) it runs a quick smoke version with 50 readers.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use ringbus_core::Builder;

/// Clock ticks per second of `/proc/self/stat` (`sysconf(_SC_CLK_TCK)`; 100 on Linux).
const CLK_TCK: u64 = 100;

/// A snapshot of the CPU use of every thread but the calling one.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    /// Nanoseconds on CPU, summed over every thread but the measuring one.
    others_ns: u64,
    /// Context switches (voluntary + involuntary) of every thread but the measuring one.
    others_switches: u64,
    /// Threads in the process.
    threads: usize,
}

/// Fields 14 and 15 (utime, stime) of `/proc/self/stat`; the command name in field 2 may hold
/// spaces, so fields are counted from the closing parenthesis.
fn process_ticks() -> u64 {
    let stat = fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12.
    let utime: u64 = fields[11].parse().expect("utime");
    let stime: u64 = fields[12].parse().expect("stime");
    utime + stime
}

/// The kernel's id of the calling thread (`/proc/thread-self` links to `<pid>/task/<tid>`).
fn current_tid() -> String {
    let link = fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .expect("tid")
        .to_string_lossy()
        .into_owned()
}

fn usage() -> Usage {
    let me = current_tid();
    let mut u = Usage::default();
    for entry in fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let entry = entry.expect("task entry");
        u.threads += 1;
        if entry.file_name().to_string_lossy() == me {
            continue;
        }
        let dir = entry.path();
        // A thread may exit between the listing and the read: skip it.
        if let Ok(s) = fs::read_to_string(dir.join("schedstat")) {
            let ns: u64 = s
                .split_whitespace()
                .next()
                .and_then(|f| f.parse().ok())
                .unwrap_or(0);
            u.others_ns += ns;
        }
        if let Ok(s) = fs::read_to_string(dir.join("status")) {
            for line in s.lines() {
                if let Some(v) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    u.others_switches += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    u
}

/// Settles, then measures `idle` of doing nothing; prints and returns the CPU used.
fn measure_idle(label: &str, settle: Duration, idle: Duration) -> (Duration, Duration, u64) {
    thread::sleep(settle);
    // The thread snapshots bracket the process-tick reads, which bracket the sleep alone: the
    // cost of reading a thousand procfs files is in neither window.
    let before = usage();
    let ticks_before = process_ticks();
    let t = Instant::now();
    thread::sleep(idle);
    let wall = t.elapsed();
    let ticks_after = process_ticks();
    let after = usage();
    let process = Duration::from_millis((ticks_after - ticks_before) * 1000 / CLK_TCK);
    let others = Duration::from_nanos(after.others_ns.saturating_sub(before.others_ns));
    let switches = after.others_switches.saturating_sub(before.others_switches);
    println!(
        "{label}: idle {wall:.3?} with {threads} threads: process CPU (utime+stime) {process:?} \
         (resolution {res} ms); all other threads on CPU {others:?}; their context switches \
         {switches} (their totals since they started: {total:?} on CPU, {total_switches} switches)",
        threads = after.threads,
        total = Duration::from_nanos(after.others_ns),
        total_switches = after.others_switches,
        res = 1000 / CLK_TCK,
    );
    (process, others, switches)
}

fn tasks_round(readers: usize, settle: Duration, idle: Duration) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime");
    let (mut writer, stage) = Builder::new(1024).build::<u64>();
    let handles: Vec<_> = (0..readers)
        .map(|_| {
            let mut r = stage.reader().expect("join");
            rt.spawn(async move { *r.recv().await.expect("one item") })
        })
        .collect();
    measure_idle(
        &format!("{readers} tasks parked in recv().await"),
        settle,
        idle,
    );
    let t = Instant::now();
    writer.blocking_publish(42);
    let got: Vec<u64> = rt.block_on(async {
        let mut got = Vec::with_capacity(handles.len());
        for h in handles {
            got.push(h.await.expect("reader task"));
        }
        got
    });
    let woke = t.elapsed();
    assert_eq!(got.len(), readers);
    assert!(got.iter().all(|&v| v == 42), "a reader got the wrong item");
    println!("  published one item: all {readers} tasks woke and received it in {woke:.3?}");
}

fn threads_round(readers: usize, settle: Duration, idle: Duration) {
    let (mut writer, stage) = Builder::new(1024).build::<u64>();
    let handles: Vec<_> = (0..readers)
        .map(|i| {
            let mut r = stage.reader().expect("join");
            thread::Builder::new()
                .name(format!("idle-reader-{i}"))
                .stack_size(64 * 1024)
                .spawn(move || *r.blocking_recv().expect("one item"))
                .expect("spawn reader thread")
        })
        .collect();
    measure_idle(
        &format!("{readers} threads parked in blocking_recv()"),
        settle,
        idle,
    );
    let t = Instant::now();
    writer.blocking_publish(42);
    let got: Vec<u64> = handles
        .into_iter()
        .map(|h| h.join().expect("reader thread"))
        .collect();
    let woke = t.elapsed();
    assert_eq!(got.len(), readers);
    assert!(got.iter().all(|&v| v == 42), "a reader got the wrong item");
    println!("  published one item: all {readers} threads woke and received it in {woke:.3?}");
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (readers, settle, idle) = if full {
        (1000, Duration::from_millis(500), Duration::from_secs(1))
    } else {
        (50, Duration::from_millis(20), Duration::from_millis(100))
    };
    println!(
        "idle: {readers} readers, CLK_TCK assumed {CLK_TCK}, spin before parking {}",
        Builder::DEFAULT_SPIN
    );
    // Baseline: the same measurement with no readers at all.
    measure_idle("baseline (no readers)", settle, idle);
    tasks_round(readers, settle, idle);
    threads_round(readers, settle, idle);
}
