//! The estimate behind the adaptive concurrency limit (`policy/limit.rs`): TCP Vegas with
//! queue allowances of one or two requests and a real no-load probe. Pure: samples in,
//! limit out.
//!
//! # The steps
//!
//! With `rtt_noload` the no-load latency (below) and `rtt` a request's latency, about
//! `queue = limit × (1 − rtt_noload / rtt)` requests are waiting in the cluster. With
//! `step = max(1, log10(limit))`, `alpha = step` and `beta = 2·step`:
//! - an overload signal (429, 502/503/504, an attempt timeout, the deadline) → `limit − step`;
//! - fewer than half the limit in flight → unchanged (the client, not the cluster, is the
//!   bound: nothing is learned about capacity);
//! - `queue < alpha` → `limit + step`;
//! - `queue ≥ beta` → `limit − step`, or lower to shed the excess queue at once —
//!   `limit − queue + alpha` — but never below half the limit in one sample;
//! - otherwise unchanged;
//!
//! clamped to `[min, max]`. On a node that serves one request at a time, `queue` is about
//! `limit − 1`, so the limit settles at 2 from above and from below: one request served,
//! one waiting — the node never idles and an admitted request waits behind one other.
//! Shedding the excess at once matters at the start (from the initial 20, the first
//! samples see a queue of ~19: the limit is at 2 after four samples, not seventeen) and after
//! a burst; the halving bound keeps one outlier from taking the limit to its floor. Netflix's
//! `VegasLimit` allows 3–6 × log10(limit) waiting (3–6 requests at a small limit), which on
//! such a node is a latency of 4–7 service times; the allowances here are one and two
//! requests there, and grow with log10 of the limit so that a large limit over many nodes
//! does not shrink on a few percent of latency noise.
//!
//! # The no-load latency and its probe
//!
//! `rtt_noload` is the lowest latency seen. Under sustained load every latency is a queued
//! one, so taking "the next sample" as the new floor (Netflix's reset) would judge the
//! cluster by its own queue and let the limit grow with it. Instead, every [`PROBE_EVERY`]
//! × limit samples of a client at its limit a **probe** holds the limit at `min` until [`PROBE_SAMPLES`] requests
//! admitted during the probe have finished (as Envoy's adaptive concurrency filter measures
//! its minimum latency at a small concurrency): the cluster's queue drains, their lowest
//! latency is the no-load latency as it is now (higher when the cluster became slower for
//! good, lower when it became faster), and the limit returns to what it was. Requests
//! admitted before the probe teach nothing while it runs (they queued behind the old limit).
//! A probe costs the limit's room for a few round trips every `PROBE_EVERY` × limit samples;
//! a client below its limit never probes.

use std::time::Duration;

/// A probe of the no-load latency starts after this many load-bearing samples (the limit
/// at least half used, or an overload signal) per unit of the limit: 1,000 × limit — at a
/// limit of 3 on a node serving ~500 requests/s, one probe every ~6 s; at 300 over a cluster
/// serving 10,000/s, every ~30 s (Envoy re-measures every 60 s). A probe refuses, for a few
/// round trips, what the limit would have admitted — about 5 × limit requests — so one per
/// 1,000 × limit costs at most ~0.5 % of the requests of a client at its limit.
pub const PROBE_EVERY: u64 = 1000;

/// A probe ends when this many requests admitted during it have finished: the lowest of
/// their latencies is the new no-load latency. Five, so that the first ones, which may still
/// wait behind requests admitted before the probe, are outvoted.
pub const PROBE_SAMPLES: u32 = 5;

/// The Vegas estimate.
#[derive(Debug)]
pub(crate) struct Vegas {
    limit: f64,
    min: f64,
    max: f64,
    /// The lowest latency seen since the last probe (`None`: none yet).
    rtt_noload: Option<Duration>,
    /// Samples until the next probe.
    until_probe: u64,
    /// The probe running, if any.
    probe: Option<Probe>,
    /// Counts the probes started: a permit carries the epoch it was admitted in, so a
    /// probe learns only from requests admitted during it.
    epoch: u64,
}

/// A probe of the no-load latency.
#[derive(Debug)]
struct Probe {
    /// The limit to return to.
    resume: f64,
    /// The lowest latency of the requests admitted during the probe.
    lowest: Option<Duration>,
    /// How many of them finished.
    samples: u32,
}

impl Vegas {
    /// A limit starting at `initial` within `[min, max]` (checked by the caller).
    pub(crate) fn new(initial: u32, min: u32, max: u32) -> Vegas {
        Vegas {
            limit: f64::from(initial),
            min: f64::from(min),
            max: f64::from(max),
            rtt_noload: None,
            until_probe: PROBE_EVERY * u64::from(initial),
            probe: None,
            epoch: 0,
        }
    }

    /// The current limit (whole requests): `min` during a probe.
    pub(crate) fn limit(&self) -> u32 {
        if self.probe.is_some() {
            self.min as u32
        } else {
            self.limit as u32
        }
    }

    /// The epoch a request admitted now belongs to.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether a probe is running.
    #[cfg(test)]
    pub(crate) fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The no-load latency now.
    #[cfg(test)]
    pub(crate) fn noload(&self) -> Option<Duration> {
        self.rtt_noload
    }

    fn step(limit: f64) -> f64 {
        limit.log10().max(1.0)
    }

    /// One finished request: its latency, the requests in flight when it was admitted
    /// (itself included), the epoch it was admitted in, and whether it met an overload
    /// signal.
    pub(crate) fn sample(&mut self, rtt: Duration, in_flight: u32, epoch: u64, dropped: bool) {
        let rtt = rtt.max(Duration::from_micros(1));
        if let Some(p) = self.probe.as_mut() {
            if dropped {
                p.resume = (p.resume - Self::step(p.resume)).clamp(self.min, self.max);
            }
            if epoch != self.epoch {
                return;
            }
            if !dropped {
                p.lowest = Some(p.lowest.map_or(rtt, |l| l.min(rtt)));
            }
            p.samples += 1;
            if p.samples >= PROBE_SAMPLES {
                if let Some(l) = p.lowest {
                    self.rtt_noload = Some(l);
                }
                self.limit = p.resume;
                self.probe = None;
                self.until_probe = PROBE_EVERY * u64::from(self.limit());
            }
            return;
        }
        // Only samples of a client at its limit count toward a probe: below it nothing is
        // refused, the latencies are near the no-load one anyway (the minimum keeps it),
        // and a probe would refuse requests that the limit never needed to.
        if dropped || f64::from(in_flight) * 2.0 >= self.limit {
            self.until_probe = self.until_probe.saturating_sub(1);
        }
        if self.until_probe == 0 && self.rtt_noload.is_some() {
            self.epoch += 1;
            self.probe = Some(Probe {
                resume: self.limit,
                lowest: None,
                samples: 0,
            });
            return;
        }
        let noload = match self.rtt_noload {
            Some(n) if n <= rtt => n,
            _ => {
                self.rtt_noload = Some(rtt);
                if !dropped {
                    return;
                }
                rtt
            }
        };
        let step = Self::step(self.limit);
        let next = if dropped {
            self.limit - step
        } else if f64::from(in_flight) * 2.0 < self.limit {
            return;
        } else {
            let queue = self.limit * (1.0 - noload.as_secs_f64() / rtt.as_secs_f64());
            if queue < step {
                self.limit + step
            } else if queue >= 2.0 * step {
                // Shed the excess queue at once (back to alpha waiting), but at most half
                // the limit per sample.
                (self.limit - step)
                    .min(self.limit - queue + step)
                    .max(self.limit / 2.0)
            } else {
                return;
            }
        };
        self.limit = next.clamp(self.min, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn the_limit_steps_as_vegas_does() {
        let mut v = Vegas::new(100, 1, 1000);
        // The first sample only sets the no-load latency: 10 ms.
        v.sample(ms(10), 100, 0, false);
        assert_eq!(v.limit(), 100);
        // No queue (rtt = no-load): queue 0 < log10(100) = 2: + 2.
        v.sample(ms(10), 100, 0, false);
        assert_eq!(v.limit(), 102);
        // Half the limit not in flight: nothing learned.
        v.sample(ms(50), 50, 0, false);
        assert_eq!(v.limit(), 102);
        // rtt 10.2 ms: queue = 102 × (1 − 10/10.2) = 2.0 < log10(102) = 2.0086: + 2.0086.
        v.sample(us(10_200), 102, 0, false);
        assert_eq!(v.limit(), 104);
        // rtt 10.3 ms: queue = 104.0086 × 0.02913 = 3.03, between alpha (2.017) and beta
        // (4.034): unchanged.
        v.sample(us(10_300), 104, 0, false);
        assert_eq!(v.limit(), 104);
        // rtt 20 ms: queue = 52.004 >= beta: the excess shed at once, back to alpha
        // waiting: 104.0086 − 52.004 + 2.017 = 54.02 (not below half, 52.004; below
        // − one step, 101.99).
        v.sample(ms(20), 104, 0, false);
        assert_eq!(v.limit(), 54);
        // Again, 30 ms: queue = 54.02 × 2/3 = 36.01: 54.02 − 36.01 + 1.73 = 19.74, below
        // half the limit (27.01): half.
        v.sample(ms(30), 54, 0, false);
        assert_eq!(v.limit(), 27);
        // An overload signal: − log10, whatever the latency: 27.01 − 1.43 = 25.58.
        v.sample(ms(10), 27, 0, true);
        assert_eq!(v.limit(), 25);
    }

    #[test]
    fn one_node_serving_one_at_a_time_settles_at_a_queue_of_one_or_two() {
        // A node that serves one request in 2 ms and queues the rest: a request admitted
        // with the limit full takes limit × 2 ms.
        let mut v = Vegas::new(20, 1, 1000);
        v.sample(ms(2), 1, 0, false);
        let mut seen = Vec::new();
        for _ in 0..40 {
            let l = v.limit();
            v.sample(ms(2 * u64::from(l)), l, 0, false);
            seen.push(v.limit());
        }
        // From 20 the queue (19) is shed by at most half per sample: 10, 5, then 2.5
        // (5 − 4 + 1, above half): there the queue, 2.5 × (1 − 2/4) = 1.25, is within
        // [alpha, beta) = [1, 2), and it stays.
        assert_eq!(&seen[..3], &[10, 5, 2]);
        assert!(seen[2..].iter().all(|&l| l == 2), "{seen:?}");
        // From below: at 1 the queue (0) is < alpha: 2; at 2 the queue (1) is not: it
        // stays at 2 from this side too.
        let mut v = Vegas::new(1, 1, 1000);
        v.sample(ms(2), 1, 0, false);
        v.sample(ms(2), 1, 0, false);
        assert_eq!(v.limit(), 2);
        v.sample(ms(4), 2, 0, false);
        assert_eq!(v.limit(), 2);
        // At 3 (a burst of growth elsewhere) the queue, 2, is beta: back to 2.
        let mut v = Vegas::new(3, 1, 1000);
        v.sample(ms(2), 1, 0, false);
        v.sample(ms(6), 3, 0, false);
        assert_eq!(v.limit(), 2);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut v = Vegas::new(4, 2, 10);
        v.sample(ms(10), 4, 0, false);
        for _ in 0..10 {
            v.sample(ms(10), 10, 0, false);
        }
        assert_eq!(v.limit(), 10);
        for _ in 0..20 {
            v.sample(ms(10), 10, 0, true);
        }
        assert_eq!(v.limit(), 2, "each drop takes max(1, log10) = 1");
    }

    #[test]
    fn a_probe_measures_the_no_load_latency_at_the_minimum_limit() {
        let mut v = Vegas::new(3, 1, 1000);
        v.sample(ms(2), 1, 0, false);
        assert_eq!(v.noload(), Some(ms(2)));
        // The cluster became slower for good: 5 ms alone, 5 ms × the limit in flight.
        // Against the old floor of 2 ms the queue looks like 2.6 at 3 and 2.0 at 2 (both
        // >= beta) and 0.9 at 1: the limit swings between 1 and 2, where the true queue
        // (one, at 2) would hold it at 2 — the cluster judged by a latency it no longer
        // has, until the probe.
        // (The first sample, 1 in flight of 3, was below half the limit: it did not count.)
        let mut samples = 0;
        while !v.probing() {
            let l = v.limit();
            v.sample(ms(5 * u64::from(l)), l, 0, false);
            samples += 1;
        }
        assert_eq!(samples, PROBE_EVERY * 3, "1,000 × the initial limit of 3");
        assert_eq!(v.limit(), 1, "the minimum during the probe");
        let resume = v.limit;
        // Requests admitted before the probe teach it nothing.
        v.sample(ms(15), 3, 0, false);
        assert!(v.probing());
        // Five admitted during it (epoch 1): the first still queued, then alone.
        let epoch = v.epoch();
        assert_eq!(epoch, 1);
        for rtt in [ms(12), ms(7), ms(5), us(5_200), ms(6)] {
            v.sample(rtt, 1, epoch, false);
        }
        assert!(!v.probing());
        assert_eq!(v.noload(), Some(ms(5)), "the lowest of the probe's samples");
        assert_eq!(v.limit, resume, "back to the limit before the probe");
        // Judged by the new floor, the limit settles at 2 and holds (10 ms at 2 is a queue
        // of 1.25, within [alpha, beta)).
        for _ in 0..10 {
            let l = v.limit();
            v.sample(ms(5 * u64::from(l)), l, epoch, false);
        }
        assert_eq!(v.limit(), 2);
        let held = v.limit;
        for _ in 0..10 {
            v.sample(ms(10), 2, epoch, false);
        }
        assert_eq!(v.limit, held);
    }

    #[test]
    fn overload_signals_during_a_probe_lower_the_limit_it_returns_to() {
        let mut v = Vegas::new(1, 1, 1000);
        v.sample(ms(2), 1, 0, false);
        // Fast samples grow the limit by one each, until the probe after 1,000 samples.
        while !v.probing() {
            v.sample(ms(2), v.limit(), 0, false);
        }
        let resume = v.limit;
        v.sample(ms(2), 1, 0, true);
        // Five dropped requests of the probe: no latency learned, the probe still ends.
        for _ in 0..PROBE_SAMPLES {
            v.sample(ms(2), 1, v.epoch(), true);
        }
        assert!(!v.probing());
        assert_eq!(
            v.noload(),
            Some(ms(2)),
            "unchanged: no answer to learn from"
        );
        // Six drops (one from before the probe): − log10 of the limit to return to, each.
        let mut want = resume;
        for _ in 0..=PROBE_SAMPLES {
            want -= want.log10().max(1.0);
        }
        assert_eq!(v.limit, want);
    }

    #[test]
    fn a_client_below_its_limit_never_probes() {
        let mut v = Vegas::new(20, 1, 1000);
        v.sample(ms(2), 1, 0, false);
        // Eight callers under a limit of 20: below half of it, for ever.
        for _ in 0..PROBE_EVERY * 20 * 3 {
            v.sample(ms(2), 8, 0, false);
        }
        assert!(!v.probing());
        assert_eq!(v.limit(), 20, "and nothing learned");
        // At its limit, the samples count: the probe comes after 1,000 × 20 of them.
        for _ in 0..PROBE_EVERY * 20 - 1 {
            v.sample(ms(2), v.limit(), 0, false);
        }
        assert!(!v.probing());
        v.sample(ms(2), v.limit(), 0, false);
        assert!(v.probing());
    }
}
