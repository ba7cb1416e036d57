//! The time a request spends on a loaded node: waiting for a free slot (the capacity
//! model), its service time, and the stop-the-world pauses it runs into.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::sample::Rng;
use super::{Load, Pauses};
use crate::behavior::Behavior;

/// A [`Load`] installed on a node, with its running state: the random source, the slots,
/// and the instant its pauses count from.
pub(crate) struct LoadState {
    pub(crate) load: Load,
    rng: Mutex<Rng>,
    slots: Option<Arc<Semaphore>>,
    /// Requests waiting for a slot right now.
    waiting: AtomicUsize,
    /// Pause `k` starts at `origin + first_pause + k × every`.
    origin: Instant,
}

/// Held while a request's behavior runs: its slot of the node's capacity, if it has one.
pub(crate) struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Slot {
    /// No slot (no capacity model).
    pub(crate) fn none() -> Slot {
        Slot { _permit: None }
    }
}

impl LoadState {
    pub(crate) fn new(load: Load, origin: Instant) -> LoadState {
        let slots = load
            .capacity
            .map(|c| Arc::new(Semaphore::new(c.concurrent.max(1))));
        LoadState {
            rng: Mutex::new(Rng::new(load.seed)),
            slots,
            waiting: AtomicUsize::new(0),
            origin,
            load,
        }
    }

    /// Runs the model for one request about to get `behavior`: waits for a slot (or turns
    /// the request away with a 429 when the queue is full), then for the request's service
    /// time, stretched by any pause it runs into. Returns what to apply and the slot to
    /// hold while applying it.
    pub(crate) async fn enter(&self, behavior: Behavior, notify: &Notify) -> (Behavior, Slot) {
        let permit = match &self.slots {
            None => None,
            Some(slots) => {
                let limit = self.load.capacity.and_then(|c| c.queue);
                let waiting = Waiting::enter(&self.waiting, notify);
                let full =
                    slots.available_permits() == 0 && limit.is_some_and(|q| waiting.ahead >= q);
                if full {
                    return (rejected(), Slot { _permit: None });
                }
                let permit = Arc::clone(slots).acquire_owned().await;
                drop(waiting);
                // The semaphore is never closed, so this is always a permit.
                permit.ok()
            }
        };
        let work = self.load.base + self.load.latency.sample(&mut self.rng.lock());
        let start = Instant::now();
        let end = match &self.load.pauses {
            Some(p) => finish(p, self.origin, start, work),
            None => start + work,
        };
        if end > start {
            tokio::time::sleep_until(end).await;
        }
        (behavior, Slot { _permit: permit })
    }

    /// Requests waiting for a slot right now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Requests holding a slot right now (0 without a capacity model).
    pub(crate) fn serving(&self) -> usize {
        match (&self.slots, self.load.capacity) {
            (Some(slots), Some(c)) => c.concurrent.max(1) - slots.available_permits(),
            _ => 0,
        }
    }
}

/// Counts one request waiting for a slot for as long as it lives (a request whose client or
/// node goes away while it waits is dropped here too), telling watchers on every change.
struct Waiting<'a> {
    count: &'a AtomicUsize,
    notify: &'a Notify,
    /// Requests that were waiting when this one arrived.
    ahead: usize,
}

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize, notify: &'a Notify) -> Waiting<'a> {
        let ahead = count.fetch_add(1, Ordering::SeqCst);
        notify.notify_waiters();
        Waiting {
            count,
            notify,
            ahead,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// What OpenSearch answers when a thread pool's queue is full.
fn rejected() -> Behavior {
    Behavior::json(
        429,
        serde_json::json!({
            "error": {
                "root_cause": [{ "type": "rejected_execution_exception", "reason": "queue capacity reached" }],
                "type": "rejected_execution_exception",
                "reason": "queue capacity reached",
            },
            "status": 429,
        }),
    )
}

/// When `work` started at `start` is done on a node whose pauses follow `p` from `origin`:
/// no work is done during a pause, so a request arriving in one waits for its end, and one
/// running into one is held for its length.
pub(crate) fn finish(p: &Pauses, origin: Instant, start: Instant, work: Duration) -> Instant {
    let first = origin + p.first;
    let mut t = start;
    let mut left = work;
    loop {
        // The start of the pause at or before t (if any) and of the next one after it.
        let (current, next) = if t < first {
            (None, first)
        } else {
            let k = (t - first).as_nanos() / p.every.as_nanos().max(1);
            let k = u32::try_from(k).unwrap_or(u32::MAX);
            let at = first + p.every * k;
            (Some(at), at + p.every)
        };
        if let Some(at) = current {
            if t < at + p.stall {
                t = at + p.stall;
                continue;
            }
        }
        if t + left <= next {
            return t + left;
        }
        left -= next - t;
        t = next + p.stall;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn work_waits_out_the_pauses_it_meets() {
        let o = Instant::now();
        // Pauses of 300 ms at 3 s, 6 s, 9 s, ...
        let p = Pauses::new(Duration::from_secs(3), ms(300));
        assert_eq!(
            finish(&p, o, o, ms(10)),
            o + ms(10),
            "before the first pause"
        );
        assert_eq!(
            finish(&p, o, o + ms(2_995), ms(10)),
            o + ms(3_305),
            "runs into the pause: 5 ms before it, 5 ms after"
        );
        assert_eq!(
            finish(&p, o, o + ms(3_100), ms(10)),
            o + ms(3_310),
            "arrives during it: waits for its end"
        );
        assert_eq!(
            finish(&p, o, o + ms(3_100), Duration::ZERO),
            o + ms(3_300),
            "even an instant answer waits"
        );
        assert_eq!(finish(&p, o, o + ms(3_300), ms(10)), o + ms(3_310));
        assert_eq!(
            finish(&p, o, o + ms(2_000), ms(5_000)),
            o + ms(7_600),
            "long work spans two pauses"
        );
        let later = Pauses::new(Duration::from_secs(3), ms(300)).first_at(ms(500));
        assert_eq!(finish(&later, o, o + ms(450), ms(100)), o + ms(850));
        assert_eq!(finish(&later, o, o + ms(3_600), ms(1)), o + ms(3_801));
    }
}
