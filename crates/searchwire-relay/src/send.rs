//! Items through the bulk indexer ([`searchwire_bulk::BulkIndexer`], tracked): a relay item
//! becomes an [`EncodedAction`] (its lines sent as they are, every metadata field kept), and
//! the indexer's [`ItemOutcome`] becomes what the relay does with the item: answer it with
//! the cluster's result, queue it, or answer the cluster's refusal of the whole request.
//!
//! The indexer batches the items of concurrent client requests (and of delivery) into
//! `_bulk` requests, retries each failed item by class (429, 503, connection; reference 004
//! §3.3) within its item deadline, adapts the requests in flight (AIMD) and sends nothing
//! while the transport's breaker is open.

use searchwire_bulk::{
    AddError, BulkIndexer, EncodedAction, ItemError, ItemOutcome, ItemTicket, OpType,
    RequestParams, VersionType, Written,
};
use serde_json::{json, Map, Value};

use crate::ndjson::{Item, Op};

/// What the relay does with one item after the indexer is done with it.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Finished, successfully or for good: the item object of the answer (`_index`, `_id`,
    /// `status`, `result` and the version fields, or `error`).
    Done {
        /// The item's status.
        status: u16,
        /// The item object.
        body: Map<String, Value>,
    },
    /// Not written now for a reason that can pass: queue it.
    Retry(String),
    /// The cluster refused the whole request the item was in (401/403, another 4xx): the
    /// item was never looked at.
    Rejected {
        /// The cluster's status.
        status: u16,
        /// Its error type.
        kind: String,
        /// Its reason.
        reason: String,
        /// The cluster's `error` object as it sent it (`root_cause`, `caused_by`, ...), when
        /// it sent one.
        error: Option<Value>,
    },
}

/// The item as the indexer sends it: its own lines, its id; a relay-assigned id (UUIDv7) is
/// unique, so a `create` answered 409 for it is our own earlier write.
pub fn encoded(item: &Item) -> Result<EncodedAction, String> {
    let op = match item.op {
        Op::Index => OpType::Index,
        Op::Create => OpType::Create,
        Op::Update => OpType::Update,
        Op::Delete => OpType::Delete,
    };
    let mut a =
        EncodedAction::new(op, item.index(), item.id(), item.encode())?.unique_id(item.id_assigned);
    let version = item.meta.get("version").and_then(Value::as_u64);
    let vtype = match item.meta.get("version_type").and_then(Value::as_str) {
        Some("external") => Some(VersionType::External),
        Some("external_gte") => Some(VersionType::ExternalGte),
        _ => None,
    };
    if let (Some(v), Some(t)) = (version, vtype) {
        a = a.version(v, t);
    }
    Ok(a)
}

/// An item handed to the indexer (its ticket), or the verdict it got without being sent.
pub type Pending = Result<ItemTicket, Verdict>;

/// Adds every item to `indexer` in order, waiting while it is full; `params` are the query
/// parameters of the `_bulk` requests that carry them (only items with equal parameters
/// share a request). An item the indexer cannot take (it is closed: the relay is stopping)
/// is to be queued.
pub async fn add_all(
    indexer: &BulkIndexer,
    items: &[&Item],
    params: Option<&RequestParams>,
) -> Vec<Pending> {
    let mut pending = Vec::with_capacity(items.len());
    for item in items {
        let action = encoded(item).map(|a| match params {
            Some(p) => a.request_params(p.clone()),
            None => a,
        });
        pending.push(match action {
            Ok(a) => indexer.add_tracked_encoded(a).await.map_err(|e| match e {
                AddError::Invalid(m) => invalid(item, &m),
                other => Verdict::Retry(other.to_string()),
            }),
            Err(m) => Err(invalid(item, &m)),
        });
    }
    pending
}

/// Waits for the item's outcome.
pub async fn resolve(item: &Item, pending: Pending) -> Verdict {
    match pending {
        Ok(ticket) => verdict(item, ticket.await),
        Err(v) => v,
    }
}

/// [`add_all`], then every item's verdict, in order.
pub async fn submit(
    indexer: &BulkIndexer,
    items: &[&Item],
    params: Option<&RequestParams>,
) -> Vec<Verdict> {
    let pending = add_all(indexer, items, params).await;
    let mut out = Vec::with_capacity(items.len());
    for (item, p) in items.iter().zip(pending) {
        out.push(resolve(item, p).await);
    }
    out
}

fn invalid(item: &Item, m: &str) -> Verdict {
    Verdict::Done {
        status: 400,
        body: error_body(item, 400, "illegal_argument_exception", m),
    }
}

/// What the relay does with `item` given its outcome. A written item is answered with
/// what the cluster said of it (`result` — `noop` included —, the version fields,
/// `_shards`, `forced_refresh`), an item the cluster refused with its whole error object
/// (`caused_by`, `index`, `shard`, ... as the cluster sent them).
///
/// A `create` the indexer counts as already present (answered 409 where the document can
/// only be this item's own earlier write: its id was assigned by the relay, or a request
/// carrying it failed ambiguously) is answered `201 "created"` — the document this item
/// carried is in the index under its id. A 409 on a client-given id at the first clean
/// attempt stays OpenSearch's 409 (see docs/architecture/relay.md).
pub fn verdict(item: &Item, outcome: ItemOutcome) -> Verdict {
    match outcome {
        ItemOutcome::Written(w) => {
            let (status, result) = match w.result {
                Written::Created => (w.status, "created"),
                Written::Updated => (w.status, "updated"),
                Written::Noop => (w.status, "noop"),
                Written::Deleted => (w.status, "deleted"),
                Written::NotFound => (w.status, "not_found"),
                Written::AlreadyPresent => (201, "created"),
            };
            let mut m = ids(item);
            if let Some(v) = w.version {
                m.insert("_version".into(), json!(v));
            }
            m.insert("result".into(), Value::String(result.into()));
            if let Some(sh) = w.shards {
                m.insert(
                    "_shards".into(),
                    json!({"total": sh.total, "successful": sh.successful, "failed": sh.failed}),
                );
            }
            if let Some(f) = w.forced_refresh {
                m.insert("forced_refresh".into(), Value::Bool(f));
            }
            if let Some(s) = w.seq_no {
                m.insert("_seq_no".into(), json!(s));
            }
            if let Some(t) = w.primary_term {
                m.insert("_primary_term".into(), json!(t));
            }
            m.insert("status".into(), json!(status));
            Verdict::Done { status, body: m }
        }
        ItemOutcome::Failed {
            reason,
            whole_request: true,
            error,
        } => match error {
            Some(e) => Verdict::Rejected {
                status: reason.status.unwrap_or(502),
                error: Some(cluster_error(&e)),
                kind: e.kind,
                reason: e.reason,
            },
            None => Verdict::Rejected {
                status: reason.status.unwrap_or(502),
                kind: reason.error_type,
                reason: reason.reason,
                error: None,
            },
        },
        ItemOutcome::Failed { reason, error, .. } => {
            let status = reason.status.unwrap_or(500);
            let mut body = error_body(item, status, &reason.error_type, &reason.reason);
            if let Some(e) = error {
                body.insert("error".into(), cluster_error(&e));
            }
            Verdict::Done { status, body }
        }
        ItemOutcome::Undeliverable { class, reason } => {
            Verdict::Retry(format!("{}: {reason}", class.as_str()))
        }
        other => Verdict::Retry(format!("{other:?}")),
    }
}

fn ids(item: &Item) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("_index".into(), Value::String(item.index().to_owned()));
    m.insert("_id".into(), Value::String(item.id().to_owned()));
    m
}

/// The cluster's item error as it sent it: type, reason, then its other fields (a field
/// whose raw JSON does not parse — it cannot, the cluster's answer was parsed — is left out).
fn cluster_error(e: &ItemError) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), Value::String(e.kind.clone()));
    m.insert("reason".into(), Value::String(e.reason.clone()));
    for (k, raw) in &e.details {
        if let Ok(v) = serde_json::from_str::<Value>(raw) {
            m.insert(k.clone(), v);
        }
    }
    Value::Object(m)
}

/// An item object with an error, in OpenSearch's shape.
pub(crate) fn error_body(item: &Item, status: u16, kind: &str, reason: &str) -> Map<String, Value> {
    let mut m = ids(item);
    m.insert("status".into(), json!(status));
    m.insert("error".into(), json!({"type": kind, "reason": reason}));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use searchwire_bulk::{FailureReason, RetryClass, WrittenItem};

    fn item(line: &str) -> Item {
        crate::ndjson::parse(line.as_bytes(), &crate::ndjson::Defaults::default())
            .unwrap()
            .remove(0)
    }

    fn reason(status: u16, kind: &str) -> FailureReason {
        FailureReason {
            status: Some(status),
            error_type: kind.into(),
            reason: "r".into(),
            retry_class: None,
        }
    }

    #[test]
    fn outcomes_become_answers_queueing_or_a_refusal() {
        let it = item("{\"create\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{}\n");
        let w = WrittenItem {
            status: 201,
            result: Written::Created,
            version: Some(1),
            seq_no: Some(5),
            primary_term: Some(2),
            shards: None,
            forced_refresh: None,
            attempts: 1,
        };
        let Verdict::Done { status, body } = verdict(&it, ItemOutcome::Written(w.clone())) else {
            panic!()
        };
        assert_eq!(status, 201);
        assert_eq!(
            Value::Object(body),
            json!({"_index":"a","_id":"1","_version":1,"result":"created","_seq_no":5,"_primary_term":2,"status":201})
        );
        // Our own earlier write: created, whatever the 409 said.
        let present = WrittenItem {
            status: 409,
            result: Written::AlreadyPresent,
            version: None,
            seq_no: None,
            primary_term: None,
            ..w
        };
        assert!(matches!(
            verdict(&it, ItemOutcome::Written(present)),
            Verdict::Done { status: 201, .. }
        ));
        // A real conflict stays 409.
        let conflict = ItemOutcome::Failed {
            reason: reason(409, "version_conflict_engine_exception"),
            whole_request: false,
            error: None,
        };
        let Verdict::Done { status, body } = verdict(&it, conflict) else {
            panic!()
        };
        assert_eq!(status, 409);
        assert_eq!(body["error"]["type"], "version_conflict_engine_exception");
        let whole = ItemOutcome::Failed {
            reason: reason(401, "auth"),
            whole_request: true,
            error: None,
        };
        assert!(matches!(
            verdict(&it, whole),
            Verdict::Rejected { status: 401, .. }
        ));
        let later = ItemOutcome::Undeliverable {
            class: RetryClass::Throttled,
            reason: reason(429, "retries_exhausted"),
        };
        assert!(matches!(verdict(&it, later), Verdict::Retry(r) if r.starts_with("throttled")));
    }

    #[test]
    fn the_clusters_error_object_and_noop_pass_through() {
        let it = item("{\"update\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{}\n");
        let error = ItemError {
            kind: "mapper_parsing_exception".into(),
            reason: "failed".into(),
            details: vec![
                ("caused_by".into(), r#"{"type":"x","reason":"y"}"#.into()),
                ("shard".into(), r#""0""#.into()),
            ],
        };
        let failed = ItemOutcome::Failed {
            reason: reason(400, "mapper_parsing_exception"),
            whole_request: false,
            error: Some(Box::new(error)),
        };
        let Verdict::Done { status, body } = verdict(&it, failed) else {
            panic!()
        };
        assert_eq!(status, 400);
        assert_eq!(
            body["error"],
            json!({"type":"mapper_parsing_exception","reason":"failed",
                   "caused_by":{"type":"x","reason":"y"},"shard":"0"})
        );
        let noop = WrittenItem {
            status: 200,
            result: Written::Noop,
            version: Some(2),
            seq_no: Some(1),
            primary_term: Some(1),
            shards: Some(searchwire_bulk::Shards::default()),
            forced_refresh: Some(true),
            attempts: 1,
        };
        let Verdict::Done { body, .. } = verdict(&it, ItemOutcome::Written(noop)) else {
            panic!()
        };
        assert_eq!(
            Value::Object(body),
            json!({"_index":"a","_id":"1","_version":2,"result":"noop","_seq_no":1,
                   "_primary_term":1,"status":200,"forced_refresh":true,
                   "_shards":{"total":0,"successful":0,"failed":0}})
        );
    }

    #[test]
    fn encoded_keeps_the_lines_and_marks_relay_ids_unique() {
        let it = item(
            "{\"index\":{\"_index\":\"a\",\"version\":3,\"version_type\":\"external\"}}\n{}\n",
        );
        let a = encoded(&it).unwrap();
        assert_eq!(a.lines().as_ref(), it.encode().as_slice());
        assert_eq!(a.op(), OpType::Index);
    }
}
