//! The example a newcomer copies runs, against the in-process fake cluster: its function is
//! compiled into this test from its file.

use searchwire_fake::{FakeBulk, FakeCluster};

#[path = "../examples/index_file.rs"]
#[allow(dead_code)]
mod index_file;

#[tokio::test]
async fn the_index_file_example_writes_every_line_once() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs.ndjson");
    let docs: String = (0..500)
        .map(|i| format!("{{\"message\":\"event {i}\"}}\n\n"))
        .collect();
    std::fs::write(&path, docs).unwrap();
    let stats = index_file::index_file(&cluster.urls(), "logs", &path)
        .await
        .unwrap();
    assert_eq!(stats.indexed, 500);
    assert_eq!(stats.dead_lettered, 0);
    assert_eq!(bulk.count("logs"), 500);
    assert_eq!(bulk.max_writes(), 1);
}
