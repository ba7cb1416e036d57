//! The sequence numbers of the actions not finished yet, whose smallest is the watermark.
//!
//! Actions reach the driver numbered 0, 1, 2, ... in order (the handle numbers them under
//! its lock and sends them down one channel) and finish in any order. A `BTreeSet` of them
//! cost ~330 instructions per action (an insert and a remove); this is one bit per action
//! from the oldest unfinished one on, in 64-bit words: an insert sets a bit, a finish clears
//! one and drops the leading empty words (the indexer's cost per action fell by ~270
//! instructions, docs/benchmarks.md).
//!
//! Memory: one bit per action added since the oldest unfinished one — an item retried for
//! 10 minutes at 100,000 actions/s holds 7.5 MB until it finishes (the set held 32+ bytes per
//! *unfinished* action, so a large buffer of waiting actions cost more there).

use std::collections::VecDeque;

/// The unfinished sequence numbers.
#[derive(Debug, Default)]
pub(super) struct Unfinished {
    /// The sequence number of bit 0 of `words[0]` (a multiple of 64).
    base: u64,
    /// Bit `i` of word `w`: action `base + 64 w + i` is unfinished.
    words: VecDeque<u64>,
    /// One more than the largest sequence number inserted: words below it that are empty
    /// can be dropped, no later insert lands in them.
    next: u64,
    /// How many bits are set.
    count: usize,
}

impl Unfinished {
    /// Marks `seq` unfinished. Numbers come in increasing order; one below a dropped word
    /// (which the driver never sends) is ignored.
    pub(super) fn insert(&mut self, seq: u64) {
        let Some(at) = seq.checked_sub(self.base) else {
            debug_assert!(
                false,
                "sequence number {seq} below the window {}",
                self.base
            );
            return;
        };
        let word = (at / 64) as usize;
        while self.words.len() <= word {
            self.words.push_back(0);
        }
        let bit = 1u64 << (at % 64);
        if self.words[word] & bit == 0 {
            self.words[word] |= bit;
            self.count += 1;
        }
        self.next = self.next.max(seq + 1);
    }

    /// Marks `seq` finished (nothing if it was not unfinished).
    pub(super) fn remove(&mut self, seq: u64) {
        let Some(at) = seq.checked_sub(self.base) else {
            return;
        };
        let Some(w) = self.words.get_mut((at / 64) as usize) else {
            return;
        };
        let bit = 1u64 << (at % 64);
        if *w & bit == 0 {
            return;
        }
        *w &= !bit;
        self.count -= 1;
        while self.words.front() == Some(&0) && self.base + 64 <= self.next {
            self.words.pop_front();
            self.base += 64;
        }
    }

    /// The smallest unfinished sequence number.
    pub(super) fn first(&self) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        // After `remove` the first word holds a bit, unless it is the one still filling
        // (then a later one does): the watermark is read twice per action, so the first
        // word is tried before the scan.
        let (i, w) = match self.words.front() {
            Some(&w) if w != 0 => (0, w),
            _ => self
                .words
                .iter()
                .enumerate()
                .find(|(_, w)| **w != 0)
                .map(|(i, w)| (i, *w))?,
        };
        Some(self.base + 64 * i as u64 + u64::from(w.trailing_zeros()))
    }

    /// Whether every inserted number is finished.
    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Against a `BTreeSet` model: numbers inserted in order, finished in random order, some
    /// finished twice or never inserted; checked after every step.
    #[test]
    fn behaves_like_an_ordered_set() {
        for seed in 0..20 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut u = Unfinished::default();
            let mut model = BTreeSet::new();
            let mut next = 0u64;
            for _ in 0..5_000 {
                if rng.u8(..) < 120 {
                    u.insert(next);
                    model.insert(next);
                    next += 1;
                } else {
                    // Mostly recent numbers (a window of in-flight actions), sometimes old
                    // or not yet inserted ones.
                    let seq = match rng.u8(..4) {
                        0 => rng.u64(..next + 200),
                        _ => next.saturating_sub(rng.u64(..150)),
                    };
                    u.remove(seq);
                    model.remove(&seq);
                }
                assert_eq!(u.first(), model.first().copied(), "seed {seed}");
                assert_eq!(u.is_empty(), model.is_empty());
                assert_eq!(u.count, model.len());
            }
            // Every word before the oldest unfinished one is dropped.
            if let Some(f) = model.first() {
                assert!(u.base <= *f && *f < u.base + 64, "{} {f}", u.base);
            }
        }
    }

    #[test]
    fn one_stuck_action_keeps_a_bit_per_later_action() {
        let mut u = Unfinished::default();
        for seq in 0..10_000 {
            u.insert(seq);
        }
        for seq in 1..10_000 {
            u.remove(seq);
        }
        assert_eq!(u.first(), Some(0));
        assert_eq!(u.words.len(), 10_000usize.div_ceil(64));
        u.remove(0);
        assert_eq!(u.first(), None);
        // The word still filling is kept; the words below it are gone.
        assert_eq!(u.words.len(), 1);
        assert_eq!(u.base, 9_984);
        u.insert(10_000);
        assert_eq!(u.first(), Some(10_000));
    }
}
