//! Adaptive jitter: backoff delays stretch when this client has been retrying a lot.
//!
//! Per-request backoff only sees one request's history. When a whole fleet of requests is
//! failing, each of them still starts from the short first delay, and their retries keep
//! arriving in waves. The reference (section 4.3) drives a multiplier from the client's own
//! recent counters instead: the retries it made in a sliding window, and the cluster
//! breaker's state.
//!
//! | retries in the window | breaker | multiplier |
//! | --- | --- | --- |
//! | fewer than 3 | closed | 1.0 |
//! | 3 to 9 | closed | 1.8 |
//! | 10 or more | — | 3.0 |
//! | — | open or half_open | 3.0 |
//!
//! The multiplier scales every computed backoff delay — the client's
//! [`Backoff`](crate::Backoff), including custom functions, and the
//! [`ClassBackoff`](crate::ClassBackoff) rules — after their own cap, so it can stretch a
//! delay beyond that cap (by at most the high multiplier); the deadline still bounds every
//! sleep. It never scales a server's `Retry-After`: the server said when.
//!
//! The window (5 minutes) and the thresholds are the reference's; all are configurable,
//! and [`AdaptiveJitter::off`] keeps the multiplier at 1.0.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::policy::window::SlidingWindow;
use crate::sync::lock;

/// Slots of the retry-count window.
const SLOTS: u32 = 30;

/// The adaptive jitter table (plain data). See the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveJitter {
    /// Whether the multiplier adapts at all (off: always 1.0).
    pub enabled: bool,
    /// The window over which retries are counted.
    pub window: Duration,
    /// From this many retries in the window, `mid_multiplier` applies.
    pub mid_threshold: u32,
    /// From this many retries in the window (or with the breaker not closed),
    /// `high_multiplier` applies.
    pub high_threshold: u32,
    /// The multiplier between the thresholds.
    pub mid_multiplier: f64,
    /// The multiplier at or above the high threshold, or with the breaker not closed.
    pub high_multiplier: f64,
}

impl Default for AdaptiveJitter {
    fn default() -> AdaptiveJitter {
        use crate::defaults as d;
        AdaptiveJitter {
            enabled: true,
            window: d::ADAPTIVE_JITTER_WINDOW,
            mid_threshold: d::ADAPTIVE_JITTER_MID_THRESHOLD,
            high_threshold: d::ADAPTIVE_JITTER_HIGH_THRESHOLD,
            mid_multiplier: d::ADAPTIVE_JITTER_MID,
            high_multiplier: d::ADAPTIVE_JITTER_HIGH,
        }
    }
}

impl AdaptiveJitter {
    /// The multiplier is always 1.0.
    pub fn off() -> AdaptiveJitter {
        AdaptiveJitter {
            enabled: false,
            ..AdaptiveJitter::default()
        }
    }

    /// The multiplier for `retries` made in the window, with the breaker `breaker_closed`
    /// or not. Pure: this is the table.
    pub fn multiplier(&self, retries: u64, breaker_closed: bool) -> f64 {
        if !self.enabled {
            1.0
        } else if !breaker_closed || retries >= u64::from(self.high_threshold) {
            self.high_multiplier
        } else if retries >= u64::from(self.mid_threshold) {
            self.mid_multiplier
        } else {
            1.0
        }
    }

    /// Checks the values; the error names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.window < Duration::from_secs(1) {
            return Err("adaptive jitter window must be at least 1s".into());
        }
        if self.mid_threshold > self.high_threshold {
            return Err("adaptive jitter mid_threshold must not exceed high_threshold".into());
        }
        for m in [self.mid_multiplier, self.high_multiplier] {
            if !(m.is_finite() && (0.0..=100.0).contains(&m)) {
                return Err(format!(
                    "adaptive jitter multiplier {m} must be between 0 and 100"
                ));
            }
        }
        Ok(())
    }
}

/// Scales `delay` by `multiplier`, saturating.
pub(crate) fn scale(delay: Duration, multiplier: f64) -> Duration {
    if multiplier == 1.0 {
        return delay;
    }
    let nanos = delay.as_nanos() as f64 * multiplier;
    if nanos.is_finite() && nanos < u64::MAX as f64 {
        Duration::from_nanos(nanos.max(0.0).round() as u64)
    } else {
        Duration::from_nanos(u64::MAX)
    }
}

/// The client's retry counter for the jitter table.
#[derive(Debug)]
pub(crate) struct RetryCounter {
    cfg: AdaptiveJitter,
    window: Mutex<SlidingWindow>,
}

impl RetryCounter {
    pub(crate) fn new(cfg: AdaptiveJitter, now: Instant) -> RetryCounter {
        RetryCounter {
            window: Mutex::new(SlidingWindow::new(now, cfg.window, SLOTS)),
            cfg,
        }
    }

    /// A retry was made at `now`.
    pub(crate) fn record_retry(&self, now: Instant) {
        if self.cfg.enabled {
            lock(&self.window).add(now, 0, 1);
        }
    }

    /// Retries made in the window.
    pub(crate) fn retries(&self, now: Instant) -> u64 {
        u64::try_from(lock(&self.window).sum(now)[0]).unwrap_or(0)
    }

    /// The multiplier at `now`.
    pub(crate) fn multiplier(&self, now: Instant, breaker_closed: bool) -> f64 {
        if !self.cfg.enabled {
            return 1.0;
        }
        self.cfg.multiplier(self.retries(now), breaker_closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multiplier_follows_the_table() {
        let j = AdaptiveJitter::default();
        for (retries, closed, m) in [
            (0, true, 1.0),
            (2, true, 1.0),
            (3, true, 1.8),
            (9, true, 1.8),
            (10, true, 3.0),
            (1000, true, 3.0),
            (0, false, 3.0),
            (5, false, 3.0),
        ] {
            assert_eq!(
                j.multiplier(retries, closed),
                m,
                "{retries} retries, closed {closed}"
            );
        }
        let off = AdaptiveJitter::off();
        assert_eq!(off.multiplier(1000, false), 1.0);
    }

    #[test]
    fn thresholds_are_configurable() {
        let j = AdaptiveJitter {
            mid_threshold: 1,
            high_threshold: 2,
            mid_multiplier: 1.5,
            high_multiplier: 4.0,
            ..AdaptiveJitter::default()
        };
        assert_eq!(j.multiplier(0, true), 1.0);
        assert_eq!(j.multiplier(1, true), 1.5);
        assert_eq!(j.multiplier(2, true), 4.0);
        assert!(AdaptiveJitter {
            mid_threshold: 5,
            high_threshold: 2,
            ..AdaptiveJitter::default()
        }
        .validate()
        .is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_counted_over_the_sliding_window() {
        let t0 = Instant::now();
        let c = RetryCounter::new(AdaptiveJitter::default(), t0);
        for _ in 0..3 {
            c.record_retry(t0);
        }
        assert_eq!(c.multiplier(t0, true), 1.8);
        for _ in 0..7 {
            c.record_retry(t0 + Duration::from_secs(60));
        }
        assert_eq!(c.multiplier(t0 + Duration::from_secs(60), true), 3.0);
        // The first three leave the 5-minute window: 7 remain.
        assert_eq!(c.multiplier(t0 + Duration::from_secs(300), true), 1.8);
        assert_eq!(c.multiplier(t0 + Duration::from_secs(360), true), 1.0);
    }

    #[test]
    fn scaling_saturates() {
        assert_eq!(
            scale(Duration::from_millis(100), 1.8),
            Duration::from_millis(180)
        );
        assert_eq!(
            scale(Duration::from_millis(100), 3.0),
            Duration::from_millis(300)
        );
        assert_eq!(scale(Duration::MAX, 3.0), Duration::from_nanos(u64::MAX));
    }
}
