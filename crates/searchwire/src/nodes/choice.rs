//! Latency-aware node selection: the power of two choices over each node's cost, its peak
//! EWMA latency estimate (`nodes/latency.rs`) × (attempts in flight + 1) ÷ its weight.
//!
//! Two live nodes are drawn at random and the cheaper one gets the attempt. Two random
//! choices rather than a scan for the cheapest: every client scanning picks the same node
//! after a burst and floods it (herding), while two random choices spread the load and still
//! keep almost everything off a node that is much slower than the rest (Mitzenmacher; Finagle,
//! linkerd2-proxy's tower-balance and Envoy's least-request balancer do the same).
//!
//! What the round-robin wheel prefers, this prefers in the same order: a live node not yet
//! tried by the request and not pausing after a `Retry-After` nor stalled
//! (`nodes/progress.rs`), then a tried one, then a pausing or stalled one. When the two drawn
//! nodes are not of the first kind (dead, tried, pausing), every node is looked at. The
//! random draws come from a seeded counter-based generator (SplitMix64 over an atomic
//! counter): lock-free, and a fixed [`ClientBuilder::seed`](crate::ClientBuilder::seed) makes
//! a single-threaded run repeat its picks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::nodes::latency::MIN_ESTIMATE_NS;
use crate::nodes::node::{node_key, PoolNode};

/// Costs (per unit of weight) closer than this are a tie: 1 ms. Estimates of equally fast
/// nodes differ by scheduling noise — a peak EWMA keeps each node's recent worst answer,
/// which on a busy client is a few hundred microseconds to a few milliseconds above its
/// typical one — and steering by that noise gave three equal nodes 40/33/27 % of the
/// requests. Below 1 ms no user sees the difference; a node slower by more (a GC pause,
/// a hot shard, a queue) is still avoided on every draw. A tie goes to the node with fewer
/// attempts in flight, then to the first drawn (uniform), so equal nodes share evenly and
/// a fast node that is busier still loses.
pub(crate) const TIE_NS: u128 = 1_000_000;

/// How the client picks the node for each attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Selection {
    /// The power of two choices over each node's latency estimate × (attempts in flight + 1),
    /// divided by its weight (its core count, as for round robin). The default: a node that
    /// turns slow, stalls in a GC or is overloaded gets almost no new requests until it
    /// recovers, where round robin sends it its full share.
    #[default]
    LatencyAware,
    /// Weighted round robin over the live nodes (weights from their core counts), blind to
    /// latency: what every other OpenSearch / Elasticsearch client does.
    RoundRobin,
}

impl Selection {
    /// Every selection, the default first.
    pub const ALL: [Selection; 2] = [Selection::LatencyAware, Selection::RoundRobin];

    /// What this selection does, in a few sentences (`searchwire explain selection`).
    pub fn describe(&self) -> &'static str {
        match self {
            Selection::LatencyAware => {
                "Each attempt draws two live nodes at random and takes the cheaper: its latency \
                 estimate x (attempts in flight + 1) / its weight (core count). The estimate is \
                 a peak EWMA of the node's attempt latencies: a slower answer raises it at once \
                 (at most 4x per answer, so one long request cannot poison it), faster answers \
                 lower it with a time constant of selection_decay (10s). A reset, a timeout, a \
                 429 or a 5xx counts as an answer 4x slower than the estimate, so a node that \
                 fails fast does not attract traffic. A new or resurrected node, or one that had \
                 no answer for one decay, starts from the median of the others: a slow node is \
                 tried again a few times per decay and a recovered one is back within it. \
                 Costs within 1ms of each other are a tie, won by the node with fewer \
                 attempts in flight, then by either at random, so equally fast nodes share \
                 evenly. Untried nodes come before tried ones, nodes pausing after Retry-After or \
                 stalled come last."
            }
            Selection::RoundRobin => {
                "Weighted round robin over the live nodes (weights from their core counts), \
                 blind to latency: each node gets its share however slow it is. Untried nodes \
                 come before tried ones, nodes pausing after Retry-After or stalled come last."
            }
        }
    }

    /// The name used by the CLI and in docs: `latency` or `round-robin`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Selection::LatencyAware => "latency",
            Selection::RoundRobin => "round-robin",
        }
    }
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Selection {
    type Err = String;

    fn from_str(s: &str) -> Result<Selection, String> {
        match s {
            "latency" | "latency-aware" => Ok(Selection::LatencyAware),
            "round-robin" | "rr" => Ok(Selection::RoundRobin),
            other => Err(format!(
                "unknown selection {}: use latency or round-robin",
                crate::echo::echo(other)
            )),
        }
    }
}

/// The selection a pool uses, with its decay and random source.
#[derive(Debug)]
pub(crate) struct Choice {
    pub(crate) selection: Selection,
    /// The estimates' time constant, and how long an estimate stays fresh without samples.
    pub(crate) decay: Duration,
    /// SplitMix64's counter.
    counter: AtomicU64,
}

/// The pool's nodes and their weights (the pool's `Topology`, which this file does not
/// import: the pool imports it).
#[derive(Clone, Copy)]
pub(crate) struct Nodes<'t> {
    pub(crate) nodes: &'t [Arc<PoolNode>],
    pub(crate) weights: &'t [u32],
}

/// SplitMix64's increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// One node drawn, ranked.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    idx: usize,
    /// 0: untried and free; 1: tried and free; 2: pausing after a `Retry-After` or stalled.
    class: u8,
    /// Estimate (ns) × (attempts in flight + 1).
    cost: u128,
    /// Attempts in flight on the node.
    in_flight: u32,
    weight: u32,
}

impl Choice {
    pub(crate) fn new(selection: Selection, decay: Duration, seed: u64) -> Choice {
        Choice {
            selection,
            decay,
            counter: AtomicU64::new(seed),
        }
    }

    #[inline]
    fn next(&self) -> u64 {
        let mut z = self
            .counter
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The live node of `t` for the next attempt, or `None` when no node is live (the pool
    /// then falls back to the viable dead node due soonest, as round robin does).
    #[inline]
    pub(crate) fn pick<'t>(
        &self,
        t: Nodes<'t>,
        tried: &[usize],
        now: Instant,
    ) -> Option<&'t Arc<PoolNode>> {
        let n = t.nodes.len();
        if n <= 1 {
            // Nothing to choose: the only node, when it is live (round robin's answer too).
            return t.nodes.first().filter(|n| n.is_alive());
        }
        let r = self.next();
        let i = below(r as u32, n);
        let mut j = below((r >> 32) as u32, n - 1);
        if j >= i {
            j += 1;
        }
        let drawn = better(self.rank(t, i, tried, now), self.rank(t, j, tried, now));
        if let Some(c) = drawn {
            if c.class == 0 {
                return t.nodes.get(c.idx);
            }
        }
        // Neither drawn node is a live, untried, free one: look at every node.
        let mut best = drawn;
        for k in 0..n {
            best = better(best, self.rank(t, k, tried, now));
        }
        best.and_then(|c| t.nodes.get(c.idx))
    }

    /// Node `idx` as a candidate, or `None` when it is not live.
    #[inline]
    fn rank(&self, t: Nodes<'_>, idx: usize, tried: &[usize], now: Instant) -> Option<Candidate> {
        let node = t.nodes.get(idx)?;
        if !node.is_alive() {
            return None;
        }
        let class = if node.is_busy(now) || node.progress.stalled(now) {
            2
        } else if tried.contains(&node_key(node)) {
            1
        } else {
            0
        };
        let estimate = match node.latency.fresh(now, self.decay) {
            Some(e) => e,
            None => start_estimate(t, idx, now),
        };
        let in_flight = node.progress.in_flight();
        Some(Candidate {
            idx,
            class,
            cost: u128::from(estimate) * (u128::from(in_flight) + 1),
            in_flight,
            weight: t.weights.get(idx).copied().unwrap_or(1).max(1),
        })
    }
}

/// A node without a fresh estimate starts from the median of the other live nodes'
/// estimates (fresh or not), which it keeps until its own samples replace it; with no
/// estimate anywhere (a client that has not had an answer yet) every node costs the same.
/// With an even number of others the median is the mean of the middle two: taking the
/// upper one (the slower of two others, with three nodes) started a restarted node as the
/// most expensive, so it got less than its share until its own answers, which lower an
/// estimate only at the decay's pace, brought it down.
#[cold]
fn start_estimate(t: Nodes<'_>, idx: usize, now: Instant) -> u64 {
    let mut others: Vec<u64> = t
        .nodes
        .iter()
        .enumerate()
        .filter(|(k, n)| *k != idx && n.is_alive())
        .filter_map(|(_, n)| n.latency.raw())
        .collect();
    let Some(median) = median(&mut others) else {
        return MIN_ESTIMATE_NS;
    };
    if let Some(node) = t.nodes.get(idx) {
        node.latency.set(median, now);
    }
    median
}

/// The median of `v` (reordered): the middle value, or the mean of the middle two.
fn median(v: &mut [u64]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let odd = v.len() % 2 == 1;
    let mid = v.len() / 2;
    let (lower, upper, _) = v.select_nth_unstable(mid);
    let upper = *upper;
    if odd {
        return Some(upper);
    }
    // The largest of the lower half is the lower middle.
    let below = lower.iter().copied().max().unwrap_or(upper);
    Some(below / 2 + upper / 2 + (below % 2 + upper % 2) / 2)
}

/// The better of two candidates: the lower class, then the lower cost per weight — costs
/// within [`TIE_NS`] of each other being a tie, which goes to the one with fewer attempts
/// in flight, then to `a`.
#[inline]
fn better(a: Option<Candidate>, b: Option<Candidate>) -> Option<Candidate> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let b_wins = b.class < a.class
                || (b.class == a.class && {
                    // Cost per weight, cross-multiplied: a.cost / a.weight against
                    // b.cost / b.weight.
                    let (wa, wb) = (u128::from(a.weight), u128::from(b.weight));
                    let (ca, cb) = (a.cost * wb, b.cost * wa);
                    if ca.abs_diff(cb) <= TIE_NS * wa * wb {
                        b.in_flight < a.in_flight
                    } else {
                        cb < ca
                    }
                });
            Some(if b_wins { b } else { a })
        }
        (a, None) => a,
        (None, b) => b,
    }
}

/// A uniform index below `n` from 32 random bits (Lemire's multiply-shift).
#[inline]
fn below(r: u32, n: usize) -> usize {
    ((u64::from(r) * n as u64) >> 32) as usize
}

#[cfg(test)]
mod tests;
