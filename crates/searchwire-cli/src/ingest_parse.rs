//! The ingest input's parser: NDJSON lines (documents, or bulk action/source pairs) into
//! bulk actions. Self-contained (no `crate::` paths), so the fuzz target
//! `fuzz/fuzz_targets/ingest_ndjson.rs` compiles this very file.

use std::sync::Arc;

use bytes::Bytes;
use searchwire_bulk::{Action, OpType, VersionType};
use serde::Deserialize;

// The one-pass JSON scanner (a `#[path]` so the fuzz target, which compiles this file on its
// own, finds it too).
#[path = "ingest/scan.rs"]
mod scan;

/// How the input's lines are read (from the `ingest` flags).
pub(crate) struct ParseSpec {
    pub(crate) docs: bool,
    /// `--index`: shared by every action built from the input (a reference count per
    /// document, not a copy of the name).
    pub(crate) index: Option<Arc<str>>,
    pub(crate) op: OpType,
    pub(crate) id_field: Option<String>,
    /// `id_field` split on dots (empty without one).
    pub(crate) id_path: Vec<String>,
}

/// What one input line became.
pub(crate) enum Line {
    /// Blank (and no action line waits): nothing to index.
    Blank,
    /// A bulk action line, waiting for its source line.
    Pending,
    /// A record and the line it started on, or why the line is malformed.
    Record(Result<(Action, u64), String>),
}

/// Reads the input line by line: a document per line, or bulk action/source pairs (a
/// `delete` has no source line).
pub(crate) struct LineParser<'s> {
    spec: &'s ParseSpec,
    /// A bulk-format action line waiting for its source: (action, its line number).
    pending: Option<(PartialAction, u64)>,
}

impl<'s> LineParser<'s> {
    pub(crate) fn new(spec: &'s ParseSpec) -> LineParser<'s> {
        LineParser {
            spec,
            pending: None,
        }
    }

    /// Reads line number `line` (already trimmed with [`trim_line`]); a document's source is
    /// a slice of `text`, not a copy.
    pub(crate) fn feed(&mut self, text: &Bytes, line: u64) -> Line {
        let spec = self.spec;
        if text.is_empty() && self.pending.is_none() {
            return Line::Blank;
        }
        Line::Record(if spec.docs {
            parse_doc(text, spec).map(|a| (a, line))
        } else if let Some((pa, start)) = self.pending.take() {
            pa.with_source(text, spec).map(|a| (a, start))
        } else {
            match parse_action_line(text, spec) {
                Ok(pa) if pa.op == OpType::Delete => {
                    pa.with_source(&Bytes::new(), spec).map(|a| (a, line))
                }
                Ok(pa) => {
                    self.pending = Some((pa, line));
                    return Line::Pending;
                }
                Err(e) => Err(e),
            }
        })
    }

    /// At the end of the input: the line of an action line still waiting for its source.
    pub(crate) fn finish(self) -> Option<u64> {
        self.pending.map(|(_, start)| start)
    }
}

/// The line without its line end and surrounding blanks.
pub(crate) fn trim_line(buf: &[u8]) -> &[u8] {
    let mut end = buf.len();
    while end > 0 && matches!(buf[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    let start = buf[..end]
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(end);
    &buf[start..end]
}

pub(crate) fn parse_doc(text: &Bytes, spec: &ParseSpec) -> Result<Action, String> {
    let index = spec.index.clone().unwrap_or_else(|| Arc::from(""));
    let mut action = Action::with_op(spec.op, index);
    let id = scan::object(text, &spec.id_path).map_err(|e| format!("not a JSON document: {e}"))?;
    if let Some(path) = &spec.id_field {
        let id = id.ok_or_else(|| format!("no id field {}", searchwire::echo(path)))?;
        action = action.id(id);
    }
    Ok(action.source(text.clone()))
}

/// Validates that `text` is one JSON object without building a value.
fn check_object(text: &[u8]) -> Result<(), String> {
    scan::object(text, &[])
        .map(|_| ())
        .map_err(|e| format!("not a JSON document: {e}"))
}

#[derive(Deserialize)]
struct Meta {
    #[serde(rename = "_index")]
    index: Option<String>,
    #[serde(rename = "_id")]
    id: Option<serde_json::Value>,
    routing: Option<String>,
    pipeline: Option<String>,
    version: Option<u64>,
    version_type: Option<String>,
}

struct PartialAction {
    op: OpType,
    meta: Meta,
}

fn parse_action_line(text: &[u8], spec: &ParseSpec) -> Result<PartialAction, String> {
    let v: std::collections::BTreeMap<String, Meta> = serde_json::from_slice(text)
        .map_err(|e| format!("not a bulk action line ({{\"index\":{{...}}}}): {e}"))?;
    let mut it = v.into_iter();
    let (Some((op, meta)), None) = (it.next(), it.next()) else {
        return Err(
            "a bulk action line has exactly one key: index, create, update or delete".into(),
        );
    };
    let op = match op.as_str() {
        "index" => OpType::Index,
        "create" => OpType::Create,
        "update" => OpType::Update,
        "delete" => OpType::Delete,
        other => {
            return Err(format!(
                "unknown bulk action {}; use index, create, update or delete",
                searchwire::echo(other)
            ))
        }
    };
    if meta.index.is_none() && spec.index.is_none() {
        return Err("the action has no _index and no --index was given".into());
    }
    Ok(PartialAction { op, meta })
}

impl PartialAction {
    fn with_source(self, text: &Bytes, spec: &ParseSpec) -> Result<Action, String> {
        let m = self.meta;
        let index = match m.index {
            Some(own) => Arc::from(own),
            None => spec.index.clone().unwrap_or_else(|| Arc::from("")),
        };
        let mut a = Action::with_op(self.op, index);
        match m.id {
            Some(serde_json::Value::String(s)) => a = a.id(s),
            Some(serde_json::Value::Number(n)) => a = a.id(n.to_string()),
            Some(serde_json::Value::Null) | None => {}
            Some(other) => return Err(format!("_id must be a string, not {other}")),
        }
        if let Some(r) = m.routing {
            a = a.routing(r);
        }
        if let Some(p) = m.pipeline {
            a = a.pipeline(p);
        }
        if let Some(v) = m.version {
            let vt = match m.version_type.as_deref() {
                None | Some("internal") => VersionType::Internal,
                Some("external") => VersionType::External,
                Some("external_gte") => VersionType::ExternalGte,
                Some(other) => {
                    return Err(format!("unknown version_type {}", searchwire::echo(other)))
                }
            };
            a = a.version(v, vt);
        }
        if self.op != OpType::Delete {
            check_object(text).map_err(|e| format!("the source line: {e}"))?;
            a = a.source(text.clone());
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn id_of(doc: &str, path: &str) -> Result<Option<String>, String> {
        let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
        scan::object(doc.as_bytes(), &segments).map_err(|e| e.to_string())
    }

    #[test]
    fn ids_from_dotted_paths() {
        let doc = r#"{"a": [1, {"id": 7}], "user": {"id": 42, "name": "a"}, "s": "x", "f": 1.5, "b": true, "n": null, "e": ""}"#;
        assert_eq!(id_of(doc, "user.id").unwrap().as_deref(), Some("42"));
        assert_eq!(id_of(doc, "s").unwrap().as_deref(), Some("x"));
        assert_eq!(id_of(doc, "f").unwrap().as_deref(), Some("1.5"));
        assert_eq!(id_of(doc, "b").unwrap().as_deref(), Some("true"));
        assert_eq!(id_of(doc, "user").unwrap(), None);
        assert_eq!(id_of(doc, "a.id").unwrap(), None);
        assert_eq!(id_of(doc, "n").unwrap(), None);
        assert_eq!(id_of(doc, "e").unwrap(), None);
        assert_eq!(id_of(doc, "nope").unwrap(), None);
        assert_eq!(id_of(doc, "user.id.deeper").unwrap(), None);
        // The whole document is still validated, after the id too.
        assert!(id_of(r#"{"id": "1", "x": [}"#, "id").is_err());
        assert!(id_of(r#"{"id": "1"} trailing"#, "id").is_err());
    }

    /// The spec of `ingest --index INDEX` without `--id-field`.
    fn spec_of(docs: bool, index: &str, op: OpType) -> ParseSpec {
        ParseSpec {
            docs,
            index: Some(index.into()),
            op,
            id_field: None,
            id_path: Vec::new(),
        }
    }

    #[test]
    fn every_document_shares_the_index_name_of_the_flag() {
        let spec = spec_of(true, "logs", OpType::Create);
        let a = parse_doc(&Bytes::from_static(br#"{"a":1}"#), &spec).unwrap();
        let b = parse_doc(&Bytes::from_static(br#"{"a":2}"#), &spec).unwrap();
        assert_eq!(a.index_name(), "logs");
        // One allocation for the name, not one per document.
        assert_eq!(a.index_name().as_ptr(), b.index_name().as_ptr());
    }

    fn feed(p: &mut LineParser<'_>, line: &'static [u8], n: u64) -> Line {
        p.feed(&Bytes::from_static(line), n)
    }

    #[test]
    fn action_and_source_lines_pair_up_and_a_dangling_action_is_reported() {
        let spec = spec_of(false, "i", OpType::Index);
        let mut p = LineParser::new(&spec);
        assert!(matches!(feed(&mut p, b"", 1), Line::Blank));
        assert!(matches!(
            feed(&mut p, br#"{"index":{"_id":"1"}}"#, 2),
            Line::Pending
        ));
        assert!(matches!(
            feed(&mut p, br#"{"a":1}"#, 3),
            Line::Record(Ok((_, 2)))
        ));
        assert!(matches!(
            feed(&mut p, br#"{"delete":{"_id":"1"}}"#, 4),
            Line::Record(Ok((_, 4)))
        ));
        assert!(matches!(
            feed(&mut p, br#"{"nope":{}}"#, 5),
            Line::Record(Err(_))
        ));
        assert!(matches!(
            feed(&mut p, br#"{"create":{}}"#, 6),
            Line::Pending
        ));
        assert_eq!(p.finish(), Some(6));
    }
}
