//! The trace context crosses every engine (feature `otel`): a message published under a span
//! is exported inside a `ringbus.handle` span that is that span's child, arrives with the
//! export's span id as the remote parent of the import's `ringbus.import` span, and the
//! remote handler's span is the import's child: one trace from publisher to remote handler,
//! over NATS core, JetStream, Redis and RabbitMQ alike. The same for a request answered over
//! NATS (`export_requests` / `import_requests`).
//!
//! Spans are recorded by one OpenTelemetry tracer provider through `tracing-opentelemetry`,
//! installed once as the global default of this test binary; each transport's spans are
//! found by the trace its publisher's span started. Run with
//! `cargo test -p ringbus-conformance --features otel --test otel`.

#[path = "links/pair.rs"]
#[allow(dead_code, unused_imports)]
mod pair;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use pair::{item, Kind, Msg, Pair, TOPIC, WAIT};
use ringbus::{Bus, Context, Request, SubscribeOptions};
use ringbus_nats::testing::NatsServer;
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt;

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

/// The ids of a recorded span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ids {
    trace: TraceId,
    span: SpanId,
    parent: SpanId,
    remote_parent: bool,
}

impl Collect {
    /// The one span named `name` of the trace `trace` (any, if `None`) whose attribute `key`
    /// ends with `value`, once it has ended.
    async fn find(&self, trace: Option<TraceId>, name: &str, key: &str, value: &str) -> Ids {
        let look = || {
            let spans = self.0.lock().unwrap();
            let found: Vec<Ids> = spans
                .iter()
                .filter(|s| s.name == name)
                .filter(|s| trace.is_none_or(|t| s.span_context.trace_id() == t))
                .filter(|s| {
                    s.attributes
                        .iter()
                        .any(|kv| kv.key.as_str() == key && kv.value.to_string().ends_with(value))
                })
                .map(|s| Ids {
                    trace: s.span_context.trace_id(),
                    span: s.span_context.span_id(),
                    parent: s.parent_span_id,
                    remote_parent: s.parent_span_is_remote,
                })
                .collect();
            assert!(found.len() <= 1, "{name} {key}=..{value}: {found:?}");
            found.first().copied()
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(ids) = look() {
                return ids;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {name} with {key}=..{value} ended within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_publisher_to_remote_handler_over_every_engine() {
    let spans = spans();
    for kind in [Kind::Core, Kind::JetStream, Kind::Redis, Kind::RabbitMq] {
        let Some(pair) = Pair::new(kind).await else {
            continue;
        };
        let remote = format!("remote-{kind:?}");
        let (tx, mut handled) = mpsc::unbounded_channel();
        let _remote = pair
            .subscriber
            .subscribe_with(
                TOPIC,
                SubscribeOptions::new().name(remote.clone()),
                move |m: &Msg| {
                    let _ = tx.send(m.body().n);
                    async {}
                },
            )
            .unwrap();
        let place = format!("place-{kind:?}");
        {
            // The publisher's own span, the parent of the export's handler span.
            let span = tracing::info_span!("place-order", kind = %place);
            let ctx = Context::new().with_parent(span);
            pair.publisher
                .publish_with(&ctx, TOPIC, item(7))
                .await
                .unwrap();
        }
        let got = tokio::time::timeout(WAIT, handled.recv()).await;
        assert_eq!(
            got.ok().flatten(),
            Some(7),
            "{kind:?}: not handled remotely"
        );

        let placed = spans.find(None, "place-order", "kind", &place).await;
        let trace = Some(placed.trace);
        let exported = spans
            .find(trace, "ringbus.handle", "subscriber", "-export:items")
            .await;
        let import = spans.find(trace, "ringbus.import", "topic", TOPIC).await;
        let handled = spans
            .find(trace, "ringbus.handle", "subscriber", &remote)
            .await;
        // Publisher -> export, in the publishing process.
        assert_eq!(exported.parent, placed.span, "{kind:?}");
        // Across the broker: the export's span id is the import's remote parent, intact.
        assert_eq!(
            import.parent, exported.span,
            "{kind:?}: the parent id crossed"
        );
        assert!(import.remote_parent, "{kind:?}");
        // Import -> remote handler, in the importing process.
        assert_eq!(handled.parent, import.span, "{kind:?}");
        assert!(!handled.remote_parent, "{kind:?}");
        let mut pair = pair.close().await;
        pair.close_subscriber().await;
    }
}

async fn nats_link(server: &NatsServer, bus: &Bus) -> ringbus_nats::Link {
    ringbus_nats::Link::builder(server.url())
        .prefix("otel")
        .connect(bus)
        .await
        .unwrap()
}

/// A request answered in the other process: the requester's span, the forwarder's handler
/// span (`nats-export-requests:<topic>`), NATS, the `ringbus.import` span, the remote
/// replier's handler span: one trace, the forwarder's span id arriving as the remote parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_requester_to_remote_replier_over_nats() {
    let spans = spans();
    let Some(server) = NatsServer::start() else {
        return;
    };
    let topic = "traced-request";
    let (requester, answerer) = (Bus::new(), Bus::new());
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
    let req_link = nats_link(&server, &requester).await;
    let ans_link = nats_link(&server, &answerer).await;
    ans_link.import_requests::<u32, u64>(topic).await.unwrap();
    req_link.export_requests::<u32, u64>(topic).await.unwrap();

    let prices = requester.topic::<Request<u32, u64>>(topic).unwrap();
    let answer = {
        let ask = tracing::info_span!("ask-price", kind = topic);
        let ctx = Context::new().with_parent(ask.clone()).with_timeout(WAIT);
        prices.request_with(&ctx, 7).await
    };
    assert_eq!(answer.ok(), Some(70), "not answered remotely");

    let ask = spans.find(None, "ask-price", "kind", topic).await;
    let trace = Some(ask.trace);
    let forward = format!("nats-export-requests:{topic}");
    let forwarded = spans
        .find(trace, "ringbus.handle", "subscriber", &forward)
        .await;
    let import = spans.find(trace, "ringbus.import", "topic", topic).await;
    let replied = spans
        .find(trace, "ringbus.handle", "subscriber", &replier)
        .await;
    assert_eq!(forwarded.parent, ask.span);
    assert_eq!(import.parent, forwarded.span, "the parent id crossed NATS");
    assert!(import.remote_parent);
    assert_eq!(replied.parent, import.span);

    for link in [req_link, ans_link] {
        assert!(link.close(WAIT).await.complete);
    }
    requester.close().await;
    answerer.close().await;
}
