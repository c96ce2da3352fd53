//! Guarantee 10, zero allocations per publish and per delivery in the steady state, checked
//! by a counting global allocator (this file is its own test binary, so the allocator
//! counts for it alone).
//!
//! Only allocations made on the measuring thread inside a window are counted; the runtime is
//! current-thread, so the subscriber task runs on that thread too and its deliveries count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use ringbus::{Bus, CancellationToken, Context, Topic};
use tokio::sync::Notify;

struct Counting;

thread_local! {
    /// True while this thread's allocations are counted.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// This thread's counts: allocations, bytes allocated, bytes freed. Per thread, so that
    /// tests measuring at the same time do not see each other's allocations.
    static COUNTS: Cell<[u64; 3]> = const { Cell::new([0; 3]) };
}

/// Adds to this thread's counts, if it is counting.
fn count(allocations: u64, allocated: usize, freed: usize) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = COUNTS.try_with(|c| {
            let [a, b, f] = c.get();
            c.set([a + allocations, b + allocated as u64, f + freed as u64]);
        });
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the counting touches only
// const-initialised thread locals (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(1, layout.size(), 0);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(1, layout.size(), 0);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(0, 0, layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(1, new_size, layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What a window allocated: calls, bytes, and bytes freed.
#[derive(Debug, Clone, Copy)]
struct Counted {
    allocations: u64,
    allocated: u64,
    freed: u64,
}

/// Runs `f` with this thread's allocations counted.
async fn counted<F: std::future::Future>(f: F) -> (F::Output, Counted) {
    let [a, b, c] = COUNTS.with(Cell::get);
    COUNTING.with(|on| on.set(true));
    let out = f.await;
    COUNTING.with(|on| on.set(false));
    let [a2, b2, c2] = COUNTS.with(Cell::get);
    let counted = Counted {
        allocations: a2 - a,
        allocated: b2 - b,
        freed: c2 - c,
    };
    (out, counted)
}

/// Counts deliveries and signals when a target count is reached (without allocating).
struct Deliveries {
    handled: AtomicU64,
    target: AtomicU64,
    reached: Notify,
}

impl Deliveries {
    fn new() -> Arc<Self> {
        Arc::new(Deliveries {
            handled: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            reached: Notify::new(),
        })
    }

    /// Counts one delivery, waking `wait_for` if it reached the target.
    fn handled_one(&self) {
        if self.handled.fetch_add(1, SeqCst) + 1 == self.target.load(SeqCst) {
            self.reached.notify_one();
        }
    }

    async fn wait_for(&self, target: u64) {
        self.target.store(target, SeqCst);
        while self.handled.load(SeqCst) < target {
            self.reached.notified().await;
        }
    }
}

/// Publishes `n` messages by name and `n` through the handle (in alternation, each way in
/// turn), then waits until the subscriber has handled them all.
async fn publish_round(bus: &Bus, topic: &Topic<u64>, deliveries: &Deliveries, n: u64) {
    let goal = deliveries.handled.load(SeqCst) + 2 * n;
    for i in 0..n {
        bus.publish("ticks", i).await.unwrap();
        topic.publish(i).await.unwrap();
    }
    deliveries.wait_for(goal).await;
}

/// A current-thread runtime: the subscriber tasks run on the measuring thread, so their
/// allocations count.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn steady_state_publish_and_delivery_allocate_nothing() {
    const N: u64 = 10_000;
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).build();
        let deliveries = Deliveries::new();
        let d = deliveries.clone();
        let sub = bus
            .subscribe("ticks", move |_: &u64| {
                d.handled_one();
                async {}
            })
            .unwrap();
        let topic = bus.topic::<u64>("ticks").unwrap();

        // Warm-up: queues, wakers and lazily made runtime structures reach their size.
        publish_round(&bus, &topic, &deliveries, N).await;

        let ((), window) = counted(publish_round(&bus, &topic, &deliveries, N)).await;
        println!("{} publishes and deliveries: {window:?}", 2 * N);
        assert_eq!(
            window.allocations,
            0,
            "{} publishes + deliveries allocated: {window:?}",
            2 * N
        );

        // `try_publish` and `publish_with` (a context that never ends, then one with a token),
        // warmed up once like the above (the test's own `yield_now` grows tokio's list of
        // deferred wakers the first time).
        let token = Context::from(CancellationToken::new());
        let other_ways = || async {
            let goal = deliveries.handled.load(SeqCst) + 3 * N;
            for i in 0..N {
                while topic.try_publish(i).is_err() {
                    tokio::task::yield_now().await; // full: let the subscriber run
                }
                bus.publish_with(&Context::new(), "ticks", i).await.unwrap();
                topic.publish_with(&token, i).await.unwrap();
            }
            deliveries.wait_for(goal).await;
        };
        other_ways().await;
        let ((), window) = counted(other_ways()).await;
        println!(
            "{} more publishes (try_, _with) and deliveries: {window:?}",
            3 * N
        );
        assert_eq!(window.allocations, 0, "{window:?}");
        assert_eq!(sub.stats().handled, 10 * N);
        bus.close().await;
    });
}

#[test]
fn bytes_per_subscribe_and_unsubscribe() {
    const CYCLES: u64 = 200;
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).build();
        let topic = bus.topic::<u64>("ticks").unwrap();
        // Warm-up: the first subscriber makes what every later one reuses.
        for _ in 0..10 {
            bus.subscribe("ticks", |_: &u64| async {})
                .unwrap()
                .unsubscribe()
                .await;
        }
        let ((), window) = counted(async {
            for i in 0..CYCLES {
                let sub = bus.subscribe("ticks", |_: &u64| async {}).unwrap();
                topic.publish(i).await.unwrap();
                sub.unsubscribe().await;
            }
        })
        .await;
        let per_cycle = window.allocated / CYCLES;
        let kept = window.allocated.saturating_sub(window.freed) / CYCLES;
        println!(
            "subscribe + unsubscribe: {} allocations, {per_cycle} bytes allocated and {kept} \
             bytes kept per cycle",
            window.allocations / CYCLES
        );
        // The task and the subscriber's shared state: nothing else (no name string unless
        // one is asked for, no cancellation token).
        assert!(
            window.allocations <= 2 * CYCLES,
            "{} allocations per subscribe+unsubscribe (at most 2)",
            window.allocations as f64 / CYCLES as f64
        );
        assert!(
            per_cycle < 16 * 1024,
            "{per_cycle} bytes per subscribe+unsubscribe"
        );
        assert!(
            kept < 2 * 1024,
            "{kept} bytes kept per subscribe+unsubscribe"
        );
        bus.close().await;
    });
}

/// Batches both ways (`publish_batch`, a batch subscriber), and a second publisher queued on
/// the writer while the first waits for room holding it: no allocation either.
#[test]
fn batches_and_a_queued_publisher_allocate_nothing() {
    const N: u64 = 4_096;
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).build();
        let deliveries = Deliveries::new();
        let d = deliveries.clone();
        let sub = bus
            .subscribe_batch(
                "batches",
                ringbus::SubscribeOptions::new(),
                move |batch: ringbus::Batch<'_, u64>| {
                    let n = d.handled.fetch_add(batch.len() as u64, SeqCst) + batch.len() as u64;
                    if n >= d.target.load(SeqCst) {
                        d.reached.notify_one();
                    }
                    async {}
                },
            )
            .unwrap();
        let topic = bus.topic::<u64>("batches").unwrap();
        let ctx = Context::new();
        let round = || async {
            let goal = deliveries.handled.load(SeqCst) + 2 * N;
            // Two publishers at once on one thread: whenever the ring is full, one of them
            // waits for room holding the writer and the other waits for the writer.
            let batches = async {
                for chunk in 0..N / 16 {
                    let n = topic
                        .publish_batch(&ctx, chunk * 16..chunk * 16 + 16)
                        .await
                        .unwrap();
                    assert_eq!(n, 16);
                }
            };
            let singles = async {
                for i in 0..N {
                    topic.publish(i).await.unwrap();
                }
            };
            tokio::join!(batches, singles);
            deliveries.wait_for(goal).await;
        };
        round().await; // warm-up
        let ((), window) = counted(round()).await;
        println!(
            "{} batched and queued publishes, batch deliveries: {window:?}",
            2 * N
        );
        assert_eq!(window.allocations, 0, "{window:?}");
        assert_eq!(sub.stats().handled, 4 * N);
        bus.close().await;
    });
}

#[test]
fn a_streams_deliveries_allocate_nothing() {
    const N: u64 = 10_000;
    /// Publishes a queue's worth, then takes it from the stream (`next` and `next_ref` in
    /// turn), from the same task: the publish path and the stream's receive path.
    async fn round(topic: &Topic<u64>, stream: &mut ringbus::Stream<u64>) {
        for chunk in 0..N / 64 {
            for i in 0..64 {
                topic.publish(chunk * 64 + i).await.unwrap();
            }
            for i in 0..64 {
                let expected = chunk * 64 + i;
                if i % 2 == 0 {
                    assert_eq!(stream.next().await, Some(expected));
                } else {
                    assert_eq!(stream.next_ref().await.as_deref(), Some(&expected));
                }
            }
        }
    }
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).build();
        let topic = bus.topic::<u64>("ticks").unwrap();
        let mut stream = topic.stream().unwrap();
        round(&topic, &mut stream).await; // warm-up
        let ((), window) = counted(round(&topic, &mut stream)).await;
        println!("{N} publishes and stream deliveries: {window:?}");
        assert_eq!(window.allocations, 0, "{window:?}");
        bus.close().await;
    });
}

/// A subscriber with a retry policy and a dead-letter topic, whose handler fails once on
/// every message and succeeds on the retry: the retry (its error, its log event with no
/// tracing subscriber installed, its backoff timer) allocates nothing. Only a dead letter
/// may allocate, as documented on `DeadLetter`, and none is made here.
#[test]
fn retries_allocate_nothing() {
    const N: u64 = 300;
    /// A zero-sized error: boxing it into a `HandlerError` allocates nothing.
    struct NotYet;
    impl std::fmt::Display for NotYet {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("not yet")
        }
    }
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).build();
        let deliveries = Deliveries::new();
        let d = deliveries.clone();
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dead = bus.topic::<ringbus::DeadLetter<u64>>("ticks.dead").unwrap();
        let options = ringbus::SubscribeOptions::new()
            .retry(
                ringbus::RetryPolicy::new(2)
                    // The shortest sleep there is: one tick of tokio's timer per retry.
                    .backoff(std::time::Duration::from_nanos(1))
                    .jitter(false),
            )
            .dead_letter(&dead);
        let sub = bus
            .subscribe_with("ticks", options, move |_: &u64| {
                // Fails every first call, succeeds on the retry.
                let result = if failed.fetch_xor(true, SeqCst) {
                    d.handled_one();
                    Ok(())
                } else {
                    Err(NotYet)
                };
                async move { result }
            })
            .unwrap();
        let topic = bus.topic::<u64>("ticks").unwrap();
        let round = || async {
            let goal = deliveries.handled.load(SeqCst) + N;
            for i in 0..N {
                topic.publish(i).await.unwrap();
            }
            deliveries.wait_for(goal).await;
        };
        round().await; // warm-up
        let ((), window) = counted(round()).await;
        println!("{N} publishes, each delivery retried once: {window:?}");
        assert_eq!(window.allocations, 0, "{window:?}");
        let stats = sub.stats();
        assert_eq!((stats.retries, stats.dead_lettered), (2 * N, 0));
        bus.close().await;
    });
}

/// A pattern subscriber's deliveries, on two matched topics, allocate nothing either: each
/// follower hands its handler the topic's name it already holds.
/// Publishes to `ticks.a` and `ticks.b`, both followed by the pattern subscriber that
/// `subscribe` makes, and checks that a round of deliveries after the warm-up allocates nothing.
fn pattern_deliveries_allocate_nothing(
    what: &str,
    subscribe: impl FnOnce(&Bus, Arc<Deliveries>) -> ringbus::Subscription,
) {
    const N: u64 = 10_000;
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().capacity(64).build();
        let deliveries = Deliveries::new();
        let sub = subscribe(&bus, deliveries.clone());
        let (a, b) = (
            bus.topic::<u64>("ticks.a").unwrap(),
            bus.topic::<u64>("ticks.b").unwrap(),
        );
        let round = || async {
            let goal = deliveries.handled.load(SeqCst) + 2 * N;
            for i in 0..N {
                a.publish(i).await.unwrap();
                bus.publish("ticks.b", i).await.unwrap();
            }
            deliveries.wait_for(goal).await;
        };
        round().await; // warm-up
        let ((), window) = counted(round()).await;
        println!("{} {what} deliveries: {window:?}", 2 * N);
        assert_eq!(window.allocations, 0, "{window:?}");
        assert_eq!(sub.stats().handled, 4 * N);
        drop(b);
        bus.close().await;
    });
}

#[test]
fn a_pattern_subscribers_deliveries_allocate_nothing() {
    pattern_deliveries_allocate_nothing("pattern", |bus, d| {
        bus.subscribe_pattern("ticks.*", move |topic: &str, _: &u64| {
            assert!(topic == "ticks.a" || topic == "ticks.b", "{topic}");
            d.handled_one();
            async {}
        })
        .unwrap()
    });
}

#[test]
fn a_pattern_batch_subscribers_deliveries_allocate_nothing() {
    pattern_deliveries_allocate_nothing("pattern batch", |bus, d| {
        let options = ringbus::SubscribeOptions::new();
        let handler = move |topic: &str, batch: ringbus::Batch<'_, u64>| {
            assert!(topic == "ticks.a" || topic == "ticks.b", "{topic}");
            for _ in batch.iter() {
                d.handled_one();
            }
            async {}
        };
        bus.subscribe_pattern_batch("ticks.*", options, handler)
            .unwrap()
    });
}

/// On a bus built with `removable_topics`, topics made and removed give their memory back:
/// everything 10,000 topics (made by a publish each) allocate, the registry's grown tables
/// included, is freed when they are removed, in each of two rounds.
#[test]
fn removed_topics_give_their_memory_back() {
    const TOPICS: usize = 10_000;
    let runtime = current_thread();
    runtime.block_on(async {
        let bus = Bus::builder().removable_topics().build();
        let names: Vec<String> = (0..TOPICS).map(|i| format!("session.{i}")).collect();
        let round = || async {
            for (i, name) in names.iter().enumerate() {
                bus.try_publish(name, i as u64).unwrap();
            }
            let made = bus.stats().topics.len();
            for name in &names {
                bus.remove(name).unwrap();
            }
            made
        };
        for n in 0..2 {
            let (made, window) = counted(round()).await;
            assert_eq!(made, TOPICS);
            let kept = window.allocated - window.freed;
            println!("round {n}: {TOPICS} topics made and removed: {window:?}, {kept} bytes kept");
            assert!(
                window.allocated > 200 * TOPICS as u64,
                "the topics were made: {window:?}"
            );
            assert_eq!(kept, 0, "round {n} kept {kept} bytes: {window:?}");
        }
        assert!(bus.stats().topics.is_empty());
    });
}
