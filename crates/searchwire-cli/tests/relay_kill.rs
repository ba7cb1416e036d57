//! `searchwire relay` SIGKILLed at random moments under a load of bulk requests (against the
//! in-process fake cluster, which throttles every 7th item in even rounds — the relay's first
//! try retries those within its budget — and every item in odd rounds, so part of the load is
//! queued):
//! after a restart drains the queue, every item the relay acknowledged is in the store, and
//! written exactly once. Also the signals: SIGTERM waits for the request in flight, a second
//! signal exits at once, and during `--drain-grace` health and new writes answer 503.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_support::{
    free_port, health, load, signal, spawn_relay, terminate, wait_drained, Load, Tally,
};
use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_item_lands_exactly_once_across_kill_9() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    bulk.fault_every(Some((7, BulkFault::Throttle)));
    let urls = cluster.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let tally = Arc::new(Tally::default());
    // A seeded sequence of kill moments (no randomness to reproduce).
    let mut seed: u64 = 0x5eed_2026;
    for round in 0..6 {
        let every = if round % 2 == 1 { 1 } else { 7 };
        bulk.fault_every(Some((every, BulkFault::Throttle)));
        let relay = spawn_relay(&urls, dir.path(), port, &["--live-budget", "1s"]).await;
        let stop = Arc::new(AtomicBool::new(false));
        let spec = Load {
            addr: relay.addr,
            index: "logs".into(),
            prefix: format!("r{round}"),
            tasks: 3,
            batch: 40,
            limit: u64::MAX,
        };
        let gen = tokio::spawn(load(spec, stop.clone(), tally.clone()));
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Odd rounds: past the 1 s live budget, so answers with queued items arrive.
        let base = if round % 2 == 1 { 1100 } else { 150 };
        let after = Duration::from_millis(base + (seed >> 33) % 600);
        tokio::time::sleep(after).await;
        let mut child = relay.child;
        child.start_kill().unwrap(); // SIGKILL
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), None, "killed by a signal");
        stop.store(true, Ordering::Relaxed);
        gen.await.unwrap();
        eprintln!(
            "round {round}: killed after {after:?}; {} acknowledged so far ({} queued)",
            tally.acked.lock().unwrap().len(),
            tally.queued.load(Ordering::Relaxed)
        );
    }
    // A clean cluster and a last relay that drains the queue, then stops gracefully.
    bulk.fault_every(None);
    let relay = spawn_relay(&urls, dir.path(), port, &[]).await;
    wait_drained(relay.addr, Duration::from_secs(60)).await;
    assert_eq!(terminate(relay).await, Some(0));
    let acked = tally.acked.lock().unwrap().clone();
    assert!(
        acked.len() > 500,
        "the load was too small to mean anything: {}",
        acked.len()
    );
    assert!(
        tally.queued.load(Ordering::Relaxed) > 0,
        "some acknowledged items went through the queue"
    );
    let missing: Vec<&String> = acked
        .iter()
        .filter(|id| bulk.get("logs", id).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged items are missing, e.g. {:?}",
        missing.len(),
        missing.first()
    );
    assert_eq!(bulk.max_writes(), 1, "a document was written twice");
    eprintln!(
        "{} acknowledged items, all present exactly once ({} in the store)",
        acked.len(),
        bulk.count("logs")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_requests_in_flight_and_a_second_signal_exits_at_once() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    bulk.set_delay(Some(Duration::from_secs(20)));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let urls = cluster.urls().join(",");
    // No drain grace: the wait below is the in-flight request's, not the grace's.
    let mut relay = spawn_relay(
        &urls,
        dir.path(),
        port,
        &["--live-budget", "30s", "--drain-grace", "0s"],
    )
    .await;
    let addr = relay.addr;
    let req = tokio::spawn(async move {
        relay_support::http(addr, "POST", "/logs/_bulk", b"{\"index\":{}}\n{\"n\":1}\n").await
    });
    while bulk.items_seen() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    signal(&relay, "-TERM");
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), relay.child.wait())
            .await
            .is_err(),
        "the relay waits for the request in flight"
    );
    signal(&relay, "-INT");
    let status = tokio::time::timeout(Duration::from_secs(5), relay.child.wait())
        .await
        .expect("a second signal exits at once")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        req.await.unwrap().is_none(),
        "the request in flight was never acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_health_and_new_writes_answer_503_for_the_drain_grace() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let urls = cluster.urls().join(",");
    let mut relay = spawn_relay(&urls, dir.path(), free_port(), &["--drain-grace", "60s"]).await;
    let addr = relay.addr;
    assert_eq!(health(addr).await.unwrap().0, 200);
    signal(&relay, "-TERM");
    // Wait on observable state: readiness turns 503 `draining` and the port still answers.
    let mut seen = None;
    for _ in 0..500 {
        seen = health(addr).await;
        if seen.as_ref().is_some_and(|(code, _)| *code == 503) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (code, h) = seen.expect("the relay answers during the drain grace");
    assert_eq!(code, 503, "{h}");
    assert_eq!(h["draining"], true, "{h}");
    let (code, body) =
        relay_support::http(addr, "POST", "/logs/_bulk", b"{\"index\":{}}\n{\"n\":1}\n")
            .await
            .expect("a write during the grace is answered");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("node_closed_exception"), "{body}");
    assert_eq!(bulk.items_seen(), 0);
    // A second signal ends the grace at once.
    signal(&relay, "-INT");
    let status = tokio::time::timeout(Duration::from_secs(10), relay.child.wait())
        .await
        .expect("a second signal exits at once")
        .unwrap();
    assert_eq!(status.code(), Some(130));
}

/// The signal handlers exist before the port is bound: a SIGTERM sent the moment the relay
/// says it listens starts the graceful shutdown (exit 0) instead of killing the process (a
/// handler installed only when the shutdown future is first polled left a window in which
/// SIGTERM's default action ended the relay without draining).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_the_listening_line_is_a_graceful_shutdown() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let urls = cluster.urls().join(",");
    let mut relay = spawn_relay(&urls, dir.path(), free_port(), &["--drain-grace", "0s"]).await;
    signal(&relay, "-TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), relay.child.wait())
        .await
        .expect("the relay stops")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}
