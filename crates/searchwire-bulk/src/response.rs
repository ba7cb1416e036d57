//! Reading a bulk response with a memory bound.
//!
//! The request asks for `filter_path` ([`defaults::FILTER_PATH`](crate::defaults::FILTER_PATH)),
//! so the server sends per item only its status, result, and error type and reason. The
//! body is then deserialized straight into one small [`ItemResult`] per item: unknown
//! fields are skipped without building a `serde_json::Value`, and the operation key of each
//! item (`index`, `create`, ...) is read and thrown away. Items are matched to actions by
//! position (the bulk API answers in request order).
//!
//! The common body — every item succeeded, in the compact form a cluster writes for the
//! default filter — is read first by [`compact`], a byte-by-byte reader of that one shape
//! that declines anything else; `serde_json` reads every other body and reports every
//! malformed one.

mod compact;

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// One item of a bulk response: what the indexer reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ItemResult {
    /// The item's HTTP status.
    pub status: u16,
    /// `created`, `updated`, `deleted`, `noop`, `not_found` (absent on errors).
    #[serde(default)]
    pub result: Option<String>,
    /// The error, when the item failed.
    #[serde(default)]
    pub error: Option<ItemError>,
    /// `_version`, when the server sent it (requested only for tracked items).
    #[serde(rename = "_version", default)]
    pub version: Option<i64>,
    /// `_seq_no`, when the server sent it (requested only for tracked items).
    #[serde(rename = "_seq_no", default)]
    pub seq_no: Option<i64>,
    /// `_primary_term`, when the server sent it (requested only for tracked items).
    #[serde(rename = "_primary_term", default)]
    pub primary_term: Option<i64>,
    /// `_shards`, when the server sent it (requested only for tracked items).
    #[serde(rename = "_shards", default)]
    pub shards: Option<Shards>,
    /// `forced_refresh`, when the server sent it (a request with `refresh=true`, or a
    /// `wait_for` that forced one; requested only for tracked items).
    #[serde(default)]
    pub forced_refresh: Option<bool>,
}

/// An item's `_shards`: how many copies the write went to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Shards {
    /// Copies the write should reach.
    #[serde(default)]
    pub total: u32,
    /// Copies it reached.
    #[serde(default)]
    pub successful: u32,
    /// Copies that failed it.
    #[serde(default)]
    pub failed: u32,
}

/// The most bytes of an error's other fields ([`ItemError::details`]) kept per item: a
/// `caused_by` chain is a few hundred bytes; past this bound the rest is dropped (type and
/// reason are always kept).
pub const MAX_ERROR_DETAIL_BYTES: usize = 4096;

/// An item's error: its type, reason, and the other fields the server sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ItemError {
    /// e.g. `mapper_parsing_exception`, `rejected_execution_exception`.
    pub kind: String,
    /// The server's explanation.
    pub reason: String,
    /// The error's other fields in the order the server sent them, each value as raw JSON
    /// (`caused_by`, `index`, `shard`, `index_uuid`, ...): empty unless the request's
    /// `filter_path` asked for them (tracked items), at most [`MAX_ERROR_DETAIL_BYTES`].
    pub details: Vec<(String, Box<str>)>,
}

impl<'de> Deserialize<'de> for ItemError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ItemError, D::Error> {
        struct ErrV;
        impl<'de> Visitor<'de> for ErrV {
            type Value = ItemError;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a bulk item error {\"type\": ..., \"reason\": ...}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ItemError, A::Error> {
                let mut e = ItemError::default();
                let mut kept = 0usize;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "type" => e.kind = map.next_value()?,
                        "reason" => {
                            e.reason = map.next_value::<Option<String>>()?.unwrap_or_default()
                        }
                        _ => {
                            let raw: Box<RawValue> = map.next_value()?;
                            kept += key.len() + raw.get().len();
                            if kept <= MAX_ERROR_DETAIL_BYTES {
                                e.details.push((key, raw.into()));
                            }
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(ErrV)
    }
}

/// The parsed response: one result per item, in request order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BulkResponse {
    /// `errors`: whether any item failed.
    pub errors: bool,
    /// The items.
    pub items: Vec<ItemResult>,
}

impl BulkResponse {
    /// Parses a (possibly `filter_path`-reduced) bulk response body.
    pub fn parse(body: &[u8]) -> Result<BulkResponse, String> {
        BulkResponse::parse_expecting(body, 0)
    }

    /// [`parse`](Self::parse), with the item vector sized for the `expected` items the
    /// request carried (at most 100,000): JSON gives no length, and a vector grown by
    /// doubling was reallocated ~6 times per 100-item response.
    ///
    /// A body in the compact form a cluster writes for the default `filter_path` when every
    /// item succeeded is read by [`compact`] (~10 % of the cost); any other body, including
    /// every malformed one, by `serde_json`.
    pub(crate) fn parse_expecting(body: &[u8], expected: usize) -> Result<BulkResponse, String> {
        match compact::parse(body, expected) {
            Some(r) => Ok(r),
            None => parse_general(body, expected),
        }
    }
}

/// Fuzzing hook (`fuzz/fuzz_targets/bulk_response.rs`), not part of the API: the body read
/// by the compact fast path (`None` when it declines) and by the general `serde_json` parse.
/// Whenever the first is `Some`, the second must be `Ok` and equal to it.
#[doc(hidden)]
pub fn __parse_both_ways(body: &[u8]) -> (Option<BulkResponse>, Result<BulkResponse, String>) {
    (compact::parse(body, 0), parse_general(body, 0))
}

/// Any bulk response, through `serde_json` and the typed visitors below.
fn parse_general(body: &[u8], expected: usize) -> Result<BulkResponse, String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    RawSeed(expected)
        .deserialize(&mut de)
        .and_then(|r| de.end().map(|()| r))
        .map_err(|e| format!("the bulk response is not the expected JSON: {e}"))
}

/// The response object (`errors`, `items`; everything else skipped), with the expected
/// number of items as the capacity of the item vector.
struct RawSeed(usize);

impl<'de> DeserializeSeed<'de> for RawSeed {
    type Value = BulkResponse;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<BulkResponse, D::Error> {
        struct RawV(usize);
        impl<'de> Visitor<'de> for RawV {
            type Value = BulkResponse;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a bulk response {\"errors\": ..., \"items\": [...]}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BulkResponse, A::Error> {
                let mut r = BulkResponse::default();
                while let Some(key) = map.next_key::<Field>()? {
                    match key {
                        Field::Errors => r.errors = map.next_value()?,
                        Field::Items => r.items = map.next_value_seed(ItemsSeed(self.0))?,
                        Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(RawV(self.0))
    }
}

/// The keys of the response object that are read.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Errors,
    Items,
    #[serde(other)]
    Other,
}

/// The `items` array, into a vector of the given capacity.
struct ItemsSeed(usize);

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = Vec<ItemResult>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<ItemResult>, D::Error> {
        struct SeqV(usize);
        impl<'de> Visitor<'de> for SeqV {
            type Value = Vec<ItemResult>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of bulk items")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<ItemResult>, A::Error> {
                let cap = seq.size_hint().unwrap_or(self.0).min(100_000);
                let mut v = Vec::with_capacity(cap);
                while let Some(Entry(item)) = seq.next_element::<Entry>()? {
                    v.push(item);
                }
                Ok(v)
            }
        }
        d.deserialize_seq(SeqV(self.0))
    }
}

/// `{"<op>": {item}}`: the single key is skipped.
struct Entry(ItemResult);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry, D::Error> {
        struct MapV;
        impl<'de> Visitor<'de> for MapV {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a bulk item {\"<op>\": {...}}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut found = None;
                while map.next_key::<IgnoredAny>()?.is_some() {
                    let item = map.next_value::<ItemResult>()?;
                    found.get_or_insert(item);
                }
                found
                    .map(Entry)
                    .ok_or_else(|| de::Error::custom("empty bulk item"))
            }
        }
        d.deserialize_map(MapV)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_and_filtered_responses() {
        let full = br#"{"took":3,"errors":true,"items":[
            {"create":{"_index":"i","_id":"1","_version":1,"result":"created","_shards":{"total":2,"successful":1,"failed":0},"_seq_no":0,"_primary_term":1,"status":201}},
            {"index":{"_index":"i","_id":"2","status":429,"error":{"type":"rejected_execution_exception","reason":"rejected execution of coordinating operation","caused_by":{"type":"x","reason":"y"}}}},
            {"delete":{"_index":"i","_id":"3","result":"not_found","status":404}}
        ]}"#;
        let r = BulkResponse::parse(full).unwrap();
        assert!(r.errors);
        assert_eq!(r.items.len(), 3);
        assert_eq!(r.items[0].status, 201);
        assert_eq!(r.items[0].result.as_deref(), Some("created"));
        assert_eq!(
            r.items[1].error.as_ref().unwrap().kind,
            "rejected_execution_exception"
        );
        assert_eq!(r.items[2].result.as_deref(), Some("not_found"));

        let filtered = br#"{"errors":false,"items":[{"index":{"result":"created","status":201}}]}"#;
        let r = BulkResponse::parse(filtered).unwrap();
        assert!(!r.errors);
        assert_eq!(r.items[0].status, 201);
    }

    /// The memory bound, measured: a 10,000-item response as OpenSearch 2.19 writes it, and
    /// as `filter_path` reduces it. The numbers are in `docs/bulk.md`.
    #[test]
    fn filter_path_shrinks_a_ten_thousand_item_response() {
        let n = 10_000;
        let full_item = |i: usize| {
            format!(
                r#"{{"create":{{"_index":"logs-2026.11.30","_id":"0193a1b2-7c4d-7e8f-9a0b-{i:012}","_version":1,"result":"created","_shards":{{"total":2,"successful":2,"failed":0}},"_seq_no":{i},"_primary_term":1,"status":201}}}}"#
            )
        };
        let filtered_item = r#"{"create":{"result":"created","status":201}}"#;
        let body = |items: Vec<String>, took: bool| {
            let head = if took {
                r#"{"took":30,"errors":false,"items":["#
            } else {
                r#"{"errors":false,"items":["#
            };
            format!("{head}{}]}}", items.join(","))
        };
        let full = body((0..n).map(full_item).collect(), true);
        let filtered = body(vec![filtered_item.to_string(); n], false);
        let parsed = BulkResponse::parse(full.as_bytes()).unwrap();
        assert_eq!(parsed.items.len(), n);
        // The default filter leaves out the version fields and `_shards` (only tracked items
        // ask for them).
        let mut without_versions = BulkResponse::parse(full.as_bytes()).unwrap();
        for it in &mut without_versions.items {
            (it.version, it.seq_no, it.primary_term) = (None, None, None);
            it.shards = None;
        }
        assert_eq!(
            BulkResponse::parse(filtered.as_bytes()).unwrap(),
            without_versions
        );
        assert_eq!(parsed.items[7].seq_no, Some(7));
        let per_item = std::mem::size_of::<ItemResult>();
        eprintln!(
            "10,000 items: full {} bytes, filter_path {} bytes; parsed {} bytes ({per_item} per item + the result string)",
            full.len(),
            filtered.len(),
            n * per_item
        );
        assert!(filtered.len() * 4 < full.len());
    }

    #[test]
    fn the_item_vector_is_sized_for_the_expected_items() {
        let item = r#"{"create":{"result":"created","status":201}}"#;
        let body = format!(
            r#"{{"took":1,"errors":false,"items":[{}]}}"#,
            vec![item; 100].join(",")
        );
        let r = BulkResponse::parse_expecting(body.as_bytes(), 100).unwrap();
        assert_eq!(r.items.len(), 100);
        // Allocated once at the expected size, not grown by doubling (which ends at 128).
        assert_eq!(r.items.capacity(), 100);
        assert_eq!(r, BulkResponse::parse(body.as_bytes()).unwrap());
        // The hint is capped: a wrong count in the caller cannot allocate without bound.
        let r = BulkResponse::parse_expecting(body.as_bytes(), usize::MAX).unwrap();
        assert_eq!(r.items.capacity(), 100_000);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(BulkResponse::parse(b"<html>").is_err());
        assert!(BulkResponse::parse(br#"{"items":[{}]}"#).is_err());
        assert!(BulkResponse::parse(br#"{"items":[{"index":{"status":"x"}}]}"#).is_err());
        assert!(BulkResponse::parse(br#"{"errors":false,"items":[]} x"#).is_err());
        assert!(BulkResponse::parse(br#"{"items":null}"#).is_err());
        assert!(BulkResponse::parse(br#"{"errors":false}"#)
            .unwrap()
            .items
            .is_empty());
    }
}
