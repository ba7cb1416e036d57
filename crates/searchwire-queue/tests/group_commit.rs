//! Group commit in the embedded backend: concurrent callers share one transaction (one
//! sync), and `max_group` bounds how many. (Throughput is measured by
//! `benches/throughput.rs`, not asserted here.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use searchwire_queue::{EmbeddedConfig, EmbeddedQueue, NewMessage};

const CALLERS: usize = 64;

/// Starts `CALLERS` appends of one message each, all sent before any is awaited.
async fn concurrent_appends(q: &EmbeddedQueue) -> u64 {
    let before = q.commits();
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move { q.append(vec![NewMessage::new(format!("m{i}"))]).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().len(), 1);
    }
    q.commits() - before
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_appends_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let q = EmbeddedQueue::open(EmbeddedConfig::new(dir.path())).unwrap();
    let commits = concurrent_appends(&q).await;
    // On a current-thread runtime every task sends its job before any answer is read, so
    // the writer finds them waiting: a handful of groups, not one commit per caller.
    assert!(
        commits < CALLERS as u64 / 4,
        "{commits} commits for {CALLERS} callers"
    );
    assert_eq!(q.stats().await.unwrap().backlog, CALLERS as u64);
}

#[tokio::test(flavor = "current_thread")]
async fn max_group_one_commits_every_call_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = EmbeddedConfig::new(dir.path());
    c.max_group = 1;
    let q = EmbeddedQueue::open(c).unwrap();
    assert_eq!(concurrent_appends(&q).await, CALLERS as u64);
}

#[tokio::test]
async fn a_zero_max_group_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = EmbeddedConfig::new(dir.path());
    c.max_group = 0;
    let e = EmbeddedQueue::open(c).unwrap_err();
    assert!(e.to_string().contains("max_group"), "{e}");
}
