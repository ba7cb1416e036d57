//! Group commit in the embedded backend: concurrent callers share one transaction (one
//! sync), and `max_group` bounds how many. (Throughput is measured by
//! `benches/throughput.rs`, not asserted here.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use searchwire_queue::{EmbeddedConfig, EmbeddedQueue, NewMessage, Rescheduled, Timestamp};

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

/// Reschedules and dead-letters of leases from more segments than a transaction keeps body
/// copies of, sent round-robin across the segments so the copies are evicted and read
/// again: all in a few groups, and every message keeps its own record.
#[tokio::test(flavor = "current_thread")]
async fn a_group_of_reschedules_over_many_segments_keeps_each_record() {
    const SEGS: usize = 7;
    const PER: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let q = EmbeddedQueue::open(EmbeddedConfig::new(dir.path())).unwrap();
    for s in 0..SEGS {
        // One append call, one commit: a segment each.
        let msgs = (0..PER)
            .map(|i| NewMessage::new(format!("seg{s}-msg{i}")).max_retries(5))
            .collect();
        q.append(msgs).await.unwrap();
    }
    let leases = q.lease(SEGS * PER).await.unwrap();
    assert_eq!(leases.len(), SEGS * PER);
    let later = Timestamp::from_millis(u64::MAX / 2);
    let before = q.commits();
    let mut tasks = Vec::new();
    for i in 0..PER {
        for s in 0..SEGS {
            let l = leases[s * PER + i].clone();
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                if (s + i) % 2 == 0 {
                    let r = q.reschedule(&l, later, "try later").await.unwrap();
                    assert!(
                        matches!(r, Rescheduled::Scheduled { attempts: 1, .. }),
                        "{r:?}"
                    );
                } else {
                    assert!(q.dead_letter(&l, "bad document").await.unwrap());
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let commits = q.commits() - before;
    assert!(commits < 10, "{commits} commits for {} calls", SEGS * PER);
    let queued = q.list(None, 1000).await.unwrap();
    let dead = q.dead_letters(None, 1000).await.unwrap();
    assert_eq!(queued.len() + dead.len(), SEGS * PER);
    for m in &queued {
        let l = leases.iter().find(|l| l.id() == m.id).unwrap();
        assert_eq!(m.payload, l.message.payload);
        assert_eq!((m.attempts, m.retry_at), (1, later));
        assert_eq!(m.last_error.as_deref(), Some("try later"));
    }
    for d in &dead {
        let l = leases.iter().find(|l| l.id() == d.message.id).unwrap();
        assert_eq!(d.message.payload, l.message.payload);
        assert_eq!(d.reason, "bad document");
    }
    let rescheduled = (0..SEGS)
        .flat_map(|s| (0..PER).map(move |i| s + i))
        .filter(|k| k % 2 == 0)
        .count();
    assert_eq!(queued.len(), rescheduled);
}
