//! Where items go that the cluster did not take: the dead-letter sink (failed for good) and
//! the retry sink (undeliverable *now*: their retries or the cluster's patience ran out).
//!
//! Nothing is dropped silently: every item the indexer gives up on is handed to exactly one
//! sink, and an item counts as finished (for `flush`, `close` and
//! [`BulkIndexer::acknowledged_below`](crate::BulkIndexer::acknowledged_below)) only after
//! the sink call returned. Sinks are called on the indexer's task: keep them quick (write a
//! line, push to a channel).

use std::fmt;

use bytes::Bytes;
use serde::Serialize;

use crate::action::Action;
use crate::classify::RetryClass;

/// Why an item was given up on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailureReason {
    /// The item's (or the request's) HTTP status, if the cluster answered.
    pub status: Option<u16>,
    /// The error type (`mapper_parsing_exception`, `index_not_found_exception`,
    /// `retries_exhausted`, `deadline_exceeded`, `request_rejected`, ...).
    pub error_type: String,
    /// The explanation (the server's reason, or the indexer's).
    pub reason: String,
    /// For exhausted retries: the class whose retries ran out.
    pub retry_class: Option<&'static str>,
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} ({s}): {}", self.error_type, self.reason),
            None => write!(f, "{}: {}", self.error_type, self.reason),
        }
    }
}

/// An item the indexer gave up on, with everything needed to send it again.
#[derive(Clone, Debug)]
pub struct FailedItem {
    /// The sequence number `add` returned for it.
    pub seq: u64,
    /// The original action, with its id (assigned, if it had none) and source.
    pub action: Action,
    /// Why.
    pub reason: FailureReason,
    /// Requests that carried it.
    pub attempts: u32,
    /// Whether it failed only because its retries (or the deadline) ran out: the cluster
    /// may take it later. These go to the retry sink when there is one.
    pub retryable: bool,
}

impl FailedItem {
    /// The source bytes (none for deletes).
    pub fn source(&self) -> Option<&Bytes> {
        self.action.source_bytes()
    }

    /// One NDJSON line (with `\n`): `{"seq","op","index","id","routing","pipeline",
    /// "status","error_type","reason","attempts","retryable","source"}` — `source` is the
    /// document as JSON when it parses, else as a string.
    pub fn to_json_line(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Line<'a> {
            seq: u64,
            op: &'static str,
            index: &'a str,
            id: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            routing: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pipeline: Option<&'a str>,
            status: Option<u16>,
            error_type: &'a str,
            reason: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            retry_class: Option<&'static str>,
            attempts: u32,
            retryable: bool,
            source: Option<Box<serde_json::value::RawValue>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            source_text: Option<String>,
        }
        let raw = self.source().map(|s| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|t| serde_json::value::RawValue::from_string(t.to_owned()).ok())
                .ok_or_else(|| String::from_utf8_lossy(s).into_owned())
        });
        let (source, source_text) = match raw {
            Some(Ok(v)) => (Some(v), None),
            Some(Err(t)) => (None, Some(t)),
            None => (None, None),
        };
        let line = Line {
            seq: self.seq,
            op: self.action.op().as_str(),
            index: self.action.index_name(),
            id: self.action.doc_id(),
            routing: self.action.routing_value(),
            pipeline: self.action.pipeline_name(),
            status: self.reason.status,
            error_type: &self.reason.error_type,
            reason: &self.reason.reason,
            retry_class: self.reason.retry_class,
            attempts: self.attempts,
            retryable: self.retryable,
            source,
            source_text,
        };
        let mut out = serde_json::to_vec(&line).unwrap_or_else(|e| {
            format!(
                "{{\"seq\":{},\"error\":\"cannot serialize: {e}\"}}",
                self.seq
            )
            .into_bytes()
        });
        out.push(b'\n');
        out
    }
}

/// A sink refused an item (e.g. its file could not be written).
#[derive(Debug)]
pub struct SinkError(pub String);

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SinkError {}

/// Receives items that failed for good (and retryable ones when there is no retry sink).
pub trait DeadLetterSink: Send + Sync + 'static {
    /// Records the item durably enough for the caller's promise; an error is logged and
    /// counted (`Stats::sink_errors`), the item is then counted as dead-lettered anyway.
    fn dead_letter(&self, item: &FailedItem) -> Result<(), SinkError>;
}

/// Receives items that are undeliverable *now* — retries or the deadline ran out on a
/// throttled, unavailable or unreachable cluster — for a later attempt (a durable retry
/// queue). On error the item goes to the dead-letter sink instead.
pub trait RetrySink: Send + Sync + 'static {
    /// Takes the item.
    fn undeliverable(&self, item: &FailedItem) -> Result<(), SinkError>;
}

impl<F> DeadLetterSink for F
where
    F: Fn(&FailedItem) -> Result<(), SinkError> + Send + Sync + 'static,
{
    fn dead_letter(&self, item: &FailedItem) -> Result<(), SinkError> {
        self(item)
    }
}

impl<F> RetrySink for F
where
    F: Fn(&FailedItem) -> Result<(), SinkError> + Send + Sync + 'static,
{
    fn undeliverable(&self, item: &FailedItem) -> Result<(), SinkError> {
        self(item)
    }
}

/// The default dead-letter sink: logs every item at `error` level (seq, index, id, reason;
/// never the source) so that nothing disappears without a trace. Applications that need the
/// documents back install their own sink.
#[derive(Debug, Default)]
pub struct LogDeadLetters;

impl DeadLetterSink for LogDeadLetters {
    fn dead_letter(&self, item: &FailedItem) -> Result<(), SinkError> {
        tracing::error!(
            seq = item.seq,
            index = item.action.index_name(),
            id = item.action.doc_id().unwrap_or(""),
            op = item.action.op().as_str(),
            status = item.reason.status,
            error_type = %item.reason.error_type,
            reason = %item.reason.reason,
            attempts = item.attempts,
            "bulk item dead-lettered"
        );
        Ok(())
    }
}

/// The retry class as the error type of an exhausted item.
pub(crate) fn exhausted(class: RetryClass, last: &FailureReason, retries: u32) -> FailureReason {
    FailureReason {
        status: last.status,
        error_type: "retries_exhausted".into(),
        reason: format!(
            "gave up after {retries} {} retries; last: {last}",
            class.as_str()
        ),
        retry_class: Some(class.as_str()),
    }
}

/// The reason of an item whose next retry would start after its deadline.
pub(crate) fn past_deadline(
    class: RetryClass,
    last: &FailureReason,
    deadline: Option<std::time::Duration>,
) -> FailureReason {
    FailureReason {
        status: last.status,
        error_type: "deadline_exceeded".into(),
        reason: format!(
            "the next {} retry would end after the item deadline ({:?} after add); last: {last}",
            class.as_str(),
            deadline.unwrap_or_default()
        ),
        retry_class: Some(class.as_str()),
    }
}
