//! What the drop-in routes cost, side by side in one run against the in-process fake cluster:
//!
//! 1. the bulk path with and without gzip request bodies: documents per *relay* CPU-second
//!    (the relay runs on its own runtime whose threads are all named `relay-*`; their user +
//!    system time is read from `/proc/self/task/*/stat`, so neither the load generator nor
//!    the fake cluster is counted), and the answers gzip-compressed when the client asks;
//! 2. the latency a pass-through `_search` adds: one client, sequential keep-alive requests,
//!    p50/p99 direct to the fake node and through the relay;
//! 3. a gzip bomb (1 GiB of zeros, ~1 MiB compressed, made in a streaming way so the load
//!    generator holds only the compressed bytes) against the default 100 MiB limit: the
//!    answer and the process's peak resident set (`VmHWM`) before and after.
//!
//! With `SEARCHWIRE_BENCH_URLS=http://127.0.0.1:9201,...` the same rows run against those
//! real nodes instead (direct = the first URL).
//!
//! ```sh
//! cargo run --release -p searchwire-relay --example dropin_bench [-- CLIENTS REQUESTS BATCH SEARCHES]
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/target.rs"]
mod target;

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use searchwire::Client;
use searchwire_fake::{FakeBulk, FakeCluster};
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// One request on a keep-alive connection; reads one answer with a Content-Length.
async fn send(conn: &mut TcpStream, head: &str, body: &[u8]) -> u16 {
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let mut chunk = [0u8; 16 * 1024];
        let n = conn.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let h = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = h
            .lines()
            .find_map(|l| {
                l.strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        if buf.len() - end - 4 >= len {
            return h.split(' ').nth(1).unwrap().parse().unwrap();
        }
    }
}

/// User + system CPU seconds of this process's threads whose name starts with `relay`.
fn relay_cpu() -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("relay") {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // After the name: state is field 3 of stat(5); utime and stime are 14 and 15.
        let utime: u64 = fields[11].parse().unwrap_or(0);
        let stime: u64 = fields[12].parse().unwrap_or(0);
        total += utime + stime;
    }
    total as f64 / ticks
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The bulk bodies of one client, made before the clock starts.
fn bodies(tag: &str, c: usize, requests: usize, batch: usize, gz: bool) -> Vec<Vec<u8>> {
    (0..requests)
        .map(|r| {
            let mut body = String::with_capacity(batch * 220);
            for i in 0..batch {
                body.push_str(&format!(
                    "{{\"index\":{{\"_id\":\"{tag}-{c}-{r}-{i}\"}}}}\n{{\"@timestamp\":\"2026-12-01T21:00:00Z\",\"msg\":\"a log line of about two hundred bytes, with a host, a level and a message\",\"host\":\"web-{c}\",\"level\":\"info\",\"n\":{i}}}\n"
                ));
            }
            if gz {
                gzip(body.as_bytes())
            } else {
                body.into_bytes()
            }
        })
        .collect()
}

async fn bulk_row(
    label: &str,
    addr: SocketAddr,
    clients: usize,
    requests: usize,
    batch: usize,
    gz: bool,
    accept_gz: bool,
) {
    let tag: String = label.chars().filter(char::is_ascii_alphanumeric).collect();
    let all: Vec<Vec<Vec<u8>>> = (0..clients)
        .map(|c| bodies(&tag, c, requests, batch, gz))
        .collect();
    let wire: usize = all.iter().flatten().map(Vec::len).sum();
    let cpu0 = relay_cpu();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mine in all {
        tasks.push(tokio::spawn(async move {
            let mut conn = TcpStream::connect(addr).await.unwrap();
            conn.set_nodelay(true).unwrap();
            for body in mine {
                let head = format!(
                    "POST /bench/_bulk HTTP/1.1\r\nHost: b\r\nContent-Type: application/x-ndjson\r\n{}{}Content-Length: {}\r\n\r\n",
                    if gz { "Content-Encoding: gzip\r\n" } else { "" },
                    if accept_gz { "Accept-Encoding: gzip\r\n" } else { "" },
                    body.len()
                );
                assert_eq!(send(&mut conn, &head, &body).await, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = relay_cpu() - cpu0;
    let docs = (clients * requests * batch) as f64;
    println!(
        "| {label} | {:.1} | {:.0} | {:.2} | {:.0} | {:.1} |",
        wire as f64 / (1 << 20) as f64,
        docs / wall,
        cpu,
        docs / cpu.max(0.01),
        cpu * 1e6 / docs
    );
}

async fn search_row(label: &str, addr: SocketAddr, n: usize) {
    let body = br#"{"query":{"match":{"msg":"log"}},"size":10}"#;
    let head = format!(
        "POST /bench/_search HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.set_nodelay(true).unwrap();
    for _ in 0..n / 10 {
        send(&mut conn, &head, body).await; // warm-up
    }
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        assert_eq!(send(&mut conn, &head, body).await, 200);
        lat.push(t.elapsed());
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "| {label} | {n} | {:.0} | {:.0} |",
        pct(0.50).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6
    );
}

/// `VmHWM` (peak resident set) of this process, in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn bomb_row(addr: SocketAddr) {
    let zeros = vec![0u8; 1 << 20];
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    for _ in 0..1024 {
        e.write_all(&zeros).unwrap();
    }
    let bomb = e.finish().unwrap();
    drop(zeros);
    let before = peak_rss_mib();
    let head = format!(
        "POST /bench/_bulk HTTP/1.1\r\nHost: b\r\nContent-Type: application/x-ndjson\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        bomb.len()
    );
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let status = send(&mut conn, &head, &bomb).await;
    let took = started.elapsed();
    let after = peak_rss_mib();
    println!(
        "| 1 GiB of zeros, {:.2} MiB gzip, limit 100 MiB | {status} | {:.0} | {before:.0} | {after:.0} | {:.0} |",
        bomb.len() as f64 / (1 << 20) as f64,
        took.as_secs_f64() * 1e3,
        after - before
    );
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (clients, requests, batch, searches) = (
        *args.first().unwrap_or(&8),
        *args.get(1).unwrap_or(&100),
        *args.get(2).unwrap_or(&500),
        *args.get(3).unwrap_or(&5000),
    );
    // The load generator and the fake cluster: one runtime; the relay: another, its threads
    // named `relay-*` so that their CPU time can be read alone.
    let load = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("load")
        .enable_all()
        .build()
        .unwrap();
    let relay_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("relay")
        .enable_all()
        .build()
        .unwrap();
    let _fake;
    let (urls, direct, what) = match target::real_nodes() {
        Some((urls, addr)) => (urls, addr, "the real node"),
        None => {
            let (cluster, bulk) = load.block_on(async {
                let cluster = FakeCluster::start(1).await.unwrap();
                let bulk = FakeBulk::new();
                bulk.install(&cluster);
                (cluster, bulk)
            });
            let (urls, addr) = (cluster.urls(), cluster.node(0).addr());
            _fake = (cluster, bulk);
            (urls, addr, "the fake node")
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (addr, stop) = relay_rt.block_on(async {
        let client = Client::builder().nodes(urls).build().unwrap();
        let q = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
        let config = RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            deliver: false,
            ..RelayConfig::default()
        };
        let r = Relay::bind(config, client, q).await.unwrap();
        let addr = r.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(r.run(async move {
            let _ = rx.await;
        }));
        (addr, tx)
    });
    load.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        println!(
            "bulk: {clients} clients x {requests} requests x {batch} documents of ~200 B (keep-alive, one request in flight per client); the relay on one worker thread\n"
        );
        println!("| relay bulk path | MiB sent | docs/s | relay CPU s | docs per relay CPU-second | relay µs CPU per doc |\n|---|---|---|---|---|---|");
        bulk_row("plain bodies", addr, clients, requests, batch, false, false).await;
        bulk_row("gzip bodies", addr, clients, requests, batch, true, false).await;
        bulk_row("gzip bodies, gzip answers", addr, clients, requests, batch, true, true).await;
        bulk_row("plain bodies (again)", addr, clients, requests, batch, false, false).await;
        println!("\n_search: one client, {searches} sequential requests on one keep-alive connection\n");
        println!("| path | requests | p50 µs | p99 µs |\n|---|---|---|---|");
        search_row(&format!("direct to {what}"), direct, searches).await;
        search_row("through the relay (pass-through)", addr, searches).await;
        search_row(&format!("direct to {what} (again)"), direct, searches).await;
        search_row("through the relay (again)", addr, searches).await;
        println!("\ngzip bomb against the relay (default --max-body-bytes, 100 MiB)\n");
        println!("| body | status | ms | peak RSS before MiB | peak RSS after MiB | growth MiB |\n|---|---|---|---|---|---|");
        bomb_row(addr).await;
    });
    let _ = stop.send(());
    relay_rt.shutdown_timeout(Duration::from_secs(2));
}
