//! The examples a newcomer copies run, against the in-process fake cluster: each example's
//! functions are compiled into this test from its file.

use std::time::Duration;

use searchwire::ErrorKind;
use searchwire_fake::{Behavior, Match};

#[path = "../examples/search.rs"]
#[allow(dead_code)]
mod search;

#[tokio::test]
async fn the_search_example_finds_its_hit_with_a_node_down() {
    let cluster = search::fake_cluster().await.unwrap();
    for _ in 0..6 {
        let hits = search::search(&cluster.urls(), "logs", "error")
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0]["_id"], "1");
    }
}

#[tokio::test]
async fn the_search_example_gives_up_at_its_deadline() {
    let cluster = search::fake_cluster().await.unwrap();
    // Every live node answers only after the attempt timeout: each attempt times out, the
    // node answers its liveness check, and the request ends within the deadline.
    let slow = Behavior::json(200, serde_json::json!({})).delayed(Duration::from_secs(5));
    for node in &cluster.nodes()[..2] {
        node.on(Match::Path("/logs/_search".into()), slow.clone());
    }
    let started = tokio::time::Instant::now();
    let e = search::search(&cluster.urls(), "logs", "error")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimeout
        ),
        "{e}"
    );
    assert!(
        started.elapsed() < search::DEADLINE + Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}
