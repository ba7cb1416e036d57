//! Every item accounted for: the relay's ledger and the equation its `/metrics` shows.
//!
//! ```text
//! accepted + recovered = indexed + duplicate + purged      (settled: out of the relay's hands)
//!                      + queued + in_flight + dead_letter  (held: in the queue now)
//! ```
//!
//! - *accepted*: items this relay answered 2xx — written by the cluster on the first try,
//!   or durably queued (answered `queued`).
//! - *recovered*: what the queue held (backlog and dead letters) that this relay did not put
//!   there, measured once at start: a relay restarted on the same queue accounts for the
//!   backlog it finds without claiming it accepted it.
//! - *indexed*: items the cluster confirmed — on the first try, or delivered from the queue
//!   and acknowledged there (`ack` removed them).
//! - *duplicate*: items answered `queued` that the queue stored as the message an identical
//!   item (same op, id and source) already had, so one delivery writes both; and dead letters
//!   dropped by a replay because a copy was queued.
//! - *purged*: dead letters purged through the admin endpoint.
//! - *queued*, *in flight*, *dead letter*: the queue's own count, read in one snapshot
//!   (`Queue::stats`): messages not leased, leased by the delivery loop (sent or about to be;
//!   its outcome not settled), dead letters.
//!
//! **Why it holds at every scrape.** The flows are counted by the relay; the stocks are
//! measured by the queue. Every operation that moves an item across the boundary between the
//! two (an append and its count, an ack and its count, a purge, a replay, a first-try write)
//! runs under the read side of one lock, and a scrape takes the write side while it reads
//! the counters and the queue's snapshot, so no scrape sees an item in two terms or in none.
//! Moves inside the queue (lease, reschedule, dead-letter) change the stocks only, in one
//! atomic queue operation, and need no lock. Each guarded operation runs on its own task, so
//! a request dropped by its client (or a delivery batch aborted at shutdown) cannot leave a
//! finished queue operation uncounted.
//!
//! Limits: the stocks are the whole queue's. A queue shared by several relays (Redis) or
//! changed by another program (`searchwire queue dead-letters replay|purge` against Redis)
//! moves items between processes' terms, so the equation then holds for no single relay.
//! A scrape that cannot take the lock or read the queue within [`SNAPSHOT_TIMEOUT`] leaves
//! the series out (never a reading that does not add up).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use searchwire_queue::{Appended, MessageId, NewMessage, Queue, Replayed, Selection, Stats};
use tokio::sync::RwLock;

/// How long a scrape waits for the lock and the queue's snapshot before it leaves the
/// ledger's series out: well inside Prometheus' default 10 s scrape timeout, and longer than
/// an append to a healthy queue takes.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(2);

/// The relay's flows, guarded against scrapes by `gate`.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    gate: Arc<RwLock<()>>,
    counts: Arc<Counts>,
    /// Set at the first snapshot (at start, before the relay serves).
    recovered: OnceLock<u64>,
}

#[derive(Debug, Default)]
struct Counts {
    accepted: AtomicU64,
    indexed: AtomicU64,
    duplicate: AtomicU64,
    purged: AtomicU64,
}

/// One consistent reading of every term.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Items answered 2xx by this relay.
    pub accepted: u64,
    /// What the queue held at start that this relay did not put there.
    pub recovered: u64,
    /// Items the cluster confirmed (first try, or delivered and acknowledged).
    pub indexed: u64,
    /// Items stored as an identical item's message (or dropped by a replay as a copy).
    pub duplicate: u64,
    /// Dead letters purged through the admin endpoint.
    pub purged: u64,
    /// Messages in the queue, not leased.
    pub queued: u64,
    /// Messages leased by the delivery loop.
    pub in_flight: u64,
    /// Dead letters.
    pub dead_letter: u64,
}

impl Snapshot {
    /// `accepted + recovered − (settled + held)`: 0 when every item is accounted for.
    pub fn unaccounted(&self) -> i128 {
        i128::from(self.accepted) + i128::from(self.recovered)
            - i128::from(self.indexed)
            - i128::from(self.duplicate)
            - i128::from(self.purged)
            - i128::from(self.queued)
            - i128::from(self.in_flight)
            - i128::from(self.dead_letter)
    }

    /// The series in Prometheus text format.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(1200);
        let mut family = |name: &str, kind: &str, help: &str, rows: &[(&str, u64)]| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, v) in rows {
                s.push_str(&format!("{name}{labels} {v}\n"));
            }
        };
        family(
            "searchwire_relay_accepted_items_total",
            "counter",
            "Items this relay answered 2xx: written on the first try, or durably queued.",
            &[("", self.accepted)],
        );
        family(
            "searchwire_relay_recovered_items",
            "gauge",
            "Items the queue held (backlog and dead letters) when this relay started.",
            &[("", self.recovered)],
        );
        family(
            "searchwire_relay_settled_items_total",
            "counter",
            "Accepted or recovered items out of the relay's hands, by how.",
            &[
                ("{how=\"indexed\"}", self.indexed),
                ("{how=\"duplicate\"}", self.duplicate),
                ("{how=\"purged\"}", self.purged),
            ],
        );
        family(
            "searchwire_relay_held_items",
            "gauge",
            "Accepted or recovered items the queue holds, by state (one snapshot with the counters).",
            &[
                ("{state=\"queued\"}", self.queued),
                ("{state=\"in_flight\"}", self.in_flight),
                ("{state=\"dead_letter\"}", self.dead_letter),
            ],
        );
        s
    }
}

impl Ledger {
    /// Items the cluster confirmed on the first try: accepted and indexed at once.
    pub async fn written_live(&self, n: u64) {
        if n == 0 {
            return;
        }
        let (gate, counts) = (self.gate.clone(), self.counts.clone());
        guarded(async move {
            let _g = gate.read_owned().await;
            counts.accepted.fetch_add(n, Ordering::Relaxed);
            counts.indexed.fetch_add(n, Ordering::Relaxed);
        })
        .await
    }

    /// Appends `batch` and counts its items accepted (a duplicate as settled) with it.
    pub async fn append(
        &self,
        queue: &Queue,
        batch: Vec<NewMessage>,
    ) -> searchwire_queue::Result<Vec<Appended>> {
        let (gate, counts, queue) = (self.gate.clone(), self.counts.clone(), queue.clone());
        guarded(async move {
            let _g = gate.read_owned().await;
            let out = queue.append(batch).await;
            if let Ok(appended) = &out {
                let dups = appended
                    .iter()
                    .filter(|a| matches!(a, Appended::Duplicate(_)))
                    .count() as u64;
                counts
                    .accepted
                    .fetch_add(appended.len() as u64, Ordering::Relaxed);
                counts.duplicate.fetch_add(dups, Ordering::Relaxed);
            }
            out
        })
        .await
    }

    /// Acknowledges delivered messages and counts those the queue removed as indexed.
    pub async fn ack(&self, queue: &Queue, ids: Vec<MessageId>) -> searchwire_queue::Result<u64> {
        let (gate, counts, queue) = (self.gate.clone(), self.counts.clone(), queue.clone());
        guarded(async move {
            let _g = gate.read_owned().await;
            let out = queue.ack(&ids).await;
            if let Ok(n) = &out {
                counts.indexed.fetch_add(*n, Ordering::Relaxed);
            }
            out
        })
        .await
    }

    /// Replays dead letters; those dropped as copies of a queued message are settled.
    pub async fn replay(
        &self,
        queue: &Queue,
        selection: Selection,
    ) -> searchwire_queue::Result<Replayed> {
        let (gate, counts, queue) = (self.gate.clone(), self.counts.clone(), queue.clone());
        guarded(async move {
            let _g = gate.read_owned().await;
            let out = queue.replay(&selection).await;
            if let Ok(r) = &out {
                counts.duplicate.fetch_add(r.duplicates, Ordering::Relaxed);
            }
            out
        })
        .await
    }

    /// Purges dead letters and counts them.
    pub async fn purge(
        &self,
        queue: &Queue,
        selection: Selection,
    ) -> searchwire_queue::Result<u64> {
        let (gate, counts, queue) = (self.gate.clone(), self.counts.clone(), queue.clone());
        guarded(async move {
            let _g = gate.read_owned().await;
            let out = queue.purge(&selection).await;
            if let Ok(n) = &out {
                counts.purged.fetch_add(*n, Ordering::Relaxed);
            }
            out
        })
        .await
    }

    /// Every term in one reading; `None` when the lock or the queue's snapshot took longer
    /// than [`SNAPSHOT_TIMEOUT`], or the queue could not be read.
    pub async fn snapshot(&self, queue: &Queue) -> Option<Snapshot> {
        let read = async {
            let _g = self.gate.write().await;
            let stats = queue.stats().await.ok()?;
            Some(self.read(&stats))
        };
        match tokio::time::timeout(SNAPSHOT_TIMEOUT, read).await {
            Ok(s) => s,
            Err(_) => {
                tracing::debug!(
                    "the ledger's snapshot timed out: its series are left out of this scrape"
                );
                None
            }
        }
    }

    /// The terms from the counters and `stats` (taken under the write lock).
    fn read(&self, stats: &Stats) -> Snapshot {
        let c = &self.counts;
        let mut s = Snapshot {
            accepted: c.accepted.load(Ordering::Relaxed),
            recovered: 0,
            indexed: c.indexed.load(Ordering::Relaxed),
            duplicate: c.duplicate.load(Ordering::Relaxed),
            purged: c.purged.load(Ordering::Relaxed),
            queued: stats.backlog.saturating_sub(stats.leased),
            in_flight: stats.leased.min(stats.backlog),
            dead_letter: stats.dead_letters,
        };
        // The first reading defines what was there before this relay: whatever its own
        // flows do not explain (at start, before any flow: the whole queue).
        s.recovered = *self
            .recovered
            .get_or_init(|| u64::try_from(-s.unaccounted().min(0)).unwrap_or(0));
        s
    }
}

/// Runs `f` on its own task, so the queue operation and its count finish together even when
/// the caller is dropped. A panic of the task is the caller's; a task cancelled because the
/// runtime is shutting down never returns (nor would the caller).
async fn guarded<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    match tokio::spawn(f).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => std::future::pending().await,
    }
}
