//! The indexer's one task: it owns the buffer, the retry schedule, same-id ordering, the
//! adaptive limit and the requests in flight, so none of that needs a lock. The handle
//! talks to it through a channel; each bulk request runs on its own task and reports back.
//!
//! ```text
//! add ─► buffer ─┐                       ┌─► acknowledged ─► finish
//!                ├─► batch ─► _bulk ─► classify each item ─► retry (class delay) ─► ready ─┐
//! ready retries ─┘      ▲                └─► failed for good / exhausted ─► sink ─► finish │
//!                       └──────────────────────────────────────────────────────────────────┘
//! ```

// Items stay in the box `add` put them in, from the channel to their end: an `Item` is
// ~300 bytes and moves through the buffer, a batch, the request in flight and the
// settling code; a box moves as a pointer (measured in docs/benchmarks.md).
#![allow(clippy::vec_box)]

mod item;
mod key;
mod outcome;
mod send;
mod settle;
mod unfinished;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use searchwire::Client;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::batch_size::BatchSizer;
use crate::bodies::Bodies;
use crate::concurrency::Aimd;
use crate::config::Config;
use crate::sink::{DeadLetterSink, RetrySink};
use crate::stats::{Counters, Stats};

pub(crate) use item::Item;
pub(crate) use key::key;
use key::KeyMap;
use outcome::Outcome;
use unfinished::Unfinished;

/// State the handle and the driver share.
pub(crate) struct Shared {
    pub counters: Counters,
    /// Every action with a smaller sequence number is finished.
    pub watermark: AtomicU64,
    pub actions: Arc<Semaphore>,
    pub bytes: Arc<Semaphore>,
}

pub(crate) type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// The back-pressure permits of finished items, merged and given back once per event of the
/// driver's loop: a permit's drop locks its semaphore and wakes waiters (~90 instructions
/// each, two per item); a merge is an addition.
#[derive(Default)]
struct Released(Option<Permits>);

impl Released {
    fn add(&mut self, (actions, bytes): Permits) {
        match &mut self.0 {
            // Every item of one indexer holds permits of the same two semaphores; `merge`
            // panics on others, so those (there are none) would be given back at once.
            Some((a, b))
                if Arc::ptr_eq(a.semaphore(), actions.semaphore())
                    && Arc::ptr_eq(b.semaphore(), bytes.semaphore()) =>
            {
                a.merge(actions);
                b.merge(bytes);
            }
            Some(_) => drop((actions, bytes)),
            None => self.0 = Some((actions, bytes)),
        }
    }

    /// Gives every permit back (waiting `add` calls may proceed).
    fn give_back(&mut self) {
        self.0 = None;
    }
}

pub(crate) enum Cmd {
    Add(Box<Item>),
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<Stats>),
}

struct InFlight {
    items: Vec<Box<Item>>,
    epoch: u64,
    /// The batch size's epoch when it was sent, and when.
    size_epoch: u64,
    sent_at: Instant,
    /// The request body, taken back into [`Bodies`] when the request is answered.
    body: Bytes,
}

struct Driver {
    client: Client,
    cfg: Config,
    shared: Arc<Shared>,
    dead_letters: Arc<dyn DeadLetterSink>,
    retry_sink: Option<Arc<dyn RetrySink>>,
    rng: fastrand::Rng,

    buffer: VecDeque<Box<Item>>,
    buffer_bytes: usize,
    buffer_since: Option<Instant>,
    /// Retries whose delay has passed: sent before new actions.
    ready: VecDeque<Box<Item>>,
    /// Retries waiting for their delay.
    delayed: BTreeMap<Instant, Vec<Box<Item>>>,
    /// Keys with an action pending, and the later actions with the same key waiting for it.
    keys: KeyMap<VecDeque<Box<Item>>>,
    /// Sequence numbers not finished.
    outstanding: Unfinished,
    received_upto: u64,

    tasks: JoinSet<Outcome>,
    in_flight: HashMap<tokio::task::Id, InFlight>,
    bodies: Bodies,
    aimd: Aimd,
    /// Bytes per request at most: `batch_bytes` at first, adapted within its bounds, and
    /// its upper bound lowered when the cluster answers 413 (its `http.max_content_length`
    /// is below it).
    sizer: BatchSizer,
    breaker_wait: Option<Instant>,

    /// Permits of the items finished while handling the current event.
    released: Released,

    flush_waiters: Vec<(u64, oneshot::Sender<()>)>,
    close_waiters: Vec<oneshot::Sender<Stats>>,
    closing: bool,
    rx_closed: bool,
}

pub(crate) async fn run(
    client: Client,
    cfg: Config,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    shared: Arc<Shared>,
    dead_letters: Arc<dyn DeadLetterSink>,
    retry_sink: Option<Arc<dyn RetrySink>>,
) {
    let rng = match cfg.seed {
        Some(s) => fastrand::Rng::with_seed(s),
        None => fastrand::Rng::new(),
    };
    let aimd = Aimd::new(cfg.max_concurrency, cfg.adaptive);
    let bodies = Bodies::new(cfg.max_concurrency);
    let sizer = BatchSizer::new(
        cfg.min_batch_bytes,
        cfg.batch_bytes,
        cfg.adaptive_batch_bytes,
        cfg.batch_latency_target,
    );
    let mut d = Driver {
        client,
        cfg,
        shared,
        dead_letters,
        retry_sink,
        rng,
        buffer: VecDeque::new(),
        buffer_bytes: 0,
        buffer_since: None,
        ready: VecDeque::new(),
        delayed: BTreeMap::new(),
        keys: KeyMap::default(),
        outstanding: Unfinished::default(),
        received_upto: 0,
        tasks: JoinSet::new(),
        in_flight: HashMap::new(),
        bodies,
        aimd,
        sizer,
        breaker_wait: None,
        released: Released::default(),
        flush_waiters: Vec::new(),
        close_waiters: Vec::new(),
        closing: false,
        rx_closed: false,
    };
    loop {
        d.released.give_back();
        let now = Instant::now();
        d.promote_due(now);
        d.dispatch(now);
        d.answer_waiters();
        if d.rx_closed && d.outstanding.is_empty() && d.tasks.is_empty() {
            let stats = d.shared.counters.snapshot();
            for w in d.close_waiters.drain(..) {
                let _ = w.send(stats.clone());
            }
            return;
        }
        if d.tasks.is_empty() && d.buffer.is_empty() && d.ready.is_empty() {
            // Idle: no body memory is kept.
            d.bodies.clear();
        }
        let wake = d.next_wake();
        tokio::select! {
            biased;
            done = d.tasks.join_next_with_id(), if !d.tasks.is_empty() => {
                match done {
                    Some(Ok((id, outcome))) => d.on_done(id, Ok(outcome)),
                    Some(Err(e)) => d.on_done(e.id(), Err(e.to_string())),
                    None => {}
                }
            }
            cmd = rx.recv(), if !d.rx_closed => match cmd {
                Some(Cmd::Add(item)) => d.on_add(item),
                Some(Cmd::Flush(w)) => d.flush_waiters.push((d.received_upto, w)),
                Some(Cmd::Close(w)) => {
                    d.closing = true;
                    d.close_waiters.push(w);
                }
                None => {
                    d.rx_closed = true;
                    d.closing = true;
                }
            },
            _ = sleep_until_opt(wake), if wake.is_some() => {}
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

impl Driver {
    fn on_add(&mut self, mut item: Box<Item>) {
        item.added = Some(Instant::now());
        self.outstanding.insert(item.seq);
        self.received_upto = item.seq + 1;
        if let Some(k) = item.key {
            match self.keys.entry(k) {
                Entry::Occupied(mut waiting) => {
                    item.own_source();
                    waiting.get_mut().push_back(item);
                    self.publish_watermark();
                    return;
                }
                Entry::Vacant(slot) => {
                    slot.insert(VecDeque::new());
                }
            }
        }
        self.push_buffer(item, false);
        self.publish_watermark();
    }

    fn push_buffer(&mut self, item: Box<Item>, front: bool) {
        self.buffer_bytes += item.len();
        self.buffer_since.get_or_insert_with(Instant::now);
        if front {
            self.buffer.push_front(item);
        } else {
            self.buffer.push_back(item);
        }
    }

    fn publish_watermark(&self) {
        let w = self.outstanding.first().unwrap_or(self.received_upto);
        self.shared.watermark.store(w, Ordering::Release);
    }

    fn answer_waiters(&mut self) {
        let w = self.outstanding.first().unwrap_or(self.received_upto);
        self.flush_waiters.retain_mut(|(target, _)| *target > w);
        // (Dropping a sender answers the waiter: `flush` only waits for the channel to end.)
    }

    fn flushing(&self) -> bool {
        self.closing || !self.flush_waiters.is_empty()
    }

    fn promote_due(&mut self, now: Instant) {
        while let Some(entry) = self.delayed.first_entry() {
            if *entry.key() > now {
                break;
            }
            self.ready.extend(entry.remove());
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let has_work = !self.ready.is_empty() || !self.buffer.is_empty();
        let mut wake = self.delayed.keys().next().copied();
        let mut consider = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        if has_work && self.tasks.len() < self.aimd.limit() {
            if let Some(t) = self.breaker_wait {
                consider(t);
            } else if let Some(since) = self.buffer_since {
                if !self.buffer.is_empty() {
                    consider(since + self.cfg.flush_interval);
                }
            }
        }
        if let Some(limit) = self.cfg.item_deadline {
            for front in [self.ready.front(), self.buffer.front()] {
                if let Some(added) = front.and_then(|i| i.added) {
                    consider(added + limit);
                }
            }
        }
        wake
    }
}
