//! OpenTelemetry: W3C trace context read from a request and written into one, and the trace
//! id a receipt carries, all from the `tracing` span in place. The spans themselves are
//! `tracing` spans (a request's in `serve/`, a call's in `dispatch/`, a nested call's and a
//! runner request's in `invoke/`); `cli` installs the layer that makes them OpenTelemetry
//! spans and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, exports them (`cli/otel.rs`).
//!
//! Without that layer (a library caller, a test) every span has an invalid context: nothing
//! is read or written, and receipts get trace ids of their own.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Make `span` a child of the trace a caller's `traceparent` (and `tracestate`) names; a
/// header missing or malformed leaves it the root of a trace of its own. Whoever calls may
/// name any trace: the id only groups spans and receipts, it grants nothing.
pub fn adopt(span: &tracing::Span, headers: &http::HeaderMap) {
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // Err only when no OpenTelemetry layer is installed, where there is nothing to join.
        let _ = span.set_parent(parent);
    }
}

/// Write `span`'s trace context into `headers` as `traceparent` (and `tracestate`), so the
/// server it goes to continues the trace. Any `traceparent` already there is replaced.
pub fn propagate(span: &tracing::Span, headers: &mut http::HeaderMap) {
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

/// `span`'s trace id as 32 lowercase hex digits (a receipt's `trace_id`), when it has one.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_layer_nothing_is_read_or_written() {
        let span = tracing::info_span!("t");
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        adopt(&span, &headers);
        assert_eq!(trace_id(&span), None);
        let mut out = http::HeaderMap::new();
        propagate(&span, &mut out);
        assert!(out.is_empty());
    }
}
