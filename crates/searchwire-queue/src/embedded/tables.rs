//! The embedded queue's on-disk format (3): its tables, the encoding of their rows, and the
//! migration of older formats.
//!
//! | table | key | value | holds |
//! | --- | --- | --- | --- |
//! | `segments` | segment | header: per slot id, priority, retry_at, enqueued_at, payload SHA-256 | what open reads |
//! | `bodies` | segment | the slots' message records ([`crate::record`]), with an offset table | payloads, read when leased |
//! | `segment_done` | segment | bitmap of the slots that are done | acked, dead-lettered or moved |
//! | `calls` | lease call | lease end, consumer, (id, segment, slot) per lease | leases in flight |
//! | `dead` | id | dead-letter record | dead letters |
//! | `meta` | name | u64 | format version, next id, next lease number, next segment |
//!
//! A **segment** is written once, by the commit that creates its messages (an append, or a
//! reschedule, lease expiry or release that rewrites a message). A message that is acked,
//! dead-lettered or rewritten elsewhere marks its slot done in `segment_done` (one small row
//! per segment touched, not one per message); when every slot of a segment is done the
//! segment's three rows go. A **lease call** is one `calls` row, written when the call
//! leases and deleted when its last lease ends; its leases are the entries whose slot is
//! still live (a lease ends only by its slot becoming done: ack, dead letter, or a rewrite
//! by reschedule, expiry or release). Everything else — the delivery order, id → slot, the
//! payload hashes, counts — is rebuilt in memory on open ([`super::state`]).
//!
//! Format history: 1 had `messages`, `schedule`, `hashes`, `leases` ((expires_at, id) → ())
//! and `inflight` (id → (lease number, expires_at, consumer)); 2 replaced the last two with
//! `leased` and `lease_calls` (one row per call). [`prepare`] migrates both to 3 in place on
//! open: every message goes into segments, every lease into a `calls` row with the same end
//! and holder (new lease numbers: their holders are gone with the process that wrote them).

use std::collections::BTreeMap;

use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use crate::error::{Error, Result};
use crate::record;

pub(super) const SEGMENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("segments");
pub(super) const BODIES: TableDefinition<u64, &[u8]> = TableDefinition::new("bodies");
pub(super) const SEGMENT_DONE: TableDefinition<u64, &[u8]> = TableDefinition::new("segment_done");
pub(super) const CALLS: TableDefinition<u64, &[u8]> = TableDefinition::new("calls");
pub(super) const DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead");
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

pub(super) const NEXT_ID: &str = "next_id";
pub(super) const NEXT_LEASE: &str = "next_lease";
pub(super) const NEXT_SEGMENT: &str = "next_segment";
pub(super) const FORMAT: &str = "format";

/// The on-disk format this code writes (see the module's format history).
pub(super) const FORMAT_VERSION: u64 = 3;

/// Formats 1 and 2, read only to migrate them.
pub(super) mod old {
    use redb::TableDefinition;

    pub(crate) const MESSAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("messages");
    pub(crate) const SCHEDULE: TableDefinition<(u8, u64, u64), ()> =
        TableDefinition::new("schedule");
    pub(crate) const HASHES: TableDefinition<&[u8], u64> = TableDefinition::new("hashes");
    /// Format 2: id → (lease number, expires_at, lease call, consumer).
    pub(crate) const LEASED: TableDefinition<u64, (u64, u64, u64, &str)> =
        TableDefinition::new("leased");
    /// Format 2: (expires_at, lease call) → leases of that call not ended yet.
    pub(crate) const LEASE_CALLS: TableDefinition<(u64, u64), u64> =
        TableDefinition::new("lease_calls");
    /// Format 1: (expires_at, id) → ().
    pub(crate) const LEASES: TableDefinition<(u64, u64), ()> = TableDefinition::new("leases");
    /// Format 1: id → (lease number, expires_at, consumer).
    pub(crate) const INFLIGHT: TableDefinition<u64, (u64, u64, &str)> =
        TableDefinition::new("inflight");
}

/// Bytes per slot in a segment header: id, priority, retry_at, enqueued_at, hash.
const SLOT_HEADER: usize = 8 + 1 + 8 + 8 + 32;

/// A slot's entry in its segment header: what the in-memory indexes need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotHeader {
    pub id: u64,
    pub priority: u8,
    pub retry_at: u64,
    pub enqueued_at: u64,
    pub hash: [u8; 32],
}

impl SlotHeader {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_be_bytes());
        out.push(self.priority);
        out.extend_from_slice(&self.retry_at.to_be_bytes());
        out.extend_from_slice(&self.enqueued_at.to_be_bytes());
        out.extend_from_slice(&self.hash);
    }
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

/// Reads a segment header: the concatenated [`SlotHeader`]s.
pub(super) fn parse_header(seg: u64, bytes: &[u8]) -> Result<Vec<SlotHeader>> {
    if bytes.len() % SLOT_HEADER != 0 {
        return Err(Error::corrupt(format!(
            "segment {seg}: header of {} bytes is not a whole number of slots",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(SLOT_HEADER)
        .map(|c| {
            let mut hash = [0u8; 32];
            hash.copy_from_slice(&c[25..57]);
            SlotHeader {
                id: be_u64(&c[0..8]),
                priority: c[8],
                retry_at: be_u64(&c[9..17]),
                enqueued_at: be_u64(&c[17..25]),
                hash,
            }
        })
        .collect())
}

/// A segment body: slot count (u32), count + 1 offsets (u32, from the start of the
/// records), then the records.
pub(super) fn encode_body(offsets: &[u32], records: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 4 * offsets.len() + 4 + records.len());
    let n = offsets.len() as u32;
    out.extend_from_slice(&n.to_be_bytes());
    for o in offsets {
        out.extend_from_slice(&o.to_be_bytes());
    }
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    out.extend_from_slice(records);
    out
}

/// The record of `slot` in a body written by [`encode_body`].
pub(super) fn body_slot(seg: u64, body: &[u8], slot: u32) -> Result<&[u8]> {
    let bad = || Error::corrupt(format!("segment {seg}: body has no slot {slot}"));
    if body.len() < 4 {
        return Err(bad());
    }
    let n = be_u32(body) as usize;
    let slot = slot as usize;
    let table_end = 4 + 4 * (n + 1);
    if slot >= n || body.len() < table_end {
        return Err(bad());
    }
    let start = be_u32(&body[4 + 4 * slot..]) as usize;
    let end = be_u32(&body[4 + 4 * (slot + 1)..]) as usize;
    body.get(table_end + start..table_end + end).ok_or_else(bad)
}

/// One lease of a call: the message and the slot it was leased from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CallEntry {
    pub id: u64,
    pub seg: u64,
    pub slot: u32,
}

/// A `calls` row: expires_at (u64), consumer (u16 length + UTF-8), then entries (id u64,
/// segment u64, slot u32). The lease number of entry `i` is the call number + `i`.
pub(super) fn encode_call(expires_at: u64, consumer: &str, entries: &[CallEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + consumer.len() + 20 * entries.len());
    out.extend_from_slice(&expires_at.to_be_bytes());
    // Consumer names are at most 200 bytes (`QueueOptions::validate`).
    out.extend_from_slice(&(consumer.len().min(u16::MAX as usize) as u16).to_be_bytes());
    out.extend_from_slice(&consumer.as_bytes()[..consumer.len().min(u16::MAX as usize)]);
    for e in entries {
        out.extend_from_slice(&e.id.to_be_bytes());
        out.extend_from_slice(&e.seg.to_be_bytes());
        out.extend_from_slice(&e.slot.to_be_bytes());
    }
    out
}

/// Decodes [`encode_call`]: (expires_at, consumer, entries).
pub(super) fn parse_call(call: u64, b: &[u8]) -> Result<(u64, String, Vec<CallEntry>)> {
    let bad = || Error::corrupt(format!("lease call {call}: damaged row"));
    if b.len() < 10 {
        return Err(bad());
    }
    let expires_at = be_u64(b);
    let n = u16::from_be_bytes([b[8], b[9]]) as usize;
    let consumer = b
        .get(10..10 + n)
        .and_then(|c| std::str::from_utf8(c).ok())
        .ok_or_else(bad)?
        .to_owned();
    let rest = &b[10 + n..];
    if rest.len() % 20 != 0 {
        return Err(bad());
    }
    let entries = rest
        .chunks_exact(20)
        .map(|c| CallEntry {
            id: be_u64(&c[0..8]),
            seg: be_u64(&c[8..16]),
            slot: be_u32(&c[16..20]),
        })
        .collect();
    Ok((expires_at, consumer, entries))
}

/// Messages per segment written by a migration.
const MIGRATION_SEGMENT: usize = 1024;

/// Brings a database to [`FORMAT_VERSION`] inside `txn`: a new one is stamped, a format-1 or
/// format-2 one is migrated, a newer one is refused. Creates every table, so readers never
/// meet a missing one.
pub(super) fn prepare(txn: &WriteTransaction, path: &std::path::Path) -> Result<()> {
    let mut meta = txn.open_table(META).map_err(super::storage)?;
    for t in [SEGMENTS, BODIES, SEGMENT_DONE, CALLS, DEAD] {
        txn.open_table(t).map_err(super::storage)?;
    }
    let format = meta.get(FORMAT).map_err(super::storage)?.map(|v| v.value());
    let names: Vec<String> = txn
        .list_tables()
        .map_err(super::storage)?
        .map(|t| t.name().to_owned())
        .collect();
    let has = |name: &str| names.iter().any(|n| n == name);
    match format {
        Some(FORMAT_VERSION) => return Ok(()),
        Some(f) if f > FORMAT_VERSION => {
            return Err(crate::Error::new(
                crate::ErrorKind::Storage,
                format!(
                    "the queue {} has on-disk format {f}, written by a newer searchwire; this \
                     one reads formats 1 to {FORMAT_VERSION} (upgrade searchwire, or drain the \
                     queue with the version that wrote it)",
                    path.display()
                ),
            ))
        }
        Some(f) if f != 1 && f != 2 => {
            return Err(crate::Error::corrupt(format!(
                "the queue {} has an unknown on-disk format {f}",
                path.display()
            )))
        }
        _ => {}
    }
    if has(old::MESSAGES.name()) {
        let from = format.unwrap_or(1);
        let (messages, leases) = migrate(txn, &mut meta, &has)?;
        tracing::info!(
            queue = %path.display(),
            messages,
            leases,
            "migrated the embedded queue from on-disk format {from} to {FORMAT_VERSION}"
        );
    }
    meta.insert(FORMAT, FORMAT_VERSION)
        .map_err(super::storage)?;
    Ok(())
}

/// Moves a format-1/2 queue's messages into segments and its leases into `calls` rows, then
/// drops the old tables. Returns (messages, leases) moved.
fn migrate(
    txn: &WriteTransaction,
    meta: &mut redb::Table<'_, &'static str, u64>,
    has: &dyn Fn(&str) -> bool,
) -> Result<(usize, usize)> {
    // Leases by (expires_at, consumer): one call each.
    let mut holders: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    if has(old::LEASED.name()) {
        let t = txn.open_table(old::LEASED).map_err(super::storage)?;
        for r in t.iter().map_err(super::storage)? {
            let (k, v) = r.map_err(super::storage)?;
            let (_, expires, _, consumer) = v.value();
            holders.insert(k.value(), (expires, consumer.to_owned()));
        }
    }
    if has(old::INFLIGHT.name()) {
        let t = txn.open_table(old::INFLIGHT).map_err(super::storage)?;
        for r in t.iter().map_err(super::storage)? {
            let (k, v) = r.map_err(super::storage)?;
            let (_, expires, consumer) = v.value();
            holders.insert(k.value(), (expires, consumer.to_owned()));
        }
    }
    let mut next_seg = meta
        .get(NEXT_SEGMENT)
        .map_err(super::storage)?
        .map_or(1, |v| v.value());
    let mut calls: BTreeMap<(u64, String), Vec<CallEntry>> = BTreeMap::new();
    let mut moved = 0;
    {
        let old_messages = txn.open_table(old::MESSAGES).map_err(super::storage)?;
        let mut segments = txn.open_table(SEGMENTS).map_err(super::storage)?;
        let mut bodies = txn.open_table(BODIES).map_err(super::storage)?;
        let mut header = Vec::new();
        let mut offsets = Vec::new();
        let mut records = Vec::new();
        let mut rows = old_messages.iter().map_err(super::storage)?.peekable();
        while let Some(r) = rows.next() {
            let (k, v) = r.map_err(super::storage)?;
            let bytes = v.value();
            let h = record::header(bytes)?;
            let m = record::decode(bytes)?;
            let id = k.value();
            let slot = offsets.len() as u32;
            SlotHeader {
                id,
                priority: h.priority,
                retry_at: h.retry_at,
                enqueued_at: m.enqueued_at.as_millis(),
                hash: h.hash,
            }
            .write(&mut header);
            offsets.push(records.len() as u32);
            records.extend_from_slice(bytes);
            if let Some((expires, consumer)) = holders.get(&id) {
                calls
                    .entry((*expires, consumer.clone()))
                    .or_default()
                    .push(CallEntry {
                        id,
                        seg: next_seg,
                        slot,
                    });
            }
            moved += 1;
            if offsets.len() == MIGRATION_SEGMENT || rows.peek().is_none() {
                segments
                    .insert(next_seg, header.as_slice())
                    .map_err(super::storage)?;
                bodies
                    .insert(next_seg, encode_body(&offsets, &records).as_slice())
                    .map_err(super::storage)?;
                next_seg += 1;
                header.clear();
                offsets.clear();
                records.clear();
            }
        }
    }
    let mut next_lease = meta
        .get(NEXT_LEASE)
        .map_err(super::storage)?
        .map_or(1, |v| v.value());
    let mut leases = 0;
    {
        let mut t = txn.open_table(CALLS).map_err(super::storage)?;
        for ((expires, consumer), entries) in &calls {
            t.insert(
                next_lease,
                encode_call(*expires, consumer, entries).as_slice(),
            )
            .map_err(super::storage)?;
            next_lease += entries.len() as u64;
            leases += entries.len();
        }
    }
    meta.insert(NEXT_SEGMENT, next_seg)
        .map_err(super::storage)?;
    meta.insert(NEXT_LEASE, next_lease)
        .map_err(super::storage)?;
    let old_tables = [
        old::MESSAGES.name(),
        old::SCHEDULE.name(),
        old::HASHES.name(),
        old::LEASED.name(),
        old::LEASE_CALLS.name(),
        old::LEASES.name(),
        old::INFLIGHT.name(),
    ];
    for name in old_tables {
        if has(name) {
            let def: TableDefinition<u64, u64> = TableDefinition::new(name);
            txn.delete_table(def).map_err(super::storage)?;
        }
    }
    Ok((moved, leases))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use redb::ReadableTableMetadata;

    use super::*;
    use crate::message::{Message, MessageId, PayloadHash};
    use crate::{EmbeddedConfig, EmbeddedQueue, ManualClock, NewMessage, QueueOptions, Timestamp};

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

    fn schedule_key(m: &Message) -> (u8, u64, u64) {
        (u8::MAX - m.priority, m.retry_at.as_millis(), m.id.0)
    }

    fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> crate::Result<EmbeddedQueue> {
        let mut c = EmbeddedConfig::new(dir);
        c.options = QueueOptions::default()
            .clock(Arc::clone(clock) as Arc<dyn crate::Clock>)
            .consumer("new");
        EmbeddedQueue::open(c)
    }

    /// Writes the tables formats 1 and 2 share: message 1 queued, message 2 stored but not
    /// scheduled (leased), ids up to 2, lease numbers up to 7.
    fn write_common(txn: &redb::WriteTransaction) {
        let mut messages = txn.open_table(old::MESSAGES).unwrap();
        let mut schedule = txn.open_table(old::SCHEDULE).unwrap();
        let mut hashes = txn.open_table(old::HASHES).unwrap();
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
        meta.insert(NEXT_ID, 3).unwrap();
        meta.insert(NEXT_LEASE, 8).unwrap();
    }

    /// Format 1: message 2 leased (lease 7, ends at T0 + 1 s) by a consumer that is gone.
    fn write_format_1(path: &std::path::Path) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        write_common(&txn);
        {
            let mut leases = txn.open_table(old::LEASES).unwrap();
            let mut inflight = txn.open_table(old::INFLIGHT).unwrap();
            leases.insert((T0 + 1000, 2), ()).unwrap();
            inflight.insert(2, (7, T0 + 1000, "old-consumer")).unwrap();
        }
        txn.commit().unwrap();
    }

    /// Format 2: the same lease, as a `leased` row and its call's `lease_calls` row.
    fn write_format_2(path: &std::path::Path) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        write_common(&txn);
        {
            let mut leased = txn.open_table(old::LEASED).unwrap();
            let mut calls = txn.open_table(old::LEASE_CALLS).unwrap();
            leased.insert(2, (7, T0 + 1000, 7, "old-consumer")).unwrap();
            calls.insert((T0 + 1000, 7), 1).unwrap();
            txn.open_table(META).unwrap().insert(FORMAT, 2).unwrap();
        }
        txn.commit().unwrap();
    }

    fn table_names(path: &std::path::Path) -> Vec<String> {
        let db = redb::Database::open(path).unwrap();
        let txn = db.begin_read().unwrap();
        let names = txn
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_owned())
            .collect();
        let meta = txn.open_table(META).unwrap();
        assert_eq!(meta.get(FORMAT).unwrap().unwrap().value(), FORMAT_VERSION);
        names
    }

    /// Opens a migrated queue: both messages are there, the old lease still holds message 2
    /// and expires at its old end (an attempt counted); the file is format 3 without the old
    /// tables and opens again as it is.
    async fn check_migrated(dir: &std::path::Path) {
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir, &clock).unwrap();
        let s = q.stats().await.unwrap();
        assert_eq!((s.backlog, s.leased), (2, 1));
        let l = q.lease(10).await.unwrap();
        assert_eq!(l.iter().map(|l| l.id().0).collect::<Vec<_>>(), [1]);
        assert!(
            l[0].token.0 >= 8,
            "lease numbers continue: {:?}",
            l[0].token
        );
        q.ack(&[l[0].id()]).await.unwrap();
        // The payload hash index came along: a copy of message 2 is a duplicate.
        let dup = q.append(vec![NewMessage::new("leased")]).await.unwrap();
        assert_eq!(dup, [crate::Appended::Duplicate(MessageId(2))]);
        clock.set(Timestamp::from_millis(T0 + 1000));
        let l = q.lease(10).await.unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].id().0, 2);
        assert_eq!(l[0].message.payload, b"leased");
        assert_eq!(l[0].message.attempts, 1);
        assert_eq!(
            l[0].message.last_error.as_deref(),
            Some(crate::LEASE_EXPIRED)
        );
        q.close().await.unwrap();
        let names = table_names(&dir.join(super::super::DB_FILE));
        for gone in [
            "messages",
            "schedule",
            "hashes",
            "leased",
            "lease_calls",
            "leases",
            "inflight",
        ] {
            assert!(!names.iter().any(|n| n == gone), "{gone} in {names:?}");
        }
        let q = open(dir, &clock).unwrap();
        let s = q.stats().await.unwrap();
        assert_eq!((s.backlog, s.leased), (1, 1));
        // Ids continue after the migrated ones.
        let new = q.append(vec![NewMessage::new("new")]).await.unwrap();
        assert_eq!(new, [crate::Appended::New(MessageId(3))]);
        q.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_format_1_queue_is_migrated_and_its_leases_still_expire() {
        let dir = tempfile::tempdir().unwrap();
        write_format_1(&dir.path().join(super::super::DB_FILE));
        check_migrated(dir.path()).await;
    }

    #[tokio::test]
    async fn a_format_2_queue_is_migrated_and_its_leases_still_expire() {
        let dir = tempfile::tempdir().unwrap();
        write_format_2(&dir.path().join(super::super::DB_FILE));
        check_migrated(dir.path()).await;
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
            text.contains("format 4") && text.contains("newer searchwire"),
            "{text}"
        );
    }

    /// Rows per table, read from the file.
    async fn rows(q: &EmbeddedQueue, t: TableDefinition<'static, u64, &'static [u8]>) -> u64 {
        q.read(move |txn| {
            txn.open_table(t)
                .map_err(super::super::storage)?
                .len()
                .map_err(super::super::storage)
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn one_segment_per_commit_and_one_row_per_lease_call_both_go_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir.path(), &clock).unwrap();
        let batch = (0..10).map(|i| NewMessage::new(format!("m{i}"))).collect();
        q.append(batch).await.unwrap();
        assert_eq!(rows(&q, SEGMENTS).await, 1, "one segment for the batch");
        assert_eq!(rows(&q, BODIES).await, 1);
        let a = q.lease(4).await.unwrap();
        let b = q.lease(6).await.unwrap();
        assert_eq!(rows(&q, CALLS).await, 2, "one row per lease call");
        let ids: Vec<MessageId> = a.iter().map(|l| l.id()).collect();
        q.ack(&ids[..3]).await.unwrap();
        assert_eq!(rows(&q, CALLS).await, 2, "a lease of the first call is out");
        assert_eq!(rows(&q, SEGMENT_DONE).await, 1, "three slots done");
        q.reschedule(&a[3], Timestamp::from_millis(T0 + 10), "x")
            .await
            .unwrap();
        assert_eq!(
            rows(&q, CALLS).await,
            1,
            "every lease of the first call ended"
        );
        assert_eq!(
            rows(&q, SEGMENTS).await,
            2,
            "the rescheduled one was rewritten"
        );
        // The second call's leases expire: all six come back, rewritten, and the row goes.
        clock.advance(crate::DEFAULT_LEASE_TIMEOUT + Duration::from_millis(1));
        let again = q.lease(100).await.unwrap();
        assert_eq!(again.len(), 7, "six expired and one rescheduled");
        assert!(b.iter().all(|l| again.iter().any(|x| x.id() == l.id())));
        assert_eq!(rows(&q, CALLS).await, 1, "only the new call's row");
        assert_eq!(
            rows(&q, SEGMENTS).await,
            2,
            "the first segment is all done and gone; the expired ones were rewritten"
        );
        let ids: Vec<MessageId> = again.iter().map(|l| l.id()).collect();
        q.ack(&ids).await.unwrap();
        for t in [SEGMENTS, BODIES, SEGMENT_DONE, CALLS] {
            assert_eq!(rows(&q, t).await, 0, "{}", t.name());
        }
        q.close().await.unwrap();
    }

    #[tokio::test]
    async fn reopening_rebuilds_order_dedup_and_leases_from_the_segments() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir.path(), &clock).unwrap();
        q.append(vec![
            NewMessage::new("low"),
            NewMessage::new("high").priority(5),
            NewMessage::new("later").retry_at(Timestamp::from_millis(T0 + 50)),
            NewMessage::new("held"),
        ])
        .await
        .unwrap();
        // Lease everything due (high, low, held), give back two: "held" stays leased.
        let l = q.lease(3).await.unwrap();
        let payloads: Vec<&[u8]> = l.iter().map(|l| l.message.payload.as_slice()).collect();
        assert_eq!(payloads, [&b"high"[..], b"low", b"held"]);
        q.reschedule(&l[0], Timestamp::from_millis(T0), "e")
            .await
            .unwrap();
        q.ack(&[l[1].id()]).await.unwrap();
        q.close().await.unwrap();

        let q = open(dir.path(), &clock).unwrap();
        let s = q.stats().await.unwrap();
        assert_eq!((s.backlog, s.leased, s.due), (3, 1, 1));
        let dup = q.append(vec![NewMessage::new("held")]).await.unwrap();
        assert_eq!(dup, [crate::Appended::Duplicate(l[2].id())]);
        clock.set(Timestamp::from_millis(T0 + 50));
        let again = q.lease(10).await.unwrap();
        let payloads: Vec<&[u8]> = again.iter().map(|l| l.message.payload.as_slice()).collect();
        assert_eq!(payloads, [&b"high"[..], b"later"], "held is still leased");
        assert_eq!(again[0].message.attempts, 1);
        let listed = q.list(None, 10).await.unwrap();
        assert_eq!(listed.len(), 3);
        q.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_segment_body_stays_under_1_mib_and_a_larger_record_gets_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir.path(), &clock).unwrap();
        let big = |c: u8, n: usize| NewMessage::new(vec![c; n]);
        // One commit: 400 KB + 400 KB fit one body, the third starts a second; 2 MB alone.
        q.append(vec![
            big(b'a', 400_000),
            big(b'b', 400_000),
            big(b'c', 400_000),
            big(b'd', 2_000_000),
            big(b'e', 10),
        ])
        .await
        .unwrap();
        assert_eq!(rows(&q, SEGMENTS).await, 4);
        let sizes = q
            .read(|txn| {
                let t = txn.open_table(BODIES).map_err(super::super::storage)?;
                let mut out = Vec::new();
                for r in t.iter().map_err(super::super::storage)? {
                    out.push(r.map_err(super::super::storage)?.1.value().len());
                }
                Ok(out)
            })
            .await
            .unwrap();
        assert!(sizes[0] > 800_000 && sizes[0] < 1 << 20, "{sizes:?}");
        assert!(sizes[2] > 2_000_000, "{sizes:?}");
        let l = q.lease(10).await.unwrap();
        let firsts: Vec<(u8, usize)> = l
            .iter()
            .map(|l| (l.message.payload[0], l.message.payload.len()))
            .collect();
        assert_eq!(
            firsts,
            [
                (b'a', 400_000),
                (b'b', 400_000),
                (b'c', 400_000),
                (b'd', 2_000_000),
                (b'e', 10)
            ]
        );
        q.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_failed_job_leaves_nothing_in_memory_either() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(T0)));
        let q = open(dir.path(), &clock).unwrap();
        q.append(vec![NewMessage::new("kept")]).await.unwrap();
        // A job that appends, leases and acks, then fails: its transaction is rolled back,
        // and so must be what it changed in the in-memory indexes.
        let now = Timestamp::from_millis(T0);
        let e = q
            .write(move |t| {
                t.append(&[NewMessage::new("rolled back")], now)?;
                let l = t.lease(10, now, Duration::from_secs(60), "x")?;
                t.ack(&[l[0].id()])?;
                Err::<(), _>(crate::Error::corrupt("injected"))
            })
            .await
            .unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        let s = q.stats().await.unwrap();
        assert_eq!((s.backlog, s.leased, s.due), (1, 0, 1));
        let again = q
            .append(vec![NewMessage::new("rolled back")])
            .await
            .unwrap();
        assert_eq!(
            again,
            [crate::Appended::New(MessageId(2))],
            "id 2 was not used"
        );
        let l = q.lease(10).await.unwrap();
        let p: Vec<&[u8]> = l.iter().map(|l| l.message.payload.as_slice()).collect();
        assert_eq!(p, [&b"kept"[..], b"rolled back"]);
        q.close().await.unwrap();
    }

    #[test]
    fn damaged_rows_are_errors_not_panics() {
        let e = [CallEntry {
            id: 1,
            seg: 2,
            slot: 3,
        }];
        let call = encode_call(9, "c", &e);
        assert_eq!(
            parse_call(1, &call).unwrap(),
            (9, "c".to_owned(), e.to_vec())
        );
        for n in 0..call.len() {
            if n != 11 {
                assert!(parse_call(1, &call[..n]).is_err(), "truncated at {n}");
            }
        }
        let body = encode_body(&[0, 2], b"abcd");
        assert_eq!(body_slot(1, &body, 1).unwrap(), b"cd");
        assert!(body_slot(1, &body, 2).is_err());
        for n in 0..body.len() {
            let _ = body_slot(1, &body[..n], 1);
        }
        assert!(parse_header(1, &[0; 5]).is_err());
    }
}
