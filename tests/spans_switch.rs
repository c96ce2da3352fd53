//! A subscriber task looks at tracing's level where it would wait, not at every message (see
//! `run_loop` in `crates/ringbus/src/subscriber/task.rs`): a tracing subscriber installed while the
//! bus runs gets the handler spans from the task's next wait on, for one-message and batch
//! subscribers alike (they run one loop).
//!
//! A test binary of its own, with one test: it installs its tracing subscriber as the
//! thread's default while the bus runs, and tracing's callsite interest cache is
//! process-wide, so a test beside it could change what it sees.

use std::sync::{Arc, Mutex};

use ringbus::{Bus, SubscribeOptions};
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::Layer;

/// The subscriber and `position` of every `ringbus.handle` span made.
#[derive(Clone, Default)]
struct Positions(Arc<Mutex<Vec<(String, u64)>>>);

impl Positions {
    fn of(&self, subscriber: &str) -> Vec<u64> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(s, _)| s == subscriber)
            .map(|&(_, p)| p)
            .collect()
    }
}

#[derive(Default)]
struct Position(String, Option<u64>);

impl Visit for Position {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "position" {
            self.1 = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "subscriber" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Positions {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: LayerContext<'_, S>) {
        if attrs.metadata().name() == "ringbus.handle" {
            let mut position = Position::default();
            attrs.record(&mut position);
            if let Some(p) = position.1 {
                self.0.lock().unwrap().push((position.0, p));
            }
        }
    }
}

#[test]
fn a_tracing_subscriber_installed_while_the_bus_runs_gets_spans_from_the_next_wait_on() {
    // One thread: the subscriber task runs where the thread's default subscriber is set.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = Bus::new();
        let (tx, mut handled) = mpsc::unbounded_channel();
        let _sub = bus
            .subscribe_with(
                "switch",
                SubscribeOptions::new().name("late"),
                move |m: &u64| {
                    let (m, tx) = (*m, tx.clone());
                    async move {
                        let _ = tx.send(m);
                    }
                },
            )
            .unwrap();
        let (batch_tx, mut batches) = mpsc::unbounded_channel();
        let _batch = bus
            .subscribe_batch(
                "switch-batch",
                SubscribeOptions::new().name("late-batch"),
                move |batch: ringbus::Batch<'_, u64>| {
                    let (first, tx) = (batch.iter().next().copied(), batch_tx.clone());
                    async move {
                        let _ = tx.send(first);
                    }
                },
            )
            .unwrap();
        // Nobody listens: the tasks handle 0 without spans, then wait.
        bus.publish("switch", 0u64).await.unwrap();
        assert_eq!(handled.recv().await, Some(0));
        bus.publish("switch-batch", 0u64).await.unwrap();
        assert_eq!(batches.recv().await, Some(Some(0)));

        let positions = Positions::default();
        let _default = tracing::subscriber::set_default(
            tracing_subscriber::registry().with(positions.clone()),
        );
        // 1 ends the wait under way (begun before the subscriber came): it may be handled
        // either way. From the wait after it on, every call has its span.
        for m in 1..4u64 {
            bus.publish("switch", m).await.unwrap();
            assert_eq!(handled.recv().await, Some(m));
            bus.publish("switch-batch", m).await.unwrap();
            assert_eq!(batches.recv().await, Some(Some(m)));
        }
        bus.close().await;
        for name in ["late", "late-batch"] {
            let seen = positions.of(name);
            assert!(
                seen == [1, 2, 3] || seen == [2, 3],
                "spans of {name} made for positions {seen:?}"
            );
        }
    });
}
