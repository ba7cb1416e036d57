//! `searchwire ingest` against the three real OpenSearch nodes `scripts/test` starts (tiny
//! write thread pools and queues, so real 429s happen): 100,000 documents land exactly once
//! while node 3 is SIGKILLed and restarted mid-run, and again when the ingest itself is
//! SIGKILLed and resumed.
//!
//! Gated like `crates/searchwire/tests/real_cluster.rs`: skipped without
//! `SEARCHWIRE_TEST_CLUSTER` unless `SEARCHWIRE_REQUIRE_CLUSTER=1`; needs
//! `SEARCHWIRE_CLUSTER_DIR` (the directory the cluster was started with) to kill and
//! restart node 3. Run only under the machine-wide cluster lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use searchwire::{Client, Request};
use serde_json::{json, Value};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/cluster");
/// The node that is killed: `scripts/cluster` index 3, port 9203.
const VICTIM: &str = "3";
const DOCS: usize = 100_000;

fn cluster_urls(test: &str) -> Option<Vec<String>> {
    let required = std::env::var("SEARCHWIRE_REQUIRE_CLUSTER").is_ok_and(|v| v.trim() == "1");
    let urls: Vec<String> = std::env::var("SEARCHWIRE_TEST_CLUSTER")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if urls.is_empty() {
        assert!(
            !required,
            "{test}: SEARCHWIRE_REQUIRE_CLUSTER=1 but SEARCHWIRE_TEST_CLUSTER is not set"
        );
        eprintln!("{test}: skipped (SEARCHWIRE_TEST_CLUSTER is not set)");
        return None;
    }
    Some(urls)
}

fn cluster_cmd(args: &[&str]) -> (bool, String) {
    match Command::new(SCRIPT).args(args).output() {
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

/// Restarts node 3 if it is dead and waits for three nodes, on success and panic alike,
/// so the tests after this one find the cluster whole.
struct RestoreVictim(Vec<String>);

impl Drop for RestoreVictim {
    fn drop(&mut self) {
        if !restart_victim(&self.0) {
            eprintln!("restore: node {VICTIM} could not be brought back");
        }
    }
}

fn victim_dead() -> bool {
    let (_, status) = cluster_cmd(&["status"]);
    status.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.first() == Some(&VICTIM) && f.last() == Some(&"dead")
    })
}

/// Whether the cluster reports 3 nodes (at least yellow) within 120 s.
fn wait_whole(urls: &[String]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        for u in urls {
            let url =
                format!("{u}/_cluster/health?wait_for_nodes=3&wait_for_status=yellow&timeout=20s");
            if let Ok(o) = Command::new("curl").args(["-s", "-m", "25", &url]).output() {
                if serde_json::from_slice::<Value>(&o.stdout)
                    .is_ok_and(|v| v["timed_out"] == false && v["number_of_nodes"] == 3)
                {
                    return true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// Restarts node 3 if it is dead and waits for the cluster to be whole. On a loaded
/// 2-core machine `scripts/cluster restart` may give up on a node that is still starting
/// (and stop it); it is tried up to 3 times.
fn restart_victim(urls: &[String]) -> bool {
    for attempt in 1..=3 {
        if !victim_dead() {
            return wait_whole(urls);
        }
        let (ok, out) = cluster_cmd(&["restart", VICTIM]);
        if ok {
            return wait_whole(urls);
        }
        let tail: Vec<&str> = out.lines().rev().take(3).collect();
        eprintln!("scripts/cluster restart {VICTIM} (attempt {attempt}) failed: {tail:?}");
    }
    false
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("searchwire-real-ingest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn write_docs(path: &Path) {
    let mut s = String::with_capacity(DOCS * 70);
    for i in 0..DOCS {
        s.push_str(&format!(
            "{{\"id\":\"doc-{i:06}\",\"n\":{i},\"msg\":\"small document {i}\"}}\n"
        ));
    }
    std::fs::write(path, s).unwrap();
}

async fn create_index(client: &Client, index: &str) {
    let _ = client.send(Request::delete(format!("/{index}"))).await;
    client
        .send(Request::put(format!("/{index}")).json(&json!({
            "settings": {"number_of_shards": 3, "number_of_replicas": 1},
            "mappings": {"properties": {"id": {"type": "keyword"}, "n": {"type": "long"}}}
        })))
        .await
        .unwrap();
    client
        .send(Request::get(format!(
            "/_cluster/health/{index}?wait_for_status=green&timeout=60s"
        )))
        .await
        .unwrap();
}

async fn count(client: &Client, index: &str) -> u64 {
    match client.send(Request::get(format!("/{index}/_count"))).await {
        Ok(r) => r
            .json::<Value>()
            .map_or(0, |v| v["count"].as_u64().unwrap_or(0)),
        Err(_) => 0,
    }
}

/// Every `_id` in the index (search_after over `n`), and `_count`.
async fn ids_and_count(client: &Client, index: &str) -> (Vec<String>, u64) {
    client
        .send(Request::post(format!("/{index}/_refresh")))
        .await
        .unwrap();
    let mut ids = Vec::with_capacity(DOCS);
    let mut after: Option<Value> = None;
    loop {
        let mut q = json!({"size": 10000, "sort": [{"n": "asc"}], "_source": false});
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
        for h in &hits {
            ids.push(h["_id"].as_str().unwrap().to_owned());
        }
        after = hits.last().map(|h| h["sort"].clone());
    }
    (ids, count(client, index).await)
}

fn assert_exactly_the_input(ids: Vec<String>, count: u64) {
    assert_eq!(count, DOCS as u64, "_count equals the input");
    assert_eq!(
        ids.len(),
        DOCS,
        "one hit per input document (no duplicates)"
    );
    let set: BTreeSet<String> = ids.into_iter().collect();
    assert_eq!(set.len(), DOCS);
    let expected: BTreeSet<String> = (0..DOCS).map(|i| format!("doc-{i:06}")).collect();
    assert!(set == expected, "the index holds exactly the input ids");
}

fn ingest(urls: &str, input: &Path, index: &str, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ingest")
        .arg(input)
        .args(["--url", urls, "--index", index, "--id-field", "id"])
        .args(["--progress-every", "2s"])
        // A write pool of one thread and a queue of one rejects even a single request in
        // flight (3 primaries + 3 replicas), and a restarting node recovers its shards under
        // that load: the reference's 5 throttle retries (1.3 s) are sized for spikes, not
        // for this; 15 retries wait up to ~90 s per item.
        .args(["--throttle-retries", "15"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

fn summary(out: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap()
}

async fn wait_for(what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within {within:?}");
}

#[test]
fn ingest_is_exactly_once_through_a_node_kill_and_an_ingest_kill() {
    let Some(urls) = cluster_urls("ingest_is_exactly_once_through_a_node_kill_and_an_ingest_kill")
    else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _restore = RestoreVictim(urls.clone());
    rt.block_on(async {
        let t0 = Instant::now();
        let joined = urls.join(",");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        let input = tmp("docs.ndjson");
        write_docs(&input);

        // 1. Node 3 is SIGKILLed at ~25 % and restarted while the ingest runs.
        create_index(&client, "sw-ingest-kill-node").await;
        let dead = tmp("node.dead.ndjson");
        let child = ingest(
            &joined,
            &input,
            "sw-ingest-kill-node",
            &["--dead-letter", dead.to_str().unwrap()],
        )
        .spawn()
        .unwrap();
        wait_for("25 % indexed", Duration::from_secs(120), async || {
            count(&client, "sw-ingest-kill-node").await >= (DOCS / 4) as u64
        })
        .await;
        let (ok, out) = cluster_cmd(&["kill", VICTIM]);
        assert!(ok, "scripts/cluster kill {VICTIM}: {out}");
        eprintln!("node {VICTIM} killed at {:.1}s", t0.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let owned = urls.clone();
        let back = tokio::task::spawn_blocking(move || restart_victim(&owned))
            .await
            .unwrap();
        assert!(back, "node {VICTIM} could not be restarted (see above)");
        eprintln!(
            "node {VICTIM} restarted at {:.1}s",
            t0.elapsed().as_secs_f64()
        );
        let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
            .await
            .expect("the ingest finished within 300 s")
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let s = summary(&out);
        eprintln!("node-kill run: {s}");
        assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
        assert_eq!(s["dead_letters"], 0);
        assert_eq!(
            std::fs::read_to_string(&dead).unwrap(),
            "",
            "no dead letters"
        );
        assert!(
            s["retried_throttled"].as_u64().unwrap() > 0,
            "real 429s happened: {s}"
        );
        let (ids, n) = ids_and_count(&client, "sw-ingest-kill-node").await;
        assert_exactly_the_input(ids, n);
        eprintln!("node-kill phase done at {:.1}s", t0.elapsed().as_secs_f64());

        // 2. The ingest itself is SIGKILLed at ~30 % of the input and resumed.
        create_index(&client, "sw-ingest-kill-ingest").await;
        let cp = tmp("ingest.checkpoint");
        let dead = tmp("ingest.dead.ndjson");
        let resume = [
            "--resume",
            cp.to_str().unwrap(),
            "--dead-letter",
            dead.to_str().unwrap(),
        ];
        let total = std::fs::metadata(&input).unwrap().len();
        let mut child = ingest(&joined, &input, "sw-ingest-kill-ingest", &resume)
            .args(["--checkpoint-every", "200ms"])
            .spawn()
            .unwrap();
        wait_for(
            "a checkpoint at 30 %",
            Duration::from_secs(120),
            async || {
                std::fs::read_to_string(&cp)
                    .ok()
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                    .is_some_and(|v| v["offset"].as_u64().unwrap_or(0) > total * 3 / 10)
            },
        )
        .await;
        child.start_kill().unwrap();
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), None, "the ingest was killed");
        eprintln!(
            "ingest killed at {:.1}s with {} documents in the index",
            t0.elapsed().as_secs_f64(),
            count(&client, "sw-ingest-kill-ingest").await
        );
        let out = tokio::time::timeout(
            Duration::from_secs(300),
            ingest(&joined, &input, "sw-ingest-kill-ingest", &resume).output(),
        )
        .await
        .expect("the resumed ingest finished within 300 s")
        .unwrap();
        let s = summary(&out);
        eprintln!("resumed run: {s}");
        assert_eq!(
            out.status.code(),
            Some(0),
            "stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(s["dead_letters"], 0);
        assert_eq!(s["checkpoint"].as_u64(), Some(total));
        assert!(
            s["lines"].as_u64().unwrap() < DOCS as u64,
            "resumed, not restarted"
        );
        let (ids, n) = ids_and_count(&client, "sw-ingest-kill-ingest").await;
        assert_exactly_the_input(ids, n);
        for index in ["sw-ingest-kill-node", "sw-ingest-kill-ingest"] {
            let _ = client.send(Request::delete(format!("/{index}"))).await;
        }
        eprintln!(
            "real ingest test passed in {:.1}s",
            t0.elapsed().as_secs_f64()
        );
    });
}
