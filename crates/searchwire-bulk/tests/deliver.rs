//! `deliver` follows the indexer's rule: a queued message that keeps failing retryably is
//! never a dead letter before its item deadline, however many times it failed; past it,
//! it is.
//!
//! Real time with millisecond rules, not paused time: the embedded queue commits on a
//! writer thread of its own, and a paused tokio clock jumps to the next timer while the
//! loop waits for it. The assertions are counts that do not depend on the timing (more
//! failed deliveries than `max_retries` and no dead letter; a dead letter past the
//! deadline that says so).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire_bulk::{deliver, BulkIndexer, ClassRule, DeliveryConfig, RetryPolicy};
use searchwire_fake::BulkFault;
use searchwire_queue::{EmbeddedConfig, NewMessage, Queue};
use support::{indexer, setup};

fn queue(dir: &std::path::Path) -> Queue {
    Queue::open_embedded(EmbeddedConfig::new(dir)).unwrap()
}

/// The reference's counts with 1 ms delays.
fn fast() -> RetryPolicy {
    let ms = Duration::from_millis(1);
    RetryPolicy {
        throttled: ClassRule::new(ms, 1.0, 5),
        unavailable: ClassRule::new(ms, 1.0, 3),
        connection: ClassRule::new(ms, 1.0, 4),
        jitter: None,
        cap: ms,
    }
}

fn delivery_indexer(client: &searchwire::Client) -> BulkIndexer {
    indexer(client)
        .conflict_is_present(true)
        .retry_policy(fast())
        .flush_interval(Duration::from_millis(2))
        .build()
        .unwrap()
}

fn message(id: &str) -> NewMessage {
    NewMessage::new(format!(
        "{{\"create\":{{\"_index\":\"q\",\"_id\":\"{id}\"}}}}\n{{\"n\":1}}\n"
    ))
    .max_retries(2)
    .index("q")
}

fn config(item_deadline: Duration) -> DeliveryConfig {
    DeliveryConfig {
        policy: fast(),
        idle_poll: Duration::from_millis(2),
        item_deadline: Some(item_deadline),
        ..DeliveryConfig::default()
    }
}

#[tokio::test]
async fn a_throttled_queued_message_is_retried_past_max_retries_until_its_deadline() {
    let s = setup(1).await;
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    q.append(vec![message("busy")]).await.unwrap();
    s.bulk.fault_every(Some((1, BulkFault::Throttle)));
    let ix = delivery_indexer(&s.client);

    // Throttled for 1.5 s: many more failed deliveries than max_retries (2), and no dead
    // letter — the message is not older than its 10-minute deadline.
    let cfg = config(Duration::from_secs(600));
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    let r = deliver(&q, &ix, &s.client, &cfg, Some(until))
        .await
        .unwrap();
    assert_eq!((r.delivered, r.dead_lettered), (0, 0), "{r:?}");
    assert!(r.rescheduled > 5, "{r:?}");
    let st = q.stats().await.unwrap();
    assert_eq!((st.backlog, st.dead_letters), (1, 0));
    q.release().await.unwrap();

    // The cluster takes writes again: delivered.
    s.bulk.fault_every(None);
    let r = deliver(&q, &ix, &s.client, &cfg, None).await.unwrap();
    assert_eq!((r.delivered, r.dead_lettered, r.left), (1, 0, 0), "{r:?}");
    assert_eq!(s.bulk.count("q"), 1);
    ix.close().await;
}

#[tokio::test]
async fn a_queued_message_throttled_past_its_deadline_is_a_dead_letter_saying_so() {
    let s = setup(1).await;
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    q.append(vec![message("late")]).await.unwrap();
    s.bulk.fault_every(Some((1, BulkFault::Throttle)));
    let ix = delivery_indexer(&s.client);
    let cfg = config(Duration::from_millis(500));
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let r = deliver(&q, &ix, &s.client, &cfg, Some(until))
        .await
        .unwrap();
    assert_eq!((r.delivered, r.dead_lettered, r.left), (0, 1, 0), "{r:?}");
    let dead = q.dead_letters(None, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].reason.contains("deadline_exceeded"),
        "{}",
        dead[0].reason
    );
    assert!(dead[0].reason.contains("throttled"), "{}", dead[0].reason);
    // Given up on at the deadline, not at max_retries (2 failures).
    let age = dead[0]
        .dead_at
        .saturating_duration_since(dead[0].message.enqueued_at);
    assert!(age >= Duration::from_millis(500), "{age:?}");
    assert!(s.bulk.items_seen() > 2 * 6, "more rounds than max_retries");
    ix.close().await;
}
