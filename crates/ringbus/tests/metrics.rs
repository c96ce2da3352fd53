//! The `metrics` feature: what the bus records through the `metrics` facade, checked with a
//! test recorder (`cargo test -p ringbus --features metrics --test metrics`).
//!
//! The recorder is installed once as the global recorder, before any topic is made (a topic
//! and a subscriber resolve their handles when they are made); each test reads only the
//! metrics of its own topics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use ringbus::{Bus, Context, PublishError, SubscribeOptions};
use tokio::sync::{mpsc, Semaphore};

/// A histogram's samples.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Every handle the bus registered, by key.
#[derive(Clone, Default)]
struct TestRecorder {
    counters: Arc<Mutex<HashMap<Key, Arc<AtomicU64>>>>,
    gauges: Arc<Mutex<HashMap<Key, Arc<AtomicU64>>>>,
    histograms: Arc<Mutex<HashMap<Key, Arc<Samples>>>>,
}

/// True if `key` is `name` and has every label of `labels`.
fn matches(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    key.name() == name
        && labels
            .iter()
            .all(|&(k, v)| key.labels().any(|l| l.key() == k && l.value() == v))
}

impl TestRecorder {
    /// The sum of the counters `name` with `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let counters = self.counters.lock().unwrap();
        counters
            .iter()
            .filter(|(key, _)| matches(key, name, labels))
            .map(|(_, value)| value.load(Ordering::Relaxed))
            .sum()
    }

    /// The gauge `name` with `labels`.
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let gauges = self.gauges.lock().unwrap();
        let mut found = gauges.iter().filter(|(key, _)| matches(key, name, labels));
        let (_, value) = found.next()?;
        assert!(found.next().is_none(), "one gauge {name} with {labels:?}");
        Some(f64::from_bits(value.load(Ordering::Relaxed)))
    }

    /// The samples of the histograms `name` with `labels`.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let histograms = self.histograms.lock().unwrap();
        histograms
            .iter()
            .filter(|(key, _)| matches(key, name, labels))
            .flat_map(|(_, samples)| samples.0.lock().unwrap().clone())
            .collect()
    }

    /// Every label key of the metrics `name` of `topic`.
    fn label_keys(&self, name: &str, topic: &str) -> Vec<String> {
        let counters = self.counters.lock().unwrap();
        let gauges = self.gauges.lock().unwrap();
        let histograms = self.histograms.lock().unwrap();
        let keys = counters
            .keys()
            .chain(gauges.keys())
            .chain(histograms.keys());
        let mut labels: Vec<String> = keys
            .filter(|key| matches(key, name, &[("messaging.destination.name", topic)]))
            .flat_map(|key| key.labels().map(|l| format!("{}={}", l.key(), l.value())))
            .collect();
        labels.sort();
        labels.dedup();
        labels
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(key.clone()).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(gauges.entry(key.clone()).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(key.clone()).or_default().clone())
    }
}

/// The process-wide recorder, installed before any topic is made.
fn recorder() -> &'static TestRecorder {
    static RECORDER: OnceLock<TestRecorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = TestRecorder::default();
        metrics::set_global_recorder(recorder.clone()).expect("the only recorder of this binary");
        recorder
    })
}

const TOPIC: &str = "messaging.destination.name";
const SUBSCRIPTION: &str = "messaging.destination.subscription.name";

#[tokio::test]
async fn publishes_handler_calls_and_their_failures_are_counted_and_timed() {
    let recorder = recorder();
    let bus = Bus::new();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let _audit = bus
        .subscribe_with(
            "metric-orders",
            SubscribeOptions::new().name("audit"),
            move |m: &u64| {
                let (m, tx) = (*m, tx.clone());
                async move {
                    let _ = tx.send(m);
                    match m {
                        1 | 3 => Err(format!("order {m} refused")),
                        2 => panic!("order {m} exploded"),
                        _ => Ok(()),
                    }
                }
            },
        )
        .unwrap();
    for m in 0..6u64 {
        bus.publish("metric-orders", m).await.unwrap();
    }
    let topic = bus.topic::<u64>("metric-orders").unwrap();
    topic.try_publish(6).unwrap();
    for _ in 0..7 {
        handled.recv().await.unwrap();
    }
    bus.close().await;

    let orders = [(TOPIC, "metric-orders")];
    let audit = [(TOPIC, "metric-orders"), (SUBSCRIPTION, "audit")];
    assert_eq!(
        recorder.counter("messaging.client.sent.messages", &orders),
        7
    );
    assert_eq!(recorder.counter("ringbus.topic.unrouted", &orders), 0);
    assert_eq!(
        recorder.counter("messaging.client.consumed.messages", &audit),
        7
    );
    assert_eq!(recorder.counter("ringbus.subscriber.errors", &audit), 2);
    assert_eq!(recorder.counter("ringbus.subscriber.panics", &audit), 1);
    assert_eq!(recorder.counter("ringbus.subscriber.detached", &audit), 0);
    assert_eq!(recorder.gauge("ringbus.subscriber.lag", &audit), Some(0.0));

    // One duration per handler call, in seconds, under the outcome it had.
    let all = recorder.samples("messaging.process.duration", &audit);
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(
        all.iter().all(|&s| (0.0..60.0).contains(&s)),
        "seconds: {all:?}"
    );
    let errors = [(TOPIC, "metric-orders"), ("error.type", "handler_error")];
    assert_eq!(
        recorder
            .samples("messaging.process.duration", &errors)
            .len(),
        2
    );
    let panics = [(TOPIC, "metric-orders"), ("error.type", "panic")];
    assert_eq!(
        recorder
            .samples("messaging.process.duration", &panics)
            .len(),
        1
    );

    // The labels: OpenTelemetry's messaging attributes.
    assert_eq!(
        recorder.label_keys("messaging.client.sent.messages", "metric-orders"),
        [
            "messaging.destination.name=metric-orders",
            "messaging.operation.name=publish",
            "messaging.system=ringbus",
        ]
    );
    assert_eq!(
        recorder.label_keys("ringbus.subscriber.errors", "metric-orders"),
        [
            "messaging.destination.name=metric-orders",
            "messaging.destination.subscription.name=audit",
            "messaging.system=ringbus",
        ]
    );
}

#[tokio::test]
async fn unrouted_full_and_cancelled_publishes_are_counted() {
    let recorder = recorder();
    let bus = Bus::builder().capacity(2).build();
    bus.publish("metric-nobody", 1u64).await.unwrap();
    bus.publish_batch("metric-nobody", [2u64, 3]).await.unwrap();
    let nobody = [(TOPIC, "metric-nobody")];
    assert_eq!(
        recorder.counter("messaging.client.sent.messages", &nobody),
        3
    );
    assert_eq!(recorder.counter("ringbus.topic.unrouted", &nobody), 3);

    // A handler held on its message: its slot stays taken until the call returns.
    let hold = Arc::new(Semaphore::new(0));
    let (tx, mut entered) = mpsc::unbounded_channel();
    let held = hold.clone();
    let _slow = bus
        .subscribe_with(
            "metric-full",
            SubscribeOptions::new().name("slow"),
            move |m: &u64| {
                let (m, held, tx) = (*m, held.clone(), tx.clone());
                async move {
                    let _ = tx.send(m);
                    held.acquire().await.unwrap().forget();
                }
            },
        )
        .unwrap();
    let topic = bus.topic::<u64>("metric-full").unwrap();
    topic.publish(0).await.unwrap();
    assert_eq!(entered.recv().await, Some(0));
    topic.publish(1).await.unwrap(); // the other slot
    match topic.try_publish(2) {
        Err(PublishError::Full(2)) => {}
        other => panic!("expected Full(2), got {other:?}"),
    }
    let ctx = Context::new().with_timeout(Duration::from_millis(1));
    match topic.publish_with(&ctx, 3).await {
        Err(PublishError::Cancelled(3)) => {}
        other => panic!("expected Cancelled(3), got {other:?}"),
    }
    let full = [(TOPIC, "metric-full")];
    assert_eq!(recorder.counter("ringbus.topic.full", &full), 2);
    assert_eq!(recorder.counter("ringbus.topic.cancelled", &full), 1);
    assert_eq!(recorder.counter("messaging.client.sent.messages", &full), 2);

    // The lag, as of the subscriber's last handler call: message 0 handled, 1 waiting.
    hold.add_permits(1);
    assert_eq!(entered.recv().await, Some(1));
    let slow = [(TOPIC, "metric-full"), (SUBSCRIPTION, "slow")];
    assert_eq!(recorder.gauge("ringbus.subscriber.lag", &slow), Some(1.0));
    hold.add_permits(1);
    bus.close().await;
    assert_eq!(
        recorder.counter("messaging.client.consumed.messages", &slow),
        2
    );
    assert_eq!(recorder.gauge("ringbus.subscriber.lag", &slow), Some(0.0));
}

/// The lag gauge of a subscriber that is leaving counts only what was queued for it when it
/// called `unsubscribe`, as `SubscriberStats::lag` does (issue 34): here it owes 0..4, and
/// 4..9 land after the cut.
#[tokio::test]
async fn a_leaving_subscribers_lag_stops_at_its_cut() {
    let recorder = recorder();
    let bus = Bus::builder().capacity(16).build();
    let hold = Arc::new(Semaphore::new(0));
    let (tx, mut entered) = mpsc::unbounded_channel();
    let held = hold.clone();
    let sub = bus
        .subscribe_with(
            "metric-leaving",
            SubscribeOptions::new().name("leaving"),
            move |m: &u64| {
                let (tx, held, m) = (tx.clone(), held.clone(), *m);
                async move {
                    let _ = tx.send(m);
                    held.acquire().await.unwrap().forget();
                }
            },
        )
        .unwrap();
    for m in 0..4u64 {
        bus.publish("metric-leaving", m).await.unwrap();
    }
    let mut leaving = tokio_test::task::spawn(sub.unsubscribe());
    tokio_test::assert_pending!(leaving.poll()); // the cut
    for m in 4..9u64 {
        bus.publish("metric-leaving", m).await.unwrap();
    }
    hold.add_permits(2);
    for m in 0..3 {
        assert_eq!(entered.recv().await, Some(m));
    }
    // As of its last handler call (on 1): 2 and 3 left.
    let labels = [(TOPIC, "metric-leaving"), (SUBSCRIPTION, "leaving")];
    assert_eq!(recorder.gauge("ringbus.subscriber.lag", &labels), Some(2.0));
    hold.add_permits(2);
    leaving.await;
    bus.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_detached_subscriber_is_counted() {
    let recorder = recorder();
    let bus = Bus::builder().capacity(4).build();
    let wedged = SubscribeOptions::new()
        .name("wedged")
        .stall_timeout(Duration::from_millis(10));
    let sub = bus
        .subscribe_with("metric-stall", wedged, |_: &u64| {
            std::future::pending::<()>()
        })
        .unwrap();
    bus.publish("metric-stall", 1u64).await.unwrap();
    while !sub.is_finished() {
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let wedged = [(TOPIC, "metric-stall"), (SUBSCRIPTION, "wedged")];
    assert_eq!(recorder.counter("ringbus.subscriber.detached", &wedged), 1);
    assert_eq!(recorder.gauge("ringbus.subscriber.lag", &wedged), Some(0.0));
    assert_eq!(
        recorder.counter("messaging.client.consumed.messages", &wedged),
        0
    );
    bus.close().await;
}
