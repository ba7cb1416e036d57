//! What happened to one item, decided once: success (and which result), a retry of some
//! class, or a final failure. The indexer reads only this.

use crate::action::{OpType, VersionType};
use crate::response::ItemResult;

/// A retryable failure class, each with its own rule in the reference 004 §3.3 table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryClass {
    /// 429 or `rejected_execution_exception` / `es_rejected_execution_exception`: the
    /// cluster's write queue is full. Nothing was written.
    Throttled,
    /// 503 / `unavailable_shards_exception` and other 5xx: the shard could not take the write now.
    Unavailable,
    /// The whole request failed without an answer: reset, timeout, no node reachable.
    Connection,
}

impl RetryClass {
    /// `throttled`, `unavailable` or `connection` (metrics, logs, statistics).
    pub fn as_str(self) -> &'static str {
        match self {
            RetryClass::Throttled => "throttled",
            RetryClass::Unavailable => "unavailable",
            RetryClass::Connection => "connection",
        }
    }

    /// All classes, in table order.
    pub const ALL: [RetryClass; 3] = [
        RetryClass::Throttled,
        RetryClass::Unavailable,
        RetryClass::Connection,
    ];

    pub(crate) fn index(self) -> usize {
        match self {
            RetryClass::Throttled => 0,
            RetryClass::Unavailable => 1,
            RetryClass::Connection => 2,
        }
    }
}

/// The result of a successful item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// `created`.
    Created,
    /// `updated`.
    Updated,
    /// `noop`: an `update` that changed nothing (the document already held it).
    Noop,
    /// `deleted`.
    Deleted,
    /// A delete of a document that did not exist (`not_found`): the goal state holds.
    NotFound,
    /// A `create` (or externally versioned write) answered 409 where the conflict means
    /// our own earlier write landed: after an ambiguous failure, for an id the indexer
    /// assigned, or when the caller said conflicts mean "already present".
    AlreadyPresent,
}

/// One item's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Acknowledged.
    Ok(Written),
    /// Worth another try, by class.
    Retry(RetryClass),
    /// Failed for good (mapping error, missing index, conflict, ...).
    Fail,
}

/// What the classifier needs to know about an item besides the server's answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ItemContext {
    pub op: OpType,
    pub version_type: Option<VersionType>,
    /// An earlier request carrying this item failed ambiguously (it may have been applied).
    pub ambiguous: bool,
    /// The indexer assigned the id (so only the indexer can have written a document with it).
    pub id_assigned: bool,
    /// The caller declared that a 409 on create means "already present" (re-runs, resumes).
    pub conflict_is_present: bool,
}

/// Classifies one item of a bulk response.
pub(crate) fn item(ctx: ItemContext, item: &ItemResult) -> Verdict {
    let status = item.status;
    let etype = item.error.as_ref().map_or("", |e| e.kind.as_str());
    if (200..300).contains(&status) {
        return Verdict::Ok(match item.result.as_deref() {
            Some("created") => Written::Created,
            Some("deleted") => Written::Deleted,
            Some("not_found") => Written::NotFound,
            Some("noop") => Written::Noop,
            Some(_) => Written::Updated,
            None if status == 201 => Written::Created,
            None if ctx.op == OpType::Delete => Written::Deleted,
            None => Written::Updated,
        });
    }
    if status == 429 || etype.ends_with("rejected_execution_exception") {
        return Verdict::Retry(RetryClass::Throttled);
    }
    if status >= 500 || etype == "unavailable_shards_exception" {
        return Verdict::Retry(RetryClass::Unavailable);
    }
    if status == 404 && ctx.op == OpType::Delete && item.error.is_none() {
        return Verdict::Ok(Written::NotFound);
    }
    if status == 409 {
        let idempotent_op = ctx.op == OpType::Create
            || matches!(
                ctx.version_type,
                Some(VersionType::External | VersionType::ExternalGte)
            );
        if idempotent_op && (ctx.ambiguous || ctx.id_assigned || ctx.conflict_is_present) {
            return Verdict::Ok(Written::AlreadyPresent);
        }
    }
    Verdict::Fail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::ItemError;

    fn ctx(op: OpType) -> ItemContext {
        ItemContext {
            op,
            version_type: None,
            ambiguous: false,
            id_assigned: false,
            conflict_is_present: false,
        }
    }

    fn answer(status: u16, result: Option<&str>, etype: Option<&str>) -> ItemResult {
        ItemResult {
            status,
            result: result.map(String::from),
            error: etype.map(|t| ItemError {
                kind: t.into(),
                reason: "r".into(),
                ..ItemError::default()
            }),
            ..ItemResult::default()
        }
    }

    #[test]
    fn classes() {
        let c = ctx(OpType::Index);
        assert_eq!(
            item(c, &answer(201, Some("created"), None)),
            Verdict::Ok(Written::Created)
        );
        assert_eq!(
            item(c, &answer(200, Some("updated"), None)),
            Verdict::Ok(Written::Updated)
        );
        assert_eq!(
            item(ctx(OpType::Update), &answer(200, Some("noop"), None)),
            Verdict::Ok(Written::Noop)
        );
        assert_eq!(
            item(
                c,
                &answer(429, None, Some("es_rejected_execution_exception"))
            ),
            Verdict::Retry(RetryClass::Throttled)
        );
        // OpenSearch reports some rejections with a 500 wrapper but the rejected type.
        assert_eq!(
            item(c, &answer(500, None, Some("rejected_execution_exception"))),
            Verdict::Retry(RetryClass::Throttled)
        );
        assert_eq!(
            item(c, &answer(503, None, Some("unavailable_shards_exception"))),
            Verdict::Retry(RetryClass::Unavailable)
        );
        assert_eq!(
            item(c, &answer(400, None, Some("mapper_parsing_exception"))),
            Verdict::Fail
        );
        assert_eq!(
            item(c, &answer(404, None, Some("index_not_found_exception"))),
            Verdict::Fail
        );
        let d = ctx(OpType::Delete);
        assert_eq!(
            item(d, &answer(404, Some("not_found"), None)),
            Verdict::Ok(Written::NotFound)
        );
    }

    #[test]
    fn a_create_conflict_is_present_only_when_it_can_be_our_own_write() {
        let conflict = answer(409, None, Some("version_conflict_engine_exception"));
        let mut c = ctx(OpType::Create);
        assert_eq!(item(c, &conflict), Verdict::Fail);
        c.ambiguous = true;
        assert_eq!(item(c, &conflict), Verdict::Ok(Written::AlreadyPresent));
        let mut c = ctx(OpType::Create);
        c.id_assigned = true;
        assert_eq!(item(c, &conflict), Verdict::Ok(Written::AlreadyPresent));
        let mut c = ctx(OpType::Create);
        c.conflict_is_present = true;
        assert_eq!(item(c, &conflict), Verdict::Ok(Written::AlreadyPresent));
        // A plain index never conflicts on its own; an update conflict is a real failure.
        let mut i = ctx(OpType::Index);
        i.ambiguous = true;
        assert_eq!(item(i, &conflict), Verdict::Fail);
        i.version_type = Some(VersionType::External);
        assert_eq!(item(i, &conflict), Verdict::Ok(Written::AlreadyPresent));
    }
}
