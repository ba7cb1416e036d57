//! The relay as a drop-in endpoint in front of real OpenSearch nodes, used by an ordinary
//! client (searchwire's own, pointed at the relay only): the version check, an index
//! template install and an index creation (pass-through with the relay's credentials, on
//! the default allow list), a gzip-compressed bulk write, a search and the mapping of what it
//! wrote (the template applied), sniffing (the relay is the only node), and an index delete
//! refused because it is not on the allow list.
//!
//! Gated like the other real-node tests: skipped without `SEARCHWIRE_TEST_CLUSTER` unless
//! `SEARCHWIRE_REQUIRE_CLUSTER=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;
mod relay_support;

use std::io::Write;

use real_support::{tmp, OPENSEARCH};
use relay_support::{free_port, spawn_relay, terminate};
use searchwire::{Client, Request};
use serde_json::{json, Value};

const INDEX: &str = "sw-passthrough-1";
const TEMPLATE: &str = "sw-passthrough-template";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn a_client_of_the_relay_reads_installs_templates_and_creates_indices_through_it() {
    let Some(urls) = OPENSEARCH.urls("real_relay_passthrough") else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let direct = Client::builder().nodes(urls.clone()).build().unwrap();
        let _ = direct.send(Request::delete(format!("/{INDEX}"))).await;
        let _ = direct
            .send(Request::delete(format!("/_index_template/{TEMPLATE}")))
            .await;
        let queue = tmp("passthrough-queue");
        let relay = spawn_relay(&urls.join(","), &queue, free_port(), &[]).await;
        let via = Client::builder()
            .node(format!("http://{}", relay.addr))
            .build()
            .unwrap();

        // The version check every client and shipper makes first.
        let root: Value = via.send(Request::get("/")).await.unwrap().json().unwrap();
        assert_eq!(root["version"]["distribution"], "opensearch", "{root}");

        // Start-up management: a template, then the index it applies to.
        let put = via
            .send(
                Request::put(format!("/_index_template/{TEMPLATE}")).json(&json!({
                    "index_patterns": ["sw-passthrough-*"],
                    "template": {
                        "settings": {"number_of_shards": 1},
                        "mappings": {"properties": {"tag": {"type": "keyword"}}}
                    }
                })),
            )
            .await
            .unwrap();
        assert_eq!(put.status(), 200, "{}", put.text());
        let created = via.send(Request::put(format!("/{INDEX}"))).await.unwrap();
        assert_eq!(created.status(), 200, "{}", created.text());
        let v: Value = created.json().unwrap();
        assert_eq!(v["acknowledged"], true, "{v}");
        // A second creation is the cluster's own 400, passed through.
        let again = via
            .send(Request::put(format!("/{INDEX}")))
            .await
            .unwrap_err();
        let again = again.response().unwrap();
        assert_eq!(again.status(), 400);
        let v: Value = again.json().unwrap();
        assert_eq!(
            v["error"]["type"], "resource_already_exists_exception",
            "{v}"
        );

        // A gzip-compressed bulk write, then a search and the mapping of what it wrote.
        let mut body = String::new();
        for i in 0..3 {
            body.push_str(&format!(
                "{{\"index\":{{\"_id\":\"{i}\"}}}}\n{{\"tag\":\"t{i}\"}}\n"
            ));
        }
        let bulk = via
            .send(
                Request::post(format!("/{INDEX}/_bulk"))
                    .query("refresh", "true")
                    .header("Content-Encoding", "gzip")
                    .body_with_type(gzip(body.as_bytes()), "application/x-ndjson"),
            )
            .await
            .unwrap();
        let v: Value = bulk.json().unwrap();
        assert_eq!(v["errors"], false, "{v}");
        let found: Value = via
            .send(
                Request::post(format!("/{INDEX}/_search"))
                    .json(&json!({"query": {"term": {"tag": "t1"}}})),
            )
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(found["hits"]["total"]["value"], 1, "{found}");
        assert_eq!(found["hits"]["hits"][0]["_id"], "1", "{found}");
        let count: Value = via
            .send(Request::get(format!("/{INDEX}/_count")))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(count["count"], 3, "{count}");
        let mapping: Value = via
            .send(Request::get(format!("/{INDEX}/_mapping")))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(
            mapping[INDEX]["mappings"]["properties"]["tag"]["type"], "keyword",
            "the template applied: {mapping}"
        );
        let health: Value = via
            .send(Request::get("/_cluster/health"))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert!(health["status"].is_string(), "{health}");

        // Sniffing: the relay is the only node.
        let nodes: Value = via
            .send(Request::get("/_nodes/_all/http"))
            .await
            .unwrap()
            .json()
            .unwrap();
        let list = nodes["nodes"].as_object().unwrap();
        assert_eq!(list.len(), 1, "{nodes}");
        assert_eq!(
            list.values().next().unwrap()["http"]["publish_address"],
            relay.addr.to_string()
        );

        // Deleting the index is not on the default allow list: refused, the index stays.
        let refused = via
            .send(Request::delete(format!("/{INDEX}")))
            .await
            .unwrap_err();
        assert_eq!(refused.response().unwrap().status(), 403);
        let still = direct
            .send(Request::head(format!("/{INDEX}")))
            .await
            .unwrap();
        assert_eq!(still.status(), 200);

        terminate(relay).await;
        let _ = direct.send(Request::delete(format!("/{INDEX}"))).await;
        let _ = direct
            .send(Request::delete(format!("/_index_template/{TEMPLATE}")))
            .await;
    });
}
