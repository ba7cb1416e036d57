//! One resurrection timer per dead node, independent of discovery.
//!
//! When a node dies, a task sleeps until the node's scheduled check (see
//! [`crate::policy::schedule`]), then health-checks it: success brings it back and resets its
//! failures; failure adds one and reschedules. The task holds only a weak reference to the
//! client and a shutdown receiver, so it ends as soon as the client is dropped, and it
//! stops when discovery removes the node or user traffic revived it first.
//!
//! While the cluster breaker is open, a due check waits for the breaker's cool-down to
//! end: no request goes out before then whatever the check finds, and in a full outage
//! (every node dead, checks every 500 ms) the checks would otherwise be most of what the
//! client sends to a cluster it has stopped sending to. When the cool-down ends, the
//! checks and the breaker's probes find out together whether the cluster is back.

use std::sync::{Arc, Weak};

use tokio::time::Instant;

use crate::health::{apply, check_node, Cause};
use crate::nodes::pool::PoolNode;
use crate::shared::Inner;
use crate::sync::ClearOnDrop;

/// Starts the node's timer unless one is already running.
pub(crate) fn ensure_timer(inner: &Arc<Inner>, node: &Arc<PoolNode>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        // No runtime (a blocking caller): the node comes back when every node is dead
        // and a request tries it.
        return;
    };
    {
        let mut h = node.health_mut();
        if h.timer_running {
            return;
        }
        h.timer_running = true;
    }
    let weak = Arc::downgrade(inner);
    let shutdown = inner.shutdown.subscribe();
    let node = Arc::clone(node);
    handle.spawn(run(weak, node, shutdown));
}

async fn run(
    weak: Weak<Inner>,
    node: Arc<PoolNode>,
    mut shutdown: tokio::sync::watch::Receiver<()>,
) {
    // However this task ends, the node must not be left believing it has a timer.
    let mut running = ClearOnDrop::new(|| node.health_mut().timer_running = false);
    loop {
        // Sleep until the check is due, re-reading the due time whenever it is
        // rescheduled (a failed last-resort request, a discovery check).
        if let Some(due) = node.health().next_check {
            if due > Instant::now() {
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = node.rescheduled.notified() => continue,
                    _ = shutdown.changed() => return,
                }
            }
        }
        let Some(inner) = weak.upgrade() else { return };
        if !inner.pool.contains(&node) {
            return;
        }
        let open_until = inner
            .breaker
            .as_ref()
            .and_then(|b| b.open_until(Instant::now()));
        if let Some(until) = open_until {
            drop(inner);
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = shutdown.changed() => return,
            }
            continue;
        }
        if node.is_alive() {
            if finish(&node) {
                running.disarm();
                return;
            }
            continue;
        }
        let result =
            crate::health::reported(&inner, &node, "resurrection", check_node(&inner, &node)).await;
        apply(&inner, &node, &result, Cause::Resurrection);
        drop(inner);
        if node.is_alive() && finish(&node) {
            // `finish` cleared the flag under the lock; a timer started after that (the
            // node died again) owns it now, so do not clear it again.
            running.disarm();
            return;
        }
    }
}

/// Ends the timer unless the node died again meanwhile (then the loop goes on, so a node
/// never ends up dead without a timer).
fn finish(node: &PoolNode) -> bool {
    let mut h = node.health_mut();
    if node.is_alive() {
        h.timer_running = false;
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests;
