//! The operations kit against a real Prometheus server (Debian's `prometheus`, its own port
//! and data directory, stopped by pid): it scrapes a real `searchwire relay` in front of a
//! URL where nothing listens (an outage), loads ops/prometheus/searchwire-relay.rules.yml,
//! and the backlog alert fires — checked through Prometheus's HTTP API. The rules are the
//! repository's, with the backlog alert's threshold and `for` shortened so the test takes
//! seconds (same expression otherwise). Every query of ops/grafana/searchwire-relay.json
//! must parse and run on the same server, and the relay's ledger equation, computed by
//! Prometheus from the scrapes, is 0 (the unaccounted-items alert inactive).
//!
//! Skipped when `prometheus` is missing, unless `SEARCHWIRE_REQUIRE_PROMETHEUS=1`
//! (scripts/test installs it with `scripts/check-ops install` and sets that).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::path::Path;
use std::time::Duration;

use relay_support::{free_port, http, spawn_relay_with, terminate};

use serde_json::Value;

/// The relay's repository root (two levels above this crate).
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

struct Prometheus {
    child: std::process::Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET on Prometheus's API as HTTP/1.0 (so the answer is never chunked).
async fn api(port: u16, path_and_query: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return Value::Null;
    };
    let req = format!("GET {path_and_query} HTTP/1.0\r\nHost: prometheus\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return Value::Null;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    text.split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null)
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_fires_the_backlog_alert_during_an_outage() {
    if std::process::Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("SEARCHWIRE_REQUIRE_PROMETHEUS").is_err(),
            "SEARCHWIRE_REQUIRE_PROMETHEUS is set but prometheus is missing (scripts/check-ops install)"
        );
        eprintln!("relay_prometheus: skipped (no prometheus binary)");
        return;
    }
    // An outage: the cluster URL has nothing listening.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("queue");
    let relay = spawn_relay_with(
        &dead,
        free_port(),
        &[
            "--queue-dir",
            queue.to_str().unwrap(),
            "--live-budget",
            "200ms",
        ],
    )
    .await;
    for i in 0..10 {
        let body =
            format!("{{\"index\":{{\"_index\":\"logs\",\"_id\":\"{i}\"}}}}\n{{\"n\":{i}}}\n");
        let (s, _) = http(relay.addr, "POST", "/_bulk", body.as_bytes())
            .await
            .unwrap();
        assert_eq!(s, 200);
    }

    // The repository's rules; the backlog alert at 5 items for 2 s.
    let rules =
        std::fs::read_to_string(repo().join("ops/prometheus/searchwire-relay.rules.yml")).unwrap();
    let (head, tail) = rules
        .split_once("alert: SearchwireRelayBacklogHigh")
        .unwrap();
    let tail = tail
        .replacen(
            "(searchwire_relay_backlog) > 500",
            "(searchwire_relay_backlog) > 5",
            1,
        )
        .replacen("for: 10m", "for: 2s", 1);
    assert_ne!(tail, rules, "the backlog rule was found");
    std::fs::write(
        dir.path().join("rules.yml"),
        format!("{head}alert: SearchwireRelayBacklogHigh{tail}"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\n\
             scrape_configs:\n  - job_name: relay\n    static_configs:\n      - targets: ['{}']\n",
            relay.addr
        ),
    )
    .unwrap();
    let port = free_port();
    let child = std::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let prom = Prometheus { child, port };

    // Wait for the event: the alert firing (Prometheus's own clock, bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let firing = loop {
        let v = api(prom.port, "/api/v1/alerts").await;
        let alerts = v["data"]["alerts"].as_array().cloned().unwrap_or_default();
        if let Some(a) = alerts.iter().find(|a| {
            a["labels"]["alertname"] == "SearchwireRelayBacklogHigh" && a["state"] == "firing"
        }) {
            break a.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog alert did not fire: {v}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        firing["labels"]["instance"],
        relay.addr.to_string(),
        "{firing}"
    );
    assert_eq!(firing["labels"]["severity"], "warning");
    assert!(
        firing["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("10 items queued"),
        "{firing}"
    );
    // The other rules loaded and are healthy (their expressions evaluate).
    let rules = api(prom.port, "/api/v1/rules").await;
    let loaded: Vec<&Value> = rules["data"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(loaded.len(), 7, "{rules}");
    for r in loaded {
        assert_eq!(r["health"], "ok", "{r}");
    }
    // The ledger's equation, as Prometheus computes it from the scrapes: 0 unaccounted, and
    // the unaccounted-items alert inactive.
    let q = "sum by (instance) (searchwire_relay_accepted_items_total) \
             + sum by (instance) (searchwire_relay_recovered_items) \
             - sum by (instance) (searchwire_relay_settled_items_total) \
             - sum by (instance) (searchwire_relay_held_items)";
    let v = api(prom.port, &format!("/api/v1/query?query={}", encode(q))).await;
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(result.len(), 1, "{v}");
    assert_eq!(result[0]["value"][1], "0", "{v}");
    let unaccounted = rules["data"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "SearchwireRelayItemsUnaccounted")
        .cloned()
        .unwrap_or_default();
    assert_eq!(unaccounted["state"], "inactive", "{unaccounted}");

    // Every dashboard query parses and runs.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("ops/grafana/searchwire-relay.json")).unwrap(),
    )
    .unwrap();
    let mut n = 0;
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let q = t["expr"]
                .as_str()
                .unwrap()
                .replace("$instance", ".*")
                .replace("$__rate_interval", "1m");
            let v = api(prom.port, &format!("/api/v1/query?query={}", encode(&q))).await;
            assert_eq!(v["status"], "success", "{q}: {v}");
            n += 1;
        }
    }
    assert!(n >= 15, "{n} queries");
    drop(prom);
    assert_eq!(terminate(relay).await, Some(0));
}
