//! searchwire's bulk paths against the three real Elasticsearch nodes (8.19 or 9.x)
//! `scripts/test` starts (`scripts/cluster --engine elasticsearch`, tiny write pools, so
//! real `es_rejected_execution_exception` 429s happen):
//!
//! - `searchwire ingest` lands exactly the input (count and ids), no dead letters, through
//!   real rejections;
//! - the official Elasticsearch Python client of the cluster's major (`elasticsearch` 8.x or
//!   9.x from PyPI, pinned; in the venv `scripts/test` makes and names in
//!   `SEARCHWIRE_ES_PYTHON`, else in one this test creates under the target directory) starts
//!   against `searchwire relay`, unmodified — it refuses
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
use std::process::Command;
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
/// The pinned client of each major (`requirements-es8.txt`, `requirements-es9.txt`, which
/// `scripts/test` installs from too): the release of that major the official client line
/// is at (the client sends `compatible-with=<its major>`).
fn client_requirement(major: u32) -> &'static str {
    let file = match major {
        8 => include_str!("clients/requirements-es8.txt"),
        _ => include_str!("clients/requirements-es9.txt"),
    };
    file.lines()
        .map(str::trim)
        .find(|l| l.starts_with("elasticsearch=="))
        .unwrap_or("elasticsearch")
}

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

/// A Python with the official client of `major`: `SEARCHWIRE_ES_PYTHON` when set (the venv
/// `scripts/test` makes), else a venv created once per target directory and major; `None`
/// (skip) when Python or PyPI is not available and the Elasticsearch suite is not required.
/// Either way the installed client must be the pinned one.
fn python_client(major: u32) -> Option<PathBuf> {
    let required = std::env::var(ELASTICSEARCH.require_var).is_ok_and(|v| v.trim() == "1");
    let requirement = client_requirement(major);
    let pinned = requirement.trim_start_matches("elasticsearch==");
    let has_client = |python: &PathBuf| {
        Command::new(python)
            .args([
                "-c",
                "import elasticsearch, sys; sys.exit(elasticsearch.__versionstr__ != sys.argv[1])",
                pinned,
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if let Ok(given) = std::env::var("SEARCHWIRE_ES_PYTHON") {
        let python = PathBuf::from(given.trim());
        assert!(
            has_client(&python),
            "SEARCHWIRE_ES_PYTHON={} has no {requirement} (scripts/test installs it)",
            python.display()
        );
        return Some(python);
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("es-py-venv-{major}"));
    let python = venv.join("bin").join("python");
    if has_client(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", requirement])
            .status()
            .is_ok_and(|s| s.success());
    if made && has_client(&python) {
        return Some(python);
    }
    assert!(
        !required,
        "{}=1 but the venv with {requirement} could not be made in {}",
        ELASTICSEARCH.require_var,
        venv.display()
    );
    eprintln!("real_es: the Python client test is skipped (no python3 venv or PyPI)");
    None
}

#[test]
fn the_official_python_client_bulks_through_the_relay_and_every_document_lands_once() {
    let test = "the_official_python_client_bulks_through_the_relay_and_every_document_lands_once";
    let Some(urls) = ELASTICSEARCH.urls(test) else {
        return;
    };
    let expected = ELASTICSEARCH.expected_version();
    let Some(python) = python_client(ELASTICSEARCH.major()) else {
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
        assert_eq!(
            s["info"]["version"]["number"], expected,
            "the cluster's own version: {s}"
        );
        let client_major = s["client"].as_str().unwrap_or("").split('.').next();
        assert_eq!(
            client_major,
            Some(ELASTICSEARCH.major().to_string().as_str()),
            "the client of the cluster's major: {s}"
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
