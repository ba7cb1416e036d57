//! Building and sending a batch: when the buffer is due, which items share a request, the
//! request itself and the task that sends it.

use std::time::Duration;

use searchwire::{BreakerState, Request};
use tokio::time::Instant;

use super::outcome::outcome;
use super::{Driver, InFlight, Item};
use crate::config::Config;

/// The shortest timeout a request gets when the item deadline of its oldest item is near.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_millis(10);

impl Driver {
    fn buffer_due(&self, now: Instant) -> bool {
        if self.buffer.is_empty() {
            return false;
        }
        self.buffer.len() >= self.cfg.batch_actions
            || self.buffer_bytes >= self.sizer.size()
            || self.flushing()
            || self
                .buffer_since
                .is_some_and(|t| now >= t + self.cfg.flush_interval)
    }

    pub(super) fn dispatch(&mut self, now: Instant) {
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

    fn send_batch(&mut self) {
        // Sized once: grown by doubling, the vector of (large) items was reallocated ~6
        // times per 100-item batch, and whether each realloc moved its block (a copy of up
        // to half the batch) depended on the heap's layout, so its cost changed run to run.
        let mut items = Vec::with_capacity(
            self.cfg
                .batch_actions
                .min(self.ready.len() + self.buffer.len()),
        );
        let mut bytes = 0usize;
        // Items with other request parameters wait for the next request (order kept).
        let max_bytes = self.sizer.size();
        let fits = |items: &Vec<Box<Item>>, bytes: usize, next: &Item, cfg: &Config| {
            items.first().is_none_or(|first| {
                items.len() < cfg.batch_actions
                    && bytes + next.len() <= max_bytes
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
        // One attempt per send: the indexer owns the retries of a batch (by class, the
        // §3.3 rule), so the transport does not retry it as well. The attempt gets the
        // whole request timeout, not the client's shorter default attempt timeout, so the
        // cluster's own 1-minute wait for a primary answers first.
        let attempt = self.cfg.attempt_timeout.unwrap_or(timeout).min(timeout);
        let mut req = Request::post("/_bulk")
            .body_with_type(body.clone(), "application/x-ndjson")
            .timeout(timeout)
            .attempt_timeout(attempt)
            .max_retries(0)
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
                size_epoch: self.sizer.epoch(),
                sent_at: Instant::now(),
                body,
            },
        );
    }
}
