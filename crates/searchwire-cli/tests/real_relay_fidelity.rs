//! The relay's answers next to a real OpenSearch node's for the same bulk requests: one
//! index written directly, a twin written through `searchwire relay`, the same requests to
//! both (an index, a `create` conflict, an `update` that changes nothing, an update, a delete
//! of a missing document, a mapping error, an update of a missing document; then
//! `refresh=true`, `refresh=wait_for`, `wait_for_active_shards`, and a bad
//! `wait_for_active_shards`), and the answers compared field by field. Only values that must
//! differ are left out: `took`, the index name and `index_uuid` (two indices), and
//! `_seq_no`/`_primary_term` (compared as present numbers).
//!
//! Gated like the other real-node tests: skipped without `SEARCHWIRE_TEST_CLUSTER` unless
//! `SEARCHWIRE_REQUIRE_CLUSTER=1`. Run only under the machine-wide cluster lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fidelity_support;
mod real_support;
mod relay_support;

use std::net::SocketAddr;

use fidelity_support::{assert_same, twins};
use real_support::OPENSEARCH;
use relay_support::{http, terminate};
use serde_json::{Map, Value};

const DIRECT: &str = "sw-fidelity-direct";
const RELAYED: &str = "sw-fidelity-relay";

/// The same request to the node and to the relay, each for its own index: both answers.
async fn both(node: SocketAddr, relay: SocketAddr, query: &str, body: &str) -> (Value, Value) {
    let send = async |addr: SocketAddr, index: &str| {
        let path = format!("/{index}/_bulk{query}");
        let (status, text) = http(addr, "POST", &path, body.as_bytes())
            .await
            .unwrap_or_else(|| panic!("no answer from {addr} for {path}"));
        let mut v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{addr} {path}: not JSON ({e}): {text}"));
        normalize(&mut v, index);
        (status, v)
    };
    let (s1, direct) = send(node, DIRECT).await;
    let (s2, relayed) = send(relay, RELAYED).await;
    assert_eq!(
        s1, s2,
        "HTTP status for {query}: direct {direct}, relayed {relayed}"
    );
    (direct, relayed)
}

/// Leaves out what must differ: `took`, the index name, `index_uuid`, and the values of
/// `_seq_no`/`_primary_term` (kept as `"<number>"` when they are numbers).
fn normalize(v: &mut Value, index: &str) {
    match v {
        Value::Object(m) => {
            m.remove("took");
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "_index" | "index" if x == index => *x = Value::from("<index>"),
                    "index_uuid" if x.is_string() => *x = Value::from("<uuid>"),
                    "_seq_no" | "_primary_term" if x.is_number() => *x = Value::from("<number>"),
                    "reason" => {
                        if let Some(s) = x.as_str() {
                            *x = Value::from(s.replace(index, "<index>"));
                        }
                    }
                    _ => normalize(x, index),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| normalize(x, index)),
        _ => {}
    }
}

fn first_item(v: &Value) -> &Map<String, Value> {
    v["items"][0]
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("no item in {v}"))
}

#[test]
fn the_relay_answers_bulk_requests_as_opensearch_does() {
    let Some(urls) = OPENSEARCH.urls("real_relay_fidelity") else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let (node, relay) = twins(&urls, DIRECT, RELAYED, "fidelity-queue").await;

        let (d, r) = both(
            node,
            relay.addr,
            "",
            "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n{\"index\":{\"_id\":\"2\"}}\n{\"n\":2}\n",
        )
        .await;
        assert_same("two new documents", &d, &r);

        let body = concat!(
            "{\"index\":{\"_id\":\"3\"}}\n{\"n\":3}\n",
            "{\"create\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
            "{\"update\":{\"_id\":\"2\"}}\n{\"doc\":{\"n\":2}}\n",
            "{\"update\":{\"_id\":\"1\"}}\n{\"doc\":{\"n\":5}}\n",
            "{\"delete\":{\"_id\":\"missing\"}}\n",
            "{\"index\":{\"_id\":\"4\"}}\n{\"n\":\"not a number\"}\n",
            "{\"update\":{\"_id\":\"nope\"}}\n{\"doc\":{\"n\":1}}\n",
        );
        let (d, r) = both(node, relay.addr, "", body).await;
        eprintln!("mixed bulk, direct: {d}");
        assert_same(
            "index, create conflict, noop, update, delete missing, mapping error, missing doc",
            &d,
            &r,
        );
        // The cases the comparison is about are really there.
        let results: Vec<String> = d["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let o = i.as_object().unwrap().values().next().unwrap();
                o.get("result")
                    .or(o.get("error").map(|e| &e["type"]))
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            results,
            [
                "created",
                "version_conflict_engine_exception",
                "noop",
                "updated",
                "not_found",
                "mapper_parsing_exception",
                "document_missing_exception"
            ]
        );

        // One new document per request, with the parameters under test.
        let mut last = Value::Null;
        for (n, query) in [
            "?refresh=true",
            "?refresh=wait_for&timeout=10s",
            "?wait_for_active_shards=all",
            "?wait_for_active_shards=bogus",
        ]
        .into_iter()
        .enumerate()
        {
            let body = format!("{{\"index\":{{\"_id\":\"p{n}\"}}}}\n{{\"n\":{n}}}\n");
            let (d, r) = both(node, relay.addr, query, &body).await;
            assert_same(query, &d, &r);
            if n == 0 {
                assert_eq!(first_item(&r)["forced_refresh"], true, "{r}");
            }
            last = d;
        }
        eprintln!("bad wait_for_active_shards, direct: {last}");
        assert_eq!(last["status"], 400, "the cluster's own 400: {last}");

        let (status, h) = http(relay.addr, "GET", "/health/retry-queue", b"")
            .await
            .unwrap();
        assert_eq!(status, 200, "{h}");
        let h: Value = serde_json::from_str(&h).unwrap();
        assert_eq!(h["backlog"], 0, "nothing was queued: {h}");
        terminate(relay).await;
    });
}
