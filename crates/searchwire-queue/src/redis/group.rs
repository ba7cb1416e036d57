//! Group commit: the appends that concurrent callers make to one queue sent to Redis as one
//! call (on a Redis Cluster: to the shards of one primary, as one round of calls).
//!
//! Every append call pays a fixed cost on the server, whatever it carries: reading and
//! parsing the command, the script or the `MULTI`/`EXEC`, its share of an AOF write and
//! (with `appendfsync always`) a sync, the reply, and with [`RedisConfig::min_replicas`]
//! a `WAIT` that holds the connection's later commands until a replica answered. So each
//! caller appends through a small queue: the first caller to find no append in flight
//! takes what is waiting — its own batch and the ones that arrived since — sends it as one
//! batch, and hands each caller its part of the answer; callers arriving meanwhile wait for
//! the next such call. One caller alone sends at once; under load a call carries what
//! arrived while the previous one was on the wire. It matters most on a Redis Cluster,
//! where a sharded queue splits every batch by payload hash into one part per shard, and
//! the shards' parts by the primary that serves them: there one group commit per primary
//! (`cluster/sharded.rs`) sends, in each round, one call for each shard it carries, all at
//! once on the primary's one connection, so the primary runs them together, small ones in
//! one pass with one sync of its log (see docs/benchmarks.md, "Redis queue: on a Redis
//! Cluster").
//!
//! What each caller sees is what it would see alone: its batch is never split between
//! calls, its answers are its own messages' in order, and a payload that another caller in
//! the same call also appends is answered [`Appended::Duplicate`] of the first one's id, as
//! if that append had come first (it did, within the call). A failed call fails every
//! caller in it with the same error (their messages may or may not be stored; a resend
//! finds the stored ones queued). The call runs on a task of its own, so a caller that
//! stops waiting (its future dropped, as a relay request whose client went away) stops
//! neither its call nor the other callers' answers.

use std::sync::Mutex;
use tokio::sync::oneshot;

use super::RedisQueue;
use crate::error::{Error, ErrorKind, Result};
use crate::message::{Appended, NewMessage};

/// One caller's batch, waiting to be sent.
struct Waiting<T> {
    batch: Vec<T>,
    done: oneshot::Sender<Result<Vec<Appended>>>,
}

/// The appends waiting for a call, and the turn to send one. `T` is what a batch holds:
/// the messages for one queue, or on a Redis Cluster each message with its shard.
pub(in crate::redis) struct Group<T = NewMessage> {
    waiting: Mutex<Vec<Waiting<T>>>,
    /// Held by the caller sending a call.
    turn: tokio::sync::Mutex<()>,
    /// Append calls sent (grouped or not).
    pub(super) calls: std::sync::atomic::AtomicU64,
}

impl<T> Default for Group<T> {
    fn default() -> Self {
        Group {
            waiting: Mutex::new(Vec::new()),
            turn: tokio::sync::Mutex::new(()),
            calls: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl<T> Group<T> {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<Waiting<T>>> {
        match self.waiting.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Takes the oldest waiting batches, whole, while they fit in `max` messages (at least
    /// one batch).
    fn take(&self, max: usize) -> Vec<Waiting<T>> {
        let mut waiting = self.waiting();
        let mut n = 0;
        let mut k = 0;
        for w in waiting.iter() {
            if k > 0 && n + w.batch.len() > max {
                break;
            }
            n += w.batch.len();
            k += 1;
        }
        waiting.drain(..k).collect()
    }
}

/// The same error for another caller of a failed call.
fn copy(e: &Error) -> Error {
    Error::new(e.kind(), e.to_string())
}

impl<T> Group<T> {
    /// Sends `batch` (checked and not empty) in a call of at most `max` messages (more only
    /// for a batch that big alone) with the batches of the callers waiting beside it;
    /// `send` makes one call and answers one [`Appended`] per message, in order.
    pub(in crate::redis) async fn submit<F, Fut>(
        &self,
        batch: Vec<T>,
        max: usize,
        mut send: F,
    ) -> Result<Vec<Appended>>
    where
        F: FnMut(Vec<T>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Appended>>> + Send + 'static,
    {
        let (done, mut answer) = oneshot::channel();
        self.waiting().push(Waiting { batch, done });
        let _turn = self.turn.lock().await;
        // The calls before this one may have carried this batch; if not, send calls (the
        // oldest batches first) until one has.
        loop {
            match answer.try_recv() {
                Ok(result) => return result,
                Err(oneshot::error::TryRecvError::Closed) => return Err(interrupted()),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let calls = self.take(max);
            if calls.is_empty() {
                // This batch is on the wire in a call whose sender stopped waiting for it
                // (the call goes on without it): wait for that call's answer.
                return answer.await.unwrap_or_else(|_| Err(interrupted()));
            }
            let sizes: Vec<usize> = calls.iter().map(|w| w.batch.len()).collect();
            let total: usize = sizes.iter().sum();
            let mut senders = Vec::with_capacity(calls.len());
            let mut all = Vec::with_capacity(total);
            for w in calls {
                all.extend(w.batch);
                senders.push(w.done);
            }
            // The call runs on its own task: the caller sending it may stop waiting (a
            // relay request whose client went away) without taking the others' call with it.
            let call = send(all);
            let sent = tokio::spawn(async move {
                let answered = call.await.and_then(|a| {
                    if a.len() == total {
                        Ok(a)
                    } else {
                        Err(Error::corrupt(format!(
                            "an append of {total} messages was answered for {}",
                            a.len()
                        )))
                    }
                });
                match answered {
                    Ok(mut answers) => {
                        // Split from the back: each caller's part, in order.
                        for (done, n) in senders.into_iter().zip(sizes).rev() {
                            let part = answers.split_off(answers.len() - n);
                            let _gone = done.send(Ok(part));
                        }
                    }
                    Err(e) => {
                        for done in senders {
                            let _gone = done.send(Err(copy(&e)));
                        }
                    }
                }
            });
            // A call that panicked dropped its callers' senders: they learn it below.
            let _joined = sent.await;
        }
    }
}

/// The answer to a caller whose batch's call ended without one (its task panicked or the
/// runtime is shutting down).
fn interrupted() -> Error {
    Error::new(
        ErrorKind::Redis,
        "redis: appending was interrupted before Redis answered, so whether the batch was \
         stored is unknown: send it again (the queue stores a payload once)",
    )
}

impl RedisQueue {
    /// How many append calls this queue (with its clones) has sent to Redis: with group
    /// commit fewer than the appends made when callers append concurrently.
    pub fn append_calls(&self) -> u64 {
        self.group.calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Appends `batch` (checked and not empty) through the queue's group commit: see the
    /// module documentation.
    pub(super) async fn append_grouped(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>> {
        self.group
            .submit(batch, self.config.chunk, |all| {
                let queue = self.clone();
                async move { queue.append_call(all).await }
            })
            .await
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
