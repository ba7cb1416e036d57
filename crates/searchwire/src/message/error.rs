//! The one error type: a kind, the final status (if any), and every attempt made.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::classify::OutcomeKind;
pub use crate::message::attempt::Attempt;
use crate::message::response::Response;

/// A boxed error source.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The source of an error whose last attempt ran out of its attempt timeout.
#[derive(Debug)]
pub(crate) struct AttemptTimedOut(pub(crate) Duration);

impl fmt::Display for AttemptTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attempt timed out after {}",
            crate::clock::duration::format_duration(self.0)
        )
    }
}

impl std::error::Error for AttemptTimedOut {}

/// What kind of failure an [`Error`] is. Stable, small, and `#[non_exhaustive]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The client configuration is invalid (builder input or environment variable).
    Config,
    /// The request itself is invalid (bad path, header, or body); nothing was sent.
    InvalidRequest,
    /// The final response was 401 or 403: the node is reachable, the credentials or
    /// permissions are wrong. Nodes are never marked dead for this.
    Auth,
    /// The final response was 429 after the retries allowed.
    Throttled,
    /// The final response was another non-success HTTP status (4xx, 5xx).
    Status,
    /// Every attempt failed to reach a node (connect failures, resets, attempt
    /// timeouts), or no node could be tried at all.
    NoNodeReachable,
    /// The request's overall deadline expired, cancelling an attempt in flight.
    DeadlineExceeded,
    /// The cluster circuit breaker is open: the request was refused without any
    /// network traffic.
    CircuitOpen,
    /// An attempt timed out on a node that then answered a short liveness check (`GET /`):
    /// the node is alive and was not marked dead, the request itself is slow. It is not
    /// retried on another node (it would be as slow there); give it a longer attempt
    /// timeout ([`Request::attempt_timeout`](crate::Request::attempt_timeout)).
    AttemptTimeout,
    /// The response body exceeded `ClientBuilder::max_response_bytes`.
    ResponseTooLarge,
    /// The node was reached, but the connection broke mid-exchange (reset, EOF, a
    /// malformed response) on the last attempt: the request may have been processed.
    ConnectionLost,
    /// A response arrived but its body is not what the caller asked to decode it as
    /// ([`Response::json`](crate::Response::json)).
    Decode,
    /// The client's adaptive concurrency limit was reached and no slot freed within the
    /// wait allowed: nothing was sent. The cluster is (or recently was) past its capacity;
    /// retry later or send less.
    ConcurrencyLimited,
}

impl ErrorKind {
    /// A stable lower-case name, used in JSON output and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Auth => "auth",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Status => "status",
            ErrorKind::NoNodeReachable => "no_node_reachable",
            ErrorKind::DeadlineExceeded => "deadline_exceeded",
            ErrorKind::CircuitOpen => "circuit_open",
            ErrorKind::AttemptTimeout => "attempt_timeout",
            ErrorKind::ResponseTooLarge => "response_too_large",
            ErrorKind::ConnectionLost => "connection_lost",
            ErrorKind::Decode => "decode",
            ErrorKind::ConcurrencyLimited => "concurrency_limited",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error returned by every searchwire operation.
///
/// It carries a [`kind`](Error::kind), the final HTTP status and response when a node
/// answered, the list of [`attempts`](Error::attempts), and a message that says what to do.
/// Credentials never appear in its `Display` or `Debug` output.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    attempts: Vec<Attempt>,
    response: Option<Response>,
    last_outcome: Option<OutcomeKind>,
    source: Option<BoxError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                attempts: Vec::new(),
                response: None,
                last_outcome: None,
                source: None,
            }),
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidRequest, message)
    }

    pub(crate) fn with_source(mut self, source: impl Into<BoxError>) -> Error {
        self.inner.source = Some(source.into());
        self
    }

    pub(crate) fn with_attempts(mut self, attempts: Vec<Attempt>) -> Error {
        self.inner.last_outcome = attempts.last().map(|a| a.outcome);
        self.inner.attempts = attempts;
        self
    }

    pub(crate) fn with_response(mut self, response: Response) -> Error {
        self.inner.response = Some(response);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The final HTTP status, when the last attempt got a response.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.response.as_ref().map(|r| r.status())
    }

    /// The final response (status, headers, body), when the last attempt got one.
    pub fn response(&self) -> Option<&Response> {
        self.inner.response.as_ref()
    }

    /// Every attempt made, in order.
    pub fn attempts(&self) -> &[Attempt] {
        &self.inner.attempts
    }

    /// The classified outcome of the last attempt, if any attempt was made.
    pub fn last_outcome(&self) -> Option<OutcomeKind> {
        self.inner.last_outcome
    }

    /// Whether trying the same request again later could succeed: throttling, gateway
    /// errors, unreachable nodes and deadlines are retryable; configuration, invalid
    /// requests, auth and other client errors are not.
    pub fn is_retryable(&self) -> bool {
        match self.inner.kind {
            ErrorKind::Config
            | ErrorKind::InvalidRequest
            | ErrorKind::Auth
            | ErrorKind::ResponseTooLarge
            | ErrorKind::Decode => false,
            ErrorKind::Throttled
            | ErrorKind::NoNodeReachable
            | ErrorKind::ConnectionLost
            | ErrorKind::DeadlineExceeded
            | ErrorKind::AttemptTimeout
            | ErrorKind::CircuitOpen
            | ErrorKind::ConcurrencyLimited => true,
            ErrorKind::Status => matches!(
                self.inner.last_outcome,
                Some(OutcomeKind::Gateway | OutcomeKind::ServerError)
            ),
        }
    }

    /// Whether the failure was a timeout: the overall deadline, or an attempt timeout on
    /// the last attempt (on a node confirmed alive — [`ErrorKind::AttemptTimeout`] — or
    /// not).
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == ErrorKind::DeadlineExceeded
            || self.inner.last_outcome == Some(OutcomeKind::Timeout)
    }

    /// Whether the failure was a failure to connect: the last attempt could not open a
    /// connection (the request was never sent), or no node could be tried at all. Not a
    /// reset (the node was reached) and not a timeout (see [`is_timeout`](Error::is_timeout)).
    pub fn is_connect(&self) -> bool {
        self.inner.kind == ErrorKind::NoNodeReachable
            && matches!(self.inner.last_outcome, None | Some(OutcomeKind::Connect))
    }

    /// Whether a response body could not be decoded ([`ErrorKind::Decode`]).
    pub fn is_decode(&self) -> bool {
        self.inner.kind == ErrorKind::Decode
    }

    /// Takes the final response (status, headers, body) out of the error, when the last
    /// attempt got one — e.g. to read an error body in full.
    pub fn into_response(self) -> Option<Response> {
        self.inner.response
    }

    /// The message alone, without the attempt list.
    pub fn message(&self) -> &str {
        &self.inner.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)?;
        let n = self.inner.attempts.len();
        if n > 1 {
            write!(f, " ({n} attempts:")?;
            for (i, a) in self.inner.attempts.iter().enumerate() {
                let sep = if i == 0 { " " } else { ", " };
                write!(
                    f,
                    "{sep}#{} {} {} in {}ms",
                    a.number,
                    a.node,
                    a.outcome_label(),
                    a.elapsed.as_millis()
                )?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind)
            .field("message", &self.inner.message)
            .field("status", &self.status())
            .field("attempts", &self.inner.attempts);
        if let Some(s) = &self.inner.source {
            d.field("source", &s.to_string());
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| &**s as &(dyn std::error::Error + 'static))
    }
}

impl Response {
    /// Parses the body as JSON. A body that is not the expected JSON gives an error that
    /// names the node and the parse failure.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!("response from {} is not the expected JSON: {e}", self.node),
            )
            .with_source(e)
        })
    }
}
