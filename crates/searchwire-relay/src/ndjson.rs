//! The `_bulk` request body: NDJSON action/metadata lines, each (but `delete`) followed by a
//! source line — parsed, checked and re-encoded the way OpenSearch reads it.
//!
//! Every item leaves here with its `_index` and its `_id`: an item without an id gets a
//! UUIDv7 *before* it is tried or queued, so whatever happens next (a retry, a replay from
//! the queue after a crash) writes the same document, never a second one.

use bytes::Bytes;
use serde_json::{Map, Value};

/// A bulk operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `index`: create or overwrite.
    Index,
    /// `create`: create; 409 when the id exists.
    Create,
    /// `update`: partial update or script.
    Update,
    /// `delete`.
    Delete,
}

impl Op {
    /// The action name in the NDJSON and the response (`index`, `create`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Index => "index",
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        match s {
            "index" => Some(Op::Index),
            "create" => Some(Op::Create),
            "update" => Some(Op::Update),
            "delete" => Some(Op::Delete),
            _ => None,
        }
    }
}

/// Metadata keys the relay passes through. Anything else is refused with the line number,
/// as OpenSearch does ("contains an unknown parameter").
const KNOWN_PARAMS: &[&str] = &[
    "_index",
    "_id",
    "routing",
    "pipeline",
    "require_alias",
    "retry_on_conflict",
    "version",
    "version_type",
    "if_seq_no",
    "if_primary_term",
    "dynamic_templates",
    "_source",
];

/// One bulk item, complete: index and id filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// The operation.
    pub op: Op,
    /// The metadata object (`_index` and `_id` always present).
    pub meta: Map<String, Value>,
    /// The source line (none for `delete`).
    pub source: Option<Bytes>,
    /// 1-based line number of the action line in the request.
    pub line: usize,
    /// The relay assigned the id.
    pub id_assigned: bool,
}

impl Item {
    /// The target index.
    pub fn index(&self) -> &str {
        self.meta
            .get("_index")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The document id.
    pub fn id(&self) -> &str {
        self.meta.get("_id").and_then(Value::as_str).unwrap_or("")
    }

    /// The action line and the source line, each ending in `\n`: the form sent to the
    /// cluster and stored in the queue.
    pub fn encode(&self) -> Vec<u8> {
        let mut action = Map::new();
        action.insert(
            self.op.as_str().to_owned(),
            Value::Object(self.meta.clone()),
        );
        // A map of strings and JSON values always serializes.
        let mut out = serde_json::to_vec(&Value::Object(action)).unwrap_or_default();
        out.push(b'\n');
        if let Some(src) = &self.source {
            out.extend_from_slice(src);
            out.push(b'\n');
        }
        out
    }
}

/// Defaults from the URL: `/{index}/_bulk` and the `routing`/`pipeline` query parameters.
#[derive(Clone, Debug, Default)]
pub struct Defaults {
    /// `_index` for items without one.
    pub index: Option<String>,
    /// `routing` for items without one.
    pub routing: Option<String>,
    /// `pipeline` for items without one.
    pub pipeline: Option<String>,
}

/// Why a request body was refused as a whole (400, like OpenSearch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// OpenSearch's error type for it.
    pub kind: &'static str,
    /// The reason, naming the line.
    pub reason: String,
}

fn err(kind: &'static str, reason: String) -> ParseError {
    ParseError { kind, reason }
}

/// Parses a whole `_bulk` body. Blank lines are skipped (as OpenSearch does); line numbers
/// count every line, blank or not, from 1.
pub fn parse(body: &[u8], defaults: &Defaults) -> Result<Vec<Item>, ParseError> {
    let mut lines = body
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix(b"\r").unwrap_or(l)))
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace));
    let mut items = Vec::new();
    while let Some((n, line)) = lines.next() {
        let (op, mut meta) = action_line(n, line)?;
        fill_defaults(&mut meta, defaults);
        match meta.get("_index") {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::String(_)) | None => {
                return Err(err(
                    "action_request_validation_exception",
                    format!(
                        "Validation Failed: 1: index is missing (action/metadata line [{n}]: \
                         give \"_index\" or send to /{{index}}/_bulk);"
                    ),
                ))
            }
            Some(_) => {
                return Err(err(
                    "illegal_argument_exception",
                    format!("Malformed action/metadata line [{n}]: \"_index\" must be a string"),
                ))
            }
        }
        let mut id_assigned = false;
        match meta.get("_id") {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::Null) | None if matches!(op, Op::Index | Op::Create) => {
                meta.insert(
                    "_id".into(),
                    Value::String(uuid::Uuid::now_v7().to_string()),
                );
                id_assigned = true;
            }
            Some(Value::Number(num)) => {
                // OpenSearch accepts numeric ids and stores them as strings.
                let s = num.to_string();
                meta.insert("_id".into(), Value::String(s));
            }
            Some(Value::String(_)) | Some(Value::Null) | None => {
                return Err(err(
                    "action_request_validation_exception",
                    format!(
                        "Validation Failed: 1: id is missing (action/metadata line [{n}]: \
                         {} needs an \"_id\");",
                        op.as_str()
                    ),
                ))
            }
            Some(_) => {
                return Err(err(
                    "illegal_argument_exception",
                    format!("Malformed action/metadata line [{n}]: \"_id\" must be a string"),
                ))
            }
        }
        let source = if op == Op::Delete {
            None
        } else {
            let Some((sn, src)) = lines.next() else {
                return Err(err(
                    "illegal_argument_exception",
                    format!(
                        "action/metadata line [{n}] ({}) is not followed by a source line",
                        op.as_str()
                    ),
                ));
            };
            if serde_json::from_slice::<Map<String, Value>>(src).is_err() {
                return Err(err(
                    "illegal_argument_exception",
                    format!("Malformed source line [{sn}]: expected one JSON object"),
                ));
            }
            Some(Bytes::copy_from_slice(src))
        };
        items.push(Item {
            op,
            meta,
            source,
            line: n,
            id_assigned,
        });
    }
    if items.is_empty() {
        return Err(err(
            "action_request_validation_exception",
            "Validation Failed: 1: no requests added;".into(),
        ));
    }
    Ok(items)
}

fn action_line(n: usize, line: &[u8]) -> Result<(Op, Map<String, Value>), ParseError> {
    let obj: Map<String, Value> = serde_json::from_slice(line).map_err(|e| {
        err(
            "illegal_argument_exception",
            format!("Malformed action/metadata line [{n}], expected a JSON object: {e}"),
        )
    })?;
    if obj.len() != 1 {
        return Err(err(
            "illegal_argument_exception",
            format!(
                "Malformed action/metadata line [{n}], expected exactly one action, found {}",
                obj.len()
            ),
        ));
    }
    let Some((name, params)) = obj.into_iter().next() else {
        return Err(err(
            "illegal_argument_exception",
            format!("Malformed action/metadata line [{n}]"),
        ));
    };
    let Some(op) = Op::parse(&name) else {
        return Err(err(
            "illegal_argument_exception",
            format!(
                "Malformed action/metadata line [{n}], expected field [create], [delete], \
                 [index] or [update] but found [{name}]"
            ),
        ));
    };
    let Value::Object(meta) = params else {
        return Err(err(
            "illegal_argument_exception",
            format!("Malformed action/metadata line [{n}], expected START_OBJECT after [{name}]"),
        ));
    };
    if let Some(k) = meta.keys().find(|k| !KNOWN_PARAMS.contains(&k.as_str())) {
        return Err(err(
            "illegal_argument_exception",
            format!("Action/metadata line [{n}] contains an unknown parameter [{k}]"),
        ));
    }
    Ok((op, meta))
}

fn fill_defaults(meta: &mut Map<String, Value>, d: &Defaults) {
    for (key, value) in [
        ("_index", &d.index),
        ("routing", &d.routing),
        ("pipeline", &d.pipeline),
    ] {
        if let (Some(v), false) = (value, meta.contains_key(key)) {
            meta.insert(key.into(), Value::String(v.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(body: &str) -> Result<Vec<Item>, ParseError> {
        parse(body.as_bytes(), &Defaults::default())
    }

    #[test]
    fn items_get_index_from_path_and_ids_when_missing() {
        let d = Defaults {
            index: Some("logs".into()),
            ..Defaults::default()
        };
        let items = parse(
            b"{\"index\":{}}\n{\"a\":1}\n{\"create\":{\"_index\":\"x\",\"_id\":\"7\"}}\n{\"b\":2}\n{\"delete\":{\"_id\":\"3\"}}\n",
            &d,
        )
        .unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].index(), "logs");
        assert!(items[0].id_assigned);
        assert_eq!(items[0].id().len(), 36);
        assert_eq!((items[1].index(), items[1].id()), ("x", "7"));
        assert_eq!(items[2].op, Op::Delete);
        assert_eq!(items[2].line, 5);
        assert!(items[2].source.is_none());
    }

    #[test]
    fn encode_round_trips() {
        let items =
            p("{\"create\":{\"_index\":\"x\",\"_id\":\"1\",\"routing\":\"r\"}}\n{\"a\":1}\n")
                .unwrap();
        let again = parse(&items[0].encode(), &Defaults::default()).unwrap();
        assert_eq!(again[0].meta, items[0].meta);
        assert_eq!(again[0].source, items[0].source);
    }

    #[test]
    fn malformed_lines_are_named() {
        let e = p("{\"index\":{\"_index\":\"x\"}}\n{\"a\":1}\n\n{nope\n").unwrap_err();
        assert!(e.reason.contains("line [4]"), "{}", e.reason);
        let e = p("{\"index\":{\"_index\":\"x\"}}\n{\"a\":\n").unwrap_err();
        assert!(e.reason.contains("source line [2]"), "{}", e.reason);
        let e = p("{\"upsert\":{\"_index\":\"x\"}}\n").unwrap_err();
        assert!(e.reason.contains("[upsert]"), "{}", e.reason);
        let e = p("{\"index\":{\"_index\":\"x\",\"bogus\":1}}\n{}\n").unwrap_err();
        assert!(
            e.reason.contains("unknown parameter [bogus]"),
            "{}",
            e.reason
        );
        let e = p("{\"index\":{}}\n{}\n").unwrap_err();
        assert!(e.reason.contains("index is missing"), "{}", e.reason);
        let e = p("{\"delete\":{\"_index\":\"x\"}}\n").unwrap_err();
        assert!(e.reason.contains("id is missing"), "{}", e.reason);
        let e = p("{\"index\":{\"_index\":\"x\"}}\n").unwrap_err();
        assert!(
            e.reason.contains("not followed by a source line"),
            "{}",
            e.reason
        );
        assert!(p("\n\n").is_err());
    }
}
