//! The estimate behind the adaptive concurrency limit (`policy/limit.rs`): TCP Vegas on a
//! latency averaged over recent requests, against a no-load latency that a probe measures,
//! with queue allowances of a third of a request and one and a third. Pure: samples in,
//! limit out.
//!
//! # The steps
//!
//! With `rtt_noload` the no-load latency (below) and `rtt` the latency of the requests that
//! finished lately — an exponential average of the load-bearing samples with weight
//! `1 / max(AVERAGE_SAMPLES, limit)`, so about one round trip of them and never fewer than
//! eight — about `queue = limit × (1 − rtt_noload / rtt)` requests are waiting in the
//! cluster. With `step = max(1, log10(limit))`, `alpha = step / 3` and `beta = 4 · step / 3`:
//! - an overload signal (429, 502/503/504, an attempt timeout, the deadline) → `limit − step`
//!   (its latency, however short, says nothing of the cluster's speed and is not averaged);
//! - fewer than half the limit in flight → unchanged (the client, not the cluster, is the
//!   bound: nothing is learned about capacity);
//! - `queue < alpha` → `limit + step`;
//! - `queue ≥ beta` → `limit − step`, or lower to shed the excess queue at once —
//!   `limit − queue + alpha` — but never below half the limit in one sample;
//! - otherwise unchanged;
//!
//! where each of the two changes also needs the sample's own latency to say the same (its
//! `queue`, computed from it alone, below alpha or at least beta; a shed takes the smaller
//! of the two), and then clamped to `[min, max]`; the requests admitted are the whole part
//! of the limit.
//!
//! On a node that serves one request at a time and whose free slot is taken at once, a
//! request admitted at a limit of `L` waits for the rest of the one in service and the
//! `L − 2` queued. Were the latency all service, `queue` would read `L − 1`: 1 at 2, 2
//! at 3. Part of it is not (the client's and the network's share, while the node serves
//! another), so it reads less: on the fake cluster's capacity model, where the unloaded
//! latency is 2.35 ms and the node serves one every 2.13 ms, about 0.7 at 2 and 1.6 at
//! 3. The thresholds sit between the neighbours over that whole range: at 1 (~0) below
//! alpha, at 2 (0.7–1.0) within `[alpha, beta)` and the limit holds — one request
//! served, one waiting, the node never idles and an admitted request waits behind one
//! other — and at 3 (1.6–2.0) past beta. With allowances of one and two, 2 read as room
//! to grow and 3 as nothing to shed (4 % of the admitted requests went in at 3 or 4);
//! with a half and one and a half, 3 sat on beta (a quarter went in at 3). The average
//! is what holds it at 2: one request's latency there is anywhere from one service time
//! to two, depending on how far the request ahead of it had got, and judged one by one
//! the limit would follow that noise to 3 and back. The sample's own say keeps the
//! average's lag from moving the limit: just after a change, the average is still the
//! old limit's, and alone it would carry the limit past where the latencies now are
//! (from 1 to 3 before the average caught up with 2). Shedding the excess at once
//! matters after a burst (a queue of 19 behind a limit of 20 is gone in four samples);
//! the halving bound keeps one outlier from taking the limit to its floor. Netflix's
//! `VegasLimit` allows 3–6 × log10(limit) waiting (3–6 requests at a small limit),
//! which on such a node is a latency of 4–7 service times; the allowances here grow
//! with log10 of the limit too.
//!
//! # The no-load latency and its probe
//!
//! `rtt_noload` is the **mean** latency of the requests admitted during the last probe. A
//! **probe** holds the limit at `min` until [`PROBE_SAMPLES`] requests admitted during it
//! have finished (as Envoy's adaptive concurrency filter measures its minimum latency at a
//! small concurrency): at the default `min` of 1 each is admitted alone, once this client's
//! earlier requests have drained. At a larger `min` the probe admits requests while some
//! from before it are still in flight; those share the old queue, so only requests admitted
//! with none of the old ones left in flight count toward it (the limiter tells which). The limit starts with a probe, one runs every
//! [`PROBE_EVERY`] × limit samples of a client at its limit (a client below its limit never
//! probes), and the limit returns to what it was. So the no-load latency follows the
//! cluster (higher when it became slower for good, lower when faster), and requests admitted
//! before the probe teach nothing while it runs (they queued behind the old limit). A probe
//! costs the limit's room for a few round trips every `PROBE_EVERY` × limit samples.
//!
//! Why the probe's mean, and not the lowest latency seen (Vegas's own floor, and Netflix's):
//! a cluster's latencies spread even with nothing queued — queries differ, caches warm, GC
//! runs — and the lowest of thousands of them is far below their mean. Compared with that
//! floor, a cluster with no queue at all reads as queued (at a spread of ±10 %, `queue`
//! comes out about a third of the limit), and the limit collapses: on a model of a cluster
//! far from its capacity, latencies log-normal around 2 ms, a client offering 8 requests in
//! flight had 57–83 % of them refused by a limit stuck at 2–4. Against the probe's mean, the
//! same client is refused nothing after its start. Taking "the next sample" as the floor
//! (Netflix's reset) is no better: under sustained load every latency is a queued one, and
//! the cluster would be judged by this client's own queue.

use std::time::Duration;

/// A probe of the no-load latency starts after this many load-bearing samples (the limit
/// at least half used, or an overload signal) per unit of the limit: 1,000 × limit — at a
/// limit of 3 on a node serving ~500 requests/s, one probe every ~6 s; at 300 over a cluster
/// serving 10,000/s, every ~30 s (Envoy re-measures every 60 s). A probe refuses, for a few
/// round trips, what the limit would have admitted — about 5 × limit requests — so one per
/// 1,000 × limit costs at most ~0.5 % of the requests of a client at its limit.
pub const PROBE_EVERY: u64 = 1000;

/// A probe ends when this many requests admitted during it have finished: the mean of their
/// latencies (those that were answered, not an overload signal) is the new no-load latency.
pub const PROBE_SAMPLES: u32 = 5;

/// The average latency weighs each load-bearing sample `1 / max(AVERAGE_SAMPLES, limit)`:
/// about one round trip of samples at a large limit, and never fewer than eight, so that at
/// a limit of 2 or 3 one request's position behind another is not read as a change of queue.
const AVERAGE_SAMPLES: f64 = 8.0;

/// The Vegas estimate.
#[derive(Debug)]
pub(crate) struct Vegas {
    limit: f64,
    min: f64,
    max: f64,
    /// The mean latency of the last probe's answers (`None`: no probe was answered yet).
    rtt_noload: Option<Duration>,
    /// The average latency of the load-bearing samples, in seconds (`None`: none since the
    /// last probe).
    rtt_average: Option<f64>,
    /// Load-bearing samples until the next probe.
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
    /// The summed latency of the answers to the requests admitted during the probe.
    total: Duration,
    /// How many of them were answered (not an overload signal).
    answered: u32,
    /// How many of them finished.
    samples: u32,
}

impl Probe {
    fn resuming(resume: f64) -> Probe {
        Probe {
            resume,
            total: Duration::ZERO,
            answered: 0,
            samples: 0,
        }
    }
}

impl Vegas {
    /// A limit of `initial` within `[min, max]` (checked by the caller), after the probe it
    /// starts with.
    pub(crate) fn new(initial: u32, min: u32, max: u32) -> Vegas {
        Vegas {
            limit: f64::from(initial),
            min: f64::from(min),
            max: f64::from(max),
            rtt_noload: None,
            rtt_average: None,
            until_probe: 0,
            probe: Some(Probe::resuming(f64::from(initial))),
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

    /// `limit` one step down (an overload signal), within `[min, max]`.
    fn stepped_down(limit: f64, min: f64, max: f64) -> f64 {
        (limit - Self::step(limit)).clamp(min, max)
    }

    /// One finished request: its latency, the requests in flight when it was admitted
    /// (itself included), the epoch it was admitted in (`None` when requests of an earlier
    /// epoch were still in flight then: it shared their queue, so a probe learns nothing
    /// from it), and whether it met an overload signal.
    pub(crate) fn sample(
        &mut self,
        rtt: Duration,
        in_flight: u32,
        epoch: Option<u64>,
        dropped: bool,
    ) {
        let rtt = rtt.max(Duration::from_micros(1));
        if let Some(p) = self.probe.as_mut() {
            if dropped {
                p.resume = Self::stepped_down(p.resume, self.min, self.max);
            }
            if epoch != Some(self.epoch) {
                return;
            }
            if !dropped {
                p.total += rtt;
                p.answered += 1;
            }
            p.samples += 1;
            if p.samples >= PROBE_SAMPLES {
                if p.answered > 0 {
                    self.rtt_noload = Some(p.total / p.answered);
                }
                self.limit = p.resume;
                self.probe = None;
                // Until a probe is answered nothing but overload signals steers the limit:
                // the next one comes soon.
                self.until_probe = match self.rtt_noload {
                    Some(_) => PROBE_EVERY * u64::from(self.limit()),
                    None => u64::from(PROBE_SAMPLES),
                };
            }
            return;
        }
        // Only samples of a client at its limit count toward a probe: below it nothing is
        // refused, and a probe would refuse requests that the limit never needed to. Below
        // half the limit the client, not the cluster, is the bound: nothing is learned.
        let at_limit = f64::from(in_flight) * 2.0 >= self.limit;
        if dropped || at_limit {
            self.until_probe = self.until_probe.saturating_sub(1);
        }
        if self.until_probe == 0 {
            self.epoch += 1;
            // The average before the probe was the old queue's: what comes after it is
            // judged afresh.
            self.rtt_average = None;
            self.probe = Some(Probe::resuming(self.limit));
            return;
        }
        if dropped {
            self.limit = Self::stepped_down(self.limit, self.min, self.max);
            return;
        }
        if !at_limit {
            return;
        }
        let Some(noload) = self.rtt_noload else {
            return;
        };
        let step = Self::step(self.limit);
        let rtt = rtt.as_secs_f64();
        let weight = 1.0 / self.limit.max(AVERAGE_SAMPLES);
        let average = self.rtt_average.map_or(rtt, |a| a + (rtt - a) * weight);
        self.rtt_average = Some(average);
        let noload = noload.as_secs_f64();
        let queue = self.limit * (1.0 - noload / average);
        // The sample's own reading: after a change of the limit the average still holds the
        // old queue's latencies, and the limit moves only where the present agrees.
        let now = self.limit * (1.0 - noload / rtt);
        let (alpha, beta) = (step / 3.0, 4.0 * step / 3.0);
        let next = if queue < alpha && now < alpha {
            self.limit + step
        } else if queue >= beta && now >= beta {
            // Shed the excess queue at once (back to alpha waiting), but at most half the
            // limit per sample.
            (self.limit - step)
                .min(self.limit - queue.min(now) + alpha)
                .max(self.limit / 2.0)
        } else {
            return;
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

    /// Ends the probe a limit starts with: `PROBE_SAMPLES` requests alone, `rtt` each.
    fn started(initial: u32, min: u32, max: u32, rtt: Duration) -> Vegas {
        let mut v = Vegas::new(initial, min, max);
        assert!(v.probing());
        assert_eq!(
            v.limit(),
            min,
            "the probe it starts with runs at the minimum"
        );
        for _ in 0..PROBE_SAMPLES {
            v.sample(rtt, 1, Some(0), false);
        }
        assert!(!v.probing());
        assert_eq!(v.noload(), Some(rtt));
        v
    }

    #[test]
    fn the_limit_steps_as_vegas_does() {
        let mut v = started(100, 1, 1000, ms(10));
        assert_eq!(v.limit(), 100);
        // No queue (the average, 10 ms, is the no-load latency): queue 0 < alpha =
        // log10(100) / 3 = 0.67, and the sample agrees: + 2.
        v.sample(ms(10), 100, Some(0), false);
        assert_eq!(v.limit(), 102);
        // Half the limit not in flight: nothing learned, the average untouched.
        v.sample(ms(50), 50, Some(0), false);
        assert_eq!(v.limit(), 102);
        // One sample twice as slow weighs 1/102 of the average: 10.098 ms, a queue of
        // 0.99, within [alpha, beta) = [0.67, 2.68): unchanged, though the sample alone
        // reads 51.
        v.sample(ms(20), 102, Some(0), false);
        assert_eq!(v.limit(), 102);
        // 12 ms: average 10.117 ms, queue = 102 × 0.01153 = 1.18: unchanged.
        v.sample(ms(12), 102, Some(0), false);
        assert_eq!(v.limit(), 102);
        // 40 ms: average 10.41 ms, queue 4.01 >= beta, the sample's 76.5 too: the excess
        // shed at once, back to alpha waiting: 102 − 4.01 + 0.67 = 98.66 (below − one
        // step, 99.99).
        v.sample(ms(40), 102, Some(0), false);
        assert_eq!(v.limit(), 98);
        // 2 s: average 30.58 ms, queue = 98.66 × (1 − 10/30.58) = 66.39: 98.66 − 66.39
        // + 0.66 = 32.9, below half the limit (49.33): half.
        v.sample(ms(2000), 98, Some(0), false);
        assert_eq!(v.limit(), 49);
        // An overload signal: − log10, whatever the latency: 49.33 − 1.69 = 47.63.
        v.sample(ms(10), 49, Some(0), true);
        assert_eq!(v.limit(), 47);
    }

    /// Feeds `n` samples of a node that serves one request in 2 ms and queues the rest (a
    /// request admitted with the limit full takes limit × 2 ms); the limits after each.
    fn serial_node(v: &mut Vegas, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let l = v.limit();
                v.sample(ms(2 * u64::from(l)), l, Some(0), false);
                v.limit()
            })
            .collect()
    }

    #[test]
    fn one_node_serving_one_at_a_time_settles_at_one_waiting() {
        // From 20 the queue (19) is shed by at most half per sample: 10, 5, then 2.5
        // (above half), where the samples (4 ms, a queue of 1.25) no longer agree with the
        // average (still the old queue's): it holds, and the average comes down to 4 ms,
        // a queue of 1.25, within [alpha, beta) = [0.33, 1.33).
        let mut v = started(20, 1, 1000, ms(2));
        let seen = serial_node(&mut v, 40);
        assert_eq!(&seen[..3], &[10, 5, 2]);
        assert!(seen[2..].iter().all(|&l| l == 2), "{seen:?}");
        // From below: at 1 the queue (0) is < alpha: 2, and it stays there; the average,
        // still below the latency at 2, would grow it alone, but the samples (a queue of
        // 1) do not agree.
        let mut v = started(1, 1, 1000, ms(2));
        let seen = serial_node(&mut v, 40);
        assert!(seen.iter().all(|&l| l == 2), "{seen:?}");
        // At 3 (a burst of growth elsewhere) the first sample's queue, 2, is past beta:
        // shed towards alpha waiting (1.33), but not below half the limit, 1.5; there the
        // average takes fourteen more samples to fall below alpha (the samples, 2 ms,
        // agree at once), and then 2.5 holds.
        let mut v = started(3, 1, 1000, ms(2));
        let seen = serial_node(&mut v, 40);
        assert!(seen[..15].iter().all(|&l| l == 1), "{seen:?}");
        assert!(seen[15..].iter().all(|&l| l == 2), "{seen:?}");
    }

    #[test]
    fn one_latency_does_not_move_the_limit_but_a_run_of_them_does() {
        // A limit of 10 at a queue of about one (latency 11 ms over a no-load 10 ms).
        let mut v = started(10, 1, 1000, ms(10));
        for _ in 0..20 {
            v.sample(ms(11), 10, Some(0), false);
        }
        assert_eq!(v.limit(), 10);
        // One request at 15 ms — alone a queue of 3.3, past beta (1.33) — moves the
        // average a tenth of the way: 11.4 ms, a queue of 1.23: unchanged.
        v.sample(ms(15), 10, Some(0), false);
        assert_eq!(v.limit(), 10);
        // Latencies that stay there are a queue: from the second on, the average (11.8 ms)
        // reads one past beta (1.5), and the limit sheds while they last.
        let mut seen = Vec::new();
        for _ in 0..9 {
            let l = v.limit();
            v.sample(ms(15), l, Some(0), false);
            seen.push(v.limit());
        }
        assert_eq!(seen, [8, 7, 6, 5, 5, 4, 4, 4, 4]);
    }

    #[test]
    fn an_overload_signal_is_neither_averaged_nor_the_no_load_latency() {
        let mut v = started(10, 1, 1000, ms(10));
        // A 503 in 1 ms: − one step; the no-load latency stays 10 ms, and the average
        // does not take it (averaged, it would read the next answers as a slower cluster).
        v.sample(ms(1), 10, Some(0), true);
        assert_eq!(v.limit(), 9);
        assert_eq!(v.noload(), Some(ms(10)));
        v.sample(ms(10), 9, Some(0), false);
        assert_eq!(v.limit(), 10, "no queue at 10 ms: + 1");
        // A start whose probe meets only overload signals: the limit steps down (− 1 each,
        // five times), nothing is known of the latency, and only overload signals steer
        // until the next probe — after five load-bearing samples, not 1,000 × limit.
        let mut v = Vegas::new(10, 1, 1000);
        for _ in 0..PROBE_SAMPLES {
            v.sample(ms(1), 1, Some(0), true);
        }
        assert!(!v.probing());
        assert_eq!((v.limit(), v.noload()), (5, None));
        for _ in 0..PROBE_SAMPLES - 1 {
            v.sample(ms(50), 5, Some(0), false);
            assert_eq!(v.limit(), 5, "nothing to compare a latency with");
        }
        v.sample(ms(50), 5, Some(0), false);
        assert!(v.probing());
        for _ in 0..PROBE_SAMPLES {
            v.sample(ms(4), 1, Some(v.epoch()), false);
        }
        assert_eq!((v.limit(), v.noload()), (5, Some(ms(4))));
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut v = started(4, 2, 10, ms(10));
        for _ in 0..10 {
            v.sample(ms(10), 10, Some(0), false);
        }
        assert_eq!(v.limit(), 10);
        for _ in 0..20 {
            v.sample(ms(10), 10, Some(0), true);
        }
        assert_eq!(v.limit(), 2, "each drop takes max(1, log10) = 1");
    }

    #[test]
    fn a_probe_measures_the_mean_no_load_latency_at_the_minimum_limit() {
        let mut v = started(3, 1, 1000, ms(2));
        // The cluster became slower for good: 5 ms alone, 5 ms × the limit in flight.
        // Against the old no-load latency of 2 ms the queue looks like 2.6 at 3 and 2.0 at
        // 2 (both >= beta) and 0.9 at 1: the limit sits at 1, where the true queue (one, at
        // 2) would hold it at 2 — the cluster judged by a latency it no longer has, until
        // the probe. (The first sample, 1 in flight of 3, was below half the limit: it did
        // not count.)
        let mut samples = 0;
        while !v.probing() {
            let l = v.limit();
            v.sample(ms(5 * u64::from(l)), l, Some(0), false);
            samples += 1;
        }
        assert_eq!(samples, PROBE_EVERY * 3, "1,000 × the limit of 3");
        assert_eq!(v.limit(), 1, "the minimum during the probe");
        let resume = v.limit;
        // Requests admitted before the probe teach it nothing.
        v.sample(ms(15), 3, Some(0), false);
        assert!(v.probing());
        // Five admitted during it (epoch 1), alone.
        let epoch = v.epoch();
        assert_eq!(epoch, 1);
        for rtt in [ms(5), us(5_200), us(4_800), ms(5), ms(5)] {
            v.sample(rtt, 1, Some(epoch), false);
        }
        assert!(!v.probing());
        assert_eq!(
            v.noload(),
            Some(ms(5)),
            "their mean, not their lowest (4.8 ms)"
        );
        assert_eq!(v.limit, resume, "back to the limit before the probe");
        // Judged by the new no-load latency, the limit settles at 2 and holds (10 ms at 2
        // is a queue of 1.25, within [alpha, beta)).
        for _ in 0..30 {
            let l = v.limit();
            v.sample(ms(5 * u64::from(l)), l, Some(epoch), false);
            assert_eq!(v.limit(), 2);
        }
        let held = v.limit;
        for _ in 0..10 {
            v.sample(ms(10), 2, Some(epoch), false);
        }
        assert_eq!(v.limit, held);
    }

    #[test]
    fn overload_signals_during_a_probe_lower_the_limit_it_returns_to() {
        let mut v = started(1, 1, 1000, ms(2));
        // Fast samples grow the limit by one step each, until the probe after 1,000
        // samples.
        while !v.probing() {
            v.sample(ms(2), v.limit(), Some(0), false);
        }
        let resume = v.limit;
        v.sample(ms(2), 1, Some(0), true);
        // Five dropped requests of the probe: no latency learned, the probe still ends.
        for _ in 0..PROBE_SAMPLES {
            v.sample(ms(2), 1, Some(v.epoch()), true);
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
        let mut v = started(20, 1, 1000, ms(2));
        // Eight callers under a limit of 20: below half of it, for ever.
        for _ in 0..PROBE_EVERY * 20 * 3 {
            v.sample(ms(2), 8, Some(0), false);
        }
        assert!(!v.probing());
        assert_eq!(v.limit(), 20, "and nothing learned");
        // At its limit, the samples count: the probe comes after 1,000 × 20 of them.
        for _ in 0..PROBE_EVERY * 20 - 1 {
            v.sample(ms(2), v.limit(), Some(0), false);
        }
        assert!(!v.probing());
        v.sample(ms(2), v.limit(), Some(0), false);
        assert!(v.probing());
    }
}
