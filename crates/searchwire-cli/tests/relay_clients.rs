//! An unmodified third-party client against `searchwire relay`: opensearch-go v4's
//! `opensearchutil.BulkIndexer` (`benchmarks/go/cmd/bulkpeer`) indexes 20,000 documents
//! through the relay in front of the fake cluster, which throttles every 5th item. The client
//! must count no failure (queued items are 2xx), and after the relay drains its queue every
//! document is in the store exactly once.
//!
//! Needs `go` on PATH (modules from the Go proxy on first build); skipped with a note
//! without it, unless `SEARCHWIRE_REQUIRE_GO=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::process::Command;
use std::time::Duration;

use relay_support::{free_port, spawn_relay, terminate, wait_drained};
use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};
use serde_json::Value;

const GO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../benchmarks/go");
const DOCS: u64 = 20_000;

fn build_go_tools(out: &std::path::Path) -> bool {
    let required = std::env::var("SEARCHWIRE_REQUIRE_GO").is_ok_and(|v| v.trim() == "1");
    let built = Command::new("go")
        .current_dir(GO_DIR)
        .args(["build", "-o"])
        .arg(out)
        .args(["./cmd/bulkpeer", "./cmd/gendocs"])
        .status();
    match built {
        Ok(s) if s.success() => true,
        other => {
            assert!(
                !required,
                "SEARCHWIRE_REQUIRE_GO=1 but go build failed: {other:?}"
            );
            eprintln!("relay_clients: skipped (cannot build the Go tools: {other:?})");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opensearch_go_bulk_indexer_works_unmodified_and_counts_no_failure() {
    let tools = tempfile::tempdir().unwrap();
    if !build_go_tools(tools.path()) {
        return;
    }
    let docs = tools.path().join("docs.ndjson");
    let out = Command::new(tools.path().join("gendocs"))
        .args(["-n", &DOCS.to_string(), "-size", "120"])
        .output()
        .unwrap();
    std::fs::write(&docs, out.stdout).unwrap();

    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    bulk.fault_every(Some((5, BulkFault::Throttle)));
    let dir = tempfile::tempdir().unwrap();
    let relay = spawn_relay(&cluster.urls().join(","), dir.path(), free_port(), &[]).await;
    let url = format!("http://{}", relay.addr);
    let peer = tools.path().join("bulkpeer");
    let docs_arg = docs.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(peer)
            .args([
                "-url", &url, "-index", "logs", "-action", "create", "-workers", "2", "-file",
            ])
            .arg(docs_arg)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bulkpeer output: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    eprintln!("opensearch-go through the relay: {summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["documents"], DOCS, "{summary}");
    wait_drained(relay.addr, Duration::from_secs(60)).await;
    assert_eq!(terminate(relay).await, Some(0));
    assert_eq!(bulk.count("logs") as u64, DOCS);
    assert_eq!(bulk.max_writes(), 1);
}
