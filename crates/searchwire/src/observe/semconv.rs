//! OpenTelemetry's database conventions for the request span and the
//! `db.client.operation.duration` histogram: the operation (endpoint) name of a request,
//! the span name built from it, and the database system a health check reported.
//!
//! The conventions for Elasticsearch (which OpenSearch follows, with `db.system.name` =
//! `opensearch`) name the span `{db.operation.name} {db.collection.name}` (`search logs`),
//! or `{db.operation.name}` when the request names no index; `db.operation.name` is the
//! endpoint identifier (`search`, `bulk`, `index`, `get`...), `db.collection.name` the
//! index, `db.namespace` the cluster's name.

use std::sync::atomic::{AtomicU8, Ordering};

use http::Method;

/// `db.system.name` before any health check said otherwise.
const UNKNOWN: u8 = 0;
const OPENSEARCH: u8 = 1;
const ELASTICSEARCH: u8 = 2;

/// The database system of the cluster, as the last `GET /` answer reported it.
#[derive(Debug, Default)]
pub(crate) struct SystemName(AtomicU8);

impl SystemName {
    /// Records a node's `version.distribution` (`opensearch`, else Elasticsearch).
    pub(crate) fn learn(&self, distribution: &str) {
        let v = if distribution.eq_ignore_ascii_case("opensearch") {
            OPENSEARCH
        } else {
            ELASTICSEARCH
        };
        self.0.store(v, Ordering::Relaxed);
    }

    /// `opensearch` or `elasticsearch`; `opensearch` until a health check told.
    pub(crate) fn get(&self) -> &'static str {
        match self.0.load(Ordering::Relaxed) {
            ELASTICSEARCH => "elasticsearch",
            OPENSEARCH | UNKNOWN => "opensearch",
            _ => "opensearch",
        }
    }
}

/// The endpoint identifier of a request (`db.operation.name`), from its method and the
/// path as sent: the last `_`-endpoint segment decides (`/logs/_search` → `search`,
/// `/_cat/indices` → `cat.indices`, `/_cluster/health` → `cluster.health`); a document
/// path without one is `get`/`exists`/`index`/`delete` by method; `/` is `info`.
pub(crate) fn operation_name(method: &Method, path: &str) -> &'static str {
    let path = path.split('?').next().unwrap_or("");
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    let first = segs.next();
    let Some(first) = first else {
        return if *method == Method::HEAD {
            "ping"
        } else {
            "info"
        };
    };
    // The first endpoint segment (`_search`, `_doc`, `_cat`...) and the segment after it.
    let (endpoint, after) = if first.starts_with('_') {
        (first, segs.next())
    } else {
        let mut rest = segs;
        match rest.find(|s| s.starts_with('_')) {
            Some(e) => (e, rest.next()),
            None => {
                return match *method {
                    Method::HEAD => "indices.exists",
                    Method::GET => "indices.get",
                    Method::PUT => "indices.create",
                    Method::DELETE => "indices.delete",
                    _ => "other",
                }
            }
        }
    };
    match (endpoint, after) {
        ("_search", Some("scroll")) => "scroll",
        ("_search", Some("point_in_time")) => "create_pit",
        ("_search", _) => "search",
        ("_msearch", _) => "msearch",
        ("_count", _) => "count",
        ("_mget", _) => "mget",
        ("_field_caps", _) => "field_caps",
        ("_bulk", _) => "bulk",
        ("_update", _) => "update",
        ("_create", _) => "create",
        ("_update_by_query", _) => "update_by_query",
        ("_delete_by_query", _) => "delete_by_query",
        ("_refresh", _) => "indices.refresh",
        ("_mapping", _) => "indices.mapping",
        ("_settings", _) => "indices.settings",
        ("_pit", _) => "create_pit",
        ("_async_search", _) => "async_search",
        ("_doc", _) => match *method {
            Method::GET => "get",
            Method::HEAD => "exists",
            Method::DELETE => "delete",
            _ => "index",
        },
        ("_cluster", Some("health")) => "cluster.health",
        ("_cluster", Some("state")) => "cluster.state",
        ("_cluster", Some("settings")) => "cluster.settings",
        ("_cluster", _) => "cluster",
        ("_cat", Some("indices")) => "cat.indices",
        ("_cat", Some("nodes")) => "cat.nodes",
        ("_cat", Some("health")) => "cat.health",
        ("_cat", _) => "cat",
        ("_nodes", _) => "nodes",
        ("_aliases" | "_alias", _) => "indices.aliases",
        ("_template" | "_index_template", _) => "indices.template",
        ("_tasks", _) => "tasks",
        ("_snapshot", _) => "snapshot",
        ("_reindex", _) => "reindex",
        ("_ingest", _) => "ingest",
        _ => "other",
    }
}

/// Every operation name [`operation_name`] returns, the most common first (the metrics
/// observer caches one histogram key per entry); `other` is last.
#[cfg(any(feature = "metrics", test))]
pub(crate) const OPERATIONS: [&str; 42] = [
    "info",
    "indices.exists",
    "indices.get",
    "indices.create",
    "indices.delete",
    "scroll",
    "create_pit",
    "search",
    "msearch",
    "count",
    "mget",
    "field_caps",
    "bulk",
    "update",
    "create",
    "update_by_query",
    "delete_by_query",
    "indices.refresh",
    "indices.mapping",
    "indices.settings",
    "async_search",
    "get",
    "exists",
    "delete",
    "index",
    "cluster.health",
    "cluster.state",
    "cluster.settings",
    "cluster",
    "cat.indices",
    "cat.nodes",
    "cat.health",
    "cat",
    "nodes",
    "indices.aliases",
    "indices.template",
    "tasks",
    "snapshot",
    "reindex",
    "ingest",
    "ping",
    "other",
];

/// The position of `op` (one of [`OPERATIONS`], compared by address first) in the table.
#[cfg(any(feature = "metrics", test))]
pub(crate) fn operation_index(op: &'static str) -> usize {
    OPERATIONS
        .iter()
        .position(|o| std::ptr::eq(*o, op) || *o == op)
        .unwrap_or(OPERATIONS.len() - 1)
}

/// The span name: `{operation} {index}`, or `{operation}` without an index.
pub(crate) fn span_name(operation: &str, index: Option<&str>) -> String {
    match index {
        Some(i) => format!("{operation} {i}"),
        None => operation.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_by_their_endpoint() {
        let op = |m: Method, p: &str| operation_name(&m, p);
        assert_eq!(op(Method::POST, "/logs/_search"), "search");
        assert_eq!(op(Method::GET, "/_search?q=a"), "search");
        assert_eq!(op(Method::POST, "/_search/scroll"), "scroll");
        assert_eq!(op(Method::POST, "/_bulk"), "bulk");
        assert_eq!(op(Method::POST, "/logs/_bulk"), "bulk");
        assert_eq!(op(Method::PUT, "/logs/_doc/1"), "index");
        assert_eq!(op(Method::POST, "/logs/_doc"), "index");
        assert_eq!(op(Method::GET, "/logs/_doc/1"), "get");
        assert_eq!(op(Method::DELETE, "/logs/_doc/1"), "delete");
        assert_eq!(op(Method::POST, "/logs/_update/1"), "update");
        assert_eq!(op(Method::GET, "/_cluster/health"), "cluster.health");
        assert_eq!(op(Method::GET, "/_cat/indices"), "cat.indices");
        assert_eq!(op(Method::GET, "/"), "info");
        assert_eq!(op(Method::HEAD, "/"), "ping");
        assert_eq!(op(Method::PUT, "/logs"), "indices.create");
        assert_eq!(op(Method::POST, "/logs/_count"), "count");
        assert_eq!(op(Method::POST, "/_mget"), "mget");
        assert_eq!(op(Method::POST, "/logs/_pit"), "create_pit");
        assert_eq!(op(Method::POST, "/logs/_whatever"), "other");
    }

    #[test]
    fn every_operation_has_its_place_in_the_table() {
        assert_eq!(OPERATIONS[operation_index("info")], "info");
        assert_eq!(OPERATIONS[operation_index("search")], "search");
        assert_eq!(OPERATIONS[operation_index("cat.nodes")], "cat.nodes");
        assert_eq!(OPERATIONS[OPERATIONS.len() - 1], "other");
        let op = operation_name(&Method::POST, "/logs/_bulk");
        assert_eq!(OPERATIONS[operation_index(op)], "bulk");
    }

    #[test]
    fn span_names_and_systems() {
        assert_eq!(span_name("search", Some("logs")), "search logs");
        assert_eq!(span_name("bulk", None), "bulk");
        let s = SystemName::default();
        assert_eq!(s.get(), "opensearch");
        s.learn("elasticsearch");
        assert_eq!(s.get(), "elasticsearch");
        s.learn("opensearch");
        assert_eq!(s.get(), "opensearch");
    }
}
