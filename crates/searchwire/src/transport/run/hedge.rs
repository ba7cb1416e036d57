//! Hedged reads in the attempt loop: the first attempt, and after the hedge delay a second
//! one to another node; the first decisive answer wins and the other attempt is dropped
//! (its connection closed, so the node cancels the task). What follows a race that ended
//! in failure is the ordinary retry loop (`retry.rs`). The policy — which requests, which
//! delay, the budget — is `policy/hedge.rs`.

use std::pin::Pin;
use std::sync::Arc;

use http::Method;
use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::{self, AttemptResult, Bounded, Started, Underway};
use super::retry::Prior;
use super::{no_node, Run};
use crate::classify::OutcomeKind;
use crate::http::connector::{RawResponse, SendError};
use crate::message::error::{Attempt, Error};
use crate::message::request::Request;
use crate::message::response::{Attempts, Response};
use crate::nodes::pool::{node_key, PoolNode};
use crate::observe::{HedgeEvent, HedgeResult};
use crate::policy::breaker::ProbeSlot;
use crate::policy::hedge::{HedgeChoice, HedgeDelay};
use crate::shared::Inner;

/// The hedge delay of `request`, when it is a read to hedge: its own choice, else the
/// client's setting.
pub(super) fn wanted(inner: &Inner, request: &Request) -> Option<HedgeDelay> {
    let delay = match request.hedge {
        Some(HedgeChoice::Off) => return None,
        Some(HedgeChoice::On(d)) => d,
        None => inner.hedging?.delay,
    };
    is_hedgeable(request).then_some(delay)
}

/// The endpoints (a path's last segment) whose `POST` is a read that may be hedged.
const HEDGEABLE_POST_ENDPOINTS: [&str; 5] =
    ["_search", "_count", "_mget", "_msearch", "_field_caps"];

/// Path segments of requests that are never hedged, whatever their method: scroll,
/// point-in-time and async search (see the module docs).
const NEVER_HEDGED_SEGMENTS: [&str; 4] = ["scroll", "point_in_time", "_pit", "_async_search"];

/// Whether `request` is a read that may be hedged (see `policy/hedge.rs`). An explicit
/// `idempotent(false)` rules it out.
pub(crate) fn is_hedgeable(request: &Request) -> bool {
    if request.idempotent == Some(false) {
        return false;
    }
    let (path, path_query) = match request.sent_path().split_once('?') {
        Some((p, q)) => (p, q),
        None => (request.sent_path(), ""),
    };
    let scroll = path_query
        .split('&')
        .any(|p| p.split('=').next() == Some("scroll"))
        || request.query.iter().any(|(k, _)| k == "scroll");
    if scroll {
        return false;
    }
    let mut segments = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy());
    let mut last = None;
    for s in segments.by_ref() {
        if NEVER_HEDGED_SEGMENTS.contains(&&*s) {
            return false;
        }
        last = Some(s);
    }
    match request.method {
        Method::GET | Method::HEAD => true,
        Method::POST => last.is_some_and(|l| HEDGEABLE_POST_ENDPOINTS.contains(&&*l)),
        _ => false,
    }
}

/// One attempt's exchange, instrumented with its span, boxed so the loser can be dropped.
type Exchange<'n> = Pin<Box<tracing::instrument::Instrumented<Bounded<'n>>>>;

/// An attempt in flight: its number, node, span and exchange.
struct Flight<'n> {
    node: &'n Arc<PoolNode>,
    underway: Underway,
    exchange: Exchange<'n>,
}

/// A finished attempt, classified and reported, not yet booked.
struct Finished {
    node: Arc<PoolNode>,
    number: u32,
    result: AttemptResult,
    elapsed: std::time::Duration,
    ended: Instant,
}

/// Whether a finished attempt ends the race: an answer another node would not better (a
/// success, a client error, a rejection, a body too large) or the request's end
/// (cancelled). A failure another node may not share (connect, reset, timeout, 429, 5xx)
/// lets the other attempt go on.
fn decisive(kind: OutcomeKind) -> bool {
    matches!(
        kind,
        OutcomeKind::Success
            | OutcomeKind::Auth
            | OutcomeKind::ClientError
            | OutcomeKind::TooLarge
            | OutcomeKind::Cancelled
    )
}

impl<'a> Run<'a> {
    /// A hedged read (see `policy/hedge.rs`): the first attempt; after the hedge delay
    /// without an answer, a second attempt to another node when the breaker is closed and
    /// both budgets afford it; the first decisive answer wins.
    pub(super) async fn hedged(self, delay: HedgeDelay) -> Result<Response, Error> {
        let (inner, start) = (self.inner, self.start);
        let probe = self.admit(start)?;
        if let Some(budget) = &inner.budget {
            budget.deposit(start);
        }
        inner.hedge.deposit(start);
        let Some(node) = inner.pool.select_at(&[], start) else {
            return Err(no_node(Vec::new()));
        };
        let mut first = self.start_attempt(&node, 1, start)?;
        let hedge_delay = inner.hedge.delay(delay);
        let answer = match hedge_delay.and_then(|d| start.checked_add(d)) {
            Some(at) => {
                tokio::select! {
                    biased;
                    a = first.exchange.as_mut() => Some(a),
                    () = tokio::time::sleep_until(at) => None,
                }
            }
            None => Some(first.exchange.as_mut().await),
        };
        if let Some(answer) = answer {
            let done = self.finish(first, 1, answer);
            return self.settle_one(done, probe).await;
        }
        let waited = hedge_delay.unwrap_or_default();
        let Some(other) = self.admit_hedge(&node, probe.is_some(), waited) else {
            let answer = first.exchange.as_mut().await;
            let done = self.finish(first, 1, answer);
            return self.settle_one(done, probe).await;
        };
        let second = self.start_attempt(&other, 2, Instant::now())?;
        self.event(HedgeResult::Sent, waited);
        self.race(first, second, waited).await
    }

    /// Starts attempt `number` on `node` at `now`: its request, span and bounded exchange.
    fn start_attempt<'n>(
        &self,
        node: &'n Arc<PoolNode>,
        number: u32,
        now: Instant,
    ) -> Result<Flight<'n>, Error> {
        let send = self.send(node)?;
        let (underway, bounded) = attempt::begin(
            self.request_id,
            node,
            send,
            Started { number, at: now },
            self.attempt_timeout,
            self.deadline,
        );
        let span = underway.span.clone();
        Ok(Flight {
            node,
            underway,
            exchange: Box::pin(bounded.instrument(span)),
        })
    }

    /// Ends attempt `number` of `flight` with `answer`: classifies and reports it, and
    /// records its latency for the percentile delay.
    fn finish(
        &self,
        flight: Flight<'_>,
        number: u32,
        answer: Option<Result<RawResponse, SendError>>,
    ) -> Finished {
        let Flight { node, underway, .. } = flight;
        let (result, elapsed, ended) = underway.finish(
            self.inner,
            self.request,
            self.request_id,
            node,
            self.attempt_timeout,
            answer,
        );
        self.inner.hedge.record(elapsed);
        Finished {
            node: node.clone(),
            number,
            result,
            elapsed,
            ended,
        }
    }

    /// The node for a hedge of the attempt on `first`, when one may be sent now: the
    /// breaker is closed (no probe held), the deadline leaves time, another node can take
    /// it, and the hedge budget and the retry budget each afford one. Reports a denial.
    fn admit_hedge(
        &self,
        first: &Arc<PoolNode>,
        probe_held: bool,
        waited: std::time::Duration,
    ) -> Option<Arc<PoolNode>> {
        let inner = self.inner;
        let now = Instant::now();
        if probe_held || inner.breaker.as_ref().is_some_and(|b| !b.is_closed()) {
            self.event(HedgeResult::DeniedBreaker, waited);
            return None;
        }
        if super::too_late_to_start(self.deadline, now) {
            return None;
        }
        let other = inner
            .pool
            .select_at(&[node_key(first)], now)
            .filter(|n| node_key(n) != node_key(first));
        let Some(other) = other else {
            self.event(HedgeResult::NoNode, waited);
            return None;
        };
        let retry_budget_ok = inner.budget.as_ref().is_none_or(|b| b.affords(now));
        if !retry_budget_ok || !inner.hedge.withdraw(now) {
            self.event(HedgeResult::DeniedBudget, waited);
            return None;
        }
        // Shared with the retries: a hedge takes one retry, as a retry does.
        if let Some(b) = &inner.budget {
            if !b.withdraw(now) {
                self.event(HedgeResult::DeniedBudget, waited);
                return None;
            }
        }
        Some(other)
    }

    /// Reports a hedge event.
    fn event(&self, result: HedgeResult, delay: std::time::Duration) {
        tracing::debug!(
            retry_id = %self.request_id,
            hedge = result.as_str(),
            delay_ms = delay.as_millis() as u64,
            "hedge"
        );
        self.inner.observer.hedge(&HedgeEvent {
            method: &self.request.method,
            result,
            delay,
        });
    }

    /// Two attempts in flight: the first decisive answer wins and the other is dropped;
    /// a failure lets the other go on; two failures continue in the retry loop.
    async fn race(
        self,
        first: Flight<'_>,
        second: Flight<'_>,
        waited: std::time::Duration,
    ) -> Result<Response, Error> {
        let (mut a, mut b) = (first, second);
        let (done, rest) = tokio::select! {
            biased;
            answer = a.exchange.as_mut() => (self.finish(a, 1, answer), b),
            answer = b.exchange.as_mut() => (self.finish(b, 2, answer), a),
        };
        let mut tried = [0usize; 8];
        let (one, two) = if done.number == 1 {
            (&done.node, rest.node)
        } else {
            (rest.node, &done.node)
        };
        tried[0] = node_key(one);
        tried[1] = node_key(two);
        if decisive(done.result.kind) {
            self.event(
                if done.number == 2 {
                    HedgeResult::Won
                } else {
                    HedgeResult::Lost
                },
                waited,
            );
            // Dropping the exchange closes its connection: the node cancels the task.
            let Flight {
                node,
                underway,
                exchange,
            } = rest;
            drop(exchange);
            let lost = underway.abandon(self.inner, self.request, node, done.number);
            return self.settle_after(done, vec![lost], tried).await;
        }
        // The first to end failed: the other may still answer.
        let mut rest = rest;
        let answer = rest.exchange.as_mut().await;
        let rest_number = 3 - done.number;
        let later = self.finish(rest, rest_number, answer);
        if later.result.kind == OutcomeKind::Success {
            self.event(
                if later.number == 2 {
                    HedgeResult::Won
                } else {
                    HedgeResult::Lost
                },
                waited,
            );
        }
        // The failure is booked as a failure of its node; a timeout leaves its node alive
        // (no liveness check was made for it while the other attempt ran).
        let record = self.book_finished(&done);
        self.settle_after(later, vec![record], tried).await
    }

    /// Books a finished attempt that is not the request's last (see [`Run::book`]).
    fn book_finished(&self, f: &Finished) -> Attempt {
        let status = f.result.raw.as_ref().map(|r| r.status);
        let slow = f.result.kind == OutcomeKind::Timeout;
        self.book(
            &f.node, None, f.number, &f.result, status, f.elapsed, f.ended, slow,
        )
    }

    /// The attempt that ended the race (or followed a failed one): a success is the
    /// response; anything else continues in the retry loop with the attempts before it.
    async fn settle_after(
        self,
        done: Finished,
        mut attempts: Vec<Attempt>,
        tried: [usize; 8],
    ) -> Result<Response, Error> {
        let Finished {
            node,
            number,
            mut result,
            elapsed,
            ended,
        } = done;
        if result.kind == OutcomeKind::Success {
            if let Some(raw) = result.raw.take() {
                let record = self.book(
                    &node,
                    None,
                    number,
                    &result,
                    Some(raw.status),
                    elapsed,
                    ended,
                    false,
                );
                attempts.push(record);
                return Ok(Response {
                    status: raw.status,
                    headers: raw.headers,
                    body: raw.body,
                    node: node.addr.shared(),
                    attempts: Attempts::Many(attempts),
                });
            }
        }
        let prior = Prior {
            attempts,
            tried,
            current: number,
            made: 2,
        };
        Box::pin(self.settle_and_retry(node, None, result, elapsed, ended, prior)).await
    }

    /// A hedged read whose first attempt ended before any hedge: as an unhedged request.
    async fn settle_one(
        self,
        done: Finished,
        probe: Option<ProbeSlot<'a>>,
    ) -> Result<Response, Error> {
        let Finished {
            node,
            number,
            mut result,
            elapsed,
            ended,
        } = done;
        if result.kind == OutcomeKind::Success {
            if let Some(raw) = result.raw.take() {
                let record = self.book(
                    &node,
                    probe,
                    number,
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
        Box::pin(self.settle_and_retry(node, probe, result, elapsed, ended, Prior::first())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hedgeable(r: Request) -> bool {
        is_hedgeable(&r)
    }

    #[test]
    fn only_idempotent_reads_are_hedged() {
        assert!(hedgeable(Request::get("/logs/_doc/1")));
        assert!(hedgeable(Request::head("/logs")));
        assert!(hedgeable(Request::get("/logs/_search")));
        for e in ["_search", "_count", "_mget", "_msearch", "_field_caps"] {
            assert!(hedgeable(Request::post(format!("/logs/{e}"))), "{e}");
        }
        assert!(hedgeable(Request::post("/_msearch")));
        // Writes.
        assert!(!hedgeable(Request::post("/_bulk")));
        assert!(!hedgeable(Request::put("/logs/_doc/1")));
        assert!(!hedgeable(Request::delete("/logs/_doc/1")));
        assert!(!hedgeable(Request::post("/logs/_update/1")));
        assert!(!hedgeable(Request::post("/logs/_doc")));
        // Scroll, point in time, async search.
        assert!(!hedgeable(
            Request::post("/logs/_search").query("scroll", "1m")
        ));
        assert!(!hedgeable(Request::post("/logs/_search?scroll=1m")));
        assert!(!hedgeable(Request::get("/_search/scroll")));
        assert!(!hedgeable(Request::post("/_search/scroll")));
        assert!(!hedgeable(Request::post("/logs/_search/point_in_time")));
        assert!(!hedgeable(Request::post("/logs/_pit")));
        assert!(!hedgeable(Request::post("/logs/_async_search")));
        assert!(!hedgeable(Request::get("/_async_search/abc")));
        // Percent-encoded endpoints are decided as sent.
        assert!(!hedgeable(Request::get("/%5Fasync_search/abc")));
        // The caller's word wins.
        assert!(!hedgeable(Request::get("/logs/_search").idempotent(false)));
    }
}
