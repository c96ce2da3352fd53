//! The topic registry: how the bus finds a topic by name on every `publish(name, ..)`.
//!
//! The issue asked for the faster of `dashmap` and a fixed set of shard locks; the bus keeps
//! neither: its map (`crates/ringbus/src/map.rs`) looks topics up with no lock and, on a bus
//! that never removes topics (the default), no shared counter. This bench holds it against
//! both alternatives, wired as the bus would need them (a lookup that hands back something
//! the publish can keep across an `.await`: a clone of the topic's `Arc` for the locked maps,
//! a plain reference for the grow-only map), over 100 topics, from one thread and from two.
//! `ringbus-removable` is the map of a bus built with `removable_topics`: its lookup adds to
//! and subtracts from a counter of its shard, and hands back a value valid while it reads
//! (the bus clones the topic's `Arc` only when a publish has to wait).
//!
//! `RUSTFLAGS= cargo bench -p ringbus-bench --bench registry`

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::hint::black_box;
use std::sync::{Arc, Barrier, RwLock};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dashmap::DashMap;
use ringbus::__bench::TopicMap;

const TOPICS: usize = 100;
const SHARDS: usize = 64;

fn names() -> Vec<String> {
    (0..TOPICS).map(|i| format!("orders.region-{i}")).collect()
}

/// A fixed set of shard locks over std maps, as the Go bus does (64 topic locks).
struct Sharded {
    shards: Vec<RwLock<HashMap<Box<str>, Arc<u64>>>>,
    hasher: BuildHasherDefault<DefaultHasher>,
}

impl Sharded {
    fn new(names: &[String]) -> Self {
        let s = Self {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            hasher: BuildHasherDefault::default(),
        };
        for (i, n) in names.iter().enumerate() {
            let shard = &s.shards[s.hasher.hash_one(n) as usize % SHARDS];
            shard
                .write()
                .unwrap()
                .insert(n.as_str().into(), Arc::new(i as u64));
        }
        s
    }

    fn get(&self, name: &str) -> Option<Arc<u64>> {
        let shard = &self.shards[self.hasher.hash_one(name) as usize % SHARDS];
        shard.read().ok()?.get(name).cloned()
    }
}

/// Looks up every name `rounds` times on `threads` threads at once; time per lookup.
fn parallel(threads: usize, iters: u64, lookup: impl Fn(&str) -> u64 + Sync) -> Duration {
    let names = names();
    let per_thread = iters.div_ceil(threads as u64);
    let start = Barrier::new(threads);
    let elapsed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (names, start, lookup) = (&names, &start, &lookup);
                s.spawn(move || {
                    start.wait();
                    let begin = Instant::now();
                    let mut sum = 0;
                    for i in 0..per_thread {
                        sum += lookup(&names[(i as usize + t * 37) % TOPICS]);
                    }
                    black_box(sum);
                    begin.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("lookup thread"))
            .max()
            .unwrap_or_default()
    });
    // Per lookup across all threads: the registry's throughput.
    elapsed / threads as u32
}

fn bench(c: &mut Criterion) {
    let names = names();
    let grow_only = TopicMap::new(SHARDS);
    let removable = TopicMap::new_removable(SHARDS);
    let dash: DashMap<Box<str>, Arc<u64>> = DashMap::new();
    let sharded = Sharded::new(&names);
    for (i, n) in names.iter().enumerate() {
        grow_only.get_or_insert_with(n, || Arc::new(i as u64));
        removable.insert(n, || Arc::new(i as u64));
        dash.insert(n.as_str().into(), Arc::new(i as u64));
    }
    // Every registry finds every topic with its value.
    for (i, n) in names.iter().enumerate() {
        assert_eq!(grow_only.get(n).map(|v| **v), Some(i as u64));
        assert_eq!(removable.with(n, |v| **v), Some(i as u64));
        assert_eq!(dash.get(n.as_str()).map(|v| **v), Some(i as u64));
        assert_eq!(sharded.get(n).map(|v| *v), Some(i as u64));
    }

    let grow_lookup = |n: &str| grow_only.get(n).map_or(0, |v| **v);
    let removable_lookup = |n: &str| removable.with(n, |v| **v).unwrap_or(0);
    let dash_lookup = |n: &str| dash.get(n).map_or(0, |v| *v.clone());
    let sharded_lookup = |n: &str| sharded.get(n).map_or(0, |v| *v);

    for threads in [1, 2] {
        let mut g = c.benchmark_group(format!("registry/lookup_{threads}_threads"));
        g.throughput(Throughput::Elements(1))
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .sample_size(20);
        g.bench_function("ringbus-grow-only", |b| {
            b.iter_custom(|iters| parallel(threads, iters, grow_lookup))
        });
        g.bench_function("ringbus-removable", |b| {
            b.iter_custom(|iters| parallel(threads, iters, removable_lookup))
        });
        g.bench_function("dashmap", |b| {
            b.iter_custom(|iters| parallel(threads, iters, dash_lookup))
        });
        g.bench_function("rwlock-shards", |b| {
            b.iter_custom(|iters| parallel(threads, iters, sharded_lookup))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
