//! The error a caller sees when a request fails: what happened and what to do.

use std::time::Duration;

use crate::classify::OutcomeKind;
use crate::classify::{error_reason, Rejection};
use crate::echo::cut;
use crate::message::error::{Attempt, Error, ErrorKind};
use crate::message::request::Request;
use crate::message::response::{Attempts, Response};
use crate::nodes::pool::PoolNode;
use crate::policy::retry::NoRetry;
use crate::transport::run::AttemptResult;

/// The note of a retry refused because the cluster breaker is open.
pub(super) const BREAKER_NOTE: &str =
    "not retried: the cluster circuit breaker is open (most recent attempts failed)";

/// The error of a request the cluster breaker refused before anything was sent.
pub(super) fn circuit_open_error(request: &Request, reason: &str, retry_in: Duration) -> Error {
    let when = if retry_in.is_zero() {
        "probes are in flight".to_string()
    } else {
        format!(
            "the next probe may go in {}",
            crate::clock::duration::format_duration(retry_in)
        )
    };
    Error::new(
        ErrorKind::CircuitOpen,
        format!(
            "the cluster circuit breaker is open ({reason}); {} {} was refused without being sent — {when}",
            cut(request.method.as_str()), cut(&request.path)
        ),
    )
}

/// The error of a request whose attempt timed out on a node that then answered its
/// liveness check: the node is alive, the request is slow. Not retried elsewhere (it
/// would be as slow there, and the cluster would do the work twice).
pub(super) fn slow_request_error(
    request: &Request,
    node: &PoolNode,
    result: AttemptResult,
    attempts: Vec<Attempt>,
    attempt_timeout: Duration,
) -> Error {
    let t = crate::clock::duration::format_duration(attempt_timeout);
    let mut err = Error::new(
        ErrorKind::AttemptTimeout,
        format!(
            "{} {} timed out after the attempt timeout of {t} on node {}, which is alive (it answered a liveness check right after), so the node was not marked dead and the request was not repeated on another node (it would be as slow there) — if the request is legitimately slow (a _reindex, _forcemerge, a large search, a wait_for_* parameter), give it a longer attempt timeout: Request::attempt_timeout, or --attempt-timeout in the CLI",
            cut(request.method.as_str()), cut(&request.path), node.addr
        ),
    )
    .with_attempts(attempts);
    if let Some(source) = result.source {
        err = err.with_source(source);
    }
    err
}

/// Turns the last attempt into the error the caller sees, with a message that says what
/// happened and what to do.
pub(super) fn final_error(
    request: &Request,
    node: &PoolNode,
    result: AttemptResult,
    attempts: Vec<Attempt>,
    why: NoRetry,
    note: Option<String>,
) -> Error {
    let n = attempts.len();
    let what = format!("{} {}", cut(request.method.as_str()), cut(&request.path));
    let suffix = match (why, &note) {
        (_, Some(note)) => format!("; {note}"),
        (NoRetry::NotIdempotent, None) => format!(
            "; not retried because {what} may have been processed and is not idempotent (mark it with Request::idempotent(true) if it is safe to repeat)"
        ),
        (NoRetry::Exhausted, None) if n > 1 => format!("; gave up after {n} attempts"),
        _ => String::new(),
    };
    let (kind, message) = match (&result.raw, result.kind) {
        (Some(raw), OutcomeKind::Auth) => {
            let reason = error_reason(&raw.body);
            if result.rejection == Some(Rejection::Credentials) {
                (ErrorKind::Auth, format!(
                    "node {} rejected the credentials (401) for {what} — check the username/password or token; the node is reachable and was not marked dead",
                    node.addr
                ))
            } else if result.rejection == Some(Rejection::ClusterBlock) {
                // The credentials were accepted; the cluster refuses writes. Not an auth
                // problem for the operator to fix in the client's configuration.
                (ErrorKind::Status, format!(
                    "node {} refused {what} because of a cluster block (403: {}) — the cluster or index is read-only or blocked, e.g. by a full disk; the node is reachable and was not marked dead",
                    node.addr,
                    reason.unwrap_or_default()
                ))
            } else {
                (ErrorKind::Auth, format!(
                    "node {} denied permission (403) for {what}{} — the user lacks a privilege for this action; the node is reachable and was not marked dead",
                    node.addr,
                    reason.map(|r| format!(": {r}")).unwrap_or_default()
                ))
            }
        }
        (Some(raw), OutcomeKind::Throttled) => (
            ErrorKind::Throttled,
            format!(
                "node {} is throttling requests (429) for {what}{} — reduce the request rate or concurrency",
                node.addr,
                error_reason(&raw.body).map(|r| format!(": {r}")).unwrap_or_default()
            ),
        ),
        (Some(raw), _) => (
            ErrorKind::Status,
            format!(
                "node {} answered {} for {what}{}{}",
                node.addr,
                raw.status,
                error_reason(&raw.body).map(|r| format!(": {r}")).unwrap_or_default(),
                conflict_after_ambiguity(raw.status, &attempts)
            ),
        ),
        (None, OutcomeKind::TooLarge) => (
            ErrorKind::ResponseTooLarge,
            format!(
                "node {} sent too large a response for {what} ({}) — ask for less (size, _source filtering, search_after or scroll) or raise ClientBuilder::max_response_bytes; the node was not marked dead",
                node.addr,
                result.detail.clone().unwrap_or_default()
            ),
        ),
        (None, OutcomeKind::Reset) => (
            ErrorKind::ConnectionLost,
            format!(
                "node {} was reached, but the connection broke during {what} ({}) — the request may have been processed; check the node's logs",
                node.addr,
                result.detail.clone().unwrap_or_default()
            ),
        ),
        (None, kind) => {
            let detail = result.detail.clone().unwrap_or_default();
            let advice = match kind {
                OutcomeKind::Connect => "check that the cluster is running and the URLs are right",
                OutcomeKind::Timeout => "the node may be overloaded or paused; raise the attempt timeout if the request is legitimately slow",
                _ => "the connection broke mid-exchange; check the node's logs",
            };
            (
                ErrorKind::NoNodeReachable,
                format!(
                    "no node reachable for {what}: last attempt to {} failed ({kind}: {detail}) — {advice}",
                    node.addr
                ),
            )
        }
    };
    let mut err = Error::new(kind, format!("{message}{suffix}")).with_attempts(attempts);
    if let Some(source) = result.source {
        err = err.with_source(source);
    }
    if let Some(raw) = result.raw {
        err = err.with_response(Response {
            status: raw.status,
            headers: raw.headers,
            body: raw.body,
            node: node.addr.shared(),
            attempts: Attempts::Many(Vec::new()),
        });
    }
    err
}

/// A 409 after an earlier attempt of the same request ended ambiguously (reset, attempt
/// timeout, 502/503/504): the conflict may be with the earlier attempt's own write, so the
/// caller is told so rather than shown a plain conflict. Still an error (`ErrorKind::Status`,
/// 409, the response kept): only the caller knows whether the document is its own.
fn conflict_after_ambiguity(status: http::StatusCode, attempts: &[Attempt]) -> String {
    let earlier = attempts.split_last().map(|(_, e)| e).unwrap_or_default();
    match earlier.iter().rfind(|a| {
        matches!(
            a.outcome,
            OutcomeKind::Reset | OutcomeKind::Timeout | OutcomeKind::Gateway
        )
    }) {
        Some(a) if status == http::StatusCode::CONFLICT => format!(
            " — attempt {} of this request ended ambiguously ({}), so an earlier attempt may have written it: the conflict may be with this request's own write; check the document before treating it as a failure",
            a.number,
            a.outcome_label()
        ),
        _ => String::new(),
    }
}
