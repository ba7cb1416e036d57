//! The delivery loop: leases due messages (priority first, then due time, then arrival) and
//! sends them to the cluster as it allows — nothing is tried while the breaker is open, one
//! bulk request per cycle. Delivered → ack; worth another try → rescheduled with a doubling
//! delay (a dead letter once its retries are spent); failed for good → dead letter at once.
//!
//! A cycle that is cut short (shutdown after the drain timeout, a crash) leaves its messages
//! leased: `release` on shutdown, or the lease timeout, puts them back. Delivering one twice
//! is harmless — every message carries its op and id: an `index` writes the same document
//! again, a `create` is answered 409, which counts as delivered.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use searchwire::BreakerState;
use searchwire_queue::{Lease, MessageId};
use tokio::sync::watch;

use crate::accept::truncate;
use crate::ndjson::{self, Defaults, Item, Op};
use crate::send::{self, ItemOutcome, SendOutcome};
use crate::state::Shared;

/// Runs until `stop` turns true (checked between cycles).
pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
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
            pause(&shared, &mut stop, true).await;
            continue;
        }
        cycle(&shared, leases).await;
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

/// One delivery: one bulk request for the leased messages, then ack/reschedule/dead-letter.
pub(crate) async fn cycle(shared: &Shared, leases: Vec<Lease>) {
    let mut items: Vec<(Lease, Item)> = Vec::with_capacity(leases.len());
    for lease in leases {
        match ndjson::parse(&lease.message.payload, &Defaults::default()) {
            Ok(mut v) if v.len() == 1 => {
                if let Some(item) = v.pop() {
                    items.push((lease, item));
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
    if items.is_empty() {
        return;
    }
    let refs: Vec<&Item> = items.iter().map(|(_, i)| i).collect();
    let outcome = send::send(&shared.client, &refs, shared.config.delivery_budget, &[]).await;
    let per_item: Vec<Result<(), (bool, String)>> = match outcome {
        SendOutcome::Items(v) => v
            .into_iter()
            .zip(&items)
            .map(|(o, (_, item))| match o {
                ItemOutcome::Done { status, .. } if status < 300 => Ok(()),
                // Our own earlier write landed (an ambiguous failure, or a delivery cut short).
                ItemOutcome::Done { status: 409, .. } if item.op == Op::Create => Ok(()),
                ItemOutcome::Done { status, body } => Err((
                    false,
                    format!(
                        "{status}: {}",
                        body.get("error").map(|e| e.to_string()).unwrap_or_default()
                    ),
                )),
                ItemOutcome::Retry(r) => Err((true, r)),
            })
            .collect(),
        SendOutcome::Retry(r) => vec![Err((true, r)); items.len()],
        SendOutcome::Rejected { status, body } => {
            let r = format!(
                "the cluster refused the request: {status} {}",
                String::from_utf8_lossy(&body)
            );
            vec![Err((true, r)); items.len()]
        }
    };
    let mut acks: Vec<MessageId> = Vec::new();
    let now = shared.queue.options().clock.now();
    let (mut retried, mut dead) = (0u64, 0u64);
    for ((lease, _), result) in items.iter().zip(per_item) {
        match result {
            Ok(()) => acks.push(lease.id()),
            Err((true, reason)) => {
                let at = now.saturating_add(shared.config.retry_delay(lease.message.attempts + 1));
                match shared.queue.reschedule(lease, at, &truncate(&reason)).await {
                    Ok(searchwire_queue::Rescheduled::DeadLettered) => dead += 1,
                    Ok(_) => retried += 1,
                    Err(e) => {
                        tracing::warn!(error = %e, id = %lease.id(), "cannot reschedule a message")
                    }
                }
            }
            Err((false, reason)) => {
                tracing::warn!(id = %lease.id(), index = lease.message.index.as_deref().unwrap_or(""), reason = %reason, "dead letter: the cluster refused a queued item for good");
                match shared.queue.dead_letter(lease, &truncate(&reason)).await {
                    Ok(_) => dead += 1,
                    Err(e) => {
                        tracing::warn!(error = %e, id = %lease.id(), "cannot dead-letter a message")
                    }
                }
            }
        }
    }
    if !acks.is_empty() {
        if let Err(e) = shared.queue.ack(&acks).await {
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
            "delivery cycle finished while draining"
        );
    }
}
