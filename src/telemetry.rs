//! Tracing output: human-readable or JSON lines on stderr, filtered by `RUST_LOG`; and, when
//! the standard `OTEL_*` variables name an OTLP endpoint, spans exported over OTLP/HTTP
//! (`http/protobuf` or `http/json` per `OTEL_EXPORTER_OTLP_PROTOCOL`).
//!
//! Spans: one per HTTP request (`METHOD /route`), one per invocation (the skill's name) and one
//! per chain entry (the middleware's name); the name is the `otel.name` field.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Keeps the exporter alive; [`Telemetry::shutdown`] flushes the spans not yet sent.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Whether spans are exported (OTLP is configured and its exporter started).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The W3C trace id (32 hex digits) of the current span while spans are exported, so a record
/// can name the trace an operator finds in the tracing backend.
pub fn trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !EXPORTING.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let context = tracing::Span::current().context();
    let span = context.span();
    let span = span.span_context();
    span.is_valid().then(|| span.trace_id().to_string())
}

/// Where the per-invocation and per-entry spans come from.
const KERNEL_SPANS: &str = "skillgate::kernel";

/// True when the environment asks for OTLP export.
pub fn otlp_requested() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.eq_ignore_ascii_case("none"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The log filter `serve` starts with when `RUST_LOG` is unset: what it does at info (its
/// addresses, its skills), everything else at warn. The benchmarks install it too, so they
/// measure the subscriber a server runs with.
pub const SERVE_FILTER: &str = "warn,skillgate::cli=info";

/// Installs the global subscriber. `default_filter` applies when `RUST_LOG` is unset.
/// Call outside any async runtime (the OTLP client runs its own).
pub fn init(format: LogFormat, default_filter: &str) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    let mut errors = Vec::new();
    let provider = if otlp_requested() {
        // The exporter's HTTP client needs the process's TLS provider.
        crate::tls::install();
        match opentelemetry_otlp::SpanExporter::builder().build() {
            Ok(exporter) => {
                let service =
                    std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "skillgate".into());
                let resource = Resource::builder().with_service_name(service).build();
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(resource)
                        .build(),
                )
            }
            Err(err) => {
                errors.push(format!("OTLP export is off: {err}"));
                None
            }
        }
    } else {
        None
    };
    let otel = provider.as_ref().map(|p| {
        // The spans per invocation and per chain entry are debug-level (off in the log
        // output); traces include them.
        let filter = std::env::var("SKILLGATE_OTEL_FILTER")
            .unwrap_or_else(|_| format!("info,{}=debug", KERNEL_SPANS));
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("skillgate"))
            .with_filter(EnvFilter::new(filter))
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    for error in errors {
        tracing::warn!("{error}");
    }
    EXPORTING.store(provider.is_some(), std::sync::atomic::Ordering::Relaxed);
    Telemetry { provider }
}

impl Telemetry {
    /// Flushes and stops the exporter (blocks; call outside the runtime).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(err) = provider.shutdown()
        {
            eprintln!("warning: could not flush traces: {err}");
        }
    }
}
