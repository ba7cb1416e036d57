//! Settling items: reading a request's item results, scheduling retries by class, giving
//! up (tracked outcome, retry sink, dead letters) and finishing.

use std::time::Duration;

use searchwire::BreakerState;
use tokio::time::Instant;

use super::outcome::Outcome;
use super::{Driver, InFlight, Item};
use crate::batch_size::Signal;
use crate::classify::{self, ItemContext, RetryClass, Verdict};
use crate::response::{ItemError, ItemResult};
use crate::sink::{self, FailedItem, FailureReason};
use crate::tracked::{ItemOutcome, WrittenItem};

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

impl Driver {
    /// Gives up on waiting items whose deadline passed before they could be sent (the
    /// breaker is open, or every request slot is busy). Looks only at the fronts of the
    /// retry queue and the buffer, where the oldest items are; an expired item further back
    /// is sent with the smallest request timeout and given up after it.
    pub(super) fn expire(&mut self, now: Instant, limit: Duration) {
        let expired =
            |it: Option<&Item>| it.and_then(|i| i.added).is_some_and(|a| now >= a + limit);
        let mut open = None;
        loop {
            let it = if expired(self.ready.front().map(Box::as_ref)) {
                self.ready.pop_front()
            } else if expired(self.buffer.front().map(Box::as_ref)) {
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

    pub(super) fn on_done(&mut self, id: tokio::task::Id, outcome: Result<Outcome, String>) {
        let Some(InFlight {
            items,
            epoch,
            size_epoch,
            sent_at,
            body,
        }) = self.in_flight.remove(&id)
        else {
            return;
        };
        let sent_bytes = body.len();
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
        let too_large = matches!(outcome, Outcome::TooLarge(_));
        // (throttled, a signal for the limit at all): only item answers and throttling say
        // whether the cluster keeps up; a reset or a 5xx says nothing about its write queues.
        let (throttled, signal) = match outcome {
            Outcome::Items(results) => {
                self.shared.counters.request_done(None);
                (self.on_items(items, results, now), true)
            }
            Outcome::TooLarge(reason) => {
                self.shared.counters.request_done(Some("too_large"));
                self.split_too_large(items, sent_bytes, size_epoch, reason);
                (false, false)
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
        if !too_large {
            let s = match (signal, throttled) {
                (true, true) => Signal::Throttled,
                (true, false) => Signal::Answered,
                (false, _) => Signal::Other,
            };
            self.resize(
                size_epoch,
                sent_bytes,
                now.saturating_duration_since(sent_at),
                s,
            );
        }
        if signal && self.aimd.on_response(epoch, throttled) {
            self.shared.counters.concurrency(self.aimd.limit());
            tracing::info!(
                concurrency = self.aimd.limit(),
                throttled,
                "bulk concurrency limit changed"
            );
        }
    }

    /// A request refused with 413 (the cluster's `http.max_content_length`): nothing of it
    /// was applied, and its items are not at fault. The request size is halved below what
    /// was sent — for the indexer's life: the cluster's limit is a setting, it does not
    /// pass — and the items go back to the front of the retry queue, in order, at once (no
    /// delay: the cluster is not busy, the request was too big). Only a single action
    /// larger than the limit is a dead letter: no request can carry it.
    fn split_too_large(
        &mut self,
        items: Vec<Box<Item>>,
        sent: usize,
        size_epoch: u64,
        reason: FailureReason,
    ) {
        if items.len() > 1 {
            let before = self.sizer.size();
            self.resize(size_epoch, sent, Duration::ZERO, Signal::TooLarge);
            tracing::warn!(
                sent_bytes = sent,
                items = items.len(),
                batch_bytes = self.sizer.size(),
                was = before,
                "the cluster refused a bulk request as too large (413, http.max_content_length); its items are sent again in smaller requests"
            );
            for mut it in items.into_iter().rev() {
                it.own_source();
                self.ready.push_front(it);
            }
            return;
        }
        for it in items {
            let mut reason = reason.clone();
            reason.reason = format!(
                "this one action ({} bytes) is larger than the cluster accepts in a request (http.max_content_length); {}",
                it.len(),
                reason.reason
            );
            let how = GiveUp::Failed {
                whole_request: true,
                error: None,
            };
            self.give_up(it, reason, how);
        }
    }

    /// Tells the batch sizer how a request of `sent` bytes went; a change is counted and
    /// logged.
    fn resize(&mut self, size_epoch: u64, sent: usize, latency: Duration, signal: Signal) {
        if self.sizer.on_response(size_epoch, sent, latency, signal) {
            self.shared.counters.batch_bytes(self.sizer.size());
            tracing::debug!(
                batch_bytes = self.sizer.size(),
                sent_bytes = sent,
                latency_ms = latency.as_millis() as u64,
                ?signal,
                "bulk batch size changed"
            );
        }
    }

    /// Returns whether any item was throttled.
    fn on_items(&mut self, items: Vec<Box<Item>>, results: Vec<ItemResult>, now: Instant) -> bool {
        let mut by_class: [Vec<(Box<Item>, FailureReason)>; 3] = Default::default();
        // Every verdict first: the written counters are counted once per result kind (a
        // labelled metric builds its key on every update, ~400 instructions) and before the
        // first item is finished, so nobody sees the watermark pass an uncounted item.
        let verdicts: Vec<Verdict> = items
            .iter()
            .zip(&results)
            .map(|(it, r)| {
                let ctx = ItemContext {
                    op: it.action.op(),
                    version_type: it.action.version_value().map(|v| v.1),
                    ambiguous: it.ambiguous,
                    id_assigned: it.id_assigned,
                    conflict_is_present: self.cfg.conflict_is_present,
                };
                classify::item(ctx, r)
            })
            .collect();
        self.shared
            .counters
            .written_many(verdicts.iter().filter_map(|v| match v {
                Verdict::Ok(w) => Some(*w),
                _ => None,
            }));
        for ((it, r), verdict) in items.into_iter().zip(results).zip(verdicts) {
            match verdict {
                Verdict::Ok(w) => {
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
        group: Vec<(Box<Item>, FailureReason)>,
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
            let n = it.retries[class.index()].saturating_add(1);
            let deadline = match (self.cfg.item_deadline, it.added) {
                (Some(limit), Some(added)) => Some(added + limit),
                _ => None,
            };
            // Past the class's count, an item is handed on when something takes it (the
            // retry sink, a tracked item's caller unless it asked for the whole deadline)
            // or when there is no deadline to end it; otherwise it is retried on until its
            // deadline.
            let caller_takes = it.tracker.is_some() && !self.cfg.tracked_until_deadline;
            let handed_on = self.retry_sink.is_some() || caller_takes || deadline.is_none();
            if !self.cfg.retry.within_count(class, n) && handed_on {
                exhausted.push((it, reason));
                continue;
            }
            let delay = self.cfg.retry.delay(class, n, retry_after, &mut self.rng);
            if deadline.is_some_and(|end| now + delay > end) {
                // The retry would start after the item's deadline: give up now.
                late.push((it, reason));
                continue;
            }
            it.own_source();
            it.retries[class.index()] = n;
            attempt = attempt.max(n);
            first_delay.get_or_insert(delay);
            scheduled += 1;
            self.delayed.entry(now + delay).or_default().push(it);
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

    fn give_up(&mut self, mut it: Box<Item>, reason: FailureReason, how: GiveUp) {
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

    fn finish(&mut self, mut it: Box<Item>) {
        self.outstanding.remove(it.seq);
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
        if let Some(p) = it.permits.take() {
            self.released.add(p);
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
