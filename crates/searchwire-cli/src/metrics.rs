//! `--metrics-addr ADDR`: serve the client's metrics (docs/metrics.md) in Prometheus text
//! format on `http://ADDR/metrics` while the command runs.
//!
//! The recorder is `metrics-exporter-prometheus`'s; the listener is our own small hyper
//! server, because the exporter's listener answers *every* path with 200 and the metrics
//! text, so a readiness or liveness probe aimed at any path would pass. Here `GET`/`HEAD
//! /metrics` is the only thing served; every other path is 404 and every other method 405.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets of `searchwire_request_duration_seconds`: from 5 ms (a cached search on a
/// local cluster) to 30 s (the default attempt timeout).
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How often histograms are maintained (the exporter's own listener uses the same period).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// A scraper that sends nothing for this long is dropped: one stuck client must not hold a
/// connection open for the whole run.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Installs the Prometheus recorder and starts the listener on `addr` (needs a tokio
/// runtime). The error is a sentence for the user.
pub fn serve(addr: SocketAddr) -> Result<(), String> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| format!("--metrics-addr {addr}: cannot listen: {e}"))?;
    let handle = install().map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
    tokio::spawn(accept_loop(listener, handle));
    Ok(())
}

/// Installs the Prometheus recorder as the global one and keeps its histograms maintained
/// (needs a tokio runtime); returns the handle that renders the text. For commands that
/// serve `/metrics` on their own listener (`searchwire relay`).
pub fn install() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(searchwire::metrics::REQUEST_DURATION.to_string()),
            &DURATION_BUCKETS,
        )
        .map_err(|e| e.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("cannot serve metrics: {e}"))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

async fn accept_loop(listener: tokio::net::TcpListener, handle: PrometheusHandle) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors and the like: try again shortly rather than spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let handle = handle.clone();
                async move { Ok::<_, Infallible>(answer(&req, &handle)) }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            // A broken scraper connection concerns only that scraper.
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// The answer to one request: the metrics on `GET`/`HEAD /metrics`, 404 or 405 otherwise.
fn answer(req: &Request<Incoming>, handle: &PrometheusHandle) -> Response<Full<Bytes>> {
    let (status, content_type, body) = route(req.method(), req.uri().path(), || handle.render());
    let body = if req.method() == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(body)
    };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    resp
}

/// Status, content type and body for a method and path; `render` is called only for the
/// metrics path.
fn route(
    method: &Method,
    path: &str,
    render: impl FnOnce() -> String,
) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match (method, path) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            (StatusCode::OK, "text/plain; version=0.0.4", render())
        }
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET and HEAD are allowed on /metrics\n".into(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: this listener serves only /metrics\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_metrics_path_is_served() {
        let render = || "searchwire_requests_total 1\n".to_string();
        let (s, _, body) = route(&Method::GET, "/metrics", render);
        assert_eq!(
            (s, body.as_str()),
            (StatusCode::OK, "searchwire_requests_total 1\n")
        );
        assert_eq!(route(&Method::HEAD, "/metrics", render).0, StatusCode::OK);
        for path in ["/", "/health", "/ready", "/metrics/", "/metricsx"] {
            let (s, _, body) = route(&Method::GET, path, || unreachable!("rendered for {path}"));
            assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
            assert!(body.contains("only /metrics"), "{body}");
        }
        assert_eq!(
            route(&Method::POST, "/metrics", render).0,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
