//! Latency distributions and the seeded random source that draws from them.

use std::time::Duration;

/// The longest service time a distribution ever yields: a lognormal's tail is unbounded, and
/// a fake node that sleeps for a day only hangs the test that drew it.
pub(crate) const MAX_SAMPLE: Duration = Duration::from_secs(3600);

/// How long one request's work takes on a node, before queueing and pauses.
///
/// Every variant is drawn from the node's own seeded random source
/// ([`Load::seed`](crate::Load::seed)), so a run is repeatable.
#[derive(Clone, Debug, PartialEq)]
pub enum Latency {
    /// Always this long.
    Fixed(Duration),
    /// Lognormal: `median × e^(sigma × Z)` with `Z` standard normal. `sigma` 0 is `median`
    /// exactly; 0.5 puts p99 at about 3.2× the median, 1.0 at about 10×. Samples are capped at
    /// an hour.
    LogNormal {
        /// The median (p50).
        median: Duration,
        /// The standard deviation of the logarithm (dimensionless, ≥ 0; a negative value
        /// counts as 0).
        sigma: f64,
    },
    /// An empirical distribution given by its quantiles: `(q, latency)` points with `q` in
    /// `[0, 1]`, interpolated linearly between points (the inverse CDF). Below the first
    /// point a draw takes the first latency, above the last the last one. Points need not be
    /// sorted; an empty list is zero.
    ///
    /// `vec![(0.5, 2ms), (0.9, 5ms), (0.99, 40ms)]` is a node with p50 2 ms, p90 5 ms, p99 40 ms.
    Quantiles(Vec<(f64, Duration)>),
}

impl Latency {
    /// Draws one latency from `rng`.
    pub(crate) fn sample(&self, rng: &mut Rng) -> Duration {
        match self {
            Latency::Fixed(d) => *d,
            Latency::LogNormal { median, sigma } => {
                let sigma = if sigma.is_finite() {
                    sigma.max(0.0)
                } else {
                    0.0
                };
                let factor = (sigma * rng.standard_normal()).exp();
                scale(*median, factor)
            }
            Latency::Quantiles(points) => quantile(points, rng.unit()),
        }
    }
}

/// `d × factor`, within `[0, MAX_SAMPLE]`.
fn scale(d: Duration, factor: f64) -> Duration {
    let secs = d.as_secs_f64() * factor;
    if secs.is_finite() && secs >= 0.0 {
        Duration::from_secs_f64(secs.min(MAX_SAMPLE.as_secs_f64()))
    } else {
        MAX_SAMPLE
    }
}

/// The inverse CDF given by `points` at `u` in `[0, 1)`.
fn quantile(points: &[(f64, Duration)], u: f64) -> Duration {
    let mut sorted: Vec<(f64, Duration)> = points
        .iter()
        .copied()
        .filter(|(q, _)| q.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (Some(first), Some(last)) = (sorted.first(), sorted.last()) else {
        return Duration::ZERO;
    };
    if u <= first.0 {
        return first.1.min(MAX_SAMPLE);
    }
    if u >= last.0 {
        return last.1.min(MAX_SAMPLE);
    }
    for pair in sorted.windows(2) {
        let ((q0, d0), (q1, d1)) = (pair[0], pair[1]);
        if u <= q1 {
            let span = q1 - q0;
            let t = if span > 0.0 { (u - q0) / span } else { 1.0 };
            let secs = d0.as_secs_f64() + t * (d1.as_secs_f64() - d0.as_secs_f64());
            return Duration::from_secs_f64(secs.clamp(0.0, MAX_SAMPLE.as_secs_f64()));
        }
    }
    last.1.min(MAX_SAMPLE)
}

/// SplitMix64: tiny, fast, and good enough to draw latencies; seeded per node so a run is
/// repeatable. (A dependency for this would be more code than the generator.)
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub(crate) fn standard_normal(&mut self) -> f64 {
        // 1 - unit() is in (0, 1], so its logarithm is finite.
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn draws(l: &Latency, seed: u64, n: usize) -> Vec<Duration> {
        let mut rng = Rng::new(seed);
        let mut v: Vec<Duration> = (0..n).map(|_| l.sample(&mut rng)).collect();
        v.sort();
        v
    }

    #[test]
    fn fixed_is_fixed_and_zero_sigma_lognormal_is_its_median() {
        assert_eq!(draws(&Latency::Fixed(ms(7)), 1, 10), vec![ms(7); 10]);
        let l = Latency::LogNormal {
            median: ms(10),
            sigma: 0.0,
        };
        assert_eq!(draws(&l, 1, 10), vec![ms(10); 10]);
    }

    #[test]
    fn lognormal_has_its_median_and_tail() {
        let l = Latency::LogNormal {
            median: ms(10),
            sigma: 0.5,
        };
        let v = draws(&l, 42, 20_000);
        let p50 = v[10_000].as_secs_f64() * 1000.0;
        let p99 = v[19_800].as_secs_f64() * 1000.0;
        // e^(0.5 × 2.326) = 3.20
        assert!((9.5..10.5).contains(&p50), "p50 {p50} ms");
        assert!((29.0..35.0).contains(&p99), "p99 {p99} ms");
    }

    #[test]
    fn same_seed_same_draws_other_seed_other_draws() {
        let l = Latency::LogNormal {
            median: ms(10),
            sigma: 1.0,
        };
        let a: Vec<Duration> = {
            let mut r = Rng::new(5);
            (0..100).map(|_| l.sample(&mut r)).collect()
        };
        let b: Vec<Duration> = {
            let mut r = Rng::new(5);
            (0..100).map(|_| l.sample(&mut r)).collect()
        };
        let c: Vec<Duration> = {
            let mut r = Rng::new(6);
            (0..100).map(|_| l.sample(&mut r)).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn quantiles_interpolate_and_clamp_at_the_ends() {
        let pts = vec![(0.9, ms(10)), (0.5, ms(2)), (1.0, ms(100))];
        assert_eq!(quantile(&pts, 0.1), ms(2), "below the first point");
        assert_eq!(quantile(&pts, 0.5), ms(2));
        assert_eq!(quantile(&pts, 0.7), ms(6), "halfway from p50 to p90");
        assert_eq!(quantile(&pts, 0.95), ms(55));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
        let v = draws(&Latency::Quantiles(pts), 3, 10_000);
        assert_eq!(v[0], ms(2));
        let p95 = v[9_500].as_secs_f64() * 1000.0;
        assert!((50.0..60.0).contains(&p95), "p95 {p95} ms");
    }

    #[test]
    fn absurd_parameters_stay_bounded() {
        let l = Latency::LogNormal {
            median: Duration::from_secs(1),
            sigma: 1e9,
        };
        assert!(draws(&l, 9, 100).iter().all(|d| *d <= MAX_SAMPLE));
        let nan = Latency::LogNormal {
            median: ms(3),
            sigma: f64::NAN,
        };
        assert_eq!(draws(&nan, 9, 3), vec![ms(3); 3]);
    }
}
