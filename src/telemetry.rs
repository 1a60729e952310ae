//! Logs and traces. Logs go to stderr (`WORK_LEDGER_LOG`); when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
//! set, the spans (one per HTTP request, one per ledger operation: see
//! [`crate::graphql::operation_metrics`]) are also exported over OTLP/HTTP
//! (protobuf) by a batch processor; otherwise no exporter exists and spans
//! cost what `tracing` spans cost. The standard `OTEL_*` variables apply
//! (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`).

use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Keeps the exporter alive; dropping it flushes the spans still queued.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("warning: traces not flushed: {err}");
        }
    }
}

/// True when the environment asks for OTLP export.
pub fn otlp_configured() -> bool {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|var| std::env::var(var).is_ok_and(|v| !v.trim().is_empty()))
}

/// Installs the global subscriber: stderr logs (at `info` for the service,
/// `warn` for a `quiet` one-shot command, unless `WORK_LEDGER_LOG` is set),
/// and OTLP export when configured. A broken OTLP configuration is reported
/// and the service runs without export rather than not at all.
pub fn init(quiet: bool) -> Telemetry {
    let default = if quiet { "warn" } else { "info,sqlx=warn" };
    let filter = || EnvFilter::try_from_env("WORK_LEDGER_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter());
    let provider = if otlp_configured() {
        match exporter() {
            Ok(exporter) => Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(Resource::builder().with_service_name(service_name()).build())
                    .build(),
            ),
            Err(err) => {
                eprintln!("warning: OTLP export is off: {err}");
                None
            }
        }
    } else {
        None
    };
    // Only this crate's spans are exported (not sqlx's or hyper's).
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("work-ledger"))
            .with_filter(EnvFilter::new("off,work_ledger=info"))
    });
    tracing_subscriber::registry().with(logs).with(traces).init();
    Telemetry { provider }
}

use tracing_subscriber::Layer as _;

fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "work-ledger".to_owned())
}

fn exporter() -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let client = Exporter { client: reqwest::Client::new(), runtime: tokio::runtime::Handle::try_current().ok() };
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(Duration::from_secs(10))
        .with_http_client(client)
        .build()
}

/// The trace id of the current span as 32 hex digits, when spans are exported.
pub fn current_trace_id() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| span_context.trace_id().to_string())
}

/// The OTLP exporter's HTTP client: the service's reqwest (rustls), run on
/// the service's tokio runtime (the batch processor exports from a thread
/// of its own, outside any runtime).
#[derive(Debug)]
struct Exporter {
    client: reqwest::Client,
    runtime: Option<tokio::runtime::Handle>,
}

#[async_graphql::async_trait::async_trait]
impl HttpClient for Exporter {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let send = async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .timeout(Duration::from_secs(10))
                .send()
                .await?;
            let mut out = Response::builder().status(response.status().as_u16());
            for (name, value) in response.headers() {
                out = out.header(name.as_str(), value.as_bytes());
            }
            let body = response.bytes().await?;
            Ok::<_, HttpError>(out.body(body)?)
        };
        match &self.runtime {
            Some(runtime) => runtime.spawn(send).await?,
            None => Err("no tokio runtime to send the spans on".into()),
        }
    }
}
