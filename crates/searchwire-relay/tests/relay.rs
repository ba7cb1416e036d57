//! The relay against the in-process fake cluster: the bulk format, queueing on 429/503 and
//! an open breaker, permanent errors passed through, request errors, health, shutdown, auth.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use searchwire::{BreakerConfig, Client};
use searchwire_fake::{Behavior, BulkFault, FakeBulk, FakeCluster, Match};
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{
    AuthConfig, PresentAs, Relay, RelayConfig, ShutdownReport, FALLBACK_ES_VERSION,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

struct Setup {
    cluster: FakeCluster,
    bulk: FakeBulk,
    queue: Queue,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<ShutdownReport>,
    _dir: tempfile::TempDir,
}

fn test_config() -> RelayConfig {
    RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        retry_base: Duration::from_millis(10),
        retry_cap: Duration::from_millis(50),
        idle_poll: Duration::from_millis(20),
        live_budget: Duration::from_secs(2),
        drain_timeout: Duration::from_millis(300),
        drain_grace: Duration::ZERO,
        ..RelayConfig::default()
    }
}

async fn start(config: RelayConfig, client: impl FnOnce(&FakeCluster) -> Client) -> Setup {
    start_on(config, client, async |_| {}).await
}

/// Like [`start`], with the cluster prepared before the relay starts (rules for `GET /`
/// installed after the bulk handler, a killed node). Returns once the relay serves, i.e.
/// after its first look at the cluster's `GET /`.
async fn start_on(
    config: RelayConfig,
    client: impl FnOnce(&FakeCluster) -> Client,
    prepare: impl AsyncFnOnce(&FakeCluster),
) -> Setup {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    prepare(&cluster).await;
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let relay = Relay::bind(config, client(&cluster), queue.clone())
        .await
        .unwrap();
    let addr = relay.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = rx.await;
    }));
    let (live, _) = http(addr, "GET", "/health/live", &[], b"").await;
    assert_eq!(live, 200, "the relay serves");
    Setup {
        cluster,
        bulk,
        queue,
        addr,
        stop: Some(tx),
        task,
        _dir: dir,
    }
}

fn plain_client(c: &FakeCluster) -> Client {
    Client::builder().nodes(c.urls()).build().unwrap()
}

impl Setup {
    async fn shutdown(mut self) -> (ShutdownReport, Queue, FakeBulk) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let report = self.task.await.unwrap();
        (report, self.queue, self.bulk)
    }

    /// Waits (bounded) until the queue is empty: the delivery loop is asynchronous.
    async fn drained(&self) {
        for _ in 0..500 {
            if self.queue.stats().await.unwrap().backlog == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the queue did not drain: {:?}", self.queue.stats().await);
    }
}

/// A tiny HTTP/1.1 client: one request per connection, the whole answer.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let (status, _, body) = http_with_head(addr, method, path, headers, body).await;
    (status, body)
}

/// Like [`http`], with the response head (status line and headers, lower-cased).
async fn http_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    // A server may answer (413) before reading the whole body and close.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_ascii_lowercase(), body.to_owned())
}

async fn post_bulk(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let (s, b) = http(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/x-ndjson")],
        body.as_bytes(),
    )
    .await;
    (s, serde_json::from_str(&b).unwrap_or(Value::Null))
}

/// One `index` item (id 1) to `/logs/_bulk`: status, head, body.
async fn post_one_with_head(addr: SocketAddr) -> (u16, String, String) {
    http_with_head(
        addr,
        "POST",
        "/logs/_bulk",
        &[("Content-Type", "application/x-ndjson")],
        b"{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
    )
    .await
}

fn item(v: &Value, i: usize) -> &Value {
    let o = v["items"][i].as_object().unwrap();
    o.values().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_in_opensearch_format_and_passes_permanent_errors_through() {
    let s = start(test_config(), plain_client).await;
    s.bulk.mapping_error_marker("BAD");
    let body = "{\"index\":{}}\n{\"n\":1}\n{\"create\":{\"_index\":\"other\",\"_id\":\"c1\"}}\n{\"n\":2}\n{\"index\":{\"_id\":\"m\"}}\n{\"n\":\"BAD\"}\n";
    let (status, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["errors"], true);
    assert!(v["took"].is_u64());
    let first = item(&v, 0);
    assert_eq!(first["status"], 201);
    assert_eq!(first["_index"], "logs");
    let id = first["_id"].as_str().unwrap();
    assert_eq!(id.len(), 36, "a UUIDv7 assigned by the relay");
    assert!(v["items"][1]["create"].is_object());
    assert_eq!(item(&v, 1)["status"], 201);
    assert_eq!(item(&v, 2)["status"], 400);
    assert!(item(&v, 2)["error"]["type"]
        .as_str()
        .unwrap()
        .contains("mapper"));
    assert!(s.bulk.get("logs", id).is_some());
    assert_eq!(s.bulk.count("other"), 1);
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0, "nothing queued");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_and_unavailable_items_are_queued_then_delivered_once() {
    let s = start(test_config(), plain_client).await;
    // The first try retries each failed item by class within the live budget (2 s here);
    // these keep failing longer than that, so they are queued.
    s.bulk
        .item_faults([BulkFault::Throttle, BulkFault::Ok, BulkFault::Unavailable]);
    s.bulk.item_faults([BulkFault::Throttle; 12]);
    let body = "{\"index\":{\"_id\":\"a\"}}\n{\"n\":1}\n{\"index\":{\"_id\":\"b\"}}\n{\"n\":2}\n{\"create\":{}}\n{\"n\":3}\n";
    let (status, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(status, 200);
    assert_eq!(v["errors"], false, "queued items are not errors: {v}");
    assert_eq!(item(&v, 0)["status"], 200);
    assert_eq!(item(&v, 0)["result"], "queued");
    assert_eq!(item(&v, 1)["status"], 201);
    assert_eq!(item(&v, 2)["result"], "queued");
    let assigned = item(&v, 2)["_id"].as_str().unwrap().to_owned();
    s.drained().await;
    assert_eq!(s.bulk.count("logs"), 3);
    for id in ["a", "b", assigned.as_str()] {
        assert_eq!(s.bulk.writes("logs", id), 1, "{id} written exactly once");
    }
    let (_, q, _) = s.shutdown().await;
    assert_eq!(q.stats().await.unwrap().dead_letters, 0);
}

/// The item objects of a live answer are the cluster's: `_shards`, `noop`, the whole error
/// object (`caused_by`, `index`, `shard`, `index_uuid`), `not_found` with its version fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_items_are_answered_as_the_cluster_answered_them() {
    let s = start(test_config(), plain_client).await;
    s.bulk.mapping_error_marker("BAD");
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk",
        "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n{\"update\":{\"_id\":\"1\"}}\n{\"doc\":{\"n\":2}}\n",
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let shards = |n: u32| serde_json::json!({"total": n, "successful": n, "failed": 0});
    assert_eq!(
        item(&v, 0),
        &serde_json::json!({"_index": "logs", "_id": "1", "_version": 1, "result": "created",
            "_shards": shards(2), "_seq_no": 0, "_primary_term": 1, "status": 201})
    );
    let body = concat!(
        "{\"update\":{\"_id\":\"1\"}}\n{\"doc\":{\"n\":2}}\n",
        "{\"create\":{\"_id\":\"1\"}}\n{\"n\":3}\n",
        "{\"delete\":{\"_id\":\"missing\"}}\n",
        "{\"index\":{\"_id\":\"m\"}}\n{\"n\":\"BAD\"}\n",
    );
    let (status, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["errors"], true);
    assert_eq!(
        item(&v, 0),
        &serde_json::json!({"_index": "logs", "_id": "1", "_version": 2, "result": "noop",
            "_shards": shards(2), "_seq_no": 1, "_primary_term": 1, "status": 200}),
        "an update that changes nothing is the cluster's noop, not updated"
    );
    assert_eq!(
        item(&v, 1),
        &serde_json::json!({"_index": "logs", "_id": "1", "status": 409, "error": {
            "type": "version_conflict_engine_exception",
            "reason": "[1]: version conflict, document already exists",
            "index": "logs", "shard": "0", "index_uuid": "fake-index-uuid"}})
    );
    assert_eq!(
        item(&v, 2),
        &serde_json::json!({"_index": "logs", "_id": "missing", "_version": 1,
            "result": "not_found", "_shards": shards(2), "_seq_no": 2, "_primary_term": 1,
            "status": 404})
    );
    assert_eq!(
        item(&v, 3),
        &serde_json::json!({"_index": "logs", "_id": "m", "status": 400, "error": {
            "type": "mapper_parsing_exception",
            "reason": "failed to parse field [fake] of type [long]",
            "caused_by": {"type": "illegal_argument_exception",
                          "reason": "For input string: \"fake\""}}})
    );
    s.shutdown().await;
}

/// `refresh`, `timeout` and `wait_for_active_shards` go with the live `_bulk` that carries
/// the client's items; `refresh=false` (the default) is not passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_parameters_reach_the_cluster_with_the_live_items() {
    let s = start(test_config(), plain_client).await;
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk?refresh=true&timeout=30s&wait_for_active_shards=2",
        "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(item(&v, 0)["forced_refresh"], true, "{v}");
    let (_, v) = post_bulk(
        s.addr,
        "/logs/_bulk?refresh=false",
        "{\"index\":{\"_id\":\"2\"}}\n{\"n\":2}\n",
    )
    .await;
    assert!(item(&v, 0).get("forced_refresh").is_none(), "{v}");
    let params = |q: &Option<String>| -> Vec<String> {
        q.as_deref()
            .unwrap_or("")
            .split('&')
            .filter(|kv| !kv.starts_with("filter_path="))
            .map(String::from)
            .collect()
    };
    let queries = s.bulk.queries();
    assert_eq!(queries.len(), 2, "{queries:?}");
    assert_eq!(
        params(&queries[0]),
        ["refresh=true", "timeout=30s", "wait_for_active_shards=2"]
    );
    assert!(params(&queries[1]).is_empty(), "{queries:?}");
    s.shutdown().await;
}

/// A value the cluster refuses is its 400 for the client's request; nothing is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_value_the_cluster_refuses_is_its_400_not_queued() {
    let s = start(test_config(), plain_client).await;
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk?wait_for_active_shards=bogus",
        "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v,
        serde_json::json!({"error": {"type": "illegal_argument_exception",
            "reason": "failed to parse wait_for_active_shards [bogus]: not a number or all"},
            "status": 400}),
        "the cluster's own answer"
    );
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk?refresh=sometimes",
        "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0, "nothing queued");
    assert_eq!(s.bulk.count("logs"), 0);
    s.shutdown().await;
}

/// A queued item's answer is exactly `_index`, `_id`, `result: queued`, `status: 200` (no
/// version fields, `_shards` or `forced_refresh`: nothing is written yet), whatever the
/// request's parameters; it is delivered later with the cluster's defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_item_is_answered_queued_and_delivered_without_the_parameters() {
    let s = start(test_config(), plain_client).await;
    s.cluster.node(0).kill().await;
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk?refresh=wait_for&wait_for_active_shards=all",
        "{\"index\":{\"_id\":\"q\"}}\n{\"n\":1}\n",
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["items"][0],
        serde_json::json!({"index": {"_index": "logs", "_id": "q", "result": "queued", "status": 200}})
    );
    s.cluster.node(0).revive().await.unwrap();
    s.drained().await;
    assert_eq!(s.bulk.writes("logs", "q"), 1);
    for q in s.bulk.queries() {
        let q = q.unwrap_or_default();
        assert!(
            !q.contains("refresh=") && !q.contains("wait_for_active_shards="),
            "{q}"
        );
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_cluster_queues_everything_and_delivery_waits_for_it() {
    let s = start(test_config(), plain_client).await;
    s.cluster.node(0).kill().await;
    let body = "{\"index\":{\"_id\":\"x\"}}\n{\"n\":1}\n{\"delete\":{\"_id\":\"y\"}}\n";
    let (status, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(item(&v, 0)["result"], "queued");
    assert_eq!(item(&v, 1)["result"], "queued");
    assert!(v["items"][1]["delete"].is_object());
    assert!(s.queue.stats().await.unwrap().backlog >= 1);
    s.cluster.node(0).revive().await.unwrap();
    s.drained().await;
    assert_eq!(s.bulk.writes("logs", "x"), 1);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_queues_without_sending() {
    let s = start(
        RelayConfig {
            deliver: false,
            // No `GET /` at start (auto asks the cluster once): the breaker below opens on
            // the first failure of a window that holds only the bulk request.
            present_as: PresentAs::OpenSearch,
            ..test_config()
        },
        |c| {
            Client::builder()
                .nodes(c.urls())
                .max_retries(0)
                .circuit_breaker(BreakerConfig {
                    min_requests: 1,
                    failure_rate: 0.5,
                    cool_down: Duration::from_secs(600),
                    max_cool_down: Duration::from_secs(600),
                    ..BreakerConfig::default()
                })
                .build()
                .unwrap()
        },
    )
    .await;
    s.bulk.answer_next(Behavior::status(503));
    let body = "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n";
    let (_, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(item(&v, 0)["result"], "queued", "503 on the request: {v}");
    let seen = s.cluster.request_count();
    let (_, v) = post_bulk(
        s.addr,
        "/logs/_bulk",
        "{\"index\":{\"_id\":\"2\"}}\n{\"n\":2}\n",
    )
    .await;
    assert_eq!(item(&v, 0)["result"], "queued");
    assert_eq!(
        s.cluster.request_count(),
        seen,
        "no traffic while the breaker is open"
    );
    let (code, h) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert_eq!(code, 200);
    let h: Value = serde_json::from_str(&h).unwrap();
    assert_eq!(h["breaker"], "open");
    assert_eq!(h["backlog"], 2);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_clearly() {
    let s = start(
        RelayConfig {
            max_body_bytes: 200,
            ..test_config()
        },
        plain_client,
    )
    .await;
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk",
        "{\"index\":{}}\n{\"n\":1}\n{\"index\":{}\n{\"n\":2}\n",
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["reason"].as_str().unwrap().contains("line [3]"),
        "{v}"
    );
    assert_eq!(v["status"], 400);
    let big = format!("{{\"index\":{{}}}}\n{{\"s\":\"{}\"}}\n", "x".repeat(300));
    let (status, v) = post_bulk(s.addr, "/logs/_bulk", &big).await;
    assert_eq!(status, 413, "{v}");
    let (status, v) = post_bulk(s.addr, "/logs/_bulk?bogus=1", "{\"index\":{}}\n{}\n").await;
    assert_eq!(status, 400);
    assert!(v["error"]["reason"].as_str().unwrap().contains("[bogus]"));
    let (status, _) = http(s.addr, "GET", "/logs/_bulk", &[], b"").await;
    assert_eq!(status, 405);
    assert_eq!(s.bulk.items_seen(), 0, "nothing reached the cluster");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_answers_with_the_clusters_version() {
    let s = start(test_config(), plain_client).await;
    let (status, body) = http(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["name"], "searchwire-relay");
    assert!(v["version"]["number"].is_string(), "{v}");
    let (status, body) = http(s.addr, "HEAD", "/", &[], b"").await;
    assert_eq!((status, body.as_str()), (200, ""));
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_503_over_the_backlog_threshold_and_back_to_200() {
    let s = start(
        RelayConfig {
            backlog_threshold: 1,
            queue_only: true,
            ..test_config()
        },
        plain_client,
    )
    .await;
    s.bulk.set_delay(Some(Duration::from_millis(300)));
    let (code, _) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert_eq!(code, 200);
    s.cluster.node(0).kill().await;
    let body = "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n{\"index\":{\"_id\":\"2\"}}\n{\"n\":2}\n";
    let (_, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(item(&v, 1)["result"], "queued");
    let (code, h) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    let h: Value = serde_json::from_str(&h).unwrap();
    assert_eq!(code, 503, "{h}");
    assert_eq!(h["ready"], false);
    assert_eq!(h["backlog"], 2);
    assert_eq!(h["draining"], false);
    s.cluster.node(0).revive().await.unwrap();
    s.drained().await;
    let (code, _) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert_eq!(code, 200);
    let (code, _) = http(s.addr, "GET", "/health/live", &[], b"").await;
    assert_eq!(code, 200);
    assert_eq!(s.bulk.count("logs"), 2);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_what_the_delivery_cycle_holds() {
    let s = start(
        RelayConfig {
            queue_only: true,
            ..test_config()
        },
        plain_client,
    )
    .await;
    // The cluster answers slower than the drain timeout: the cycle is cut short.
    s.bulk.set_delay(Some(Duration::from_secs(5)));
    let body = "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n{\"index\":{\"_id\":\"2\"}}\n{\"n\":2}\n";
    let (_, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(item(&v, 0)["result"], "queued");
    for _ in 0..500 {
        if s.queue.stats().await.unwrap().leased == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(s.queue.stats().await.unwrap().leased, 2);
    let addr = s.addr;
    let (report, queue, _) = s.shutdown().await;
    assert!(!report.delivery_drained);
    assert_eq!(report.released, 2);
    let st = queue.stats().await.unwrap();
    assert_eq!((st.backlog, st.leased), (2, 0));
    assert!(queue
        .list(None, 10)
        .await
        .unwrap()
        .iter()
        .all(|m| m.pending_shutdown));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_is_answered_during_shutdown() {
    let mut s = start(test_config(), plain_client).await;
    s.bulk.set_delay(Some(Duration::from_millis(400)));
    let addr = s.addr;
    let req = tokio::spawn(async move {
        post_bulk(
            addr,
            "/logs/_bulk",
            "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
        )
        .await
    });
    for _ in 0..500 {
        if s.bulk.items_seen() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = s.stop.take().unwrap().send(());
    let (status, v) = req.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(item(&v, 0)["status"], 201, "{v}");
    let report = s.task.await.unwrap();
    assert!(report.connections_drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_required_except_for_health() {
    let s = start(
        RelayConfig {
            auth: AuthConfig::Bearer("s3cret".into()),
            ..test_config()
        },
        plain_client,
    )
    .await;
    let body = b"{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n";
    let (code, _) = http(s.addr, "POST", "/logs/_bulk", &[], body).await;
    assert_eq!(code, 401);
    let (code, _) = http(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[("Authorization", "Bearer nope")],
        body,
    )
    .await;
    assert_eq!(code, 401);
    let (code, _) = http(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(code, 401);
    let (code, _) = http(
        s.addr,
        "POST",
        "/logs/_bulk",
        &[("Authorization", "Bearer s3cret")],
        body,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert_eq!(code, 200);
    assert_eq!(s.bulk.count("logs"), 1);
    s.shutdown().await;
}

#[tokio::test]
async fn a_public_address_without_credentials_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let client = Client::builder()
        .nodes(["http://127.0.0.1:1"])
        .build()
        .unwrap();
    let e = Relay::bind(
        RelayConfig {
            listen: "0.0.0.0:0".parse().unwrap(),
            allow_plaintext: true,
            ..RelayConfig::default()
        },
        client,
        queue,
    )
    .await
    .unwrap_err();
    assert!(e.contains("without authentication"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_item_the_cluster_refuses_for_good_becomes_a_dead_letter() {
    let s = start(
        RelayConfig {
            queue_only: true,
            ..test_config()
        },
        plain_client,
    )
    .await;
    s.bulk.mapping_error_marker("BAD");
    let body =
        "{\"index\":{\"_id\":\"ok\"}}\n{\"n\":1}\n{\"index\":{\"_id\":\"bad\"}}\n{\"n\":\"BAD\"}\n";
    let (_, v) = post_bulk(s.addr, "/logs/_bulk", body).await;
    assert_eq!(item(&v, 1)["result"], "queued");
    s.drained().await;
    assert_eq!(s.bulk.count("logs"), 1);
    let dead = s.queue.dead_letters(None, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].reason.contains("400"), "{}", dead[0].reason);
    let (code, h) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert_eq!(code, 200);
    assert!(h.contains("\"dead_letters\":1"), "{h}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_comes_from_the_header_then_the_index_rule() {
    let s = start(
        RelayConfig {
            queue_only: true,
            deliver: false,
            priority_rules: vec![searchwire_relay::PriorityRule {
                prefix: "audit-*".into(),
                priority: 9,
            }],
            ..test_config()
        },
        plain_client,
    )
    .await;
    let body = b"{\"index\":{\"_index\":\"audit-1\",\"_id\":\"a\"}}\n{\"n\":1}\n{\"index\":{\"_index\":\"logs\",\"_id\":\"b\"}}\n{\"n\":2}\n";
    let (code, _) = http(s.addr, "POST", "/_bulk", &[], body).await;
    assert_eq!(code, 200);
    let body = b"{\"index\":{\"_index\":\"logs\",\"_id\":\"c\"}}\n{\"n\":3}\n";
    let (code, _) = http(
        s.addr,
        "POST",
        "/_bulk",
        &[("X-Searchwire-Priority", "200")],
        body,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = http(
        s.addr,
        "POST",
        "/_bulk",
        &[("X-Searchwire-Priority", "high")],
        body,
    )
    .await;
    assert_eq!(code, 400);
    let prio: Vec<(String, u8)> = s
        .queue
        .list(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.index.unwrap_or_default(), m.priority))
        .collect();
    assert_eq!(
        prio,
        vec![
            ("audit-1".into(), 9),
            ("logs".into(), 0),
            ("logs".into(), 200)
        ]
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let s = start(
        RelayConfig {
            header_read_timeout: Duration::from_millis(200),
            body_read_timeout: Duration::from_millis(200),
            ..test_config()
        },
        plain_client,
    )
    .await;
    // Headers complete, body promised but never sent: 408.
    let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"POST /logs/_bulk HTTP/1.1\r\nHost: r\r\nContent-Length: 100\r\n\r\n{\"index\"")
        .await
        .unwrap();
    let mut out = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut out))
        .await
        .expect("answered")
        .unwrap();
    assert!(String::from_utf8_lossy(&out[..n]).starts_with("HTTP/1.1 408"));
    // Headers never finished: the connection is closed.
    let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"POST /logs/_bulk HTTP/1.1\r\nHost: r\r\n")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut Vec::new()))
        .await
        .expect("closed by the relay");
    assert!(n.is_ok());
    s.shutdown().await;
}

/// A relay on an existing queue (delivery on), and a wait until that queue is empty.
async fn serve_queue(
    config: RelayConfig,
    cluster: &FakeCluster,
    queue: &Queue,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<ShutdownReport>) {
    let relay = Relay::bind(config, plain_client(cluster), queue.clone())
        .await
        .unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = rx.await;
    }));
    for _ in 0..1000 {
        if queue.stats().await.unwrap().backlog == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_briefly_throttled_item_is_retried_in_the_first_try_not_queued() {
    let s = start(test_config(), plain_client).await;
    s.bulk
        .item_faults([BulkFault::Throttle, BulkFault::Unavailable]);
    let (_, v) = post_bulk(
        s.addr,
        "/logs/_bulk",
        "{\"index\":{\"_id\":\"t\"}}\n{\"n\":1}\n",
    )
    .await;
    let it = item(&v, 0);
    assert_eq!(it["status"], 201, "{v}");
    assert_eq!(it["result"], "created");
    // The cluster's own fields are passed through.
    assert_eq!(it["_version"], 1);
    assert!(
        it["_seq_no"].is_u64() && it["_primary_term"].is_u64(),
        "{it}"
    );
    assert_eq!(s.bulk.items_seen(), 3, "429, then 503, then written");
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_retries_item_429s_by_class_without_rescheduling() {
    // A reschedule would wait an hour: only the delivery indexer's own class retries
    // (100 ms, ×1.5) can deliver this in time.
    let s = start(
        RelayConfig {
            queue_only: true,
            retry_base: Duration::from_secs(3600),
            retry_cap: Duration::from_secs(3600),
            ..test_config()
        },
        plain_client,
    )
    .await;
    s.bulk.item_faults([BulkFault::Throttle; 3]);
    // Due now (a relay's own append would be due after retry_base).
    s.queue
        .append(vec![searchwire_queue::NewMessage::new(
            "{\"index\":{\"_index\":\"logs\",\"_id\":\"q\"}}\n{\"n\":1}\n",
        )])
        .await
        .unwrap();
    s.drained().await;
    assert_eq!(s.bulk.writes("logs", "q"), 1);
    assert_eq!(
        s.bulk.batch_sizes(),
        vec![1, 1, 1, 1],
        "three 429s, then written"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_sends_several_requests_at_once_under_load() {
    let s = start(
        RelayConfig {
            queue_only: true,
            deliver: false,
            ..test_config()
        },
        plain_client,
    )
    .await;
    let mut body = String::new();
    for i in 0..2000 {
        body.push_str(&format!(
            "{{\"index\":{{\"_id\":\"{i}\"}}}}\n{{\"n\":{i}}}\n"
        ));
    }
    let (_, v) = post_bulk(s.addr, "/logs/_bulk", &body).await;
    assert_eq!(item(&v, 1999)["result"], "queued");
    let (_, queue, bulk) = s.shutdown().await;
    let cluster = FakeCluster::start(1).await.unwrap();
    bulk.install(&cluster);
    // Every answer takes 300 ms: one request at a time would take 4 × 300 ms per 2,000.
    bulk.set_delay(Some(Duration::from_millis(300)));
    let (tx, task) = serve_queue(
        RelayConfig {
            delivery_batch: 100,
            ..test_config()
        },
        &cluster,
        &queue,
    )
    .await;
    assert_eq!(queue.stats().await.unwrap().backlog, 0);
    assert_eq!(bulk.count("logs"), 2000);
    assert_eq!(bulk.max_writes(), 1);
    // Requests that arrived less than the answer delay apart were in flight together.
    let reqs = cluster
        .node(0)
        .requests_matching(&searchwire_fake::Match::Path("/_bulk".into()));
    let overlapping = reqs
        .windows(2)
        .filter(|w| w[1].at - w[0].at < Duration::from_millis(150))
        .count();
    assert!(
        overlapping >= 4,
        "{} requests, {overlapping} overlapping",
        reqs.len()
    );
    let _ = tx.send(());
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_409_is_ours_only_when_the_relay_knows_it() {
    let s = start(test_config(), plain_client).await;
    s.bulk.create_index("c");
    // A client-given id that exists: OpenSearch's 409 is the answer.
    let body = "{\"create\":{\"_id\":\"x\"}}\n{\"n\":1}\n";
    let (_, v) = post_bulk(s.addr, "/c/_bulk", body).await;
    assert_eq!(item(&v, 0)["status"], 201);
    let (_, v) = post_bulk(s.addr, "/c/_bulk", body).await;
    assert_eq!(item(&v, 0)["status"], 409, "{v}");
    assert_eq!(
        item(&v, 0)["error"]["type"],
        "version_conflict_engine_exception"
    );
    assert_eq!(v["errors"], true);
    // Applied, then the connection reset: the indexer's retry is answered 409 — our own
    // write, answered as created; the document was written once.
    s.bulk.reset_after_apply(1);
    let (_, v) = post_bulk(
        s.addr,
        "/c/_bulk",
        "{\"create\":{\"_id\":\"y\"}}\n{\"n\":2}\n",
    )
    .await;
    assert_eq!(item(&v, 0)["status"], 201, "{v}");
    assert_eq!(item(&v, 0)["result"], "created");
    assert_eq!(s.bulk.writes("c", "y"), 1);
    // A queued create whose document is already there is delivered, not a dead letter.
    let (_, q, bulk) = s.shutdown().await;
    let cluster = FakeCluster::start(1).await.unwrap();
    bulk.install(&cluster);
    q.append(vec![searchwire_queue::NewMessage::new(
        "{\"create\":{\"_index\":\"c\",\"_id\":\"x\"}}\n{\"n\":1}\n",
    )])
    .await
    .unwrap();
    let (tx, task) = serve_queue(test_config(), &cluster, &q).await;
    let st = q.stats().await.unwrap();
    assert_eq!((st.backlog, st.dead_letters), (0, 0));
    assert_eq!(bulk.writes("c", "x"), 1);
    let _ = tx.send(());
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_writes_high_priority_first_then_arrival_order_within_a_window() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    // Interleaved arrival: low 0, high 0, low 1, high 1, ...
    let n = 300;
    let mut batch = Vec::new();
    for i in 0..n {
        for (name, prio) in [("low", 0u8), ("high", 7u8)] {
            batch.push(
                searchwire_queue::NewMessage::new(format!(
                    "{{\"index\":{{\"_index\":\"o\",\"_id\":\"{name}-{i:04}\"}}}}\n{{\"n\":{i}}}\n"
                ))
                .priority(prio),
            );
        }
    }
    queue.append(batch).await.unwrap();
    let cfg = RelayConfig {
        delivery_batch: 50,
        ..test_config()
    };
    let window = cfg.delivery_batch * cfg.bulk_concurrency;
    let (tx, task) = serve_queue(cfg, &cluster, &queue).await;
    assert_eq!(bulk.count("o"), 2 * n);
    let seq = |name: &str, i: usize| bulk.get("o", &format!("{name}-{i:04}")).unwrap().seq_no;
    let last_high = (0..n).map(|i| seq("high", i)).max().unwrap();
    let first_low = (0..n).map(|i| seq("low", i)).min().unwrap();
    assert!(last_high < first_low, "every high before any low");
    for name in ["high", "low"] {
        for i in 0..n {
            for j in i + 1..n {
                if seq(name, j) < seq(name, i) {
                    assert!(
                        j - i < window,
                        "{name} {j} written before {i}: more than a window apart"
                    );
                }
            }
        }
    }
    let _ = tx.send(());
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_cluster_refuses_as_a_whole_gets_its_status_and_is_not_queued() {
    let s = start(test_config(), plain_client).await;
    s.bulk.answer_next(Behavior::status(403));
    let (status, v) = post_bulk(
        s.addr,
        "/logs/_bulk",
        "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["status"], 403);
    assert!(v["error"]["type"].is_string(), "{v}");
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0);
    s.shutdown().await;
}

/// Elasticsearch 8's `GET /` as the real node answers it (trimmed).
fn elasticsearch_root() -> Value {
    serde_json::json!({
        "name": "es-node-1",
        "cluster_name": "es-test",
        "cluster_uuid": "abc",
        "version": {"number": "8.19.21", "build_flavor": "default", "build_type": "tar"},
        "tagline": "You Know, for Search"
    })
}

/// The fake node answers `GET /` as Elasticsearch 8 does.
fn answer_as_elasticsearch(cluster: &FakeCluster) {
    cluster.node(0).on(
        Match::MethodPath("GET".into(), "/".into()),
        Behavior::json(200, elasticsearch_root()).with_header("X-Elastic-Product", "Elasticsearch"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opensearch_cluster_is_presented_without_the_elastic_product_header() {
    let s = start(test_config(), plain_client).await;
    let (status, head, body) = http_with_head(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"]["distribution"], "opensearch", "{v}");
    assert!(!head.contains("x-elastic-product"), "{head}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elasticsearch_cluster_is_presented_as_elasticsearch_on_every_response() {
    let s = start_on(test_config(), plain_client, async |c| {
        answer_as_elasticsearch(c)
    })
    .await;
    let (status, head, body) = http_with_head(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["name"], "searchwire-relay");
    assert_eq!(v["cluster_name"], "es-test");
    assert_eq!(v["version"]["build_flavor"], "default");
    assert_eq!(v["version"]["number"], "8.19.21");
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");
    let (status, head, body) = http_with_head(s.addr, "HEAD", "/", &[], b"").await;
    assert_eq!((status, body.as_str()), (200, ""));
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");

    // The official clients' versioned media types: accepted, and answered in kind.
    let es_types = [
        (
            "Accept",
            "application/vnd.elasticsearch+json; compatible-with=8",
        ),
        (
            "Content-Type",
            "application/vnd.elasticsearch+x-ndjson; compatible-with=8",
        ),
    ];
    let body = "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n";
    let (status, head, text) =
        http_with_head(s.addr, "POST", "/logs/_bulk", &es_types, body.as_bytes()).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(item(&v, 0)["status"], 201, "{v}");
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");
    assert!(
        head.contains("content-type: application/vnd.elasticsearch+json;compatible-with=8"),
        "{head}"
    );
    // Errors and health carry the header too: the client checks every answer.
    let (status, head, _) = http_with_head(s.addr, "GET", "/logs/_bulk", &[], b"").await;
    assert_eq!(status, 405);
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");
    let (_, head, _) = http_with_head(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");

    // A version the relay cannot answer in is refused by name, as Elasticsearch does.
    let seven = [(
        "Accept",
        "application/vnd.elasticsearch+json; compatible-with=7",
    )];
    let (status, text) = http(s.addr, "POST", "/logs/_bulk", &seven, body.as_bytes()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("media_type_header_exception"), "{text}");
    assert!(text.contains("compatible-with=7"), "{text}");
    // A 9.x client in front of 8.x: refused with Elasticsearch 8's own sentence.
    let nine = [
        (
            "Accept",
            "application/vnd.elasticsearch+json; compatible-with=9",
        ),
        (
            "Content-Type",
            "application/vnd.elasticsearch+x-ndjson; compatible-with=9",
        ),
    ];
    let (status, text) = http(s.addr, "POST", "/logs/_bulk", &nine, body.as_bytes()).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "media_type_header_exception", "{v}");
    assert_eq!(
        v["error"]["caused_by"]["reason"],
        "Accept version must be either version 8 or 7, but found 9. \
         Accept=application/vnd.elasticsearch+json; compatible-with=9",
        "{v}"
    );
    assert_eq!(
        s.bulk.count("logs"),
        1,
        "the refused requests wrote nothing"
    );
    s.shutdown().await;
}

/// The fake node answers `GET /` as Elasticsearch 9 does.
fn answer_as_elasticsearch_9(cluster: &FakeCluster) {
    let mut root = elasticsearch_root();
    root["version"]["number"] = "9.5.3".into();
    root["version"]["minimum_wire_compatibility_version"] = "8.19.0".into();
    cluster.node(0).on(
        Match::MethodPath("GET".into(), "/".into()),
        Behavior::json(200, root).with_header("X-Elastic-Product", "Elasticsearch"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_front_of_elasticsearch_9_compatible_with_9_and_8_are_answered_in_kind() {
    let s = start_on(test_config(), plain_client, async |c| {
        answer_as_elasticsearch_9(c)
    })
    .await;
    let (status, _, body) = http_with_head(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"]["number"], "9.5.3", "{v}");

    // What the official 9.x clients send, then the 8.x clients: Elasticsearch 9 takes both.
    for (n, major) in [(1, 9), (2, 8)] {
        let body = format!("{{\"index\":{{\"_id\":\"{n}\"}}}}\n{{\"n\":{n}}}\n");
        let accept = format!("application/vnd.elasticsearch+json; compatible-with={major}");
        let ct = format!("application/vnd.elasticsearch+x-ndjson; compatible-with={major}");
        let types = [("Accept", accept.as_str()), ("Content-Type", ct.as_str())];
        let (status, head, text) =
            http_with_head(s.addr, "POST", "/logs/_bulk", &types, body.as_bytes()).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            item(&v, 0)["status"].as_u64().is_some_and(|st| st < 300),
            "{v}"
        );
        assert!(
            head.contains(&format!(
                "content-type: application/vnd.elasticsearch+json;compatible-with={major}"
            )),
            "{head}"
        );
        assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");
        assert_eq!(s.bulk.count("logs"), n);
    }

    // 7 is refused with Elasticsearch 9's own answer, word for word.
    let seven = [(
        "Accept",
        "application/vnd.elasticsearch+json; compatible-with=7",
    )];
    let (status, text) = http(s.addr, "GET", "/", &seven, b"").await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], 400, "{v}");
    assert_eq!(v["error"]["type"], "media_type_header_exception", "{v}");
    assert_eq!(
        v["error"]["reason"], "Invalid media-type value on headers [Content-Type, Accept]",
        "{v}"
    );
    assert_eq!(v["error"]["caused_by"]["type"], "status_exception", "{v}");
    assert_eq!(
        v["error"]["caused_by"]["reason"],
        "Accept version must be either version 9 or 8, but found 7. \
         Accept=application/vnd.elasticsearch+json; compatible-with=7",
        "{v}"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn present_as_elasticsearch_answers_as_elasticsearch_while_the_cluster_is_down() {
    let config = RelayConfig {
        present_as: PresentAs::Elasticsearch,
        ..test_config()
    };
    let s = start_on(config, plain_client, async |c| c.node(0).kill().await).await;
    let (status, head, body) = http_with_head(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"]["build_flavor"], "default", "{v}");
    assert_eq!(v["version"]["number"], FALLBACK_ES_VERSION);
    assert!(v["version"].get("distribution").is_none(), "{v}");
    let (status, head, text) = post_one_with_head(s.addr).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(item(&v, 0)["result"], "queued");
    assert!(head.contains("x-elastic-product: elasticsearch"), "{head}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_presents_opensearch_until_the_cluster_answers_then_what_it_is() {
    let s = start_on(test_config(), plain_client, async |c| {
        c.node(0).kill().await
    })
    .await;
    let (status, head, body) = http_with_head(s.addr, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    assert!(!head.contains("x-elastic-product"), "{head}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"]["distribution"], "opensearch", "{v}");
    assert!(v["cluster_name"].as_str().unwrap().contains("not answered"));

    // The cluster comes up as Elasticsearch: the next GET / asks it and presents that.
    s.cluster.node(0).revive().await.unwrap();
    answer_as_elasticsearch(&s.cluster);
    let mut learned = false;
    for _ in 0..200 {
        let (_, head, body) = http_with_head(s.addr, "GET", "/", &[], b"").await;
        if head.contains("x-elastic-product: elasticsearch") {
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["version"]["number"], "8.19.21");
            learned = true;
            break;
        }
        // The transport may still hold the node dead: its resurrection is its own schedule.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(learned, "the relay learned the cluster's product");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_answers_health_and_new_writes_503_during_the_grace() {
    let mut s = start(
        RelayConfig {
            // Longer than the test: the grace is over only when the test aborts the relay.
            drain_grace: Duration::from_secs(600),
            ..test_config()
        },
        plain_client,
    )
    .await;
    let (code, _) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
    assert_eq!(code, 200);
    let _ = s.stop.take().unwrap().send(());
    // Wait on observable state: readiness turns 503 (the flag is set right after the signal).
    let mut health = (0, Value::Null);
    for _ in 0..500 {
        let (code, body) = http(s.addr, "GET", "/health/retry-queue", &[], b"").await;
        health = (code, serde_json::from_str(&body).unwrap());
        if code == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(health.0, 503, "{:?}", health.1);
    assert_eq!(health.1["draining"], true);
    assert_eq!(health.1["ready"], false);
    // Still listening: a new write gets a retryable 503 that sends it elsewhere.
    let (status, head, text) = post_one_with_head(s.addr).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("node_closed_exception"), "{text}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    // A single-document write too.
    let (status, text) = http(s.addr, "PUT", "/logs/_doc/1", &[], b"{\"n\":1}").await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("node_closed_exception"), "{text}");
    let (code, _) = http(s.addr, "GET", "/health/live", &[], b"").await;
    assert_eq!(
        code, 200,
        "liveness stays 200: the process is fine, only leaving"
    );
    assert_eq!(s.bulk.items_seen(), 0, "the refused write reached nothing");
    assert_eq!(
        s.queue.stats().await.unwrap().backlog,
        0,
        "and was not queued"
    );
    assert!(!s.task.is_finished(), "the relay runs out its grace");
    s.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_drain_grace_the_listener_is_closed() {
    let grace = Duration::from_millis(300);
    let mut s = start(
        RelayConfig {
            drain_grace: grace,
            ..test_config()
        },
        plain_client,
    )
    .await;
    let signalled = tokio::time::Instant::now();
    let _ = s.stop.take().unwrap().send(());
    let report = (&mut s.task).await.unwrap();
    assert!(
        signalled.elapsed() >= grace,
        "the listener stayed open for the grace"
    );
    assert!(report.connections_drained);
    assert!(
        tokio::net::TcpStream::connect(s.addr).await.is_err(),
        "the listener is closed"
    );
}

/// The delivery loop follows the bulk indexer's rule: a queued item the cluster keeps
/// throttling is retried past its `max_retries` (deferred, not counted) and is not a dead
/// letter before its item deadline; once the cluster takes writes it is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_queued_item_outlives_its_max_retries_and_is_delivered() {
    let s = start(
        RelayConfig {
            queue_only: true,
            max_retries: 1,
            // A delivery round retries a throttled message for its whole budget: a short
            // one, so that 2 s hold several rounds.
            delivery_budget: Duration::from_millis(300),
            ..test_config()
        },
        plain_client,
    )
    .await;
    s.bulk
        .fault_every(Some((1, searchwire_fake::BulkFault::Throttle)));
    let (_, v) = post_bulk(
        s.addr,
        "/logs/_bulk",
        "{\"index\":{\"_id\":\"busy\"}}\n{\"n\":1}\n",
    )
    .await;
    assert_eq!(item(&v, 0)["result"], "queued");
    // Throttled for 2 s: every delivery round fails (each after the indexer's own
    // throttled retries within the delivery budget), more often than max_retries allows.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = s.queue.stats().await.unwrap();
    assert_eq!((st.backlog, st.dead_letters), (1, 0), "{st:?}");
    assert!(
        s.bulk.items_seen() > 6,
        "more than one round: {}",
        s.bulk.items_seen()
    );
    s.bulk.fault_every(None);
    s.drained().await;
    assert_eq!(s.bulk.count("logs"), 1);
    assert_eq!(s.queue.stats().await.unwrap().dead_letters, 0);
    s.shutdown().await;
}
