//! One attempt of a request, as a response or an error reports it.

use std::time::Duration;

use http::StatusCode;

use crate::classify::OutcomeKind;

/// One attempt of a request: where it went, what happened, how long it took, and how long
/// the client slept before the next one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// 1-based attempt number.
    pub number: u32,
    /// The node's URL, without credentials.
    pub node: std::sync::Arc<str>,
    /// The classified outcome.
    pub outcome: OutcomeKind,
    /// The HTTP status, when the node answered.
    pub status: Option<StatusCode>,
    /// Time from sending to the classified outcome (including reading the body).
    pub elapsed: Duration,
    /// The backoff slept after this attempt before the next one (zero for the last).
    pub backoff: Duration,
    /// A short description of a transport failure (never contains credentials).
    pub detail: Option<String>,
}

impl Attempt {
    /// The outcome as printed by `--trace-attempts`: `ok`, `status:503`, `connect`,
    /// `reset`, `timeout` or `cancelled`.
    pub fn outcome_label(&self) -> String {
        match (self.outcome, self.status) {
            (OutcomeKind::Success, _) => "ok".to_string(),
            (_, Some(s)) => format!("status:{}", s.as_u16()),
            (k, None) => k.as_str().to_string(),
        }
    }
}
