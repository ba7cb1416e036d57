//! One owner of a batch's retries: the indexer. Each send is one transport attempt with the
//! bulk time limit, whatever retries the client would make for other requests; the exact
//! sends and their times under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire_bulk::Action;
use searchwire_fake::{Behavior, FakeCluster};
use support::{doc, indexer, retrying_client, Collect};

fn offsets(cluster: &FakeCluster) -> Vec<u64> {
    support::arrival_offsets_of(cluster)
}

/// A whole-request 429 with `Retry-After: 1` three times: the batch is sent exactly four
/// times, by the indexer alone, at the §3.3 rule grown from the server's wait — 1 s, then
/// ×1.5 (1.5 s, 2.25 s) — not the transport's six attempts times the indexer's six.
#[tokio::test(start_paused = true)]
async fn a_whole_request_429_is_retried_by_the_indexer_alone_with_retry_after_grown() {
    let (cluster, bulk, client) = retrying_client(1).await;
    let ix = indexer(&client).build().unwrap();
    for _ in 0..3 {
        bulk.answer_next(Behavior::retry_after(429, "1"));
    }
    for i in 0..10 {
        ix.add(Action::create("r").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(offsets(&cluster), vec![0, 1000, 2500, 4750]);
    assert_eq!(stats.requests, 4);
    assert_eq!(stats.failed_requests, 3);
    assert_eq!(stats.retried_throttled, 30);
    assert_eq!(bulk.count("r"), 10);
}

/// A batch the cluster keeps refusing with 429 and a retry sink installed: exactly
/// 1 + 5 sends (the §3.3 count), then every item goes to the sink.
#[tokio::test(start_paused = true)]
async fn a_batch_always_throttled_is_sent_six_times_then_handed_to_the_retry_sink() {
    let (cluster, bulk, client) = retrying_client(1).await;
    let retry = Collect::default();
    let ix = indexer(&client).retry_sink(retry.clone()).build().unwrap();
    for _ in 0..20 {
        bulk.answer_next(Behavior::retry_after(429, "2"));
    }
    for i in 0..3 {
        ix.add(Action::create("s").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    // 2 s × 1.5^(n-1): 2, 3, 4.5, 6.75, 10.125 s.
    assert_eq!(offsets(&cluster), vec![0, 2000, 5000, 9500, 16250, 26375]);
    assert_eq!(stats.requests, 6);
    assert_eq!(stats.handed_to_retry_sink, 3);
    assert_eq!(retry.items().len(), 3);
    assert!(retry.items().iter().all(|i| i.attempts == 6));
}

/// A bulk request the cluster takes 45 s to answer (a primary being promoted) is answered:
/// its one attempt has the 2-minute bulk limit, not the client's 30 s attempt timeout, so
/// the batch is not cut and sent again.
#[tokio::test(start_paused = true)]
async fn a_slow_bulk_request_is_not_cut_by_the_clients_attempt_timeout() {
    let (cluster, bulk, client) = retrying_client(1).await;
    bulk.set_delay(Some(Duration::from_secs(45)));
    let ix = indexer(&client).build().unwrap();
    for i in 0..5 {
        ix.add(Action::create("slow").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(cluster.node(0).request_count(), 1);
    assert_eq!((stats.created, stats.retried()), (5, 0));
    // A request that hangs is cut once at the 2-minute limit and sent again by the
    // indexer after the connection class's 200 ms.
    cluster.node(0).clear_requests();
    bulk.set_delay(None);
    bulk.answer_next(Behavior::Hang);
    let ix = indexer(&client).build().unwrap();
    ix.add(Action::index("slow").id("late").json(&doc(9)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!(
        offsets(&cluster),
        vec![0, 120_200],
        "one cut attempt, one retry"
    );
    assert_eq!((stats.retried_connection, stats.indexed), (1, 1));
}

/// A 413 (the cluster's `http.max_content_length` is below the batch) is not the items'
/// fault: the request size halves until the cluster takes it, every document is stored
/// once, no dead letter — except a single action larger than the limit, which no request
/// can carry.
#[tokio::test(start_paused = true)]
async fn a_413_splits_the_batch_and_dead_letters_only_an_action_too_large_alone() {
    let (cluster, bulk, client) = retrying_client(1).await;
    bulk.max_content_length(Some(2_000));
    let dead = Collect::default();
    let ix = indexer(&client)
        .dead_letter_sink(dead.dead_letter_sink())
        .build()
        .unwrap();
    for i in 0..100 {
        ix.add(Action::create("big").id(format!("{i:03}")).json(&doc(i)))
            .await
            .unwrap();
    }
    ix.flush().await;
    assert_eq!(bulk.count("big"), 100);
    assert_eq!(bulk.max_writes(), 1);
    assert!(dead.items().is_empty(), "{:?}", dead.ids());
    let sizes: Vec<usize> = cluster
        .node(0)
        .requests()
        .iter()
        .map(|r| r.body.len())
        .collect();
    // ~8 KB, 4 KB, 2 KB refused (no delay between them), then requests under 2,000 bytes.
    assert!(sizes[..3].iter().all(|s| *s > 2_000), "{sizes:?}");
    assert!(sizes[3..].iter().all(|s| *s <= 2_000), "{sizes:?}");
    let reqs = cluster.node(0).requests();
    assert_eq!(reqs[3].at, reqs[0].at, "a split is sent at once");

    // One action alone above the limit: a dead letter that says why.
    let huge = serde_json::json!({ "blob": "x".repeat(3_000) });
    ix.add(Action::create("big").id("huge").json(&huge))
        .await
        .unwrap();
    let stats = ix.close().await;
    let d = dead.items();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].action.doc_id(), Some("huge"));
    assert_eq!(d[0].reason.error_type, "request_too_large");
    assert!(!d[0].retryable);
    assert!(
        d[0].reason.reason.contains("http.max_content_length"),
        "{}",
        d[0].reason
    );
    assert_eq!((stats.created, stats.dead_lettered), (100, 1));
}
