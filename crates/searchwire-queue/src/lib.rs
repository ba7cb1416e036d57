//! A durable retry queue: where writes wait that cannot be delivered now (reference 004
//! ch. 5, `es-retry-stream`). It knows nothing of HTTP or the transport: it stores opaque
//! payloads and hands them out when they are due.
//!
//! # The model
//!
//! - [`Queue::append`] stores a batch and returns only once the batch is durable (see each
//!   backend's durability promise). A payload whose SHA-256 ([`PayloadHash`]) matches a
//!   message still queued is not stored again ([`Appended::Duplicate`]).
//! - [`Queue::lease`] hands out due messages (`retry_at <= now`) in delivery order:
//!   **priority** (higher first), then **`retry_at`**, then **arrival** ([`MessageId`]). A
//!   message is never handed out before its `retry_at`. A lease lasts
//!   [`QueueOptions::lease_timeout`]; a lease that is neither acked, rescheduled nor
//!   dead-lettered by then (its holder died or hung) counts as a failed attempt
//!   ([`LEASE_EXPIRED`] becomes its last error) and is returned to the queue and leased again
//!   in its place in the order — or becomes a dead letter once its attempts reach
//!   `max_retries`, so a message that kills every consumer it reaches cannot loop forever.
//! - After delivering, the holder calls [`Queue::ack`] (the message is gone; at-least-once).
//!   After a failed delivery it calls [`Queue::reschedule`] with a later `retry_at`: the
//!   attempt count goes up by one, the error is kept, and once `attempts` reaches
//!   `max_retries` the message becomes a [`DeadLetter`] with that error as its reason.
//!   [`Queue::dead_letter`] sends it there at once (an error retrying cannot fix).
//! - On shutdown, [`Queue::release`] returns every message this consumer still holds, due
//!   at once and marked [`Message::pending_shutdown`] (it may have been delivered already).
//! - [`Queue::stats`] reports backlog, due, leased, oldest age and dead letters;
//!   [`Queue::list`] and [`Queue::dead_letters`] page through messages;
//!   [`Queue::replay`] re-drives dead letters, [`Queue::purge`] deletes them;
//!   [`DeadLetterFilter`] chooses them by index, error type ([`error_type`]) and age.
//!
//! Time is injected ([`QueueOptions::clock`]): due times and lease ends are read from it, so
//! tests use a [`ManualClock`] and never sleep.
//!
//! # One type, three backends
//!
//! [`Queue`] is an enum over the backends, not a trait object. The set of backends is
//! closed and lives in this crate; an enum gives every caller (the bulk indexer, the relay,
//! the CLI) one concrete type to hold and clone, async methods without boxing each future or
//! an `async-trait` dependency, and one place ([`Queue`]'s methods) that documents the
//! contract every backend passes the same conformance suite against
//! (`tests/conformance.rs`; on a Cluster with several shards, order holds per shard). A
//! fourth backend is a fourth variant.
//!
//! - [`EmbeddedQueue`] (the default): a redb database in a data directory, group-committed;
//!   one process owns it.
//! - [`RedisQueue`]: Redis Streams plus sorted sets, shared by any number of processes on any
//!   number of machines.
//! - [`RedisClusterQueue`]: the same layout in N hash-tagged shards over a Redis Cluster;
//!   priority and order hold per shard.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod clock;
mod dead_filter;
pub mod embedded;
mod error;
mod message;
mod record;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use dead_filter::{error_type, DeadLetterFilter};
pub use embedded::{EmbeddedConfig, EmbeddedQueue};
pub use error::{Error, ErrorKind, Result};
pub use message::{
    Appended, DeadLetter, Lease, LeaseToken, Message, MessageId, NewMessage, PayloadHash, Replayed,
    Rescheduled, Selection, Stats, DEFAULT_MAX_RETRIES,
};
pub use redis::{RedisClusterQueue, RedisConfig, RedisQueue};

/// Default [`QueueOptions::lease_timeout`]: 5 minutes. A delivery is one bulk request through
/// the transport: up to 1 + 3 attempts of 30 s plus backoff, about 2.5 minutes at worst;
/// 5 minutes leaves a slow but live holder its lease, and a dead holder's messages are back
/// within minutes.
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(300);

/// Largest payload accepted: 64 MiB (a bulk request is usually a few MB; Redis refuses
/// values beyond 512 MB).
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024 * 1024;

/// Largest `index` or `last_error` accepted: 64 KiB.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

/// Error texts (a message's `last_error`, a reschedule's error, a dead letter's reason) are
/// kept up to this many bytes; a longer one is cut at a character boundary and ends in `…`.
/// An error answer from a cluster can be megabytes; what an operator needs is its start.
pub const MAX_ERROR_BYTES: usize = 4096;

/// `error` cut to [`MAX_ERROR_BYTES`] (see there).
pub(crate) fn bounded_error(error: &str) -> std::borrow::Cow<'_, str> {
    if error.len() <= MAX_ERROR_BYTES {
        return std::borrow::Cow::Borrowed(error);
    }
    let mut end = MAX_ERROR_BYTES;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…", &error[..end]))
}

/// What both backends share: lease timeout, consumer name, clock.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// How long a lease lasts. Default [`DEFAULT_LEASE_TIMEOUT`].
    pub lease_timeout: Duration,
    /// This consumer's name: its leases are the ones [`Queue::release`] gives back (and, in
    /// Redis, its name in the consumer group). Default: `pid<pid>-<random>`, unique per
    /// process so two processes never release each other's leases.
    pub consumer: String,
    /// Where time comes from. Default [`SystemClock`].
    pub clock: Arc<dyn Clock>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        QueueOptions {
            lease_timeout: DEFAULT_LEASE_TIMEOUT,
            consumer: format!("pid{}-{:08x}", std::process::id(), random as u32),
            clock: Arc::new(SystemClock),
        }
    }
}

impl QueueOptions {
    /// With this clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// With this lease timeout.
    pub fn lease_timeout(mut self, d: Duration) -> Self {
        self.lease_timeout = d;
        self
    }

    /// With this consumer name.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = name.into();
        self
    }

    fn validate(&self) -> Result<()> {
        if self.lease_timeout.is_zero() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "lease_timeout must be above zero (a zero lease would expire as it is taken)",
            ));
        }
        if self.consumer.is_empty() || self.consumer.len() > 200 || self.consumer.contains(' ') {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "invalid consumer name {}: use 1 to 200 characters without spaces",
                    searchwire::echo(&self.consumer)
                ),
            ));
        }
        Ok(())
    }
}

/// The durable retry queue: one of the backends.
#[derive(Debug, Clone)]
pub enum Queue {
    /// redb in a data directory (the default).
    Embedded(EmbeddedQueue),
    /// Redis Streams.
    Redis(RedisQueue),
    /// Redis Streams sharded over a Redis Cluster.
    RedisCluster(RedisClusterQueue),
}

macro_rules! dispatch {
    ($self:ident . $m:ident ( $($a:expr),* )) => {
        match $self {
            Queue::Embedded(q) => q.$m($($a),*).await,
            Queue::Redis(q) => q.$m($($a),*).await,
            Queue::RedisCluster(q) => q.$m($($a),*).await,
        }
    };
}

impl Queue {
    /// Opens (or creates) an embedded queue.
    pub fn open_embedded(config: EmbeddedConfig) -> Result<Self> {
        EmbeddedQueue::open(config).map(Queue::Embedded)
    }

    /// Connects to a Redis queue (creating its stream and consumer group if missing): on a
    /// Redis Cluster ([`RedisConfig::cluster`]) the sharded one, else one server's.
    pub async fn connect_redis(config: RedisConfig) -> Result<Self> {
        if config.cluster.is_some() {
            return RedisClusterQueue::connect(config)
                .await
                .map(Queue::RedisCluster);
        }
        RedisQueue::connect(config).await.map(Queue::Redis)
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        match self {
            Queue::Embedded(q) => q.options(),
            Queue::Redis(q) => q.options(),
            Queue::RedisCluster(q) => q.options(),
        }
    }

    /// A handle on the same queue for another consumer (its own leases to release); shares
    /// the writer (embedded) or the connection (Redis).
    pub fn with_consumer(&self, consumer: impl Into<String>) -> Result<Self> {
        match self {
            Queue::Embedded(q) => q.with_consumer(consumer).map(Queue::Embedded),
            Queue::Redis(q) => q.with_consumer(consumer).map(Queue::Redis),
            Queue::RedisCluster(q) => q.with_consumer(consumer).map(Queue::RedisCluster),
        }
    }

    /// Stores `batch` durably; returns, per message in order, its new id or the id of the
    /// queued message with the same payload hash. Returns only after the batch survives a
    /// crash of this process (and, for the embedded backend, a power loss). An empty batch is
    /// a no-op. Fails without storing anything for an empty or oversized payload.
    pub async fn append(&self, batch: Vec<NewMessage>) -> Result<Vec<Appended>> {
        dispatch!(self.append(batch))
    }

    /// Leases up to `max` due messages, in delivery order (priority, retry_at, arrival); the
    /// Redis backend returns at most [`redis::MAX_LEASE`] (1000) per call. Leases that
    /// expired are returned to the queue first, so they are among the candidates; each
    /// expiry counts an attempt (last error [`LEASE_EXPIRED`]) and the one that exhausts
    /// `max_retries` sends the message to the dead letters instead. On a Redis Cluster the
    /// order holds per shard, and leases take from every shard in turn
    /// ([`RedisClusterQueue::lease`]).
    pub async fn lease(&self, max: usize) -> Result<Vec<Lease>> {
        dispatch!(self.lease(max))
    }

    /// Removes these messages from the queue (delivered). Accepted from any holder, even
    /// after its lease expired: a message delivered is delivered. Returns how many were
    /// still queued.
    pub async fn ack(&self, ids: &[MessageId]) -> Result<u64> {
        dispatch!(self.ack(ids))
    }

    /// A failed delivery: the attempt count goes up by one and the error is kept; the
    /// message is due again at `retry_at`, or becomes a dead letter (reason: `error`) when
    /// its attempts reach `max_retries`. Nothing changes if the lease is no longer current.
    pub async fn reschedule(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        let error = bounded_error(error);
        dispatch!(self.reschedule(lease, retry_at, &error))
    }

    /// A failed delivery that does not count toward `max_retries`: the message is due again
    /// at `retry_at` with the error kept and its attempts unchanged, and never becomes a
    /// dead letter here. For failures that say nothing about the message — the cluster
    /// throttled it, a shard was unavailable, no node answered — which the delivery loop
    /// retries until the message's own deadline rather than a count (a throttled document
    /// is not a bad one). Nothing changes if the lease is no longer current.
    pub async fn defer(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        let error = bounded_error(error);
        dispatch!(self.defer(lease, retry_at, &error))
    }

    /// Moves a leased message to the dead letters now, with `reason` (cut to
    /// [`MAX_ERROR_BYTES`]). `false` (nothing changed) if the lease is no longer current.
    pub async fn dead_letter(&self, lease: &Lease, reason: &str) -> Result<bool> {
        let reason = bounded_error(reason);
        dispatch!(self.dead_letter(lease, &reason))
    }

    /// Shutdown: every message this consumer holds goes back to the queue, due at its old
    /// `retry_at` and marked `pending_shutdown`. Returns how many.
    pub async fn release(&self) -> Result<u64> {
        dispatch!(self.release())
    }

    /// A snapshot of the queue's counts.
    pub async fn stats(&self) -> Result<Stats> {
        dispatch!(self.stats())
    }

    /// Queued messages (leased or not) by id, after `after`, at most `limit`.
    pub async fn list(&self, after: Option<MessageId>, limit: usize) -> Result<Vec<Message>> {
        dispatch!(self.list(after, limit))
    }

    /// Dead letters by id, after `after`, at most `limit`.
    pub async fn dead_letters(
        &self,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        dispatch!(self.dead_letters(after, limit))
    }

    /// Re-drives dead letters into the queue: same id (so the same place in arrival order),
    /// attempts reset to 0, due now, last error kept. A dead letter whose payload is queued
    /// already is dropped and counted as a duplicate.
    pub async fn replay(&self, selection: &Selection) -> Result<Replayed> {
        dispatch!(self.replay(selection))
    }

    /// Deletes dead letters for good. Returns how many.
    pub async fn purge(&self, selection: &Selection) -> Result<u64> {
        dispatch!(self.purge(selection))
    }
}

/// Refuses what neither backend can store.
fn check_batch(batch: &[NewMessage]) -> Result<()> {
    for (i, m) in batch.iter().enumerate() {
        if m.payload.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "message {i} of the batch has an empty payload: there is nothing to deliver"
                ),
            ));
        }
        if m.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "message {i} of the batch has a payload of {} bytes, above the limit of {} \
                     (split it into smaller bulk requests)",
                    m.payload.len(),
                    MAX_PAYLOAD_BYTES
                ),
            ));
        }
        let meta =
            m.index.as_ref().map_or(0, String::len) + m.last_error.as_ref().map_or(0, String::len);
        if meta > MAX_METADATA_BYTES {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("message {i} of the batch has {meta} bytes of index and error text, above the limit of {MAX_METADATA_BYTES}"),
            ));
        }
    }
    Ok(())
}

/// The stored form of a new message (the backends encode it directly with
/// `record::encode_new`; this is what that encoding must equal).
#[cfg(test)]
fn message_from_new(n: &NewMessage, id: MessageId, hash: PayloadHash, now: Timestamp) -> Message {
    Message {
        id,
        payload: n.payload.clone(),
        priority: n.priority,
        retry_at: n.retry_at.unwrap_or(now),
        attempts: 0,
        max_retries: n.max_retries,
        payload_hash: hash,
        enqueued_at: now,
        index: n.index.clone(),
        last_error: n.last_error.clone(),
        pending_shutdown: false,
    }
}

/// A dead letter brought back by a replay.
fn revived(mut m: Message, now: Timestamp) -> Message {
    m.attempts = 0;
    m.retry_at = now;
    m.pending_shutdown = false;
    m
}

/// The `last_error` of a message whose lease expired (see [`Queue::lease`]): the holder
/// neither acked, rescheduled nor dead-lettered it in time. Both backends write exactly this.
pub const LEASE_EXPIRED: &str = "lease expired: not acked, rescheduled or dead-lettered \
     within the lease timeout (its holder died or hung)";

/// The dead-letter reason of a message whose last attempt ended in an expired lease. The
/// Redis lease script builds the same text from [`LEASE_EXPIRED`].
fn lease_expired_reason(max_retries: u32) -> String {
    format!(
        "{LEASE_EXPIRED}; max_retries ({}) reached",
        max_retries.max(1)
    )
}

/// Whether `attempts` failed attempts exhaust `max_retries` (0 behaves as 1: a message is
/// always tried at least once from the queue).
fn exhausted(attempts: u32, max_retries: u32) -> bool {
    attempts >= max_retries.max(1)
}
