//! The rest of the attempt loop after a first attempt that was not a plain success:
//! settling it, the retry decision and the backoff sleep.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{node_answers, AttemptResult};
use super::{admit, no_node, RequestId, Run};
use crate::classify::OutcomeKind;
use crate::message::error::{Attempt, Error, ErrorKind};
use crate::message::request::Request;
use crate::message::response::{Attempts, Response};
use crate::nodes::pool::PoolNode;
use crate::observe::{DenyReason, RetryDeniedEvent, RetryEvent};
use crate::policy::breaker::ProbeSlot;
use crate::policy::plan::{Decision, Delay, Facts, Gate, Stop};
use crate::policy::retry::NoRetry;
use crate::shared::Inner;
use crate::sync::lock;
use crate::transport::failure::{final_error, slow_request_error, BREAKER_NOTE};

/// Per-request retry bookkeeping, consulted and updated by [`plan_retry`].
pub(super) struct RetryState {
    pub(super) idempotent: bool,
    /// The previous backoff (decorrelated jitter grows from it).
    pub(super) prev_delay: Duration,
    /// Retries made so far, per outcome kind (for class backoff rules).
    pub(super) class_retries: Vec<(OutcomeKind, u32)>,
}

impl<'a> Run<'a> {
    /// The rest of the attempt loop, from a finished attempt that was not a plain
    /// success: settles it (a timed-out attempt's liveness check, the booking), then
    /// retries while the policies allow, until a response or the final error.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn settle_and_retry(
        self,
        mut node: Arc<PoolNode>,
        mut probe: Option<ProbeSlot<'a>>,
        mut result: AttemptResult,
        mut elapsed: Duration,
        mut ended: Instant,
        prior: Prior,
    ) -> Result<Response, Error> {
        let (inner, request, start, deadline) =
            (self.inner, self.request, self.start, self.deadline);
        let attempt_timeout = self.attempt_timeout;
        let Prior {
            mut attempts,
            mut tried,
            current: mut number,
            mut made,
        } = prior;
        // Nodes already tried by this request, so retries prefer other nodes. Inline (no
        // allocation); past 8 attempts older entries are forgotten, which only means a
        // retry may revisit a node.
        tried[(number as usize - 1) % 8] = crate::nodes::pool::node_key(&node);
        let mut plan = RetryState {
            idempotent: request.is_idempotent(),
            prev_delay: Duration::ZERO,
            class_retries: Vec::new(),
        };
        loop {
            // A timed-out attempt makes the node suspect, not dead: a short liveness check
            // decides between a hung node (dead, fail over) and a slow request (the node
            // stays alive, the request fails; see docs/architecture/transport.md).
            let slow_request = if result.kind == OutcomeKind::Timeout {
                match node_answers(inner, &node, attempt_timeout, deadline).await {
                    Some(answered) => answered,
                    None => {
                        attempts.push(Attempt {
                            number,
                            node: node.addr.shared(),
                            outcome: result.kind,
                            status: result.raw.as_ref().map(|r| r.status),
                            elapsed,
                            backoff: Duration::ZERO,
                            detail: result.detail.clone(),
                        });
                        return Err(deadline_exceeded(
                            deadline,
                            start,
                            attempts,
                            &node,
                            "timed out and the deadline passed while its node was checked",
                        ));
                    }
                }
            } else {
                false
            };
            // The breaker records at the attempt's end, unless a liveness check was
            // awaited since.
            let now = if result.kind == OutcomeKind::Timeout {
                Instant::now()
            } else {
                ended
            };
            let status = result.raw.as_ref().map(|r| r.status);
            let record = self.book(
                &node,
                probe,
                number,
                &result,
                status,
                elapsed,
                now,
                slow_request,
            );
            attempts.push(record);

            match (result.kind, result.raw) {
                (OutcomeKind::Success, Some(raw)) => {
                    return Ok(Response {
                        status: raw.status,
                        headers: raw.headers,
                        body: raw.body,
                        node: node.addr.shared(),
                        attempts: Attempts::Many(attempts),
                    });
                }
                (OutcomeKind::Cancelled, _) => {
                    return Err(deadline_exceeded(
                        deadline,
                        start,
                        attempts,
                        &node,
                        "was cancelled",
                    ));
                }
                (OutcomeKind::Timeout, None) if slow_request => {
                    let result = AttemptResult {
                        kind: OutcomeKind::Timeout,
                        rejection: None,
                        raw: None,
                        detail: result.detail,
                        source: result.source,
                    };
                    return Err(slow_request_error(
                        request,
                        &node,
                        result,
                        attempts,
                        attempt_timeout.unwrap_or_default(),
                    ));
                }
                (kind, raw) => {
                    let failed = AttemptResult {
                        kind,
                        rejection: result.rejection,
                        raw,
                        detail: result.detail,
                        source: result.source,
                    };
                    let seen = (made as usize).min(tried.len());
                    let elsewhere = inner.pool.has_free_untried(&tried[..seen], Instant::now());
                    let (delay, next_probe) = match plan_retry(
                        inner,
                        request,
                        self.request_id,
                        &node,
                        &failed,
                        made,
                        deadline,
                        &mut plan,
                        elsewhere,
                    ) {
                        Ok(next) => next,
                        Err((why, note)) => {
                            return Err(final_error(request, &node, failed, attempts, why, note));
                        }
                    };
                    if let Some(last) = attempts.last_mut() {
                        last.backoff = delay;
                    }
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    probe = next_probe;
                }
            }

            // The next attempt: its breaker admission was asked before the backoff.
            made += 1;
            number = made;
            let now = Instant::now();
            if super::too_late_to_start(deadline, now) {
                return Err(super::too_late_error(deadline, start, number, attempts));
            }
            let seen = (number as usize - 1).min(tried.len());
            node = match inner.pool.select_at(&tried[..seen], now) {
                Some(node) => node,
                None => return Err(no_node(attempts)),
            };
            tried[(number as usize - 1) % 8] = crate::nodes::pool::node_key(&node);
            let send = self.send(&node)?;
            (result, elapsed, ended) = self.attempt(&node, send, number, now).await;
        }
    }
}

/// What a request did before the attempt handed to [`Run::settle_and_retry`]: the
/// records of the attempts already settled, the nodes they went to, the current attempt's
/// number and how many attempts were made (a hedged read has two in flight at once).
pub(super) struct Prior {
    pub(super) attempts: Vec<Attempt>,
    pub(super) tried: [usize; 8],
    /// The number of the attempt handed over.
    pub(super) current: u32,
    /// Attempts made so far, the handed-over one included.
    pub(super) made: u32,
}

impl Prior {
    /// Nothing before: the handed-over attempt is the first.
    pub(super) fn first() -> Prior {
        Prior {
            attempts: Vec::new(),
            tried: [0; 8],
            current: 1,
            made: 1,
        }
    }
}

/// The error of a request whose deadline passed: the last attempt to `node` `what`
/// (the node was not marked dead).
fn deadline_exceeded(
    deadline: Option<Instant>,
    start: Instant,
    attempts: Vec<Attempt>,
    node: &PoolNode,
    what: &str,
) -> Error {
    let total = deadline
        .map(|d| d.saturating_duration_since(start))
        .unwrap_or_default();
    Error::new(
        ErrorKind::DeadlineExceeded,
        format!(
            "deadline of {} exceeded after {} attempt(s); the last attempt to {} {what} (the node was not marked dead)",
            crate::clock::duration::format_duration(total),
            attempts.len(),
            node.addr
        ),
    )
    .with_attempts(attempts)
}

/// Whether and after how long the failed attempt `number` is retried: gathers the facts
/// (the retry counts, the breaker's admission of the retry, the backoff with its random
/// part drawn, the time to the deadline, the budget's balance), lets the pure
/// [`plan`](crate::policy::plan::plan) decide, and carries the decision out — the
/// withdrawal from the budget, the bookkeeping, the events and logs. `Ok` holds the delay
/// and the retry's probe slot; `Err` says why not, with a note for the error message.
#[allow(clippy::too_many_arguments)]
fn plan_retry<'a>(
    inner: &'a Inner,
    request: &Request,
    request_id: &RequestId,
    node: &PoolNode,
    result: &AttemptResult,
    number: u32,
    deadline: Option<Instant>,
    plan: &mut RetryState,
    elsewhere: bool,
) -> Result<(Duration, Option<ProbeSlot<'a>>), (NoRetry, Option<String>)> {
    let status = result.raw.as_ref().map(|r| r.status);
    let class_done = plan
        .class_retries
        .iter()
        .find(|(k, _)| *k == result.kind)
        .map_or(0, |(_, n)| *n);
    let (retries_done, retry_limit) = match (
        request.max_retries,
        inner.class_backoff.rule_for(result.kind),
    ) {
        // The request's own limit counts every retry it made.
        (Some(n), _) => (number - 1, n),
        (None, Some(r)) => (class_done, r.max_retries),
        (None, None) => (number - 1, inner.retry.max_retries),
    };
    let now = Instant::now();
    let (gate, probe) = match admit(inner, now) {
        Ok(None) if inner.breaker.is_none() => (Gate::Off, None),
        Ok(None) => (Gate::Closed, None),
        Ok(Some(slot)) => (Gate::Probe, Some(slot)),
        Err(_) => (Gate::Refused, None),
    };
    let hint = inner.retry.server_hint(
        status,
        result.raw.as_ref().map(|r| &r.headers),
        (inner.wall_clock)(),
    );
    // A `Retry-After` pauses that node, not the request: the node gets no traffic while
    // another is free, and a retry that can go to a free untried node goes there after
    // the ordinary backoff instead of waiting the pause out.
    if let Some(until) = hint.and_then(|h| now.checked_add(h)) {
        node.mark_busy_until(until);
    }
    let delay = match hint {
        // A class rule grows from the server's wait, never going below it; with a free
        // untried node elsewhere, the retry goes there after the ordinary backoff.
        Some(h) if !elsewhere => Delay::Hint(
            inner
                .class_backoff
                .delay_after(result.kind, class_done + 1, Some(h), &mut lock(&inner.rng))
                .unwrap_or(h),
        ),
        _ => {
            let base = {
                let mut rng = lock(&inner.rng);
                match inner
                    .class_backoff
                    .delay(result.kind, class_done + 1, &mut rng)
                {
                    Some(d) => d,
                    None => inner.backoff.delay(number, plan.prev_delay, &mut rng),
                }
            };
            let breaker_closed = matches!(gate, Gate::Off | Gate::Closed);
            Delay::Backoff {
                base,
                multiplier: inner.retry_counter.multiplier(now, breaker_closed),
            }
        }
    };
    let facts = Facts {
        outcome: result.kind,
        status,
        idempotent: plan.idempotent,
        retries_done,
        retry_limit,
        breaker: gate,
        delay,
        deadline_remaining: deadline.map(|d| d.saturating_duration_since(now)),
        budget_affords: inner.budget.as_ref().map(|b| b.affords(now)),
        server_paced: result.kind == OutcomeKind::Throttled
            && hint.is_some_and(|h| h >= crate::policy::plan::SERVER_PACED_MIN),
    };
    let mut decision = crate::policy::plan::plan(&inner.retry, &facts);
    if let (Decision::Retry { .. }, Some(budget), true) =
        (decision, &inner.budget, facts.charged_to_budget())
    {
        // Another request may have taken the last retry since the balance was read.
        if !budget.withdraw(now) {
            decision = Decision::Stop(Stop::Budget);
        }
    }
    let denied = |reason| retry_denied(inner, request, request_id, number, node, result, reason);
    let (delay, multiplier) = match decision {
        Decision::Retry { delay, multiplier } => (delay, multiplier),
        Decision::Stop(Stop::Policy(why)) => return Err((why, None)),
        Decision::Stop(Stop::Breaker) => {
            denied(DenyReason::Breaker);
            return Err((NoRetry::Exhausted, Some(BREAKER_NOTE.to_string())));
        }
        Decision::Stop(Stop::Deadline { delay }) => {
            return Err((
                NoRetry::Exhausted,
                Some(format!(
                    "not retried: the next backoff ({}) would end after the deadline",
                    crate::clock::duration::format_duration(delay)
                )),
            ));
        }
        Decision::Stop(Stop::Budget) => {
            denied(DenyReason::Budget);
            let cfg = inner
                .budget
                .as_ref()
                .map(|b| *b.config())
                .unwrap_or_default();
            return Err((
                NoRetry::Exhausted,
                Some(format!(
                    "not retried: the client's retry budget is exhausted (retries may add {}% to the requests of the last {}, plus {}/s) — the cluster is failing many requests",
                    (cfg.ratio * 100.0).round(),
                    crate::clock::duration::format_duration(cfg.window),
                    cfg.min_per_sec
                )),
            ));
        }
    };
    inner.retry_counter.record_retry(now);
    match plan
        .class_retries
        .iter_mut()
        .find(|(k, _)| *k == result.kind)
    {
        Some((_, n)) => *n += 1,
        None => plan.class_retries.push((result.kind, 1)),
    }
    inner.observer.retry_scheduled(&RetryEvent {
        method: &request.method,
        node: node.addr.as_str(),
        attempt: number,
        outcome: result.kind,
        delay,
        jitter_multiplier: multiplier,
    });
    plan.prev_delay = delay;
    if !delay.is_zero() {
        tracing::debug!(
            retry_id = %request_id,
            cluster = %inner.cluster_name,
            attempt = number,
            node = %node.addr,
            index = request.index().unwrap_or(""),
            class = result.kind.as_str(),
            backoff_ms = delay.as_millis() as u64,
            jitter_multiplier = multiplier,
            "backing off before retry"
        );
    }
    Ok((delay, probe))
}

pub(super) fn retry_denied(
    inner: &Inner,
    request: &Request,
    request_id: &RequestId,
    attempt: u32,
    node: &PoolNode,
    last: &AttemptResult,
    reason: DenyReason,
) {
    tracing::debug!(
        retry_id = %request_id,
        cluster = %inner.cluster_name,
        attempt,
        node = %node.addr,
        index = request.index().unwrap_or(""),
        outcome = last.kind.as_str(),
        reason = reason.as_str(),
        "retry not made"
    );
    inner.observer.retry_denied(&RetryDeniedEvent {
        method: &request.method,
        outcome: last.kind,
        reason,
    });
}
