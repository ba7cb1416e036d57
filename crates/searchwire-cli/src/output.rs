//! What the CLI writes: response bodies and envelopes on stdout, `--trace-attempts` lines and
//! error messages on stderr. Writes never panic (a closed pipe is not a crash), and each
//! logical record is one `write_all` on a locked handle, so records from concurrent
//! requests never interleave within a line.

use std::io::Write;
use std::time::Duration;

use searchwire::{Attempt, Error, Response};
use serde::Serialize;

/// Writes `bytes` to stdout; errors (e.g. a closed pipe) are ignored.
pub fn stdout(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

/// Writes `text` to stderr in one write; errors are ignored.
pub fn stderr(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `searchwire: <message>` on stderr, made safe for a terminal: error messages quote
/// server-supplied text (reasons, headers), so control characters are escaped and the
/// message is cut at [`MAX_MESSAGE_CHARS`].
pub fn error_message(message: impl std::fmt::Display) {
    let text = message.to_string();
    stderr(&format!(
        "searchwire: {}\n",
        terminal_safe(&text, MAX_MESSAGE_CHARS)
    ));
}

/// Longest error message printed, in characters: enough for every attempt of a long retry
/// chain, short enough that a hostile 100 MB reason cannot flood a terminal or a log.
pub const MAX_MESSAGE_CHARS: usize = 16 * 1024;

/// `text` with every control character escaped (`\u{1b}` for ESC, and so on; C0, DEL and
/// the C1 range, which terminals interpret too) and cut after `max_chars` characters with a
/// note of how many were left out. Text a server chose must never move the cursor, change
/// colours or set a window title in the user's terminal.
pub fn terminal_safe(text: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    let needs_escape = |c: char| c.is_control() && c != '\n';
    let total = text.chars().count();
    if total <= max_chars && !text.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max_chars * 2));
    for c in text.chars().take(max_chars) {
        if needs_escape(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    if total > max_chars {
        out.push_str(&format!("… ({} more characters)", total - max_chars));
    }
    std::borrow::Cow::Owned(out)
}

/// A duration in milliseconds as a float with 3 decimals (microsecond resolution).
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// Serializes to one line of JSON. Our own output types cannot fail to serialize (no maps
/// with non-string keys, no non-finite floats reach them), but never panic regardless.
pub fn to_json_line<T: Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"error\":\"cannot serialize output: {e}\"}}"));
    s.push('\n');
    s
}

/// The body as received, plus a trailing newline if it lacks one (nothing for an empty body).
pub fn body_bytes(resp: &Response) -> Vec<u8> {
    let mut out = resp.body().to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out
}

/// Writes the `--json` envelope of a response to stdout: `{"status","node","attempts",
/// "body"}`, plus `"error"` (the error kind) only when the response was a failure. See
/// [`write_envelope`].
pub fn envelope(resp: &Response, attempts: usize, error: Option<&Error>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    // A closed pipe is not a crash (see [`stdout`]).
    let _ = write_envelope(&mut out, resp, attempts, error).and_then(|()| out.flush());
}

/// The `--json` envelope of a response, written as one line without building it in
/// memory: a body that is JSON is embedded as it came, once checked to be valid, with
/// only the whitespace between its tokens dropped (so the envelope stays one line); any
/// other body as a JSON string. No tree of the body is built, so a large answer costs
/// only its own bytes (a tree of a JSON array takes about 18 times its size), and the
/// node's key order and number spellings are kept exactly.
pub fn write_envelope<W: Write>(
    out: &mut W,
    resp: &Response,
    attempts: usize,
    error: Option<&Error>,
) -> std::io::Result<()> {
    write!(out, "{{\"status\":{},\"node\":", resp.status().as_u16())?;
    serde_json::to_writer(&mut *out, resp.node())?;
    write!(out, ",\"attempts\":{attempts},\"body\":")?;
    let body = resp.body();
    // Validated without allocating: `IgnoredAny` skips every value (and refuses what is
    // nested deeper than serde_json's recursion limit, as a tree would).
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
        write_compact_json(out, body)?;
    } else {
        serde_json::to_writer(&mut *out, &*String::from_utf8_lossy(body))?;
    }
    if let Some(e) = error {
        write!(out, ",\"error\":")?;
        serde_json::to_writer(&mut *out, e.kind().as_str())?;
    }
    out.write_all(b"}\n")
}

/// Writes valid JSON `text` without the whitespace between its tokens. Only outside a
/// string is whitespace insignificant; inside one, `\"` does not end it.
fn write_compact_json<W: Write>(out: &mut W, text: &[u8]) -> std::io::Result<()> {
    let mut in_string = false;
    let mut escaped = false;
    let mut run = 0;
    for (i, &b) in text.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.write_all(&text[run..i])?;
            run = i + 1;
        }
    }
    out.write_all(&text[run..])
}

#[derive(Serialize)]
struct TraceLine<'a> {
    request: u64,
    attempt: u32,
    node: &'a str,
    outcome: String,
    status: Option<u16>,
    elapsed_ms: f64,
    backoff_ms: f64,
}

/// The `--trace-attempts` lines of one request (1-based `request`), as one string.
pub fn trace_lines(request: u64, attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|a| {
            to_json_line(&TraceLine {
                request,
                attempt: a.number,
                node: &a.node,
                outcome: a.outcome_label(),
                status: a.status.map(|s| s.as_u16()),
                elapsed_ms: ms(a.elapsed),
                backoff_ms: ms(a.backoff),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_safe_escapes_control_characters() {
        assert_eq!(terminal_safe("plain text", 100), "plain text");
        assert_eq!(
            terminal_safe("a\u{1b}]0;pwned\u{7}b\r\u{9b}2J", 100),
            "a\\u{1b}]0;pwned\\u{7}b\\u{d}\\u{9b}2J"
        );
        // Newlines separate the lines of a multi-line message; they stay.
        assert_eq!(terminal_safe("one\ntwo", 100), "one\ntwo");
    }

    #[test]
    fn terminal_safe_cuts_long_text_and_says_so() {
        let long = "x".repeat(100_000);
        let safe = terminal_safe(&long, 10);
        assert_eq!(safe, "xxxxxxxxxx… (99990 more characters)");
    }

    fn compact(text: &str) -> String {
        let mut out = Vec::new();
        write_compact_json(&mut out, text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(out).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn compact_json_drops_whitespace_between_tokens_only() {
        assert_eq!(
            compact("{ \"a b\" : [ 1 ,\n\t2.50e1 ] ,\r\n \"c\\\" d\" : \"\\\\\" }"),
            "{\"a b\":[1,2.50e1],\"c\\\" d\":\"\\\\\"}"
        );
        assert_eq!(compact("  7  "), "7");
        assert_eq!(compact("\"\""), "\"\"");
    }

    #[test]
    fn milliseconds_have_three_decimals() {
        assert_eq!(ms(Duration::from_micros(1_234_567)), 1234.567);
        assert_eq!(ms(Duration::from_nanos(1_600)), 0.002);
        assert_eq!(ms(Duration::ZERO), 0.0);
    }
}
