//! Redis Cluster's key → slot function, and reading the answers that name a slot's node
//! (`CLUSTER SLOTS`, `MOVED`, `ASK`). Pure functions, tested against the spec's values here
//! and against `CLUSTER KEYSLOT` of a real server in `tests/redis_cluster.rs`.

use redis::Value;

/// Number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection), the checksum
/// the Redis Cluster specification assigns keys to slots with.
pub(crate) fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: CRC16 of its hash tag (what lies between the first `{` and the
/// first `}` after it, when that is not empty) or else of the whole key, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Int(i)) => Some(*i),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    }
}

/// The primary that a `CLUSTER SLOTS` answer names for `slot`, as (host, port); the host is
/// empty when the node answered with an empty address (meaning: the node asked). `None`
/// when no range covers the slot (the cluster is not fully configured) or the answer is not
/// one of `CLUSTER SLOTS`.
pub(crate) fn slot_owner(answer: &Value, slot: u16) -> Option<(String, u16)> {
    let Value::Array(ranges) = answer else {
        return None;
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(start), Some(end)) = (int(fields.first()), int(fields.get(1))) else {
            continue;
        };
        if !(start..=end).contains(&i64::from(slot)) {
            continue;
        }
        let Some(Value::Array(primary)) = fields.get(2) else {
            return None;
        };
        let host = text(primary.first())?;
        let port = u16::try_from(int(primary.get(1))?).ok()?;
        return Some((host, port));
    }
    None
}

/// A `MOVED` or `ASK` answer: the slot is served elsewhere (for good, or during a
/// migration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    /// `ASK` (one command, during a migration) rather than `MOVED`.
    pub ask: bool,
    pub slot: u16,
    pub host: String,
    pub port: u16,
}

/// Reads `MOVED 3999 127.0.0.1:6381` or `ASK 3999 [::1]:6381`; `None` for anything else.
pub(crate) fn parse_redirect(answer: &str) -> Option<Redirect> {
    let mut words = answer.split_whitespace();
    let ask = match words.next()? {
        "MOVED" => false,
        "ASK" => true,
        _ => return None,
    };
    let slot: u16 = words.next()?.parse().ok().filter(|&s| s < SLOTS)?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if words.next().is_some() {
        return None;
    }
    Some(Redirect {
        ask,
        slot,
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_specification() {
        // The check value of CRC16/XMODEM, and the example of the Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
        assert_eq!(key_slot(b"123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn hash_tags_choose_the_slot() {
        // Values of `CLUSTER KEYSLOT` (Redis 7.0.15).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        // Only the first `{...}`; an empty tag hashes the whole key.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{unclosed"), crc16(b"{unclosed") % SLOTS);
        // The queue's shards: every key of shard K shares the tag `stream:K`.
        assert_eq!(
            key_slot(b"{es-retry-stream:3}:ready"),
            key_slot(b"es-retry-stream:3")
        );
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn the_slot_map_names_the_primary() {
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(10922), node("", 7001)]),
        ]);
        assert_eq!(slot_owner(&answer, 0), Some(("127.0.0.1".into(), 7000)));
        assert_eq!(slot_owner(&answer, 5460), Some(("127.0.0.1".into(), 7000)));
        assert_eq!(slot_owner(&answer, 5461), Some((String::new(), 7001)));
        assert_eq!(slot_owner(&answer, 10923), None);
        assert_eq!(slot_owner(&Value::Nil, 1), None);
        let bad_port = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(10),
            node("h", 70000),
        ])]);
        assert_eq!(slot_owner(&bad_port, 1), None);
    }

    #[test]
    fn moved_and_ask_are_read() {
        assert_eq!(
            parse_redirect("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect {
                ask: false,
                slot: 3999,
                host: "127.0.0.1".into(),
                port: 6381
            })
        );
        assert_eq!(
            parse_redirect("ASK 1 [::1]:7000"),
            Some(Redirect {
                ask: true,
                slot: 1,
                host: "::1".into(),
                port: 7000
            })
        );
        for bad in [
            "",
            "MOVED",
            "MOVED 3999",
            "MOVED x 127.0.0.1:6381",
            "MOVED 16384 h:1",
            "MOVED 1 h:0",
            "MOVED 1 h",
            "MOVED 1 h:1 extra",
            "READONLY You can't write against a read only replica.",
        ] {
            assert_eq!(parse_redirect(bad), None, "{bad}");
        }
    }
}
