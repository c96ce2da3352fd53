//! Guarantee 11, a good tokio neighbour: every publish route and every subscriber's receive
//! loop spends tokio's cooperative budget, so a publisher that always finds room and a
//! subscriber that always finds a message still let the other tasks of their worker run:
//! after tokio's budget of 128 operations, and never after more than 1,024 messages.
//!
//! Each test runs on a current-thread runtime, where a task that never yields keeps every
//! other task waiting: a neighbour task, queued behind the busy one, records how far the busy
//! one had got when it first ran. Counts, not clocks: the figures are exact.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use ringbus::{Batch, Bus, Context, SubscribeOptions, Topic};

/// Messages the busy task has ready or room for: far more than a budget's worth.
const MESSAGES: u64 = 20_000;
/// tokio's cooperative budget: operations per task poll.
const BUDGET: u64 = 128;
/// The most messages that may pass without a yield, whatever the mix of operations.
const MOST_BETWEEN_YIELDS: u64 = 1_024;

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime")
}

/// Spawns `busy` (which counts its progress in `progress`), then a neighbour behind it;
/// returns how far `busy` had got when the neighbour first ran, and checks `busy` finished.
fn neighbour_sees(
    busy: impl Future<Output = ()> + Send + 'static,
    progress: Arc<AtomicU64>,
) -> u64 {
    current_thread().block_on(async move {
        let busy = tokio::spawn(busy);
        let seen = progress.clone();
        let neighbour = tokio::spawn(async move { seen.load(SeqCst) });
        let at = neighbour.await.expect("the neighbour ran");
        busy.await.expect("the busy task finished");
        assert_eq!(
            progress.load(SeqCst),
            MESSAGES,
            "the busy task did not finish its work"
        );
        at
    })
}

type Route = fn(Bus, Topic<u64>, u64) -> Pin<Box<dyn Future<Output = bool> + Send>>;

/// Every single-message publish route: true if the publish succeeded.
const ROUTES: &[(&str, Route)] = &[
    ("Bus::publish", |bus, _, m| {
        Box::pin(async move { bus.publish("t", m).await.is_ok() })
    }),
    ("Bus::publish_with", |bus, _, m| {
        Box::pin(async move { bus.publish_with(&Context::new(), "t", m).await.is_ok() })
    }),
    ("Topic::publish", |_, topic, m| {
        Box::pin(async move { topic.publish(m).await.is_ok() })
    }),
    ("Topic::publish_with", |_, topic, m| {
        let ctx = Context::new().with_cancellation(ringbus::CancellationToken::new());
        Box::pin(async move { topic.publish_with(&ctx, m).await.is_ok() })
    }),
    ("Topic::publish_tracked", |_, topic, m| {
        Box::pin(async move { topic.publish_tracked(&Context::new(), m).await.is_ok() })
    }),
];

/// A bus whose topic "t" never fills (every publish finds room at once: no subscriber gates
/// it, or one does that runs only when the publisher yields, and the ring has room for every
/// message), and a counter of what was published.
fn roomy() -> (Bus, Topic<u64>, Arc<AtomicU64>) {
    let bus = Bus::builder().capacity(32_768).build();
    let topic = bus.topic::<u64>("t").unwrap();
    (bus, topic, Arc::new(AtomicU64::new(0)))
}

/// With a subscriber and without: a publish to a topic nobody subscribes to takes another
/// path (it is counted as unrouted) than one that is delivered (the first poll's fast path).
#[test]
fn a_publisher_that_always_finds_room_lets_its_neighbours_run() {
    for (&(name, route), subscribed) in ROUTES.iter().flat_map(|r| [(r, false), (r, true)]) {
        let (bus, topic, published) = roomy();
        let count = published.clone();
        let at = neighbour_sees(
            async move {
                // Subscribed from the busy task, on the runtime: the subscriber's task is
                // queued behind the neighbour.
                let _sub = subscribed.then(|| {
                    bus.subscribe("t", |_: &u64| std::future::ready(()))
                        .expect("subscribe")
                });
                for m in 0..MESSAGES {
                    assert!(route(bus.clone(), topic.clone(), m).await, "{name} failed");
                    count.fetch_add(1, SeqCst);
                }
            },
            published,
        );
        assert!(
            (1..=BUDGET).contains(&at),
            "{name} (subscribed: {subscribed}): the neighbour ran after {at} of {MESSAGES} \
             publishes"
        );
    }
}

#[test]
fn a_batch_publisher_lets_its_neighbours_run() {
    for by_name in [false, true] {
        let (bus, topic, published) = roomy();
        let count = published.clone();
        // The batch's iterator counts what the bus took from it.
        let at = neighbour_sees(
            async move {
                let msgs = (0..MESSAGES).inspect(move |_| {
                    count.fetch_add(1, SeqCst);
                });
                let n = if by_name {
                    bus.publish_batch("t", msgs).await.ok()
                } else {
                    topic.publish_batch(&Context::new(), msgs).await.ok()
                };
                assert_eq!(n, Some(MESSAGES));
            },
            published,
        );
        assert!(
            (1..=MOST_BETWEEN_YIELDS).contains(&at),
            "publish_batch (by name: {by_name}): the neighbour ran after {at} of {MESSAGES} messages"
        );
    }
}

/// Publishes `MESSAGES` messages that a subscriber will find ready (nothing yields meanwhile:
/// `try_publish` is not async), then spawns the neighbour behind the subscriber's task.
fn subscriber_neighbour_sees(subscribe: impl FnOnce(&Bus, Arc<AtomicU64>)) -> u64 {
    current_thread().block_on(async move {
        let bus = Bus::builder().capacity(32_768).build();
        let handled = Arc::new(AtomicU64::new(0));
        subscribe(&bus, handled.clone());
        for m in 0..MESSAGES {
            bus.try_publish("t", m).unwrap();
        }
        let seen = handled.clone();
        let neighbour = tokio::spawn(async move { seen.load(SeqCst) });
        let at = neighbour.await.expect("the neighbour ran");
        bus.close().await;
        assert_eq!(handled.load(SeqCst), MESSAGES);
        at
    })
}

#[test]
fn a_subscriber_that_always_finds_a_message_lets_its_neighbours_run() {
    let at = subscriber_neighbour_sees(|bus, handled| {
        bus.subscribe("t", move |_: &u64| {
            handled.fetch_add(1, SeqCst);
            std::future::ready(())
        })
        .unwrap();
    });
    assert!(
        (1..=MOST_BETWEEN_YIELDS).contains(&at),
        "the neighbour ran after the subscriber handled {at} of {MESSAGES}"
    );
}

#[test]
fn a_pattern_subscriber_lets_its_neighbours_run() {
    let at = subscriber_neighbour_sees(|bus, handled| {
        bus.subscribe_pattern("*", move |_: &str, _: &u64| {
            handled.fetch_add(1, SeqCst);
            std::future::ready(())
        })
        .unwrap();
    });
    assert!(
        (1..=MOST_BETWEEN_YIELDS).contains(&at),
        "the neighbour ran after the pattern subscriber handled {at} of {MESSAGES}"
    );
}

#[test]
fn a_batch_subscriber_lets_its_neighbours_run() {
    let at = subscriber_neighbour_sees(|bus, handled| {
        bus.subscribe_batch("t", SubscribeOptions::new(), move |b: Batch<'_, u64>| {
            handled.fetch_add(b.len() as u64, SeqCst);
            std::future::ready(())
        })
        .unwrap();
    });
    assert!(
        (1..=MOST_BETWEEN_YIELDS).contains(&at),
        "the neighbour ran after the batch subscriber handled {at} of {MESSAGES}"
    );
}

#[test]
fn a_pattern_batch_subscriber_lets_its_neighbours_run() {
    let at = subscriber_neighbour_sees(|bus, handled| {
        let options = SubscribeOptions::new();
        bus.subscribe_pattern_batch("*", options, move |_: &str, b: Batch<'_, u64>| {
            handled.fetch_add(b.len() as u64, SeqCst);
            std::future::ready(())
        })
        .unwrap();
    });
    assert!(
        (1..=MOST_BETWEEN_YIELDS).contains(&at),
        "the neighbour ran after the pattern batch subscriber handled {at} of {MESSAGES}"
    );
}

/// The last clause of guarantee 11, on tokio's multi-thread scheduler: a subscriber woken by
/// a publisher's task is put in that worker's LIFO slot, which no other worker may steal
/// from, so it runs only once the publisher's task yields. A publisher that always finds room
/// yields on its budget: the subscriber handles its first message after at most 128
/// publishes, not after all of them. One worker, so the count does not depend on timing.
#[test]
fn a_woken_subscriber_is_not_left_behind_a_publisher_that_never_yields() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .expect("a multi-thread runtime");
    let first_seen_at = runtime.block_on(async {
        let bus = Bus::builder().capacity(32_768).build();
        let published = Arc::new(AtomicU64::new(0));
        let first = Arc::new(AtomicU64::new(u64::MAX));
        let (count, seen) = (published.clone(), first.clone());
        let _sub = bus
            .subscribe("t", move |_: &u64| {
                let _ = seen.compare_exchange(u64::MAX, count.load(SeqCst), SeqCst, SeqCst);
                std::future::ready(())
            })
            .unwrap();
        let topic = bus.topic::<u64>("t").unwrap();
        let publisher = tokio::spawn(async move {
            for m in 0..MESSAGES {
                topic.publish(m).await.unwrap();
                published.fetch_add(1, SeqCst);
            }
        });
        publisher.await.expect("the publisher finished");
        bus.close().await;
        first.load(SeqCst)
    });
    assert!(
        first_seen_at <= BUDGET,
        "the subscriber first ran after {first_seen_at} of {MESSAGES} publishes"
    );
}
