//! Throughput and acknowledgement latency of the relay against the in-process fake cluster,
//! and the cost of durability: the same load sent straight to the fake cluster, through the
//! relay when the cluster takes everything (`live`), and through the relay when every item is
//! queued (`queued-embedded`: redb with group commit; `queued-redis` with
//! `SEARCHWIRE_TEST_REDIS=redis://...`: Redis with `appendfsync always` from `scripts/redis`).
//!
//! With `SEARCHWIRE_BENCH_URLS=http://127.0.0.1:9201,...` the same rows run against those
//! real nodes instead (direct = to the first URL, no relay and no queue), plus the live path
//! with a Redis queue when `SEARCHWIRE_TEST_REDIS` is set (`benchmarks/relay.sh` runs both).
//!
//! ```sh
//! cargo run --release -p searchwire-relay --example relay_bench [-- CLIENTS REQUESTS BATCH]
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/target.rs"]
mod target;

use std::net::SocketAddr;
use std::time::Duration;

use searchwire::Client;
use searchwire_fake::{FakeBulk, FakeCluster};
use searchwire_queue::{EmbeddedConfig, Queue, RedisConfig};
use searchwire_relay::{Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// One keep-alive connection; reads one answer with a Content-Length.
async fn post(conn: &mut TcpStream, body: &[u8]) -> u16 {
    let head = format!(
        "POST /bench/_bulk HTTP/1.1\r\nHost: b\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let mut chunk = [0u8; 16 * 1024];
        let n = conn.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((h, b)) = text.split_once("\r\n\r\n") {
            let len: usize = h
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if b.len() >= len {
                return h.split(' ').nth(1).unwrap().parse().unwrap();
            }
        }
    }
}

async fn run(label: &str, addr: SocketAddr, clients: usize, requests: usize, batch: usize) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let tag: String = label.chars().filter(char::is_ascii_alphanumeric).collect();
        tasks.push(tokio::spawn(async move {
            let mut conn = TcpStream::connect(addr).await.unwrap();
            conn.set_nodelay(true).unwrap();
            let mut lat = Vec::with_capacity(requests);
            for r in 0..requests {
                let mut body = String::with_capacity(batch * 160);
                for i in 0..batch {
                    body.push_str(&format!(
                        "{{\"index\":{{\"_id\":\"{tag}-{c}-{r}-{i}\"}}}}\n{{\"msg\":\"a log line of about one hundred bytes, give or take a few\",\"n\":{i}}}\n"
                    ));
                }
                let t = Instant::now();
                assert_eq!(post(&mut conn, body.as_bytes()).await, 200);
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all: Vec<Duration> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    let docs = (clients * requests * batch) as f64;
    println!(
        "| {label} | {:.0} | {:.1} | {:.1} |",
        docs / wall.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3
    );
}

async fn relay(
    urls: &[String],
    queue: Queue,
    queue_only: bool,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let client = Client::builder().nodes(urls).build().unwrap();
    let config = RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        queue_only,
        deliver: false,
        ..RelayConfig::default()
    };
    let r = Relay::bind(config, client, queue).await.unwrap();
    let addr = r.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(r.run(async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (clients, requests, batch) = (
        *args.first().unwrap_or(&8),
        *args.get(1).unwrap_or(&200),
        *args.get(2).unwrap_or(&100),
    );
    println!("{clients} clients x {requests} requests x {batch} documents (keep-alive, one request in flight per client)\n");
    println!("| path | docs/s | ack p50 ms | ack p99 ms |\n|---|---|---|---|");
    // The fake cluster, or the real nodes named in SEARCHWIRE_BENCH_URLS.
    let _fake;
    let (urls, direct, what) = match target::real_nodes() {
        Some((urls, addr)) => (urls, addr, "the real nodes"),
        None => {
            let cluster = FakeCluster::start(1).await.unwrap();
            let bulk = FakeBulk::new();
            bulk.install(&cluster);
            let (urls, addr) = (cluster.urls(), cluster.node(0).addr());
            _fake = (cluster, bulk);
            (urls, addr, "the fake cluster")
        }
    };
    run(
        &format!("direct to {what} (no relay, no queue)"),
        direct,
        clients,
        requests,
        batch,
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let q = Queue::open_embedded(EmbeddedConfig::new(dir.path().join("live"))).unwrap();
    let (addr, stop) = relay(&urls, q, false).await;
    run(
        "relay, live, embedded queue (cluster takes all)",
        addr,
        clients,
        requests,
        batch,
    )
    .await;
    let _ = stop.send(());

    let redis = std::env::var("SEARCHWIRE_TEST_REDIS").ok();
    let redis_queue = |tag: &'static str| {
        let url = redis.clone();
        async move {
            let mut cfg = RedisConfig::new(url?);
            cfg.stream = format!("relay-bench-{tag}-{}", std::process::id());
            Some(Queue::connect_redis(cfg).await.unwrap())
        }
    };
    if let Some(q) = redis_queue("live").await {
        let (addr, stop) = relay(&urls, q, false).await;
        run(
            "relay, live, Redis queue (cluster takes all)",
            addr,
            clients,
            requests,
            batch,
        )
        .await;
        let _ = stop.send(());
    }

    let q = Queue::open_embedded(EmbeddedConfig::new(dir.path().join("queued"))).unwrap();
    let (addr, stop) = relay(&urls, q, true).await;
    run(
        "relay, every item queued (embedded)",
        addr,
        clients,
        requests,
        batch,
    )
    .await;
    let _ = stop.send(());

    if let Some(q) = redis_queue("queued").await {
        let (addr, stop) = relay(&urls, q, true).await;
        run(
            "relay, every item queued (Redis)",
            addr,
            clients,
            requests,
            batch,
        )
        .await;
        let _ = stop.send(());
    }
}
