//! One behaviour, two backends: every scenario here runs against the embedded (redb) queue
//! and the Redis Streams queue (three times: as configured by default, with every append on
//! the transaction path, and with every append one script call) and once more through
//! Sentinels with every append confirmed by a replica, and on a Redis Cluster: all of it
//! with one shard, the scenarios that assume no order across messages with the default
//! shards. The Redis part needs `SEARCHWIRE_TEST_REDIS`, `SEARCHWIRE_TEST_REDIS_SENTINEL`
//! and `SEARCHWIRE_TEST_REDIS_CLUSTER` (scripts/test starts a server, a Sentinel set and a
//! Cluster and sets them; with `SEARCHWIRE_REQUIRE_REDIS=1` a missing one fails).
//! Time is a manual clock: no test sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire_queue::{
    error_type, Appended, DeadLetterFilter, ErrorKind, MessageId, NewMessage, Queue, Rescheduled,
    Selection, MAX_ERROR_BYTES,
};
use support::{Backend, Ctx, LEASE};

fn msg(payload: &str) -> NewMessage {
    NewMessage::new(payload.as_bytes().to_vec())
}

async fn append(q: &Queue, batch: Vec<NewMessage>) -> Vec<MessageId> {
    q.append(batch)
        .await
        .unwrap()
        .iter()
        .map(Appended::id)
        .collect()
}

async fn leased_payloads(q: &Queue, max: usize) -> Vec<String> {
    q.lease(max)
        .await
        .unwrap()
        .into_iter()
        .map(|l| String::from_utf8(l.message.payload).unwrap())
        .collect()
}

async fn delivery_order_is_priority_then_retry_at_then_arrival(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(
        q,
        vec![
            msg("low-1").priority(1),
            msg("high-later").priority(9).retry_at(c.at(20)),
            msg("high-1").priority(9),
            msg("low-2").priority(1),
            msg("high-2").priority(9),
            msg("mid-early").priority(5).retry_at(c.at(0)),
        ],
    )
    .await;
    c.clock.advance(Duration::from_millis(30));
    assert_eq!(
        leased_payloads(q, 100).await,
        // 9 (retry_at T0, T0, T0+20), 5, 1, 1: priority, then retry_at, then arrival.
        [
            "high-1",
            "high-2",
            "high-later",
            "mid-early",
            "low-1",
            "low-2"
        ]
    );
}

async fn lease_takes_at_most_max_in_order(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, (0..5).map(|i| msg(&format!("m{i}"))).collect()).await;
    assert_eq!(leased_payloads(q, 2).await, ["m0", "m1"]);
    assert_eq!(leased_payloads(q, 2).await, ["m2", "m3"]);
    assert_eq!(leased_payloads(q, 2).await, ["m4"]);
    assert!(q.lease(2).await.unwrap().is_empty());
}

async fn nothing_is_delivered_before_its_retry_at(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("later").retry_at(c.at(1000)), msg("now")]).await;
    assert_eq!(leased_payloads(q, 10).await, ["now"]);
    c.clock.advance(Duration::from_millis(999));
    assert!(q.lease(10).await.unwrap().is_empty(), "1 ms early");
    c.clock.advance(Duration::from_millis(1));
    assert_eq!(leased_payloads(q, 10).await, ["later"]);
}

async fn an_unacked_lease_comes_back_after_the_lease_timeout(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("a"), msg("b")]).await;
    let first = q.lease(10).await.unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].expires_at, c.at(LEASE.as_millis() as u64));
    q.ack(&[first[1].id()]).await.unwrap();
    c.clock.advance(LEASE - Duration::from_millis(1));
    assert!(
        q.lease(10).await.unwrap().is_empty(),
        "the lease is still held"
    );
    c.clock.advance(Duration::from_millis(1));
    let again = q.lease(10).await.unwrap();
    assert_eq!(again.len(), 1, "only the unacked message comes back");
    assert_eq!(again[0].id(), first[0].id());
    assert_ne!(again[0].token, first[0].token, "a new lease");
}

/// A poison message: its delivery kills the consumer every time, so it is never acked,
/// rescheduled or dead-lettered. Each expired lease counts an attempt; after `max_retries`
/// it is a dead letter whose reason says the leases expired, instead of looping forever.
async fn an_expired_lease_counts_an_attempt_and_poison_ends_in_the_dead_letters(b: Backend) {
    let Some(mut c) = Ctx::new(b).await else {
        return;
    };
    append(
        c.q(),
        vec![
            msg("poison").max_retries(3).index("products").priority(9),
            msg("fine"),
        ],
    )
    .await;
    let mut poison = None;
    for attempt in 0..3u32 {
        // A fresh consumer each time: the last one died holding the lease.
        c.reopen(&format!("consumer-{attempt}")).await;
        let q = c.q();
        let l = q.lease(1).await.unwrap().remove(0);
        assert_eq!(l.message.payload, b"poison");
        assert_eq!(l.message.attempts, attempt, "expired leases so far");
        if attempt > 0 {
            assert_eq!(
                l.message.last_error.as_deref(),
                Some(searchwire_queue::LEASE_EXPIRED)
            );
        }
        poison = Some(l.id());
        c.clock.advance(LEASE);
    }
    let q = c.q();
    let l = q.lease(10).await.unwrap();
    assert_eq!(
        l.iter()
            .map(|l| l.message.payload.as_slice())
            .collect::<Vec<_>>(),
        [b"fine".as_slice()],
        "the third expiry exhausted max_retries (3): poison is not leased again"
    );
    let dead = q.dead_letters(None, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(Some(dead[0].message.id), poison);
    let reason = format!(
        "{}; max_retries (3) reached",
        searchwire_queue::LEASE_EXPIRED
    );
    assert_eq!(dead[0].reason, reason);
    assert_eq!(dead[0].message.attempts, 3);
    assert_eq!(dead[0].message.last_error.as_deref(), Some(reason.as_str()));
    assert_eq!(dead[0].message.index.as_deref(), Some("products"));
    assert_eq!(dead[0].message.priority, 9);
    assert_eq!(dead[0].dead_at, c.at(3 * LEASE.as_millis() as u64));
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.leased, s.dead_letters), (1, 1, 1));
    // A reschedule counts on top of an expiry: the two share one attempt count.
    append(q, vec![msg("mixed").max_retries(2)]).await;
    c.clock.advance(LEASE);
    let l = q.lease(10).await.unwrap();
    let mixed = l.iter().find(|l| l.message.payload == b"mixed").unwrap();
    assert_eq!(mixed.message.attempts, 0);
    c.clock.advance(LEASE);
    let l = q.lease(10).await.unwrap();
    let mixed = l.iter().find(|l| l.message.payload == b"mixed").unwrap();
    assert_eq!(mixed.message.attempts, 1, "one expiry");
    assert_eq!(
        q.reschedule(mixed, c.at(0), "503").await.unwrap(),
        Rescheduled::DeadLettered
    );
}

async fn ack_removes_for_good_even_after_the_lease_expired(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("a"), msg("b")]).await;
    let l = q.lease(10).await.unwrap();
    assert_eq!(q.ack(&[l[0].id()]).await.unwrap(), 1);
    assert_eq!(
        q.ack(&[l[0].id()]).await.unwrap(),
        0,
        "acked twice counts once"
    );
    c.clock.advance(LEASE * 2);
    // b's lease expired; its late ack still removes it (it was delivered).
    assert_eq!(q.ack(&[l[1].id()]).await.unwrap(), 1);
    c.clock.advance(LEASE * 2);
    assert!(q.lease(10).await.unwrap().is_empty());
    assert_eq!(q.stats().await.unwrap().backlog, 0);
}

/// One ack call over a mix: leased, waiting (never leased), not due yet, unknown and
/// repeated ids. Each queued one is removed with every trace (schedule, lease, hash).
async fn one_ack_removes_leased_waiting_and_delayed_messages_alike(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let ids = append(
        q,
        vec![
            msg("leased"),
            msg("waiting"),
            msg("later").retry_at(c.at(10_000)),
            msg("kept"),
        ],
    )
    .await;
    let l = q.lease(1).await.unwrap();
    assert_eq!(l[0].id(), ids[0]);
    let n = q
        .ack(&[ids[0], ids[1], ids[2], MessageId(999_999), ids[0], ids[1]])
        .await
        .unwrap();
    assert_eq!(
        n, 3,
        "three were queued; unknown and repeated ids count nothing"
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.leased, s.due), (1, 0, 1));
    c.clock.advance(LEASE * 2);
    assert_eq!(leased_payloads(q, 10).await, ["kept"]);
    // The hashes went with them: the same payloads are new messages again.
    let again = q
        .append(vec![msg("leased"), msg("waiting"), msg("later")])
        .await
        .unwrap();
    assert!(
        again.iter().all(|a| matches!(a, Appended::New(_))),
        "{again:?}"
    );
}

async fn a_payload_is_queued_once_while_a_copy_is_queued(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let r = q.append(vec![msg("x"), msg("y"), msg("x")]).await.unwrap();
    let Appended::New(x) = r[0] else {
        panic!("{r:?}")
    };
    assert!(matches!(r[1], Appended::New(_)));
    assert_eq!(r[2], Appended::Duplicate(x), "duplicate within one batch");
    assert_eq!(
        q.append(vec![msg("x")]).await.unwrap(),
        [Appended::Duplicate(x)]
    );
    // Leased is still queued.
    let l = q.lease(1).await.unwrap();
    assert_eq!(l[0].id(), x);
    assert_eq!(
        q.append(vec![msg("x")]).await.unwrap(),
        [Appended::Duplicate(x)]
    );
    assert_eq!(
        l[0].message.payload_hash,
        searchwire_queue::PayloadHash::of(b"x")
    );
    // Once acked, the same payload can be queued again, under a new id.
    q.ack(&[x]).await.unwrap();
    let again = q.append(vec![msg("x")]).await.unwrap();
    assert!(matches!(again[0], Appended::New(id) if id > x), "{again:?}");
    assert_eq!(q.stats().await.unwrap().backlog, 2);
}

async fn reschedule_counts_attempts_keeps_the_error_and_delays(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("a").max_retries(3).index("products")]).await;
    let l = q.lease(1).await.unwrap().remove(0);
    let r = q
        .reschedule(&l, c.at(500), "429 Too Many Requests")
        .await
        .unwrap();
    assert_eq!(
        r,
        Rescheduled::Scheduled {
            attempts: 1,
            retry_at: c.at(500)
        }
    );
    assert!(
        q.lease(1).await.unwrap().is_empty(),
        "not before its new retry_at"
    );
    c.clock.advance(Duration::from_millis(500));
    let l2 = q.lease(1).await.unwrap().remove(0);
    assert_eq!(l2.id(), l.id());
    assert_eq!(l2.message.attempts, 1);
    assert_eq!(
        l2.message.last_error.as_deref(),
        Some("429 Too Many Requests")
    );
    assert_eq!(l2.message.index.as_deref(), Some("products"));
    assert_eq!(l2.message.enqueued_at, support::T0, "enqueued_at stays");
}

async fn a_deferral_keeps_the_attempts_and_never_dead_letters(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("throttled").max_retries(1)]).await;
    // Far more deferrals than max_retries: still queued, attempts unchanged.
    for n in 0..5 {
        let l = q.lease(1).await.unwrap().remove(0);
        assert_eq!(l.message.attempts, 0, "deferral {n}");
        assert!(matches!(
            q.defer(&l, c.at(0), "429 Too Many Requests").await.unwrap(),
            Rescheduled::Scheduled { attempts: 0, .. }
        ));
    }
    let l = q.lease(1).await.unwrap().remove(0);
    assert_eq!(
        l.message.last_error.as_deref(),
        Some("429 Too Many Requests")
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.dead_letters), (1, 0));
    // A counted failure still ends it at max_retries.
    assert_eq!(
        q.reschedule(&l, c.at(0), "400").await.unwrap(),
        Rescheduled::DeadLettered
    );
}

async fn max_retries_moves_the_message_to_the_dead_letters_with_its_reason(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("doomed").max_retries(2), msg("other")]).await;
    let l = q.lease(1).await.unwrap().remove(0);
    assert!(matches!(
        q.reschedule(&l, c.at(0), "503").await.unwrap(),
        Rescheduled::Scheduled { attempts: 1, .. }
    ));
    let l = q.lease(1).await.unwrap().remove(0);
    assert_eq!(l.message.payload, b"doomed");
    assert_eq!(
        q.reschedule(&l, c.at(0), "503 again").await.unwrap(),
        Rescheduled::DeadLettered
    );
    let dead = q.dead_letters(None, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, l.id());
    assert_eq!(dead[0].reason, "503 again");
    assert_eq!(dead[0].message.attempts, 2);
    assert_eq!(dead[0].dead_at, support::T0);
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.dead_letters), (1, 1));
    // A dead letter no longer blocks its payload.
    assert!(matches!(
        q.append(vec![msg("doomed")]).await.unwrap()[0],
        Appended::New(_)
    ));
}

async fn a_lost_lease_cannot_reschedule_or_dead_letter(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    append(q, vec![msg("a")]).await;
    let stale = q.lease(1).await.unwrap().remove(0);
    c.clock.advance(LEASE);
    let current = q.lease(1).await.unwrap().remove(0);
    assert_eq!(current.id(), stale.id());
    assert_eq!(
        q.reschedule(&stale, c.at(999_999), "late").await.unwrap(),
        Rescheduled::LeaseLost
    );
    assert!(!q.dead_letter(&stale, "late").await.unwrap());
    // The current holder is unaffected.
    assert!(q.dead_letter(&current, "400 mapping error").await.unwrap());
    assert_eq!(
        q.dead_letters(None, 10).await.unwrap()[0].reason,
        "400 mapping error"
    );
}

async fn dead_letters_can_be_listed_replayed_and_purged(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let ids = append(
        q,
        (0..4).map(|i| msg(&format!("d{i}")).priority(i)).collect(),
    )
    .await;
    for l in q.lease(10).await.unwrap() {
        assert!(q.dead_letter(&l, "bad").await.unwrap());
    }
    let page = q.dead_letters(None, 2).await.unwrap();
    assert_eq!(
        page.iter().map(|d| d.message.id).collect::<Vec<_>>(),
        ids[..2]
    );
    let page = q.dead_letters(Some(ids[1]), 10).await.unwrap();
    assert_eq!(
        page.iter().map(|d| d.message.id).collect::<Vec<_>>(),
        ids[2..]
    );

    // A queued copy of d1's payload makes its replay a duplicate.
    append(q, vec![msg("d1")]).await;
    c.clock.advance(Duration::from_secs(1));
    let r = q
        .replay(&Selection::Ids(vec![ids[0], ids[1]]))
        .await
        .unwrap();
    assert_eq!((r.replayed, r.duplicates), (1, 1));
    let back = q.lease(10).await.unwrap();
    let d0 = back
        .iter()
        .find(|l| l.id() == ids[0])
        .expect("d0 replayed under its id");
    assert_eq!(d0.message.attempts, 0);
    assert_eq!(d0.message.retry_at, c.at(1000), "due at replay time");
    assert_eq!(d0.message.last_error.as_deref(), Some("bad"));

    assert_eq!(
        q.purge(&Selection::Ids(vec![ids[2], MessageId(999_999)]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(q.stats().await.unwrap().dead_letters, 1);
    assert_eq!(q.purge(&Selection::All).await.unwrap(), 1);
    assert_eq!(q.stats().await.unwrap().dead_letters, 0);
    assert_eq!(q.replay(&Selection::All).await.unwrap().replayed, 0);
}

async fn dead_letters_are_chosen_by_index_error_type_and_age_and_replayed_once(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let mapping =
        r#"400: {"type":"mapper_parsing_exception","reason":"failed to parse field [n]"}"#;
    let ids = append(
        q,
        vec![
            msg("a0").index("logs-a").max_retries(7),
            msg("a1").index("logs-b"),
            msg("a2").index("metrics"),
        ],
    )
    .await;
    let l = q.lease(10).await.unwrap();
    // a0 with 2 failed attempts before it died of a mapping error.
    let mut a0 = l[0].clone();
    for _ in 0..2 {
        let r = q.reschedule(&a0, c.at(0), "503 unavailable").await.unwrap();
        assert!(matches!(r, Rescheduled::Scheduled { .. }));
        a0 = q.lease(10).await.unwrap().remove(0);
    }
    assert!(q.dead_letter(&a0, mapping).await.unwrap());
    assert!(q.dead_letter(&l[1], mapping).await.unwrap());
    c.clock.advance(Duration::from_secs(120));
    assert!(q
        .dead_letter(&l[2], "deadline_exceeded: still undeliverable")
        .await
        .unwrap());

    let f = |index: Option<&str>, t: Option<&str>, older: Option<u64>| DeadLetterFilter {
        index: index.map(str::to_owned),
        error_type: t.map(str::to_owned),
        older_than: older.map(Duration::from_secs),
        ..Default::default()
    };
    let found = |f: DeadLetterFilter| async move {
        q.find_dead_letters(&f, None, 100)
            .await
            .unwrap()
            .iter()
            .map(|d| d.message.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(found(f(Some("logs-*"), None, None)).await, ids[..2]);
    assert_eq!(
        found(f(None, Some("mapper_parsing_exception"), None)).await,
        ids[..2]
    );
    assert_eq!(
        found(f(None, Some("deadline_exceeded"), None)).await,
        ids[2..]
    );
    assert_eq!(
        found(f(None, None, Some(60))).await,
        ids[..2],
        "dead 2 min ago"
    );
    assert_eq!(found(f(Some("logs-b"), None, Some(60))).await, ids[1..2]);
    assert_eq!(found(f(None, None, None)).await.len(), 3);
    assert_eq!(
        q.find_dead_letters(&f(None, None, None), Some(ids[0]), 1)
            .await
            .unwrap()[0]
            .message
            .id,
        ids[1],
        "paged after an id, at most limit"
    );

    // What a dead letter keeps: its payload (the original action and source), the
    // cluster's error, its attempts.
    let d = q
        .dead_letter_by_id(ids[0])
        .await
        .unwrap()
        .expect("a0 is dead");
    assert_eq!(d.message.payload, b"a0");
    assert_eq!(d.reason, mapping);
    assert_eq!(d.message.attempts, 2);
    assert_eq!(error_type(&d.reason), "mapper_parsing_exception");
    assert!(q
        .dead_letter_by_id(MessageId(999_999))
        .await
        .unwrap()
        .is_none());

    // Replay the mapping errors of logs-*: back under their ids, once.
    let sel = q
        .select_dead_letters(&f(Some("logs-*"), Some("mapper_parsing_exception"), None))
        .await
        .unwrap();
    assert_eq!(sel, Selection::Ids(ids[..2].to_vec()));
    assert_eq!(q.replay(&sel).await.unwrap().replayed, 2);
    assert_eq!(
        q.replay(&sel).await.unwrap().replayed,
        0,
        "a second replay finds none"
    );
    let back: Vec<_> = q.lease(10).await.unwrap().iter().map(|l| l.id()).collect();
    assert_eq!(back, ids[..2]);
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.dead_letters), (2, 1));
    assert_eq!(
        q.select_dead_letters(&DeadLetterFilter::default())
            .await
            .unwrap(),
        Selection::All
    );
}

async fn release_gives_back_this_consumers_leases_marked_pending_shutdown(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let a = c.q();
    let other = a.with_consumer("consumer-b").unwrap();
    append(a, vec![msg("m0"), msg("m1"), msg("m2")]).await;
    let mine = a.lease(2).await.unwrap();
    let theirs = other.lease(1).await.unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(a.release().await.unwrap(), 2);
    // Back at once, before any lease timeout, in their order; the other consumer's stays.
    let again = other.lease(10).await.unwrap();
    assert_eq!(
        again.iter().map(|l| l.id()).collect::<Vec<_>>(),
        mine.iter().map(|l| l.id()).collect::<Vec<_>>()
    );
    assert!(again.iter().all(|l| l.message.pending_shutdown));
    assert_eq!(a.release().await.unwrap(), 0);
    // A failed retry after that clears the mark.
    let l = &again[0];
    a.ack(&[again[1].id(), theirs[0].id()]).await.unwrap();
    other.reschedule(l, c.at(0), "503").await.unwrap();
    let l = other.lease(1).await.unwrap().remove(0);
    assert!(!l.message.pending_shutdown);
}

async fn stats_report_backlog_due_leased_oldest_age_and_dead_letters(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.due, s.leased, s.oldest_age, s.dead_letters),
        (0, 0, 0, None, 0)
    );
    append(q, vec![msg("a"), msg("b"), msg("c")]).await;
    c.clock.advance(Duration::from_secs(10));
    append(q, vec![msg("later").retry_at(c.at(60_000))]).await;
    let l = q.lease(2).await.unwrap();
    q.dead_letter(&l[1], "x").await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!(s.backlog, 3);
    assert_eq!(s.due, 1, "c; 'later' is not due; a is leased");
    assert_eq!(s.leased, 1);
    assert_eq!(s.oldest_age, Some(Duration::from_secs(10)));
    assert_eq!(s.dead_letters, 1);
    c.clock.advance(Duration::from_secs(60));
    assert_eq!(q.stats().await.unwrap().due, 2);
}

async fn list_pages_through_queued_messages_by_id(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let ids = append(
        q,
        (0..5)
            .map(|i| msg(&format!("l{i}")).priority(5 - i as u8))
            .collect(),
    )
    .await;
    q.lease(1).await.unwrap();
    let p1 = q.list(None, 3).await.unwrap();
    assert_eq!(p1.iter().map(|m| m.id).collect::<Vec<_>>(), ids[..3]);
    let p2 = q.list(Some(ids[2]), 3).await.unwrap();
    assert_eq!(p2.iter().map(|m| m.id).collect::<Vec<_>>(), ids[3..]);
    assert_eq!(p2[0].payload, b"l3");
}

async fn reopening_after_a_crash_keeps_queued_leased_and_dead_messages(b: Backend) {
    let Some(mut c) = Ctx::new(b).await else {
        return;
    };
    let ids = append(
        c.q(),
        vec![msg("acked"), msg("leased"), msg("queued"), msg("dead")],
    )
    .await;
    let l = c.q().lease(2).await.unwrap();
    c.q().ack(&[l[0].id()]).await.unwrap();
    let d = c.q().lease(2).await.unwrap();
    c.q().ack(&[]).await.unwrap();
    c.q().dead_letter(&d[1], "gone").await.unwrap();
    // d[0] ("queued") was leased too: give it back properly; l[1] stays leased across the crash.
    c.q().reschedule(&d[0], c.at(0), "x").await.unwrap();

    c.reopen("consumer-after-crash").await;
    let q = c.q();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.leased, s.dead_letters), (2, 1, 1));
    assert_eq!(
        leased_payloads(q, 10).await,
        ["queued"],
        "the crashed lease is still held"
    );
    c.clock.advance(LEASE);
    let back = q.lease(10).await.unwrap();
    assert_eq!(
        back.iter().map(|l| l.id()).collect::<Vec<_>>(),
        [ids[1], ids[2]]
    );
    // Ids keep growing after a reopen: no reuse of an acked id.
    let new = append(q, vec![msg("new")]).await;
    assert!(new[0] > ids[3]);
    assert_eq!(q.dead_letters(None, 10).await.unwrap()[0].reason, "gone");
}

async fn bad_input_is_refused_and_nothing_is_stored(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    let e = q
        .append(vec![msg("ok"), NewMessage::new(Vec::new())])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string()
            .contains("message 1 of the batch has an empty payload"),
        "{e}"
    );
    assert_eq!(q.stats().await.unwrap().backlog, 0);
    assert!(q.append(Vec::new()).await.unwrap().is_empty());
    assert!(q.with_consumer("has space").is_err());
}

async fn long_error_texts_are_kept_cut_at_a_character_boundary(b: Backend) {
    let Some(c) = Ctx::new(b).await else { return };
    let q = c.q();
    // 100 KB of two-byte characters after one ASCII byte: no cut at MAX_ERROR_BYTES falls on
    // a boundary by luck, and the whole is above the 64 KiB metadata limit.
    let long = format!("x{}", "é".repeat(50_000));
    let cut = |s: &str| {
        assert!(s.ends_with('…'), "{}", &s[..40]);
        assert!(s.len() <= MAX_ERROR_BYTES + '…'.len_utf8(), "{}", s.len());
        assert!(s.len() > MAX_ERROR_BYTES - 2, "{}", s.len());
        assert!(long.starts_with(s.trim_end_matches('…')));
    };
    append(q, vec![msg("a").last_error(long.clone()).max_retries(5)]).await;
    let l = q.lease(1).await.unwrap().remove(0);
    cut(l.message.last_error.as_deref().unwrap());
    q.reschedule(&l, c.at(0), &long).await.unwrap();
    let l = q.lease(1).await.unwrap().remove(0);
    cut(l.message.last_error.as_deref().unwrap());
    assert!(q.dead_letter(&l, &long).await.unwrap());
    cut(&q.dead_letters(None, 10).await.unwrap()[0].reason);
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::Embedded).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::Redis).await
                }
            )*
        }
        /// Every append through the transaction path (by default a single message is one
        /// script call).
        mod redis_transactions {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::RedisTransactions).await
                }
            )*
        }
        /// Every append one script call.
        mod redis_one_call {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::RedisOneCall).await
                }
            )*
        }
        /// The primary found through Sentinels; every append confirmed by a replica.
        mod redis_sentinel {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::RedisSentinel).await
                }
            )*
        }
        /// A Redis Cluster, one shard; every append confirmed by a replica.
        mod redis_cluster {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::RedisCluster).await
                }
            )*
        }
    };
}

/// The scenarios that assume no order across messages, also on a Redis Cluster with the
/// default shards (order holds per shard: `tests/redis_cluster.rs` shows it).
macro_rules! sharded_conformance {
    ($($name:ident),* $(,)?) => {
        mod redis_cluster_sharded {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Backend::RedisClusterSharded).await
                }
            )*
        }
    };
}

conformance!(
    delivery_order_is_priority_then_retry_at_then_arrival,
    lease_takes_at_most_max_in_order,
    nothing_is_delivered_before_its_retry_at,
    an_unacked_lease_comes_back_after_the_lease_timeout,
    an_expired_lease_counts_an_attempt_and_poison_ends_in_the_dead_letters,
    ack_removes_for_good_even_after_the_lease_expired,
    a_payload_is_queued_once_while_a_copy_is_queued,
    one_ack_removes_leased_waiting_and_delayed_messages_alike,
    reschedule_counts_attempts_keeps_the_error_and_delays,
    max_retries_moves_the_message_to_the_dead_letters_with_its_reason,
    a_deferral_keeps_the_attempts_and_never_dead_letters,
    a_lost_lease_cannot_reschedule_or_dead_letter,
    dead_letters_can_be_listed_replayed_and_purged,
    dead_letters_are_chosen_by_index_error_type_and_age_and_replayed_once,
    release_gives_back_this_consumers_leases_marked_pending_shutdown,
    stats_report_backlog_due_leased_oldest_age_and_dead_letters,
    list_pages_through_queued_messages_by_id,
    reopening_after_a_crash_keeps_queued_leased_and_dead_messages,
    bad_input_is_refused_and_nothing_is_stored,
    long_error_texts_are_kept_cut_at_a_character_boundary,
);

sharded_conformance!(
    nothing_is_delivered_before_its_retry_at,
    an_unacked_lease_comes_back_after_the_lease_timeout,
    ack_removes_for_good_even_after_the_lease_expired,
    reschedule_counts_attempts_keeps_the_error_and_delays,
    a_deferral_keeps_the_attempts_and_never_dead_letters,
    a_lost_lease_cannot_reschedule_or_dead_letter,
    stats_report_backlog_due_leased_oldest_age_and_dead_letters,
    bad_input_is_refused_and_nothing_is_stored,
    long_error_texts_are_kept_cut_at_a_character_boundary,
);
