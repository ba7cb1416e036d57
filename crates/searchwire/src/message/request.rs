//! What a caller asks for: method, path, query, headers, a replayable body, and the
//! per-request timing and idempotency knobs.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::message::error::Error;

/// Overall time limit of one request, across every attempt and backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// A time budget measured from the moment the request is sent.
    Within(Duration),
    /// An absolute instant on the client's clock.
    At(tokio::time::Instant),
}

/// One logical request. Cheap to clone; its body is reference-counted so every retry
/// replays it without copying. Its `Debug` shows header names, never their values.
#[derive(Clone)]
pub struct Request {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<Bytes>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) deadline: Option<Deadline>,
    pub(crate) idempotent: Option<bool>,
    /// The most retries the transport makes for this request (`None`: the client's rules).
    pub(crate) max_retries: Option<u32>,
    pub(crate) error: Option<String>,
    pub(crate) client_credentials: bool,
    /// The request's own hedging choice (`None`: the client's setting).
    pub(crate) hedge: Option<crate::policy::hedge::HedgeChoice>,
}

/// Marks an HTTP request sent without the client's credentials: the signing connector
/// (SigV4) leaves it unsigned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WithoutClientCredentials;

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.keys().map(|k| k.as_str()).collect();
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("path", &self.path)
            .field(
                "query_keys",
                &self.query.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("headers", &names)
            .field("body_len", &self.body.as_ref().map(|b| b.len()))
            .field("attempt_timeout", &self.attempt_timeout)
            .field("deadline", &self.deadline)
            .field("idempotent", &self.idempotent)
            .field("max_retries", &self.max_retries)
            .field("client_credentials", &self.client_credentials)
            .field("hedge", &self.hedge)
            .finish()
    }
}

/// Whether a header carries a secret: its value is marked sensitive (HTTP stacks never log
/// it) and never printed.
pub(crate) fn is_secret_header(name: &HeaderName) -> bool {
    let n = name.as_str();
    n == "authorization"
        || n == "proxy-authorization"
        || n == "cookie"
        || n.contains("token")
        || n.contains("secret")
        || n.contains("password")
        || n.contains("api-key")
        || n.contains("apikey")
}

/// POST endpoints that only read, and are therefore safe to retry after a timeout or reset.
const READ_ONLY_POST_ENDPOINTS: &[&str] = &[
    "_search",
    "_count",
    "_msearch",
    "_mget",
    "_search_shards",
    "_field_caps",
    "_validate",
    "_explain",
    "_termvectors",
    "_mtermvectors",
    "_rank_eval",
];

/// Endpoints OpenSearch accepts with PUT that are not safe to deliver twice: a `_bulk`
/// body (its `index` actions without ids write new documents, its `create`s fail) and a
/// `_create` (the second delivery answers 409).
const NON_IDEMPOTENT_PUT_ENDPOINTS: &[&str] = &["_bulk", "_create"];

impl Request {
    /// A request with any method.
    pub fn new(method: Method, path: impl Into<String>) -> Request {
        Request {
            method,
            path: path.into(),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: None,
            attempt_timeout: None,
            deadline: None,
            idempotent: None,
            max_retries: None,
            error: None,
            client_credentials: true,
            hedge: None,
        }
    }

    /// `GET path`.
    pub fn get(path: impl Into<String>) -> Request {
        Request::new(Method::GET, path)
    }

    /// `HEAD path`.
    pub fn head(path: impl Into<String>) -> Request {
        Request::new(Method::HEAD, path)
    }

    /// `POST path`.
    pub fn post(path: impl Into<String>) -> Request {
        Request::new(Method::POST, path)
    }

    /// `PUT path`.
    pub fn put(path: impl Into<String>) -> Request {
        Request::new(Method::PUT, path)
    }

    /// `DELETE path`.
    pub fn delete(path: impl Into<String>) -> Request {
        Request::new(Method::DELETE, path)
    }

    /// Adds a query parameter (percent-encoded when sent).
    pub fn query(mut self, key: impl Into<String>, value: impl Into<String>) -> Request {
        self.query.push((key.into(), value.into()));
        self
    }

    /// Adds a header. An invalid name or value makes [`Client::send`](crate::Client::send)
    /// fail with [`ErrorKind::InvalidRequest`](crate::ErrorKind::InvalidRequest) before any
    /// network traffic.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(n), Ok(mut v)) => {
                if is_secret_header(&n) {
                    v.set_sensitive(true);
                }
                self.headers.append(n, v);
            }
            _ => {
                self.error.get_or_insert_with(|| {
                    format!(
                        "invalid header {}: not a valid HTTP header name or value",
                        crate::echo::echo(name)
                    )
                });
            }
        }
        self
    }

    /// Sets a JSON body (and `Content-Type: application/json`).
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Request {
        match serde_json::to_vec(value) {
            Ok(v) => self.body_with_type(Bytes::from(v), "application/json"),
            Err(e) => {
                self.error.get_or_insert_with(|| {
                    format!("request body is not serializable as JSON: {e}")
                });
                self
            }
        }
    }

    /// Sets a raw body with the given content type.
    pub fn body_with_type(mut self, body: impl Into<Bytes>, content_type: &str) -> Request {
        self.body = Some(body.into());
        if let Ok(v) = HeaderValue::from_str(content_type) {
            self.headers.insert(http::header::CONTENT_TYPE, v);
        }
        self
    }

    /// Sets a raw body; sets `Content-Type: application/json` unless one is set already
    /// (OpenSearch rejects bodies without a content type).
    pub fn body(mut self, body: impl Into<Bytes>) -> Request {
        self.body = Some(body.into());
        if !self.headers.contains_key(http::header::CONTENT_TYPE) {
            self.headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        self
    }

    /// The attempt timeout of this request: bounds each round trip, including reading the
    /// body. Each retry gets a fresh one. Overrides the client's default.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Request {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// The request's timeout: its overall time budget, measured from
    /// [`Client::send`](crate::Client::send), bounding every attempt and backoff together
    /// (the request's deadline is then `send` + `budget`).
    ///
    /// The deadline *cancels*; it does not fail over. When it fires during an attempt, the
    /// attempt is `Cancelled` and the node is not marked dead (the caller's budget says
    /// nothing about the node). For a hung node to be detected, marked dead and skipped
    /// *within* the budget, set an attempt timeout shorter than the budget (for example a
    /// third of it): the attempt timeout is the client's own judgment of the node.
    pub fn timeout(mut self, budget: Duration) -> Request {
        self.deadline = Some(Deadline::Within(budget));
        self
    }

    /// The request's deadline: the instant, on the client's (tokio) clock, by which the
    /// whole request must end (the same bound as [`timeout`](Self::timeout), given as an
    /// instant).
    pub fn deadline(mut self, at: tokio::time::Instant) -> Request {
        self.deadline = Some(Deadline::At(at));
        self
    }

    /// Marks the request as safe (or unsafe) to send twice. By default GET, HEAD, PUT,
    /// DELETE and OPTIONS are idempotent, and POST is idempotent only for read-only
    /// endpoints (`_search`, `_count`, `_msearch`, `_mget`, ...).
    pub fn idempotent(mut self, yes: bool) -> Request {
        self.idempotent = Some(yes);
        self
    }

    /// At most `n` retries of this request by the transport, whatever the outcome: it
    /// replaces the client's `max_retries` and every class rule's limit for this request
    /// (the budget, breaker and deadline still apply). `max_retries(0)` makes each
    /// [`Client::send`](crate::Client::send) one attempt — for a caller that owns the
    /// retries itself, as the bulk indexer does, so a batch is not retried by two layers.
    pub fn max_retries(mut self, n: u32) -> Request {
        self.max_retries = Some(n);
        self
    }

    /// Hedges this request after `delay` (see [`Hedging`](crate::Hedging)): when it is an
    /// idempotent read (`GET`, `HEAD`, `_search`, `_count`, `_mget`, `_msearch`,
    /// `_field_caps`; never a write, scroll, point-in-time creation or async search) and no
    /// answer came within `delay`, a second attempt goes to another node and the first
    /// answer wins. The client's hedge budget and breaker still apply. A request that may
    /// not be hedged is sent as usual.
    pub fn hedge(mut self, delay: crate::HedgeDelay) -> Request {
        if let Err(e) = delay.validate() {
            self.error.get_or_insert(e);
        }
        self.hedge = Some(crate::policy::hedge::HedgeChoice::On(delay));
        self
    }

    /// Never hedges this request, whatever the client's [`hedging`](crate::ClientBuilder::hedging).
    pub fn no_hedge(mut self) -> Request {
        self.hedge = Some(crate::policy::hedge::HedgeChoice::Off);
        self
    }

    /// Sends this request without the client's own credentials: no configured
    /// `Authorization` (basic, bearer, the URL's userinfo) and no SigV4 signature. Only the
    /// request's own headers authenticate it — an `Authorization` set with
    /// [`header`](Self::header), or nothing. For a proxy that forwards its caller's
    /// credentials and must never lend it its own (a TLS client certificate, being part of
    /// the connection, is still presented).
    pub fn without_client_credentials(mut self) -> Request {
        self.client_credentials = false;
        self
    }

    /// Whether the client's own credentials go with this request (see
    /// [`without_client_credentials`](Self::without_client_credentials)).
    pub fn uses_client_credentials(&self) -> bool {
        self.client_credentials
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The path, as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The body, if any.
    pub fn body_bytes(&self) -> Option<&Bytes> {
        self.body.as_ref()
    }

    /// The path as it goes on the wire: without a `#fragment` (HTTP never sends one).
    /// Idempotency is decided on this path too, so `POST /_bulk#/_search` is a bulk.
    pub fn sent_path(&self) -> &str {
        // A byte scan: `#` is ASCII, so its position is a char boundary. Paths are short,
        // and `split('#')`'s searcher cost ~60 instructions per attempt before the first
        // byte.
        match self.path.bytes().position(|b| b == b'#') {
            Some(end) => self.path.get(..end).unwrap_or(""),
            None => &self.path,
        }
    }

    /// Whether the request may be sent again after an ambiguous failure (timeout, reset).
    ///
    /// Decided by the endpoint actually sent ([`sent_path`](Self::sent_path), segments
    /// percent-decoded): GET, HEAD, DELETE and OPTIONS are idempotent; PUT is, except for
    /// the endpoints OpenSearch also accepts with PUT that write anew on every delivery
    /// or fail the second time (`_bulk`, `_create`, `op_type=create`); POST only for
    /// read-only endpoints.
    pub fn is_idempotent(&self) -> bool {
        if let Some(v) = self.idempotent {
            return v;
        }
        if matches!(
            self.method,
            Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS
        ) {
            // Decided by the method alone: no path scan on the hot path.
            return true;
        }
        let (path, path_query) = match self.sent_path().split_once('?') {
            Some((p, q)) => (p, q),
            None => (self.sent_path(), ""),
        };
        let segments = || {
            path.split('/')
                .filter(|s| !s.is_empty())
                .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy())
        };
        match self.method {
            Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS => true,
            Method::PUT => {
                let creates = path_query.split('&').any(|p| p == "op_type=create")
                    || self
                        .query
                        .iter()
                        .any(|(k, v)| k == "op_type" && v == "create");
                !creates && !segments().any(|s| NON_IDEMPOTENT_PUT_ENDPOINTS.contains(&&*s))
            }
            Method::POST => segments()
                .next_back()
                .is_some_and(|last| READ_ONLY_POST_ENDPOINTS.contains(&&*last)),
            _ => false,
        }
    }

    /// The index named by the path, if its first segment is not an API endpoint
    /// (`/logs-2026/_search` → `logs-2026`). Used for logs.
    pub fn index(&self) -> Option<&str> {
        let first = self.path.trim_start_matches('/').split(['/', '?']).next()?;
        if first.is_empty() || first.starts_with('_') {
            None
        } else {
            Some(first)
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if let Some(e) = &self.error {
            return Err(Error::invalid_request(e.clone()));
        }
        if !self.path.starts_with('/') {
            return Err(Error::invalid_request(format!(
                "request path {} must start with '/'",
                crate::echo::echo(&self.path)
            )));
        }
        if has_space_or_control(&self.path) {
            return Err(Error::invalid_request(format!(
                "request path {} contains spaces or control characters; percent-encode them",
                crate::echo::echo(&self.path)
            )));
        }
        Ok(())
    }
}

/// Whether `path` holds a space or a control character (`char::is_control`: U+0000–U+001F
/// and U+007F–U+009F), found byte by byte: in UTF-8 the C1 controls U+0080–U+009F are
/// `0xC2` followed by `0x80..=0x9F`, and `0xC2` is only ever a lead byte (continuation
/// bytes are `0x80..=0xBF`), while bytes below `0x80` are only ever ASCII characters.
/// Decoding every character cost ~8 instructions per character on every request.
fn has_space_or_control(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b <= b' '
            || b == 0x7f
            || (b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_and_controls_are_found_byte_by_byte_as_char_is_control_does() {
        // Every character up to U+0800 (one- and two-byte UTF-8), alone and between others.
        for c in (0u32..0x800).filter_map(char::from_u32) {
            let expected = c.is_control() || c == ' ';
            for path in [
                format!("{c}"),
                format!("/a{c}b"),
                format!("/\u{e9}{c}\u{20ac}"),
            ] {
                assert_eq!(has_space_or_control(&path), expected, "{c:?} in {path:?}");
            }
        }
        // Continuation bytes 0x80..=0x9F after other lead bytes are not controls:
        // U+2080 is E2 82 80, U+0100 is C4 80.
        assert!(!has_space_or_control("/\u{2080}\u{100}"));
        assert!(!has_space_or_control("/_search"));
        assert!(has_space_or_control("/a\u{85}"));
    }

    #[test]
    fn idempotency_defaults() {
        assert!(Request::get("/").is_idempotent());
        assert!(Request::head("/i").is_idempotent());
        assert!(Request::put("/i/_doc/1").is_idempotent());
        assert!(Request::delete("/i").is_idempotent());
        assert!(!Request::post("/i/_doc").is_idempotent());
        assert!(!Request::post("/_bulk").is_idempotent());
        assert!(Request::post("/i/_search").is_idempotent());
        assert!(Request::post("/_search?scroll=1m").is_idempotent());
        assert!(Request::post("/i/_count").is_idempotent());
        assert!(Request::post("/_msearch").is_idempotent());
        assert!(Request::post("/i/_mget").is_idempotent());
        assert!(Request::post("/_bulk").idempotent(true).is_idempotent());
        assert!(!Request::get("/").idempotent(false).is_idempotent());
    }

    #[test]
    fn idempotency_by_the_endpoint_actually_sent() {
        // PUT endpoints that write anew (or fail) on a second delivery.
        assert!(!Request::put("/_bulk").is_idempotent());
        assert!(!Request::put("/logs/_bulk").is_idempotent());
        assert!(!Request::put("/logs/_bulk?refresh=true").is_idempotent());
        assert!(!Request::put("/logs/_create/1").is_idempotent());
        assert!(!Request::post("/logs/_create/1").is_idempotent());
        assert!(!Request::put("/logs/_doc/1?op_type=create").is_idempotent());
        assert!(!Request::put("/logs/_doc/1")
            .query("op_type", "create")
            .is_idempotent());
        assert!(!Request::put("/logs/%5Fbulk").is_idempotent());
        assert!(Request::put("/logs/_doc/1?op_type=index").is_idempotent());
        assert!(Request::put("/logs/_mapping").is_idempotent());
        // A fragment never goes on the wire, so it never decides idempotency.
        assert!(!Request::post("/_bulk#/_search").is_idempotent());
        assert!(!Request::put("/_bulk#/_doc/1").is_idempotent());
        assert_eq!(Request::post("/_bulk#/_search").sent_path(), "/_bulk");
        assert!(Request::post("/i/_search#x").is_idempotent());
    }

    #[test]
    fn debug_never_shows_header_values_or_the_body() {
        let r = Request::post("/i/_doc")
            .header("Authorization", "Bearer s3cret")
            .header("x-api-key", "k3y")
            .body("{\"password\":\"p4ss\"}");
        let d = format!("{r:?}");
        for secret in ["s3cret", "k3y", "p4ss"] {
            assert!(!d.contains(secret), "{d}");
        }
        assert!(d.contains("authorization"), "{d}");
        assert!(r.headers.get("authorization").unwrap().is_sensitive());
    }

    #[test]
    fn index_from_path() {
        assert_eq!(Request::get("/logs/_search").index(), Some("logs"));
        assert_eq!(Request::get("/logs?pretty").index(), Some("logs"));
        assert_eq!(Request::get("/_cluster/health").index(), None);
        assert_eq!(Request::get("/").index(), None);
    }

    #[test]
    fn invalid_input_is_reported_before_sending() {
        assert!(Request::get("no-slash").validate().is_err());
        assert!(Request::get("/a b").validate().is_err());
        let r = Request::get("/").header("bad header", "v");
        let e = r.validate().unwrap_err();
        assert!(e.to_string().contains("bad header"), "{e}");
    }

    #[test]
    fn huge_values_are_cut_in_errors_and_header_values_never_shown() {
        let huge = "h".repeat(1_000_000);
        // An invalid name is shown, cut; a value (it may be a credential) never is.
        let e = Request::get("/")
            .header(&format!("{huge} x"), "Bearer s3cr3t-t0ken\n")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400, "{}", e.len());
        assert!(e.contains("more characters)"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        let e = Request::get(format!("{huge} x"))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400 && e.contains("more characters)"), "{e}");
        let e = crate::Client::builder()
            .node("http://localhost:9200")
            .header(format!("{huge} x"), "Bearer s3cr3t-t0ken")
            .build()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.len() < 400 && e.contains("more characters)"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        let e = crate::Client::builder()
            .node("http://localhost:9200")
            .header("X-Ok", format!("{huge}\n"))
            .build()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("X-Ok") && e.len() < 400, "{e}");
    }
}
