//! The Redis backend's stream: one entry per lease call, acknowledged and deleted once every
//! lease it carries has ended (acked, rescheduled, dead-lettered, expired or released).
//! Needs `SEARCHWIRE_TEST_REDIS` like the conformance suite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use searchwire_queue::{MessageId, NewMessage, Queue};
use support::{Backend, Ctx};

async fn xlen(ctx: &Ctx) -> u64 {
    let client = redis::Client::open(ctx.url.clone().unwrap()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("XLEN")
        .arg(&ctx.stream)
        .query_async(&mut c)
        .await
        .unwrap()
}

/// Pending entries of the group (XPENDING's summary count).
async fn pending(ctx: &Ctx) -> u64 {
    let client = redis::Client::open(ctx.url.clone().unwrap()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(&ctx.stream)
        .arg(searchwire_queue::redis::DEFAULT_GROUP)
        .query_async(&mut c)
        .await
        .unwrap();
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => *n as u64,
            other => panic!("unexpected XPENDING count {other:?}"),
        },
        other => panic!("unexpected XPENDING reply {other:?}"),
    }
}

fn ids(leases: &[searchwire_queue::Lease]) -> Vec<MessageId> {
    leases.iter().map(|l| l.id()).collect()
}

async fn append(q: &Queue, n: usize) {
    let batch = (0..n).map(|i| NewMessage::new(format!("m{i}"))).collect();
    q.append(batch).await.unwrap();
}

#[tokio::test]
async fn one_stream_entry_per_lease_call_deleted_when_its_last_lease_ends() {
    let Some(ctx) = Ctx::new(Backend::Redis).await else {
        return;
    };
    let q = ctx.q();
    append(q, 10).await;
    let a = q.lease(4).await.unwrap();
    let b = q.lease(6).await.unwrap();
    assert_eq!((a.len(), b.len()), (4, 6));
    assert_eq!(xlen(&ctx).await, 2, "one entry per lease call");
    assert_eq!(pending(&ctx).await, 2);
    q.ack(&ids(&a)[..3]).await.unwrap();
    assert_eq!(
        xlen(&ctx).await,
        2,
        "a lease of the first call is still out"
    );
    q.reschedule(&a[3], ctx.at(10), "x").await.unwrap();
    assert_eq!(xlen(&ctx).await, 1, "every lease of the first call ended");
    assert_eq!(pending(&ctx).await, 1);
    assert!(q.dead_letter(&b[0], "bad").await.unwrap());
    q.ack(&ids(&b)[1..]).await.unwrap();
    assert_eq!(xlen(&ctx).await, 0);
    assert_eq!(pending(&ctx).await, 0);
}

#[tokio::test]
async fn an_expired_or_released_lease_call_leaves_the_stream() {
    let Some(ctx) = Ctx::new(Backend::Redis).await else {
        return;
    };
    let q = ctx.q();
    append(q, 3).await;
    let first = q.lease(2).await.unwrap();
    assert_eq!(xlen(&ctx).await, 1);
    q.ack(&ids(&first)[..1]).await.unwrap();
    // The lease call's end passes with one lease still out: the message comes back and the
    // entry goes.
    ctx.clock.advance(support::LEASE);
    let again = q.lease(3).await.unwrap();
    assert_eq!(again.len(), 2, "the expired lease and the third message");
    assert_eq!(xlen(&ctx).await, 1, "only the new call's entry");
    assert_eq!(pending(&ctx).await, 1);
    assert_eq!(q.release().await.unwrap(), 2);
    assert_eq!(xlen(&ctx).await, 0, "released: acknowledged and deleted");
    assert_eq!(pending(&ctx).await, 0);
    assert_eq!(q.stats().await.unwrap().leased, 0);
}
