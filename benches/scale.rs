//! What topics and subscribers cost, and what a lookup by name costs among a million topics:
//! `just scale`. The figures go into `docs/scale.md` by hand (this bench writes nothing).
//!
//! Memory is counted by a global allocator that keeps the bytes live on the heap (requested
//! sizes, so the allocator's own rounding and the threads' stacks are not in it; the process's
//! resident set is printed beside it for that). Each figure is the growth of the live bytes over
//! a step, divided by what the step made:
//!
//! - a topic with no subscriber, at capacities 16 and 1,024 (`u64` messages), its name included;
//! - a subscriber (its tokio task, its reader, its handler closure), all on one topic and one
//!   per topic;
//! - a million topics in one bus (capacity 16): the live bytes, the resident set, the time to
//!   make them, and the time of a lookup by name (`Bus::topic`, and `Bus::publish` by name to
//!   a topic nobody subscribes to) against the same lookups in a bus of 100 topics. Lookups go
//!   over the names in a scattered order, so a million-topic run misses the caches as a real
//!   one would. Five rounds each; the median with [min–max];
//! - the same lookups in std's `HashMap` of the same names: the floor that memory sets for
//!   any map keyed by name, 100 keys against a million.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ringbus::{Bus, Subscription};

/// The system allocator, keeping a count of the bytes live.
struct Live;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator unchanged; the only addition is a
// counter, which neither allocates nor touches the memory handed out.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Live = Live;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The process's resident set, in bytes (0 where /proc is not there).
fn resident() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("orders.{i}")).collect()
}

/// Bytes per topic with no subscriber, at `capacity`.
fn per_topic(capacity: usize, n: usize) -> f64 {
    let names = names(n);
    let bus = Bus::builder().capacity(capacity).build();
    let before = live();
    for name in &names {
        drop(bus.topic::<u64>(name).expect("topic"));
    }
    (live() - before) as f64 / n as f64
}

/// Bytes per subscriber: `n` on one topic, or one on each of `n` topics (the topics made
/// before the count starts).
fn per_subscriber(n: usize, one_topic: bool) -> f64 {
    let bus = Bus::builder().capacity(16).max_subscribers(n).build();
    let names = names(if one_topic { 1 } else { n });
    for name in &names {
        drop(bus.topic::<u64>(name).expect("topic"));
    }
    let before = live();
    let subs: Vec<Subscription> = (0..n)
        .map(|i| {
            let name = &names[if one_topic { 0 } else { i }];
            bus.subscribe(name, |m: &u64| {
                black_box(*m);
                std::future::ready(())
            })
            .expect("subscribe")
        })
        .collect();
    let bytes = (live() - before) as f64 / n as f64;
    drop(subs);
    bytes
}

/// A scattered visiting order of `0..n` (a multiplicative step prime to `n`).
fn scattered(n: usize) -> impl Iterator<Item = usize> + Clone {
    let step = (0.618_033_988_75 * n as f64) as usize | 1;
    let step = (step..).find(|s| gcd(*s, n) == 1).unwrap_or(1);
    (0..n).map(move |i| (i * step) % n)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Nanoseconds per operation over `count` scattered lookups, five rounds: (median, min, max).
fn time_lookups(names: &[String], count: usize, mut op: impl FnMut(&str)) -> (f64, f64, f64) {
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            for i in scattered(names.len()).cycle().take(count) {
                op(&names[i]);
            }
            started.elapsed().as_nanos() as f64 / count as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    (rounds[2], rounds[0], rounds[4])
}

fn fmt_spread((median, min, max): (f64, f64, f64)) -> String {
    format!("{median:.0} ns [{min:.0}–{max:.0}]")
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches`: nothing to check here, and a million topics is slow
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = runtime.enter();

    println!("scale: memory per topic and per subscriber (live heap bytes, u64 messages)");
    for capacity in [16, 1024] {
        println!(
            "  topic, no subscriber, capacity {capacity:>5}: {:>8.0} B",
            per_topic(capacity, 100_000)
        );
    }
    for (n, one_topic) in [(10_000, true), (10_000, false)] {
        let place = if one_topic {
            "all on one topic"
        } else {
            "one per topic"
        };
        println!(
            "  subscriber ({n} of them, {place}): {:>8.0} B",
            per_subscriber(n, one_topic)
        );
    }

    println!("scale: a million topics in one bus (capacity 16)");
    let many = names(1_000_000);
    let few = names(100);
    let (rss_before, live_before) = (resident(), live());
    let started = Instant::now();
    let big = Bus::builder().capacity(16).build();
    for name in &many {
        drop(big.topic::<u64>(name).expect("topic"));
    }
    let made = started.elapsed();
    println!(
        "  made in {:.2} s ({:.0} ns per topic); live heap +{:.0} MiB ({:.0} B per topic); resident set +{:.0} MiB",
        made.as_secs_f64(),
        made.as_nanos() as f64 / many.len() as f64,
        (live() - live_before) as f64 / (1 << 20) as f64,
        (live() - live_before) as f64 / many.len() as f64,
        (resident().saturating_sub(rss_before)) as f64 / (1 << 20) as f64,
    );
    let small = Bus::builder().capacity(16).build();
    for name in &few {
        drop(small.topic::<u64>(name).expect("topic"));
    }
    const LOOKUPS: usize = 2_000_000;
    for (label, bus, names) in [("100 topics", &small, &few), ("1M topics", &big, &many)] {
        let topic = time_lookups(names, LOOKUPS, |name| {
            black_box(bus.topic::<u64>(name).expect("topic"));
        });
        let publish = runtime.block_on(async {
            let mut times = Vec::new();
            for _ in 0..5 {
                let started = Instant::now();
                for i in scattered(names.len()).cycle().take(LOOKUPS) {
                    bus.publish(&names[i], i as u64).await.expect("publish");
                }
                times.push(started.elapsed().as_nanos() as f64 / LOOKUPS as f64);
            }
            times.sort_by(f64::total_cmp);
            (times[2], times[0], times[4])
        });
        println!(
            "  {label:>10}: Bus::topic by name {}, Bus::publish by name (no subscriber) {}",
            fmt_spread(topic),
            fmt_spread(publish)
        );
    }
    drop((big, small));

    // Short-lived topics: a bus built with `removable_topics`, a million topics made (by a
    // publish each, as a service makes a topic per entity) and then removed.
    println!("scale: a million topics made and removed on a removable bus (capacity 16)");
    let live_before = live();
    let removable = Bus::builder().capacity(16).removable_topics().build();
    let live_empty = live();
    let started = Instant::now();
    for (i, name) in many.iter().enumerate() {
        removable.try_publish(name, i as u64).expect("publish");
    }
    let made = started.elapsed();
    let live_full = live();
    let started = Instant::now();
    for name in &many {
        removable.remove(name).expect("remove");
    }
    let removed = started.elapsed();
    println!(
        "  made in {:.2} s ({:.0} ns per topic), live heap +{:.0} MiB; removed in {:.2} s ({:.0} ns per topic); live heap after: {:+} B against the empty bus's",
        made.as_secs_f64(),
        made.as_nanos() as f64 / many.len() as f64,
        (live_full - live_empty) as f64 / (1 << 20) as f64,
        removed.as_secs_f64(),
        removed.as_nanos() as f64 / many.len() as f64,
        live() as i64 - live_empty as i64,
    );
    println!(
        "  the empty removable bus itself: {} B",
        live_empty - live_before
    );

    // The floor any map keyed by name sits on: std's HashMap (SipHash) from the same names to
    // a boxed value (as a registry holds a topic: the lookup reads the key's bytes and the
    // value's first line), the same scattered order, among 100 and among a million.
    println!("scale: the same lookups in std's HashMap<&str, Box<[u64; 8]>> (a floor, not a peer)");
    for (label, names) in [("100 keys", &few), ("1M keys", &many)] {
        let map: std::collections::HashMap<&str, Box<[u64; 8]>> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), Box::new([i as u64; 8])))
            .collect();
        let lookup = time_lookups(names, LOOKUPS, |name| {
            black_box(map.get(name).map(|v| v[0]));
        });
        println!("  {label:>10}: HashMap::get {}", fmt_spread(lookup));
    }
}
