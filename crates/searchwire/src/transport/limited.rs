//! A request under the adaptive concurrency limit (`policy/limit.rs`): a slot first (at
//! once, or within the wait allowed and the deadline), then the attempt loop, then the
//! request's latency and overload signals taught to the limit.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::classify::OutcomeKind;
use crate::message::error::{Attempt, Error, ErrorKind};
use crate::message::request::Request;
use crate::message::response::Response;
use crate::observe::LimitEvent;
use crate::policy::limit::Limiter;
use crate::shared::Inner;

/// Runs `execute` (the attempt loop of `request`, started at `start`) in a slot of
/// `limiter`, or fails with [`ErrorKind::ConcurrencyLimited`] when none is free in time.
pub(super) async fn send<F, Fut>(
    inner: &Inner,
    limiter: &Limiter,
    request: &Request,
    start: Instant,
    execute: F,
) -> Result<Response, Error>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Response, Error>>,
{
    let deadline = crate::transport::run::effective_deadline(inner, request, start);
    let permit = match limiter.acquire(deadline).await {
        Ok(p) => p,
        Err(waited) => {
            let (limit, in_flight) = limiter.snapshot();
            inner.observer.concurrency_limit(&LimitEvent {
                limit,
                in_flight,
                rejected: true,
            });
            return Err(limited_error(request, limit, in_flight, waited));
        }
    };
    let result = execute().await;
    let attempts = match &result {
        Ok(r) => r.attempts(),
        Err(e) => e.attempts(),
    };
    // Nothing sent (the breaker refused, no node): nothing to learn.
    let Some(last) = attempts.last() else {
        return result;
    };
    let dropped = overloaded(attempts)
        || matches!(
            result.as_ref().err().map(Error::kind),
            Some(ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimeout)
        );
    if let Some(limit) = permit.finish(last.elapsed, dropped) {
        let (_, in_flight) = limiter.snapshot();
        inner.observer.concurrency_limit(&LimitEvent {
            limit,
            in_flight,
            rejected: false,
        });
    }
    result
}

/// Whether an attempt met an overload signal: throttled, a gateway error, a timeout.
fn overloaded(attempts: &[Attempt]) -> bool {
    attempts.iter().any(|a| {
        matches!(
            a.outcome,
            OutcomeKind::Throttled | OutcomeKind::Gateway | OutcomeKind::Timeout
        )
    })
}

/// The error of a request refused by the limit.
#[cold]
fn limited_error(request: &Request, limit: u32, in_flight: u32, waited: Duration) -> Error {
    let wait = if waited.is_zero() {
        "at once".to_string()
    } else {
        format!(
            "after waiting {}",
            crate::clock::duration::format_duration(waited)
        )
    };
    Error::new(
        ErrorKind::ConcurrencyLimited,
        format!(
            "{} {} not sent: the adaptive concurrency limit ({limit} in flight, {in_flight} now) is reached and no slot freed {wait}; the cluster is at its capacity — send less, or allow a wait (AdaptiveConcurrency::max_wait)",
            request.method,
            crate::echo::echo(&request.path),
        ),
    )
}
