//! Resilience policies against the in-process fake cluster: real sockets, real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use searchwire::{Backoff, BreakerState, Client, ErrorKind, Request};
use searchwire_fake::{Behavior, FakeCluster, Match};

#[tokio::test]
async fn the_retry_budget_bounds_a_cluster_answering_503_to_everything() {
    let cluster = FakeCluster::start(3).await.unwrap();
    for n in cluster.nodes() {
        n.on(Match::Any, Behavior::status(503));
        n.set_recording(false);
    }
    let client = Client::builder()
        .nodes(cluster.urls())
        .backoff(Backoff::constant(Duration::from_millis(1)))
        .no_circuit_breaker()
        .node_gateway_failures_to_eject(0)
        .resurrection_timers(false)
        .read_environment(false)
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    for _ in 0..1000 {
        let e = client.send(Request::get("/logs/_doc/1")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Status);
    }
    let elapsed = started.elapsed();
    let attempts = cluster.request_count();
    // 1.2 × 1,000 plus the floor: 10/s over the 10 s window, once per window elapsed.
    let windows = 1 + elapsed.as_secs() / 10;
    let bound = 1200 + 100 * windows as usize;
    assert!(
        attempts <= bound,
        "{attempts} attempts for 1000 requests (bound {bound}, {elapsed:?}); without the budget it would be 4000"
    );
    assert!(
        attempts >= 1200,
        "retries still happen within the budget: {attempts}"
    );
}

#[tokio::test]
async fn an_open_breaker_sends_nothing_until_its_cool_down_ends() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let node = cluster.node(0);
    node.on(Match::Path("/x".into()), Behavior::status(503));
    let client = Client::builder()
        .nodes(cluster.urls())
        .max_retries(0)
        .node_gateway_failures_to_eject(0)
        .circuit_breaker(searchwire::BreakerConfig {
            min_requests: 5,
            cool_down: Duration::from_millis(300),
            ..Default::default()
        })
        .resurrection_timers(false)
        .read_environment(false)
        .build()
        .unwrap();
    for _ in 0..5 {
        let _ = client.send(Request::get("/x")).await;
    }
    assert_eq!(client.breaker_state(), BreakerState::Open);
    let seen = node.request_count();
    for _ in 0..100 {
        let e = client.send(Request::get("/x")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CircuitOpen);
    }
    assert_eq!(node.request_count(), seen, "no network traffic while open");
    node.clear_rules();
    // Wait for the cool-down by polling the state (no sleep used as synchronization).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.breaker_state() != BreakerState::HalfOpen {
        assert!(tokio::time::Instant::now() < deadline, "never half-opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..3 {
        client.send(Request::get("/x")).await.unwrap();
    }
    assert_eq!(client.breaker_state(), BreakerState::Closed);
}
