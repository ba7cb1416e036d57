//! The embedded queue's tables and the operations on them, each run inside one redb write
//! transaction (several operations share one when the writer groups them).
//!
//! | table | key | value | holds |
//! | --- | --- | --- | --- |
//! | `messages` | id | record | every queued message, leased or not |
//! | `schedule` | (255 − priority, retry_at, id) | () | messages not leased, in delivery order |
//! | `leases` | (expires_at, id) | () | leased messages, by lease end |
//! | `inflight` | id | (lease number, expires_at, consumer) | who holds what |
//! | `hashes` | payload SHA-256 | id | de-duplication while queued |
//! | `dead` | id | dead-letter record | dead letters |
//! | `meta` | name | u64 | next id, next lease number |

use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction};

use crate::clock::Timestamp;
use crate::error::Result;
use crate::message::{
    Appended, Lease, LeaseToken, Message, MessageId, NewMessage, PayloadHash, Replayed,
    Rescheduled, Selection,
};
use crate::record;

pub(super) const MESSAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("messages");
pub(super) const SCHEDULE: TableDefinition<(u8, u64, u64), ()> = TableDefinition::new("schedule");
pub(super) const LEASES: TableDefinition<(u64, u64), ()> = TableDefinition::new("leases");
pub(super) const INFLIGHT: TableDefinition<u64, (u64, u64, &str)> =
    TableDefinition::new("inflight");
pub(super) const HASHES: TableDefinition<&[u8], u64> = TableDefinition::new("hashes");
pub(super) const DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead");
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const NEXT_ID: &str = "next_id";
const NEXT_LEASE: &str = "next_lease";

/// The delivery-order key: priority descending, then retry_at, then arrival.
pub(super) fn schedule_key(m: &Message) -> (u8, u64, u64) {
    (u8::MAX - m.priority, m.retry_at.as_millis(), m.id.0)
}

/// Every table, open in one write transaction.
pub(super) struct Tables<'t> {
    messages: Table<'t, u64, &'static [u8]>,
    schedule: Table<'t, (u8, u64, u64), ()>,
    leases: Table<'t, (u64, u64), ()>,
    inflight: Table<'t, u64, (u64, u64, &'static str)>,
    hashes: Table<'t, &'static [u8], u64>,
    dead: Table<'t, u64, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
    next_id: u64,
    next_lease: u64,
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
            leases: txn.open_table(LEASES).map_err(super::storage)?,
            inflight: txn.open_table(INFLIGHT).map_err(super::storage)?,
            hashes: txn.open_table(HASHES).map_err(super::storage)?,
            dead: txn.open_table(DEAD).map_err(super::storage)?,
            meta,
            next_id,
            next_lease,
        })
    }

    /// Writes the counters back; call before committing.
    pub(super) fn close(mut self) -> Result<()> {
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

    /// Ends a lease's bookkeeping; returns its lease number, if it was leased.
    fn end_lease(&mut self, id: u64) -> Result<Option<u64>> {
        let Some((lease_no, expires)) =
            self.inflight.remove(id).map_err(super::storage)?.map(|v| {
                let (n, e, _) = v.value();
                (n, e)
            })
        else {
            return Ok(None);
        };
        self.leases.remove((expires, id)).map_err(super::storage)?;
        Ok(Some(lease_no))
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
            if let Some(id) = self.queued_hash(&hash)? {
                out.push(Appended::Duplicate(MessageId(id)));
                continue;
            }
            let id = MessageId(self.next_id);
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
            self.hashes
                .insert(hash.0.as_slice(), id.0)
                .map_err(super::storage)?;
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
        let expired: Vec<u64> = self
            .leases
            .range(..=(now.as_millis(), u64::MAX))
            .map_err(super::storage)?
            .map(|r| r.map(|(k, _)| k.value().1))
            .collect::<std::result::Result<_, _>>()
            .map_err(super::storage)?;
        for id in expired {
            self.expire(id, now)?;
        }
        let due = due_keys(&self.schedule, now, max)?;
        let expires_at = now.saturating_add(lease_timeout);
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
            self.leases
                .insert((expires_at.as_millis(), key.2), ())
                .map_err(super::storage)?;
            self.inflight
                .insert(key.2, (token.0, expires_at.as_millis(), consumer))
                .map_err(super::storage)?;
            out.push(Lease {
                message,
                token,
                expires_at,
            });
        }
        Ok(out)
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
            .inflight
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
            .inflight
            .iter()
            .map_err(super::storage)?
            .filter_map(|r| match r {
                Ok((k, v)) if v.value().2 == consumer => Some(Ok(k.value())),
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
