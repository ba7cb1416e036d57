//! Every request no other route takes goes to the cluster as it came, through the relay's one
//! way out, the transport [`searchwire::Client`]: its retries and deadlines, its rule that a
//! `POST` that is not read-only is never sent twice after an ambiguous failure (a reset, a
//! timeout: the client gets a 502 that says it may have been applied), its breaker, metrics
//! and spans. The answer — status, headers, body — goes back unchanged, bounded by the
//! transport's response limit.
//!
//! **Credentials** (see SECURITY.md): a client never gains a right on the cluster it would
//! not have had talking to the cluster itself.
//! - A request carrying its own `Authorization` (anything but the relay's token) is sent
//!   with exactly that, and *without* the relay's credentials (no configured
//!   `Authorization`, no SigV4 signature): the cluster decides.
//! - A request from the relay's own client (it carried the relay's token, or the relay
//!   needs none and it carried nothing) is sent with the relay's credentials only when an
//!   allow rule ([`crate::config::PassRule`], `--pass-through`) takes it; otherwise the relay
//!   refuses it (403) without sending anything.

use http::{header, HeaderMap, HeaderName, StatusCode};
use searchwire::ErrorKind;

use crate::accept::Answer;
use crate::body;
use crate::route::{Call, Handled};

/// Request headers that never go on: hop-by-hop ones (RFC 9110 §7.6.1), those the transport
/// sets itself (`host`, `content-length`), the body's coding (the body is sent decoded) and
/// the relay's own.
const DROPPED_REQUEST: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-encoding",
    "expect",
    crate::config::PRIORITY_HEADER,
];

/// Answer headers that never go back: hop-by-hop ones and the length (the server sets it).
const DROPPED_ANSWER: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// The pass-through handler: the last row of the route table.
pub(crate) fn handler(c: Call) -> Handled {
    Box::pin(forward(c))
}

async fn forward(c: Call) -> Answer {
    let shared = c.shared.clone();
    let method = c.req.method().clone();
    let path = c.req.uri().path().to_owned();
    // Its own credentials: an `Authorization` that is not the relay's token (with no token
    // configured, any `Authorization` is the client's own).
    let relay_has_token = !matches!(shared.config.auth, crate::AuthConfig::None);
    let own = c.req.headers().contains_key(header::AUTHORIZATION)
        && (!c.relay_client || !relay_has_token);
    if !own {
        if !c.relay_client {
            return crate::route::unauthorized();
        }
        let allowed = shared
            .config
            .pass_through
            .iter()
            .any(|r| r.allows(&method, &c.segs));
        if !allowed {
            metrics::counter!("searchwire_relay_pass_through_total", "result" => "not_allowed")
                .increment(1);
            return Answer::error(
                StatusCode::FORBIDDEN,
                "security_exception",
                &format!(
                    "{method} {path} is not one of the relay's pass-through routes (--pass-through), \
                     so the relay does not send it with its own cluster credentials; send the \
                     cluster's own credentials in Authorization (the cluster then decides), or ask \
                     the relay's operator to allow the route"
                ),
            );
        }
    }
    let target = c
        .req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |pq| pq.as_str().to_owned());
    let (parts, bytes) = match body::read(&shared, c.req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let mut out = searchwire::Request::new(method.clone(), target);
    let connection_named = connection_named(&parts.headers);
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if DROPPED_REQUEST.contains(&n)
            || connection_named.iter().any(|c| c == n)
            || (name == header::AUTHORIZATION && !own)
        {
            continue;
        }
        if let Ok(v) = value.to_str() {
            out = out.header(n, v);
        }
    }
    if own {
        out = out.without_client_credentials();
    }
    if !bytes.is_empty() {
        let ct = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        out = out.body_with_type(bytes, &ct);
    }
    let started = tokio::time::Instant::now();
    let result = shared.client.send(out).await;
    metrics::histogram!("searchwire_relay_pass_through_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    let resp = match result {
        Ok(r) => r,
        Err(e) => match e.response().cloned() {
            Some(r) => r,
            None => {
                metrics::counter!("searchwire_relay_pass_through_total", "result" => "failed")
                    .increment(1);
                return failure(&method, &path, &e);
            }
        },
    };
    metrics::counter!("searchwire_relay_pass_through_total", "result" => "answered").increment(1);
    let mut headers = HeaderMap::with_capacity(resp.headers().len());
    for (name, value) in resp.headers() {
        if !DROPPED_ANSWER.contains(&name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    Answer {
        status: resp.status(),
        body: resp.body().clone(),
        headers,
    }
}

/// Headers named in `Connection` (hop-by-hop by that naming).
fn connection_named(h: &HeaderMap) -> Vec<String> {
    h.get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| HeaderName::from_bytes(s.as_bytes()).is_ok())
        .collect()
}

/// The answer when the cluster gave none: a status a client reads correctly (503 and 504 are
/// retried by every client; a request that may have been applied is a 502 that says so).
fn failure(method: &http::Method, path: &str, e: &searchwire::Error) -> Answer {
    let (status, kind, what) = match e.kind() {
        ErrorKind::CircuitOpen => (
            StatusCode::SERVICE_UNAVAILABLE,
            "searchwire_circuit_open",
            "the relay's circuit breaker for the cluster is open; nothing was sent",
        ),
        ErrorKind::NoNodeReachable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "searchwire_no_node_reachable",
            "no node of the cluster could be reached",
        ),
        ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_exception",
            "the cluster did not answer in time; the request may have been applied",
        ),
        ErrorKind::ConnectionLost => (
            StatusCode::BAD_GATEWAY,
            "searchwire_connection_lost",
            "the connection to the cluster broke after the request was sent; it may have been \
             applied, so check before sending it again",
        ),
        ErrorKind::ResponseTooLarge => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "searchwire_response_too_large",
            "the cluster's answer is larger than the relay's response limit; ask for less",
        ),
        ErrorKind::InvalidRequest => (
            StatusCode::BAD_REQUEST,
            "illegal_argument_exception",
            "the request cannot be forwarded",
        ),
        _ => (
            StatusCode::BAD_GATEWAY,
            "searchwire_pass_through_failed",
            "the request could not be passed to the cluster",
        ),
    };
    Answer::error(status, kind, &format!("{method} {path}: {what} ({e})"))
}
