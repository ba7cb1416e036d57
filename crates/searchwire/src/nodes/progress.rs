//! Whether a node is still making progress: the attempts in flight on it, and when one of
//! them last ended with something from the node (an answer or a transport error).
//!
//! A node that holds attempts but has given nothing back for [`STALLED_AFTER`] looks cut
//! off (a partition: connections open, nothing flows), and selection sends new requests to
//! another free live node instead, as it does for a node pausing after a `Retry-After`. The
//! attempts already on the node are left alone: they keep their attempt timeout and the
//! liveness check after it, so a request that is only slow is never cut, and the node is
//! judged only by what those attempts find. When every live node is stalled, selection
//! goes on as before.
//!
//! Without it, a partitioned node of three catches a third of new requests until its first
//! attempt times out (30 s by default): a handful of callers are all stuck there within a
//! second. With it, only the requests sent in the first [`STALLED_AFTER`] wait.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long a node with attempts in flight may give nothing back before new requests
/// prefer other nodes: 250 ms. Short, because callers that land on a cut-off node wait out
/// their whole attempt timeout, and at 50 requests per second a third of them land there;
/// harmless when wrong, because it only steers new requests while another live node is
/// free (a node busy with one long request, a `_reindex`, gets the next requests elsewhere,
/// and that request runs on untouched).
pub(crate) const STALLED_AFTER: Duration = Duration::from_millis(250);

/// One node's attempts in flight and its last progress.
#[derive(Debug)]
pub(crate) struct Progress {
    /// The instant `last` counts from.
    origin: Instant,
    in_flight: AtomicU32,
    /// Nanoseconds from `origin` to the node's last progress: an attempt on it ended with
    /// something from the node, or it went from idle to busy (its clock starts then).
    last: AtomicU64,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            origin: Instant::now(),
            in_flight: AtomicU32::new(0),
            last: AtomicU64::new(0),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// An attempt on the node starts at `now`.
    #[inline]
    pub(crate) fn started(&self, now: Instant) {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            self.last.store(self.nanos(now), Ordering::Relaxed);
        }
    }

    /// An attempt on the node is over (answered, failed, timed out or dropped).
    #[inline]
    pub(crate) fn left(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Attempts in flight on the node right now.
    #[inline]
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The node gave something back at `at` (an answer or a transport error).
    #[inline]
    pub(crate) fn progressed(&self, at: Instant) {
        self.last.store(self.nanos(at), Ordering::Relaxed);
    }

    /// Whether the node holds attempts and has given nothing back for [`STALLED_AFTER`].
    #[inline]
    pub(crate) fn stalled(&self, now: Instant) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
            && self
                .nanos(now)
                .saturating_sub(self.last.load(Ordering::Relaxed))
                > STALLED_AFTER.as_nanos() as u64
    }
}

/// Counts one attempt in flight on a node for as long as it lives: dropped when the
/// attempt's exchange is over, however it ended (a caller that gives up drops it too).
pub(crate) struct InFlight<'a>(&'a Progress);

impl<'a> InFlight<'a> {
    /// Starts counting an attempt on the node of `progress` at `now`.
    #[inline]
    pub(crate) fn start(progress: &'a Progress, now: Instant) -> InFlight<'a> {
        progress.started(now);
        InFlight(progress)
    }
}

impl Drop for InFlight<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.left();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_busy_node_that_gives_nothing_back_stalls_and_recovers_with_its_first_answer() {
        let p = Progress::new();
        let t0 = Instant::now();
        assert!(
            !p.stalled(t0 + Duration::from_secs(60)),
            "idle is not stalled"
        );
        p.started(t0);
        assert!(!p.stalled(t0 + STALLED_AFTER), "not before the limit");
        assert!(p.stalled(t0 + STALLED_AFTER + Duration::from_millis(1)));
        // Another attempt starting does not reset the clock; an answer does.
        p.started(t0 + Duration::from_secs(1));
        assert!(p.stalled(t0 + Duration::from_secs(1)));
        p.progressed(t0 + Duration::from_secs(1));
        assert!(!p.stalled(t0 + Duration::from_secs(1) + STALLED_AFTER));
        p.left();
        p.left();
        assert!(
            !p.stalled(t0 + Duration::from_secs(60)),
            "nothing in flight"
        );
        // Busy again: the clock starts then, not at the last answer.
        p.started(t0 + Duration::from_secs(60));
        assert!(!p.stalled(t0 + Duration::from_secs(60) + STALLED_AFTER));
    }
}
