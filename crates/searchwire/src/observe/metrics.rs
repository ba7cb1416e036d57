//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (0.24), as an
//! [`Observer`]: the attempt loop only reports events; this module names and labels them.
//!
//! Installed by default when the `metrics` cargo feature is on (it is by default); switch
//! it off per client with [`ClientBuilder::metrics`](crate::ClientBuilder::metrics). Without
//! a recorder installed in the process (e.g. `metrics-exporter-prometheus`), every call is
//! a cheap no-op. The names, types and labels are listed in `docs/metrics.md`, and
//! [`NAMES`] lists them for tests and tools.

use std::sync::{Once, OnceLock};

use http::Method;
use metrics::{Key, Label, Metadata};

use crate::observe::{
    AttemptEvent, BreakerEvent, DenyReason, HealthCheckEvent, HedgeEvent, LimitEvent, NodeEvent,
    Observer, RequestEvent, RetryDeniedEvent, RetryEvent,
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

/// `searchwire_hedges_total{result}` — hedged reads: sent, won, lost, or not sent and why.
pub const HEDGES: &str = "searchwire_hedges_total";

/// `searchwire_concurrency_limit` — the adaptive concurrency limit (requests in flight).
pub const CONCURRENCY_LIMIT: &str = "searchwire_concurrency_limit";
/// `searchwire_concurrency_rejections_total` — requests refused by the adaptive limit.
pub const CONCURRENCY_REJECTIONS: &str = "searchwire_concurrency_rejections_total";

/// `db.client.operation.duration{db.system.name,db.operation.name,error.type}` —
/// OpenTelemetry's database client histogram: logical request duration in seconds.
pub const DB_OPERATION_DURATION: &str = "db.client.operation.duration";

/// Every metric name, in the order of `docs/metrics.md`.
pub const NAMES: [&str; 16] = [
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
    HEDGES,
    CONCURRENCY_LIMIT,
    CONCURRENCY_REJECTIONS,
    DB_OPERATION_DURATION,
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
    describe_gauge!(
        CONCURRENCY_LIMIT,
        "The adaptive concurrency limit: requests this client may have in flight."
    );
    describe_counter!(
        CONCURRENCY_REJECTIONS,
        "Requests refused (not sent) by the adaptive concurrency limit."
    );
    describe_histogram!(
        DB_OPERATION_DURATION,
        Unit::Seconds,
        "Duration of database client operations (OpenTelemetry's database conventions)."
    );
    describe_counter!(
        HEDGES,
        "Hedged reads: sent, won, lost, or not sent (budget, breaker, no other node)."
    );
    describe_counter!(RESURRECTIONS, "Dead nodes that came back.");
    describe_counter!(
        HEALTH_CHECKS,
        "Background health checks, by kind and result."
    );
}

/// A static label for common methods (labels are interned; arbitrary methods are `other`),
/// and its index among the [`METHODS`] labels.
fn method_slot(m: &Method) -> (usize, &'static str) {
    match *m {
        Method::GET => (0, "GET"),
        Method::POST => (1, "POST"),
        Method::PUT => (2, "PUT"),
        Method::DELETE => (3, "DELETE"),
        Method::HEAD => (4, "HEAD"),
        Method::PATCH => (5, "PATCH"),
        Method::OPTIONS => (6, "OPTIONS"),
        _ => (7, "other"),
    }
}

/// The status class label and its index among the [`STATUS_CLASSES`] labels.
fn status_slot(status: Option<http::StatusCode>) -> (usize, &'static str) {
    match status.map(|s| s.as_u16()) {
        Some(100..=199) => (0, "1xx"),
        Some(200..=299) => (1, "2xx"),
        Some(300..=399) => (2, "3xx"),
        Some(400..=499) => (3, "4xx"),
        Some(500..=599) => (4, "5xx"),
        _ => (5, "none"),
    }
}

/// The result label (`ok` or the error kind) and its index among the [`RESULTS`] labels.
fn result_slot(error: Option<crate::ErrorKind>) -> (usize, &'static str) {
    match error {
        None => (0, "ok"),
        Some(k) => (k as usize + 1, k.as_str()),
    }
}

/// The metadata the `metrics` macros would give every series of this module (target and
/// module path `searchwire::observe::metrics`, level INFO).
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Keys of one labelled metric, built on first use and then reused: the request path
/// reports with a precomputed key (its hash included) instead of allocating labels and
/// hashing them per call. Every call still goes through the recorder installed *now*
/// (global or thread-local), exactly as the `metrics` macros do.
struct Keys<const N: usize>([OnceLock<Key>; N]);

impl<const N: usize> Keys<N> {
    const fn new() -> Self {
        Keys([const { OnceLock::new() }; N])
    }

    /// Runs `f` with the key at `index`, built by `make` the first time (an index outside
    /// the table gets a key built for this call only).
    fn with<T>(&self, index: usize, make: impl FnOnce() -> Key, f: impl FnOnce(&Key) -> T) -> T {
        match self.0.get(index) {
            Some(cell) => f(cell.get_or_init(make)),
            None => f(&make()),
        }
    }
}

fn counter(key: &Key) -> metrics::Counter {
    metrics::with_recorder(|r| r.register_counter(key, &METADATA))
}

/// Label values: the methods [`method_label`] names, the status classes, the outcome kinds.
const METHODS: usize = 8;
const STATUS_CLASSES: usize = 6;
const OUTCOMES: usize = 16;
/// `ok` and every [`ErrorKind`](crate::ErrorKind) (with room to spare).
const RESULTS: usize = 24;

static ATTEMPT_KEYS: Keys<OUTCOMES> = Keys::new();
static RETRY_KEYS: Keys<OUTCOMES> = Keys::new();
static DURATION_KEYS: Keys<METHODS> = Keys::new();
/// `db.client.operation.duration` of successful requests, per (operation, system).
static DB_KEYS: Keys<{ crate::observe::semconv::OPERATIONS.len() * 2 }> = Keys::new();
static REQUEST_KEYS: Keys<{ METHODS * STATUS_CLASSES * RESULTS }> = Keys::new();

fn set_breaker_state(scope: &'static str, current: BreakerState) {
    for s in BreakerState::ALL {
        let v = if s == current { 1.0 } else { 0.0 };
        metrics::gauge!(BREAKER_STATE, "scope" => scope, "state" => s.as_str()).set(v);
    }
}

impl Observer for MetricsObserver {
    fn attempt_finished(&self, e: &AttemptEvent<'_>) {
        let outcome = e.outcome.as_str();
        ATTEMPT_KEYS.with(
            e.outcome as usize,
            || Key::from_parts(ATTEMPTS, vec![Label::from_static_parts("outcome", outcome)]),
            |key| counter(key).increment(1),
        );
    }

    fn request_finished(&self, e: &RequestEvent<'_>) {
        let (m, method) = method_slot(e.method);
        let (s, class) = status_slot(e.status);
        let (r, result) = result_slot(e.error);
        REQUEST_KEYS.with(
            (m * STATUS_CLASSES + s) * RESULTS + r,
            || {
                let labels = vec![
                    Label::from_static_parts("method", method),
                    Label::from_static_parts("status_class", class),
                    Label::from_static_parts("result", result),
                ];
                Key::from_parts(REQUESTS, labels)
            },
            |key| counter(key).increment(1),
        );
        DURATION_KEYS.with(
            m,
            || {
                Key::from_parts(
                    REQUEST_DURATION,
                    vec![Label::from_static_parts("method", method)],
                )
            },
            |key| {
                metrics::with_recorder(|r| r.register_histogram(key, &METADATA))
                    .record(e.elapsed.as_secs_f64())
            },
        );
        if e.error == Some(crate::ErrorKind::CircuitOpen) {
            metrics::counter!(BREAKER_REJECTIONS, "scope" => "cluster").increment(1);
        }
        let op = crate::observe::semconv::operation_name(e.method, e.path);
        match e.error {
            None => {
                let system = usize::from(e.system != "opensearch");
                let (system_name, i) = (e.system, crate::observe::semconv::operation_index(op));
                DB_KEYS.with(
                    i * 2 + system,
                    || {
                        Key::from_parts(
                            DB_OPERATION_DURATION,
                            vec![
                                Label::from_static_parts("db.system.name", system_name),
                                Label::from_static_parts("db.operation.name", op),
                            ],
                        )
                    },
                    |key| {
                        metrics::with_recorder(|r| r.register_histogram(key, &METADATA))
                            .record(e.elapsed.as_secs_f64())
                    },
                )
            }
            Some(k) => metrics::histogram!(
                DB_OPERATION_DURATION,
                "db.system.name" => e.system,
                "db.operation.name" => op,
                "error.type" => k.as_str()
            )
            .record(e.elapsed.as_secs_f64()),
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
        let class = e.outcome.as_str();
        RETRY_KEYS.with(
            e.outcome as usize,
            || Key::from_parts(RETRIES, vec![Label::from_static_parts("class", class)]),
            |key| counter(key).increment(1),
        );
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

    fn hedge(&self, e: &HedgeEvent<'_>) {
        metrics::counter!(HEDGES, "result" => e.result.as_str()).increment(1);
    }

    fn concurrency_limit(&self, e: &LimitEvent) {
        if e.rejected {
            metrics::counter!(CONCURRENCY_REJECTIONS).increment(1);
        } else {
            metrics::gauge!(CONCURRENCY_LIMIT).set(f64::from(e.limit));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::classify::OutcomeKind;
    use crate::ErrorKind;

    #[test]
    fn labels() {
        assert_eq!(method_slot(&Method::GET).1, "GET");
        assert_eq!(
            method_slot(&Method::from_bytes(b"PURGE").unwrap()).1,
            "other"
        );
        assert_eq!(status_slot(http::StatusCode::from_u16(503).ok()).1, "5xx");
        assert_eq!(status_slot(None).1, "none");
        assert_eq!(result_slot(Some(ErrorKind::Decode)).1, "decode");
        // Every label value has its own slot in the key tables.
        assert!((ErrorKind::Decode as usize) + 1 < RESULTS);
        assert!((OutcomeKind::TooLarge as usize) < OUTCOMES);
    }

    /// The cached keys name and label the series exactly as the `metrics` macros did
    /// (same names, same label order), through whatever recorder is installed at the call.
    #[test]
    fn cached_keys_match_the_macros() {
        let cached = PrometheusBuilder::new().build_recorder();
        let cached_out = cached.handle();
        let by_macro = PrometheusBuilder::new().build_recorder();
        let by_macro_out = by_macro.handle();
        let observer = MetricsObserver::new();
        let cases = [
            (Method::GET, Some(200), None, OutcomeKind::Success),
            (
                Method::POST,
                Some(503),
                Some(ErrorKind::Status),
                OutcomeKind::Gateway,
            ),
            (
                Method::from_bytes(b"PURGE").unwrap(),
                None,
                Some(ErrorKind::NoNodeReachable),
                OutcomeKind::Connect,
            ),
            (Method::GET, Some(200), None, OutcomeKind::Success),
        ];
        for (method, status, error, outcome) in &cases {
            let status = status.and_then(|s| http::StatusCode::from_u16(s).ok());
            let elapsed = Duration::from_millis(3);
            metrics::with_local_recorder(&cached, || {
                observer.attempt_finished(&AttemptEvent {
                    method,
                    path: "/",
                    node: "http://127.0.0.1:9200",
                    attempt: 1,
                    outcome: *outcome,
                    status,
                    elapsed,
                });
                observer.retry_scheduled(&RetryEvent {
                    method,
                    node: "http://127.0.0.1:9200",
                    attempt: 1,
                    outcome: *outcome,
                    delay: elapsed,
                    jitter_multiplier: 1.0,
                });
                observer.request_finished(&RequestEvent {
                    method,
                    status,
                    attempts: 1,
                    elapsed,
                    error: *error,
                    path: "/",
                    system: "opensearch",
                });
            });
            metrics::with_local_recorder(&by_macro, || {
                let m = method_slot(method).1;
                metrics::counter!(ATTEMPTS, "outcome" => outcome.as_str()).increment(1);
                metrics::counter!(RETRIES, "class" => outcome.as_str()).increment(1);
                metrics::counter!(
                    REQUESTS,
                    "method" => m,
                    "status_class" => status_slot(status).1,
                    "result" => error.map_or("ok", |k| k.as_str())
                )
                .increment(1);
                metrics::histogram!(REQUEST_DURATION, "method" => m).record(elapsed.as_secs_f64());
                match error {
                    None => metrics::histogram!(
                        DB_OPERATION_DURATION,
                        "db.system.name" => "opensearch",
                        "db.operation.name" => "info"
                    )
                    .record(elapsed.as_secs_f64()),
                    Some(k) => metrics::histogram!(
                        DB_OPERATION_DURATION,
                        "db.system.name" => "opensearch",
                        "db.operation.name" => "info",
                        "error.type" => k.as_str()
                    )
                    .record(elapsed.as_secs_f64()),
                }
            });
        }
        let rendered = cached_out.render();
        assert!(
            rendered.contains(
                r#"searchwire_requests_total{method="GET",status_class="2xx",result="ok"} 2"#
            ),
            "{rendered}"
        );
        assert!(rendered.contains(r#"searchwire_attempts_total{outcome="connect"} 1"#));
        // The exporter's series order follows its hash maps: compare the lines as sets.
        let lines = |s: &str| {
            let mut v: Vec<String> = s.lines().map(str::to_owned).collect();
            v.sort();
            v
        };
        assert_eq!(lines(&rendered), lines(&by_macro_out.render()));
    }
}
