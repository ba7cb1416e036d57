//! Plumbing and scenarios shared by the real-node suites (`real_cluster.rs` against
//! OpenSearch, `real_elasticsearch.rs` against Elasticsearch): which cluster to use, running
//! one test at a time on a fresh runtime, `scripts/cluster` verbs, putting a disturbed node
//! back, a steady `GET /` load, and the scenarios both engines must pass the same way.
//!
//! Each engine's cluster is named by an [`Engine`]: the `scripts/cluster --engine` value,
//! the variables that give its URLs and make it required, and the one node the tests may
//! kill or freeze (node 3). Without the URLs variable every test is skipped (a note on
//! stderr), unless the require variable is `1`, which turns the skip into a failure.

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

/// Serializes the tests of one binary (they disturb the shared cluster). Poison-tolerant.
static LOCK: Mutex<()> = Mutex::new(());

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/cluster");

/// The one node the tests may kill or pause (`scripts/cluster` index).
pub const VICTIM: usize = 3;

/// Upper bound of any single wait (node marked dead, resurrected, cluster whole again).
pub const WAIT: Duration = Duration::from_secs(120);
/// Last-resort bound of a whole test.
// Above the preflight wait (120 s) plus a restart (the script's own 180 s bound), so a slow
// run fails with the script's message rather than this budget's.
const TEST_BUDGET: Duration = Duration::from_secs(420);

pub use super::ms;

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One engine's test cluster, as `scripts/test` starts it.
pub struct Engine {
    /// `scripts/cluster --engine` value.
    pub name: &'static str,
    /// Comma-separated node URLs, in `scripts/cluster` node order.
    pub urls_var: &'static str,
    /// `1` makes a missing cluster a failure instead of a skip.
    pub require_var: &'static str,
    /// The server version the cluster runs (`scripts/test` sets it; unset: the version
    /// `scripts/cluster version` reports for the recorded cluster).
    pub version_var: &'static str,
    /// Where the harness is described (for skip and failure messages).
    pub readme: &'static str,
}

pub const OPENSEARCH: Engine = Engine {
    name: "opensearch",
    urls_var: "SEARCHWIRE_TEST_CLUSTER",
    require_var: "SEARCHWIRE_REQUIRE_CLUSTER",
    version_var: "SEARCHWIRE_TEST_CLUSTER_VERSION",
    readme: "harness/opensearch/README.md",
};

pub const ELASTICSEARCH: Engine = Engine {
    name: "elasticsearch",
    urls_var: "SEARCHWIRE_TEST_ES_CLUSTER",
    require_var: "SEARCHWIRE_REQUIRE_ES_CLUSTER",
    version_var: "SEARCHWIRE_TEST_ES_CLUSTER_VERSION",
    readme: "harness/elasticsearch/README.md",
};

/// The cluster a test runs against: its engine and node URLs (node `i` is `urls[i - 1]`).
#[derive(Clone)]
pub struct Cluster {
    pub engine: &'static Engine,
    pub urls: Vec<String>,
}

/// The port of a node URL (`http://127.0.0.1:9203` → 9203; 0 when none).
pub fn port_of(url: &str) -> u16 {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// The cluster URLs from the engine's variable, or `None` (skip) when unset and not
/// required. Panics when required and not configured.
fn cluster_urls(engine: &Engine, test: &str) -> Option<Vec<String>> {
    let required = std::env::var(engine.require_var).is_ok_and(|v| v.trim() == "1");
    let urls: Vec<String> = std::env::var(engine.urls_var)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if urls.is_empty() {
        if required {
            panic!(
                "{test}: {}=1 but {} is not set; start the cluster with scripts/cluster \
                 --engine {} start 3 ... and export its URLs (see {})",
                engine.require_var, engine.urls_var, engine.name, engine.readme
            );
        }
        eprintln!(
            "{test}: skipped ({} is not set; see {})",
            engine.urls_var, engine.readme
        );
        return None;
    }
    Some(urls)
}

/// Runs one test: checks the environment, takes [`LOCK`], and runs `body` on a fresh
/// multi-threaded runtime within [`TEST_BUDGET`]. The lock is released only after the
/// runtime (and every task it spawned) is gone.
pub fn run<F, Fut>(engine: &'static Engine, test: &str, body: F)
where
    F: FnOnce(Cluster) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(urls) = cluster_urls(engine, test) else {
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
        tokio::time::timeout(TEST_BUDGET, body(Cluster { engine, urls }))
            .await
            .unwrap_or_else(|_| panic!("{test}: did not finish within {TEST_BUDGET:?}"));
        eprintln!("{test}: passed in {:.1}s", t0.elapsed().as_secs_f64());
    });
}

impl Cluster {
    /// The victim's URL; panics when the cluster has fewer than [`VICTIM`] nodes (the tests
    /// that disturb a node need the 3-node cluster of the CI contract).
    pub fn victim_url(&self) -> String {
        self.urls.get(VICTIM - 1).cloned().unwrap_or_else(|| {
            panic!(
                "{} lists {:?}: no node {VICTIM}; these tests need the 3-node cluster of \
                 scripts/cluster --engine {} start 3",
                self.engine.urls_var, self.urls, self.engine.name
            )
        })
    }

    /// The victim's HTTP port (0 when the cluster has no node [`VICTIM`]).
    pub fn victim_port(&self) -> u16 {
        self.urls.get(VICTIM - 1).map_or(0, |u| port_of(u))
    }

    /// Whether `url` is the victim (compared by port: attempts name nodes by URL).
    pub fn is_victim(&self, url: &str) -> bool {
        let p = self.victim_port();
        p != 0 && port_of(url) == p
    }

    /// Runs `scripts/cluster --engine E ARGS...` synchronously; returns (success, stdout,
    /// stderr). The state directory comes from the inherited environment.
    pub fn cmd(&self, args: &[&str]) -> (bool, String, String) {
        match Command::new(SCRIPT)
            .args(["--engine", self.engine.name])
            .args(args)
            .output()
        {
            Ok(out) => (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ),
            Err(e) => (false, String::new(), format!("could not run {SCRIPT}: {e}")),
        }
    }

    /// The server version the cluster runs: the engine's version variable, else what
    /// `scripts/cluster version` reports for the recorded cluster. The suites assert that
    /// every node's `GET /` and health report name exactly this version.
    pub fn expected_version(&self) -> String {
        if let Ok(v) = std::env::var(self.engine.version_var) {
            if !v.trim().is_empty() {
                return v.trim().to_string();
            }
        }
        let (ok, out, err) = self.cmd(&["version"]);
        assert!(
            ok && !out.trim().is_empty(),
            "{} is not set and scripts/cluster --engine {} version failed: {err}",
            self.engine.version_var,
            self.engine.name
        );
        out.trim().to_string()
    }

    /// The major version the cluster runs (`3` of `3.9.0`).
    pub fn major(&self) -> u32 {
        let v = self.expected_version();
        v.split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("the cluster version {v:?} has no major"))
    }

    /// Runs `scripts/cluster ARGS...` off the async threads and panics when it fails.
    pub async fn ok(&self, args: &[&str]) {
        let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let me = self.clone();
        let (ok, out, err) = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            me.cmd(&refs)
        })
        .await
        .unwrap();
        assert!(
            ok,
            "scripts/cluster --engine {} {} failed\nstdout:\n{out}\nstderr:\n{err}",
            self.engine.name,
            args.join(" ")
        );
    }

    /// Node `i`'s state as `scripts/cluster status` reports it (`running`, `paused`, `dead`).
    fn node_state(&self, i: usize) -> Option<String> {
        let (_, out, _) = self.cmd(&["status"]);
        out.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == i.to_string()).then(|| f.last().unwrap_or("").to_string())
        })
    }

    /// Blocks until the cluster reports all its nodes and at least yellow, asking every URL
    /// in turn (`wait_for_nodes` makes the server do the waiting). Returns whether it did
    /// within [`WAIT`].
    fn wait_whole(&self) -> bool {
        let n = self.urls.len();
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            for u in &self.urls {
                let url = format!(
                    "{u}/_cluster/health?wait_for_nodes={n}&wait_for_status=yellow&timeout=20s"
                );
                let Ok(out) = Command::new("curl").args(["-s", "-m", "25", &url]).output() else {
                    continue;
                };
                let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
                    continue;
                };
                if v["timed_out"] == Value::Bool(false)
                    && v["number_of_nodes"].as_u64() == Some(n as u64)
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
    fn restore_victim(&self) {
        let i = VICTIM.to_string();
        match self.node_state(VICTIM).as_deref() {
            Some("paused") => {
                let (ok, _, err) = self.cmd(&["resume", &i]);
                if !ok {
                    eprintln!("restore: scripts/cluster resume {VICTIM} failed: {err}");
                }
            }
            Some("dead") => {
                let (ok, _, err) = self.cmd(&["restart", &i]);
                if !ok {
                    eprintln!("restore: scripts/cluster restart {VICTIM} failed: {err}");
                }
            }
            Some(_) => {}
            None => eprintln!(
                "restore: scripts/cluster --engine {} status does not list node {VICTIM} (is \
                 the state directory the one the cluster was started with?)",
                self.engine.name
            ),
        }
        if !self.wait_whole() {
            eprintln!(
                "restore: the cluster did not report {} nodes within {WAIT:?}",
                self.urls.len()
            );
        }
    }

    /// Before a test: the victim running and the cluster whole (a previous test or run may
    /// have left it otherwise). Fails the test when the cluster cannot be made whole.
    pub async fn preflight(&self) {
        let me = self.clone();
        let whole = tokio::task::spawn_blocking(move || {
            if me.urls.len() >= VICTIM {
                me.restore_victim();
            }
            me.wait_whole()
        })
        .await
        .unwrap();
        assert!(
            whole,
            "the cluster at {:?} does not report {} nodes; is it running \
             (scripts/cluster --engine {} status)?",
            self.urls,
            self.urls.len(),
            self.engine.name
        );
    }

    /// A guard that puts the victim back when dropped, on success and on panic alike.
    pub fn restore_on_drop(&self) -> RestoreVictim {
        RestoreVictim(self.clone())
    }

    /// A client over every node with a short constant backoff and 3 retries.
    pub fn builder(&self) -> ClientBuilder {
        Client::builder()
            .nodes(self.urls.iter().cloned())
            .read_environment(false)
            .backoff(Backoff::constant(ms(50)))
            .max_retries(3)
    }
}

/// Undoes a disturbance of the victim when dropped, on success and on panic alike.
pub struct RestoreVictim(Cluster);

impl Drop for RestoreVictim {
    fn drop(&mut self) {
        self.0.restore_victim();
    }
}

pub fn fast_resurrection() -> ResurrectionConfig {
    ResurrectionConfig {
        initial: ms(500),
        max: secs(2),
        minimum: ms(200),
        jitter_scale: 0.0,
        ..ResurrectionConfig::default()
    }
}

pub fn snapshot_of(client: &Client, pred: impl Fn(&str) -> bool) -> Option<NodeSnapshot> {
    client.nodes().into_iter().find(|n| pred(&n.url))
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after [`WAIT`].
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) -> Instant {
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
pub struct Record {
    pub start: Instant,
    pub end: Instant,
    /// The answering node, or the error.
    pub outcome: Result<String, String>,
    /// (node, outcome) of every attempt.
    pub attempts: Vec<(String, OutcomeKind)>,
}

/// `tasks` tasks looping `GET /` (node-local, so it answers even while the cluster elects a
/// new manager) until stopped.
pub struct Load {
    cluster: Cluster,
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<Record>>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(cluster: &Cluster, client: &Client, tasks: usize) -> Load {
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
            cluster: cluster.clone(),
            stop,
            records,
            handles,
        }
    }

    pub fn snapshot(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a request that started after `after` was answered by the victim.
    pub fn victim_answered_since(&self, after: Instant) -> bool {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|r| {
                r.start >= after
                    && r.outcome
                        .as_deref()
                        .is_ok_and(|n| self.cluster.is_victim(n))
            })
    }

    pub async fn finish(mut self) -> Vec<Record> {
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

/// Undoes the disturbance (`scripts/cluster restart|resume` on the victim), waits until the
/// client resurrects the victim and routes user traffic to it again, then ends the load and
/// asserts that not one request of it failed.
pub async fn bring_back_and_finish(
    cluster: &Cluster,
    verb: &str,
    client: &Client,
    load: Load,
    t0: Instant,
) {
    cluster.ok(&[verb, &VICTIM.to_string()]).await;
    let alive_at = wait_until("the victim is resurrected", || {
        snapshot_of(client, |u| cluster.is_victim(u)).is_some_and(|n| n.alive)
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

/// Panics listing the failed requests, if any.
pub fn assert_no_failures(records: &[Record]) {
    let failed: Vec<&Record> = records.iter().filter(|r| r.outcome.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed; first ones: {:#?}",
        failed.len(),
        records.len(),
        &failed[..failed.len().min(3)]
    );
}

/// Panics when a request that started in `[from, to)` had an attempt on the victim; returns
/// how many requests started in that window.
pub fn assert_victim_untouched(
    cluster: &Cluster,
    records: &[Record],
    from: Instant,
    to: Instant,
) -> usize {
    let window: Vec<&Record> = records
        .iter()
        .filter(|r| r.start >= from && r.start < to)
        .collect();
    let touched: Vec<&&Record> = window
        .iter()
        .filter(|r| r.attempts.iter().any(|(n, _)| cluster.is_victim(n)))
        .collect();
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
// Scenarios both engines pass the same way
// ---------------------------------------------------------------------------------------

/// One `GET /` per node through the client (round robin over equal weights): each answers
/// 200 on the first attempt, every node is reached, and afterwards every node is alive with
/// no failure. Returns the answers (in the order received) for engine-specific checks.
pub async fn root_on_every_node(c: &Cluster) -> Vec<searchwire::Response> {
    c.preflight().await;
    // Round robin: one request per node reaches every node (the latency-aware default draws
    // at random).
    let client = c
        .builder()
        .selection(searchwire::Selection::RoundRobin)
        .attempt_timeout(secs(10))
        .build()
        .unwrap();
    let mut answers = Vec::new();
    for _ in 0..c.urls.len() {
        let resp = client.send(Request::get("/")).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.attempts().len(), 1, "{:?}", resp.attempts());
        assert!(c.urls.iter().any(|u| u == resp.node()), "{}", resp.node());
        answers.push(resp);
    }
    let mut answered: Vec<&str> = answers.iter().map(|r| r.node()).collect();
    answered.sort_unstable();
    answered.dedup();
    assert_eq!(
        answered.len(),
        c.urls.len(),
        "round robin reached {answered:?}"
    );
    let snap = client.nodes();
    assert_eq!(snap.len(), c.urls.len(), "{snap:#?}");
    for n in &snap {
        assert!(n.alive, "{n:?}");
        assert_eq!(n.failures, 0, "{n:?}");
        assert!(n.last_error.is_none(), "{n:?}");
        assert!(n.auth_problem.is_none(), "{n:?}");
    }
    answers
}

/// Discovery from node 1 alone: `discover_now` adds nodes 2 and 3 with the cores
/// `GET /_nodes/http,os` reports (`expected_cores`, in node order), 100 sequential requests
/// follow the weights (± 10 each), and `discover_on_start` finds the same in the background.
pub async fn discovery_weights_by_cores(c: &Cluster, expected_cores: [u32; 3]) {
    c.preflight().await;
    assert!(c.urls.len() >= 3, "needs the 3-node cluster: {:?}", c.urls);
    let want: BTreeMap<u16, u32> = c
        .urls
        .iter()
        .zip(expected_cores)
        .map(|(u, n)| (port_of(u), n))
        .collect();
    let seed = c.urls[0].clone();

    // discover_now from a single seed; weighted round robin, whose shares the weights fix
    // (the latency-aware default divides by the same weights, but its shares follow latency).
    let client = Client::builder()
        .node(seed.clone())
        .selection(searchwire::Selection::RoundRobin)
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
    assert_eq!(
        added,
        [port_of(&c.urls[1]), port_of(&c.urls[2])],
        "{report:?}"
    );

    let snap = client.nodes();
    let cores: BTreeMap<u16, u32> = snap.iter().map(|n| (port_of(&n.url), n.cores)).collect();
    assert_eq!(cores, want, "{snap:#?}");
    for n in &snap {
        assert!(n.alive, "{n:?}");
        assert!(!n.id.is_empty(), "discovery gives every node its id: {n:?}");
    }

    // Weighted round robin over 100 sequential requests.
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for _ in 0..100 {
        let r = client.send(Request::get("/")).await.unwrap();
        *counts.entry(port_of(r.node())).or_default() += 1;
    }
    eprintln!("  100 requests per port: {counts:?}");
    let total: u32 = expected_cores.iter().sum();
    for (port, w) in &want {
        let expect = (100 * *w / total) as usize;
        let got = counts.get(port).copied().unwrap_or(0);
        assert!(
            got.abs_diff(expect) <= 10,
            "port {port}: {got} of 100 requests, want {expect} ± 10 (weights {expected_cores:?}); \
             all: {counts:?}"
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
    assert_eq!(cores, want);
}

/// A steady load through a client with `timeout` per attempt and per health check, and the
/// victim disturbed (`scripts/cluster VERB 3`: `kill` or `pause`) once it served traffic,
/// up to the moment the client marks it dead. The guard puts the victim back when dropped.
struct Disturbed {
    client: Client,
    load: Load,
    t0: Instant,
    disturbed_at: Instant,
    dead_at: Instant,
    /// The victim as the client saw it once dead.
    dead: NodeSnapshot,
    restore: RestoreVictim,
}

async fn disturb_victim_under_load(c: &Cluster, verb: &str, timeout: Duration) -> Disturbed {
    c.victim_url();
    c.preflight().await;
    let client = c
        .builder()
        .attempt_timeout(timeout)
        .health_check_timeout(timeout)
        .resurrection(fast_resurrection())
        .build()
        .unwrap();
    let load = Load::start(c, &client, 4);
    let t0 = Instant::now();
    wait_until("the victim serves traffic", || {
        load.victim_answered_since(t0)
    })
    .await;

    let restore = c.restore_on_drop();
    let disturbed_at = Instant::now();
    c.ok(&[verb, &VICTIM.to_string()]).await;
    let dead_at = wait_until(&format!("the node is marked dead after `{verb}`"), || {
        snapshot_of(&client, |u| c.is_victim(u)).is_some_and(|n| !n.alive)
    })
    .await;
    let dead = snapshot_of(&client, |u| c.is_victim(u)).unwrap();
    eprintln!("  dead: {dead:?}");
    Disturbed {
        client,
        load,
        t0,
        disturbed_at,
        dead_at,
        dead,
        restore,
    }
}

/// Node 3 is killed (SIGKILL) under a steady load: it is marked dead, no request goes to it
/// while it is down, it is resurrected after `restart` and takes traffic again, and not one
/// request of the load fails.
pub async fn killed_node_fails_over_and_is_resurrected(c: &Cluster) {
    let Disturbed {
        client,
        load,
        t0,
        dead_at,
        dead,
        restore: _restore,
        ..
    } = disturb_victim_under_load(c, "kill", secs(2)).await;
    assert!(dead.last_error.is_some(), "{dead:?}");

    // Dead for a while: no user request goes to it.
    tokio::time::sleep(secs(2)).await;
    let restart_at = Instant::now();
    let n = assert_victim_untouched(c, &load.snapshot(), dead_at, restart_at);
    assert!(n > 10, "only {n} requests while the node was dead");
    assert!(
        snapshot_of(&client, |u| c.is_victim(u)).is_some_and(|n| !n.alive),
        "a killed node came back: {:?}",
        client.nodes()
    );

    bring_back_and_finish(c, "restart", &client, load, t0).await;
}

/// Node 3 is frozen (SIGSTOP) under a steady load: attempts to it time out and fail over to
/// another node, it is marked dead with a timeout error, nothing else goes to it, and after
/// `resume` it is resurrected and takes traffic again; not one request of the load fails.
pub async fn paused_node_times_out_fails_over_and_is_resurrected(c: &Cluster) {
    let Disturbed {
        client,
        load,
        t0,
        disturbed_at: paused_at,
        dead_at,
        dead,
        restore: _restore,
    } = disturb_victim_under_load(c, "pause", secs(1)).await;
    let err = dead.last_error.clone().unwrap_or_default().to_lowercase();
    assert!(
        err.contains("timeout") || err.contains("timed out"),
        "last_error should name the timeout: {dead:?}"
    );

    // Frozen for a while: attempts to it time out and fail over, nothing else goes there.
    tokio::time::sleep(secs(3)).await;
    let resume_at = Instant::now();
    let records = load.snapshot();
    let n = assert_victim_untouched(c, &records, dead_at, resume_at);
    assert!(n > 10, "only {n} requests while the node was dead");
    let timed_out: Vec<&Record> = records
        .iter()
        .filter(|r| r.start >= paused_at.checked_sub(secs(1)).unwrap_or(paused_at))
        .filter(|r| {
            r.attempts
                .iter()
                .any(|(node, k)| c.is_victim(node) && *k == OutcomeKind::Timeout)
        })
        .collect();
    assert!(
        !timed_out.is_empty(),
        "no attempt on the paused node timed out; requests: {:#?}",
        &records[records.len().saturating_sub(5)..]
    );
    for r in &timed_out {
        assert!(r.outcome.as_deref().is_ok_and(|n| !c.is_victim(n)), "{r:?}");
    }
    eprintln!(
        "  {} request(s) had an attempt time out on the paused node and failed over",
        timed_out.len()
    );

    bring_back_and_finish(c, "resume", &client, load, t0).await;
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

/// What [`bulk_rejections`] saw.
pub struct BulkRejections {
    /// Items answered `429` with an error type in the accepted list.
    pub rejected_items: usize,
    /// Items answered `429` with any other error type: (type, item).
    pub other_429s: Vec<(String, Value)>,
    /// Whole `_bulk` requests that ended in [`ErrorKind::Throttled`] after the retries.
    pub throttled_requests: usize,
    /// One rejected item, as the server sent it.
    pub sample: Option<Value>,
}

/// Sends rounds of 16 parallel `_bulk` requests of 200 documents into an index of 3 primaries
/// and 1 replica (every bulk fans out to every node's write pool) until some item is
/// rejected with `429` (at most 5 rounds). The cluster must run with
/// `thread_pool.write.size=1` and `thread_pool.write.queue_size=1`. Counts items rejected with
/// an error type in `types` apart from 429s of any other type.
pub async fn bulk_rejections(c: &Cluster, types: &[&str]) -> BulkRejections {
    c.preflight().await;
    let client = c.builder().attempt_timeout(secs(30)).build().unwrap();
    let index = format!("sw-bulk-{:08x}", fastrand::u32(..));
    let _cleanup = DropIndex {
        url: format!("{}/{index}", c.urls[0]),
    };
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
                .query("timeout", "60s")
                // The server holds the answer up to 60 s: the attempt must outlast it.
                .attempt_timeout(secs(75)),
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

    let mut seen = BulkRejections {
        rejected_items: 0,
        other_429s: Vec::new(),
        throttled_requests: 0,
        sample: None,
    };
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
                        let Some(status) = op["status"].as_u64() else {
                            continue;
                        };
                        let code = http::StatusCode::from_u16(status as u16).unwrap();
                        if OutcomeKind::from_status(code) != OutcomeKind::Throttled {
                            continue;
                        }
                        let ty = op["error"]["type"].as_str().unwrap_or("");
                        if types.contains(&ty) {
                            rejected_round += 1;
                            seen.sample.get_or_insert_with(|| op.clone());
                        } else {
                            seen.other_429s.push((ty.to_string(), op.clone()));
                        }
                    }
                }
                // A whole-request 429 after the retries is also a rejection the client
                // surfaced; anything else is a failure.
                Err(e) if e.kind() == ErrorKind::Throttled => seen.throttled_requests += 1,
                Err(e) => panic!("bulk request failed: {e} [{e:?}]"),
            }
        }
        eprintln!("  round {round}: {rejected_round} of {items_total} items rejected with 429");
        seen.rejected_items += rejected_round;
        if seen.rejected_items > 0 {
            break;
        }
    }
    eprintln!(
        "  {} rejected items, {} throttled requests, {} other 429s; sample: {:?}",
        seen.rejected_items,
        seen.throttled_requests,
        seen.other_429s.len(),
        seen.sample
    );
    assert!(
        seen.rejected_items > 0,
        "no bulk item was rejected with 429 and a type in {types:?} in 5 rounds of 16 × 200 \
         docs (other 429s: {:?}); does the cluster run with thread_pool.write.size=1 and \
         thread_pool.write.queue_size=1?",
        seen.other_429s.first()
    );
    client
        .send(Request::delete(format!("/{index}")))
        .await
        .unwrap();
    seen
}

/// A request the server itself holds open past the attempt timeout (a `_cluster/health`
/// wait that cannot be met) is slow, not a sign of a dead node: the node answers its
/// liveness check, stays alive, nothing is ejected, and the error says how to give the
/// request more time.
pub async fn slow_request_keeps_the_node_alive(c: &Cluster) {
    c.preflight().await;
    let client = c.builder().build().unwrap();
    let t0 = Instant::now();
    let err = client
        .send(
            searchwire::Request::get("/_cluster/health")
                .query("wait_for_status", "green")
                .query("wait_for_nodes", "99")
                .query("timeout", "10s")
                .attempt_timeout(secs(1)),
        )
        .await
        .unwrap_err();
    let took = t0.elapsed();
    assert_eq!(err.kind(), ErrorKind::AttemptTimeout, "{err}");
    assert_eq!(
        err.attempts().len(),
        1,
        "not repeated on another node: {err}"
    );
    assert!(
        took < secs(5),
        "took {took:?}: the server's own 10 s wait must not be awaited"
    );
    let msg = err.to_string();
    assert!(msg.contains("is alive"), "{msg}");
    assert!(msg.contains("attempt timeout"), "{msg}");
    assert!(
        client.nodes().iter().all(|n| n.alive),
        "a slow request ejected a node: {:?}",
        client.nodes()
    );
    // The node keeps serving.
    client.send(searchwire::Request::get("/")).await.unwrap();
    eprintln!("  slow request failed in {took:?}: {msg}");
}
