//! Documents per CPU-second of the bulk indexer against an instant-answering `_bulk`
//! server (for `docs/benchmarks.md`, and to compare with other bulk helpers on the same
//! server and documents).
//!
//! ```sh
//! # terminal 1: the server (its own process, so its CPU is not counted)
//! cargo run --release -p searchwire-bulk --example bulk_bench -- serve 127.0.0.1:9299
//! # terminal 2: the client: 1,000,000 documents of ~200 bytes, then of ~2 KB
//! cargo run --release -p searchwire-bulk --example bulk_bench -- run http://127.0.0.1:9299 1000000 200
//! cargo run --release -p searchwire-bulk --example bulk_bench -- run http://127.0.0.1:9299 200000 2000
//! ```
//!
//! The server answers every bulk request at once with one `{"index":{"status":201}}` item
//! per action (it counts the action lines; it parses nothing else). The client prints one
//! JSON line: documents, wall seconds, CPU seconds (user + system, from `/proc/self/stat`),
//! documents per second and per CPU-second, and peak RSS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use searchwire::Client;
use searchwire_bulk::{Action, BulkIndexer};
use searchwire_fake::{Behavior, FakeNode, Handler, Match};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match args.first().map(String::as_str) {
        Some("serve") => rt.block_on(serve(args.get(1).cloned())),
        Some("run") => {
            let url = args.get(1).expect("run URL DOCS SIZE").clone();
            let docs: usize = args.get(2).map_or(1_000_000, |s| s.parse().unwrap());
            let size: usize = args.get(3).map_or(200, |s| s.parse().unwrap());
            rt.block_on(run(url, docs, size));
        }
        _ => eprintln!("usage: bulk_bench serve [ADDR] | run URL DOCS SIZE"),
    }
}

/// The instant answer: one item per action line.
fn answer(body: &Bytes) -> Behavior {
    let mut actions = 0usize;
    let mut expect_source = false;
    for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if expect_source {
            expect_source = false;
            continue;
        }
        actions += 1;
        expect_source = !line.starts_with(b"{\"delete\"");
    }
    let mut out = String::with_capacity(30 + actions * 28);
    out.push_str("{\"errors\":false,\"items\":[");
    for i in 0..actions {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"index\":{\"status\":201,\"result\":\"created\"}}");
    }
    out.push_str("]}");
    Behavior::Respond {
        status: 200,
        headers: Vec::new(),
        body: Bytes::from(out),
    }
}

async fn serve(addr: Option<String>) {
    let node = FakeNode::start("bench").await.unwrap();
    node.set_recording(false);
    node.on(
        Match::Any,
        Behavior::Handler(Handler::new(|req| {
            if req.path.ends_with("/_bulk") {
                answer(req.body)
            } else {
                Behavior::Default
            }
        })),
    );
    // The fake listens on an ephemeral port; print it (ADDR is informational).
    let _ = addr;
    println!("{}", node.url());
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// (user + system CPU seconds, peak RSS in KiB) of this process.
fn cpu_and_rss() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the ")" of the command name: utime is field 14, stime 15 (1-based).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (cpu, rss)
}

async fn run(url: String, docs: usize, size: usize) {
    let client = Client::builder()
        .node(url)
        .health_refresh(false)
        .build()
        .unwrap();
    let ix = BulkIndexer::builder(client).build().unwrap();
    let pad = "x".repeat(size.saturating_sub(60));
    let (cpu0, _) = cpu_and_rss();
    let t0 = tokio::time::Instant::now();
    for i in 0..docs {
        let src = format!(
            "{{\"n\":{i},\"user\":\"user-{}\",\"msg\":\"{pad}\"}}",
            i % 1000
        );
        ix.add(Action::index("bench").source(src)).await.unwrap();
    }
    let stats = ix.close().await;
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, rss) = cpu_and_rss();
    let cpu = cpu1 - cpu0;
    assert_eq!(stats.indexed as usize, docs);
    println!(
        "{}",
        serde_json::json!({
            "docs": docs,
            "doc_bytes": size,
            "wall_s": (wall * 1000.0).round() / 1000.0,
            "cpu_s": cpu,
            "docs_per_s": (docs as f64 / wall).round(),
            "docs_per_cpu_s": (docs as f64 / cpu.max(0.01)).round(),
            "cpu_us_per_doc": (cpu * 1e6 / docs as f64 * 100.0).round() / 100.0,
            "requests": stats.requests,
            "peak_rss_kib": rss,
        })
    );
}
