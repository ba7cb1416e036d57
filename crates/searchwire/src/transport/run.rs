//! The attempt loop: one request's attempts, from the first to the response or the error.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use tokio::time::Instant;
use tracing::Instrument;

use crate::classify::{self, Ended, Outcome, OutcomeKind, Rejection};
use crate::http::addr::NodeAddr;
use crate::http::connector::{RawResponse, SendError, SendFuture};
use crate::message::error::{Attempt, AttemptTimedOut, BoxError, Error, ErrorKind};
use crate::message::request::{Deadline, Request};
use crate::message::response::{Attempts, Response};
use crate::nodes::pool::PoolNode;
use crate::observe::context::RetryId;
use crate::observe::{AttemptEvent, BreakerEvent, DenyReason, RetryDeniedEvent, RetryEvent};
use crate::policy::breaker::{Admission, BreakerState, Change, ProbeSlot, Verdict};
use crate::policy::plan::{Decision, Delay, Facts, Gate, Stop};
use crate::policy::retry::NoRetry;
use crate::shared::Inner;
use crate::sync::lock;
use crate::transport::failure::{
    circuit_open_error, final_error, slow_request_error, BREAKER_NOTE,
};

/// Per-request retry bookkeeping, consulted and updated by [`plan_retry`].
pub(super) struct RetryState {
    pub(super) idempotent: bool,
    /// The previous backoff (decorrelated jitter grows from it).
    pub(super) prev_delay: Duration,
    /// Retries made so far, per outcome kind (for class backoff rules).
    pub(super) class_retries: Vec<(OutcomeKind, u32)>,
}

/// The outcome of one attempt, before it is turned into a record.
pub(super) struct AttemptResult {
    pub(super) kind: OutcomeKind,
    /// Which rejection a 401/403 is.
    pub(super) rejection: Option<Rejection>,
    pub(super) raw: Option<RawResponse>,
    pub(super) detail: Option<String>,
    /// The transport failure's cause, kept for the error's `source()` chain.
    pub(super) source: Option<BoxError>,
}

/// The request's deadline: its own (an instant, or its timeout from `start`), else the
/// client's default timeout from `start`, else none.
pub(super) fn effective_deadline(
    inner: &Inner,
    request: &Request,
    start: Instant,
) -> Option<Instant> {
    match request.deadline {
        Some(Deadline::At(at)) => Some(at),
        // A budget too large to represent as an instant is no deadline at all.
        Some(Deadline::Within(d)) => start.checked_add(d),
        None => inner.deadline.and_then(|d| start.checked_add(d)),
    }
}

/// The HTTP request of one attempt to `node`: the client's default headers, then the
/// request's own.
pub(super) fn build_http(
    inner: &Inner,
    request: &Request,
    node: &NodeAddr,
    query: &str,
) -> Result<http::Request<Full<Bytes>>, Error> {
    let uri = node.uri(request.sent_path(), query)?;
    // Sized for the headers hyper may add (`content-length`): a clone of the defaults
    // would be full, and hyper's first insert would reallocate it.
    let mut headers =
        http::HeaderMap::with_capacity(inner.headers.len() + request.headers.len() + 3);
    // The `Host` header hyper would add, made once per node; a default or the request's
    // own `Host` replaces it, as hyper leaves a set one alone.
    if let Some(host) = node.host_header() {
        headers.insert(http::header::HOST, host.clone());
    }
    for (k, v) in inner.headers.iter() {
        headers.insert(k, v.clone());
    }
    for (k, v) in request.headers.iter() {
        headers.insert(k, v.clone());
    }
    let body = request.body.clone().unwrap_or_default();
    let mut req = http::Request::new(Full::new(body));
    *req.method_mut() = request.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    Ok(req)
}

/// What every attempt of one request shares, computed once before the first.
struct Run<'a> {
    inner: &'a Arc<Inner>,
    request: &'a Request,
    request_id: RetryId,
    start: Instant,
    deadline: Option<Instant>,
    attempt_timeout: Option<Duration>,
    query: String,
}

/// The attempt loop of one request (see `docs/ARCHITECTURE.md`, "The request flow").
///
/// The first attempt runs inline and a success returns from here; anything else — a
/// failed or timed-out first attempt, the retries, their backoff and liveness checks —
/// continues in [`Run::settle_and_retry`], boxed, so this future (moved on every request)
/// holds only what the first attempt needs.
pub(super) async fn execute(
    inner: &Arc<Inner>,
    request: &Request,
    request_id: RetryId,
    start: Instant,
) -> Result<Response, Error> {
    let deadline = effective_deadline(inner, request, start);
    if deadline.is_some_and(|d| d <= start) {
        return Err(Error::new(
            ErrorKind::DeadlineExceeded,
            "the request's deadline had already passed; nothing was sent",
        ));
    }
    let run = Run {
        inner,
        request,
        request_id,
        start,
        deadline,
        attempt_timeout: request.attempt_timeout.or(inner.attempt_timeout),
        query: encode_query(&request.query),
    };
    // The first attempt's clock reading is the request's start (nothing awaited since).
    let probe = run.admit(start)?;
    if let Some(budget) = &inner.budget {
        budget.deposit(start);
    }
    let Some(node) = inner.pool.select_at(&[], start) else {
        return Err(no_node(Vec::new()));
    };
    let send = run.send(&node)?;
    let (mut result, elapsed, ended) = run.attempt(&node, send, 1, start).await;
    if result.kind == OutcomeKind::Success {
        if let Some(raw) = result.raw.take() {
            let record = run.book(
                &node,
                probe,
                1,
                &result,
                Some(raw.status),
                elapsed,
                ended,
                false,
            );
            return Ok(Response {
                status: raw.status,
                headers: raw.headers,
                body: raw.body,
                node: node.addr.shared(),
                attempts: Attempts::One(record),
            });
        }
    }
    Box::pin(run.settle_and_retry(node, probe, result, elapsed, ended)).await
}

impl<'a> Run<'a> {
    /// The breaker's admission of an attempt at `now` (see [`admit`]); a refusal is the
    /// request's error.
    fn admit(&self, now: Instant) -> Result<Option<ProbeSlot<'a>>, Error> {
        admit(self.inner, now).map_err(|retry_in| {
            let reason = self
                .inner
                .breaker
                .as_ref()
                .map(|b| b.reason())
                .unwrap_or_default();
            circuit_open_error(self.request, &reason, retry_in)
        })
    }

    /// The attempt's request, handed to the connector (which sends it once polled).
    fn send(&self, node: &PoolNode) -> Result<SendFuture, Error> {
        let http_req = build_http(self.inner, self.request, &node.addr, &self.query)?;
        Ok(self.inner.connector.send(&node.addr, http_req))
    }

    /// Runs attempt `number` (see [`run_attempt`]).
    async fn attempt(
        &self,
        node: &PoolNode,
        send: SendFuture,
        number: u32,
        at: Instant,
    ) -> (AttemptResult, Duration, Instant) {
        run_attempt(
            self.inner,
            self.request,
            self.request_id,
            node,
            send,
            Started { number, at },
            self.attempt_timeout,
            self.deadline,
        )
        .await
    }

    /// Books a finished attempt: the breaker's record of it (at `now`), its effect on the
    /// node's health (a slow request leaves the node alive), and its record for the
    /// response or error.
    #[allow(clippy::too_many_arguments)]
    fn book(
        &self,
        node: &Arc<PoolNode>,
        probe: Option<ProbeSlot<'a>>,
        number: u32,
        result: &AttemptResult,
        status: Option<StatusCode>,
        elapsed: Duration,
        now: Instant,
        slow_request: bool,
    ) -> Attempt {
        if let Some(breaker) = &self.inner.breaker {
            let verdict = Verdict::of(result.kind);
            let change = match probe {
                Some(slot) => slot.record(now, verdict),
                None => breaker.record(now, verdict, false),
            };
            breaker_changed(self.inner, change);
        }
        if slow_request {
            crate::health::effects::apply_slow_attempt(self.inner, node);
        } else {
            crate::health::effects::apply_attempt(
                self.inner,
                node,
                result.kind,
                result.rejection,
                status,
                result.detail.as_deref(),
            );
        }
        Attempt {
            number,
            node: node.addr.shared(),
            outcome: result.kind,
            status,
            elapsed,
            backoff: Duration::ZERO,
            detail: result.detail.clone(),
        }
    }

    /// The rest of the attempt loop, from a finished attempt that was not a plain
    /// success: settles it (a timed-out attempt's liveness check, the booking), then
    /// retries while the policies allow, until a response or the final error.
    async fn settle_and_retry(
        self,
        mut node: Arc<PoolNode>,
        mut probe: Option<ProbeSlot<'a>>,
        mut result: AttemptResult,
        mut elapsed: Duration,
        mut ended: Instant,
    ) -> Result<Response, Error> {
        let (inner, request, start, deadline) =
            (self.inner, self.request, self.start, self.deadline);
        let attempt_timeout = self.attempt_timeout;
        let mut attempts: Vec<Attempt> = Vec::new();
        // Nodes already tried by this request, so retries prefer other nodes. Inline (no
        // allocation); past 8 attempts older entries are forgotten, which only means a
        // retry may revisit a node.
        let mut tried = [0usize; 8];
        tried[0] = crate::nodes::pool::node_key(&node);
        let mut plan = RetryState {
            idempotent: request.is_idempotent(),
            prev_delay: Duration::ZERO,
            class_retries: Vec::new(),
        };
        let mut number = 1u32;
        loop {
            // A timed-out attempt makes the node suspect, not dead: a short liveness check
            // decides between a hung node (dead, fail over) and a slow request (the node
            // stays alive, the request fails; see docs/ARCHITECTURE.md).
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
                    let seen = (number as usize).min(tried.len());
                    let elsewhere = inner.pool.has_free_untried(&tried[..seen], Instant::now());
                    let (delay, next_probe) = match plan_retry(
                        inner,
                        request,
                        self.request_id,
                        &node,
                        &failed,
                        number,
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
            number += 1;
            let now = Instant::now();
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

/// The error when no node can take an attempt, with the `attempts` made so far.
fn no_node(attempts: Vec<Attempt>) -> Error {
    Error::new(
        ErrorKind::NoNodeReachable,
        "no node reachable: no node is alive and none has ever answered",
    )
    .with_attempts(attempts)
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

/// The liveness check of a node whose attempt timed out: `GET /` (through
/// [`background_get`](crate::health::background_get), like every background request),
/// bounded by min([`LIVENESS_CHECK_TIMEOUT`](crate::defaults::LIVENESS_CHECK_TIMEOUT),
/// the attempt timeout) and by the deadline. `Some(true)` when the node answered (any
/// status: only connectivity decides liveness), `Some(false)` when it did not, `None`
/// when the deadline passed first.
async fn node_answers(
    inner: &Inner,
    node: &PoolNode,
    attempt_timeout: Option<Duration>,
    deadline: Option<Instant>,
) -> Option<bool> {
    let limit = attempt_timeout.map_or(crate::defaults::LIVENESS_CHECK_TIMEOUT, |t| {
        t.min(crate::defaults::LIVENESS_CHECK_TIMEOUT)
    });
    let check = crate::health::background_get(inner, &node.addr, "/", "", limit);
    let answer = match deadline {
        Some(d) => tokio::select! {
            r = check => r,
            _ = tokio::time::sleep_until(d) => return None,
        },
        None => check.await,
    };
    let answered = matches!(&answer, Ok(a) if a.outcome.kind.node_answered());
    tracing::debug!(
        node = %node.addr,
        answered,
        "liveness check after an attempt timeout"
    );
    Some(answered)
}

/// Which attempt of the request this is (1-based) and when it started.
pub(super) struct Started {
    pub(super) number: u32,
    pub(super) at: Instant,
}

/// One attempt on `node`, started at `started.at`: awaits `send` (the attempt's request,
/// handed to the connector), bounded by the attempt timeout and the deadline, classifies
/// the outcome, and reports it (span, log, observer). Returns the classified result, how
/// long the attempt took and when it ended.
///
/// One timer bounds the attempt: it fires at the earlier of the attempt's end and the
/// deadline, and which of the two it was decides the outcome (the deadline when it comes
/// no later than the attempt's end).
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_attempt(
    inner: &Inner,
    request: &Request,
    request_id: RetryId,
    node: &PoolNode,
    send: SendFuture,
    started: Started,
    attempt_timeout: Option<Duration>,
    deadline: Option<Instant>,
) -> (AttemptResult, Duration, Instant) {
    let Started {
        number,
        at: attempt_start,
    } = started;
    let span = tracing::debug_span!(
        "searchwire.attempt",
        retry_id = %request_id,
        attempt = number,
        server.address = node.addr.host(),
        server.port = node.addr.port(),
        http.request.resend_count = tracing::field::Empty,
        outcome = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        elapsed_ms = tracing::field::Empty,
    );
    if number > 1 {
        span.record("http.request.resend_count", number - 1);
    }
    let current = tracing::Span::current();
    current.record("server.address", node.addr.host());
    current.record("server.port", node.addr.port());
    // An attempt timeout too large to represent as an instant bounds nothing.
    let attempt_end = attempt_timeout.and_then(|t| attempt_start.checked_add(t));
    let deadline_first = deadline.filter(|d| attempt_end.is_none_or(|a| *d <= a));
    let bounded = async {
        match deadline_first.or(attempt_end) {
            Some(at) => match tokio::time::timeout_at(at, send).await {
                Ok(r) => Some(Some(r)),
                // The deadline passed: the request ends, its node is not judged.
                Err(_) if deadline_first.is_some() => None,
                Err(_) => Some(None),
            },
            None => Some(Some(send.await)),
        }
    };
    // Entering a span nobody listens to is skipped (the common case has no subscriber).
    let outcome: Option<Option<Result<RawResponse, SendError>>> = if span.is_disabled() {
        bounded.await
    } else {
        bounded.instrument(span.clone()).await
    };
    let end = Instant::now();
    let elapsed = end.saturating_duration_since(attempt_start);
    let ended = match &outcome {
        None => Ended::DeadlineExpired,
        Some(None) => Ended::TimedOut {
            after: attempt_timeout.unwrap_or_default(),
            attempt: true,
        },
        Some(Some(Err(e))) => Ended::Failed {
            kind: e.kind,
            cause: &*e.source,
        },
        Some(Some(Ok(raw))) => Ended::Answered {
            status: raw.status,
            body: &raw.body,
        },
    };
    let Outcome {
        kind,
        rejection,
        detail,
    } = classify::outcome(ended);
    let (raw, source): (_, Option<BoxError>) = match outcome {
        Some(Some(Ok(raw))) => (Some(raw), None),
        Some(Some(Err(e))) => (None, Some(e.source)),
        Some(None) => (
            None,
            Some(Box::new(AttemptTimedOut(
                attempt_timeout.unwrap_or_default(),
            ))),
        ),
        None => (None, None),
    };
    let result = AttemptResult {
        kind,
        rejection,
        raw,
        detail,
        source,
    };
    let status = result.raw.as_ref().map(|r| r.status);
    span.record("outcome", result.kind.as_str());
    span.record("elapsed_ms", elapsed.as_millis() as u64);
    if let Some(s) = status {
        span.record("http.response.status_code", s.as_u16());
    }
    span.in_scope(|| {
        tracing::debug!(
            retry_id = %request_id,
            cluster = %inner.cluster_name,
            attempt = number,
            node = %node.addr,
            index = request.index().unwrap_or(""),
            outcome = result.kind.as_str(),
            status = status.map(|s| s.as_u16()),
            elapsed_ms = elapsed.as_millis() as u64,
            "attempt finished"
        )
    });
    inner.observer.attempt_finished(&AttemptEvent {
        method: &request.method,
        path: &request.path,
        node: node.addr.as_str(),
        attempt: number,
        outcome: result.kind,
        status,
        elapsed,
    });
    (result, elapsed, end)
}

/// The breaker's admission of one attempt: `Ok` with the probe slot it holds when the
/// breaker is half-open, `Err` with the time until the next probe may go when it refuses.
fn admit(inner: &Inner, now: Instant) -> Result<Option<ProbeSlot<'_>>, Duration> {
    let Some(breaker) = &inner.breaker else {
        return Ok(None);
    };
    let (admission, change, round) = breaker.admit_in_round(now);
    breaker_changed(inner, change);
    match admission {
        Admission::Allowed => Ok(None),
        Admission::Probe => Ok(Some(ProbeSlot::new(breaker, round))),
        Admission::Refused { retry_in } => Err(retry_in),
    }
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
    request_id: RetryId,
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
    let (retries_done, retry_limit) = match inner.class_backoff.rule_for(result.kind) {
        Some(r) => (class_done, r.max_retries),
        None => (number - 1, inner.retry.max_retries),
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
    request_id: RetryId,
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

/// Logs and reports a cluster breaker transition.
pub(super) fn breaker_changed(inner: &Inner, change: Option<Change>) {
    let Some(c) = change else { return };
    if c.to == BreakerState::Open {
        tracing::warn!(
            breaker.scope = "cluster",
            from = c.from.as_str(),
            to = c.to.as_str(),
            reason = %c.reason,
            "circuit breaker open"
        );
    } else {
        tracing::info!(
            breaker.scope = "cluster",
            from = c.from.as_str(),
            to = c.to.as_str(),
            reason = %c.reason,
            "circuit breaker {}",
            c.to.as_str()
        );
    }
    inner.observer.breaker_transition(&BreakerEvent {
        scope: "cluster",
        from: c.from,
        to: c.to,
        reason: &c.reason,
    });
}

/// Applies an attempt's outcome to its node: connectivity failures mark it dead (and
/// drop its pooled connections), `node_gateway_failures_to_eject` consecutive gateway
/// errors mark it dead, other answers mark it alive, cancellation changes nothing.
/// Percent-encodes query pairs.
fn encode_query(pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish()
}
