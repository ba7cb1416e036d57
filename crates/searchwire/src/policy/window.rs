//! A sliding time window of counters, shared by the retry budget, the cluster breaker and
//! adaptive jitter.
//!
//! The window is cut into `slots` equal slots; a value added at `now` lands in the slot
//! that contains `now` and leaves the window once that slot is more than a full window old.
//! Expiry therefore has the granularity of one slot (window / slots): a value counts for
//! between `window - slot` and `window`. Pure: time is passed in, never read, so tests drive
//! it with tokio's paused clock or with hand-made instants.

use std::time::Duration;

use tokio::time::Instant;

/// Counters kept per slot. Two are enough for every user (the breaker counts successes
/// and failures; the budget and jitter use one).
pub(crate) const COUNTERS: usize = 2;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The slot's index since `origin` (slot `epoch` covers
    /// `[origin + epoch × slot_len, origin + (epoch + 1) × slot_len)`).
    epoch: u64,
    values: [i64; COUNTERS],
}

/// Counters summed over the last `window`.
#[derive(Clone, Debug)]
pub(crate) struct SlidingWindow {
    origin: Instant,
    slot_len: Duration,
    slots: Vec<Slot>,
    /// The slot of the last `add`: its epoch and the instants `[start, end)` it covers.
    /// Time mostly stays within one slot for many calls, and two comparisons are much
    /// cheaper than the division (and the duration arithmetic) that finds the epoch.
    /// Empty (`start == end`) until the first `add`.
    current: (u64, Instant, Instant),
}

impl SlidingWindow {
    /// A window of `window` cut into `slots` slots (at least 1), starting at `origin`.
    pub(crate) fn new(origin: Instant, window: Duration, slots: u32) -> SlidingWindow {
        let slots = slots.max(1);
        let slot_len = (window / slots).max(Duration::from_millis(1));
        SlidingWindow {
            origin,
            slot_len,
            // Epoch 0 is "now" at the start; mark every slot as long expired by giving it an
            // epoch that can never be current (`u64::MAX` is never reached).
            slots: vec![
                Slot {
                    epoch: u64::MAX,
                    values: [0; COUNTERS],
                };
                slots as usize
            ],
            current: (0, origin, origin),
        }
    }

    /// The epoch of the slot that contains `now` (see [`Slot::epoch`]).
    fn epoch(&self, now: Instant) -> u64 {
        self.remembered_epoch(now)
            .unwrap_or_else(|| self.epoch_of(now))
    }

    /// The remembered slot's epoch, when `now` falls inside that slot.
    #[inline]
    fn remembered_epoch(&self, now: Instant) -> Option<u64> {
        let (epoch, start, end) = self.current;
        (start <= now && now < end).then_some(epoch)
    }

    /// [`epoch`](Self::epoch), computed: `(now − origin) / slot_len`, 0 before the origin.
    fn epoch_of(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        u64::try_from(since.as_nanos() / self.slot_len.as_nanos().max(1)).unwrap_or(u64::MAX - 1)
    }

    /// Adds `value` to counter `counter` at `now`.
    ///
    /// Inlined into its callers (the budget's deposit, the breaker's record: each request
    /// adds twice); the epoch's computation, once per slot, is a call of its own.
    #[inline]
    pub(crate) fn add(&mut self, now: Instant, counter: usize, value: i64) {
        let epoch = match self.remembered_epoch(now) {
            Some(epoch) => epoch,
            None => self.remember(now),
        };
        let n = self.slots.len() as u64;
        let slot = &mut self.slots[(epoch % n) as usize];
        if slot.epoch != epoch {
            *slot = Slot {
                epoch,
                values: [0; COUNTERS],
            };
        }
        if let Some(v) = slot.values.get_mut(counter) {
            *v = v.saturating_add(value);
        }
    }

    /// The epoch of the slot that contains `now`, computed, and that slot's bounds
    /// remembered for the next `add` (none when they cannot be represented).
    #[inline(never)]
    fn remember(&mut self, now: Instant) -> u64 {
        let epoch = self.epoch_of(now);
        let slot_nanos = u64::try_from(self.slot_len.as_nanos()).unwrap_or(u64::MAX);
        let bounds = slot_nanos.checked_mul(epoch).and_then(|from| {
            let start = self.origin.checked_add(Duration::from_nanos(from))?;
            let end = start.checked_add(self.slot_len)?;
            Some((start, end))
        });
        if let Some((start, end)) = bounds.filter(|(start, _)| *start <= now) {
            self.current = (epoch, start, end);
        }
        epoch
    }

    /// Every counter summed over the slots still inside the window at `now`.
    pub(crate) fn sum(&self, now: Instant) -> [i64; COUNTERS] {
        let epoch = self.epoch(now);
        let n = self.slots.len() as u64;
        let mut total = [0i64; COUNTERS];
        for s in &self.slots {
            if s.epoch != u64::MAX && s.epoch <= epoch && epoch - s.epoch < n {
                for (t, v) in total.iter_mut().zip(s.values) {
                    *t = t.saturating_add(v);
                }
            }
        }
        total
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        for s in &mut self.slots {
            s.epoch = u64::MAX;
            s.values = [0; COUNTERS];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn values_leave_after_a_full_window() {
        let t0 = Instant::now();
        let mut w = SlidingWindow::new(t0, Duration::from_secs(10), 10);
        w.add(t0, 0, 5);
        w.add(t0 + Duration::from_millis(4500), 1, 2);
        assert_eq!(w.sum(t0), [5, 0]);
        assert_eq!(w.sum(t0 + Duration::from_millis(9999)), [5, 2]);
        // The first slot [0 s, 1 s) expires at 10 s.
        assert_eq!(w.sum(t0 + Duration::from_secs(10)), [0, 2]);
        // The slot [4 s, 5 s) expires at 14 s.
        assert_eq!(w.sum(t0 + Duration::from_millis(13_999)), [0, 2]);
        assert_eq!(w.sum(t0 + Duration::from_secs(14)), [0, 0]);
        // A slot is reused for a new epoch, not added to.
        w.add(t0 + Duration::from_secs(20), 0, 1);
        assert_eq!(w.sum(t0 + Duration::from_secs(20)), [1, 0]);
        w.clear();
        assert_eq!(w.sum(t0 + Duration::from_secs(20)), [0, 0]);
    }

    /// The slot of the last `add` is remembered; an instant outside it — later, or
    /// earlier (another thread's older reading) — still lands in its own slot.
    #[tokio::test(start_paused = true)]
    async fn every_instant_lands_in_its_own_slot_around_the_remembered_one() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = SlidingWindow::new(t0, Duration::from_secs(10), 10);
        w.add(t0 + ms(1500), 0, 1); // slot [1 s, 2 s), remembered
        w.add(t0 + ms(2000), 1, 100); // slot [2 s, 3 s): the end of the remembered one
        w.add(t0 + ms(999), 0, 10); // slot [0 s, 1 s): before the remembered one
        w.add(t0 + ms(1999), 1, 1000); // back in [1 s, 2 s)
                                       // At 10 s the first slot has expired; at 11 s the second; at 12 s the third.
        assert_eq!(w.sum(t0 + ms(9999)), [11, 1100]);
        assert_eq!(w.sum(t0 + ms(10_000)), [1, 1100]);
        assert_eq!(w.sum(t0 + ms(11_000)), [0, 100]);
        assert_eq!(w.sum(t0 + ms(12_000)), [0, 0]);
        // Before the origin: the first slot.
        let mut w = SlidingWindow::new(t0 + ms(5000), Duration::from_secs(10), 10);
        w.add(t0, 0, 3);
        w.add(t0 + ms(5500), 0, 4);
        assert_eq!(w.sum(t0 + ms(5000)), [7, 0]);
    }

    #[tokio::test(start_paused = true)]
    async fn negative_values_and_unknown_counters() {
        let t0 = Instant::now();
        let mut w = SlidingWindow::new(t0, Duration::from_secs(1), 1);
        w.add(t0, 0, 3);
        w.add(t0, 0, -5);
        w.add(t0, 7, 100);
        assert_eq!(w.sum(t0), [-2, 0]);
    }
}
