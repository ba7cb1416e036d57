//! How a bulk request ended, read from the transport's answer on the request's own task.

use std::time::Duration;

use searchwire::ErrorKind;

use crate::classify::RetryClass;
use crate::response::{BulkResponse, ItemError, ItemResult};
use crate::sink::FailureReason;

/// How a bulk request ended, as the request task saw it.
pub(super) enum Outcome {
    /// The cluster answered every item.
    Items(Vec<ItemResult>),
    /// The cluster refused the request as too large (413: its body passed the cluster's
    /// `http.max_content_length`). Nothing of it was applied.
    TooLarge(FailureReason),
    /// The request failed as a whole.
    Failed {
        /// `None`: for good.
        class: Option<RetryClass>,
        retry_after: Option<Duration>,
        /// It may have been applied (reset, timeout, 5xx after sending).
        ambiguous: bool,
        reason: FailureReason,
        /// The cluster's `error` object, when it refused the request with one (4xx).
        error: Option<Box<ItemError>>,
    },
}

/// Turns the transport's answer into an [`Outcome`]. The request was one attempt (the
/// transport was told not to retry it), so every failure comes back here: the indexer is
/// the one owner of a batch's retries and their delays.
pub(super) fn outcome(
    result: Result<searchwire::Response, searchwire::Error>,
    expected: usize,
) -> Outcome {
    let failed =
        |class, ambiguous, status: Option<u16>, error_type: &str, reason: String| Outcome::Failed {
            class,
            retry_after: None,
            ambiguous,
            reason: FailureReason {
                status,
                error_type: error_type.into(),
                reason,
                retry_class: None,
            },
            error: None,
        };
    // The `error` object of a refusal (`{"error":{...},"status":400}`), as the cluster sent it.
    let refusal = |mut o: Outcome, resp: Option<&searchwire::Response>| {
        #[derive(serde::Deserialize)]
        struct Refusal {
            error: ItemError,
        }
        if let Outcome::Failed { error, .. } = &mut o {
            *error = resp
                .and_then(|r| serde_json::from_slice::<Refusal>(r.body()).ok())
                .map(|r| Box::new(r.error));
        }
        o
    };
    let resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            let status = e.status().map(|s| s.as_u16());
            let body = e.response().map(|r| {
                String::from_utf8_lossy(&r.body()[..r.body().len().min(512)]).into_owned()
            });
            let reason = match &body {
                Some(b) if !b.is_empty() => format!("{}: {b}", e.message()),
                _ => e.to_string(),
            };
            return match e.kind() {
                ErrorKind::Throttled => Outcome::Failed {
                    class: Some(RetryClass::Throttled),
                    retry_after: e.response().and_then(retry_after),
                    ambiguous: false,
                    reason: FailureReason {
                        status,
                        error_type: "throttled".into(),
                        reason,
                        retry_class: None,
                    },
                    error: None,
                },
                ErrorKind::Status if status.is_some_and(|s| s >= 500) => failed(
                    Some(RetryClass::Unavailable),
                    true,
                    status,
                    "server_error",
                    reason,
                ),
                ErrorKind::Status if status == Some(413) => Outcome::TooLarge(FailureReason {
                    status,
                    error_type: "request_too_large".into(),
                    reason,
                    retry_class: None,
                }),
                ErrorKind::Status => refusal(
                    failed(None, false, status, "request_rejected", reason),
                    e.response(),
                ),
                ErrorKind::Auth => {
                    refusal(failed(None, false, status, "auth", reason), e.response())
                }
                ErrorKind::Config | ErrorKind::InvalidRequest => {
                    failed(None, false, status, "invalid_request", reason)
                }
                ErrorKind::CircuitOpen => failed(
                    Some(RetryClass::Connection),
                    false,
                    status,
                    "circuit_open",
                    reason,
                ),
                // No node reachable, deadline exceeded, response too large, and any kind
                // added later: the request may have been applied.
                _ => failed(
                    Some(RetryClass::Connection),
                    true,
                    status,
                    e.kind().as_str(),
                    reason,
                ),
            };
        }
    };
    match BulkResponse::parse_expecting(resp.body(), expected) {
        Ok(r) if r.items.len() == expected => Outcome::Items(r.items),
        Ok(r) => failed(
            Some(RetryClass::Unavailable),
            true,
            Some(resp.status().as_u16()),
            "bad_response",
            format!(
                "the bulk response from {} has {} items for {expected} actions",
                resp.node(),
                r.items.len()
            ),
        ),
        Err(e) => failed(
            Some(RetryClass::Unavailable),
            true,
            Some(resp.status().as_u16()),
            "bad_response",
            format!("{e} (from {})", resp.node()),
        ),
    }
}

/// `Retry-After: <seconds>` of a throttled answer (HTTP-dates are left to the class delay).
fn retry_after(resp: &searchwire::Response) -> Option<Duration> {
    let v = resp
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}
