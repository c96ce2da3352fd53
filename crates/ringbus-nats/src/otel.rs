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
//! - **Export.** An export is a batch handler call of the bus (a subscriber named
//!   `nats-export:<topic>`), so it runs inside a `ringbus.handle` span (one for the messages
//!   exported together, a child of the first parent given to their publishes); its OpenTelemetry
//!   context (through `tracing-opentelemetry`) is written into the message's headers with
//!   OpenTelemetry's W3C propagator (`traceparent`, and `tracestate` if any), by the encoding
//!   every engine shares (`ringbus_link::wire::encode`, see `ringbus_link::otel`). JetStream
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
//! Without the feature, [`context`] is an empty inline function; exports write the headers
//! through `ringbus_link::wire::encode`.

#[cfg(feature = "otel")]
pub(crate) use enabled::context;

#[cfg(not(feature = "otel"))]
pub(crate) use disabled::context;

#[cfg(feature = "otel")]
mod enabled {
    use async_nats::{HeaderMap, HeaderValue};
    use ringbus::Context;

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
        ringbus_link::otel::import_context(span, |name| headers?.get(name).map(HeaderValue::as_str))
    }
}

#[cfg(not(feature = "otel"))]
mod disabled {
    use async_nats::HeaderMap;
    use ringbus::Context;

    /// Without the feature `otel`: a context that changes nothing.
    #[inline(always)]
    pub(crate) fn context(_: &str, _: &str, _: Option<&HeaderMap>) -> Context {
        Context::new()
    }
}
