//! Traces from insert to run (cargo feature `opentelemetry`): an insert
//! made in a `tracing` span that carries an OpenTelemetry context (through
//! `tracing-opentelemetry`) keeps that context with the entry, as W3C
//! `traceparent` and `tracestate`; the worker's span for each run of the
//! entry, `punctual.run`, takes it as its parent. Without the feature
//! nothing is kept and the run's span has no remote parent.
//!
//! The context is kept as one line, `<traceparent>` or
//! `<traceparent> <tracestate>`, a few dozen bytes: written and read here
//! (the W3C format is short), so the library needs the OpenTelemetry API
//! and `tracing-opentelemetry`, not an SDK.

/// The context of the current span, as kept with an entry, if it has a
/// valid OpenTelemetry span context.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let context = tracing::Span::current().context();
    let span = context.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let parent = format!(
        "00-{:032x}-{:016x}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags()
    );
    let state = sc.trace_state().header();
    Some(if state.is_empty() {
        parent
    } else {
        format!("{parent} {state}")
    })
}

/// Without the feature, nothing is kept.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn current() -> Option<String> {
    None
}

/// Makes the context kept as `kept` the parent of `span`; a line that does
/// not read as one changes nothing.
#[cfg(feature = "opentelemetry")]
pub(crate) fn adopt(span: &tracing::Span, kept: &str) {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let (parent, state) = kept.split_once(' ').unwrap_or((kept, ""));
    let mut parts = parent.split('-');
    let (Some("00"), Some(trace), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return;
    };
    let (Ok(trace), Ok(span_id), Ok(flags)) = (
        TraceId::from_hex(trace),
        SpanId::from_hex(span_id),
        u8::from_str_radix(flags, 16),
    ) else {
        return;
    };
    let state = state.parse::<TraceState>().unwrap_or_default();
    let remote = SpanContext::new(trace, span_id, TraceFlags::new(flags), true, state);
    if remote.is_valid() {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
}

/// Without the feature, nothing to adopt.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn adopt(_span: &tracing::Span, _kept: &str) {}

/// The span of one run: `punctual.run`, with OpenTelemetry's messaging
/// attributes, its parent the context kept with the entry (if any).
pub(crate) fn run_span(
    store: &'static str,
    queue: &str,
    id: &str,
    attempt: u32,
    schedule: Option<&str>,
    kept: Option<&str>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "punctual.run",
        "messaging.system" = "punctual",
        "messaging.operation.name" = "process",
        "messaging.destination.name" = queue,
        "messaging.message.id" = id,
        "punctual.store" = store,
        queue,
        id,
        attempt,
        schedule = schedule.unwrap_or(""),
    );
    if let Some(kept) = kept {
        adopt(&span, kept);
    }
    span
}
