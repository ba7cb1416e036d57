//! Backoff per error class: a throttled request, an unavailable node and a broken
//! connection call for different waits.
//!
//! A 429 means "this cluster is busy, come back soon" (and often says when, with
//! `Retry-After`); a 503 means shards are relocating or a node is starting — it takes
//! longer, and hammering it slows the recovery; a connection reset is usually one bad
//! connection or a node restart, and the retry goes to another node anyway. One curve for all
//! three is too slow for one and too aggressive for another.
//!
//! A [`ClassBackoff`] holds one [`ClassRule`] (base, growth factor, retry limit, cap) per
//! [`OutcomeKind`]. The delay before the `n`-th retry *of that class* within a request is
//! `min(base × factor^(n−1) × j, cap)`, with `j` uniform in `[1 − jitter, 1 + jitter]`.
//! Kinds without a rule use the client's ordinary [`Backoff`](crate::Backoff) and
//! `max_retries`.
//!
//! **Limits.** A rule's `max_retries` *replaces* the client's `max_retries` for that kind:
//! the rule is the more specific statement ("429s are worth five retries"), and asking the
//! user to raise a global limit to unlock a per-class one would be a trap. Retries are
//! counted per class, so a request that sees both 429s and 503s may retry up to the sum of
//! both limits; the client's retry budget and the request's deadline still bound it.
//!
//! **`Retry-After`** (on a 429 or 503, capped by `retry_after_cap`) becomes the rule's
//! base for that retry (reference 004 §3.3: "base = `Retry-After`, else 100 ms"), so the
//! `n`-th retry of the class waits `min(retry_after × factor^(n−1) × j, cap)` — **but never
//! less than the server asked for**: jitter below 1 or a cap below `Retry-After` cannot
//! shorten it. A client that keeps being told "come back in 1 s" therefore backs off
//! further each time (1 s, 1.5 s, 2.25 s, ... with the reference's 1.5), instead of
//! returning in lockstep with every other throttled client. Kinds without a rule wait
//! `Retry-After` exactly. The deadline still bounds every wait.
//!
//! [`ClassBackoff::reference`] is the table of the reference design (section 3.3):
//!
//! | class | kinds | base | factor | retries | cap |
//! | --- | --- | --- | --- | --- | --- |
//! | 429 | `throttled` | `Retry-After`, else 100 ms | 1.5 | 5 | 30 s |
//! | 503 | `gateway` (502, 503, 504) | 500 ms | 2.0 | 3 | 30 s |
//! | connection reset | `reset`, `connect`, `timeout` | 200 ms | 1.8 | 4 | 30 s |
//!
//! with a jitter multiplier uniform in `[0.8, 1.2]`. The reference names only resets; we
//! give connect failures and attempt timeouts the same row because they are the same family
//! (the network, not the server, failed) and the retry goes to another node.

use std::time::Duration;

use crate::classify::OutcomeKind;

/// How one class of outcomes is retried. Plain data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassRule {
    /// Delay before the first retry of this class (before jitter).
    pub base: Duration,
    /// Growth per further retry of this class (1.0 = constant).
    pub factor: f64,
    /// Retries of this class within one request (replaces the client's `max_retries`).
    pub max_retries: u32,
    /// Largest delay, after jitter.
    pub cap: Duration,
}

impl ClassRule {
    /// A rule; see the field docs.
    pub fn new(base: Duration, factor: f64, max_retries: u32, cap: Duration) -> ClassRule {
        ClassRule {
            base,
            factor,
            max_retries,
            cap,
        }
    }
}

/// Backoff and retry limits chosen by the outcome kind. See the module docs.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ClassBackoff {
    rules: Vec<(OutcomeKind, ClassRule)>,
    /// Jitter spread: the delay is multiplied by a factor uniform in
    /// `[1 − jitter, 1 + jitter]`; 0 turns jitter off.
    jitter: f64,
}

impl ClassBackoff {
    /// No rules: every kind uses the client's backoff (add rules with [`rule`](Self::rule)).
    pub fn new() -> ClassBackoff {
        ClassBackoff::default()
    }

    /// The reference table (module docs): 429 → 100 ms × 1.5, 5 retries; 502/503/504 →
    /// 500 ms × 2, 3 retries; reset, connect failure, attempt timeout → 200 ms × 1.8,
    /// 4 retries; every delay capped at 30 s; jitter uniform in [0.8, 1.2].
    pub fn reference() -> ClassBackoff {
        use crate::defaults as d;
        let cap = d::CLASS_BACKOFF_CAP;
        let throttled = ClassRule::new(Duration::from_millis(100), 1.5, 5, cap);
        let unavailable = ClassRule::new(Duration::from_millis(500), 2.0, 3, cap);
        let connection = ClassRule::new(Duration::from_millis(200), 1.8, 4, cap);
        ClassBackoff::new()
            .rule(OutcomeKind::Throttled, throttled)
            .rule(OutcomeKind::Gateway, unavailable)
            .rule(OutcomeKind::Reset, connection)
            .rule(OutcomeKind::Connect, connection)
            .rule(OutcomeKind::Timeout, connection)
            .with_jitter(d::CLASS_BACKOFF_JITTER)
    }

    /// Sets the rule for `kind` (replacing an earlier one).
    pub fn rule(mut self, kind: OutcomeKind, rule: ClassRule) -> ClassBackoff {
        self.rules.retain(|(k, _)| *k != kind);
        self.rules.push((kind, rule));
        self
    }

    /// Sets the jitter spread: delays are multiplied by a factor uniform in
    /// `[1 − spread, 1 + spread]` (the reference uses 0.2).
    pub fn with_jitter(mut self, spread: f64) -> ClassBackoff {
        self.jitter = spread;
        self
    }

    /// Turns jitter off (exact delays, for tests and single clients).
    pub fn without_jitter(self) -> ClassBackoff {
        self.with_jitter(0.0)
    }

    /// The rule for `kind`, if any.
    pub fn rule_for(&self, kind: OutcomeKind) -> Option<&ClassRule> {
        self.rules.iter().find(|(k, _)| *k == kind).map(|(_, r)| r)
    }

    /// Whether no kind has a rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Checks the rules; the error names the kind and the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            return Err(format!(
                "class backoff jitter {} must be at least 0 and below 1",
                self.jitter
            ));
        }
        for (k, r) in &self.rules {
            if !(r.factor.is_finite() && r.factor >= 1.0) {
                return Err(format!(
                    "class backoff for {k}: factor {} must be at least 1",
                    r.factor
                ));
            }
            if r.cap < r.base {
                return Err(format!("class backoff for {k}: cap must be at least base"));
            }
        }
        Ok(())
    }

    /// The delay before the `class_retry`-th (1-based) retry of `kind`, or `None` when no
    /// rule covers `kind`. Pure given `rng`; with jitter off it draws nothing.
    pub fn delay(
        &self,
        kind: OutcomeKind,
        class_retry: u32,
        rng: &mut fastrand::Rng,
    ) -> Option<Duration> {
        self.delay_after(kind, class_retry, None, rng)
    }

    /// Like [`delay`](Self::delay), when the server may have said when to come back:
    /// `retry_after` (already capped by `retry_after_cap`) replaces the rule's base, and
    /// the result is never below it (module docs). `None` when no rule covers `kind`.
    pub fn delay_after(
        &self,
        kind: OutcomeKind,
        class_retry: u32,
        retry_after: Option<Duration>,
        rng: &mut fastrand::Rng,
    ) -> Option<Duration> {
        let rule = self.rule_for(kind)?;
        let base = retry_after.unwrap_or(rule.base);
        let exponent = i32::try_from(class_retry.max(1) - 1).unwrap_or(i32::MAX);
        let mut nanos = base.as_nanos() as f64 * rule.factor.powi(exponent);
        if self.jitter > 0.0 {
            nanos *= 1.0 - self.jitter + 2.0 * self.jitter * rng.f64();
        }
        let cap = rule.cap.as_nanos() as f64;
        let nanos = if nanos.is_finite() {
            nanos.min(cap)
        } else {
            cap
        };
        let delay = Duration::from_nanos(nanos.max(0.0).round() as u64);
        Some(retry_after.map_or(delay, |asked| delay.max(asked)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn delays(b: &ClassBackoff, kind: OutcomeKind, n: u32) -> Vec<Duration> {
        let mut rng = fastrand::Rng::with_seed(1);
        (1..=n)
            .map(|i| b.delay(kind, i, &mut rng).unwrap())
            .collect()
    }

    #[test]
    fn the_reference_table_without_jitter() {
        let b = ClassBackoff::reference().without_jitter();
        assert_eq!(
            delays(&b, OutcomeKind::Throttled, 5),
            vec![
                ms(100),
                ms(150),
                ms(225),
                Duration::from_micros(337_500),
                Duration::from_nanos(506_250_000)
            ]
        );
        assert_eq!(
            delays(&b, OutcomeKind::Gateway, 3),
            vec![ms(500), ms(1000), ms(2000)]
        );
        let conn = vec![ms(200), ms(360), ms(648), Duration::from_micros(1_166_400)];
        assert_eq!(delays(&b, OutcomeKind::Reset, 4), conn);
        assert_eq!(delays(&b, OutcomeKind::Connect, 4), conn);
        assert_eq!(delays(&b, OutcomeKind::Timeout, 4), conn);
        assert_eq!(b.rule_for(OutcomeKind::Throttled).unwrap().max_retries, 5);
        assert_eq!(b.rule_for(OutcomeKind::Gateway).unwrap().max_retries, 3);
        assert_eq!(b.rule_for(OutcomeKind::Reset).unwrap().max_retries, 4);
        assert_eq!(b.rule_for(OutcomeKind::ServerError), None);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(b.delay(OutcomeKind::ServerError, 1, &mut rng), None);
    }

    #[test]
    fn retry_after_is_the_base_of_the_429_curve_and_a_floor() {
        let b = ClassBackoff::reference().without_jitter();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut after = |asked: u64, n: u32| {
            b.delay_after(OutcomeKind::Throttled, n, Some(ms(asked)), &mut rng)
                .unwrap()
        };
        // Retry-After: 1 on every answer: 1 s × 1.5^(n−1).
        let seq: Vec<Duration> = (1..=5).map(|n| after(1000, n)).collect();
        assert_eq!(
            seq,
            vec![
                ms(1000),
                ms(1500),
                ms(2250),
                ms(3375),
                Duration::from_micros(5_062_500)
            ]
        );
        // Capped at 30 s, but never below what the server asked for.
        assert_eq!(after(20_000, 1), ms(20_000));
        assert_eq!(after(20_000, 2), ms(30_000), "20 s × 1.5 = 30 s (the cap)");
        assert_eq!(after(20_000, 5), ms(30_000));
        let long = ClassBackoff::new()
            .rule(
                OutcomeKind::Throttled,
                ClassRule::new(ms(100), 1.5, 5, ms(5000)),
            )
            .without_jitter();
        assert_eq!(
            long.delay_after(OutcomeKind::Throttled, 3, Some(ms(8000)), &mut rng),
            Some(ms(8000)),
            "a cap below Retry-After does not shorten it"
        );
        // Without Retry-After: the rule's own base.
        assert_eq!(
            b.delay_after(OutcomeKind::Throttled, 2, None, &mut rng),
            Some(ms(150))
        );
        assert_eq!(
            b.delay_after(OutcomeKind::ServerError, 1, Some(ms(1000)), &mut rng),
            None
        );
    }

    #[test]
    fn jitter_never_takes_a_delay_below_retry_after() {
        let b = ClassBackoff::reference();
        let mut rng = fastrand::Rng::with_seed(3);
        let mut seen_above = false;
        for _ in 0..1000 {
            let d = b
                .delay_after(OutcomeKind::Throttled, 1, Some(ms(1000)), &mut rng)
                .unwrap();
            assert!(d >= ms(1000) && d <= ms(1200), "{d:?}");
            seen_above |= d > ms(1100);
            let d2 = b
                .delay_after(OutcomeKind::Throttled, 2, Some(ms(1000)), &mut rng)
                .unwrap();
            assert!(
                d2 >= ms(1200) && d2 <= ms(1800),
                "1.5 s × [0.8, 1.2]: {d2:?}"
            );
        }
        assert!(seen_above);
    }

    #[test]
    fn delays_are_capped_at_30_seconds_even_for_huge_retry_numbers() {
        let b = ClassBackoff::reference().without_jitter();
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            b.delay(OutcomeKind::Gateway, 7, &mut rng),
            Some(Duration::from_secs(30)),
            "500 ms × 2^6 = 32 s → 30 s"
        );
        assert_eq!(
            b.delay(OutcomeKind::Gateway, u32::MAX, &mut rng),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn jitter_stays_within_plus_minus_twenty_percent() {
        let b = ClassBackoff::reference();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..1000 {
            let d = b.delay(OutcomeKind::Gateway, 1, &mut rng).unwrap();
            assert!(d >= ms(400) && d <= ms(600), "{d:?}");
            seen_low |= d < ms(450);
            seen_high |= d > ms(550);
        }
        assert!(seen_low && seen_high, "the whole range is used");
    }

    #[test]
    fn validation_names_the_class() {
        let bad = ClassBackoff::new().rule(
            OutcomeKind::Gateway,
            ClassRule::new(ms(10), 0.5, 1, ms(100)),
        );
        assert!(bad.validate().unwrap_err().contains("gateway"));
        assert!(ClassBackoff::reference().validate().is_ok());
        assert!(ClassBackoff::new().with_jitter(1.5).validate().is_err());
    }
}
