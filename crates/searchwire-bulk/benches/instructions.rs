//! Instruction-count benchmarks of the hot paths, run under callgrind by
//! `scripts/instructions` (which compares them with `benchmarks/instructions.baseline`).
//!
//! `instructions SCENARIO N` sets the scenario up, warms it up, then runs it `N` times inside
//! one function whose name starts with `instr_measure_`; callgrind collects only inside
//! that function (`--toggle-collect`), on the calling thread, so setup, warm-up and the
//! in-process server's thread are not counted. Scenarios:
//!
//! - `request`: one `GET /` through a default `searchwire::Client` (retries, attempt
//!   timeout, budget, breaker, metrics all on) against a fake node (`searchwire-fake`) on
//!   its own thread; keep-alive connection, whole body read. Client on a current-thread
//!   tokio runtime.
//! - `bare`: the same request through a bare hyper-util legacy client (the reference the
//!   overhead goal is measured against; `request` − `bare` is searchwire's own cost).
//! - `raw`: the same request on one `hyper::client::conn::http1` connection held by the
//!   loop (no pool, no timeout, nothing else): the floor of any hyper client, reported for
//!   scale (`request` − `raw` is everything searchwire does beyond one bare exchange).
//! - `select`: one node pick on a 3-node client (`Client::__bench_select`).
//! - `bulk`: one batch of 100 `create` actions (~150-byte sources, ids given, the index name
//!   one shared `Arc<str>` as a caller writing many documents into one index holds it) prepared and
//!   encoded into a request body, and a 100-item `filter_path` response parsed
//!   (`searchwire_bulk::__bench_batch`).
//! - `indexer`: the same 100 `create` actions through a whole `BulkIndexer` (defaults, 100
//!   actions per request, ids given, so the same-id ordering key is on) and `flush`ed: the
//!   driver's per-action work (queues, ordering key, watermark, statistics), the request
//!   through the transport to a fake node (its `_bulk` store on its own thread, not counted)
//!   and the item responses. The indexer's driver runs on the measuring thread (current-thread
//!   runtime).
//!
//! Without arguments (e.g. under `cargo bench`) every scenario runs once natively as a smoke
//! test and prints its wall time per iteration.

// A benchmark: panics on setup failures are the right report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use searchwire::{Client, Request};

#[path = "../../searchwire/benches/support/bare.rs"]
mod bare;
use bare::{bare_client, bare_get, Bare};
use searchwire_bulk::Action;

const SCENARIOS: [&str; 6] = ["request", "bare", "raw", "select", "bulk", "indexer"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(s) if SCENARIOS.contains(&s) => {
            let n = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(100);
            run(s, n);
        }
        _ => {
            for s in SCENARIOS {
                let n = if s == "select" { 10_000 } else { 100 };
                let t = std::time::Instant::now();
                run(s, n);
                println!(
                    "{s}: {:.2} µs per iteration (native, wall)",
                    t.elapsed().as_secs_f64() * 1e6 / n as f64
                );
            }
        }
    }
}

fn run(scenario: &str, n: usize) {
    match scenario {
        "request" => {
            let url = fake_node();
            let rt = runtime();
            let client = client(url);
            rt.block_on(async {
                for _ in 0..50 {
                    sw_get(&client).await;
                }
            });
            instr_measure_request(&rt, &client, n);
        }
        "bare" => {
            let url = fake_node();
            let uri: http::Uri = format!("{url}/").parse().unwrap();
            let rt = runtime();
            let client = bare_client();
            rt.block_on(async {
                for _ in 0..50 {
                    bare_get(&client, &uri).await;
                }
            });
            instr_measure_bare(&rt, &client, &uri, n);
        }
        "raw" => {
            let url = fake_node();
            let uri: http::Uri = format!("{url}/").parse().unwrap();
            let rt = runtime();
            let mut conn = rt.block_on(raw_connect(&uri));
            rt.block_on(async {
                for _ in 0..50 {
                    raw_get(&mut conn, &uri).await;
                }
            });
            instr_measure_raw(&rt, &mut conn, &uri, n);
        }
        "select" => {
            let client = Client::__bench_client(3, &[8, 16, 24]);
            for _ in 0..100 {
                black_box(client.__bench_select());
            }
            instr_measure_select(&client, n);
        }
        "bulk" => {
            let sources = log_sources();
            let item = r#"{"create":{"status":201,"result":"created"}}"#;
            let response = format!(
                r#"{{"errors":false,"items":[{}]}}"#,
                vec![item; sources.len()].join(",")
            );
            bulk_batches(&sources, response.as_bytes(), 1);
            instr_measure_bulk(&sources, response.as_bytes(), n);
        }
        "indexer" => {
            let url = fake_node_with(true);
            let rt = runtime();
            let client = client(url);
            let ix = rt.block_on(async {
                searchwire_bulk::BulkIndexer::builder(client)
                    .batch_actions(100)
                    .jitter(false)
                    .seed(7)
                    .build()
                    .unwrap()
            });
            let sources = log_sources();
            rt.block_on(indexer_batches(&ix, &sources, 0, 5));
            instr_measure_indexer(&rt, &ix, &sources, n);
            let stats = rt.block_on(ix.close());
            assert_eq!(stats.dead_lettered, 0);
            assert_eq!(stats.created, 100 * (n as u64 + 5));
        }
        _ => unreachable!("checked by the caller"),
    }
}

#[inline(never)]
fn instr_measure_request(rt: &tokio::runtime::Runtime, client: &Client, n: usize) {
    rt.block_on(async {
        for _ in 0..n {
            black_box(sw_get(client).await);
        }
    });
}

#[inline(never)]
fn instr_measure_bare(rt: &tokio::runtime::Runtime, client: &Bare, uri: &http::Uri, n: usize) {
    rt.block_on(async {
        for _ in 0..n {
            black_box(bare_get(client, uri).await);
        }
    });
}

#[inline(never)]
fn instr_measure_raw(rt: &tokio::runtime::Runtime, conn: &mut Raw, uri: &http::Uri, n: usize) {
    rt.block_on(async {
        for _ in 0..n {
            black_box(raw_get(conn, uri).await);
        }
    });
}

/// One hyper HTTP/1 connection, driven by its own task.
type Raw = hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>;

async fn raw_connect(uri: &http::Uri) -> Raw {
    let addr = format!("{}:{}", uri.host().unwrap(), uri.port_u16().unwrap());
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (tx, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    tx
}

/// What [`bare_get`] sends (origin form, `Host`, the same `user-agent`), on `conn`.
async fn raw_get(conn: &mut Raw, uri: &http::Uri) -> Bytes {
    use http_body_util::BodyExt;
    let req = http::Request::builder()
        .uri(uri.path())
        .header(http::header::HOST, uri.authority().unwrap().as_str())
        .header(
            http::header::USER_AGENT,
            concat!("searchwire/", env!("CARGO_PKG_VERSION")),
        )
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    conn.ready().await.unwrap();
    let resp = conn.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap().to_bytes()
}

#[inline(never)]
fn instr_measure_select(client: &Client, n: usize) {
    for _ in 0..n {
        black_box(client.__bench_select());
    }
}

#[inline(never)]
fn instr_measure_indexer(
    rt: &tokio::runtime::Runtime,
    ix: &searchwire_bulk::BulkIndexer,
    sources: &[Bytes],
    n: usize,
) {
    rt.block_on(indexer_batches(ix, sources, 5, n));
}

/// Batches `first..first + n` of 100 `create` actions (unique ids) through `ix`, each
/// flushed (sent, answered, finished) before the next.
async fn indexer_batches(
    ix: &searchwire_bulk::BulkIndexer,
    sources: &[Bytes],
    first: usize,
    n: usize,
) {
    let index: Arc<str> = Arc::from("logs");
    for b in first..first + n {
        for (i, s) in sources.iter().enumerate() {
            let a = Action::create(index.clone())
                .id(format!("doc-{b}-{i}"))
                .source(s.clone());
            black_box(ix.add(a).await.unwrap());
        }
        ix.flush().await;
    }
}

/// 100 log-line documents of ~150 bytes.
fn log_sources() -> Vec<Bytes> {
    (0..100)
        .map(|i| {
            Bytes::from(format!(
                r#"{{"@timestamp":"2026-11-30T12:00:{:02}Z","level":"info","service":"checkout","message":"order {i} placed","n":{i}}}"#,
                i % 60
            ))
        })
        .collect()
}

#[inline(never)]
fn instr_measure_bulk(sources: &[Bytes], response: &[u8], n: usize) {
    bulk_batches(sources, response, n);
}

/// `n` batches; the warm-up calls it directly (not counted), the measurement through
/// `instr_measure_bulk`.
fn bulk_batches(sources: &[Bytes], response: &[u8], n: usize) {
    let index: Arc<str> = Arc::from("logs");
    for b in 0..n {
        let actions: Vec<Action> = sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Action::create(index.clone())
                    .id(format!("doc-{b}-{i}"))
                    .source(s.clone())
            })
            .collect();
        let (len, items) = searchwire_bulk::__bench_batch(actions, response).unwrap();
        assert_eq!(items, sources.len());
        black_box(len);
    }
}

/// A default client of one node.
fn client(url: String) -> Client {
    Client::builder()
        .node(url)
        .read_environment(false)
        .build()
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One fake node (recording off) on its own thread and runtime; returns its URL.
fn fake_node() -> String {
    fake_node_with(false)
}

/// [`fake_node`], with the fake `_bulk` store installed when `bulk`.
fn fake_node_with(bulk: bool) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("fake-node".into())
        .spawn(move || {
            runtime().block_on(async move {
                let cluster = searchwire_fake::FakeCluster::start(1).await.unwrap();
                cluster.node(0).set_recording(false);
                if bulk {
                    searchwire_fake::FakeBulk::new().install(&cluster);
                }
                tx.send(cluster.node(0).url()).unwrap();
                std::future::pending::<()>().await;
            });
        })
        .unwrap();
    rx.recv().unwrap()
}

async fn sw_get(client: &Client) -> Bytes {
    let resp = client.send(Request::get("/")).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.body().clone()
}
