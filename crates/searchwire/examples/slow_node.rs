//! Latency-aware selection against round robin, on a fake cluster of three nodes where one
//! is 50 ms slower (`searchwire-fake`'s load model): the figures behind docs/benchmarks.md's
//! "One slow node" section.
//!
//! ```sh
//! cargo run --release -p searchwire --example slow_node            # every scenario
//! SLOW_NODE_SECS=15 SLOW_NODE_RATE=150 cargo run --release -p searchwire --example slow_node
//! ```
//!
//! The fake cluster runs on its own thread and runtime; the client on another. Load: 8
//! callers, together `SLOW_NODE_RATE` (150) `GET /_search` requests per second, each caller
//! on a fixed schedule (a request every 8 / rate seconds), for `SLOW_NODE_SECS` (15) per run.
//! Runs, one after the other, each selection on a fresh cluster and client:
//!
//! - `healthy`: every node answers at once;
//! - `slow`: node 0 takes 50 ms longer (a `Load` with a 50 ms base);
//! - `recovers` (latency-aware only): node 0 is slow for the first third, then healthy; per
//!   1 s window after it recovers, its share of requests against a fair third.
//!
//! Prints one table: p50 / p90 / p99 / max latency (ms, at the client) and the share of
//! requests each node served, and for `recovers` the time to the first 1 s window with node
//! 0's share within ±20 % of fair, the share over the rest of the run, and the largest
//! window share against fair.

// An example measures wall-clock time, which the library itself must not read directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use searchwire::{Client, Request, Selection};
use searchwire_fake::{FakeCluster, FakeNode, Load};

const CALLERS: usize = 8;
const SLOW_BY: Duration = Duration::from_millis(50);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One finished request: when it started (from the run's start), how long it took, and
/// which node (0..3) answered.
#[derive(Clone, Copy)]
struct Sample {
    at: Duration,
    took: Duration,
    node: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Healthy,
    Slow,
    Recovers,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::Slow => "slow",
            Scenario::Recovers => "recovers",
        }
    }
}

/// Starts a 3-node fake cluster on its own thread; returns its URLs and its nodes (to
/// script), served by that thread until `stop` is dropped.
fn start_cluster() -> (Vec<String>, Vec<FakeNode>, tokio::sync::oneshot::Sender<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let cluster = FakeCluster::start(3).await.unwrap();
            for n in cluster.nodes() {
                n.set_recording(false);
            }
            // A handle for the client thread (the nodes' tasks stay on this runtime).
            let urls = cluster.urls();
            let nodes: Vec<_> = cluster.nodes().to_vec();
            tx.send((urls, nodes)).unwrap();
            let _ = stopped.await;
            drop(cluster);
        });
    });
    let (urls, nodes) = rx.recv().unwrap();
    (urls, nodes, stop)
}

fn run(selection: Selection, scenario: Scenario, secs: u64, rate: f64) -> Vec<Sample> {
    let (urls, nodes, stop) = start_cluster();
    let slow = Load::new().base(SLOW_BY);
    if scenario != Scenario::Healthy {
        nodes[0].set_load(slow);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let samples = rt.block_on(async {
        let client = Client::builder()
            .nodes(urls.iter().cloned())
            .read_environment(false)
            .selection(selection)
            .build()
            .unwrap();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let period = Duration::from_secs_f64(CALLERS as f64 / rate);
        let end = start + Duration::from_secs(secs);
        let recover_at = start + Duration::from_secs(secs / 3);
        let mut tasks = Vec::new();
        for c in 0..CALLERS {
            let client = client.clone();
            let samples = Arc::clone(&samples);
            let urls = urls.clone();
            // Callers start spread over one period.
            let first = tokio::time::Instant::from_std(start + period * c as u32 / CALLERS as u32);
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(first, period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let t = Instant::now();
                    if t >= end {
                        return;
                    }
                    let r = client.send(Request::get("/logs/_search")).await;
                    let took = t.elapsed();
                    let node = match &r {
                        Ok(resp) => urls.iter().position(|u| u == resp.node()).unwrap_or(3),
                        Err(_) => 3,
                    };
                    samples.lock().unwrap().push(Sample {
                        at: t - start,
                        took,
                        node,
                    });
                }
            }));
        }
        if scenario == Scenario::Recovers {
            tokio::time::sleep_until(tokio::time::Instant::from_std(recover_at)).await;
            nodes[0].clear_load();
        }
        for t in tasks {
            t.await.unwrap();
        }
        let v = samples.lock().unwrap().clone();
        v
    });
    drop(stop);
    samples
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

fn main() {
    let secs: u64 = env_or("SLOW_NODE_SECS", 15);
    let rate: f64 = env_or("SLOW_NODE_RATE", 150.0);
    println!(
        "3 nodes, {CALLERS} callers, {rate} requests/s, {secs} s per run; node 0 is {} ms slower in `slow`",
        SLOW_BY.as_millis()
    );
    println!(
        "{:<9} {:<12} {:>7} {:>7} {:>7} {:>7} {:>7}  share node 0 / 1 / 2 (failed)",
        "scenario", "selection", "req", "p50", "p90", "p99", "max"
    );
    for scenario in [Scenario::Healthy, Scenario::Slow] {
        for selection in [Selection::LatencyAware, Selection::RoundRobin] {
            let s = run(selection, scenario, secs, rate);
            let mut took: Vec<Duration> = s.iter().map(|x| x.took).collect();
            took.sort();
            let mut per = [0usize; 4];
            for x in &s {
                per[x.node] += 1;
            }
            let n = s.len().max(1) as f64;
            println!(
                "{:<9} {:<12} {:>7} {:>7.2} {:>7.2} {:>7.2} {:>7.2}  {:.1} % / {:.1} % / {:.1} % ({})",
                scenario.name(),
                selection.as_str(),
                s.len(),
                pct(&took, 0.50),
                pct(&took, 0.90),
                pct(&took, 0.99),
                pct(&took, 1.0),
                per[0] as f64 * 100.0 / n,
                per[1] as f64 * 100.0 / n,
                per[2] as f64 * 100.0 / n,
                per[3],
            );
        }
    }
    // Recovery: a longer run, node 0 slow for the first third.
    let rsecs = secs.max(15) * 3;
    let s = run(Selection::LatencyAware, Scenario::Recovers, rsecs, rate);
    let recovered = rsecs / 3;
    let windows = rsecs - recovered;
    let mut first_fair = None;
    let mut worst = 0.0f64;
    let (mut after_n0, mut after_all) = (0usize, 0usize);
    for w in 0..windows {
        let lo = Duration::from_secs(recovered + w);
        let hi = lo + Duration::from_secs(1);
        let in_w: Vec<&Sample> = s.iter().filter(|x| x.at >= lo && x.at < hi).collect();
        let n0 = in_w.iter().filter(|x| x.node == 0).count();
        let ratio = if in_w.is_empty() {
            0.0
        } else {
            n0 as f64 / (in_w.len() as f64 / 3.0)
        };
        worst = worst.max(ratio);
        if first_fair.is_none() && (0.8..=1.2).contains(&ratio) {
            first_fair = Some(w);
        }
        if let Some(f) = first_fair {
            if w >= f {
                after_n0 += n0;
                after_all += in_w.len();
            }
        }
    }
    println!(
        "recovers  latency      node 0 healthy again at {recovered} s: first 1 s window within ±20 % of fair after {} s; \
         share from then on {:.1} % (fair 33.3 %); largest window {:.2}× fair",
        first_fair.map_or("never".to_string(), |w| w.to_string()),
        after_n0 as f64 * 100.0 / after_all.max(1) as f64,
        worst
    );
}
