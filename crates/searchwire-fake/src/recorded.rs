//! What a fake node remembers about each request it received.

use bytes::Bytes;
use tokio::time::Instant;

/// A request as a fake node received it, with what the node did about it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// When the whole request (head and body) had been read. A `tokio` instant, so
    /// paused-time tests can assert exact delays between attempts.
    pub at: Instant,
    /// The method as sent (`"GET"`, `"POST"`, ...).
    pub method: String,
    /// The path, without the query string, as sent (not percent-decoded).
    pub path: String,
    /// The query string (after `?`), if the target had one.
    pub query: Option<String>,
    /// Headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it was sent with `transfer-encoding: chunked`.
    pub body: Bytes,
    /// The id of the connection it arrived on, per node, starting at 1 and never reused (not
    /// even across [`FakeNode::kill`](crate::FakeNode::kill) and
    /// [`FakeNode::revive`](crate::FakeNode::revive)). Equal ids mean keep-alive reuse.
    pub connection: u64,
    /// The [`Behavior::name`](crate::Behavior::name) of the behavior applied, or `"Stalled"`
    /// when the request arrived on a connection black-holed by
    /// [`FakeNode::stall_open_connections`](crate::FakeNode::stall_open_connections).
    pub behavior: &'static str,
}

impl Recorded {
    /// The value of the first header called `name` (compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
