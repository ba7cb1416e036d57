//! Per-class retry delays: reference 004 §3.3. Pure given the random source.
//!
//! | class | first delay | factor | retries |
//! | --- | --- | --- | --- |
//! | throttled (429, `rejected_execution_exception`) | `Retry-After` or 100 ms | ×1.5 | 5 |
//! | unavailable (503, `unavailable_shards_exception`, other 5xx) | 500 ms | ×2 | 3 |
//! | connection (request-level reset, timeout, no node) | 200 ms | ×1.8 | 4 |
//!
//! The n-th retry of a class waits `base × factor^(n-1)` (whole milliseconds), times a uniform jitter factor in
//! 0.8–1.2, capped at 30 s. A `Retry-After` from the server replaces the computed delay of
//! a throttled retry, is not jittered, and is capped too.

use std::time::Duration;

use crate::classify::RetryClass;
use crate::defaults;
pub use crate::rule::ClassRule;

/// The retry rules of the three classes, the jitter and the cap.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// 429 and `rejected_execution_exception`.
    pub throttled: ClassRule,
    /// 503, `unavailable_shards_exception` and other 5xx.
    pub unavailable: ClassRule,
    /// Request-level resets, timeouts and unreachable clusters.
    pub connection: ClassRule,
    /// Uniform jitter factor range; `None` switches jitter off (tests).
    pub jitter: Option<(f64, f64)>,
    /// No delay exceeds this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            throttled: defaults::THROTTLED,
            unavailable: defaults::UNAVAILABLE,
            connection: defaults::CONNECTION,
            jitter: Some(defaults::JITTER),
            cap: defaults::DELAY_CAP,
        }
    }
}

impl RetryPolicy {
    /// The rule of a class.
    pub fn rule(&self, class: RetryClass) -> &ClassRule {
        match class {
            RetryClass::Throttled => &self.throttled,
            RetryClass::Unavailable => &self.unavailable,
            RetryClass::Connection => &self.connection,
        }
    }

    /// The delay before retry number `n` (1-based) of `class`, or `None` when the class's
    /// retries are used up. `retry_after` (a throttled answer's header) replaces the
    /// computed delay. `rng` draws the jitter.
    pub fn delay(
        &self,
        class: RetryClass,
        n: u32,
        retry_after: Option<Duration>,
        rng: &mut fastrand::Rng,
    ) -> Option<Duration> {
        let rule = self.rule(class);
        if n == 0 || n > rule.max_retries {
            return None;
        }
        if let (RetryClass::Throttled, Some(ra)) = (class, retry_after) {
            return Some(ra.min(self.cap));
        }
        let exp = i32::try_from(n - 1).unwrap_or(i32::MAX);
        // Whole milliseconds, computed from the base in milliseconds so the table's values
        // come out exact (100 ms × 1.5³ = 337.5 → 338 ms).
        let mut millis = rule.base.as_millis() as f64 * rule.factor.powi(exp);
        if let Some((lo, hi)) = self.jitter {
            millis *= lo + (hi - lo) * rng.f64();
        }
        let cap = self.cap.as_millis() as f64;
        if !millis.is_finite() || millis > cap {
            millis = cap;
        }
        Some(Duration::from_millis(millis.max(0.0).round() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> RetryPolicy {
        RetryPolicy {
            jitter: None,
            ..RetryPolicy::default()
        }
    }

    fn ms(v: &[u64]) -> Vec<Option<Duration>> {
        v.iter().map(|&m| Some(Duration::from_millis(m))).collect()
    }

    #[test]
    fn reference_table_without_jitter() {
        let p = no_jitter();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut series = |c, k| -> Vec<Option<Duration>> {
            (1..=k).map(|n| p.delay(c, n, None, &mut rng)).collect()
        };
        assert_eq!(
            series(RetryClass::Throttled, 6),
            [ms(&[100, 150, 225, 338, 506]), vec![None]].concat()
        );
        assert_eq!(
            series(RetryClass::Unavailable, 4),
            [ms(&[500, 1000, 2000]), vec![None]].concat()
        );
        assert_eq!(
            series(RetryClass::Connection, 5),
            [ms(&[200, 360, 648, 1166]), vec![None]].concat()
        );
    }

    #[test]
    fn retry_after_replaces_the_throttled_delay_and_is_capped() {
        let p = no_jitter();
        let mut rng = fastrand::Rng::with_seed(1);
        let ra = Some(Duration::from_secs(2));
        assert_eq!(
            p.delay(RetryClass::Throttled, 1, ra, &mut rng),
            Some(Duration::from_secs(2))
        );
        let huge = Some(Duration::from_secs(3600));
        assert_eq!(
            p.delay(RetryClass::Throttled, 1, huge, &mut rng),
            Some(Duration::from_secs(30))
        );
        // Only throttling honours it.
        assert_eq!(
            p.delay(RetryClass::Unavailable, 1, ra, &mut rng),
            Some(Duration::from_millis(500))
        );
    }

    #[test]
    fn jitter_stays_within_point_eight_to_one_point_two_and_the_cap() {
        let p = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..1000 {
            let d = p.delay(RetryClass::Unavailable, 2, None, &mut rng).unwrap();
            assert!(d >= Duration::from_millis(800) && d <= Duration::from_millis(1200));
        }
        let steep = RetryPolicy {
            throttled: ClassRule::new(Duration::from_secs(10), 10.0, 9),
            ..RetryPolicy::default()
        };
        let d = steep
            .delay(RetryClass::Throttled, 9, None, &mut rng)
            .unwrap();
        assert_eq!(d, Duration::from_secs(30));
    }
}
