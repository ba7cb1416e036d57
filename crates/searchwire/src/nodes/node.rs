//! One node of the pool: its address and id, liveness, health (failures, the resurrection
//! due time), capability, `Retry-After` pause, progress and latency estimate. The pool
//! (`pool.rs`) changes its state on transitions; selection (`pool.rs`, `choice.rs`) reads it.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use crate::http::addr::NodeAddr;
use crate::nodes::capability::NodeCapability;
use crate::nodes::latency::Estimate;
use crate::nodes::progress::Progress;
use crate::sync::lock;

/// Mutable per-node health, changed only on transitions.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeHealth {
    /// Consecutive connectivity failures; reset only by a real success.
    pub failures: u32,
    pub dead_since: Option<Instant>,
    /// When the resurrection check is due.
    pub next_check: Option<Instant>,
    /// Latched once the node answered (seeds start viable).
    pub viable: bool,
    /// The last connectivity failure, for snapshots and errors.
    pub last_error: Option<String>,
    /// The last auth rejection status (401/403) seen on this node, if the latest answer
    /// was one; cleared by a success.
    pub auth_rejected: Option<u16>,
    /// A resurrection task is running for this node.
    pub timer_running: bool,
    /// Consecutive 502/503/504 answers (the per-node breaker for gateway errors); reset by
    /// any other answer and when the node is ejected.
    pub gateway_failures: u32,
}

/// One node of the pool.
#[derive(Debug)]
pub(crate) struct PoolNode {
    pub addr: NodeAddr,
    /// The node id reported by discovery (empty for seeds not yet discovered); a seed
    /// learns its id from the first discovery that reports it.
    pub(super) id: Mutex<String>,
    /// Configured by the user: discovery never removes it.
    pub seed: bool,
    pub(super) alive: AtomicBool,
    /// `os.allocated_processors` from discovery; 0 when unknown.
    pub cores: AtomicU32,
    /// Set when the node is alive, viable, without failures and without an auth
    /// rejection, so that recording another answer has nothing to change.
    pub(super) clean: AtomicBool,
    /// Signalled when the node's next check is rescheduled, so its resurrection timer
    /// re-reads the due time instead of sleeping on a stale one.
    pub(crate) rescheduled: tokio::sync::Notify,
    health: Mutex<NodeHealth>,
    /// Cluster-health capability and what health requests learned (version, health).
    capability: Mutex<NodeCapability>,
    /// Set while a `Retry-After` this node sent is running (until `busy_until`): one
    /// atomic load on the selection path when no node asked for a pause.
    busy: AtomicBool,
    busy_until: Mutex<Option<Instant>>,
    /// Its attempts in flight and its last progress: a stalled node is avoided like a
    /// pausing one (see `nodes/progress.rs`).
    pub(crate) progress: Progress,
    /// Its latency estimate, for latency-aware selection (see `nodes/latency.rs`).
    pub(crate) latency: Estimate,
}

impl PoolNode {
    pub(crate) fn new(addr: NodeAddr, id: String, seed: bool, cores: u32) -> PoolNode {
        PoolNode {
            addr,
            id: Mutex::new(id),
            seed,
            alive: AtomicBool::new(seed),
            cores: AtomicU32::new(cores),
            clean: AtomicBool::new(false),
            rescheduled: tokio::sync::Notify::new(),
            health: Mutex::new(NodeHealth {
                viable: seed,
                ..NodeHealth::default()
            }),
            capability: Mutex::new(NodeCapability::default()),
            busy: AtomicBool::new(false),
            busy_until: Mutex::new(None),
            progress: Progress::new(),
            latency: Estimate::new(),
        }
    }

    /// A node discovery just found: not alive and not viable, so it gets no user traffic
    /// (not even as a last resort) until it has answered once.
    pub(crate) fn discovered(addr: NodeAddr, id: String, seed: bool, cores: u32) -> PoolNode {
        let node = PoolNode::new(addr, id, seed, cores);
        node.alive.store(false, Ordering::Release);
        node.health_mut().viable = false;
        node
    }

    /// The node id reported by discovery (empty when not known yet).
    pub(crate) fn id(&self) -> String {
        lock(&self.id).clone()
    }

    /// Whether user traffic may go to this node.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    pub(crate) fn health(&self) -> NodeHealth {
        lock(&self.health).clone()
    }

    pub(crate) fn health_mut(&self) -> MutexGuard<'_, NodeHealth> {
        lock(&self.health)
    }

    /// The node asked for a pause (`Retry-After`) until `until`: while another live node
    /// is free, selection sends traffic there instead.
    pub(crate) fn mark_busy_until(&self, until: Instant) {
        let mut b = lock(&self.busy_until);
        if b.is_none_or(|t| until > t) {
            *b = Some(until);
        }
        self.busy.store(true, Ordering::Release);
    }

    /// Whether the node's `Retry-After` pause is still running at `now`.
    pub(crate) fn is_busy(&self, now: Instant) -> bool {
        if !self.busy.load(Ordering::Acquire) {
            return false;
        }
        let mut b = lock(&self.busy_until);
        match *b {
            Some(t) if t > now => true,
            _ => {
                *b = None;
                self.busy.store(false, Ordering::Release);
                false
            }
        }
    }

    /// The node's cluster-health capability state (never held across an `.await`).
    pub(crate) fn capability(&self) -> MutexGuard<'_, NodeCapability> {
        lock(&self.capability)
    }
}

/// A node's identity within one request's `tried` list (its address in memory; kept as
/// an integer so request futures stay `Send`).
pub(crate) fn node_key(n: &Arc<PoolNode>) -> usize {
    Arc::as_ptr(n) as usize
}
