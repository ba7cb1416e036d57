//! Health checks of individual nodes, and the two-phase capability detection of
//! [`crate::nodes::capability`].
//!
//! - Every background request (health checks, capability probes, the periodic refresh,
//!   discovery) goes through [`background_get`]: the client's default headers and
//!   credentials, then the user's `health_check_request_modifier`, bounded by its own
//!   timeout, never retried, never `wait_for_status`.
//! - [`check_node`] is *the* health check (resurrection timers, discovery): `GET /` for
//!   Pending and Unavailable nodes, `/_cluster/health?local=true` for Available ones (with a
//!   fallback to `GET /` when that answers 401/403). A successful `GET /` starts a capability
//!   probe in the background when one is due; the check does not wait for it.
//! - A 401/403 is never death: the node is reachable and the problem is the client's
//!   configuration. Connectivity failures (and `GET /` answers that are not an info
//!   document) fail the check; the caller marks the node dead.
//! - Cluster-wide facts (status red, initializing shards, ...) are stored and reported,
//!   never used to fail a node's check: a yellow single-node cluster is normal, and a
//!   recovering cluster must not keep its nodes from being resurrected.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokio::time::Instant;

use crate::classify::{self, Ended, Outcome};
pub(crate) use crate::health::effects::{apply, Cause};
use crate::http::addr::NodeAddr;
use crate::nodes::capability::{Capability, Change, ProbeOutcome};
pub(crate) use crate::nodes::info::{parse_cluster_health, parse_root};
pub use crate::nodes::info::{ClusterHealthLocal, ClusterStatus, NodeInfo};
use crate::nodes::pool::PoolNode;
use crate::shared::Inner;
use crate::sync::{lock, ClearOnDrop};

/// The cluster-health endpoint, always asked with [`CLUSTER_HEALTH_QUERY`].
pub(crate) const CLUSTER_HEALTH_PATH: &str = "/_cluster/health";
/// Served from the node's own cluster-state copy: fast, and answers even when the cluster
/// manager is unreachable. Never `wait_for_status` (it holds connections open and decides
/// for the caller which status is acceptable).
pub(crate) const CLUSTER_HEALTH_QUERY: &str = "local=true";

/// The result of one health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CheckResult {
    /// The node answered `GET /` with a valid info document, or (Available nodes)
    /// `_cluster/health?local=true` with 200.
    Healthy,
    /// The node is reachable but rejected the credentials (401/403): alive, not healthy
    /// for the user, never dead.
    AuthRejected(u16),
    /// The node answered, but not usefully (a 5xx while starting, a body that is not an
    /// OpenSearch info document).
    Unhealthy(String),
    /// The node could not be reached (connect, reset, timeout).
    Unreachable(String),
}

impl CheckResult {
    /// The `result` label of `searchwire_health_checks_total` (docs/metrics.md).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            CheckResult::Healthy => "healthy",
            CheckResult::AuthRejected(_) => "auth_rejected",
            CheckResult::Unhealthy(_) => "unhealthy",
            CheckResult::Unreachable(_) => "unreachable",
        }
    }
}

/// Runs one health check and reports it to the client's observer
/// ([`Observer::health_check`](crate::Observer::health_check)) as `kind`: `resurrection`,
/// `discovery`, `periodic` or `check_all`.
pub(crate) async fn reported(
    inner: &Inner,
    node: &PoolNode,
    kind: &'static str,
    check: impl std::future::Future<Output = CheckResult>,
) -> CheckResult {
    let started = Instant::now();
    let result = check.await;
    inner
        .observer
        .health_check(&crate::observe::HealthCheckEvent::new(
            node.addr.as_str(),
            kind,
            result.label(),
            started.elapsed(),
        ));
    result
}

/// Sends one background `GET path?query` request to `addr` (health checks, capability
/// probes, the refresh, discovery): the client's default headers and credentials, then the
/// user's request modifier, bounded by `timeout`, never retried. A timeout or broken
/// connection drops the node's pooled connections. Returns the status and body, or why it
/// failed.
pub(crate) async fn background_get(
    inner: &Inner,
    addr: &NodeAddr,
    path: &str,
    query: &str,
    timeout: Duration,
) -> Result<Answer, String> {
    let uri = addr.uri(path, query).map_err(|e| e.to_string())?;
    let mut head = http::Request::new(());
    *head.uri_mut() = uri;
    *head.headers_mut() = inner.headers.clone();
    if let Some(modify) = &inner.health_modifier {
        // A panicking modifier is the caller's bug; it must not take the background task
        // (and with it the node's timer) down. The check fails and says why.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| modify(&mut head))).is_err() {
            return Err("the health_check_request_modifier panicked; no request was sent".into());
        }
    }
    let req = head.map(|()| Full::new(Bytes::new()));
    let sent = tokio::time::timeout(timeout, inner.connector.send(addr, req)).await;
    let ended = match &sent {
        Err(_) => Ended::TimedOut {
            after: timeout,
            attempt: false,
        },
        Ok(Err(e)) => Ended::Failed {
            kind: e.kind,
            cause: &*e.source,
        },
        Ok(Ok(raw)) => Ended::Answered {
            status: raw.status,
            body: &raw.body,
        },
    };
    let outcome = classify::outcome(ended);
    inner.connector.after(addr, outcome.kind);
    match sent {
        Ok(Ok(raw)) => Ok(Answer {
            status: raw.status.as_u16(),
            body: raw.body,
            outcome,
        }),
        Ok(Err(_)) => Err(format!(
            "{}: {}",
            outcome.kind,
            outcome.detail.unwrap_or_default()
        )),
        Err(_) => Err(outcome.detail.unwrap_or_default()),
    }
}

/// A background request's answer, classified like a user request's.
pub(crate) struct Answer {
    pub(crate) outcome: Outcome,
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

/// A health request to `node`, bounded by the health-check timeout.
async fn probe(inner: &Inner, node: &PoolNode, path: &str, query: &str) -> Result<Answer, String> {
    background_get(inner, &node.addr, path, query, inner.health_timeout)
        .await
        .map_err(|e| format!("health check {path}: {e}"))
}

/// Checks a node with `GET /`, recording its version and distribution when it answers.
pub(crate) async fn check_root(inner: &Inner, node: &PoolNode) -> CheckResult {
    match probe(inner, node, "/", "").await {
        Err(e) => CheckResult::Unreachable(e),
        Ok(a) if a.status == 200 => match parse_root(&a.body) {
            Ok(info) => {
                inner.cluster_name.learn(&info.cluster_name);
                inner.system_name.learn(&info.distribution);
                node.capability().info = Some(info);
                CheckResult::Healthy
            }
            Err(e) => CheckResult::Unhealthy(e),
        },
        Ok(a) if a.outcome.rejection.is_some() => CheckResult::AuthRejected(a.status),
        Ok(a) => CheckResult::Unhealthy(format!("GET / answered {}", a.status)),
    }
}

/// A node's answer to `GET /_cluster/health?local=true`.
pub(crate) enum HealthAnswer {
    Ok(ClusterHealthLocal),
    Denied(u16),
    /// It answered, but not with a usable 200.
    Failed(String),
    Unreachable(String),
}

impl HealthAnswer {
    pub(crate) fn into_probe_outcome(self) -> ProbeOutcome {
        match self {
            HealthAnswer::Ok(h) => ProbeOutcome::Ok(h),
            HealthAnswer::Denied(s) => ProbeOutcome::Denied(s),
            HealthAnswer::Failed(e) | HealthAnswer::Unreachable(e) => ProbeOutcome::Transient(e),
        }
    }
}

/// `GET /_cluster/health?local=true` to `node`.
pub(crate) async fn fetch_cluster_health(inner: &Inner, node: &PoolNode) -> HealthAnswer {
    match probe(inner, node, CLUSTER_HEALTH_PATH, CLUSTER_HEALTH_QUERY).await {
        Err(e) => HealthAnswer::Unreachable(e),
        Ok(a) if a.status == 200 => match parse_cluster_health(&a.body) {
            Ok(h) => {
                inner.cluster_name.learn(&h.cluster_name);
                HealthAnswer::Ok(h)
            }
            Err(e) => HealthAnswer::Failed(format!("{CLUSTER_HEALTH_PATH}: {e}")),
        },
        Ok(a) if a.outcome.rejection.is_some() => HealthAnswer::Denied(a.status),
        Ok(a) => HealthAnswer::Failed(format!("{CLUSTER_HEALTH_PATH} answered {}", a.status)),
    }
}

/// Logs a capability change once, when it happens (never per check).
pub(crate) fn log_change(inner: &Inner, node: &PoolNode, change: Change, status: Option<u16>) {
    let status = status.unwrap_or(0);
    match change.to {
        Capability::Available => tracing::info!(
            node = %node.addr,
            "node serves {CLUSTER_HEALTH_PATH}?{CLUSTER_HEALTH_QUERY}; its health checks use it from now on"
        ),
        Capability::Unavailable => {
            let again = match inner.reprobe.after {
                Some(d) => format!(
                    "probed again in about {}",
                    crate::clock::duration::format_duration(d)
                ),
                None => "not probed again (re-probing is disabled)".to_string(),
            };
            tracing::warn!(
                node = %node.addr,
                status,
                "node denied {CLUSTER_HEALTH_PATH}?{CLUSTER_HEALTH_QUERY} ({status}): the credentials lack the cluster:monitor/health privilege; health checks use GET / and the node stays in service; {again}"
            );
        }
        Capability::Pending if change.from == Capability::Available => tracing::warn!(
            node = %node.addr,
            status,
            "node stopped serving {CLUSTER_HEALTH_PATH}?{CLUSTER_HEALTH_QUERY} ({status}): the cluster:monitor/health privilege was revoked or the credentials changed; stored cluster health cleared, health checks fall back to GET /, probing again on the next check; the node stays in service"
        ),
        Capability::Pending => {}
    }
}

/// Probes `/_cluster/health?local=true` now and applies the answer to the node's
/// capability. Returns the answer.
pub(crate) async fn probe_capability(inner: &Inner, node: &PoolNode) -> ProbeOutcome {
    node.capability().probing = true;
    let outcome = fetch_cluster_health(inner, node).await.into_probe_outcome();
    let now = Instant::now();
    let reprobe = match &outcome {
        ProbeOutcome::Denied(_) => inner.reprobe.delay(&mut lock(&inner.rng)),
        _ => None,
    };
    let status = match &outcome {
        ProbeOutcome::Denied(s) => Some(*s),
        _ => None,
    };
    let change = {
        let mut c = node.capability();
        c.probing = false;
        c.probe_answered(outcome.clone(), now, reprobe)
    };
    match (&outcome, change) {
        (_, Some(change)) => log_change(inner, node, change, status),
        (ProbeOutcome::Transient(why), None) => {
            tracing::debug!(node = %node.addr, reason = %why, "capability probe failed transiently; probing again on the next check")
        }
        _ => {}
    }
    outcome
}

/// Starts a capability probe in the background if one is due and none is in flight. It
/// never delays the caller: the check that triggered it has already succeeded.
pub(crate) fn spawn_probe_if_due(inner: &Arc<Inner>, node: &Arc<PoolNode>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    {
        let mut c = node.capability();
        if c.probing || !c.probe_due(Instant::now()) {
            return;
        }
        c.probing = true;
    }
    // Holds the client for at most one health-check timeout.
    let inner = Arc::clone(inner);
    let node = Arc::clone(node);
    handle.spawn(async move {
        // However the probe ends (even dropped with its runtime), it is no longer in flight.
        let _probing = ClearOnDrop::new(|| node.capability().probing = false);
        probe_capability(&inner, &node).await;
    });
}

/// The health check of one node, by capability: `/_cluster/health?local=true` for an
/// Available node (a 401/403 there falls back to `GET /` for this check, resets the node
/// to Pending and clears its stored health), `GET /` otherwise — followed, when it
/// succeeds and a probe is due, by a capability probe in the background.
pub(crate) async fn check_node(inner: &Arc<Inner>, node: &Arc<PoolNode>) -> CheckResult {
    if node.capability().state == Capability::Available {
        match fetch_cluster_health(inner, node).await {
            HealthAnswer::Ok(h) => {
                node.capability().health = Some((h, Instant::now()));
                return CheckResult::Healthy;
            }
            HealthAnswer::Denied(s) => {
                let change = node.capability().revoked();
                if let Some(change) = change {
                    log_change(inner, node, change, Some(s));
                }
                // Fall back to GET / for this check; the probe waits for the next one.
                return check_root(inner, node).await;
            }
            HealthAnswer::Failed(e) => return CheckResult::Unhealthy(e),
            HealthAnswer::Unreachable(e) => return CheckResult::Unreachable(e),
        }
    }
    let result = check_root(inner, node).await;
    if result == CheckResult::Healthy {
        spawn_probe_if_due(inner, node);
    }
    result
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

    #[test]
    fn parses_the_references_cluster_health_document() {
        let body = crate::testing::cluster_health_body("yellow", 2);
        let h = parse_cluster_health(body.as_bytes()).unwrap();
        assert_eq!(h.cluster_name, "c");
        assert_eq!(h.status, ClusterStatus::Yellow);
        assert!(!h.timed_out);
        assert_eq!(h.number_of_nodes, 3);
        assert_eq!(h.number_of_data_nodes, 3);
        assert_eq!(h.discovered_cluster_manager, Some(true));
        assert_eq!(h.active_primary_shards, 5);
        assert_eq!(h.active_shards, 10);
        assert_eq!(h.initializing_shards, 2);
        assert_eq!(h.active_shards_percent, 100.0);
    }

    #[test]
    fn cluster_health_tolerates_old_and_partial_documents() {
        let es = br#"{"cluster_name":"c","status":"red","discovered_master":false}"#;
        let h = parse_cluster_health(es).unwrap();
        assert_eq!(h.status, ClusterStatus::Red);
        assert_eq!(h.discovered_cluster_manager, Some(false));
        assert_eq!(h.number_of_nodes, 0);
        let odd = br#"{"cluster_name":"c","status":"purple"}"#;
        assert_eq!(
            parse_cluster_health(odd).unwrap().status,
            ClusterStatus::Unknown
        );
        assert!(parse_cluster_health(br#"{"status":"green"}"#).is_err());
        assert!(parse_cluster_health(b"not json").is_err());
    }
}

pub(crate) mod effects;
pub(crate) mod refresh;
pub(crate) mod report;
#[cfg(test)]
mod scenario_tests;
