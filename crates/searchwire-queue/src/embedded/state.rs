//! What the embedded queue keeps in memory — derived from the tables, rebuilt on open — and
//! the operations, each run by the writer inside one redb write transaction ([`Txn`]).
//!
//! The in-memory indexes answer every question an operation asks (is this payload queued?
//! which messages are due, in what order? who holds this lease?); the transaction only
//! writes: new records into one segment per commit, done bits per segment, one row per lease
//! call. If a transaction fails or is rolled back, the writer rebuilds this state from the
//! file ([`State::load`]), so memory never holds what the file does not.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use super::storage;
use super::tables::{self, CallEntry, SlotHeader};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::message::{
    Appended, Lease, LeaseToken, Message, MessageId, NewMessage, PayloadHash, Replayed,
    Rescheduled, Selection, Stats,
};
use crate::record;

/// A segment under construction closes at this many slots, or before its body would pass
/// this many bytes (a record larger than that gets a segment of its own). redb stores a
/// large value in a run of pages rounded up to a power of two, so a body just over 1 MiB
/// would take 2 MiB of file; and a lease reads a whole body.
const SEGMENT_SLOTS: usize = 4096;
const SEGMENT_BYTES: usize = 1 << 20;
/// Room left in a body for redb's own bytes around the value.
const BODY_SLACK: usize = 256;
/// Straggler compaction: a segment touched by a commit, written by an earlier one, whose
/// live slots are at most 1/`COMPACT_RATIO` of its slots has them rewritten into the
/// commit's new segment, so a few unacked messages do not keep a whole (≤ 1 MiB) body.
const COMPACT_RATIO: usize = 16;

/// Where a queued message is, and what ordering and de-duplication need.
#[derive(Debug, Clone)]
pub(super) struct Loc {
    pub seg: u64,
    pub slot: u32,
    priority: u8,
    retry_at: u64,
    pub enqueued_at: u64,
    hash: [u8; 32],
    /// (lease number, lease call) while leased.
    lease: Option<(u64, u64)>,
}

impl Loc {
    fn key(&self, id: u64) -> (u8, u64, u64) {
        (u8::MAX - self.priority, self.retry_at, id)
    }
}

/// A lease call in flight.
#[derive(Debug)]
struct Call {
    expires_at: u64,
    consumer: Arc<str>,
    /// The call's messages in lease order (entry i is lease number call + i), including
    /// those whose lease ended.
    ids: Vec<u64>,
    /// Leases of this call not ended yet.
    outstanding: usize,
}

/// A segment's slots: how many, how many live, which done.
#[derive(Debug)]
struct Seg {
    live: u32,
    done: Vec<u8>,
}

/// The in-memory indexes (see the module doc).
#[derive(Debug, Default)]
pub(super) struct State {
    /// Every queued message, leased or not, by id.
    pub by_id: BTreeMap<u64, Loc>,
    /// Messages not leased, in delivery order: (255 − priority, retry_at, id).
    schedule: BTreeSet<(u8, u64, u64)>,
    /// Payload hash → id of the queued copy.
    hashes: HashMap<[u8; 32], u64>,
    calls: BTreeMap<u64, Call>,
    /// (expires_at, call) of every call in flight.
    ends: BTreeSet<(u64, u64)>,
    segs: HashMap<u64, Seg>,
    /// `calls` rows whose leases had all ended (none are written so; removed if found).
    stale_calls: Vec<u64>,
    leased: u64,
    dead: u64,
    /// Set when the state could not be rebuilt after a failed commit: every write fails.
    broken: Option<String>,
    next_id: u64,
    next_lease: u64,
    next_seg: u64,
}

fn get_meta<T: ReadableTable<&'static str, u64>>(t: &T, k: &str, default: u64) -> Result<u64> {
    Ok(t.get(k).map_err(storage)?.map_or(default, |v| v.value()))
}

impl State {
    /// Rebuilds the state from the tables: reads every segment header and done bitmap and
    /// every lease call row (not the bodies).
    pub(super) fn load(txn: &redb::ReadTransaction) -> Result<State> {
        let meta = txn.open_table(tables::META).map_err(storage)?;
        let mut st = State {
            next_id: get_meta(&meta, tables::NEXT_ID, 1)?,
            next_lease: get_meta(&meta, tables::NEXT_LEASE, 1)?,
            next_seg: get_meta(&meta, tables::NEXT_SEGMENT, 1)?,
            dead: txn
                .open_table(tables::DEAD)
                .map_err(storage)?
                .len()
                .map_err(storage)?,
            ..State::default()
        };
        let segments = txn.open_table(tables::SEGMENTS).map_err(storage)?;
        let done = txn.open_table(tables::SEGMENT_DONE).map_err(storage)?;
        // Collected first and built in one go: a B-tree built from sorted entries has full
        // nodes, one filled by inserts in key order about half-full nodes (measured: ~100
        // bytes less per queued message, docs/benchmarks.md).
        let mut locs: Vec<(u64, Loc)> = Vec::new();
        let mut keys: Vec<(u8, u64, u64)> = Vec::new();
        for r in segments.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            let seg = k.value();
            let slots = tables::parse_header(seg, v.value())?;
            let bits = match done.get(seg).map_err(storage)? {
                Some(b) => b.value().to_vec(),
                None => Vec::new(),
            };
            let mut s = Seg {
                live: 0,
                done: bits,
            };
            s.done.resize(slots.len().div_ceil(8), 0);
            for (i, h) in slots.iter().enumerate() {
                if s.done[i / 8] & (1 << (i % 8)) != 0 {
                    continue;
                }
                s.live += 1;
                let loc = Loc {
                    seg,
                    slot: i as u32,
                    priority: h.priority,
                    retry_at: h.retry_at,
                    enqueued_at: h.enqueued_at,
                    hash: h.hash,
                    lease: None,
                };
                keys.push(loc.key(h.id));
                st.hashes.insert(h.hash, h.id);
                locs.push((h.id, loc));
            }
            st.segs.insert(seg, s);
        }
        st.by_id = locs.into_iter().collect();
        st.schedule = keys.into_iter().collect();
        let calls = txn.open_table(tables::CALLS).map_err(storage)?;
        for r in calls.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            let call = k.value();
            let (expires_at, consumer, entries) = tables::parse_call(call, v.value())?;
            let mut c = Call {
                expires_at,
                consumer: consumer.into(),
                ids: Vec::with_capacity(entries.len()),
                outstanding: 0,
            };
            for (i, e) in entries.iter().enumerate() {
                // Every entry, held or not: entry i is lease number call + i (compaction
                // rewrites the row from this list).
                c.ids.push(e.id);
                // Still leased only if its slot is still live (every lease end moves it).
                let Some(loc) = st.by_id.get_mut(&e.id) else {
                    continue;
                };
                if (loc.seg, loc.slot) != (e.seg, e.slot) || loc.lease.is_some() {
                    continue;
                }
                st.schedule.remove(&loc.key(e.id));
                loc.lease = Some((call + i as u64, call));
                c.outstanding += 1;
            }
            if c.outstanding == 0 {
                st.stale_calls.push(call);
                continue;
            }
            st.leased += c.outstanding as u64;
            st.ends.insert((expires_at, call));
            st.calls.insert(call, c);
        }
        Ok(st)
    }

    /// A state no write may use (see [`State::check`]).
    pub(super) fn broken(why: String) -> State {
        State {
            broken: Some(why),
            ..State::default()
        }
    }

    /// Fails if the state could not be rebuilt after a failed commit.
    pub(super) fn check(&self) -> Result<()> {
        match &self.broken {
            Some(why) => Err(Error::new(
                crate::ErrorKind::Storage,
                format!(
                    "the embedded queue could not reload its state after a failed commit \
                     ({why}); reopen the queue"
                ),
            )),
            None => Ok(()),
        }
    }

    /// The counts of [`Stats`] at `now`.
    pub(super) fn stats(&self, now: Timestamp) -> Stats {
        Stats {
            backlog: self.by_id.len() as u64,
            due: self.due_keys(now, usize::MAX).len() as u64,
            leased: self.leased,
            oldest_age: self
                .by_id
                .values()
                .next()
                .map(|l| now.saturating_duration_since(Timestamp::from_millis(l.enqueued_at))),
            dead_letters: self.dead,
        }
    }

    /// The first `max` schedule keys due at `now`, in delivery order: within each priority
    /// the due keys are a prefix (ordered by retry_at), so the scan jumps to the next
    /// priority at the first key that is not due.
    fn due_keys(&self, now: Timestamp, max: usize) -> Vec<(u8, u64, u64)> {
        let mut out = Vec::new();
        let now = now.as_millis();
        let mut next = self.schedule.first().map(|k| k.0);
        while let Some(p) = next {
            if out.len() >= max {
                break;
            }
            let room = max - out.len();
            out.extend(
                self.schedule
                    .range((p, 0, 0)..=(p, now, u64::MAX))
                    .take(room)
                    .copied(),
            );
            next = match p.checked_add(1) {
                Some(q) => self.schedule.range((q, 0, 0)..).next().map(|k| k.0),
                None => None,
            };
        }
        out
    }
}

/// The segment being written by this transaction.
struct Builder {
    seg: u64,
    header: Vec<u8>,
    offsets: Vec<u32>,
    records: Vec<u8>,
}

/// One write transaction over the state: the operations read the state, change it, and
/// write what changed. [`Txn::close`] writes the open segment, the done bitmaps and the
/// counters; call it before committing.
pub(super) struct Txn<'s, 't> {
    st: &'s mut State,
    segments: Table<'t, u64, &'static [u8]>,
    bodies: Table<'t, u64, &'static [u8]>,
    done: Table<'t, u64, &'static [u8]>,
    calls: Table<'t, u64, &'static [u8]>,
    dead: Table<'t, u64, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
    builder: Option<Builder>,
    /// Segments whose done bitmap changed.
    dirty: BTreeSet<u64>,
}

impl<'s, 't> Txn<'s, 't> {
    pub(super) fn open(txn: &'t WriteTransaction, st: &'s mut State) -> Result<Self> {
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
    pub(super) fn close(mut self) -> Result<()> {
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
    fn compact(&mut self) -> Result<()> {
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
    fn flush(&mut self) -> Result<()> {
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
    fn put(&mut self, h: &SlotHeader, rec: &[u8]) -> Result<(u64, u32)> {
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
    fn mark_done(&mut self, seg: u64, slot: u32) {
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
    fn records(&self, at: &[(u64, u32)]) -> Result<Vec<Vec<u8>>> {
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

    fn message(&self, seg: u64, slot: u32) -> Result<Message> {
        let r = self.records(&[(seg, slot)])?;
        record::decode(r.first().map_or(&[][..], Vec::as_slice))
    }

    /// A new queued message (append, replay): stored, scheduled, its hash taken.
    fn enqueue(&mut self, id: u64, h: SlotHeader, rec: &[u8]) -> Result<()> {
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
    fn requeue(&mut self, m: &Message) -> Result<()> {
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
    fn end_lease(&mut self, id: u64) -> Result<bool> {
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
    fn remove(&mut self, id: u64) -> Result<Option<Loc>> {
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
    fn kill(&mut self, mut m: Message, reason: &str, now: Timestamp) -> Result<()> {
        if self.remove(m.id.0)?.is_some() {
            m.last_error = Some(reason.to_owned());
            self.dead
                .insert(m.id.0, record::encode_dead(&m, reason, now).as_slice())
                .map_err(storage)?;
            self.st.dead += 1;
        }
        Ok(())
    }

    pub(super) fn append(&mut self, batch: &[NewMessage], now: Timestamp) -> Result<Vec<Appended>> {
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
    pub(super) fn lease(
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
    fn expire_all(&mut self, now: Timestamp) -> Result<()> {
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
    fn held_by(&self, call: u64) -> Vec<u64> {
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

    fn loc(&self, id: u64) -> Result<(u64, u32)> {
        self.st
            .by_id
            .get(&id)
            .map(|l| (l.seg, l.slot))
            .ok_or_else(|| Error::corrupt(format!("message {id} is not stored")))
    }

    fn lease_is_current(&self, id: MessageId, token: LeaseToken) -> bool {
        self.st
            .by_id
            .get(&id.0)
            .and_then(|l| l.lease)
            .is_some_and(|(t, _)| t == token.0)
    }

    pub(super) fn ack(&mut self, ids: &[MessageId]) -> Result<u64> {
        let mut n = 0;
        for id in ids {
            if self.remove(id.0)?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    pub(super) fn reschedule(
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

    pub(super) fn dead_letter(
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

    pub(super) fn release(&mut self, consumer: &str) -> Result<u64> {
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

    fn dead_ids(&self, sel: &Selection) -> Result<Vec<u64>> {
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

    pub(super) fn replay(&mut self, sel: &Selection, now: Timestamp) -> Result<Replayed> {
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

    pub(super) fn purge(&mut self, sel: &Selection) -> Result<u64> {
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
