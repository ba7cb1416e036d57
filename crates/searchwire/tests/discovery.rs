//! Discovery against the fake cluster: who joins, who leaves, who gets user traffic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use searchwire::{Client, ErrorKind};
use searchwire_fake::{nodes_info_json, Behavior, FakeCluster, FakeNode, Match, NodeInfoSpec};
use support::{fast_schedule, Joins, BOUND};

const NODES_INFO: &str = "/_nodes/http,os";

/// Round robin: these tests count exactly which nodes user requests reach.
fn client(seeds: &[&FakeNode]) -> searchwire::ClientBuilder {
    Client::builder()
        .nodes(seeds.iter().map(|n| n.url()))
        .read_environment(false)
        .resurrection_timers(false)
        .selection(searchwire::Selection::RoundRobin)
        .seed(1)
}

/// A data node as the fake reports it, with `cores` allocated processors.
fn spec(node: &FakeNode, cores: u32) -> NodeInfoSpec {
    let mut s = NodeInfoSpec::new(&node.id(), &node.name(), &node.addr().to_string());
    s.allocated_processors = cores;
    s
}

fn dedicated_cluster_manager(node: &FakeNode) -> NodeInfoSpec {
    let mut s = spec(node, 8);
    s.roles = vec!["cluster_manager".into()];
    s
}

/// Makes `node` answer nodes info with exactly `specs`.
fn reports(node: &FakeNode, specs: &[NodeInfoSpec]) {
    node.on(
        Match::Path(NODES_INFO.into()),
        Behavior::json(200, nodes_info_json(specs)),
    );
}

/// Requests that are neither health checks (`GET /`, the cluster-health capability probe)
/// nor discovery.
fn user_requests(node: &FakeNode) -> usize {
    node.requests()
        .iter()
        .filter(|r| r.path != "/" && r.path != "/_cluster/health" && !r.path.starts_with("/_nodes"))
        .count()
}

async fn send_many(client: &Client, n: usize) {
    for _ in 0..n {
        client.get("/logs/_search").await.unwrap();
    }
}

fn urls(client: &Client) -> Vec<String> {
    client.nodes().into_iter().map(|n| n.url).collect()
}

fn alive(client: &Client, url: &str) -> bool {
    client.nodes().iter().any(|n| n.url == url && n.alive)
}

#[tokio::test]
async fn added_node_gets_traffic_only_after_answering_get_root() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let (seed, new) = (cluster.node(0), cluster.node(1));
    new.on(Match::Path("/".into()), Behavior::status(503));
    let client = client(&[seed]).build().unwrap();

    let report = client.discover_now().await.unwrap();
    assert_eq!(report.added, [new.url()]);
    assert_eq!(report.not_answering, [new.url()]);
    assert_eq!(urls(&client), [seed.url(), new.url()]);
    assert!(!alive(&client, &new.url()));
    send_many(&client, 20).await;
    assert_eq!(user_requests(new), 0);
    assert_eq!(user_requests(seed), 20);

    // It answers GET / now: the next round checks it again and lets traffic in.
    new.clear_rules();
    let report = client.discover_now().await.unwrap();
    assert!(report.added.is_empty() && report.not_answering.is_empty());
    assert!(alive(&client, &new.url()));
    send_many(&client, 20).await;
    assert_eq!(user_requests(new), 10);
    // Every user request to it came after its first successful GET /.
    let reqs = new.requests();
    let first_ok = reqs
        .iter()
        .position(|r| r.path == "/" && r.behavior == "Default")
        .unwrap();
    let first_user = reqs.iter().position(|r| r.path == "/logs/_search").unwrap();
    assert!(first_ok < first_user);
}

#[tokio::test]
async fn removed_node_leaves_the_pool_and_gets_no_traffic() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let client = client(&[cluster.node(0)]).build().unwrap();
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.added.len(), 2);
    assert_eq!(urls(&client), cluster.urls());

    let gone = cluster.node(2);
    for n in cluster.nodes() {
        reports(n, &[spec(cluster.node(0), 8), spec(cluster.node(1), 8)]);
    }
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.removed, [gone.url()]);
    assert_eq!(
        urls(&client),
        [cluster.node(0).url(), cluster.node(1).url()]
    );
    gone.clear_requests();
    send_many(&client, 20).await;
    assert_eq!(gone.request_count(), 0);
}

#[tokio::test]
async fn seeds_are_never_dropped() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let (seed, other) = (cluster.node(0), cluster.node(1));
    // The seed does not list itself (as when the seed URL is a load balancer).
    reports(seed, &[spec(other, 8)]);
    let client = client(&[seed]).build().unwrap();
    client.discover_now().await.unwrap();
    assert_eq!(urls(&client), [seed.url(), other.url()]);
    send_many(&client, 10).await;
    assert_eq!(user_requests(seed), 5);
}

#[tokio::test]
async fn partial_reply_keeps_the_pool() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let client = client(&[cluster.node(0)]).build().unwrap();
    client.discover_now().await.unwrap();
    let before = client.nodes();

    let mut partial = nodes_info_json(&[spec(cluster.node(0), 8)]);
    partial["_nodes"]["total"] = 3.into();
    partial["_nodes"]["failed"] = 2.into();
    for n in cluster.nodes() {
        n.on(
            Match::Path(NODES_INFO.into()),
            Behavior::json(200, partial.clone()),
        );
    }
    let err = client.discover_now().await.unwrap_err();
    assert!(err.to_string().contains("partial"), "{err}");
    assert!(err.to_string().contains("unchanged"), "{err}");
    assert_eq!(client.nodes(), before);

    // Not JSON at all: the same.
    for n in cluster.nodes() {
        n.on(
            Match::Path(NODES_INFO.into()),
            Behavior::Respond {
                status: 200,
                headers: vec![("content-type".into(), "text/html".into())],
                body: "<html>proxy</html>".into(),
            },
        );
    }
    assert!(client.discover_now().await.is_err());
    assert_eq!(client.nodes(), before);
}

#[tokio::test]
async fn dedicated_cluster_manager_gets_no_user_requests() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let cm = cluster.node(2);
    // The only seed is the cluster manager: it stays the contact point for discovery,
    // but user requests go to the data nodes.
    let specs = [
        spec(cluster.node(0), 8),
        spec(cluster.node(1), 8),
        dedicated_cluster_manager(cm),
    ];
    for n in cluster.nodes() {
        reports(n, &specs);
    }
    let client = client(&[cm]).build().unwrap();
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.answered_by, cm.url());
    assert_eq!(report.removed, [cm.url()]);
    assert_eq!(
        urls(&client),
        [cluster.node(0).url(), cluster.node(1).url()]
    );
    send_many(&client, 20).await;
    assert_eq!(user_requests(cm), 0);
    assert_eq!(user_requests(cluster.node(0)), 10);

    // Discovery still reaches the cluster when the data nodes are gone.
    cluster.node(0).kill().await;
    cluster.node(1).kill().await;
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.answered_by, cm.url());
    assert_eq!(user_requests(cm), 0);
}

#[tokio::test]
async fn host_slash_ip_publish_address_connects_to_the_host_name() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let (seed, named) = (cluster.node(0), cluster.node(1));
    let port = named.addr().port();
    let mut s = spec(named, 8);
    s.publish_address = format!("localhost/127.0.0.1:{port}");
    reports(seed, &[spec(seed, 8), s]);
    let client = client(&[seed]).build().unwrap();
    let report = client.discover_now().await.unwrap();
    let url = format!("http://localhost:{port}");
    assert_eq!(report.added, std::slice::from_ref(&url));
    assert!(alive(&client, &url), "{:?}", client.nodes());
    send_many(&client, 10).await;
    assert_eq!(user_requests(named), 5);
}

#[tokio::test]
async fn weights_follow_allocated_processors() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let n = cluster.nodes();
    reports(&n[0], &[spec(&n[0], 8), spec(&n[1], 16), spec(&n[2], 24)]);
    let client = client(&[&n[0]]).build().unwrap();
    client.discover_now().await.unwrap();
    let cores: Vec<u32> = client.nodes().iter().map(|s| s.cores).collect();
    assert_eq!(cores, [8, 16, 24]);
    send_many(&client, 600).await;
    let counts: Vec<usize> = n.iter().map(user_requests).collect();
    assert_eq!(counts, [100, 200, 300]);
}

#[tokio::test]
async fn discovery_sends_the_client_credentials_and_tries_the_next_node() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let (first, second) = (cluster.node(0), cluster.node(1));
    first.on(Match::Path(NODES_INFO.into()), Behavior::status(503));
    let client = client(&[first, second])
        .basic_auth("u", "p")
        .build()
        .unwrap();
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.answered_by, second.url());
    for node in [first, second] {
        let req = &node.requests_matching(&Match::Path(NODES_INFO.into()))[0];
        assert_eq!(req.header("authorization"), Some("Basic dTpw"));
        assert!(req.header("user-agent").unwrap().starts_with("searchwire/"));
    }
    // The seeds learned their ids.
    let ids: Vec<String> = client.nodes().into_iter().map(|n| n.id).collect();
    assert_eq!(ids, [first.id(), second.id()]);
}

#[tokio::test]
async fn no_node_answering_is_an_error_and_keeps_the_pool() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let node = cluster.node(0);
    node.on(Match::Path(NODES_INFO.into()), Behavior::status(401));
    let client = client(&[node]).build().unwrap();
    let err = client.discover_now().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth);
    assert!(err.to_string().contains("answered 401"), "{err}");
    assert_eq!(urls(&client), [node.url()]);
}

#[tokio::test]
async fn discover_on_start_adds_the_cluster() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let joins = Arc::new(Joins::default());
    let client = client(&[cluster.node(0)])
        .discover_on_start(true)
        .observer(joins.clone())
        .build()
        .unwrap();
    assert!(joins.wait_for(&cluster.node(1).url()).await);
    assert!(joins.wait_for(&cluster.node(2).url()).await);
    assert_eq!(urls(&client), cluster.urls());
    assert!(client.nodes().iter().all(|n| n.alive));
}

#[tokio::test]
async fn rediscover_on_failure_follows_a_replaced_node() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let replacement = FakeNode::start("node-3").await.unwrap();
    let joins = Arc::new(Joins::default());
    let (n0, n1, dead) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let client = client(&[n0, n1])
        .rediscover_on_failure(true)
        .observer(joins.clone())
        .build()
        .unwrap();
    // Learn the cluster, node-2 included.
    client.discover_now().await.unwrap();
    assert_eq!(urls(&client), cluster.urls());

    // node-2 dies and the cluster reports node-3 in its place.
    dead.kill().await;
    for n in [n0, n1] {
        reports(n, &[spec(n0, 8), spec(n1, 8), spec(&replacement, 8)]);
    }
    for _ in 0..10 {
        client.get("/logs/_search").await.unwrap();
        if !alive(&client, &dead.url()) {
            break;
        }
    }
    assert!(!alive(&client, &dead.url()));
    // The failure triggered a round in the background: node-3 joined, node-2 left.
    assert!(joins.wait_for(&replacement.url()).await);
    assert_eq!(urls(&client), [n0.url(), n1.url(), replacement.url()]);
}

#[tokio::test]
async fn zero_intervals_and_timeouts_are_rejected_at_build() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let e = client(&[cluster.node(0)])
        .discover_interval(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("discover_interval"), "{e}");
    let e = client(&[cluster.node(0)])
        .discovery_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("discovery_timeout"), "{e}");
}

fn root_checks(node: &FakeNode) -> usize {
    node.requests_matching(&Match::Path("/".into())).len()
}

#[tokio::test]
async fn a_node_removed_by_discovery_gets_no_more_resurrection_checks() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let (seed, other, gone) = (cluster.node(0), cluster.node(1), cluster.node(2));
    // Reachable but broken: every exchange is reset (and recorded), so it fails its first
    // check and its resurrection timer takes over.
    gone.on(Match::Any, Behavior::Reset);
    let client = client(&[seed])
        .resurrection_timers(true)
        .resurrection(fast_schedule(200, 1000, 50))
        .build()
        .unwrap();
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.not_answering, [gone.url()]);
    // The discovery check, then the timer's (133 ms, 267 ms later: 2 live of 3).
    assert!(gone.wait_until(BOUND, |n| root_checks(n) >= 3).await);

    // The cluster no longer lists it: it leaves the pool, and its timer ends.
    for n in [seed, other] {
        reports(n, &[spec(seed, 8), spec(other, 8)]);
    }
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.removed, [gone.url()]);
    // A check already in flight may still land; after that, nothing over several scheduled
    // intervals (the next ones would be 533 ms, then 1 s apart).
    let before = gone.request_count() + 1;
    assert!(
        !gone
            .wait_until(Duration::from_secs(3), |n| n.request_count() > before)
            .await,
        "a removed node's resurrection timer kept checking it"
    );
}

#[tokio::test]
async fn a_discovered_node_that_failed_its_first_check_is_brought_in_by_its_timer() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let (seed, new) = (cluster.node(0), cluster.node(1));
    new.on(Match::Path("/".into()), Behavior::status(503));
    let joins = Arc::new(Joins::default());
    let client = client(&[seed])
        .resurrection_timers(true)
        .resurrection(fast_schedule(200, 1000, 50))
        .observer(joins.clone())
        .build()
        .unwrap();
    let report = client.discover_now().await.unwrap();
    assert_eq!(report.not_answering, [new.url()]);
    assert!(!alive(&client, &new.url()));

    // It answers GET / now. No discovery round runs again: its resurrection timer checks
    // it and lets traffic in.
    new.clear_rules();
    assert!(joins.wait_for(&new.url()).await);
    assert!(alive(&client, &new.url()));
    assert_eq!(
        new.requests_matching(&Match::Path(NODES_INFO.into())).len(),
        0
    );
    assert!(
        root_checks(new) >= 2,
        "the discovery check, then the timer's"
    );
    send_many(&client, 20).await;
    assert_eq!(user_requests(new), 10);
}
