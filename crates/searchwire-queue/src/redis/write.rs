//! The hot path: append, lease, ack (and the replay of dead letters, which stores like an
//! append). See the module documentation of [`super`] for the layout.

use redis::Value;
use std::collections::HashMap;

use super::{RedisQueue, MAX_LEASE};
use crate::error::{Error, Result};
use crate::message::{
    Appended, Lease, LeaseToken, Message, MessageId, NewMessage, PayloadHash, Replayed, Selection,
};
use crate::{record, Timestamp};

/// The schedule member of `S:ready`/`S:delayed`: `255 − priority`, `retry_at` and id as
/// big-endian bytes (so byte order is delivery order), the hash, the id in decimal
/// (`scripts::COMMON` reads the last two at fixed offsets).
pub(super) fn member(
    priority: u8,
    retry_at: Timestamp,
    id: MessageId,
    hash: &PayloadHash,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(17 + 32 + 20);
    m.push(u8::MAX - priority);
    m.extend_from_slice(&retry_at.as_millis().to_be_bytes());
    m.extend_from_slice(&id.0.to_be_bytes());
    m.extend_from_slice(&hash.0);
    m.extend_from_slice(id.0.to_string().as_bytes());
    m
}

/// A token no other append call shares (the process's random hasher keys, its id and a
/// counter): the name of its receipt.
fn receipt_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(call);
    format!("{:016x}{call:x}", h.finish())
}

/// One message to store.
struct Stored {
    id: String,
    hash: PayloadHash,
    member: Vec<u8>,
    retry_at: Timestamp,
    record: Vec<u8>,
}

impl Stored {
    fn of(m: &Message) -> Self {
        Stored {
            id: m.id.0.to_string(),
            member: member(m.priority, m.retry_at, m.id, &m.payload_hash),
            hash: m.payload_hash,
            retry_at: m.retry_at,
            record: record::encode(m),
        }
    }
}

/// A chunk's size: the configured one, at most [`MAX_LEASE`] (Lua's `unpack` takes a few
/// thousand values at most).
fn chunk_size(configured: usize) -> usize {
    configured.clamp(1, MAX_LEASE)
}

/// Reads an append script's duplicates — (position, 1-based, among the messages sent;
/// queued id) pairs — into `out`, at `offset` plus the position.
fn duplicates_into(dups: &[Value], offset: usize, out: &mut [Option<MessageId>]) -> Result<()> {
    for pair in dups.chunks(2) {
        let (Some(Value::Int(pos)), Some(Value::BulkString(id))) = (pair.first(), pair.get(1))
        else {
            return Err(Error::corrupt(format!("unexpected append result {pair:?}")));
        };
        let existing = std::str::from_utf8(id)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::corrupt("a queued id is not a number"))?;
        let at = usize::try_from(*pos)
            .ok()
            .and_then(|p| p.checked_sub(1))
            .map(|p| offset + p)
            .filter(|&i| i < out.len())
            .ok_or_else(|| Error::corrupt("a duplicate's position is out of range"))?;
        out[at] = Some(MessageId(existing));
    }
    Ok(())
}

/// An error reply inside an `EXEC`'s answer, as an error.
fn check_exec(v: &Value) -> Result<&[Value]> {
    match v {
        Value::Array(items) => {
            for item in items {
                if let Value::ServerError(e) = item {
                    return Err(Error::new(
                        crate::ErrorKind::Redis,
                        format!("redis: appending failed: {e:?}"),
                    ));
                }
            }
            Ok(items)
        }
        other => Err(Error::corrupt(format!(
            "unexpected answer to an append transaction: {other:?}"
        ))),
    }
}

impl RedisQueue {
    /// See [`Queue::append`](crate::Queue::append). Up to
    /// [`RedisConfig::small_append`](super::RedisConfig::small_append) messages: one script
    /// call (`append_small`); more: an id reservation, then the transactions of
    /// `store_new`.
    ///
    /// With [`RedisConfig::min_replicas`](super::RedisConfig::min_replicas) above 0 it
    /// returns only once that many replicas confirmed the writes, and on a Sentinel link only
    /// once the server that ran them still answered `ROLE` with `master` after them (see
    /// "Replicated appends" in the module documentation). On a Sentinel or Cluster link an append that failed because the primary
    /// moved is sent once more to the new one: a payload the first try stored is then found
    /// queued ([`Appended::Duplicate`]), so nothing is stored twice.
    ///
    /// With [`RedisConfig::group_commit`](super::RedisConfig::group_commit) (the default),
    /// the batches of concurrent callers are sent as one call (`group.rs`).
    pub async fn append(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>> {
        crate::check_batch(&batch)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        if self.config.group_commit && batch.len() < self.config.chunk {
            self.append_grouped(batch).await
        } else {
            self.append_call(batch).await
        }
    }

    /// One append call (the batch checked and not empty), sent once more if the primary
    /// moved under it.
    pub(super) async fn append_call(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>> {
        self.group
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Only a link that follows failovers (Sentinel, Cluster) sends an append again, so
        // only there it leaves a receipt.
        let receipt = self.link.follows_failover().then(receipt_token);
        let generation = self.link.generation();
        let started = tokio::time::Instant::now();
        match self.append_once(&batch, receipt.as_deref()).await {
            Err(e)
                if (self.link.is_stale()
                    || (self.link.follows_failover() && self.link.generation() != generation))
                    && started.elapsed() <= super::RESEND_WITHIN =>
            {
                tracing::debug!(error = %e, "redis: append failed as the primary moved; sending it again");
                self.append_once(&batch, receipt.as_deref()).await
            }
            done => done,
        }
    }

    /// One try of an append. With a `receipt` token, what it stores is recorded under it
    /// (per transaction), and a try with the same token that finds the record stores
    /// nothing and answers what the first did: the first try may have run and replicated
    /// although its caller saw an error, and its messages may even have been delivered and
    /// acknowledged since (so `S:hashes` no longer knows them).
    pub(super) async fn append_once(
        &self,
        batch: &[NewMessage],
        receipt: Option<&str>,
    ) -> Result<Vec<Appended>> {
        let now = self.now();
        // Duplicates within the batch are found here; Redis sees each payload once.
        let mut first_of: HashMap<PayloadHash, usize> = HashMap::with_capacity(batch.len());
        let mut same_as = Vec::with_capacity(batch.len());
        let mut distinct: Vec<(usize, PayloadHash)> = Vec::with_capacity(batch.len());
        for (i, n) in batch.iter().enumerate() {
            let hash = PayloadHash::of(&n.payload);
            if let Some(&j) = first_of.get(&hash) {
                same_as.push(Err(j));
                continue;
            }
            first_of.insert(hash, i);
            same_as.push(Ok(distinct.len()));
            distinct.push((i, hash));
        }
        // Per distinct message: what it was stored as.
        let stored: Vec<Appended> = if batch.len() <= self.config.small_append.min(MAX_LEASE) {
            let receipt = receipt.map(|t| self.keys.receipt(t, 0));
            let (first, queued) = self
                .append_small(batch, &distinct, now, receipt.as_deref())
                .await?;
            distinct
                .iter()
                .zip(queued)
                .map(|(&(i, _), q)| match q {
                    Some(existing) => Appended::Duplicate(existing),
                    None => Appended::New(MessageId(first + i as u64)),
                })
                .collect()
        } else {
            // The ids and the writes go to the same server (see `run_pipe_pinned`).
            let mut pin = None;
            let first = self.reserve_ids(batch.len(), &mut pin).await?;
            let messages: Vec<Stored> = distinct
                .iter()
                .map(|&(i, hash)| {
                    let n = &batch[i];
                    let id = MessageId(first + i as u64);
                    let retry_at = n.retry_at.unwrap_or(now);
                    Stored {
                        id: id.0.to_string(),
                        member: member(n.priority, retry_at, id, &hash),
                        hash,
                        retry_at,
                        record: record::encode_new(n, id, &hash, now),
                    }
                })
                .collect();
            let offsets: Vec<u64> = distinct.iter().map(|&(i, _)| i as u64).collect();
            self.store_new(&messages, &offsets, first, now, &mut pin, receipt)
                .await?
        };
        let mut out: Vec<Appended> = Vec::with_capacity(batch.len());
        for s in &same_as {
            let a = match *s {
                Ok(k) => stored[k],
                Err(j) => Appended::Duplicate(out[j].id()),
            };
            out.push(a);
        }
        Ok(out)
    }

    /// Reserves `n` message ids; returns the first.
    async fn reserve_ids(&self, n: usize, pin: &mut Option<u64>) -> Result<u64> {
        let mut incr = redis::pipe();
        incr.cmd("INCRBY").arg(self.keys.seq()).arg(n);
        let (last,): (u64,) = self
            .run_pipe_pinned("reserving message ids", &incr, Some(pin))
            .await?;
        Ok(last + 1 - n as u64)
    }

    /// Adds to an append's pipeline, after its writes (never inside a `MULTI` or a script,
    /// where `WAIT` does not block), `WAIT min_replicas timeout` when replicas are required
    /// and `ROLE` on a Sentinel link (see `Link::checks_role`). Both travel in the same pipeline as the writes, so on
    /// the same connection: a reconnect in between cannot make a `WAIT` on a fresh
    /// connection (which has written nothing, so waits for nothing) confirm them. Returns
    /// how many answers they add.
    fn durable_tail(&self, pipe: &mut redis::Pipeline) -> usize {
        let mut n = 0;
        if self.config.min_replicas > 0 {
            pipe.cmd("WAIT")
                .arg(self.config.min_replicas)
                .arg(self.config.replica_timeout.as_millis().max(1) as u64);
            n += 1;
        }
        if self.link.checks_role() {
            pipe.cmd("ROLE");
            n += 1;
        }
        n
    }

    /// Checks the answers [`Self::durable_tail`] added: enough replicas confirmed, and the
    /// server was still the primary.
    fn check_tail(&self, what: &str, tail: &[Value]) -> Result<()> {
        let mut tail = tail.iter();
        if self.config.min_replicas > 0 {
            let confirmed = match tail.next() {
                Some(Value::Int(n)) => *n,
                other => {
                    return Err(Error::corrupt(format!(
                        "unexpected answer to WAIT: {other:?}"
                    )))
                }
            };
            // Not a reason to look for another primary, nor to send it again here: the write
            // stands on this one and may be delivered; a copy sent now would be stored
            // again once the first is delivered. The caller decides.
            if confirmed < self.config.min_replicas as i64 {
                return Err(Error::new(
                    crate::ErrorKind::Redis,
                    format!(
                        "redis: {what} failed: only {confirmed} of the {} replicas required confirmed \
                         it within {:?}, so it does not count (it may survive or not): try \
                         again (the queue stores a payload once), and check the replicas' \
                         links (INFO replication)",
                        self.config.min_replicas, self.config.replica_timeout
                    ),
                ));
            }
        }
        if self.link.checks_role() {
            match tail.next() {
                Some(role) if super::conn::is_master(role) => {}
                _ => {
                    self.link.mark_stale();
                    return Err(Error::new(
                        crate::ErrorKind::Redis,
                        format!(
                            "redis: {what} failed: {} is no longer the primary after it (a failover), so \
                             it does not count: try again",
                            self.link.addr()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Runs an append's pipeline with its [`Self::durable_tail`]; returns the answers of
    /// `pipe`'s own commands.
    async fn run_durable(
        &self,
        what: &str,
        mut pipe: redis::Pipeline,
        pin: Option<&mut Option<u64>>,
    ) -> Result<Vec<Value>> {
        let added = self.durable_tail(&mut pipe);
        let mut answers: Vec<Value> = self.run_pipe_pinned(what, &pipe, pin).await?;
        let tail = answers.split_off(answers.len().saturating_sub(added));
        if tail.len() != added {
            return Err(Error::corrupt(
                "an append's pipeline answered too few values",
            ));
        }
        self.check_tail(what, &tail)?;
        Ok(answers)
    }

    /// A whole append in one `EVALSHA` of `scripts::APPEND_SMALL`: ids, de-duplication and
    /// the writes, atomically, in one round trip (and, with `appendfsync always`, one AOF
    /// sync). `distinct` is the batch's first message of each payload, with its hash.
    /// Returns the first id reserved and, per distinct message, the queued id it
    /// duplicates (it was not stored), or `None`. If Redis lost its script cache the script
    /// is loaded and sent again (a NOSCRIPT reply means it did not run).
    async fn append_small(
        &self,
        batch: &[NewMessage],
        distinct: &[(usize, PayloadHash)],
        now: Timestamp,
        receipt: Option<&str>,
    ) -> Result<(u64, Vec<Option<MessageId>>)> {
        let mut inv = redis::cmd("EVALSHA");
        inv.arg(self.scripts.append_small.get_hash())
            .arg(self.keys.all.len() + usize::from(receipt.is_some()))
            .arg(&self.keys.all);
        if let Some(key) = receipt {
            inv.arg(key);
        }
        inv.arg(&self.config.group)
            .arg(now.as_millis())
            .arg(batch.len());
        for &(i, hash) in distinct {
            let n = &batch[i];
            inv.arg(i)
                .arg(&hash.0[..])
                .arg(n.retry_at.unwrap_or(now).as_millis())
                .arg(record::encode_new(n, MessageId(0), &hash, now));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(inv);
        let answer = match self.run_durable("appending", pipe, None).await?.pop() {
            Some(Value::Array(a)) => a,
            other => {
                return Err(Error::corrupt(format!(
                    "unexpected answer of the append script: {other:?}"
                )))
            }
        };
        let Some((Value::Int(first), dups)) = answer.split_first() else {
            return Err(Error::corrupt("the append script answered no first id"));
        };
        let first =
            u64::try_from(*first).map_err(|_| Error::corrupt("a negative first message id"))?;
        let mut out = vec![None; distinct.len()];
        duplicates_into(dups, 0, &mut out)?;
        Ok((first, out))
    }

    /// Stores `messages` (distinct payloads; `offsets[k]`: message `k`'s place in the batch,
    /// whose first reserved id is `first`): per chunk one `MULTI`/`EXEC` with the records,
    /// arrival and schedule members as plain commands and the de-duplication script last;
    /// all chunks pipelined in one round trip. With a `receipt` token each chunk records
    /// its answer, and a chunk that finds its record (an append sent again) undoes its
    /// writes and answers as the first time. Returns, per message, what it was stored as.
    async fn store_new(
        &self,
        messages: &[Stored],
        offsets: &[u64],
        first: u64,
        now: Timestamp,
        pin: &mut Option<u64>,
        receipt: Option<&str>,
    ) -> Result<Vec<Appended>> {
        let k = &self.keys;
        let mut pipe = redis::pipe();
        let chunk = chunk_size(self.config.chunk);
        for (c, part) in messages.chunks(chunk).enumerate() {
            pipe.cmd("MULTI").ignore();
            let (mut msg, mut arrival) = (redis::cmd("HSET"), redis::cmd("ZADD"));
            msg.arg(k.msg());
            arrival.arg(k.arrival());
            let (mut ready, mut delayed) = (redis::cmd("ZADD"), redis::cmd("ZADD"));
            ready.arg(k.ready());
            delayed.arg(k.delayed());
            let (mut any_ready, mut any_delayed) = (false, false);
            let mut dedup = redis::cmd("EVAL");
            dedup
                .arg(&self.scripts.append_source)
                .arg(k.all.len() + usize::from(receipt.is_some()))
                .arg(&k.all);
            if let Some(token) = receipt {
                dedup.arg(k.receipt(token, c));
            }
            dedup.arg(&self.config.group).arg(first);
            for m in part {
                msg.arg(&m.id).arg(&m.record);
                arrival.arg(&m.id).arg(&m.id);
                if m.retry_at <= now {
                    ready.arg(0).arg(&m.member);
                    any_ready = true;
                } else {
                    delayed.arg(m.retry_at.as_millis()).arg(&m.member);
                    any_delayed = true;
                }
                dedup.arg(&m.hash.0[..]).arg(&m.id);
            }
            pipe.add_command(msg).ignore();
            pipe.add_command(arrival).ignore();
            if any_ready {
                pipe.add_command(ready).ignore();
            }
            if any_delayed {
                pipe.add_command(delayed).ignore();
            }
            pipe.add_command(dedup).ignore();
            pipe.cmd("EXEC");
        }
        let execs = self.run_durable("appending", pipe, Some(pin)).await?;
        let mut out = Vec::with_capacity(messages.len());
        for (c, exec) in execs.iter().enumerate() {
            let items = check_exec(exec)?;
            let Some(Value::Array(answer)) = items.last() else {
                return Err(Error::corrupt("the append script answered no list"));
            };
            let Some((Value::Int(chunk_first), dups)) = answer.split_first() else {
                return Err(Error::corrupt("the append script answered no first id"));
            };
            let chunk_first = u64::try_from(*chunk_first)
                .map_err(|_| Error::corrupt("a negative first message id"))?;
            let start = c * chunk;
            let end = (start + chunk).min(messages.len());
            let mut queued = vec![None; end - start];
            duplicates_into(dups, 0, &mut queued)?;
            for (q, offset) in queued.into_iter().zip(&offsets[start..end]) {
                out.push(match q {
                    Some(existing) => Appended::Duplicate(existing),
                    None => Appended::New(MessageId(chunk_first + offset)),
                });
            }
        }
        if out.len() != messages.len() {
            return Err(Error::corrupt("an append answered too few transactions"));
        }
        Ok(out)
    }

    /// See [`Queue::lease`](crate::Queue::lease). At most [`MAX_LEASE`] per call. Two round
    /// trips: the lease script (which returns ids), then one `HMGET` of the records — a
    /// record acked meanwhile by someone else is skipped (it was delivered). With
    /// replicas required, the lease script's writes are confirmed like an append's
    /// before anything is handed out.
    pub async fn lease(&self, max: usize) -> Result<Vec<Lease>> {
        let now = self.now();
        let expires_at = now.saturating_add(self.config.options.lease_timeout);
        let mut inv = self.invocation(&self.scripts.lease);
        inv.arg(now.as_millis())
            .arg(max.min(MAX_LEASE))
            .arg(&self.config.options.consumer)
            .arg(expires_at.as_millis())
            .arg(&now.as_millis().to_be_bytes()[..])
            .arg(crate::LEASE_EXPIRED);
        // Confirmed like an append: a lease a failover could take back would hand out
        // messages whose append may not have counted (and may be resent under a new id).
        let mut pipe = redis::pipe();
        pipe.add_command(inv);
        let values = match self.run_durable("leasing", pipe, None).await?.pop() {
            Some(Value::Array(v)) => v,
            _ => return Err(Error::corrupt("unexpected answer of the lease script")),
        };
        let (token, ids) = match values.as_slice() {
            [] => return Ok(Vec::new()),
            [Value::Int(t), Value::Array(ids)] => (*t, ids),
            _ => return Err(Error::corrupt("unexpected answer of the lease script")),
        };
        let token =
            LeaseToken(u64::try_from(token).map_err(|_| Error::corrupt("negative lease token"))?);
        let mut get = redis::cmd("HMGET");
        get.arg(self.keys.msg());
        for id in ids {
            let Value::BulkString(id) = id else {
                return Err(Error::corrupt("a leased id is not a string"));
            };
            get.arg(id);
        }
        let records: Vec<Option<Vec<u8>>> = self.run("reading leased messages", &get).await?;
        records
            .into_iter()
            .flatten()
            .map(|rec| {
                Ok(Lease {
                    message: record::decode(&rec)?,
                    token,
                    expires_at,
                })
            })
            .collect()
    }

    /// See [`Queue::ack`](crate::Queue::ack).
    pub async fn ack(&self, ids: &[MessageId]) -> Result<u64> {
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        let ids: Vec<MessageId> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
        if ids.is_empty() {
            return Ok(0);
        }
        // One script call per chunk, all pipelined in one round trip.
        let mut pipe = redis::pipe();
        for chunk in ids.chunks(MAX_LEASE) {
            let mut inv = self.invocation(&self.scripts.ack);
            for id in chunk {
                inv.arg(id.0);
            }
            pipe.add_command(inv);
        }
        let counts: Vec<u64> = self.run_pipe("acknowledging", &pipe).await?;
        Ok(counts.iter().sum())
    }

    /// See [`Queue::replay`](crate::Queue::replay).
    pub async fn replay(&self, selection: &Selection) -> Result<Replayed> {
        let now = self.now();
        let mut out = Replayed::default();
        let mut after = None;
        loop {
            let page = self.dead_letters(after, self.config.chunk).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.message.id);
            let revived: Vec<Stored> = page
                .into_iter()
                .filter(|d| selection.contains(d.message.id))
                .map(|d| Stored::of(&crate::revived(d.message, now)))
                .collect();
            let mut pipe = redis::pipe();
            for chunk in revived.chunks(chunk_size(self.config.chunk)) {
                let mut inv = self.invocation(&self.scripts.replay);
                inv.arg(now.as_millis());
                for m in chunk {
                    inv.arg(&m.id)
                        .arg(&m.hash.0[..])
                        .arg(&m.member)
                        .arg(m.retry_at.as_millis())
                        .arg(&m.record);
                }
                pipe.add_command(inv);
            }
            let results: Vec<Vec<String>> = self.run_pipe("replaying", &pipe).await?;
            for r in results.iter().flatten() {
                match r.chars().next() {
                    Some('n') => out.replayed += 1,
                    Some('d') => out.duplicates += 1,
                    Some('g') => {}
                    _ => return Err(Error::corrupt(format!("unexpected replay result {r:?}"))),
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_in_delivery_order() {
        let h = PayloadHash::of(b"x");
        let t = Timestamp::from_millis;
        let ordered = [
            member(9, t(5), MessageId(300), &h),
            member(9, t(6), MessageId(2), &h),
            member(1, t(1), MessageId(1), &h),
            member(1, t(1), MessageId(256), &h),
            member(0, t(0), MessageId(0), &h),
        ];
        let mut sorted = ordered.clone();
        sorted.sort();
        assert_eq!(sorted, ordered);
        // The scripts read the hash at 18..49 and the decimal id from 50 (1-based).
        let m = &ordered[0];
        assert_eq!(&m[17..49], &h.0[..]);
        assert_eq!(&m[49..], b"300");
    }
}
