//! For engines: trace context across a link (feature `otel`; without it, these do nothing).
//!
//! An export is a handler call of the bus, so it runs inside a `ringbus.handle` span; its
//! OpenTelemetry context (through `tracing-opentelemetry`) goes into the message's headers
//! with the W3C propagator (`traceparent`, and `tracestate` if any): [`inject`], which
//! `wire::encode` calls, so every engine's exports carry it. An import opens a
//! `ringbus.import` span whose OpenTelemetry parent is that remote context
//! ([`continue_trace`]) and publishes into the bus with it as the parent of the local handler
//! spans, so one trace covers the publisher, the broker and the remote handlers.
//!
//! Every engine's export is a batch handler: one `ringbus.handle` span covers the messages
//! exported together, and it is a child of the first parent given to their publishes. So
//! messages published with different parents that are exported in one batch all carry the
//! first one's trace context.
//!
//! Nothing is written or read while no `tracing-opentelemetry` layer records the spans: the
//! export's span then has no valid OpenTelemetry context.

use ringbus::Context;

#[cfg(feature = "otel")]
pub use enabled::{continue_trace, inject};

#[cfg(not(feature = "otel"))]
pub use disabled::{continue_trace, inject};

/// The context an import publishes a message with: `span` (the engine's `ringbus.import`
/// span) as the parent of the local handler spans, continuing the trace that `get` reads from
/// the message's headers; a plain context when `span` is disabled (nobody listens at its
/// level), so an import pays for a span only when one is recorded.
pub fn import_context<'a>(span: tracing::Span, get: impl Fn(&str) -> Option<&'a str>) -> Context {
    if span.is_disabled() {
        return Context::new();
    }
    continue_trace(&span, get);
    Context::new().with_parent(span)
}

#[cfg(feature = "otel")]
mod enabled {
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    /// Writes the trace context of the current span with `set(name, value)` (nothing if the
    /// span has no valid OpenTelemetry context).
    pub fn inject(mut set: impl FnMut(&str, &str)) {
        let cx = tracing::Span::current().context();
        if !cx.span().span_context().is_valid() {
            return;
        }
        TraceContextPropagator::new().inject_context(&cx, &mut Setter(&mut set));
    }

    /// Makes the trace context that `get(name)` reads the OpenTelemetry parent of `span`, if
    /// there is a valid one.
    pub fn continue_trace<'a>(span: &tracing::Span, get: impl Fn(&str) -> Option<&'a str>) {
        let found = Found(
            ["traceparent", "tracestate"]
                .into_iter()
                .filter_map(|name| Some((name, get(name)?.to_string())))
                .collect(),
        );
        // From an empty context, not the import task's current one.
        let remote = TraceContextPropagator::new()
            .extract_with_context(&opentelemetry::Context::new(), &found);
        if remote.span().span_context().is_valid() {
            // Refused only without a tracing-opentelemetry layer: then no trace to join.
            let _ = span.set_parent(remote);
        }
    }

    struct Setter<'s, F>(&'s mut F);

    impl<F: FnMut(&str, &str)> Injector for Setter<'_, F> {
        fn set(&mut self, key: &str, value: String) {
            (self.0)(key, &value);
        }
    }

    /// The W3C propagator's two headers, as the message carried them.
    struct Found(Vec<(&'static str, String)>);

    impl Extractor for Found {
        fn get(&self, key: &str) -> Option<&str> {
            self.0
                .iter()
                .find(|(name, _)| *name == key)
                .map(|(_, v)| v.as_str())
        }

        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(name, _)| *name).collect()
        }
    }
}

#[cfg(not(feature = "otel"))]
mod disabled {
    /// Without the feature `otel`: nothing.
    #[inline]
    pub fn inject(_: impl FnMut(&str, &str)) {}

    /// Without the feature `otel`: nothing.
    #[inline]
    pub fn continue_trace<'a>(_: &tracing::Span, _: impl Fn(&str) -> Option<&'a str>) {}
}
