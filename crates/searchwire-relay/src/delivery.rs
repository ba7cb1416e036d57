//! The delivery loop: leases due messages (priority first, then due time, then arrival) and
//! submits them to the delivery bulk indexer, which sends them as the cluster allows —
//! adaptive concurrency, per-class item retries, nothing while the breaker is open. Each
//! leased batch is settled on its own task as its items' outcomes arrive: written → ack;
//! undeliverable now (retries or the delivery budget ran out) → rescheduled with a doubling
//! delay, and past its last retry deferred without counting, a dead letter only once the
//! message is older than the item deadline (`searchwire_bulk::defaults::DELIVERY_ITEM_DEADLINE`,
//! 24 h: a throttled message is not a bad one); refused as a whole request → rescheduled, a
//! dead letter once its retries are spent; failed for good → dead letter at once. The loop leases the next batch while earlier ones are in
//! flight, so several bulk requests carry queued messages at once.
//!
//! **Order.** Messages are submitted in lease order, and the indexer sends its buffer in
//! that order, up to its concurrency in requests at once. Two rules hold:
//! - *Priority barrier*: a message is submitted only when no message of a higher priority
//!   leased before it is still in flight (unsettled). So every higher-priority message that
//!   was due is written (or rescheduled, or dead-lettered) before a lower one is sent.
//! - *Arrival within a priority*: each `_bulk` request carries its items in lease order and
//!   requests start in lease order; requests in flight together may land in any order, and
//!   an item retried by class goes behind. A message can therefore be written after a later
//!   one of the same priority only if both were in requests in flight at the same time (or
//!   it was retried).
//!
//! A batch whose settling is cut short (shutdown after the drain timeout, a crash) leaves its
//! messages leased: `release` on shutdown, or the lease timeout, puts them back. Delivering one
//! twice is harmless — every message carries its op and id: an `index` writes the same
//! document again, a `create` is answered 409, which counts as delivered.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use searchwire::BreakerState;
use searchwire_bulk::defaults::DELIVERY_ITEM_DEADLINE;
use searchwire_queue::{Lease, MessageId};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::ndjson::{self, Defaults, Item};
use crate::send::{self, Verdict};
use crate::state::Shared;

/// Runs until `stop` turns true (checked between batches), then waits for the batches in
/// flight to settle.
pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // One task per submitted batch (all of one priority); it returns that priority.
    let mut settling: JoinSet<u8> = JoinSet::new();
    let mut held: BTreeMap<u8, usize> = BTreeMap::new();
    loop {
        while let Some(done) = settling.try_join_next() {
            settled(&mut held, done);
        }
        if *stop.borrow() {
            break;
        }
        let breaker = shared.client.breaker_state();
        metrics::gauge!("searchwire_relay_breaker_open").set(if breaker == BreakerState::Open {
            1.0
        } else {
            0.0
        });
        if breaker == BreakerState::Open {
            pause(&shared, &mut stop, false).await;
            continue;
        }
        let leases = match shared.queue.lease(shared.config.delivery_batch).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot lease from the retry queue");
                pause(&shared, &mut stop, false).await;
                continue;
            }
        };
        if leases.is_empty() {
            if settling.is_empty() {
                pause(&shared, &mut stop, true).await;
            } else {
                // Something may be rescheduled or become due when a batch settles.
                tokio::select! {
                    done = settling.join_next() => {
                        if let Some(done) = done {
                            settled(&mut held, done);
                        }
                    }
                    _ = pause(&shared, &mut stop, true) => {}
                }
            }
            continue;
        }
        for (priority, batch) in by_priority(&shared, leases).await {
            // The priority barrier: higher priorities in flight settle first.
            while held.keys().next_back().is_some_and(|p| *p > priority) {
                match settling.join_next().await {
                    Some(done) => settled(&mut held, done),
                    None => held.clear(),
                }
            }
            let refs: Vec<&Item> = batch.iter().map(|(_, i)| i).collect();
            let tickets = send::add_all(&shared.delivering, &refs, None).await;
            *held.entry(priority).or_default() += 1;
            let shared = shared.clone();
            settling.spawn(async move {
                settle(&shared, batch, tickets).await;
                priority
            });
        }
    }
    // The current cycle: every batch in flight settles (bounded by the caller's drain timeout).
    while let Some(done) = settling.join_next().await {
        settled(&mut held, done);
    }
}

fn settled(held: &mut BTreeMap<u8, usize>, done: Result<u8, tokio::task::JoinError>) {
    let Ok(p) = done else {
        // A settle task panicked: its messages stay leased and return after the lease
        // timeout. The barrier cannot know its priority; it is released with the others.
        tracing::error!(
            "a delivery batch failed to settle; its messages return after the lease timeout"
        );
        return;
    };
    if let Some(n) = held.get_mut(&p) {
        *n -= 1;
        if *n == 0 {
            held.remove(&p);
        }
    }
}

/// Waits for the idle poll period (or a wake-up when `wakeable`, or stop); keeps the queue
/// gauges fresh for scrapes between health probes.
async fn pause(shared: &Shared, stop: &mut watch::Receiver<bool>, wakeable: bool) {
    if let Ok(s) = shared.queue.stats().await {
        metrics::gauge!("searchwire_relay_backlog").set(s.backlog as f64);
        metrics::gauge!("searchwire_relay_dead_letters").set(s.dead_letters as f64);
    }
    let sleep = tokio::time::sleep(shared.config.idle_poll);
    tokio::select! {
        _ = sleep => {}
        _ = stop.changed() => {}
        _ = shared.wake.notified(), if wakeable => {}
    }
}

/// Parses the leased payloads (dead-lettering any that is not one bulk item) and splits them
/// into runs of one priority, in lease order.
async fn by_priority(shared: &Shared, leases: Vec<Lease>) -> Vec<(u8, Vec<(Lease, Item)>)> {
    let mut runs: Vec<(u8, Vec<(Lease, Item)>)> = Vec::new();
    for lease in leases {
        match ndjson::parse(&lease.message.payload, &Defaults::default()) {
            Ok(mut v) if v.len() == 1 => {
                if let Some(item) = v.pop() {
                    let p = lease.message.priority;
                    match runs.last_mut() {
                        Some((rp, run)) if *rp == p => run.push((lease, item)),
                        _ => runs.push((p, vec![(lease, item)])),
                    }
                }
            }
            _ => {
                let reason =
                    "the queued payload is not one bulk item (written by another program?)";
                if let Err(e) = shared.queue.dead_letter(&lease, reason).await {
                    tracing::warn!(error = %e, id = %lease.id(), "cannot dead-letter a message");
                }
                metrics::counter!("searchwire_relay_delivered_total", "outcome" => "dead_letter")
                    .increment(1);
            }
        }
    }
    runs
}

/// Waits for each message's outcome, then acks, reschedules or dead-letters it.
async fn settle(shared: &Shared, batch: Vec<(Lease, Item)>, pending: Vec<send::Pending>) {
    let mut acks: Vec<MessageId> = Vec::new();
    let (mut retried, mut dead) = (0u64, 0u64);
    for ((lease, item), p) in batch.iter().zip(pending) {
        let again = match send::resolve(item, p).await {
            // Written, or a `create` answered 409: our own earlier write (the delivery
            // indexer counts conflicts as present).
            Verdict::Done { status, .. } if status < 300 => {
                acks.push(lease.id());
                continue;
            }
            Verdict::Done { status, body } => {
                let reason = format!(
                    "{status}: {}",
                    body.get("error").map(|e| e.to_string()).unwrap_or_default()
                );
                tracing::warn!(id = %lease.id(), index = lease.message.index.as_deref().unwrap_or(""), reason = %reason, "dead letter: the cluster refused a queued item for good");
                match shared.queue.dead_letter(lease, &reason).await {
                    Ok(_) => dead += 1,
                    Err(e) => {
                        tracing::warn!(error = %e, id = %lease.id(), "cannot dead-letter a message")
                    }
                }
                continue;
            }
            Verdict::Retry(r) => (r, true),
            Verdict::Rejected {
                status,
                kind,
                reason,
                ..
            } => (
                format!("the cluster refused the request: {status} {kind}: {reason}"),
                false,
            ),
        };
        let (again, retryable) = again;
        let now = shared.queue.options().clock.now();
        let m = &lease.message;
        let at = now.saturating_add(shared.config.retry_delay(m.attempts + 1));
        // A retryable failure (throttled, unavailable, no connection) is never a dead letter
        // before the message's item deadline: it spends max_retries only up to the last
        // one and is deferred (not counted) from there, as the bulk indexer's rule.
        let age = now.saturating_duration_since(m.enqueued_at);
        let expired = DELIVERY_ITEM_DEADLINE.is_some_and(|limit| age >= limit);
        let last = m.attempts.saturating_add(1) >= m.max_retries.max(1);
        let put_back = if retryable && expired {
            let reason = format!(
                "deadline_exceeded: still undeliverable {} after it was queued (item deadline); last: {again}",
                searchwire::explain::format_duration(age)
            );
            match shared.queue.dead_letter(lease, &reason).await {
                Ok(true) => Ok(searchwire_queue::Rescheduled::DeadLettered),
                Ok(false) => Ok(searchwire_queue::Rescheduled::LeaseLost),
                Err(e) => Err(e),
            }
        } else if retryable && last && DELIVERY_ITEM_DEADLINE.is_some() {
            shared.queue.defer(lease, at, &again).await
        } else {
            shared.queue.reschedule(lease, at, &again).await
        };
        match put_back {
            Ok(searchwire_queue::Rescheduled::DeadLettered) => dead += 1,
            Ok(_) => retried += 1,
            Err(e) => {
                tracing::warn!(error = %e, id = %lease.id(), "cannot reschedule a message")
            }
        }
    }
    if !acks.is_empty() {
        if let Err(e) = shared.ledger.ack(&shared.queue, acks.clone()).await {
            // Not acked: the lease runs out and the items are delivered again (idempotent).
            tracing::warn!(error = %e, n = acks.len(), "cannot ack delivered messages");
        }
    }
    for (outcome, n) in [
        ("delivered", acks.len() as u64),
        ("rescheduled", retried),
        ("dead_letter", dead),
    ] {
        if n > 0 {
            metrics::counter!("searchwire_relay_delivered_total", "outcome" => outcome)
                .increment(n);
        }
    }
    if shared.draining.load(Ordering::Relaxed) {
        tracing::info!(
            delivered = acks.len(),
            "delivery batch settled while draining"
        );
    }
}
