//! `--repeat N` / `--for DUR`: many requests through ONE client (so node state — dead nodes,
//! resurrection timers, round-robin position — carries from request to request), `C` at a
//! time, optionally paced by a shared ticker, summarized as one JSON object.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use searchwire::{Client, Request};
use serde::Serialize;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::exit;
use crate::output;

/// When to stop starting requests.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this many requests.
    Count(u64),
    /// Once this much time has passed since the start (requests in flight then complete).
    For(Duration),
}

/// A load to run.
#[derive(Clone, Copy, Debug)]
pub struct LoadSpec {
    pub stop: Stop,
    /// Requests in flight at once (at least 1).
    pub concurrency: u32,
    /// At most this many request starts per second, overall.
    pub rate: Option<f64>,
    /// Write `--trace-attempts` lines.
    pub trace: bool,
}

/// The JSON summary printed at the end.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    pub attempts: u64,
    pub retries: u64,
    pub latency_ms: Latency,
    /// The same percentiles over the successful requests only (what a caller that was
    /// served waited; refused requests return at once and would hide it).
    pub ok_latency_ms: Latency,
    pub errors: BTreeMap<&'static str, u64>,
    /// Wall time of the whole load, first start to last completion, in seconds.
    pub wall_s: f64,
    /// `requests / wall_s` (0 when no time passed).
    pub requests_per_s: f64,
    /// CPU time the whole process (every thread) used during the load.
    pub cpu_s: Cpu,
    /// `requests / cpu_s.total` (null when the CPU time is unknown or 0).
    pub requests_per_cpu_s: Option<f64>,
}

/// Nearest-rank percentiles over all requests, in milliseconds (null with no requests).
#[derive(Debug, Serialize, PartialEq)]
pub struct Latency {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

/// Process CPU time in seconds, from `getrusage(RUSAGE_SELF)` before and after the load
/// (null where the platform cannot tell).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Cpu {
    pub user: Option<f64>,
    pub system: Option<f64>,
    pub total: Option<f64>,
}

impl Cpu {
    /// User and system CPU time this process has used so far.
    fn now() -> Cpu {
        match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
            Ok(u) => {
                let secs =
                    |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
                let (user, system) = (secs(u.user_time()), secs(u.system_time()));
                Cpu {
                    user: Some(user),
                    system: Some(system),
                    total: Some(user + system),
                }
            }
            Err(_) => Cpu {
                user: None,
                system: None,
                total: None,
            },
        }
    }

    /// The CPU time used between `earlier` and `self`.
    fn since(self, earlier: Cpu) -> Cpu {
        let d = |a: Option<f64>, b: Option<f64>| Some((a? - b?).max(0.0));
        Cpu {
            user: d(self.user, earlier.user),
            system: d(self.system, earlier.system),
            total: d(self.total, earlier.total),
        }
    }
}

#[derive(Default)]
struct Stats {
    latencies: Vec<Duration>,
    ok_latencies: Vec<Duration>,
    ok: u64,
    failed: u64,
    attempts: u64,
    errors: BTreeMap<&'static str, u64>,
    /// Exit code of the first request to fail, in completion order.
    first_failure: Option<u8>,
}

/// Runs the load; returns the summary and the exit code (0 if every request succeeded, else
/// the code of the first request to fail, in completion order).
pub async fn run(client: Client, template: Request, spec: LoadSpec) -> (Summary, u8) {
    let cpu_before = Cpu::now();
    let started = Instant::now();
    let end = match spec.stop {
        Stop::For(d) => Some(started.checked_add(d).unwrap_or_else(far_future)),
        Stop::Count(_) => None,
    };
    let ticker = spec.rate.map(|rate| {
        // `rate` is validated to [0.001, 1e9], so the period is between 1 ns and 1000 s.
        let period = Duration::try_from_secs_f64(1.0 / rate)
            .unwrap_or(Duration::from_secs(1000))
            .max(Duration::from_nanos(1));
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Arc::new(tokio::sync::Mutex::new(interval))
    });
    let next = Arc::new(AtomicU64::new(0));
    let stats = Arc::new(Mutex::new(Stats::default()));

    // Workers are ordinary tasks spread over the runtime's threads, all sharing one
    // client, so node state carries from request to request.
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..worker_count(&spec) {
        let worker = Worker {
            client: client.clone(),
            template: template.clone(),
            stop: spec.stop,
            end,
            ticker: ticker.clone(),
            next: next.clone(),
            stats: stats.clone(),
            trace: spec.trace,
        };
        workers.spawn(worker.run());
    }
    while let Some(joined) = workers.join_next().await {
        if let Err(e) = joined {
            // A worker can only end abnormally by panicking; report it, keep the rest.
            output::error_message(format!("a load worker failed: {e}"));
        }
    }

    let wall = started.elapsed();
    let cpu = Cpu::now().since(cpu_before);
    let mut st = stats.lock().unwrap_or_else(PoisonError::into_inner);
    let stats = std::mem::take(&mut *st);
    summarize(stats, wall, cpu)
}

/// Workers to start: `--concurrency`, but never more than `--repeat` requests.
fn worker_count(spec: &LoadSpec) -> u64 {
    let c = u64::from(spec.concurrency.max(1));
    match spec.stop {
        Stop::Count(n) => c.min(n.max(1)),
        Stop::For(_) => c,
    }
}

fn far_future() -> Instant {
    // About 30 years: `--for` with an absurd duration just runs "forever".
    Instant::now() + Duration::from_secs(30 * 365 * 24 * 3600)
}

struct Worker {
    client: Client,
    template: Request,
    stop: Stop,
    end: Option<Instant>,
    ticker: Option<Arc<tokio::sync::Mutex<Interval>>>,
    next: Arc<AtomicU64>,
    stats: Arc<Mutex<Stats>>,
    trace: bool,
}

impl Worker {
    async fn run(self) {
        loop {
            let index = match self.stop {
                Stop::Count(n) => {
                    // Claim a request before waiting for a tick, so no tick is wasted.
                    let i = self.next.fetch_add(1, Ordering::Relaxed) + 1;
                    if i > n {
                        break;
                    }
                    self.pace().await;
                    i
                }
                Stop::For(_) => {
                    // The wait for a tick ends at the end of the run: a slow `--rate` must
                    // not keep the load going past `--for`.
                    let ticked = match self.end {
                        Some(end) => tokio::select! {
                            () = self.pace() => true,
                            () = tokio::time::sleep_until(end) => false,
                        },
                        None => {
                            self.pace().await;
                            true
                        }
                    };
                    if !ticked || self.end.is_some_and(|end| Instant::now() >= end) {
                        break;
                    }
                    self.next.fetch_add(1, Ordering::Relaxed) + 1
                }
            };
            let started = Instant::now();
            let result = self.client.send(self.template.clone()).await;
            let latency = started.elapsed();
            let (attempts, failure) = match &result {
                Ok(r) => (r.attempts(), None),
                Err(e) => (e.attempts(), Some(e.kind())),
            };
            if self.trace {
                output::stderr(&output::trace_lines(index, attempts));
            }
            let mut st = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
            st.latencies.push(latency);
            st.attempts += attempts.len() as u64;
            match (failure, &result) {
                (Some(kind), Err(e)) => {
                    st.failed += 1;
                    *st.errors.entry(kind.as_str()).or_insert(0) += 1;
                    if st.first_failure.is_none() {
                        st.first_failure = Some(exit::for_error(kind));
                        output::error_message(format!("request {index} failed first: {e}"));
                    }
                }
                _ => {
                    st.ok += 1;
                    st.ok_latencies.push(latency);
                }
            }
        }
    }

    async fn pace(&self) {
        if let Some(t) = &self.ticker {
            t.lock().await.tick().await;
        }
    }
}

fn summarize(mut st: Stats, wall: Duration, cpu: Cpu) -> (Summary, u8) {
    st.latencies.sort_unstable();
    st.ok_latencies.sort_unstable();
    let requests = st.latencies.len() as u64;
    let pick = |p: u64| nearest_rank(&st.latencies, p).map(output::ms);
    let ok = |p: u64| nearest_rank(&st.ok_latencies, p).map(output::ms);
    let summary = Summary {
        requests,
        ok: st.ok,
        failed: st.failed,
        attempts: st.attempts,
        retries: st.attempts.saturating_sub(requests),
        latency_ms: Latency {
            p50: pick(50),
            p90: pick(90),
            p99: pick(99),
            max: st.latencies.last().copied().map(output::ms),
        },
        ok_latency_ms: Latency {
            p50: ok(50),
            p90: ok(90),
            p99: ok(99),
            max: st.ok_latencies.last().copied().map(output::ms),
        },
        errors: st.errors,
        wall_s: wall.as_secs_f64(),
        requests_per_s: per(requests, Some(wall.as_secs_f64())).unwrap_or(0.0),
        cpu_s: cpu,
        requests_per_cpu_s: per(requests, cpu.total),
    };
    (summary, st.first_failure.unwrap_or(exit::SUCCESS))
}

/// `n / secs`, or `None` when the time is unknown or zero.
fn per(n: u64, secs: Option<f64>) -> Option<f64> {
    secs.filter(|s| *s > 0.0).map(|s| n as f64 / s)
}

/// The summary for people (stderr, without `--json`): one line of rates, one of latencies.
pub fn human(s: &Summary) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2} ms"));
    let secs = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |v| format!("{v:.2} s"));
    let per_cpu = s
        .requests_per_cpu_s
        .map_or_else(|| "?".to_string(), |v| format!("{v:.0}"));
    format!(
        "{} requests ({} ok, {} failed, {} attempts) in {:.2} s: {:.0} requests/s; \
         CPU {} (user {}, system {}): {} requests per CPU-second\n\
         latency p50 {}, p90 {}, p99 {}, max {}\n",
        s.requests,
        s.ok,
        s.failed,
        s.attempts,
        s.wall_s,
        s.requests_per_s,
        secs(s.cpu_s.total),
        secs(s.cpu_s.user),
        secs(s.cpu_s.system),
        per_cpu,
        ms(s.latency_ms.p50),
        ms(s.latency_ms.p90),
        ms(s.latency_ms.p99),
        ms(s.latency_ms.max),
    )
}

/// The nearest-rank `p`th percentile of ascending `sorted`: the value at rank
/// `ceil(p/100 × n)` (1-based). `None` when empty.
fn nearest_rank(sorted: &[Duration], p: u64) -> Option<Duration> {
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    let rank = (p * n).div_ceil(100).clamp(1, n);
    sorted.get(usize::try_from(rank - 1).ok()?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn cpu_time_is_measured_and_subtracted() {
        let before = Cpu::now();
        // Burn a little CPU so the difference is visible whatever the clock's resolution.
        let mut x = 0u64;
        while Cpu::now().since(before).total.unwrap_or(1.0) < 0.01 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let d = Cpu::now().since(before);
        let (u, s, t) = (
            d.user.unwrap_or(-1.0),
            d.system.unwrap_or(-1.0),
            d.total.unwrap_or(-1.0),
        );
        assert!(
            u >= 0.0 && s >= 0.0 && (t - (u + s)).abs() < 1e-9 && t >= 0.01,
            "{d:?}"
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v = ms(&(1..=20).collect::<Vec<_>>());
        assert_eq!(nearest_rank(&v, 50), Some(Duration::from_millis(10)));
        assert_eq!(nearest_rank(&v, 99), Some(Duration::from_millis(20)));
        assert_eq!(nearest_rank(&v, 100), Some(Duration::from_millis(20)));
        assert_eq!(nearest_rank(&v, 0), Some(Duration::from_millis(1)));
        let one = ms(&[7]);
        assert_eq!(nearest_rank(&one, 50), Some(Duration::from_millis(7)));
        assert_eq!(nearest_rank(&[], 50), None);
    }

    fn spec(stop: Stop, concurrency: u32) -> LoadSpec {
        LoadSpec {
            stop,
            concurrency,
            rate: None,
            trace: false,
        }
    }

    #[test]
    fn workers_never_exceed_the_requests_to_send() {
        assert_eq!(worker_count(&spec(Stop::Count(1), 10_000)), 1);
        assert_eq!(worker_count(&spec(Stop::Count(5), 3)), 3);
        assert_eq!(
            worker_count(&spec(Stop::For(Duration::from_secs(1)), 64)),
            64
        );
        assert_eq!(worker_count(&spec(Stop::For(Duration::from_secs(1)), 0)), 1);
    }

    #[test]
    fn summary_counts_retries_and_first_failure() {
        let mut errors = BTreeMap::new();
        errors.insert("status", 1);
        let st = Stats {
            latencies: ms(&[3, 1, 2]),
            ok_latencies: ms(&[3, 1]),
            ok: 2,
            failed: 1,
            attempts: 5,
            errors,
            first_failure: Some(1),
        };
        let cpu = Cpu {
            user: Some(1.5),
            system: Some(0.5),
            total: Some(2.0),
        };
        let (s, code) = summarize(st, Duration::from_millis(1500), cpu);
        assert_eq!((s.requests, s.retries, code), (3, 2, 1));
        assert_eq!(
            s.latency_ms,
            Latency {
                p50: Some(2.0),
                p90: Some(3.0),
                p99: Some(3.0),
                max: Some(3.0)
            }
        );
        assert_eq!(
            s.ok_latency_ms.p50,
            Some(1.0),
            "over the successful requests only"
        );
        assert_eq!((s.wall_s, s.requests_per_s), (1.5, 2.0));
        assert_eq!((s.cpu_s, s.requests_per_cpu_s), (cpu, Some(1.5)));
        let text = human(&s);
        assert!(
            text.contains("3 requests (2 ok, 1 failed, 5 attempts) in 1.50 s: 2 requests/s")
                && text
                    .contains("CPU 2.00 s (user 1.50 s, system 0.50 s): 2 requests per CPU-second")
                && text.contains("latency p50 2.00 ms, p90 3.00 ms, p99 3.00 ms, max 3.00 ms"),
            "{text}"
        );
        let unknown = Cpu {
            user: None,
            system: None,
            total: None,
        };
        let (empty, code) = summarize(Stats::default(), Duration::ZERO, unknown);
        assert_eq!((empty.requests, empty.latency_ms.max, code), (0, None, 0));
        assert_eq!(
            (empty.requests_per_s, empty.requests_per_cpu_s),
            (0.0, None)
        );
        assert!(human(&empty).contains("CPU ? (user ?, system ?): ? requests per CPU-second"));
    }
}
