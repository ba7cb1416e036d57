//! The node pool: node states (alive, dead, viable), selection (latency-aware two choices,
//! `choice.rs`, or weighted round robin), and the bookkeeping of failures that feeds the
//! resurrection schedule.
//!
//! The hot path ([`Pool::select`]) takes no lock: the node list, the weights and the
//! round-robin wheel live in one immutable [`Topology`] behind an `ArcSwap`, liveness is an
//! atomic flag per node, and the cursor and the random source are atomic counters. Locks are
//! taken only on state transitions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::classify::OutcomeKind;
use crate::http::addr::NodeAddr;
use crate::nodes::choice::{Choice, Nodes, Selection};
pub(crate) use crate::nodes::node::{node_key, PoolNode};
use crate::policy::schedule::{self, Capacity, ResurrectionConfig};
use crate::sync::lock;

/// The immutable node list plus the weighted round-robin wheel built from it.
#[derive(Debug, Default)]
pub(crate) struct Topology {
    pub nodes: Vec<Arc<PoolNode>>,
    /// Each node's weight (from its core count, see [`weights`]).
    pub(crate) weights: Vec<u32>,
    /// Indices into `nodes`, each repeated by its weight and interleaved.
    wheel: Vec<u32>,
}

impl Topology {
    pub(crate) fn new(nodes: Vec<Arc<PoolNode>>) -> Topology {
        let cores: Vec<u32> = nodes
            .iter()
            .map(|n| n.cores.load(Ordering::Relaxed))
            .collect();
        let weights = weights(&cores);
        let wheel = weighted_wheel(&weights);
        Topology {
            nodes,
            weights,
            wheel,
        }
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Per-node weights from their core counts divided by the greatest common divisor
/// (8/16/24 cores → 1/2/3). Unknown core counts (0) weigh like the smallest known one;
/// when nothing is known every node weighs 1. Weights are capped at 64 so a wheel stays
/// small whatever the cluster reports.
pub(crate) fn weights(cores: &[u32]) -> Vec<u32> {
    let known: Vec<u32> = cores.iter().copied().filter(|&c| c > 0).collect();
    let Some(&min) = known.iter().min() else {
        return vec![1; cores.len()];
    };
    let filled: Vec<u32> = cores
        .iter()
        .map(|&c| if c == 0 { min } else { c })
        .collect();
    let g = filled.iter().copied().fold(0, gcd).max(1);
    filled.iter().map(|&c| (c / g).clamp(1, 64)).collect()
}

/// An interleaved wheel: node i appears weight(i) times, spread out (smooth weighted
/// round robin), so consecutive picks alternate nodes instead of bursting on one.
fn weighted_wheel(w: &[u32]) -> Vec<u32> {
    let total: i64 = w.iter().map(|&x| i64::from(x)).sum();
    let mut current = vec![0i64; w.len()];
    let mut wheel = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for i in 0..w.len() {
            current[i] += i64::from(w[i]);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        wheel.push(best as u32);
    }
    wheel
}

/// Every node is dead: the viable one due soonest, preferring one not yet tried, so a request
/// is never refused only because every node was once marked dead.
fn last_resort(t: &Topology, tried: &[usize]) -> Option<Arc<PoolNode>> {
    let mut best: Option<(bool, Option<Instant>, &Arc<PoolNode>)> = None;
    for n in t.nodes.iter() {
        let h = n.health();
        if !h.viable {
            continue;
        }
        let untried = !tried.contains(&node_key(n));
        let key = (untried, h.next_check);
        let better = match &best {
            None => true,
            Some((bu, bd, _)) => {
                (untried && !bu)
                    || (untried == *bu
                        && match (key.1, bd) {
                            (Some(a), Some(b)) => a < *b,
                            (None, Some(_)) => true,
                            _ => false,
                        })
            }
        };
        if better {
            best = Some((untried, h.next_check, n));
        }
    }
    best.map(|(_, _, n)| Arc::clone(n))
}

/// A state change worth telling the world about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    /// The node just went from alive to dead; a resurrection timer must be started.
    Died,
    /// A dead node failed again; its check was rescheduled.
    StillDead,
    /// The node just came back.
    Revived,
    /// Nothing changed.
    None,
}

/// The node pool.
pub(crate) struct Pool {
    topology: ArcSwap<Topology>,
    cursor: AtomicUsize,
    pub(crate) resurrection: ResurrectionConfig,
    /// Server cores configured by the user (overrides discovery); 0 = derive.
    configured_cores: u32,
    rng: Mutex<fastrand::Rng>,
    choice: Choice,
}

impl Pool {
    pub(crate) fn new(
        nodes: Vec<Arc<PoolNode>>,
        resurrection: ResurrectionConfig,
        configured_cores: u32,
        seed: u64,
    ) -> Pool {
        Pool {
            topology: ArcSwap::from_pointee(Topology::new(nodes)),
            cursor: AtomicUsize::new(0),
            resurrection,
            configured_cores,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            choice: Choice::new(
                Selection::RoundRobin,
                crate::defaults::SELECTION_DECAY,
                seed,
            ),
        }
    }

    /// The pool with `selection` (`decay`: the latency estimates' time constant), its random
    /// draws seeded with `seed`. [`Pool::new`] selects by round robin.
    pub(crate) fn with_selection(
        mut self,
        selection: Selection,
        decay: Duration,
        seed: u64,
    ) -> Pool {
        self.choice = Choice::new(selection, decay, seed);
        self
    }

    /// Records an attempt on `node` that ended at `end` after `elapsed` with `kind`, for
    /// latency-aware selection: a failure (a refused connection, a reset, a timeout, a 429,
    /// a 5xx) counts as a slow answer, a cancelled attempt says nothing. Round robin records
    /// nothing.
    #[inline]
    pub(crate) fn observe(
        &self,
        node: &PoolNode,
        end: Instant,
        elapsed: Duration,
        kind: OutcomeKind,
    ) {
        if self.choice.selection != Selection::LatencyAware {
            return;
        }
        let slow = match kind {
            OutcomeKind::Success
            | OutcomeKind::Auth
            | OutcomeKind::ClientError
            | OutcomeKind::TooLarge => false,
            OutcomeKind::Cancelled => return,
            OutcomeKind::Connect
            | OutcomeKind::Reset
            | OutcomeKind::Timeout
            | OutcomeKind::Throttled
            | OutcomeKind::Gateway
            | OutcomeKind::ServerError => true,
        };
        node.latency.observe(end, elapsed, slow, self.choice.decay);
    }

    pub(crate) fn topology(&self) -> Arc<Topology> {
        self.topology.load_full()
    }

    pub(crate) fn replace(&self, t: Topology) {
        self.topology.store(Arc::new(t));
    }

    /// The capacity model: configured cores, else the smallest `allocated_processors`
    /// reported by discovery, else 8.
    pub(crate) fn capacity(&self) -> Capacity {
        if self.configured_cores > 0 {
            return Capacity::from_cores(self.configured_cores);
        }
        let t = self.topology.load();
        let min = t
            .nodes
            .iter()
            .map(|n| n.cores.load(Ordering::Relaxed))
            .filter(|&c| c > 0)
            .min();
        Capacity::from_cores(min.unwrap_or(Capacity::DEFAULT_CORES))
    }

    /// Whether `node` is still part of the pool (discovery may have removed it).
    pub(crate) fn contains(&self, node: &PoolNode) -> bool {
        self.topology
            .load()
            .nodes
            .iter()
            .any(|n| std::ptr::eq(Arc::as_ptr(n), node))
    }

    /// (live, total) over the current topology.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let t = self.topology.load();
        let live = t.nodes.iter().filter(|n| n.is_alive()).count();
        (live, t.nodes.len())
    }

    /// Picks a node for the next attempt. Prefers a live node not yet `tried` by this
    /// request, then any live node, then — when every node is dead — the viable dead node
    /// whose resurrection is due soonest, so a request is never refused only because every
    /// node was once marked dead. Returns `None` when no node is live and none has ever
    /// answered (only possible once discovery replaced the seeds with unproven nodes).
    pub(crate) fn select(&self, tried: &[usize]) -> Option<Arc<PoolNode>> {
        self.select_at(tried, Instant::now())
    }

    /// [`select`](Self::select) with the time already read (`now` decides which nodes
    /// are still pausing after a `Retry-After`).
    pub(crate) fn select_at(&self, tried: &[usize], now: Instant) -> Option<Arc<PoolNode>> {
        let t = self.topology.load();
        if self.choice.selection == Selection::LatencyAware {
            let nodes = Nodes {
                nodes: &t.nodes,
                weights: &t.weights,
            };
            return match self.choice.pick(nodes, tried, now) {
                Some(n) => Some(Arc::clone(n)),
                None => last_resort(&t, tried),
            };
        }
        let len = t.wheel.len();
        if len == 0 {
            return None;
        }
        // Every probe of the wheel takes its own cursor tick, so a skipped (dead or
        // already tried) node's share spreads over the others instead of all falling on
        // the node after it in the wheel.
        // A node pausing after a `Retry-After`, or stalled (attempts in flight, nothing back
        // for a while: `nodes/progress.rs`), is used only when no other live node is free:
        // first an untried free node, then a tried free one, then a pausing or stalled one.
        let mut fallback: Option<&Arc<PoolNode>> = None;
        let mut busy_fallback: Option<&Arc<PoolNode>> = None;
        for _ in 0..len {
            let tick = self.cursor.fetch_add(1, Ordering::Relaxed);
            let idx = t.wheel[tick % len] as usize;
            let Some(n) = t.nodes.get(idx) else { continue };
            if !n.is_alive() {
                continue;
            }
            if n.is_busy(now) || n.progress.stalled(now) {
                if busy_fallback.is_none() {
                    busy_fallback = Some(n);
                }
                continue;
            }
            if !tried.contains(&node_key(n)) {
                return Some(Arc::clone(n));
            }
            if fallback.is_none() {
                fallback = Some(n);
            }
        }
        if let Some(n) = fallback.or(busy_fallback) {
            return Some(Arc::clone(n));
        }
        last_resort(&t, tried)
    }

    /// Whether a live node that is neither in `tried` nor pausing after a `Retry-After`
    /// exists: then a retry goes there at once instead of waiting out the pause.
    pub(crate) fn has_free_untried(&self, tried: &[usize], now: Instant) -> bool {
        self.topology
            .load()
            .nodes
            .iter()
            .any(|n| n.is_alive() && !tried.contains(&node_key(n)) && !n.is_busy(now))
    }

    /// Computes the next resurrection delay for a node with `failures` consecutive
    /// failures, from the current live/dead counts and capacity, with jitter.
    pub(crate) fn resurrection_delay(&self, failures: u32) -> Duration {
        let (live, total) = self.counts();
        let row = schedule::compute(
            &self.resurrection,
            &self.capacity(),
            live,
            total.saturating_sub(live),
            failures,
        );
        schedule::timeout_with_jitter(&row, &mut lock(&self.rng))
    }

    /// Records a connectivity failure: marks the node dead (or keeps it dead) and
    /// schedules its next resurrection check.
    pub(crate) fn mark_failed(&self, node: &PoolNode, now: Instant, reason: &str) -> Transition {
        node.clean.store(false, Ordering::Release);
        let was_alive = node.alive.swap(false, Ordering::AcqRel);
        let failures = {
            let mut h = node.health_mut();
            h.failures = h.failures.saturating_add(1);
            if was_alive || h.dead_since.is_none() {
                h.dead_since = Some(now);
            }
            h.last_error = Some(reason.to_string());
            h.failures
        };
        // The delay reads live counts, so compute it after the flag flipped.
        let delay = self.resurrection_delay(failures);
        node.health_mut().next_check = Some(now + delay);
        node.rescheduled.notify_one();
        if was_alive {
            let (live, total) = self.counts();
            tracing::warn!(
                node = %node.addr,
                reason,
                failures,
                live,
                total,
                next_check_ms = delay.as_millis() as u64,
                "node marked dead"
            );
            Transition::Died
        } else {
            tracing::debug!(node = %node.addr, reason, failures, next_check_ms = delay.as_millis() as u64, "dead node failed again");
            Transition::StillDead
        }
    }

    /// Records a 502/503/504 answer. Below `threshold` consecutive ones the node simply
    /// answered (it stays or becomes alive); the `threshold`-th ejects it exactly like a
    /// connectivity failure (dead, resurrection check scheduled). `threshold` 0 never ejects.
    pub(crate) fn mark_gateway(
        &self,
        node: &PoolNode,
        threshold: u32,
        now: Instant,
        reason: &str,
    ) -> Transition {
        if !node.is_alive() {
            // A dead node tried as a last resort answered 502/503/504: reachable, but not
            // serving. It stays dead; only its resurrection check (one probe) readmits it.
            node.health_mut().last_error = Some(format!("answered {reason}"));
            return Transition::StillDead;
        }
        node.clean.store(false, Ordering::Release);
        let count = {
            let mut h = node.health_mut();
            h.gateway_failures = h.gateway_failures.saturating_add(1);
            h.gateway_failures
        };
        if threshold > 0 && count >= threshold {
            node.health_mut().gateway_failures = 0;
            let reason = format!("{count} consecutive gateway errors (last: {reason})");
            return self.mark_failed(node, now, &reason);
        }
        self.answered(node, None, false)
    }

    /// Records that the node answered: it is alive, viable, and its failures reset.
    /// `auth_rejected` is the 401/403 it answered with, if it rejected the credentials: the
    /// node is alive all the same. A change of that state is logged once (a warning when
    /// the credentials start being rejected, info when they are accepted again), never per
    /// answer.
    pub(crate) fn mark_answered(&self, node: &PoolNode, auth_rejected: Option<u16>) -> Transition {
        // Hot path: a healthy node answering again changes nothing; skip the lock.
        if auth_rejected.is_none() && node.is_alive() && node.clean.load(Ordering::Acquire) {
            return Transition::None;
        }
        self.answered(node, auth_rejected, true)
    }

    fn answered(
        &self,
        node: &PoolNode,
        auth_rejected: Option<u16>,
        reset_gateway: bool,
    ) -> Transition {
        let was_alive = node.alive.swap(true, Ordering::AcqRel);
        let (failures, dead_for, auth_before) = {
            let mut h = node.health_mut();
            if reset_gateway {
                h.gateway_failures = 0;
            }
            let f = h.failures;
            let since = h.dead_since.take();
            h.failures = 0;
            h.next_check = None;
            h.viable = true;
            h.last_error = None;
            let before = std::mem::replace(&mut h.auth_rejected, auth_rejected);
            // Not clean while a gateway streak is counting: the next answer must reset it.
            let clean = auth_rejected.is_none() && h.gateway_failures == 0;
            node.clean.store(clean, Ordering::Release);
            (f, since, before)
        };
        match (auth_before, auth_rejected) {
            (before, Some(status)) if before != Some(status) => {
                let what = if status == 401 {
                    "rejected the credentials (401) — check the username/password or token"
                } else {
                    "denied permission (403) — the user lacks a privilege"
                };
                tracing::warn!(
                    node = %node.addr,
                    status,
                    "node {what}; the node is reachable and was not marked dead"
                );
            }
            (Some(before), None) => {
                tracing::info!(node = %node.addr, previous_status = before, "node accepts the credentials again");
            }
            _ => {}
        }
        if !was_alive {
            // What the node did before it died (or before it was found) says nothing now:
            // latency-aware selection starts it from the cluster median.
            node.latency.clear();
        }
        if !was_alive && dead_for.is_none() && failures == 0 {
            // Never dead, never alive: a node discovery added, answering for the first time.
            tracing::info!(node = %node.addr, "discovered node answered; it now receives traffic");
            Transition::Revived
        } else if !was_alive {
            tracing::info!(
                node = %node.addr,
                previous_failures = failures,
                dead_for_ms = dead_for.map(|s| s.elapsed().as_millis() as u64).unwrap_or(0),
                "node resurrected"
            );
            Transition::Revived
        } else {
            Transition::None
        }
    }
}

/// A node as discovery reported it, ready to be merged into the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub addr: NodeAddr,
    pub id: String,
    /// `os.allocated_processors`; 0 when not reported (the node keeps what it had).
    pub cores: u32,
}

/// What [`Pool::merge`] changed.
#[derive(Debug, Default)]
pub(crate) struct MergeOutcome {
    /// Nodes that entered the pool: not alive until they answer a health check.
    pub added: Vec<Arc<PoolNode>>,
    /// Nodes that left the pool (their resurrection timers end on their next wake-up).
    pub removed: Vec<Arc<PoolNode>>,
}

impl Pool {
    /// Replaces the node list with what discovery reported, keeping every node's state
    /// where it is the same node:
    ///
    /// - a node whose URL is reported with the same id (or with its first id, for a seed
    ///   not discovered yet) stays — the same `Arc`, health and timer — and takes the
    ///   reported core count;
    /// - a URL reported with a different id is a different node: a fresh one replaces it;
    /// - a seed not reported stays (it may be a load balancer, or the cluster may be
    ///   partitioned), unless it is in `excluded` (reported, but not to be routed to);
    /// - every other node not reported leaves;
    /// - reported URLs not in the pool are added, not alive and not viable, so they get no
    ///   traffic until they have answered.
    ///
    /// Kept nodes stay in order, added ones follow in reported order, and the round-robin
    /// wheel is rebuilt from the (possibly updated) core counts. Callers serialize merges.
    pub(crate) fn merge(
        &self,
        reported: &[Member],
        seeds: &[NodeAddr],
        excluded: &[NodeAddr],
    ) -> MergeOutcome {
        let current = self.topology();
        let mut out = MergeOutcome::default();
        let mut next: Vec<Arc<PoolNode>> = Vec::with_capacity(reported.len() + seeds.len());
        let mut matched = vec![false; reported.len()];
        for node in &current.nodes {
            let Some(i) = reported.iter().position(|m| m.addr == node.addr) else {
                if node.seed && !excluded.contains(&node.addr) {
                    next.push(Arc::clone(node));
                } else {
                    out.removed.push(Arc::clone(node));
                }
                continue;
            };
            matched[i] = true;
            let m = &reported[i];
            let same = {
                let mut id = lock(&node.id);
                if id.is_empty() {
                    id.clone_from(&m.id);
                }
                *id == m.id
            };
            if same {
                if m.cores > 0 {
                    node.cores.store(m.cores, Ordering::Relaxed);
                }
                next.push(Arc::clone(node));
            } else {
                let fresh = Arc::new(PoolNode::discovered(
                    m.addr.clone(),
                    m.id.clone(),
                    node.seed,
                    m.cores,
                ));
                out.removed.push(Arc::clone(node));
                out.added.push(Arc::clone(&fresh));
                next.push(fresh);
            }
        }
        for (m, _) in reported.iter().zip(matched).filter(|(_, done)| !done) {
            let fresh = Arc::new(PoolNode::discovered(
                m.addr.clone(),
                m.id.clone(),
                seeds.contains(&m.addr),
                m.cores,
            ));
            out.added.push(Arc::clone(&fresh));
            next.push(fresh);
        }
        self.replace(Topology::new(next));
        out
    }
}

#[cfg(test)]
mod tests;
