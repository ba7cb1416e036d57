//! Straggler compaction in the embedded backend: a few messages left in many mostly-done
//! segments are rewritten into a new segment by the commit that makes them stragglers, so
//! the old segments (and their ≤ 1 MiB bodies) go; order, de-duplication, attempts and
//! leases survive, across a reopen too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use redb::{ReadableTableMetadata, TableDefinition};
use searchwire_queue::{
    Appended, EmbeddedConfig, EmbeddedQueue, MessageId, NewMessage, Rescheduled, Timestamp,
};

const SEGS: usize = 10;
const PER: usize = 100;

fn payload(i: usize) -> String {
    format!("{{\"doc\":{i},\"pad\":\"{}\"}}", "x".repeat(500))
}

/// Rows of the `segments` table (one per segment on disk), read with the queue closed.
fn segment_rows(dir: &std::path::Path) -> u64 {
    let db = redb::Database::create(dir.join(searchwire_queue::embedded::DB_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let t = txn
        .open_table(TableDefinition::<u64, &[u8]>::new("segments"))
        .unwrap();
    t.len().unwrap()
}

/// Ids (from 1, in append order) of the stragglers: two held leases and two messages never
/// leased (priority 0, so a lease of the rest leaves them) per segment.
fn held(id: u64) -> bool {
    id % 50 == 7
}
fn waiting(id: u64) -> bool {
    id % 50 == 21
}

#[tokio::test(flavor = "current_thread")]
async fn stragglers_move_out_of_mostly_done_segments_and_keep_order_dedup_and_leases() {
    let dir = tempfile::tempdir().unwrap();
    let open = || EmbeddedQueue::open(EmbeddedConfig::new(dir.path())).unwrap();
    let q = open();
    // SEGS segments of PER messages (one append call, one commit, one segment each).
    for s in 0..SEGS {
        let msgs = (0..PER)
            .map(|i| {
                let id = (s * PER + i + 1) as u64;
                NewMessage::new(payload(s * PER + i))
                    .max_retries(5)
                    .priority(if waiting(id) { 0 } else { 1 })
            })
            .collect();
        q.append(msgs).await.unwrap();
    }
    let n_waiting = (1..=(SEGS * PER) as u64).filter(|&id| waiting(id)).count();
    let leases = q.lease(SEGS * PER - n_waiting).await.unwrap();
    assert!(leases.iter().all(|l| !waiting(l.id().0)));
    let kept: Vec<_> = leases.iter().filter(|l| held(l.id().0)).cloned().collect();
    let acked: Vec<MessageId> = leases
        .iter()
        .map(|l| l.id())
        .filter(|id| !held(id.0))
        .collect();
    // This commit leaves 4 of 100 slots live in every segment: it compacts them.
    assert_eq!(q.ack(&acked).await.unwrap(), acked.len() as u64);
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.backlog, (kept.len() + n_waiting) as u64);
    assert_eq!(stats.leased, kept.len() as u64);
    q.close().await.unwrap();
    drop(q);

    // Without compaction the SEGS segments would all still be on disk.
    let rows = segment_rows(dir.path());
    assert!(rows <= 2, "{rows} segments on disk for the stragglers");

    // Reopen: the held leases are still held.
    let q = open();
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.backlog, (kept.len() + n_waiting) as u64);
    assert_eq!(stats.leased, kept.len() as u64);
    // The waiting ones come out in order (by id: same priority, retry_at in id order),
    // each with its own record.
    let again = q.lease(1000).await.unwrap();
    let ids: Vec<u64> = again.iter().map(|l| l.id().0).collect();
    let expected: Vec<u64> = (1..=(SEGS * PER) as u64)
        .filter(|&id| waiting(id))
        .collect();
    assert_eq!(ids, expected);
    for l in &again {
        assert_eq!(
            l.message.payload,
            payload((l.id().0 - 1) as usize).into_bytes()
        );
        assert_eq!((l.message.attempts, l.message.priority), (0, 0));
    }
    // De-duplication still knows every straggler's payload.
    for l in kept.iter().chain(&again) {
        let dup = q
            .append(vec![NewMessage::new(l.message.payload.clone())])
            .await
            .unwrap();
        assert_eq!(dup, vec![Appended::Duplicate(l.id())]);
    }
    // Down to two live slots of the compacted segment — the last held lease of the first
    // lease call (entry 19 of its row after the reopen) and one of the second call — it is
    // compacted again: both calls' rows are rewritten.
    let (kept_last, again_last) = (kept.last().unwrap(), again.last().unwrap());
    let done: Vec<MessageId> = again
        .iter()
        .map(|l| l.id())
        .filter(|&id| id != again_last.id())
        .collect();
    q.ack(&done).await.unwrap();
    let done: Vec<MessageId> = kept
        .iter()
        .map(|l| l.id())
        .filter(|&id| id != kept_last.id())
        .collect();
    q.ack(&done).await.unwrap();
    q.close().await.unwrap();
    drop(q);
    assert_eq!(segment_rows(dir.path()), 1);

    // Reopen: the two leases are still held, with the tokens taken before everything.
    let q = open();
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.backlog, stats.leased), (2, 2));
    let later = Timestamp::from_millis(u64::MAX / 2);
    for l in [kept_last, again_last] {
        let r = q.reschedule(l, later, "503").await.unwrap();
        assert!(
            matches!(r, Rescheduled::Scheduled { attempts: 1, .. }),
            "{r:?}"
        );
    }
    let listed = q.list(None, 1000).await.unwrap();
    assert_eq!(listed.len(), 2);
    for (m, l) in listed.iter().zip([kept_last, again_last]) {
        assert_eq!(m.id, l.id());
        assert_eq!(m.payload, l.message.payload);
        assert_eq!((m.attempts, m.retry_at), (1, later));
    }
    q.close().await.unwrap();
}
