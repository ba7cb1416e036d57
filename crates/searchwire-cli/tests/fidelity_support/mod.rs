//! What the fidelity tests share (the relay's answers next to a real node's): a field by
//! field comparison that names every difference, and an index whose shards stay put.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use searchwire::{Client, Request};
use serde_json::{json, Value};

use crate::real_support::{cluster_health, tmp};
use crate::relay_support::{free_port, spawn_relay, RelayProc};

/// Two steady indices, `direct` and `relayed`, and `searchwire relay` in front of the
/// cluster (its queue in a fresh `queue` directory): the first node's address and the relay.
pub async fn twins(
    urls: &[String],
    direct: &str,
    relayed: &str,
    queue: &str,
) -> (SocketAddr, RelayProc) {
    let client = Client::builder().nodes(urls.to_vec()).build().unwrap();
    steady_index(&client, direct).await;
    steady_index(&client, relayed).await;
    let node: SocketAddr = urls[0].trim_start_matches("http://").parse().unwrap();
    let relay = spawn_relay(&urls.join(","), &tmp(queue), free_port(), &[]).await;
    (node, relay)
}

/// Field by field: every difference named with its path (a readable failure).
pub fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            let none = Value::Null;
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => differences(&format!("{path}.{k}"), l, r, out),
                    (l, r) => out.push(format!(
                        "{path}.{k}: direct {}, relayed {}",
                        l.unwrap_or(&none),
                        r.unwrap_or(&none)
                    )),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), l, r, out);
            }
        }
        _ if a != b => out.push(format!("{path}: direct {a}, relayed {b}")),
        _ => {}
    }
}

pub fn assert_same(what: &str, direct: &Value, relayed: &Value) {
    let mut diff = Vec::new();
    differences("", direct, relayed, &mut diff);
    assert!(
        diff.is_empty(),
        "{what}: the relay's answer differs from OpenSearch's:\n  {}\ndirect:  {direct}\nrelayed: {relayed}",
        diff.join("\n  ")
    );
}

/// An index whose shards stay where they are: `_shards.total` counts a relocation target
/// while a shard moves (3 instead of 2), so a rebalance that the earlier tests' node kills
/// set off would make the two answers differ for a reason that is not the relay's.
pub async fn steady_index(client: &Client, index: &str) {
    let _ = client.send(Request::delete(format!("/{index}"))).await;
    client
        .send(Request::put(format!("/{index}")).json(&json!({
            "settings": {
                "number_of_shards": 3,
                "number_of_replicas": 1,
                "index.routing.rebalance.enable": "none"
            },
            "mappings": {"properties": {"id": {"type": "keyword"}, "n": {"type": "long"}}}
        })))
        .await
        .unwrap();
    let health = cluster_health(
        client,
        index,
        &[
            ("wait_for_status", "green"),
            ("wait_for_no_relocating_shards", "true"),
            ("wait_for_no_initializing_shards", "true"),
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        health["timed_out"], false,
        "{index} did not settle: {health}"
    );
}
