//! The test helpers: `Bus::wait_idle` (everything published so far handled, chains included,
//! the bus left open) and `testing::Recorder`.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use ringbus::testing::Recorder;
use ringbus::Bus;

const WATCHDOG: Duration = Duration::from_secs(10);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(WATCHDOG, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WATCHDOG:?}"))
}

/// A subscriber to "jobs" whose handler yields a few times before it counts the job: it is
/// never done the moment a publish returns.
fn slow_counter(bus: &Bus) -> (ringbus::Subscription, Arc<AtomicU64>) {
    let handled = Arc::new(AtomicU64::new(0));
    let sub = bus
        .subscribe("jobs", {
            let handled = handled.clone();
            move |_: &u64| {
                let handled = handled.clone();
                async move {
                    for _ in 0..5 {
                        tokio::task::yield_now().await;
                    }
                    handled.fetch_add(1, SeqCst);
                }
            }
        })
        .unwrap();
    (sub, handled)
}

#[tokio::test]
async fn wait_idle_waits_for_every_handler_and_leaves_the_bus_open() {
    let bus = Bus::builder().capacity(1024).build();
    let (_sub, handled) = slow_counter(&bus);
    for job in 0..100u64 {
        bus.publish("jobs", job).await.unwrap();
    }
    within("wait_idle", bus.wait_idle()).await;
    assert_eq!(handled.load(SeqCst), 100);
    assert!(!bus.is_closed());
    for job in 0..50u64 {
        bus.publish("jobs", job).await.expect("still open");
    }
    within("wait_idle", bus.wait_idle()).await;
    assert_eq!(handled.load(SeqCst), 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_follows_chains_of_topics() {
    let bus = Bus::new();
    // orders -> receipts -> archive, each step a handler that publishes the next.
    let _bill = bus
        .subscribe("orders", {
            let bus = bus.clone();
            move |order: &u64| {
                let (bus, order) = (bus.clone(), *order);
                async move {
                    tokio::task::yield_now().await;
                    bus.publish("receipts", order * 10).await.unwrap();
                }
            }
        })
        .unwrap();
    let _file = bus
        .subscribe("receipts", {
            let bus = bus.clone();
            move |receipt: &u64| {
                let (bus, receipt) = (bus.clone(), *receipt);
                async move { bus.publish("archive", receipt + 1).await.unwrap() }
            }
        })
        .unwrap();
    let archive = Recorder::<u64>::new(&bus, "archive").unwrap();
    for order in 1..=20u64 {
        bus.publish("orders", order).await.unwrap();
    }
    within("wait_idle", bus.wait_idle()).await;
    let expected: Vec<u64> = (1..=20).map(|o| o * 10 + 1).collect();
    archive.assert_recorded(&expected);
}

#[tokio::test]
async fn wait_idle_does_not_wait_for_a_stream() {
    let bus = Bus::new();
    let (_sub, handled) = slow_counter(&bus);
    let mut stream = bus.stream::<u64>("jobs").unwrap();
    bus.publish("jobs", 1u64).await.unwrap();
    within("wait_idle", bus.wait_idle()).await; // the stream was not polled
    assert_eq!(handled.load(SeqCst), 1);
    assert_eq!(stream.next().await, Some(1));
}

#[tokio::test]
async fn wait_idle_from_a_handler_returns_at_once() {
    let bus = Bus::new();
    let done = Recorder::<u64>::new(&bus, "done").unwrap();
    let _sub = bus
        .subscribe("jobs", {
            let bus = bus.clone();
            move |job: &u64| {
                let (bus, job) = (bus.clone(), *job);
                async move {
                    bus.wait_idle().await; // would wait for this very handler
                    bus.publish("done", job).await.unwrap();
                }
            }
        })
        .unwrap();
    bus.publish("jobs", 3u64).await.unwrap();
    assert_eq!(done.wait_for(1).await, [3]);
}

#[tokio::test]
async fn wait_idle_on_an_idle_bus_returns() {
    let bus = Bus::new();
    within("wait_idle", bus.wait_idle()).await;
    let _topic = bus.topic::<u64>("nobody").unwrap();
    bus.publish("nobody", 1u64).await.unwrap(); // unrouted
    within("wait_idle", bus.wait_idle()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorder_wait_for_returns_once_the_count_is_reached() {
    let bus = Bus::new();
    let seen = Recorder::<u64>::new(&bus, "ticks").unwrap();
    let publisher = tokio::spawn({
        let bus = bus.clone();
        async move {
            for t in 0..1_000u64 {
                bus.publish("ticks", t).await.unwrap();
            }
        }
    });
    let got = seen.wait_for(1_000).await;
    assert_eq!(got, (0..1_000).collect::<Vec<_>>());
    publisher.await.unwrap();
    assert_eq!(seen.len(), 1_000);
    assert_eq!(seen.take().len(), 1_000);
    assert!(seen.is_empty());
    bus.publish("ticks", 7u64).await.unwrap();
    assert_eq!(seen.unsubscribe().await, [7]);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "waited 1s for 2 messages, got 1")]
async fn recorder_wait_for_fails_the_test_instead_of_hanging() {
    let bus = Bus::new();
    let seen = Recorder::<u64>::new(&bus, "ticks")
        .unwrap()
        .timeout(Some(Duration::from_secs(1)));
    bus.publish("ticks", 1u64).await.unwrap();
    seen.wait_for(2).await;
}

#[tokio::test]
#[should_panic(expected = "recorded [1, 2], expected [1, 3]")]
async fn recorder_assert_recorded_names_both_lists() {
    let bus = Bus::new();
    let seen = Recorder::<u64>::new(&bus, "ticks").unwrap();
    bus.publish("ticks", 1u64).await.unwrap();
    bus.publish("ticks", 2u64).await.unwrap();
    bus.wait_idle().await;
    seen.assert_recorded(&[1, 3]);
}

#[tokio::test]
async fn a_recorder_is_a_named_subscriber() {
    let bus = Bus::new();
    let seen = Recorder::<String>::new(&bus, "log").unwrap();
    assert_eq!(seen.subscription().name(), "recorder:log");
    assert_eq!(bus.topic::<String>("log").unwrap().subscriber_count(), 1);
    assert!(
        Recorder::<u64>::new(&bus, "log").is_err(),
        "the type is checked"
    );
    bus.close().await;
    assert!(format!("{seen:?}").contains("log"));
}
