//! Hooks for observers (metrics, tests, custom logging). The transport loop reports every
//! attempt, every retry (made or denied), every finished request, every node transition and
//! every breaker transition here; it never depends on what an observer does with them.
//!
//! The built-in metrics (`metrics` feature, on by default) are one such observer
//! ([`crate::observe::metrics::MetricsObserver`]); a user's observer set with
//! [`ClientBuilder::observer`](crate::ClientBuilder::observer) receives the same events
//! alongside it.
//!
//! **For background checkers** (health checks, resurrection probes, discovery): report each
//! check with [`Observer::health_check`] through the client's observer
//! (`health::reported` wraps a check and does it), with a short stable `kind`
//! (`"resurrection"`, `"discovery"`, `"periodic"`, `"check_all"`) and `result`
//! (`"healthy"`, `"unhealthy"`, `"unreachable"`, `"auth_rejected"`); the metrics observer
//! turns it into `searchwire_health_checks_total{kind,result}` (see `docs/metrics.md`).

use std::time::Duration;

use http::{Method, StatusCode};

use std::sync::Arc;

use crate::classify::OutcomeKind;
use crate::message::error::ErrorKind;
use crate::policy::breaker::BreakerState;

/// One finished attempt.
#[derive(Debug)]
#[non_exhaustive]
pub struct AttemptEvent<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's path.
    pub path: &'a str,
    /// The node's URL.
    pub node: &'a str,
    /// 1-based attempt number.
    pub attempt: u32,
    /// The classified outcome.
    pub outcome: OutcomeKind,
    /// The HTTP status, when the node answered.
    pub status: Option<StatusCode>,
    /// How long the attempt took.
    pub elapsed: Duration,
}

/// One finished logical request.
#[derive(Debug)]
#[non_exhaustive]
pub struct RequestEvent<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The final status, when a node answered.
    pub status: Option<StatusCode>,
    /// Attempts made.
    pub attempts: u32,
    /// Total time including backoff.
    pub elapsed: Duration,
    /// The error kind, when the request failed.
    pub error: Option<ErrorKind>,
    /// The request's path, as given (the `db.operation.name` is read from it).
    pub path: &'a str,
    /// `opensearch` or `elasticsearch` (`db.system.name`), as the last health check said.
    pub system: &'static str,
}

/// A node changed state.
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeEvent<'a> {
    /// The node's URL.
    pub node: &'a str,
    /// Whether it is now alive.
    pub alive: bool,
    /// Consecutive failures (0 when it came back).
    pub failures: u32,
    /// Why.
    pub reason: &'a str,
}

/// A retry is about to be made (after `delay`).
#[derive(Debug)]
#[non_exhaustive]
pub struct RetryEvent<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The node of the attempt that failed.
    pub node: &'a str,
    /// The 1-based number of the attempt that failed.
    pub attempt: u32,
    /// Its outcome: the class of the retry.
    pub outcome: OutcomeKind,
    /// The backoff before the retry (a server's `Retry-After` or the backoff policy's).
    pub delay: Duration,
    /// The adaptive jitter multiplier applied to the delay (1.0 for `Retry-After`).
    pub jitter_multiplier: f64,
}

/// Why a retry the retry policy allowed was not made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyReason {
    /// The client's retry budget was exhausted.
    Budget,
    /// The cluster circuit breaker is not closed.
    Breaker,
}

impl DenyReason {
    /// `budget` or `breaker`.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::Budget => "budget",
            DenyReason::Breaker => "breaker",
        }
    }
}

/// A retry the retry policy allowed was not made.
#[derive(Debug)]
#[non_exhaustive]
pub struct RetryDeniedEvent<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The outcome of the last attempt (the one that would have been retried).
    pub outcome: OutcomeKind,
    /// Why.
    pub reason: DenyReason,
}

/// What became of a hedge (see [`Hedging`](crate::Hedging)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HedgeResult {
    /// The hedge was sent (a second attempt to another node).
    Sent,
    /// The hedge answered first; the first attempt was cancelled.
    Won,
    /// The first attempt answered first; the hedge was cancelled.
    Lost,
    /// Not sent: the hedge budget or the retry budget is spent.
    DeniedBudget,
    /// Not sent: the cluster breaker is not closed.
    DeniedBreaker,
    /// Not sent: no other node could take it.
    NoNode,
}

impl HedgeResult {
    /// `sent`, `won`, `lost`, `denied_budget`, `denied_breaker` or `no_node`.
    pub fn as_str(self) -> &'static str {
        match self {
            HedgeResult::Sent => "sent",
            HedgeResult::Won => "won",
            HedgeResult::Lost => "lost",
            HedgeResult::DeniedBudget => "denied_budget",
            HedgeResult::DeniedBreaker => "denied_breaker",
            HedgeResult::NoNode => "no_node",
        }
    }
}

/// A hedge was sent, denied, or its race ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct HedgeEvent<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// What happened.
    pub result: HedgeResult,
    /// The hedge delay that had passed.
    pub delay: Duration,
}

/// The adaptive concurrency limit changed, or refused a request.
#[derive(Debug)]
#[non_exhaustive]
pub struct LimitEvent {
    /// The limit now (requests in flight).
    pub limit: u32,
    /// Requests in flight now.
    pub in_flight: u32,
    /// Whether a request was refused (else the limit changed).
    pub rejected: bool,
}

/// A circuit breaker changed state.
#[derive(Debug)]
#[non_exhaustive]
pub struct BreakerEvent<'a> {
    /// `cluster` for the cluster breaker.
    pub scope: &'a str,
    /// The state before.
    pub from: BreakerState,
    /// The state now.
    pub to: BreakerState,
    /// Why, in words.
    pub reason: &'a str,
}

/// A background health check finished (resurrection, periodic health, discovery).
#[derive(Debug)]
#[non_exhaustive]
pub struct HealthCheckEvent<'a> {
    /// The node's URL.
    pub node: &'a str,
    /// What kind of check: `resurrection`, `periodic`, `discovery`, ...
    pub kind: &'a str,
    /// Its result: `healthy`, `unhealthy`, `unreachable`, `auth_rejected`, ...
    pub result: &'a str,
    /// How long it took.
    pub elapsed: Duration,
}

impl<'a> HealthCheckEvent<'a> {
    /// An event (the struct is `#[non_exhaustive]`, so other crates build it here).
    pub fn new(node: &'a str, kind: &'a str, result: &'a str, elapsed: Duration) -> Self {
        HealthCheckEvent {
            node,
            kind,
            result,
            elapsed,
        }
    }
}

/// Receives events from the client. Every method has an empty default; implement what
/// you need. Called inline on the request path: keep it cheap and never block.
pub trait Observer: Send + Sync + 'static {
    /// An attempt finished.
    fn attempt_finished(&self, _event: &AttemptEvent<'_>) {}
    /// A logical request finished (successfully or not).
    fn request_finished(&self, _event: &RequestEvent<'_>) {}
    /// A node was marked dead or came back.
    fn node_transition(&self, _event: &NodeEvent<'_>) {}
    /// A retry is about to be made.
    fn retry_scheduled(&self, _event: &RetryEvent<'_>) {}
    /// A retry was not made because of the budget or the breaker.
    fn retry_denied(&self, _event: &RetryDeniedEvent<'_>) {}
    /// A circuit breaker changed state.
    fn breaker_transition(&self, _event: &BreakerEvent<'_>) {}
    /// A background health check finished.
    fn health_check(&self, _event: &HealthCheckEvent<'_>) {}
    /// A hedge was sent or denied, or its race ended.
    fn hedge(&self, _event: &HedgeEvent<'_>) {}
    /// The adaptive concurrency limit changed or refused a request.
    fn concurrency_limit(&self, _event: &LimitEvent) {}
}

/// The observer that ignores everything.
#[derive(Debug, Default)]
pub(crate) struct NoopObserver;

impl Observer for NoopObserver {}

/// Several observers, each receiving every event in order.
pub(crate) struct Fanout(pub(crate) Vec<Arc<dyn Observer>>);

impl Observer for Fanout {
    fn attempt_finished(&self, e: &AttemptEvent<'_>) {
        self.0.iter().for_each(|o| o.attempt_finished(e));
    }
    fn request_finished(&self, e: &RequestEvent<'_>) {
        self.0.iter().for_each(|o| o.request_finished(e));
    }
    fn node_transition(&self, e: &NodeEvent<'_>) {
        self.0.iter().for_each(|o| o.node_transition(e));
    }
    fn retry_scheduled(&self, e: &RetryEvent<'_>) {
        self.0.iter().for_each(|o| o.retry_scheduled(e));
    }
    fn retry_denied(&self, e: &RetryDeniedEvent<'_>) {
        self.0.iter().for_each(|o| o.retry_denied(e));
    }
    fn breaker_transition(&self, e: &BreakerEvent<'_>) {
        self.0.iter().for_each(|o| o.breaker_transition(e));
    }
    fn health_check(&self, e: &HealthCheckEvent<'_>) {
        self.0.iter().for_each(|o| o.health_check(e));
    }
    fn hedge(&self, e: &HedgeEvent<'_>) {
        self.0.iter().for_each(|o| o.hedge(e));
    }
    fn concurrency_limit(&self, e: &LimitEvent) {
        self.0.iter().for_each(|o| o.concurrency_limit(e));
    }
}

/// The client's observer: the built-in metrics (when the feature is on and not switched
/// off) and the user's, in that order.
pub(crate) fn assemble(user: Option<Arc<dyn Observer>>, metrics: bool) -> Arc<dyn Observer> {
    let mut all: Vec<Arc<dyn Observer>> = Vec::new();
    #[cfg(feature = "metrics")]
    if metrics {
        all.push(Arc::new(crate::observe::metrics::MetricsObserver::new()));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = metrics;
    if let Some(u) = user {
        all.push(u);
    }
    match all.len() {
        0 => Arc::new(NoopObserver),
        1 => all.pop().unwrap_or_else(|| Arc::new(NoopObserver)),
        _ => Arc::new(Fanout(all)),
    }
}

pub(crate) mod context;
#[cfg(feature = "metrics")]
pub mod metrics;
pub(crate) mod semconv;
