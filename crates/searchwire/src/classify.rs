//! Classification: every attempt outcome becomes exactly one [`OutcomeKind`].
//!
//! This is the only place that inspects raw results (status codes, I/O errors, hyper
//! errors). Everything downstream — the retry decision, node health, metrics, the
//! error a caller sees — reads the kind, never the raw error again.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

/// What happened on one attempt, reduced to the facts that drive every decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutcomeKind {
    /// A 2xx or 3xx response.
    Success,
    /// The request was certainly never sent: connection refused, DNS failure,
    /// unreachable network, TLS handshake failure, connect timeout.
    Connect,
    /// The connection broke mid-exchange (reset, EOF, a malformed response): the node
    /// may or may not have processed the request.
    Reset,
    /// The per-attempt timeout elapsed before the whole response (including its body)
    /// arrived.
    Timeout,
    /// 429 Too Many Requests: the node rejected the request without processing it.
    Throttled,
    /// 502, 503 or 504: a gateway or the node itself reports it cannot serve now.
    Gateway,
    /// 401 or 403: the node is reachable but rejected the credentials or the permission.
    Auth,
    /// Any other 4xx.
    ClientError,
    /// Any other 5xx (500, 501, 505 and up).
    ServerError,
    /// The caller gave up (dropped the request or its deadline expired) while the
    /// attempt was in flight. Says nothing about the node.
    Cancelled,
    /// The node answered, but the response body was larger than the client's
    /// `max_response_bytes`; the exchange was abandoned. The node is fine; the request
    /// asks for too much.
    TooLarge,
}

impl OutcomeKind {
    /// Classifies an HTTP status code.
    pub fn from_status(status: StatusCode) -> OutcomeKind {
        match status.as_u16() {
            200..=399 => OutcomeKind::Success,
            401 | 403 => OutcomeKind::Auth,
            429 => OutcomeKind::Throttled,
            502..=504 => OutcomeKind::Gateway,
            400..=499 => OutcomeKind::ClientError,
            _ => OutcomeKind::ServerError,
        }
    }

    /// Whether this outcome shows the node is unreachable or broken, so it must be marked
    /// dead and handed to resurrection. Auth, throttling and HTTP errors never do: the node
    /// answered. The caller's cancellation never does: it says nothing about the node.
    pub fn marks_node_dead(self) -> bool {
        matches!(
            self,
            OutcomeKind::Connect | OutcomeKind::Reset | OutcomeKind::Timeout
        )
    }

    /// Whether this outcome counts as a failure of the cluster for the circuit breaker and
    /// the per-node gateway ejection: connectivity failures (connect, reset, attempt
    /// timeout) and 5xx answers. Not 4xx, not auth, not 429 (the cluster answered), and
    /// never the caller's cancellation.
    pub fn is_cluster_failure(self) -> bool {
        matches!(
            self,
            OutcomeKind::Connect
                | OutcomeKind::Reset
                | OutcomeKind::Timeout
                | OutcomeKind::Gateway
                | OutcomeKind::ServerError
        )
    }

    /// Whether the node answered with an HTTP response (of any status).
    pub fn node_answered(self) -> bool {
        matches!(
            self,
            OutcomeKind::Success
                | OutcomeKind::Throttled
                | OutcomeKind::Gateway
                | OutcomeKind::Auth
                | OutcomeKind::ClientError
                | OutcomeKind::ServerError
                | OutcomeKind::TooLarge
        )
    }

    /// Whether the request was certainly not processed by the node, so that even a
    /// non-idempotent request may be sent again: a connect failure (never sent) or a 429
    /// (rejected before processing, RFC 6585).
    pub fn certainly_not_processed(self) -> bool {
        matches!(self, OutcomeKind::Connect | OutcomeKind::Throttled)
    }

    /// A stable lower-case name used in logs, metrics labels and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Success => "ok",
            OutcomeKind::Connect => "connect",
            OutcomeKind::Reset => "reset",
            OutcomeKind::Timeout => "timeout",
            OutcomeKind::Throttled => "throttled",
            OutcomeKind::Gateway => "gateway",
            OutcomeKind::Auth => "auth",
            OutcomeKind::ClientError => "client_error",
            OutcomeKind::ServerError => "server_error",
            OutcomeKind::Cancelled => "cancelled",
            OutcomeKind::TooLarge => "too_large",
        }
    }
}

impl fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one exchange with a node ended, before it is classified: what the user requests'
/// attempt loop and the background requests (health checks, capability probes, the
/// refresh, discovery) both hand to [`outcome`].
pub(crate) enum Ended<'a> {
    /// The request's deadline expired while the exchange was in flight.
    DeadlineExpired,
    /// The exchange's own time limit elapsed (the attempt timeout of a user request, the
    /// health-check or discovery timeout of a background request).
    TimedOut {
        /// The limit.
        after: Duration,
        /// Whether it was a user request's attempt timeout (for the wording).
        attempt: bool,
    },
    /// The HTTP stack failed without a complete response; `kind` is the connector's
    /// classification ([`classify_send_error`], or `TooLarge`).
    Failed {
        kind: OutcomeKind,
        cause: &'a (dyn std::error::Error + 'static),
    },
    /// The node answered.
    Answered { status: StatusCode, body: &'a [u8] },
}

/// Which of three different things a 401 or 403 is. Kept apart everywhere: only a 401
/// says something about the node's view of the credentials; a 403 is about one action or
/// index; a 403 cluster block means the credentials were accepted and the cluster refuses
/// writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// 401: the credentials were rejected.
    Credentials,
    /// 403: the user lacks a privilege for this action.
    Permission,
    /// 403 `cluster_block_exception`: the cluster or index is read-only or blocked.
    ClusterBlock,
}

impl Rejection {
    /// The rejection an answer is, if it is one.
    pub(crate) fn of(status: StatusCode, body: &[u8]) -> Option<Rejection> {
        match status.as_u16() {
            401 => Some(Rejection::Credentials),
            403 if is_cluster_block(403, body) => Some(Rejection::ClusterBlock),
            403 => Some(Rejection::Permission),
            _ => None,
        }
    }
}

/// The classification of one exchange: its kind, which rejection a 401/403 is, and what
/// happened in words (none for an answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) kind: OutcomeKind,
    pub(crate) rejection: Option<Rejection>,
    pub(crate) detail: Option<String>,
}

/// Classifies how an exchange ended. The one place that turns raw results into an
/// [`Outcome`], for user and background requests alike.
pub(crate) fn outcome(ended: Ended<'_>) -> Outcome {
    let (kind, rejection, detail) = match ended {
        Ended::DeadlineExpired => (
            OutcomeKind::Cancelled,
            None,
            Some("the request's deadline expired during the attempt".to_string()),
        ),
        Ended::TimedOut { after, attempt } => (
            OutcomeKind::Timeout,
            None,
            Some(if attempt {
                format!(
                    "no complete response within the attempt timeout of {}",
                    crate::clock::duration::format_duration(after)
                )
            } else {
                format!(
                    "timed out after {}",
                    crate::clock::duration::format_duration(after)
                )
            }),
        ),
        Ended::Failed { kind, cause } => (kind, None, Some(error_chain(cause))),
        Ended::Answered { status, body } => (
            OutcomeKind::from_status(status),
            Rejection::of(status, body),
            None,
        ),
    };
    Outcome {
        kind,
        rejection,
        detail,
    }
}

/// Classifies a failure of the HTTP stack (no response) as [`OutcomeKind::Connect`] or
/// [`OutcomeKind::Reset`].
///
/// `is_connect` is the HTTP client's own verdict that the failure happened while
/// establishing the connection; nothing was written then.
pub(crate) fn classify_send_error(
    is_connect: bool,
    err: &(dyn std::error::Error + 'static),
) -> OutcomeKind {
    if is_connect {
        return OutcomeKind::Connect;
    }
    // A request that was cancelled by the pool before being written (the pooled
    // connection closed under us) is reported by hyper as "canceled"; hyper-util retries
    // those itself when it is safe, so what reaches us is a mid-exchange failure.
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::NetworkUnreachable
                    | std::io::ErrorKind::HostUnreachable
            ) {
                return OutcomeKind::Connect;
            }
        }
        cur = e.source();
    }
    OutcomeKind::Reset
}

/// Renders an error and its sources on one line.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// Whether a response is a 403 `cluster_block_exception`.
pub(crate) fn is_cluster_block(status: u16, body: &[u8]) -> bool {
    status == 403 && error_reason(body).is_some_and(|r| r.contains("cluster_block_exception"))
}

/// How much of an error body is read for its message: OpenSearch puts `error.type` and
/// `error.reason` at the start, and a body of hundreds of megabytes (allowed up to
/// `max_response_bytes`) must not cost memory in proportion to build one line of text.
pub(crate) const ERROR_PREFIX_BYTES: usize = 64 * 1024;

/// The `error.reason` (or `error.type`) of an OpenSearch error body, shortened.
///
/// Reads at most the first [`ERROR_PREFIX_BYTES`] with a streaming, typed parse that keeps
/// only `error` (a string, or its `type` and `reason`) and skips everything else without
/// building it — never a `serde_json::Value`. A body cut off at the prefix still yields
/// what was read before the cut.
pub(crate) fn error_reason(body: &[u8]) -> Option<String> {
    let prefix = &body[..body.len().min(ERROR_PREFIX_BYTES)];
    let mut found = ErrorText::default();
    let mut de = serde_json::Deserializer::from_slice(prefix);
    // An error here (a cut-off prefix, not JSON at all) keeps what was captured before it.
    let _ = serde::de::DeserializeSeed::deserialize(TopLevel(&mut found), &mut de);
    let text = match (found.whole, found.ty, found.reason) {
        (Some(w), _, _) => w,
        (None, Some(t), Some(r)) => format!("{t}: {r}"),
        (None, Some(t), None) => t,
        (None, None, Some(r)) => r,
        (None, None, None) => return None,
    };
    if text.is_empty() {
        return None;
    }
    let mut t: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        t.push('…');
    }
    Some(t)
}

/// What [`error_reason`] captured, filled in while parsing (so a later parse error keeps it).
#[derive(Default)]
struct ErrorText {
    /// `"error": "text"`.
    whole: Option<String>,
    ty: Option<String>,
    reason: Option<String>,
}

/// The top-level object: only its `error` member is looked at.
struct TopLevel<'a>(&'a mut ErrorText);

impl<'de> serde::de::DeserializeSeed<'de> for TopLevel<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TopLevel<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an OpenSearch error object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "error" {
                map.next_value_seed(ErrorMember(&mut *self.0))?;
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The `error` member: a string, or an object whose `type` and `reason` are kept.
struct ErrorMember<'a>(&'a mut ErrorText);

impl<'de> serde::de::DeserializeSeed<'de> for ErrorMember<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ErrorMember<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an object with type and reason")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.whole = Some(v.to_string());
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match &*key {
                "type" => &mut self.0.ty,
                "reason" => &mut self.0.reason,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            };
            // A non-string `type`/`reason` is skipped, not an error.
            if let Text(Some(t)) = map.next_value::<Text>()? {
                if !t.is_empty() {
                    *slot = Some(t);
                }
            }
        }
        Ok(())
    }
    // Any other JSON value for `error` says nothing.
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// A string, or nothing for any other JSON value (skipped without building it).
struct Text(Option<String>);

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(Some(v.to_string())))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_reason_reads_type_and_reason_or_a_string() {
        let r = |b: &str| error_reason(b.as_bytes());
        assert_eq!(
            r(r#"{"error":{"root_cause":[{"type":"x","reason":"y"}],"type":"t","reason":"r"},"status":500}"#).as_deref(),
            Some("t: r")
        );
        assert_eq!(r(r#"{"error":"plain"}"#).as_deref(), Some("plain"));
        assert_eq!(
            r(r#"{"status":500,"error":{"type":"t"}}"#).as_deref(),
            Some("t")
        );
        assert_eq!(
            r(r#"{"error":{"reason":"r","type":7}}"#).as_deref(),
            Some("r")
        );
        assert_eq!(r(r#"{"error":{"type":"","reason":""}}"#), None);
        assert_eq!(r(r#"{"error":[1,2]}"#), None);
        assert_eq!(r("not json"), None);
        assert_eq!(r("[]"), None);
        // Cut off after the reason: what was read is kept.
        assert_eq!(
            r(r#"{"error":{"type":"t","reason":"r","stack_trace":"at org.opensearch"#).as_deref(),
            Some("t: r")
        );
    }

    #[test]
    fn error_reason_looks_only_at_the_first_64_kib_of_a_50_mb_body() {
        let mut body = br#"{"error":{"type":"search_phase_execution_exception","reason":"all shards failed","pad":""#.to_vec();
        body.resize(50 * 1024 * 1024, b'a');
        // Past the prefix the body is not even JSON: a parse of the whole body would fail
        // and give no reason at all.
        body[ERROR_PREFIX_BYTES + 10] = 0;
        body.extend_from_slice(br#""},"status":500}"#);
        assert_eq!(
            error_reason(&body).as_deref(),
            Some("search_phase_execution_exception: all shards failed")
        );
    }

    #[test]
    fn statuses_map_to_kinds() {
        let k = |s: u16| OutcomeKind::from_status(StatusCode::from_u16(s).unwrap());
        assert_eq!(k(200), OutcomeKind::Success);
        assert_eq!(k(201), OutcomeKind::Success);
        assert_eq!(k(304), OutcomeKind::Success);
        assert_eq!(k(400), OutcomeKind::ClientError);
        assert_eq!(k(401), OutcomeKind::Auth);
        assert_eq!(k(403), OutcomeKind::Auth);
        assert_eq!(k(404), OutcomeKind::ClientError);
        assert_eq!(k(409), OutcomeKind::ClientError);
        assert_eq!(k(429), OutcomeKind::Throttled);
        assert_eq!(k(500), OutcomeKind::ServerError);
        assert_eq!(k(502), OutcomeKind::Gateway);
        assert_eq!(k(503), OutcomeKind::Gateway);
        assert_eq!(k(504), OutcomeKind::Gateway);
        assert_eq!(k(505), OutcomeKind::ServerError);
    }

    #[test]
    fn only_connectivity_failures_mark_nodes_dead() {
        use OutcomeKind::*;
        for k in [Connect, Reset, Timeout] {
            assert!(k.marks_node_dead(), "{k}");
        }
        for k in [
            Success,
            Throttled,
            Gateway,
            Auth,
            ClientError,
            ServerError,
            Cancelled,
        ] {
            assert!(!k.marks_node_dead(), "{k}");
        }
    }

    #[test]
    fn io_refusal_in_the_chain_is_a_connect_failure() {
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(classify_send_error(false, &e), OutcomeKind::Connect);
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(classify_send_error(false, &e), OutcomeKind::Reset);
        assert_eq!(classify_send_error(true, &e), OutcomeKind::Connect);
    }

    #[test]
    fn one_classification_keeps_401_403_and_cluster_blocks_apart() {
        let answered = |status: u16, body: &str| {
            let status = StatusCode::from_u16(status).unwrap();
            outcome(Ended::Answered {
                status,
                body: body.as_bytes(),
            })
        };
        let block = r#"{"error":{"type":"cluster_block_exception","reason":"index [x] blocked by: [FORBIDDEN/8/index write (api)];"},"status":403}"#;
        let denied =
            r#"{"error":{"type":"security_exception","reason":"no permissions"},"status":403}"#;
        assert_eq!(answered(401, "").rejection, Some(Rejection::Credentials));
        assert_eq!(answered(403, denied).rejection, Some(Rejection::Permission));
        assert_eq!(
            answered(403, block).rejection,
            Some(Rejection::ClusterBlock)
        );
        assert_eq!(answered(403, block).kind, OutcomeKind::Auth);
        assert_eq!(answered(200, "").rejection, None);
        assert_eq!(answered(503, "").kind, OutcomeKind::Gateway);
    }

    #[test]
    fn timeouts_and_deadlines_are_classified_with_their_wording() {
        let t = outcome(Ended::TimedOut {
            after: Duration::from_secs(5),
            attempt: true,
        });
        assert_eq!(t.kind, OutcomeKind::Timeout);
        assert_eq!(
            t.detail.as_deref(),
            Some("no complete response within the attempt timeout of 5s")
        );
        let bg = outcome(Ended::TimedOut {
            after: Duration::from_secs(5),
            attempt: false,
        });
        assert_eq!(bg.kind, OutcomeKind::Timeout);
        assert_eq!(bg.detail.as_deref(), Some("timed out after 5s"));
        assert_eq!(outcome(Ended::DeadlineExpired).kind, OutcomeKind::Cancelled);
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let f = outcome(Ended::Failed {
            kind: OutcomeKind::Reset,
            cause: &io,
        });
        assert_eq!(f.kind, OutcomeKind::Reset);
        assert_eq!(f.detail.as_deref(), Some("reset by peer"));
    }
}
