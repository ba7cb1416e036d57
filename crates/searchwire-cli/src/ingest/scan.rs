//! A one-pass structural check of one input line: is it exactly one JSON object (RFC 8259
//! grammar, UTF-8), and what is the value at the `--id-field` path?
//!
//! `ingest` must refuse a malformed line itself (with its line number, into the dead
//! letters) instead of letting the server fail it, but it never needs the document's
//! values: the source bytes are sent as they are. serde_json (even into `IgnoredAny`)
//! decodes every string and number on the way; this scanner only walks the bytes: strings
//! are skipped up to the next quote or backslash, UTF-8 is checked once for the whole line,
//! numbers and literals are checked against the grammar, nesting with a depth counter. On
//! ~2 KB documents it costs about a third of the serde pass (docs/benchmarks.md).

use std::fmt;

/// Deepest nesting accepted (serde_json's default recursion limit).
const MAX_DEPTH: usize = 128;

/// Why a line is not one JSON object, and where (1-based byte column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScanError {
    what: &'static str,
    column: usize,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at column {}", self.what, self.column)
    }
}

/// Checks that `text` is exactly one JSON object. With `path` (the `--id-field` split on
/// dots), also returns the value found there, rendered as an id: a non-empty string as
/// is, an integer as written, another number as serde_json renders it, `true`/`false`;
/// `None` for no such field, `null`, an empty string, an object or an array. The first
/// occurrence of a duplicated key that gives an id wins.
pub(super) fn object(text: &[u8], path: &[String]) -> Result<Option<String>, ScanError> {
    let mut s = Scanner {
        b: text,
        pos: 0,
        path,
        found: None,
    };
    s.ws();
    if s.peek() != Some(b'{') {
        return Err(s.err("expected a JSON object"));
    }
    s.value(0, Some(0))?;
    s.ws();
    if s.pos != s.b.len() {
        return Err(s.err("trailing characters after the object"));
    }
    Ok(s.found)
}

struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    path: &'a [String],
    found: Option<String>,
}

impl<'a> Scanner<'a> {
    fn err(&self, what: &'static str) -> ScanError {
        ScanError {
            what,
            column: self.pos + 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: u8, what: &'static str) -> Result<(), ScanError> {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    /// One value at nesting `depth`. `matched`: `Some(k)` when the enclosing keys are the
    /// first `k` segments of the id path (so this value is the candidate at segment `k`).
    fn value(&mut self, depth: usize, matched: Option<usize>) -> Result<(), ScanError> {
        self.ws();
        let capture = matched == Some(self.path.len()) && !self.path.is_empty();
        match self.peek() {
            Some(b'{') => {
                if self.open(depth, b'}')? {
                    return Ok(());
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a quoted key"));
                    }
                    let (start, end, escaped) = self.string()?;
                    let child = match matched {
                        Some(k) if k < self.path.len() && self.key_is(start, end, escaped, k) => {
                            Some(k + 1)
                        }
                        _ => None,
                    };
                    self.expect(b':', "expected `:` after a key")?;
                    self.value(depth + 1, child)?;
                    if self.next_or_close(b'}', "expected `,` or `}` in an object")? {
                        return Ok(());
                    }
                }
            }
            Some(b'[') => {
                if self.open(depth, b']')? {
                    return Ok(());
                }
                loop {
                    self.value(depth + 1, None)?;
                    if self.next_or_close(b']', "expected `,` or `]` in an array")? {
                        return Ok(());
                    }
                }
            }
            Some(b'"') => {
                let (start, end, escaped) = self.string()?;
                if capture && self.found.is_none() && end > start {
                    self.found = Some(self.text(start, end, escaped));
                }
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => {
                let (start, integer) = (self.pos, self.number()?);
                if capture && self.found.is_none() {
                    self.found = Some(render_number(&self.b[start..self.pos], integer));
                }
                Ok(())
            }
            Some(b't') => self.literal(b"true", capture),
            Some(b'f') => self.literal(b"false", capture),
            Some(b'n') => self.literal(b"null", false),
            _ => Err(self.err("expected a JSON value")),
        }
    }

    /// Steps over an opening bracket; `true` if the container is empty (closed at once).
    fn open(&mut self, depth: usize, close: u8) -> Result<bool, ScanError> {
        if depth >= MAX_DEPTH {
            return Err(self.err("nesting deeper than 128 levels"));
        }
        self.pos += 1;
        self.ws();
        let empty = self.peek() == Some(close);
        if empty {
            self.pos += 1;
        }
        Ok(empty)
    }

    /// After an element: a comma (`false`, more follow) or the closing bracket (`true`).
    fn next_or_close(&mut self, close: u8, what: &'static str) -> Result<bool, ScanError> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(self.err(what)),
        }
    }

    fn literal(&mut self, word: &'static [u8], capture: bool) -> Result<(), ScanError> {
        if self.b[self.pos..].starts_with(word) {
            self.pos += word.len();
            if capture && self.found.is_none() {
                // Only `true`/`false` capture; both are ASCII.
                self.found = Some(String::from_utf8_lossy(word).into_owned());
            }
            Ok(())
        } else {
            Err(self.err("expected a JSON value"))
        }
    }

    /// A string starting at the opening quote: its content range and whether it holds an
    /// escape. Control characters are refused; a string with a non-ASCII byte is checked to
    /// be UTF-8 (outside strings the grammar admits ASCII only, so that covers the line).
    fn string(&mut self) -> Result<(usize, usize, bool), ScanError> {
        self.pos += 1;
        let start = self.pos;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            let Some(i) = special(&self.b[self.pos..]) else {
                self.pos = self.b.len();
                return Err(self.err("unterminated string"));
            };
            self.pos += i;
            match self.b[self.pos] {
                b'"' => {
                    let end = self.pos;
                    if non_ascii {
                        if let Err(e) = std::str::from_utf8(&self.b[start..end]) {
                            self.pos = start + e.valid_up_to();
                            return Err(self.err("invalid UTF-8"));
                        }
                    }
                    self.pos += 1;
                    return Ok((start, end, escaped));
                }
                0x80.. => {
                    non_ascii = true;
                    self.pos += 1;
                }
                b'\\' => {
                    escaped = true;
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1;
                        }
                        Some(b'u') => {
                            let hex = self.b.get(self.pos + 1..self.pos + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err(self.err("invalid \\u escape"));
                            }
                            self.pos += 5;
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                _ => return Err(self.err("control character in a string")),
            }
        }
    }

    /// A number per the JSON grammar; `true` if it is an integer (no fraction, no exponent).
    fn number(&mut self) -> Result<bool, ScanError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("invalid number")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number"));
            }
            self.digits();
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number"));
            }
            self.digits();
            integer = false;
        }
        Ok(integer)
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    /// The string content `start..end`, unescaped when it holds an escape.
    fn text(&self, start: usize, end: usize, escaped: bool) -> String {
        let raw = &self.b[start..end];
        if !escaped {
            return String::from_utf8_lossy(raw).into_owned();
        }
        // Rare: let serde_json undo the escapes of this one (already checked) string.
        serde_json::from_slice::<String>(&self.b[start - 1..=end])
            .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
    }

    fn key_is(&self, start: usize, end: usize, escaped: bool, segment: usize) -> bool {
        let want = self.path[segment].as_bytes();
        if escaped {
            self.text(start, end, true).as_bytes() == want
        } else {
            &self.b[start..end] == want
        }
    }
}

/// The index of the first byte in `s` that ends or interrupts a string's plain ASCII run: a
/// quote, a backslash, a control character or a non-ASCII byte. This is what makes skipping
/// long string values cheap: 32 bytes at a time ([`block_special`]), then eight at a time
/// ([`swar_special_mask`]), then byte by byte.
fn special(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    // A fixed-size array: no bounds check per byte, so `block_special` vectorizes.
    while let Some(block) = s
        .get(i..i + BLOCK)
        .and_then(|b| <&[u8; BLOCK]>::try_from(b).ok())
    {
        if let Some(at) = block_special(block) {
            return Some(i + at);
        }
        i += BLOCK;
    }
    while let Some(block) = s.get(i..i + 8) {
        let marks = swar_special_mask(block);
        if marks != 0 {
            return Some(i + (marks.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    s[i..].iter().position(|&c| is_special(c)).map(|p| i + p)
}

/// Bytes [`block_special`] looks at at once.
const BLOCK: usize = 32;

/// The first special byte of a block. Written so that the
/// compiler turns it into vector compares (on x86_64 SSE2, part of its baseline: two
/// 16-byte loads, three compares and two ORs each, one test — about 0.8 instructions per
/// byte instead of 2.3 for the eight-byte word trick) without `std::arch`, whose intrinsics
/// need `unsafe`, which the workspace forbids; other targets get their own vector unit
/// or plain code. Each lane becomes `0xff` when its byte is special, and the lowest
/// marked lane is the answer.
fn block_special(block: &[u8; BLOCK]) -> Option<usize> {
    let marks: [u8; BLOCK] = std::array::from_fn(|k| {
        let c = block[k];
        // As a signed byte, 0x80..=0xff is negative: one compare marks control
        // characters and non-ASCII bytes.
        if (c == b'"') | (c == b'\\') | ((c as i8) < 0x20) {
            0xff
        } else {
            0
        }
    });
    let half = |at: usize| {
        let mut h = [0u8; 16];
        h.copy_from_slice(&marks[at..at + 16]);
        u128::from_le_bytes(h)
    };
    let (lo, hi) = (half(0), half(16));
    if lo | hi == 0 {
        None
    } else if lo != 0 {
        Some((lo.trailing_zeros() / 8) as usize)
    } else {
        Some(16 + (hi.trailing_zeros() / 8) as usize)
    }
}

fn is_special(c: u8) -> bool {
    c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c)
}

/// Eight bytes (`block.len() >= 8`) at once: the high bit of each special byte's lane is
/// set (the usual bit trick: `x - 0x01… & !x & 0x80…` marks zero bytes; the lowest mark is
/// exact, later ones may be false — only the lowest is used).
fn swar_special_mask(block: &[u8]) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut w = [0u8; 8];
    w.copy_from_slice(&block[..8]);
    let w = u64::from_le_bytes(w);
    let q = w ^ (ONES * u64::from(b'"'));
    let b = w ^ (ONES * u64::from(b'\\'));
    let marks = (q.wrapping_sub(ONES) & !q)
        | (b.wrapping_sub(ONES) & !b)
        | (w.wrapping_sub(ONES * 0x20) & !w);
    (marks | w) & HIGH
}

/// An id from a number, as serde_json's visitor rendered it: an integer that fits 64 bits
/// as written, anything else through `f64`.
fn render_number(raw: &[u8], integer: bool) -> String {
    let text = String::from_utf8_lossy(raw);
    if integer && (text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok()) {
        return text.into_owned();
    }
    match text.parse::<f64>() {
        Ok(v) => serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string()),
        Err(_) => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> bool {
        object(s.as_bytes(), &[]).is_ok()
    }

    #[test]
    fn accepts_exactly_what_serde_json_accepts_as_an_object() {
        let cases = [
            "{}",
            " { } ",
            r#"{"a":1}"#,
            r#"{"a":[1,2.5,-3e+4,0,-0.0,1E-2,true,false,null,"x",{"b":[]}]}"#,
            r#"{"s":"esc \" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00"}"#,
            "{\"ü\":\"日本\"}",
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":1e}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"{"a":1}}"#,
            r#"{"a":1} x"#,
            r#"{"a":[1,]}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":"open}"#,
            r#"{"a":1"#,
            "[1]",
            "\"x\"",
            "",
            "{\"a\":NaN}",
            "{\"a\":+1}",
            "{\"a\":[[[]]]}",
        ];
        for c in cases {
            let serde =
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(c).is_ok();
            assert_eq!(ok(c), serde, "{c:?}");
        }
        for bad in [
            &b"{\"a\":\"\xff\"}"[..],
            b"{\"\xc3\":1}",
            b"{\"a\":\"\xc3\"}",
            b"{\"a\":1\xc3}",
        ] {
            assert!(object(bad, &[]).is_err(), "invalid UTF-8 {bad:?}");
        }
        assert!(object("{\"é\":\"日本😀\"}".as_bytes(), &[]).is_ok());
        let deep = format!("{}{}", "{\"a\":".repeat(200), "}".repeat(200));
        assert!(object(deep.as_bytes(), &[]).is_err());
    }

    /// serde_json's verdict on `text` as one JSON object (bytes, so invalid UTF-8 counts).
    fn serde_ok(text: &[u8]) -> bool {
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(text).is_ok()
    }

    #[test]
    fn long_strings_agree_with_serde_json_at_every_offset_of_a_block() {
        // Something that ends or interrupts a plain run, valid or not, at every offset of a
        // 16-byte block (and of the 8-byte blocks and the tail after it), in a key and in a
        // value, with a long plain run after it so the block search runs again.
        let inserts: [&[u8]; 16] = [
            b"\\\"",
            b"\\\\",
            b"\\n",
            b"\\/",
            b"\\u00e9",
            b"\\uD83D\\uDE00",
            "é".as_bytes(),
            "日本".as_bytes(),
            "😀".as_bytes(),
            b"\x7f",
            b"\\x",
            b"\\u12g4",
            b"\t",
            b"\x00",
            b"\xc3(",
            b"\xff",
        ];
        for offset in 0..48 {
            for (k, insert) in inserts.iter().enumerate() {
                let mut run = vec![b'a'; offset];
                run.extend_from_slice(insert);
                run.extend_from_slice(&[b'z'; 40]);
                for doc in [
                    [&b"{\"k\":\""[..], &run, b"\",\"n\":1}"].concat(),
                    [&b"{\""[..], &run, b"\":true}"].concat(),
                ] {
                    // The first ten inserts are valid JSON string content, the rest not.
                    assert_eq!(serde_ok(&doc), k < 10, "{k}");
                    assert_eq!(
                        object(&doc, &[]).is_ok(),
                        serde_ok(&doc),
                        "{:?}",
                        String::from_utf8_lossy(&doc)
                    );
                }
            }
            // A string that never ends, cut at every offset.
            let open = [&b"{\"k\":\""[..], &vec![b'a'; offset]].concat();
            assert!(object(&open, &[]).is_err() && !serde_ok(&open));
        }
    }

    #[test]
    fn the_eight_byte_search_marks_the_first_special_byte_exactly() {
        for at in 0..8 {
            for special_byte in [b'"', b'\\', 0x00, 0x1f, b'\n', 0x80, 0xff] {
                let mut s = [b'a'; 8];
                s[at] = special_byte;
                if at + 1 < 8 {
                    s[at + 1] = b'"';
                }
                let marks = swar_special_mask(&s);
                assert_eq!((marks.trailing_zeros() / 8) as usize, at);
            }
        }
        assert_eq!(
            swar_special_mask(&[0x20, 0x7f, b'a', b'~', b'!', b'#', b'[', b']']),
            0
        );
    }

    #[test]
    fn the_block_search_finds_the_first_special_byte() {
        // Every position in one and two 32-byte blocks, the 8-byte words and the tail.
        for len in 0..80 {
            for at in 0..len {
                for special_byte in [b'"', b'\\', 0x00, 0x1f, b'\n', 0x80, 0xff] {
                    let mut s = vec![b'a'; len];
                    // Bytes that must not match: just around the control range.
                    if at > 0 {
                        s[at - 1] = 0x20;
                    }
                    if at > 1 {
                        s[at - 2] = 0x7f;
                    }
                    s[at] = special_byte;
                    if at + 1 < len {
                        s[at + 1] = b'"';
                    }
                    assert_eq!(special(&s), Some(at), "len {len} at {at} {special_byte:#x}");
                }
            }
            assert_eq!(special(&vec![b'z'; len]), None);
        }
    }

    #[test]
    fn errors_say_what_and_where() {
        let e = object(br#"{"a" 1}"#, &[]).unwrap_err();
        assert_eq!(e.to_string(), "expected `:` after a key at column 6");
        let e = object(br#"{"a":1} x"#, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "trailing characters after the object at column 9"
        );
    }

    #[test]
    fn finds_the_id_at_a_dotted_path() {
        let id = |doc: &str, path: &str| {
            let segs: Vec<String> = path.split('.').map(str::to_owned).collect();
            object(doc.as_bytes(), &segs).unwrap()
        };
        assert_eq!(id(r#"{"id":"a1","x":2}"#, "id").as_deref(), Some("a1"));
        assert_eq!(id(r#"{"x":{"id":7}}"#, "x.id").as_deref(), Some("7"));
        assert_eq!(id(r#"{"x":{"id":-7}}"#, "x.id").as_deref(), Some("-7"));
        assert_eq!(id(r#"{"id":1.5}"#, "id").as_deref(), Some("1.5"));
        assert_eq!(id(r#"{"id":1e3}"#, "id").as_deref(), Some("1000.0"));
        assert_eq!(id(r#"{"id":true}"#, "id").as_deref(), Some("true"));
        assert_eq!(id(r#"{"id":"a\"b"}"#, "id").as_deref(), Some("a\"b"));
        assert_eq!(
            id(r#"{"i\u0064":"esc-key"}"#, "id").as_deref(),
            Some("esc-key")
        );
        assert_eq!(
            id(r#"{"id":null,"id":"second"}"#, "id").as_deref(),
            Some("second")
        );
        assert_eq!(
            id(r#"{"id":"first","id":"second"}"#, "id").as_deref(),
            Some("first")
        );
        assert_eq!(id(r#"{"id":""}"#, "id"), None);
        assert_eq!(id(r#"{"id":{"a":1}}"#, "id"), None);
        assert_eq!(id(r#"{"id":[1]}"#, "id"), None);
        assert_eq!(id(r#"{"x":[{"id":1}]}"#, "x.id"), None);
        assert_eq!(id(r#"{"y":{"id":1}}"#, "x.id"), None);
        assert_eq!(
            id(r#"{"a":{"x":{"id":1}}}"#, "x.id"),
            None,
            "anchored at the root"
        );
        assert!(
            object(br#"{"id":"a1",}"#, &["id".to_owned()]).is_err(),
            "still validated"
        );
    }
}
