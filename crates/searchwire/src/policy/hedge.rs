//! Hedged reads: which requests may be hedged, after how long, and how many hedges the
//! client can afford.
//!
//! # What a hedge is
//!
//! A hedged read sends its first attempt as usual; when no answer has come after the
//! *hedge delay*, a second attempt of the same request goes to a different node, and the
//! first answer wins. The loser is cancelled: its exchange is dropped, which closes its
//! HTTP/1 connection, and OpenSearch/Elasticsearch cancel a search task whose channel
//! closed. "The Tail at Scale" (Dean and Barroso) cut a p99.9 from 1,800 ms to 74 ms with
//! hedges after 10 ms at +2 % requests: a stalled node (GC, a merge, a hot shard) costs a
//! hedge delay instead of its whole stall.
//!
//! # Only idempotent reads (decided in `transport/run/hedge.rs`)
//!
//! Sending a request twice must be harmless, and the second copy must not change what the
//! first returns. That holds for `GET`/`HEAD` and for the read-only `POST` endpoints
//! `_search`, `_count`, `_mget`, `_msearch` and `_field_caps`. It does not hold for:
//! - **writes** (index, bulk, update, delete): two copies write twice, or race;
//! - **scroll** (`scroll=` on a search, `_search/scroll`): each copy opens or advances a
//!   server-side cursor; the loser's cursor leaks until it expires, and a continued scroll
//!   would skip the page the loser consumed;
//! - **point-in-time creation** (`_search/point_in_time`, `_pit`): each copy pins a
//!   snapshot of every shard, and the loser's is never closed;
//! - **async search** (`_async_search`): each copy starts a search the cluster keeps running
//!   and stores after the client went away — cancelling the connection does not stop it.
//!
//! # The delay
//!
//! Fixed ([`HedgeDelay::After`]), or the observed percentile of recent attempts
//! ([`HedgeDelay::Percentile`], default p95): hedging after the p95 sends at most ~5 % of
//! requests twice on a steady cluster, and exactly the slow ones. The percentile is read
//! from the last [`RECENT_SAMPLES`] attempt latencies of hedged-eligible requests; until
//! [`MIN_SAMPLES`] have been seen nothing is hedged (no percentile is known yet).
//!
//! # The budget
//!
//! Hedges draw on a budget of their own (default: at most 5 % extra attempts over the
//! requests of the last 10 s, no floor) and on the retry budget, which they share: a hedge
//! withdraws one retry from it as a retry does, so hedges and retries together stay within
//! the retry budget's bound. Hedges stop while the cluster breaker is not closed: a cluster
//! failing enough requests to trip it is not sent more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::policy::budget::{Budget, RetryBudget};
use crate::sync::lock;

/// Attempt latencies the percentile delay is read from (the most recent ones).
pub const RECENT_SAMPLES: usize = 256;

/// Samples needed before a percentile delay hedges anything.
pub const MIN_SAMPLES: usize = 20;

/// The percentile is recomputed after this many new samples (between, the last one is used).
const RECOMPUTE_EVERY: u64 = 16;

/// After how long without an answer a hedge is sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HedgeDelay {
    /// A fixed delay.
    After(Duration),
    /// The observed percentile (0 < p < 100) of recent attempt latencies: `Percentile(95.0)`
    /// hedges the requests slower than the recent p95.
    Percentile(f64),
}

impl Default for HedgeDelay {
    fn default() -> HedgeDelay {
        HedgeDelay::Percentile(crate::defaults::HEDGE_PERCENTILE)
    }
}

impl HedgeDelay {
    /// Checks the value; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            HedgeDelay::After(d) if d.is_zero() => {
                Err("hedge delay must be above 0 (a hedge at once doubles every read)".to_string())
            }
            HedgeDelay::Percentile(p) if !(p > 0.0 && p < 100.0) => Err(format!(
                "hedge percentile p{p} must be above 0 and below 100 (p95: hedge the slowest 5 %)"
            )),
            _ => Ok(()),
        }
    }

    /// Parses `50ms`, `1s` (a fixed delay) or `p95`, `p99.9` (a percentile).
    pub fn parse(s: &str) -> Result<HedgeDelay, String> {
        let s = s.trim();
        let d = if let Some(p) = s.strip_prefix('p').or_else(|| s.strip_prefix('P')) {
            let p: f64 = p.parse().map_err(|_| {
                format!("hedge delay {s:?}: a percentile is p followed by a number, e.g. p95")
            })?;
            HedgeDelay::Percentile(p)
        } else {
            HedgeDelay::After(crate::clock::duration::parse_duration(s).map_err(|e| {
                format!(
                    "hedge delay {s:?}: {e} (a duration such as 20ms, or a percentile such as p95)"
                )
            })?)
        };
        d.validate()?;
        Ok(d)
    }
}

/// The client's hedging settings (plain data; see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hedging {
    /// When a hedge is sent.
    pub delay: HedgeDelay,
    /// Hedges allowed per request sent (0.05: at most 5 % extra attempts).
    pub max_extra: f64,
}

impl Default for Hedging {
    fn default() -> Hedging {
        Hedging {
            delay: HedgeDelay::default(),
            max_extra: crate::defaults::HEDGE_MAX_EXTRA,
        }
    }
}

impl Hedging {
    /// Hedging after `delay`, with the default budget.
    pub fn after(delay: HedgeDelay) -> Hedging {
        Hedging {
            delay,
            ..Hedging::default()
        }
    }

    /// Checks the values; the error says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        self.delay.validate()?;
        if !self.max_extra.is_finite() || self.max_extra < 0.0 || self.max_extra > 1.0 {
            return Err(format!(
                "hedging max_extra {} must be between 0 and 1 (0.05 = at most 5 % extra attempts)",
                self.max_extra
            ));
        }
        Ok(())
    }
}

/// A request's own hedging choice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum HedgeChoice {
    /// Hedged after this delay (when it is a read that may be hedged).
    On(HedgeDelay),
    /// Never hedged, whatever the client's setting.
    Off,
}

/// The recent attempt latencies, and the percentile last read from them.
#[derive(Debug)]
struct Recent {
    /// Microseconds, a ring of the last [`RECENT_SAMPLES`].
    samples: Vec<u32>,
    next: usize,
    /// The percentile asked for last, and its value (µs).
    cached: Option<(f64, u32)>,
}

/// The live hedging state of one client: its budget and the recent latencies.
#[derive(Debug)]
pub(crate) struct HedgeState {
    budget: Budget,
    recent: Mutex<Recent>,
    /// Samples recorded so far (the percentile is recomputed every [`RECOMPUTE_EVERY`]).
    seen: AtomicU64,
}

impl HedgeState {
    pub(crate) fn new(max_extra: f64, now: Instant) -> HedgeState {
        let cfg = RetryBudget {
            ratio: max_extra,
            min_per_sec: 0,
            window: crate::defaults::RETRY_BUDGET_WINDOW,
        };
        HedgeState {
            budget: Budget::new(cfg, now),
            recent: Mutex::new(Recent {
                samples: Vec::with_capacity(RECENT_SAMPLES),
                next: 0,
                cached: None,
            }),
            seen: AtomicU64::new(0),
        }
    }

    /// A hedged-eligible request: adds `max_extra` of a hedge to the budget.
    pub(crate) fn deposit(&self, now: Instant) {
        self.budget.deposit(now);
    }

    /// Takes one hedge from the hedge budget if it covers one.
    pub(crate) fn withdraw(&self, now: Instant) -> bool {
        self.budget.withdraw(now)
    }

    /// Whether the hedge budget covers one hedge now.
    #[cfg(test)]
    pub(crate) fn affords(&self, now: Instant) -> bool {
        self.budget.affords(now)
    }

    /// Records one attempt's latency.
    pub(crate) fn record(&self, elapsed: Duration) {
        let micros = u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX);
        let mut r = lock(&self.recent);
        if r.samples.len() < RECENT_SAMPLES {
            r.samples.push(micros);
        } else {
            let i = r.next;
            r.samples[i] = micros;
        }
        r.next = (r.next + 1) % RECENT_SAMPLES;
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if n % RECOMPUTE_EVERY == 0 {
            r.cached = None;
        }
    }

    /// The delay before a hedge of a request with `delay`: `None` while a percentile is
    /// asked for and fewer than [`MIN_SAMPLES`] latencies were seen.
    pub(crate) fn delay(&self, delay: HedgeDelay) -> Option<Duration> {
        let p = match delay {
            HedgeDelay::After(d) => return Some(d),
            HedgeDelay::Percentile(p) => p,
        };
        let mut r = lock(&self.recent);
        if r.samples.len() < MIN_SAMPLES {
            return None;
        }
        if let Some((cp, v)) = r.cached {
            if cp == p {
                return Some(Duration::from_micros(u64::from(v)));
            }
        }
        let v = percentile(&r.samples, p);
        r.cached = Some((p, v));
        Some(Duration::from_micros(u64::from(v)))
    }
}

/// The `p`th percentile of `samples` (nearest rank: the smallest sample with at least p %
/// of the samples at or below it). `samples` is not empty.
fn percentile(samples: &[u32], p: f64) -> u32 {
    let mut sorted = samples.to_vec();
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    let i = rank.clamp(1, n) - 1;
    let (_, v, _) = sorted.select_nth_unstable(i);
    *v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_parse_and_validate() {
        assert_eq!(
            HedgeDelay::parse("20ms"),
            Ok(HedgeDelay::After(Duration::from_millis(20)))
        );
        assert_eq!(HedgeDelay::parse("p95"), Ok(HedgeDelay::Percentile(95.0)));
        assert_eq!(HedgeDelay::parse("p99.9"), Ok(HedgeDelay::Percentile(99.9)));
        assert!(HedgeDelay::parse("p100").unwrap_err().contains("below 100"));
        assert!(HedgeDelay::parse("p").unwrap_err().contains("percentile"));
        assert!(HedgeDelay::parse("0s").unwrap_err().contains("above 0"));
        assert!(HedgeDelay::parse("soon").unwrap_err().contains("p95"));
        let bad = Hedging {
            max_extra: 2.0,
            ..Hedging::default()
        };
        assert!(bad.validate().unwrap_err().contains("max_extra"));
        assert!(Hedging::default().validate().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_percentile_needs_min_samples_and_follows_the_recent_ones() {
        let s = HedgeState::new(0.05, Instant::now());
        let p95 = HedgeDelay::Percentile(95.0);
        for _ in 0..MIN_SAMPLES - 1 {
            s.record(Duration::from_millis(1));
        }
        assert_eq!(s.delay(p95), None, "too few samples");
        assert_eq!(
            s.delay(HedgeDelay::After(Duration::from_millis(7))),
            Some(Duration::from_millis(7))
        );
        s.record(Duration::from_millis(1));
        assert_eq!(s.delay(p95), Some(Duration::from_millis(1)));
        // 1..=100 ms: the nearest-rank p95 is 95 ms, the p50 50 ms.
        let s = HedgeState::new(0.05, Instant::now());
        for ms in 1..=100 {
            s.record(Duration::from_millis(ms));
        }
        assert_eq!(s.delay(p95), Some(Duration::from_millis(95)));
        assert_eq!(
            s.delay(HedgeDelay::Percentile(50.0)),
            Some(Duration::from_millis(50))
        );
        // The ring keeps the last RECENT_SAMPLES: 256 samples of 2 ms push the old ones out.
        for _ in 0..RECENT_SAMPLES {
            s.record(Duration::from_millis(2));
        }
        assert_eq!(s.delay(p95), Some(Duration::from_millis(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_allows_max_extra_hedges_per_request() {
        let now = Instant::now();
        let s = HedgeState::new(0.05, now);
        assert!(!s.affords(now), "no requests, no floor: no hedge");
        for _ in 0..100 {
            s.deposit(now);
        }
        assert_eq!((0..100).filter(|_| s.withdraw(now)).count(), 5);
        assert!(!s.affords(now));
    }
}
