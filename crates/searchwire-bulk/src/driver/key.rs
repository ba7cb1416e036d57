//! The same-id ordering key and the map keyed by it.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// The same-id ordering key: a hash of index and id. A collision only makes two unrelated
/// actions wait for each other; it never reorders anything.
///
/// foldhash with a random per-process seed, not std's SipHash: ids come from input files, so
/// the key must not be predictable (a fixed-key hash lets a hostile file put every id in one
/// bucket of [`KeyMap`], which then only passes the key through), but SipHash over the two
/// strings was ~800 instructions per action in the profile. A seeded foldhash keeps the
/// attacker from computing collisions offline, and the key is hashed once: [`KeyMap`] uses it
/// as its own hash instead of hashing it again.
pub(crate) fn key(index: &str, id: &str) -> u64 {
    static STATE: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
    STATE.get_or_init(Default::default).hash_one((index, id))
}

/// A map keyed by [`key`]: the key is already a seeded hash, so it is its own hash.
pub(super) type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// The pass-through hasher of [`KeyMap`].
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for a `u64` key; this keeps any other input well mixed.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordering_key_is_stable_and_tells_index_from_id() {
        assert_eq!(key("logs", "a1"), key("logs", "a1"));
        assert_ne!(key("logs", "a1"), key("logs", "a2"));
        assert_ne!(key("logs", "a1"), key("other", "a1"));
        // The boundary between index and id is part of the key.
        assert_ne!(key("ab", "c"), key("a", "bc"));
    }

    #[test]
    fn the_key_map_uses_the_key_as_its_hash() {
        let build = BuildHasherDefault::<KeyHasher>::default();
        let k = key("logs", "a1");
        assert_eq!(build.hash_one(k), k);
        let mut map = KeyMap::default();
        map.insert(k, 1);
        assert_eq!(map.get(&k), Some(&1));
    }
}
