//! `searchwire relay` in front of the three real OpenSearch nodes `scripts/test` starts (tiny
//! write pools, so real 429s happen): 100,000+ documents are sent through the relay while
//! (a) node 3 is SIGKILLed and restarted, (b) the relay is SIGKILLed and restarted, and
//! (c) the relay gets SIGTERM mid-load and is restarted, and (d) every node is stopped
//! (SIGSTOP) for 30 s and resumed. Every document the relay
//! acknowledged is in the index exactly once (`_version` 1 of a `create`), and
//! `/health/retry-queue` reported a backlog and went back to 200.
//!
//! Gated like `crates/searchwire/tests/real_cluster.rs`: skipped without
//! `SEARCHWIRE_TEST_CLUSTER` unless `SEARCHWIRE_REQUIRE_CLUSTER=1`; needs
//! `SEARCHWIRE_CLUSTER_DIR` to kill and restart node 3. Run only under the machine-wide
//! cluster lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;
mod relay_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use real_support::{cluster_cmd, cluster_health, ResumeAll, OPENSEARCH};
use relay_support::{free_port, health, load, spawn_relay, terminate, wait_drained, Load, Tally};
use searchwire::{Client, Request};
use serde_json::{json, Value};
use tokio::time::Instant;

const VICTIM: &str = "3";
const INDEX: &str = "sw-relay-real";
/// Documents per phase; three phases.
const PER_PHASE: u64 = 35_000;

/// Node 3 back (if dead) when the test ends, even on panic.
struct RestartVictim;

impl Drop for RestartVictim {
    fn drop(&mut self) {
        let (_, status) = cluster_cmd(&["status"]);
        let dead = status.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&VICTIM) && f.last() == Some(&"dead")
        });
        if dead {
            let (ok, out) = cluster_cmd(&["restart", VICTIM]);
            if !ok {
                eprintln!("restore: scripts/cluster restart {VICTIM} failed: {out}");
            }
        }
    }
}

/// Polls readiness in the background: the largest backlog seen, and 503s seen.
#[derive(Default)]
struct Watch {
    max_backlog: AtomicU64,
    not_ready: AtomicU64,
}

async fn wait_acked(tally: &Tally, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while tally.acked.lock().unwrap().len() < n {
        assert!(
            Instant::now() < deadline,
            "fewer than {n} acknowledged in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn every_acknowledged_document_is_indexed_exactly_once_through_kills_and_restarts() {
    let Some(urls) = OPENSEARCH.urls("real_relay") else {
        return;
    };
    let rt = real_support::runtime();
    let _restore = RestartVictim;
    rt.block_on(async {
        let t0 = Instant::now();
        let joined = urls.join(",");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        // Earlier tests stop and resume nodes: start once the cluster has all three back
        // (the server holds the answer up to 120 s; the attempt outlasts it).
        cluster_health(
            &client,
            "",
            &[("wait_for_nodes", "3"), ("wait_for_status", "yellow")],
            Duration::from_secs(120),
        )
        .await;
        let _ = client.send(Request::delete(format!("/{INDEX}"))).await;
        client
            .send(
                Request::put(format!("/{INDEX}"))
                    .json(&json!({
                        "settings": {"number_of_shards": 3, "number_of_replicas": 1}
                    }))
                    // Creating waits for the primaries server-side (30 s by default).
                    .attempt_timeout(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let tally = Arc::new(Tally::default());
        let watch = Arc::new(Watch::default());
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        let watching = Arc::new(AtomicBool::new(true));
        let poller = {
            let (watch, watching) = (watch.clone(), watching.clone());
            tokio::spawn(async move {
                while watching.load(Ordering::Relaxed) {
                    if let Some((code, h)) = health(addr).await {
                        let b = h["backlog"].as_u64().unwrap_or(0);
                        watch.max_backlog.fetch_max(b, Ordering::Relaxed);
                        if code == 503 {
                            watch.not_ready.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let extra = ["--live-budget", "2s", "--backlog-threshold", "500"];
        let run = |prefix: &str, limit: u64, stop: Arc<AtomicBool>| {
            let spec = Load {
                addr,
                index: INDEX.into(),
                prefix: prefix.into(),
                tasks: 4,
                batch: 250,
                limit,
            };
            tokio::spawn(load(spec, stop, tally.clone()))
        };

        // (a) node 3 SIGKILLed and restarted under load.
        let relay = spawn_relay(&joined, dir.path(), port, &extra).await;
        let stop = Arc::new(AtomicBool::new(false));
        let gen = run("a", PER_PHASE, stop.clone());
        wait_acked(&tally, 8_000, Duration::from_secs(120)).await;
        let (ok, out) = cluster_cmd(&["kill", VICTIM]);
        assert!(ok, "scripts/cluster kill {VICTIM}: {out}");
        eprintln!("node {VICTIM} killed at {:.1}s", t0.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (ok, out) = tokio::task::spawn_blocking(|| cluster_cmd(&["restart", VICTIM]))
            .await
            .unwrap();
        assert!(ok, "scripts/cluster restart {VICTIM}: {out}");
        eprintln!("node {VICTIM} restarted at {:.1}s", t0.elapsed().as_secs_f64());
        gen.await.unwrap();
        eprintln!("phase a done at {:.1}s: {} acknowledged, {} queued", t0.elapsed().as_secs_f64(), tally.acked.lock().unwrap().len(), tally.queued.load(Ordering::Relaxed));

        // (b) the relay SIGKILLed mid-load and restarted.
        let before = tally.acked.lock().unwrap().len();
        let stop = Arc::new(AtomicBool::new(false));
        let gen = run("b", 2 * PER_PHASE, stop.clone());
        wait_acked(&tally, before + 10_000, Duration::from_secs(120)).await;
        let mut child = relay.child;
        child.start_kill().unwrap();
        assert_eq!(child.wait().await.unwrap().code(), None);
        eprintln!("relay SIGKILLed at {:.1}s", t0.elapsed().as_secs_f64());
        let relay = spawn_relay(&joined, dir.path(), port, &extra).await;
        gen.await.unwrap();
        eprintln!("phase b done at {:.1}s: {} acknowledged", t0.elapsed().as_secs_f64(), tally.acked.lock().unwrap().len());

        // (c) SIGTERM mid-load: graceful exit 0, then restarted.
        let before = tally.acked.lock().unwrap().len();
        let stop = Arc::new(AtomicBool::new(false));
        let gen = run("c", 3 * PER_PHASE, stop.clone());
        wait_acked(&tally, before + 10_000, Duration::from_secs(120)).await;
        let t_term = Instant::now();
        assert_eq!(terminate(relay).await, Some(0), "graceful exit");
        eprintln!("relay SIGTERMed at {:.1}s, exited 0 after {:.2}s", t0.elapsed().as_secs_f64(), t_term.elapsed().as_secs_f64());
        let relay = spawn_relay(&joined, dir.path(), port, &extra).await;
        gen.await.unwrap();
        eprintln!("phase c done at {:.1}s: {} acknowledged", t0.elapsed().as_secs_f64(), tally.acked.lock().unwrap().len());

        // (d) every node stopped (SIGSTOP) for 30 s, then resumed, under load.
        let before = tally.acked.lock().unwrap().len();
        let stop = Arc::new(AtomicBool::new(false));
        let gen = run("d", 3 * PER_PHASE + 15_000, stop.clone());
        wait_acked(&tally, before + 3_000, Duration::from_secs(120)).await;
        let _resume = ResumeAll;
        for n in ["1", "2", "3"] {
            let (ok, out) = cluster_cmd(&["pause", n]);
            assert!(ok, "scripts/cluster pause {n}: {out}");
        }
        let paused = tally.acked.lock().unwrap().len();
        eprintln!("every node stopped at {:.1}s", t0.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(30)).await;
        let during = tally.acked.lock().unwrap().len() - paused;
        for n in ["1", "2", "3"] {
            let (ok, out) = cluster_cmd(&["resume", n]);
            assert!(ok, "scripts/cluster resume {n}: {out}");
        }
        eprintln!(
            "every node resumed at {:.1}s; {during} items acknowledged (queued) while stopped",
            t0.elapsed().as_secs_f64()
        );
        assert!(during > 0, "the relay acknowledged nothing while the cluster was stopped");
        gen.await.unwrap();
        eprintln!("phase d done at {:.1}s: {} acknowledged", t0.elapsed().as_secs_f64(), tally.acked.lock().unwrap().len());

        wait_drained(relay.addr, Duration::from_secs(300)).await;
        watching.store(false, Ordering::Relaxed);
        poller.await.unwrap();
        let (code, h) = health(relay.addr).await.unwrap();
        assert_eq!(code, 200, "{h}");
        assert_eq!(h["dead_letters"], 0, "{h}");
        assert_eq!(terminate(relay).await, Some(0));
        let max_backlog = watch.max_backlog.load(Ordering::Relaxed);
        eprintln!(
            "drained at {:.1}s; readiness: max backlog {max_backlog}, {} polls answered 503",
            t0.elapsed().as_secs_f64(),
            watch.not_ready.load(Ordering::Relaxed)
        );
        assert!(max_backlog > 0, "the load never made the relay queue anything");

        // Every acknowledged document, exactly once: present, `_version` 1.
        client.send(Request::post(format!("/{INDEX}/_refresh"))).await.unwrap();
        let acked: Vec<String> = tally.acked.lock().unwrap().iter().cloned().collect();
        assert!(acked.len() >= 100_000, "only {} acknowledged", acked.len());
        let mut missing = 0usize;
        let mut rewritten = 0usize;
        for chunk in acked.chunks(2_000) {
            let r = client
                .send(Request::post(format!("/{INDEX}/_mget?_source=false")).json(&json!({"ids": chunk})))
                .await
                .unwrap();
            let v: Value = r.json().unwrap();
            for d in v["docs"].as_array().unwrap() {
                if d["found"] != true {
                    missing += 1;
                } else if d["_version"] != 1 {
                    rewritten += 1;
                }
            }
        }
        let count: Value = client.send(Request::get(format!("/{INDEX}/_count"))).await.unwrap().json().unwrap();
        eprintln!(
            "{} acknowledged ({} via the queue), {} in the index, {missing} missing, {rewritten} with _version > 1, total {:.1}s",
            acked.len(),
            tally.queued.load(Ordering::Relaxed),
            count["count"],
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(missing, 0, "acknowledged documents are missing");
        assert_eq!(rewritten, 0, "acknowledged documents were written more than once");
        assert!(count["count"].as_u64().unwrap() <= tally.sent.load(Ordering::Relaxed));
        let _ = client.send(Request::delete(format!("/{INDEX}"))).await;
    });
}
