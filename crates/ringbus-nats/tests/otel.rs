//! The conformance case of the `otel` feature, over a real nats-server, on core and on
//! JetStream: one trace covers the publisher, the export, NATS, the import and the remote
//! handler, and the export's span id arrives intact as the import's remote parent. The same
//! for a request answered in the other process (`export_requests` / `import_requests`).
//!
//! One process plays both sides (two buses, two links): the spans of both are recorded by one
//! OpenTelemetry tracer provider through `tracing-opentelemetry`, installed once as the global
//! default; each test reads only the spans of its own topic's trace. Without the nats-server
//! binary the cases skip with a message, unless `REQUIRE_NATS=1` (as in CI).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use ringbus::{Bus, Context, Request, SubscribeOptions};
use ringbus_nats::testing::NatsServer;
use ringbus_nats::{Link, Mode};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Order {
    id: u64,
}

/// Every finished span, as the SDK exports it.
#[derive(Clone, Debug, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collect {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// The process-wide recorder: every span at every level, exported as it ends.
fn spans() -> &'static Collect {
    static SPANS: OnceLock<Collect> = OnceLock::new();
    SPANS.get_or_init(|| {
        let spans = Collect::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("ringbus-test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
        spans
    })
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The ids of a recorded span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ids {
    trace: TraceId,
    span: SpanId,
    parent: SpanId,
    remote_parent: bool,
}

impl Collect {
    /// The span called `name` whose attribute `key` is `value`, once it has ended.
    async fn find(&self, name: &str, key: &str, value: &str) -> Ids {
        let look = || {
            let spans = self.0.lock().unwrap();
            let found: Vec<_> = spans
                .iter()
                .filter(|s| s.name == name && attribute(s, key).as_deref() == Some(value))
                .map(|s| Ids {
                    trace: s.span_context.trace_id(),
                    span: s.span_context.span_id(),
                    parent: s.parent_span_id,
                    remote_parent: s.parent_span_is_remote,
                })
                .collect();
            assert!(found.len() <= 1, "{name} {key}={value}: {found:?}");
            found.first().copied()
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(ids) = look() {
                return ids;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {name} with {key}={value} ended within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A link of `bus` to `server`, both sides with the same prefix.
async fn connect(server: &NatsServer, bus: &Bus) -> Link {
    Link::builder(server.url())
        .prefix("otel")
        .connect(bus)
        .await
        .unwrap()
}

async fn one_trace_from_publisher_to_remote_handler(mode: Mode, topic: &str) {
    let spans = spans();
    let Some(server) = NatsServer::start() else {
        return;
    };
    let publisher = Bus::new();
    let subscriber = Bus::new();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let remote = format!("remote-{topic}");
    let _remote = subscriber
        .subscribe_with(
            topic,
            SubscribeOptions::new().name(remote.clone()),
            move |o: &Order| {
                let (id, tx) = (o.id, tx.clone());
                async move {
                    let _ = tx.send(id);
                }
            },
        )
        .unwrap();
    let pub_link = connect(&server, &publisher).await;
    let sub_link = connect(&server, &subscriber).await;
    sub_link.import::<Order>(topic, mode).await.unwrap();
    pub_link.export::<Order>(topic, mode).await.unwrap();

    {
        // The publisher's own span, the parent of the export's handler span.
        let place = tracing::info_span!("place-order", topic);
        let ctx = Context::new().with_parent(place.clone());
        publisher
            .publish_with(&ctx, topic, Order { id: 7 })
            .await
            .unwrap();
    }
    let got = tokio::time::timeout(WAIT, handled.recv()).await;
    assert_eq!(
        got.ok().flatten(),
        Some(7),
        "{mode:?}: not handled remotely"
    );

    let export = format!("nats-export:{topic}");
    let place = spans.find("place-order", "topic", topic).await;
    let exported = spans.find("ringbus.handle", "subscriber", &export).await;
    let import = spans.find("ringbus.import", "topic", topic).await;
    let handled = spans.find("ringbus.handle", "subscriber", &remote).await;

    // Publisher -> export, in process A.
    assert_eq!(exported.trace, place.trace, "{mode:?}");
    assert_eq!(exported.parent, place.span, "{mode:?}");
    // Over NATS: the export's span id is the import's remote parent, intact.
    assert_eq!(
        import.trace, place.trace,
        "{mode:?}: the trace id crossed NATS"
    );
    assert_eq!(
        import.parent, exported.span,
        "{mode:?}: the parent id crossed NATS"
    );
    assert!(import.remote_parent, "{mode:?}");
    // Import -> remote handler, in process B.
    assert_eq!(handled.trace, place.trace, "{mode:?}");
    assert_eq!(handled.parent, import.span, "{mode:?}");
    assert!(!handled.remote_parent, "{mode:?}");

    for link in [pub_link, sub_link] {
        assert!(link.close(WAIT).await.complete, "{mode:?}");
    }
    publisher.close().await;
    subscriber.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_crosses_nats_core() {
    one_trace_from_publisher_to_remote_handler(Mode::Core, "traced-core").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_crosses_jetstream() {
    one_trace_from_publisher_to_remote_handler(Mode::JetStream, "traced-js").await;
}

/// A request answered in the other process: the requester's span, the forwarder's handler
/// span (`nats-export-requests:<topic>`), NATS, the `ringbus.import` span, the remote
/// replier's handler span: one trace, the forwarder's span id arriving as the remote parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_crosses_nats_with_a_request() {
    let spans = spans();
    let Some(server) = NatsServer::start() else {
        return;
    };
    let topic = "traced-request";
    let requester = Bus::new();
    let answerer = Bus::new();
    let replier = format!("replier-{topic}");
    let _replier = answerer
        .reply_with(
            topic,
            SubscribeOptions::new().name(replier.clone()),
            |q: &u32| {
                let q = *q;
                async move { u64::from(q) * 10 }
            },
        )
        .unwrap();
    let req_link = connect(&server, &requester).await;
    let ans_link = connect(&server, &answerer).await;
    ans_link.import_requests::<u32, u64>(topic).await.unwrap();
    req_link.export_requests::<u32, u64>(topic).await.unwrap();

    let prices = requester.topic::<Request<u32, u64>>(topic).unwrap();
    let answer = {
        let ask = tracing::info_span!("ask-price", topic);
        let ctx = Context::new().with_parent(ask.clone()).with_timeout(WAIT);
        prices.request_with(&ctx, 7).await
    };
    assert_eq!(answer.ok(), Some(70), "not answered remotely");

    let forward = format!("nats-export-requests:{topic}");
    let ask = spans.find("ask-price", "topic", topic).await;
    let forwarded = spans.find("ringbus.handle", "subscriber", &forward).await;
    let import = spans.find("ringbus.import", "topic", topic).await;
    let replied = spans.find("ringbus.handle", "subscriber", &replier).await;

    assert_eq!(forwarded.trace, ask.trace);
    assert_eq!(forwarded.parent, ask.span);
    assert_eq!(import.trace, ask.trace, "the trace id crossed NATS");
    assert_eq!(import.parent, forwarded.span, "the parent id crossed NATS");
    assert!(import.remote_parent);
    assert_eq!(replied.trace, ask.trace);
    assert_eq!(replied.parent, import.span);

    for link in [req_link, ans_link] {
        assert!(link.close(WAIT).await.complete);
    }
    requester.close().await;
    answerer.close().await;
}
