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
    AddError, BulkIndexer, EncodedAction, ItemOutcome, ItemTicket, OpType, VersionType, Written,
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

/// Adds every item to `indexer` in order, waiting while it is full. An item the indexer
/// cannot take (it is closed: the relay is stopping) is to be queued.
pub async fn add_all(indexer: &BulkIndexer, items: &[&Item]) -> Vec<Pending> {
    let mut pending = Vec::with_capacity(items.len());
    for item in items {
        pending.push(match encoded(item) {
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
pub async fn submit(indexer: &BulkIndexer, items: &[&Item]) -> Vec<Verdict> {
    let pending = add_all(indexer, items).await;
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

/// What the relay does with `item` given its outcome.
///
/// A `create` the indexer counts as already present (answered 409 where the document can
/// only be this item's own earlier write: its id was assigned by the relay, or a request
/// carrying it failed ambiguously) is answered `201 "created"` — the document this item
/// carried is in the index under its id. A 409 on a client-given id at the first clean
/// attempt stays OpenSearch's 409 (see ARCHITECTURE.md, "The relay").
pub fn verdict(item: &Item, outcome: ItemOutcome) -> Verdict {
    match outcome {
        ItemOutcome::Written(w) => {
            let (status, result) = match w.result {
                Written::Created => (w.status, "created"),
                Written::Updated => (w.status, "updated"),
                Written::Deleted => (w.status, "deleted"),
                Written::NotFound => (w.status, "not_found"),
                Written::AlreadyPresent => (201, "created"),
            };
            let mut m = ids(item);
            if let Some(v) = w.version {
                m.insert("_version".into(), json!(v));
            }
            m.insert("result".into(), Value::String(result.into()));
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
        } => Verdict::Rejected {
            status: reason.status.unwrap_or(502),
            kind: reason.error_type,
            reason: reason.reason,
        },
        ItemOutcome::Failed { reason, .. } => {
            let status = reason.status.unwrap_or(500);
            Verdict::Done {
                status,
                body: error_body(item, status, &reason.error_type, &reason.reason),
            }
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
        };
        let Verdict::Done { status, body } = verdict(&it, conflict) else {
            panic!()
        };
        assert_eq!(status, 409);
        assert_eq!(body["error"]["type"], "version_conflict_engine_exception");
        let whole = ItemOutcome::Failed {
            reason: reason(401, "auth"),
            whole_request: true,
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
    fn encoded_keeps_the_lines_and_marks_relay_ids_unique() {
        let it = item(
            "{\"index\":{\"_index\":\"a\",\"version\":3,\"version_type\":\"external\"}}\n{}\n",
        );
        let a = encoded(&it).unwrap();
        assert_eq!(a.lines().as_ref(), it.encode().as_slice());
        assert_eq!(a.op(), OpType::Index);
    }
}
