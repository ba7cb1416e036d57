//! A deliberately small HTTP/1.1 server codec.
//!
//! It is hand-written rather than borrowed from hyper because the fake has to misbehave at the
//! byte level: stop half-way through a body, reset a socket after reading a request, never
//! answer. It understands exactly what a client library sends: a request line, headers, and a
//! body framed by `content-length` or `transfer-encoding: chunked`, with
//! `expect: 100-continue` honoured. Anything it does not understand is [`ReadError::Malformed`],
//! which the caller answers with `400` before closing; it never panics on input.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest chunk-size or trailer line accepted in a chunked body.
const MAX_LINE: usize = 8 * 1024;
/// Largest request body accepted: generous for bulk benchmarks, small enough that a garbage
/// `content-length` cannot make the fake allocate without bound.
const MAX_BODY: usize = 256 * 1024 * 1024;

/// A parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    /// Header names lowercased, in arrival order.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Bytes,
    /// The client asked (explicitly, or by speaking HTTP/1.0) to close after the response.
    pub(crate) close: bool,
}

impl Request {
    pub(crate) fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }
}

/// Why no request could be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer went away (EOF or I/O error) in the middle of a request.
    Closed,
    /// The bytes are not an HTTP/1.x request we accept; answer `400` and close.
    Malformed(String),
}

fn malformed(why: impl Into<String>) -> ReadError {
    ReadError::Malformed(why.into())
}

/// Reads one request from `io`, using and refilling `buf` (which carries pipelined bytes from
/// one request to the next). `Ok(None)` is a clean EOF between requests.
pub(crate) async fn read_request<S>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<Option<Request>, ReadError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head_len = loop {
        // RFC 9112 §2.2: ignore empty lines received before the request line.
        while buf.starts_with(b"\r\n") {
            let _ = buf.split_to(2);
        }
        if let Some(pos) = find(buf, b"\r\n\r\n") {
            break pos + 4;
        }
        check_partial_request_line(buf)?;
        if buf.len() > MAX_HEAD {
            return Err(malformed("request head too large"));
        }
        let n = io.read_buf(buf).await.map_err(|_| ReadError::Closed)?;
        if n == 0 {
            return if buf.iter().all(|b| *b == b'\r' || *b == b'\n') {
                Ok(None)
            } else {
                Err(ReadError::Closed)
            };
        }
    };
    let head = buf.split_to(head_len);
    let mut parsed = parse_head(&head[..head_len - 4])?;

    let framing = body_framing(&parsed.headers)?;
    let wants_continue = parsed
        .headers
        .iter()
        .any(|(k, v)| k == "expect" && v.eq_ignore_ascii_case("100-continue"));
    let has_body = !matches!(framing, Framing::Length(0));
    if wants_continue && has_body && buf.is_empty() {
        io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(|_| ReadError::Closed)?;
    }

    parsed.body = match framing {
        Framing::Length(len) => {
            fill(io, buf, len).await?;
            buf.split_to(len).freeze()
        }
        Framing::Chunked => read_chunked(io, buf).await?,
    };
    Ok(Some(parsed))
}

/// Rejects garbage as soon as the first line is visibly not a request line, so a client that
/// sends junk and waits gets its `400` instead of hanging until the head limit.
fn check_partial_request_line(buf: &[u8]) -> Result<(), ReadError> {
    let (line, complete) = match buf.iter().position(|b| *b == b'\n') {
        Some(i) => (&buf[..i], true),
        None => (buf, false),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().any(|b| !matches!(b, 0x20..=0x7e)) {
        return Err(malformed("invalid byte in request line"));
    }
    if complete {
        parse_request_line(line)?;
    } else if line.len() > MAX_LINE {
        return Err(malformed("request line too long"));
    }
    Ok(())
}

/// Parses the head (without its final blank line) into a request with an empty body.
fn parse_head(head: &[u8]) -> Result<Request, ReadError> {
    let mut lines = head
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or_else(|| malformed("empty request"))?;
    let (method, target, http10) = parse_request_line(request_line)?;
    let (path, query) = split_target(target)?;

    let mut headers = Vec::new();
    for line in lines {
        headers.push(parse_header(line)?);
    }
    let connection_has = |token: &str| {
        headers.iter().any(|(k, v)| {
            k == "connection" && v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    };
    let close = connection_has("close") || http10 && !connection_has("keep-alive");
    Ok(Request {
        method,
        path,
        query,
        headers,
        body: Bytes::new(),
        close,
    })
}

/// `METHOD SP target SP HTTP/1.x` → (method, target, is HTTP/1.0).
fn parse_request_line(line: &[u8]) -> Result<(String, &str, bool), ReadError> {
    let line = std::str::from_utf8(line).map_err(|_| malformed("request line is not UTF-8"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("request line is not `METHOD target HTTP/1.x`"));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(malformed("invalid method"));
    }
    if target.is_empty() {
        return Err(malformed("empty request target"));
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(malformed("unsupported HTTP version")),
    };
    Ok((method.to_owned(), target, http10))
}

/// Splits a request target into path and query, accepting origin form (`/a?b`), absolute form
/// (`http://host/a?b`) and the asterisk form.
fn split_target(target: &str) -> Result<(String, Option<String>), ReadError> {
    let origin = if target.starts_with('/') || target == "*" {
        target
    } else if let Some((_scheme, rest)) = target.split_once("://") {
        match rest.find('/') {
            Some(i) => &rest[i..],
            None => match rest.find('?') {
                Some(i) => &rest[i..],
                None => "",
            },
        }
    } else {
        return Err(malformed("invalid request target"));
    };
    let (path, query) = match origin.split_once('?') {
        Some((p, q)) => (p, Some(q.to_owned())),
        None => (origin, None),
    };
    let path = if path.is_empty() { "/" } else { path };
    Ok((path.to_owned(), query))
}

fn parse_header(line: &[u8]) -> Result<(String, String), ReadError> {
    let colon = line
        .iter()
        .position(|b| *b == b':')
        .ok_or_else(|| malformed("header line without a colon"))?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().copied().all(is_tchar) {
        return Err(malformed("invalid header name"));
    }
    if value
        .iter()
        .any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f)
    {
        return Err(malformed("control character in header value"));
    }
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    let value = String::from_utf8_lossy(value)
        .trim_matches(|c| c == ' ' || c == '\t')
        .to_owned();
    Ok((name, value))
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

enum Framing {
    Length(usize),
    Chunked,
}

fn body_framing(headers: &[(String, String)]) -> Result<Framing, ReadError> {
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for (k, v) in headers {
        match k.as_str() {
            "content-length" => {
                for part in v.split(',') {
                    let part = part.trim();
                    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(malformed("invalid content-length"));
                    }
                    let n: usize = part
                        .parse()
                        .map_err(|_| malformed("content-length out of range"))?;
                    if length.is_some_and(|l| l != n) {
                        return Err(malformed("conflicting content-length values"));
                    }
                    length = Some(n);
                }
            }
            "transfer-encoding" => {
                let last = v.rsplit(',').next().unwrap_or("").trim();
                if !last.eq_ignore_ascii_case("chunked") {
                    return Err(malformed("unsupported transfer-encoding"));
                }
                chunked = true;
            }
            _ => {}
        }
    }
    match (chunked, length) {
        (true, Some(_)) => Err(malformed("both content-length and transfer-encoding")),
        (true, None) => Ok(Framing::Chunked),
        (false, Some(n)) if n > MAX_BODY => Err(malformed("body too large")),
        (false, Some(n)) => Ok(Framing::Length(n)),
        (false, None) => Ok(Framing::Length(0)),
    }
}

/// Reads until `buf` holds at least `n` bytes.
async fn fill<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    n: usize,
) -> Result<(), ReadError> {
    if buf.capacity() < n {
        buf.reserve(n - buf.len());
    }
    while buf.len() < n {
        let read = io.read_buf(buf).await.map_err(|_| ReadError::Closed)?;
        if read == 0 {
            return Err(ReadError::Closed);
        }
    }
    Ok(())
}

/// Reads one CRLF-terminated line (returned without the CRLF).
async fn read_line<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<BytesMut, ReadError> {
    loop {
        if let Some(pos) = find(buf, b"\r\n") {
            let mut line = buf.split_to(pos + 2);
            line.truncate(pos);
            return Ok(line);
        }
        if buf.len() > MAX_LINE {
            return Err(malformed("chunk line too long"));
        }
        let read = io.read_buf(buf).await.map_err(|_| ReadError::Closed)?;
        if read == 0 {
            return Err(ReadError::Closed);
        }
    }
}

async fn read_chunked<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<Bytes, ReadError> {
    let mut body = BytesMut::new();
    loop {
        let line = read_line(io, buf).await?;
        let size_field = line[..].split(|b| *b == b';').next().unwrap_or(&[]);
        let size_field = std::str::from_utf8(size_field)
            .map_err(|_| malformed("invalid chunk size"))?
            .trim_matches(|c| c == ' ' || c == '\t');
        if size_field.is_empty() || !size_field.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed("invalid chunk size"));
        }
        let size = usize::from_str_radix(size_field, 16)
            .map_err(|_| malformed("chunk size out of range"))?;
        if size == 0 {
            // Trailer section: header lines until an empty line; trailers are discarded.
            loop {
                let trailer = read_line(io, buf).await?;
                if trailer.is_empty() {
                    return Ok(body.freeze());
                }
            }
        }
        if body.len().saturating_add(size) > MAX_BODY {
            return Err(malformed("body too large"));
        }
        fill(io, buf, size + 2).await?;
        body.extend_from_slice(&buf[..size]);
        if &buf[size..size + 2] != b"\r\n" {
            return Err(malformed("chunk data not followed by CRLF"));
        }
        let _ = buf.split_to(size + 2);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Serializes a response head. `content-type: application/json` and `content-length:
/// body_len` are added unless `headers` already has them; `connection: close` is added when
/// `close` is set.
pub(crate) fn response_head(
    status: u16,
    headers: &[(String, String)],
    body_len: usize,
    close: bool,
) -> BytesMut {
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut out = BytesMut::with_capacity(256);
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status)).as_bytes());
    for (k, v) in headers {
        push_header(&mut out, k, v);
    }
    if !has("content-type") {
        push_header(&mut out, "content-type", "application/json");
    }
    if !has("content-length") {
        push_header(&mut out, "content-length", &body_len.to_string());
    }
    if close && !has("connection") {
        push_header(&mut out, "connection", "close");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn push_header(out: &mut BytesMut, k: &str, v: &str) {
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(v.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The standard reason phrase for `code` (empty for unknown codes, which HTTP/1.1 allows).
pub(crate) fn reason_phrase(code: u16) -> &'static str {
    match code {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` to the parser through an in-memory pipe and returns the first result.
    async fn parse(input: &[u8]) -> Result<Option<Request>, ReadError> {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        let _ = client.write_all(input).await;
        drop(client);
        let mut buf = BytesMut::new();
        read_request(&mut server, &mut buf).await
    }

    #[tokio::test]
    async fn parses_request_with_query_headers_and_body() {
        let req =
            parse(b"POST /i/_doc?refresh=true HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                .await;
        let Ok(Some(req)) = req else {
            panic!("expected a request, got {req:?}");
        };
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/i/_doc");
        assert_eq!(req.query.as_deref(), Some("refresh=true"));
        assert_eq!(req.headers[0], ("host".to_owned(), "x".to_owned()));
        assert_eq!(&req.body[..], b"{}");
        assert!(!req.close);
    }

    #[tokio::test]
    async fn decodes_chunked_body_with_extensions_and_trailers() {
        let req = parse(b"POST /_bulk HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n").await;
        let Ok(Some(req)) = req else {
            panic!("expected a request, got {req:?}");
        };
        assert_eq!(&req.body[..], b"abcde");
    }

    #[tokio::test]
    async fn absolute_form_and_http10_close() {
        let Ok(Some(req)) = parse(b"GET http://h:9200/_cat?v HTTP/1.0\r\n\r\n").await else {
            panic!("expected a request");
        };
        assert_eq!(req.path, "/_cat");
        assert_eq!(req.query.as_deref(), Some("v"));
        assert!(req.close);
    }

    #[tokio::test]
    async fn clean_eof_is_none_and_truncated_is_closed() {
        assert!(matches!(parse(b"").await, Ok(None)));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost").await,
            Err(ReadError::Closed)
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\ncontent-length: 5\r\n\r\nab").await,
            Err(ReadError::Closed)
        ));
    }

    #[tokio::test]
    async fn garbage_is_malformed() {
        let cases: &[&[u8]] = &[
            b"GARBAGE\r\n\r\n",
            b"\x00\x01\x02\xff",
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET / HTTP/1.1\r\ncontent-length: abc\r\n\r\n",
            b"GET / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            b"GET / HTTP/1.1\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            b"GET / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n1\r\nabc\r\n0\r\n\r\n",
            b"GET nopath HTTP/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
        ];
        for case in cases {
            let got = parse(case).await;
            assert!(
                matches!(got, Err(ReadError::Malformed(_))),
                "{:?} gave {got:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn response_head_adds_defaults_once() {
        let head = response_head(429, &[("retry-after".into(), "1".into())], 2, true);
        assert_eq!(
            &head[..],
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n"
        );
        let head = response_head(
            200,
            &[("Content-Type".into(), "text/plain".into())],
            0,
            false,
        );
        assert_eq!(
            &head[..],
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 0\r\n\r\n"
        );
    }
}
