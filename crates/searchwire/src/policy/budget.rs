//! The retry budget: retries may add at most a fixed fraction of load on top of the
//! requests themselves, plus a small floor per second.
//!
//! # Why a budget, and not only `max_retries`
//!
//! `max_retries` bounds one request; it does not bound the client. With the default of 3,
//! a cluster that answers 503 to everything receives four attempts per request: an outage
//! quadruples the load on exactly the system that is struggling, and every layer that
//! retries on top of searchwire (an application retry loop, a queue consumer redelivering)
//! multiplies it again. Picking a "safe" `max_retries` is a guessing game: low enough to be
//! harmless in a storm is too low to step over a dead node on a good day.
//!
//! A budget states the bound directly: *retries may add at most 20 % to the traffic this
//! client sends anyway*. On a good day a few retries are always affordable; in a storm the
//! budget is spent after the first few failures and the client degrades to one attempt per
//! request, failing fast with the real outcome instead of hammering the cluster.
//!
//! # Design
//!
//! This follows Finagle's `RetryBudget` and tower's `TpsBudget` (tower `retry/budget`):
//! every first attempt **deposits** `ratio` of a retry, every retry **withdraws** one, and
//! deposits and withdrawals expire after `window` (10 s), so the budget follows the recent
//! traffic rather than the client's whole history. A **reserve** of `min_per_sec × window`
//! retries is always available on top, so a client that sends one request a minute can
//! still retry it (a pure percentage would give it nothing).
//!
//! We chose this over a token bucket refilled by successes (gRPC retry throttling, the AWS
//! SDKs' retry quota) because those are failure-driven: they drain on failures and refill on
//! successes, so their bound is "stop retrying once the cluster looks bad", which overlaps
//! with the circuit breaker. The tower/Finagle budget is load-driven: its bound is a ratio of
//! the client's own request rate, which is the quantity an operator can reason about
//! ("retries add at most 20 %"), and it is independent of what counts as failure.
//!
//! The first attempt of a request is never refused. A retry that finds the budget empty is
//! not made: the request fails with its last outcome (its [`ErrorKind`](crate::ErrorKind)
//! is that of the last attempt) and a message saying the retry budget was exhausted.
//!
//! Accounting is exact and pure: amounts are fixed-point (1 retry = 1000 units) and time is
//! passed in, so tests assert token counts exactly under tokio's paused clock.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::policy::window::SlidingWindow;
use crate::sync::lock;

/// One retry, in budget units (deposits are fractions of it).
const UNIT: i64 = 1000;

/// Slots of the budget's sliding window (expiry granularity: window / 10).
const SLOTS: u32 = 10;

/// The retry budget's configuration (plain data). See the module docs for the design.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBudget {
    /// Retries allowed per request sent (0.2: retries add at most 20 % load).
    pub ratio: f64,
    /// Retries always allowed per second on top of the ratio, for low-traffic clients.
    pub min_per_sec: u32,
    /// How long a deposit or a withdrawal counts.
    pub window: Duration,
}

impl Default for RetryBudget {
    fn default() -> RetryBudget {
        RetryBudget {
            ratio: crate::defaults::RETRY_BUDGET_RATIO,
            min_per_sec: crate::defaults::RETRY_BUDGET_MIN_PER_SEC,
            window: crate::defaults::RETRY_BUDGET_WINDOW,
        }
    }
}

impl RetryBudget {
    /// Checks the values; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if !self.ratio.is_finite() || self.ratio < 0.0 || self.ratio > 1000.0 {
            return Err(format!(
                "retry budget ratio {} must be between 0 and 1000 (0.2 = retries add 20 % load)",
                self.ratio
            ));
        }
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(3600) {
            return Err(format!(
                "retry budget window {} must be between 1s and 1h",
                crate::clock::duration::format_duration(self.window)
            ));
        }
        Ok(())
    }

    fn deposit_units(&self) -> i64 {
        (self.ratio * UNIT as f64).round() as i64
    }

    fn reserve_units(&self) -> i64 {
        let secs = self.window.as_secs_f64();
        (f64::from(self.min_per_sec) * secs * UNIT as f64).round() as i64
    }
}

/// The live budget of one client: deposits on first attempts, withdrawals on retries.
#[derive(Debug)]
pub(crate) struct Budget {
    cfg: RetryBudget,
    deposit: i64,
    reserve: i64,
    window: Mutex<SlidingWindow>,
}

impl Budget {
    pub(crate) fn new(cfg: RetryBudget, now: Instant) -> Budget {
        Budget {
            deposit: cfg.deposit_units(),
            reserve: cfg.reserve_units(),
            window: Mutex::new(SlidingWindow::new(now, cfg.window, SLOTS)),
            cfg,
        }
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &RetryBudget {
        &self.cfg
    }

    /// A request's first attempt: adds `ratio` of a retry. Inlined into the attempt loop
    /// (once per request: a lock, two comparisons and an addition).
    #[inline]
    pub(crate) fn deposit(&self, now: Instant) {
        lock(&self.window).add(now, 0, self.deposit);
    }

    /// A retry: takes one retry if the balance (deposits − withdrawals in the window, plus
    /// the reserve) covers it. Returns whether the retry may be made.
    pub(crate) fn withdraw(&self, now: Instant) -> bool {
        let mut w = lock(&self.window);
        let balance = w.sum(now)[0].saturating_add(self.reserve);
        if balance >= UNIT {
            w.add(now, 0, -UNIT);
            true
        } else {
            false
        }
    }

    /// Whether the balance covers one retry now (what [`withdraw`](Self::withdraw) would
    /// answer), without taking it.
    pub(crate) fn affords(&self, now: Instant) -> bool {
        self.balance_units(now) >= UNIT
    }

    /// Retries affordable right now, in thousandths of a retry.
    pub(crate) fn balance_units(&self, now: Instant) -> i64 {
        lock(&self.window).sum(now)[0].saturating_add(self.reserve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64, min_per_sec: u32) -> (Budget, Instant) {
        let now = Instant::now();
        let cfg = RetryBudget {
            ratio,
            min_per_sec,
            window: Duration::from_secs(10),
        };
        (Budget::new(cfg, now), now)
    }

    #[tokio::test(start_paused = true)]
    async fn the_reserve_alone_allows_min_per_sec_times_the_window() {
        let (b, now) = budget(0.2, 10);
        assert_eq!(b.balance_units(now), 100_000);
        let granted = (0..1000).filter(|_| b.withdraw(now)).count();
        assert_eq!(granted, 100);
        assert_eq!(b.balance_units(now), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn each_request_adds_a_fifth_of_a_retry() {
        let (b, now) = budget(0.2, 0);
        assert!(!b.withdraw(now), "no traffic, no reserve: nothing to spend");
        for _ in 0..4 {
            b.deposit(now);
        }
        assert_eq!(b.balance_units(now), 800);
        assert!(!b.withdraw(now));
        b.deposit(now);
        assert!(b.withdraw(now), "five requests pay for one retry");
        assert_eq!(b.balance_units(now), 0);
        for _ in 0..1000 {
            b.deposit(now);
        }
        let granted = (0..1000).filter(|_| b.withdraw(now)).count();
        assert_eq!(granted, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn spending_and_deposits_expire_with_the_window() {
        let (b, t0) = budget(0.2, 1);
        // Reserve: 1/s × 10 s = 10 retries; spend them all at t0.
        assert_eq!((0..20).filter(|_| b.withdraw(t0)).count(), 10);
        assert!(!b.withdraw(t0 + Duration::from_millis(9_999)));
        // After a full window the withdrawals have expired: the reserve is back.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(b.balance_units(later), 10_000);
        // Deposits expire too.
        for _ in 0..50 {
            b.deposit(later);
        }
        assert_eq!(b.balance_units(later), 20_000);
        assert_eq!(b.balance_units(later + Duration::from_secs(10)), 10_000);
    }

    #[test]
    fn validation_names_the_bad_value() {
        let bad = RetryBudget {
            ratio: -1.0,
            ..RetryBudget::default()
        };
        assert!(bad.validate().unwrap_err().contains("ratio"));
        let bad = RetryBudget {
            window: Duration::ZERO,
            ..RetryBudget::default()
        };
        assert!(bad.validate().unwrap_err().contains("window"));
        assert!(RetryBudget::default().validate().is_ok());
    }
}
