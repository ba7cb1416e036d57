//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (0.24), as an
//! [`Observer`]: the attempt loop only reports events; this module names and labels them.
//!
//! Installed by default when the `metrics` cargo feature is on (it is by default); switch
//! it off per client with [`ClientBuilder::metrics`](crate::ClientBuilder::metrics). Without
//! a recorder installed in the process (e.g. `metrics-exporter-prometheus`), every call is
//! a cheap no-op. The names, types and labels are listed in `docs/metrics.md`, and
//! [`NAMES`] lists them for tests and tools.

use std::sync::Once;

use http::Method;

use crate::observe::{
    AttemptEvent, BreakerEvent, DenyReason, HealthCheckEvent, NodeEvent, Observer, RequestEvent,
    RetryDeniedEvent, RetryEvent,
};
use crate::policy::breaker::BreakerState;

/// `searchwire_requests_total{method,status_class,result}` — logical requests finished.
pub const REQUESTS: &str = "searchwire_requests_total";
/// `searchwire_request_duration_seconds{method}` — logical request duration, backoff
/// included (histogram).
pub const REQUEST_DURATION: &str = "searchwire_request_duration_seconds";
/// `searchwire_attempts_total{outcome}` — attempts by outcome kind.
pub const ATTEMPTS: &str = "searchwire_attempts_total";
/// `searchwire_retries_total{class}` — retries made, by the outcome kind that caused them.
pub const RETRIES: &str = "searchwire_retries_total";
/// `searchwire_retry_budget_denials_total` — retries not made because the budget was empty.
pub const BUDGET_DENIALS: &str = "searchwire_retry_budget_denials_total";
/// `searchwire_breaker_rejections_total{scope}` — requests refused and retries not made
/// because the breaker was not closed.
pub const BREAKER_REJECTIONS: &str = "searchwire_breaker_rejections_total";
/// `searchwire_breaker_state{scope,state}` — 1 for the current state, 0 for the others.
pub const BREAKER_STATE: &str = "searchwire_breaker_state";
/// `searchwire_breaker_transitions_total{scope,to}` — breaker state changes.
pub const BREAKER_TRANSITIONS: &str = "searchwire_breaker_transitions_total";
/// `searchwire_node_up{node}` — 1 while the node receives traffic, 0 while dead.
pub const NODE_UP: &str = "searchwire_node_up";
/// `searchwire_node_ejections_total{node}` — a node was marked dead.
pub const NODE_EJECTIONS: &str = "searchwire_node_ejections_total";
/// `searchwire_resurrections_total{node}` — a dead node came back.
pub const RESURRECTIONS: &str = "searchwire_resurrections_total";
/// `searchwire_health_checks_total{kind,result}` — background health checks.
pub const HEALTH_CHECKS: &str = "searchwire_health_checks_total";

/// Every metric name, in the order of `docs/metrics.md`.
pub const NAMES: [&str; 12] = [
    REQUESTS,
    REQUEST_DURATION,
    ATTEMPTS,
    RETRIES,
    BUDGET_DENIALS,
    BREAKER_REJECTIONS,
    BREAKER_STATE,
    BREAKER_TRANSITIONS,
    NODE_UP,
    NODE_EJECTIONS,
    RESURRECTIONS,
    HEALTH_CHECKS,
];

/// The observer that records searchwire's metrics through the `metrics` facade.
#[derive(Debug, Default)]
pub struct MetricsObserver {
    _private: (),
}

static DESCRIBE: Once = Once::new();

impl MetricsObserver {
    /// A metrics observer. The first one in the process describes the metrics to the
    /// installed recorder and reports the cluster breaker as `closed`.
    ///
    /// Series carry no per-client label: several clients in one process add up in the
    /// counters and share the breaker-state and node gauges (the last transition wins).
    pub fn new() -> MetricsObserver {
        DESCRIBE.call_once(|| {
            describe();
            set_breaker_state("cluster", BreakerState::Closed);
        });
        MetricsObserver { _private: () }
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        REQUESTS,
        "Logical requests finished, by method, status class and result."
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Duration of logical requests, every attempt and backoff included."
    );
    describe_counter!(ATTEMPTS, "Attempts, by classified outcome.");
    describe_counter!(
        RETRIES,
        "Retries made, by the outcome kind that caused them."
    );
    describe_counter!(
        BUDGET_DENIALS,
        "Retries not made because the retry budget was empty."
    );
    describe_counter!(
        BREAKER_REJECTIONS,
        "Requests refused and retries not made because a circuit breaker was not closed."
    );
    describe_gauge!(
        BREAKER_STATE,
        "1 for the breaker's current state, 0 for the others."
    );
    describe_counter!(
        BREAKER_TRANSITIONS,
        "Circuit breaker state changes, by new state."
    );
    describe_gauge!(
        NODE_UP,
        "1 while the node receives traffic, 0 while it is dead."
    );
    describe_counter!(NODE_EJECTIONS, "Nodes marked dead.");
    describe_counter!(RESURRECTIONS, "Dead nodes that came back.");
    describe_counter!(
        HEALTH_CHECKS,
        "Background health checks, by kind and result."
    );
}

/// A static label for common methods (labels are interned; arbitrary methods are `other`).
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

fn status_class(status: Option<http::StatusCode>) -> &'static str {
    match status.map(|s| s.as_u16()) {
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        _ => "none",
    }
}

fn set_breaker_state(scope: &'static str, current: BreakerState) {
    for s in BreakerState::ALL {
        let v = if s == current { 1.0 } else { 0.0 };
        metrics::gauge!(BREAKER_STATE, "scope" => scope, "state" => s.as_str()).set(v);
    }
}

impl Observer for MetricsObserver {
    fn attempt_finished(&self, e: &AttemptEvent<'_>) {
        metrics::counter!(ATTEMPTS, "outcome" => e.outcome.as_str()).increment(1);
    }

    fn request_finished(&self, e: &RequestEvent<'_>) {
        let method = method_label(e.method);
        let result = e.error.map_or("ok", |k| k.as_str());
        metrics::counter!(
            REQUESTS,
            "method" => method,
            "status_class" => status_class(e.status),
            "result" => result
        )
        .increment(1);
        metrics::histogram!(REQUEST_DURATION, "method" => method).record(e.elapsed.as_secs_f64());
        if e.error == Some(crate::ErrorKind::CircuitOpen) {
            metrics::counter!(BREAKER_REJECTIONS, "scope" => "cluster").increment(1);
        }
    }

    fn node_transition(&self, e: &NodeEvent<'_>) {
        let node = e.node.to_string();
        metrics::gauge!(NODE_UP, "node" => node.clone()).set(if e.alive { 1.0 } else { 0.0 });
        if e.alive {
            metrics::counter!(RESURRECTIONS, "node" => node).increment(1);
        } else {
            metrics::counter!(NODE_EJECTIONS, "node" => node).increment(1);
        }
    }

    fn retry_scheduled(&self, e: &RetryEvent<'_>) {
        metrics::counter!(RETRIES, "class" => e.outcome.as_str()).increment(1);
    }

    fn retry_denied(&self, e: &RetryDeniedEvent<'_>) {
        match e.reason {
            DenyReason::Budget => metrics::counter!(BUDGET_DENIALS).increment(1),
            DenyReason::Breaker => {
                metrics::counter!(BREAKER_REJECTIONS, "scope" => "cluster").increment(1)
            }
        }
    }

    fn breaker_transition(&self, e: &BreakerEvent<'_>) {
        let scope = if e.scope == "cluster" {
            "cluster"
        } else {
            "other"
        };
        set_breaker_state(scope, e.to);
        metrics::counter!(BREAKER_TRANSITIONS, "scope" => scope, "to" => e.to.as_str())
            .increment(1);
    }

    fn health_check(&self, e: &HealthCheckEvent<'_>) {
        metrics::counter!(
            HEALTH_CHECKS,
            "kind" => e.kind.to_string(),
            "result" => e.result.to_string()
        )
        .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(
            method_label(&Method::from_bytes(b"PURGE").unwrap()),
            "other"
        );
        assert_eq!(status_class(http::StatusCode::from_u16(503).ok()), "5xx");
        assert_eq!(status_class(None), "none");
    }
}
