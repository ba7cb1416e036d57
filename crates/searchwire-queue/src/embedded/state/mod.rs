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

use redb::{ReadableTable, ReadableTableMetadata, Table};

use super::storage;
use super::tables::{self};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::message::Stats;

mod ops;
mod txn;

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
