//! Adaptive concurrency: AIMD on the number of bulk requests in flight.
//!
//! - **Multiplicative decrease**: a response with throttled items (429,
//!   `rejected_execution_exception`) halves the limit (never below 1) — but only once per
//!   round: responses to requests sent *before* the last decrease do not cut again, since
//!   they report the congestion that decrease already answered (TCP's one cut per RTT).
//! - **Additive increase**: after `limit` consecutive responses without a throttled item
//!   (one clean round at the current limit) the limit grows by 1, up to the configured maximum.
//!
//! - Requests that failed as a whole without throttling (a reset, a timeout, a 5xx) are no
//!   signal either way: they say nothing about the write queues.
//!
//! Why AIMD: it is the rule known to converge to a fair, stable share when several clients
//! compete for one bottleneck (the data nodes' write queues), and it reacts within one
//! round trip. A gradient rule (Netflix's `concurrency-limits` Gradient2) needs a stable
//! latency signal, which bulk latency (proportional to batch size and merges) is not.

/// The limit and its bookkeeping. Pure: the indexer calls it with what happened.
#[derive(Clone, Debug)]
pub(crate) struct Aimd {
    limit: usize,
    max: usize,
    adaptive: bool,
    clean: usize,
    /// Bumped by every decrease; each request remembers the epoch it was sent in.
    epoch: u64,
}

impl Aimd {
    pub(crate) fn new(max: usize, adaptive: bool) -> Aimd {
        Aimd {
            limit: max.max(1),
            max: max.max(1),
            adaptive,
            clean: 0,
            epoch: 0,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A response arrived for a request sent in `sent_epoch`; `throttled`: it had throttled
    /// items (or was a 429 as a whole). Returns whether the limit changed.
    pub(crate) fn on_response(&mut self, sent_epoch: u64, throttled: bool) -> bool {
        if !self.adaptive {
            return false;
        }
        if throttled {
            self.clean = 0;
            if sent_epoch < self.epoch {
                return false;
            }
            let next = ((self.limit as f64) * crate::defaults::DECREASE_FACTOR).floor() as usize;
            let next = next.max(1);
            self.epoch += 1;
            let changed = next != self.limit;
            self.limit = next;
            changed
        } else {
            self.clean += 1;
            if self.clean >= self.limit && self.limit < self.max {
                self.limit += 1;
                self.clean = 0;
                true
            } else {
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_once_per_round_and_grows_by_one_per_clean_round() {
        let mut a = Aimd::new(8, true);
        let e0 = a.epoch();
        assert!(a.on_response(e0, true));
        assert_eq!(a.limit(), 4);
        // Other requests of the same round report the same congestion: no second cut.
        assert!(!a.on_response(e0, true));
        assert_eq!(a.limit(), 4);
        let e1 = a.epoch();
        assert!(a.on_response(e1, true));
        assert_eq!(a.limit(), 2);
        let e2 = a.epoch();
        a.on_response(e2, true);
        assert_eq!(a.limit(), 1);
        a.on_response(a.epoch(), true);
        assert_eq!(a.limit(), 1, "never below 1");
        // One clean response at limit 1 → 2; two more → 3; three more → 4.
        assert!(a.on_response(a.epoch(), false));
        assert_eq!(a.limit(), 2);
        a.on_response(a.epoch(), false);
        assert_eq!(a.limit(), 2);
        a.on_response(a.epoch(), false);
        assert_eq!(a.limit(), 3);
        for _ in 0..3 {
            a.on_response(a.epoch(), false);
        }
        assert_eq!(a.limit(), 4);
    }

    #[test]
    fn never_above_the_maximum_and_fixed_when_not_adaptive() {
        let mut a = Aimd::new(2, true);
        for _ in 0..10 {
            a.on_response(a.epoch(), false);
        }
        assert_eq!(a.limit(), 2);
        let mut f = Aimd::new(3, false);
        f.on_response(f.epoch(), true);
        assert_eq!(f.limit(), 3);
    }
}
