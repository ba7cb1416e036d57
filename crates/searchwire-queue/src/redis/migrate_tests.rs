//! Layout 1 → 2: a queue written by the previous version (raw keys, exactly as its scripts
//! left them) is migrated on connect, by several processes at once, and served in full.
//! Needs `SEARCHWIRE_TEST_REDIS` like the conformance suite (skips without it, fails when
//! `SEARCHWIRE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use super::{RedisConfig, RedisQueue, DEFAULT_GROUP};
use crate::message::{Appended, Message, MessageId, NewMessage, PayloadHash};
use crate::{record, ManualClock, QueueOptions, Timestamp};

const T0: Timestamp = Timestamp::from_millis(1_767_225_600_000);

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

fn message(id: u64, priority: u8, retry_at: Timestamp, payload: &str) -> Message {
    Message {
        id: MessageId(id),
        payload: payload.as_bytes().to_vec(),
        priority,
        retry_at,
        attempts: 1,
        max_retries: 5,
        payload_hash: PayloadHash::of(payload.as_bytes()),
        enqueued_at: T0,
        index: Some("products".into()),
        last_error: Some("503".into()),
        pending_shutdown: false,
    }
}

/// Layout 1's schedule member.
fn v1_member(m: &Message) -> String {
    format!(
        "{:03}{:016}{:020}",
        u8::MAX - m.priority,
        m.retry_at.as_millis(),
        m.id.0
    )
}

async fn cmd<T: redis::FromRedisValue>(
    c: &mut redis::aio::MultiplexedConnection,
    cmd: &mut redis::Cmd,
) -> T {
    cmd.query_async(c).await.unwrap()
}

/// Writes what layout 1's append, lease and kill scripts left for: 1 (priority 0, due),
/// 2 (priority 5, due), 3 (due in a minute), 4 (leased by consumer `old`), and dead
/// letter 9.
async fn write_layout_1(c: &mut redis::aio::MultiplexedConnection, s: &str) -> Vec<Message> {
    let k = |x: &str| format!("{s}:{x}");
    let msgs = vec![
        message(1, 0, T0, "a"),
        message(2, 5, T0, "b"),
        message(3, 0, T0.saturating_add(Duration::from_secs(60)), "c"),
        message(4, 0, T0, "d"),
    ];
    let _: () = cmd(
        c,
        redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(s)
            .arg(DEFAULT_GROUP)
            .arg("$")
            .arg("MKSTREAM"),
    )
    .await;
    for m in &msgs {
        let id = m.id.0;
        let hex = m.payload_hash.to_hex();
        let member = v1_member(m);
        let _: () = cmd(
            c,
            redis::cmd("HSET")
                .arg(k("msg"))
                .arg(id)
                .arg(record::encode(m)),
        )
        .await;
        let _: () = cmd(
            c,
            redis::cmd("HSET")
                .arg(k("meta"))
                .arg(id)
                .arg(format!("{hex} {member}")),
        )
        .await;
        let _: () = cmd(c, redis::cmd("HSET").arg(k("hashes")).arg(&hex).arg(id)).await;
        let _: () = cmd(c, redis::cmd("ZADD").arg(k("arrival")).arg(id).arg(id)).await;
        match id {
            1 | 2 => {
                let _: () = cmd(c, redis::cmd("ZADD").arg(k("ready")).arg(0).arg(&member)).await;
            }
            3 => {
                let _: () = cmd(
                    c,
                    redis::cmd("ZADD")
                        .arg(k("delayed"))
                        .arg(m.retry_at.as_millis())
                        .arg(&member),
                )
                .await;
            }
            _ => {
                let entry: String =
                    cmd(c, redis::cmd("XADD").arg(s).arg("*").arg("n").arg(1)).await;
                let _: redis::Value = cmd(
                    c,
                    redis::cmd("XREADGROUP")
                        .arg("GROUP")
                        .arg(DEFAULT_GROUP)
                        .arg("old")
                        .arg("COUNT")
                        .arg(1)
                        .arg("STREAMS")
                        .arg(s)
                        .arg(">"),
                )
                .await;
                let _: () = cmd(c, redis::cmd("HSET").arg(k("entries")).arg(&entry).arg(1)).await;
                let _: () = cmd(
                    c,
                    redis::cmd("HSET")
                        .arg(k("inflight"))
                        .arg(id)
                        .arg(format!("{entry} 7 old")),
                )
                .await;
                let _: () = cmd(
                    c,
                    redis::cmd("ZADD")
                        .arg(k("leases"))
                        .arg(T0.as_millis() + 60_000)
                        .arg(id),
                )
                .await;
            }
        }
    }
    let dead = message(9, 0, T0, "z");
    let _: () = cmd(
        c,
        redis::cmd("HSET")
            .arg(k("dead"))
            .arg(9)
            .arg(record::encode_dead(&dead, "gave up", T0)),
    )
    .await;
    let _: () = cmd(c, redis::cmd("ZADD").arg(k("dead-ids")).arg(9).arg(9)).await;
    let _: () = cmd(c, redis::cmd("SET").arg(k("seq")).arg(9)).await;
    let _: () = cmd(c, redis::cmd("SET").arg(k("lease-seq")).arg(7)).await;
    msgs
}

#[tokio::test]
async fn a_layout_1_queue_is_migrated_on_connect_and_served() {
    let Some(url) = url() else { return };
    let stream = format!("migrate-{}-{:016x}", std::process::id(), fastrand::u64(..));
    let client = redis::Client::open(url.clone()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let msgs = write_layout_1(&mut c, &stream).await;

    let clock = ManualClock::new(T0);
    let config = |consumer: &str| {
        let mut cfg = RedisConfig::new(url.clone());
        cfg.stream = stream.clone();
        cfg.options = QueueOptions::default()
            .clock(Arc::new(clock.clone()))
            .consumer(consumer);
        cfg
    };
    // Three processes connect at once: one migrates, the others find layout 2.
    let (a, b, d) = tokio::join!(
        RedisQueue::connect(config("new")),
        RedisQueue::connect(config("other")),
        RedisQueue::connect(config("third")),
    );
    let (q, _, _) = (a.unwrap(), b.unwrap(), d.unwrap());
    let layout: String = cmd(&mut c, redis::cmd("GET").arg(format!("{stream}:layout"))).await;
    assert_eq!(layout, super::scripts::LAYOUT_VERSION);
    for gone in ["meta", "inflight", "leases"] {
        let n: u64 = cmd(&mut c, redis::cmd("EXISTS").arg(format!("{stream}:{gone}"))).await;
        assert_eq!(n, 0, "layout 1's {gone} is gone");
    }
    let xlen: u64 = cmd(&mut c, redis::cmd("XLEN").arg(&stream)).await;
    assert_eq!(xlen, 0, "layout 1's entries are acknowledged and deleted");

    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.backlog, stats.due, stats.leased, stats.dead_letters),
        (4, 3, 0, 1)
    );
    let listed = q.list(None, 10).await.unwrap();
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[..3], msgs[..3], "records are served unchanged");
    assert!(
        listed[3].pending_shutdown,
        "the lease of layout 1 was given back"
    );
    // De-duplication still finds the migrated hashes; new ids continue the sequence (a
    // duplicate uses up its id too).
    let appended = q
        .append(vec![NewMessage::new("a"), NewMessage::new("e")])
        .await
        .unwrap();
    assert_eq!(
        appended,
        [
            Appended::Duplicate(MessageId(1)),
            Appended::New(MessageId(11))
        ]
    );
    // Delivery order: priority, then retry_at, then arrival; 3 is not due yet.
    let leased = q.lease(10).await.unwrap();
    let ids: Vec<u64> = leased.iter().map(|l| l.id().0).collect();
    assert_eq!(ids, [2, 1, 4, 11]);
    assert_eq!(leased[1].message, msgs[0]);
    assert!(leased[2].message.pending_shutdown);
    assert_eq!(
        leased[2].message.attempts, 1,
        "no attempt counted for the migration"
    );
    let acked = q
        .ack(&leased.iter().map(|l| l.id()).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(acked, 4);
    clock.advance(Duration::from_secs(60));
    let later = q.lease(10).await.unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].message, msgs[2]);
    let dead = q.dead_letters(None, 10).await.unwrap();
    assert_eq!((dead.len(), dead[0].reason.as_str()), (1, "gave up"));
    // Connecting again changes nothing.
    let again = RedisQueue::connect(config("fourth")).await.unwrap();
    assert_eq!(again.stats().await.unwrap().leased, 1);
    let _: () = cmd(&mut c, redis::cmd("DEL").arg(&stream)).await;
}
