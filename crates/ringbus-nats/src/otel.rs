//! Trace context across the link (feature `otel`): an export carries the W3C trace context
//! of the span it runs in, an import continues that trace.
//!
//! # What the trace looks like
//!
//! ```text
//! publisher's span (yours)              process A
//! └─ ringbus.handle  subscriber nats-export:<topic>
//!      │  traceparent / tracestate headers on the NATS message
//!      ▼                                 process B
//!    ringbus.import  topic, subject      (its parent is remote: the export's span)
//!    ├─ ringbus.handle  subscriber audit
//!    └─ ringbus.handle  subscriber bill
//! ```
//!
//! - **Export.** An export is a handler call of the bus (a subscriber named
//!   `nats-export:<topic>`), so it runs inside a `ringbus.handle` span; its OpenTelemetry
//!   context (through `tracing-opentelemetry`) is written into the message's headers with
//!   OpenTelemetry's W3C propagator (`traceparent`, and `tracestate` if any). JetStream
//!   re-sends carry the same headers. That span is a child of the publisher's span if the
//!   local publish gave it as the parent ([`ringbus::Context::with_parent`]); a plain
//!   `publish` starts the trace at the export.
//! - **Import.** The import task reads the headers and opens a `ringbus.import` span (`DEBUG`,
//!   target `ringbus_nats`, OpenTelemetry kind `consumer`) whose OpenTelemetry parent is the
//!   remote context, and publishes the message into the local bus with that span as the
//!   parent of its handler spans ([`ringbus::Context::with_parent`]). Each local handler
//!   call's `ringbus.handle` span, made later in its subscriber's task, is then a child of
//!   `ringbus.import`, so one trace covers publisher, NATS and remote handlers. A message
//!   without the headers (from a link without the feature, or another client) starts a
//!   trace at `ringbus.import`.
//!
//! - **Requests** (`export_requests` / `import_requests`) the same way: the forwarder that
//!   sends a request out is a handler call too, and writes its span's context into the
//!   request's headers; the answering side's `ringbus.import` span is the parent of its
//!   repliers' `ringbus.handle` spans.
//!
//! Nothing is written or read while no `tracing-opentelemetry` layer records the spans: the
//! export's span then has no valid OpenTelemetry context, and `ringbus.import` is disabled
//! (and not kept by the bus) when nobody listens at `DEBUG`.
//!
//! Without the feature, [`inject`] and [`context`] are empty inline functions.

#[cfg(feature = "otel")]
pub(crate) use enabled::{context, inject};

#[cfg(not(feature = "otel"))]
pub(crate) use disabled::{context, inject};

#[cfg(feature = "otel")]
mod enabled {
    use std::str::FromStr;

    use async_nats::{HeaderMap, HeaderName, HeaderValue};
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use ringbus::Context;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    /// Writes the trace context of the current span into `headers` (nothing if the span has
    /// no valid OpenTelemetry context).
    pub(crate) fn inject(headers: &mut HeaderMap) {
        let cx = tracing::Span::current().context();
        if !cx.span().span_context().is_valid() {
            return;
        }
        TraceContextPropagator::new().inject_context(&cx, &mut Headers(headers));
    }

    /// The context to publish an import with: its handler spans' parent is a `ringbus.import`
    /// span continuing the trace in `headers`, if any.
    pub(crate) fn context(topic: &str, subject: &str, headers: Option<&HeaderMap>) -> Context {
        let span = tracing::debug_span!(
            target: "ringbus_nats",
            "ringbus.import",
            topic,
            subject,
            otel.kind = "consumer",
        );
        if span.is_disabled() {
            return Context::new();
        }
        if let Some(headers) = headers {
            // From an empty context, not the import task's current one.
            let remote = TraceContextPropagator::new()
                .extract_with_context(&opentelemetry::Context::new(), &Extracted(headers));
            if remote.span().span_context().is_valid() {
                // Refused only without a tracing-opentelemetry layer: then no trace to join.
                let _ = span.set_parent(remote);
            }
        }
        Context::new().with_parent(span)
    }

    /// NATS headers as the propagator writes them.
    struct Headers<'a>(&'a mut HeaderMap);

    impl Injector for Headers<'_> {
        fn set(&mut self, key: &str, value: String) {
            // A propagator's names and values are valid header text; a bad one is skipped
            // rather than panicking (`HeaderMap::insert` with strings panics).
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_str(key), HeaderValue::from_str(&value))
            {
                self.0.insert(name, value);
            }
        }
    }

    /// NATS headers as the propagator reads them.
    struct Extracted<'a>(&'a HeaderMap);

    impl Extractor for Extracted<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            let name = HeaderName::from_str(key).ok()?;
            self.0.get(name).map(HeaderValue::as_str)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(name, _)| name.as_ref()).collect()
        }
    }
}

#[cfg(not(feature = "otel"))]
mod disabled {
    use async_nats::HeaderMap;
    use ringbus::Context;

    /// Without the feature `otel`: nothing.
    #[inline(always)]
    pub(crate) fn inject(_: &mut HeaderMap) {}

    /// Without the feature `otel`: a context that changes nothing.
    #[inline(always)]
    pub(crate) fn context(_: &str, _: &str, _: Option<&HeaderMap>) -> Context {
        Context::new()
    }
}
