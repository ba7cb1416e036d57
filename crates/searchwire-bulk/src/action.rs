//! What a caller adds: one bulk action (index, create, update or delete), and how ids are
//! assigned to actions that have none.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The bulk operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    /// Write the document, replacing any document with the same id.
    Index,
    /// Write the document only if no document with its id exists (409 otherwise). With ids,
    /// a duplicate is impossible by construction: this is the exactly-once operation.
    Create,
    /// Partial update (`source` is the update body, e.g. `{"doc": {...}}`); needs an id.
    Update,
    /// Delete by id; no source.
    Delete,
}

impl OpType {
    /// `index`, `create`, `update` or `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            OpType::Index => "index",
            OpType::Create => "create",
            OpType::Update => "update",
            OpType::Delete => "delete",
        }
    }
}

/// How the server checks an action's `version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionType {
    /// The server's own version counter.
    Internal,
    /// Written only if `version` is greater than the stored one (409 otherwise): a retry
    /// of an already-applied write is refused, so it is idempotent.
    External,
    /// Written if `version` is greater than or equal to the stored one.
    ExternalGte,
}

impl VersionType {
    /// `internal`, `external` or `external_gte`.
    pub fn as_str(self) -> &'static str {
        match self {
            VersionType::Internal => "internal",
            VersionType::External => "external",
            VersionType::ExternalGte => "external_gte",
        }
    }
}

/// How the indexer names documents that were added without an id (before their first send,
/// so every retry of the document carries the same id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdScheme {
    /// A UUIDv7 (time-ordered, 36 characters): unique per `add`, so adding the same
    /// document twice writes it twice.
    #[default]
    UuidV7,
    /// The SHA-256 of the source bytes, in lower-case hex (64 characters): the same
    /// content gets the same id, so adding it twice (or re-running an import) writes it once.
    ContentHash,
}

impl IdScheme {
    pub(crate) fn assign(self, source: &[u8]) -> String {
        match self {
            IdScheme::UuidV7 => uuid::Uuid::now_v7().to_string(),
            IdScheme::ContentHash => content_hash(source),
        }
    }
}

/// The lower-case hex SHA-256 of `bytes`: the id [`IdScheme::ContentHash`] assigns.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// One bulk action. Build it with [`Action::index`], [`Action::create`],
/// [`Action::update`] or [`Action::delete`] and the setters; mistakes (an update without an
/// id, a source that is not JSON) are reported by `add`, before anything is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Action {
    pub(crate) op: OpType,
    pub(crate) index: Arc<str>,
    pub(crate) id: Option<String>,
    pub(crate) routing: Option<String>,
    pub(crate) pipeline: Option<String>,
    pub(crate) version: Option<(u64, VersionType)>,
    pub(crate) source: Option<Bytes>,
    pub(crate) error: Option<String>,
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Action")
            .field("op", &self.op)
            .field("index", &self.index)
            .field("id", &self.id)
            .field("routing", &self.routing)
            .field("pipeline", &self.pipeline)
            .field("version", &self.version)
            .field("source_len", &self.source.as_ref().map(Bytes::len))
            .finish()
    }
}

impl Action {
    fn new(op: OpType, index: impl Into<Arc<str>>) -> Action {
        Action {
            op,
            index: index.into(),
            id: None,
            routing: None,
            pipeline: None,
            version: None,
            source: None,
            error: None,
        }
    }

    /// An `index` action into `index` (needs a source).
    ///
    /// The index name is kept as an `Arc<str>`: a `&str` or a `String` is copied into one
    /// allocation per action, while an `Arc<str>` the caller holds for many actions is
    /// shared (`Action::index(name.clone())`, a reference count), which saves an allocation
    /// and a free per action (~120 instructions, docs/benchmarks.md).
    pub fn index(index: impl Into<Arc<str>>) -> Action {
        Action::new(OpType::Index, index)
    }

    /// A `create` action into `index` (needs a source). See [`Action::index`] for sharing
    /// the index name between actions.
    pub fn create(index: impl Into<Arc<str>>) -> Action {
        Action::new(OpType::Create, index)
    }

    /// An `update` of document `id` in `index` (needs a source: the update body).
    pub fn update(index: impl Into<Arc<str>>, id: impl Into<String>) -> Action {
        Action::new(OpType::Update, index).id(id)
    }

    /// A `delete` of document `id` in `index`.
    pub fn delete(index: impl Into<Arc<str>>, id: impl Into<String>) -> Action {
        Action::new(OpType::Delete, index).id(id)
    }

    /// An action of any type.
    pub fn with_op(op: OpType, index: impl Into<Arc<str>>) -> Action {
        Action::new(op, index)
    }

    /// The document id. Without one, the indexer assigns one (see [`IdScheme`]).
    pub fn id(mut self, id: impl Into<String>) -> Action {
        self.id = Some(id.into());
        self
    }

    /// Shard routing value.
    pub fn routing(mut self, routing: impl Into<String>) -> Action {
        self.routing = Some(routing.into());
        self
    }

    /// Ingest pipeline.
    pub fn pipeline(mut self, pipeline: impl Into<String>) -> Action {
        self.pipeline = Some(pipeline.into());
        self
    }

    /// Version and version type (`External` makes a retried write idempotent too).
    pub fn version(mut self, version: u64, version_type: VersionType) -> Action {
        self.version = Some((version, version_type));
        self
    }

    /// The source as JSON bytes (one JSON object). A source containing line breaks is
    /// re-encoded on one line; a source that is not JSON is refused by `add`.
    pub fn source(mut self, json: impl Into<Bytes>) -> Action {
        self.source = Some(json.into());
        self
    }

    /// The source as any serializable value.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Action {
        match serde_json::to_vec(value) {
            Ok(v) => self.source = Some(Bytes::from(v)),
            Err(e) => {
                self.error
                    .get_or_insert_with(|| format!("source is not serializable as JSON: {e}"));
            }
        }
        self
    }

    /// The operation.
    pub fn op(&self) -> OpType {
        self.op
    }

    /// The index name.
    pub fn index_name(&self) -> &str {
        &self.index
    }

    /// The id (after `add`, the assigned one).
    pub fn doc_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The routing value.
    pub fn routing_value(&self) -> Option<&str> {
        self.routing.as_deref()
    }

    /// The pipeline.
    pub fn pipeline_name(&self) -> Option<&str> {
        self.pipeline.as_deref()
    }

    /// The version and its type.
    pub fn version_value(&self) -> Option<(u64, VersionType)> {
        self.version
    }

    /// The source bytes.
    pub fn source_bytes(&self) -> Option<&Bytes> {
        self.source.as_ref()
    }

    /// Checks the action, assigns an id if it has none, puts the source on one line, and
    /// returns its NDJSON action line; the source line is the action's source as it is (see
    /// [`Action::source_line`]), not a copy.
    pub(crate) fn prepare(&mut self, ids: IdScheme) -> Result<(Bytes, bool), String> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.index.is_empty() {
            return Err("the action has no index name".into());
        }
        match (self.op, &self.source) {
            (OpType::Delete, Some(_)) => {
                return Err("a delete action takes no source".into());
            }
            (OpType::Index | OpType::Create | OpType::Update, None) => {
                return Err(format!("an {} action needs a source", self.op.as_str()));
            }
            _ => {}
        }
        if let Some(src) = &self.source {
            if memchr::memchr2(b'\n', b'\r', src).is_some() {
                let v: serde_json::Value = serde_json::from_slice(src)
                    .map_err(|e| format!("the source is not valid JSON: {e}"))?;
                let one_line = serde_json::to_vec(&v)
                    .map_err(|e| format!("the source cannot be re-encoded: {e}"))?;
                self.source = Some(Bytes::from(one_line));
            } else if src.first().is_none_or(|b| *b != b'{') {
                let trimmed = src.iter().position(|b| !b.is_ascii_whitespace());
                if trimmed.is_none_or(|i| src[i] != b'{') {
                    return Err("the source must be a JSON object".into());
                }
            }
        }
        let mut assigned = false;
        if self.id.is_none() {
            if matches!(self.op, OpType::Update | OpType::Delete) {
                return Err(format!("an {} action needs an id", self.op.as_str()));
            }
            let src = self.source.as_deref().unwrap_or_default();
            self.id = Some(ids.assign(src));
            assigned = true;
        }
        Ok((self.encode(), assigned))
    }

    /// The source line without its `\n` (`None` for a delete): after `prepare`, the
    /// request body carries these bytes as they are, after the action line.
    pub(crate) fn source_line(&self) -> Option<&Bytes> {
        self.source.as_ref()
    }

    /// The action line. The source is not copied here: the request body is the only copy
    /// of it the indexer makes (from the caller's `Bytes`). The action line is written by
    /// hand: field names are constants and only the strings need JSON escaping, which
    /// `serde_json` does only for a string that needs it.
    fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(b"{\"");
        out.extend_from_slice(self.op.as_str().as_bytes());
        out.extend_from_slice(b"\":{\"_index\":");
        json_str(&mut out, &self.index);
        for (name, value) in self.strings() {
            if let Some(v) = value {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
                json_str(&mut out, v);
            }
        }
        if let Some((version, version_type)) = self.version {
            out.extend_from_slice(b",\"version\":");
            out.extend_from_slice(version.to_string().as_bytes());
            out.extend_from_slice(b",\"version_type\":\"");
            out.extend_from_slice(version_type.as_str().as_bytes());
            out.push(b'"');
        }
        out.extend_from_slice(b"}}\n");
        // A `Vec` filled to its capacity becomes `Bytes` without a second allocation (for
        // the shared reference count): the capacity is exact unless a string needed
        // escaping.
        Bytes::from(out)
    }

    /// The action line's optional string fields, by name.
    fn strings(&self) -> [(&'static str, Option<&str>); 3] {
        [
            ("_id", self.id.as_deref()),
            ("routing", self.routing.as_deref()),
            ("pipeline", self.pipeline.as_deref()),
        ]
    }

    /// The length of the action line when no string needs escaping (then it is exact), a
    /// lower bound otherwise.
    fn encoded_len(&self) -> usize {
        // `{"` op `":{"_index":` `"` index `"` ... `}}\n`
        let mut n = 2 + self.op.as_str().len() + 12 + 1 + self.index.len() + 1 + 3;
        for (name, value) in self.strings() {
            if let Some(v) = value {
                // `,"` name `":"` value `"`
                n += 2 + name.len() + 3 + v.len() + 1;
            }
        }
        if let Some((version, version_type)) = self.version {
            // `,"version":` digits `,"version_type":"` type `"`
            n += 11 + decimal_digits(version) + 17 + version_type.as_str().len() + 1;
        }
        n
    }
}

/// How many decimal digits `n` has.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Appends `s` as a JSON string: as it is between quotes when nothing in it needs escaping
/// (the usual index names and ids), else through `serde_json`.
fn json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a `&str` into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the request body carries for `a`: the action line, then the source line.
    fn lines_of(a: &mut Action) -> (Vec<u8>, bool) {
        let (head, assigned) = a.prepare(IdScheme::UuidV7).unwrap();
        let mut lines = head.to_vec();
        if let Some(src) = a.source_line() {
            lines.extend_from_slice(src);
            lines.push(b'\n');
        }
        (lines, assigned)
    }

    #[test]
    fn the_action_line_is_allocated_at_its_exact_length() {
        let actions = [
            Action::create("logs").id("a1"),
            Action::index("i").id("x").routing("r").pipeline("p"),
            Action::index("i").id("x").version(0, VersionType::External),
            Action::index("i").id("x").version(9, VersionType::Internal),
            Action::index("i")
                .id("x")
                .version(10, VersionType::ExternalGte),
            Action::delete("i", "x").version(u64::MAX, VersionType::External),
            Action::update("some-index", "0123456789"),
        ];
        for a in actions {
            assert_eq!(a.encoded_len(), a.encode().len(), "{a:?}");
        }
        // Escaping makes the line longer than the estimate, never wrong.
        let a = Action::create("logs").id("a\"1");
        assert!(a.encoded_len() < a.encode().len());
        assert_eq!(
            &a.encode()[..],
            b"{\"create\":{\"_index\":\"logs\",\"_id\":\"a\\\"1\"}}\n"
        );
    }

    #[test]
    fn an_index_name_held_by_the_caller_is_shared_not_copied() {
        let name: Arc<str> = Arc::from("logs");
        let a = Action::create(name.clone());
        let b = Action::index(name.clone()).id("1");
        assert!(Arc::ptr_eq(&a.index, &name) && Arc::ptr_eq(&b.index, &name));
        assert_eq!(Arc::strong_count(&name), 3);
        // A `&str` or a `String` still works (copied once).
        assert_eq!(Action::delete("logs", "1").index_name(), "logs");
        assert_eq!(
            Action::update(String::from("logs"), "1").index_name(),
            "logs"
        );
    }

    #[test]
    fn encodes_action_and_source_lines() {
        let mut a = Action::create("logs")
            .id("a\"1")
            .routing("r")
            .pipeline("p")
            .version(7, VersionType::External)
            .source(&b"{\"x\":1}"[..]);
        let (lines, assigned) = lines_of(&mut a);
        assert!(!assigned);
        assert_eq!(
            std::str::from_utf8(&lines).unwrap(),
            "{\"create\":{\"_index\":\"logs\",\"_id\":\"a\\\"1\",\"routing\":\"r\",\"pipeline\":\"p\",\"version\":7,\"version_type\":\"external\"}}\n{\"x\":1}\n"
        );
        let mut d = Action::delete("logs", "9");
        let (lines, _) = lines_of(&mut d);
        assert_eq!(
            &lines[..],
            b"{\"delete\":{\"_index\":\"logs\",\"_id\":\"9\"}}\n"
        );
    }

    #[test]
    fn the_action_line_is_json_whatever_the_strings_hold() {
        for id in [
            "plain",
            "q\"uote",
            "back\\slash",
            "nl\nx",
            "tab\t",
            "\u{1}",
            "é😀",
            "",
        ] {
            let mut a = Action::index(format!("ix{id}"))
                .id(id)
                .routing(id)
                .pipeline(id)
                .source(&b"{}"[..]);
            let (lines, _) = a.prepare(IdScheme::UuidV7).unwrap();
            let first = lines.split(|b| *b == b'\n').next().unwrap();
            let v: serde_json::Value = serde_json::from_slice(first).unwrap();
            assert_eq!(v["index"]["_id"], id);
            assert_eq!(v["index"]["_index"], format!("ix{id}"));
            assert_eq!(v["index"]["routing"], id);
            assert_eq!(v["index"]["pipeline"], id);
        }
    }

    #[test]
    fn assigns_ids_before_the_first_send() {
        let mut a = Action::index("i").json(&serde_json::json!({"a": 1}));
        let (_, assigned) = a.prepare(IdScheme::UuidV7).unwrap();
        assert!(assigned);
        let id = a.doc_id().unwrap();
        assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 7);

        let mut h = Action::index("i").source(&b"{\"a\":1}"[..]);
        h.prepare(IdScheme::ContentHash).unwrap();
        // sha256('{"a":1}')
        assert_eq!(
            h.doc_id().unwrap(),
            "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
        );
    }

    #[test]
    fn multi_line_sources_are_put_on_one_line_and_bad_ones_refused() {
        let mut a = Action::index("i").id("1").source("{\n  \"a\": 1\n}");
        let (lines, _) = lines_of(&mut a);
        assert!(lines.ends_with(b"\n{\"a\":1}\n"));
        let mut bad = Action::index("i").source("{\n nope");
        assert!(bad
            .prepare(IdScheme::UuidV7)
            .unwrap_err()
            .contains("not valid JSON"));
        let mut arr = Action::index("i").source("[1]");
        assert!(arr
            .prepare(IdScheme::UuidV7)
            .unwrap_err()
            .contains("JSON object"));
        let mut up = Action::with_op(OpType::Update, "i").source("{}");
        assert!(up
            .prepare(IdScheme::UuidV7)
            .unwrap_err()
            .contains("needs an id"));
        let mut nosrc = Action::create("i");
        assert!(nosrc
            .prepare(IdScheme::UuidV7)
            .unwrap_err()
            .contains("needs a source"));
        let mut delsrc = Action::delete("i", "1").source("{}");
        assert!(delsrc.prepare(IdScheme::UuidV7).is_err());
    }
}
