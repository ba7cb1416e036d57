//! The indexer and a durable retry queue ([`searchwire_queue::Queue`]): what cannot be
//! delivered *now* goes into the queue, and a delivery loop sends it when the cluster
//! recovers.
//!
//! - [`QueueSink`] is a [`RetrySink`]: an item whose retries or deadline ran out (429, 503,
//!   a failed connection, the breaker open) is handed to it on the indexer's task, which
//!   must not wait. The sink stores a copy in memory and wakes its appender task, which
//!   appends everything waiting in **one batch** (group commit: while one append is being
//!   made durable, the next batch collects). An item whose append fails goes to the
//!   fallback dead-letter sink — never dropped.
//! - **Durable, not just handed over.** The indexer counts an item finished once the sink
//!   call returned, before the append is durable. [`QueueSink::acknowledged_below`]
//!   combines the indexer's watermark with the items whose append is still under way: an
//!   import's checkpoint taken from it covers only items written or durably queued.
//! - **Back-pressure.** [`QueueSink::room`] waits while `capacity` items wait for their
//!   append; a producer calls it before each `add`. The items waiting are then bounded by
//!   `capacity` plus what the indexer holds (its own bounded buffer).
//! - [`deliver`] leases due messages (priority, due time, arrival), sends them through a
//!   (tracked) indexer, acks once the cluster confirmed, reschedules by retry class, and
//!   dead-letters what the cluster refused for good. A retryable failure (throttled,
//!   unavailable, no connection) counts toward the message's `max_retries` only up to the
//!   last one; from there it is deferred ([`Queue::defer`]) at the class's capped delay,
//!   and it becomes a dead letter only once the message is older than
//!   [`DeliveryConfig::item_deadline`] — the indexer's rule, applied to the queue.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::{BreakerState, Client};
use searchwire_queue::{Appended, Lease, MessageId, NewMessage, Queue, Rescheduled};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::action::{IdScheme, OpType, VersionType};
use crate::backoff::RetryPolicy;
use crate::classify::RetryClass;
use crate::indexer::BulkIndexer;
use crate::sink::{DeadLetterSink, FailedItem, FailureReason, RetrySink, SinkError};
use crate::tracked::{EncodedAction, ItemOutcome};

use crate::defaults::{
    DELIVERY_IDLE_POLL, DELIVERY_ITEM_DEADLINE, DELIVERY_LEASE_BATCH, QUEUE_SINK_CAPACITY,
    QUEUE_SINK_MAX_BATCH,
};

/// How a [`QueueSink`] queues items.
#[derive(Debug, Clone)]
pub struct QueueSinkConfig {
    /// The priority of the messages (higher is delivered first). Default 0.
    pub priority: u8,
    /// Failed deliveries from the queue before a message becomes a dead letter.
    /// Default [`searchwire_queue::DEFAULT_MAX_RETRIES`].
    pub max_retries: u32,
    /// Items waiting for their append before [`QueueSink::room`] waits. Default
    /// [`QUEUE_SINK_CAPACITY`].
    pub capacity: usize,
    /// Messages per append at most. Default [`QUEUE_SINK_MAX_BATCH`].
    pub max_batch: usize,
}

impl Default for QueueSinkConfig {
    fn default() -> Self {
        QueueSinkConfig {
            priority: 0,
            max_retries: searchwire_queue::DEFAULT_MAX_RETRIES,
            capacity: QUEUE_SINK_CAPACITY,
            max_batch: QUEUE_SINK_MAX_BATCH,
        }
    }
}

/// What a [`QueueSink`] did, once closed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueSinkReport {
    /// Items appended durably (new messages).
    pub queued: u64,
    /// Items whose payload was queued already (de-duplicated by payload hash): durable too.
    pub duplicates: u64,
    /// Items whose append failed: handed to the fallback dead-letter sink.
    pub append_failed: u64,
}

struct State {
    waiting: Vec<FailedItem>,
    /// Sequence numbers handed to the sink whose append has not returned yet.
    unsettled: BTreeSet<u64>,
    closed: bool,
}

struct Inner {
    state: Mutex<State>,
    /// Wakes the appender.
    work: Notify,
    /// Wakes producers waiting for room.
    room: Notify,
    config: QueueSinkConfig,
    queued: AtomicU64,
    duplicates: AtomicU64,
    append_failed: AtomicU64,
}

/// A [`RetrySink`] that appends undeliverable items to a durable queue, in batches (see
/// the module documentation). Cheap to clone: clones share one appender.
#[derive(Clone)]
pub struct QueueSink {
    inner: Arc<Inner>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for QueueSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSink")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl QueueSink {
    /// Starts the appender task (on the current tokio runtime). Items whose append fails go
    /// to `fallback`.
    pub fn start(queue: Queue, config: QueueSinkConfig, fallback: impl DeadLetterSink) -> Self {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                waiting: Vec::new(),
                unsettled: BTreeSet::new(),
                closed: false,
            }),
            work: Notify::new(),
            room: Notify::new(),
            config,
            queued: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            append_failed: AtomicU64::new(0),
        });
        let task = tokio::spawn(append_loop(inner.clone(), queue, Box::new(fallback)));
        QueueSink {
            inner,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    /// Waits while `capacity` items wait for their append (back-pressure for the producer).
    pub async fn room(&self) {
        loop {
            let notified = self.inner.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let busy = match self.inner.state.lock() {
                Ok(s) => s.unsettled.len() >= self.inner.config.capacity.max(1) && !s.closed,
                Err(_) => false,
            };
            if !busy {
                return;
            }
            notified.await;
        }
    }

    /// Every item of `indexer` below this sequence number is finished *durably*: written,
    /// dead-lettered, or appended to the queue (its append returned). Use it instead of
    /// [`BulkIndexer::acknowledged_below`] for a checkpoint.
    pub fn acknowledged_below(&self, indexer: &BulkIndexer) -> u64 {
        // The indexer's watermark first: an item below it was handed to this sink before
        // the watermark passed it, so it is in `unsettled` unless its append returned.
        let below = indexer.acknowledged_below();
        let first = self
            .inner
            .state
            .lock()
            .ok()
            .and_then(|s| s.unsettled.first().copied());
        first.map_or(below, |f| f.min(below))
    }

    /// Items handed to the sink whose append has not returned yet.
    pub fn unsettled(&self) -> usize {
        self.inner.state.lock().map_or(0, |s| s.unsettled.len())
    }

    /// The counts so far.
    pub fn report(&self) -> QueueSinkReport {
        QueueSinkReport {
            queued: self.inner.queued.load(Ordering::Relaxed),
            duplicates: self.inner.duplicates.load(Ordering::Relaxed),
            append_failed: self.inner.append_failed.load(Ordering::Relaxed),
        }
    }

    /// Refuses further items (they go to the indexer's dead-letter sink), appends what is
    /// waiting, and returns the counts. Close the indexer first.
    pub async fn close(&self) -> QueueSinkReport {
        if let Ok(mut s) = self.inner.state.lock() {
            s.closed = true;
        }
        self.inner.work.notify_one();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            if task.await.is_err() {
                tracing::error!("the queue appender stopped abnormally");
            }
        }
        self.report()
    }
}

impl RetrySink for QueueSink {
    fn undeliverable(&self, item: &FailedItem) -> Result<(), SinkError> {
        let mut s = self
            .inner
            .state
            .lock()
            .map_err(|_| SinkError("the queue sink is poisoned".into()))?;
        if s.closed {
            return Err(SinkError("the queue sink is closed".into()));
        }
        s.unsettled.insert(item.seq);
        s.waiting.push(item.clone());
        drop(s);
        self.inner.work.notify_one();
        Ok(())
    }
}

/// The queued form of an item: its NDJSON action and source lines, as sent to `_bulk`.
pub fn payload(item: &FailedItem) -> Result<Vec<u8>, String> {
    let mut action = item.action.clone();
    // The item has its id already: this only encodes it. `prepare` returns the action
    // line; the source line follows it as it is.
    let (head, _) = action.prepare(IdScheme::UuidV7)?;
    let mut out = head.to_vec();
    if let Some(src) = action.source_line() {
        out.extend_from_slice(src);
        out.push(b'\n');
    }
    Ok(out)
}

async fn append_loop(inner: Arc<Inner>, queue: Queue, fallback: Box<dyn DeadLetterSink>) {
    loop {
        let (batch, closed) = {
            let Ok(mut s) = inner.state.lock() else {
                return;
            };
            let n = s.waiting.len().min(inner.config.max_batch.max(1));
            (s.waiting.drain(..n).collect::<Vec<_>>(), s.closed)
        };
        if batch.is_empty() {
            if closed {
                return;
            }
            inner.work.notified().await;
            continue;
        }
        append_batch(&inner, &queue, fallback.as_ref(), batch).await;
        inner.room.notify_waiters();
    }
}

async fn append_batch(
    inner: &Inner,
    queue: &Queue,
    fallback: &dyn DeadLetterSink,
    batch: Vec<FailedItem>,
) {
    let mut messages = Vec::with_capacity(batch.len());
    let mut items = Vec::with_capacity(batch.len());
    for item in batch {
        match payload(&item) {
            Ok(p) => {
                let m = NewMessage::new(p)
                    .priority(inner.config.priority)
                    .max_retries(inner.config.max_retries)
                    .index(item.action.index_name())
                    .last_error(item.reason.to_string());
                messages.push(m);
                items.push(item);
            }
            Err(e) => fail(inner, fallback, item, &e),
        }
    }
    if !messages.is_empty() {
        match queue.append(messages).await {
            Ok(appended) => {
                for (item, a) in items.iter().zip(appended) {
                    let c = match a {
                        Appended::Duplicate(_) => &inner.duplicates,
                        _ => &inner.queued,
                    };
                    c.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("searchwire_bulk_docs_queued_total").increment(1);
                    settle(inner, item.seq);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, n = items.len(), "cannot append to the retry queue; dead-lettering the items");
                for item in items {
                    fail(inner, fallback, item, &e.to_string());
                }
            }
        }
    }
}

fn fail(inner: &Inner, fallback: &dyn DeadLetterSink, mut item: FailedItem, why: &str) {
    item.reason = FailureReason {
        status: item.reason.status,
        error_type: "queue_append_failed".into(),
        reason: format!("could not be queued ({why}); before: {}", item.reason),
        retry_class: item.reason.retry_class,
    };
    if let Err(e) = fallback.dead_letter(&item) {
        tracing::error!(seq = item.seq, error = %e, "the dead-letter sink refused an item the queue could not take");
    }
    inner.append_failed.fetch_add(1, Ordering::Relaxed);
    settle(inner, item.seq);
}

fn settle(inner: &Inner, seq: u64) {
    if let Ok(mut s) = inner.state.lock() {
        s.unsettled.remove(&seq);
    }
}

/// How [`deliver`] drains a queue.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Messages leased at once. Default [`DELIVERY_LEASE_BATCH`].
    pub lease_batch: usize,
    /// Wait between polls when nothing is due or the breaker is open. Default
    /// [`DELIVERY_IDLE_POLL`].
    pub idle_poll: Duration,
    /// The reschedule delay of a failed delivery: the class's rule of this policy for
    /// attempt `n` (the class's last delay once `n` passes its retries).
    pub policy: RetryPolicy,
    /// Return once the queue's backlog is zero (else only at the deadline).
    pub until_empty: bool,
    /// A message that fails retryably (throttled, unavailable, no connection) is retried —
    /// past its `max_retries` deferred, not counted — until it is this old (since it was
    /// queued); only then is it a dead letter. `None`: `max_retries` ends it. Default
    /// [`DELIVERY_ITEM_DEADLINE`].
    pub item_deadline: Option<Duration>,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            lease_batch: DELIVERY_LEASE_BATCH,
            idle_poll: DELIVERY_IDLE_POLL,
            policy: RetryPolicy::default(),
            until_empty: true,
            item_deadline: DELIVERY_ITEM_DEADLINE,
        }
    }
}

/// What [`deliver`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeliveryReport {
    /// Messages written (acked).
    pub delivered: u64,
    /// Failed deliveries put back with a later due time.
    pub rescheduled: u64,
    /// Messages moved to the dead letters (refused for good, unreadable, or out of retries).
    pub dead_lettered: u64,
    /// The queue's backlog when the loop returned.
    pub left: u64,
}

/// Drains `queue` through `indexer` (which sends through `client`) until the backlog is
/// zero (with [`DeliveryConfig::until_empty`]) or `deadline` passes.
///
/// **Order.** Leased messages are split into runs of one priority (in lease order), and a
/// run is sent only after the run before it settled: every due message of a higher priority
/// is written (or rescheduled) before a lower one is sent. Within a run, the indexer sends
/// the items in order; requests in flight together (its concurrency) may land in any order,
/// so strict arrival order within a priority needs an indexer with `max_concurrency(1)`.
///
/// **Settling.** Written (or a `create` answered 409 when the indexer counts conflicts as
/// present) → ack; refused for good → dead letter; undeliverable now or refused as a whole
/// request → rescheduled after the class delay, a dead letter once `max_retries` is spent —
/// except that a retryable failure (undeliverable now: throttled, unavailable, no
/// connection) never spends the last retry: it is deferred instead, and is a dead letter
/// only once the message is older than [`DeliveryConfig::item_deadline`].
/// While the client's breaker is open nothing is leased (no attempt is burnt). A message
/// cut short by the deadline stays leased until the caller releases it
/// ([`Queue::release`]) or its lease times out; delivering one twice is harmless (same id).
pub async fn deliver(
    queue: &Queue,
    indexer: &BulkIndexer,
    client: &Client,
    config: &DeliveryConfig,
    deadline: Option<tokio::time::Instant>,
) -> Result<DeliveryReport, searchwire_queue::Error> {
    let mut report = DeliveryReport::default();
    let past = || deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
    while !past() {
        if client.breaker_state() == BreakerState::Open {
            idle(config, deadline).await;
            continue;
        }
        let leases = queue.lease(config.lease_batch.max(1)).await?;
        if leases.is_empty() {
            if config.until_empty && queue.stats().await?.backlog == 0 {
                break;
            }
            idle(config, deadline).await;
            continue;
        }
        let mut run: Vec<Lease> = Vec::new();
        for lease in leases {
            if run
                .last()
                .is_some_and(|l| l.message.priority != lease.message.priority)
            {
                send_run(
                    queue,
                    indexer,
                    config,
                    std::mem::take(&mut run),
                    &mut report,
                )
                .await?;
            }
            run.push(lease);
        }
        send_run(queue, indexer, config, run, &mut report).await?;
    }
    report.left = queue.stats().await?.backlog;
    Ok(report)
}

async fn idle(config: &DeliveryConfig, deadline: Option<tokio::time::Instant>) {
    let wake = tokio::time::Instant::now() + config.idle_poll;
    tokio::time::sleep_until(deadline.map_or(wake, |d| d.min(wake))).await;
}

/// Sends one run of one priority and settles every message of it.
async fn send_run(
    queue: &Queue,
    indexer: &BulkIndexer,
    config: &DeliveryConfig,
    run: Vec<Lease>,
    report: &mut DeliveryReport,
) -> Result<(), searchwire_queue::Error> {
    let mut tickets = Vec::with_capacity(run.len());
    for lease in &run {
        tickets.push(match encoded(&lease.message.payload) {
            Ok(a) => indexer
                .add_tracked_encoded(a)
                .await
                .map_err(|e| Settle::Retry(RetryClass::Connection, e.to_string(), true)),
            Err(e) => Err(Settle::Dead(format!(
                "the queued payload is not one bulk item: {e}"
            ))),
        });
    }
    let mut acks: Vec<MessageId> = Vec::new();
    for (lease, ticket) in run.iter().zip(tickets) {
        let settle = match ticket {
            Ok(t) => match t.await {
                ItemOutcome::Written(_) => {
                    acks.push(lease.id());
                    continue;
                }
                ItemOutcome::Failed {
                    reason,
                    whole_request: false,
                    ..
                } => Settle::Dead(format!("the cluster refused it: {reason}")),
                ItemOutcome::Failed { reason, .. } => Settle::Retry(
                    RetryClass::Unavailable,
                    format!("the cluster refused the request: {reason}"),
                    false,
                ),
                ItemOutcome::Undeliverable { class, reason } => {
                    Settle::Retry(class, format!("{}: {reason}", class.as_str()), true)
                }
            },
            Err(s) => s,
        };
        match settle {
            Settle::Dead(reason) => {
                tracing::warn!(id = %lease.id(), reason = %reason, "dead letter: a queued item cannot be delivered");
                if queue.dead_letter(lease, &reason).await? {
                    report.dead_lettered += 1;
                }
            }
            Settle::Retry(class, why, retryable) => {
                let now = queue.options().clock.now();
                let m = &lease.message;
                let at = now.saturating_add(retry_delay(&config.policy, class, m.attempts + 1));
                let last = m.attempts.saturating_add(1) >= m.max_retries.max(1);
                let expired = config
                    .item_deadline
                    .is_some_and(|limit| now.saturating_duration_since(m.enqueued_at) >= limit);
                let done = if retryable && expired {
                    let reason = format!(
                        "deadline_exceeded: still undeliverable {} after it was queued (item deadline); last: {why}",
                        searchwire::explain::format_duration(
                            now.saturating_duration_since(m.enqueued_at)
                        )
                    );
                    tracing::warn!(id = %lease.id(), reason = %reason, "dead letter: a queued item's deadline passed");
                    if queue.dead_letter(lease, &reason).await? {
                        Rescheduled::DeadLettered
                    } else {
                        Rescheduled::LeaseLost
                    }
                } else if retryable && last && config.item_deadline.is_some() {
                    // Past the count: retried on, not counted, until the deadline.
                    queue.defer(lease, at, &why).await?
                } else {
                    queue.reschedule(lease, at, &why).await?
                };
                match done {
                    Rescheduled::DeadLettered => report.dead_lettered += 1,
                    _ => report.rescheduled += 1,
                }
            }
        }
    }
    if !acks.is_empty() {
        queue.ack(&acks).await?;
        report.delivered += acks.len() as u64;
    }
    Ok(())
}

enum Settle {
    Dead(String),
    /// Rescheduled after the class's delay; `true`: a retryable failure (not counted past
    /// the last retry, a dead letter only past the item deadline).
    Retry(RetryClass, String, bool),
}

/// The delay before delivery attempt `n` (1-based) of a message last failed with `class`.
pub fn retry_delay(policy: &RetryPolicy, class: RetryClass, n: u32) -> Duration {
    let last = policy.rule(class).max_retries.max(1);
    let mut rng = fastrand::Rng::new();
    policy.delay(class, n.clamp(1, last), None, &mut rng)
}

/// A queued payload (one action line and, except for `delete`, one source line) as an
/// [`EncodedAction`]: op, `_index`, `_id` and `version`/`version_type` from its action line.
pub fn encoded(payload: &[u8]) -> Result<EncodedAction, String> {
    let end = memchr::memchr(b'\n', payload).ok_or("no line break after the action line")?;
    let line: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&payload[..end]).map_err(|e| format!("action line: {e}"))?;
    let (op, meta) = line
        .iter()
        .next()
        .filter(|_| line.len() == 1)
        .ok_or("the action line must have exactly one key (the operation)")?;
    let op = match op.as_str() {
        "index" => OpType::Index,
        "create" => OpType::Create,
        "update" => OpType::Update,
        "delete" => OpType::Delete,
        other => return Err(format!("unknown operation {other:?}")),
    };
    let field = |k: &str| meta.get(k).and_then(serde_json::Value::as_str);
    let (index, id) = match (field("_index"), field("_id")) {
        (Some(i), Some(d)) => (i.to_owned(), d.to_owned()),
        _ => return Err("the action line needs _index and _id".into()),
    };
    let mut a = EncodedAction::new(op, index, id, payload.to_vec())?;
    let vtype = match field("version_type") {
        Some("external") => Some(VersionType::External),
        Some("external_gte") => Some(VersionType::ExternalGte),
        _ => None,
    };
    if let (Some(v), Some(t)) = (
        meta.get("version").and_then(serde_json::Value::as_u64),
        vtype,
    ) {
        a = a.version(v, t);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;

    #[test]
    fn a_payload_round_trips_to_an_encoded_action() {
        let item = FailedItem {
            seq: 1,
            action: Action::create("docs").id("a\"1").source("{\"x\":1}"),
            reason: FailureReason {
                status: Some(503),
                error_type: "retries_exhausted".into(),
                reason: "r".into(),
                retry_class: Some("unavailable"),
            },
            attempts: 2,
            retryable: true,
        };
        let p = payload(&item).unwrap();
        assert_eq!(
            p,
            b"{\"create\":{\"_index\":\"docs\",\"_id\":\"a\\\"1\"}}\n{\"x\":1}\n"
        );
        let a = encoded(&p).unwrap();
        assert_eq!(a.op(), OpType::Create);
        assert_eq!(a.lines().as_ref(), p.as_slice());
        for bad in [
            &b"{\"create\":{\"_index\":\"d\"}}\n{}\n"[..],
            b"{\"nope\":{\"_index\":\"d\",\"_id\":\"1\"}}\n{}\n",
            b"not json\n{}\n",
            b"{\"create\":{\"_index\":\"d\",\"_id\":\"1\"}}",
        ] {
            assert!(encoded(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    fn failed(seq: u64, id: &str) -> FailedItem {
        FailedItem {
            seq,
            action: Action::create("docs").id(id).source("{\"x\":1}"),
            reason: FailureReason {
                status: None,
                error_type: "deadline_exceeded".into(),
                reason: "breaker open".into(),
                retry_class: Some("connection"),
            },
            attempts: 1,
            retryable: true,
        }
    }

    #[tokio::test]
    async fn items_are_appended_in_batches_and_a_failed_append_dead_letters_them() {
        let dir = tempfile::tempdir().unwrap();
        let queue =
            Queue::open_embedded(searchwire_queue::EmbeddedConfig::new(dir.path())).unwrap();
        let dead: Arc<Mutex<Vec<FailedItem>>> = Arc::default();
        let d = dead.clone();
        let fallback = move |i: &FailedItem| -> Result<(), SinkError> {
            d.lock().unwrap().push(i.clone());
            Ok(())
        };
        let sink = QueueSink::start(
            queue.clone(),
            QueueSinkConfig {
                priority: 7,
                ..Default::default()
            },
            fallback.clone(),
        );
        for i in 0..5 {
            sink.undeliverable(&failed(i, &format!("d{i}"))).unwrap();
        }
        sink.undeliverable(&failed(5, "d0")).unwrap(); // same payload: de-duplicated
        let r = sink.close().await;
        assert_eq!((r.queued, r.duplicates, r.append_failed), (5, 1, 0));
        assert_eq!(sink.unsettled(), 0);
        assert!(sink.undeliverable(&failed(9, "late")).is_err(), "closed");
        let listed = queue.list(None, 10).await.unwrap();
        assert_eq!(listed.len(), 5);
        assert!(listed.iter().all(|m| m.priority == 7));
        assert!(dead.lock().unwrap().is_empty());

        // The queue refuses appends: every item goes to the dead letters, none is lost.
        if let Queue::Embedded(q) = &queue {
            q.close().await.unwrap();
        }
        let sink = QueueSink::start(queue, QueueSinkConfig::default(), fallback);
        for i in 10..13 {
            sink.undeliverable(&failed(i, &format!("e{i}"))).unwrap();
        }
        let r = sink.close().await;
        assert_eq!((r.queued, r.append_failed), (0, 3));
        let dead = dead.lock().unwrap();
        assert_eq!(dead.iter().map(|i| i.seq).collect::<Vec<_>>(), [10, 11, 12]);
        assert!(dead
            .iter()
            .all(|i| i.reason.error_type == "queue_append_failed"));
    }

    /// Polls `room()` once: ready now, or the producer would wait.
    fn room_now(sink: &QueueSink) -> bool {
        use std::future::Future;
        let fut = sink.room();
        tokio::pin!(fut);
        let waker = std::task::Waker::noop();
        fut.as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
    }

    /// The appender runs on this current-thread runtime only when the test yields, so while
    /// the test hands items over without awaiting, every one of them waits for its append
    /// (the append is held). The producer may hand over exactly `capacity` items (the
    /// default, 10,000) before `room()` makes it wait; once the appender ran, it may go on.
    #[tokio::test(flavor = "current_thread")]
    async fn the_producer_waits_while_capacity_items_wait_for_their_append() {
        let dir = tempfile::tempdir().unwrap();
        let queue =
            Queue::open_embedded(searchwire_queue::EmbeddedConfig::new(dir.path())).unwrap();
        let refuse = |_: &FailedItem| -> Result<(), SinkError> { panic!("nothing dead") };
        let sink = QueueSink::start(queue.clone(), QueueSinkConfig::default(), refuse);
        let mut handed = 0u64;
        while room_now(&sink) {
            assert!(
                handed <= QUEUE_SINK_CAPACITY as u64,
                "no back-pressure: {handed} items handed over, none appended"
            );
            sink.undeliverable(&failed(handed, &format!("b{handed}")))
                .unwrap();
            handed += 1;
        }
        assert_eq!(handed, QUEUE_SINK_CAPACITY as u64);
        assert_eq!(QUEUE_SINK_CAPACITY, 10_000, "the documented bound");
        assert_eq!(sink.unsettled(), QUEUE_SINK_CAPACITY);

        // The appender runs (the test awaits): the first batch's append returns and the
        // producer gets room again, with no item lost.
        tokio::time::timeout(Duration::from_secs(60), sink.room())
            .await
            .expect("room once the appender ran");
        assert!(sink.unsettled() < QUEUE_SINK_CAPACITY);
        let r = sink.close().await;
        assert_eq!((r.queued, r.duplicates, r.append_failed), (handed, 0, 0));
        assert_eq!(queue.stats().await.unwrap().backlog, handed);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_configured_capacity_is_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let queue =
            Queue::open_embedded(searchwire_queue::EmbeddedConfig::new(dir.path())).unwrap();
        let refuse = |_: &FailedItem| -> Result<(), SinkError> { panic!("nothing dead") };
        let config = QueueSinkConfig {
            capacity: 3,
            ..Default::default()
        };
        let sink = QueueSink::start(queue, config, refuse);
        let mut handed = 0;
        while room_now(&sink) && handed < 100 {
            sink.undeliverable(&failed(handed, &format!("s{handed}")))
                .unwrap();
            handed += 1;
        }
        assert_eq!(handed, 3);
        assert_eq!(sink.close().await.queued, 3);
    }

    #[test]
    fn the_delivery_delay_follows_the_class_and_stops_growing() {
        let p = RetryPolicy {
            jitter: None,
            ..Default::default()
        };
        let d: Vec<u64> = [1, 2, 3, 4, 9]
            .iter()
            .map(|n| retry_delay(&p, RetryClass::Unavailable, *n).as_millis() as u64)
            .collect();
        assert_eq!(d, [500, 1000, 2000, 2000, 2000]);
    }
}
