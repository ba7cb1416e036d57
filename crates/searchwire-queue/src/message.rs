//! What the queue holds and hands out.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::clock::Timestamp;

/// A message's id: unique within its queue and increasing in order of arrival, so it is
/// also the last ordering key (first in, first out within a priority and a due time). It
/// stays the same across reschedules and a replay from the dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MessageId(pub u64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for MessageId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.parse().map(MessageId)
    }
}

/// SHA-256 of a payload: the de-duplication key (reference 004 ch. 5, `payload_hash`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PayloadHash(pub [u8; 32]);

impl PayloadHash {
    /// The hash of `payload`.
    pub fn of(payload: &[u8]) -> Self {
        PayloadHash(Sha256::digest(payload).into())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }
}

impl fmt::Debug for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadHash({})", self.to_hex())
    }
}

impl Serialize for PayloadHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

/// The default `max_retries` of a [`NewMessage`]: 3, the reference's retry limit (004 ch. 5).
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// A message to append. `retry_at` `None` means due at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// The bytes to deliver (for the bulk indexer, one document's action and source).
    pub payload: Vec<u8>,
    /// Higher is delivered first (255 before 0).
    pub priority: u8,
    /// Not delivered before this time; `None`: due now.
    pub retry_at: Option<Timestamp>,
    /// How many failed attempts (reschedules) are allowed before the message becomes a dead
    /// letter.
    pub max_retries: u32,
    /// The target index, for operators and the delivery loop.
    pub index: Option<String>,
    /// Why the message is queued (the error that sent it here), if known.
    pub last_error: Option<String>,
}

impl NewMessage {
    /// A message with priority 0, due now, [`DEFAULT_MAX_RETRIES`], no metadata.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        NewMessage {
            payload: payload.into(),
            priority: 0,
            retry_at: None,
            max_retries: DEFAULT_MAX_RETRIES,
            index: None,
            last_error: None,
        }
    }

    /// With this priority (higher first).
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Not due before `t`.
    pub fn retry_at(mut self, t: Timestamp) -> Self {
        self.retry_at = Some(t);
        self
    }

    /// With this retry limit.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// With this target index.
    pub fn index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// With this reason for being queued (cut to [`MAX_ERROR_BYTES`](crate::MAX_ERROR_BYTES)).
    pub fn last_error(mut self, error: impl Into<String>) -> Self {
        let error = error.into();
        self.last_error = Some(match crate::bounded_error(&error) {
            std::borrow::Cow::Borrowed(_) => error,
            std::borrow::Cow::Owned(cut) => cut,
        });
        self
    }
}

/// A queued message, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Its id (arrival order).
    pub id: MessageId,
    /// The bytes to deliver.
    #[serde(skip)]
    pub payload: Vec<u8>,
    /// Higher is delivered first.
    pub priority: u8,
    /// Not delivered before this time.
    pub retry_at: Timestamp,
    /// Failed attempts so far (reschedules).
    pub attempts: u32,
    /// Failed attempts allowed before it becomes a dead letter.
    pub max_retries: u32,
    /// SHA-256 of the payload.
    pub payload_hash: PayloadHash,
    /// When it was first appended.
    pub enqueued_at: Timestamp,
    /// The target index, if given.
    pub index: Option<String>,
    /// The last error that kept it from being delivered.
    pub last_error: Option<String>,
    /// It was leased when its holder shut down and was given back by
    /// [`Queue::release`](crate::Queue::release) (reference 004 ch. 5, `pending_shutdown`);
    /// it may have been delivered already, so delivery must be idempotent.
    pub pending_shutdown: bool,
}

impl Message {
    /// The payload's length in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }
}

/// Proof of holding a message: which lease it is. A reschedule or dead-lettering with a
/// token that is no longer current (the lease expired and someone else leased the message)
/// changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub u64);

/// A message handed to one consumer until `expires_at`; unless it is acked, rescheduled or
/// dead-lettered before then, it becomes due again for anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The message.
    pub message: Message,
    /// Which lease this is.
    pub token: LeaseToken,
    /// When the lease ends.
    pub expires_at: Timestamp,
}

impl Lease {
    /// The message's id.
    pub fn id(&self) -> MessageId {
        self.message.id
    }
}

/// What [`Queue::append`](crate::Queue::append) did with one message of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", content = "id", rename_all = "snake_case")]
pub enum Appended {
    /// Stored under this id.
    New(MessageId),
    /// Not stored: a message with the same payload hash is queued under this id (or came
    /// earlier in the same batch).
    Duplicate(MessageId),
}

impl Appended {
    /// The id the payload is queued under, new or existing.
    pub fn id(&self) -> MessageId {
        match self {
            Appended::New(id) | Appended::Duplicate(id) => *id,
        }
    }
}

/// What [`Queue::reschedule`](crate::Queue::reschedule) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescheduled {
    /// Due again at `retry_at`, after `attempts` failed attempts.
    Scheduled {
        /// Failed attempts so far, this one included.
        attempts: u32,
        /// When it is due again.
        retry_at: Timestamp,
    },
    /// The attempt was its last (`attempts > max_retries`): it is a dead letter now.
    DeadLettered,
    /// The lease was no longer current (it expired, or the message was acked): nothing
    /// changed.
    LeaseLost,
}

/// A message that will not be retried, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    /// The message as it was when it died.
    pub message: Message,
    /// Why (the last error, or the reason given to `dead_letter`).
    pub reason: String,
    /// When it became a dead letter.
    pub dead_at: Timestamp,
}

/// Which dead letters an operation applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// All of them.
    All,
    /// These ids (unknown ids are ignored).
    Ids(Vec<MessageId>),
}

impl Selection {
    pub(crate) fn contains(&self, id: MessageId) -> bool {
        match self {
            Selection::All => true,
            Selection::Ids(ids) => ids.contains(&id),
        }
    }
}

/// What [`Queue::replay`](crate::Queue::replay) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Replayed {
    /// Dead letters back in the queue (attempts reset to 0, due now).
    pub replayed: u64,
    /// Dead letters dropped because a copy of their payload is queued already.
    pub duplicates: u64,
}

/// A snapshot of the queue (reference 004 ch. 5 alarms on the backlog; 500 there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Stats {
    /// Messages in the queue, leased or not (dead letters excluded).
    pub backlog: u64,
    /// Messages not leased whose `retry_at` has come.
    pub due: u64,
    /// Messages leased to a consumer (including expired leases not yet reclaimed).
    pub leased: u64,
    /// Age of the oldest message in the queue (by `enqueued_at`); `None` when empty.
    #[serde(serialize_with = "ser_opt_ms", rename = "oldest_age_ms")]
    pub oldest_age: Option<Duration>,
    /// Dead letters.
    pub dead_letters: u64,
}

fn ser_opt_ms<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        None => s.serialize_none(),
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_hash_is_sha256() {
        assert_eq!(
            PayloadHash::of(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
