//! The periodic health cycle of live nodes (on by default; see
//! [`ClientBuilder::health_refresh`](crate::ClientBuilder::health_refresh)).
//!
//! Stored cluster health goes stale while a node stays live for hours, and a live node that
//! never failed is never health-checked by a resurrection timer, so it would never be
//! probed. Every interval, one cycle visits every live node, at most
//! [`HEALTH_CHECK_CONCURRENCY`](crate::defaults::HEALTH_CHECK_CONCURRENCY) at a time:
//!
//! - **Available** — refresh: `GET /_cluster/health?local=true`; 200 stores the answer,
//!   401/403 resets the node to Pending and clears its stored health, 5xx and network
//!   errors are skipped (the next cycle retries). Skipped entirely when at most one node is
//!   live: a single-node cluster has no routing choice for the data to inform.
//! - **Pending**, or **Unavailable** with its re-probe due — `GET /` (records version and
//!   distribution, and a credentials rejection), then the capability probe.
//!
//! The cycle never marks a node dead: user requests and resurrection checks own liveness,
//! and a background poll that failed once is weaker evidence than either.
//!
//! The interval is [`health_refresh_interval`](crate::policy::schedule::health_refresh_interval)
//! (`clamp(live × clients_per_server / health_check_rate, 5 s, 5 min)`), recomputed after
//! every cycle; with at most one live node, 5 min. The first cycle runs one interval after
//! the client starts, so a short-lived client (a CLI run) sends no background traffic. The
//! task holds a `Weak` client and the shutdown receiver: it ends with the client.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use crate::defaults::MAX_HEALTH_REFRESH;
use crate::health::{
    apply, check_root, fetch_cluster_health, log_change, probe_capability, Cause, CheckResult,
    HealthAnswer,
};
use crate::nodes::capability::Capability;
use crate::nodes::pool::PoolNode;
use crate::policy::schedule::health_refresh_interval;
use crate::shared::Inner;
use crate::sync::ClearOnDrop;

/// Starts the background task if enabled and not running. Without a tokio runtime this does
/// nothing; the client calls it again on every request.
pub(crate) fn ensure_started(inner: &Arc<Inner>) {
    if !inner.health_refresh || inner.refresh_started.load(Ordering::Acquire) {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if inner.refresh_started.swap(true, Ordering::AcqRel) {
        return;
    }
    handle.spawn(run(Arc::downgrade(inner), inner.shutdown.subscribe()));
}

/// Time until the next cycle, from the current live count and capacity model.
pub(crate) fn interval(inner: &Inner) -> Duration {
    let (live, _) = inner.pool.counts();
    health_refresh_interval(&inner.pool.capacity(), live).unwrap_or(MAX_HEALTH_REFRESH)
}

async fn run(weak: Weak<Inner>, mut shutdown: watch::Receiver<()>) {
    // However the task ends (even dropped with the runtime it was started on), the next
    // request may start it again.
    let _started = ClearOnDrop::new(|| {
        if let Some(inner) = weak.upgrade() {
            inner.refresh_started.store(false, Ordering::Release);
        }
    });
    loop {
        let wait = match weak.upgrade() {
            Some(inner) => interval(&inner),
            None => break,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => break,
        }
        let Some(inner) = weak.upgrade() else { break };
        cycle(&inner).await;
    }
}

/// One cycle over every live node (see the module docs).
pub(crate) async fn cycle(inner: &Arc<Inner>) {
    let live: Vec<Arc<PoolNode>> = inner
        .pool
        .topology()
        .nodes
        .iter()
        .filter(|n| n.is_alive())
        .cloned()
        .collect();
    let refresh = live.len() > 1;
    let limit = Arc::new(Semaphore::new(crate::defaults::HEALTH_CHECK_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for node in live {
        let inner = Arc::clone(inner);
        let limit = Arc::clone(&limit);
        tasks.spawn(async move {
            let Ok(_permit) = limit.acquire_owned().await else {
                return;
            };
            visit(&inner, &node, refresh).await;
        });
    }
    while tasks.join_next().await.is_some() {}
}

async fn visit(inner: &Arc<Inner>, node: &Arc<PoolNode>, refresh: bool) {
    let (state, due) = {
        let c = node.capability();
        (c.state, c.probe_due(Instant::now()) && !c.probing)
    };
    if state == Capability::Available {
        if refresh {
            refresh_node(inner, node).await;
        }
        return;
    }
    if !due {
        return;
    }
    let result = crate::health::reported(inner, node, "periodic", check_root(inner, node)).await;
    // Records the answer only if the node is still alive; never decides liveness.
    apply(inner, node, &result, Cause::Refresh);
    if result == CheckResult::Healthy {
        probe_capability(inner, node).await;
    }
}

/// Refreshes an Available node's stored cluster health.
async fn refresh_node(inner: &Arc<Inner>, node: &Arc<PoolNode>) {
    match fetch_cluster_health(inner, node).await {
        HealthAnswer::Ok(h) => {
            node.capability().health = Some((h, Instant::now()));
            apply(inner, node, &CheckResult::Healthy, Cause::Refresh);
        }
        HealthAnswer::Denied(s) => {
            let change = node.capability().revoked();
            if let Some(change) = change {
                log_change(inner, node, change, Some(s));
            }
        }
        HealthAnswer::Failed(why) | HealthAnswer::Unreachable(why) => {
            tracing::debug!(node = %node.addr, reason = %why, "cluster-health refresh failed; skipped until the next cycle");
        }
    }
}
