//! What the client knows about the cluster's health, for callers and `searchwire health`:
//! [`Client::cluster_health`] (what background checks stored, no I/O) and
//! [`Client::check_all`] (check every node now).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::health::{
    apply, check_root, probe_capability, Cause, CheckResult, ClusterHealthLocal, ClusterStatus,
};
use crate::nodes::capability::{Capability, ProbeOutcome};
use crate::nodes::pool::PoolNode;
use crate::shared::Inner;

/// One node's stored `_cluster/health?local=true` answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ClusterHealthSample {
    /// The node that answered (URL without credentials).
    pub node: String,
    /// How long ago it answered.
    pub age: Duration,
    /// The answer.
    pub health: ClusterHealthLocal,
}

/// One node's health-check state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHealthView {
    /// URL without credentials.
    pub url: String,
    /// Whether user traffic goes to it.
    pub alive: bool,
    /// Whether its health checks use `/_cluster/health?local=true`.
    pub capability: Capability,
    /// `version.number` from its last successful `GET /`.
    pub version: Option<String>,
    /// `opensearch` or `elasticsearch`, from its last successful `GET /`.
    pub distribution: Option<String>,
    /// Age of its stored cluster health (Available nodes).
    pub health_age: Option<Duration>,
    /// Time until an Unavailable node is probed again (`None`: not scheduled).
    pub reprobe_in: Option<Duration>,
}

/// What the client's health checks have stored: the freshest cluster health any node
/// reported, and every node's capability. Informative only: nothing here gates traffic.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ClusterHealth {
    /// The freshest stored `_cluster/health?local=true` answer, if any node gave one.
    pub latest: Option<ClusterHealthSample>,
    /// Every node, in pool order.
    pub nodes: Vec<NodeHealthView>,
}

/// One node in a [`HealthReport`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NodeReport {
    /// URL without credentials.
    pub url: String,
    /// Whether the node is alive after the check (it answered `GET /`, possibly with a
    /// credentials rejection).
    pub alive: bool,
    /// Its capability after the probe.
    pub capability: Capability,
    /// `version.number`, when `GET /` succeeded (now or before).
    pub version: Option<String>,
    /// `opensearch` or `elasticsearch`, when `GET /` succeeded (now or before).
    pub distribution: Option<String>,
    /// `cluster_name` from `GET /`.
    pub cluster_name: Option<String>,
    /// 401 or 403 when `GET /` rejected the credentials.
    pub auth_rejected: Option<u16>,
    /// What went wrong, if anything: "credentials rejected (401)", "permission denied
    /// (403)", or why `GET /` failed.
    pub error: Option<String>,
    /// Its `_cluster/health?local=true` answer, when the probe succeeded.
    pub cluster_health: Option<ClusterHealthLocal>,
    /// It did not answer in time: its `GET /` got no answer within the health check
    /// timeout, or its check had not finished when the overall limit of
    /// [`Client::check_all_within`](crate::Client::check_all_within) passed (and was
    /// cancelled). The node did not count as reachable in this check.
    pub timed_out: bool,
}

/// The result of [`Client::check_all`](crate::Client::check_all).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HealthReport {
    /// Every node, in pool order.
    pub nodes: Vec<NodeReport>,
}

impl HealthReport {
    /// The first node's (in pool order) cluster health from this check, if any node
    /// reported one.
    pub fn cluster_health(&self) -> Option<&ClusterHealthLocal> {
        self.nodes.iter().find_map(|n| n.cluster_health.as_ref())
    }

    /// The cluster status, [`ClusterStatus::Unknown`] when no node could report it.
    pub fn status(&self) -> ClusterStatus {
        self.cluster_health()
            .map_or(ClusterStatus::Unknown, |h| h.status)
    }

    /// The cluster name from cluster health, else from any node's `GET /`.
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_health()
            .map(|h| h.cluster_name.as_str())
            .or_else(|| self.nodes.iter().find_map(|n| n.cluster_name.as_deref()))
    }

    /// Nodes that answered (alive after the check, and not timed out).
    pub fn reachable(&self) -> usize {
        self.nodes.iter().filter(|n| n.answered()).count()
    }

    /// Nodes that did not answer in time (see [`NodeReport::timed_out`]).
    pub fn timed_out(&self) -> usize {
        self.nodes.iter().filter(|n| n.timed_out).count()
    }

    /// Whether at least one node answered and every node that answered rejected the
    /// credentials.
    pub fn all_reachable_rejected_credentials(&self) -> bool {
        self.reachable() > 0
            && self
                .nodes
                .iter()
                .filter(|n| n.answered())
                .all(|n| n.auth_rejected.is_some())
    }
}

impl NodeReport {
    /// Whether the node answered in this check.
    fn answered(&self) -> bool {
        self.alive && !self.timed_out
    }

    /// The row of a node whose check has no result: cancelled by the overall limit, or
    /// its task panicked.
    fn without_result(node: &PoolNode, timed_out: bool, error: String) -> NodeReport {
        let c = node.capability().clone();
        NodeReport {
            url: node.addr.to_string(),
            alive: node.is_alive(),
            capability: c.state,
            version: c.info.as_ref().map(|i| i.version.clone()),
            distribution: c.info.as_ref().map(|i| i.distribution.clone()),
            cluster_name: None,
            auth_rejected: None,
            error: Some(error),
            cluster_health: None,
            timed_out,
        }
    }
}

/// "credentials rejected (401)" / "permission denied (403)".
pub(crate) fn auth_problem(status: u16) -> String {
    match status {
        401 => "credentials rejected (401)".to_string(),
        other => format!("permission denied ({other})"),
    }
}

/// What the background health checks have stored, without any I/O: the freshest
/// cluster health (and its age) and every node's capability, version and
/// distribution. Cluster-wide data informs; it never gates traffic.
pub(crate) fn cluster_health(inner: &Inner) -> ClusterHealth {
    let now = Instant::now();
    let mut latest: Option<(Instant, ClusterHealthSample)> = None;
    let mut nodes = Vec::new();
    for n in inner.pool.topology().nodes.iter() {
        let c = n.capability().clone();
        if let Some((h, at)) = &c.health {
            if latest.as_ref().is_none_or(|(t, _)| at > t) {
                latest = Some((
                    *at,
                    ClusterHealthSample {
                        node: n.addr.to_string(),
                        age: now.saturating_duration_since(*at),
                        health: h.clone(),
                    },
                ));
            }
        }
        nodes.push(NodeHealthView {
            url: n.addr.to_string(),
            alive: n.is_alive(),
            capability: c.state,
            version: c.info.as_ref().map(|i| i.version.clone()),
            distribution: c.info.as_ref().map(|i| i.distribution.clone()),
            health_age: c
                .health
                .as_ref()
                .map(|(_, at)| now.saturating_duration_since(*at)),
            reprobe_in: c.reprobe_at.map(|t| t.saturating_duration_since(now)),
        });
    }
    ClusterHealth {
        latest: latest.map(|(_, s)| s),
        nodes,
    }
}

/// Health-checks every node now, all at once (at most
/// [`CHECK_ALL_MAX_CONCURRENCY`](crate::defaults::CHECK_ALL_MAX_CONCURRENCY)): `GET /`, then,
/// when it succeeded, the capability probe of `/_cluster/health?local=true`, waiting
/// for its answer. The results are applied like any health check's: a node that cannot
/// be reached is marked dead and handed to its resurrection timer; one that answers —
/// even with 401/403 — is alive. A node whose `GET /` got no answer within the health
/// check timeout is reported as timed out (it did not answer; it is marked dead too).
///
/// With a `limit`, the checks still running when it passes are cancelled (dropping
/// their tasks): a node that had answered `GET /` keeps that result (its probe
/// unfinished), the others are reported as timed out.
pub(crate) async fn check_all(inner: &Arc<Inner>, limit: Option<Duration>) -> HealthReport {
    let started = Instant::now();
    let deadline = limit.and_then(|l| started.checked_add(l));
    let nodes: Vec<Arc<PoolNode>> = inner.pool.topology().nodes.clone();
    let pool_nodes = nodes.clone();
    let at_once = nodes
        .len()
        .clamp(1, crate::defaults::CHECK_ALL_MAX_CONCURRENCY);
    let permits = Arc::new(Semaphore::new(at_once));
    // Each check sends its node's row when `GET /` has ended, and again after the probe:
    // a limit that passes during the probe keeps what `GET /` found.
    let (rows, mut received) = tokio::sync::mpsc::unbounded_channel::<(usize, NodeReport)>();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let inner = Arc::clone(inner);
        let permits = Arc::clone(&permits);
        let rows = rows.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.ok();
            let began = Instant::now();
            let check = check_root(&inner, &node);
            let result = crate::health::reported(&inner, &node, "check_all", check).await;
            // Only an unreachable node is ejected; see `Cause::CheckAll`.
            apply(&inner, &node, &result, Cause::CheckAll);
            let c = node.capability().clone();
            let mut report = NodeReport {
                url: node.addr.to_string(),
                alive: node.is_alive(),
                capability: c.state,
                version: c.info.as_ref().map(|i| i.version.clone()),
                distribution: c.info.as_ref().map(|i| i.distribution.clone()),
                cluster_name: c.info.as_ref().map(|i| i.cluster_name.clone()),
                auth_rejected: None,
                error: None,
                cluster_health: None,
                timed_out: false,
            };
            match result {
                CheckResult::Healthy => {
                    let _ = rows.send((i, report.clone()));
                    if let ProbeOutcome::Ok(h) = probe_capability(&inner, &node).await {
                        report.cluster_health = Some(h);
                    }
                    report.capability = node.capability().state;
                }
                CheckResult::AuthRejected(s) => {
                    report.auth_rejected = Some(s);
                    report.error = Some(auth_problem(s));
                }
                // `GET /` is bounded by the health check timeout: ending unreachable that
                // late, it timed out (a refused or reset connection ends sooner).
                CheckResult::Unreachable(_) if began.elapsed() >= inner.health_timeout => {
                    report.timed_out = true;
                    report.error = Some(format!(
                        "no answer within the health check timeout of {}",
                        crate::clock::duration::format_duration(inner.health_timeout)
                    ));
                }
                CheckResult::Unreachable(why) | CheckResult::Unhealthy(why) => {
                    report.error = Some(why)
                }
            }
            let _ = rows.send((i, report));
        });
    }
    drop(rows);
    let mut reports: Vec<Option<NodeReport>> = vec![None; pool_nodes.len()];
    let mut expired = false;
    loop {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, received.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    expired = true;
                    break;
                }
            },
            None => received.recv().await,
        };
        match next {
            Some((i, r)) => reports[i] = Some(r),
            // Every check has ended (a panicked one sent nothing more).
            None => break,
        }
    }
    // Cancels the checks still running (nothing is marked: cancellation says nothing
    // about a node).
    tasks.abort_all();
    let shown = limit.map(crate::clock::duration::format_duration);
    let nodes = reports
        .into_iter()
        .zip(pool_nodes)
        .map(|(r, node)| match r {
            Some(r) => r,
            None if expired => NodeReport::without_result(
                &node,
                true,
                format!(
                    "no answer within the overall limit of {}",
                    shown.clone().unwrap_or_default()
                ),
            ),
            // A check that panicked (a request modifier can) still has a row.
            None => NodeReport::without_result(
                &node,
                false,
                "the health check task panicked".to_string(),
            ),
        })
        .collect();
    HealthReport { nodes }
}
