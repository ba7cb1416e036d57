//! Two `searchwire relay` processes on one real Redis queue (`scripts/redis`, as
//! `scripts/test` starts it), one SIGKILLed under load: the other delivers its leased
//! messages after the lease timeout, and every item either relay acknowledged is in the
//! store exactly once.
//!
//! The same on the Redis Cluster backend (`--redis-cluster`, `SEARCHWIRE_TEST_REDIS_CLUSTER`).
//!
//! Skipped without `SEARCHWIRE_TEST_REDIS` (`SEARCHWIRE_TEST_REDIS_CLUSTER`) unless
//! `SEARCHWIRE_REQUIRE_REDIS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_support::{free_port, spawn_loads, spawn_relay_with, terminate, wait_drained, Tally};
use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};

fn redis_env(var: &str) -> Option<String> {
    let required = std::env::var("SEARCHWIRE_REQUIRE_REDIS").is_ok_and(|v| v.trim() == "1");
    match std::env::var(var) {
        Ok(u) if !u.trim().is_empty() => Some(u.trim().to_owned()),
        _ => {
            assert!(!required, "SEARCHWIRE_REQUIRE_REDIS=1 but {var} is not set");
            eprintln!("relay_redis: skipped ({var} is not set)");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_share_a_redis_queue_and_cover_for_a_killed_one() {
    let Some(redis) = redis_env("SEARCHWIRE_TEST_REDIS") else {
        return;
    };
    two_relays_cover_for_a_killed_one("--redis", &redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_share_a_redis_cluster_queue_and_cover_for_a_killed_one() {
    let Some(nodes) = redis_env("SEARCHWIRE_TEST_REDIS_CLUSTER") else {
        return;
    };
    two_relays_cover_for_a_killed_one("--redis-cluster", &nodes).await;
}

/// Two relays on the queue `flag value` names, one SIGKILLed under load.
async fn two_relays_cover_for_a_killed_one(flag: &str, value: &str) {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    // Every item throttled until the end of the load: everything goes through the shared
    // queue (the first try would retry a rarer 429 within its budget and index it).
    bulk.fault_every(Some((1, BulkFault::Throttle)));
    let urls = cluster.urls().join(",");
    let stream = format!("sw-relay-test-{}-{}", std::process::id(), &flag[2..]);
    let args = [
        flag,
        value,
        "--redis-stream",
        stream.as_str(),
        "--lease-timeout",
        "2s",
        "--live-budget",
        "1s",
    ];
    let a = spawn_relay_with(&urls, free_port(), &args).await;
    let b = spawn_relay_with(&urls, free_port(), &args).await;
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let gens = spawn_loads(&[("a", a.addr), ("b", b.addr)], 2, 40, &stop, &tally);
    // Wait for the event, not a time: both relays have acknowledged items, some of them
    // queued (the kill below must hit a relay that holds leases and queued work).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let both = {
            let acked = tally.acked.lock().unwrap();
            acked.iter().any(|id| id.starts_with("a-"))
                && acked.iter().any(|id| id.starts_with("b-"))
        };
        if both && tally.queued.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "both relays acknowledged queued items within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut child = a.child;
    child.start_kill().unwrap();
    assert_eq!(child.wait().await.unwrap().code(), None);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for g in gens {
        g.await.unwrap();
    }
    bulk.fault_every(None);
    wait_drained(b.addr, Duration::from_secs(60)).await;
    assert_eq!(terminate(b).await, Some(0));
    let acked = tally.acked.lock().unwrap().clone();
    assert!(
        acked.iter().any(|id| id.starts_with("a-")) && acked.iter().any(|id| id.starts_with("b-"))
    );
    let missing: Vec<&String> = acked
        .iter()
        .filter(|id| bulk.get("logs", id).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged items missing, e.g. {:?}",
        missing.len(),
        missing.first()
    );
    assert_eq!(bulk.max_writes(), 1);
    eprintln!(
        "{} acknowledged by two relays ({} queued), all present once after one was SIGKILLed",
        acked.len(),
        tally.queued.load(Ordering::Relaxed)
    );
}
