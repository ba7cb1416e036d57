//! The queue's operations, each a change of the in-memory state and the rows that record
//! it: append, lease, ack, reschedule, dead-letter, release, replay and purge.

use std::time::Duration;

use redb::ReadableTable;

use super::{Call, Txn};
use crate::clock::Timestamp;
use crate::embedded::storage;
use crate::embedded::tables::{self, CallEntry, SlotHeader};
use crate::error::{Error, Result};
use crate::message::{
    Appended, Lease, LeaseToken, MessageId, NewMessage, PayloadHash, Replayed, Rescheduled,
    Selection,
};
use crate::record;

impl<'s, 't> Txn<'s, 't> {
    pub(in crate::embedded) fn append(
        &mut self,
        batch: &[NewMessage],
        now: Timestamp,
    ) -> Result<Vec<Appended>> {
        let mut out = Vec::with_capacity(batch.len());
        for n in batch {
            let hash = PayloadHash::of(&n.payload);
            if let Some(&other) = self.st.hashes.get(&hash.0) {
                out.push(Appended::Duplicate(MessageId(other)));
                continue;
            }
            let id = MessageId(self.st.next_id);
            self.st.next_id += 1;
            let h = SlotHeader {
                id: id.0,
                priority: n.priority,
                retry_at: n.retry_at.unwrap_or(now).as_millis(),
                enqueued_at: now.as_millis(),
                hash: hash.0,
            };
            self.enqueue(id.0, h, &record::encode_new(n, id, &hash, now))?;
            out.push(Appended::New(id));
        }
        Ok(out)
    }

    /// Returns expired leases to the queue, then leases up to `max` due messages.
    pub(in crate::embedded) fn lease(
        &mut self,
        max: usize,
        now: Timestamp,
        lease_timeout: Duration,
        consumer: &str,
    ) -> Result<Vec<Lease>> {
        self.expire_all(now)?;
        let due = self.st.due_keys(now, max);
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let expires_at = now.saturating_add(lease_timeout);
        let call = self.st.next_lease;
        let mut entries = Vec::with_capacity(due.len());
        for key in &due {
            self.st.schedule.remove(key);
            let id = key.2;
            let loc = self.st.by_id.get_mut(&id).ok_or_else(|| {
                Error::corrupt(format!("message {id} is scheduled but not stored"))
            })?;
            loc.lease = Some((call + entries.len() as u64, call));
            entries.push(CallEntry {
                id,
                seg: loc.seg,
                slot: loc.slot,
            });
        }
        self.st.next_lease += entries.len() as u64;
        let at: Vec<(u64, u32)> = entries.iter().map(|e| (e.seg, e.slot)).collect();
        let recs = self.records(&at)?;
        let mut out = Vec::with_capacity(entries.len());
        for (i, r) in recs.iter().enumerate() {
            out.push(Lease {
                message: record::decode(r)?,
                token: LeaseToken(call + i as u64),
                expires_at,
            });
        }
        self.calls
            .insert(
                call,
                tables::encode_call(expires_at.as_millis(), consumer, &entries).as_slice(),
            )
            .map_err(storage)?;
        self.st.leased += entries.len() as u64;
        self.st.ends.insert((expires_at.as_millis(), call));
        self.st.calls.insert(
            call,
            Call {
                expires_at: expires_at.as_millis(),
                consumer: consumer.into(),
                outstanding: entries.len(),
                ids: entries.iter().map(|e| e.id).collect(),
            },
        );
        Ok(out)
    }

    /// Expires every lease call that ended by `now`: each of its leases still out counts a
    /// failed attempt (its holder died, hung, or was killed by the message itself) and
    /// returns to the queue at its old `retry_at`, or becomes a dead letter once the
    /// attempts are exhausted.
    pub(super) fn expire_all(&mut self, now: Timestamp) -> Result<()> {
        while let Some(&(end, call)) = self.st.ends.first() {
            if end > now.as_millis() {
                break;
            }
            for id in self.held_by(call) {
                let (seg, slot) = self.loc(id)?;
                let mut m = self.message(seg, slot)?;
                let attempts = m.attempts.saturating_add(1);
                if crate::exhausted(attempts, m.max_retries) {
                    m.attempts = attempts;
                    let reason = crate::lease_expired_reason(m.max_retries);
                    self.kill(m, &reason, now)?;
                    continue;
                }
                self.end_lease(id)?;
                m.attempts = attempts;
                m.last_error = Some(crate::LEASE_EXPIRED.to_owned());
                self.requeue(&m)?;
            }
            // Every lease ended, so the call is gone; make sure of it.
            if self.st.calls.remove(&call).is_some() {
                self.calls.remove(call).map_err(storage)?;
            }
            self.st.ends.remove(&(end, call));
        }
        Ok(())
    }

    /// The messages a lease call still holds.
    pub(super) fn held_by(&self, call: u64) -> Vec<u64> {
        let Some(c) = self.st.calls.get(&call) else {
            return Vec::new();
        };
        c.ids
            .iter()
            .copied()
            .filter(|id| {
                self.st
                    .by_id
                    .get(id)
                    .and_then(|l| l.lease)
                    .is_some_and(|(_, c)| c == call)
            })
            .collect()
    }

    pub(super) fn loc(&self, id: u64) -> Result<(u64, u32)> {
        self.st
            .by_id
            .get(&id)
            .map(|l| (l.seg, l.slot))
            .ok_or_else(|| Error::corrupt(format!("message {id} is not stored")))
    }

    pub(super) fn lease_is_current(&self, id: MessageId, token: LeaseToken) -> bool {
        self.st
            .by_id
            .get(&id.0)
            .and_then(|l| l.lease)
            .is_some_and(|(t, _)| t == token.0)
    }

    pub(in crate::embedded) fn ack(&mut self, ids: &[MessageId]) -> Result<u64> {
        let mut n = 0;
        for id in ids {
            if self.remove(id.0)?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    pub(in crate::embedded) fn reschedule(
        &mut self,
        id: MessageId,
        token: LeaseToken,
        retry_at: Timestamp,
        error: &str,
        now: Timestamp,
        counted: bool,
    ) -> Result<Rescheduled> {
        if !self.lease_is_current(id, token) {
            return Ok(Rescheduled::LeaseLost);
        }
        let (seg, slot) = self.loc(id.0)?;
        let mut m = self.message(seg, slot)?;
        // A deferral (not counted) keeps the attempts and never dead-letters.
        let attempts = if counted {
            m.attempts.saturating_add(1)
        } else {
            m.attempts
        };
        if counted && crate::exhausted(attempts, m.max_retries) {
            m.attempts = attempts;
            self.kill(m, error, now)?;
            return Ok(Rescheduled::DeadLettered);
        }
        self.end_lease(id.0)?;
        m.attempts = attempts;
        m.retry_at = retry_at;
        m.last_error = Some(error.to_owned());
        m.pending_shutdown = false;
        self.requeue(&m)?;
        Ok(Rescheduled::Scheduled { attempts, retry_at })
    }

    pub(in crate::embedded) fn dead_letter(
        &mut self,
        id: MessageId,
        token: LeaseToken,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool> {
        if !self.lease_is_current(id, token) {
            return Ok(false);
        }
        let (seg, slot) = self.loc(id.0)?;
        let m = self.message(seg, slot)?;
        self.kill(m, reason, now)?;
        Ok(true)
    }

    pub(in crate::embedded) fn release(&mut self, consumer: &str) -> Result<u64> {
        let mine: Vec<u64> = self
            .st
            .calls
            .iter()
            .filter(|(_, c)| &*c.consumer == consumer)
            .map(|(&k, _)| k)
            .collect();
        let mut n = 0;
        for call in mine {
            for id in self.held_by(call) {
                let (seg, slot) = self.loc(id)?;
                let mut m = self.message(seg, slot)?;
                self.end_lease(id)?;
                m.pending_shutdown = true;
                self.requeue(&m)?;
                n += 1;
            }
        }
        Ok(n)
    }

    pub(super) fn dead_ids(&self, sel: &Selection) -> Result<Vec<u64>> {
        match sel {
            Selection::Ids(ids) => {
                let mut out = Vec::new();
                for id in ids {
                    if self.dead.get(id.0).map_err(storage)?.is_some() {
                        out.push(id.0);
                    }
                }
                Ok(out)
            }
            Selection::All => self
                .dead
                .iter()
                .map_err(storage)?
                .map(|r| r.map(|(k, _)| k.value()))
                .collect::<std::result::Result<_, _>>()
                .map_err(storage),
        }
    }

    pub(in crate::embedded) fn replay(
        &mut self,
        sel: &Selection,
        now: Timestamp,
    ) -> Result<Replayed> {
        let mut out = Replayed::default();
        for id in self.dead_ids(sel)? {
            let Some(bytes) = self.dead.remove(id).map_err(storage)? else {
                continue;
            };
            let d = record::decode_dead(bytes.value())?;
            drop(bytes);
            self.st.dead = self.st.dead.saturating_sub(1);
            if self.st.hashes.contains_key(&d.message.payload_hash.0) {
                out.duplicates += 1;
                continue;
            }
            let m = crate::revived(d.message, now);
            let h = SlotHeader {
                id,
                priority: m.priority,
                retry_at: m.retry_at.as_millis(),
                enqueued_at: m.enqueued_at.as_millis(),
                hash: m.payload_hash.0,
            };
            self.enqueue(id, h, &record::encode(&m))?;
            out.replayed += 1;
        }
        Ok(out)
    }

    pub(in crate::embedded) fn purge(&mut self, sel: &Selection) -> Result<u64> {
        let mut n = 0;
        for id in self.dead_ids(sel)? {
            if self.dead.remove(id).map_err(storage)?.is_some() {
                n += 1;
                self.st.dead = self.st.dead.saturating_sub(1);
            }
        }
        Ok(n)
    }
}
