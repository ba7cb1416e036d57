//! The built-in answers that make a fake node look like OpenSearch 2.19 to a client:
//! the root info document, cluster health and nodes info.

use std::net::SocketAddr;

use serde_json::{json, Value};

/// The `cluster_name` every fake node reports.
pub const CLUSTER_NAME: &str = "fake-cluster";
/// The OpenSearch version every fake node reports.
pub const VERSION: &str = "2.19.0";

/// One node in a [`nodes_info_json`] reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfoSpec {
    /// The node id (the key under `nodes`).
    pub id: String,
    /// The node name.
    pub name: String,
    /// `http.publish_address`, either `"127.0.0.1:9201"` or `"localhost/127.0.0.1:9201"`
    /// (the `hostname/ip:port` form OpenSearch uses when `network.publish_host` is a name).
    pub publish_address: String,
    /// Node roles, e.g. `["data", "ingest", "cluster_manager"]`.
    pub roles: Vec<String>,
    /// `os.allocated_processors` (also used for `available_processors`).
    pub allocated_processors: u32,
}

impl NodeInfoSpec {
    /// A data + ingest + cluster_manager node with 8 processors, the shape the fake nodes
    /// report by default.
    pub fn new(id: &str, name: &str, publish_address: &str) -> NodeInfoSpec {
        NodeInfoSpec {
            id: id.to_owned(),
            name: name.to_owned(),
            publish_address: publish_address.to_owned(),
            roles: default_roles(),
            allocated_processors: 8,
        }
    }
}

fn default_roles() -> Vec<String> {
    ["data", "ingest", "cluster_manager"]
        .into_iter()
        .map(String::from)
        .collect()
}

/// A realistic `GET /_nodes/http,os` reply listing `nodes`.
///
/// ```
/// use searchwire_fake::{nodes_info_json, NodeInfoSpec};
/// let reply = nodes_info_json(&[NodeInfoSpec::new("a1", "node-a", "localhost/127.0.0.1:9201")]);
/// assert_eq!(reply["nodes"]["a1"]["http"]["publish_address"], "localhost/127.0.0.1:9201");
/// assert_eq!(reply["nodes"]["a1"]["host"], "localhost");
/// assert_eq!(reply["nodes"]["a1"]["ip"], "127.0.0.1");
/// ```
pub fn nodes_info_json(nodes: &[NodeInfoSpec]) -> Value {
    let mut map = serde_json::Map::new();
    for node in nodes {
        map.insert(node.id.clone(), node_json(node));
    }
    json!({
        "_nodes": { "total": nodes.len(), "successful": nodes.len(), "failed": 0 },
        "cluster_name": CLUSTER_NAME,
        "nodes": Value::Object(map),
    })
}

fn node_json(node: &NodeInfoSpec) -> Value {
    // "host/ip:port" or "ip:port".
    let (host, ip_port) = match node.publish_address.split_once('/') {
        Some((host, rest)) => (Some(host), rest),
        None => (None, node.publish_address.as_str()),
    };
    let ip = ip_port
        .rsplit_once(':')
        .map_or(ip_port, |(ip, _port)| ip)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let host = host.unwrap_or(ip);
    json!({
        "name": node.name,
        "transport_address": format!("{ip}:9300"),
        "host": host,
        "ip": ip,
        "version": VERSION,
        "build_type": "fake",
        "build_hash": "fake",
        "total_indexing_buffer": 53687091,
        "roles": node.roles,
        "attributes": { "shard_indexing_pressure_enabled": "true" },
        "http": {
            "bound_address": [ip_port],
            "publish_address": node.publish_address,
            "max_content_length_in_bytes": 104857600,
        },
        "os": {
            "refresh_interval_in_millis": 1000,
            "name": "Linux",
            "pretty_name": "Linux",
            "arch": "amd64",
            "version": "6.0.0",
            "available_processors": node.allocated_processors,
            "allocated_processors": node.allocated_processors,
        },
    })
}

/// A member of the cluster a node believes it belongs to.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
}

impl Member {
    pub(crate) fn new(name: &str, addr: SocketAddr) -> Member {
        Member {
            id: node_id(name),
            name: name.to_owned(),
            addr,
        }
    }
}

/// The node id a fake node reports for itself in nodes info.
pub(crate) fn node_id(name: &str) -> String {
    format!("id-{name}")
}

/// The built-in answer of node `name` (member of `members`) to `method path`.
pub(crate) fn default_answer(
    name: &str,
    members: &[Member],
    method: &str,
    path: &str,
) -> (u16, Value) {
    let get = method.eq_ignore_ascii_case("GET");
    let head = method.eq_ignore_ascii_case("HEAD");
    if path == "/" && (get || head) {
        return (200, root_info(name));
    }
    if get && (path == "/_cluster/health" || path.starts_with("/_cluster/health/")) {
        return (200, cluster_health(members.len()));
    }
    if get && is_nodes_info(path) {
        let specs: Vec<NodeInfoSpec> = members
            .iter()
            .map(|m| NodeInfoSpec::new(&m.id, &m.name, &m.addr.to_string()))
            .collect();
        return (200, nodes_info_json(&specs));
    }
    (200, json!({ "node": name, "method": method, "path": path }))
}

fn root_info(name: &str) -> Value {
    json!({
        "name": name,
        "cluster_name": CLUSTER_NAME,
        "cluster_uuid": "fake-uuid",
        "version": {
            "distribution": "opensearch",
            "number": VERSION,
            "build_type": "fake",
            "lucene_version": "9.12.1",
            "minimum_wire_compatibility_version": "7.10.0",
            "minimum_index_compatibility_version": "7.0.0",
        },
        "tagline": "The OpenSearch Project: https://opensearch.org/",
    })
}

fn cluster_health(nodes: usize) -> Value {
    json!({
        "cluster_name": CLUSTER_NAME,
        "status": "green",
        "timed_out": false,
        "number_of_nodes": nodes,
        "number_of_data_nodes": nodes,
        "discovered_master": true,
        "discovered_cluster_manager": true,
        "active_primary_shards": 0,
        "active_shards": 0,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": 0,
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": 100.0,
    })
}

/// The nodes-info paths discovery clients use (`_nodes/http`, `_nodes/http,os`, with or
/// without `_all`, comma possibly percent-encoded).
fn is_nodes_info(path: &str) -> bool {
    let path = path.replace("%2C", ",").replace("%2c", ",");
    let metrics = path
        .strip_prefix("/_nodes")
        .map(|rest| rest.strip_prefix("/_all").unwrap_or(rest));
    matches!(
        metrics,
        Some("" | "/" | "/http" | "/http,os" | "/os,http" | "/_all")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_info_paths() {
        for p in [
            "/_nodes",
            "/_nodes/http",
            "/_nodes/http,os",
            "/_nodes/_all/http,os",
            "/_nodes/http%2Cos",
        ] {
            assert!(is_nodes_info(p), "{p}");
        }
        for p in ["/_nodes/stats", "/_nodesx", "/_cluster/health"] {
            assert!(!is_nodes_info(p), "{p}");
        }
    }

    #[test]
    fn plain_publish_address_gives_ip_as_host() {
        let v = nodes_info_json(&[NodeInfoSpec::new("x", "n", "127.0.0.1:9201")]);
        assert_eq!(v["_nodes"]["total"], 1);
        assert_eq!(v["nodes"]["x"]["host"], "127.0.0.1");
        assert_eq!(v["nodes"]["x"]["ip"], "127.0.0.1");
        assert_eq!(
            v["nodes"]["x"]["roles"],
            json!(["data", "ingest", "cluster_manager"])
        );
        assert_eq!(v["nodes"]["x"]["os"]["allocated_processors"], 8);
    }

    #[test]
    fn health_counts_members() {
        let members = vec![
            Member::new("a", SocketAddr::from(([127, 0, 0, 1], 1))),
            Member::new("b", SocketAddr::from(([127, 0, 0, 1], 2))),
        ];
        let (status, v) = default_answer("a", &members, "GET", "/_cluster/health");
        assert_eq!(status, 200);
        assert_eq!(v["number_of_nodes"], 2);
        let (_, v) = default_answer("a", &members, "DELETE", "/idx");
        assert_eq!(v, json!({"node": "a", "method": "DELETE", "path": "/idx"}));
    }
}
