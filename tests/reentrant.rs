//! Code the bus runs while it makes a topic or a pattern follows topics, and which publishes
//! to the bus: a `tracing` layer forwarding events, a pattern handler's `Drop`. Each may make
//! a topic of its own, and must not wait for the locks the bus holds meanwhile.
//!
//! A test binary of its own: its test installs a tracing subscriber as its thread's default,
//! and tracing's callsite interest cache is process-wide, so a test beside it could keep the
//! bus's events from it (a CI run once saw only 2 of them forwarded).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringbus::Bus;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// A layer forwarding every `ringbus` event it sees to a topic of its own, one topic per
/// event (each publish makes a topic), and recording the event's message and what the
/// publish returned. Events raised by its own publishes are not forwarded, as any layer that
/// feeds the bus must do to avoid a loop.
struct Forward {
    bus: Bus,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
}

thread_local! {
    static FORWARDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Forward {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("ringbus") || FORWARDING.get() {
            return;
        }
        FORWARDING.set(true);
        let mut message = Message(String::new());
        event.record(&mut message);
        let mut seen = self.seen.lock().unwrap();
        let topic = format!("log.{}", seen.len());
        let sent = self.bus.try_publish(&topic, message.0.clone()).is_ok();
        seen.push((message.0, sent));
        drop(seen);
        FORWARDING.set(false);
    }
}

/// A pattern handler whose `Drop` makes a topic (named by the second field).
struct Audits(Bus, &'static str);

impl Drop for Audits {
    fn drop(&mut self) {
        let made = self.0.try_publish(self.1, 1u8);
        assert!(made.is_ok(), "{made:?}");
    }
}

/// With one shard, every topic's insert takes the same lock: a topic made from an event raised
/// while another is made, or while a pattern holds its list, waits for nothing the bus holds.
/// Every event is forwarded, once the bus has let go of its locks, and every forward lands.
#[test]
fn a_tracing_layer_that_makes_topics_does_not_hang_the_bus() {
    let (done_tx, done) = mpsc::channel();
    let scenario = std::thread::spawn(move || {
        let bus = Bus::builder().shards(1).build();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let layer = Forward {
            bus: bus.clone(),
            seen: seen.clone(),
        };
        // This thread's subscriber only: the test binary's other tests see none of it.
        let layered = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            // A topic made: its event is raised holding the registry.
            bus.topic::<u64>("orders.eu").unwrap();
            // A pattern following that topic as it subscribes (under its list), then a topic
            // made later (under the registry and the list).
            let audits = Audits(bus.clone(), "audit.orders");
            let (handled_tx, mut handled) = tokio::sync::mpsc::unbounded_channel();
            let sub = bus
                .subscribe_pattern("orders.*", move |topic: &str, m: &u64| {
                    let _ = &audits;
                    let _ = handled_tx.send((topic.to_string(), *m));
                    async {}
                })
                .unwrap();
            bus.publish("orders.us", 7u64).await.unwrap();
            assert_eq!(handled.recv().await, Some(("orders.us".to_string(), 7)));
            sub.unsubscribe().await;
            // A pattern that follows nothing holds the only reference to its handler: leaving
            // drops the handler, whose `Drop` makes a topic, and must not do so under the list.
            let audits = Audits(bus.clone(), "audit.refunds");
            let unmatched = bus
                .subscribe_pattern("refunds.*", move |_: &str, _: &u64| {
                    let _ = &audits;
                    async {}
                })
                .unwrap();
            unmatched.unsubscribe().await;
        });
        done_tx.send(()).unwrap();
        drop(layered);
        runtime.block_on(bus.close());
        let seen = seen.lock().unwrap().clone();
        (seen, bus)
    });
    let finished = done.recv_timeout(Duration::from_secs(60));
    assert!(
        finished.is_ok(),
        "watchdog: the bus hung on a layer's publish"
    );
    let (seen, bus) = scenario.join().unwrap();
    for (message, sent) in &seen {
        assert!(sent, "the forward of {message:?} was refused");
    }
    for event in [
        "ringbus topic created",
        "ringbus pattern follows a topic",
        "ringbus subscriber started",
        "ringbus topic's ring made",
    ] {
        assert!(
            seen.iter().any(|(message, _)| message == event),
            "{event:?} was not forwarded: {seen:?}"
        );
    }
    let made: Vec<String> = bus.stats().topics.into_iter().map(|t| t.name).collect();
    for audit in ["audit.orders", "audit.refunds"] {
        assert!(made.iter().any(|t| t == audit), "{made:?}");
    }
    assert!(made.iter().filter(|t| t.starts_with("log.")).count() == seen.len());
}
