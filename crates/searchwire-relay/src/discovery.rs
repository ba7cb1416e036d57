//! Node discovery stays on the relay: `GET /_nodes` and its node-info forms (`/_nodes/http`,
//! `/_nodes/_all/http`, `/_nodes/{filter}/http,os`, ...) answer with the relay as the only
//! node, at its advertised address. Sniffing clients (opensearch-py's and the Elasticsearch
//! clients' sniffers, the Java `Sniffer`, go-elasticsearch's discovery) read
//! `nodes.*.http.publish_address` and skip nodes whose roles are only `master`/
//! `cluster_manager`; so the relay is one `data`+`ingest` node and they keep talking to the
//! relay instead of going around it to the nodes behind it.
//!
//! The advertised address is `--advertise-address`, else the listen address; when the relay
//! listens on every interface (`0.0.0.0`, `::`) and none is given, the `Host` the client used
//! to reach the relay, which is an address that client can reach.

use http::header;
use serde_json::{json, Value};

use crate::accept::Answer;
use crate::route::{Call, Handled};

/// `_nodes` paths that are not node info (statistics, usage, actions): these pass through.
const NOT_INFO: &[&str] = &[
    "stats",
    "usage",
    "hot_threads",
    "reload_secure_settings",
    "_reload_secure_settings",
    "shutdown",
];

/// The route guard: `segs` (`_nodes` first) ask for node info.
pub(crate) fn is_info(segs: &[String]) -> bool {
    segs.iter()
        .skip(1)
        .all(|s| !s.split(',').any(|part| NOT_INFO.contains(&part)))
}

/// The discovery handler.
pub(crate) fn nodes(c: Call) -> Handled {
    Box::pin(async move {
        let shared = &c.shared;
        let address = match &shared.config.advertise_address {
            Some(a) => a.clone(),
            None if shared.listen.ip().is_unspecified() => c
                .req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .filter(|h| h.contains(':'))
                .map_or_else(|| shared.listen.to_string(), str::to_owned),
            None => shared.listen.to_string(),
        };
        let root = crate::identity::root(shared).await;
        Answer::json(
            http::StatusCode::OK,
            &answer(&root, &address, shared.config.max_body_bytes),
        )
    })
}

/// The `_nodes` answer naming the relay, at `address`, as the only node.
fn answer(root: &Value, address: &str, max_body: usize) -> Value {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(h, _)| h)
        .trim_matches(['[', ']']);
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    let version = root["version"]["number"].clone();
    json!({
        "_nodes": {"total": 1, "successful": 1, "failed": 0},
        "cluster_name": root["cluster_name"].clone(),
        "nodes": {
            "searchwire-relay": {
                "name": "searchwire-relay",
                "transport_address": address,
                "host": host,
                "ip": host,
                "version": version,
                "build_type": "searchwire",
                "roles": ["data", "ingest"],
                "attributes": {},
                "http": {
                    "bound_address": [address],
                    "publish_address": address,
                    "max_content_length_in_bytes": max_body,
                },
                "os": {
                    "available_processors": processors,
                    "allocated_processors": processors,
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_forms_stay_on_the_relay_and_statistics_pass_through() {
        let s = |p: &str| crate::pattern::segments(p);
        assert!(is_info(&s("/_nodes")));
        assert!(is_info(&s("/_nodes/http")));
        assert!(is_info(&s("/_nodes/_all/http")));
        assert!(is_info(&s("/_nodes/_local/http,os")));
        assert!(!is_info(&s("/_nodes/stats")));
        assert!(!is_info(&s("/_nodes/_local/stats/jvm")));
        assert!(!is_info(&s("/_nodes/hot_threads")));
    }

    #[test]
    fn the_relay_is_the_only_node_at_its_address() {
        let root = json!({"cluster_name": "c", "version": {"number": "2.19.0"}});
        let v = answer(&root, "10.0.0.5:9280", 100);
        let nodes = v["nodes"].as_object().unwrap();
        assert_eq!(nodes.len(), 1);
        let n = nodes.values().next().unwrap();
        assert_eq!(n["http"]["publish_address"], "10.0.0.5:9280");
        assert_eq!(n["host"], "10.0.0.5");
        assert_eq!(n["version"], "2.19.0");
        assert_eq!(
            answer(&root, "[::1]:9280", 1)["nodes"]["searchwire-relay"]["ip"],
            "::1"
        );
    }
}
