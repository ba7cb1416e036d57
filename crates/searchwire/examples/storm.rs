//! A retry storm, measured: 200 concurrent callers against a 3-node fake cluster.
//!
//! **Outage** (`STORM_SCENARIO=outage`, the default): the cluster answers 503 to everything
//! for 10 s, then recovers. Runs three configurations of the same client and prints, for
//! each, the attempts per second the cluster received during the outage, the attempts per
//! offered request, and the time from the cluster's recovery until the callers' requests
//! succeed again (the first 250 ms window with at least 95 % successes).
//!
//! **Throttling** (`STORM_SCENARIO=throttle`): for the whole run, each node answers 30 % of
//! the searches (drawn at random per request) with `429` and `Retry-After: 1`, the rest
//! with 200; health checks (`GET /`) always succeed. Prints, per configuration, the share of
//! (idempotent) requests that failed, the attempts per request and the retries the retry
//! budget refused. `STORM_THROTTLE_PERCENT` changes the 30 %.
//!
//! `STORM_SCENARIO=all` runs both.
//!
//! ```text
//! cargo run --release -p searchwire --example storm
//! STORM_OUTAGE_SECS=5 STORM_TOTAL_SECS=15 cargo run --release -p searchwire --example storm
//! STORM_SCENARIO=throttle STORM_OPEN_LOOP=1 cargo run --release -p searchwire --example storm
//! ```
//!
//! Closed loop (default): each caller sends one request at a time and starts at most one
//! request per 100 ms, so the offered load is at most 2,000 requests/s and falls when
//! requests get slow. Open loop (`STORM_OPEN_LOOP=1`): each caller starts a request every
//! 100 ms whether or not the previous one finished — 2,000 requests/s whatever happens, as
//! with independent users. The numbers are in `docs/benchmarks.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::{Client, ClientBuilder, DenyReason, Observer, Request, RetryDeniedEvent};
use searchwire_fake::{Behavior, FakeCluster, Handler, Match};
use tokio::time::Instant;

const CALLERS: usize = 200;
const PACE: Duration = Duration::from_millis(100);
const BUCKET: Duration = Duration::from_millis(250);

/// One request: when it started and finished (since the run began), whether it succeeded,
/// whether the breaker refused it.
#[derive(Clone, Copy)]
struct Done {
    started: Duration,
    finished: Duration,
    ok: bool,
    refused: bool,
}

/// How a run configures its client.
type Configure = fn(ClientBuilder) -> ClientBuilder;

fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

struct Outcome {
    label: &'static str,
    requests_in_outage: usize,
    attempts_in_outage: usize,
    recovery: Option<Duration>,
    failed_after_recovery: usize,
    breaker_refusals: usize,
}

/// Starts the callers; the returned future ends when every request they started has
/// finished, with the log of those requests.
fn spawn_callers(
    client: &Client,
    t0: Instant,
    total: Duration,
    open_loop: bool,
) -> impl std::future::Future<Output = Vec<Done>> {
    let log: Arc<Mutex<Vec<Done>>> = Arc::default();
    let end = t0 + total;
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let client = client.clone();
        let log = log.clone();
        callers.spawn(async move {
            let mut in_flight = tokio::task::JoinSet::new();
            while Instant::now() < end {
                let next = Instant::now() + PACE;
                let one = {
                    let client = client.clone();
                    let log = log.clone();
                    async move {
                        let started = t0.elapsed();
                        let r = client.send(Request::get("/logs/_search")).await;
                        let refused =
                            matches!(&r, Err(e) if e.kind() == searchwire::ErrorKind::CircuitOpen);
                        log.lock().unwrap().push(Done {
                            started,
                            finished: t0.elapsed(),
                            ok: r.is_ok(),
                            refused,
                        });
                    }
                };
                if open_loop {
                    in_flight.spawn(one);
                } else {
                    one.await;
                }
                tokio::time::sleep_until(next).await;
            }
            while in_flight.join_next().await.is_some() {}
        });
    }
    async move {
        while callers.join_next().await.is_some() {}
        let log = std::mem::take(&mut *log.lock().unwrap());
        log
    }
}

async fn scenario(
    label: &'static str,
    configure: Configure,
    outage: Duration,
    total: Duration,
    open_loop: bool,
) -> Outcome {
    let cluster = FakeCluster::start(3).await.expect("fake cluster");
    for n in cluster.nodes() {
        n.set_recording(false);
        n.on(Match::Any, Behavior::status(503));
    }
    let client: Client = configure(
        Client::builder()
            .nodes(cluster.urls())
            .read_environment(false)
            .seed(7),
    )
    .build()
    .expect("client");

    let t0 = Instant::now();
    let callers = spawn_callers(&client, t0, total, open_loop);
    tokio::time::sleep_until(t0 + outage).await;
    let attempts_in_outage = cluster.request_count();
    for n in cluster.nodes() {
        n.clear_rules();
    }
    let log = callers.await;
    let requests_in_outage = log.iter().filter(|r| r.started < outage).count();
    let breaker_refusals = log.iter().filter(|r| r.refused).count();
    // Recovery: the first bucket after the outage whose requests (by finish time) are at
    // least 95 % successful.
    let mut recovery = None;
    let mut t = outage;
    while t + BUCKET <= total {
        let in_bucket: Vec<_> = log
            .iter()
            .filter(|r| r.started >= outage && r.finished >= t && r.finished < t + BUCKET)
            .collect();
        if !in_bucket.is_empty() {
            let ok = in_bucket.iter().filter(|r| r.ok).count();
            if ok * 100 >= in_bucket.len() * 95 {
                recovery = Some(t + BUCKET - outage);
                break;
            }
        }
        t += BUCKET;
    }
    let failed_after_recovery = log.iter().filter(|r| r.started >= outage && !r.ok).count();
    Outcome {
        label,
        requests_in_outage,
        attempts_in_outage,
        recovery,
        failed_after_recovery,
        breaker_refusals,
    }
}

/// Counts the retries the budget and the breaker refused.
#[derive(Default)]
struct Denials {
    budget: AtomicU64,
    breaker: AtomicU64,
}

impl Observer for Denials {
    fn retry_denied(&self, e: &RetryDeniedEvent<'_>) {
        match e.reason {
            DenyReason::Budget => self.budget.fetch_add(1, Ordering::Relaxed),
            _ => self.breaker.fetch_add(1, Ordering::Relaxed),
        };
    }
}

struct ThrottleOutcome {
    label: &'static str,
    requests: usize,
    failed: usize,
    attempts: usize,
    budget_denials: u64,
    breaker_denials: u64,
    breaker_refusals: usize,
}

/// Every node answers `percent` % of the searches with 429 + `Retry-After: 1` for the whole
/// run; `GET /` (health checks) always succeeds.
async fn throttle_scenario(
    label: &'static str,
    configure: Configure,
    percent: f64,
    total: Duration,
    open_loop: bool,
) -> ThrottleOutcome {
    let cluster = FakeCluster::start(3).await.expect("fake cluster");
    let handler = Handler::new(move |_| {
        if fastrand::f64() * 100.0 < percent {
            Behavior::retry_after(429, "1")
        } else {
            Behavior::json(200, serde_json::json!({"hits": {"hits": []}}))
        }
    });
    for n in cluster.nodes() {
        n.set_recording(false);
        n.on(
            Match::Path("/logs/_search".into()),
            Behavior::Handler(handler.clone()),
        );
    }
    let denials = Arc::new(Denials::default());
    let client: Client = configure(
        Client::builder()
            .nodes(cluster.urls())
            .read_environment(false)
            .seed(7)
            .observer(denials.clone()),
    )
    .build()
    .expect("client");
    let log = spawn_callers(&client, Instant::now(), total, open_loop).await;
    ThrottleOutcome {
        label,
        requests: log.len(),
        failed: log.iter().filter(|r| !r.ok).count(),
        attempts: cluster.request_count(),
        budget_denials: denials.budget.load(Ordering::Relaxed),
        breaker_denials: denials.breaker.load(Ordering::Relaxed),
        breaker_refusals: log.iter().filter(|r| r.refused).count(),
    }
}

fn run_throttle(rt: &tokio::runtime::Runtime, total: Duration, open_loop: bool) {
    let percent: f64 = std::env::var("STORM_THROTTLE_PERCENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30.0);
    let runs: [(&'static str, Configure); 3] = [
        ("defaults (budget + breaker)", |b| b),
        ("no budget", |b| b.no_retry_budget()),
        ("per-class preset (ClassBackoff::reference)", |b| {
            b.class_backoff(searchwire::ClassBackoff::reference())
        }),
    ];
    println!(
        "{CALLERS} {} callers, one idempotent search per {} ms each; every node answers {percent}% of searches 429 + Retry-After: 1; {}s per run",
        if open_loop { "open-loop" } else { "closed-loop" },
        PACE.as_millis(),
        total.as_secs()
    );
    println!(
        "| configuration | requests | failed | failed % | attempts per request | retries refused by budget | by breaker | requests refused by breaker |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (label, configure) in runs {
        let o = rt.block_on(throttle_scenario(
            label, configure, percent, total, open_loop,
        ));
        println!(
            "| {} | {} | {} | {:.2} % | {:.2} | {} | {} | {} |",
            o.label,
            o.requests,
            o.failed,
            o.failed as f64 * 100.0 / o.requests.max(1) as f64,
            o.attempts as f64 / o.requests.max(1) as f64,
            o.budget_denials,
            o.breaker_denials,
            o.breaker_refusals,
        );
    }
}

fn main() {
    let outage = env_secs("STORM_OUTAGE_SECS", 10);
    let total = env_secs("STORM_TOTAL_SECS", 25).max(outage + Duration::from_secs(1));
    let open_loop = std::env::var("STORM_OPEN_LOOP").is_ok_and(|v| v == "1");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let which = std::env::var("STORM_SCENARIO").unwrap_or_else(|_| "outage".into());
    if which == "throttle" || which == "all" {
        run_throttle(&rt, env_secs("STORM_TOTAL_SECS", 20), open_loop);
        if which == "throttle" {
            return;
        }
    }
    let runs: [(&'static str, Configure); 3] = [
        ("no budget, no breaker", |b| {
            b.no_retry_budget().no_circuit_breaker()
        }),
        ("budget, no breaker", |b| b.no_circuit_breaker()),
        ("budget + breaker (defaults)", |b| b),
    ];
    println!(
        "{CALLERS} {} callers, one request per {} ms each; 3 nodes answer 503 for {}s, then recover; {}s per run",
        if open_loop { "open-loop" } else { "closed-loop" },
        PACE.as_millis(),
        outage.as_secs(),
        total.as_secs()
    );
    println!(
        "| configuration | requests/s offered (outage) | attempts/s at the cluster (outage) | attempts per request | time to recover | failed requests after recovery | refused by breaker |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (label, configure) in runs {
        let o = rt.block_on(scenario(label, configure, outage, total, open_loop));
        let secs = outage.as_secs_f64();
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {} | {} | {} |",
            o.label,
            o.requests_in_outage as f64 / secs,
            o.attempts_in_outage as f64 / secs,
            o.attempts_in_outage as f64 / o.requests_in_outage.max(1) as f64,
            o.recovery
                .map_or("not within the run".to_string(), |d| format!(
                    "{:.2}s",
                    d.as_secs_f64()
                )),
            o.failed_after_recovery,
            o.breaker_refusals,
        );
    }
}
