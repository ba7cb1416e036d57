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
//! # The algorithm
//!
//! TCP Vegas on the requests' latency (`policy/vegas.rs`, whose module docs give the
//! steps): the cluster's queue is estimated from how far the latency of the requests that
//! finished lately (an average over about one round trip) is above the no-load latency, and
//! the limit grows while that queue is under a third of a request and shrinks when it passes
//! one and a third (both allowances × log10 of the limit), or on an overload signal. The
//! no-load latency is the mean latency of a probe that holds the limit at its minimum for a
//! few requests — at the start and now and then — so neither a queue the client itself
//! keeps up nor the ordinary spread of a cluster's latencies is taken for its speed. Why
//! this and not Gradient2 or Envoy's filter:
//! `docs/architecture/transport.md`.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::policy::vegas::Vegas;
use crate::sync::lock;

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
    /// Of those, the requests admitted before the estimate's current epoch (before the
    /// probe running now started).
    older_in_flight: u32,
}

/// A slot of the limit, held while the request runs. Dropped without
/// [`finish`](Permit::finish) (the request was cancelled) it frees the slot and learns
/// nothing.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    limiter: &'a Limiter,
    /// Requests in flight when it was admitted, itself included.
    in_flight: u32,
    /// The estimate's epoch when it was admitted (see `Vegas::epoch`).
    epoch: u64,
    /// No request of an earlier epoch was in flight when it was admitted. With a
    /// `min_limit` above 1 a probe admits requests while some from before it are still in
    /// flight; those share the old queue, and a probe takes the mean only of the others.
    alone: bool,
    done: bool,
}

impl Limiter {
    pub(crate) fn new(cfg: AdaptiveConcurrency) -> Limiter {
        Limiter {
            state: Mutex::new(State {
                vegas: Vegas::new(cfg.initial_limit, cfg.min_limit, cfg.max_limit),
                in_flight: 0,
                older_in_flight: 0,
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
                epoch: s.vegas.epoch(),
                alone: s.older_in_flight == 0,
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

    /// Frees the slot of `permit`; with the finished request's latency and overload signal
    /// (`sample`), teaches the estimate.
    fn release(&self, permit: &Permit<'_>, sample: Option<(Duration, bool)>) -> Option<u32> {
        let changed = {
            let mut s = lock(&self.state);
            s.in_flight = s.in_flight.saturating_sub(1);
            let epoch = s.vegas.epoch();
            if permit.epoch != epoch {
                s.older_in_flight = s.older_in_flight.saturating_sub(1);
            }
            let changed = sample.and_then(|(rtt, dropped)| {
                let before = s.vegas.limit();
                let of = permit.alone.then_some(permit.epoch);
                s.vegas.sample(rtt, permit.in_flight, of, dropped);
                let after = s.vegas.limit();
                (after != before).then_some(after)
            });
            if s.vegas.epoch() != epoch {
                // A probe started: everything in flight now is from before it.
                s.older_in_flight = s.in_flight;
            }
            changed
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
        self.limiter.release(&self, Some((rtt, dropped)))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.limiter.release(self, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
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

    #[tokio::test(start_paused = true)]
    async fn a_permit_admitted_before_a_probe_teaches_the_probe_nothing() {
        let l = Limiter::new(AdaptiveConcurrency {
            initial_limit: 2,
            min_limit: 1,
            max_limit: 2,
            max_wait: Duration::ZERO,
        });
        // The probe the limit starts with: five requests alone, 2 ms each.
        for _ in 0..crate::policy::vegas::PROBE_SAMPLES {
            let p = l.acquire(None).await.unwrap();
            p.finish(ms(2), false);
        }
        assert_eq!(l.snapshot(), (2, 0));
        // Fast answers at the maximum until the next probe: PROBE_EVERY × the limit of 2
        // samples.
        let mut old = None;
        for i in 0..crate::policy::vegas::PROBE_EVERY * 2 {
            let a = l.acquire(None).await.unwrap();
            if i == 0 {
                // Held across the probe's start: admitted in epoch 0.
                old = Some(l.acquire(None).await.unwrap());
            }
            a.finish(ms(2), false);
        }
        assert_eq!(
            l.snapshot(),
            (1, 1),
            "probing: the minimum, the old permit in flight"
        );
        if let Some(p) = old {
            p.finish(ms(1), false);
        }
        // Five requests of the probe end it with their mean; the old permit's 1 ms was not
        // taken.
        for _ in 0..crate::policy::vegas::PROBE_SAMPLES {
            let p = l.acquire(None).await.unwrap();
            p.finish(ms(3), false);
        }
        assert_eq!(l.snapshot(), (2, 0), "back to the limit before the probe");
        let s = lock(&l.state);
        assert_eq!(s.vegas.noload(), Some(ms(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_takes_no_request_admitted_beside_ones_from_before_it() {
        // A minimum of 3: the probe admits requests while old ones are still in flight.
        let l = Limiter::new(AdaptiveConcurrency {
            initial_limit: 4,
            min_limit: 3,
            max_limit: 4,
            max_wait: Duration::ZERO,
        });
        // The probe the limit starts with: 2 ms each.
        for _ in 0..crate::policy::vegas::PROBE_SAMPLES {
            let p = l.acquire(None).await.unwrap();
            p.finish(ms(2), false);
        }
        assert_eq!(l.snapshot(), (4, 0));
        // Fast answers at the maximum until the next probe (PROBE_EVERY × 4 samples at the
        // limit; the first, 1 in flight of 4, is not), 2 requests held across its start.
        let mut old = Vec::new();
        for i in 0..=crate::policy::vegas::PROBE_EVERY * 4 {
            let a = l.acquire(None).await.unwrap();
            if i == 0 {
                old.push(l.acquire(None).await.unwrap());
                old.push(l.acquire(None).await.unwrap());
            }
            a.finish(ms(2), false);
        }
        assert_eq!(
            l.snapshot(),
            (3, 2),
            "probing at the minimum, 2 old in flight"
        );
        // Admitted beside the old ones (their queue): slow, and not taken.
        let beside = l.acquire(None).await.unwrap();
        assert!(l.acquire(None).await.is_err(), "3 in flight: the minimum");
        for p in old.drain(..) {
            p.finish(ms(30), false);
        }
        beside.finish(ms(20), false);
        // Admitted with nothing older in flight: these make the probe's mean.
        for _ in 0..crate::policy::vegas::PROBE_SAMPLES {
            let p = l.acquire(None).await.unwrap();
            p.finish(ms(3), false);
        }
        assert_eq!(l.snapshot(), (4, 0), "back to the limit before the probe");
        let s = lock(&l.state);
        assert_eq!(s.vegas.noload(), Some(ms(3)));
        assert_eq!(s.older_in_flight, 0);
    }
}
