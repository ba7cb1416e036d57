//! Hooks for observers (metrics, tests, custom logging). The transport loop reports every
//! attempt, every finished request and every node transition here; it never depends on
//! what an observer does with them.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::classify::OutcomeKind;
use crate::error::ErrorKind;

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

/// Receives events from the client. Every method has an empty default; implement what
/// you need. Called inline on the request path: keep it cheap and never block.
pub trait Observer: Send + Sync + 'static {
    /// An attempt finished.
    fn attempt_finished(&self, _event: &AttemptEvent<'_>) {}
    /// A logical request finished (successfully or not).
    fn request_finished(&self, _event: &RequestEvent<'_>) {}
    /// A node was marked dead or came back.
    fn node_transition(&self, _event: &NodeEvent<'_>) {}
}

/// The observer that ignores everything.
#[derive(Debug, Default)]
pub(crate) struct NoopObserver;

impl Observer for NoopObserver {}
