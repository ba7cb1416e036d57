//! How fast a fake node serves: a latency distribution, stop-the-world pauses and a capacity
//! with a queue — what real nodes do that a fixed [`Behavior::Delay`](crate::Behavior::Delay)
//! does not.
//!
//! See [`Load`] for what applies, in which order.

mod gate;
mod sample;

use std::time::Duration;

pub(crate) use gate::{LoadState, Slot};
pub use sample::Latency;

use crate::behavior::Match;

/// Stop-the-world pauses: every `every`, the node stalls for `stall`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pauses {
    every: Duration,
    stall: Duration,
    first: Duration,
}

impl Pauses {
    /// A pause of `stall` every `every`; the first one starts `every` after the load is
    /// installed (see [`Pauses::first_at`]).
    ///
    /// # Panics
    ///
    /// If `stall` is not shorter than `every` (the node would never serve), or `every` is 0.
    pub fn new(every: Duration, stall: Duration) -> Pauses {
        assert!(
            !every.is_zero() && stall < every,
            "a pause ({stall:?}) must be shorter than its period ({every:?})"
        );
        Pauses {
            every,
            stall,
            first: every,
        }
    }

    /// Starts the first pause `after` the load is installed instead (later ones follow
    /// every period from there).
    pub fn first_at(mut self, after: Duration) -> Pauses {
        self.first = after;
        self
    }

    /// The period.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// How long each pause lasts.
    pub fn stall(&self) -> Duration {
        self.stall
    }
}

/// How many requests a node serves at once, and how many may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Requests served at once (at least 1).
    pub concurrent: usize,
    /// Requests that may wait for a slot; one more is answered 429. `None`: unbounded.
    pub queue: Option<usize>,
}

/// A fake node's performance model: service time, pauses and capacity.
///
/// A [`Load`] installed with [`FakeNode::set_load`](crate::FakeNode::set_load) applies to every
/// request it selects (all of them unless [`Load::only`] narrows it), after the request was
/// read, recorded and its behavior chosen, before that behavior runs:
///
/// 1. **Capacity** ([`Load::capacity`]): the node serves `K` requests at once; the rest wait in
///    arrival order (a FIFO semaphore), so past capacity the queue — and latency — grows the
///    way it does on a real node. With [`Load::queue_limit`], a request arriving to a full
///    queue is answered at once with OpenSearch's `429 rejected_execution_exception`.
/// 2. **Service time**: [`Load::base`] plus a draw from [`Load::latency`] (fixed, lognormal or
///    quantiles), from the node's own seeded random source, so a run is repeatable.
/// 3. **Pauses** ([`Load::pauses`]): every `T` the node stalls for `D`, like a garbage
///    collection that stops the world. No work progresses during a pause: a request arriving
///    in one waits for its end, and one in service is held for its length.
///
/// Then the chosen behavior runs (holding the request's slot of the capacity), so scripted
/// faults compose with load: a `Delay` adds to the service time, a `Reset` comes after it.
/// Every wait is a tokio timer, so paused-time tests skip it exactly.
///
/// ```
/// use std::time::Duration;
/// use searchwire_fake::{Latency, Load, Pauses};
///
/// // About 2 ms (lognormal, p99 ≈ 6 ms), a 300 ms stall every 3 s, 8 searches at once.
/// let load = Load::new()
///     .latency(Latency::LogNormal { median: Duration::from_millis(2), sigma: 0.5 })
///     .pauses(Pauses::new(Duration::from_secs(3), Duration::from_millis(300)))
///     .capacity(8)
///     .seed(7);
/// # let _ = load;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    pub(crate) base: Duration,
    pub(crate) latency: Latency,
    pub(crate) pauses: Option<Pauses>,
    pub(crate) capacity: Option<Capacity>,
    pub(crate) only: Match,
    pub(crate) seed: u64,
}

impl Default for Load {
    fn default() -> Load {
        Load::new()
    }
}

impl Load {
    /// No added time, no pauses, unlimited capacity, every request, seed 0.
    pub fn new() -> Load {
        Load {
            base: Duration::ZERO,
            latency: Latency::Fixed(Duration::ZERO),
            pauses: None,
            capacity: None,
            only: Match::Any,
            seed: 0,
        }
    }

    /// A fixed part of every request's service time, added to the [`Load::latency`] draw.
    pub fn base(mut self, d: Duration) -> Load {
        self.base = d;
        self
    }

    /// The fixed part of the service time.
    pub fn base_time(&self) -> Duration {
        self.base
    }

    /// The distribution of the rest of the service time.
    pub fn latency(mut self, l: Latency) -> Load {
        self.latency = l;
        self
    }

    /// Stop-the-world pauses.
    pub fn pauses(mut self, p: Pauses) -> Load {
        self.pauses = Some(p);
        self
    }

    /// Serves `concurrent` requests at once (at least 1); the rest queue without a bound
    /// (see [`Load::queue_limit`]).
    pub fn capacity(mut self, concurrent: usize) -> Load {
        let queue = self.capacity.and_then(|c| c.queue);
        self.capacity = Some(Capacity {
            concurrent: concurrent.max(1),
            queue,
        });
        self
    }

    /// With [`Load::capacity`]: at most `waiting` requests queue; a request arriving to a
    /// full queue is answered `429 rejected_execution_exception` at once, as OpenSearch's
    /// search thread pool does past its queue size (1,000 by default).
    pub fn queue_limit(mut self, waiting: usize) -> Load {
        let concurrent = self.capacity.map_or(1, |c| c.concurrent);
        self.capacity = Some(Capacity {
            concurrent,
            queue: Some(waiting),
        });
        self
    }

    /// Applies the model only to requests `m` selects (the others are served at once).
    pub fn only(mut self, m: Match) -> Load {
        self.only = m;
        self
    }

    /// Seeds the node's random source (the same seed draws the same latencies).
    pub fn seed(mut self, seed: u64) -> Load {
        self.seed = seed;
        self
    }
}

#[cfg(test)]
mod tests;
