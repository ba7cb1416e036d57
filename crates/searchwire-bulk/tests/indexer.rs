//! The bulk indexer against the fake cluster's `_bulk` store: every rule with exact counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire_bulk::{Action, AddError, IdScheme};
use searchwire_fake::{Behavior, BulkFault};
use support::{collecting, doc, indexer, setup, Collect};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn every_document_is_indexed_exactly_once_in_batches_by_count() {
    let s = setup(3).await;
    let dead = Collect::default();
    let ix = indexer(&s.client)
        .batch_actions(1000)
        .dead_letter_sink(dead.dead_letter_sink())
        .build()
        .unwrap();
    for i in 0..2500 {
        ix.add(Action::create("logs").id(format!("d{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(s.bulk.count("logs"), 2500);
    assert_eq!(s.bulk.max_writes(), 1);
    assert_eq!(stats.added, 2500);
    assert_eq!(stats.indexed, 2500);
    assert_eq!(stats.created, 2500);
    assert_eq!(stats.dead_lettered, 0);
    assert_eq!(stats.retried(), 0);
    assert_eq!(stats.pending, 0);
    let mut sizes = s.bulk.batch_sizes();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![500, 1000, 1000]);
    assert!(dead.items().is_empty());
    // Every request asked for the reduced response.
    assert!(s
        .bulk
        .filter_paths()
        .iter()
        .all(|f| f.as_deref().is_some_and(|f| f.contains("items.*.status"))));
}

#[tokio::test]
async fn batches_are_cut_by_bytes_and_sent_after_the_interval() {
    let s = setup(1).await;
    let ix = indexer(&s.client)
        .batch_bytes(1000)
        .flush_interval(ms(50))
        .max_concurrency(1)
        .build()
        .unwrap();
    // Each action is 89 bytes: at most 11 fit in 1000.
    for i in 0..30 {
        ix.add(
            Action::index("b")
                .id(format!("{i:04}"))
                .source(format!("{{\"pad\":\"{}\"}}", "x".repeat(40))),
        )
        .await
        .unwrap();
    }
    // No flush: the interval sends the rest.
    tokio::time::timeout(Duration::from_secs(5), async {
        while s.bulk.count("b") < 30 {
            tokio::time::sleep(ms(10)).await;
        }
    })
    .await
    .expect("the interval flushed the partial batch");
    let sizes = s.bulk.batch_sizes();
    assert!(sizes.iter().all(|&n| n <= 11), "{sizes:?}");
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 30);
    ix.close().await;
}

#[tokio::test]
async fn ids_are_assigned_before_the_first_send() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    for i in 0..10 {
        ix.add(Action::index("u").json(&doc(i))).await.unwrap();
    }
    ix.close().await;
    let ids = s.bulk.ids("u");
    assert_eq!(ids.len(), 10);
    for id in ids {
        assert_eq!(uuid_version(&id), Some(7), "{id}");
    }

    // Content hashes: the same content twice is one document, the second counted present.
    let ix = indexer(&s.client)
        .id_scheme(IdScheme::ContentHash)
        .build()
        .unwrap();
    for _ in 0..2 {
        ix.add(Action::create("h").source("{\"same\":true}"))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(
        s.bulk.ids("h"),
        vec![searchwire_bulk::content_hash(b"{\"same\":true}")]
    );
    assert_eq!(
        (stats.created, stats.already_present, stats.dead_lettered),
        (1, 1, 0)
    );
}

fn uuid_version(id: &str) -> Option<usize> {
    // xxxxxxxx-xxxx-Vxxx-...
    let c = id.as_bytes().get(14)?;
    (*c as char).to_digit(16).map(|d| d as usize)
}

#[tokio::test(start_paused = true)]
async fn item_429s_are_retried_with_the_reference_delays_then_exhausted() {
    let s = setup(1).await;
    let retry = Collect::default();
    let dead = Collect::default();
    let ix = indexer(&s.client)
        .retry_sink(retry.clone())
        .dead_letter_sink(dead.dead_letter_sink())
        .build()
        .unwrap();
    // Doc "a": throttled 5 times, then accepted. Doc "b" (sent alone later): throttled 6
    // times — one more than the 5 retries allowed.
    s.bulk.item_faults([BulkFault::Throttle; 5]);
    ix.add(Action::create("t").id("a").json(&doc(1)))
        .await
        .unwrap();
    ix.flush().await;
    let times = arrival_offsets(&s);
    assert_eq!(
        times,
        vec![0, 100, 250, 475, 813, 1319],
        "§3.3: 100, ×1.5, 5 retries"
    );
    assert_eq!(s.bulk.count("t"), 1);

    s.cluster.node(0).clear_requests();
    s.bulk.item_faults([BulkFault::Throttle; 6]);
    ix.add(Action::create("t").id("b").json(&doc(2)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!(s.cluster.node(0).request_count(), 6);
    assert_eq!(s.bulk.count("t"), 1);
    assert_eq!(stats.retried_throttled, 10);
    assert_eq!(stats.handed_to_retry_sink, 1);
    assert_eq!(stats.dead_lettered, 0);
    let r = retry.items();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].action.doc_id(), Some("b"));
    assert!(r[0].retryable);
    assert_eq!(r[0].attempts, 6);
    assert_eq!(r[0].reason.error_type, "retries_exhausted");
    assert_eq!(r[0].reason.retry_class, Some("throttled"));
    assert!(
        r[0].reason
            .reason
            .contains("es_rejected_execution_exception"),
        "{}",
        r[0].reason
    );
    assert_eq!(
        r[0].source().unwrap().as_ref(),
        doc(2).to_string().as_bytes()
    );
    assert!(dead.items().is_empty());
}

/// A source cut out of a larger buffer (as `searchwire ingest` cuts documents out of its
/// read buffer) is sent without a copy, but an item that waits for a retry gets a copy of
/// its own: it must not keep the whole buffer alive while it waits.
#[tokio::test(start_paused = true)]
async fn a_waiting_item_does_not_keep_a_large_source_buffer_alive() {
    let s = setup(1).await;
    let retry = Collect::default();
    let ix = indexer(&s.client)
        .retry_sink(retry.clone())
        .build()
        .unwrap();
    let mut buffer = Vec::new();
    for i in 0..2 {
        buffer.extend_from_slice(format!("{{\"n\":{i}}}\n").as_bytes());
    }
    buffer.resize(1 << 20, b' ');
    let buffer = bytes::Bytes::from(buffer);
    let inside = |src: &bytes::Bytes| {
        let range = buffer.as_ptr() as usize..buffer.as_ptr() as usize + buffer.len();
        range.contains(&(src.as_ptr() as usize))
    };
    // "a" is accepted at once; "b" is throttled on every attempt until its retries run out.
    s.bulk.item_faults([BulkFault::Ok, BulkFault::Throttle]);
    s.bulk.item_faults([BulkFault::Throttle; 5]);
    for (i, id) in ["a", "b"].into_iter().enumerate() {
        let at = i * 8;
        ix.add(Action::create("t").id(id).source(buffer.slice(at..at + 7)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(s.bulk.count("t"), 1);
    assert_eq!(stats.retried_throttled, 5);
    let r = retry.items();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].source().unwrap().as_ref(), br#"{"n":1}"#);
    assert!(
        !inside(r[0].source().unwrap()),
        "the waiting item's source is a copy, not a slice of the 1 MiB buffer"
    );
}

/// Arrival times of the requests to node 0, in ms after the first.
fn arrival_offsets(s: &support::Setup) -> Vec<u64> {
    support::arrival_offsets_of(&s.cluster)
}

#[tokio::test(start_paused = true)]
async fn item_503s_use_their_own_delays_and_go_on_past_the_count_without_a_retry_sink() {
    let s = setup(1).await;
    let (builder, dead) = collecting(&s.client);
    let ix = builder.build().unwrap();
    // Five 503s: one more than the class's 3 retries, and the item is still not dead.
    s.bulk.item_faults([BulkFault::Unavailable; 5]);
    ix.add(Action::create("u").id("x").json(&doc(1)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!(
        arrival_offsets(&s),
        vec![0, 500, 1500, 3500, 7500, 15500],
        "§3.3: 500 ms, ×2 — and past the 3 retries the same rule goes on"
    );
    assert_eq!(stats.retried_unavailable, 5);
    assert_eq!((stats.created, stats.dead_lettered), (1, 0));
    assert!(dead.items().is_empty());
    assert_eq!(s.bulk.count("u"), 1);
}

/// Without a retry sink, a retryable item ends only at its deadline: a document the
/// cluster keeps throttling is retried at the capped delay until then, and its dead letter
/// says the deadline (not the count) ended it.
#[tokio::test(start_paused = true)]
async fn a_throttled_item_is_a_dead_letter_only_when_its_deadline_passes() {
    let s = setup(1).await;
    let (builder, dead) = collecting(&s.client);
    let ix = builder
        .item_deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    s.bulk.fault_every(Some((1, BulkFault::Throttle)));
    ix.add(Action::create("t").id("busy").json(&doc(1)))
        .await
        .unwrap();
    let stats = ix.close().await;
    // 100 ms × 1.5^(n-1): the 14th retry leaves at 58.2 s; the 15th would wait 29.2 s
    // and start after the 60 s deadline.
    let times = arrival_offsets(&s);
    assert_eq!(times.len(), 15, "{times:?}");
    assert_eq!(
        &times[..7],
        &[0, 100, 250, 475, 813, 1319, 2078],
        "the count passes at 1,319 ms; the retries go on"
    );
    assert_eq!(*times.last().unwrap(), 58_187);
    assert_eq!((stats.retried_throttled, stats.dead_lettered), (14, 1));
    let d = dead.items();
    assert_eq!(d[0].reason.error_type, "deadline_exceeded");
    assert_eq!(d[0].reason.retry_class, Some("throttled"));
    assert!(d[0].retryable);
    assert_eq!(d[0].attempts, 15);
    assert_eq!(s.bulk.count("t"), 0);
}

/// Without a deadline the class's count ends a retryable item, as before the deadline
/// existed.
#[tokio::test(start_paused = true)]
async fn with_no_item_deadline_the_count_ends_a_retryable_item() {
    let s = setup(1).await;
    let (builder, dead) = collecting(&s.client);
    let ix = builder.no_item_deadline().build().unwrap();
    s.bulk.item_faults([BulkFault::Unavailable; 4]);
    ix.add(Action::create("u").id("x").json(&doc(1)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!(arrival_offsets(&s), vec![0, 500, 1500, 3500]);
    assert_eq!(stats.dead_lettered, 1);
    let d = dead.items();
    assert!(d[0].retryable);
    assert_eq!(d[0].reason.error_type, "retries_exhausted");
}

#[tokio::test(start_paused = true)]
async fn only_the_failed_items_are_sent_again() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    use BulkFault::*;
    s.bulk
        .item_faults([Ok, Throttle, Ok, Unavailable, Ok, Throttle, Ok, Ok, Ok, Ok]);
    for i in 0..10 {
        ix.add(Action::create("o").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    // First request: 10 items. After 100 ms the two throttled ones, after 500 ms the
    // unavailable one.
    assert_eq!(s.bulk.batch_sizes(), vec![10, 2, 1]);
    assert_eq!(arrival_offsets(&s), vec![0, 100, 500]);
    assert_eq!(s.bulk.count("o"), 10);
    assert_eq!(s.bulk.max_writes(), 1);
    assert_eq!((stats.retried_throttled, stats.retried_unavailable), (2, 1));
    assert_eq!(stats.created, 10);
}

#[tokio::test]
async fn a_create_answered_409_after_a_reset_counts_as_already_present() {
    let s = setup(2).await;
    let (builder, dead) = collecting(&s.client);
    let ix = builder.build().unwrap();
    // The first request is applied, then its connection is reset: the client cannot know.
    s.bulk.reset_after_apply(1);
    for i in 0..100 {
        ix.add(Action::create("r").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(s.bulk.count("r"), 100);
    assert_eq!(s.bulk.max_writes(), 1, "nothing written twice");
    assert_eq!(stats.retried_connection, 100);
    assert_eq!(stats.already_present, 100);
    assert_eq!(stats.created, 0);
    assert_eq!(stats.indexed, 100);
    assert_eq!(
        stats.dead_lettered,
        0,
        "{:?}",
        dead.items().first().map(|d| d.reason.clone())
    );
}

#[tokio::test]
async fn a_first_attempt_409_on_a_caller_id_is_a_dead_letter_unless_declared_present() {
    let s = setup(1).await;
    s.bulk.create_index("c");
    let (builder, dead) = collecting(&s.client);
    let ix = builder.build().unwrap();
    ix.add(Action::create("c").id("1").json(&doc(1)))
        .await
        .unwrap();
    ix.flush().await;
    ix.add(Action::create("c").id("1").json(&doc(2)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!((stats.created, stats.dead_lettered), (1, 1));
    assert_eq!(dead.items()[0].reason.status, Some(409));
    assert!(!dead.items()[0].retryable);

    let ix = indexer(&s.client)
        .conflict_is_present(true)
        .build()
        .unwrap();
    ix.add(Action::create("c").id("1").json(&doc(3)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!((stats.already_present, stats.dead_lettered), (1, 0));
}

#[tokio::test]
async fn dead_letters_are_exactly_the_bad_documents_with_action_source_and_reason() {
    let s = setup(3).await;
    s.bulk.mapping_error_marker("\"bad\":true");
    let dead = Collect::default();
    let ix = indexer(&s.client)
        .batch_actions(100)
        .dead_letter_sink(dead.dead_letter_sink())
        .build()
        .unwrap();
    let mut expected = Vec::new();
    for i in 0..1000 {
        let bad = i % 37 == 0;
        if bad {
            expected.push(format!("{i:04}"));
        }
        ix.add(
            Action::create("m")
                .id(format!("{i:04}"))
                .routing("r1")
                .json(&serde_json::json!({"n": i, "bad": bad})),
        )
        .await
        .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(dead.ids(), expected);
    assert_eq!(stats.dead_lettered as usize, expected.len());
    assert_eq!(s.bulk.count("m"), 1000 - expected.len());
    assert_eq!(stats.retried(), 0, "mapping errors are not retried");
    let d = &dead.items()[0];
    assert_eq!(d.reason.status, Some(400));
    assert_eq!(d.reason.error_type, "mapper_parsing_exception");
    assert_eq!(d.action.routing_value(), Some("r1"));
    assert_eq!(d.source().unwrap().as_ref(), br#"{"bad":true,"n":0}"#);
    let line: serde_json::Value = serde_json::from_slice(&d.to_json_line()).unwrap();
    assert_eq!(line["source"]["n"], 0);
    assert_eq!(line["error_type"], "mapper_parsing_exception");
    assert_eq!(line["id"], "0000");
}

#[tokio::test]
async fn a_missing_index_is_a_dead_letter() {
    let s = setup(1).await;
    s.bulk.set_auto_create(false);
    s.bulk.create_index("exists");
    let (builder, dead) = collecting(&s.client);
    let ix = builder.build().unwrap();
    ix.add(Action::index("exists").id("1").json(&doc(1)))
        .await
        .unwrap();
    ix.add(Action::index("missing").id("2").json(&doc(2)))
        .await
        .unwrap();
    let stats = ix.close().await;
    assert_eq!((stats.indexed, stats.dead_lettered), (1, 1));
    assert_eq!(
        dead.items()[0].reason.error_type,
        "index_not_found_exception"
    );
    assert_eq!(dead.items()[0].reason.status, Some(404));
}

#[tokio::test]
async fn same_id_documents_are_delivered_in_the_order_added() {
    let s = setup(1).await;
    let ix = indexer(&s.client).max_concurrency(4).build().unwrap();
    // v0 is throttled; v1..v4 (same id) must not overtake it.
    s.bulk.item_faults([BulkFault::Throttle]);
    for v in 0..5 {
        ix.add(
            Action::index("s")
                .id("same")
                .json(&serde_json::json!({"v": v})),
        )
        .await
        .unwrap();
    }
    let stats = ix.close().await;
    let stored = s.bulk.get("s", "same").unwrap();
    assert_eq!(stored.source.as_ref(), br#"{"v":4}"#);
    assert_eq!(stored.version, 5);
    assert_eq!(s.bulk.writes("s", "same"), 5);
    assert_eq!(stats.indexed, 5);
    // One at a time: no request carried two versions of the document.
    assert!(
        s.bulk.batch_sizes().iter().all(|&n| n == 1),
        "{:?}",
        s.bulk.batch_sizes()
    );
}

#[tokio::test(start_paused = true)]
async fn add_waits_when_buffer_and_in_flight_are_full_and_try_add_does_not() {
    let s = setup(1).await;
    s.bulk.set_delay(Some(Duration::from_secs(1)));
    let ix = std::sync::Arc::new(
        indexer(&s.client)
            .batch_actions(10)
            .max_pending_actions(20)
            .max_concurrency(1)
            .flush_interval(Duration::from_secs(3600))
            .build()
            .unwrap(),
    );
    for i in 0..20 {
        ix.add(Action::index("p").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    // 10 in flight (answer after 1 s), 10 buffered: full.
    match ix.try_add(Action::index("p").id("x").json(&doc(99))) {
        Err(AddError::Full(a)) => assert_eq!(a.doc_id(), Some("x")),
        other => panic!("expected Full, got {other:?}"),
    }
    let t0 = Instant::now();
    ix.add(Action::index("p").id("20").json(&doc(20)))
        .await
        .unwrap();
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(1),
        "add waited for the first answer"
    );
    assert_eq!(ix.stats().pending, 11);
    let stats = ix.close().await;
    assert_eq!(stats.indexed, 21);
    assert_eq!(s.bulk.count("p"), 21);
}

#[tokio::test]
async fn finished_actions_give_their_room_back() {
    let s = setup(1).await;
    let ix = indexer(&s.client)
        .batch_actions(10)
        .max_pending_actions(20)
        .build()
        .unwrap();
    for round in 0..3 {
        for i in 0..20 {
            ix.try_add(Action::index("p").id(format!("{round}-{i}")).json(&doc(i)))
                .unwrap();
        }
        assert!(matches!(
            ix.try_add(Action::index("p").id("x").json(&doc(0))),
            Err(AddError::Full(_))
        ));
        // Once flushed, every finished action's room is free again.
        ix.flush().await;
    }
    let stats = ix.close().await;
    assert_eq!((stats.indexed, stats.pending), (60, 0));
}

#[tokio::test(start_paused = true)]
async fn throttling_halves_the_requests_in_flight_and_clean_rounds_add_one_back() {
    let s = setup(1).await;
    s.bulk.set_delay(Some(ms(100)));
    let ix = indexer(&s.client)
        .batch_actions(1)
        .max_concurrency(4)
        .build()
        .unwrap();
    assert_eq!(ix.stats().concurrency, 4);
    // Four requests in flight, all throttled: one cut (same round) → 2.
    s.bulk.item_faults([BulkFault::Throttle; 4]);
    for i in 0..4 {
        ix.add(Action::index("a").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    ix.flush().await;
    let arrivals = arrival_offsets(&s);
    assert_eq!(&arrivals[..4], &[0, 0, 0, 0], "4 in flight at first");
    // The 4 retries go out at most 2 at a time.
    assert_eq!(&arrivals[4..], &[200, 200, 300, 300], "{arrivals:?}");
    // After the throttled round: 2; each retry response was clean → 2+1 after 2, then 3
    // needs 3 more clean answers.
    assert_eq!(ix.stats().concurrency, 3);
    for i in 4..40 {
        ix.add(Action::index("a").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    ix.flush().await;
    assert_eq!(
        ix.stats().concurrency,
        4,
        "back to the maximum after clean rounds"
    );
    let stats = ix.close().await;
    assert_eq!(stats.indexed, 40);
    assert_eq!(stats.retried_throttled, 4);
}

#[tokio::test(start_paused = true)]
async fn whole_request_failures_retry_every_item_by_class() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    s.bulk.answer_next(Behavior::status(503));
    s.bulk.answer_next(Behavior::retry_after(429, "2"));
    for i in 0..5 {
        ix.add(Action::create("w").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    // 503 → 500 ms; then 429 with Retry-After: 2 → 2 s.
    assert_eq!(arrival_offsets(&s), vec![0, 500, 2500]);
    assert_eq!(s.bulk.count("w"), 5);
    assert_eq!((stats.retried_unavailable, stats.retried_throttled), (5, 5));
    assert_eq!(stats.failed_requests, 2);
    assert_eq!(stats.created, 5);
}

#[tokio::test]
async fn a_request_rejected_as_a_whole_dead_letters_its_items() {
    let s = setup(1).await;
    let (builder, dead) = collecting(&s.client);
    let ix = builder.build().unwrap();
    // (A 413 is not one: it splits the batch, see tests/retries.rs.)
    s.bulk.answer_next(Behavior::status(400));
    for i in 0..3 {
        ix.add(Action::create("x").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(stats.dead_lettered, 3);
    assert_eq!(dead.items()[0].reason.status, Some(400));
    assert!(!dead.items()[0].retryable);
}

#[tokio::test]
async fn acknowledged_below_covers_exactly_the_finished_prefix() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    assert_eq!(ix.acknowledged_below(), 0);
    for i in 0..50 {
        let seq = ix
            .add(Action::create("k").id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
        assert_eq!(seq, i as u64);
    }
    ix.flush().await;
    assert_eq!(ix.acknowledged_below(), 50);
    ix.close().await;
    assert!(matches!(
        ix.add(Action::create("k").id("late").json(&doc(0))).await,
        Err(AddError::Closed)
    ));
}

#[tokio::test]
async fn invalid_actions_are_refused_before_sending() {
    let s = setup(1).await;
    let ix = indexer(&s.client).build().unwrap();
    let e = ix
        .add(Action::with_op(searchwire_bulk::OpType::Update, "i").source("{}"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("needs an id"), "{e}");
    let e = ix
        .add(Action::index("i").source("not json\n"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
    let stats = ix.close().await;
    assert_eq!(stats.added, 0);
    assert_eq!(s.bulk.items_seen(), 0);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_sent_while_the_transport_breaker_is_open() {
    let s = setup(1).await;
    let client = support::open_breaker(&s, Duration::from_secs(2)).await;
    let node = s.cluster.node(0);
    let opened = Instant::now();
    let ix = indexer(&client).build().unwrap();
    ix.add(Action::create("b").id("1").json(&doc(1)))
        .await
        .unwrap();
    let stats = ix.close().await;
    let reqs = node.requests();
    assert_eq!(reqs.len(), 1, "one bulk request, after the cool-down");
    assert!(
        reqs[0].at - opened >= Duration::from_secs(2),
        "{:?}",
        reqs[0].at - opened
    );
    assert!(reqs[0].at - opened <= Duration::from_millis(2250));
    assert_eq!((stats.created, stats.retried()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn an_item_past_its_deadline_goes_to_the_retry_sink() {
    let s = setup(1).await;
    let retry = Collect::default();
    let ix = indexer(&s.client)
        .item_deadline(Duration::from_secs(1))
        .retry_sink(retry.clone())
        .build()
        .unwrap();
    s.bulk.item_faults([BulkFault::Throttle; 10]);
    ix.add(Action::create("d").id("late").json(&doc(1)))
        .await
        .unwrap();
    let stats = ix.close().await;
    // Retries at 100, 250, 475, 813 ms; the next (813 + 506) would end after 1 s.
    assert_eq!(arrival_offsets(&s), vec![0, 100, 250, 475, 813]);
    assert_eq!((stats.handed_to_retry_sink, stats.dead_lettered), (1, 0));
    let r = retry.items();
    assert_eq!(r[0].reason.error_type, "deadline_exceeded");
    assert!(r[0].retryable);
    assert_eq!(r[0].attempts, 5);
}

#[tokio::test]
async fn a_failing_dead_letter_sink_is_counted_not_silent() {
    let s = setup(1).await;
    s.bulk.mapping_error_marker("\"bad\":true");
    let ix = indexer(&s.client)
        .dead_letter_sink(|_: &searchwire_bulk::FailedItem| {
            Err(searchwire_bulk::SinkError("disk full".into()))
        })
        .build()
        .unwrap();
    ix.add(
        Action::create("f")
            .id("1")
            .json(&serde_json::json!({"bad": true})),
    )
    .await
    .unwrap();
    let stats = ix.close().await;
    assert_eq!((stats.dead_lettered, stats.sink_errors), (1, 1));
}
