//! The stored form of a message, shared by both backends: a small versioned binary record.
//!
//! Layout (integers big-endian):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 1 | version (1) |
//! | 1 | 1 | flags: bit 0 `pending_shutdown` (the Redis scripts set it in place) |
//! | 2 | 8 | id |
//! | 10 | 1 | priority |
//! | 11 | 8 | retry_at (ms) |
//! | 19 | 8 | enqueued_at (ms) |
//! | 27 | 4 | attempts (the Redis lease script rewrites it, and the last error, when a lease expires) |
//! | 31 | 4 | max_retries |
//! | 35 | 32 | payload SHA-256 |
//! | 67 | … | index, last error: each a tag byte (0 none, 1 some) then u32 length and UTF-8 |
//! | … | … | payload: u32 length and bytes |

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::message::{Message, MessageId, NewMessage, PayloadHash};

const VERSION: u8 = 1;
const FLAG_PENDING_SHUTDOWN: u8 = 1;
/// Byte offset of the flags (the Redis release script sets bit 0 there).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const FLAGS_OFFSET: usize = 1;

/// A record's fields, borrowed: what [`encode`] and [`encode_new`] write.
struct Fields<'a> {
    pending_shutdown: bool,
    id: u64,
    priority: u8,
    retry_at: u64,
    enqueued_at: u64,
    attempts: u32,
    max_retries: u32,
    hash: &'a [u8; 32],
    index: Option<&'a str>,
    last_error: Option<&'a str>,
    payload: &'a [u8],
}

/// Encodes `m`.
pub(crate) fn encode(m: &Message) -> Vec<u8> {
    write(&Fields {
        pending_shutdown: m.pending_shutdown,
        id: m.id.0,
        priority: m.priority,
        retry_at: m.retry_at.as_millis(),
        enqueued_at: m.enqueued_at.as_millis(),
        attempts: m.attempts,
        max_retries: m.max_retries,
        hash: &m.payload_hash.0,
        index: m.index.as_deref(),
        last_error: m.last_error.as_deref(),
        payload: &m.payload,
    })
}

/// Encodes the message [`crate::message_from_new`] would build, without building it (an
/// append copies each payload once, into its record).
pub(crate) fn encode_new(
    n: &NewMessage,
    id: MessageId,
    hash: &PayloadHash,
    now: Timestamp,
) -> Vec<u8> {
    write(&Fields {
        pending_shutdown: false,
        id: id.0,
        priority: n.priority,
        retry_at: n.retry_at.unwrap_or(now).as_millis(),
        enqueued_at: now.as_millis(),
        attempts: 0,
        max_retries: n.max_retries,
        hash: &hash.0,
        index: n.index.as_deref(),
        last_error: n.last_error.as_deref(),
        payload: &n.payload,
    })
}

fn write(f: &Fields<'_>) -> Vec<u8> {
    let extra = f.index.map_or(0, str::len) + f.last_error.map_or(0, str::len);
    let mut out = Vec::with_capacity(67 + 10 + extra + 4 + f.payload.len());
    out.push(VERSION);
    out.push(if f.pending_shutdown {
        FLAG_PENDING_SHUTDOWN
    } else {
        0
    });
    out.extend_from_slice(&f.id.to_be_bytes());
    out.push(f.priority);
    out.extend_from_slice(&f.retry_at.to_be_bytes());
    out.extend_from_slice(&f.enqueued_at.to_be_bytes());
    out.extend_from_slice(&f.attempts.to_be_bytes());
    out.extend_from_slice(&f.max_retries.to_be_bytes());
    out.extend_from_slice(f.hash);
    put_opt_str(&mut out, f.index);
    put_opt_str(&mut out, f.last_error);
    put_bytes(&mut out, f.payload);
    out
}

/// Decodes a record written by [`encode`].
pub(crate) fn decode(bytes: &[u8]) -> Result<Message> {
    let mut r = Reader { bytes, pos: 0 };
    let version = r.u8()?;
    if version != VERSION {
        return Err(Error::corrupt(format!("unknown record version {version}")));
    }
    let flags = r.u8()?;
    let id = MessageId(r.u64()?);
    let priority = r.u8()?;
    let retry_at = Timestamp::from_millis(r.u64()?);
    let enqueued_at = Timestamp::from_millis(r.u64()?);
    let attempts = r.u32()?;
    let max_retries = r.u32()?;
    let mut hash = [0u8; 32];
    hash.copy_from_slice(r.take(32)?);
    let index = r.opt_str()?;
    let last_error = r.opt_str()?;
    let payload = r.bytes()?.to_vec();
    if r.pos != bytes.len() {
        return Err(Error::corrupt("trailing bytes after the payload"));
    }
    Ok(Message {
        id,
        payload,
        priority,
        retry_at,
        attempts,
        max_retries,
        payload_hash: PayloadHash(hash),
        enqueued_at,
        index,
        last_error,
        pending_shutdown: flags & FLAG_PENDING_SHUTDOWN != 0,
    })
}

/// What removing a message needs from its record, read without decoding the rest (the
/// payload is not copied): its schedule key parts and payload hash.
pub(crate) struct Header {
    pub priority: u8,
    pub retry_at: u64,
    pub hash: [u8; 32],
}

/// Reads the [`Header`] of a record written by [`encode`].
pub(crate) fn header(bytes: &[u8]) -> Result<Header> {
    let mut r = Reader { bytes, pos: 0 };
    let version = r.u8()?;
    if version != VERSION {
        return Err(Error::corrupt(format!("unknown record version {version}")));
    }
    r.take(1 + 8)?; // flags, id
    let priority = r.u8()?;
    let retry_at = r.u64()?;
    r.take(8 + 4 + 4)?; // enqueued_at, attempts, max_retries
    let mut hash = [0u8; 32];
    hash.copy_from_slice(r.take(32)?);
    Ok(Header {
        priority,
        retry_at,
        hash,
    })
}

/// A dead letter's record: dead_at (u64), reason (u32 length + UTF-8), then the message record.
pub(crate) fn encode_dead(m: &Message, reason: &str, dead_at: Timestamp) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&dead_at.as_millis().to_be_bytes());
    put_bytes(&mut out, reason.as_bytes());
    out.extend_from_slice(&encode(m));
    out
}

/// Decodes [`encode_dead`].
pub(crate) fn decode_dead(bytes: &[u8]) -> Result<crate::DeadLetter> {
    let mut r = Reader { bytes, pos: 0 };
    let dead_at = Timestamp::from_millis(r.u64()?);
    let reason = String::from_utf8(r.bytes()?.to_vec())
        .map_err(|_| Error::corrupt("dead-letter reason is not UTF-8"))?;
    let message = decode(&bytes[r.pos..])?;
    Ok(crate::DeadLetter {
        message,
        reason,
        dead_at,
    })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Lengths beyond u32 are refused at append (`check_new`), so this never truncates.
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(b);
}

fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_bytes(out, s.as_bytes());
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| Error::corrupt(format!("record truncated at byte {}", self.pos)))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(b))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn opt_str(&mut self) -> Result<Option<String>> {
        match self.u8()? {
            0 => Ok(None),
            1 => String::from_utf8(self.bytes()?.to_vec())
                .map(Some)
                .map_err(|_| Error::corrupt("metadata is not UTF-8")),
            t => Err(Error::corrupt(format!("unknown option tag {t}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Message {
        Message {
            id: MessageId(42),
            payload: b"{\"a\":1}".to_vec(),
            priority: 7,
            retry_at: Timestamp::from_millis(1000),
            attempts: 2,
            max_retries: 5,
            payload_hash: PayloadHash::of(b"{\"a\":1}"),
            enqueued_at: Timestamp::from_millis(900),
            index: Some("products".into()),
            last_error: None,
            pending_shutdown: true,
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(decode(&encode(&m)).unwrap(), m);
        let d = decode_dead(&encode_dead(
            &m,
            "429 after 5 attempts",
            Timestamp::from_millis(7),
        ))
        .unwrap();
        assert_eq!(d.message, m);
        assert_eq!(d.reason, "429 after 5 attempts");
        assert_eq!(d.dead_at, Timestamp::from_millis(7));
    }

    #[test]
    fn a_new_message_encodes_as_the_message_it_becomes() {
        let n = NewMessage::new(b"{}".to_vec())
            .priority(3)
            .index("i")
            .retry_at(Timestamp::from_millis(5));
        let (id, hash, now) = (
            MessageId(9),
            PayloadHash::of(b"{}"),
            Timestamp::from_millis(4),
        );
        assert_eq!(
            encode_new(&n, id, &hash, now),
            encode(&crate::message_from_new(&n, id, hash, now))
        );
    }

    #[test]
    fn the_header_matches_the_full_decode() {
        let m = sample();
        let h = header(&encode(&m)).unwrap();
        assert_eq!(
            (h.priority, h.retry_at, h.hash),
            (m.priority, m.retry_at.as_millis(), m.payload_hash.0)
        );
        assert!(header(&encode(&m)[..60]).is_err());
    }

    #[test]
    fn flags_live_at_their_documented_offset() {
        let mut m = sample();
        m.pending_shutdown = false;
        let mut bytes = encode(&m);
        bytes[FLAGS_OFFSET] |= 1;
        assert!(decode(&bytes).unwrap().pending_shutdown);
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let bytes = encode(&sample());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "truncated at {n}");
        }
        let mut bad = bytes.clone();
        bad[0] = 9;
        assert_eq!(decode(&bad).unwrap_err().kind(), crate::ErrorKind::Corrupt);
    }
}
