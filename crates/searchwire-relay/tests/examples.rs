//! The example a newcomer copies runs, against the in-process fake cluster: its functions are
//! compiled into this test from its file.

use searchwire_fake::{FakeBulk, FakeCluster};

#[path = "../examples/relay.rs"]
#[allow(dead_code)]
mod relay;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_example_writes_through_and_stops_gracefully() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let running = relay::start(&cluster.urls(), &dir.path().join("queue"))
        .await
        .unwrap();
    let answer = relay::send_bulk(
        running.addr,
        "{\"index\":{\"_index\":\"logs\",\"_id\":\"1\"}}\n{\"message\":\"hello\"}\n\
         {\"create\":{\"_index\":\"logs\",\"_id\":\"2\"}}\n{\"message\":\"again\"}\n",
    )
    .await
    .unwrap();
    assert_eq!(answer["errors"], false, "{answer}");
    assert_eq!(
        answer["items"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );
    assert_eq!(bulk.count("logs"), 2);
    let report = running.shutdown().await.unwrap();
    assert!(report.connections_drained);
}
