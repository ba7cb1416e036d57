//! The attempt loop: one request's attempts, from the first to the response or the error.
//!
//! The hot path lives here: [`execute`] runs the first attempt inline and returns a
//! success from there. `attempt.rs` runs one attempt (its timer, classification and
//! report) and the liveness check after an attempt timeout; `timer.rs` is the attempt
//! timer (kept per thread for the next attempt); `retry.rs` is the rest of the loop
//! (settling a failed attempt, the retry decision, backoff).

mod attempt;
mod hedge;
mod request_id;
mod retry;
mod timer;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use tokio::time::Instant;
use tracing::Instrument;

use crate::classify::OutcomeKind;
use crate::http::addr::NodeAddr;
use crate::http::connector::SendFuture;
use crate::message::error::{Attempt, Error, ErrorKind};
use crate::message::request::{Deadline, Request};
use crate::message::response::{Attempts, Response};
use crate::nodes::pool::PoolNode;
use crate::observe::BreakerEvent;
use crate::policy::breaker::{Admission, BreakerState, Change, ProbeSlot, Verdict};
use crate::shared::Inner;
use crate::transport::failure::circuit_open_error;

pub(in crate::transport) use attempt::AttemptResult;
use attempt::{run_attempt, Started};
pub(in crate::transport) use request_id::RequestId;
use retry::Prior;

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
    let body = request.body.clone().unwrap_or_default();
    let mut req = http::Request::new(Full::new(body));
    *req.method_mut() = request.method.clone();
    *req.uri_mut() = uri;
    // The request's own (empty) map, filled in place: no second map built, moved in and
    // the empty one dropped. Sized for the headers hyper may add (`content-length`): a
    // clone of the defaults would be full, and hyper's first insert would reallocate it.
    let headers = req.headers_mut();
    headers.reserve(inner.headers.len() + request.headers.len() + 3);
    // The `Host` header hyper would add, made once per node; a default or the request's
    // own `Host` replaces it, as hyper leaves a set one alone.
    if let Some(host) = node.host_header() {
        headers.insert(http::header::HOST, host.clone());
    }
    if request.client_credentials {
        for (k, v) in inner.headers.iter() {
            headers.insert(k, v.clone());
        }
    } else {
        for (k, v) in inner.headers.iter() {
            if k != http::header::AUTHORIZATION {
                headers.insert(k, v.clone());
            }
        }
        req.extensions_mut()
            .insert(crate::message::request::WithoutClientCredentials);
    }
    let headers = req.headers_mut();
    for (k, v) in request.headers.iter() {
        headers.insert(k, v.clone());
    }
    // Compression on: gzip answers are asked for and inflated by the connector within
    // `max_response_bytes`, unless the caller asked for an encoding itself (it then gets
    // the answer as the node sent it: the relay's pass-through forwards it so).
    if inner.compress_min_bytes.is_some() && !headers.contains_key(http::header::ACCEPT_ENCODING) {
        headers.insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
        req.extensions_mut()
            .insert(crate::http::gzip::InflateAnswer);
    }
    Ok(req)
}

/// What every attempt of one request shares, computed once before the first.
struct Run<'a> {
    inner: &'a Arc<Inner>,
    request: &'a Request,
    request_id: &'a RequestId,
    start: Instant,
    deadline: Option<Instant>,
    attempt_timeout: Option<Duration>,
    query: String,
}

/// The attempt loop of one request (see `docs/architecture/transport.md`, "The request flow").
///
/// The first attempt runs inline and a success returns from here; anything else — a
/// failed or timed-out first attempt, the retries, their backoff and liveness checks —
/// continues in [`Run::settle_and_retry`], boxed, so this future (moved on every request)
/// holds only what the first attempt needs.
pub(super) async fn execute(
    inner: &Arc<Inner>,
    request: &Request,
    request_id: &RequestId,
    start: Instant,
) -> Result<Response, Error> {
    let deadline = effective_deadline(inner, request, start);
    if too_late_to_start(deadline, start) {
        return Err(too_late_error(deadline, start, 1, Vec::new()));
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
    // A hedged read runs its own first attempts (see `hedge.rs`); with hedging off this is
    // two tests of `None`.
    if request.hedge.is_some() || inner.hedging.is_some() {
        if let Some(delay) = hedge::wanted(inner, request) {
            return Box::pin(run.hedged(delay)).await;
        }
    }
    // The first attempt's clock reading is the request's start (nothing awaited since).
    let probe = run.admit(start)?;
    if let Some(budget) = &inner.budget {
        budget.deposit(start);
    }
    let Some(node) = inner.pool.select_at(&[], start) else {
        return Err(no_node(Vec::new()));
    };
    let send = run.send(&node)?;
    // `run_attempt`'s steps, inline: the answer is moved out of one future, not two.
    let started = Started {
        number: 1,
        at: start,
    };
    let (underway, bounded) = attempt::begin(
        request_id,
        &node,
        send,
        started,
        run.attempt_timeout,
        deadline,
    );
    // Entering a span nobody listens to is skipped (the common case has no subscriber).
    let answer = if underway.span.is_disabled() {
        bounded.await
    } else {
        bounded.instrument(underway.span.clone()).await
    };
    let (mut result, elapsed, ended) = underway.finish(
        inner,
        request,
        request_id,
        &node,
        run.attempt_timeout,
        answer,
    );
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
    Box::pin(run.settle_and_retry(node, probe, result, elapsed, ended, Prior::first())).await
}

/// The shortest time before the deadline in which an attempt may still start: the
/// resolution of tokio's timer (1 ms). The timer that bounds an attempt fires at the first
/// tick at or after the deadline, so an attempt started with less than a tick left would
/// run unbounded by the deadline — a deadline of 1 ns would let a fast node answer a
/// request that should never have been sent.
const SHORTEST_START: Duration = Duration::from_millis(1);

/// Whether the deadline ends too soon after `now` for an attempt to start within it (it
/// has passed, or less than [`SHORTEST_START`] is left).
#[inline]
fn too_late_to_start(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|d| d.saturating_duration_since(now) < SHORTEST_START)
}

/// The error of a request whose deadline ended before attempt `number` could start:
/// nothing more was sent (`attempts` are the ones made before).
#[cold]
#[inline(never)]
fn too_late_error(
    deadline: Option<Instant>,
    start: Instant,
    number: u32,
    attempts: Vec<Attempt>,
) -> Error {
    let total = deadline
        .map(|d| d.saturating_duration_since(start))
        .unwrap_or_default();
    let what = if number == 1 {
        "nothing was sent".to_string()
    } else {
        format!("attempt {number} was not sent")
    };
    Error::new(
        ErrorKind::DeadlineExceeded,
        format!(
            "deadline of {} exceeded before attempt {number} could start; {what}",
            crate::clock::duration::format_duration(total),
        ),
    )
    .with_attempts(attempts)
}

impl<'a> Run<'a> {
    /// The breaker's admission of an attempt at `now` (see [`admit`]); a refusal is the
    /// request's error.
    #[inline]
    fn admit(&self, now: Instant) -> Result<Option<ProbeSlot<'a>>, Error> {
        match &self.inner.breaker {
            // Closed (every request on a good day): admitted, nothing to report; no call.
            Some(b) if !b.is_closed() => self.admit_not_closed(now),
            _ => Ok(None),
        }
    }

    /// [`admit`](Self::admit) when the breaker was not closed.
    #[cold]
    #[inline(never)]
    fn admit_not_closed(&self, now: Instant) -> Result<Option<ProbeSlot<'a>>, Error> {
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

    /// Runs attempt `number` (see [`run_attempt`]). A plain function returning
    /// `run_attempt`'s future, not an `async fn` around it: one future layer less to
    /// build and move per attempt.
    fn attempt<'n>(
        &'n self,
        node: &'n PoolNode,
        send: SendFuture,
        number: u32,
        at: Instant,
    ) -> impl Future<Output = (AttemptResult, Duration, Instant)> + 'n {
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
}

/// The error when no node can take an attempt, with the `attempts` made so far.
fn no_node(attempts: Vec<Attempt>) -> Error {
    Error::new(
        ErrorKind::NoNodeReachable,
        "no node reachable: no node is alive and none has ever answered",
    )
    .with_attempts(attempts)
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

/// Logs and reports a cluster breaker transition. Inlined: almost every call has none
/// (every booked attempt of a closed breaker), and that case is then one test, no call.
#[inline]
pub(super) fn breaker_changed(inner: &Inner, change: Option<Change>) {
    if let Some(c) = change {
        report_breaker_change(inner, c);
    }
}

/// [`breaker_changed`] with a transition.
#[cold]
#[inline(never)]
fn report_breaker_change(inner: &Inner, c: Change) {
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

/// Percent-encodes query pairs. Most requests have none: that case is inlined into the
/// caller (no call, no allocation).
#[inline]
fn encode_query(pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        String::new()
    } else {
        encode_pairs(pairs)
    }
}

/// [`encode_query`] of at least one pair.
#[inline(never)]
fn encode_pairs(pairs: &[(String, String)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish()
}
