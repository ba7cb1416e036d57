//! Single-document writes through the relay against the in-process fake cluster: each
//! endpoint's answer, queueing while every node is down (delivered once), conditional
//! writes (the cluster's 409; never queued), a scripted `_update` passed through once, bad
//! paths, methods, bodies and parameters, and `filter_path` on bulk and single answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use searchwire::{Client, Request};
use searchwire_fake::{Behavior, FakeBulk, FakeCluster, Match};
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{PresentAs, Relay, RelayConfig, ShutdownReport};
use serde_json::{json, Value};
use tokio::sync::oneshot;

struct Relayed {
    cluster: FakeCluster,
    bulk: FakeBulk,
    queue: Queue,
    /// A client of the relay: no retries, so every call is one request.
    relay: Client,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<ShutdownReport>,
    _dir: tempfile::TempDir,
}

async fn relayed() -> Relayed {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let config = RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        retry_base: Duration::from_millis(10),
        retry_cap: Duration::from_millis(50),
        idle_poll: Duration::from_millis(20),
        live_budget: Duration::from_secs(1),
        drain_timeout: Duration::from_millis(300),
        drain_grace: Duration::ZERO,
        present_as: PresentAs::OpenSearch,
        ..RelayConfig::default()
    };
    let client = Client::builder().nodes(cluster.urls()).build().unwrap();
    let relay = Relay::bind(config, client, queue.clone()).await.unwrap();
    let addr = relay.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = rx.await;
    }));
    let relay = Client::builder()
        .nodes([format!("http://{addr}")])
        .max_retries(0)
        .build()
        .unwrap();
    Relayed {
        cluster,
        bulk,
        queue,
        relay,
        stop,
        task,
        _dir: dir,
    }
}

impl Relayed {
    /// One request to the relay with a JSON body: its status and JSON body (whatever the
    /// status).
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| serde_json::to_vec(&b).unwrap());
        self.raw(method, path, body.as_deref().unwrap_or_default())
            .await
    }

    /// Like [`call`](Self::call), with the body as bytes (none when empty).
    async fn raw(&self, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let mut r = Request::new(method.parse().unwrap(), path);
        for (k, v) in query.split('&').filter_map(|kv| kv.split_once('=')) {
            r = r.query(k, v);
        }
        if !body.is_empty() || method == "PUT" || method == "POST" {
            r = r.body_with_type(body.to_vec(), "application/json");
        }
        let resp = match self.relay.send(r).await {
            Ok(r) => r,
            Err(e) => e
                .into_response()
                .expect("the relay answered (an error status, not a transport failure)"),
        };
        let v = serde_json::from_slice(resp.body()).unwrap_or(Value::Null);
        (resp.status().as_u16(), v)
    }

    /// Waits (bounded) until the queue is empty: delivery is asynchronous.
    async fn drained(&self) {
        for _ in 0..500 {
            if self.queue.stats().await.unwrap().backlog == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the queue did not drain: {:?}", self.queue.stats().await);
    }

    /// Writes a document at `path`; its `_seq_no`.
    async fn seq_no_of_a_new_document(&self, path: &str) -> u64 {
        let (s, v) = self.call("PUT", path, Some(json!({"n": 1}))).await;
        assert_eq!(s, 201, "{v}");
        v["_seq_no"].as_u64().unwrap()
    }

    async fn backlog(&self) -> u64 {
        self.queue.stats().await.unwrap().backlog
    }

    async fn shutdown(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// The single-document answer without what changes from write to write.
fn shape(v: &Value) -> Value {
    let mut v = v.clone();
    for k in ["_seq_no", "_primary_term"] {
        if let Some(o) = v.as_object_mut() {
            if o.get(k).is_some_and(Value::is_u64) {
                o.insert(k.into(), json!("<number>"));
            }
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endpoint_answers_with_the_clusters_single_document_answer() {
    let r = relayed().await;
    let shards = json!({"total": 2, "successful": 2, "failed": 0});
    let (s, v) = r.call("PUT", "/i/_doc/1", Some(json!({"n": 1}))).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        shape(&v),
        json!({"_index":"i","_id":"1","_version":1,"result":"created","_shards":shards,
               "_seq_no":"<number>","_primary_term":"<number>"})
    );
    let (s, v) = r.call("POST", "/i/_doc/1", Some(json!({"n": 2}))).await;
    assert_eq!(
        (s, &v["result"], &v["_version"]),
        (200, &json!("updated"), &json!(2))
    );
    // The relay's id: a UUIDv7, as for a bulk item without `_id`.
    let (s, v) = r.call("POST", "/i/_doc", Some(json!({"n": 3}))).await;
    assert_eq!((s, &v["result"]), (201, &json!("created")), "{v}");
    let id = v["_id"].as_str().unwrap();
    assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 7);
    assert!(r.bulk.get("i", id).is_some());
    // `_create` of an existing id: the cluster's 409 in OpenSearch's error shape.
    for path in ["/i/_create/1", "/i/_doc/1?op_type=create"] {
        let (s, v) = r.call("PUT", path, Some(json!({"n": 1}))).await;
        assert_eq!(s, 409, "{path}: {v}");
        assert_eq!(v["status"], 409);
        let e = &v["error"];
        assert_eq!(e["type"], "version_conflict_engine_exception");
        assert_eq!(
            e["reason"],
            "[1]: version conflict, document already exists"
        );
        assert_eq!((&e["index"], &e["shard"]), (&json!("i"), &json!("0")));
        assert_eq!(
            e["root_cause"][0]["type"],
            "version_conflict_engine_exception"
        );
        assert_eq!(e["root_cause"][0]["index_uuid"], "fake-index-uuid");
    }
    let (s, v) = r.call("POST", "/i/_create/2", Some(json!({"n": 1}))).await;
    assert_eq!((s, &v["result"]), (201, &json!("created")));
    let (s, v) = r.call("DELETE", "/i/_doc/2", None).await;
    assert_eq!(
        (s, &v["result"], &v["_id"]),
        (200, &json!("deleted"), &json!("2"))
    );
    let (s, v) = r.call("DELETE", "/i/_doc/missing", None).await;
    assert_eq!((s, &v["result"]), (404, &json!("not_found")), "{v}");
    assert!(v.get("error").is_none(), "not an error: {v}");
    // `_update`: a missing document, then upserts, then a partial update.
    let (s, v) = r
        .call("POST", "/i/_update/u", Some(json!({"doc": {"n": 1}})))
        .await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["type"], "document_missing_exception");
    let (s, v) = r
        .call(
            "POST",
            "/i/_update/u",
            Some(json!({"doc": {"n": 1}, "doc_as_upsert": true})),
        )
        .await;
    assert_eq!((s, &v["result"]), (201, &json!("created")), "{v}");
    let (s, v) = r
        .call(
            "POST",
            "/i/_update/v",
            Some(json!({"doc": {"n": 2}, "upsert": {"n": 0}})),
        )
        .await;
    assert_eq!((s, &v["result"]), (201, &json!("created")), "{v}");
    let (s, v) = r
        .call(
            "POST",
            "/i/_update/u?retry_on_conflict=2&routing=r",
            Some(json!({"doc": {"n": 5}})),
        )
        .await;
    assert_eq!(
        (s, &v["result"], &v["_version"]),
        (200, &json!("updated"), &json!(2)),
        "{v}"
    );
    // The parameters reached the cluster: `refresh` on the `_bulk`, routing in the item.
    let (s, v) = r
        .call(
            "PUT",
            "/i/_doc/3?refresh=true&routing=r",
            Some(json!({"n": 1})),
        )
        .await;
    assert_eq!((s, &v["forced_refresh"]), (201, &json!(true)), "{v}");
    let last = r.bulk.queries().pop().flatten().unwrap_or_default();
    assert!(last.contains("refresh=true"), "{last}");
    let hit = r
        .cluster
        .node(0)
        .requests()
        .into_iter()
        .rev()
        .find(|q| q.path.ends_with("_bulk"))
        .unwrap();
    let line = String::from_utf8_lossy(&hit.body).into_owned();
    assert!(line.contains("\"routing\":\"r\""), "{line}");
    assert_eq!(r.backlog().await, 0, "nothing was queued");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_while_every_node_is_down_is_queued_and_delivered_once() {
    let r = relayed().await;
    r.bulk.create_index("q");
    r.cluster.node(0).kill().await;
    let (s, v) = r.call("PUT", "/q/_doc/a", Some(json!({"n": 1}))).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v, json!({"_index":"q","_id":"a","result":"queued"}));
    let (s, v) = r.call("POST", "/q/_doc", Some(json!({"n": 2}))).await;
    assert_eq!((s, &v["result"]), (202, &json!("queued")), "{v}");
    let assigned = v["_id"].as_str().unwrap().to_owned();
    let (s, _) = r.call("PUT", "/q/_create/c", Some(json!({"n": 3}))).await;
    assert_eq!(s, 202);
    let (s, _) = r
        .call("POST", "/q/_update/a", Some(json!({"doc": {"n": 9}})))
        .await;
    assert_eq!(s, 202);
    // Queued with `filter_path`: filtered like any success answer.
    let (s, v) = r
        .call("PUT", "/q/_doc/f?filter_path=result", Some(json!({"n": 4})))
        .await;
    assert_eq!((s, v), (202, json!({"result":"queued"})));
    assert_eq!(r.backlog().await, 5);
    r.cluster.node(0).revive().await.unwrap();
    r.drained().await;
    for id in ["c", "f", assigned.as_str()] {
        assert_eq!(r.bulk.writes("q", id), 1, "{id}: written exactly once");
    }
    // `a`: its index, then its update (one priority, delivered in order), each once.
    assert_eq!(r.bulk.writes("q", "a"), 2);
    let doc = r.bulk.get("q", "a").unwrap();
    assert_eq!(doc.version, 2);
    assert_eq!(
        serde_json::from_slice::<Value>(&doc.source).unwrap(),
        json!({"doc": {"n": 9}}),
        "the fake keeps an update's body as the source"
    );
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_while_every_node_is_down_is_queued_and_delivered() {
    let r = relayed().await;
    let (s, _) = r.call("PUT", "/d/_doc/x", Some(json!({"n": 1}))).await;
    assert_eq!(s, 201);
    r.cluster.node(0).kill().await;
    let (s, v) = r.call("DELETE", "/d/_doc/x", None).await;
    assert_eq!(
        (s, v),
        (202, json!({"_index":"d","_id":"x","result":"queued"}))
    );
    r.cluster.node(0).revive().await.unwrap();
    r.drained().await;
    assert!(r.bulk.get("d", "x").is_none(), "deleted on delivery");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_write_conflict_is_the_clusters_409() {
    let r = relayed().await;
    let seq = r.seq_no_of_a_new_document("/c/_doc/1").await;
    let stale = seq + 5;
    let (s, v) = r
        .call(
            "PUT",
            &format!("/c/_doc/1?if_seq_no={stale}&if_primary_term=1"),
            Some(json!({"n": 2})),
        )
        .await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["status"], 409);
    assert_eq!(
        v["error"]["reason"],
        format!("[1]: version conflict, required seqNo [{stale}], primary term [1]. current document has seqNo [{seq}] and primary term [1]")
    );
    assert_eq!(v["error"]["root_cause"][0]["reason"], v["error"]["reason"]);
    let (s, v) = r
        .call(
            "PUT",
            &format!("/c/_doc/1?if_seq_no={seq}&if_primary_term=1"),
            Some(json!({"n": 3})),
        )
        .await;
    assert_eq!((s, &v["result"]), (200, &json!("updated")), "{v}");
    let (s, _) = r
        .call(
            "DELETE",
            &format!("/c/_doc/1?if_seq_no={stale}&if_primary_term=1"),
            None,
        )
        .await;
    assert_eq!(s, 409);
    // External versions: the cluster decides; a stale version is its 409.
    let (s, v) = r
        .call(
            "PUT",
            "/c/_doc/e?version=5&version_type=external",
            Some(json!({})),
        )
        .await;
    assert_eq!((s, &v["_version"]), (201, &json!(5)), "{v}");
    let (s, v) = r
        .call(
            "PUT",
            "/c/_doc/e?version=5&version_type=external",
            Some(json!({})),
        )
        .await;
    assert_eq!(s, 409, "{v}");
    assert!(v["error"]["reason"]
        .as_str()
        .unwrap()
        .contains("current version [5]"));
    assert_eq!(r.backlog().await, 0);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_write_is_not_queued_but_an_externally_versioned_one_is() {
    let r = relayed().await;
    let seq = r.seq_no_of_a_new_document("/c/_doc/1").await;
    r.cluster.node(0).kill().await;
    let (s, v) = r
        .call(
            "PUT",
            &format!("/c/_doc/1?if_seq_no={seq}&if_primary_term=1"),
            Some(json!({"n": 2})),
        )
        .await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["error"]["type"], searchwire_relay::accept::NOT_QUEUED);
    assert!(
        v["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("not queued"),
        "{v}"
    );
    assert_eq!(r.backlog().await, 0, "a conditional write is never queued");
    // In a bulk request the same item gets the same answer, its neighbour is queued.
    let body = format!(
        "{{\"index\":{{\"_id\":\"1\",\"if_seq_no\":{seq},\"if_primary_term\":1}}}}\n{{\"n\":2}}\n\
         {{\"index\":{{\"_id\":\"2\"}}}}\n{{\"n\":2}}\n"
    );
    let (s, v) = r.raw("POST", "/c/_bulk", body.as_bytes()).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["items"][0]["index"]["status"], 503, "{v}");
    assert_eq!(v["items"][1]["index"]["result"], "queued", "{v}");
    // An externally versioned write keeps its version in the queue.
    let (s, _) = r
        .call(
            "PUT",
            "/c/_doc/e?version=7&version_type=external",
            Some(json!({})),
        )
        .await;
    assert_eq!(s, 202);
    assert_eq!(r.backlog().await, 2);
    r.cluster.node(0).revive().await.unwrap();
    r.drained().await;
    assert_eq!(
        r.bulk.get("c", "e").unwrap().version,
        7,
        "delivered with its version"
    );
    assert_eq!(
        r.bulk.get("c", "1").unwrap().version,
        1,
        "the conditional write never ran"
    );
    assert_eq!(r.queue.stats().await.unwrap().dead_letters, 0);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_update_is_passed_through_once_and_never_queued() {
    let r = relayed().await;
    let node = r.cluster.node(0);
    let path = "/s/_update/1";
    let answer = json!({"_index":"s","_id":"1","_version":3,"result":"updated",
        "_shards":{"total":2,"successful":1,"failed":0},"_seq_no":7,"_primary_term":1});
    node.on(
        Match::MethodPath("POST".into(), path.into()),
        Behavior::json(200, answer.clone()),
    );
    let script = json!({"script": {"source": "ctx._source.n += 1"}});
    let (s, v) = r
        .call(
            "POST",
            &format!("{path}?retry_on_conflict=3"),
            Some(script.clone()),
        )
        .await;
    assert_eq!((s, &v), (200, &answer));
    let sent = node.requests_matching(&Match::MethodPath("POST".into(), path.into()));
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].query.as_deref(),
        Some("retry_on_conflict=3"),
        "passed on as sent"
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&sent[0].body).unwrap(),
        script
    );
    // The cluster's error is the answer, status and body.
    let err = json!({"error":{"type":"illegal_argument_exception","reason":"failed to execute script"},"status":400});
    node.once(
        Match::MethodPath("POST".into(), path.into()),
        Behavior::json(400, err.clone()),
    );
    let (s, v) = r.call("POST", path, Some(script.clone())).await;
    assert_eq!((s, v), (400, err));
    // Sent, then the connection reset: not sent again, the outcome is unknown (500, which
    // clients do not retry on their own).
    node.clear_requests();
    node.once(
        Match::MethodPath("POST".into(), path.into()),
        Behavior::Reset,
    );
    let (s, v) = r.call("POST", path, Some(script.clone())).await;
    assert_eq!(s, 500, "{v}");
    assert_eq!(v["error"]["type"], searchwire_relay::OUTCOME_UNKNOWN);
    let sent = node.requests_matching(&Match::MethodPath("POST".into(), path.into()));
    assert_eq!(sent.len(), 1, "never repeated after an ambiguous failure");
    // No node: not sent, so safe to send again (503).
    node.kill().await;
    let (s, v) = r.call("POST", path, Some(script)).await;
    assert_eq!(s, 503, "{v}");
    assert!(
        v["error"]["reason"].as_str().unwrap().contains("not sent"),
        "{v}"
    );
    assert_eq!(r.backlog().await, 0, "a script is never queued");
    assert_eq!(
        r.bulk.batch_sizes().len(),
        0,
        "nothing went through the bulk path"
    );
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_methods_bodies_and_parameters_get_opensearchs_errors() {
    let r = relayed().await;
    let (s, v) = r.call("GET", "/i/_create/1", None).await;
    assert_eq!(s, 405);
    assert_eq!(
        v,
        json!({"error":"Incorrect HTTP method for uri [/i/_create/1] and method [GET], allowed: [POST, PUT]","status":405})
    );
    let (s, v) = r.call("PUT", "/i/_doc", Some(json!({}))).await;
    assert_eq!(
        (s, &v["error"]),
        (
            405,
            &json!("Incorrect HTTP method for uri [/i/_doc] and method [PUT], allowed: [POST]")
        )
    );
    let (s, _) = r.call("GET", "/i/_update/1", None).await;
    assert_eq!(s, 405);
    let (s, v) = r.call("PUT", "/BAD/_doc/1", Some(json!({}))).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["type"], "invalid_index_name_exception");
    assert_eq!(
        v["error"]["reason"],
        "Invalid index name [BAD], must be lowercase"
    );
    let (s, v) = r.call("PUT", "/i/_doc/1?bogus=1", Some(json!({}))).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["reason"],
        "request [/i/_doc/1] contains unrecognized parameter: [bogus]"
    );
    let (s, v) = r
        .call("PUT", "/i/_doc/1?op_type=bogus", Some(json!({})))
        .await;
    assert_eq!(
        (s, &v["error"]["reason"]),
        (
            400,
            &json!("opType must be 'create' or 'index', found: [bogus]")
        )
    );
    let (s, v) = r.raw("PUT", "/i/_doc/1", b"").await;
    assert_eq!(
        (s, &v["error"]["type"]),
        (400, &json!("parse_exception")),
        "{v}"
    );
    let (s, v) = r.raw("PUT", "/i/_doc/1", b"{\"n\":").await;
    assert_eq!(
        (s, &v["error"]["type"]),
        (400, &json!("mapper_parsing_exception")),
        "{v}"
    );
    let (s, v) = r.raw("PUT", "/i/_doc/1", b"[1,2]").await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = r.call("POST", "/i/_update/1", Some(json!({}))).await;
    assert_eq!(
        (s, &v["error"]["reason"]),
        (
            400,
            &json!("Validation Failed: 1: script or doc is missing;")
        )
    );
    let (s, v) = r
        .call("POST", "/i/_update/1", Some(json!({"doc": {}, "bogus": 1})))
        .await;
    assert_eq!(
        (s, &v["error"]["type"]),
        (400, &json!("x_content_parse_exception"))
    );
    assert!(
        r.bulk.batch_sizes().is_empty(),
        "nothing bad reached the cluster"
    );
    assert_eq!(r.backlog().await, 0, "nothing bad was queued");
    // A pretty-printed body is one document (its line breaks are whitespace).
    let (s, v) = r
        .raw(
            "PUT",
            "/i/_doc/p",
            b"{\n  \"n\": 1,\n  \"t\": \"a\\nb\"\n}\n",
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let stored = r.bulk.get("i", "p").unwrap().source;
    let stored: Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(stored, json!({"n": 1, "t": "a\nb"}));
    // A read of a document is not a write: not answered by the write routes.
    let (s, v) = r.call("GET", "/i/_doc/p", None).await;
    assert_ne!(s, 405, "{v}");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_path_shapes_the_bulk_and_single_document_answers() {
    let r = relayed().await;
    let body = b"{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n{\"create\":{\"_id\":\"1\"}}\n{\"n\":1}\n";
    // Elastic's go-docappender asks for exactly these fields.
    let (s, v) = r
        .raw(
            "POST",
            "/f/_bulk?filter_path=items.*._index,items.*.status,items.*.error.type,items.*.error.reason",
            body,
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        v,
        json!({"items":[{"index":{"_index":"f","status":201}},
            {"create":{"_index":"f","status":409,"error":{"type":"version_conflict_engine_exception",
                "reason":"[1]: version conflict, document already exists"}}}]})
    );
    let (_, v) = r
        .raw("POST", "/f/_bulk?filter_path=items.*.error", body)
        .await;
    assert_eq!(
        v["items"].as_array().unwrap().len(),
        1,
        "only the conflict: {v}"
    );
    assert!(
        v["items"][0]["create"]["error"]["index_uuid"].is_string(),
        "{v}"
    );
    let (_, v) = r
        .raw(
            "POST",
            "/f/_bulk?filter_path=took,errors,items.*.status",
            body,
        )
        .await;
    assert!(v["took"].is_u64());
    assert_eq!(
        v["items"],
        json!([{"index":{"status":200}},{"create":{"status":409}}])
    );
    let (_, v) = r
        .raw("POST", "/f/_bulk?filter_path=-took,-items.*._shards", body)
        .await;
    assert!(v.get("took").is_none() && v["errors"] == true, "{v}");
    assert!(v["items"][0]["index"].get("_shards").is_none(), "{v}");
    assert_eq!(v["items"][0]["index"]["_version"], 4);
    let (_, v) = r.raw("POST", "/f/_bulk?filter_path=**.status", body).await;
    assert_eq!(
        v["items"],
        json!([{"index":{"status":200}},{"create":{"status":409}}])
    );
    let (_, v) = r.raw("POST", "/f/_bulk?filter_path=nothing", body).await;
    assert_eq!(v, json!({}));
    // Percent-encoded by the client (`*` and `,`), decoded by the relay.
    let (_, v) = r
        .raw("POST", "/f/_bulk?filter_path=items.*.status,errors", body)
        .await;
    assert_eq!(
        v,
        json!({"errors":true,"items":[{"index":{"status":200}},{"create":{"status":409}}]})
    );
    // Single-document answers; an error answer is not filtered.
    let (s, v) = r
        .call("PUT", "/f/_doc/2?filter_path=_id,result", Some(json!({})))
        .await;
    assert_eq!((s, v), (201, json!({"_id":"2","result":"created"})));
    let (s, v) = r
        .call("DELETE", "/f/_doc/none?filter_path=result", None)
        .await;
    assert_eq!((s, v), (404, json!({"result":"not_found"})));
    let (s, v) = r
        .call("PUT", "/f/_create/2?filter_path=result", Some(json!({})))
        .await;
    assert_eq!(s, 409);
    assert_eq!(
        v["error"]["type"], "version_conflict_engine_exception",
        "{v}"
    );
    // A bulk error answer is not filtered either.
    let (s, v) = r
        .raw("POST", "/f/_bulk?filter_path=items", b"garbage\n")
        .await;
    assert_eq!(s, 400);
    assert!(v["error"]["reason"].is_string(), "{v}");
    r.shutdown().await;
}
