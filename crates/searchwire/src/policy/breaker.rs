//! The cluster circuit breaker: when most of the recent attempts failed, stop sending for a
//! while, then let a few probes find out whether the cluster is back.
//!
//! # States
//!
//! The three state names are written here once and used everywhere — logs, metrics labels,
//! [`Client::breaker_state`](crate::Client::breaker_state):
//!
//! - **`closed`** — requests flow. Every attempt's verdict is counted in a sliding window
//!   (default 5 minutes). When the window holds at least `min_requests` attempts (50) and
//!   more than `failure_rate` of them failed (60 %), the breaker opens.
//! - **`open`** — requests fail at once with [`ErrorKind::CircuitOpen`](crate::ErrorKind)
//!   and no network traffic; retries of requests already in flight are not made. After the
//!   cool-down (5 s at first) the next request half-opens it.
//! - **`half_open`** — at most `probes` attempts (3) are let through as probes; the others
//!   are refused as in `open`. When `probes` probes have succeeded the breaker closes (with
//!   an empty window and the initial cool-down). A failed probe reopens it and doubles the
//!   cool-down, up to `max_cool_down` (60 s), so a long outage is probed ever more rarely.
//!
//! Transitions out of `open` are lazy: they happen when a request arrives (or the state is
//! read), never on a timer, so an idle client runs no task for its breaker.
//!
//! # What counts
//!
//! Failures: connect failures, resets, attempt timeouts, 502/503/504 and other 5xx
//! ([`OutcomeKind::is_cluster_failure`]). Successes: every other answer — 2xx/3xx, but also
//! 4xx, auth rejections and 429, because the cluster did answer. Ignored: the caller's
//! cancellation, which says nothing about the cluster.
//!
//! The design follows the three-state machine of the reference (closed → open → half-open
//! probes) and linkerd2-proxy's failure-accrual breaker (a probe that fails backs the
//! breaker off for longer). The per-node breaker (eject a node after consecutive failures,
//! readmit it through one probe) is the node pool's dead/alive state with its resurrection
//! timer; see `docs/architecture/transport.md`.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::classify::OutcomeKind;
use crate::policy::window::SlidingWindow;
use crate::sync::lock;

/// Slots of the breaker's sliding window.
const SLOTS: u32 = 30;

/// The state of a circuit breaker. The names are stable: see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BreakerState {
    /// Requests flow; outcomes are counted.
    Closed,
    /// Requests are refused without network traffic until the cool-down ends.
    Open,
    /// A bounded number of probes is let through to test recovery.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`: the name used in logs, metrics and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// Every state, in the order metrics list them.
    pub const ALL: [BreakerState; 3] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ];
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cluster breaker's configuration (plain data; defaults in [`crate::explain`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    /// The sliding window over which the failure rate is measured.
    pub window: Duration,
    /// Attempts the window must hold before the breaker may open.
    pub min_requests: u32,
    /// The breaker opens when the failed fraction of the window exceeds this (0..1).
    pub failure_rate: f64,
    /// How long the breaker stays open before the first probe.
    pub cool_down: Duration,
    /// The cool-down doubles after each failed probe, up to this.
    pub max_cool_down: Duration,
    /// Probes admitted while half-open; this many successes close the breaker.
    pub probes: u32,
}

impl Default for BreakerConfig {
    fn default() -> BreakerConfig {
        use crate::defaults as d;
        BreakerConfig {
            window: d::BREAKER_WINDOW,
            min_requests: d::BREAKER_MIN_REQUESTS,
            failure_rate: d::BREAKER_FAILURE_RATE,
            cool_down: d::BREAKER_COOL_DOWN,
            max_cool_down: d::BREAKER_MAX_COOL_DOWN,
            probes: d::BREAKER_PROBES,
        }
    }
}

impl BreakerConfig {
    /// Checks the values; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.window < Duration::from_secs(1) {
            return Err("circuit breaker window must be at least 1s".into());
        }
        if !(self.failure_rate > 0.0 && self.failure_rate < 1.0) {
            return Err(format!(
                "circuit breaker failure_rate {} must be between 0 and 1 (0.6 = 60 %)",
                self.failure_rate
            ));
        }
        if self.min_requests == 0 {
            return Err("circuit breaker min_requests must be at least 1".into());
        }
        if self.max_cool_down > Duration::from_secs(24 * 3600) {
            return Err("circuit breaker max_cool_down must be at most 24h".into());
        }
        if self.cool_down.is_zero() || self.max_cool_down < self.cool_down {
            return Err(
                "circuit breaker cool_down must be positive and max_cool_down at least cool_down"
                    .into(),
            );
        }
        if self.probes == 0 {
            return Err("circuit breaker probes must be at least 1".into());
        }
        Ok(())
    }
}

/// How one attempt's outcome counts for the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    Failure,
    Ignored,
}

impl Verdict {
    pub(crate) fn of(kind: OutcomeKind) -> Verdict {
        if kind == OutcomeKind::Cancelled {
            Verdict::Ignored
        } else if kind.is_cluster_failure() {
            Verdict::Failure
        } else {
            Verdict::Success
        }
    }
}

/// Whether an attempt may go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Closed: go.
    Allowed,
    /// Half-open: go, as one of the probes (report its verdict with `probe = true`, or
    /// release it).
    Probe,
    /// Open (or half-open with every probe out): do not send.
    Refused {
        /// Until the next probe may go (zero when probes are in flight).
        retry_in: Duration,
    },
}

/// A state change, for logs, metrics and observers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub from: BreakerState,
    pub to: BreakerState,
    pub reason: String,
}

#[derive(Debug)]
struct State {
    state: BreakerState,
    window: SlidingWindow,
    opened_at: Instant,
    cool_down: Duration,
    /// Probes admitted and not yet reported (half-open).
    probes_out: u32,
    /// Probes that succeeded (half-open).
    probe_successes: u32,
    /// Why the breaker last opened, for error messages.
    reason: String,
    /// Which half-open round this is (bumped on every open → half-open), so a probe from
    /// an earlier round that reports late cannot count in (or free a slot of) this one.
    generation: u64,
}

/// The live breaker of one client.
#[derive(Debug)]
pub(crate) struct Breaker {
    cfg: BreakerConfig,
    st: Mutex<State>,
    /// Whether the state is `closed`: written under the lock with every change of state
    /// ([`Breaker::enter`]), read without it, so admitting an attempt to a closed breaker
    /// (every request on a good day) takes no lock.
    closed: AtomicBool,
}

impl Breaker {
    pub(crate) fn new(cfg: BreakerConfig, now: Instant) -> Breaker {
        Breaker {
            st: Mutex::new(State {
                state: BreakerState::Closed,
                window: SlidingWindow::new(now, cfg.window, SLOTS),
                opened_at: now,
                cool_down: cfg.cool_down,
                probes_out: 0,
                probe_successes: 0,
                reason: String::new(),
                generation: 0,
            }),
            closed: AtomicBool::new(true),
            cfg,
        }
    }

    /// Moves to `to` (the lock held: `st` is the locked state).
    fn enter(&self, st: &mut State, to: BreakerState) {
        st.state = to;
        self.closed
            .store(to == BreakerState::Closed, Ordering::Release);
    }

    /// Whether the breaker is closed, read without the lock: a closed breaker admits every
    /// attempt and changes nothing ([`admit_in_round`](Self::admit_in_round) answers
    /// `Allowed`, no change), so the attempt loop asks this first and skips the call.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The state at `now` (an open breaker whose cool-down ended reads as half-open).
    pub(crate) fn state(&self, now: Instant) -> (BreakerState, Option<Change>) {
        let mut st = lock(&self.st);
        let change = self.maybe_half_open(&mut st, now);
        (st.state, change)
    }

    /// When the breaker is open at `now` and its cool-down has not ended: the instant it
    /// ends. `None` when closed, half-open, or due to half-open. Changes nothing (the
    /// transition stays lazy: the first request after that instant makes it).
    pub(crate) fn open_until(&self, now: Instant) -> Option<Instant> {
        let st = lock(&self.st);
        if st.state != BreakerState::Open {
            return None;
        }
        st.opened_at
            .checked_add(st.cool_down)
            .filter(|&at| now < at)
    }

    fn maybe_half_open(&self, st: &mut State, now: Instant) -> Option<Change> {
        if st.state == BreakerState::Open
            && st
                .opened_at
                .checked_add(st.cool_down)
                .is_none_or(|at| now >= at)
        {
            self.enter(st, BreakerState::HalfOpen);
            st.probes_out = 0;
            st.probe_successes = 0;
            st.generation = st.generation.wrapping_add(1);
            return Some(Change {
                from: BreakerState::Open,
                to: BreakerState::HalfOpen,
                reason: format!(
                    "cool-down of {} ended; admitting up to {} probe(s)",
                    crate::clock::duration::format_duration(st.cool_down),
                    self.cfg.probes
                ),
            });
        }
        None
    }

    /// Asks whether one attempt may go out at `now`.
    #[cfg(test)]
    pub(crate) fn admit(&self, now: Instant) -> (Admission, Option<Change>) {
        let (a, c, _) = self.admit_in_round(now);
        (a, c)
    }

    /// Like `admit`, also returning the half-open round a probe belongs to (for
    /// [`ProbeSlot::new`]; meaningful only with [`Admission::Probe`]).
    pub(crate) fn admit_in_round(&self, now: Instant) -> (Admission, Option<Change>, u64) {
        // Closed: nothing to change, nothing to count (only verdicts count).
        if self.is_closed() {
            return (Admission::Allowed, None, 0);
        }
        let mut st = lock(&self.st);
        let change = self.maybe_half_open(&mut st, now);
        let admission = match st.state {
            BreakerState::Closed => Admission::Allowed,
            BreakerState::Open => Admission::Refused {
                retry_in: st
                    .opened_at
                    .checked_add(st.cool_down)
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
            },
            BreakerState::HalfOpen => {
                if st.probes_out.saturating_add(st.probe_successes) < self.cfg.probes {
                    st.probes_out += 1;
                    Admission::Probe
                } else {
                    Admission::Refused {
                        retry_in: Duration::ZERO,
                    }
                }
            }
        };
        (admission, change, st.generation)
    }

    /// Why the breaker last opened.
    pub(crate) fn reason(&self) -> String {
        lock(&self.st).reason.clone()
    }

    /// A probe of round `generation` was admitted but never reported (its request was
    /// cancelled): free its slot, if that round is still the current one.
    pub(crate) fn release_probe(&self, generation: u64) {
        let mut st = lock(&self.st);
        if st.state == BreakerState::HalfOpen && st.generation == generation {
            st.probes_out = st.probes_out.saturating_sub(1);
        }
    }

    /// Reports an attempt's verdict. `probe` says whether it was admitted as a probe of
    /// the current half-open round.
    #[inline]
    pub(crate) fn record(&self, now: Instant, verdict: Verdict, probe: bool) -> Option<Change> {
        let generation = probe.then(|| lock(&self.st).generation);
        self.record_in_round(now, verdict, generation)
    }

    /// Reports an attempt's verdict; `probe_round` is the half-open round it was admitted
    /// as a probe in. A probe of an earlier round counts as an ordinary report.
    pub(crate) fn record_in_round(
        &self,
        now: Instant,
        verdict: Verdict,
        probe_round: Option<u64>,
    ) -> Option<Change> {
        let mut st = lock(&self.st);
        let probe = probe_round == Some(st.generation);
        match (st.state, probe) {
            (BreakerState::HalfOpen, true) => {
                st.probes_out = st.probes_out.saturating_sub(1);
                match verdict {
                    Verdict::Ignored => None,
                    Verdict::Success => {
                        st.probe_successes += 1;
                        if st.probe_successes >= self.cfg.probes {
                            self.enter(&mut st, BreakerState::Closed);
                            st.window.clear();
                            st.cool_down = self.cfg.cool_down;
                            Some(Change {
                                from: BreakerState::HalfOpen,
                                to: BreakerState::Closed,
                                reason: format!("{} probe(s) succeeded", st.probe_successes),
                            })
                        } else {
                            None
                        }
                    }
                    Verdict::Failure => {
                        let next = st.cool_down.saturating_mul(2).min(self.cfg.max_cool_down);
                        st.cool_down = next;
                        self.enter(&mut st, BreakerState::Open);
                        st.opened_at = now;
                        st.reason = "a half-open probe failed".into();
                        Some(Change {
                            from: BreakerState::HalfOpen,
                            to: BreakerState::Open,
                            reason: format!(
                                "a probe failed; next probe in {}",
                                crate::clock::duration::format_duration(next)
                            ),
                        })
                    }
                }
            }
            (BreakerState::Closed, _) => {
                let counter = match verdict {
                    Verdict::Ignored => return None,
                    Verdict::Success => 0,
                    Verdict::Failure => 1,
                };
                st.window.add(now, counter, 1);
                if verdict != Verdict::Failure {
                    return None;
                }
                let [ok, failed] = st.window.sum(now);
                let total = ok + failed;
                if total >= i64::from(self.cfg.min_requests)
                    && failed as f64 > self.cfg.failure_rate * total as f64
                {
                    self.enter(&mut st, BreakerState::Open);
                    st.opened_at = now;
                    st.cool_down = self.cfg.cool_down;
                    st.reason = format!(
                        "{failed} of the last {total} attempts failed within {} (more than {}%)",
                        crate::clock::duration::format_duration(self.cfg.window),
                        (self.cfg.failure_rate * 100.0).round(),
                    );
                    Some(Change {
                        from: BreakerState::Closed,
                        to: BreakerState::Open,
                        reason: format!(
                            "{}; refusing requests for {}",
                            st.reason,
                            crate::clock::duration::format_duration(st.cool_down)
                        ),
                    })
                } else {
                    None
                }
            }
            // Attempts admitted while closed that end after the breaker opened, and
            // non-probe reports while half-open: the decision was already made.
            _ => None,
        }
    }
}

/// Frees a half-open probe slot if the attempt never reports (its future was dropped).
pub(crate) struct ProbeSlot<'a> {
    breaker: Option<&'a Breaker>,
    generation: u64,
}

impl<'a> ProbeSlot<'a> {
    /// A probe admitted in half-open round `generation`.
    pub(crate) fn new(breaker: &'a Breaker, generation: u64) -> ProbeSlot<'a> {
        ProbeSlot {
            breaker: Some(breaker),
            generation,
        }
    }

    /// Reports the probe's verdict (consumes the slot).
    pub(crate) fn record(mut self, now: Instant, verdict: Verdict) -> Option<Change> {
        let generation = self.generation;
        self.breaker
            .take()
            .and_then(|b| b.record_in_round(now, verdict, Some(generation)))
    }
}

impl Drop for ProbeSlot<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.breaker.take() {
            b.release_probe(self.generation);
        }
    }
}

#[cfg(test)]
mod tests;
