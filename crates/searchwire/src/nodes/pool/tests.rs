use super::*;

fn node(port: u16, cores: u32) -> Arc<PoolNode> {
    let addr = NodeAddr::from_parts("http", "127.0.0.1", port, "");
    Arc::new(PoolNode::new(addr, String::new(), true, cores))
}

fn pool(nodes: Vec<Arc<PoolNode>>) -> Pool {
    let cfg = ResurrectionConfig {
        jitter_scale: 0.0,
        ..ResurrectionConfig::default()
    };
    Pool::new(nodes, cfg, 0, 7)
}

#[test]
fn weights_divide_by_the_gcd() {
    assert_eq!(weights(&[8, 16, 24]), vec![1, 2, 3]);
    assert_eq!(weights(&[4, 4, 4]), vec![1, 1, 1]);
    assert_eq!(weights(&[0, 0]), vec![1, 1]);
    assert_eq!(weights(&[0, 8, 16]), vec![1, 1, 2]);
    assert_eq!(weights(&[1, 1000]), vec![1, 64]);
}

#[test]
fn round_robin_follows_weights() {
    let nodes = vec![node(1, 8), node(2, 16), node(3, 24)];
    let p = pool(nodes.clone());
    let mut counts = [0usize; 3];
    for _ in 0..600 {
        let n = p.select(&[]).unwrap();
        counts[(n.addr.port() - 1) as usize] += 1;
    }
    assert_eq!(counts, [100, 200, 300]);
}

#[test]
fn a_dead_nodes_share_spreads_evenly_over_the_others() {
    let nodes = vec![node(1, 0), node(2, 0), node(3, 0), node(4, 0)];
    let p = pool(nodes.clone());
    p.mark_failed(&nodes[2], Instant::now(), "refused");
    let mut counts = [0usize; 4];
    for _ in 0..900 {
        counts[(p.select(&[]).unwrap().addr.port() - 1) as usize] += 1;
    }
    assert_eq!(counts[2], 0);
    for c in [counts[0], counts[1], counts[3]] {
        assert!((270..=330).contains(&c), "{counts:?}");
    }
}

#[test]
fn selection_prefers_untried_live_nodes() {
    let nodes = vec![node(1, 0), node(2, 0), node(3, 0)];
    let p = pool(nodes.clone());
    let first = p.select(&[]).unwrap();
    for _ in 0..10 {
        let second = p.select(&[node_key(&first)]).unwrap();
        assert_ne!(second.addr, first.addr);
    }
}

#[tokio::test(start_paused = true)]
async fn dead_nodes_get_no_traffic_and_all_dead_picks_soonest_due() {
    let nodes = vec![node(1, 0), node(2, 0), node(3, 0)];
    let p = pool(nodes.clone());
    let now = Instant::now();
    assert_eq!(p.mark_failed(&nodes[0], now, "refused"), Transition::Died);
    for _ in 0..30 {
        assert_ne!(p.select(&[]).unwrap().addr.port(), 1);
    }
    // 2 live of 3 after the first failure: 5 s × 2/3 = 3.33 s.
    let h = nodes[0].health();
    assert_eq!(h.failures, 1);
    let d = h.next_check.unwrap() - now;
    assert_eq!(d.as_millis(), 3333);
    p.mark_failed(&nodes[1], now, "refused");
    p.mark_failed(&nodes[2], now, "refused");
    // Everything dead: node 1 (3.3 s) is due before node 2 (1 live → 1.66 s?) — check
    // the actual schedule: node 2 died with 1 live of 3 → 5 s × 1/3 = 1.67 s; node 3
    // with 0 live → 0.5 s floor. Soonest is node 3.
    assert_eq!(p.select(&[]).unwrap().addr.port(), 3);
    assert_eq!(p.mark_answered(&nodes[2], None), Transition::Revived);
    assert_eq!(p.select(&[]).unwrap().addr.port(), 3);
    assert_eq!(nodes[2].health().failures, 0);
}

fn latency_pool(nodes: Vec<Arc<PoolNode>>) -> Pool {
    pool(nodes).with_selection(Selection::LatencyAware, crate::defaults::SELECTION_DECAY, 7)
}

#[tokio::test(start_paused = true)]
async fn attempts_feed_the_estimate_and_failures_count_as_slow() {
    let nodes = vec![node(1, 0), node(2, 0)];
    let p = latency_pool(nodes.clone());
    let now = Instant::now();
    let ms = Duration::from_millis;
    p.observe(&nodes[0], now, ms(2), OutcomeKind::Success);
    assert_eq!(nodes[0].latency.raw(), Some(2_000_000));
    // A fast reset, a 503 and a 429 each count as 4× slower than the estimate.
    p.observe(
        &nodes[0],
        now,
        Duration::from_micros(50),
        OutcomeKind::Reset,
    );
    assert_eq!(nodes[0].latency.raw(), Some(8_000_000));
    p.observe(&nodes[0], now, ms(1), OutcomeKind::Gateway);
    p.observe(&nodes[0], now, ms(1), OutcomeKind::Throttled);
    assert_eq!(nodes[0].latency.raw(), Some(128_000_000));
    // A 30 s attempt timeout is one more step, not 30 s.
    p.observe(&nodes[1], now, ms(1), OutcomeKind::Success);
    p.observe(
        &nodes[1],
        now,
        Duration::from_secs(30),
        OutcomeKind::Timeout,
    );
    assert_eq!(nodes[1].latency.raw(), Some(4_000_000));
    // A cancelled attempt says nothing about the node; a 404 is an answer like any other.
    p.observe(
        &nodes[1],
        now,
        Duration::from_secs(9),
        OutcomeKind::Cancelled,
    );
    assert_eq!(nodes[1].latency.raw(), Some(4_000_000));
    p.observe(&nodes[1], now, ms(16), OutcomeKind::ClientError);
    assert_eq!(nodes[1].latency.raw(), Some(16_000_000));
    // The failing node now gets nothing while the other is free.
    for _ in 0..50 {
        assert_eq!(p.select(&[]).map(|n| n.addr.port()), Some(2));
    }
}

#[tokio::test(start_paused = true)]
async fn a_resurrected_node_forgets_its_estimate_and_starts_at_the_median() {
    let nodes = vec![node(1, 0), node(2, 0), node(3, 0)];
    let p = latency_pool(nodes.clone());
    let now = Instant::now();
    let ms = Duration::from_millis;
    for (n, d) in nodes.iter().zip([ms(2), ms(4), ms(900)]) {
        p.observe(n, now, d, OutcomeKind::Success);
    }
    p.mark_failed(&nodes[2], now, "refused");
    assert_eq!(p.mark_answered(&nodes[2], None), Transition::Revived);
    assert_eq!(nodes[2].latency.raw(), None);
    // Its first pick gives it the median of the others (2 and 4 ms: their mean).
    for _ in 0..20 {
        let _ = p.select(&[]);
    }
    assert_eq!(nodes[2].latency.raw(), Some(3_000_000));
}

#[test]
fn round_robin_records_no_latency() {
    let nodes = vec![node(1, 0)];
    let p = pool(nodes.clone());
    p.observe(
        &nodes[0],
        Instant::now(),
        Duration::from_millis(3),
        OutcomeKind::Success,
    );
    assert_eq!(nodes[0].latency.raw(), None);
}

#[tokio::test(start_paused = true)]
async fn latency_aware_selection_falls_back_to_the_soonest_due_dead_node() {
    let nodes = vec![node(1, 0), node(2, 0)];
    let p = latency_pool(nodes.clone());
    let now = Instant::now();
    p.mark_failed(&nodes[0], now, "refused");
    p.mark_failed(&nodes[1], now, "refused");
    // Node 1 died with 1 live of 2 (2.5 s), node 2 with none (0.5 s): node 2 is due first.
    assert_eq!(p.select(&[]).map(|n| n.addr.port()), Some(2));
}
