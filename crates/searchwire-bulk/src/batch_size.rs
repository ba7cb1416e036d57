//! Adaptive batch size: the bytes per bulk request, within bounds, from what the cluster's
//! answers say. AIMD ([`crate::concurrency`]) sets how many requests are in flight; this
//! sets how large each one is.
//!
//! - **Smaller at once** when the cluster says it is too much: a response with throttled
//!   items (429) halves the size (once per change, as AIMD cuts once per round); a request
//!   slower than the latency target cuts it by the step (÷1.5). A 413
//!   (`http.max_content_length`) lowers the *upper bound* below the refused body for the
//!   indexer's life (the limit is a static setting), and the size with it.
//! - **Otherwise it climbs the throughput curve**: the bytes per second of a request slot
//!   (body bytes ÷ latency, summed over [`WINDOW`] answers of one size) is compared with the
//!   previous size's; better → another step the same way (×1.5 or ÷1.5), worse → a step
//!   back. Bulk latency is a fixed cost (the round trip, the coordinating node's fan-out)
//!   plus a cost per byte that grows once a request strains the nodes' heaps and merges:
//!   bytes per second rise with the size, then fall. The climb settles around the top,
//!   moving between its neighbours one step apart (within 1.5× of it either way).
//! - Answers of requests sent before the last change measured another size and are not
//!   counted; nor are requests the action count or the flush interval cut well short of
//!   the size (they say nothing about it), nor failures that are not throttling (a reset,
//!   a 5xx: nothing about the write path's capacity).
//!
//! Rejected: a latency target alone (grow while under it) — it needs a target per cluster,
//! and a fast cluster would always be pushed to the upper bound; a gradient on latency
//! (Netflix's `Gradient2`, as [`crate::concurrency`] explains) — bulk latency moves with the
//! size by design, so it is no congestion signal by itself.

use std::time::Duration;

/// Answers of one size summed before its throughput is compared with the previous size's:
/// one answer is noisy (a merge, a GC pause), a few are an average.
pub(crate) const WINDOW: u32 = 3;

/// The factor of one step up or down.
const STEP: f64 = 1.5;

/// A request whose body is under this share of the size was cut by something else (the
/// action count, the flush interval, the end of input): no measurement of the size.
const FULL_ENOUGH: f64 = 0.75;

/// What a bulk answer says about the size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Items answered (some may have failed for reasons of their own).
    Answered,
    /// Items (or the whole request) throttled.
    Throttled,
    /// The request was refused as too large (413).
    TooLarge,
    /// Anything else (a reset, a timeout, a 5xx): no signal.
    Other,
}

/// The size and its bookkeeping. Pure: the driver calls it with what happened.
#[derive(Clone, Debug)]
pub(crate) struct BatchSizer {
    size: usize,
    min: usize,
    max: usize,
    adaptive: bool,
    target: Duration,
    /// Bumped by every change; each request remembers the epoch it was sent in.
    epoch: u64,
    up: bool,
    bytes: f64,
    secs: f64,
    answers: u32,
    /// Bytes per second of the previous size's window.
    last_rate: Option<f64>,
}

impl BatchSizer {
    /// Starts at `max` (the configured batch size), adapting within `[min, max]` when
    /// `adaptive`.
    pub(crate) fn new(min: usize, max: usize, adaptive: bool, target: Duration) -> BatchSizer {
        let max = max.max(1);
        BatchSizer {
            size: max,
            min: min.clamp(1, max),
            max,
            adaptive,
            target,
            epoch: 0,
            up: false,
            bytes: 0.0,
            secs: 0.0,
            answers: 0,
            last_rate: None,
        }
    }

    /// Bytes per request at most, now.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// An answer to a request of `sent` body bytes, sent in `sent_epoch`, that took
    /// `latency`. Returns whether the size changed.
    pub(crate) fn on_response(
        &mut self,
        sent_epoch: u64,
        sent: usize,
        latency: Duration,
        signal: Signal,
    ) -> bool {
        let before = self.size;
        match signal {
            // Whatever the epoch: the refused body is a fact about the cluster's limit.
            Signal::TooLarge => {
                self.max = self.max.min(sent / 2).max(1);
                self.min = self.min.min(self.max);
                self.size = self.size.min(self.max);
                self.restart();
            }
            _ if !self.adaptive || sent_epoch != self.epoch => {}
            Signal::Other => {}
            Signal::Throttled => {
                self.size = (self.size.min(sent) / 2).max(self.min);
                self.restart();
            }
            Signal::Answered if latency > self.target => {
                self.size = ((self.size as f64 / STEP) as usize).max(self.min);
                self.restart();
            }
            Signal::Answered => {
                if (sent as f64) < self.size as f64 * FULL_ENOUGH {
                    return false;
                }
                self.bytes += sent as f64;
                self.secs += latency.as_secs_f64().max(1e-6);
                self.answers += 1;
                if self.answers >= WINDOW {
                    let rate = self.bytes / self.secs;
                    if self.last_rate.is_some_and(|prev| rate < prev) {
                        self.up = !self.up;
                    }
                    self.last_rate = Some(rate);
                    self.step();
                }
            }
        }
        before != self.size
    }

    /// One step in the current direction; at a bound, one the other way.
    fn step(&mut self) {
        let next = |up: bool, size: usize| {
            if up {
                ((size as f64 * STEP) as usize).min(self.max)
            } else {
                ((size as f64 / STEP) as usize).max(self.min)
            }
        };
        let mut n = next(self.up, self.size);
        if n == self.size {
            self.up = !self.up;
            n = next(self.up, self.size);
        }
        self.size = n;
        self.epoch += 1;
        self.bytes = 0.0;
        self.secs = 0.0;
        self.answers = 0;
    }

    /// After a cut or a new bound: a fresh window, and the climb goes on downward from
    /// here (up again only once a smaller size measures worse).
    fn restart(&mut self) {
        self.up = false;
        self.last_rate = None;
        self.epoch += 1;
        self.bytes = 0.0;
        self.secs = 0.0;
        self.answers = 0;
    }
}

#[cfg(test)]
mod tests;
