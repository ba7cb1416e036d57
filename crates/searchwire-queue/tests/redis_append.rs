//! The Redis backend's two append paths: a small append (by default one message) is one
//! script call (`EVALSHA`, which reserves the ids itself), a larger one an id reservation
//! plus transactions. They
//! must store exactly the same keys and values, and the one-call path must survive Redis
//! losing its script cache. Needs `SEARCHWIRE_TEST_REDIS` like the conformance suite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use searchwire_queue::{Appended, MessageId, NewMessage, Queue};
use support::{Backend, Ctx};

async fn raw(ctx: &Ctx) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(ctx.url.clone().unwrap()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// What an append writes, keyed by the key's suffix: records, hashes, arrival, schedule
/// members (with their scores) and the id counter.
async fn dump(ctx: &Ctx) -> Vec<(&'static str, Vec<(Vec<u8>, Vec<u8>)>)> {
    let mut c = raw(ctx).await;
    let mut out = Vec::new();
    for suffix in ["msg", "hashes"] {
        let mut v: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(format!("{}:{suffix}", ctx.stream))
            .query_async(&mut c)
            .await
            .unwrap();
        v.sort();
        out.push((suffix, v));
    }
    for suffix in ["ready", "delayed", "arrival"] {
        let v: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("ZRANGE")
            .arg(format!("{}:{suffix}", ctx.stream))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
            .unwrap();
        out.push((suffix, v));
    }
    let seq: Option<Vec<u8>> = redis::cmd("GET")
        .arg(format!("{}:seq", ctx.stream))
        .query_async(&mut c)
        .await
        .unwrap();
    out.push(("seq", vec![(seq.unwrap_or_default(), Vec::new())]));
    out
}

async fn set_seq(ctx: &Ctx, value: u64) {
    let mut c = raw(ctx).await;
    let () = redis::cmd("SET")
        .arg(format!("{}:seq", ctx.stream))
        .arg(value)
        .query_async(&mut c)
        .await
        .unwrap();
}

fn m(payload: &str) -> NewMessage {
    NewMessage::new(payload.as_bytes().to_vec())
}

/// The same appends on both paths: in-batch duplicates, duplicates of queued (and of
/// leased) messages, priorities, delayed messages, index and last error, ids past 2^32.
async fn appends(ctx: &Ctx) -> Vec<Vec<Appended>> {
    let q = ctx.q();
    let mut out = Vec::new();
    let batch = vec![
        m("a"),
        m("b").priority(5),
        m("a"),
        m("c").retry_at(ctx.at(1_000)),
        m("d").index("logs-1").last_error("503 from the cluster"),
        m("e").max_retries(7),
    ];
    out.push(q.append(batch).await.unwrap());
    out.push(q.append(vec![m("f")]).await.unwrap());
    out.push(q.append(vec![m("b")]).await.unwrap());
    let leased = q.lease(1).await.unwrap();
    assert_eq!(leased.len(), 1);
    out.push(
        q.append(vec![
            m("g"),
            NewMessage::new(leased[0].message.payload.clone()),
            m("c"),
        ])
        .await
        .unwrap(),
    );
    // Ids whose big-endian bytes use the high half (the one-call path writes them in Lua).
    set_seq(ctx, (1 << 40) + 5).await;
    ctx.clock.advance(std::time::Duration::from_millis(10));
    out.push(
        q.append(vec![m("h").priority(9), m("i").retry_at(ctx.at(50))])
            .await
            .unwrap(),
    );
    out.push(q.append(vec![m("h"), m("j")]).await.unwrap());
    out
}

#[tokio::test]
async fn both_append_paths_store_the_same_keys_and_values() {
    let (Some(one_call), Some(transactions)) = (
        Ctx::new(Backend::RedisOneCall).await,
        Ctx::new(Backend::RedisTransactions).await,
    ) else {
        return;
    };
    let a = appends(&one_call).await;
    let b = appends(&transactions).await;
    assert_eq!(a, b, "the two paths answered differently");
    assert!(matches!(a[0][2], Appended::Duplicate(MessageId(1))));
    assert_eq!(
        a[5],
        [
            Appended::Duplicate(MessageId((1 << 40) + 6)),
            Appended::New(MessageId((1 << 40) + 9))
        ]
    );
    let (da, db) = (dump(&one_call).await, dump(&transactions).await);
    for ((key, va), (_, vb)) in da.iter().zip(&db) {
        assert_eq!(va, vb, "{key} differs between the paths");
    }
    // Not vacuous: every structure was written.
    assert!(da.iter().all(|(_, v)| !v.is_empty()));
    assert_eq!(da[0].1.len(), 10, "records: a to j");
}

async fn script_flush(ctx: &Ctx) {
    let mut c = raw(ctx).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_one_call_append_reloads_the_scripts_redis_lost() {
    let Some(ctx) = Ctx::new(Backend::RedisOneCall).await else {
        return;
    };
    let q: &Queue = ctx.q();
    let first = q.append(vec![m("one")]).await.unwrap();
    let Appended::New(one) = first[0] else {
        panic!("not stored: {first:?}")
    };
    script_flush(&ctx).await;
    // The EVALSHA meets NOSCRIPT (nothing ran, no id reserved): loaded and sent again.
    let second = q.append(vec![m("two"), m("one")]).await.unwrap();
    assert_eq!(
        second,
        vec![
            Appended::New(MessageId(one.0 + 1)),
            Appended::Duplicate(one)
        ]
    );
    script_flush(&ctx).await;
    let third = q.append(vec![m("three")]).await.unwrap();
    assert_eq!(third, vec![Appended::New(MessageId(one.0 + 3))]);
    let leased: Vec<String> = q
        .lease(10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| String::from_utf8(l.message.payload).unwrap())
        .collect();
    assert_eq!(leased, ["one", "two", "three"]);
}

fn redis_queue(q: &Queue) -> &searchwire_queue::RedisQueue {
    match q {
        Queue::Redis(r) => r,
        other => panic!("not a Redis queue: {other:?}"),
    }
}

/// Group commit: 64 callers append at once; on a current-thread runtime every one is
/// waiting before the first call's answer is read, so the first goes alone and the other
/// 63 share the second call. Each gets its own id, and a payload two callers append in the
/// same call is stored once: the later one is answered as a duplicate of the earlier.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_appends_share_one_call_and_each_caller_gets_its_own_answer() {
    let Some(ctx) = Ctx::new(Backend::RedisOneCall).await else {
        return;
    };
    let q = ctx.q().clone();
    let before = redis_queue(&q).append_calls();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let q = q.clone();
            // Callers 62 and 63 append the same payload.
            let payload = if i == 63 {
                "p62".to_owned()
            } else {
                format!("p{i}")
            };
            tokio::spawn(async move { q.append(vec![m(&payload)]).await.unwrap() })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        let a = t.await.unwrap();
        assert_eq!(a.len(), 1);
        answers.push(a[0]);
    }
    assert_eq!(redis_queue(&q).append_calls() - before, 2);
    let new: std::collections::HashSet<MessageId> = answers[..63]
        .iter()
        .map(|a| match a {
            Appended::New(id) => *id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(new.len(), 63);
    assert_eq!(answers[63], Appended::Duplicate(answers[62].id()));
    let leased = q.lease(100).await.unwrap();
    assert_eq!(leased.len(), 63);
    for l in &leased {
        let i: usize = std::str::from_utf8(&l.message.payload).unwrap()[1..]
            .parse()
            .unwrap();
        assert_eq!(l.id(), answers[i].id(), "p{i}");
    }
}
