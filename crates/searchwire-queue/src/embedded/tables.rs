//! The embedded queue's tables and the operations on them, each run inside one redb write
//! transaction (several operations share one when the writer groups them).
//!
//! | table | key | value | holds |
//! | --- | --- | --- | --- |
//! | `messages` | id | record | every queued message, leased or not |
//! | `schedule` | (255 − priority, retry_at, id) | () | messages not leased, in delivery order |
//! | `leased` | id | (lease number, expires_at, lease call, consumer) | who holds what |
//! | `lease_calls` | (expires_at, lease call) | leases of that call not ended yet | lease ends, one row per lease call |
//! | `hashes` | payload SHA-256 | id | de-duplication while queued |
//! | `dead` | id | dead-letter record | dead letters |
//! | `meta` | name | u64 | format version, next id, next lease number |
//!
//! A lease call is named by its first lease number; every lease it hands out ends at the
//! same time, so one `lease_calls` row per call (counting down as its leases end) is what
//! tells the next lease call whether anything expired — instead of a per-message
//! `(expires_at, id)` row written on lease and deleted on ack (format 1). When a row with
//! leases left expires (its holder died or hung), the expiry scans `leased` for every lease
//! ended by then: O(leases in flight), paid only when leases actually expire.
//!
//! Format history: 1 had `leases` ((expires_at, id) → ()) and `inflight` (id → (lease
//! number, expires_at, consumer)); [`prepare`] migrates it to 2 in place on open.

use std::time::Duration;

use redb::{
    ReadableTable, ReadableTableMetadata, Table, TableDefinition, TableHandle, WriteTransaction,
};

use crate::clock::Timestamp;
use crate::error::Result;
use crate::message::{
    Appended, Lease, LeaseToken, Message, MessageId, NewMessage, PayloadHash, Replayed,
    Rescheduled, Selection,
};
use crate::record;

pub(super) const MESSAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("messages");
pub(super) const SCHEDULE: TableDefinition<(u8, u64, u64), ()> = TableDefinition::new("schedule");
pub(super) const LEASED: TableDefinition<u64, (u64, u64, u64, &str)> =
    TableDefinition::new("leased");
pub(super) const LEASE_CALLS: TableDefinition<(u64, u64), u64> =
    TableDefinition::new("lease_calls");
pub(super) const HASHES: TableDefinition<&[u8], u64> = TableDefinition::new("hashes");
pub(super) const DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead");
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const NEXT_ID: &str = "next_id";
const NEXT_LEASE: &str = "next_lease";
const FORMAT: &str = "format";

/// The on-disk format this code writes (see the module's format history).
pub(super) const FORMAT_VERSION: u64 = 2;

/// Format 1's lease tables, read only to migrate them.
const V1_LEASES: TableDefinition<(u64, u64), ()> = TableDefinition::new("leases");
const V1_INFLIGHT: TableDefinition<u64, (u64, u64, &str)> = TableDefinition::new("inflight");

/// Brings a database to [`FORMAT_VERSION`] inside `txn`: a new one is stamped, a format-1
/// one is migrated (its leases keep their numbers, holders and ends), a newer one is
/// refused. Call before [`Tables::open`].
pub(super) fn prepare(txn: &WriteTransaction, path: &std::path::Path) -> Result<()> {
    let mut meta = txn.open_table(META).map_err(super::storage)?;
    let format = meta.get(FORMAT).map_err(super::storage)?.map(|v| v.value());
    let has_v1 = txn
        .list_tables()
        .map_err(super::storage)?
        .any(|t| t.name() == V1_INFLIGHT.name());
    match format {
        Some(FORMAT_VERSION) => return Ok(()),
        Some(f) if f > FORMAT_VERSION => {
            return Err(crate::Error::new(
                crate::ErrorKind::Storage,
                format!(
                    "the queue {} has on-disk format {f}, written by a newer searchwire; this                      one reads formats 1 to {FORMAT_VERSION} (upgrade searchwire, or drain the                      queue with the version that wrote it)",
                    path.display()
                ),
            ))
        }
        Some(f) if f != 1 => {
            return Err(crate::Error::corrupt(format!(
                "the queue {} has an unknown on-disk format {f}",
                path.display()
            )))
        }
        _ => {}
    }
    if has_v1 {
        let old: Vec<(u64, (u64, u64, String))> = {
            let t = txn.open_table(V1_INFLIGHT).map_err(super::storage)?;
            let rows = t.iter().map_err(super::storage)?;
            rows.map(|r| {
                r.map(|(k, v)| {
                    let (n, e, c) = v.value();
                    (k.value(), (n, e, c.to_owned()))
                })
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(super::storage)?
        };
        let mut leased = txn.open_table(LEASED).map_err(super::storage)?;
        let mut calls = txn.open_table(LEASE_CALLS).map_err(super::storage)?;
        for (id, (n, expires, consumer)) in &old {
            // Each old lease becomes a call of its own: same number, end and holder.
            leased
                .insert(id, (*n, *expires, *n, consumer.as_str()))
                .map_err(super::storage)?;
            calls.insert((*expires, *n), 1).map_err(super::storage)?;
        }
        drop((leased, calls));
        txn.delete_table(V1_INFLIGHT).map_err(super::storage)?;
        txn.delete_table(V1_LEASES).map_err(super::storage)?;
        tracing::info!(
            queue = %path.display(),
            leases = old.len(),
            "migrated the embedded queue from on-disk format 1 to {FORMAT_VERSION}"
        );
    }
    meta.insert(FORMAT, FORMAT_VERSION)
        .map_err(super::storage)?;
    Ok(())
}

/// The delivery-order key: priority descending, then retry_at, then arrival.
pub(super) fn schedule_key(m: &Message) -> (u8, u64, u64) {
    (u8::MAX - m.priority, m.retry_at.as_millis(), m.id.0)
}

/// Every table, open in one write transaction.
pub(super) struct Tables<'t> {
    messages: Table<'t, u64, &'static [u8]>,
    schedule: Table<'t, (u8, u64, u64), ()>,
    leased: Table<'t, u64, (u64, u64, u64, &'static str)>,
    lease_calls: Table<'t, (u64, u64), u64>,
    hashes: Table<'t, &'static [u8], u64>,
    dead: Table<'t, u64, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
    next_id: u64,
    next_lease: u64,
    /// Leases ended in this transaction, per `lease_calls` row: applied by
    /// [`Tables::settle`] (one update per call, not one per message).
    ended: std::collections::BTreeMap<(u64, u64), u64>,
}

impl<'t> Tables<'t> {
    pub(super) fn open(txn: &'t WriteTransaction) -> Result<Self> {
        let meta = txn.open_table(META).map_err(super::storage)?;
        let next_id = meta
            .get(NEXT_ID)
            .map_err(super::storage)?
            .map_or(1, |v| v.value());
        let next_lease = meta
            .get(NEXT_LEASE)
            .map_err(super::storage)?
            .map_or(1, |v| v.value());
        Ok(Tables {
            messages: txn.open_table(MESSAGES).map_err(super::storage)?,
            schedule: txn.open_table(SCHEDULE).map_err(super::storage)?,
            leased: txn.open_table(LEASED).map_err(super::storage)?,
            lease_calls: txn.open_table(LEASE_CALLS).map_err(super::storage)?,
            hashes: txn.open_table(HASHES).map_err(super::storage)?,
            dead: txn.open_table(DEAD).map_err(super::storage)?,
            meta,
            next_id,
            next_lease,
            ended: std::collections::BTreeMap::new(),
        })
    }

    /// Writes the counters back; call before committing.
    pub(super) fn close(mut self) -> Result<()> {
        self.settle()?;
        self.meta
            .insert(NEXT_ID, self.next_id)
            .map_err(super::storage)?;
        self.meta
            .insert(NEXT_LEASE, self.next_lease)
            .map_err(super::storage)?;
        Ok(())
    }

    fn message(&self, id: u64) -> Result<Option<Message>> {
        match self.messages.get(id).map_err(super::storage)? {
            Some(v) => record::decode(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn put(&mut self, m: &Message) -> Result<()> {
        self.messages
            .insert(m.id.0, record::encode(m).as_slice())
            .map_err(super::storage)?;
        Ok(())
    }

    /// Puts `m` (stored already) in the schedule.
    fn schedule(&mut self, m: &Message) -> Result<()> {
        self.schedule
            .insert(schedule_key(m), ())
            .map_err(super::storage)?;
        Ok(())
    }

    /// Ends a lease's bookkeeping; returns its lease number, if it was leased. Its lease
    /// call's count goes down in [`Tables::settle`].
    fn end_lease(&mut self, id: u64) -> Result<Option<u64>> {
        let Some((lease_no, expires, call)) =
            self.leased.remove(id).map_err(super::storage)?.map(|v| {
                let (n, e, c, _) = v.value();
                (n, e, c)
            })
        else {
            return Ok(None);
        };
        *self.ended.entry((expires, call)).or_insert(0) += 1;
        Ok(Some(lease_no))
    }

    /// Counts the leases ended so far down in their `lease_calls` rows; a row whose leases
    /// have all ended goes.
    fn settle(&mut self) -> Result<()> {
        for (key, n) in std::mem::take(&mut self.ended) {
            let left = self
                .lease_calls
                .get(key)
                .map_err(super::storage)?
                .map(|v| v.value());
            match left {
                Some(left) if left > n => {
                    self.lease_calls
                        .insert(key, left - n)
                        .map_err(super::storage)?;
                }
                Some(_) => {
                    self.lease_calls.remove(key).map_err(super::storage)?;
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Removes every trace of a queued message; returns `read(record)` if it was queued.
    /// Only the record's header is decoded for the removal itself (an ack copies no
    /// payload), and each table is touched once: `remove` hands back what it removed.
    fn remove_with<T>(
        &mut self,
        id: u64,
        read: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<Option<T>> {
        let (h, out) = {
            let Some(v) = self.messages.remove(id).map_err(super::storage)? else {
                return Ok(None);
            };
            let bytes = v.value();
            (record::header(bytes)?, read(bytes)?)
        };
        let owner = self
            .hashes
            .remove(h.hash.as_slice())
            .map_err(super::storage)?
            .map(|v| v.value());
        if let Some(other) = owner.filter(|&o| o != id) {
            // The hash belongs to another queued copy: put it back.
            self.hashes
                .insert(h.hash.as_slice(), other)
                .map_err(super::storage)?;
        }
        if self.end_lease(id)?.is_none() {
            self.schedule
                .remove((u8::MAX - h.priority, h.retry_at, id))
                .map_err(super::storage)?;
        }
        Ok(Some(out))
    }

    fn queued_hash(&self, h: &PayloadHash) -> Result<Option<u64>> {
        Ok(self
            .hashes
            .get(h.0.as_slice())
            .map_err(super::storage)?
            .map(|v| v.value()))
    }

    fn enqueue(&mut self, m: &Message) -> Result<()> {
        self.put(m)?;
        self.schedule(m)?;
        self.hashes
            .insert(m.payload_hash.0.as_slice(), m.id.0)
            .map_err(super::storage)?;
        Ok(())
    }

    pub(super) fn append(&mut self, batch: &[NewMessage], now: Timestamp) -> Result<Vec<Appended>> {
        let mut out = Vec::with_capacity(batch.len());
        for n in batch {
            let hash = PayloadHash::of(&n.payload);
            let id = MessageId(self.next_id);
            // One descent for the de-duplication check and the insert: a queued copy's id
            // comes back, and is put back (duplicates are the rare case).
            let queued = self
                .hashes
                .insert(hash.0.as_slice(), id.0)
                .map_err(super::storage)?
                .map(|v| v.value());
            if let Some(other) = queued {
                self.hashes
                    .insert(hash.0.as_slice(), other)
                    .map_err(super::storage)?;
                out.push(Appended::Duplicate(MessageId(other)));
                continue;
            }
            self.next_id += 1;
            let key = (
                u8::MAX - n.priority,
                n.retry_at.unwrap_or(now).as_millis(),
                id.0,
            );
            self.messages
                .insert(id.0, record::encode_new(n, id, &hash, now).as_slice())
                .map_err(super::storage)?;
            self.schedule.insert(key, ()).map_err(super::storage)?;
            out.push(Appended::New(id));
        }
        Ok(out)
    }

    /// Returns expired leases to the schedule, then leases up to `max` due messages.
    pub(super) fn lease(
        &mut self,
        max: usize,
        now: Timestamp,
        lease_timeout: Duration,
        consumer: &str,
    ) -> Result<Vec<Lease>> {
        self.expire_all(now)?;
        let due = due_keys(&self.schedule, now, max)?;
        let expires_at = now.saturating_add(lease_timeout);
        let call = self.next_lease;
        let mut out = Vec::with_capacity(due.len());
        for key in due {
            self.schedule.remove(key).map_err(super::storage)?;
            let Some(message) = self.message(key.2)? else {
                return Err(crate::Error::corrupt(format!(
                    "message {} is scheduled but not stored",
                    key.2
                )));
            };
            let token = LeaseToken(self.next_lease);
            self.next_lease += 1;
            self.leased
                .insert(key.2, (token.0, expires_at.as_millis(), call, consumer))
                .map_err(super::storage)?;
            out.push(Lease {
                message,
                token,
                expires_at,
            });
        }
        if !out.is_empty() {
            self.lease_calls
                .insert((expires_at.as_millis(), call), out.len() as u64)
                .map_err(super::storage)?;
        }
        Ok(out)
    }

    /// Expires every lease that ended by `now`. Cheap when nothing expired (one range read
    /// of `lease_calls`); otherwise one scan of `leased`.
    fn expire_all(&mut self, now: Timestamp) -> Result<()> {
        self.settle()?;
        let ended = ..=(now.as_millis(), u64::MAX);
        if self
            .lease_calls
            .range(ended)
            .map_err(super::storage)?
            .next()
            .is_none()
        {
            return Ok(());
        }
        let expired: Vec<u64> = self
            .leased
            .iter()
            .map_err(super::storage)?
            .filter_map(|r| match r {
                Ok((k, v)) if v.value().1 <= now.as_millis() => Some(Ok(k.value())),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(super::storage)?;
        for id in expired {
            self.expire(id, now)?;
        }
        self.settle()?;
        // Every lease of these calls has ended now.
        self.lease_calls
            .retain_in(ended, |_, _| false)
            .map_err(super::storage)?;
        Ok(())
    }

    /// A lease that ran out without an ack, reschedule or dead-letter counts as a failed
    /// attempt (its holder died, hung, or was killed by the message itself): back in the
    /// schedule at its old `retry_at`, or a dead letter once the attempts are exhausted.
    fn expire(&mut self, id: u64, now: Timestamp) -> Result<()> {
        self.end_lease(id)?;
        let Some(mut m) = self.message(id)? else {
            return Ok(());
        };
        let attempts = m.attempts.saturating_add(1);
        if crate::exhausted(attempts, m.max_retries) {
            let reason = crate::lease_expired_reason(m.max_retries);
            self.kill(MessageId(id), &reason, now, attempts)?;
            return Ok(());
        }
        m.attempts = attempts;
        m.last_error = Some(crate::LEASE_EXPIRED.to_owned());
        self.put(&m)?;
        self.schedule(&m)
    }

    pub(super) fn ack(&mut self, ids: &[MessageId]) -> Result<u64> {
        let mut n = 0;
        for id in ids {
            if self.remove_with(id.0, |_| Ok(()))?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    fn lease_is_current(&self, id: MessageId, token: LeaseToken) -> Result<bool> {
        Ok(self
            .leased
            .get(id.0)
            .map_err(super::storage)?
            .is_some_and(|v| v.value().0 == token.0))
    }

    pub(super) fn reschedule(
        &mut self,
        id: MessageId,
        token: LeaseToken,
        retry_at: Timestamp,
        error: &str,
        now: Timestamp,
    ) -> Result<Rescheduled> {
        if !self.lease_is_current(id, token)? {
            return Ok(Rescheduled::LeaseLost);
        }
        let Some(mut m) = self.message(id.0)? else {
            return Ok(Rescheduled::LeaseLost);
        };
        let attempts = m.attempts.saturating_add(1);
        if crate::exhausted(attempts, m.max_retries) {
            self.kill(id, error, now, attempts)?;
            return Ok(Rescheduled::DeadLettered);
        }
        self.end_lease(id.0)?;
        m.attempts = attempts;
        m.retry_at = retry_at;
        m.last_error = Some(error.to_owned());
        m.pending_shutdown = false;
        self.put(&m)?;
        self.schedule(&m)?;
        Ok(Rescheduled::Scheduled { attempts, retry_at })
    }

    fn kill(&mut self, id: MessageId, reason: &str, now: Timestamp, attempts: u32) -> Result<()> {
        if let Some(mut m) = self.remove_with(id.0, record::decode)? {
            m.attempts = attempts;
            m.last_error = Some(reason.to_owned());
            self.dead
                .insert(id.0, record::encode_dead(&m, reason, now).as_slice())
                .map_err(super::storage)?;
        }
        Ok(())
    }

    pub(super) fn dead_letter(
        &mut self,
        id: MessageId,
        token: LeaseToken,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool> {
        if !self.lease_is_current(id, token)? {
            return Ok(false);
        }
        let attempts = self.message(id.0)?.map_or(0, |m| m.attempts);
        self.kill(id, reason, now, attempts)?;
        Ok(true)
    }

    pub(super) fn release(&mut self, consumer: &str) -> Result<u64> {
        let mine: Vec<u64> = self
            .leased
            .iter()
            .map_err(super::storage)?
            .filter_map(|r| match r {
                Ok((k, v)) if v.value().3 == consumer => Some(Ok(k.value())),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(super::storage)?;
        let mut n = 0;
        for id in mine {
            self.end_lease(id)?;
            if let Some(mut m) = self.message(id)? {
                m.pending_shutdown = true;
                self.put(&m)?;
                self.schedule(&m)?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn dead_ids(&self, sel: &Selection) -> Result<Vec<u64>> {
        match sel {
            Selection::Ids(ids) => {
                let mut out = Vec::new();
                for id in ids {
                    if self.dead.get(id.0).map_err(super::storage)?.is_some() {
                        out.push(id.0);
                    }
                }
                Ok(out)
            }
            Selection::All => self
                .dead
                .iter()
                .map_err(super::storage)?
                .map(|r| r.map(|(k, _)| k.value()))
                .collect::<std::result::Result<_, _>>()
                .map_err(super::storage),
        }
    }

    pub(super) fn replay(&mut self, sel: &Selection, now: Timestamp) -> Result<Replayed> {
        let mut out = Replayed::default();
        for id in self.dead_ids(sel)? {
            let Some(bytes) = self.dead.remove(id).map_err(super::storage)? else {
                continue;
            };
            let d = record::decode_dead(bytes.value())?;
            drop(bytes);
            if self.queued_hash(&d.message.payload_hash)?.is_some() {
                out.duplicates += 1;
                continue;
            }
            let m = crate::revived(d.message, now);
            self.enqueue(&m)?;
            out.replayed += 1;
        }
        Ok(out)
    }

    pub(super) fn purge(&mut self, sel: &Selection) -> Result<u64> {
        let mut n = 0;
        for id in self.dead_ids(sel)? {
            if self.dead.remove(id).map_err(super::storage)?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// The first `max` schedule keys that are due at `now`, in delivery order: within each
/// priority the due keys are a prefix (ordered by retry_at), so the scan jumps to the next
/// priority at the first key that is not due.
pub(super) fn due_keys<T>(schedule: &T, now: Timestamp, max: usize) -> Result<Vec<(u8, u64, u64)>>
where
    T: ReadableTable<(u8, u64, u64), ()>,
{
    let mut out = Vec::new();
    let mut prio: u16 = 0;
    while out.len() < max && prio <= u16::from(u8::MAX) {
        let p = prio as u8;
        let range = (p, 0, 0)..=(p, now.as_millis(), u64::MAX);
        for r in schedule.range(range).map_err(super::storage)? {
            if out.len() >= max {
                break;
            }
            let (k, _) = r.map_err(super::storage)?;
            out.push(k.value());
        }
        // Jump to the next priority present in the table.
        match schedule
            .range((p.saturating_add(1), 0, 0)..)
            .map_err(super::storage)?
            .next()
        {
            Some(r) if p < u8::MAX => prio = u16::from(r.map_err(super::storage)?.0.value().0),
            _ => break,
        }
    }
    Ok(out)
}

/// How many schedule keys are due at `now`.
pub(super) fn count_due<T>(schedule: &T, now: Timestamp) -> Result<u64>
where
    T: ReadableTable<(u8, u64, u64), ()>,
{
    Ok(due_keys(schedule, now, usize::MAX)?.len() as u64)
}

/// Counts of a table.
pub(super) fn len<T: ReadableTableMetadata>(t: &T) -> Result<u64> {
    t.len().map_err(super::storage)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{EmbeddedConfig, EmbeddedQueue, ManualClock, QueueOptions};

    const T0: u64 = 1_700_000_000_000;

    fn message(id: u64, payload: &str) -> Message {
        Message {
            id: MessageId(id),
            payload: payload.as_bytes().to_vec(),
            priority: 0,
            retry_at: Timestamp::from_millis(T0),
            attempts: 0,
            max_retries: 5,
            payload_hash: PayloadHash::of(payload.as_bytes()),
            enqueued_at: Timestamp::from_millis(T0),
            index: None,
            last_error: None,
            pending_shutdown: false,
        }
    }

    fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> crate::Result<EmbeddedQueue> {
        let mut c = EmbeddedConfig::new(dir);
        c.options = QueueOptions::default()
            .clock(Arc::clone(clock) as Arc<dyn crate::Clock>)
            .consumer("new");
        EmbeddedQueue::open(c)
    }

    /// Writes what format 1 left: message 1 queued, message 2 leased (lease 7, ends at
    /// T0 + 1 s) by a consumer that is gone.
    fn write_format_1(path: &std::path::Path) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut messages = txn.open_table(MESSAGES).unwrap();
            let mut schedule = txn.open_table(SCHEDULE).unwrap();
            let mut hashes = txn.open_table(HASHES).unwrap();
            let mut leases = txn.open_table(V1_LEASES).unwrap();
            let mut inflight = txn.open_table(V1_INFLIGHT).unwrap();
            let mut meta = txn.open_table(META).unwrap();
            txn.open_table(DEAD).unwrap();
            for m in [message(1, "queued"), message(2, "leased")] {
                messages
                    .insert(m.id.0, record::encode(&m).as_slice())
                    .unwrap();
                hashes.insert(m.payload_hash.0.as_slice(), m.id.0).unwrap();
            }
            schedule
                .insert(schedule_key(&message(1, "queued")), ())
                .unwrap();
            leases.insert((T0 + 1000, 2), ()).unwrap();
            inflight.insert(2, (7, T0 + 1000, "old-consumer")).unwrap();
            meta.insert(NEXT_ID, 3).unwrap();
            meta.insert(NEXT_LEASE, 8).unwrap();
        }
        txn.commit().unwrap();
    }

    #[tokio::test]
    async fn a_format_1_queue_is_migrated_and_its_leases_still_expire() {
        let dir = tempfile::tempdir().unwrap();
        write_format_1(&dir.path().join(super::super::DB_FILE));
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir.path(), &clock).unwrap();
        let s = q.stats().await.unwrap();
        assert_eq!((s.backlog, s.leased), (2, 1));
        // The queued one is leased; the old lease still holds message 2.
        let l = q.lease(10).await.unwrap();
        assert_eq!(l.iter().map(|l| l.id().0).collect::<Vec<_>>(), [1]);
        assert!(
            l[0].token.0 >= 8,
            "lease numbers continue: {:?}",
            l[0].token
        );
        q.ack(&[l[0].id()]).await.unwrap();
        // At its old end the old lease expires: an attempt counted, leased again.
        clock.set(Timestamp::from_millis(T0 + 1000));
        let l = q.lease(10).await.unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].id().0, 2);
        assert_eq!(l[0].message.attempts, 1);
        assert_eq!(
            l[0].message.last_error.as_deref(),
            Some(crate::LEASE_EXPIRED)
        );
        q.close().await.unwrap();
        // The file is format 2 now, without the old tables, and opens again as it is.
        {
            let db = redb::Database::open(dir.path().join(super::super::DB_FILE)).unwrap();
            let txn = db.begin_read().unwrap();
            let names: Vec<String> = txn
                .list_tables()
                .unwrap()
                .map(|t| t.name().to_owned())
                .collect();
            assert!(
                !names.iter().any(|n| n == "inflight" || n == "leases"),
                "{names:?}"
            );
            let meta = txn.open_table(META).unwrap();
            assert_eq!(meta.get(FORMAT).unwrap().unwrap().value(), FORMAT_VERSION);
        }
        let q = open(dir.path(), &clock).unwrap();
        assert_eq!(q.stats().await.unwrap().leased, 1);
        q.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_newer_format_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        open(dir.path(), &clock).unwrap().close().await.unwrap();
        {
            let db = redb::Database::open(dir.path().join(super::super::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META)
                .unwrap()
                .insert(FORMAT, FORMAT_VERSION + 1)
                .unwrap();
            txn.commit().unwrap();
        }
        let e = open(dir.path(), &clock).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("format 3") && text.contains("newer searchwire"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn lease_call_rows_go_once_their_leases_end() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir.path(), &clock).unwrap();
        let batch = (0..10)
            .map(|i| crate::NewMessage::new(format!("m{i}")))
            .collect();
        q.append(batch).await.unwrap();
        let a = q.lease(4).await.unwrap();
        let b = q.lease(6).await.unwrap();
        let rows = |q: &EmbeddedQueue| {
            let q = q.clone();
            async move {
                q.read(|txn| {
                    txn.open_table(LEASE_CALLS)
                        .map_err(super::super::storage)?
                        .len()
                        .map_err(super::super::storage)
                })
                .await
                .unwrap()
            }
        };
        assert_eq!(rows(&q).await, 2, "one row per lease call");
        let ids: Vec<MessageId> = a.iter().map(|l| l.id()).collect();
        q.ack(&ids[..3]).await.unwrap();
        assert_eq!(
            rows(&q).await,
            2,
            "one lease of the first call is still out"
        );
        q.reschedule(&a[3], Timestamp::from_millis(T0 + 10), "x")
            .await
            .unwrap();
        assert_eq!(rows(&q).await, 1, "every lease of the first call ended");
        // The second call's leases expire: all six come back, and its row goes.
        clock.advance(crate::DEFAULT_LEASE_TIMEOUT + Duration::from_millis(1));
        let again = q.lease(100).await.unwrap();
        assert_eq!(again.len(), 7, "six expired and one rescheduled");
        assert!(b.iter().all(|l| again.iter().any(|x| x.id() == l.id())));
        assert_eq!(rows(&q).await, 1, "only the new call's row");
        q.close().await.unwrap();
    }
}
