//! The node-effect table: what an exchange's result does to its node, keyed by who caused
//! the exchange (a user request, a resurrection check, discovery, `check_all`, the
//! periodic refresh). The one place that marks nodes alive or dead.

use std::sync::Arc;

use http::StatusCode;
use tokio::time::Instant;

use crate::classify::{OutcomeKind, Rejection};
use crate::health::CheckResult;
use crate::nodes::pool::{PoolNode, Transition};
use crate::observe::NodeEvent;
use crate::shared::Inner;

/// Who ran a health check, which decides what its result does to the node. The one place
/// that turns a [`CheckResult`] into node causes is [`apply`]; the differences between the
/// callers are deliberate ("only connectivity decides liveness", `docs/architecture/transport.md`):
///
/// | cause | answered (200, 401/403) | unhealthy (answered, not usefully) | unreachable |
/// | --- | --- | --- | --- |
/// | `Resurrection` | alive | one more failure, rescheduled | one more failure, rescheduled |
/// | `Discovery` | alive | warned, failed, timer | warned, failed, timer |
/// | `CheckAll` | alive | reported only | dead (announced), timer |
/// | `Refresh` | recorded if still alive | skipped | skipped |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A user request's attempt ([`apply_attempt`]).
    UserRequest,
    /// A resurrection timer's check of a dead node. An answer brings it back; anything
    /// else counts one more failure and reschedules it — the timer running the check
    /// follows the new due time, so nothing else is started or announced.
    Resurrection,
    /// Discovery's first check of a node that never answered. An answer lets traffic in;
    /// a node that did not answer usefully is logged as a warning, marked failed and
    /// handed to its resurrection timer, which checks it from then on.
    Discovery,
    /// [`Client::check_all`](crate::Client::check_all). An answer makes the node alive;
    /// only an unreachable node is ejected (announced to the observer, handed to its
    /// resurrection timer, a rediscovery trigger). A node that is reachable but not (yet)
    /// serving `GET /` — a 429 under load, a 503 while starting — is reported by the caller
    /// and its liveness left alone: user traffic and resurrection checks decide it.
    CheckAll,
    /// The periodic refresh, which never decides liveness. An answer is recorded (the
    /// node's credentials problem set or cleared) only while the node is still alive: a
    /// refresh sent before a user request marked the node dead must not revive it and skip
    /// its resurrection backoff. A failure is skipped; the next cycle tries again.
    Refresh,
}

impl Cause {
    /// The observer's reason when an answer brings the node back.
    fn revived_reason(self) -> &'static str {
        match self {
            Cause::Resurrection => "health check succeeded",
            Cause::Discovery => "discovered node answered its health check",
            Cause::CheckAll | Cause::Refresh => "answered a health check",
            Cause::UserRequest => "answered a request",
        }
    }
}

/// Applies a health check's `result` to `node`, as `cause` says (see [`Cause`]).
pub(crate) fn apply(inner: &Arc<Inner>, node: &Arc<PoolNode>, result: &CheckResult, cause: Cause) {
    let auth = match result {
        CheckResult::Healthy => None,
        // Reachable: never death, whoever asked.
        CheckResult::AuthRejected(s) => Some(*s),
        CheckResult::Unhealthy(reason) | CheckResult::Unreachable(reason) => {
            did_not_answer(inner, node, result, reason, cause);
            return;
        }
    };
    if cause == Cause::Refresh && !node.is_alive() {
        return;
    }
    if inner.pool.mark_answered(node, auth) == Transition::Revived {
        node_revived(inner, node, cause);
    }
}

/// The failure half of [`apply`]: `result` is `Unhealthy` or `Unreachable`.
fn did_not_answer(
    inner: &Arc<Inner>,
    node: &Arc<PoolNode>,
    result: &CheckResult,
    reason: &str,
    cause: Cause,
) {
    match cause {
        Cause::Resurrection => {
            inner.pool.mark_failed(node, Instant::now(), reason);
        }
        Cause::Discovery => {
            tracing::warn!(node = %node.addr, reason = %reason, "discovered node did not answer its health check; no traffic until it does");
            inner.pool.mark_failed(node, Instant::now(), reason);
            inner.start_timer(node);
        }
        Cause::CheckAll | Cause::UserRequest => {
            if matches!(result, CheckResult::Unhealthy(_)) {
                return;
            }
            if !node.is_alive() && node.health().timer_running {
                // Its resurrection timer owns this node's schedule: an extra check on
                // request must not count as another failure and speed up its backoff.
                node.health_mut().last_error = Some(reason.to_string());
                return;
            }
            if inner.pool.mark_failed(node, Instant::now(), reason) == Transition::Died {
                node_died(inner, node, reason);
            } else {
                inner.start_timer(node);
            }
        }
        Cause::Refresh => {
            tracing::debug!(node = %node.addr, reason = %reason, "periodic health check failed; skipped (user requests and resurrection decide liveness)");
        }
    }
}

/// Applies a user request's attempt to its node (the `UserRequest` row of [`Cause`]).
pub(crate) fn apply_attempt(
    inner: &Arc<Inner>,
    node: &Arc<PoolNode>,
    kind: OutcomeKind,
    rejection: Option<Rejection>,
    status: Option<StatusCode>,
    detail: Option<&str>,
) {
    if kind.marks_node_dead() {
        inner.connector.after(&node.addr, kind);
        let reason = detail.unwrap_or(kind.as_str());
        let t = inner.pool.mark_failed(node, Instant::now(), reason);
        if t == Transition::Died {
            node_died(inner, node, reason);
        }
    } else if kind == OutcomeKind::Gateway {
        let status = status.map_or_else(|| "gateway error".to_string(), |s| s.to_string());
        match inner
            .pool
            .mark_gateway(node, inner.gateway_eject, Instant::now(), &status)
        {
            Transition::Died => {
                let reason = node.health().last_error.unwrap_or(status);
                node_died(inner, node, &reason);
            }
            Transition::Revived => node_revived(inner, node, Cause::UserRequest),
            _ => {}
        }
    } else if kind.node_answered() {
        // Only a 401 on a user request says something about the node's view of our
        // credentials. A 403 is about one action or index (the same user may read one
        // index and not another), and a 403 cluster block means the credentials were
        // accepted: neither is recorded on the node. Health checks, which need no
        // privilege beyond logging in, record 403s themselves.
        let auth = (rejection == Some(Rejection::Credentials)).then_some(401);
        if inner.pool.mark_answered(node, auth) == Transition::Revived {
            node_revived(inner, node, Cause::UserRequest);
        }
    }
}

/// A user request's attempt timed out on `node`, and the node then answered its liveness
/// check: it is alive and keeps its state (the request was slow, not the node). Only the
/// node's pooled connections are dropped, as after every timeout.
pub(crate) fn apply_slow_attempt(inner: &Arc<Inner>, node: &Arc<PoolNode>) {
    inner.connector.after(&node.addr, OutcomeKind::Timeout);
}

/// A node was marked dead: announced, handed to its resurrection timer, and (when so
/// configured) a discovery round triggered.
fn node_died(inner: &Arc<Inner>, node: &Arc<PoolNode>, reason: &str) {
    inner.observer.node_transition(&NodeEvent {
        node: node.addr.as_str(),
        alive: false,
        failures: node.health().failures,
        reason,
    });
    inner.start_timer(node);
    (inner.on_death.rediscover)(inner);
}

fn node_revived(inner: &Inner, node: &PoolNode, cause: Cause) {
    inner.observer.node_transition(&NodeEvent {
        node: node.addr.as_str(),
        alive: true,
        failures: 0,
        reason: cause.revived_reason(),
    });
}
