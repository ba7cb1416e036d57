//! The fast path of the response parse: the exact bytes a cluster writes for the default
//! `filter_path` when every item succeeded.
//!
//! With [`FILTER_PATH`](crate::defaults::FILTER_PATH) a successful 100-item response is
//! `{"errors":false,"items":[{"create":{"result":"created","status":201}},...]}` — about
//! 45 bytes per item, four short strings and a number. Through `serde_json` each string costs
//! ~200 instructions (escape scan and UTF-8 check) before the typed visitor sees it, and an
//! item ~2,000 in all: a quarter of the indexer's per-document cost. This module reads that one
//! shape byte by byte, in ~10 % of the cost, and declines (`None`) at the first byte that is
//! anything else — an error object, a tracked item's extra fields, whitespace, an escape, a
//! number of another form, a duplicate field — so the caller parses the body with `serde_json`
//! as before, and every message about a malformed body still comes from there.
//!
//! The rule that keeps the two paths one parser: whatever this module accepts, `serde_json`
//! accepts too and reads into the same [`BulkResponse`]. The grammar below is a strict subset
//! of JSON (no whitespace inside, no escapes, ASCII-only keys and words, three-digit statuses);
//! `tests` checks the rule on mutations of valid bodies, and the `bulk_response` fuzz target
//! checks it on whatever the fuzzer finds.
//!
//! ```text
//! body   = '{"errors":' ('true' | 'false') ',"items":[' [item *(',' item)] ']}' *ws
//! item   = '{"' op '":{' field [',' field] '}}'      ; status present once, result at most once
//! field  = '"status":' [1-9] 2[0-9]  |  '"result":"' word '"'
//! op     = 1*[a-z]     word = 1*[a-z_]     ws = ' ' | '\t' | '\n' | '\r'
//! ```

use super::{BulkResponse, ItemResult};

/// Reads `body` if it has exactly the shape above, with the item vector sized for the
/// `expected` items (at most 100,000, as the general parse does); `None` otherwise.
pub(super) fn parse(body: &[u8], expected: usize) -> Option<BulkResponse> {
    let mut c = Cursor(body);
    c.eat(b"{\"errors\":")?;
    let errors = if c.eat(b"true").is_some() {
        true
    } else {
        c.eat(b"false")?;
        false
    };
    c.eat(b",\"items\":[")?;
    let mut items = Vec::with_capacity(expected.min(100_000));
    if c.eat(b"]").is_none() {
        loop {
            items.push(c.item()?);
            if c.eat(b",").is_none() {
                c.eat(b"]")?;
                break;
            }
        }
    }
    c.eat(b"}")?;
    c.0.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .then_some(BulkResponse { errors, items })
}

/// The unread rest of the body.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    /// Consumes `lit` if the rest starts with it.
    fn eat(&mut self, lit: &[u8]) -> Option<()> {
        self.0 = self.0.strip_prefix(lit)?;
        Some(())
    }

    /// Consumes one or more bytes matching `ok`; returns them.
    fn word(&mut self, ok: fn(u8) -> bool) -> Option<&'a [u8]> {
        let n = self.0.iter().position(|b| !ok(*b)).unwrap_or(self.0.len());
        if n == 0 {
            return None;
        }
        let (w, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(w)
    }

    /// `{"<op>":{"status":NNN,"result":"<word>"}}`, the two fields in either order and
    /// `result` optional.
    fn item(&mut self) -> Option<ItemResult> {
        self.eat(b"{\"")?;
        self.word(|b| b.is_ascii_lowercase())?;
        self.eat(b"\":{")?;
        let mut status = None;
        let mut result = None;
        loop {
            if self.eat(b"\"status\":").is_some() {
                if status.replace(self.status()?).is_some() {
                    return None;
                }
            } else {
                self.eat(b"\"result\":\"")?;
                let w = self.word(|b| b.is_ascii_lowercase() || b == b'_')?;
                self.eat(b"\"")?;
                // Only ASCII letters and `_`: valid UTF-8, nothing to unescape.
                let w = std::str::from_utf8(w).ok()?.to_owned();
                if result.replace(w).is_some() {
                    return None;
                }
            }
            if self.eat(b",").is_none() {
                break;
            }
        }
        self.eat(b"}}")?;
        Some(ItemResult {
            status: status?,
            result,
            ..ItemResult::default()
        })
    }

    /// Three digits, the first not `0` (an HTTP status; JSON allows no leading zero).
    fn status(&mut self) -> Option<u16> {
        match *self.0 {
            [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9', ..] => {
                self.0 = &self.0[3..];
                Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(body: &[u8]) -> Option<BulkResponse> {
        super::super::parse_general(body, 0).ok()
    }

    /// The rule of the module: an accepted body reads the same through `serde_json`.
    fn check(body: &[u8]) {
        if let Some(fast) = parse(body, 0) {
            assert_eq!(
                Some(fast),
                general(body),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn reads_what_a_cluster_sends_for_the_default_filter() {
        for body in [
            &br#"{"errors":false,"items":[{"create":{"result":"created","status":201}},{"index":{"status":200,"result":"updated"}}]}"#[..],
            br#"{"errors":false,"items":[{"delete":{"result":"not_found","status":404}}]}"#,
            br#"{"errors":true,"items":[{"update":{"status":200}}]}"#,
            br#"{"errors":false,"items":[]}"#,
            b"{\"errors\":false,\"items\":[]}\r\n \t",
        ] {
            let fast = parse(body, 0).expect("the compact shape");
            assert_eq!(Some(fast), general(body));
        }
        let r = parse(
            br#"{"errors":false,"items":[{"index":{"status":201,"result":"created"}}]}"#,
            1,
        )
        .unwrap();
        assert_eq!(r.items[0].status, 201);
        assert_eq!(r.items[0].result.as_deref(), Some("created"));
        assert_eq!(r.items.capacity(), 1);
    }

    #[test]
    fn declines_everything_else() {
        for body in [
            // An error item, a tracked item's fields, a `took`, whitespace, escapes.
            &br#"{"errors":true,"items":[{"index":{"status":429,"error":{"type":"x","reason":"y"}}}]}"#[..],
            br#"{"errors":false,"items":[{"index":{"status":201,"_seq_no":3}}]}"#,
            br#"{"took":1,"errors":false,"items":[]}"#,
            br#"{"errors": false,"items":[]}"#,
            br#"{"errors":false,"items":[{"index":{"result":"cre\u0061ted","status":201}}]}"#,
            // Numbers of another form, a missing or doubled field, an empty op.
            br#"{"errors":false,"items":[{"index":{"status":2010}}]}"#,
            br#"{"errors":false,"items":[{"index":{"status":20}}]}"#,
            br#"{"errors":false,"items":[{"index":{"status":020}}]}"#,
            br#"{"errors":false,"items":[{"index":{"result":"created"}}]}"#,
            br#"{"errors":false,"items":[{"index":{"status":201,"status":200}}]}"#,
            br#"{"errors":false,"items":[{"index":{"result":"a","result":"b","status":201}}]}"#,
            br#"{"errors":false,"items":[{"":{"status":201}}]}"#,
            br#"{"errors":false,"items":[{"index":{}}]}"#,
            // Broken or trailing bytes.
            br#"{"errors":false,"items":[{"index":{"status":201}},]}"#,
            br#"{"errors":false,"items":[{"index":{"status":201}}]} x"#,
            br#"{"errors":false,"items":[{"index":{"status":201}}"#,
            b"",
        ] {
            assert_eq!(parse(body, 0), None, "{:?}", String::from_utf8_lossy(body));
            check(body);
        }
    }

    /// Every one-byte change (replaced by each byte of interest, deleted, doubled) of two
    /// valid bodies: whatever the fast path accepts, `serde_json` reads the same.
    #[test]
    fn whatever_it_accepts_serde_json_reads_the_same() {
        let bodies = [
            &br#"{"errors":false,"items":[{"create":{"result":"created","status":201}},{"index":{"status":200,"result":"noop"}}]}"#[..],
            br#"{"errors":true,"items":[{"delete":{"status":404}}]} "#,
        ];
        let bytes = b" \t\n\"\\,:{}[]019azAZ_-.eE+\x00\x7f\xc3\xff";
        let mut accepted = 0;
        for body in bodies {
            for i in 0..body.len() {
                for b in bytes {
                    let mut m = body.to_vec();
                    m[i] = *b;
                    check(&m);
                    accepted += usize::from(parse(&m, 0).is_some());
                }
                let mut m = body.to_vec();
                m.remove(i);
                check(&m);
                let mut m = body.to_vec();
                m.insert(i, body[i]);
                check(&m);
            }
        }
        // The mutations reach accepted bodies too (other ops, words, statuses), not only
        // rejections.
        assert!(accepted > 100, "{accepted}");
    }
}
