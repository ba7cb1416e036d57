//! The fake cluster as a standalone server, for load tests and benchmarks of clients in
//! other processes (e.g. `benchmarks/requests.sh`, which runs searchwire and Go clients
//! against it).
//!
//! ```text
//! cargo run --release -p searchwire-fake --example fake_cluster -- [--nodes N] [--capacity K] SCENARIO
//! ```
//!
//! Scenarios (every node answers like OpenSearch 2.19, see the crate docs, except):
//!
//! - `steady`: nothing else.
//! - `one-down`: node 0 is killed before the URLs are printed (connections refused).
//! - `all-503`: every node answers every request (health checks too) `503`.
//! - `throttle-30`: 3 requests in 10 (exactly, spread: the 1st, 4th and 7th of each ten the
//!   cluster receives) are answered `429` with `Retry-After: 1`.
//! - `slow-node`: node 0 takes 50 ms longer to answer every request (a [`Load`] with a 50 ms
//!   base).
//! - `slow-recovers`: node 0 is 50 ms slower for the first 20 s, then as fast as the others.
//! - `pause-300`: node 0 stops the world for 300 ms every 3 s (GC-like [`Pauses`]).
//! - `spread`: a healthy cluster whose latencies spread as searches' do: every node takes a
//!   log-normal 10 ms median (sigma 0.5: p99 about 32 ms) for every request, each request
//!   on its own (no capacity bound: nothing queues).
//!
//! `--capacity K` gives every node a capacity of K requests at once (the rest queue) and a
//! 1 ms service time, so a load past 1,000 × K requests/s per node builds latency.
//!
//! Prints the node URLs, comma-separated, as one line on stdout, then serves until its
//! standard input is closed; then prints one JSON line with the requests each node received
//! (`{"scenario":..,"requests":N,"per_node":[..]}`, every request counted, health checks
//! included) and exits. Runs on one thread (a current-thread tokio runtime), so it takes at
//! most one core. Requests are counted, not stored, so memory stays flat.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::time::Duration;

use searchwire_fake::{Behavior, FakeCluster, Handler, Latency, Load, Match, Pauses};

const USAGE: &str = "usage: fake_cluster [--nodes N] [--capacity K] steady|one-down|all-503|throttle-30|slow-node|slow-recovers|pause-300|spread";

/// How much slower the slow node of `slow-node` and `slow-recovers` is.
const SLOW_BY: Duration = Duration::from_millis(50);
/// How long `slow-recovers` keeps node 0 slow.
const SLOW_FOR: Duration = Duration::from_secs(20);
/// The median latency of `spread`.
const SPREAD_MEDIAN: Duration = Duration::from_millis(10);
/// The log-normal sigma of `spread`.
const SPREAD_SIGMA: f64 = 0.5;

fn main() {
    let mut nodes = 3usize;
    let mut capacity = None;
    let mut scenario = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--nodes" => match args.next().and_then(|v| v.parse().ok()) {
                Some(n) if n >= 1 => nodes = n,
                _ => fail("--nodes needs a number of nodes, at least 1"),
            },
            "--capacity" => match args.next().and_then(|v| v.parse().ok()) {
                Some(k) if k >= 1 => capacity = Some(k),
                _ => fail("--capacity needs a number of requests served at once, at least 1"),
            },
            "steady" | "one-down" | "all-503" | "throttle-30" | "slow-node" | "slow-recovers"
            | "pause-300" | "spread"
                if scenario.is_none() =>
            {
                scenario = Some(a);
            }
            other => fail(&format!("unexpected argument {other:?}")),
        }
    }
    let Some(scenario) = scenario else {
        fail("no scenario given")
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => fail(&format!("cannot start a tokio runtime: {e}")),
    };
    rt.block_on(serve(nodes, capacity, &scenario));
}

async fn serve(n: usize, capacity: Option<usize>, scenario: &str) {
    let cluster = match FakeCluster::start(n).await {
        Ok(c) => c,
        Err(e) => fail(&format!("cannot start the fake nodes: {e}")),
    };
    for node in cluster.nodes() {
        node.set_recording(false);
    }
    let base = match capacity {
        Some(k) => Load::new().base(Duration::from_millis(1)).capacity(k),
        None => Load::new(),
    };
    if capacity.is_some() {
        for node in cluster.nodes() {
            node.set_load(base.clone());
        }
    }
    match scenario {
        "one-down" => cluster.node(0).kill().await,
        "all-503" => {
            for node in cluster.nodes() {
                node.set_default(Behavior::status(503));
            }
        }
        "throttle-30" => {
            let seen = Arc::new(AtomicU64::new(0));
            let handler = Handler::new(move |_| {
                if matches!(seen.fetch_add(1, Ordering::Relaxed) % 10, 0 | 3 | 6) {
                    Behavior::retry_after(429, "1")
                } else {
                    Behavior::Default
                }
            });
            for node in cluster.nodes() {
                node.on(Match::Any, Behavior::Handler(handler.clone()));
            }
        }
        "slow-node" => cluster.node(0).set_load(slow(&base)),
        "slow-recovers" => {
            let node = cluster.node(0).clone();
            node.set_load(slow(&base));
            let healthy = base.clone();
            tokio::spawn(async move {
                tokio::time::sleep(SLOW_FOR).await;
                node.set_load(healthy);
            });
        }
        "pause-300" => cluster.node(0).set_load(base.clone().pauses(Pauses::new(
            Duration::from_secs(3),
            Duration::from_millis(300),
        ))),
        "spread" => {
            for (i, node) in cluster.nodes().iter().enumerate() {
                node.set_load(
                    base.clone()
                        .latency(Latency::LogNormal {
                            median: SPREAD_MEDIAN,
                            sigma: SPREAD_SIGMA,
                        })
                        .seed(i as u64 + 1),
                );
            }
        }
        _ => {}
    }
    println!("{}", cluster.urls().join(","));

    // Serve until stdin closes (read on a plain thread: stdin is blocking).
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = tx.send(());
    });
    let _ = rx.await;

    let per_node: Vec<usize> = cluster.nodes().iter().map(|n| n.request_count()).collect();
    let total: usize = per_node.iter().sum();
    println!(
        "{}",
        serde_json::json!({"scenario": scenario, "requests": total, "per_node": per_node})
    );
}

/// `base`, [`SLOW_BY`] slower.
fn slow(base: &Load) -> Load {
    base.clone().base(base.base_time() + SLOW_BY)
}

fn fail(message: &str) -> ! {
    eprintln!("fake_cluster: {message}\n{USAGE}");
    std::process::exit(2)
}
