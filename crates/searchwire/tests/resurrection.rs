//! Dead nodes against the fake cluster: no user traffic while dead, health checks spaced as
//! the schedule says (read off the timestamps the fake nodes recorded), and recovery.
//! The exact schedule is asserted to the millisecond with paused time in the library's
//! unit tests; here real sockets and real time, so the spacing is checked with a lower
//! bound (never earlier than the schedule) and a generous upper bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire::{Backoff, Client, ErrorKind, Request};
use searchwire_fake::{Behavior, FakeCluster, Match, Recorded};
use support::{fast_schedule, ms, revived, transitions};

fn gaps(reqs: &[Recorded]) -> Vec<Duration> {
    reqs.windows(2).map(|w| w[1].at - w[0].at).collect()
}

#[tokio::test]
async fn a_dead_node_gets_only_health_checks_on_schedule_then_rejoins() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let sick = cluster.node(1);
    // Reachable but broken: every exchange is reset, so the node records what it receives.
    sick.on(Match::Any, Behavior::Reset);
    let (events, mut rx) = transitions();
    let client = Client::builder()
        .nodes(cluster.urls())
        .backoff(Backoff::constant(ms(5)))
        .resurrection(fast_schedule(300, 2000, 100))
        .read_environment(false)
        .observer(events)
        .seed(5)
        .build()
        .unwrap();
    for i in 0..60 {
        let r = client.send(Request::get(format!("/x/{i}"))).await.unwrap();
        assert_ne!(r.node(), sick.url());
    }
    // 2 live of 3, failures 1, 2, 3, 4: 300 ms × 2^(f−1) × 2/3 = 200, 400, 800, then
    // capped 2 s × 2/3 = 1333 ms.
    assert!(
        sick.wait_until(Duration::from_secs(10), |n| {
            n.requests_matching(&Match::Path("/".into())).len() >= 4
        })
        .await
    );
    let all = sick.requests();
    let user: Vec<_> = all.iter().filter(|r| r.path != "/").collect();
    assert_eq!(
        user.len(),
        1,
        "exactly one user request reached the node: the one that failed"
    );
    let checks = sick.requests_matching(&Match::Path("/".into()));
    assert!(checks.iter().all(|r| r.method == "GET"));
    let first_gap = checks[0].at - user[0].at;
    // Never early; the upper bounds are loose (real time on a loaded 2-core machine): the
    // exact schedule is pinned with paused time in the library's unit tests.
    assert!(
        first_gap >= ms(200) && first_gap < ms(2000),
        "{first_gap:?}"
    );
    let g = gaps(&checks[..4]);
    for (got, want) in g.iter().zip([400u64, 800, 1333]) {
        assert!(*got >= ms(want), "check came early: {got:?} < {want} ms");
        assert!(
            *got < ms(want + 2000),
            "check came late: {got:?} vs {want} ms"
        );
    }
    let snap = client
        .nodes()
        .into_iter()
        .find(|n| n.url == sick.url())
        .unwrap();
    assert!(!snap.alive);
    assert!(snap.failures >= 4);
    assert!(snap.next_check_in.is_some());

    // Revive: it rejoins within one scheduled interval (≤ 1.33 s + slack) and takes traffic.
    sick.clear_rules();
    revived(&mut rx, &sick.url(), ms(3000)).await;
    assert!(client.nodes().iter().all(|n| n.alive));
    // (Latency-aware selection starts it at the median of the others' estimates, so it gets
    // about its share from its first pick on, not necessarily within the next few requests.)
    let mut reached = false;
    for i in 0..100 {
        let r = client.send(Request::get(format!("/y/{i}"))).await.unwrap();
        reached |= r.node() == sick.url();
    }
    assert!(reached, "the resurrected node takes user traffic again");
}

#[tokio::test]
async fn when_every_node_dies_requests_fail_fast_and_nodes_are_retried_at_the_floor() {
    let cluster = FakeCluster::start(3).await.unwrap();
    for n in cluster.nodes() {
        n.on(Match::Any, Behavior::Reset);
    }
    let (events, mut rx) = transitions();
    let client = Client::builder()
        .nodes(cluster.urls())
        .backoff(Backoff::constant(ms(5)))
        .resurrection(fast_schedule(300, 2000, 100))
        .read_environment(false)
        .observer(events)
        .seed(6)
        .build()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    let e = client.send(Request::get("/x")).await.unwrap_err();
    // Every node was reached and reset the connection: the nodes are dead for the pool, but
    // the error says the connection broke (the request may have been processed), not that
    // no node was reachable.
    assert_eq!(e.kind(), ErrorKind::ConnectionLost);
    assert!(t0.elapsed() < ms(1000), "fails fast: {:?}", t0.elapsed());
    assert!(e.to_string().contains("the connection broke"), "{e}");
    assert!(client.nodes().iter().all(|n| !n.alive));
    // All dead: live = 0, so every node is re-checked at the 100 ms floor.
    let n0 = cluster.node(0);
    assert!(
        n0.wait_until(Duration::from_secs(5), |n| {
            n.requests_matching(&Match::Path("/".into())).len() >= 4
        })
        .await
    );
    let checks = n0.requests_matching(&Match::Path("/".into()));
    for g in gaps(&checks) {
        assert!(g >= ms(100), "checked before the floor: {g:?}");
        assert!(g < ms(2000), "floor is 100 ms, gap {g:?}");
    }
    // Recovery: service resumes without any user action.
    for n in cluster.nodes() {
        n.clear_rules();
    }
    for n in cluster.nodes() {
        if !client.nodes().iter().any(|s| s.url == n.url() && s.alive) {
            revived(&mut rx, &n.url(), ms(3000)).await;
        }
    }
    client.send(Request::get("/z")).await.unwrap();
}

#[tokio::test]
async fn timers_stop_when_the_client_is_dropped() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let sick = cluster.node(0);
    sick.on(Match::Any, Behavior::Reset);
    let client = Client::builder()
        .nodes(cluster.urls())
        .backoff(Backoff::constant(ms(5)))
        .resurrection(fast_schedule(300, 2000, 100))
        .read_environment(false)
        .build()
        .unwrap();
    while sick.request_count() == 0 {
        client.send(Request::get("/x")).await.unwrap();
    }
    assert!(
        sick.wait_until(Duration::from_secs(5), |n| {
            !n.requests_matching(&Match::Path("/".into())).is_empty()
        })
        .await
    );
    drop(client);
    // A check already in flight when the client was dropped may still land; after that,
    // nothing: wait well past several scheduled intervals (the schedule here is 200 ms,
    // 400 ms, 800 ms, 1.33 s).
    let before = sick.request_count() + 1;
    assert!(
        !sick
            .wait_until(Duration::from_secs(3), |n| n.request_count() > before)
            .await,
        "a dropped client's timer kept checking"
    );
}
