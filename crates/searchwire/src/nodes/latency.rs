//! Each node's latency estimate for latency-aware selection: a peak EWMA of its attempts'
//! latencies, decayed by time.
//!
//! - **Peak**: a sample above the estimate raises it at once (a node that turns slow is
//!   avoided from its next answer on), but by at most [`PEAK_STEP`]× per sample, so one long
//!   request (a `_reindex`, a large aggregation) cannot poison the estimate on its own; a
//!   node that really is slower gets there in a few samples (×4, ×16, ×64).
//! - **Time-based decay**: a sample below the estimate moves it down with the weight
//!   `1 − e^(−Δt/decay)`, Δt the time since the last sample, so the estimate forgets at the
//!   same pace whatever the request rate; the weight of one sample is capped at
//!   [`MAX_SAMPLE_WEIGHT`], so a node idle for long is not judged by one answer.
//! - **Failures count as slow**: a reset, a timeout, a 429, a 5xx or a refused connection is
//!   a sample [`PEAK_STEP`]× the estimate (at least its own duration), so a node that fails
//!   fast does not attract traffic by looking quick.
//! - **No estimate** (a new node, a resurrected one) or a **stale** one (no sample for one
//!   decay period — selection sent the node nothing, usually because it was slow) is replaced
//!   by the cluster median when selection next looks at the node, so it is neither starved
//!   nor flooded: it gets a fair share until its own samples say otherwise, and a node that
//!   was slow is tried again once per decay period — a few requests — to see if it recovered.
//!
//! Updates are a load and two stores of relaxed atomics, not a compare-and-swap loop: two
//! attempts ending at the same instant may lose one sample, which an estimate can afford.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How much one sample may raise an estimate: 4×. Large enough that a node that turned
/// 100× slower is fully avoided after its third answer; small enough that one 30 s request on
/// a 5 ms node leaves it at 20 ms, not 30 s.
pub(crate) const PEAK_STEP: u64 = 4;

/// The most one sample may move an estimate down: half the way to the sample.
pub(crate) const MAX_SAMPLE_WEIGHT: f64 = 0.5;

/// The smallest estimate: 1 µs, so that a cost (estimate × attempts in flight) still grows
/// with the attempts in flight on a node that answers in no time.
pub(crate) const MIN_ESTIMATE_NS: u64 = 1_000;

/// The largest estimate: 10 minutes (a bound for the arithmetic, above any attempt timeout
/// worth having).
pub(crate) const MAX_ESTIMATE_NS: u64 = 600_000_000_000;

/// "No estimate".
const NONE: u64 = u64::MAX;

/// One node's latency estimate.
#[derive(Debug)]
pub(crate) struct Estimate {
    /// The instant `stamp` counts from.
    origin: Instant,
    /// The estimate in nanoseconds, or [`NONE`].
    ns: AtomicU64,
    /// Nanoseconds from `origin` to the last sample (or to when the estimate was set).
    stamp: AtomicU64,
}

impl Estimate {
    pub(crate) fn new() -> Estimate {
        Estimate {
            origin: Instant::now(),
            ns: AtomicU64::new(NONE),
            stamp: AtomicU64::new(0),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The estimate in nanoseconds, whatever its age; `None` when there is none.
    #[inline]
    pub(crate) fn raw(&self) -> Option<u64> {
        let ns = self.ns.load(Ordering::Relaxed);
        (ns != NONE).then_some(ns)
    }

    /// The estimate at `now`, unless there is none or it is older than `decay`.
    #[inline]
    pub(crate) fn fresh(&self, now: Instant, decay: Duration) -> Option<u64> {
        let ns = self.ns.load(Ordering::Relaxed);
        if ns == NONE {
            return None;
        }
        let age = self
            .nanos(now)
            .saturating_sub(self.stamp.load(Ordering::Relaxed));
        (u128::from(age) <= decay.as_nanos()).then_some(ns)
    }

    /// Sets the estimate to `ns` as of `now` (the cluster median, for a node without a fresh
    /// one).
    pub(crate) fn set(&self, ns: u64, now: Instant) {
        self.ns.store(
            ns.clamp(MIN_ESTIMATE_NS, MAX_ESTIMATE_NS),
            Ordering::Relaxed,
        );
        self.stamp.store(self.nanos(now), Ordering::Relaxed);
    }

    /// Forgets the estimate (the node was dead: what it did before says nothing now).
    pub(crate) fn clear(&self) {
        self.ns.store(NONE, Ordering::Relaxed);
    }

    /// Records an attempt of `elapsed` that ended at `now`; `slow` for a failure that counts
    /// as a slow answer (see the module docs).
    #[inline]
    pub(crate) fn observe(&self, now: Instant, elapsed: Duration, slow: bool, decay: Duration) {
        let sample = u64::try_from(elapsed.as_nanos())
            .unwrap_or(u64::MAX)
            .clamp(MIN_ESTIMATE_NS, MAX_ESTIMATE_NS);
        let prev = self.ns.load(Ordering::Relaxed);
        let at = self.nanos(now);
        let next = if prev == NONE {
            if slow {
                sample.saturating_mul(PEAK_STEP)
            } else {
                sample
            }
        } else if slow {
            // At least its own duration, at most one step: one step either way.
            prev.saturating_mul(PEAK_STEP)
        } else if sample >= prev {
            sample.min(prev.saturating_mul(PEAK_STEP))
        } else {
            let dt = at.saturating_sub(self.stamp.load(Ordering::Relaxed)) as f64;
            let tau = decay.as_nanos().max(1) as f64;
            let weight = (1.0 - (-dt / tau).exp()).min(MAX_SAMPLE_WEIGHT);
            let moved = prev as f64 - (prev - sample) as f64 * weight;
            moved as u64
        };
        self.ns.store(
            next.clamp(MIN_ESTIMATE_NS, MAX_ESTIMATE_NS),
            Ordering::Relaxed,
        );
        self.stamp.store(at, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECAY: Duration = Duration::from_secs(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_sample_is_the_estimate_and_a_peak_is_taken_within_the_step() {
        let e = Estimate::new();
        let t0 = Instant::now();
        assert_eq!(e.raw(), None);
        e.observe(t0, ms(2), false, DECAY);
        assert_eq!(e.raw(), Some(2_000_000));
        // A 50 ms answer: at most 4× per sample.
        e.observe(t0 + ms(10), ms(50), false, DECAY);
        assert_eq!(e.raw(), Some(8_000_000));
        e.observe(t0 + ms(20), ms(50), false, DECAY);
        assert_eq!(e.raw(), Some(32_000_000));
        e.observe(t0 + ms(30), ms(50), false, DECAY);
        assert_eq!(e.raw(), Some(50_000_000), "then the peak itself");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lower_sample_moves_the_estimate_by_the_time_since_the_last_one() {
        let e = Estimate::new();
        let t0 = Instant::now();
        e.observe(t0, ms(100), false, DECAY);
        // 1 s later: weight 1 − e^(−0.1) = 0.09516; 100 − 90 × 0.09516 = 91.435 ms.
        e.observe(t0 + Duration::from_secs(1), ms(10), false, DECAY);
        let got = e.raw().unwrap_or(0) as f64 / 1e6;
        assert!((got - 91.435).abs() < 0.01, "{got} ms");
        // 10 ms after that: weight 1 − e^(−0.001) ≈ 0.0009995.
        e.observe(t0 + ms(1_010), ms(10), false, DECAY);
        let next = e.raw().unwrap_or(0) as f64 / 1e6;
        let want = got - (got - 10.0) * (1.0 - (-0.001f64).exp());
        assert!((next - want).abs() < 0.001, "{next} ms, want {want}");
    }

    #[tokio::test(start_paused = true)]
    async fn one_sample_after_a_long_gap_moves_the_estimate_only_half_way() {
        let e = Estimate::new();
        let t0 = Instant::now();
        e.observe(t0, ms(100), false, DECAY);
        e.observe(t0 + Duration::from_secs(600), ms(10), false, DECAY);
        assert_eq!(e.raw(), Some(55_000_000));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_count_as_slow_even_when_they_are_fast() {
        let e = Estimate::new();
        let t0 = Instant::now();
        e.observe(t0, ms(1), false, DECAY);
        // A reset after 0.1 ms: 4× the estimate.
        e.observe(t0 + ms(1), Duration::from_micros(100), true, DECAY);
        assert_eq!(e.raw(), Some(4_000_000));
        e.observe(t0 + ms(2), Duration::from_micros(100), true, DECAY);
        assert_eq!(e.raw(), Some(16_000_000));
        // A 30 s attempt timeout on a 16 ms estimate: 64 ms, not 30 s.
        e.observe(t0 + ms(3), Duration::from_secs(30), true, DECAY);
        assert_eq!(e.raw(), Some(64_000_000));
        // A first sample that is a failure starts at 4× its duration.
        let f = Estimate::new();
        f.observe(t0, ms(2), true, DECAY);
        assert_eq!(f.raw(), Some(8_000_000));
    }

    #[tokio::test(start_paused = true)]
    async fn an_estimate_goes_stale_after_one_decay_period_without_samples() {
        let e = Estimate::new();
        let t0 = Instant::now();
        assert_eq!(e.fresh(t0, DECAY), None);
        e.observe(t0, ms(5), false, DECAY);
        assert_eq!(e.fresh(t0 + DECAY, DECAY), Some(5_000_000));
        assert_eq!(e.fresh(t0 + DECAY + ms(1), DECAY), None);
        assert_eq!(e.raw(), Some(5_000_000), "stale, not gone");
        e.set(2_000_000, t0 + DECAY + ms(1));
        assert_eq!(e.fresh(t0 + DECAY * 2, DECAY), Some(2_000_000));
        e.clear();
        assert_eq!(e.raw(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn estimates_stay_within_their_bounds() {
        let e = Estimate::new();
        let t0 = Instant::now();
        e.observe(t0, Duration::ZERO, false, DECAY);
        assert_eq!(e.raw(), Some(MIN_ESTIMATE_NS));
        for i in 0..100 {
            e.observe(t0 + ms(i), Duration::MAX, true, DECAY);
        }
        assert_eq!(e.raw(), Some(MAX_ESTIMATE_NS));
    }
}
