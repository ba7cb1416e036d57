//! The [`BulkIndexer`] handle and its builder. The work happens on one driver task
//! (`driver/`); the handle only checks actions, takes back-pressure permits, and passes
//! them on in order.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::Client;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::action::{Action, IdScheme};
use crate::backoff::RetryPolicy;
use crate::config::Config;
use crate::defaults;
use crate::driver::{self, Cmd, Item, Shared};
use crate::sink::{DeadLetterSink, LogDeadLetters, RetrySink};
use crate::stats::{Counters, Stats};
use crate::tracked::{EncodedAction, ItemOutcome, ItemTicket};

/// Why `add` or `try_add` refused an action.
#[derive(Debug)]
#[non_exhaustive]
pub enum AddError {
    /// The action is invalid (an update without an id, a source that is not a JSON
    /// object, ...). Nothing was sent; the message says what to fix.
    Invalid(String),
    /// The indexer was closed.
    Closed,
    /// `try_add` only: the buffer and the requests in flight are full. The action is
    /// returned unchanged.
    Full(Box<Action>),
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddError::Invalid(m) => write!(f, "invalid bulk action: {m}"),
            AddError::Closed => f.write_str("the bulk indexer is closed"),
            AddError::Full(_) => f.write_str(
                "the bulk indexer is full (buffer and requests in flight); retry later or use add()",
            ),
        }
    }
}

impl std::error::Error for AddError {}

/// A configuration mistake, reported by [`BulkIndexerBuilder::build`].
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid bulk indexer configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Builds a [`BulkIndexer`]. Every setting has a default from [`crate::defaults`].
pub struct BulkIndexerBuilder {
    client: Client,
    cfg: Config,
    dead_letters: Arc<dyn DeadLetterSink>,
    retry_sink: Option<Arc<dyn RetrySink>>,
}

impl BulkIndexerBuilder {
    /// Actions per bulk request (default 1,000).
    pub fn batch_actions(mut self, n: usize) -> Self {
        self.cfg.batch_actions = n;
        self
    }

    /// Bytes per bulk request (default 5 MiB). A single larger action is sent alone.
    pub fn batch_bytes(mut self, n: usize) -> Self {
        self.cfg.batch_bytes = n;
        self
    }

    /// Whether the bytes per request adapt (default on): throttling halves them, a request
    /// slower than [`batch_latency_target`](Self::batch_latency_target) cuts them, and
    /// otherwise they climb toward the size with the most bytes per second, within
    /// [`min_batch_bytes`](Self::min_batch_bytes) and [`batch_bytes`](Self::batch_bytes).
    /// A 413 lowers the upper bound either way. See `docs/bulk.md`, "Batch size".
    pub fn adaptive_batch_bytes(mut self, on: bool) -> Self {
        self.cfg.adaptive_batch_bytes = on;
        self
    }

    /// The smallest adapted batch size (default 128 KiB; at most `batch_bytes`, the
    /// largest).
    pub fn min_batch_bytes(mut self, n: usize) -> Self {
        self.cfg.min_batch_bytes = n;
        self
    }

    /// A bulk request slower than this makes the adapted batch size smaller (default 10 s).
    pub fn batch_latency_target(mut self, d: Duration) -> Self {
        self.cfg.batch_latency_target = d;
        self
    }

    /// A partly filled batch is sent after this long (default 1 s).
    pub fn flush_interval(mut self, d: Duration) -> Self {
        self.cfg.flush_interval = d;
        self
    }

    /// Bulk requests in flight at most (default 4); the adaptive limit stays at or below it.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.cfg.max_concurrency = n;
        self
    }

    /// Whether throttling lowers the requests in flight (AIMD, see `concurrency`); default on.
    pub fn adaptive_concurrency(mut self, on: bool) -> Self {
        self.cfg.adaptive = on;
        self
    }

    /// Back-pressure: `add` waits while this many actions are pending (default 5,000).
    pub fn max_pending_actions(mut self, n: usize) -> Self {
        self.cfg.max_pending_actions = n;
        self
    }

    /// Back-pressure: `add` waits while this many bytes are pending (default 25 MiB).
    pub fn max_pending_bytes(mut self, n: usize) -> Self {
        self.cfg.max_pending_bytes = n;
        self
    }

    /// Time limit of one bulk request (default 2 min): its deadline, and its attempt timeout
    /// unless [`attempt_timeout`](Self::attempt_timeout) sets a shorter one. The transport
    /// makes one attempt per send; the indexer retries.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.cfg.request_timeout = d;
        self
    }

    /// Attempt timeout of a bulk request (default: the request timeout — not the client's
    /// shorter default, which would cut a bulk request the cluster is still working on).
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.cfg.attempt_timeout = Some(d);
        self
    }

    /// The per-class retry rules (default: reference 004 §3.3).
    pub fn retry_policy(mut self, p: RetryPolicy) -> Self {
        self.cfg.retry = p;
        self
    }

    /// Switches the retry jitter off (tests assert exact delays) or back to 0.8–1.2.
    pub fn jitter(mut self, on: bool) -> Self {
        self.cfg.retry.jitter = on.then_some(defaults::JITTER);
        self
    }

    /// Seeds the jitter's random source.
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = Some(seed);
        self
    }

    /// How actions without an id are named (default UUIDv7).
    pub fn id_scheme(mut self, s: IdScheme) -> Self {
        self.cfg.ids = s;
        self
    }

    /// Whether a 409 on `create` always means "already present" (default off: only after
    /// an ambiguous failure, or for ids the indexer assigned). Turn it on when re-running
    /// or resuming an import with stable ids.
    pub fn conflict_is_present(mut self, on: bool) -> Self {
        self.cfg.conflict_is_present = on;
        self
    }

    /// Whether responses are requested with `filter_path` (default on).
    pub fn filter_path(mut self, on: bool) -> Self {
        self.cfg.filter_path = on;
        self
    }

    /// How often an open circuit breaker is looked at again (default 250 ms).
    pub fn breaker_poll(mut self, d: Duration) -> Self {
        self.cfg.breaker_poll = d;
        self
    }

    /// Gives up on an item (retryable: to the retry sink, else the dead letters) when its
    /// next retry would start more than `d` after it was added (default
    /// [`ITEM_DEADLINE`](crate::defaults::ITEM_DEADLINE), 5 minutes). Until then a retryable
    /// item without a retry sink is retried past its class's count, at the capped delay:
    /// only a permanent refusal or this deadline makes a dead letter. With a retry sink (or
    /// for a tracked item) the class's count hands the item on first. Bounds how long an
    /// item can keep its place in the buffer: a
    /// request carrying it gets at most the time its oldest item has left, and an item that
    /// could not be sent in time (breaker open, every request slot busy) is given up too.
    /// Keep it well above `flush_interval`, or a lone item expires before its batch is sent.
    pub fn item_deadline(mut self, d: Duration) -> Self {
        self.cfg.item_deadline = Some(d);
        self
    }

    /// No item deadline: the class's count ends a retryable item (handed to the retry sink,
    /// else dead-lettered with `retryable: true`) however little time it took.
    pub fn no_item_deadline(mut self) -> Self {
        self.cfg.item_deadline = None;
        self
    }

    /// Whether a tracked item that is still retryable past its class's count is retried on
    /// until its item deadline before its caller gets `Undeliverable` (default off: the
    /// caller gets it at the count). For a caller that gave the deadline as its budget and
    /// would only put the item back in line, as the relay's delivery from its queue does: a
    /// message handed back early is rescheduled and overtaken by later ones.
    pub fn tracked_until_deadline(mut self, on: bool) -> Self {
        self.cfg.tracked_until_deadline = on;
        self
    }

    /// Where items that failed for good go (default: [`LogDeadLetters`]).
    pub fn dead_letter_sink(mut self, sink: impl DeadLetterSink) -> Self {
        self.dead_letters = Arc::new(sink);
        self
    }

    /// Where retryable items go once their class's count (reference 004 §3.3) or their
    /// deadline ran out (default: none — they are retried on until the item deadline, then
    /// dead-lettered with `retryable: true`).
    pub fn retry_sink(mut self, sink: impl RetrySink) -> Self {
        self.retry_sink = Some(Arc::new(sink));
        self
    }

    /// Validates the settings and starts the indexer's task. Must be called within a tokio
    /// runtime.
    pub fn build(self) -> Result<BulkIndexer, ConfigError> {
        let c = &self.cfg;
        let positive = [
            ("batch_actions", c.batch_actions),
            ("batch_bytes", c.batch_bytes),
            ("min_batch_bytes", c.min_batch_bytes),
            ("max_concurrency", c.max_concurrency),
            ("max_pending_actions", c.max_pending_actions),
            ("max_pending_bytes", c.max_pending_bytes),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ConfigError(format!("{name} must be at least 1")));
            }
        }
        if c.max_pending_actions < c.batch_actions {
            return Err(ConfigError(format!(
                "max_pending_actions ({}) must be at least batch_actions ({}), or batches never fill",
                c.max_pending_actions, c.batch_actions
            )));
        }
        if c.max_pending_bytes > Semaphore::MAX_PERMITS || c.max_pending_bytes > u32::MAX as usize {
            return Err(ConfigError("max_pending_bytes is too large".into()));
        }
        if c.flush_interval.is_zero()
            || c.batch_latency_target.is_zero()
            || c.request_timeout.is_zero()
            || c.breaker_poll.is_zero()
            || c.item_deadline.is_some_and(|d| d.is_zero())
        {
            return Err(ConfigError(
                "flush_interval, batch_latency_target, request_timeout, breaker_poll and item_deadline must be above zero"
                    .into(),
            ));
        }
        for class in crate::classify::RetryClass::ALL {
            let r = c.retry.rule(class);
            if !(r.factor.is_finite() && r.factor >= 1.0) {
                return Err(ConfigError(format!(
                    "the {} retry factor must be at least 1",
                    class.as_str()
                )));
            }
        }
        if let Some((lo, hi)) = c.retry.jitter {
            if !(lo > 0.0 && lo <= hi && hi.is_finite()) {
                return Err(ConfigError("jitter must be a range 0 < lo <= hi".into()));
            }
        }
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            watermark: AtomicU64::new(0),
            actions: Arc::new(Semaphore::new(c.max_pending_actions)),
            bytes: Arc::new(Semaphore::new(c.max_pending_bytes)),
        });
        shared.counters.concurrency(c.max_concurrency);
        shared.counters.batch_bytes(c.batch_bytes);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(driver::run(
            self.client,
            self.cfg.clone(),
            rx,
            shared.clone(),
            self.dead_letters,
            self.retry_sink,
        ));
        Ok(BulkIndexer {
            sender: Mutex::new(Sender {
                tx: Some(tx),
                next_seq: 0,
            }),
            shared,
            task: Mutex::new(Some(task)),
            ids: self.cfg.ids,
            max_pending_bytes: self.cfg.max_pending_bytes,
        })
    }
}

struct Sender {
    tx: Option<mpsc::UnboundedSender<Cmd>>,
    next_seq: u64,
}

/// An idempotent bulk indexer: batches actions into `_bulk` requests sent through a
/// [`searchwire::Client`], retries failed items by class, adapts the requests in flight to
/// the cluster, and hands what it gives up on to a sink. See the crate docs.
///
/// Methods take `&self`: share it in an `Arc` between producers.
pub struct BulkIndexer {
    sender: Mutex<Sender>,
    shared: Arc<Shared>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    ids: IdScheme,
    max_pending_bytes: usize,
}

impl fmt::Debug for BulkIndexer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkIndexer")
            .field("stats", &self.stats())
            .finish()
    }
}

impl BulkIndexer {
    /// Starts building an indexer that sends through `client`.
    pub fn builder(client: Client) -> BulkIndexerBuilder {
        BulkIndexerBuilder {
            client,
            cfg: Config {
                batch_actions: defaults::BATCH_ACTIONS,
                batch_bytes: defaults::BATCH_BYTES,
                adaptive_batch_bytes: true,
                min_batch_bytes: defaults::MIN_BATCH_BYTES,
                batch_latency_target: defaults::BATCH_LATENCY_TARGET,
                flush_interval: defaults::FLUSH_INTERVAL,
                max_concurrency: defaults::MAX_CONCURRENCY,
                adaptive: true,
                max_pending_actions: defaults::MAX_PENDING_ACTIONS,
                max_pending_bytes: defaults::MAX_PENDING_BYTES,
                request_timeout: defaults::REQUEST_TIMEOUT,
                attempt_timeout: None,
                retry: RetryPolicy::default(),
                seed: None,
                ids: IdScheme::default(),
                conflict_is_present: false,
                breaker_poll: defaults::BREAKER_POLL,
                filter_path: true,
                item_deadline: defaults::ITEM_DEADLINE,
                tracked_until_deadline: false,
            },
            dead_letters: Arc::new(LogDeadLetters),
            retry_sink: None,
        }
    }

    fn cost(&self, action: &Action) -> u32 {
        let approx = action.source_bytes().map_or(0, |s| s.len()) + action.index_name().len() + 64;
        approx.min(self.max_pending_bytes) as u32
    }

    /// Adds an action, waiting while the indexer is full (back-pressure). Returns the
    /// action's sequence number (0, 1, 2, ... in the order of `add` calls), the unit of
    /// [`acknowledged_below`](Self::acknowledged_below). An action without an id gets
    /// one here, before it is ever sent.
    pub async fn add(&self, action: Action) -> Result<u64, AddError> {
        let permits = self.permits(self.cost(&action)).await?;
        self.submit(action, permits, None)
    }

    /// Adds an action like [`add`](Self::add) (waiting while the indexer is full) and
    /// returns a ticket that resolves to its final [`ItemOutcome`]. The item never goes to
    /// a sink: the caller owns it (see [`crate::ItemTicket`]).
    pub async fn add_tracked(&self, action: Action) -> Result<ItemTicket, AddError> {
        let permits = self.permits(self.cost(&action)).await?;
        let (tx, rx) = oneshot::channel();
        let seq = self.submit(action, permits, Some(tx))?;
        Ok(ItemTicket::new(seq, rx))
    }

    /// Adds an action the caller already encoded (sent as its lines are), tracked like
    /// [`add_tracked`](Self::add_tracked).
    pub async fn add_tracked_encoded(&self, action: EncodedAction) -> Result<ItemTicket, AddError> {
        let cost = (action.lines.len() + 64).min(self.max_pending_bytes) as u32;
        let permits = self.permits(cost).await?;
        let key = (!action.unique_id).then(|| driver::key(&action.index, &action.id));
        let mut meta = Action::with_op(action.op, action.index).id(action.id);
        if let Some((v, t)) = action.version {
            meta = meta.version(v, t);
        }
        let (tx, rx) = oneshot::channel::<ItemOutcome>();
        let (lines, unique, params) = (action.lines, action.unique_id, action.params);
        let len = lines.len();
        let seq = self.enqueue(len, |seq| {
            Item::new(seq, key, lines, meta, unique, permits, Some(tx)).params(params)
        })?;
        Ok(ItemTicket::new(seq, rx))
    }

    async fn permits(&self, cost: u32) -> Result<driver::Permits, AddError> {
        let actions = self.shared.actions.clone().acquire_owned().await;
        let bytes = self.shared.bytes.clone().acquire_many_owned(cost).await;
        match (actions, bytes) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            _ => Err(AddError::Closed),
        }
    }

    /// Adds an action if there is room now; otherwise returns it in [`AddError::Full`].
    pub fn try_add(&self, action: Action) -> Result<u64, AddError> {
        let cost = self.cost(&action);
        let Ok(a) = self.shared.actions.clone().try_acquire_owned() else {
            return Err(AddError::Full(Box::new(action)));
        };
        let Ok(b) = self.shared.bytes.clone().try_acquire_many_owned(cost) else {
            return Err(AddError::Full(Box::new(action)));
        };
        self.submit(action, (a, b), None)
    }

    fn submit(
        &self,
        mut action: Action,
        permits: driver::Permits,
        tracker: Option<oneshot::Sender<ItemOutcome>>,
    ) -> Result<u64, AddError> {
        let (lines, id_assigned) = action.prepare(self.ids).map_err(AddError::Invalid)?;
        // An id the indexer made up (UUIDv7) cannot collide with another action: no need
        // to track it for same-id ordering.
        let key = (!(id_assigned && self.ids == IdScheme::UuidV7))
            .then(|| driver::key(action.index_name(), action.doc_id().unwrap_or("")));
        // The action line; the source line is the action's source itself (no copy).
        let len = lines.len() + action.source_bytes().map_or(0, |s| s.len() + 1);
        self.enqueue(len, |seq| {
            Item::new(seq, key, lines, action, id_assigned, permits, tracker)
        })
    }

    /// Numbers the item and hands it to the driver, in `add` order.
    fn enqueue(&self, len: usize, make: impl FnOnce(u64) -> Item) -> Result<u64, AddError> {
        let mut s = self.sender.lock().map_err(|_| AddError::Closed)?;
        let seq = s.next_seq;
        let Some(tx) = &s.tx else {
            return Err(AddError::Closed);
        };
        let item = make(seq);
        // Counted before the driver can see (and finish) it.
        self.shared.counters.added(len);
        if tx.send(Cmd::Add(Box::new(item))).is_err() {
            self.shared.counters.not_added();
            return Err(AddError::Closed);
        }
        s.next_seq += 1;
        Ok(seq)
    }

    /// Waits until every action added before this call is finished: acknowledged,
    /// dead-lettered or handed to the retry sink. Partly filled batches are sent at once.
    pub async fn flush(&self) {
        let rx = {
            let Ok(s) = self.sender.lock() else { return };
            let Some(tx) = &s.tx else { return };
            let (done, rx) = oneshot::channel();
            if tx.send(Cmd::Flush(done)).is_err() {
                return;
            }
            rx
        };
        let _ = rx.await;
    }

    /// Delivers everything added (with its retries), stops the indexer and returns the
    /// final statistics. Later `add` calls fail with [`AddError::Closed`]. Calling it
    /// again returns the statistics.
    pub async fn close(&self) -> Stats {
        let rx = {
            match self.sender.lock() {
                Ok(mut s) => s.tx.take().and_then(|tx| {
                    let (done, rx) = oneshot::channel();
                    tx.send(Cmd::Close(done)).ok().map(|_| rx)
                }),
                Err(_) => None,
            }
        };
        if let Some(rx) = rx {
            let _ = rx.await;
        }
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
        self.stats()
    }

    /// The statistics now.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Every action whose sequence number is below this is finished (acknowledged,
    /// dead-lettered or handed to the retry sink — the sink call returned). A checkpoint
    /// of an import is "the input up to the action with this number".
    pub fn acknowledged_below(&self) -> u64 {
        self.shared.watermark.load(Ordering::Acquire)
    }
}
