//! The two-choice pick, under a manual clock (tokio's paused time) and a fixed seed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::http::addr::NodeAddr;
use crate::nodes::node::{node_key, PoolNode};

const DECAY: Duration = Duration::from_secs(10);

fn node(port: u16) -> Arc<PoolNode> {
    let addr = NodeAddr::from_parts("http", "127.0.0.1", port, "");
    Arc::new(PoolNode::new(addr, String::new(), true, 0))
}

/// Nodes on ports 1.. with these estimates (ms; `None`: no estimate) as of `now`.
fn nodes(estimates: &[Option<u64>], now: Instant) -> Vec<Arc<PoolNode>> {
    estimates
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let n = node(i as u16 + 1);
            if let Some(ms) = e {
                n.latency.set(ms * 1_000_000, now);
            }
            n
        })
        .collect()
}

fn counts(c: &Choice, ns: &[Arc<PoolNode>], weights: &[u32], picks: usize) -> Vec<usize> {
    let t = Nodes { nodes: ns, weights };
    let now = Instant::now();
    let mut out = vec![0; ns.len()];
    for _ in 0..picks {
        if let Some(n) = c.pick(t, &[], now) {
            out[usize::from(n.addr.port()) - 1] += 1;
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_slow_node_loses_every_draw_and_the_fast_ones_share_evenly() {
    let now = Instant::now();
    let ns = nodes(&[Some(50), Some(1), Some(1)], now);
    let c = Choice::new(Selection::LatencyAware, DECAY, 42);
    let got = counts(&c, &ns, &[1, 1, 1], 3_000);
    assert_eq!(
        got[0], 0,
        "two distinct draws: the slow node always meets a fast one"
    );
    assert_eq!(got[1] + got[2], 3_000);
    // Equal costs: the first drawn wins, and draws are uniform.
    assert!((1_350..1_650).contains(&got[1]), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_picks_the_same_nodes() {
    let now = Instant::now();
    let ns = nodes(&[Some(3), Some(2), Some(4), Some(2), Some(5)], now);
    let t = Nodes {
        nodes: &ns,
        weights: &[1, 1, 1, 1, 1],
    };
    let seq = |seed| {
        let c = Choice::new(Selection::LatencyAware, DECAY, seed);
        (0..200)
            .map(|_| c.pick(t, &[], now).map_or(0, |n| n.addr.port()))
            .collect::<Vec<_>>()
    };
    assert_eq!(seq(7), seq(7));
    assert_ne!(seq(7), seq(8));
}

#[tokio::test(start_paused = true)]
async fn attempts_in_flight_multiply_the_cost() {
    let now = Instant::now();
    // 10 ms with 3 in flight costs 40; 20 ms idle costs 20.
    let ns = nodes(&[Some(10), Some(20)], now);
    for _ in 0..3 {
        ns[0].progress.started(now);
    }
    let c = Choice::new(Selection::LatencyAware, DECAY, 1);
    assert_eq!(counts(&c, &ns, &[1, 1], 100), vec![0, 100]);
    // Two of them end: 10 ms × 2 = 20 ms, a tie, which goes to the node with fewer in
    // flight; one more: 10 ms wins.
    ns[0].progress.left();
    ns[0].progress.left();
    assert_eq!(counts(&c, &ns, &[1, 1], 100), vec![0, 100]);
    ns[0].progress.left();
    assert_eq!(counts(&c, &ns, &[1, 1], 100), vec![100, 0]);
}

#[tokio::test(start_paused = true)]
async fn costs_within_the_tie_band_share_evenly() {
    let now = Instant::now();
    // Three equally fast nodes whose estimates differ by noise: 0.3, 0.9 and 1.2 ms.
    let ns: Vec<_> = [300_000u64, 900_000, 1_200_000]
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let n = node(i as u16 + 1);
            n.latency.set(*ns, now);
            n
        })
        .collect();
    let c = Choice::new(Selection::LatencyAware, DECAY, 21);
    let got = counts(&c, &ns, &[1, 1, 1], 3_000);
    for share in &got {
        assert!((900..1_100).contains(share), "{got:?}");
    }
    // 1.2 ms against 0.3 ms plus the band (1 ms) and one more nanosecond: no longer a tie.
    ns[2].latency.set(1_300_001, now);
    let got = counts(&c, &ns, &[1, 1, 1], 3_000);
    assert!(got[2] < 1_100 && got[0] > 1_100, "{got:?}");
    // The boundary itself: a difference of exactly the band is a tie.
    let a = Candidate {
        idx: 0,
        class: 0,
        cost: 1_000_000,
        in_flight: 1,
        weight: 1,
    };
    let b = Candidate {
        idx: 1,
        cost: 2_000_000,
        in_flight: 0,
        ..a
    };
    assert_eq!(
        better(Some(a), Some(b)).map(|c| c.idx),
        Some(1),
        "tie: fewer in flight"
    );
    let b = Candidate {
        cost: 2_000_001,
        ..b
    };
    assert_eq!(
        better(Some(a), Some(b)).map(|c| c.idx),
        Some(0),
        "cheaper by more"
    );
}

#[test]
fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
    assert_eq!(median(&mut []), None);
    assert_eq!(median(&mut [7]), Some(7));
    assert_eq!(median(&mut [9, 1, 5]), Some(5));
    assert_eq!(median(&mut [3, 1]), Some(2));
    assert_eq!(
        median(&mut [10, 1, 40, 3]),
        Some(6),
        "(3 + 10) / 2, rounded down"
    );
    assert_eq!(median(&mut [u64::MAX, u64::MAX]), Some(u64::MAX));
}

#[tokio::test(start_paused = true)]
async fn weights_divide_the_cost() {
    let now = Instant::now();
    // 20 ms at weight 1 against 40 ms at weight 3 (13.3 ms per weight): the heavier wins.
    let ns = nodes(&[Some(20), Some(40)], now);
    let c = Choice::new(Selection::LatencyAware, DECAY, 3);
    assert_eq!(counts(&c, &ns, &[1, 3], 100), vec![0, 100]);
    assert_eq!(counts(&c, &ns, &[1, 1], 100), vec![100, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_node_without_an_estimate_starts_from_the_median_of_the_others() {
    let now = Instant::now();
    let ns = nodes(&[Some(1), Some(3), Some(10), None], now);
    let t = Nodes {
        nodes: &ns,
        weights: &[1, 1, 1, 1],
    };
    let c = Choice::new(Selection::LatencyAware, DECAY, 5);
    let ranked = c.rank(t, 3, &[], now).map(|r| r.cost);
    assert_eq!(ranked, Some(3_000_000));
    assert_eq!(
        ns[3].latency.raw(),
        Some(3_000_000),
        "kept until its own samples"
    );
    // With no estimate anywhere, every node costs the same and nothing is stored.
    let fresh = nodes(&[None, None], now);
    let t = Nodes {
        nodes: &fresh,
        weights: &[1, 1],
    };
    assert_eq!(c.rank(t, 0, &[], now).map(|r| r.cost), Some(1_000));
    assert_eq!(fresh[0].latency.raw(), None);
}

#[tokio::test(start_paused = true)]
async fn a_node_unsampled_for_one_decay_is_tried_again_at_the_median() {
    let t0 = Instant::now();
    let ns = nodes(&[Some(50), Some(1), Some(1)], t0);
    let c = Choice::new(Selection::LatencyAware, DECAY, 9);
    assert_eq!(counts(&c, &ns, &[1, 1, 1], 300)[0], 0);
    // The fast nodes keep answering; the slow one gets nothing.
    tokio::time::advance(DECAY + Duration::from_millis(1)).await;
    let now = Instant::now();
    for n in &ns[1..] {
        n.latency
            .observe(now, Duration::from_millis(1), false, DECAY);
    }
    let t = Nodes {
        nodes: &ns,
        weights: &[1, 1, 1],
    };
    assert_eq!(c.rank(t, 0, &[], now).map(|r| r.cost), Some(1_000_000));
    assert_eq!(ns[0].latency.raw(), Some(1_000_000));
}

#[tokio::test(start_paused = true)]
async fn tried_pausing_and_dead_nodes_come_last_as_with_round_robin() {
    let now = Instant::now();
    let ns = nodes(&[Some(1), Some(5), Some(9)], now);
    let w = [1, 1, 1];
    let t = Nodes {
        nodes: &ns,
        weights: &w,
    };
    let c = Choice::new(Selection::LatencyAware, DECAY, 11);
    // The cheapest node was tried: an untried one, however slower.
    let tried = [node_key(&ns[0])];
    for _ in 0..50 {
        let n = c.pick(t, &tried, now).map(|n| n.addr.port());
        assert!(matches!(n, Some(2 | 3)), "{n:?}");
    }
    // Every node tried: the cheapest again.
    let all = [node_key(&ns[0]), node_key(&ns[1]), node_key(&ns[2])];
    for _ in 0..50 {
        assert_eq!(c.pick(t, &all, now).map(|n| n.addr.port()), Some(1));
    }
    // Pausing after a Retry-After: used only when nothing else is free.
    ns[0].mark_busy_until(now + Duration::from_secs(5));
    for _ in 0..50 {
        let n = c.pick(t, &[], now).map(|n| n.addr.port());
        assert!(matches!(n, Some(2 | 3)), "{n:?}");
    }
    ns[1].mark_busy_until(now + Duration::from_secs(5));
    ns[2].mark_busy_until(now + Duration::from_secs(5));
    for _ in 0..50 {
        assert_eq!(c.pick(t, &[], now).map(|n| n.addr.port()), Some(1));
    }
    // Dead nodes are never picked; none live: None (the pool's last resort takes over).
    ns[1]
        .alive
        .store(false, std::sync::atomic::Ordering::Release);
    ns[2]
        .alive
        .store(false, std::sync::atomic::Ordering::Release);
    assert_eq!(c.pick(t, &[], now).map(|n| n.addr.port()), Some(1));
    ns[0]
        .alive
        .store(false, std::sync::atomic::Ordering::Release);
    assert!(c.pick(t, &[], now).is_none());
}
