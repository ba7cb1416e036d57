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

/// `searchwire: <message>` on stderr.
pub fn error_message(message: impl std::fmt::Display) {
    stderr(&format!("searchwire: {message}\n"));
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

#[derive(Serialize)]
struct Envelope<'a> {
    status: u16,
    node: &'a str,
    attempts: usize,
    body: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
}

/// The `--json` envelope of a response: the body parsed as JSON, or as a string when it is
/// not JSON. `error` (the error kind) is present only when the response was a failure.
pub fn envelope(resp: &Response, attempts: usize, error: Option<&Error>) -> String {
    let body = serde_json::from_slice(resp.body())
        .unwrap_or_else(|_| serde_json::Value::String(resp.text()));
    to_json_line(&Envelope {
        status: resp.status().as_u16(),
        node: resp.node(),
        attempts,
        body,
        error: error.map(|e| e.kind().as_str()),
    })
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
    fn milliseconds_have_three_decimals() {
        assert_eq!(ms(Duration::from_micros(1_234_567)), 1234.567);
        assert_eq!(ms(Duration::from_nanos(1_600)), 0.002);
        assert_eq!(ms(Duration::ZERO), 0.0);
    }
}
