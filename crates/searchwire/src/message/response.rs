//! What came back: status, headers, body, which node answered, and the attempts it took.
//! (`Response::json`, which returns the crate's [`Error`](crate::Error), is defined beside that
//! error in `error.rs`, so this file stays below it.)

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::message::attempt::Attempt;

/// A complete HTTP response (the body is read in full within the attempt timeout).
#[derive(Clone)]
pub struct Response {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) node: std::sync::Arc<str>,
    pub(crate) attempts: Attempts,
}

/// A response's attempts: the common single attempt inline (no allocation), more in a
/// vector.
#[derive(Clone)]
pub(crate) enum Attempts {
    /// The request's first attempt answered.
    One(Attempt),
    /// Every attempt, in order.
    Many(Vec<Attempt>),
}

impl Attempts {
    fn as_slice(&self) -> &[Attempt] {
        match self {
            Attempts::One(a) => std::slice::from_ref(a),
            Attempts::Many(v) => v,
        }
    }
}

impl Response {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body bytes.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body as UTF-8 text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The URL (without credentials) of the node that produced this response.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Every attempt made for this request, the last one being this response.
    pub fn attempts(&self) -> &[Attempt] {
        self.attempts.as_slice()
    }
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("node", &self.node)
            .field("body_len", &self.body.len())
            .field("attempts", &self.attempts.as_slice().len())
            .finish()
    }
}
