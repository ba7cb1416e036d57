//! An append sent again with its receipt (what a Sentinel link does after a first try that
//! failed as the primary moved) stores nothing a second time, even when the first try's
//! messages were delivered and acknowledged meanwhile, so `S:hashes` no longer knows them.
//! That was how the forced-failover soak stored appends twice. Needs `SEARCHWIRE_TEST_REDIS`
//! like the conformance suite (skips without it, fails when `SEARCHWIRE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{RedisConfig, RedisQueue, RECEIPT_TTL};
use crate::message::{Appended, NewMessage};

fn url() -> Option<String> {
    match std::env::var("SEARCHWIRE_TEST_REDIS") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert_ne!(
                std::env::var("SEARCHWIRE_REQUIRE_REDIS").as_deref(),
                Ok("1"),
                "SEARCHWIRE_REQUIRE_REDIS=1 but SEARCHWIRE_TEST_REDIS is not set"
            );
            None
        }
    }
}

async fn open(url: &str, what: &str) -> RedisQueue {
    let mut c = RedisConfig::new(url);
    c.stream = format!(
        "receipt-{what}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    );
    // Three transactions for a batch of five.
    c.chunk = 2;
    RedisQueue::connect(c).await.unwrap()
}

fn batch(names: &[&str]) -> Vec<NewMessage> {
    names
        .iter()
        .map(|n| NewMessage::new(n.as_bytes().to_vec()))
        .collect()
}

/// Leases and acknowledges everything queued: the payloads leave `S:hashes`.
async fn deliver_all(q: &RedisQueue) {
    loop {
        let leases = q.lease(100).await.unwrap();
        if leases.is_empty() {
            break;
        }
        let ids: Vec<_> = leases.iter().map(|l| l.message.id).collect();
        q.ack(&ids).await.unwrap();
    }
    assert_eq!(q.stats().await.unwrap().backlog, 0);
}

#[tokio::test]
async fn an_append_sent_again_after_its_delivery_answers_the_same_and_stores_nothing() {
    let Some(url) = url() else { return };
    for (what, names) in [
        // One message: the one-call script.
        ("small", vec!["s1"]),
        // Five (one a duplicate of a queued payload, one repeated in the batch): the
        // reservation and three transactions.
        ("chunked", vec!["c1", "queued", "c2", "c1", "c3"]),
    ] {
        let q = open(&url, what).await;
        let before = q.append(batch(&["queued"])).await.unwrap();
        let first = q.append_once(&batch(&names), Some("t1")).await.unwrap();
        if what == "chunked" {
            assert_eq!(first[1], Appended::Duplicate(before[0].id()));
            assert_eq!(first[3], Appended::Duplicate(first[0].id()));
        }
        deliver_all(&q).await;
        // The same append again, as after a failover: the first answer, nothing stored.
        let again = q.append_once(&batch(&names), Some("t1")).await.unwrap();
        assert_eq!(again, first, "{what}");
        assert_eq!(q.stats().await.unwrap().backlog, 0, "{what}");
        // Without the receipt, the payloads are stored anew: the resend the soak doubled.
        let fresh = q.append_once(&batch(&names), Some("t2")).await.unwrap();
        assert!(fresh.iter().all(|a| !first.contains(a)), "{what}");
        assert_eq!(q.stats().await.unwrap().backlog, 4.min(names.len()) as u64);
        // The receipt expires on its own.
        let mut c = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(q.keys.receipt("t1", 0))
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= RECEIPT_TTL.as_millis() as i64, "{ttl}");
    }
}

#[tokio::test]
async fn only_the_transactions_that_did_not_land_are_stored_by_the_resend() {
    let Some(url) = url() else { return };
    let q = open(&url, "partial").await;
    let names = ["p1", "p2", "p3", "p4", "p5"];
    let first = q.append_once(&batch(&names), Some("t")).await.unwrap();
    // The second transaction (p3, p4) as if it had not reached the server that takes the
    // resend: its messages and its receipt gone.
    q.ack(&[first[2].id(), first[3].id()]).await.unwrap();
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(q.keys.receipt("t", 1))
        .query_async(&mut c)
        .await
        .unwrap();
    let again = q.append_once(&batch(&names), Some("t")).await.unwrap();
    assert_eq!(again[..2], first[..2]);
    assert_eq!(again[4], first[4]);
    for i in [2, 3] {
        assert!(matches!(again[i], Appended::New(_)));
        assert_ne!(again[i], first[i]);
    }
    let mut queued: Vec<String> = q
        .list(None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|m| String::from_utf8(m.payload).unwrap())
        .collect();
    queued.sort();
    assert_eq!(queued, names);
}
