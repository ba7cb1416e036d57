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

mod real_support;

use std::process::Command;
use std::time::Duration;

use real_support::{
    assert_exactly_the_input, assert_throttled_without_dead_letters, cluster_cmd, count,
    create_index, ids_and_count, ingest, run_clean, summary, tmp, wait_for, write_docs, OPENSEARCH,
};
use searchwire::{Client, Request};
use serde_json::Value;
use tokio::time::Instant;

/// The node that is killed: `scripts/cluster` index 3, port 9203.
const VICTIM: &str = "3";
const DOCS: usize = 100_000;

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

#[test]
fn ingest_is_exactly_once_through_a_node_kill_and_an_ingest_kill() {
    let Some(urls) =
        OPENSEARCH.urls("ingest_is_exactly_once_through_a_node_kill_and_an_ingest_kill")
    else {
        return;
    };
    let rt = real_support::runtime();
    let _restore = RestoreVictim(urls.clone());
    rt.block_on(async {
        let t0 = Instant::now();
        let joined = urls.join(",");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        let input = tmp("docs.ndjson");
        write_docs(&input, DOCS);

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
        assert_throttled_without_dead_letters(&s, &dead);
        let (ids, n) = ids_and_count(&client, "sw-ingest-kill-node").await;
        assert_exactly_the_input(ids, n, DOCS);
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
        let s = run_clean(
            ingest(&joined, &input, "sw-ingest-kill-ingest", &resume),
            Duration::from_secs(300),
            "the resumed ingest",
        )
        .await;
        assert_eq!(s["checkpoint"].as_u64(), Some(total));
        assert!(
            s["lines"].as_u64().unwrap() < DOCS as u64,
            "resumed, not restarted"
        );
        let (ids, n) = ids_and_count(&client, "sw-ingest-kill-ingest").await;
        assert_exactly_the_input(ids, n, DOCS);
        for index in ["sw-ingest-kill-node", "sw-ingest-kill-ingest"] {
            let _ = client.send(Request::delete(format!("/{index}"))).await;
        }
        eprintln!(
            "real ingest test passed in {:.1}s",
            t0.elapsed().as_secs_f64()
        );
    });
}
