//! Message ids of a sharded queue: each shard counts its own ids (`S:seq` of its layout),
//! and the queue's id keeps the shard in its low 8 bits — `local << 8 | shard` — so ids are
//! unique across shards, an id names its shard without a lookup, and ordering the queue's
//! ids orders each shard's by arrival (listing pages by id across shards).

use crate::message::{MessageId, PayloadHash};

/// Bits of an id that hold the shard.
const SHARD_BITS: u32 = 8;
const SHARD_MASK: u64 = (1 << SHARD_BITS) - 1;

/// The queue's id of a shard's `local` id.
pub(crate) fn global(shard: usize, local: MessageId) -> MessageId {
    MessageId((local.0 << SHARD_BITS) | (shard as u64 & SHARD_MASK))
}

/// The shard and the shard's own id of a queue id.
pub(crate) fn split(id: MessageId) -> (usize, MessageId) {
    ((id.0 & SHARD_MASK) as usize, MessageId(id.0 >> SHARD_BITS))
}

/// The shard's id to list after so that it returns exactly its ids whose queue id is above
/// `after` (`None`: from the start).
pub(crate) fn local_after(after: Option<MessageId>, shard: usize) -> Option<MessageId> {
    let (after_shard, after_local) = split(after?);
    if shard > after_shard {
        // (after_local, shard) > after already: list from after_local on.
        after_local.0.checked_sub(1).map(MessageId)
    } else {
        Some(after_local)
    }
}

/// The shard of a payload: its SHA-256's first 8 bytes modulo the shard count. The same
/// payload always goes to the same shard, so its de-duplication there is exact.
pub(crate) fn shard_of(hash: &PayloadHash, shards: usize) -> usize {
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.0[..8]);
    (u64::from_be_bytes(first) % shards.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_shard() {
        for shard in [0, 1, 7, 255] {
            for local in [1, 2, 1 << 40] {
                let id = global(shard, MessageId(local));
                assert_eq!(split(id), (shard, MessageId(local)));
            }
        }
        // Distinct across shards for the same local id.
        assert_ne!(global(0, MessageId(1)), global(1, MessageId(1)));
    }

    #[test]
    fn paging_after_an_id_skips_exactly_the_ids_up_to_it() {
        let shards = 4;
        let all: Vec<MessageId> = (1..=5)
            .flat_map(|l| (0..shards).map(move |s| global(s, MessageId(l))))
            .collect();
        for &after in &all {
            for shard in 0..shards {
                let expected: Vec<u64> = (1..=5)
                    .filter(|&l| global(shard, MessageId(l)) > after)
                    .collect();
                let from = local_after(Some(after), shard).map_or(0, |m| m.0);
                let got: Vec<u64> = (1..=5).filter(|&l| l > from).collect();
                assert_eq!(got, expected, "after {after:?}, shard {shard}");
            }
        }
        assert_eq!(local_after(None, 3), None);
    }

    #[test]
    fn a_payload_always_lands_on_the_same_shard_and_all_shards_are_used() {
        let mut seen = [0usize; 8];
        for i in 0..800 {
            let h = PayloadHash::of(format!("doc {i}").as_bytes());
            let s = shard_of(&h, 8);
            assert_eq!(s, shard_of(&h, 8));
            seen[s] += 1;
        }
        // SHA-256 spreads 800 payloads over 8 shards: each gets about 100.
        assert!(seen.iter().all(|&n| (60..=140).contains(&n)), "{seen:?}");
    }
}
