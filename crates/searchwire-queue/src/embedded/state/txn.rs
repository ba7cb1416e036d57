//! The transaction's own machinery: opening the tables, writing records into the commit's
//! segment, marking slots done, straggler compaction, and closing (segment, done bitmaps,
//! counters).

use std::collections::BTreeSet;

use redb::{ReadableTable, WriteTransaction};

use super::{
    Builder, Loc, Seg, State, Txn, BODY_SLACK, COMPACT_RATIO, SEGMENT_BYTES, SEGMENT_SLOTS,
};
use crate::clock::Timestamp;
use crate::embedded::storage;
use crate::embedded::tables::{self, CallEntry, SlotHeader};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::record;

impl<'s, 't> Txn<'s, 't> {
    pub(in crate::embedded) fn open(txn: &'t WriteTransaction, st: &'s mut State) -> Result<Self> {
        let mut calls = txn.open_table(tables::CALLS).map_err(storage)?;
        for call in std::mem::take(&mut st.stale_calls) {
            calls.remove(call).map_err(storage)?;
        }
        Ok(Txn {
            st,
            segments: txn.open_table(tables::SEGMENTS).map_err(storage)?,
            bodies: txn.open_table(tables::BODIES).map_err(storage)?,
            done: txn.open_table(tables::SEGMENT_DONE).map_err(storage)?,
            calls,
            dead: txn.open_table(tables::DEAD).map_err(storage)?,
            meta: txn.open_table(tables::META).map_err(storage)?,
            builder: None,
            dirty: BTreeSet::new(),
        })
    }

    /// Compacts the mostly-done segments it touched ([`Txn::compact`]), then writes the open
    /// segment, the changed done bitmaps (a segment with no live slot left goes) and the
    /// counters.
    pub(in crate::embedded) fn close(mut self) -> Result<()> {
        self.compact()?;
        self.flush()?;
        for seg in std::mem::take(&mut self.dirty) {
            let Some(s) = self.st.segs.get(&seg) else {
                continue;
            };
            if s.live == 0 {
                self.st.segs.remove(&seg);
                self.segments.remove(seg).map_err(storage)?;
                self.bodies.remove(seg).map_err(storage)?;
                self.done.remove(seg).map_err(storage)?;
            } else {
                self.done.insert(seg, s.done.as_slice()).map_err(storage)?;
            }
        }
        for (k, v) in [
            (tables::NEXT_ID, self.st.next_id),
            (tables::NEXT_LEASE, self.st.next_lease),
            (tables::NEXT_SEGMENT, self.st.next_seg),
        ] {
            self.meta.insert(k, v).map_err(storage)?;
        }
        Ok(())
    }

    /// Straggler compaction (see [`COMPACT_RATIO`]): every segment this transaction touched
    /// that an earlier one wrote and that is mostly done has its live records copied, as
    /// they are (ids, attempts, errors, flags), into the open segment with their headers
    /// (priority, retry_at, enqueued_at, hash): the delivery order and de-duplication do not
    /// change. Its old slots become done, so the segment goes. A leased message keeps its
    /// lease: its call's row is rewritten with the new slot (an ended lease's entry gets
    /// segment 0, which never exists, so it stays ended on the next open).
    pub(super) fn compact(&mut self) -> Result<()> {
        let open = self.builder.as_ref().map(|b| b.seg);
        let sparse: Vec<u64> = self
            .dirty
            .iter()
            .copied()
            .filter(|&seg| Some(seg) != open)
            .filter(|seg| {
                self.st.segs.get(seg).is_some_and(|g| {
                    g.live > 0 && (g.live as usize) * COMPACT_RATIO <= g.done.len() * 8
                })
            })
            .collect();
        let mut calls = BTreeSet::new();
        for seg in sparse {
            let Some(done) = self.st.segs.get(&seg).map(|g| g.done.clone()) else {
                continue;
            };
            let header = match self.segments.get(seg).map_err(storage)? {
                Some(h) => tables::parse_header(seg, h.value())?,
                None => continue,
            };
            // The live slots whose message is still there, with their records.
            let mut moving = Vec::new();
            {
                let body = self.bodies.get(seg).map_err(storage)?.ok_or_else(|| {
                    Error::corrupt(format!("segment {seg} has live messages but no body"))
                })?;
                for (i, h) in header.iter().enumerate() {
                    let slot = i as u32;
                    let live = done.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) == 0);
                    let here = self
                        .st
                        .by_id
                        .get(&h.id)
                        .is_some_and(|l| (l.seg, l.slot) == (seg, slot));
                    if live && here {
                        let rec = tables::body_slot(seg, body.value(), slot)?.to_vec();
                        moving.push((slot, *h, rec));
                    }
                }
            }
            for (slot, h, rec) in moving {
                self.mark_done(seg, slot);
                let (nseg, nslot) = self.put(&h, &rec)?;
                if let Some(loc) = self.st.by_id.get_mut(&h.id) {
                    loc.seg = nseg;
                    loc.slot = nslot;
                    if let Some((_, call)) = loc.lease {
                        calls.insert(call);
                    }
                }
            }
        }
        for call in calls {
            let Some(c) = self.st.calls.get(&call) else {
                continue;
            };
            let entries: Vec<CallEntry> = c
                .ids
                .iter()
                .map(|&id| match self.st.by_id.get(&id) {
                    Some(l) if l.lease.is_some_and(|(_, lc)| lc == call) => CallEntry {
                        id,
                        seg: l.seg,
                        slot: l.slot,
                    },
                    _ => CallEntry {
                        id,
                        seg: 0,
                        slot: 0,
                    },
                })
                .collect();
            let row = tables::encode_call(c.expires_at, &c.consumer, &entries);
            self.calls.insert(call, row.as_slice()).map_err(storage)?;
        }
        Ok(())
    }

    /// Writes the open segment (unless every slot of it is done already).
    pub(super) fn flush(&mut self) -> Result<()> {
        let Some(b) = self.builder.take() else {
            return Ok(());
        };
        if self.st.segs.get(&b.seg).is_some_and(|s| s.live > 0) {
            self.segments
                .insert(b.seg, b.header.as_slice())
                .map_err(storage)?;
            self.bodies
                .insert(
                    b.seg,
                    tables::encode_body(&b.offsets, &b.records).as_slice(),
                )
                .map_err(storage)?;
        }
        Ok(())
    }

    /// Adds a record to the open segment; returns its (segment, slot).
    pub(super) fn put(&mut self, h: &SlotHeader, rec: &[u8]) -> Result<(u64, u32)> {
        let full = |b: &Builder| {
            let body = 4 * (b.offsets.len() + 3) + b.records.len() + rec.len() + BODY_SLACK;
            !b.offsets.is_empty() && (b.offsets.len() >= SEGMENT_SLOTS || body > SEGMENT_BYTES)
        };
        if self.builder.as_ref().is_some_and(full) {
            self.flush()?;
        }
        let b = match &mut self.builder {
            Some(b) => b,
            None => {
                let seg = self.st.next_seg;
                self.st.next_seg += 1;
                self.st.segs.insert(
                    seg,
                    Seg {
                        live: 0,
                        done: Vec::new(),
                    },
                );
                self.builder.insert(Builder {
                    seg,
                    header: Vec::with_capacity(64 * 1024),
                    offsets: Vec::with_capacity(1024),
                    records: Vec::with_capacity(1 << 20),
                })
            }
        };
        let slot = b.offsets.len() as u32;
        h.write(&mut b.header);
        b.offsets.push(b.records.len() as u32);
        b.records.extend_from_slice(rec);
        let seg = b.seg;
        if let Some(s) = self.st.segs.get_mut(&seg) {
            if slot % 8 == 0 {
                s.done.push(0);
            }
            s.live += 1;
        }
        Ok((seg, slot))
    }

    /// Marks a slot done.
    pub(super) fn mark_done(&mut self, seg: u64, slot: u32) {
        if let Some(s) = self.st.segs.get_mut(&seg) {
            let (byte, bit) = (slot as usize / 8, 1u8 << (slot % 8));
            if let Some(b) = s.done.get_mut(byte) {
                if *b & bit == 0 {
                    *b |= bit;
                    s.live = s.live.saturating_sub(1);
                }
            }
            self.dirty.insert(seg);
        }
    }

    /// The records at these (segment, slot)s, in order: each body is read once.
    pub(super) fn records(&self, at: &[(u64, u32)]) -> Result<Vec<Vec<u8>>> {
        let mut order: Vec<usize> = (0..at.len()).collect();
        order.sort_by_key(|&i| at[i]);
        let mut out = vec![Vec::new(); at.len()];
        let mut i = 0;
        while i < order.len() {
            let seg = at[order[i]].0;
            let mut j = i;
            if let Some(b) = self.builder.as_ref().filter(|b| b.seg == seg) {
                while j < order.len() && at[order[j]].0 == seg {
                    let slot = at[order[j]].1 as usize;
                    let start = b.offsets.get(slot).copied().unwrap_or(0) as usize;
                    let end = b
                        .offsets
                        .get(slot + 1)
                        .map_or(b.records.len(), |&e| e as usize);
                    out[order[j]] = b.records[start..end].to_vec();
                    j += 1;
                }
            } else {
                let body = self.bodies.get(seg).map_err(storage)?.ok_or_else(|| {
                    Error::corrupt(format!("segment {seg} has live messages but no body"))
                })?;
                while j < order.len() && at[order[j]].0 == seg {
                    out[order[j]] = tables::body_slot(seg, body.value(), at[order[j]].1)?.to_vec();
                    j += 1;
                }
            }
            i = j;
        }
        Ok(out)
    }

    pub(super) fn message(&self, seg: u64, slot: u32) -> Result<Message> {
        let r = self.records(&[(seg, slot)])?;
        record::decode(r.first().map_or(&[][..], Vec::as_slice))
    }

    /// A new queued message (append, replay): stored, scheduled, its hash taken.
    pub(super) fn enqueue(&mut self, id: u64, h: SlotHeader, rec: &[u8]) -> Result<()> {
        let (seg, slot) = self.put(&h, rec)?;
        let loc = Loc {
            seg,
            slot,
            priority: h.priority,
            retry_at: h.retry_at,
            enqueued_at: h.enqueued_at,
            hash: h.hash,
            lease: None,
        };
        self.st.schedule.insert(loc.key(id));
        self.st.hashes.insert(h.hash, id);
        self.st.by_id.insert(id, loc);
        Ok(())
    }

    /// A queued, not leased message rewritten (reschedule, expiry, release): its new record
    /// goes into the open segment, its old slot is done, and it is scheduled again.
    pub(super) fn requeue(&mut self, m: &Message) -> Result<()> {
        let id = m.id.0;
        let Some((seg, slot, hash, enqueued_at)) = self
            .st
            .by_id
            .get(&id)
            .map(|l| (l.seg, l.slot, l.hash, l.enqueued_at))
        else {
            return Ok(());
        };
        self.mark_done(seg, slot);
        let h = SlotHeader {
            id,
            priority: m.priority,
            retry_at: m.retry_at.as_millis(),
            enqueued_at,
            hash,
        };
        let (seg, slot) = self.put(&h, &record::encode(m))?;
        if let Some(loc) = self.st.by_id.get_mut(&id) {
            loc.seg = seg;
            loc.slot = slot;
            loc.priority = m.priority;
            loc.retry_at = h.retry_at;
            self.st.schedule.insert(loc.key(id));
        }
        Ok(())
    }

    /// Ends `id`'s lease if it has one; `true` if it had. The call's row goes with its last
    /// lease.
    pub(super) fn end_lease(&mut self, id: u64) -> Result<bool> {
        let Some((_, call)) = self.st.by_id.get_mut(&id).and_then(|l| l.lease.take()) else {
            return Ok(false);
        };
        self.st.leased = self.st.leased.saturating_sub(1);
        let last = match self.st.calls.get_mut(&call) {
            Some(c) => {
                c.outstanding = c.outstanding.saturating_sub(1);
                (c.outstanding == 0).then_some(c.expires_at)
            }
            None => None,
        };
        if let Some(expires_at) = last {
            self.st.calls.remove(&call);
            self.st.ends.remove(&(expires_at, call));
            self.calls.remove(call).map_err(storage)?;
        }
        Ok(true)
    }

    /// Removes every trace of a queued message; its location if it was queued.
    pub(super) fn remove(&mut self, id: u64) -> Result<Option<Loc>> {
        let leased = self.end_lease(id)?;
        let Some(loc) = self.st.by_id.remove(&id) else {
            return Ok(None);
        };
        if self.st.hashes.get(&loc.hash) == Some(&id) {
            self.st.hashes.remove(&loc.hash);
        }
        if !leased {
            self.st.schedule.remove(&loc.key(id));
        }
        self.mark_done(loc.seg, loc.slot);
        Ok(Some(loc))
    }

    /// Moves `m` (queued) to the dead letters with `reason`.
    pub(super) fn kill(&mut self, mut m: Message, reason: &str, now: Timestamp) -> Result<()> {
        if self.remove(m.id.0)?.is_some() {
            m.last_error = Some(reason.to_owned());
            self.dead
                .insert(m.id.0, record::encode_dead(&m, reason, now).as_slice())
                .map_err(storage)?;
            self.st.dead += 1;
        }
        Ok(())
    }
}
