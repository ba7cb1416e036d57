//! What a fake node does with a request: the [`Match`] that selects requests and the
//! [`Behavior`] applied to them.

use std::time::Duration;

use bytes::Bytes;

/// Selects requests for a rule installed with [`FakeNode::on`](crate::FakeNode::on) or
/// [`FakeNode::once`](crate::FakeNode::once), or for
/// [`FakeNode::requests_matching`](crate::FakeNode::requests_matching).
///
/// Paths are compared byte-for-byte with the request target as sent (no percent-decoding),
/// without the query string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// Every request.
    Any,
    /// Requests whose path equals this exactly (query string excluded).
    Path(String),
    /// Requests whose path starts with this.
    PathPrefix(String),
    /// Requests with this method (compared case-insensitively) and exactly this path.
    MethodPath(String, String),
    /// Requests whose query string (the part after `?`) contains this substring.
    Query(String),
}

impl Match {
    /// Whether a request with this method, path and query string is selected.
    pub fn matches(&self, method: &str, path: &str, query: Option<&str>) -> bool {
        match self {
            Match::Any => true,
            Match::Path(p) => path == p,
            Match::PathPrefix(p) => path.starts_with(p.as_str()),
            Match::MethodPath(m, p) => method.eq_ignore_ascii_case(m) && path == p,
            Match::Query(q) => query.is_some_and(|query| query.contains(q.as_str())),
        }
    }
}

/// What a fake node does with a request it has read.
///
/// Every behavior starts after the whole request (head and body) has been read and recorded,
/// so a test can always see the request in [`FakeNode::requests`](crate::FakeNode::requests),
/// whatever happened on the wire afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Answer with this status, headers and body.
    ///
    /// `content-length` is added (unless given here, in which case it is sent verbatim, so a
    /// test can make a node lie about the length) and so is `content-type: application/json`
    /// unless a `content-type` header is given.
    Respond {
        /// The status code.
        status: u16,
        /// Extra headers, sent in this order.
        headers: Vec<(String, String)>,
        /// The body (not sent for `HEAD` requests).
        body: Bytes,
    },
    /// Close the socket with a TCP RST (`SO_LINGER` 0) without answering: the client sees
    /// "connection reset by peer".
    Reset,
    /// Send `200` with headers claiming a 64-byte body, then close the socket cleanly (FIN):
    /// the client sees EOF in the middle of the body.
    CloseAfterHeaders,
    /// Never answer. The socket stays open until the client closes it or the node is killed
    /// or dropped.
    Hang,
    /// Wait (with `tokio::time::sleep`, so paused-time tests can skip it), then apply the inner
    /// behavior.
    Delay(Duration, Box<Behavior>),
    /// Send the status and headers with the full `content-length`, then the first half of the
    /// body, then hang like [`Behavior::Hang`].
    StallBody {
        /// The status code.
        status: u16,
        /// The full body; only its first half (rounded down) is ever sent.
        body: Bytes,
    },
    /// The node's built-in OpenSearch-like answer (see the crate docs).
    Default,
    /// Ask a handler (e.g. [`FakeBulk`](crate::FakeBulk)'s `_bulk` handler) what to do; it
    /// sees the whole request and returns the behavior to apply.
    Handler(Handler),
}

/// A request as a [`Handler`] sees it.
#[derive(Debug)]
pub struct HandlerRequest<'a> {
    /// The method, as sent.
    pub method: &'a str,
    /// The path, without the query string.
    pub path: &'a str,
    /// The query string, if any.
    pub query: Option<&'a str>,
    /// The body.
    pub body: &'a Bytes,
}

/// A function from a request to the [`Behavior`] to apply, shared by every node it is
/// installed on. Two handlers are equal when they are the same function object.
#[derive(Clone)]
pub struct Handler(std::sync::Arc<dyn Fn(&HandlerRequest<'_>) -> Behavior + Send + Sync>);

impl Handler {
    /// Wraps a function.
    pub fn new(f: impl Fn(&HandlerRequest<'_>) -> Behavior + Send + Sync + 'static) -> Handler {
        Handler(std::sync::Arc::new(f))
    }

    /// Calls it.
    pub fn call(&self, req: &HandlerRequest<'_>) -> Behavior {
        (self.0)(req)
    }
}

impl PartialEq for Handler {
    fn eq(&self, other: &Handler) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Handler {}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handler")
    }
}

impl Behavior {
    /// Answer with `code` and a small JSON body shaped like OpenSearch's: `{"status":code}` for
    /// codes below 400, an `{"error":{..},"status":code}` object for errors.
    pub fn status(code: u16) -> Behavior {
        let body = if code >= 400 {
            let reason = crate::http::reason_phrase(code);
            serde_json::json!({
                "error": {
                    "root_cause": [{ "type": "fake_error", "reason": reason }],
                    "type": "fake_error",
                    "reason": reason,
                },
                "status": code,
            })
        } else {
            serde_json::json!({ "status": code })
        };
        Behavior::json(code, body)
    }

    /// Answer with `code` and `body` serialized as JSON.
    pub fn json(code: u16, body: serde_json::Value) -> Behavior {
        Behavior::Respond {
            status: code,
            headers: Vec::new(),
            body: Bytes::from(body.to_string()),
        }
    }

    /// Add a response header. Applies to [`Behavior::Respond`] (also when wrapped in
    /// [`Behavior::Delay`]); any other behavior is returned unchanged.
    pub fn with_header(self, k: &str, v: &str) -> Behavior {
        match self {
            Behavior::Respond {
                status,
                mut headers,
                body,
            } => {
                headers.push((k.to_owned(), v.to_owned()));
                Behavior::Respond {
                    status,
                    headers,
                    body,
                }
            }
            Behavior::Delay(d, inner) => Behavior::Delay(d, Box::new(inner.with_header(k, v))),
            other => other,
        }
    }

    /// A throttling answer: [`Behavior::status`]`(code)` with a `retry-after: value` header
    /// (`value` is sent verbatim, so it may be seconds or an HTTP date).
    pub fn retry_after(code: u16, value: &str) -> Behavior {
        Behavior::status(code).with_header("retry-after", value)
    }

    /// Wait `d`, then apply `self`. Shorthand for [`Behavior::Delay`].
    pub fn delayed(self, d: Duration) -> Behavior {
        Behavior::Delay(d, Box::new(self))
    }

    /// The name recorded in [`Recorded::behavior`](crate::Recorded::behavior) when this
    /// behavior is applied: the variant name (`"Respond"`, `"Reset"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Behavior::Respond { .. } => "Respond",
            Behavior::Reset => "Reset",
            Behavior::CloseAfterHeaders => "CloseAfterHeaders",
            Behavior::Hang => "Hang",
            Behavior::Delay(..) => "Delay",
            Behavior::StallBody { .. } => "StallBody",
            Behavior::Default => "Default",
            Behavior::Handler(_) => "Handler",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_variants_select_as_documented() {
        assert!(Match::Any.matches("GET", "/", None));
        assert!(Match::Path("/a".into()).matches("GET", "/a", Some("x=1")));
        assert!(!Match::Path("/a".into()).matches("GET", "/a/b", None));
        assert!(Match::PathPrefix("/a".into()).matches("PUT", "/a/b", None));
        assert!(Match::MethodPath("post".into(), "/_bulk".into()).matches("POST", "/_bulk", None));
        assert!(!Match::MethodPath("GET".into(), "/_bulk".into()).matches("POST", "/_bulk", None));
        assert!(Match::Query("pretty".into()).matches("GET", "/", Some("a=1&pretty")));
        assert!(!Match::Query("pretty".into()).matches("GET", "/", None));
    }

    #[test]
    fn with_header_reaches_through_delay_and_ignores_others() {
        let b = Behavior::status(200)
            .delayed(Duration::from_secs(1))
            .with_header("x-a", "1");
        let Behavior::Delay(_, inner) = b else {
            panic!("expected Delay");
        };
        let Behavior::Respond { headers, .. } = *inner else {
            panic!("expected Respond");
        };
        assert_eq!(headers, vec![("x-a".to_owned(), "1".to_owned())]);
        assert_eq!(Behavior::Reset.with_header("x", "y"), Behavior::Reset);
    }

    #[test]
    fn retry_after_sets_header_and_error_body() {
        let Behavior::Respond {
            status,
            headers,
            body,
        } = Behavior::retry_after(429, "3")
        else {
            panic!("expected Respond");
        };
        assert_eq!(status, 429);
        assert_eq!(headers, vec![("retry-after".to_owned(), "3".to_owned())]);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v["status"], 429);
        assert_eq!(v["error"]["reason"], "Too Many Requests");
    }
}
