//! Statistics (from the API) and `searchwire_bulk_*` metrics (through the `metrics` facade).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::classify::{RetryClass, Written};

/// A snapshot of the indexer's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Actions accepted by `add`/`try_add`.
    pub added: u64,
    /// Actions the cluster acknowledged (the sum of the five results below).
    pub indexed: u64,
    /// … answered `created`.
    pub created: u64,
    /// … answered `updated` or `noop`.
    pub updated: u64,
    /// … answered `deleted`.
    pub deleted: u64,
    /// … deletes of documents that did not exist.
    pub not_found: u64,
    /// … creates answered 409 where the document is our own earlier write.
    pub already_present: u64,
    /// Item retries scheduled because of throttling (429).
    pub retried_throttled: u64,
    /// Item retries scheduled because of unavailable shards (503, 5xx).
    pub retried_unavailable: u64,
    /// Item retries scheduled because a whole request failed (reset, timeout).
    pub retried_connection: u64,
    /// Items handed to the dead-letter sink.
    pub dead_lettered: u64,
    /// Items handed to the retry sink.
    pub handed_to_retry_sink: u64,
    /// Tracked items that failed for good (their ticket said so; no sink was called).
    pub tracked_failed: u64,
    /// Tracked items undeliverable now (their ticket said so; no sink was called).
    pub tracked_undeliverable: u64,
    /// Sink calls that returned an error.
    pub sink_errors: u64,
    /// Bytes of bulk request bodies sent (retries included).
    pub bytes_sent: u64,
    /// Bulk requests sent.
    pub requests: u64,
    /// Bulk requests that failed as a whole (no item answers).
    pub failed_requests: u64,
    /// Bulk requests in flight now.
    pub in_flight: u64,
    /// The adaptive limit of requests in flight now.
    pub concurrency: u64,
    /// The bytes per bulk request at most now: `batch_bytes`, adapted within its bounds
    /// and lowered by a 413.
    pub batch_bytes: u64,
    /// Actions added but not finished yet (buffered, in flight, waiting for a retry).
    pub pending: u64,
}

impl Stats {
    /// All retries, every class.
    pub fn retried(&self) -> u64 {
        self.retried_throttled + self.retried_unavailable + self.retried_connection
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    added: AtomicU64,
    written: [AtomicU64; 5],
    retried: [AtomicU64; 3],
    dead_lettered: AtomicU64,
    retry_sink: AtomicU64,
    tracked_failed: AtomicU64,
    tracked_undeliverable: AtomicU64,
    sink_errors: AtomicU64,
    bytes_sent: AtomicU64,
    requests: AtomicU64,
    failed_requests: AtomicU64,
    in_flight: AtomicU64,
    concurrency: AtomicU64,
    pending: AtomicU64,
    batch_bytes: AtomicU64,
}

fn written_index(w: Written) -> usize {
    match w {
        Written::Created => 0,
        // A noop is counted with the updates (the document holds what was sent).
        Written::Updated | Written::Noop => 1,
        Written::Deleted => 2,
        Written::NotFound => 3,
        Written::AlreadyPresent => 4,
    }
}

/// Every result kind, each at its [`written_kind`] position.
const WRITTEN: [Written; 6] = [
    Written::Created,
    Written::Updated,
    Written::Noop,
    Written::Deleted,
    Written::NotFound,
    Written::AlreadyPresent,
];

/// `w`'s position in [`WRITTEN`].
fn written_kind(w: Written) -> usize {
    match w {
        Written::Created => 0,
        Written::Updated => 1,
        Written::Noop => 2,
        Written::Deleted => 3,
        Written::NotFound => 4,
        Written::AlreadyPresent => 5,
    }
}

fn written_label(w: Written) -> &'static str {
    match w {
        Written::Created => "created",
        Written::Updated => "updated",
        Written::Noop => "noop",
        Written::Deleted => "deleted",
        Written::NotFound => "not_found",
        Written::AlreadyPresent => "already_present",
    }
}

const R: Ordering = Ordering::Relaxed;

impl Counters {
    pub(crate) fn added(&self, bytes: usize) {
        self.added.fetch_add(1, R);
        self.pending.fetch_add(1, R);
        metrics::counter!("searchwire_bulk_docs_added_total").increment(1);
        metrics::counter!("searchwire_bulk_docs_added_bytes_total").increment(bytes as u64);
    }

    /// Undoes [`Counters::added`] for an action the driver never received (only if the
    /// driver task is gone; the metric keeps the count).
    pub(crate) fn not_added(&self) {
        self.added.fetch_sub(1, R);
        self.pending.fetch_sub(1, R);
    }

    pub(crate) fn finished(&self) {
        self.pending.fetch_sub(1, R);
    }

    pub(crate) fn written(&self, w: Written, n: u64) {
        self.written[written_index(w)].fetch_add(n, R);
        metrics::counter!("searchwire_bulk_docs_indexed_total", "result" => written_label(w))
            .increment(n);
    }

    /// Counts the written items of one response: one update per result kind, not one per
    /// item.
    pub(crate) fn written_many(&self, items: impl IntoIterator<Item = Written>) {
        let mut n = [0u64; WRITTEN.len()];
        for w in items {
            n[written_kind(w)] += 1;
        }
        for (w, n) in WRITTEN.into_iter().zip(n) {
            if n > 0 {
                self.written(w, n);
            }
        }
    }

    pub(crate) fn retried(&self, c: RetryClass, n: u64) {
        self.retried[c.index()].fetch_add(n, R);
        metrics::counter!("searchwire_bulk_docs_retried_total", "class" => c.as_str()).increment(n);
    }

    pub(crate) fn dead_lettered(&self, error_type: &str) {
        self.dead_lettered.fetch_add(1, R);
        metrics::counter!("searchwire_bulk_docs_dead_lettered_total", "error_type" => error_type.to_owned())
            .increment(1);
    }

    pub(crate) fn to_retry_sink(&self) {
        self.retry_sink.fetch_add(1, R);
        metrics::counter!("searchwire_bulk_docs_retry_sink_total").increment(1);
    }

    /// A tracked item given up on: its outcome went to its ticket.
    pub(crate) fn tracked_gave_up(&self, undeliverable: bool) {
        let (c, outcome) = if undeliverable {
            (&self.tracked_undeliverable, "undeliverable")
        } else {
            (&self.tracked_failed, "failed")
        };
        c.fetch_add(1, R);
        metrics::counter!("searchwire_bulk_docs_tracked_total", "outcome" => outcome).increment(1);
    }

    pub(crate) fn sink_error(&self) {
        self.sink_errors.fetch_add(1, R);
        metrics::counter!("searchwire_bulk_sink_errors_total").increment(1);
    }

    pub(crate) fn request_sent(&self, bytes: usize) {
        self.requests.fetch_add(1, R);
        self.bytes_sent.fetch_add(bytes as u64, R);
        let n = self.in_flight.fetch_add(1, R) + 1;
        metrics::counter!("searchwire_bulk_requests_total").increment(1);
        metrics::counter!("searchwire_bulk_request_bytes_total").increment(bytes as u64);
        metrics::gauge!("searchwire_bulk_in_flight_requests").set(n as f64);
    }

    pub(crate) fn request_done(&self, failed_as_a_whole: Option<&'static str>) {
        let n = self.in_flight.fetch_sub(1, R).saturating_sub(1);
        metrics::gauge!("searchwire_bulk_in_flight_requests").set(n as f64);
        if let Some(class) = failed_as_a_whole {
            self.failed_requests.fetch_add(1, R);
            metrics::counter!("searchwire_bulk_request_failures_total", "class" => class)
                .increment(1);
        }
    }

    pub(crate) fn concurrency(&self, limit: usize) {
        self.concurrency.store(limit as u64, R);
        metrics::gauge!("searchwire_bulk_concurrency_limit").set(limit as f64);
    }

    pub(crate) fn batch_bytes(&self, bytes: usize) {
        self.batch_bytes.store(bytes as u64, R);
        metrics::gauge!("searchwire_bulk_batch_bytes").set(bytes as f64);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let w = |i: usize| self.written[i].load(R);
        Stats {
            added: self.added.load(R),
            indexed: (0..5).map(w).sum(),
            created: w(0),
            updated: w(1),
            deleted: w(2),
            not_found: w(3),
            already_present: w(4),
            retried_throttled: self.retried[0].load(R),
            retried_unavailable: self.retried[1].load(R),
            retried_connection: self.retried[2].load(R),
            dead_lettered: self.dead_lettered.load(R),
            handed_to_retry_sink: self.retry_sink.load(R),
            tracked_failed: self.tracked_failed.load(R),
            tracked_undeliverable: self.tracked_undeliverable.load(R),
            sink_errors: self.sink_errors.load(R),
            bytes_sent: self.bytes_sent.load(R),
            requests: self.requests.load(R),
            failed_requests: self.failed_requests.load(R),
            in_flight: self.in_flight.load(R),
            concurrency: self.concurrency.load(R),
            batch_bytes: self.batch_bytes.load(R),
            pending: self.pending.load(R),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_items_of_a_response_are_counted_once_per_kind() {
        for (i, w) in WRITTEN.into_iter().enumerate() {
            assert_eq!(written_kind(w), i);
        }
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let c = Counters::default();
        metrics::with_local_recorder(&recorder, || {
            use Written::*;
            c.written_many([Created, Noop, Created, Updated, AlreadyPresent, Created]);
            c.written_many([Deleted, NotFound, Created]);
            c.written_many([]);
        });
        let s = c.snapshot();
        assert_eq!((s.indexed, s.created, s.updated, s.deleted), (9, 4, 2, 1));
        assert_eq!((s.not_found, s.already_present), (1, 1));
        let text = handle.render();
        for (result, n) in [
            ("created", 4),
            ("updated", 1),
            ("noop", 1),
            ("deleted", 1),
            ("not_found", 1),
            ("already_present", 1),
        ] {
            let series = format!("searchwire_bulk_docs_indexed_total{{result=\"{result}\"}} {n}");
            assert!(text.lines().any(|l| l == series), "{series} in:\n{text}");
        }
    }
}
