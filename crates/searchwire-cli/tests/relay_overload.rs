//! Bounded under overload, against real parts: the real `searchwire relay` in front of the
//! fake cluster answering every item 429, so everything it acknowledges is queued.
//! - At `--max-queue-bytes` new writes are answered 429 with `Retry-After` and an
//!   `es_rejected_execution_exception` body, readiness is 503, and once the cluster takes
//!   writes again the backlog drains and writes are taken again.
//! - On a real full disk (an 8 MiB tmpfs, mounted by the test when it runs as root): the
//!   default limits answer 429 before the disk fills; with the limits off, the append that
//!   meets the full disk is a 503 for its items. No item answered `queued` is lost: all
//!   are delivered once space is back.
//! - A Redis OOM (`maxmemory`, a private redis-server) while appending is a 503 for those
//!   items, and every acknowledged one is delivered once Redis has room.
//!
//! Every acknowledged id is recorded and looked up in the fake cluster at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_support::{
    free_port, health, load, spawn_relay_with, terminate, wait_drained, Load, Tally,
};
use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A raw HTTP answer: status, headers (lower-case names), body.
async fn post_bulk(addr: SocketAddr, body: &str) -> (u16, String, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /_bulk HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// What a run of requests saw.
#[derive(Default, Debug)]
struct Seen {
    /// Ids answered 200 `queued` or indexed: the relay holds them.
    acked: BTreeSet<String>,
    /// Whole requests answered 429.
    rejected: u64,
    /// Items answered 429 inside a 200.
    items_429: u64,
    /// Items answered 503 (the queue's append failed).
    items_503: u64,
    /// The first whole-request 429: its head and body.
    first_429: Option<(String, Value)>,
}

fn body(prefix: &str, n: usize, bytes: usize) -> String {
    let pad = "x".repeat(bytes);
    (0..n)
        .map(|i| {
            format!("{{\"index\":{{\"_index\":\"load\",\"_id\":\"{prefix}-{i}\"}}}}\n{{\"pad\":\"{pad}\"}}\n")
        })
        .collect()
}

/// Sends requests of `n` items until `stop(seen)` or `max` requests.
async fn send_until(
    addr: SocketAddr,
    tag: &str,
    n: usize,
    bytes: usize,
    max: usize,
    seen: &mut Seen,
    stop: impl Fn(&Seen) -> bool,
) {
    for r in 0..max {
        if stop(seen) {
            return;
        }
        let (status, head, v) = post_bulk(addr, &body(&format!("{tag}{r}"), n, bytes)).await;
        match status {
            200 => {
                for item in v["items"].as_array().unwrap() {
                    let it = &item["index"];
                    match it["status"].as_u64() {
                        Some(200 | 201) => {
                            seen.acked.insert(it["_id"].as_str().unwrap().to_owned());
                        }
                        Some(429) => {
                            assert_eq!(
                                it["error"]["type"], "es_rejected_execution_exception",
                                "{it}"
                            );
                            seen.items_429 += 1;
                        }
                        Some(503) => {
                            assert_eq!(it["error"]["type"], "searchwire_queue_unavailable", "{it}");
                            seen.items_503 += 1;
                        }
                        other => panic!("unexpected item status {other:?}: {it}"),
                    }
                }
            }
            429 => {
                seen.rejected += 1;
                seen.first_429.get_or_insert((head, v));
            }
            other => panic!("unexpected status {other}: {v}"),
        }
    }
}

async fn wait_delivered(bulk: &FakeBulk, acked: &BTreeSet<String>, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ids: BTreeSet<String> = bulk.ids("load").into_iter().collect();
        let missing: Vec<_> = acked.difference(&ids).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} acknowledged items were never delivered, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn throttled_cluster_bulk() -> FakeBulk {
    let bulk = FakeBulk::new();
    bulk.fault_every(Some((1, BulkFault::Throttle)));
    bulk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_queue_cap_writes_get_429_and_readiness_503_until_the_backlog_drains() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = throttled_cluster_bulk();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let relay = spawn_relay_with(
        &cluster.urls().join(","),
        free_port(),
        &[
            "--queue-dir",
            d,
            "--max-queue-bytes",
            "64KiB",
            "--min-free-disk-bytes",
            "0",
            "--live-budget",
            "300ms",
        ],
    )
    .await;
    let mut seen = Seen::default();
    send_until(relay.addr, "cap", 10, 500, 200, &mut seen, |s| {
        s.rejected >= 3
    })
    .await;
    assert!(seen.rejected >= 3, "never refused: {seen:?}");
    let (head, v) = seen.first_429.clone().unwrap();
    assert!(head.contains("\r\nretry-after: 5"), "{head}");
    assert_eq!(v["error"]["type"], "es_rejected_execution_exception");
    assert_eq!(
        v["error"]["root_cause"][0]["type"],
        "es_rejected_execution_exception"
    );
    assert_eq!(v["status"], 429);
    // Nothing beyond the cap was acknowledged: ~600 stored bytes per item, 64 KiB.
    assert!(
        !seen.acked.is_empty() && seen.acked.len() <= 65536 / 500,
        "{} acknowledged",
        seen.acked.len()
    );
    let (status, h) = health(relay.addr).await.unwrap();
    assert_eq!(status, 503, "{h}");
    assert_eq!(h["overloaded"], true, "{h}");
    assert!(
        h["overloaded_reason"]
            .as_str()
            .unwrap()
            .contains("--max-queue-bytes"),
        "{h}"
    );
    assert_eq!(
        h["backlog"].as_u64().unwrap(),
        seen.acked.len() as u64,
        "{h}"
    );

    // The cluster recovers: the backlog drains, readiness and writes come back.
    bulk.fault_every(None);
    wait_delivered(&bulk, &seen.acked, Duration::from_secs(60)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while health(relay.addr).await.map(|h| h.0) != Some(200) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "readiness stayed 503: {:?}",
            health(relay.addr).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, v) = post_bulk(relay.addr, &body("after", 3, 10)).await;
    assert_eq!((status, v["errors"].as_bool()), (200, Some(false)), "{v}");
    assert_eq!(terminate(relay).await, Some(0));
}

/// An 8 MiB tmpfs, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Option<Tmpfs> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: after a failed assertion a relay killed on drop may still hold the file.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_refused_before_and_a_clean_503_when_met_and_nothing_acknowledged_is_lost() {
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let Some(fs) = Tmpfs::mount(&mnt) else {
        assert!(
            std::env::var("SEARCHWIRE_REQUIRE_TMPFS").is_err(),
            "SEARCHWIRE_REQUIRE_TMPFS is set but a tmpfs cannot be mounted (needs root)"
        );
        eprintln!("relay_overload: full-disk test skipped (cannot mount a tmpfs: not root?)");
        return;
    };
    let queue = fs.0.join("queue");
    let q = queue.to_str().unwrap();
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = throttled_cluster_bulk();
    bulk.install(&cluster);
    let urls = cluster.urls().join(",");
    let mut seen = Seen::default();

    // Room to free at the end: a redb file on a full disk cannot even delete (copy on
    // write), so the last step needs space back.
    let ballast = fs.0.join("ballast");
    std::fs::write(&ballast, vec![1u8; 2 << 20]).unwrap();

    // 1. The default limits (half the free disk, a floor of 5 %): 429 before the disk fills.
    let relay = spawn_relay_with(
        &urls,
        free_port(),
        &["--queue-dir", q, "--live-budget", "300ms"],
    )
    .await;
    send_until(relay.addr, "default", 50, 2000, 400, &mut seen, |s| {
        s.rejected > 0
    })
    .await;
    assert!(
        seen.rejected > 0,
        "the default limits never refused: {seen:?}"
    );
    assert_eq!(
        seen.items_503, 0,
        "the disk filled before the limits refused: {seen:?}"
    );
    let (status, h) = health(relay.addr).await.unwrap();
    assert_eq!(
        (status, h["overloaded"].as_bool()),
        (503, Some(true)),
        "{h}"
    );
    assert_eq!(terminate(relay).await, Some(0));

    // 2. The limits off: the disk really fills; the append that meets it is a 503.
    let relay = spawn_relay_with(
        &urls,
        free_port(),
        &[
            "--queue-dir",
            q,
            "--live-budget",
            "300ms",
            "--max-queue-bytes",
            "1TiB",
            "--min-free-disk-bytes",
            "0",
        ],
    )
    .await;
    send_until(relay.addr, "full", 50, 2000, 400, &mut seen, |s| {
        s.items_503 > 0
    })
    .await;
    assert!(seen.items_503 > 0, "the disk never filled: {seen:?}");
    let _ = terminate(relay).await;

    // 3. Space is back: a relay on the same queue delivers every acknowledged item.
    std::fs::remove_file(&ballast).unwrap();
    assert!(
        nix_free(&fs.0) >= 1 << 20,
        "the ballast's space is free again"
    );
    bulk.fault_every(None);
    let relay = spawn_relay_with(&urls, free_port(), &["--queue-dir", q]).await;
    wait_delivered(&bulk, &seen.acked, Duration::from_secs(120)).await;
    assert_eq!(terminate(relay).await, Some(0));
    drop(fs);
}

/// Free bytes of the filesystem at `p` (`df`, in 1K blocks).
fn nix_free(p: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-k", "--output=avail"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// A private redis-server with `maxmemory` and no persistence, killed on drop.
struct Redis {
    child: std::process::Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn redis_cmd(port: u16, args: &[&str]) -> String {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_oom_while_appending_is_a_clean_503_and_nothing_acknowledged_is_lost() {
    if std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("SEARCHWIRE_REQUIRE_REDIS").is_err(),
            "SEARCHWIRE_REQUIRE_REDIS is set but redis-server is missing"
        );
        eprintln!("relay_overload: Redis OOM test skipped (no redis-server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let redis = Redis { child, port };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "redis-server did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = throttled_cluster_bulk();
    bulk.install(&cluster);
    let relay = spawn_relay_with(
        &cluster.urls().join(","),
        free_port(),
        &["--redis", &url, "--live-budget", "300ms"],
    )
    .await;
    let mut seen = Seen::default();
    send_until(relay.addr, "oom", 50, 2000, 400, &mut seen, |s| {
        s.items_503 > 0
    })
    .await;
    assert!(
        seen.items_503 > 0,
        "Redis never ran out of memory: {seen:?}"
    );
    assert!(!seen.acked.is_empty());
    // Redis has room again and the cluster takes writes: every acknowledged item lands.
    assert!(redis_cmd(port, &["CONFIG", "SET", "maxmemory", "0"])
        .await
        .starts_with("+OK"));
    bulk.fault_every(None);
    wait_delivered(&bulk, &seen.acked, Duration::from_secs(120)).await;
    assert_eq!(terminate(relay).await, Some(0));
}

/// SIGKILLed while at `--max-queue-bytes`, four times at seeded moments, with appends, 429s
/// and acks racing (each round drains the backlog, then the cluster throttles 90% of the
/// item attempts, so most items are queued up to the cap and the queue drains slowly): after the cluster recovers, every item the relay
/// acknowledged is in the store, written exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_at_the_queue_cap_loses_no_acknowledged_document() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let urls = cluster.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_owned();
    let port = free_port();
    let args = [
        "--queue-dir",
        d.as_str(),
        "--max-queue-bytes",
        "32KiB",
        "--min-free-disk-bytes",
        "0",
        "--live-budget",
        "300ms",
    ];
    let tally = Arc::new(Tally::default());
    let mut seed: u64 = 0x5eed_cafe;
    for round in 0..4 {
        let relay = spawn_relay_with(&urls, port, &args).await;
        let stop = Arc::new(AtomicBool::new(false));
        let spec = Load {
            addr: relay.addr,
            index: "logs".into(),
            prefix: format!("k{round}"),
            tasks: 3,
            batch: 10,
            limit: u64::MAX,
        };
        // The backlog the last kill left drains a little first, so that every round
        // appends up to the cap again under the load.
        bulk.random_faults(None);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !health(relay.addr).await.is_some_and(|(status, h)| {
            // queue_bytes too: the estimate is refreshed every second, after the count.
            status == 200
                && h["backlog"].as_u64().is_some_and(|b| b <= 10)
                && h["queue_bytes"].as_u64().is_some_and(|b| b <= 8192)
        }) {
            assert!(tokio::time::Instant::now() < deadline, "never drained");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bulk.random_faults(Some((0xcafe + round, 0.9, 0.0)));
        let gen = tokio::spawn(load(spec, stop.clone(), tally.clone()));
        // At the cap: readiness says overloaded.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((503, h)) = health(relay.addr).await {
                if h["overloaded"] == true {
                    break;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: the relay never reached its cap: {:?}",
                health(relay.addr).await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        tokio::time::sleep(Duration::from_millis((seed >> 33) % 500)).await;
        let mut child = relay.child;
        child.start_kill().unwrap(); // SIGKILL
        assert_eq!(
            child.wait().await.unwrap().code(),
            None,
            "killed by a signal"
        );
        stop.store(true, Ordering::Relaxed);
        gen.await.unwrap();
        eprintln!(
            "round {round}: {} acknowledged so far ({} queued)",
            tally.acked.lock().unwrap().len(),
            tally.queued.load(Ordering::Relaxed)
        );
    }
    assert!(
        tally.queued.load(Ordering::Relaxed) > 4 * 40,
        "items were queued up to the cap in every round: {}",
        tally.queued.load(Ordering::Relaxed)
    );
    bulk.random_faults(None);
    let relay = spawn_relay_with(&urls, port, &args).await;
    wait_drained(relay.addr, Duration::from_secs(60)).await;
    let acked = tally.acked.lock().unwrap().clone();
    let ids: BTreeSet<String> = bulk.ids("logs").into_iter().collect();
    let missing: Vec<_> = acked.difference(&ids).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged items lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    for id in &acked {
        assert_eq!(bulk.writes("logs", id), 1, "{id} written more than once");
    }
    assert_eq!(terminate(relay).await, Some(0));
}
