//! The relay as a drop-in endpoint, against the in-process fake cluster: compressed bodies
//! and answers, pass-through of every other route (answers unchanged, headers that matter
//! passed both ways, a non-read-only POST never repeated), the credential rule, discovery
//! and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use searchwire::Client;
use searchwire_fake::{Behavior, FakeBulk, FakeCluster, Match, Recorded};
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{AuthConfig, PassRule, Relay, RelayConfig, ShutdownReport};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

struct Setup {
    cluster: FakeCluster,
    bulk: FakeBulk,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<ShutdownReport>,
    _dir: tempfile::TempDir,
}

fn config() -> RelayConfig {
    RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        live_budget: Duration::from_secs(2),
        drain_timeout: Duration::from_millis(300),
        drain_grace: Duration::ZERO,
        ..RelayConfig::default()
    }
}

/// The relay's cluster credentials in the tests: `relay:relay-pw`.
const RELAY_BASIC: &str = "Basic cmVsYXk6cmVsYXktcHc=";

async fn start(config: RelayConfig) -> Setup {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let client = Client::builder()
        .nodes(cluster.urls())
        .basic_auth("relay", "relay-pw")
        .read_environment(false)
        .build()
        .unwrap();
    let relay = Relay::bind(config, client, queue).await.unwrap();
    let addr = relay.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = rx.await;
    }));
    let a = call(addr, "GET", "/health/live", &[], b"").await;
    assert_eq!(a.status, 200, "the relay serves");
    Setup {
        cluster,
        bulk,
        addr,
        stop: Some(tx),
        task,
        _dir: dir,
    }
}

impl Setup {
    async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.await.unwrap();
    }

    /// What the cluster received on `path` (the relay's own `GET /` looks left out).
    fn seen(&self, path: &str) -> Vec<Recorded> {
        self.cluster
            .node(0)
            .requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }
}

/// An answer: status, lower-cased headers, raw body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on its own connection; the whole answer (bodies are sent with a length).
async fn call(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let body = out.get(split + 4..).unwrap_or_default().to_vec();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body,
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

const NDJSON: (&str, &str) = ("Content-Type", "application/x-ndjson");

fn bulk_body(ids: std::ops::Range<u32>) -> Vec<u8> {
    let mut b = String::new();
    for i in ids {
        b.push_str(&format!(
            "{{\"index\":{{\"_id\":\"{i}\"}}}}\n{{\"n\":{i}}}\n"
        ));
    }
    b.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_and_deflate_bulk_bodies_are_decoded() {
    let s = start(config()).await;
    let gz = gzip(&bulk_body(0..10));
    let a = call(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[NDJSON, ("Content-Encoding", "gzip")],
        &gz,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["errors"], false, "{}", a.text());
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&bulk_body(10..15)).unwrap();
    let a = call(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[NDJSON, ("Content-Encoding", "deflate")],
        &z.finish().unwrap(),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(s.bulk.count("logs"), 15);
    // A pass-through body arrives at the cluster decoded, without the coding header.
    let q = json!({"query": {"match_all": {}}});
    let a = call(
        s.addr,
        "POST",
        "/logs/_search",
        &[
            ("Content-Type", "application/json"),
            ("Content-Encoding", "gzip"),
        ],
        &gzip(q.to_string().as_bytes()),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    let seen = s.seen("/logs/_search");
    assert_eq!(serde_json::from_slice::<Value>(&seen[0].body).unwrap(), q);
    assert_eq!(seen[0].header("content-encoding"), None);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_is_a_413_and_nothing_reaches_the_cluster() {
    let s = start(RelayConfig {
        max_body_bytes: 1 << 20,
        ..config()
    })
    .await;
    // 64 MiB of zeros in ~64 KiB: far over the 1 MiB limit once inflated.
    let bomb = gzip(&vec![0u8; 64 << 20]);
    assert!(bomb.len() < 1 << 20);
    for path in ["/logs/_bulk", "/logs/_search"] {
        let a = call(
            s.addr,
            "POST",
            path,
            &[NDJSON, ("Content-Encoding", "gzip")],
            &bomb,
        )
        .await;
        assert_eq!(a.status, 413, "{path}: {}", a.text());
        let v = a.json();
        assert_eq!(v["error"]["type"], "content_too_long_exception");
        assert!(
            v["error"]["reason"]
                .as_str()
                .unwrap()
                .contains("decompressed"),
            "{v}"
        );
    }
    assert_eq!(s.bulk.items_seen(), 0);
    assert!(s.seen("/logs/_search").is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_encoding_is_a_415_naming_it_and_bad_gzip_a_400() {
    let s = start(config()).await;
    for path in ["/logs/_bulk", "/logs/_search", "/logs/_count"] {
        let a = call(
            s.addr,
            "POST",
            path,
            &[NDJSON, ("Content-Encoding", "br")],
            b"\x0b\x02\x80",
        )
        .await;
        assert_eq!(a.status, 415, "{path}: {}", a.text());
        assert!(a.json()["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("[br]"));
    }
    let a = call(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[NDJSON, ("Content-Encoding", "gzip")],
        &bulk_body(0..1),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(a.json()["error"]["type"], "parse_exception");
    assert!(a.text().contains("not valid gzip"), "{}", a.text());
    assert_eq!(s.bulk.items_seen(), 0);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_gzip_compressed_when_the_client_accepts_it() {
    let s = start(config()).await;
    let accept = ("Accept-Encoding", "gzip, deflate");
    let a = call(s.addr, "GET", "/", &[accept], b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let v: Value = serde_json::from_slice(&gunzip(&a.body)).unwrap();
    assert_eq!(v["name"], "searchwire-relay");
    let a = call(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[NDJSON, accept],
        &bulk_body(0..3),
    )
    .await;
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let v: Value = serde_json::from_slice(&gunzip(&a.body)).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 3);
    // A pass-through answer the cluster left uncompressed is compressed by the relay.
    let a = call(s.addr, "GET", "/_cluster/health", &[accept], b"").await;
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let v: Value = serde_json::from_slice(&gunzip(&a.body)).unwrap();
    assert!(v["status"].is_string(), "{v}");
    // Without Accept-Encoding: plain.
    let a = call(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(a.header("content-encoding"), None);
    assert_eq!(a.json()["name"], "searchwire-relay");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_answers_and_headers_are_the_clusters() {
    let s = start(config()).await;
    let node = s.cluster.node(0);
    node.on(
        Match::MethodPath("POST".into(), "/logs/_search".into()),
        Behavior::Respond {
            status: 200,
            headers: vec![
                (
                    "Content-Type".into(),
                    "application/json; charset=UTF-8".into(),
                ),
                (
                    "Warning".into(),
                    "299 OpenSearch-2.19.0 \"deprecated\"".into(),
                ),
                ("X-Opaque-Id".into(), "job-7".into()),
                ("X-Elastic-Product".into(), "Elasticsearch".into()),
            ],
            body: bytes::Bytes::from_static(b"{\"hits\":{\"total\":{\"value\":3}}}"),
        },
    );
    node.on(
        Match::MethodPath("PUT".into(), "/logs".into()),
        Behavior::json(
            400,
            json!({"error": {"type": "resource_already_exists_exception", "reason": "index [logs] already exists"}, "status": 400}),
        ),
    );
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let a = call(
        s.addr,
        "POST",
        "/logs/_search?size=0&q=a%20b",
        &[
            ("Content-Type", "application/json"),
            ("X-Opaque-Id", "job-7"),
            ("traceparent", tp),
            ("X-Searchwire-Priority", "3"),
        ],
        b"{}",
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body, b"{\"hits\":{\"total\":{\"value\":3}}}");
    assert_eq!(
        a.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    assert_eq!(
        a.header("warning"),
        Some("299 OpenSearch-2.19.0 \"deprecated\"")
    );
    assert_eq!(a.header("x-opaque-id"), Some("job-7"));
    assert_eq!(a.header("x-elastic-product"), Some("Elasticsearch"));
    let r = &s.seen("/logs/_search")[0];
    assert_eq!(
        r.query.as_deref(),
        Some("size=0&q=a%20b"),
        "the query as sent"
    );
    assert_eq!(r.header("x-opaque-id"), Some("job-7"));
    assert_eq!(r.header("traceparent"), Some(tp));
    assert_eq!(r.header("x-searchwire-priority"), None);
    // The cluster's error is the answer, status and body.
    let a = call(s.addr, "PUT", "/logs", &[], b"").await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.json()["error"]["type"],
        "resource_already_exists_exception"
    );
    // HEAD: status only.
    let a = call(s.addr, "HEAD", "/logs", &[], b"").await;
    assert_eq!(a.status, 200);
    assert!(a.body.is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_after_a_pass_through_post_is_not_repeated_but_a_search_is() {
    let s = start(config()).await;
    let node = s.cluster.node(0);
    node.once(
        Match::Path("/logs/_delete_by_query".into()),
        Behavior::Reset,
    );
    node.once(Match::Path("/logs/_search".into()), Behavior::Reset);
    let own = ("Authorization", "Basic b3duOm93bi1wdw==");
    let a = call(
        s.addr,
        "POST",
        "/logs/_delete_by_query",
        &[own, ("Content-Type", "application/json")],
        b"{\"query\":{\"match_all\":{}}}",
    )
    .await;
    assert_eq!(a.status, 502, "{}", a.text());
    assert!(a.text().contains("may have been applied"), "{}", a.text());
    assert_eq!(s.seen("/logs/_delete_by_query").len(), 1, "sent once");
    let a = call(
        s.addr,
        "POST",
        "/logs/_search",
        &[("Content-Type", "application/json")],
        b"{}",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        s.seen("/logs/_search").len(),
        2,
        "a read-only POST is retried"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_never_gains_a_right_through_the_relay() {
    let s = start(RelayConfig {
        auth: AuthConfig::Bearer("relay-token".into()),
        ..config()
    })
    .await;
    let relay_token = ("Authorization", "Bearer relay-token");
    let own = ("Authorization", "Basic b3duOm93bi1wdw==");
    // The relay's client on an allowed route: the relay's cluster credentials, never its token.
    let a = call(s.addr, "GET", "/logs/_search", &[relay_token], b"").await;
    assert_eq!(a.status, 200);
    let sent = s.seen("/logs/_search");
    assert_eq!(sent[0].header("authorization"), Some(RELAY_BASIC));
    let a = call(s.addr, "PUT", "/logs-new", &[relay_token], b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(
        s.seen("/logs-new")[0].header("authorization"),
        Some(RELAY_BASIC)
    );
    // ... but not on a route outside the allow list: refused, nothing sent.
    for (method, path) in [
        ("DELETE", "/logs"),
        ("DELETE", "/_all"),
        ("POST", "/logs/_delete_by_query"),
        ("PUT", "/%5Fsettings"),
        ("PUT", "/_cluster/settings"),
        ("POST", "/logs/_close"),
    ] {
        let a = call(s.addr, method, path, &[relay_token], b"").await;
        assert_eq!(a.status, 403, "{method} {path}: {}", a.text());
        assert_eq!(a.json()["error"]["type"], "security_exception");
        assert!(a.text().contains("--pass-through"), "{}", a.text());
    }
    let deletes = |s: &Setup| {
        s.cluster
            .node(0)
            .requests()
            .iter()
            .filter(|r| {
                r.method == "DELETE"
                    || r.path.contains("_settings")
                    || r.path.contains("_close")
                    || r.path.contains("_delete_by_query")
            })
            .count()
    };
    assert_eq!(deletes(&s), 0, "nothing was sent");
    // Without any credentials: 401, nothing sent.
    let a = call(s.addr, "GET", "/logs/_count", &[], b"").await;
    assert_eq!(a.status, 401);
    assert!(s.seen("/logs/_count").is_empty());
    // The client's own credentials go to the cluster as they are, never the relay's: the
    // cluster decides (here it allows, as it would have directly).
    let a = call(s.addr, "DELETE", "/logs", &[own], b"").await;
    assert_eq!(a.status, 200);
    let sent = s.seen("/logs");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].header("authorization"), Some(own.1));
    let a = call(s.addr, "GET", "/logs/_count", &[own], b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(
        s.seen("/logs/_count")[0].header("authorization"),
        Some(own.1)
    );
    // Own credentials do not open the relay's own routes.
    let a = call(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[own, NDJSON],
        &bulk_body(0..1),
    )
    .await;
    assert_eq!(a.status, 401);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_can_allow_a_route_and_empty_the_defaults() {
    let s = start(RelayConfig {
        pass_through: vec![PassRule::parse("DELETE /{index}").unwrap()],
        ..config()
    })
    .await;
    let a = call(s.addr, "DELETE", "/old-logs", &[], b"").await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        s.seen("/old-logs")[0].header("authorization"),
        Some(RELAY_BASIC)
    );
    // The defaults were replaced: a search with the relay's credentials is refused now.
    let a = call(s.addr, "GET", "/logs/_search", &[], b"").await;
    assert_eq!(a.status, 403);
    assert!(s.seen("/logs/_search").is_empty());
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sniffing_finds_only_the_relay() {
    let s = start(config()).await;
    for path in [
        "/_nodes",
        "/_nodes/http",
        "/_nodes/_all/http",
        "/_nodes/_local/http,os",
        "/_nodes/http?timeout=5s",
    ] {
        let a = call(s.addr, "GET", path, &[], b"").await;
        assert_eq!(a.status, 200, "{path}");
        let v = a.json();
        let nodes = v["nodes"].as_object().unwrap();
        assert_eq!(nodes.len(), 1, "{path}: {v}");
        let n = nodes.values().next().unwrap();
        assert_eq!(n["http"]["publish_address"], s.addr.to_string(), "{path}");
        assert!(n["roles"].as_array().unwrap().contains(&json!("data")));
    }
    assert!(s.seen("/_nodes/http").is_empty(), "answered by the relay");
    // Node statistics are the cluster's.
    let a = call(s.addr, "GET", "/_nodes/stats", &[], b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(s.seen("/_nodes/stats").len(), 1);
    s.shutdown().await;
    let s = start(RelayConfig {
        advertise_address: Some("relay.example:9280".into()),
        ..config()
    })
    .await;
    let a = call(s.addr, "GET", "/_nodes/http", &[], b"").await;
    let v = a.json();
    let n = v["nodes"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(n["http"]["publish_address"], "relay.example:9280");
    assert_eq!(n["host"], "relay.example");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_clusters_kind_of_error_and_the_relay_keeps_serving() {
    let s = start(RelayConfig {
        max_body_bytes: 1000,
        ..config()
    })
    .await;
    // A body over the limit on a pass-through route: 413 before anything is sent.
    let a = call(s.addr, "POST", "/logs/_search", &[], &[b'x'; 2000]).await;
    assert_eq!(a.status, 413);
    assert_eq!(a.json()["status"], 413);
    assert!(s.seen("/logs/_search").is_empty());
    // A method the relay has no row for goes to the cluster, which answers it.
    let a = call(
        s.addr,
        "PATCH",
        "/logs",
        &[("Authorization", "Basic eDp5")],
        b"",
    )
    .await;
    assert_ne!(a.status, 0);
    // A malformed request line is refused by the HTTP layer, not a panic.
    let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"G\x01T /\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    assert!(
        out.is_empty() || out.starts_with(b"HTTP/1.1 400"),
        "{out:?}"
    );
    // A bulk the relay cannot parse names the line.
    let a = call(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[NDJSON],
        b"{\"index\":{}}\nnot json\n",
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.json()["error"]["reason"]
        .as_str()
        .unwrap()
        .contains("line"));
    let a = call(s.addr, "GET", "/health/live", &[], b"").await;
    assert_eq!(a.status, 200, "still serving");
    s.shutdown().await;
}
