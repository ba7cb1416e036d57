//! The group commit's mechanics with a stand-in for Redis: who is sent in which call, who
//! gets which answer, and what a failed or cancelled call means for each caller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Group;
use crate::error::{Error, ErrorKind, Result};
use crate::message::{Appended, MessageId, NewMessage};

/// A batch of messages whose payloads are the numbers `from..from + n`.
fn batch(from: u64, n: u64) -> Vec<NewMessage> {
    (from..from + n)
        .map(|i| NewMessage::new(i.to_string()))
        .collect()
}

/// The number a message carries.
fn number(m: &NewMessage) -> u64 {
    std::str::from_utf8(&m.payload).unwrap().parse().unwrap()
}

/// A stand-in for Redis: records each call's payload numbers, takes 10 ms (paused time),
/// and answers each message `New(its number)`.
#[derive(Clone, Default)]
struct Server {
    calls: Arc<Mutex<Vec<Vec<u64>>>>,
}

impl Server {
    fn send(
        &self,
        all: Vec<NewMessage>,
    ) -> impl std::future::Future<Output = Result<Vec<Appended>>> + Send + 'static {
        let calls = self.calls.clone();
        async move {
            calls.lock().unwrap().push(all.iter().map(number).collect());
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(all
                .iter()
                .map(|m| Appended::New(MessageId(number(m))))
                .collect())
        }
    }

    fn calls(&self) -> Vec<Vec<u64>> {
        self.calls.lock().unwrap().clone()
    }
}

/// A caller, on its own task, appending the one message `10 k`.
fn caller(
    group: &Arc<Group>,
    server: &Server,
    k: u64,
) -> tokio::task::JoinHandle<Result<Vec<Appended>>> {
    let (group, server) = (group.clone(), server.clone());
    tokio::spawn(async move {
        group
            .submit(batch(k * 10, 1), 1000, |all| server.send(all))
            .await
    })
}

fn ids(answers: &[Appended]) -> Vec<u64> {
    answers.iter().map(|a| a.id().0).collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn one_caller_alone_is_sent_at_once() {
    let group = Group::default();
    let server = Server::default();
    let start = tokio::time::Instant::now();
    let got = group
        .submit(batch(1, 3), 1000, |all| server.send(all))
        .await
        .unwrap();
    assert_eq!(ids(&got), [1, 2, 3]);
    assert_eq!(server.calls(), [vec![1, 2, 3]]);
    assert_eq!(start.elapsed(), Duration::from_millis(10));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn callers_arriving_during_a_call_share_the_next_and_each_gets_its_own_answers() {
    let group = Arc::new(Group::default());
    let server = Server::default();
    // Caller k appends k*100+1 ..= k*100+k+1 (k+1 messages); all start before any answer.
    let tasks: Vec<_> = (0..6u64)
        .map(|k| {
            let (group, server) = (group.clone(), server.clone());
            tokio::spawn(async move {
                let got = group
                    .submit(batch(k * 100 + 1, k + 1), 1000, |all| server.send(all))
                    .await
                    .unwrap();
                (k, got)
            })
        })
        .collect();
    for t in tasks {
        let (k, got) = t.await.unwrap();
        let want: Vec<u64> = (k * 100 + 1..k * 100 + k + 2).collect();
        assert_eq!(ids(&got), want, "caller {k}");
    }
    // The first caller went alone; the five that arrived while it was on the wire went
    // together, in arrival order.
    let calls = server.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0], [1]);
    assert_eq!(
        calls[1],
        [
            101, 102, 201, 202, 203, 301, 302, 303, 304, 401, 402, 403, 404, 405, 501, 502, 503,
            504, 505, 506
        ]
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_carries_at_most_max_messages_and_never_splits_a_batch() {
    let group = Arc::new(Group::default());
    let server = Server::default();
    // Batches of 4; max 10: calls of 4 (the first alone), then 8, 8 (two batches each, a
    // third would make 12).
    let tasks: Vec<_> = (0..5u64)
        .map(|k| {
            let (group, server) = (group.clone(), server.clone());
            tokio::spawn(async move {
                group
                    .submit(batch(k * 10, 4), 10, |all| server.send(all))
                    .await
                    .unwrap()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().len(), 4);
    }
    let sizes: Vec<usize> = server.calls().iter().map(Vec::len).collect();
    assert_eq!(sizes, [4, 8, 8]);
    // A batch larger than max goes alone, whole.
    let got = group
        .submit(batch(1000, 15), 10, |all| server.send(all))
        .await
        .unwrap();
    assert_eq!(got.len(), 15);
    assert_eq!(server.calls().last().unwrap().len(), 15);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_failed_call_fails_every_caller_in_it_and_no_other() {
    let group = Arc::new(Group::default());
    let sent = Arc::new(Mutex::new(0));
    // The second call fails.
    let send = {
        let sent = sent.clone();
        move |all: Vec<NewMessage>| {
            let sent = sent.clone();
            async move {
                let n = {
                    let mut s = sent.lock().unwrap();
                    *s += 1;
                    *s
                };
                tokio::time::sleep(Duration::from_millis(10)).await;
                if n == 2 {
                    Err(Error::new(
                        ErrorKind::Redis,
                        "redis: appending failed: boom",
                    ))
                } else {
                    Ok(all
                        .iter()
                        .map(|m| Appended::New(MessageId(number(m))))
                        .collect())
                }
            }
        }
    };
    let tasks: Vec<_> = (0..4u64)
        .map(|k| {
            let (group, send) = (group.clone(), send.clone());
            tokio::spawn(async move { group.submit(batch(k * 10, 2), 1000, send).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    assert_eq!(ids(results[0].as_ref().unwrap()), [0, 1]);
    for r in &results[1..] {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Redis);
        assert!(e.to_string().contains("boom"), "{e}");
    }
    // The next caller is sent as usual.
    let got = group
        .submit(batch(90, 1), 1000, send.clone())
        .await
        .unwrap();
    assert_eq!(ids(&got), [90]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_answer_of_the_wrong_length_is_an_error_for_every_caller() {
    let group = Group::default();
    let e = group
        .submit(batch(1, 3), 1000, |_all| async {
            Ok(vec![Appended::New(MessageId(1))])
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.to_string().contains("3 messages"), "{e}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_caller_that_stops_waiting_stops_neither_its_call_nor_the_others_answers() {
    let group = Arc::new(Group::default());
    let server = Server::default();
    // Caller 0 is sent alone; callers 1 and 2 wait. Caller 1 takes the turn next and
    // sends itself with caller 2; it is cancelled while that call is on the wire.
    let spawn = |k: u64| caller(&group, &server, k);
    let first = spawn(0);
    let second = spawn(1);
    let third = spawn(2);
    // 10 ms: the first call ends; 15 ms: the second call (callers 1 and 2) is on the wire.
    tokio::time::sleep(Duration::from_millis(15)).await;
    second.abort();
    // A caller arriving now takes the turn the cancelled one left, finds nothing of its
    // own sent and sends itself, beside the call still on the wire.
    let fourth = spawn(3);
    assert_eq!(ids(&first.await.unwrap().unwrap()), [0]);
    assert!(second.await.unwrap_err().is_cancelled());
    assert_eq!(ids(&third.await.unwrap().unwrap()), [20]);
    assert_eq!(ids(&fourth.await.unwrap().unwrap()), [30]);
    assert_eq!(server.calls(), [vec![0], vec![10, 20], vec![30]]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_caller_whose_batch_is_on_the_wire_without_its_sender_waits_for_that_call() {
    let group = Arc::new(Group::default());
    let server = Server::default();
    let spawn = |k: u64| caller(&group, &server, k);
    // Caller 0 is sent alone; callers 1 and 2 wait, and at 10 ms caller 1 sends both. It
    // is cancelled at 12 ms; caller 2 takes the turn, finds nothing waiting (its batch is
    // on the wire) and waits for that call's answer at 20 ms instead of sending anew.
    let start = tokio::time::Instant::now();
    let c0 = spawn(0);
    let c1 = spawn(1);
    let c2 = spawn(2);
    tokio::time::sleep(Duration::from_millis(12)).await;
    c1.abort();
    assert_eq!(ids(&c0.await.unwrap().unwrap()), [0]);
    assert!(c1.await.unwrap_err().is_cancelled());
    assert_eq!(ids(&c2.await.unwrap().unwrap()), [20]);
    assert_eq!(start.elapsed(), Duration::from_millis(20));
    assert_eq!(server.calls(), [vec![0], vec![10, 20]]);
}
