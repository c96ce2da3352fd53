//! The ring (`ringbus-core`) against what a user would pick instead, side by side in one run.
//!
//! Scenarios (see `/work/shared/BENCHMARKS.md`): `publish`, `publish_readers/{1,8,32,128}`,
//! `publish_batch/{1,10,100,1000}`, `reserve_fill`, `read_batch`, `stages/{1,2,3}`. Each is a
//! criterion group holding the ring and the peers for which the scenario makes sense:
//!
//! - `ringbus`: the ring with its defaults, written from a plain thread: `blocking_publish`,
//!   `blocking_publish_batch`, `blocking_reserve`; readers use `blocking_recv_batch` (or
//!   `recv_batch().await` as tasks). Variants beside it: `ringbus_async` (`publish().await` in
//!   a loop driven by `ringbus_core::block_on`), `ringbus_try` (`try_publish` /
//!   `try_publish_batch`, spinning while full, as the disruptor's producer does) and
//!   `ringbus_spin1k` (the defaults but `Builder::spin(1024)`).
//! - `disruptor`: the `disruptor` crate, single producer, `BusySpin`, one handler thread per
//!   consumer (the crate manages them).
//! - `tokio_broadcast`: `tokio::sync::broadcast`, lossy: a receiver that falls a lap behind
//!   loses messages (`RecvError::Lagged`); the losses are counted and printed after each
//!   benchmark, and every run checks `received + lost == published`.
//! - `async_broadcast`: `async-broadcast` with overflow off (its default), i.e. backpressure.
//! - `tokio_mpsc`: one bounded `tokio::sync::mpsc` channel per reader, the writer sending each
//!   item to every channel (the fan-out of Go-style buses).
//!
//! # Method
//!
//! Every queue holds 1024 items of `u64`. The writer is the benchmark thread; it publishes the
//! values `0..iters` and the clock stops when the last one is handed over (the *writer's* cost
//! per item). A backpressured writer can never be more than a ring ahead of its slowest reader,
//! so for lossless systems this is also the sustained throughput of the whole pipeline. After
//! the clock stops the writer is dropped (closing the queue), every reader drains and reports
//! its count and sum, and the run asserts that each reader saw every item exactly once (or,
//! for the lossy peer, that what it saw plus what it was told it lost adds up). A fresh set of
//! readers is made for every criterion sample, outside the timed region.
//!
//! `read_batch` measures the reader instead, on one thread: the writer fills the queue (untimed)
//! and the reader drains it (timed), lap after lap, so only the receive path is measured.
//!
//! Criterion's "iteration" is one item everywhere (batches of `n` count as `n` iterations), so
//! the reported time is the per-item time and `Throughput::Elements(1)` gives items/s.
//!
//! # Readers on a 2-core machine
//!
//! Keep-up readers for 1 and 8 readers are OS threads. The ring's readers spin briefly
//! (`Builder::DEFAULT_SPIN` polls) and then park (`blocking_recv_batch`); the peers' blocking
//! receives park at once, as they offer no spin. Disruptor handlers busy-spin, as the brief
//! asks: that is the crate's design (one core per consumer), so with 8 consumers on 2 cores its
//! figure measures oversubscription as much as the disruptor.
//!
//! For 32 and 128 readers, 33 or 129 runnable threads on 2 cores would measure the kernel
//! scheduler rather than the queues, so every system's readers become async tasks on one
//! tokio runtime with a single worker thread (one core for the writer, one for all readers).
//! Every peer here has an async receive, so the comparison stays like for like. The disruptor
//! has no async consumer and 32 busy-spinning handler threads on 2 cores cannot keep up in any
//! useful sense, so it is left out of those two sizes.
//!
//! Build flags: run with `RUSTFLAGS` cleared (never `-C target-cpu=native`), e.g.
//! `RUSTFLAGS= cargo bench -p ringbus-bench --bench ring`.

use std::cell::Cell;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use ringbus_core::{Builder, Writer};
use tokio::runtime::Runtime;

#[path = "common/ring_peers.rs"]
mod ring_peers;
#[path = "common/stopwatch.rs"]
mod stopwatch;

use ring_peers::{laps, DisruptorOp, Mode, Run, Tally, TokioMpsc};

/// Queue capacity of every system (the suite's default).
const CAP: usize = 1024;

/// Items per reservation in `reserve_fill`.
const RESERVE: usize = 100;

/// The spin of the `ringbus_spin1k` variants: long enough, on the 2-core VM these figures
/// come from, for a waiting side to see the other side's progress before it parks (the
/// default, `Builder::DEFAULT_SPIN`, is 32). Shown beside the default, never instead of it.
const TUNED_SPIN: u32 = 1024;

// ---------------------------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------------------------

/// Asserts that every reader got every one of `0..n` exactly once.
fn check_lossless(system: &str, tallies: &[Tally], n: u64) {
    for (i, t) in tallies.iter().enumerate() {
        assert_eq!(
            t.count, n,
            "{system}: reader {i} got {} of {n} items",
            t.count
        );
        assert_eq!(
            t.sum,
            ring_peers::sum_below(n),
            "{system}: reader {i} got wrong items"
        );
        assert_eq!(t.lost, 0, "{system}: reader {i} lost items");
    }
}

/// A run of the wiring in `common/ring_peers.rs`, checked with [`check_lossless`]; returns
/// the writer's time.
fn lossless(system: &str, n: u64, (elapsed, tallies): Run<Instant>) -> Duration {
    check_lossless(system, &tallies, n);
    elapsed
}

/// Asserts that every reader got or was told it lost each item; adds the losses to `losses`.
fn check_lossy(system: &str, tallies: &[Tally], n: u64, losses: &Losses) {
    for (i, t) in tallies.iter().enumerate() {
        assert_eq!(
            t.count + t.lost,
            n,
            "{system}: reader {i}: received {} + lost {} != published {n}",
            t.count,
            t.lost
        );
        losses.add(t.lost, n);
    }
}

/// Losses of a lossy peer over all the samples of one benchmark.
#[derive(Default)]
struct Losses {
    lost: Cell<u64>,
    delivered_or_lost: Cell<u64>,
}

impl Losses {
    fn add(&self, lost: u64, of: u64) {
        self.lost.set(self.lost.get() + lost);
        self.delivered_or_lost
            .set(self.delivered_or_lost.get() + of);
    }

    fn report(&self, id: &str) {
        let (lost, of) = (self.lost.get(), self.delivered_or_lost.get());
        if of == 0 {
            return; // filtered out of this run
        }
        let pct = 100.0 * lost as f64 / of as f64;
        eprintln!("LOSSES {id}: {lost} of {of} reader-deliveries lost to Lagged ({pct:.2}%)");
    }
}

/// A small runtime for the 32/128-reader cases: one worker, one core for the readers.
fn reader_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-readers")
        .build()
        .expect("tokio runtime")
}

// ---------------------------------------------------------------------------------------------
// ringbus
// ---------------------------------------------------------------------------------------------

/// How the ring's writer publishes.
#[derive(Clone, Copy)]
enum RingOp {
    /// `blocking_publish`, one item at a time (a plain-thread writer).
    Blocking,
    /// `publish(..).await` in a loop, the whole loop driven by `ringbus_core::block_on`.
    Async,
    /// `try_publish`, spinning while `Full`.
    Try,
    /// `blocking_publish_batch` of `n` items at a time.
    Batch(usize),
    /// `try_publish_batch` of `n` items at a time, spinning while nothing fits.
    TryBatch(usize),
    /// `blocking_reserve(n)`, fill both segments in place, `commit`.
    Reserve(usize),
}

fn ring_write(w: &mut Writer<u64>, iters: u64, op: RingOp) {
    match op {
        RingOp::Blocking => ring_peers::write_single(w, iters),
        RingOp::Async => ringbus_core::block_on(async {
            for i in 0..iters {
                w.publish(i).await;
            }
        }),
        RingOp::Try => {
            for i in 0..iters {
                let mut v = i;
                while let Err(full) = w.try_publish(v) {
                    v = full.into_inner();
                    std::hint::spin_loop();
                }
            }
        }
        RingOp::Batch(n) => ring_peers::write_batch(w, iters, n),
        RingOp::TryBatch(n) => {
            let mut base = 0;
            while base < iters {
                let mut items = base..(base + n as u64).min(iters);
                while items.start < items.end {
                    if w.try_publish_batch(&mut items) == 0 {
                        std::hint::spin_loop();
                    }
                }
                base = items.end;
            }
        }
        RingOp::Reserve(n) => ring_peers::write_reserve(w, iters, n),
    }
}

/// One run of the ring with `readers` first-stage readers; returns the writer's time.
fn ring_run(iters: u64, readers: usize, mode: Mode<'_>, op: RingOp) -> Duration {
    ring_run_spin(iters, readers, mode, op, Builder::DEFAULT_SPIN)
}

/// [`ring_run`] with `spin` polls before the writer or a reader parks.
fn ring_run_spin(iters: u64, readers: usize, mode: Mode<'_>, op: RingOp, spin: u32) -> Duration {
    let run =
        ring_peers::ring_run::<Instant>(iters, readers, mode, spin, |w, n| ring_write(w, n, op));
    lossless("ringbus", iters, run)
}

/// A pipeline of `stages` chained stages (`Stage::then`), one reader thread each.
fn ring_stages(iters: u64, stages: usize) -> Duration {
    lossless(
        "ringbus",
        iters,
        ring_peers::ring_stages::<Instant>(iters, stages),
    )
}

// ---------------------------------------------------------------------------------------------
// The peers (wired in `common/ring_peers.rs`)
// ---------------------------------------------------------------------------------------------

/// `consumers` independent disruptor handlers (one thread each).
fn disruptor_run(iters: u64, consumers: usize, op: DisruptorOp) -> Duration {
    let run = ring_peers::disruptor_run::<Instant>(iters, consumers, op);
    lossless("disruptor", iters, run)
}

/// A pipeline of `stages` disruptor handlers chained with `and_then`.
fn disruptor_stages(iters: u64, stages: usize) -> Duration {
    let run = ring_peers::disruptor_stages::<Instant>(iters, stages);
    lossless("disruptor", iters, run)
}

/// `tokio::sync::broadcast` (lossy): the losses are added to `losses`.
fn tokio_broadcast_run(iters: u64, readers: usize, mode: Mode<'_>, losses: &Losses) -> Duration {
    let (elapsed, tallies) = ring_peers::tokio_broadcast_run::<Instant>(iters, readers, mode);
    check_lossy("tokio_broadcast", &tallies, iters, losses);
    elapsed
}

/// `async-broadcast` (overflow off: backpressure).
fn async_broadcast_run(iters: u64, readers: usize, mode: Mode<'_>) -> Duration {
    let run = ring_peers::async_broadcast_run::<Instant>(iters, readers, mode);
    lossless("async_broadcast", iters, run)
}

/// One `tokio::sync::mpsc` per reader.
fn tokio_mpsc_run(iters: u64, readers: usize, mode: Mode<'_>) -> Duration {
    let run = ring_peers::fanout_run::<Instant, TokioMpsc>(iters, readers, mode);
    lossless("tokio_mpsc", iters, run)
}

/// A pipeline of `stages` threads linked by mpsc channels, each forwarding to the next.
fn tokio_mpsc_stages(iters: u64, stages: usize) -> Duration {
    let run = ring_peers::channel_stages::<Instant, TokioMpsc>(iters, stages);
    lossless("tokio_mpsc", iters, run)
}

// ---------------------------------------------------------------------------------------------
// read_batch: the reader's own cost, single-threaded (see `ring_peers::laps`)
// ---------------------------------------------------------------------------------------------

fn read_ring(iters: u64, batch: bool) -> Duration {
    let run = ring_peers::read_batch_ring::<Instant>(iters, batch);
    lossless("ringbus", iters, run)
}

fn read_disruptor(iters: u64) -> Duration {
    let run = ring_peers::read_batch_disruptor::<Instant>(iters);
    lossless("disruptor", iters, run)
}

fn read_tokio_broadcast(iters: u64) -> Duration {
    let run = ring_peers::read_batch_tokio_broadcast::<Instant>(iters);
    lossless("tokio_broadcast", iters, run)
}

fn read_async_broadcast(iters: u64) -> Duration {
    let run = ring_peers::read_batch_async_broadcast::<Instant>(iters);
    lossless("async_broadcast", iters, run)
}

/// tokio's mpsc through `blocking_recv_many`.
fn read_tokio_mpsc(iters: u64) -> Duration {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(CAP);
    let mut t = Tally::default();
    let mut buf = Vec::with_capacity(CAP);
    let elapsed = laps::<Instant>(
        iters,
        |a, b| {
            for i in a..b {
                tx.try_send(i).expect("room");
            }
        },
        |n| {
            let mut got = 0;
            while got < n {
                got += rx.blocking_recv_many(&mut buf, CAP) as u64;
                for v in buf.drain(..) {
                    t.add(v);
                }
            }
            got
        },
    );
    check_lossless("tokio_mpsc", &[t], iters);
    elapsed
}

// ---------------------------------------------------------------------------------------------
// The criterion groups
// ---------------------------------------------------------------------------------------------

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2500))
        .sample_size(20)
}

/// A group with the suite's settings: per-item throughput, flat sampling (each sample runs
/// the same number of items, which suits benchmarks that set up threads per sample).
fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Flat);
    g
}

fn bench_publish(c: &mut Criterion) {
    let mut g = group(c, "publish");
    let mode = Mode::Threads;
    g.bench_function("ringbus", |b| {
        b.iter_custom(|n| ring_run(n, 1, mode, RingOp::Blocking))
    });
    g.bench_function("ringbus_async", |b| {
        b.iter_custom(|n| ring_run(n, 1, mode, RingOp::Async))
    });
    g.bench_function("ringbus_try", |b| {
        b.iter_custom(|n| ring_run(n, 1, mode, RingOp::Try))
    });
    g.bench_function("ringbus_spin1k", |b| {
        b.iter_custom(|n| ring_run_spin(n, 1, mode, RingOp::Blocking, TUNED_SPIN))
    });
    g.bench_function("disruptor", |b| {
        b.iter_custom(|n| disruptor_run(n, 1, DisruptorOp::Single))
    });
    let losses = Losses::default();
    g.bench_function("tokio_broadcast", |b| {
        b.iter_custom(|n| tokio_broadcast_run(n, 1, mode, &losses))
    });
    losses.report("publish/tokio_broadcast");
    g.bench_function("async_broadcast", |b| {
        b.iter_custom(|n| async_broadcast_run(n, 1, mode))
    });
    g.bench_function("tokio_mpsc", |b| {
        b.iter_custom(|n| tokio_mpsc_run(n, 1, mode))
    });
    g.finish();
}

fn bench_publish_readers(c: &mut Criterion) {
    let rt = reader_runtime();
    let mut g = group(c, "publish_readers");
    for readers in [1usize, 8, 32, 128] {
        let mode = Mode::for_readers(readers, &rt);
        g.bench_with_input(BenchmarkId::new("ringbus", readers), &readers, |b, &r| {
            b.iter_custom(|n| ring_run(n, r, mode, RingOp::Blocking))
        });
        if readers <= 8 {
            g.bench_with_input(BenchmarkId::new("disruptor", readers), &readers, |b, &r| {
                b.iter_custom(|n| disruptor_run(n, r, DisruptorOp::Single))
            });
        }
        let losses = Losses::default();
        g.bench_with_input(
            BenchmarkId::new("tokio_broadcast", readers),
            &readers,
            |b, &r| b.iter_custom(|n| tokio_broadcast_run(n, r, mode, &losses)),
        );
        losses.report(&format!("publish_readers/tokio_broadcast/{readers}"));
        g.bench_with_input(
            BenchmarkId::new("async_broadcast", readers),
            &readers,
            |b, &r| b.iter_custom(|n| async_broadcast_run(n, r, mode)),
        );
        g.bench_with_input(
            BenchmarkId::new("tokio_mpsc", readers),
            &readers,
            |b, &r| b.iter_custom(|n| tokio_mpsc_run(n, r, mode)),
        );
    }
    g.finish();
}

fn bench_publish_batch(c: &mut Criterion) {
    let mut g = group(c, "publish_batch");
    let mode = Mode::Threads;
    for batch in [1usize, 10, 100, 1000] {
        g.bench_with_input(BenchmarkId::new("ringbus", batch), &batch, |b, &k| {
            b.iter_custom(|n| ring_run(n, 1, mode, RingOp::Batch(k)))
        });
        g.bench_with_input(BenchmarkId::new("ringbus_try", batch), &batch, |b, &k| {
            b.iter_custom(|n| ring_run(n, 1, mode, RingOp::TryBatch(k)))
        });
        g.bench_with_input(
            BenchmarkId::new("ringbus_spin1k", batch),
            &batch,
            |b, &k| b.iter_custom(|n| ring_run_spin(n, 1, mode, RingOp::Batch(k), TUNED_SPIN)),
        );
        g.bench_with_input(BenchmarkId::new("disruptor", batch), &batch, |b, &k| {
            b.iter_custom(|n| disruptor_run(n, 1, DisruptorOp::Batch(k)))
        });
        // The peers have no batch publish: they send one by one whatever the batch size.
        let losses = Losses::default();
        g.bench_with_input(
            BenchmarkId::new("tokio_broadcast", batch),
            &batch,
            |b, _| b.iter_custom(|n| tokio_broadcast_run(n, 1, mode, &losses)),
        );
        losses.report(&format!("publish_batch/tokio_broadcast/{batch}"));
        g.bench_with_input(
            BenchmarkId::new("async_broadcast", batch),
            &batch,
            |b, _| b.iter_custom(|n| async_broadcast_run(n, 1, mode)),
        );
        g.bench_with_input(BenchmarkId::new("tokio_mpsc", batch), &batch, |b, _| {
            b.iter_custom(|n| tokio_mpsc_run(n, 1, mode))
        });
    }
    g.finish();
}

fn bench_reserve_fill(c: &mut Criterion) {
    let mut g = group(c, "reserve_fill");
    g.bench_function("ringbus", |b| {
        b.iter_custom(|n| ring_run(n, 1, Mode::Threads, RingOp::Reserve(RESERVE)))
    });
    g.bench_function("ringbus_spin1k", |b| {
        b.iter_custom(|n| ring_run_spin(n, 1, Mode::Threads, RingOp::Reserve(RESERVE), TUNED_SPIN))
    });
    g.bench_function("disruptor", |b| {
        b.iter_custom(|n| disruptor_run(n, 1, DisruptorOp::Batch(RESERVE)))
    });
    g.finish();
}

fn bench_read_batch(c: &mut Criterion) {
    let mut g = group(c, "read_batch");
    g.bench_function("ringbus", |b| b.iter_custom(|n| read_ring(n, true)));
    g.bench_function("ringbus_recv", |b| b.iter_custom(|n| read_ring(n, false)));
    g.bench_function("disruptor", |b| b.iter_custom(read_disruptor));
    g.bench_function("tokio_broadcast", |b| b.iter_custom(read_tokio_broadcast));
    g.bench_function("async_broadcast", |b| b.iter_custom(read_async_broadcast));
    g.bench_function("tokio_mpsc", |b| b.iter_custom(read_tokio_mpsc));
    g.finish();
}

fn bench_stages(c: &mut Criterion) {
    let mut g = group(c, "stages");
    for stages in [1usize, 2, 3] {
        g.bench_with_input(BenchmarkId::new("ringbus", stages), &stages, |b, &s| {
            b.iter_custom(|n| ring_stages(n, s))
        });
        g.bench_with_input(BenchmarkId::new("disruptor", stages), &stages, |b, &s| {
            b.iter_custom(|n| disruptor_stages(n, s))
        });
        g.bench_with_input(BenchmarkId::new("tokio_mpsc", stages), &stages, |b, &s| {
            b.iter_custom(|n| tokio_mpsc_stages(n, s))
        });
    }
    g.finish();
}

criterion_group! {
    name = ring;
    config = config();
    targets = bench_publish, bench_publish_readers, bench_publish_batch, bench_reserve_fill,
        bench_read_batch, bench_stages
}
// ---------------------------------------------------------------------------------------------
// Interleaved rounds for the headline ratios
// ---------------------------------------------------------------------------------------------
//
// Criterion runs one benchmark after the other, so on a shared machine a burst of foreign load
// (or the host moving a vCPU) can land on one side of a comparison only. The suite's rule for
// headline figures is a ratio measured in rounds interleaved A B A B ..., median of at least
// five rounds with min and max. After the criterion groups (full runs only: `--bench`, no
// filter; `RING_ROUNDS=0` turns it off, `RING_ROUNDS=n` sets the rounds) this runs the
// configurations the targets compare, in that fashion, and prints per-item times and the
// per-round ratios.

/// One configuration of the rounds: a name, items per run, and the run.
struct RoundCfg<'a> {
    name: &'static str,
    items: u64,
    run: Box<dyn Fn(u64) -> Duration + 'a>,
}

/// The ratios printed after the rounds: (label, numerator, denominator).
const ROUND_RATIOS: &[(&str, &str, &str)] = &[
    (
        "publish: ringbus / disruptor",
        "publish/ringbus",
        "publish/disruptor",
    ),
    (
        "publish: ringbus_async / disruptor",
        "publish/ringbus_async",
        "publish/disruptor",
    ),
    (
        "publish: ringbus_try / disruptor",
        "publish/ringbus_try",
        "publish/disruptor",
    ),
    (
        "publish: tokio_broadcast / ringbus",
        "publish/tokio_broadcast",
        "publish/ringbus",
    ),
    (
        "publish: tokio_broadcast / ringbus_async",
        "publish/tokio_broadcast",
        "publish/ringbus_async",
    ),
    (
        "batch 10 / single (ringbus)",
        "publish_batch/ringbus/10",
        "publish/ringbus",
    ),
    (
        "batch 100 / single (ringbus)",
        "publish_batch/ringbus/100",
        "publish/ringbus",
    ),
    (
        "batch 1000 / single (ringbus)",
        "publish_batch/ringbus/1000",
        "publish/ringbus",
    ),
    (
        "8 readers / 1 reader (ringbus)",
        "publish_readers/ringbus/8",
        "publish/ringbus",
    ),
    (
        "128 readers / 1 reader (ringbus)",
        "publish_readers/ringbus/128",
        "publish/ringbus",
    ),
];

fn cfg<'a>(name: &'static str, items: u64, run: impl Fn(u64) -> Duration + 'a) -> RoundCfg<'a> {
    RoundCfg {
        name,
        items,
        run: Box::new(run),
    }
}

fn round_configs(rt: &Runtime) -> Vec<RoundCfg<'_>> {
    let threads = Mode::Threads;
    let tasks = Mode::Tasks(rt);
    vec![
        cfg("publish/ringbus", 4_000_000, move |n| {
            ring_run(n, 1, threads, RingOp::Blocking)
        }),
        cfg("publish/ringbus_async", 4_000_000, move |n| {
            ring_run(n, 1, threads, RingOp::Async)
        }),
        cfg("publish/ringbus_try", 4_000_000, move |n| {
            ring_run(n, 1, threads, RingOp::Try)
        }),
        cfg("publish/disruptor", 4_000_000, |n| {
            disruptor_run(n, 1, DisruptorOp::Single)
        }),
        cfg("publish/tokio_broadcast", 2_000_000, move |n| {
            tokio_broadcast_run(n, 1, threads, &Losses::default())
        }),
        cfg("publish_batch/ringbus/10", 4_000_000, move |n| {
            ring_run(n, 1, threads, RingOp::Batch(10))
        }),
        cfg("publish_batch/ringbus/100", 4_000_000, move |n| {
            ring_run(n, 1, threads, RingOp::Batch(100))
        }),
        cfg("publish_batch/ringbus/1000", 4_000_000, move |n| {
            ring_run(n, 1, threads, RingOp::Batch(1000))
        }),
        cfg("publish_readers/ringbus/8", 1_000_000, move |n| {
            ring_run(n, 8, threads, RingOp::Blocking)
        }),
        cfg("publish_readers/ringbus/128", 300_000, move |n| {
            ring_run(n, 128, tasks, RingOp::Blocking)
        }),
    ]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn interleaved_rounds(rounds: usize) {
    let rt = reader_runtime();
    let configs = round_configs(&rt);
    // One untimed round first: thread stacks, page faults, the runtime's first tasks.
    for c in &configs {
        (c.run)(c.items / 10);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for _ in 0..rounds {
        for (c, out) in configs.iter().zip(&mut ns) {
            out.push((c.run)(c.items).as_nanos() as f64 / c.items as f64);
        }
    }
    println!("\nINTERLEAVED {rounds} rounds (A B C ... A B C ...), ns per item:");
    println!(
        "ROUND {:32} {:>9} {:>9} {:>9}",
        "config", "median", "min", "max"
    );
    for (c, v) in configs.iter().zip(&ns) {
        let mut v = v.clone();
        let min = v.iter().copied().fold(f64::MAX, f64::min);
        let max = v.iter().copied().fold(f64::MIN, f64::max);
        println!(
            "ROUND {:32} {:9.2} {:9.2} {:9.2}",
            c.name,
            median(&mut v),
            min,
            max
        );
    }
    println!("per-round ratios (each round's two figures divided), median [min, max]:");
    let index = |name: &str| configs.iter().position(|c| c.name == name).expect("config");
    for &(label, num, den) in ROUND_RATIOS {
        let (a, b) = (&ns[index(num)], &ns[index(den)]);
        let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
        let (min, max) = r
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        println!(
            "RATIO {label:42} {:7.2} [{min:.2}, {max:.2}]",
            median(&mut r)
        );
    }
}

/// How many interleaved rounds this invocation runs (0: none).
fn rounds_requested() -> usize {
    match std::env::var("RING_ROUNDS") {
        Ok(v) => v.parse().unwrap_or(0),
        Err(_) => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            let bench = args.iter().any(|a| a == "--bench");
            let filtered = args.iter().any(|a| !a.starts_with('-'));
            if bench && !filtered {
                7
            } else {
                0
            }
        }
    }
}

fn main() {
    ring();
    Criterion::default().configure_from_args().final_summary();
    let rounds = rounds_requested();
    if rounds > 0 {
        interleaved_rounds(rounds);
    }
}
