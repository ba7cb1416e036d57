//! `searchwire health` against the real nodes `scripts/test` starts: the table and the JSON
//! name each engine and its version. Elasticsearch's `GET /` has no `version.distribution`
//! (it has `build_flavor` and the `X-Elastic-Product` header), so this is where a wrong
//! detection would show to users.
//!
//! Uses `SEARCHWIRE_TEST_CLUSTER` (OpenSearch) and `SEARCHWIRE_TEST_ES_CLUSTER`
//! (Elasticsearch); a test whose variable is unset is skipped, unless its require variable
//! (`SEARCHWIRE_REQUIRE_CLUSTER`, `SEARCHWIRE_REQUIRE_ES_CLUSTER`) is `1`. Read-only: no node
//! is disturbed.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

/// The URLs in `var` (comma-separated), or `None` when unset and not required by `require`.
fn urls(test: &str, var: &str, require: &str) -> Option<String> {
    let urls = std::env::var(var).unwrap_or_default();
    if urls.trim().is_empty() {
        assert!(
            std::env::var(require).map_or(true, |v| v.trim() != "1"),
            "{test}: {require}=1 but {var} is not set (scripts/test sets both)"
        );
        eprintln!("{test}: skipped ({var} is not set)");
        return None;
    }
    Some(urls)
}

/// Runs `searchwire health --url URLS [--json]`; returns (exit code, stdout).
fn health(urls: &str, json: bool) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["health", "--url", urls]);
    if json {
        cmd.arg("--json");
    }
    let out = cmd
        .env_remove("SEARCHWIRE_REQUEST_TIMEOUT")
        .env_remove("SEARCHWIRE_PASSWORD")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    if !out.stderr.is_empty() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The server version the cluster runs: `var` (`scripts/test` sets it), else what
/// `scripts/cluster --engine ENGINE version` reports for the recorded cluster.
fn expected_version(engine: &str, var: &str) -> String {
    if let Ok(v) = std::env::var(var) {
        if !v.trim().is_empty() {
            return v.trim().to_string();
        }
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/cluster");
    let out = Command::new(script)
        .args(["--engine", engine, "version"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !v.is_empty(),
        "{var} is not set and scripts/cluster --engine {engine} version failed"
    );
    v
}

/// Every node alive, capability available, `distribution` and exactly `version`, in the
/// JSON and in the table.
fn check(urls: &str, distribution: &str, version: &str) {
    let (code, out) = health(urls, true);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
    assert_eq!(nodes.len(), urls.split(',').count(), "{v}");
    for n in &nodes {
        assert_eq!(n["state"], "alive", "{n}");
        assert_eq!(n["capability"], "available", "{n}");
        assert_eq!(n["distribution"], distribution, "{n}");
        assert_eq!(n["version"], version, "{n}");
    }
    assert!(
        matches!(v["status"].as_str(), Some("green" | "yellow")),
        "{v}"
    );

    let (code, table) = health(urls, false);
    assert_eq!(code, 0, "{table}");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("http://")).collect();
    assert_eq!(rows.len(), nodes.len(), "{table}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert!(cells.contains(&distribution), "{table}");
        assert!(cells.contains(&version), "{table}");
    }
}

#[test]
fn health_names_elasticsearch_and_its_version() {
    let test = "health_names_elasticsearch_and_its_version";
    if let Some(urls) = urls(
        test,
        "SEARCHWIRE_TEST_ES_CLUSTER",
        "SEARCHWIRE_REQUIRE_ES_CLUSTER",
    ) {
        let version = expected_version("elasticsearch", "SEARCHWIRE_TEST_ES_CLUSTER_VERSION");
        check(&urls, "elasticsearch", &version);
    }
}

#[test]
fn health_names_opensearch_and_its_version() {
    let test = "health_names_opensearch_and_its_version";
    if let Some(urls) = urls(
        test,
        "SEARCHWIRE_TEST_CLUSTER",
        "SEARCHWIRE_REQUIRE_CLUSTER",
    ) {
        let version = expected_version("opensearch", "SEARCHWIRE_TEST_CLUSTER_VERSION");
        check(&urls, "opensearch", &version);
    }
}
