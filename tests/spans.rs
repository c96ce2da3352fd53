//! Observability through `tracing`: every handler call runs inside a `ringbus.handle` span
//! (topic, subscriber, position; the error or panic recorded on it), and a publish that waits
//! for room or is cancelled records an event with the time it waited.
//!
//! A capturing layer on tracing-subscriber's registry is installed once as the global default
//! (a thread-local default races with tracing's process-wide callsite interest cache when
//! tests run in parallel); each test reads only the spans and events of its own topic.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{gated_with, take, Gate};
use ringbus::{Batch, Bus, Context, PublishError, SubscribeOptions};
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Fields, as text.
#[derive(Clone, Debug, Default)]
struct Fields(BTreeMap<String, String>);

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// A closed span, or an event with the span it happened in.
#[derive(Clone, Debug)]
struct Captured {
    name: String,
    fields: Fields,
    /// The name and fields of its parent span (for an event: the span it happened in), if
    /// any.
    parent: Option<(String, Fields)>,
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<Captured>>>,
    events: Arc<Mutex<Vec<Captured>>>,
}

impl Capture {
    /// The closed spans of `topic`, in the order they closed.
    fn spans(&self, topic: &str) -> Vec<Captured> {
        of_topic(&self.spans, topic)
    }

    /// The events of `topic`.
    fn events(&self, topic: &str) -> Vec<Captured> {
        of_topic(&self.events, topic)
    }
}

fn of_topic(list: &Mutex<Vec<Captured>>, topic: &str) -> Vec<Captured> {
    let list = list.lock().unwrap();
    list.iter()
        .filter(|c| c.fields.get("topic") == Some(topic))
        .cloned()
        .collect()
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        // A layer that fails: for `a_panic_outside_the_handler_*`.
        if fields.get("topic") == Some("span-crash") && fields.get("position") == Some("1") {
            panic!("the layer failed on position 1");
        }
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let parent = ctx.event_span(event).map(|span| {
            let fields = span.extensions().get::<Fields>().cloned();
            (span.name().to_string(), fields.unwrap_or_default())
        });
        self.events.lock().unwrap().push(Captured {
            name: event.metadata().name().to_string(),
            fields,
            parent,
        });
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span.extensions().get::<Fields>().cloned();
            let parent = span.parent().map(|parent| {
                let fields = parent.extensions().get::<Fields>().cloned();
                (parent.name().to_string(), fields.unwrap_or_default())
            });
            self.spans.lock().unwrap().push(Captured {
                name: span.name().to_string(),
                fields: fields.unwrap_or_default(),
                parent,
            });
        }
    }
}

/// The process-wide capture, installed before any test logs anything.
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
        capture
    })
}

#[tokio::test]
async fn every_handler_call_runs_in_a_span_that_records_its_failure() {
    let capture = capture();
    let bus = Bus::new();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let _sub = bus
        .subscribe_with(
            "span-orders",
            SubscribeOptions::new().name("audit"),
            move |m: &u64| {
                let (m, tx) = (*m, tx.clone());
                async move {
                    tracing::info!(topic = "span-orders", order = m, "audited");
                    let _ = tx.send(m);
                    match m {
                        1 => Err(format!("order {m} refused")),
                        2 => panic!("order {m} exploded"),
                        _ => Ok(()),
                    }
                }
            },
        )
        .unwrap();
    for m in 0..4u64 {
        bus.publish("span-orders", m).await.unwrap();
    }
    assert_eq!(take(&mut handled, 4).await, [0, 1, 2, 3]);
    bus.close().await;

    let spans = capture.spans("span-orders");
    assert_eq!(spans.len(), 4, "{spans:#?}");
    for (position, span) in spans.iter().enumerate() {
        assert_eq!(span.name, "ringbus.handle", "{span:?}");
        assert_eq!(span.fields.get("subscriber"), Some("audit"), "{span:?}");
        assert_eq!(
            span.fields.get("position"),
            Some(position.to_string().as_str())
        );
    }
    assert_eq!(spans[1].fields.get("error"), Some("order 1 refused"));
    assert_eq!(spans[1].fields.get("panic"), None);
    assert_eq!(spans[2].fields.get("panic"), Some("order 2 exploded"));
    assert_eq!(spans[2].fields.get("error"), None);
    for ok in [&spans[0], &spans[3]] {
        assert_eq!(
            (ok.fields.get("error"), ok.fields.get("panic")),
            (None, None)
        );
    }

    // The handler's own events, and the bus's report of the failure, are inside the span.
    let events = capture.events("span-orders");
    let audited: Vec<_> = events
        .iter()
        .filter(|e| e.fields.get("message") == Some("audited"))
        .collect();
    assert_eq!(audited.len(), 4);
    for (position, event) in audited.iter().enumerate() {
        let (parent, fields) = event.parent.as_ref().expect("inside the handler's span");
        assert_eq!(parent, "ringbus.handle");
        assert_eq!(fields.get("position"), Some(position.to_string().as_str()));
    }
    let failure = events
        .iter()
        .find(|e| e.fields.get("error") == Some("order 1 refused"))
        .expect("the error is logged");
    let (parent, fields) = failure.parent.as_ref().expect("inside the span");
    assert_eq!(
        (parent.as_str(), fields.get("position")),
        ("ringbus.handle", Some("1"))
    );
}

#[tokio::test]
async fn a_batch_handler_call_runs_in_a_span_with_its_message_count() {
    let capture = capture();
    let bus = Bus::new();
    let gate = Gate::closed();
    // Holds the first message so that the next three are handled as one batch.
    let (tx, mut entered) = mpsc::unbounded_channel();
    let pass = gate.clone();
    let _sub = bus
        .subscribe_batch(
            "span-batches",
            SubscribeOptions::new().name("summer"),
            move |batch: Batch<'_, u64>| {
                let (first, n, pass, tx) = (
                    batch.iter().next().copied(),
                    batch.len(),
                    pass.clone(),
                    tx.clone(),
                );
                async move {
                    let _ = tx.send(n as u64);
                    if first == Some(0) {
                        pass.pass().await;
                    }
                }
            },
        )
        .unwrap();
    bus.publish("span-batches", 0u64).await.unwrap();
    assert_eq!(take(&mut entered, 1).await, [1]);
    for m in 1..4u64 {
        bus.publish("span-batches", m).await.unwrap();
    }
    gate.open();
    assert_eq!(take(&mut entered, 1).await, [3]);
    bus.close().await;

    let spans = capture.spans("span-batches");
    let seen: Vec<_> = spans
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.fields.get("subscriber"),
                s.fields.get("position"),
                s.fields.get("messages"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ringbus.handle", Some("summer"), Some("0"), Some("1")),
            ("ringbus.handle", Some("summer"), Some("1"), Some("3")),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_publish_that_waits_for_room_or_is_cancelled_records_how_long_it_waited() {
    let capture = capture();
    let bus = Bus::builder().capacity(1).build();
    let gate = Gate::closed();
    let mut slow = gated_with(
        &bus,
        "span-full",
        SubscribeOptions::new().name("slow"),
        &gate,
    );
    let topic = bus.topic::<u64>("span-full").unwrap();
    topic.publish(0).await.unwrap();
    assert_eq!(take(&mut slow.entered, 1).await, [0]); // its slot stays taken until it returns

    // Waits for room: 30 ms by the paused clock, then the handler lets its message go.
    let mut waiting = tokio_test::task::spawn(topic.publish(1));
    tokio_test::assert_pending!(waiting.poll());
    tokio::time::advance(Duration::from_millis(30)).await;
    gate.release(1);
    waiting.await.unwrap();
    assert_eq!(take(&mut slow.entered, 1).await, [1]);

    // Cancelled by its deadline after 20 ms (the clock jumps to it: nothing else is due).
    let ctx = Context::new().with_timeout(Duration::from_millis(20));
    match topic.publish_with(&ctx, 2).await {
        Err(PublishError::Cancelled(2)) => {}
        other => panic!("expected Cancelled(2), got {other:?}"),
    }
    // Cancelled before it began: it waited for nothing.
    match topic.publish_with(&ctx, 3).await {
        Err(PublishError::Cancelled(3)) => {}
        other => panic!("expected Cancelled(3), got {other:?}"),
    }
    gate.open();
    bus.close().await;

    let events: Vec<_> = capture
        .events("span-full")
        .into_iter()
        .filter(|e| e.fields.get("waited").is_some())
        .map(|e| {
            (
                e.fields.get("message").unwrap_or("").to_string(),
                e.fields.get("waited").unwrap_or("").to_string(),
            )
        })
        .collect();
    let waited = "ringbus publish waited for room".to_string();
    let cancelled = "ringbus publish cancelled; the message was given back".to_string();
    assert_eq!(
        events,
        [
            (waited, "30ms".to_string()),
            (cancelled.clone(), "20ms".to_string()),
            (cancelled, "0ns".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_handler_span_is_a_child_of_the_span_its_publish_gave() {
    let capture = capture();
    let bus = Bus::new();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let mut subs = Vec::new();
    for name in ["one", "two"] {
        let tx = tx.clone();
        let sub = bus.subscribe_with(
            "span-parented",
            SubscribeOptions::new().name(name),
            move |m: &u64| {
                let (m, tx) = (*m, tx.clone());
                async move {
                    let _ = tx.send(m);
                }
            },
        );
        subs.push(sub.unwrap());
    }
    let topic = bus.topic::<u64>("span-parented").unwrap();
    let parent = |m: u64| tracing::info_span!("received", topic = "span-parented-in", m);
    topic
        .publish_with(&Context::new().with_parent(parent(0)), 0)
        .await
        .unwrap();
    topic.publish(1).await.unwrap(); // no parent: the task's current span (none)
    let receipt = topic
        .publish_tracked(&Context::new().with_parent(parent(2)), 2)
        .await
        .unwrap();
    assert!(receipt.wait().await.is_ok());
    let mut got = take(&mut handled, 6).await;
    got.sort();
    assert_eq!(got, [0, 0, 1, 1, 2, 2]);
    bus.close().await;

    let mut seen: Vec<_> = capture
        .spans("span-parented")
        .iter()
        .map(|s| {
            let parent = s
                .parent
                .as_ref()
                .map(|(name, fields)| (name.clone(), fields.get("m").unwrap_or("").to_string()));
            (
                s.fields.get("position").unwrap_or("").to_string(),
                s.fields.get("subscriber").unwrap_or("").to_string(),
                parent,
            )
        })
        .collect();
    seen.sort();
    let received = |m: &str| Some(("received".to_string(), m.to_string()));
    let row = |p: &str, s: &str, parent| (p.to_string(), s.to_string(), parent);
    assert_eq!(
        seen,
        [
            row("0", "one", received("0")),
            row("0", "two", received("0")),
            row("1", "one", None),
            row("1", "two", None),
            row("2", "one", received("2")),
            row("2", "two", received("2")),
        ]
    );
    // Both subscribers took their parent: the bus holds the spans no longer, so they closed.
    let closed = capture.spans("span-parented-in");
    assert_eq!(closed.len(), 2, "{closed:#?}");
}

/// Guarantee 3 on the parented path (`Context::with_parent` takes its own route through the
/// topic): a publish with a parent that is cancelled while it waits for room gives its
/// message back, reaches no subscriber, and the bus keeps nothing of it (its parent span
/// closes at once).
#[tokio::test(start_paused = true)]
async fn a_cancelled_publish_with_a_parent_gives_its_message_back_and_keeps_no_span() {
    let capture = capture();
    let bus = Bus::builder().capacity(1).build();
    let gate = Gate::closed();
    let mut slow = gated_with(
        &bus,
        "span-parent-cancelled",
        SubscribeOptions::new().name("slow"),
        &gate,
    );
    let topic = bus.topic::<u64>("span-parent-cancelled").unwrap();
    topic.publish(0).await.unwrap();
    assert_eq!(take(&mut slow.entered, 1).await, [0]); // the ring is full from here

    let parent = tracing::info_span!("received", topic = "span-parent-cancelled-in", m = 1u64);
    let ctx = Context::new()
        .with_parent(parent)
        .with_timeout(Duration::from_millis(20));
    match topic.publish_with(&ctx, 1).await {
        Err(PublishError::Cancelled(1)) => {}
        other => panic!("expected Cancelled(1), got {other:?}"),
    }
    drop(ctx);
    // Its entry was removed when the publish gave up: the span closed with the context.
    assert_eq!(capture.spans("span-parent-cancelled-in").len(), 1);

    gate.open();
    topic.publish(2).await.unwrap();
    bus.close().await;
    assert_eq!(
        slow.log.snapshot(),
        [0, 2],
        "the cancelled message reached no subscriber"
    );
}

/// A panic in the subscriber's task outside its handler call (here: a tracing layer that
/// fails as the call's span is made) ends the task, and what it had left is lost to it. That
/// is never silent: an error event says how many messages, the subscriber's stats say it
/// crashed, and `close_with` does not report the drain complete. (The task used to end with
/// no word but the panic hook's, and `close` reported everything handled.)
#[tokio::test]
async fn a_panic_outside_the_handler_is_reported_with_what_it_left() {
    let capture = capture();
    let bus = Bus::new();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let sub = bus
        .subscribe_with(
            "span-crash",
            SubscribeOptions::new().name("crashing"),
            move |m: &u64| {
                let _ = tx.send(*m);
                async {}
            },
        )
        .unwrap();
    for m in 0..4u64 {
        bus.publish("span-crash", m).await.unwrap();
    }
    assert_eq!(take(&mut handled, 1).await, [0]);
    let report = bus
        .close_with(&Context::new().with_timeout(Duration::from_secs(60)))
        .await;
    assert!(handled.try_recv().is_err(), "handled past the crash");

    let stats = sub.stats();
    assert!(stats.crashed && !stats.running, "{stats:?}");
    assert_eq!(stats.handled, 1);
    assert!(!report.complete, "{report:?}");
    let left: Vec<_> = report
        .unfinished
        .iter()
        .map(|u| {
            (
                u.topic.as_str(),
                u.subscriber.as_str(),
                u.messages,
                u.running,
            )
        })
        .collect();
    assert_eq!(left, [("span-crash", "crashing", 3, false)], "{report:?}");
    let errors: Vec<_> = capture
        .events("span-crash")
        .into_iter()
        .filter(|e| e.fields.get("left") == Some("3"))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        errors[0].fields.get("panic"),
        Some("the layer failed on position 1")
    );
}
