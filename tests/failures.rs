//! Guarantee 6, failures stay local: a handler that returns `Err` or panics is logged through
//! `tracing` (topic, subscriber, error) and counted; its subscriber goes on with the next
//! message and the bus keeps running.
//!
//! Events are captured by a small `tracing::Subscriber` installed once as the global default
//! (a thread-local default races with tracing's process-wide callsite interest cache when
//! tests run in parallel); each test reads only the events of its own topic.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use common::{recording, take, Log};
use ringbus::{Batch, Bus, SubscribeOptions};
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata};

/// One captured event: its level and every field, as text.
#[derive(Clone, Debug)]
struct Captured {
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map(String::as_str).unwrap_or("")
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

impl Capture {
    /// The captured events of `topic` at `level`.
    fn at(&self, topic: &str, level: Level) -> Vec<Captured> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|e| e.level == level && e.field("topic") == topic)
            .cloned()
            .collect()
    }
}

/// The process-wide capture, installed before any test logs anything.
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.clone())
            .expect("no other global subscriber in this test binary");
        capture
    })
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl tracing::Subscriber for Capture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Captured {
            level: *event.metadata().level(),
            fields,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[tokio::test]
async fn handler_errors_are_logged_counted_and_passed_over() {
    let capture = capture();
    let bus = Bus::new();
    let (tx, mut called) = mpsc::unbounded_channel();
    let faulty = bus
        .subscribe_with(
            "jobs",
            SubscribeOptions::new().name("faulty"),
            move |m: &u64| {
                let (m, tx) = (*m, tx.clone());
                async move {
                    let _ = tx.send(m);
                    if m % 2 == 1 {
                        Err(format!("job {m} failed"))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .unwrap();
    let mut witness = recording(&bus, "jobs", "witness");
    for m in 0..10u64 {
        bus.publish("jobs", m).await.unwrap();
    }
    assert_eq!(take(&mut called, 10).await, (0..10).collect::<Vec<_>>());
    assert_eq!(take(&mut witness.handled, 10).await.len(), 10);

    let stats = faulty.stats();
    assert_eq!(
        (
            stats.handled,
            stats.errors,
            stats.panics,
            stats.running,
            stats.detached
        ),
        (10, 5, 0, true, false),
        "{stats:?}"
    );
    let clean = witness.sub.stats();
    assert_eq!((clean.errors, clean.panics), (0, 0));

    let warnings = capture.at("jobs", Level::WARN);
    let errors: Vec<_> = warnings
        .iter()
        .map(|e| e.field("error").to_string())
        .collect();
    assert_eq!(
        errors,
        [
            "job 1 failed",
            "job 3 failed",
            "job 5 failed",
            "job 7 failed",
            "job 9 failed"
        ]
    );
    for e in &warnings {
        assert_eq!(e.field("topic"), "jobs", "{e:?}");
        assert_eq!(e.field("subscriber"), "faulty", "{e:?}");
    }

    // Still running, for everyone.
    bus.publish("jobs", 10u64).await.unwrap();
    assert_eq!(take(&mut called, 1).await, [10]);
    assert_eq!(take(&mut witness.handled, 1).await, [10]);
    let report = bus
        .close_with(&ringbus::Context::new().with_timeout(std::time::Duration::from_secs(60)))
        .await;
    assert!(report.complete, "{report:?}");
    assert_eq!(faulty.stats().handled, 11);
}

#[tokio::test]
async fn handler_panics_are_logged_counted_and_passed_over() {
    let capture = capture();
    let bus = Bus::new();
    let log = Log::new();
    let logged = log.clone();
    let panicky = bus
        .subscribe_with(
            "panicking-jobs",
            SubscribeOptions::new().name("panicky"),
            move |m: &u64| {
                let (m, logged) = (*m, logged.clone());
                // A panic in the closure itself, before its future exists.
                assert!(m != 4, "sync boom {m}");
                async move {
                    if m % 3 == 0 {
                        panic!("boom {m}");
                    }
                    // A panic after a yield, from a later poll of the handler's future.
                    if m == 8 {
                        tokio::task::yield_now().await;
                        panic!("late boom {m}");
                    }
                    logged.push(m);
                }
            },
        )
        .unwrap();
    let mut witness = recording(&bus, "panicking-jobs", "witness");
    for m in 0..12u64 {
        bus.publish("panicking-jobs", m).await.unwrap();
    }
    assert_eq!(take(&mut witness.handled, 12).await.len(), 12);
    // The panicking subscriber handled (or failed) every message, in order.
    bus.publish("panicking-jobs", 12u64).await.unwrap();
    bus.close().await;
    assert_eq!(log.snapshot(), [1, 2, 5, 7, 10, 11]);
    let stats = panicky.stats();
    assert_eq!(
        (stats.handled, stats.panics, stats.errors),
        (13, 7, 0),
        "{stats:?}"
    );

    let logged: Vec<_> = capture
        .at("panicking-jobs", Level::ERROR)
        .iter()
        .map(|e| {
            assert_eq!(e.field("topic"), "panicking-jobs", "{e:?}");
            assert_eq!(e.field("subscriber"), "panicky", "{e:?}");
            e.field("panic").to_string()
        })
        .collect();
    assert_eq!(
        logged,
        [
            "boom 0",
            "boom 3",
            "sync boom 4",
            "boom 6",
            "late boom 8",
            "boom 9",
            "boom 12"
        ]
    );
}

/// A batch handler's `Err` or panic counts once per batch; the subscriber goes on.
#[tokio::test]
async fn batch_handler_failures_count_per_batch() {
    let capture = capture();
    let bus = Bus::builder().capacity(64).build();
    let seen = Log::new();
    let logged = seen.clone();
    let (tx, mut calls) = mpsc::unbounded_channel::<u64>();
    let sub = bus
        .subscribe_batch(
            "b",
            SubscribeOptions::new().name("batches"),
            move |batch: Batch<'_, u64>| {
                let items: Vec<u64> = batch.iter().copied().collect();
                let (logged, tx) = (logged.clone(), tx.clone());
                async move {
                    let first = items[0];
                    for m in &items {
                        logged.push(*m);
                    }
                    let _ = tx.send(items.len() as u64);
                    match first % 3 {
                        0 => Err("odd batch"),
                        1 => panic!("bad batch"),
                        _ => Ok(()),
                    }
                }
            },
        )
        .unwrap();
    let mut calls_made = 0;
    let mut total = 0;
    for round in 0..6u64 {
        bus.publish_batch("b", round * 4..round * 4 + 4)
            .await
            .unwrap();
        // The current-thread runtime runs the subscriber only when we wait here: each round
        // is one batch of four.
        total += calls.recv().await.unwrap();
        calls_made += 1;
    }
    assert_eq!(total, 24);
    let stats = sub.stats();
    assert_eq!(stats.handled, 24);
    // Batches start at 0, 4, 8, 12, 16, 20: first % 3 = 0, 1, 2, 0, 1, 2.
    assert_eq!((stats.errors, stats.panics), (2, 2), "{stats:?}");
    assert_eq!(calls_made, 6);
    bus.close().await;
    assert_eq!(seen.snapshot(), (0..24).collect::<Vec<_>>());
    assert_eq!(capture.at("b", Level::WARN).len(), 2);
    assert_eq!(capture.at("b", Level::ERROR).len(), 2);
}

/// A hand-written handler whose `call` panics before it returns a future (on 1 and 3).
struct EagerPanic(Log<u64>);

impl ringbus::Handler<u64> for EagerPanic {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        msg: &'a u64,
    ) -> impl std::future::Future<Output = Result<(), ringbus::HandlerError>> + Send + 'a {
        assert!(*msg % 2 == 0, "eager boom {msg}");
        async move {
            self.0.push(*msg);
            Ok(())
        }
    }
}

/// Its batch form: panics in `call` on a batch that starts with an odd number.
struct EagerBatchPanic(Log<u64>);

impl ringbus::BatchHandler<u64> for EagerBatchPanic {
    #[allow(clippy::manual_async_fn)]
    fn call<'a>(
        &'a self,
        batch: Batch<'a, u64>,
    ) -> impl std::future::Future<Output = Result<(), ringbus::HandlerError>> + Send + 'a {
        let first = batch.iter().next().copied().unwrap_or(0);
        assert!(first % 2 == 0, "eager batch boom {first}");
        async move {
            for m in batch.iter() {
                self.0.push(*m);
            }
            Ok(())
        }
    }
}

/// The `Handler` trait is public: a `call` that panics before it returns its future is a
/// handler panic like any other (logged, counted, passed over), not the end of the
/// subscriber's task.
#[tokio::test]
async fn a_handler_whose_call_panics_is_passed_over() {
    let capture = capture();
    let bus = Bus::new();
    let log = Log::new();
    let eager = bus
        .subscribe_with(
            "eager",
            SubscribeOptions::new().name("eager"),
            EagerPanic(log.clone()),
        )
        .unwrap();
    let batch_log = Log::new();
    let eager_batch = bus
        .subscribe_batch(
            "eager",
            SubscribeOptions::new().name("eager-batch"),
            EagerBatchPanic(batch_log.clone()),
        )
        .unwrap();
    let mut witness = recording(&bus, "eager", "witness");
    for m in 0..5u64 {
        bus.publish("eager", m).await.unwrap();
        // One message per batch: the witness runs after the batch subscriber (both were
        // woken by this publish, in subscription order).
        assert_eq!(take(&mut witness.handled, 1).await, [m]);
    }
    assert!(!eager.is_finished(), "a panic in call ended the subscriber");
    assert!(
        !eager_batch.is_finished(),
        "a panic in call ended the batch subscriber"
    );
    bus.close().await;
    assert_eq!(log.snapshot(), [0, 2, 4]);
    assert_eq!(batch_log.snapshot(), [0, 2, 4]);
    let stats = eager.stats();
    assert_eq!((stats.handled, stats.panics), (5, 2), "{stats:?}");
    let stats = eager_batch.stats();
    assert_eq!((stats.handled, stats.panics), (5, 2), "{stats:?}");
    let panics: Vec<_> = capture
        .at("eager", Level::ERROR)
        .iter()
        .map(|e| e.field("panic").to_string())
        .collect();
    assert_eq!(panics.len(), 4, "{panics:?}");
    assert!(panics.contains(&"eager boom 1".to_string()), "{panics:?}");
    assert!(
        panics.contains(&"eager batch boom 3".to_string()),
        "{panics:?}"
    );
}
