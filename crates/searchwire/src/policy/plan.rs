//! The retry planner: whether a failed attempt is retried, and after how long — a pure
//! function of plain facts, so every rule and the order of the rules is table-tested
//! without a client, a socket or a clock.
//!
//! The attempt loop gathers the [`Facts`] (it draws the random part of the backoff, asks the
//! breaker to admit the next attempt, reads the budget's balance), calls [`plan`], and
//! executes the [`Decision`]: it sleeps and retries, or fails with the last outcome. The
//! checks run in this order, and the first that says no decides:
//!
//! 1. **retry** — the retry policy: is the outcome retryable for this request (status list,
//!    idempotency), and is a retry left (the class rule's limit, else `max_retries`)?
//! 2. **breaker** — the cluster breaker's admission of the next attempt. An open breaker,
//!    or a half-open one with no probe slot free, refuses now, before any backoff is slept.
//! 3. **delay** — `Retry-After` when the server sent one (under a class rule, the rule's
//!    curve grown from it, never below it), else the backoff stretched by the load multiplier.
//! 4. **deadline** — a backoff that would end at or after the deadline is not started.
//! 5. **budget** — the retry budget must afford one retry; checked last, so a retry that
//!    another rule forbids never spends budget. A retry **paced by the server** — a 429
//!    whose `Retry-After` asked for at least 1 s ([`Facts::server_paced`]) — is neither
//!    refused by the budget nor charged to it: the server is alive, said when to come back,
//!    and already bounds the rate of those retries; the budget exists to bound retries the
//!    *client* chose to make into a failing cluster. The retry policy's limit and the
//!    deadline still bound it, and a 503 (an outage) or a 429 without a wait stays charged.

use std::time::Duration;

use http::StatusCode;

use crate::classify::OutcomeKind;
use crate::policy::load::scale;
use crate::policy::retry::{NoRetry, RetryPolicy};

/// The cluster breaker's answer for the next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// No breaker (switched off).
    Off,
    /// Closed: the attempt may go.
    Closed,
    /// Half-open, and the attempt holds one of the probe slots.
    Probe,
    /// Open, or half-open with every probe slot taken.
    Refused,
}

/// How long to wait before the retry, before the deadline is considered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Delay {
    /// A wait the server set with `Retry-After` (already capped) — exactly, or, under a
    /// class rule, grown from it and never below it: never stretched by the load multiplier.
    Hint(Duration),
    /// The backoff (the class rule's or the client's, with its random part already drawn),
    /// stretched by the load `multiplier` (1.0 when the adaptive jitter is off).
    Backoff {
        /// The backoff as computed.
        base: Duration,
        /// The adaptive-jitter multiplier.
        multiplier: f64,
    },
}

/// Everything the planner looks at, as plain values.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts {
    /// The failed attempt's classification.
    pub(crate) outcome: OutcomeKind,
    /// Its status, when the node answered.
    pub(crate) status: Option<StatusCode>,
    /// Whether the request may be repeated safely.
    pub(crate) idempotent: bool,
    /// Retries already made that count against `retry_limit`.
    pub(crate) retries_done: u32,
    /// The limit that applies: the class rule's `max_retries`, else the client's.
    pub(crate) retry_limit: u32,
    /// The breaker's admission of the retry.
    pub(crate) breaker: Gate,
    /// The delay before the retry.
    pub(crate) delay: Delay,
    /// Time left until the request's deadline (`None`: no deadline).
    pub(crate) deadline_remaining: Option<Duration>,
    /// Whether the retry budget affords a retry (`None`: no budget).
    pub(crate) budget_affords: Option<bool>,
    /// Whether the server paced this retry: a 429 with a `Retry-After` of at least 1 s.
    /// Such a retry is exempt from the budget (module docs).
    pub(crate) server_paced: bool,
}

/// The shortest `Retry-After` that makes a 429's retry server-paced (module docs).
pub(crate) const SERVER_PACED_MIN: Duration = Duration::from_secs(1);

impl Facts {
    /// Whether a retry decided from these facts is paid from the retry budget.
    pub(crate) fn charged_to_budget(&self) -> bool {
        !self.server_paced
    }
}

/// What the loop does next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Decision {
    /// Sleep `delay`, then make the next attempt.
    Retry {
        /// How long to wait.
        delay: Duration,
        /// The load multiplier applied (1.0 for a `Retry-After` delay).
        multiplier: f64,
    },
    /// Fail with the last outcome.
    Stop(Stop),
}

/// Why a failed attempt is not retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The retry policy says no (final outcome, not idempotent, retries used up).
    Policy(NoRetry),
    /// The cluster breaker refuses the next attempt.
    Breaker,
    /// The backoff would end after the deadline.
    Deadline {
        /// The backoff that did not fit.
        delay: Duration,
    },
    /// The retry budget is exhausted.
    Budget,
}

/// Decides, from `facts` alone, whether and after how long the failed attempt is retried.
/// The checks run in the order of the module documentation; the first refusal wins.
pub(crate) fn plan(policy: &RetryPolicy, facts: &Facts) -> Decision {
    if let Err(why) = policy.decide_within(
        facts.outcome,
        facts.status,
        facts.idempotent,
        facts.retries_done,
        facts.retry_limit,
    ) {
        return Decision::Stop(Stop::Policy(why));
    }
    if facts.breaker == Gate::Refused {
        return Decision::Stop(Stop::Breaker);
    }
    let (delay, multiplier) = match facts.delay {
        Delay::Hint(d) => (d, 1.0),
        Delay::Backoff { base, multiplier } => (scale(base, multiplier), multiplier),
    };
    if facts.deadline_remaining.is_some_and(|left| delay >= left) {
        return Decision::Stop(Stop::Deadline { delay });
    }
    if facts.budget_affords == Some(false) && facts.charged_to_budget() {
        return Decision::Stop(Stop::Budget);
    }
    Decision::Retry { delay, multiplier }
}

#[cfg(test)]
mod tests;
