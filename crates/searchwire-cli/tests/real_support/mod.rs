//! What the real-node CLI tests share: which cluster to use (or skip), an input of small
//! documents with ids `doc-000000`…, an index, its count and ids, the exactly-once check,
//! and `searchwire ingest` as a child process.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use searchwire::{Client, Request};
use serde_json::{json, Value};
use tokio::time::Instant;

pub const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

/// A real test cluster: the variable holding its URLs and the one that makes a missing
/// cluster a failure instead of a skip.
/// Also its `scripts/cluster --engine` name and the variable naming the server version it
/// runs.
pub struct Engine {
    pub name: &'static str,
    pub urls_var: &'static str,
    pub require_var: &'static str,
    pub version_var: &'static str,
}

/// OpenSearch, 2.19 or 3.x (`scripts/test`: 9201-9203).
pub const OPENSEARCH: Engine = Engine {
    name: "opensearch",
    urls_var: "SEARCHWIRE_TEST_CLUSTER",
    require_var: "SEARCHWIRE_REQUIRE_CLUSTER",
    version_var: "SEARCHWIRE_TEST_CLUSTER_VERSION",
};

/// Elasticsearch, 8.19 or 9.x (`scripts/test`: 9221-9223).
pub const ELASTICSEARCH: Engine = Engine {
    name: "elasticsearch",
    urls_var: "SEARCHWIRE_TEST_ES_CLUSTER",
    require_var: "SEARCHWIRE_REQUIRE_ES_CLUSTER",
    version_var: "SEARCHWIRE_TEST_ES_CLUSTER_VERSION",
};

impl Engine {
    /// The cluster's URLs, or `None` (a note on stderr) when the test is to be skipped.
    pub fn urls(&self, test: &str) -> Option<Vec<String>> {
        let required = std::env::var(self.require_var).is_ok_and(|v| v.trim() == "1");
        let urls: Vec<String> = std::env::var(self.urls_var)
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if urls.is_empty() {
            assert!(
                !required,
                "{test}: {}=1 but {} is not set",
                self.require_var, self.urls_var
            );
            eprintln!("{test}: skipped ({} is not set)", self.urls_var);
            return None;
        }
        Some(urls)
    }

    /// The server version the cluster runs: the version variable (`scripts/test` sets it),
    /// else what `scripts/cluster --engine NAME version` reports for the recorded cluster.
    pub fn expected_version(&self) -> String {
        if let Ok(v) = std::env::var(self.version_var) {
            if !v.trim().is_empty() {
                return v.trim().to_string();
            }
        }
        let (ok, out) = cluster_cmd(&["--engine", self.name, "version"]);
        let v = out.lines().next().unwrap_or("").trim().to_string();
        assert!(
            ok && !v.is_empty(),
            "{} is not set and scripts/cluster --engine {} version failed: {out}",
            self.version_var,
            self.name
        );
        v
    }

    /// The major version the cluster runs (`9` of `9.5.3`).
    pub fn major(&self) -> u32 {
        let v = self.expected_version();
        v.split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("the cluster version {v:?} has no major"))
    }
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/cluster");

/// Runs `scripts/cluster ARGS` (in `SEARCHWIRE_CLUSTER_DIR`): success and its output.
pub fn cluster_cmd(args: &[&str]) -> (bool, String) {
    match std::process::Command::new(SCRIPT).args(args).output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("cannot run {SCRIPT}: {e}")),
    }
}

/// Every node resumed when the test ends, even on panic.
pub struct ResumeAll;

impl Drop for ResumeAll {
    fn drop(&mut self) {
        for n in ["1", "2", "3"] {
            let _ = cluster_cmd(&["resume", n]);
        }
    }
}

/// A fresh path in this process's temporary directory.
pub fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("searchwire-real-ingest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// The id of input document `i`.
pub fn doc_id(i: usize) -> String {
    format!("doc-{i:06}")
}

/// `docs` NDJSON documents `{"id":"doc-…","n":i,"msg":…}`.
pub fn write_docs(path: &Path, docs: usize) {
    let mut s = String::with_capacity(docs * 70);
    for i in 0..docs {
        s.push_str(&format!(
            "{{\"id\":\"{}\",\"n\":{i},\"msg\":\"small document {i}\"}}\n",
            doc_id(i)
        ));
    }
    std::fs::write(path, s).unwrap();
}

/// (Re)creates `index`: 3 shards, 1 replica, `id` keyword and `n` long; waits for green.
/// The runtime every real-node test runs on: two workers, as the machine has two cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

pub async fn create_index(client: &Client, index: &str) {
    let _ = client.send(Request::delete(format!("/{index}"))).await;
    client
        .send(Request::put(format!("/{index}")).json(&json!({
            "settings": {"number_of_shards": 3, "number_of_replicas": 1},
            "mappings": {"properties": {"id": {"type": "keyword"}, "n": {"type": "long"}}}
        })))
        .await
        .unwrap();
    cluster_health(
        client,
        index,
        &[("wait_for_status", "green")],
        Duration::from_secs(60),
    )
    .await;
}

/// `GET /_cluster/health[/{scope}]` with the `wait_for_*` conditions in `wait`, asking the
/// server to hold its answer up to `server_wait` until they hold. The attempt timeout and the
/// request's deadline outlast that wait by 30 s, so the server's answer (`timed_out` true or
/// false) always arrives: a request that asks the server to wait must never be cut short by
/// searchwire's default 30 s attempt timeout. Returns the health document (callers that need
/// the conditions met check `timed_out`); panics when the request fails.
pub async fn cluster_health(
    client: &Client,
    scope: &str,
    wait: &[(&str, &str)],
    server_wait: Duration,
) -> Value {
    let path = if scope.is_empty() {
        "/_cluster/health".to_string()
    } else {
        format!("/_cluster/health/{scope}")
    };
    let mut req = Request::get(path).query("timeout", format!("{}s", server_wait.as_secs()));
    for (k, v) in wait {
        req = req.query(*k, *v);
    }
    let limit = server_wait + Duration::from_secs(30);
    client
        .send(req.attempt_timeout(limit).timeout(limit))
        .await
        .unwrap_or_else(|e| panic!("cluster health ({scope:?}, {wait:?}): {e}"))
        .json::<Value>()
        .unwrap_or_else(|e| panic!("cluster health ({scope:?}): not JSON: {e}"))
}

/// The index of the ordered-delivery tests: one shard (so `_seq_no` is the order the cluster
/// applied the writes in), one replica, `p` (the priority's name) and `n` (arrival number).
pub async fn create_ordered_index(client: &Client, index: &str) {
    let _ = client.send(Request::delete(format!("/{index}"))).await;
    client
        .send(Request::put(format!("/{index}")).json(&json!({
            "settings": {"number_of_shards": 1, "number_of_replicas": 1},
            "mappings": {"properties": {"p": {"type": "keyword"}, "n": {"type": "long"}}}
        })))
        .await
        .unwrap();
}

/// A document of an ordered-delivery index, as written.
#[derive(Clone, Debug)]
pub struct Landed {
    /// `_id`.
    pub id: String,
    /// Its arrival number (`n`).
    pub n: u64,
    /// `_seq_no`: when the one shard applied it.
    pub seq_no: u64,
    /// `_version`: 1 when written once.
    pub version: u64,
}

/// Every document (up to 10,000) with `p` = `name`, by arrival number.
pub async fn landed(client: &Client, index: &str, name: &str) -> Vec<Landed> {
    let resp = client
        .send(Request::post(format!("/{index}/_search")).json(&json!({
            "size": 10_000, "version": true, "seq_no_primary_term": true,
            "query": {"term": {"p": name}}, "sort": [{"n": "asc"}]
        })))
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(resp.body()).unwrap();
    v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| Landed {
            id: h["_id"].as_str().unwrap().to_owned(),
            n: h["_source"]["n"].as_u64().unwrap(),
            seq_no: h["_seq_no"].as_u64().unwrap(),
            version: h["_version"].as_u64().unwrap(),
        })
        .collect()
}

/// Waits until what an outage left in the nodes (say, bulks a timed-out client left in the
/// socket buffers of stopped nodes) has been written, so that what is in `index` afterwards
/// is all of it. Each poll checks, in this order:
/// - the kernel's loopback sockets ([`unread_by_nodes`]): no connection waits in a node's
///   accept queue, no byte sent to a node is unread by it or still in its sender's queue
///   (an orphaned socket of a client that exited retransmits until the node takes it);
/// - the nodes ([`in_flight`]): every node in the cluster and answering, no HTTP connection
///   open but the poll's own (a node closes a connection when it reads its end, after it
///   dispatched every request on it) and no bulk task running;
/// - the count after a refresh that reached every shard copy.
///
/// A request is therefore in a socket at the first check, a connection or a task at the
/// second, or written before the count. The caller must hold no connection of its own
/// (drop its clients first). Returns the open connections and bulk tasks of the first
/// complete poll of the nodes, and the count; panics after 180 s.
pub async fn settled_after_outage(urls: &[String], index: &str) -> (u64, u64, u64) {
    let ports: Vec<u16> = urls
        .iter()
        .map(|u| {
            let port = u.trim_end_matches('/').rsplit(':').next().unwrap();
            port.parse().unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut first = None;
    loop {
        let unread = unread_by_nodes(&ports);
        let polled = in_flight(urls).await;
        if let Some(p) = polled {
            first.get_or_insert(p);
        }
        // `open` counts the poll's own connection.
        if unread.is_empty() && polled.is_some_and(|(open, tasks)| open <= 1 && tasks == 0) {
            let client = Client::builder().nodes(urls.to_vec()).build().unwrap();
            if let Some(count) = complete_count(&client, index, urls.len()).await {
                let (open, tasks) = first.unwrap_or((0, 0));
                return (open, tasks, count);
            }
        }
        assert!(
            Instant::now() < deadline,
            "requests still in flight after 180 s: sockets {unread:?}; (open HTTP connections, \
             bulk tasks) {polled:?} (None: not every node answered)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The loopback TCP sockets (`/proc/net/tcp`, `/proc/net/tcp6`) holding something for a
/// node listening on one of `ports`: its listening socket with connections not accepted
/// yet, a connection of its with bytes it has not read, or a connection to it with bytes
/// not yet acknowledged by it. Each as `local -> remote state tx:rx` (hex, as the kernel
/// prints them).
fn unread_by_nodes(ports: &[u16]) -> Vec<String> {
    let port_of = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    let mut held = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [_, local, remote, state, queues, ..] = f[..] else {
                continue;
            };
            let Some((tx, rx)) = queues.split_once(':') else {
                continue;
            };
            let (tx, rx) = (
                u64::from_str_radix(tx, 16).unwrap_or(0),
                u64::from_str_radix(rx, 16).unwrap_or(0),
            );
            let at_node = port_of(local).is_some_and(|p| ports.contains(&p));
            let to_node = port_of(remote).is_some_and(|p| ports.contains(&p));
            // A listening socket's rx is its accept queue; a connection's rx the bytes its
            // owner has not read, tx those its peer has not acknowledged.
            if (at_node && rx > 0) || (to_node && tx > 0) {
                held.push(format!("{local} -> {remote} {state} {tx:x}:{rx:x}"));
            }
        }
    }
    held
}

/// One poll of the nodes for [`settled_after_outage`]: HTTP connections open and bulk tasks
/// running over all nodes, from a fresh client with one connection to `urls[0]` (the stats
/// cover every node), or `None` unless all `urls.len()` nodes are in the cluster and
/// answered both.
async fn in_flight(urls: &[String]) -> Option<(u64, u64)> {
    let nodes = urls.len() as u64;
    let c = Client::builder().nodes([urls[0].clone()]).build().unwrap();
    let stats: Value = json_of(&c, Request::get("/_nodes/stats/http")).await?;
    if stats["_nodes"]["successful"].as_u64() != Some(nodes) {
        return None;
    }
    let open = stats["nodes"]
        .as_object()?
        .values()
        .filter_map(|x| x["http"]["current_open"].as_u64())
        .sum::<u64>();
    // The task list names only nodes with a matching task; a node that did not answer is
    // in `node_failures`, and one outside the cluster in neither, so the cluster's own
    // node count is checked too.
    let tasks: Value =
        json_of(&c, Request::get("/_tasks?actions=indices:data/write/bulk*")).await?;
    if tasks["node_failures"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
    {
        return None;
    }
    let running = tasks["nodes"].as_object().map_or(0, |n| {
        n.values()
            .filter_map(|x| x["tasks"].as_object().map(|t| t.len() as u64))
            .sum::<u64>()
    });
    let health: Value = json_of(&c, Request::get("/_cluster/health")).await?;
    if health["number_of_nodes"].as_u64() != Some(nodes) {
        return None;
    }
    Some((open, running))
}

/// The JSON answer to `request`, or `None` when it failed or was not JSON.
async fn json_of(client: &Client, request: Request) -> Option<Value> {
    client.send(request).await.ok()?.json().ok()
}

/// The count after a refresh that reached every shard copy, with all `nodes` in the
/// cluster; `None` when any of that did not hold.
async fn complete_count(client: &Client, index: &str, nodes: usize) -> Option<u64> {
    let health: Value = json_of(client, Request::get("/_cluster/health")).await?;
    if health["number_of_nodes"].as_u64() != Some(nodes as u64) {
        return None;
    }
    let refresh: Value = json_of(client, Request::post(format!("/{index}/_refresh"))).await?;
    let shards = &refresh["_shards"];
    if shards["failed"].as_u64() != Some(0) || shards["successful"] != shards["total"] {
        return None;
    }
    let count: Value = json_of(client, Request::get(format!("/{index}/_count"))).await?;
    count["count"].as_u64()
}

/// The count after a refresh: every write acknowledged before it is counted.
pub async fn refreshed_count(client: &Client, index: &str) -> u64 {
    let _ = client
        .send(Request::post(format!("/{index}/_refresh")))
        .await;
    count(client, index).await
}

pub async fn count(client: &Client, index: &str) -> u64 {
    match client.send(Request::get(format!("/{index}/_count"))).await {
        Ok(r) => r
            .json::<Value>()
            .map_or(0, |v| v["count"].as_u64().unwrap_or(0)),
        Err(_) => 0,
    }
}

/// Every hit of the index after a refresh, in `n` order (search_after over `n`), with its
/// `_source` when `with_source`.
pub async fn all_hits(client: &Client, index: &str, with_source: bool) -> Vec<Value> {
    client
        .send(Request::post(format!("/{index}/_refresh")))
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut after: Option<Value> = None;
    loop {
        let mut q = json!({"size": 10000, "sort": [{"n": "asc"}], "_source": with_source});
        if let Some(a) = &after {
            q["search_after"] = a.clone();
        }
        let r: Value = client
            .send(Request::post(format!("/{index}/_search")).json(&q))
            .await
            .unwrap()
            .json()
            .unwrap();
        let hits = r["hits"]["hits"].as_array().unwrap().clone();
        if hits.is_empty() {
            break;
        }
        after = hits.last().map(|h| h["sort"].clone());
        out.extend(hits);
    }
    out
}

/// Every `_id` in the index (search_after over `n`), and `_count`.
pub async fn ids_and_count(client: &Client, index: &str) -> (Vec<String>, u64) {
    let ids = all_hits(client, index, false)
        .await
        .iter()
        .map(|h| h["_id"].as_str().unwrap().to_owned())
        .collect();
    (ids, count(client, index).await)
}

/// The index holds exactly documents `doc-000000`..`doc-{docs-1}`, each once.
pub fn assert_exactly_the_input(ids: Vec<String>, count: u64, docs: usize) {
    assert_eq!(count, docs as u64, "_count equals the input");
    assert_eq!(
        ids.len(),
        docs,
        "one hit per input document (no duplicates)"
    );
    let set: BTreeSet<String> = ids.into_iter().collect();
    assert_eq!(set.len(), docs);
    let expected: BTreeSet<String> = (0..docs).map(doc_id).collect();
    assert!(set == expected, "the index holds exactly the input ids");
}

/// `searchwire ingest INPUT --url URLS --index INDEX --id-field id` plus `extra`.
pub fn ingest(urls: &str, input: &Path, index: &str, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ingest")
        .arg(input)
        .args(["--url", urls, "--index", index, "--id-field", "id"])
        .args(["--progress-every", "2s"])
        // A write pool of one thread and a queue of one rejects even a single request in
        // flight (3 primaries + 3 replicas), and a restarting node recovers its shards under
        // that load: the reference's 5 throttle retries (1.3 s) are sized for spikes, not
        // for this; 15 retries wait up to ~90 s per item. Measured with the default 5
        // (2026-11-30, docs/benchmarks.md): 4 of 6 runs ended with dead letters (165 and
        // 351 in the two counted: throttle retries exhausted while node 3 was down or
        // recovering), with ~31,000-34,000 throttled retries per run. Fewer requests in
        // flight cannot fix it: the pool holds two tasks per node and one bulk request
        // already brings a primary and a replica operation to every node, so the retries
        // have to outlast the recovery.
        .args(["--throttle-retries", "15"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// The ingest's JSON summary (its last stdout line).
pub fn summary(out: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap()
}

/// Polls `cond` (observable state) until it holds; panics after `within`.
pub async fn wait_for(what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within {within:?}");
}

/// Runs `cmd` (an ingest) to its end within `within`; checks it exited 0 without a dead
/// letter and returns its summary.
pub async fn run_clean(mut cmd: tokio::process::Command, within: Duration, what: &str) -> Value {
    let out = tokio::time::timeout(within, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what} finished within {within:?}"))
        .unwrap();
    let s = summary(&out);
    eprintln!("{what}: {s}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}, stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s["dead_letters"], 0, "{what}: {s}");
    s
}

/// The run wrote no dead letter to `dead` and met real rejections (429s it retried).
pub fn assert_throttled_without_dead_letters(s: &Value, dead: &Path) {
    assert_eq!(
        std::fs::read_to_string(dead).unwrap(),
        "",
        "no dead letters"
    );
    assert!(
        s["retried_throttled"].as_u64().unwrap() > 0,
        "real 429s happened: {s}"
    );
}

/// A Python venv in the target directory with `requirement` installed (made once; `check`
/// is Python code that exits 0 when the right client is there). `None` (skip, with a note)
/// when Python or PyPI is not available and `engine`'s suite is not required.
pub fn python_venv(engine: &Engine, name: &str, requirement: &str, check: &str) -> Option<PathBuf> {
    let required = std::env::var(engine.require_var).is_ok_and(|v| v.trim() == "1");
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin").join("python");
    let has_client = || {
        std::process::Command::new(&python)
            .args(["-c", check])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_client() {
        return Some(python);
    }
    let made = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && std::process::Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", requirement])
            .status()
            .is_ok_and(|s| s.success());
    if made && has_client() {
        return Some(python);
    }
    assert!(
        !required,
        "{}=1 but the venv with {requirement} could not be made in {}",
        engine.require_var,
        venv.display()
    );
    eprintln!("{name}: the Python client test is skipped (no python3 venv or PyPI)");
    None
}
