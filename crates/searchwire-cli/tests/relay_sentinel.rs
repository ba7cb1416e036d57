//! Two `searchwire relay` processes on a Redis queue found through Sentinels, every cluster
//! node refusing (so every item is queued), `--redis-min-replicas 1`, the replication link
//! slowed to 300 ms by Toxiproxy. Under load the Redis primary is SIGKILLed and its data
//! deleted: the relays acknowledge again within 10 s of the promotion, and after the cluster
//! takes writes again every acknowledged id is in the index exactly once.
//!
//! Its own primary, 2 replicas and 3 Sentinels (`scripts/redis sentinel-start`) on the
//! ports from `SEARCHWIRE_TEST_REDIS_PORT_BASE` + 50, and the Toxiproxy of
//! `SEARCHWIRE_TEST_TOXIPROXY` (scripts/test sets both; skipped without them unless
//! `SEARCHWIRE_REQUIRE_REDIS=1`). The queue's own tests show the same run without
//! `--redis-min-replicas` losing acknowledged items (crates/searchwire-queue/tests/
//! redis_failover.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_support::{free_port, spawn_loads, spawn_relay_with, terminate, wait_drained, Tally};
use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};

fn env(var: &str) -> Option<String> {
    let required = std::env::var("SEARCHWIRE_REQUIRE_REDIS").is_ok_and(|v| v.trim() == "1");
    match std::env::var(var) {
        Ok(u) if !u.trim().is_empty() => Some(u.trim().to_owned()),
        _ => {
            assert!(!required, "SEARCHWIRE_REQUIRE_REDIS=1 but {var} is not set");
            eprintln!("relay_sentinel: skipped ({var} is not set)");
            None
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn curl(api: &str, method: &str, path: &str, body: &str) {
    let ok = Command::new("curl")
        .args(["-fsS", "-X", method, &format!("http://{api}{path}")])
        .args(["-H", "Content-Type: application/json", "-d", body])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "toxiproxy {method} {path}");
}

/// The primary's address as the first Sentinel names it.
fn named_primary(sentinel_port: u16) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &sentinel_port.to_string()])
        .args(["SENTINEL", "get-master-addr-by-name", "searchwire"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(":")
}

struct Set(PathBuf);

impl Drop for Set {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/redis"))
            .arg("sentinel-stop")
            .env("SEARCHWIRE_REDIS_DIR", &self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_on_sentinel_acknowledge_again_after_the_primary_is_lost_and_lose_nothing() {
    let Some(base) = env("SEARCHWIRE_TEST_REDIS_PORT_BASE") else {
        return;
    };
    let Some(api) = env("SEARCHWIRE_TEST_TOXIPROXY") else {
        return;
    };
    let base: u16 = base.parse::<u16>().unwrap() + 50;
    let (primary_port, proxy_port) = (base, base + 6);
    let proxy = format!("relay-replication-{}", std::process::id());
    curl(
        &api,
        "POST",
        "/proxies",
        &format!(
            r#"{{"name":"{proxy}","listen":"127.0.0.1:{proxy_port}","upstream":"127.0.0.1:{primary_port}"}}"#
        ),
    );
    let state = repo().join(format!(".redis/relay-sentinel-{}", std::process::id()));
    let out = Command::new(repo().join("scripts/redis"))
        .arg("sentinel-start")
        .env("SEARCHWIRE_REDIS_DIR", &state)
        .env("SEARCHWIRE_REDIS_PORT_BASE", base.to_string())
        .env(
            "SEARCHWIRE_REDIS_REPLICA_UPSTREAM",
            format!("127.0.0.1:{proxy_port}"),
        )
        .env("SEARCHWIRE_REDIS_FAILOVER_TIMEOUT", "60000")
        .output()
        .unwrap();
    let _set = Set(state);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8(out.stdout).unwrap();
    let primary = lines.lines().find(|l| l.starts_with("primary ")).unwrap();
    let f: Vec<&str> = primary.split(' ').collect();
    let (primary_addr, primary_pid, primary_data) = (f[1].to_owned(), f[2], f[3]);
    let sentinels = lines
        .lines()
        .find_map(|l| l.strip_prefix("sentinels "))
        .unwrap()
        .to_owned();
    curl(
        &api,
        "POST",
        &format!("/proxies/{proxy}/toxics"),
        r#"{"name":"lag","type":"latency","stream":"downstream","attributes":{"latency":300}}"#,
    );

    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    // Every cluster node refuses: every item the relays acknowledge is queued.
    bulk.fault_every(Some((1, BulkFault::Throttle)));
    let urls = cluster.urls().join(",");
    let args = [
        "--redis-sentinel",
        sentinels.as_str(),
        "--redis-master",
        "searchwire",
        "--redis-min-replicas",
        "1",
        "--lease-timeout",
        "2s",
        "--live-budget",
        "1s",
    ];
    let a = spawn_relay_with(&urls, free_port(), &args).await;
    let b = spawn_relay_with(&urls, free_port(), &args).await;
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let gens = spawn_loads(&[("a", a.addr), ("b", b.addr)], 4, 20, &stop, &tally);
    let queued = || tally.queued.load(Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while queued() < 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than 200 queued in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The machine is lost: the primary, its data, and the replication stream not yet sent.
    curl(
        &api,
        "POST",
        &format!("/proxies/{proxy}"),
        r#"{"enabled":false}"#,
    );
    assert!(Command::new("kill")
        .args(["-KILL", primary_pid])
        .status()
        .unwrap()
        .success());
    std::fs::remove_dir_all(primary_data).unwrap();
    let sentinel_port: u16 = sentinels
        .split(',')
        .next()
        .and_then(|s| s.rsplit_once(':'))
        .unwrap()
        .1
        .parse()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while named_primary(sentinel_port) == primary_addr {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no promotion within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let promoted = tokio::time::Instant::now();
    let at_promotion = queued();
    while queued() == at_promotion {
        assert!(
            promoted.elapsed() < Duration::from_secs(10),
            "no item queued within 10 s of the promotion"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovery = promoted.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for g in gens {
        g.await.unwrap();
    }
    bulk.fault_every(None);
    wait_drained(a.addr, Duration::from_secs(60)).await;
    wait_drained(b.addr, Duration::from_secs(60)).await;
    assert_eq!(terminate(a).await, Some(0));
    assert_eq!(terminate(b).await, Some(0));
    curl(&api, "DELETE", &format!("/proxies/{proxy}"), "");
    let acked = tally.acked.lock().unwrap().clone();
    let missing = acked
        .iter()
        .filter(|id| bulk.get("logs", id).is_none())
        .count();
    eprintln!(
        "{} acknowledged ({} queued), {missing} missing, acknowledged again {:.3} s after the \
         promotion",
        acked.len(),
        queued(),
        recovery.as_secs_f64()
    );
    assert_eq!(missing, 0);
    assert_eq!(bulk.max_writes(), 1);
}
