//! `POST /_bulk`: try the cluster through the live bulk indexer, within the live budget;
//! queue durably what it could not take now (one batch append); answer in OpenSearch's bulk
//! format only after every item is indexed, failed for good, or durably queued.

use tokio::time::Instant;

use bytes::Bytes;
use http::StatusCode;
use searchwire::BreakerState;
use searchwire_bulk::RequestParams;
use searchwire_queue::NewMessage;
use serde_json::{json, Map, Value};

use crate::filter_path::FilterPath;
use crate::ndjson::{self, Defaults, Item};
use crate::send::{self, error_body, Verdict};
use crate::state::Shared;

/// The result a queued item reports. Its status is 200: the relay has taken responsibility
/// for the write (it is on disk, or in Redis, and will be delivered with its id). 202 would
/// say the same more precisely, but Logstash (success = 200/201), Beats and the Go bulk
/// indexers (failure = status > 201) would count it as a failure and send the item again.
pub const QUEUED: &str = "queued";

/// What the handler answers.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// The body (JSON unless a `Content-Type` in `headers` says otherwise).
    pub body: Bytes,
    /// Headers of the answer (empty for the relay's own JSON answers: the server adds the
    /// `Content-Type` the request's media type asks for).
    pub headers: http::HeaderMap,
}

impl Answer {
    pub(crate) fn json(status: StatusCode, v: &Value) -> Answer {
        Answer {
            status,
            body: Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            headers: http::HeaderMap::new(),
        }
    }

    /// OpenSearch's error body: `{"error":{"root_cause":[..],"type","reason"},"status"}`.
    pub(crate) fn error(status: StatusCode, kind: &str, reason: &str) -> Answer {
        let e = json!({"type": kind, "reason": reason});
        Answer::json(
            status,
            &json!({"error": {"root_cause": [e.clone()], "type": kind, "reason": reason}, "status": status.as_u16()}),
        )
    }
}

/// The parsed request: body, URL defaults, query parameters for the cluster, priority.
#[derive(Debug, Default)]
pub struct BulkRequest {
    /// NDJSON body.
    pub body: Bytes,
    /// `_index`, `routing`, `pipeline` defaults.
    pub defaults: Defaults,
    /// `refresh`, `timeout`, `wait_for_active_shards` as the client sent them (`refresh=false`
    /// left out: it is the default). Passed on with the first try: the live indexer puts the
    /// items in `_bulk` requests with exactly these parameters (items of concurrent client
    /// requests share a request only when their parameters are equal), so a live item is
    /// refreshed, waited for and checked as the cluster would for the client, and a value
    /// the cluster refuses is its 400. Not kept with a queued item: delivery uses the
    /// cluster's defaults (see docs/architecture/relay.md).
    pub query: Vec<(String, String)>,
    /// `X-Searchwire-Priority`.
    pub priority: Option<u8>,
    /// `filter_path`, applied to the answer (not to error answers, as OpenSearch does).
    pub filter: Option<FilterPath>,
}

/// What became of one item: its status and its item object (as in a bulk answer).
#[derive(Debug)]
pub(crate) struct Taken {
    /// The item's status.
    pub status: u16,
    /// The item object: `_index`, `_id`, `status`, `result` and the version fields, or `error`.
    pub body: Map<String, Value>,
}

/// Handles one bulk request.
pub(crate) async fn bulk(shared: &Shared, req: BulkRequest) -> Answer {
    let started = Instant::now();
    let items = match ndjson::parse(&req.body, &req.defaults) {
        Ok(items) => items,
        Err(e) => {
            metrics::counter!("searchwire_relay_requests_total", "result" => "bad_request")
                .increment(1);
            return Answer::error(StatusCode::BAD_REQUEST, e.kind, &e.reason);
        }
    };
    let taken = match take(shared, &items, req.query, req.priority).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let errors = taken.iter().any(|t| t.status >= 300);
    let out: Vec<Value> = items
        .iter()
        .zip(taken)
        .map(|(item, t)| {
            let mut wrapped = Map::new();
            wrapped.insert(item.op.as_str().into(), Value::Object(t.body));
            Value::Object(wrapped)
        })
        .collect();
    metrics::counter!("searchwire_relay_requests_total", "result" => "answered").increment(1);
    let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    metrics::histogram!("searchwire_relay_request_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    let answer = json!({"took": took, "errors": errors, "items": out});
    Answer::json(
        StatusCode::OK,
        &match &req.filter {
            Some(f) => f.apply(answer),
            None => answer,
        },
    )
}

/// Whether the item is a compare-and-set write (`if_seq_no` / `if_primary_term`). Such an
/// item is never queued: its condition is about the document as the client read it, and
/// only its answer (written with the new `_seq_no`, or 409) lets the client go on. A
/// replay minutes later could neither report a 409 to anybody nor tell a conflict with
/// another writer from its own earlier attempt that landed (see ARCHITECTURE.md,
/// "Single-document writes").
pub(crate) fn conditional(item: &Item) -> bool {
    item.meta.contains_key("if_seq_no") || item.meta.contains_key("if_primary_term")
}

/// The durable write path of `_bulk` and the single-document routes: tries `items` through
/// the live bulk indexer (within the live budget; straight to the queue in queue-only mode
/// or while the breaker is open), queues durably what the cluster could not take now (one
/// batch append), and returns every item's answer once each is indexed, failed for good, or
/// queued. `Err` is the cluster's refusal of the whole request (credentials, ...): its
/// answer, as if the client had sent the request to it; nothing is queued then.
pub(crate) async fn take(
    shared: &Shared,
    items: &[Item],
    query: Vec<(String, String)>,
    priority: Option<u8>,
) -> Result<Vec<Taken>, Answer> {
    let cfg = &shared.config;
    if shared.admission.overloaded().is_some() {
        crate::measure::fresh(shared, crate::admission::FRESH_TO_REFUSE).await;
    }
    if let Some(why) = shared.admission.overloaded() {
        // At the high-water mark: nothing is tried or queued; the shipper backs off.
        metrics::counter!("searchwire_relay_requests_total", "result" => "overloaded").increment(1);
        metrics::counter!("searchwire_relay_items_total", "outcome" => "overloaded")
            .increment(items.len() as u64);
        return Err(overloaded(&why));
    }
    let refs: Vec<&Item> = items.iter().collect();
    let outcomes = if cfg.queue_only {
        vec![Verdict::Retry("queue-only relay".into()); items.len()]
    } else if shared.client.breaker_state() == BreakerState::Open {
        vec![
            Verdict::Retry("circuit_open: the cluster circuit breaker is open".into());
            items.len()
        ]
    } else {
        let params: Option<RequestParams> = (!query.is_empty()).then(|| query.into());
        send::submit(&shared.live, &refs, params.as_ref()).await
    };
    if let Some(Verdict::Rejected {
        status,
        kind,
        reason,
        error,
    }) = outcomes.first()
    {
        if outcomes
            .iter()
            .all(|o| matches!(o, Verdict::Rejected { .. }))
        {
            metrics::counter!("searchwire_relay_requests_total", "result" => "rejected")
                .increment(1);
            let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
            return Err(match error {
                // The cluster's own answer: its error object and status.
                Some(e) => Answer::json(code, &json!({"error": e, "status": status})),
                None => Answer::error(code, kind, reason),
            });
        }
    }
    let now = shared.queue.options().clock.now();
    let retry_at = now.saturating_add(cfg.retry_base);
    let mut batch = Vec::new();
    for (item, outcome) in items.iter().zip(&outcomes) {
        if let Verdict::Retry(reason) = outcome {
            if conditional(item) {
                continue;
            }
            batch.push(
                NewMessage::new(item.encode())
                    .priority(cfg.priority(priority, item.index()))
                    .retry_at(retry_at)
                    .max_retries(cfg.max_retries)
                    .index(item.index())
                    .last_error(reason.as_str()),
            );
        }
    }
    let queued = if batch.is_empty() {
        Queued::Yes
    } else {
        let n = batch.len();
        let bytes: u64 = batch
            .iter()
            .map(|m| {
                crate::admission::stored_bytes(
                    m.payload.len(),
                    m.index.as_ref().map_or(0, String::len),
                    m.last_error.as_ref().map_or(0, String::len),
                )
            })
            .sum();
        let mut reserved = shared.admission.reserve(bytes);
        if reserved.is_err() {
            crate::measure::fresh(shared, crate::admission::FRESH_TO_REFUSE).await;
            reserved = shared.admission.reserve(bytes);
        }
        match reserved {
            Err(why) => {
                tracing::warn!(items = n, reason = %why, "cannot hold items: answering them 429");
                Queued::Full(why)
            }
            Ok(()) => match shared.ledger.append(&shared.queue, batch).await {
                Ok(_) => {
                    shared.admission.appended(n as u64, bytes);
                    shared.wake.notify_one();
                    Queued::Yes
                }
                Err(e) => {
                    shared.admission.release(bytes);
                    tracing::error!(items = n, error = %e, "cannot queue items: answering them 503");
                    Queued::Failed(e.to_string())
                }
            },
        }
    };
    let mut out = Vec::with_capacity(items.len());
    let (mut indexed, mut failed, mut queued_n, mut unqueued, mut not_queued, mut overloaded) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for (item, outcome) in items.iter().zip(outcomes) {
        let (status, body) = match outcome {
            // Refused with a request of other items that were not all refused: the refusal
            // is this item's answer.
            Verdict::Rejected {
                status,
                kind,
                reason,
                error,
            } => {
                failed += 1;
                let mut body = error_body(item, status, &kind, &reason);
                if let Some(e) = error {
                    body.insert("error".into(), e);
                }
                (status, body)
            }
            Verdict::Done { status, body } => {
                if status >= 300 {
                    failed += 1;
                } else {
                    indexed += 1;
                }
                (status, body)
            }
            Verdict::Retry(reason) if conditional(item) => {
                not_queued += 1;
                (503, error_body(item, 503, NOT_QUEUED, &format!(
                    "the cluster could not take this conditional write (if_seq_no/if_primary_term) now ({reason}); \
                     a conditional write is not queued: send it again, or re-read the document first"
                )))
            }
            Verdict::Retry(_) => match &queued {
                Queued::Yes => {
                    queued_n += 1;
                    (200, queued_item(item))
                }
                Queued::Full(why) => {
                    overloaded += 1;
                    (429, error_body(item, 429, "es_rejected_execution_exception", &format!(
                        "rejected execution: the cluster could not take this item now and {why}; send it again later"
                    )))
                }
                Queued::Failed(e) => {
                    unqueued += 1;
                    (503, error_body(item, 503, "searchwire_queue_unavailable", &format!(
                        "the cluster could not take this item now and the relay's queue failed ({e}); send it again"
                    )))
                }
            },
        };
        out.push(Taken { status, body });
    }
    // The items the cluster confirmed are accepted (answered 2xx) and indexed at once; the
    // queued ones were counted with their append.
    shared.ledger.written_live(indexed).await;
    for (outcome, n) in [
        ("indexed", indexed),
        ("failed", failed),
        ("queued", queued_n),
        ("queue_error", unqueued),
        ("not_queued", not_queued),
        ("overloaded", overloaded),
    ] {
        if n > 0 {
            metrics::counter!("searchwire_relay_items_total", "outcome" => outcome).increment(n);
        }
    }
    Ok(out)
}

/// What became of the items the cluster could not take now.
enum Queued {
    /// Durably queued.
    Yes,
    /// Not queued: the relay's limits (`crate::admission`) leave no room; answered 429.
    Full(String),
    /// Not queued: the append failed (a full disk, a Redis OOM); answered 503.
    Failed(String),
}

/// The 429 of a write the relay cannot hold now.
pub(crate) fn overloaded(reason: &str) -> Answer {
    let mut a = Answer::error(
        StatusCode::TOO_MANY_REQUESTS,
        "es_rejected_execution_exception",
        &format!("rejected execution: {reason}; the relay is delivering its backlog, send it again later"),
    );
    a.headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(crate::config::RETRY_AFTER.as_secs()),
    );
    a
}

/// The error type of a conditional write the cluster could not take now (not queued).
pub const NOT_QUEUED: &str = "searchwire_conditional_not_queued";

/// Whether an item answer is the queued answer.
pub(crate) fn is_queued(body: &Map<String, Value>) -> bool {
    body.get("result").and_then(Value::as_str) == Some(QUEUED)
}

fn queued_item(item: &Item) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("_index".into(), Value::String(item.index().to_owned()));
    m.insert("_id".into(), Value::String(item.id().to_owned()));
    m.insert("result".into(), Value::String(QUEUED.into()));
    m.insert("status".into(), json!(200));
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rejection_is_opensearch_shaped_with_retry_after() {
        let r = overloaded("full");
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            r.headers
                .get(http::header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"5"[..])
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        assert_eq!(v["error"]["type"], "es_rejected_execution_exception");
        assert_eq!(
            v["error"]["root_cause"][0]["type"],
            "es_rejected_execution_exception"
        );
        assert_eq!(v["status"], 429);
    }
}
