//! `searchwire ingest --compress` against the real OpenSearch nodes `scripts/test` starts:
//! the nodes inflate the gzip bodies, and the index holds exactly the documents, byte for
//! byte in their `_source`, that a plain ingest of the same input stores.
//!
//! Gated like the other real-node tests: skipped without `SEARCHWIRE_TEST_CLUSTER` unless
//! `SEARCHWIRE_REQUIRE_CLUSTER=1`.
//!
//! Also: a real node whose `http.max_content_length` is smaller than the indexer's batches
//! (`SEARCHWIRE_TEST_SMALL_BODY_CLUSTER`, one node `scripts/test` starts with a 64 KiB
//! limit; skipped without it unless `SEARCHWIRE_REQUIRE_SMALL_BODY_CLUSTER=1`) answers the
//! first batches 413: the indexer splits them and lowers its batch bound, and every
//! document is stored, none dead-lettered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;

use std::time::Duration;

use real_support::{all_hits, cluster_health, create_index, ingest, run_clean, tmp, OPENSEARCH};
use searchwire::{Client, Request};
use serde_json::{json, Value};

const DOCS: usize = 20_000;

/// Log-like documents with repeated structure, unicode and escapes.
fn write_input(path: &std::path::Path) {
    let mut s = String::new();
    for i in 0..DOCS {
        let level = ["info", "warn", "error"][i % 3];
        s.push_str(
            &json!({
                "id": format!("doc-{i:06}"),
                "n": i,
                "level": level,
                "msg": format!("GET /api/items/{i} 200 — naïve café \"quoted\" \\ {}", i * 7919 % 10007),
                "tags": ["prod", format!("shard-{}", i % 5)],
            })
            .to_string(),
        );
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

/// Every `_id` and `_source` of the index, in `n` order.
async fn sources(client: &Client, index: &str) -> Vec<Value> {
    all_hits(client, index, true)
        .await
        .iter()
        .map(|h| json!({"_id": h["_id"], "_source": h["_source"]}))
        .collect()
}

#[test]
fn ingest_compress_stores_exactly_the_documents_a_plain_ingest_stores() {
    let Some(urls) =
        OPENSEARCH.urls("ingest_compress_stores_exactly_the_documents_a_plain_ingest_stores")
    else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let joined = urls.join(",");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        let input = tmp("compress.ndjson");
        write_input(&input);
        let (plain, gz) = ("sw-ingest-plain", "sw-ingest-gzip");
        create_index(&client, plain).await;
        create_index(&client, gz).await;
        let within = Duration::from_secs(300);
        let s = run_clean(ingest(&joined, &input, plain, &[]), within, "plain ingest").await;
        let plain_bytes = s["bytes_sent"].as_u64();
        let s = run_clean(
            ingest(&joined, &input, gz, &["--compress=0"]),
            within,
            "ingest --compress",
        )
        .await;
        assert_eq!(s["indexed"].as_u64(), Some(DOCS as u64), "{s}");
        let a = sources(&client, plain).await;
        let b = sources(&client, gz).await;
        assert_eq!(a.len(), DOCS);
        assert_eq!(b.len(), DOCS);
        assert!(a == b, "the same ids and sources");
        // What was stored is what was read (the first and last lines, as parsed).
        let first: Value = serde_json::from_str(
            std::fs::read_to_string(&input)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(b[0]["_source"], first);
        eprintln!("plain summary bytes_sent {plain_bytes:?}; compressed: {s}");
        for index in [plain, gz] {
            let _ = client.send(Request::delete(format!("/{index}"))).await;
        }
    });
}

/// The node with a small `http.max_content_length`, or `None` (skip) when not given.
fn small_body_node() -> Option<String> {
    match std::env::var("SEARCHWIRE_TEST_SMALL_BODY_CLUSTER") {
        Ok(u) if !u.trim().is_empty() => Some(u.trim().to_owned()),
        _ => {
            let required = std::env::var("SEARCHWIRE_REQUIRE_SMALL_BODY_CLUSTER")
                .is_ok_and(|v| v.trim() == "1");
            assert!(
                !required,
                "SEARCHWIRE_REQUIRE_SMALL_BODY_CLUSTER=1 but SEARCHWIRE_TEST_SMALL_BODY_CLUSTER is not set"
            );
            eprintln!("skipped: no SEARCHWIRE_TEST_SMALL_BODY_CLUSTER");
            None
        }
    }
}

#[test]
fn a_node_with_a_small_content_limit_gets_every_document_in_smaller_batches() {
    let Some(url) = small_body_node() else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let client = Client::builder().nodes([url.clone()]).build().unwrap();
        let index = "sw-ingest-small-body";
        let _ = client.send(Request::delete(format!("/{index}"))).await;
        client
            .send(Request::put(format!("/{index}")).json(&json!({
                "settings": {"number_of_shards": 1, "number_of_replicas": 0},
                "mappings": {"properties": {"id": {"type": "keyword"}, "n": {"type": "long"}}}
            })))
            .await
            .unwrap();
        cluster_health(
            &client,
            index,
            &[("wait_for_status", "green")],
            Duration::from_secs(60),
        )
        .await;
        let input = tmp("small-body.ndjson");
        write_input(&input);
        let s = run_clean(
            ingest(&url, &input, index, &[]),
            Duration::from_secs(300),
            "ingest into a node with a 64 KiB content limit",
        )
        .await;
        assert_eq!(s["indexed"].as_u64(), Some(DOCS as u64), "{s}");
        // The bound fell below the node's limit (the default batch is megabytes).
        let bound = s["batch_bytes"].as_u64().unwrap_or(u64::MAX);
        assert!(bound <= 64 * 1024, "batch bytes {bound} after 413s: {s}");
        client
            .send(Request::post(format!("/{index}/_refresh")))
            .await
            .unwrap();
        let count: Value = client
            .send(Request::get(format!("/{index}/_count")))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(count["count"].as_u64(), Some(DOCS as u64), "{count}");
        let _ = client.send(Request::delete(format!("/{index}"))).await;
    });
}
