//! The rows of the route table (the table itself is `server::ROUTES`, read top to bottom):
//! who may take a row, what its handler is given and returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;

use crate::accept::Answer;
use crate::pattern::{matches, Methods, Params};
use crate::state::Shared;

/// Who may take a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can connect (health probes).
    Public,
    /// A client the relay authenticated (its token, or any client when it has none).
    Relay,
    /// Like [`Access::Relay`], and refused with a retryable 503 while the relay drains: a
    /// write the relay takes responsibility for.
    Write,
    /// Any client: the pass-through handler applies the credential rule itself (a client's
    /// own `Authorization` is the cluster's to judge; the relay's credentials only for the
    /// allow-listed routes and the relay's own clients).
    Forwarded,
}

/// What a handler is given.
pub struct Call {
    /// The relay.
    pub shared: Arc<Shared>,
    /// The request (its body not read yet).
    pub req: Request<Incoming>,
    /// The decoded path segments.
    pub segs: Vec<String>,
    /// The captures of the matched row.
    pub params: Params,
    /// The request carried the relay's own credentials (or the relay has none and the
    /// request carried no `Authorization`).
    pub relay_client: bool,
}

/// A handler's answer, boxed so that every handler has the same type.
pub type Handled = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A route's handler.
pub type Handler = fn(Call) -> Handled;

/// One row of the route table.
pub struct Route {
    /// The methods it takes.
    pub methods: Methods,
    /// Its path pattern.
    pub pattern: &'static str,
    /// An extra condition on the captures and segments (`None`: always).
    pub when: Option<fn(&[String]) -> bool>,
    /// Who may take it.
    pub access: Access,
    /// What answers it.
    pub handler: Handler,
}

/// The first row of `table` that takes `method` on `segs`, with its captures.
pub fn find<'t>(
    table: &'t [Route],
    method: &Method,
    segs: &[String],
) -> Option<(&'t Route, Params)> {
    table.iter().find_map(|r| {
        if !r.methods.contains(method) {
            return None;
        }
        let p = matches(r.pattern, segs)?;
        r.when.is_none_or(|w| w(segs)).then_some((r, p))
    })
}

/// The 401 of a request without the relay's credentials.
pub fn unauthorized() -> Answer {
    metrics::counter!("searchwire_relay_requests_total", "result" => "unauthorized").increment(1);
    Answer::error(
        StatusCode::UNAUTHORIZED,
        "security_exception",
        "missing or wrong credentials for the searchwire relay",
    )
}

/// The 401 of a request over a connection without a verified client certificate, when the
/// relay requires one (`--tls-client-ca`).
pub fn certificate_required() -> Answer {
    metrics::counter!("searchwire_relay_requests_total", "result" => "unauthorized").increment(1);
    Answer::error(
        StatusCode::UNAUTHORIZED,
        "security_exception",
        "the searchwire relay requires a client certificate signed by its --tls-client-ca; \
         connect with one (only the health paths answer without)",
    )
}
