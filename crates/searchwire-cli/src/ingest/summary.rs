//! The JSON summary `searchwire ingest` prints on stdout at the end.

use searchwire_bulk::Stats;
use serde::Serialize;

#[derive(Serialize)]
pub(super) struct Summary<'a> {
    pub(super) input: &'a str,
    pub(super) lines: u64,
    #[serde(flatten)]
    pub(super) stats: &'a Stats,
    pub(super) malformed: u64,
    pub(super) dead_letters: u64,
    pub(super) checkpoint: Option<u64>,
    pub(super) elapsed_ms: f64,
    pub(super) docs_per_sec: f64,
    pub(super) interrupted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) queue: Option<QueueSummary>,
}

/// The summary's `queue` object: what went into the queue, what the drain delivered, and
/// what is `left` queued.
#[derive(Serialize)]
pub(super) struct QueueSummary {
    #[serde(flatten)]
    pub(super) sink: searchwire_bulk::QueueSinkReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) delivery: Option<searchwire_bulk::DeliveryReport>,
}
