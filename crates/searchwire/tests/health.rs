//! Health checking against the fake cluster (real sockets, real time): the capability probe
//! on the wire, 401/403 toggled on the health endpoints while the client runs, auth kept
//! apart from death, and background requests that carry the user's headers. Waits are on
//! events (the observer channel, `FakeNode::wait_until`), never on sleeps. The exact timing
//! (4 h re-probe, refresh interval) is asserted with paused time in `src/health_tests.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use searchwire::{Backoff, Capability, Client, ClusterStatus, ErrorKind, Request};
use searchwire_fake::{Behavior, FakeCluster, FakeNode, Match, VERSION};
use support::{fast_schedule, ms, transition, transitions};

const HEALTH: &str = "/_cluster/health";

fn client(cluster: &FakeCluster) -> searchwire::ClientBuilder {
    Client::builder()
        .nodes(cluster.urls())
        .backoff(Backoff::constant(ms(5)))
        .read_environment(false)
        .health_refresh(false)
        .health_check_jitter(0.0)
        .seed(3)
}

fn health_requests(node: &FakeNode) -> Vec<searchwire_fake::Recorded> {
    node.requests_matching(&Match::Path(HEALTH.into()))
}

#[tokio::test]
async fn check_all_probes_cluster_health_locally_and_records_version_and_distribution() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let report = client.check_all().await;
    assert_eq!(report.status(), ClusterStatus::Green);
    assert_eq!(report.cluster_name(), Some(searchwire_fake::CLUSTER_NAME));
    for n in &report.nodes {
        assert!(n.alive);
        assert_eq!(n.capability, Capability::Available);
        assert_eq!(n.version.as_deref(), Some(VERSION));
        assert_eq!(n.distribution.as_deref(), Some("opensearch"));
    }
    for node in cluster.nodes() {
        let probes = node.requests_matching(&Match::Query("local=true".into()));
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].path, HEALTH);
        assert!(node
            .requests()
            .iter()
            .all(|r| { !r.query.as_deref().unwrap_or("").contains("wait_for") }));
    }
    let h = client.cluster_health();
    assert_eq!(h.latest.unwrap().health.number_of_nodes, 2);
    assert!(h
        .nodes
        .iter()
        .all(|n| n.capability == Capability::Available));
}

#[tokio::test]
async fn toggling_401_and_403_on_the_health_endpoints_never_kills_a_node() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let client = client(&cluster).build().unwrap();
    assert!(client
        .check_all()
        .await
        .nodes
        .iter()
        .all(|n| n.capability == Capability::Available));

    // The permission is revoked on node a: Unavailable, alive; b still reports health.
    a.on(Match::Path(HEALTH.into()), Behavior::status(403));
    let r = client.check_all().await;
    assert_eq!(r.nodes[0].capability, Capability::Unavailable);
    assert!(r.nodes[0].alive && r.nodes[0].error.is_none());
    assert_eq!(r.status(), ClusterStatus::Green, "from node b");

    // Node a now rejects the credentials outright: alive, the problem reported.
    a.on(Match::Path("/".into()), Behavior::status(401));
    let r = client.check_all().await;
    assert!(r.nodes[0].alive);
    assert_eq!(
        r.nodes[0].error.as_deref(),
        Some("credentials rejected (401)")
    );
    let snap = &client.nodes()[0];
    assert!(snap.alive);
    assert_eq!(
        snap.auth_problem.as_deref(),
        Some("credentials rejected (401)")
    );
    // Every node rejecting: still alive, and user requests fail with Auth, not "no node".
    b.on(Match::Any, Behavior::status(401));
    a.on(Match::Any, Behavior::status(401));
    let r = client.check_all().await;
    assert!(r.all_reachable_rejected_credentials());
    let e = client
        .send(Request::get("/logs/_search"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth);
    assert!(client.nodes().iter().all(|n| n.alive));

    // Fixed: everything comes back to Available.
    a.clear_rules();
    b.clear_rules();
    let r = client.check_all().await;
    assert!(r
        .nodes
        .iter()
        .all(|n| n.alive && n.capability == Capability::Available && n.error.is_none()));
    assert!(client.nodes().iter().all(|n| n.auth_problem.is_none()));
}

#[tokio::test]
async fn a_resurrection_check_of_an_available_node_falls_back_to_get_root_on_403() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let sick = cluster.node(1);
    let (events, mut rx) = transitions();
    let client = client(&cluster)
        .resurrection(fast_schedule(200, 1000, 100))
        .observer(events)
        .build()
        .unwrap();
    client.check_all().await;
    assert_eq!(
        client.cluster_health().nodes[1].capability,
        Capability::Available
    );

    // It dies; while it is down its cluster:monitor/health permission is revoked.
    sick.kill().await;
    while client.nodes()[1].alive {
        client.send(Request::get("/x")).await.unwrap();
    }
    sick.on(Match::Path(HEALTH.into()), Behavior::status(403));
    sick.clear_requests();
    sick.revive().await.unwrap();
    transition(&mut rx, &sick.url(), true).await;
    // The check asked cluster health (Available), got 403, fell back to GET / — which
    // succeeded, so the node came back — and reset the capability to Pending.
    let reqs = sick.requests();
    let paths: Vec<&str> = reqs.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(&paths[..2], [HEALTH, "/"], "{paths:?}");
    assert_eq!(reqs[0].query.as_deref(), Some("local=true"));
    let view = &client.cluster_health().nodes[1];
    assert!(view.alive);
    assert_eq!(view.capability, Capability::Pending);
    assert_eq!(view.health_age, None, "stale health cleared");
    // The next check probes again and finds it denied: Unavailable, still alive.
    let r = client.check_all().await;
    assert_eq!(r.nodes[1].capability, Capability::Unavailable);
    assert!(r.nodes[1].alive);
}

#[tokio::test]
async fn a_node_answering_health_checks_with_401_is_resurrected_not_left_dead() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let sick = cluster.node(0);
    let (events, mut rx) = transitions();
    let client = client(&cluster)
        .resurrection(fast_schedule(200, 1000, 100))
        .observer(events)
        .build()
        .unwrap();
    sick.kill().await;
    while client.nodes()[0].alive {
        client.send(Request::get("/x")).await.unwrap();
    }
    sick.on(Match::Any, Behavior::status(401));
    sick.revive().await.unwrap();
    transition(&mut rx, &sick.url(), true).await;
    let snap = &client.nodes()[0];
    assert!(snap.alive);
    assert_eq!(snap.failures, 0);
    assert_eq!(
        snap.auth_problem.as_deref(),
        Some("credentials rejected (401)")
    );
    assert!(
        health_requests(sick).is_empty(),
        "no capability probe after a rejected GET /"
    );
}

#[tokio::test]
async fn background_requests_carry_credentials_headers_and_the_request_modifier() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let client = client(&cluster)
        .basic_auth("monitor", "s3cret")
        .header("x-tenant", "blue")
        .health_check_request_modifier(|req| {
            req.headers_mut()
                .insert("x-signed", http::HeaderValue::from_static("yes"));
        })
        .build()
        .unwrap();
    // check_all and discover_now return after their requests were answered (and recorded).
    client.check_all().await;
    client.discover_now().await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for n in cluster.nodes() {
        for r in n.requests() {
            seen.insert(r.path.clone());
            assert!(
                r.header("authorization")
                    .is_some_and(|v| v.starts_with("Basic ")),
                "{}",
                r.path
            );
            assert_eq!(r.header("x-tenant"), Some("blue"), "{}", r.path);
            assert_eq!(r.header("x-signed"), Some("yes"), "{}", r.path);
        }
    }
    assert!(seen.contains("/") && seen.contains(HEALTH) && seen.contains("/_nodes/http,os"));
    assert!(!format!("{client:?}").contains("s3cret"));
}
