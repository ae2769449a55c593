//! Logs and traces of a long-running command (`serve`, `mcp`): the log lines on standard
//! error, and capdir's spans as OpenTelemetry spans, exported over OTLP/HTTP (protobuf) when
//! the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
//! set. Every other `OTEL_*` setting the SDK reads is honoured as it reads it: headers,
//! timeout, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_SCHEDULE_DELAY`.
//!
//! Spans are made whether or not they are exported, so a caller's `traceparent` is always
//! continued: its trace id goes into the receipts and on to bound origins. Not exporting,
//! a span is recorded only when its caller's trace is sampled, and then dropped.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithHttpConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::FilterExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The traces' provider, flushed and shut down when dropped (a command that ends sends what
/// it still holds).
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(5));
    }
}

/// Whether the environment asks for export: an endpoint is set, and neither
/// `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise.
fn export_asked(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let none = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    endpoint && !disabled && !none
}

/// The provider: with the OTLP exporter behind a batch processor when export is asked,
/// else with none. Called before any async runtime starts (the exporter's client blocks, on
/// the processor's own thread).
fn provider() -> anyhow::Result<(SdkTracerProvider, bool)> {
    let var = |name: &str| std::env::var(name).ok();
    let mut resource = opentelemetry_sdk::Resource::builder();
    if var("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("capdir");
    }
    let builder = SdkTracerProvider::builder().with_resource(resource.build());
    if !export_asked(var) {
        let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOff));
        return Ok((builder.with_sampler(sampler).build(), false));
    }
    crate::invoke::runner::http::tls_ready();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .build()?;
    let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
    let provider = builder
        .with_sampler(sampler)
        .with_batch_exporter(exporter)
        .build();
    Ok((provider, true))
}

/// Logs go to standard error (standard output is the MCP channel of `capdir mcp`), filtered
/// by `RUST_LOG` (default `info`); capdir's own spans go to OpenTelemetry whatever the log
/// filter says.
pub(super) fn init() -> anyhow::Result<Telemetry> {
    let (provider, exporting) = provider()?;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
                // Events only: a log line stays one line, not prefixed with the spans it
                // happened in (the trace has them).
                .and(tracing_subscriber::filter::filter_fn(|m| m.is_event())),
        );
    // Only capdir's spans: the HTTP client the exporter sends with makes none of them, so an
    // export cannot trace itself.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("capdir"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target("capdir", tracing::Level::INFO),
        );
    tracing_subscriber::registry().with(logs).with(spans).init();
    if exporting {
        tracing::info!("exporting traces over OTLP");
    }
    Ok(Telemetry { provider })
}

#[cfg(test)]
mod tests {
    use super::export_asked;

    #[test]
    fn export_needs_an_endpoint_and_no_opt_out() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!export_asked(env(&[])));
        assert!(!export_asked(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(export_asked(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318"
        )])));
        assert!(export_asked(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces"
        )])));
        assert!(!export_asked(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ])));
        assert!(!export_asked(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])));
    }
}
