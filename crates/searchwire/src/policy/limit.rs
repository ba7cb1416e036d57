//! The adaptive concurrency limit: how many requests this client may have in flight to the
//! cluster at once, learned from latency and overload signals.
//!
//! # Why
//!
//! A cluster past its capacity queues: every request waits behind the others, latency grows
//! until callers time out, and their retries add load — goodput collapses while the cluster
//! is as busy as it can be. Retry budgets and the breaker bound the *extra* load; they do
//! not stop a client from offering more first attempts than the cluster can serve. A limit
//! on requests in flight does: past it, a request waits a bounded time for a slot or fails
//! at once ([`ErrorKind::ConcurrencyLimited`](crate::ErrorKind::ConcurrencyLimited)),
//! never reaching the cluster, and the requests admitted keep their latency.
//!
//! # The algorithm (TCP Vegas, as in Netflix's concurrency-limits `VegasLimit`)
//!
//! The limit estimates the cluster's queue from latency: with `rtt_noload` the lowest
//! latency seen (the cluster not queueing) and `rtt` a request's latency, about
//! `queue = ceil(limit × (1 − rtt_noload / rtt))` requests are waiting. With
//! `step = max(1, log10(limit))`:
//! - an overload signal (429, 502/503/504, an attempt timeout, the deadline) → `limit − step`;
//! - fewer than half the limit in flight → unchanged (the client, not the cluster, is the
//!   bound: nothing is learned about capacity);
//! - `queue ≤ step` → `limit + 6·step` (no queue: grow fast);
//! - `queue < 3·step` → `limit + step`;
//! - `queue > 6·step` → `limit − step`;
//! - otherwise unchanged;
//!
//! clamped to `[min_limit, max_limit]`. `rtt_noload` is re-measured every
//! [`PROBE_EVERY`] × limit samples (the lowest latency of the next samples), so a cluster
//! that became slower for good is not judged by a latency it no longer has.
//!
//! Vegas was chosen over Gradient2 because its steps are exact integers of a few
//! comparisons — each is asserted in the tests — and over AIMD because it backs off on
//! latency before the cluster starts refusing, which is the point of limiting a cluster
//! that queues rather than rejects. Envoy's adaptive concurrency filter (a gradient over a
//! sampled minimum latency) was the other model; it needs a periodic probe window that
//! stops traffic, which a client library should not do.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::sync::lock;

/// `rtt_noload` is re-measured after this many samples per unit of the limit.
pub const PROBE_EVERY: u64 = 30;

/// The adaptive concurrency limit's settings (plain data; see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveConcurrency {
    /// The limit before anything was learned.
    pub initial_limit: u32,
    /// The limit never goes below this.
    pub min_limit: u32,
    /// The limit never goes above this.
    pub max_limit: u32,
    /// How long a request over the limit waits for a slot (within its deadline) before it
    /// fails with `ErrorKind::ConcurrencyLimited`; zero fails at once.
    pub max_wait: Duration,
}

impl Default for AdaptiveConcurrency {
    fn default() -> AdaptiveConcurrency {
        AdaptiveConcurrency {
            initial_limit: crate::defaults::CONCURRENCY_INITIAL_LIMIT,
            min_limit: crate::defaults::CONCURRENCY_MIN_LIMIT,
            max_limit: crate::defaults::CONCURRENCY_MAX_LIMIT,
            max_wait: crate::defaults::CONCURRENCY_MAX_WAIT,
        }
    }
}

impl AdaptiveConcurrency {
    /// Checks the values; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_limit == 0 {
            return Err("adaptive concurrency min_limit must be at least 1".to_string());
        }
        if self.min_limit > self.max_limit {
            return Err(format!(
                "adaptive concurrency min_limit {} must not exceed max_limit {}",
                self.min_limit, self.max_limit
            ));
        }
        if self.initial_limit < self.min_limit || self.initial_limit > self.max_limit {
            return Err(format!(
                "adaptive concurrency initial_limit {} must be between min_limit {} and max_limit {}",
                self.initial_limit, self.min_limit, self.max_limit
            ));
        }
        Ok(())
    }
}

/// The Vegas estimate (pure: samples in, limit out).
#[derive(Debug)]
pub(crate) struct Vegas {
    limit: f64,
    min: f64,
    max: f64,
    /// The lowest latency seen since the last probe (`None`: none yet).
    rtt_noload: Option<Duration>,
    /// Samples until `rtt_noload` is re-measured.
    until_probe: u64,
}

impl Vegas {
    pub(crate) fn new(cfg: &AdaptiveConcurrency) -> Vegas {
        Vegas {
            limit: f64::from(cfg.initial_limit),
            min: f64::from(cfg.min_limit),
            max: f64::from(cfg.max_limit),
            rtt_noload: None,
            until_probe: PROBE_EVERY * u64::from(cfg.initial_limit),
        }
    }

    /// The current limit (whole requests).
    pub(crate) fn limit(&self) -> u32 {
        self.limit as u32
    }

    /// One finished request: its latency, the requests in flight when it started (itself
    /// included) and whether it met an overload signal.
    pub(crate) fn sample(&mut self, rtt: Duration, in_flight: u32, dropped: bool) {
        self.until_probe = self.until_probe.saturating_sub(1);
        if self.until_probe == 0 {
            self.until_probe = PROBE_EVERY * u64::from(self.limit());
            self.rtt_noload = None;
        }
        let rtt = rtt.max(Duration::from_micros(1));
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
        let step = self.limit.log10().max(1.0);
        let next = if dropped {
            self.limit - step
        } else if f64::from(in_flight) * 2.0 < self.limit {
            return;
        } else {
            let ratio = noload.as_secs_f64() / rtt.as_secs_f64();
            let queue = (self.limit * (1.0 - ratio)).ceil();
            if queue <= step {
                self.limit + 6.0 * step
            } else if queue < 3.0 * step {
                self.limit + step
            } else if queue > 6.0 * step {
                self.limit - step
            } else {
                return;
            }
        };
        self.limit = next.clamp(self.min, self.max);
    }
}

/// The live limit of one client: the estimate, the requests in flight, and the waiters.
#[derive(Debug)]
pub(crate) struct Limiter {
    cfg: AdaptiveConcurrency,
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Debug)]
struct State {
    vegas: Vegas,
    in_flight: u32,
}

/// A slot of the limit, held while the request runs. Dropped without
/// [`finish`](Permit::finish) (the request was cancelled) it frees the slot and learns
/// nothing.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    limiter: &'a Limiter,
    /// Requests in flight when it was admitted, itself included.
    in_flight: u32,
    done: bool,
}

impl Limiter {
    pub(crate) fn new(cfg: AdaptiveConcurrency) -> Limiter {
        Limiter {
            state: Mutex::new(State {
                vegas: Vegas::new(&cfg),
                in_flight: 0,
            }),
            cfg,
            freed: Notify::new(),
        }
    }

    /// The current limit and the requests in flight.
    pub(crate) fn snapshot(&self) -> (u32, u32) {
        let s = lock(&self.state);
        (s.vegas.limit(), s.in_flight)
    }

    /// A slot now, if the limit has one.
    fn try_acquire(&self) -> Option<Permit<'_>> {
        let mut s = lock(&self.state);
        if s.in_flight < s.vegas.limit() {
            s.in_flight += 1;
            Some(Permit {
                limiter: self,
                in_flight: s.in_flight,
                done: false,
            })
        } else {
            None
        }
    }

    /// A slot: at once when the limit has one, else the first freed within `max_wait`
    /// and before `deadline`. `Err` with how long it waited when none came.
    pub(crate) async fn acquire(&self, deadline: Option<Instant>) -> Result<Permit<'_>, Duration> {
        if let Some(p) = self.try_acquire() {
            return Ok(p);
        }
        let start = Instant::now();
        let mut until = start.checked_add(self.cfg.max_wait).unwrap_or(start);
        if let Some(d) = deadline {
            until = until.min(d);
        }
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a slot freed in between is not missed.
            freed.as_mut().enable();
            if let Some(p) = self.try_acquire() {
                return Ok(p);
            }
            if Instant::now() >= until {
                return Err(Instant::now().saturating_duration_since(start));
            }
            tokio::select! {
                () = &mut freed => {}
                () = tokio::time::sleep_until(until) => {
                    return match self.try_acquire() {
                        Some(p) => Ok(p),
                        None => Err(Instant::now().saturating_duration_since(start)),
                    };
                }
            }
        }
    }

    fn release(&self, sample: Option<(Duration, u32, bool)>) -> Option<u32> {
        let changed = {
            let mut s = lock(&self.state);
            s.in_flight = s.in_flight.saturating_sub(1);
            sample.and_then(|(rtt, in_flight, dropped)| {
                let before = s.vegas.limit();
                s.vegas.sample(rtt, in_flight, dropped);
                let after = s.vegas.limit();
                (after != before).then_some(after)
            })
        };
        self.freed.notify_one();
        changed
    }
}

impl Permit<'_> {
    /// The request ended after `rtt`; `dropped` when it met an overload signal. Returns
    /// the new limit when it changed.
    pub(crate) fn finish(mut self, rtt: Duration, dropped: bool) -> Option<u32> {
        self.done = true;
        self.limiter.release(Some((rtt, self.in_flight, dropped)))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.limiter.release(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vegas(initial: u32) -> Vegas {
        Vegas::new(&AdaptiveConcurrency {
            initial_limit: initial,
            min_limit: 1,
            max_limit: 1000,
            max_wait: Duration::ZERO,
        })
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_limit_steps_as_vegas_does() {
        let mut v = vegas(100);
        // The first sample only sets the no-load latency: 10 ms.
        v.sample(ms(10), 100, false);
        assert_eq!(v.limit(), 100);
        // No queue (rtt = no-load): + 6 × log10(100) = +12.
        v.sample(ms(10), 100, false);
        assert_eq!(v.limit(), 112);
        // Half the limit not in flight: nothing learned.
        v.sample(ms(50), 55, false);
        assert_eq!(v.limit(), 112);
        // rtt 10.2 ms: queue = ceil(112 × (1 − 10/10.2)) = 3, between log10 (2.05) and
        // 3 × log10 (6.15): + log10(112) → 114.05.
        v.sample(Duration::from_micros(10_200), 112, false);
        assert_eq!(v.limit(), 114);
        // rtt 20 ms: queue = ceil(114.05 / 2) = 58 > 6 × log10: − log10(114.05) → 111.99.
        v.sample(ms(20), 114, false);
        assert_eq!(v.limit(), 111);
        // A queue between 3 × and 6 × the step: unchanged. 111.99 × (1 − 10/11) = 10.2 → 11.
        v.sample(ms(11), 112, false);
        assert_eq!(v.limit(), 111);
        // An overload signal: − log10, whatever the latency: 111.99 − 2.05 = 109.94.
        v.sample(ms(10), 112, true);
        assert_eq!(v.limit(), 109);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut v = Vegas::new(&AdaptiveConcurrency {
            initial_limit: 4,
            min_limit: 2,
            max_limit: 10,
            max_wait: Duration::ZERO,
        });
        v.sample(ms(10), 4, false);
        for _ in 0..10 {
            v.sample(ms(10), 10, false);
        }
        assert_eq!(v.limit(), 10);
        for _ in 0..20 {
            v.sample(ms(10), 10, true);
        }
        assert_eq!(v.limit(), 2, "each drop takes max(1, log10) = 1");
    }

    #[test]
    fn the_no_load_latency_is_measured_again_after_a_probe_interval() {
        let mut v = vegas(1);
        v.sample(ms(10), 1, false);
        // From now on every request takes 100 ms: with limit 1 the queue estimate is 1,
        // which is <= the step (1): the limit grows by 6; then the queue it estimates
        // holds it near 6-7 until the probe interval (30 samples at limit 1) ends.
        let mut limits = Vec::new();
        for _ in 0..PROBE_EVERY {
            v.sample(ms(100), 1000, false);
            limits.push(v.limit());
        }
        assert_eq!(limits[0], 7);
        assert_eq!(
            v.rtt_noload,
            Some(ms(100)),
            "re-measured: 100 ms is the new floor"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn over_the_limit_a_request_waits_for_a_slot_or_fails() {
        let l = Limiter::new(AdaptiveConcurrency {
            initial_limit: 1,
            min_limit: 1,
            max_limit: 1,
            max_wait: ms(50),
        });
        let held = l.acquire(None).await.unwrap();
        assert_eq!(l.snapshot(), (1, 1));
        // Nothing freed: it waits exactly max_wait.
        assert_eq!(l.acquire(None).await.unwrap_err(), ms(50));
        // A deadline before max_wait ends the wait earlier.
        let deadline = Instant::now() + ms(20);
        assert_eq!(l.acquire(Some(deadline)).await.unwrap_err(), ms(20));
        // Freed after 30 ms: the waiter gets it then.
        let t0 = Instant::now();
        let (got, ()) = tokio::join!(l.acquire(None), async {
            tokio::time::sleep(ms(30)).await;
            drop(held);
        });
        assert!(got.is_ok());
        assert_eq!(t0.elapsed(), ms(30));
        drop(got);
        assert_eq!(l.snapshot(), (1, 0), "a dropped permit frees its slot");
    }
}
