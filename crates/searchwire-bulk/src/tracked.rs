//! Tracked items: the caller gets each item's final outcome instead of a sink call.
//!
//! [`BulkIndexer::add_tracked`](crate::BulkIndexer::add_tracked) (an [`Action`]) and
//! [`BulkIndexer::add_tracked_encoded`](crate::BulkIndexer::add_tracked_encoded) (an
//! [`EncodedAction`]: NDJSON lines the caller already has, e.g. a relay passing a client's
//! item through) return an [`ItemTicket`], a future that resolves to the item's
//! [`ItemOutcome`] once the indexer is done with it: written (with the cluster's
//! `_version`, `_seq_no`, `_primary_term`), failed for good, or undeliverable now.
//!
//! **A tracked item never goes to a sink.** The caller owns it: its outcome is the ticket's,
//! and the caller decides what a failure means (a relay answers its client or queues the
//! item). Its counters are `Stats::tracked_failed` and `Stats::tracked_undeliverable`
//! instead of `dead_lettered` and `handed_to_retry_sink`. Everything else — batching,
//! same-id order, per-class retries, the item deadline, back-pressure, adaptive concurrency,
//! the breaker — is the same as for any item.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::action::{OpType, VersionType};
use crate::classify::{RetryClass, Written};
use crate::response::{ItemError, Shards};
use crate::sink::FailureReason;

/// A tracked item's final outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ItemOutcome {
    /// The cluster acknowledged it (or a `create` 409 means our own earlier write is there).
    Written(WrittenItem),
    /// Failed for good: the cluster refused the item (mapping error, missing index, a real
    /// conflict), or refused the whole request it was in (`whole_request`: 401/403, another
    /// 4xx — the item itself was never looked at, and may pass once that is fixed).
    Failed {
        /// Why: the item's (or the request's) status, error type and reason.
        reason: FailureReason,
        /// The cluster refused the request as a whole, not this item.
        whole_request: bool,
        /// The item's error as the cluster sent it (type, reason and its other fields:
        /// `caused_by`, `index`, `shard`, ...) when the cluster refused this item; `None` for
        /// a request refused as a whole.
        error: Option<Box<ItemError>>,
    },
    /// Not written now for a reason that can pass: the class's retries or the item
    /// deadline ran out on throttling (429), unavailable shards (503, 5xx), a failed
    /// connection, or an open circuit breaker. It may have been applied when a request
    /// carrying it failed ambiguously (a reset or a timeout after sending); sending it again
    /// later with the same id is safe.
    Undeliverable {
        /// The class of the last failure.
        class: RetryClass,
        /// The reason (`retries_exhausted`, `deadline_exceeded`, `indexer_stopped`, ...).
        reason: FailureReason,
    },
}

/// A written item: the cluster's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenItem {
    /// The item's status (201, 200; 409 for [`Written::AlreadyPresent`]).
    pub status: u16,
    /// What was written.
    pub result: Written,
    /// `_version`, when the cluster gave it.
    pub version: Option<i64>,
    /// `_seq_no`, when the cluster gave it.
    pub seq_no: Option<i64>,
    /// `_primary_term`, when the cluster gave it.
    pub primary_term: Option<i64>,
    /// `_shards`, when the cluster gave it.
    pub shards: Option<Shards>,
    /// `forced_refresh`, when the cluster gave it (`refresh=true`, or a `wait_for` that
    /// forced a refresh).
    pub forced_refresh: Option<bool>,
    /// Requests that carried the item.
    pub attempts: u32,
}

/// Resolves to a tracked item's [`ItemOutcome`]. Dropping it does not cancel the item; its
/// outcome is then discarded.
#[derive(Debug)]
pub struct ItemTicket {
    seq: u64,
    rx: oneshot::Receiver<ItemOutcome>,
}

impl ItemTicket {
    pub(crate) fn new(seq: u64, rx: oneshot::Receiver<ItemOutcome>) -> ItemTicket {
        ItemTicket { seq, rx }
    }

    /// The item's sequence number (as `add` would have returned it).
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

impl Future for ItemTicket {
    type Output = ItemOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ItemOutcome> {
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            // The indexer's task ended without an answer (it panicked, or the runtime is
            // shutting down): whether the item landed is unknown, so it is undeliverable
            // now — sending it again with its id is safe.
            r.unwrap_or_else(|_| ItemOutcome::Undeliverable {
                class: RetryClass::Connection,
                reason: FailureReason {
                    status: None,
                    error_type: "indexer_stopped".into(),
                    reason: "the bulk indexer stopped before the item was finished".into(),
                    retry_class: None,
                },
            })
        })
    }
}

/// An action the caller has already encoded: its NDJSON action line and (except for
/// `delete`) source line, each ending in `\n`, sent as they are. For callers that pass
/// items through (a relay keeps every metadata field its client sent); the indexer does not
/// parse or re-encode the lines, so the caller vouches that they match `op`, `index` and `id`.
#[derive(Clone, Debug)]
pub struct EncodedAction {
    pub(crate) op: OpType,
    pub(crate) index: String,
    pub(crate) id: String,
    pub(crate) lines: Bytes,
    pub(crate) version: Option<(u64, VersionType)>,
    pub(crate) unique_id: bool,
    pub(crate) params: Option<RequestParams>,
}

/// Query parameters of the `_bulk` request that carries an item (`refresh`, `timeout`,
/// `wait_for_active_shards`), sent as given. Items with different parameters never share a
/// request.
pub type RequestParams = Arc<[(String, String)]>;

impl EncodedAction {
    /// The lines of one item with its operation, index and id. The error names what is
    /// wrong: an empty index or id, or lines that are not one line (`delete`) or two
    /// lines (the others), each ending in `\n`.
    pub fn new(
        op: OpType,
        index: impl Into<String>,
        id: impl Into<String>,
        lines: impl Into<Bytes>,
    ) -> Result<EncodedAction, String> {
        let (index, id, lines) = (index.into(), id.into(), lines.into());
        if index.is_empty() || id.is_empty() {
            return Err("an encoded action needs its index and its id".into());
        }
        let want = if op == OpType::Delete { 1 } else { 2 };
        let count = lines.iter().filter(|b| **b == b'\n').count();
        if count != want || lines.last() != Some(&b'\n') {
            return Err(format!(
                "an encoded {} action is {want} line(s), each ending in \\n; got {count} line break(s)",
                op.as_str()
            ));
        }
        Ok(EncodedAction {
            op,
            index,
            id,
            lines,
            version: None,
            unique_id: false,
            params: None,
        })
    }

    /// Query parameters for the `_bulk` request carrying this item (none by default). The
    /// indexer puts only items with equal parameters in one request, in arrival order: a
    /// run of items with other parameters ends the batch. An empty list is no parameters.
    pub fn request_params(mut self, params: RequestParams) -> EncodedAction {
        self.params = (!params.is_empty()).then_some(params);
        self
    }

    /// The `version` and `version_type` the lines carry (an externally versioned write
    /// answered 409 after an ambiguous failure counts as already present).
    pub fn version(mut self, version: u64, version_type: VersionType) -> EncodedAction {
        self.version = Some((version, version_type));
        self
    }

    /// The caller made the id up itself and it is unique (a UUIDv7): no other writer can
    /// have a document with it, so a `create` answered 409 is our own earlier write (already
    /// present), and the item skips same-id ordering.
    pub fn unique_id(mut self, on: bool) -> EncodedAction {
        self.unique_id = on;
        self
    }

    /// The operation.
    pub fn op(&self) -> OpType {
        self.op
    }

    /// The NDJSON lines.
    pub fn lines(&self) -> &Bytes {
        &self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_lines_are_checked() {
        assert!(EncodedAction::new(OpType::Index, "i", "1", "{\"index\":{}}\n{}\n").is_ok());
        assert!(EncodedAction::new(OpType::Delete, "i", "1", "{\"delete\":{}}\n").is_ok());
        let e = EncodedAction::new(OpType::Index, "i", "1", "{\"index\":{}}\n").unwrap_err();
        assert!(e.contains("2 line(s)"), "{e}");
        let e = EncodedAction::new(OpType::Delete, "i", "1", "{\"delete\":{}}").unwrap_err();
        assert!(e.contains("1 line(s)"), "{e}");
        assert!(EncodedAction::new(OpType::Create, "", "1", "a\nb\n").is_err());
        assert!(EncodedAction::new(OpType::Create, "i", "", "a\nb\n").is_err());
    }

    #[tokio::test]
    async fn a_ticket_whose_indexer_stopped_is_undeliverable() {
        let (tx, rx) = oneshot::channel::<ItemOutcome>();
        drop(tx);
        let outcome = ItemTicket::new(3, rx).await;
        assert!(matches!(
            outcome,
            ItemOutcome::Undeliverable { class: RetryClass::Connection, ref reason }
                if reason.error_type == "indexer_stopped"
        ));
    }
}
