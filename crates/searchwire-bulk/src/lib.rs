//! # searchwire-bulk
//!
//! An idempotent bulk indexer for OpenSearch and Elasticsearch, on top of the
//! [`searchwire`] transport (and only its public API). Nothing is dropped without a record,
//! nothing is written twice, nothing blocks forever:
//!
//! - **Batches** by action count, bytes and interval ([`defaults`]); several requests in
//!   flight; [`BulkIndexer::add`] waits when the buffer and the requests in flight are full
//!   (back-pressure), [`BulkIndexer::try_add`] does not; [`BulkIndexer::flush`];
//!   [`BulkIndexer::close`] delivers everything and returns the final [`Stats`].
//! - **Idempotent by default**: an action without an id gets one before its first send
//!   ([`IdScheme`]: UUIDv7, or the SHA-256 of the source), so every retry is safe; a
//!   `create` answered 409 after an ambiguous failure counts as already present.
//! - **Item-level retries** by class with the reference 004 §3.3 table ([`backoff`]):
//!   only the failed items are sent again. Items that fail for good go to the
//!   [`DeadLetterSink`] with the original action, source and reason. A retryable item
//!   (429, 503, reset, timeout, no node) goes to the [`RetrySink`] once its class's count
//!   ran out when there is one; without one it is retried on, at the capped delay, and is
//!   a dead letter only when its item deadline ([`defaults::ITEM_DEADLINE`]) passes.
//! - **Same-id order**: actions with the same index and id are delivered in the order added
//!   (a later one waits until the earlier one is finished).
//! - **Adaptive concurrency** (AIMD, see `concurrency`): throttling halves the requests in
//!   flight, clean rounds add one back.
//! - **Per-item outcomes** when the caller wants them: [`BulkIndexer::add_tracked`] returns
//!   an [`ItemTicket`] that resolves to the item's [`ItemOutcome`] (written with its
//!   `_version`/`_seq_no`, failed for good, or undeliverable now); tracked items never go to
//!   a sink — the caller owns them.
//! - **A durable retry queue** ([`queued`]): [`QueueSink`] appends what is undeliverable
//!   now to a [`searchwire_queue::Queue`] in batches, and [`deliver`] drains the queue
//!   through an indexer as the cluster recovers.
//! - **Observable**: [`BulkIndexer::stats`], `searchwire_bulk_*` metrics, and a log line per
//!   retry with `retry_id`, `attempt`, `cluster`, `index`, `failed_docs`.
//!
//! ```no_run
//! use searchwire::Client;
//! use searchwire_bulk::{Action, BulkIndexer, FailedItem, SinkError};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::builder().nodes(["http://127.0.0.1:9201"]).build()?;
//! let indexer = BulkIndexer::builder(client)
//!     .dead_letter_sink(|item: &FailedItem| -> Result<(), SinkError> {
//!         eprintln!("dead letter: {} {:?}: {}", item.action.index_name(), item.action.doc_id(), item.reason);
//!         Ok(())
//!     })
//!     .build()?;
//! for i in 0..10_000 {
//!     indexer
//!         .add(Action::create("logs").id(format!("event-{i}")).json(&serde_json::json!({"n": i})))
//!         .await?;
//! }
//! let stats = indexer.close().await;
//! println!("{} indexed, {} dead letters", stats.indexed, stats.dead_lettered);
//! # Ok(()) }
//! ```
//!
//! **Request-level retries.** The indexer is the one owner of a batch's retries: each send
//! is a single transport attempt (`Request::max_retries(0)`), so a whole-request 429 is
//! sent again only by the indexer, with the reference 004 §3.3 rule (`Retry-After` as the
//! base, ×1.5, jittered), never by two layers at once. A reset, timeout or 5xx marks the
//! items *ambiguous* (they may have been applied) and retries them under the connection or
//! unavailable class. That is safe because every action has an id by then.
//!
//! See `docs/bulk.md` for the design, the defaults and the measurements.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod action;
pub mod backoff;
mod batch_size;
mod bodies;
mod classify;
mod concurrency;
mod config;
pub mod defaults;
mod driver;
mod indexer;
pub mod queued;
mod response;
mod rule;
mod sink;
mod stats;
mod tracked;

pub use action::{content_hash, Action, IdScheme, OpType, VersionType};
pub use backoff::{ClassRule, RetryPolicy};
pub use classify::{RetryClass, Written};
pub use indexer::{AddError, BulkIndexer, BulkIndexerBuilder, ConfigError};
pub use queued::{
    deliver, DeliveryConfig, DeliveryReport, QueueSink, QueueSinkConfig, QueueSinkReport,
};
#[doc(hidden)]
pub use response::__parse_both_ways;
pub use response::{BulkResponse, ItemError, ItemResult, Shards, MAX_ERROR_DETAIL_BYTES};
pub use sink::{DeadLetterSink, FailedItem, FailureReason, LogDeadLetters, RetrySink, SinkError};
pub use stats::Stats;
pub use tracked::{EncodedAction, ItemOutcome, ItemTicket, RequestParams, WrittenItem};

/// Benchmark hook (`benches/instructions.rs`), not part of the API: what the indexer does
/// for one batch on its hot path, minus the I/O — prepares every action (checks it, puts its
/// action and source lines together), concatenates the lines into one request body, and
/// parses a bulk response. Returns the body length and the number of items parsed.
#[doc(hidden)]
pub fn __bench_batch(actions: Vec<Action>, response: &[u8]) -> Result<(usize, usize), String> {
    let mut actions = actions;
    let mut heads = Vec::with_capacity(actions.len());
    let mut bytes = 0;
    for action in &mut actions {
        let (head, _) = action.prepare(IdScheme::UuidV7)?;
        bytes += head.len() + action.source_line().map_or(0, |s| s.len() + 1);
        heads.push(head);
    }
    let mut body = bytes::BytesMut::with_capacity(bytes);
    for (head, action) in heads.iter().zip(&actions) {
        body.extend_from_slice(head);
        if let Some(src) = action.source_line() {
            body.extend_from_slice(src);
            bytes::BufMut::put_u8(&mut body, b'\n');
        }
    }
    let parsed = BulkResponse::parse(response)?;
    Ok((body.len(), parsed.items.len()))
}
