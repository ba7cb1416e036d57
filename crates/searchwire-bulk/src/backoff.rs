//! Per-class retry delays: reference 004 §3.3. Pure given the random source.
//!
//! | class | first delay | factor | retries |
//! | --- | --- | --- | --- |
//! | throttled (429, `rejected_execution_exception`) | `Retry-After` or 100 ms | ×1.5 | 5 |
//! | unavailable (503, `unavailable_shards_exception`, other 5xx) | 500 ms | ×2 | 3 |
//! | connection (request-level reset, timeout, no node) | 200 ms | ×1.8 | 4 |
//!
//! The n-th retry of a class waits `base × factor^(n-1)` (whole milliseconds), times a
//! uniform jitter factor in 0.8–1.2, capped at 30 s. A `Retry-After` from the server becomes
//! the base of a throttled retry (the reference's "base = `Retry-After`, else 100 ms"), so it
//! grows ×1.5 and is jittered like the computed delay, as the transport's own class backoff
//! does — but never below what the server asked for (capped at 30 s too).
//!
//! **Past the count.** The retries column is the count after which an item is *handed on*
//! when something takes it (a retry sink — a durable queue — or the caller of a tracked
//! item). Without one, the count does not end a retryable item: its retries go on with the
//! same rule — the delay keeps growing by the class's factor up to the 30 s cap — until the
//! item deadline ([`crate::defaults::ITEM_DEADLINE`]). A throttled document is not a bad
//! document; only a permanent refusal or an expired deadline makes a dead letter.

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

    /// Whether retry number `n` (1-based) of `class` is within the class's §3.3 count.
    /// Past it, an item is handed to whoever takes it (a retry sink, a tracked item's
    /// caller), and otherwise retried on until its deadline ([`delay`](Self::delay) goes on).
    pub fn within_count(&self, class: RetryClass, n: u32) -> bool {
        n >= 1 && n <= self.rule(class).max_retries
    }

    /// The delay before retry number `n` (1-based, clamped to at least 1) of `class`:
    /// `base × factor^(n-1) × jitter`, capped. Past the class's count the same rule goes
    /// on (it reaches the cap). `retry_after` (a throttled answer's header) becomes the base
    /// of a throttled retry and the delay never falls below it (the cap still bounds it).
    /// `rng` draws the jitter.
    pub fn delay(
        &self,
        class: RetryClass,
        n: u32,
        retry_after: Option<Duration>,
        rng: &mut fastrand::Rng,
    ) -> Duration {
        let rule = self.rule(class);
        let hint = match class {
            RetryClass::Throttled => retry_after,
            _ => None,
        };
        let base = hint.unwrap_or(rule.base);
        let exp = i32::try_from(n.max(1) - 1).unwrap_or(i32::MAX);
        // Whole milliseconds, computed from the base in milliseconds so the table's values
        // come out exact (100 ms × 1.5³ = 337.5 → 338 ms).
        let mut millis = base.as_millis() as f64 * rule.factor.powi(exp);
        if let Some((lo, hi)) = self.jitter {
            millis *= lo + (hi - lo) * rng.f64();
        }
        if let Some(h) = hint {
            millis = millis.max(h.as_millis() as f64);
        }
        let cap = self.cap.as_millis() as f64;
        if !millis.is_finite() || millis > cap {
            millis = cap;
        }
        Duration::from_millis(millis.max(0.0).round() as u64)
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
            (1..=k)
                .map(|n| p.within_count(c, n).then(|| p.delay(c, n, None, &mut rng)))
                .collect()
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
    fn past_the_count_the_rule_goes_on_up_to_the_cap() {
        let p = no_jitter();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut d = |n| p.delay(RetryClass::Throttled, n, None, &mut rng);
        // 100 ms × 1.5^5 = 759 ms, ... 1.5^14 ≈ 29.2 s, then the 30 s cap for good.
        assert_eq!(d(6), Duration::from_millis(759));
        assert_eq!(d(15), Duration::from_millis(29_193));
        assert_eq!(d(16), Duration::from_secs(30));
        assert_eq!(d(1_000), Duration::from_secs(30));
        assert_eq!(d(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn retry_after_replaces_the_throttled_delay_and_is_capped() {
        let p = no_jitter();
        let mut rng = fastrand::Rng::with_seed(1);
        let ra = Some(Duration::from_secs(2));
        let series: Vec<Duration> = (1..=4)
            .map(|n| p.delay(RetryClass::Throttled, n, ra, &mut rng))
            .collect();
        assert_eq!(series, vec![ms2(2000), ms2(3000), ms2(4500), ms2(6750)]);
        let huge = Some(Duration::from_secs(3600));
        assert_eq!(
            p.delay(RetryClass::Throttled, 1, huge, &mut rng),
            Duration::from_secs(30)
        );
        // Only throttling honours it.
        assert_eq!(
            p.delay(RetryClass::Unavailable, 1, ra, &mut rng),
            Duration::from_millis(500)
        );
    }

    fn ms2(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn retry_after_is_jittered_but_never_shortened() {
        let p = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(3);
        let ra = Some(Duration::from_secs(1));
        let firsts: Vec<Duration> = (0..200)
            .map(|_| p.delay(RetryClass::Throttled, 1, ra, &mut rng))
            .collect();
        assert!(firsts.iter().all(|d| *d >= ms2(1000) && *d <= ms2(1200)));
        assert!(firsts.iter().any(|d| *d > ms2(1000)), "jittered upwards");
        assert!(
            firsts.iter().any(|d| *d == ms2(1000)),
            "never below the hint"
        );
        for _ in 0..200 {
            let d = p.delay(RetryClass::Throttled, 3, ra, &mut rng);
            assert!(
                d >= ms2(1800) && d <= ms2(2700),
                "{d:?}: 1 s × 1.5² × 0.8–1.2"
            );
        }
    }

    #[test]
    fn jitter_stays_within_point_eight_to_one_point_two_and_the_cap() {
        let p = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..1000 {
            let d = p.delay(RetryClass::Unavailable, 2, None, &mut rng);
            assert!(d >= Duration::from_millis(800) && d <= Duration::from_millis(1200));
        }
        let steep = RetryPolicy {
            throttled: ClassRule::new(Duration::from_secs(10), 10.0, 9),
            ..RetryPolicy::default()
        };
        let d = steep.delay(RetryClass::Throttled, 9, None, &mut rng);
        assert_eq!(d, Duration::from_secs(30));
    }
}
