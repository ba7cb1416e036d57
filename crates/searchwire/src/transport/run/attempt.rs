//! One attempt: its timer (the attempt timeout and the deadline), its classification
//! and its report; and the liveness check of a node whose attempt timed out.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::classify::{self, Ended, Outcome, OutcomeKind, Rejection};
use crate::http::connector::{RawResponse, SendError, SendFuture};
use crate::message::error::{AttemptTimedOut, BoxError};
use crate::message::request::Request;
use crate::nodes::pool::PoolNode;
use crate::nodes::progress::InFlight;
use crate::observe::AttemptEvent;
use crate::shared::Inner;

use super::timer::AttemptTimer;
use super::RequestId;

/// The outcome of one attempt, before it is turned into a record.
pub(in crate::transport) struct AttemptResult {
    pub(in crate::transport) kind: OutcomeKind,
    /// Which rejection a 401/403 is.
    pub(in crate::transport) rejection: Option<Rejection>,
    pub(in crate::transport) raw: Option<RawResponse>,
    pub(in crate::transport) detail: Option<String>,
    /// The transport failure's cause, kept for the error's `source()` chain.
    pub(in crate::transport) source: Option<BoxError>,
}

/// The liveness check of a node whose attempt timed out: `GET /` (through
/// [`background_get`](crate::health::background_get), like every background request),
/// bounded by min([`LIVENESS_CHECK_TIMEOUT`](crate::defaults::LIVENESS_CHECK_TIMEOUT),
/// the attempt timeout) and by the deadline. `Some(true)` when the node answered (any
/// status: only connectivity decides liveness), `Some(false)` when it did not, `None`
/// when the deadline passed first.
pub(super) async fn node_answers(
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

/// An attempt's exchange bounded by its timer: the answer, or `None` when the timer fired
/// first. Polled like tokio's `Timeout`: the exchange first, then the timer, which still
/// gets its turn when the exchange used up the task's coop budget.
pub(super) struct Bounded<'a> {
    send: SendFuture,
    /// `None`: nothing bounds the attempt.
    timer: Option<AttemptTimer>,
    /// Counts the attempt on its node until the exchange is over (or dropped).
    _in_flight: InFlight<'a>,
}

impl Future for Bounded<'_> {
    type Output = Option<Result<RawResponse, SendError>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let had_budget = tokio::task::coop::has_budget_remaining();
        if let Poll::Ready(answer) = self.send.as_mut().poll(cx) {
            return Poll::Ready(Some(answer));
        }
        let Some(timer) = self.timer.as_mut() else {
            return Poll::Pending;
        };
        let fired = if had_budget && !tokio::task::coop::has_budget_remaining() {
            Pin::new(&mut tokio::task::coop::unconstrained(timer)).poll(cx)
        } else {
            Pin::new(timer).poll(cx)
        };
        fired.map(|()| None)
    }
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
/// One timer bounds the attempt (a finished attempt's, kept for reuse: see `timer.rs`):
/// it fires at the earlier of the attempt's end and the deadline, and which of the two it
/// was decides the outcome (the deadline when it comes no later than the attempt's end).
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_attempt(
    inner: &Inner,
    request: &Request,
    request_id: &RequestId,
    node: &PoolNode,
    send: SendFuture,
    started: Started,
    attempt_timeout: Option<Duration>,
    deadline: Option<Instant>,
) -> (AttemptResult, Duration, Instant) {
    let (underway, bounded) = begin(request_id, node, send, started, attempt_timeout, deadline);
    // Entering a span nobody listens to is skipped (the common case has no subscriber).
    let answer = if underway.span.is_disabled() {
        bounded.await
    } else {
        bounded.instrument(underway.span.clone()).await
    };
    underway.finish(inner, request, request_id, node, attempt_timeout, answer)
}

/// An attempt sent and not yet answered: what its end needs.
///
/// [`run_attempt`] in three steps — [`begin`], awaiting the [`Bounded`] exchange,
/// [`Underway::finish`] — so the first attempt can run them inline in `execute`: the
/// exchange's answer is then moved out of one future instead of through `run_attempt`'s
/// as well.
pub(super) struct Underway {
    pub(super) span: tracing::Span,
    number: u32,
    attempt_start: Instant,
    /// The deadline, when it comes no later than the attempt's end (it bounds the attempt).
    deadline_first: Option<Instant>,
}

/// Starts attempt `started` on `node`: its span, and its exchange `send` bounded by one
/// timer at the earlier of the attempt's end and the deadline.
#[inline]
pub(super) fn begin<'a>(
    request_id: &RequestId,
    node: &'a PoolNode,
    send: SendFuture,
    started: Started,
    attempt_timeout: Option<Duration>,
    deadline: Option<Instant>,
) -> (Underway, Bounded<'a>) {
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
    // The request span (info) is the current one when enabled; with info off there is no
    // span of ours to record on, and looking the current one up costs on every attempt.
    if tracing::level_enabled!(tracing::Level::INFO) {
        let current = tracing::Span::current();
        current.record("server.address", node.addr.host());
        current.record("server.port", node.addr.port());
    }
    // An attempt timeout too large to represent as an instant bounds nothing.
    let attempt_end = attempt_timeout.and_then(|t| attempt_start.checked_add(t));
    let deadline_first = deadline.filter(|d| attempt_end.is_none_or(|a| *d <= a));
    let timer = deadline_first.or(attempt_end).map(AttemptTimer::at);
    let bounded = Bounded {
        send,
        timer,
        _in_flight: InFlight::start(&node.progress, attempt_start),
    };
    let underway = Underway {
        span,
        number,
        attempt_start,
        deadline_first,
    };
    (underway, bounded)
}

impl Underway {
    /// Ends an attempt that lost a hedge race: its exchange was dropped (its connection is
    /// closed, so the node cancels the task). Reports it as cancelled (span, observer) and
    /// returns its record; its node is not judged.
    pub(super) fn abandon(
        self,
        inner: &Inner,
        request: &Request,
        node: &PoolNode,
        winner: u32,
    ) -> crate::message::error::Attempt {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.attempt_start);
        if self.number == 1 {
            // The first attempt lost to its hedge: its node was at least this slow (a lower
            // bound, taken as an answer), which latency-aware selection should know. A
            // cancelled hedge says nothing (it was cut short by a faster answer).
            inner.pool.observe(node, now, elapsed, OutcomeKind::Success);
        }
        let kind = OutcomeKind::Cancelled;
        self.span.record("outcome", kind.as_str());
        self.span.record("elapsed_ms", elapsed.as_millis() as u64);
        inner.observer.attempt_finished(&AttemptEvent {
            method: &request.method,
            path: &request.path,
            node: node.addr.as_str(),
            attempt: self.number,
            outcome: kind,
            status: None,
            elapsed,
        });
        crate::message::error::Attempt {
            number: self.number,
            node: node.addr.shared(),
            outcome: kind,
            status: None,
            elapsed,
            backoff: Duration::ZERO,
            detail: Some(format!(
                "cancelled: hedged, and attempt {winner} answered first"
            )),
        }
    }

    /// Ends the attempt with `answer` (`None`: the timer fired): classifies it, reports it
    /// (span, log, observer) and returns the result, how long the attempt took and when
    /// it ended.
    #[inline]
    pub(super) fn finish(
        self,
        inner: &Inner,
        request: &Request,
        request_id: &RequestId,
        node: &PoolNode,
        attempt_timeout: Option<Duration>,
        answer: Option<Result<RawResponse, SendError>>,
    ) -> (AttemptResult, Duration, Instant) {
        let Underway {
            span,
            number,
            attempt_start,
            deadline_first,
        } = self;
        // No answer: the timer fired, at the deadline when it came first (the request ends,
        // its node is not judged), else at the attempt's end. The answer is looked at in
        // place and moved once, into the result (a response is ~150 bytes to copy).
        let deadline_passed = answer.is_none() && deadline_first.is_some();
        let end = Instant::now();
        if answer.is_some() {
            // The node gave something back: it is not cut off.
            node.progress.progressed(end);
        }
        let elapsed = end.saturating_duration_since(attempt_start);
        let ended = match &answer {
            None if deadline_passed => Ended::DeadlineExpired,
            None => Ended::TimedOut {
                after: attempt_timeout.unwrap_or_default(),
                attempt: true,
            },
            Some(Err(e)) => Ended::Failed {
                kind: e.kind,
                cause: &*e.source,
            },
            Some(Ok(raw)) => Ended::Answered {
                status: raw.status,
                body: &raw.body,
            },
        };
        let Outcome {
            kind,
            rejection,
            detail,
        } = classify::outcome(ended);
        inner.pool.observe(node, end, elapsed, kind);
        let (raw, source): (_, Option<BoxError>) = match answer {
            Some(Ok(raw)) => (Some(raw), None),
            Some(Err(e)) => (None, Some(e.source)),
            None if deadline_passed => (None, None),
            None => (
                None,
                Some(Box::new(AttemptTimedOut(
                    attempt_timeout.unwrap_or_default(),
                ))),
            ),
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
        if tracing::level_enabled!(tracing::Level::DEBUG) {
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
        }
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
}
