//! Health checks of individual nodes: `GET /`, sent with the same headers and credentials
//! as user requests, bounded by the health-check timeout, never retried.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;

use crate::client::{error_chain, Inner};
use crate::node::NodeAddr;
use crate::pool::PoolNode;

/// What `GET /` tells about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// `name`.
    pub name: String,
    /// `cluster_name`.
    pub cluster_name: String,
    /// `version.number`.
    pub version: String,
    /// `opensearch` or `elasticsearch` (from `version.distribution`; absent means
    /// Elasticsearch).
    pub distribution: String,
}

/// The result of one health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CheckResult {
    /// The node answered `GET /` with a valid body.
    Healthy(NodeInfo),
    /// The node is reachable but rejected the credentials (401/403): alive, not healthy
    /// for the user, never dead.
    AuthRejected(u16),
    /// The node answered, but not usefully (a 5xx while starting, a body that is not an
    /// OpenSearch info document).
    Unhealthy(String),
    /// The node could not be reached (connect, reset, timeout).
    Unreachable(String),
}

#[derive(Deserialize)]
struct RootBody {
    name: String,
    cluster_name: String,
    version: RootVersion,
}

#[derive(Deserialize)]
struct RootVersion {
    number: String,
    distribution: Option<String>,
}

/// Parses a `GET /` body. Requires `name`, `cluster_name` and `version.number`.
pub(crate) fn parse_root(body: &[u8]) -> Result<NodeInfo, String> {
    let b: RootBody = serde_json::from_slice(body).map_err(|e| {
        format!("GET / did not return an OpenSearch/Elasticsearch info document: {e}")
    })?;
    Ok(NodeInfo {
        name: b.name,
        cluster_name: b.cluster_name,
        version: b.version.number,
        distribution: b
            .version
            .distribution
            .unwrap_or_else(|| "elasticsearch".to_string()),
    })
}

/// Sends one background `GET path` request to `addr` (health checks, capability probes,
/// discovery): the client's default headers and credentials, bounded by `timeout`, never
/// retried. A timeout or broken connection drops the node's pooled connections. Returns
/// the status and body, or why it failed.
pub(crate) async fn background_get(
    inner: &Inner,
    addr: &NodeAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let uri = addr.uri(path, "").map_err(|e| e.to_string())?;
    let mut req = http::Request::new(Full::new(Bytes::new()));
    *req.uri_mut() = uri;
    *req.headers_mut() = inner.headers.clone();
    match tokio::time::timeout(timeout, inner.connector.send(addr, req)).await {
        Err(_) => {
            inner.connector.reset(addr);
            Err(format!(
                "timed out after {}",
                crate::duration::format_duration(timeout)
            ))
        }
        Ok(Err(e)) => {
            inner.connector.reset(addr);
            Err(format!("{}: {}", e.kind, error_chain(&*e.source)))
        }
        Ok(Ok(raw)) => Ok((raw.status.as_u16(), raw.body)),
    }
}

/// A health request to `node`, bounded by the health-check timeout.
pub(crate) async fn probe(
    inner: &Inner,
    node: &PoolNode,
    path: &str,
) -> Result<(u16, Bytes), String> {
    background_get(inner, &node.addr, path, inner.health_timeout)
        .await
        .map_err(|e| format!("health check {path}: {e}"))
}

/// Checks a node with `GET /`.
pub(crate) async fn check_root(inner: &Inner, node: &PoolNode) -> CheckResult {
    match probe(inner, node, "/").await {
        Err(e) => CheckResult::Unreachable(e),
        Ok((200, body)) => match parse_root(&body) {
            Ok(info) => CheckResult::Healthy(info),
            Err(e) => CheckResult::Unhealthy(e),
        },
        Ok((s @ (401 | 403), _)) => CheckResult::AuthRejected(s),
        Ok((s, _)) => CheckResult::Unhealthy(format!("GET / answered {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_opensearch_and_elasticsearch_roots() {
        let os = br#"{"name":"n1","cluster_name":"c","version":{"distribution":"opensearch","number":"2.19.0"}}"#;
        let i = parse_root(os).unwrap();
        assert_eq!(i.version, "2.19.0");
        assert_eq!(i.distribution, "opensearch");
        let es = br#"{"name":"n1","cluster_name":"c","version":{"number":"8.15.0"}}"#;
        assert_eq!(parse_root(es).unwrap().distribution, "elasticsearch");
        assert!(parse_root(b"<html>").is_err());
        assert!(parse_root(br#"{"name":"x"}"#).is_err());
    }
}
