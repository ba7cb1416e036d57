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

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use searchwire::{BreakerState, Client, ErrorKind, Request};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::action::Action;
use crate::bodies::Bodies;
use crate::classify::{self, ItemContext, RetryClass, Verdict};
use crate::concurrency::Aimd;
use crate::indexer::{Config, Shared};
use crate::response::{BulkResponse, ItemError, ItemResult};
use crate::sink::{self, DeadLetterSink, FailedItem, FailureReason, RetrySink};
use crate::stats::Stats;
use crate::tracked::{ItemOutcome, RequestParams, WrittenItem};

pub(crate) type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// The shortest timeout a request gets when the item deadline of its oldest item is near.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_millis(10);

pub(crate) enum Cmd {
    Add(Box<Item>),
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<Stats>),
}

/// The same-id ordering key: a hash of index and id. A collision only makes two unrelated
/// actions wait for each other; it never reorders anything.
///
/// foldhash with a random per-process seed, not std's SipHash: ids come from input files, so
/// the key must not be predictable (a fixed-key hash lets a hostile file put every id in one
/// bucket of [`KeyMap`], which then only passes the key through), but SipHash over the two
/// strings was ~800 instructions per action in the profile. A seeded foldhash keeps the
/// attacker from computing collisions offline, and the key is hashed once: [`KeyMap`] uses it
/// as its own hash instead of hashing it again.
pub(crate) fn key(index: &str, id: &str) -> u64 {
    static STATE: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
    STATE.get_or_init(Default::default).hash_one((index, id))
}

/// A map keyed by [`key`]: the key is already a seeded hash, so it is its own hash.
type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// The pass-through hasher of [`KeyMap`].
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for a `u64` key; this keeps any other input well mixed.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// One pending action.
pub(crate) struct Item {
    seq: u64,
    key: Option<u64>,
    /// The action line (for an [`EncodedAction`](crate::EncodedAction): all its lines).
    /// The source line is `action`'s source, written into each request body after it.
    head: Bytes,
    action: Action,
    /// The source is a copy of its own (see [`Item::own_source`]).
    owns_source: bool,
    id_assigned: bool,
    /// A request carrying it failed ambiguously: it may have been applied.
    ambiguous: bool,
    retries: [u32; 3],
    attempts: u32,
    /// When the driver received it (the item deadline counts from here).
    added: Option<Instant>,
    /// A tracked item's outcome goes here instead of to a sink.
    tracker: Option<oneshot::Sender<ItemOutcome>>,
    /// Query parameters of the request that carries it (only equal ones share a request).
    params: Option<RequestParams>,
    _permits: Permits,
}

/// How an item is given up on.
#[derive(Clone, Debug)]
enum GiveUp {
    /// Failed for good: the item (with the cluster's error), or the whole request it was
    /// in, was refused.
    Failed {
        whole_request: bool,
        error: Option<Box<ItemError>>,
    },
    /// Undeliverable now: retries or the item deadline ran out on this class.
    Undeliverable(RetryClass),
}

impl Item {
    pub(crate) fn new(
        seq: u64,
        key: Option<u64>,
        head: Bytes,
        action: Action,
        id_assigned: bool,
        permits: Permits,
        tracker: Option<oneshot::Sender<ItemOutcome>>,
    ) -> Item {
        Item {
            seq,
            key,
            head,
            action,
            owns_source: false,
            id_assigned,
            ambiguous: false,
            retries: [0; 3],
            attempts: 0,
            added: None,
            tracker,
            params: None,
            _permits: permits,
        }
    }

    /// The bytes the item adds to a request body: its action line and source line.
    fn len(&self) -> usize {
        self.head.len() + self.action.source_line().map_or(0, |s| s.len() + 1)
    }

    /// Appends the item's lines to a request body.
    fn write_to(&self, body: &mut BytesMut) {
        body.extend_from_slice(&self.head);
        if let Some(src) = self.action.source_line() {
            body.extend_from_slice(src);
            bytes::BufMut::put_u8(body, b'\n');
        }
    }

    /// Gives the source an allocation of its own before the item waits (for a retry, or
    /// behind an earlier action with its id). The caller's source may be a slice of a
    /// larger buffer (`searchwire ingest` cuts documents out of its read buffer without a
    /// copy): an item that waits must not keep that whole buffer alive, or memory would
    /// grow with the number of waiting items times the buffer size instead of staying
    /// within the pending-bytes bound. Items sent at once (the usual case) are never copied.
    fn own_source(&mut self) {
        if self.owns_source {
            return;
        }
        self.owns_source = true;
        if let Some(src) = &self.action.source {
            self.action.source = Some(Bytes::copy_from_slice(src));
        }
    }

    pub(crate) fn params(mut self, params: Option<RequestParams>) -> Item {
        self.params = params;
        self
    }
}

/// How a bulk request ended, as the request task saw it.
enum Outcome {
    /// The cluster answered every item.
    Items(Vec<ItemResult>),
    /// The request failed as a whole.
    Failed {
        /// `None`: for good.
        class: Option<RetryClass>,
        retry_after: Option<Duration>,
        /// It may have been applied (reset, timeout, 5xx after sending).
        ambiguous: bool,
        reason: FailureReason,
        /// The cluster's `error` object, when it refused the request with one (4xx).
        error: Option<Box<ItemError>>,
    },
}

struct InFlight {
    items: Vec<Item>,
    epoch: u64,
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

    buffer: VecDeque<Item>,
    buffer_bytes: usize,
    buffer_since: Option<Instant>,
    /// Retries whose delay has passed: sent before new actions.
    ready: VecDeque<Item>,
    /// Retries waiting for their delay.
    delayed: BTreeMap<Instant, Vec<Item>>,
    /// Keys with an action pending, and the later actions with the same key waiting for it.
    keys: KeyMap<VecDeque<Item>>,
    /// Sequence numbers not finished.
    outstanding: BTreeSet<u64>,
    received_upto: u64,

    tasks: JoinSet<Outcome>,
    in_flight: HashMap<tokio::task::Id, InFlight>,
    bodies: Bodies,
    aimd: Aimd,
    breaker_wait: Option<Instant>,

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
        outstanding: BTreeSet::new(),
        received_upto: 0,
        tasks: JoinSet::new(),
        in_flight: HashMap::new(),
        bodies,
        aimd,
        breaker_wait: None,
        flush_waiters: Vec::new(),
        close_waiters: Vec::new(),
        closing: false,
        rx_closed: false,
    };
    loop {
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
                Some(Cmd::Add(item)) => d.on_add(*item),
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
    fn on_add(&mut self, mut item: Item) {
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

    fn push_buffer(&mut self, item: Item, front: bool) {
        self.buffer_bytes += item.len();
        self.buffer_since.get_or_insert_with(Instant::now);
        if front {
            self.buffer.push_front(item);
        } else {
            self.buffer.push_back(item);
        }
    }

    fn publish_watermark(&self) {
        let w = self
            .outstanding
            .first()
            .copied()
            .unwrap_or(self.received_upto);
        self.shared.watermark.store(w, Ordering::Release);
    }

    fn answer_waiters(&mut self) {
        let w = self
            .outstanding
            .first()
            .copied()
            .unwrap_or(self.received_upto);
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

    fn buffer_due(&self, now: Instant) -> bool {
        if self.buffer.is_empty() {
            return false;
        }
        self.buffer.len() >= self.cfg.batch_actions
            || self.buffer_bytes >= self.cfg.batch_bytes
            || self.flushing()
            || self
                .buffer_since
                .is_some_and(|t| now >= t + self.cfg.flush_interval)
    }

    fn dispatch(&mut self, now: Instant) {
        if let Some(limit) = self.cfg.item_deadline {
            self.expire(now, limit);
        }
        while self.tasks.len() < self.aimd.limit()
            && (!self.ready.is_empty() || self.buffer_due(now))
        {
            if self.breaker_wait.is_some_and(|t| now < t) {
                return;
            }
            if self.client.breaker_state() == BreakerState::Open {
                self.breaker_wait = Some(now + self.cfg.breaker_poll);
                return;
            }
            self.breaker_wait = None;
            self.send_batch();
        }
    }

    /// Gives up on waiting items whose deadline passed before they could be sent (the
    /// breaker is open, or every request slot is busy). Looks only at the fronts of the
    /// retry queue and the buffer, where the oldest items are; an expired item further back
    /// is sent with the smallest request timeout and given up after it.
    fn expire(&mut self, now: Instant, limit: Duration) {
        let expired =
            |it: Option<&Item>| it.and_then(|i| i.added).is_some_and(|a| now >= a + limit);
        let mut open = None;
        loop {
            let it = if expired(self.ready.front()) {
                self.ready.pop_front()
            } else if expired(self.buffer.front()) {
                let it = self.buffer.pop_front();
                if let Some(i) = &it {
                    self.buffer_bytes -= i.len();
                }
                if self.buffer.is_empty() {
                    self.buffer_since = None;
                }
                it
            } else {
                None
            };
            let Some(it) = it else { return };
            let open =
                *open.get_or_insert_with(|| self.client.breaker_state() == BreakerState::Open);
            let (class, why) = if open {
                (RetryClass::Connection, "the circuit breaker is open")
            } else {
                (
                    RetryClass::Unavailable,
                    "every request slot stayed busy (a slow cluster)",
                )
            };
            let reason = FailureReason {
                status: None,
                error_type: "deadline_exceeded".into(),
                reason: format!("not sent within the item deadline ({limit:?} after add): {why}"),
                retry_class: Some(class.as_str()),
            };
            self.give_up(it, reason, GiveUp::Undeliverable(class));
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

    fn send_batch(&mut self) {
        let mut items = Vec::new();
        let mut bytes = 0usize;
        // Items with other request parameters wait for the next request (order kept).
        let fits = |items: &Vec<Item>, bytes: usize, next: &Item, cfg: &Config| {
            items.first().is_none_or(|first| {
                items.len() < cfg.batch_actions
                    && bytes + next.len() <= cfg.batch_bytes
                    && first.params == next.params
            })
        };
        while let Some(next) = self.ready.front() {
            if !fits(&items, bytes, next, &self.cfg) {
                break;
            }
            if let Some(it) = self.ready.pop_front() {
                bytes += it.len();
                items.push(it);
            }
        }
        while let Some(next) = self.buffer.front() {
            if !fits(&items, bytes, next, &self.cfg) {
                break;
            }
            if let Some(it) = self.buffer.pop_front() {
                bytes += it.len();
                self.buffer_bytes -= it.len();
                items.push(it);
            }
        }
        if self.buffer.is_empty() {
            self.buffer_since = None;
        }
        if items.is_empty() {
            return;
        }
        let mut body = self.bodies.take(bytes);
        for it in &mut items {
            it.write_to(&mut body);
            it.attempts += 1;
        }
        let body = body.freeze();
        self.shared.counters.request_sent(body.len());
        // No request outlives the item deadline of the oldest item it carries.
        let mut timeout = self.cfg.request_timeout;
        if let Some(limit) = self.cfg.item_deadline {
            if let Some(oldest) = items.iter().filter_map(|i| i.added).min() {
                let left = (oldest + limit).saturating_duration_since(Instant::now());
                timeout = timeout.min(left.max(MIN_REQUEST_TIMEOUT));
            }
        }
        let mut req = Request::post("/_bulk")
            .body_with_type(body.clone(), "application/x-ndjson")
            .timeout(timeout)
            .idempotent(false);
        if self.cfg.filter_path {
            let tracked = items.iter().any(|i| i.tracker.is_some());
            let fp = if tracked {
                crate::defaults::FILTER_PATH_TRACKED
            } else {
                crate::defaults::FILTER_PATH
            };
            req = req.query("filter_path", fp);
        }
        if let Some(params) = items.first().and_then(|i| i.params.as_deref()) {
            for (k, v) in params {
                req = req.query(k, v);
            }
        }
        if let Some(t) = self.cfg.attempt_timeout {
            req = req.attempt_timeout(t);
        }
        let client = self.client.clone();
        let expected = items.len();
        let handle = self.tasks.spawn(async move {
            let result = client.send(req).await;
            outcome(result, expected)
        });
        self.in_flight.insert(
            handle.id(),
            InFlight {
                items,
                epoch: self.aimd.epoch(),
                body,
            },
        );
    }

    fn on_done(&mut self, id: tokio::task::Id, outcome: Result<Outcome, String>) {
        let Some(InFlight { items, epoch, body }) = self.in_flight.remove(&id) else {
            return;
        };
        self.bodies.give_back(body, self.in_flight.len());
        let outcome = outcome.unwrap_or_else(|e| Outcome::Failed {
            class: Some(RetryClass::Connection),
            retry_after: None,
            ambiguous: true,
            reason: FailureReason {
                status: None,
                error_type: "request_task_failed".into(),
                reason: e,
                retry_class: None,
            },
            error: None,
        });
        let now = Instant::now();
        // (throttled, a signal for the limit at all): only item answers and throttling say
        // whether the cluster keeps up; a reset or a 5xx says nothing about its write queues.
        let (throttled, signal) = match outcome {
            Outcome::Items(results) => {
                self.shared.counters.request_done(None);
                (self.on_items(items, results, now), true)
            }
            Outcome::Failed {
                class,
                retry_after,
                ambiguous,
                reason,
                error,
            } => {
                self.shared
                    .counters
                    .request_done(Some(class.map_or("permanent", RetryClass::as_str)));
                match class {
                    Some(c) => {
                        let mut retries = Vec::new();
                        for mut it in items {
                            it.ambiguous |= ambiguous;
                            retries.push((it, reason.clone()));
                        }
                        self.schedule_retries(c, retries, retry_after, now);
                        let t = c == RetryClass::Throttled;
                        (t, t)
                    }
                    None => {
                        for it in items {
                            let how = GiveUp::Failed {
                                whole_request: true,
                                error: it.tracker.as_ref().and(error.clone()),
                            };
                            self.give_up(it, reason.clone(), how);
                        }
                        (false, false)
                    }
                }
            }
        };
        if signal && self.aimd.on_response(epoch, throttled) {
            self.shared.counters.concurrency(self.aimd.limit());
            tracing::info!(
                concurrency = self.aimd.limit(),
                throttled,
                "bulk concurrency limit changed"
            );
        }
    }

    /// Returns whether any item was throttled.
    fn on_items(&mut self, items: Vec<Item>, results: Vec<ItemResult>, now: Instant) -> bool {
        let mut by_class: [Vec<(Item, FailureReason)>; 3] = Default::default();
        for (it, r) in items.into_iter().zip(results) {
            let ctx = ItemContext {
                op: it.action.op(),
                version_type: it.action.version_value().map(|v| v.1),
                ambiguous: it.ambiguous,
                id_assigned: it.id_assigned,
                conflict_is_present: self.cfg.conflict_is_present,
            };
            match classify::item(ctx, &r) {
                Verdict::Ok(w) => {
                    self.shared.counters.written(w, 1);
                    let mut it = it;
                    let tracker = it.tracker.take();
                    let attempts = it.attempts;
                    self.finish(it);
                    if let Some(t) = tracker {
                        let _ = t.send(ItemOutcome::Written(WrittenItem {
                            status: r.status,
                            result: w,
                            version: r.version,
                            seq_no: r.seq_no,
                            primary_term: r.primary_term,
                            shards: r.shards,
                            forced_refresh: r.forced_refresh,
                            attempts,
                        }));
                    }
                }
                Verdict::Retry(c) => {
                    let mut it = it;
                    if c == RetryClass::Unavailable && r.status != 503 {
                        // A 5xx other than "unavailable" may have been applied.
                        it.ambiguous = true;
                    }
                    by_class[c.index()].push((it, reason_of(&r)));
                }
                Verdict::Fail => {
                    let reason = reason_of(&r);
                    // Only a tracked item's outcome reports the cluster's error as it was.
                    let error = it
                        .tracker
                        .is_some()
                        .then(|| r.error.map(Box::new))
                        .flatten();
                    let how = GiveUp::Failed {
                        whole_request: false,
                        error,
                    };
                    self.give_up(it, reason, how)
                }
            }
        }
        let throttled = !by_class[0].is_empty();
        for (c, group) in RetryClass::ALL.into_iter().zip(by_class) {
            if !group.is_empty() {
                self.schedule_retries(c, group, None, now);
            }
        }
        throttled
    }

    /// Schedules each item's next retry of `class`, or gives it up when the class's retries
    /// are used up. Logs one line per group with the reference's retry context.
    fn schedule_retries(
        &mut self,
        class: RetryClass,
        group: Vec<(Item, FailureReason)>,
        retry_after: Option<Duration>,
        now: Instant,
    ) {
        let mut indices: Vec<String> = Vec::new();
        let mut scheduled = 0u64;
        let mut attempt = 0u32;
        let mut first_delay = None;
        let mut exhausted = Vec::new();
        let mut late = Vec::new();
        for (mut it, reason) in group {
            let idx = it.action.index_name();
            if indices.len() < 8 && !indices.iter().any(|i| i == idx) {
                indices.push(idx.to_owned());
            }
            let n = it.retries[class.index()] + 1;
            let past_deadline = |delay: Duration| match (self.cfg.item_deadline, it.added) {
                (Some(limit), Some(added)) => now + delay > added + limit,
                _ => false,
            };
            match self.cfg.retry.delay(class, n, retry_after, &mut self.rng) {
                // The retry would start after the item's deadline: give up now.
                Some(delay) if past_deadline(delay) => late.push((it, reason)),
                Some(delay) => {
                    it.own_source();
                    it.retries[class.index()] = n;
                    attempt = attempt.max(n);
                    first_delay.get_or_insert(delay);
                    scheduled += 1;
                    self.delayed.entry(now + delay).or_default().push(it);
                }
                None => exhausted.push((it, reason)),
            }
        }
        if scheduled > 0 {
            self.shared.counters.retried(class, scheduled);
            let cluster = self
                .client
                .cluster_health()
                .latest
                .map(|s| s.health.cluster_name)
                .unwrap_or_default();
            tracing::warn!(
                retry_id = %uuid::Uuid::new_v4(),
                attempt,
                cluster = %cluster,
                index = %indices.join(","),
                failed_docs = scheduled,
                class = class.as_str(),
                delay_ms = first_delay.map_or(0, |d| d.as_millis() as u64),
                "bulk items will be retried"
            );
        }
        for (it, reason) in exhausted {
            let retries = it.retries[class.index()];
            let r = sink::exhausted(class, &reason, retries);
            self.give_up(it, r, GiveUp::Undeliverable(class));
        }
        for (it, reason) in late {
            let r = sink::past_deadline(class, &reason, self.cfg.item_deadline);
            self.give_up(it, r, GiveUp::Undeliverable(class));
        }
    }

    fn give_up(&mut self, mut it: Item, reason: FailureReason, how: GiveUp) {
        if let Some(tracker) = it.tracker.take() {
            // The caller owns a tracked item: its outcome, no sink.
            self.shared
                .counters
                .tracked_gave_up(matches!(how, GiveUp::Undeliverable(_)));
            self.finish(it);
            let _ = tracker.send(match how {
                GiveUp::Failed {
                    whole_request,
                    error,
                } => ItemOutcome::Failed {
                    reason,
                    whole_request,
                    error,
                },
                GiveUp::Undeliverable(class) => ItemOutcome::Undeliverable { class, reason },
            });
            return;
        }
        let retryable = matches!(how, GiveUp::Undeliverable(_));
        let failed = FailedItem {
            seq: it.seq,
            action: it.action.clone(),
            reason,
            attempts: it.attempts,
            retryable,
        };
        let mut dead = true;
        if retryable {
            if let Some(rs) = &self.retry_sink {
                match rs.undeliverable(&failed) {
                    Ok(()) => {
                        self.shared.counters.to_retry_sink();
                        dead = false;
                    }
                    Err(e) => {
                        self.shared.counters.sink_error();
                        tracing::error!(seq = it.seq, error = %e, "the retry sink refused an item; dead-lettering it");
                    }
                }
            }
        }
        if dead {
            if let Err(e) = self.dead_letters.dead_letter(&failed) {
                self.shared.counters.sink_error();
                tracing::error!(
                    seq = it.seq,
                    index = it.action.index_name(),
                    id = it.action.doc_id().unwrap_or(""),
                    reason = %failed.reason,
                    error = %e,
                    "the dead-letter sink refused an item"
                );
            }
            self.shared
                .counters
                .dead_lettered(&failed.reason.error_type);
        }
        self.finish(it);
    }

    fn finish(&mut self, it: Item) {
        self.outstanding.remove(&it.seq);
        self.shared.counters.finished();
        if let Some(k) = it.key {
            let next = match self.keys.get_mut(&k) {
                Some(waiting) => waiting.pop_front(),
                None => None,
            };
            match next {
                // The next action with this key was added before everything in the buffer
                // that arrived while it waited: it goes first.
                Some(n) => self.push_buffer(n, true),
                None => {
                    self.keys.remove(&k);
                }
            }
        }
        drop(it);
        self.publish_watermark();
    }
}

fn reason_of(r: &ItemResult) -> FailureReason {
    match &r.error {
        Some(e) => FailureReason {
            status: Some(r.status),
            error_type: e.kind.clone(),
            reason: e.reason.clone(),
            retry_class: None,
        },
        None => FailureReason {
            status: Some(r.status),
            error_type: format!("status_{}", r.status),
            reason: r.result.clone().unwrap_or_default(),
            retry_class: None,
        },
    }
}

/// Turns the transport's answer into an [`Outcome`]. The transport was told the request
/// is not idempotent, so it retried only what certainly was not processed (connect
/// failures, 429) and failed over between nodes; everything ambiguous comes back here.
fn outcome(result: Result<searchwire::Response, searchwire::Error>, expected: usize) -> Outcome {
    let failed =
        |class, ambiguous, status: Option<u16>, error_type: &str, reason: String| Outcome::Failed {
            class,
            retry_after: None,
            ambiguous,
            reason: FailureReason {
                status,
                error_type: error_type.into(),
                reason,
                retry_class: None,
            },
            error: None,
        };
    // The `error` object of a refusal (`{"error":{...},"status":400}`), as the cluster sent it.
    let refusal = |mut o: Outcome, resp: Option<&searchwire::Response>| {
        #[derive(serde::Deserialize)]
        struct Refusal {
            error: ItemError,
        }
        if let Outcome::Failed { error, .. } = &mut o {
            *error = resp
                .and_then(|r| serde_json::from_slice::<Refusal>(r.body()).ok())
                .map(|r| Box::new(r.error));
        }
        o
    };
    let resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            let status = e.status().map(|s| s.as_u16());
            let body = e.response().map(|r| {
                String::from_utf8_lossy(&r.body()[..r.body().len().min(512)]).into_owned()
            });
            let reason = match &body {
                Some(b) if !b.is_empty() => format!("{}: {b}", e.message()),
                _ => e.to_string(),
            };
            return match e.kind() {
                ErrorKind::Throttled => Outcome::Failed {
                    class: Some(RetryClass::Throttled),
                    retry_after: e.response().and_then(retry_after),
                    ambiguous: false,
                    reason: FailureReason {
                        status,
                        error_type: "throttled".into(),
                        reason,
                        retry_class: None,
                    },
                    error: None,
                },
                ErrorKind::Status if status.is_some_and(|s| s >= 500) => failed(
                    Some(RetryClass::Unavailable),
                    true,
                    status,
                    "server_error",
                    reason,
                ),
                ErrorKind::Status => refusal(
                    failed(None, false, status, "request_rejected", reason),
                    e.response(),
                ),
                ErrorKind::Auth => {
                    refusal(failed(None, false, status, "auth", reason), e.response())
                }
                ErrorKind::Config | ErrorKind::InvalidRequest => {
                    failed(None, false, status, "invalid_request", reason)
                }
                ErrorKind::CircuitOpen => failed(
                    Some(RetryClass::Connection),
                    false,
                    status,
                    "circuit_open",
                    reason,
                ),
                // No node reachable, deadline exceeded, response too large, and any kind
                // added later: the request may have been applied.
                _ => failed(
                    Some(RetryClass::Connection),
                    true,
                    status,
                    e.kind().as_str(),
                    reason,
                ),
            };
        }
    };
    match BulkResponse::parse(resp.body()) {
        Ok(r) if r.items.len() == expected => Outcome::Items(r.items),
        Ok(r) => failed(
            Some(RetryClass::Unavailable),
            true,
            Some(resp.status().as_u16()),
            "bad_response",
            format!(
                "the bulk response from {} has {} items for {expected} actions",
                resp.node(),
                r.items.len()
            ),
        ),
        Err(e) => failed(
            Some(RetryClass::Unavailable),
            true,
            Some(resp.status().as_u16()),
            "bad_response",
            format!("{e} (from {})", resp.node()),
        ),
    }
}

/// `Retry-After: <seconds>` of a throttled answer (HTTP-dates are left to the class delay).
fn retry_after(resp: &searchwire::Response) -> Option<Duration> {
    let v = resp
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordering_key_is_stable_and_tells_index_from_id() {
        assert_eq!(key("logs", "a1"), key("logs", "a1"));
        assert_ne!(key("logs", "a1"), key("logs", "a2"));
        assert_ne!(key("logs", "a1"), key("other", "a1"));
        // The boundary between index and id is part of the key.
        assert_ne!(key("ab", "c"), key("a", "bc"));
    }

    #[test]
    fn the_key_map_uses_the_key_as_its_hash() {
        let build = BuildHasherDefault::<KeyHasher>::default();
        let k = key("logs", "a1");
        assert_eq!(build.hash_one(k), k);
        let mut map = KeyMap::default();
        map.insert(k, 1);
        assert_eq!(map.get(&k), Some(&1));
    }
}
