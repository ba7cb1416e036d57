//! `--metrics-addr ADDR`: serve the client's metrics (docs/metrics.md) in Prometheus text
//! format on `http://ADDR/metrics` while the command runs, with
//! `metrics-exporter-prometheus`'s HTTP listener.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Buckets of `searchwire_request_duration_seconds`: from 5 ms (a cached search on a
/// local cluster) to 30 s (the default attempt timeout).
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the Prometheus recorder and starts its listener on `addr` (needs a tokio
/// runtime). The error is a sentence for the user.
pub fn serve(addr: SocketAddr) -> Result<(), String> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Full(searchwire::metrics::REQUEST_DURATION.to_string()),
            &DURATION_BUCKETS,
        )
        .map_err(|e| format!("--metrics-addr {addr}: {e}"))?
        .install()
        .map_err(|e| format!("--metrics-addr {addr}: cannot serve metrics: {e}"))
}
