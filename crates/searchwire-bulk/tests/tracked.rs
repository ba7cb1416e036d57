//! Tracked items: each item's final outcome goes to its ticket, never to a sink.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire_bulk::{
    Action, EncodedAction, ItemOutcome, OpType, RequestParams, RetryClass, Written, WrittenItem,
};
use searchwire_fake::{Behavior, BulkFault};
use support::{doc, indexer, setup, Collect};
use tokio::time::Instant;

fn written(o: &ItemOutcome) -> &WrittenItem {
    match o {
        ItemOutcome::Written(w) => w,
        other => panic!("written expected, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_tracked_item_gets_its_outcome_and_no_sink_is_called() {
    let s = setup(1).await;
    s.bulk.mapping_error_marker("BAD");
    let dead = Collect::default();
    let retry = Collect::default();
    let ix = indexer(&s.client)
        .dead_letter_sink(dead.dead_letter_sink())
        .retry_sink(retry.clone())
        .build()
        .unwrap();
    // Item 1 is throttled six times (one more than the 5 retries): undeliverable.
    s.bulk.item_faults([
        BulkFault::Ok,
        BulkFault::Throttle,
        BulkFault::Ok,
        BulkFault::Throttle,
        BulkFault::Throttle,
        BulkFault::Throttle,
        BulkFault::Throttle,
        BulkFault::Throttle,
    ]);
    let a = ix
        .add_tracked(Action::create("t").id("a").json(&doc(1)))
        .await
        .unwrap();
    let b = ix
        .add_tracked(Action::create("t").id("b").json(&doc(2)))
        .await
        .unwrap();
    let bad = ix
        .add_tracked(
            Action::index("t")
                .id("c")
                .json(&serde_json::json!({"x": "BAD"})),
        )
        .await
        .unwrap();
    assert_eq!((a.seq(), b.seq(), bad.seq()), (0, 1, 2));
    let (a, b, bad) = (a.await, b.await, bad.await);
    let w = written(&a);
    assert_eq!((w.status, w.result, w.attempts), (201, Written::Created, 1));
    assert_eq!(
        (w.version, w.seq_no, w.primary_term),
        (Some(1), Some(0), Some(1))
    );
    match &b {
        ItemOutcome::Undeliverable { class, reason } => {
            assert_eq!(*class, RetryClass::Throttled);
            assert_eq!(reason.error_type, "retries_exhausted");
        }
        other => panic!("undeliverable expected, got {other:?}"),
    }
    match &bad {
        ItemOutcome::Failed {
            reason,
            whole_request,
            ..
        } => {
            assert_eq!(reason.status, Some(400));
            assert_eq!(reason.error_type, "mapper_parsing_exception");
            assert!(!whole_request);
        }
        other => panic!("failed expected, got {other:?}"),
    }
    let stats = ix.close().await;
    assert!(
        dead.items().is_empty() && retry.items().is_empty(),
        "no sink"
    );
    assert_eq!((stats.tracked_failed, stats.tracked_undeliverable), (1, 1));
    assert_eq!((stats.dead_lettered, stats.handed_to_retry_sink), (0, 0));
    assert_eq!(stats.created, 1);
    // Requests with tracked items ask for the version fields too.
    assert!(s
        .bulk
        .filter_paths()
        .iter()
        .all(|f| f.as_deref().is_some_and(|f| f.contains("items.*._seq_no"))));
}

#[tokio::test]
async fn untracked_requests_keep_the_small_filter_path() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    ix.add(Action::create("u").id("1").json(&doc(1)))
        .await
        .unwrap();
    ix.close().await;
    let fp = s.bulk.filter_paths();
    assert_eq!(fp.len(), 1);
    assert!(!fp[0].as_deref().unwrap().contains("_seq_no"), "{fp:?}");
}

#[tokio::test]
async fn encoded_lines_are_sent_as_they_are() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    // A metadata field the Action builder does not know is kept.
    let lines = "{\"index\":{\"_index\":\"e\",\"_id\":\"7\",\"require_alias\":false}}\n{\"n\":7}\n";
    let t = ix
        .add_tracked_encoded(EncodedAction::new(OpType::Index, "e", "7", lines).unwrap())
        .await
        .unwrap();
    let w = written(&t.await).clone();
    assert_eq!((w.status, w.result), (201, Written::Created));
    let d = ix
        .add_tracked_encoded(
            EncodedAction::new(
                OpType::Delete,
                "e",
                "7",
                "{\"delete\":{\"_index\":\"e\",\"_id\":\"7\"}}\n",
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(written(&d.await).result, Written::Deleted);
    ix.close().await;
    let reqs = s.cluster.node(0).requests();
    assert!(String::from_utf8_lossy(&reqs[0].body).contains("require_alias"));
}

/// Items with other request parameters never share a `_bulk`; each request carries its
/// items' parameters, and a run of other parameters ends a batch (arrival order kept).
#[tokio::test]
async fn items_share_a_request_only_with_equal_request_parameters() {
    let s = setup(1).await;
    // One request at a time and a long linger: everything is buffered before the first send.
    let ix = indexer(&s.client)
        .max_concurrency(1)
        .adaptive_concurrency(false)
        .flush_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let wait: RequestParams = vec![("wait_for_active_shards".to_string(), "1".to_string())].into();
    let refresh: RequestParams = vec![("refresh".to_string(), "true".to_string())].into();
    let enc = |id: &str| {
        let lines = format!("{{\"index\":{{\"_index\":\"p\",\"_id\":\"{id}\"}}}}\n{{}}\n");
        EncodedAction::new(OpType::Index, "p", id, lines).unwrap()
    };
    let mut tickets = Vec::new();
    for a in [
        enc("1").request_params(wait.clone()),
        enc("2").request_params(wait.clone()),
        enc("3"),
        enc("4").request_params(Vec::new().into()),
        enc("5").request_params(refresh.clone()),
        enc("6").request_params(wait.clone()),
    ] {
        tickets.push(ix.add_tracked_encoded(a).await.unwrap());
    }
    let mut outcomes = Vec::new();
    for t in tickets {
        outcomes.push(written(&t.await).clone());
    }
    assert_eq!(outcomes[4].forced_refresh, Some(true));
    assert_eq!(outcomes[0].forced_refresh, None);
    ix.close().await;
    // An empty parameter list is no parameters: items 3 and 4 share a request.
    assert_eq!(s.bulk.batch_sizes(), [2, 2, 1, 1]);
    let params: Vec<String> = s
        .bulk
        .queries()
        .iter()
        .map(|q| {
            let q = q.as_deref().unwrap_or("");
            q.split('&')
                .filter(|kv| !kv.starts_with("filter_path="))
                .collect::<Vec<_>>()
                .join("&")
        })
        .collect();
    assert_eq!(
        params,
        [
            "wait_for_active_shards=1",
            "",
            "refresh=true",
            "wait_for_active_shards=1"
        ]
    );
}

/// A tracked item's outcome carries what the cluster said of it: `_shards`, `noop`, and a
/// refused item's whole error object (`caused_by` included).
#[tokio::test]
async fn a_tracked_outcome_carries_shards_noop_and_the_clusters_error() {
    let s = setup(1).await;
    s.bulk.mapping_error_marker("BAD");
    let ix = indexer(&s.client).build().unwrap();
    let w = ix
        .add_tracked(
            Action::index("n")
                .id("1")
                .json(&serde_json::json!({"doc": {"n": 1}})),
        )
        .await
        .unwrap()
        .await;
    let shards = written(&w).shards.unwrap();
    assert_eq!((shards.total, shards.successful, shards.failed), (2, 2, 0));
    // The fake stores an update's body: the same body again changes nothing.
    let up = || Action::update("n", "1").json(&serde_json::json!({"doc": {"n": 1}}));
    let w = ix.add_tracked(up()).await.unwrap().await;
    assert_eq!(written(&w).result, Written::Noop);
    assert_eq!(written(&w).shards.map(|s| s.total), Some(2));
    let bad = ix
        .add_tracked(
            Action::index("n")
                .id("2")
                .json(&serde_json::json!({"x": "BAD"})),
        )
        .await
        .unwrap()
        .await;
    match bad {
        ItemOutcome::Failed {
            error: Some(e),
            whole_request: false,
            ..
        } => {
            assert_eq!(e.kind, "mapper_parsing_exception");
            assert_eq!(e.details.len(), 1);
            assert_eq!(e.details[0].0, "caused_by");
            let cause: serde_json::Value = serde_json::from_str(&e.details[0].1).unwrap();
            assert_eq!(cause["type"], "illegal_argument_exception");
        }
        other => panic!("{other:?}"),
    }
    ix.close().await;
    assert!(s.bulk.filter_paths()[0]
        .as_deref()
        .unwrap()
        .contains("items.*._shards"));
}

#[tokio::test]
async fn a_create_409_is_already_present_only_for_a_unique_id_or_after_an_ambiguous_failure() {
    let s = setup(2).await;
    s.bulk.create_index("c");
    let ix = indexer(&s.client).build().unwrap();
    let lines = |id: &str| format!("{{\"create\":{{\"_index\":\"c\",\"_id\":\"{id}\"}}}}\n{{}}\n");
    let enc = |id: &str| EncodedAction::new(OpType::Create, "c", id, lines(id)).unwrap();
    written(&ix.add_tracked_encoded(enc("x")).await.unwrap().await);
    // The same caller-given id again: a real conflict, OpenSearch's 409 stands.
    match ix.add_tracked_encoded(enc("x")).await.unwrap().await {
        ItemOutcome::Failed { reason, .. } => assert_eq!(reason.status, Some(409)),
        other => panic!("{other:?}"),
    }
    // An id the caller declares unique (its own UUIDv7): the 409 is its own write.
    let w = ix
        .add_tracked_encoded(enc("x").unique_id(true))
        .await
        .unwrap()
        .await;
    assert_eq!(
        (written(&w).status, written(&w).result),
        (409, Written::AlreadyPresent)
    );
    // Applied, then the connection reset: the retry's 409 is our own write.
    s.bulk.reset_after_apply(1);
    let w = ix.add_tracked_encoded(enc("y")).await.unwrap().await;
    assert_eq!(written(&w).result, Written::AlreadyPresent);
    assert_eq!(written(&w).attempts, 2);
    assert_eq!(s.bulk.writes("c", "y"), 1);
    ix.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_refused_as_a_whole_fails_its_items_as_whole_request() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    s.bulk.answer_next(Behavior::status(400));
    let t = ix
        .add_tracked(Action::index("w").id("1").json(&doc(1)))
        .await
        .unwrap();
    match t.await {
        ItemOutcome::Failed {
            reason,
            whole_request,
            ..
        } => {
            assert!(whole_request);
            assert_eq!(reason.status, Some(400));
        }
        other => panic!("{other:?}"),
    }
    ix.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_item_deadline_bounds_a_stalled_request_and_an_open_breaker() {
    let s = setup(1).await;
    // Every answer takes 10 s; the item deadline is 1 s: the request is cut at 1 s.
    s.bulk.set_delay(Some(Duration::from_secs(10)));
    let ix = indexer(&s.client)
        .flush_interval(Duration::from_millis(1))
        .item_deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let start = Instant::now();
    let t = ix
        .add_tracked(Action::index("s").id("1").json(&doc(1)))
        .await
        .unwrap();
    match t.await {
        ItemOutcome::Undeliverable { class, reason } => {
            assert_eq!(class, RetryClass::Connection);
            assert_eq!(reason.error_type, "deadline_exceeded");
        }
        other => panic!("{other:?}"),
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1100),
        "{took:?}"
    );
    ix.close().await;

    // An open breaker: nothing is sent, the item waits until its deadline, no longer.
    let client = support::open_breaker(&s, Duration::from_secs(600)).await;
    let node = s.cluster.node(0);
    let ix = indexer(&client)
        .flush_interval(Duration::from_millis(1))
        .item_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let start = Instant::now();
    let t = ix
        .add_tracked(Action::index("s").id("2").json(&doc(2)))
        .await
        .unwrap();
    match t.await {
        ItemOutcome::Undeliverable { class, reason } => {
            assert_eq!(class, RetryClass::Connection);
            assert!(
                reason.reason.contains("circuit breaker is open"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took <= Duration::from_millis(2300),
        "{took:?}"
    );
    assert!(node.requests().is_empty(), "nothing sent while open");
    ix.close().await;
}

/// A tracked item throttled past its class's count: its caller gets it back at the count
/// by default, and only at its item deadline with `tracked_until_deadline` (the relay's
/// delivery, which would otherwise reschedule it behind later messages).
#[tokio::test(start_paused = true)]
async fn a_throttled_tracked_item_comes_back_at_the_count_or_at_its_deadline_when_asked() {
    let s = setup(1).await;
    s.bulk.fault_every(Some((1, BulkFault::Throttle)));
    let deadline = Duration::from_secs(60);
    for patient in [false, true] {
        let ix = indexer(&s.client)
            .flush_interval(Duration::from_millis(1))
            .item_deadline(deadline)
            .tracked_until_deadline(patient)
            .build()
            .unwrap();
        let start = Instant::now();
        let t = ix
            .add_tracked(Action::index("p").id("1").json(&doc(1)))
            .await
            .unwrap();
        match t.await {
            ItemOutcome::Undeliverable { class, .. } => assert_eq!(class, RetryClass::Throttled),
            other => panic!("{other:?}"),
        }
        let took = start.elapsed();
        if patient {
            assert!(took >= deadline - Duration::from_secs(31), "{took:?}");
            assert!(took <= deadline, "{took:?}");
        } else {
            // Five throttled retries at the reference rule: well under the deadline.
            assert!(took < Duration::from_secs(20), "{took:?}");
        }
        ix.close().await;
    }
}
