//! searchwire's bulk paths against the three real Elasticsearch 8.19 nodes `scripts/test`
//! starts (`scripts/cluster --engine elasticsearch`, tiny write pools, so real
//! `es_rejected_execution_exception` 429s happen):
//!
//! - `searchwire ingest` lands exactly the input (count and ids), no dead letters, through
//!   real rejections;
//! - the official Elasticsearch Python client (`elasticsearch` 8.x from PyPI, in a venv this
//!   test creates under the target directory) starts against `searchwire relay` — it refuses
//!   any answer without `X-Elastic-Product: Elasticsearch` — and its `helpers.streaming_bulk`
//!   sends documents through the relay; every one is in the index exactly once after the
//!   relay drained its queue.
//!
//! Skipped without `SEARCHWIRE_TEST_ES_CLUSTER` unless `SEARCHWIRE_REQUIRE_ES_CLUSTER=1`
//! (which also makes a missing `python3` or PyPI a failure). Run only under
//! `/work/wt/elasticsearch-cluster.lock` (or in `scripts/test`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;
mod relay_support;

use std::path::PathBuf;
use std::time::Duration;

use real_support::{
    assert_exactly_the_input, assert_throttled_without_dead_letters, create_index, ids_and_count,
    ingest, run_clean, tmp, write_docs, ELASTICSEARCH,
};
use relay_support::{free_port, spawn_relay, terminate, wait_drained};
use searchwire::{Client, Request};
use serde_json::Value;

const INGEST_DOCS: usize = 30_000;
const CLIENT_DOCS: usize = 20_000;
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/es_helpers_bulk.py"
);
/// The client line the test installs: the 8.x major the cluster speaks.
const CLIENT_REQUIREMENT: &str = "elasticsearch>=8.14,<9";

fn runtime() -> tokio::runtime::Runtime {
    real_support::runtime()
}

#[test]
fn ingest_lands_exactly_the_input_on_elasticsearch_through_real_rejections() {
    let test = "ingest_lands_exactly_the_input_on_elasticsearch_through_real_rejections";
    let Some(urls) = ELASTICSEARCH.urls(test) else {
        return;
    };
    runtime().block_on(async {
        let index = "sw-es-ingest";
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        let input = tmp("es-docs.ndjson");
        write_docs(&input, INGEST_DOCS);
        create_index(&client, index).await;
        let dead = tmp("es.dead.ndjson");
        let s = run_clean(
            ingest(
                &urls.join(","),
                &input,
                index,
                &["--dead-letter", dead.to_str().unwrap()],
            ),
            Duration::from_secs(300),
            "ingest into Elasticsearch",
        )
        .await;
        assert_throttled_without_dead_letters(&s, &dead);
        let (ids, n) = ids_and_count(&client, index).await;
        assert_exactly_the_input(ids, n, INGEST_DOCS);
        let _ = client.send(Request::delete(format!("/{index}"))).await;
    });
}

/// A venv with the official client, created once per target directory; `None` (skip) when
/// Python or PyPI is not available and the Elasticsearch suite is not required.
fn python_client() -> Option<PathBuf> {
    real_support::python_venv(
        &ELASTICSEARCH,
        "es-py-venv",
        CLIENT_REQUIREMENT,
        "import elasticsearch, sys; sys.exit(elasticsearch.__versionstr__.split('.')[0] != '8')",
    )
}

#[test]
fn the_official_python_client_bulks_through_the_relay_and_every_document_lands_once() {
    let test = "the_official_python_client_bulks_through_the_relay_and_every_document_lands_once";
    let Some(urls) = ELASTICSEARCH.urls(test) else {
        return;
    };
    let Some(python) = python_client() else {
        return;
    };
    runtime().block_on(async {
        let index = "sw-es-relay-client";
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        create_index(&client, index).await;
        let dir = tempfile::tempdir().unwrap();
        // The default presentation (auto): learned from the cluster's own GET / at start.
        let relay = spawn_relay(&urls.join(","), dir.path(), free_port(), &[]).await;
        let url = format!("http://{}", relay.addr);
        let out = tokio::time::timeout(
            Duration::from_secs(300),
            tokio::process::Command::new(&python)
                .args([SCRIPT, &url, index, &CLIENT_DOCS.to_string()])
                .output(),
        )
        .await
        .expect("the client finished within 300 s")
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the client failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s: Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
        eprintln!(
            "elasticsearch-py {} through the relay: ok {}, queued {}, errors {}",
            s["client"], s["ok"], s["queued"], s["error_count"]
        );
        assert_eq!(s["ping"], true);
        assert_eq!(s["info"]["name"], "searchwire-relay", "{s}");
        assert_eq!(s["info"]["version"]["build_flavor"], "default", "{s}");
        assert!(
            s["info"]["version"]["number"]
                .as_str()
                .unwrap()
                .starts_with("8.19."),
            "the cluster's own version: {s}"
        );
        assert_eq!(s["error_count"], 0, "{s}");
        assert_eq!(s["ok"], CLIENT_DOCS, "{s}");
        wait_drained(relay.addr, Duration::from_secs(300)).await;
        assert_eq!(terminate(relay).await, Some(0));
        let (ids, n) = ids_and_count(&client, index).await;
        assert_exactly_the_input(ids, n, CLIENT_DOCS);
        let _ = client.send(Request::delete(format!("/{index}"))).await;
    });
}
