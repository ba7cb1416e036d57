//! A fake cluster reports its members, so discovery and health checks work out of the box.

mod support;

use searchwire_fake::{nodes_info_json, Behavior, FakeCluster, Match, NodeInfoSpec};
use support::{Conn, TestResult};

#[tokio::test]
async fn cluster_nodes_know_each_other() -> TestResult {
    let cluster = FakeCluster::start(3).await?;
    assert_eq!(cluster.nodes().len(), 3);
    let urls = cluster.urls();
    assert_eq!(urls[1], format!("http://{}", cluster.node(1).addr()));
    assert!(urls.iter().all(|u| u.starts_with("http://127.0.0.1:")));

    let mut conn = Conn::open(cluster.node(2)).await?;
    let health = conn.request("GET", "/_cluster/health").await?.json();
    assert_eq!(health["number_of_nodes"], 3);
    assert_eq!(health["number_of_data_nodes"], 3);

    let info = conn.request("GET", "/_nodes/http,os").await?.json();
    assert_eq!(info["_nodes"]["total"], 3);
    assert_eq!(info["cluster_name"], "fake-cluster");
    for node in cluster.nodes() {
        let entry = &info["nodes"][node.id()];
        assert_eq!(entry["name"], node.name());
        assert_eq!(entry["http"]["publish_address"], node.addr().to_string());
        assert_eq!(
            entry["roles"],
            serde_json::json!(["data", "ingest", "cluster_manager"])
        );
        assert_eq!(entry["os"]["allocated_processors"], 8);
        assert_eq!(entry["version"], "2.19.0");
    }
    assert_eq!(cluster.request_count(), 2);
    Ok(())
}

#[tokio::test]
async fn scripted_nodes_info_replaces_the_default() -> TestResult {
    let cluster = FakeCluster::start(1).await?;
    let node = cluster.node(0);
    let spec = NodeInfoSpec {
        id: "abc".into(),
        name: "coordinating".into(),
        publish_address: "localhost/127.0.0.1:9299".into(),
        roles: vec!["ingest".into()],
        allocated_processors: 2,
    };
    node.on(
        Match::Path("/_nodes/http,os".into()),
        Behavior::json(200, nodes_info_json(&[spec])),
    );
    let info = Conn::open(node)
        .await?
        .request("GET", "/_nodes/http,os")
        .await?
        .json();
    let entry = &info["nodes"]["abc"];
    assert_eq!(entry["http"]["publish_address"], "localhost/127.0.0.1:9299");
    assert_eq!(entry["host"], "localhost");
    assert_eq!(entry["ip"], "127.0.0.1");
    assert_eq!(entry["roles"], serde_json::json!(["ingest"]));
    assert_eq!(entry["os"]["available_processors"], 2);
    Ok(())
}
