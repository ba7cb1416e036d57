//! The client against real OpenSearch 2.19 nodes started by `scripts/cluster` (see
//! `harness/opensearch/README.md`): version detection, discovery and weighting, failover
//! when a node is killed or frozen, resurrection, and 429s from a tiny write pool.
//!
//! Expects the cluster CI starts:
//!
//! ```sh
//! SEARCHWIRE_CLUSTER_DIR=<dir> scripts/cluster start 3 -s thread_pool.write.size=1 \
//!   -s thread_pool.write.queue_size=1 -s 1:node.processors=1 -s 2:node.processors=2 \
//!   -s 3:node.processors=2
//! SEARCHWIRE_TEST_CLUSTER=http://127.0.0.1:9201,http://127.0.0.1:9202,http://127.0.0.1:9203 \
//!   SEARCHWIRE_REQUIRE_CLUSTER=1 SEARCHWIRE_CLUSTER_DIR=<dir> cargo test -p searchwire --test real_cluster
//! ```
//!
//! Without `SEARCHWIRE_TEST_CLUSTER` every test is skipped (a note on stderr), unless
//! `SEARCHWIRE_REQUIRE_CLUSTER=1`, which turns the skip into a failure. The tests share
//! one cluster and some kill or freeze node 3 (port 9203, the only node ever disturbed),
//! so they run one at a time under [`LOCK`], and every disturbance is undone by a guard
//! whose `Drop` resumes or restarts the node and waits for the cluster to be whole again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::{
    Backoff, Client, ClientBuilder, ErrorKind, NodeSnapshot, OutcomeKind, Request,
    ResurrectionConfig,
};
use serde_json::Value;
use tokio::time::Instant;

/// Serializes the tests of this file (they disturb the shared cluster). Poison-tolerant.
static LOCK: Mutex<()> = Mutex::new(());

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/cluster");

/// The one node the tests may kill or pause: `scripts/cluster` index and HTTP port.
const VICTIM: usize = 3;
const VICTIM_PORT: u16 = 9203;

/// Upper bound of any single wait (node marked dead, resurrected, cluster whole again).
const WAIT: Duration = Duration::from_secs(120);
/// Last-resort bound of a whole test.
// Above the preflight wait (120 s) plus a restart (the script's own 180 s bound), so a slow
// run fails with the script's message rather than this budget's.
const TEST_BUDGET: Duration = Duration::from_secs(420);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------------------
// Harness plumbing
// ---------------------------------------------------------------------------------------

/// The cluster URLs from `SEARCHWIRE_TEST_CLUSTER`, or `None` (skip) when unset and not
/// required. Panics when `SEARCHWIRE_REQUIRE_CLUSTER=1` and the cluster is not configured.
fn cluster_urls(test: &str) -> Option<Vec<String>> {
    let required = std::env::var("SEARCHWIRE_REQUIRE_CLUSTER").is_ok_and(|v| v.trim() == "1");
    let urls: Vec<String> = std::env::var("SEARCHWIRE_TEST_CLUSTER")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if urls.is_empty() {
        if required {
            panic!(
                "{test}: SEARCHWIRE_REQUIRE_CLUSTER=1 but SEARCHWIRE_TEST_CLUSTER is not set; \
                 start the cluster with scripts/cluster start 3 ... and export \
                 SEARCHWIRE_TEST_CLUSTER=http://127.0.0.1:9201,http://127.0.0.1:9202,http://127.0.0.1:9203"
            );
        }
        eprintln!(
            "{test}: skipped (SEARCHWIRE_TEST_CLUSTER is not set; see harness/opensearch/README.md)"
        );
        return None;
    }
    Some(urls)
}

/// Runs one test: checks the environment, takes [`LOCK`], and runs `body` on a fresh
/// multi-threaded runtime within [`TEST_BUDGET`]. The lock is released only after the
/// runtime (and every task it spawned) is gone.
fn run<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(urls) = cluster_urls(test) else {
        return;
    };
    let _serial = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t0 = Instant::now();
        tokio::time::timeout(TEST_BUDGET, body(urls))
            .await
            .unwrap_or_else(|_| panic!("{test}: did not finish within {TEST_BUDGET:?}"));
        eprintln!("{test}: passed in {:.1}s", t0.elapsed().as_secs_f64());
    });
}

/// The port of a node URL (`http://127.0.0.1:9203` → 9203; 0 when none).
fn port_of(url: &str) -> u16 {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

fn is_victim(url: &str) -> bool {
    port_of(url) == VICTIM_PORT
}

/// The victim's URL among the configured ones; panics when it is not there (the tests
/// that disturb a node need the 3-node cluster of the CI contract).
fn victim_url(urls: &[String]) -> String {
    urls.iter()
        .find(|u| is_victim(u))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "SEARCHWIRE_TEST_CLUSTER ({urls:?}) has no node on port {VICTIM_PORT}; these tests \
                 need the 3-node cluster of scripts/cluster start 3"
            )
        })
}

/// Runs `scripts/cluster ARGS...` synchronously; returns (success, stdout, stderr).
fn cluster_cmd(args: &[&str]) -> (bool, String, String) {
    match Command::new(SCRIPT).args(args).output() {
        Ok(out) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Err(e) => (false, String::new(), format!("could not run {SCRIPT}: {e}")),
    }
}

/// Runs `scripts/cluster ARGS...` off the async threads and panics when it fails.
async fn cluster_ok(args: &[&str]) {
    let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        cluster_cmd(&refs)
    })
    .await
    .unwrap();
    assert!(
        ok,
        "scripts/cluster {} failed\nstdout:\n{out}\nstderr:\n{err}",
        args.join(" ")
    );
}

/// Node `i`'s state as `scripts/cluster status` reports it (`running`, `paused`, `dead`).
fn node_state(i: usize) -> Option<String> {
    let (_, out, _) = cluster_cmd(&["status"]);
    out.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == i.to_string()).then(|| f.last().unwrap_or("").to_string())
    })
}

/// Blocks until the cluster reports `nodes` nodes and at least yellow, asking every URL in
/// turn (`wait_for_nodes` makes the server do the waiting). Returns whether it did within
/// [`WAIT`].
fn wait_cluster_whole(urls: &[String]) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        for u in urls {
            let url = format!(
                "{u}/_cluster/health?wait_for_nodes={}&wait_for_status=yellow&timeout=20s",
                urls.len()
            );
            let Ok(out) = Command::new("curl").args(["-s", "-m", "25", &url]).output() else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
                continue;
            };
            if v["timed_out"] == Value::Bool(false)
                && v["number_of_nodes"].as_u64() == Some(urls.len() as u64)
            {
                return true;
            }
        }
        std::thread::sleep(ms(500));
    }
    false
}

/// Brings the victim back to `running` (resume if paused, restart if dead) and waits for
/// the cluster to be whole. Synchronous: called from `Drop`.
fn restore_victim(urls: &[String]) {
    match node_state(VICTIM).as_deref() {
        Some("paused") => {
            let (ok, _, err) = cluster_cmd(&["resume", &VICTIM.to_string()]);
            if !ok {
                eprintln!("restore: scripts/cluster resume {VICTIM} failed: {err}");
            }
        }
        Some("dead") => {
            let (ok, _, err) = cluster_cmd(&["restart", &VICTIM.to_string()]);
            if !ok {
                eprintln!("restore: scripts/cluster restart {VICTIM} failed: {err}");
            }
        }
        Some(_) => {}
        None => eprintln!(
            "restore: scripts/cluster status does not list node {VICTIM} \
             (is SEARCHWIRE_CLUSTER_DIR the directory the cluster was started with?)"
        ),
    }
    if !wait_cluster_whole(urls) {
        eprintln!(
            "restore: the cluster did not report {} nodes within {WAIT:?}",
            urls.len()
        );
    }
}

/// Undoes a disturbance of the victim when dropped, on success and on panic alike.
struct RestoreVictim {
    urls: Vec<String>,
}

impl Drop for RestoreVictim {
    fn drop(&mut self) {
        restore_victim(&self.urls);
    }
}

/// Before a test: the victim running and the cluster whole (a previous test or run may
/// have left it otherwise). Fails the test when the cluster cannot be made whole.
async fn preflight(urls: &[String]) {
    let owned = urls.to_vec();
    let whole = tokio::task::spawn_blocking(move || {
        if owned.iter().any(|u| is_victim(u)) {
            restore_victim(&owned);
        }
        wait_cluster_whole(&owned)
    })
    .await
    .unwrap();
    assert!(
        whole,
        "the cluster at {urls:?} does not report {} nodes; is it running \
         (scripts/cluster status)?",
        urls.len()
    );
}

fn fast_resurrection() -> ResurrectionConfig {
    ResurrectionConfig {
        initial: ms(500),
        max: secs(2),
        minimum: ms(200),
        jitter_scale: 0.0,
        ..ResurrectionConfig::default()
    }
}

fn builder(urls: &[String]) -> ClientBuilder {
    Client::builder()
        .nodes(urls.iter().cloned())
        .read_environment(false)
        .backoff(Backoff::constant(ms(50)))
        .max_retries(3)
}

fn snapshot_of(client: &Client, pred: impl Fn(&str) -> bool) -> Option<NodeSnapshot> {
    client.nodes().into_iter().find(|n| pred(&n.url))
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after [`WAIT`].
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) -> Instant {
    let t0 = Instant::now();
    let r = tokio::time::timeout(WAIT, async {
        loop {
            if cond() {
                return Instant::now();
            }
            tokio::time::sleep(ms(50)).await;
        }
    })
    .await;
    match r {
        Ok(at) => {
            eprintln!("  {what}: after {:.2}s", t0.elapsed().as_secs_f64());
            at
        }
        Err(_) => panic!("timed out after {WAIT:?} waiting until {what}"),
    }
}

// ---------------------------------------------------------------------------------------
// Steady load
// ---------------------------------------------------------------------------------------

/// One request of the steady load.
#[derive(Clone, Debug)]
struct Record {
    start: Instant,
    end: Instant,
    /// The answering node, or the error.
    outcome: Result<String, String>,
    /// (node, outcome) of every attempt.
    attempts: Vec<(String, OutcomeKind)>,
}

impl Record {
    fn touched_victim(&self) -> bool {
        self.attempts.iter().any(|(n, _)| is_victim(n))
    }
}

/// `tasks` tasks looping `GET /` (node-local, so it answers even while the cluster elects a
/// new manager) until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<Record>>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: &Client, tasks: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let records = Arc::new(Mutex::new(Vec::new()));
        let handles = (0..tasks)
            .map(|_| {
                let client = client.clone();
                let stop = Arc::clone(&stop);
                let records = Arc::clone(&records);
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        let r = client.send(Request::get("/")).await;
                        let end = Instant::now();
                        let (outcome, attempts) = match r {
                            Ok(resp) => (
                                Ok(resp.node().to_string()),
                                resp.attempts()
                                    .iter()
                                    .map(|a| (a.node.to_string(), a.outcome))
                                    .collect(),
                            ),
                            Err(e) => (
                                Err(format!("{e} [{e:?}]")),
                                e.attempts()
                                    .iter()
                                    .map(|a| (a.node.to_string(), a.outcome))
                                    .collect(),
                            ),
                        };
                        records
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(Record {
                                start,
                                end,
                                outcome,
                                attempts,
                            });
                        tokio::time::sleep(ms(5)).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            records,
            handles,
        }
    }

    fn snapshot(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a request that started after `after` was answered by the victim.
    fn victim_answered_since(&self, after: Instant) -> bool {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|r| r.start >= after && r.outcome.as_deref().is_ok_and(is_victim))
    }

    async fn finish(mut self) -> Vec<Record> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            h.await.unwrap();
        }
        self.snapshot()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Panics listing the failed requests, if any.
/// Undoes the disturbance (`scripts/cluster restart|resume` on the victim), waits until the
/// client resurrects the victim and routes user traffic to it again, then ends the load and
/// asserts that not one request of it failed.
async fn bring_back_and_finish(verb: &str, client: &Client, load: Load, t0: Instant) {
    cluster_ok(&[verb, &VICTIM.to_string()]).await;
    let alive_at = wait_until("the victim is resurrected", || {
        snapshot_of(client, is_victim).is_some_and(|n| n.alive)
    })
    .await;
    wait_until("the resurrected victim takes traffic again", || {
        load.victim_answered_since(alive_at)
    })
    .await;
    let records = load.finish().await;
    eprintln!(
        "  {} requests in {:.1}s, per port {:?}, slowest {:?}",
        records.len(),
        t0.elapsed().as_secs_f64(),
        per_node(&records),
        max_latency(&records)
    );
    assert_no_failures(&records);
}

fn assert_no_failures(records: &[Record]) {
    let failed: Vec<&Record> = records.iter().filter(|r| r.outcome.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed; first ones: {:#?}",
        failed.len(),
        records.len(),
        &failed[..failed.len().min(3)]
    );
}

/// Panics when a request that started in `[from, to)` had an attempt on the victim.
fn assert_victim_untouched(records: &[Record], from: Instant, to: Instant) -> usize {
    let window: Vec<&Record> = records
        .iter()
        .filter(|r| r.start >= from && r.start < to)
        .collect();
    let touched: Vec<&&Record> = window.iter().filter(|r| r.touched_victim()).collect();
    assert!(
        touched.is_empty(),
        "{} of {} requests sent after the victim was marked dead still tried it: {:#?}",
        touched.len(),
        window.len(),
        &touched[..touched.len().min(3)]
    );
    window.len()
}

fn max_latency(records: &[Record]) -> Duration {
    records
        .iter()
        .map(|r| r.end.saturating_duration_since(r.start))
        .max()
        .unwrap_or_default()
}

fn per_node(records: &[Record]) -> BTreeMap<u16, usize> {
    let mut m = BTreeMap::new();
    for r in records {
        if let Ok(n) = &r.outcome {
            *m.entry(port_of(n)).or_default() += 1;
        }
    }
    m
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn root_reports_opensearch_2_19() {
    run("root_reports_opensearch_2_19", |urls| async move {
        preflight(&urls).await;
        let client = builder(&urls).attempt_timeout(secs(10)).build().unwrap();
        // One GET / per node (round robin over equal weights).
        let mut answered = Vec::new();
        for _ in 0..urls.len() {
            let resp = client.send(Request::get("/")).await.unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.attempts().len(), 1, "{:?}", resp.attempts());
            let v: Value = resp.json().unwrap();
            let number = v["version"]["number"].as_str().unwrap_or_default();
            assert!(
                number.starts_with("2.19."),
                "version.number {number:?} from {}",
                resp.node()
            );
            assert_eq!(
                v["version"]["distribution"].as_str(),
                Some("opensearch"),
                "{v}"
            );
            assert_eq!(v["cluster_name"].as_str(), Some("searchwire-test"), "{v}");
            assert!(urls.iter().any(|u| u == resp.node()), "{}", resp.node());
            answered.push(resp.node().to_string());
        }
        answered.sort();
        answered.dedup();
        assert_eq!(
            answered.len(),
            urls.len(),
            "round robin reached {answered:?}"
        );
        let snap = client.nodes();
        assert_eq!(snap.len(), urls.len(), "{snap:#?}");
        for n in &snap {
            assert!(n.alive, "{n:?}");
            assert_eq!(n.failures, 0, "{n:?}");
            assert!(n.last_error.is_none(), "{n:?}");
            assert!(n.auth_problem.is_none(), "{n:?}");
        }
    });
}

#[test]
fn discovery_reads_nodes_info_and_weights_by_cores() {
    run(
        "discovery_reads_nodes_info_and_weights_by_cores",
        |urls| async move {
            preflight(&urls).await;
            // The CI contract: node.processors 1, 2, 2 on 9201, 9202, 9203.
            let expected_cores: BTreeMap<u16, u32> = [(9201, 1), (9202, 2), (9203, 2)].into();
            let seed = urls
                .iter()
                .find(|u| port_of(u) == 9201)
                .cloned()
                .unwrap_or_else(|| urls[0].clone());

            // discover_now from a single seed.
            let client = Client::builder()
                .node(seed.clone())
                .read_environment(false)
                .attempt_timeout(secs(10))
                .build()
                .unwrap();
            let report = client.discover_now().await.unwrap();
            eprintln!("  discovery report: {report:?}");
            assert_eq!(report.nodes, 3, "{report:?}");
            assert!(report.not_answering.is_empty(), "{report:?}");
            assert!(report.removed.is_empty(), "{report:?}");
            let mut added: Vec<u16> = report.added.iter().map(|u| port_of(u)).collect();
            added.sort_unstable();
            assert_eq!(added, [9202, 9203], "{report:?}");

            let snap = client.nodes();
            let cores: BTreeMap<u16, u32> =
                snap.iter().map(|n| (port_of(&n.url), n.cores)).collect();
            assert_eq!(cores, expected_cores, "{snap:#?}");
            for n in &snap {
                assert!(n.alive, "{n:?}");
                assert!(!n.id.is_empty(), "discovery gives every node its id: {n:?}");
            }

            // Weighted round robin: 1:2:2 over 100 sequential requests.
            let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
            for _ in 0..100 {
                let r = client.send(Request::get("/")).await.unwrap();
                *counts.entry(port_of(r.node())).or_default() += 1;
            }
            eprintln!("  100 requests per port: {counts:?}");
            for (port, want) in [(9201u16, 20usize), (9202, 40), (9203, 40)] {
                let got = counts.get(&port).copied().unwrap_or(0);
                assert!(
                got.abs_diff(want) <= 10,
                "port {port}: {got} of 100 requests, want {want} ± 10 (weights 1:2:2); all: {counts:?}"
            );
            }

            // discover_on_start does the same in the background.
            let client = Client::builder()
                .node(seed)
                .read_environment(false)
                .discover_on_start(true)
                .build()
                .unwrap();
            wait_until("discover_on_start found 3 live nodes", || {
                let s = client.nodes();
                s.len() == 3 && s.iter().all(|n| n.alive)
            })
            .await;
            let cores: BTreeMap<u16, u32> = client
                .nodes()
                .iter()
                .map(|n| (port_of(&n.url), n.cores))
                .collect();
            assert_eq!(cores, expected_cores);
        },
    );
}

#[test]
fn killed_node_fails_over_is_marked_dead_and_resurrected() {
    run(
        "killed_node_fails_over_is_marked_dead_and_resurrected",
        |urls| async move {
            victim_url(&urls);
            preflight(&urls).await;
            let client = builder(&urls)
                .attempt_timeout(secs(2))
                .health_check_timeout(secs(2))
                .resurrection(fast_resurrection())
                .build()
                .unwrap();
            let load = Load::start(&client, 4);
            let t0 = Instant::now();
            wait_until("the victim serves traffic", || {
                load.victim_answered_since(t0)
            })
            .await;

            let _restore = RestoreVictim { urls: urls.clone() };
            cluster_ok(&["kill", &VICTIM.to_string()]).await;
            let dead_at = wait_until("the killed node is marked dead", || {
                snapshot_of(&client, is_victim).is_some_and(|n| !n.alive)
            })
            .await;
            let snap = snapshot_of(&client, is_victim).unwrap();
            eprintln!("  dead: {snap:?}");
            assert!(snap.last_error.is_some(), "{snap:?}");

            // Dead for a while: no user request goes to it.
            tokio::time::sleep(secs(2)).await;
            let restart_at = Instant::now();
            let n = assert_victim_untouched(&load.snapshot(), dead_at, restart_at);
            assert!(n > 10, "only {n} requests while the node was dead");
            assert!(
                snapshot_of(&client, is_victim).is_some_and(|n| !n.alive),
                "a killed node came back: {:?}",
                client.nodes()
            );

            bring_back_and_finish("restart", &client, load, t0).await;
        },
    );
}

#[test]
fn paused_node_times_out_fails_over_and_is_resurrected() {
    run(
        "paused_node_times_out_fails_over_and_is_resurrected",
        |urls| async move {
            victim_url(&urls);
            preflight(&urls).await;
            let client = builder(&urls)
                .attempt_timeout(secs(1))
                .health_check_timeout(secs(1))
                .resurrection(fast_resurrection())
                .build()
                .unwrap();
            let load = Load::start(&client, 4);
            let t0 = Instant::now();
            wait_until("the victim serves traffic", || {
                load.victim_answered_since(t0)
            })
            .await;

            let _restore = RestoreVictim { urls: urls.clone() };
            let paused_at = Instant::now();
            cluster_ok(&["pause", &VICTIM.to_string()]).await;
            let dead_at = wait_until("the paused node is marked dead", || {
                snapshot_of(&client, is_victim).is_some_and(|n| !n.alive)
            })
            .await;
            let snap = snapshot_of(&client, is_victim).unwrap();
            eprintln!("  dead: {snap:?}");
            let err = snap.last_error.clone().unwrap_or_default().to_lowercase();
            assert!(
                err.contains("timeout") || err.contains("timed out"),
                "last_error should name the timeout: {snap:?}"
            );

            // Frozen for a while: attempts to it time out and fail over, nothing else goes there.
            tokio::time::sleep(secs(3)).await;
            let resume_at = Instant::now();
            let records = load.snapshot();
            let n = assert_victim_untouched(&records, dead_at, resume_at);
            assert!(n > 10, "only {n} requests while the node was dead");
            let timed_out: Vec<&Record> = records
                .iter()
                .filter(|r| r.start >= paused_at.checked_sub(secs(1)).unwrap_or(paused_at))
                .filter(|r| {
                    r.attempts
                        .iter()
                        .any(|(node, k)| is_victim(node) && *k == OutcomeKind::Timeout)
                })
                .collect();
            assert!(
                !timed_out.is_empty(),
                "no attempt on the paused node timed out; requests: {:#?}",
                &records[records.len().saturating_sub(5)..]
            );
            for r in &timed_out {
                assert!(r.outcome.as_deref().is_ok_and(|n| !is_victim(n)), "{r:?}");
            }
            eprintln!(
                "  {} request(s) had an attempt time out on the paused node and failed over",
                timed_out.len()
            );

            bring_back_and_finish("resume", &client, load, t0).await;
        },
    );
}

/// Deletes the test index when dropped (also on panic).
struct DropIndex {
    url: String,
}

impl Drop for DropIndex {
    fn drop(&mut self) {
        let _ = Command::new("curl")
            .args(["-s", "-m", "30", "-XDELETE", &self.url])
            .output();
    }
}

#[test]
fn bulk_rejections_from_a_tiny_write_pool_reach_the_client() {
    run(
        "bulk_rejections_from_a_tiny_write_pool_reach_the_client",
        |urls| async move {
            preflight(&urls).await;
            let client = builder(&urls).attempt_timeout(secs(30)).build().unwrap();
            let index = format!("sw-bulk-{:08x}", fastrand::u32(..));
            let _cleanup = DropIndex {
                url: format!("{}/{index}", urls[0]),
            };
            // 3 primaries + 1 replica: every bulk fans out to every node's write pool.
            client
                .send(Request::put(format!("/{index}")).json(&serde_json::json!({
                    "settings": {"number_of_shards": 3, "number_of_replicas": 1}
                })))
                .await
                .unwrap();
            client
                .send(
                    Request::get(format!("/_cluster/health/{index}"))
                        .query("wait_for_status", "green")
                        .query("timeout", "60s"),
                )
                .await
                .unwrap();

            let mut body = String::new();
            for i in 0..200 {
                body.push_str("{\"index\":{}}\n");
                body.push_str(&format!(
                    "{{\"n\":{i},\"msg\":\"searchwire bulk rejection test document number {i}\"}}\n"
                ));
            }
            let body = bytes::Bytes::from(body);

            let mut rejected_items = 0usize;
            let mut throttled_requests = 0usize;
            let mut sample: Option<Value> = None;
            for round in 1..=5 {
                let sends = (0..16).map(|_| {
                    let client = client.clone();
                    let req = Request::post(format!("/{index}/_bulk"))
                        .body_with_type(body.clone(), "application/x-ndjson")
                        .idempotent(true);
                    tokio::spawn(async move { client.send(req).await })
                });
                let mut items_total = 0usize;
                let mut rejected_round = 0usize;
                for h in sends.collect::<Vec<_>>() {
                    match h.await.unwrap() {
                        Ok(resp) => {
                            assert_eq!(resp.status(), 200, "{}", resp.text());
                            let v: Value = resp.json().unwrap();
                            let items = v["items"].as_array().cloned().unwrap_or_default();
                            items_total += items.len();
                            if v["errors"] != Value::Bool(true) {
                                continue;
                            }
                            for it in &items {
                                let op = &it["index"];
                                let ty = op["error"]["type"].as_str().unwrap_or("");
                                if op["status"].as_u64() == Some(429)
                                    && (ty == "rejected_execution_exception"
                                        || ty == "es_rejected_execution_exception")
                                {
                                    rejected_round += 1;
                                    sample.get_or_insert_with(|| op.clone());
                                }
                            }
                        }
                        // A whole-request 429 after the retries is also a rejection the
                        // client surfaced; anything else is a failure.
                        Err(e) if e.kind() == ErrorKind::Throttled => throttled_requests += 1,
                        Err(e) => panic!("bulk request failed: {e} [{e:?}]"),
                    }
                }
                eprintln!(
                    "  round {round}: {rejected_round} of {items_total} items rejected with 429"
                );
                rejected_items += rejected_round;
                if rejected_items > 0 {
                    break;
                }
            }
            eprintln!(
                "  {rejected_items} rejected items, {throttled_requests} throttled requests; \
                 sample: {sample:?}"
            );
            assert!(
                rejected_items > 0,
                "no bulk item was rejected with 429 in 5 rounds of 16 × 200 docs; does the \
                 cluster run with thread_pool.write.size=1 and thread_pool.write.queue_size=1?"
            );
            client
                .send(Request::delete(format!("/{index}")))
                .await
                .unwrap();
        },
    );
}
