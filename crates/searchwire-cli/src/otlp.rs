//! `--otlp-endpoint URL` (cargo feature `otlp`): export the client's tracing spans over
//! OTLP/HTTP. The spans follow OpenTelemetry's conventions for database clients
//! (`db.system`, `server.address`, `http.request.method`, `http.response.status_code`,
//! `http.request.resend_count`); see docs/metrics.md.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The exporting layer and its provider (shut it down before exiting to flush spans).
pub fn layer<S>(endpoint: &str) -> Result<(impl Layer<S>, SdkTracerProvider), String>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| format!("--otlp-endpoint {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("searchwire")
                .build(),
        )
        .build();
    let tracer = provider.tracer("searchwire");
    Ok((tracing_opentelemetry::layer().with_tracer(tracer), provider))
}
