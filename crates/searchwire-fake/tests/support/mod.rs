//! A tiny raw-TCP HTTP/1.1 client: enough to drive the fake byte by byte and see exactly what
//! it sent back (including resets and truncated bodies, which a real client would hide).
#![allow(dead_code)] // Each test binary uses a different subset.

use std::io;
use std::time::Duration;

use searchwire_fake::FakeNode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Result type for tests: `?` instead of `unwrap`.
pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// How long a negative check ("nothing arrives") waits. A bound, not a synchronization: the
/// test passes if nothing arrives at all.
pub const SILENCE: Duration = Duration::from_millis(300);

/// Generous bound for positive waits, so a broken fake fails instead of hanging the suite.
pub const BOUND: Duration = Duration::from_secs(10);

/// A parsed response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn content_length(&self) -> usize {
        self.header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// One client connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

impl Conn {
    pub async fn open(node: &FakeNode) -> io::Result<Conn> {
        Ok(Conn {
            stream: TcpStream::connect(node.addr()).await?,
            buf: Vec::new(),
        })
    }

    pub async fn send(&mut self, raw: &[u8]) -> io::Result<()> {
        self.stream.write_all(raw).await
    }

    /// Sends `METHOD path` with no body, keep-alive.
    pub async fn send_request(&mut self, method: &str, path: &str) -> io::Result<()> {
        let raw = format!("{method} {path} HTTP/1.1\r\nhost: fake\r\ncontent-length: 0\r\n\r\n");
        self.send(raw.as_bytes()).await
    }

    /// Sends `METHOD path` and reads the full response.
    pub async fn request(&mut self, method: &str, path: &str) -> io::Result<Response> {
        self.send_request(method, path).await?;
        self.read_response().await
    }

    async fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// Reads a status line and headers.
    pub async fn read_head(&mut self) -> io::Result<Response> {
        let end = loop {
            if let Some(pos) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break pos;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().ok_or_else(|| invalid("no status line"))?;
        let status = status_line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| invalid("bad status line"))?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Ok(Response {
            status,
            headers,
            body: Vec::new(),
        })
    }

    /// Reads exactly `n` body bytes.
    pub async fn read_exact(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            self.fill().await?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads a response head and its `content-length` body.
    pub async fn read_response(&mut self) -> io::Result<Response> {
        let mut resp = self.read_head().await?;
        resp.body = self.read_exact(resp.content_length()).await?;
        Ok(resp)
    }

    /// Reads until EOF; what was buffered plus what arrived.
    pub async fn read_to_end(&mut self) -> io::Result<Vec<u8>> {
        let mut rest = std::mem::take(&mut self.buf);
        self.stream.read_to_end(&mut rest).await?;
        Ok(rest)
    }

    /// Whether nothing at all arrives (no bytes, no EOF, no reset) within [`SILENCE`].
    pub async fn is_silent(&mut self) -> bool {
        let mut byte = [0u8; 1];
        tokio::time::timeout(SILENCE, self.stream.read(&mut byte))
            .await
            .is_err()
    }
}

/// Whether connecting to `node` is refused right now.
pub async fn refused(node: &FakeNode) -> bool {
    matches!(
        TcpStream::connect(node.addr()).await,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
    )
}
