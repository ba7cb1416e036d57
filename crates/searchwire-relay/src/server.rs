//! The HTTP side: routing, authentication, body limits and timeouts, health, metrics.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::accept::{self, Answer, BulkRequest};
use crate::body;
use crate::config::AuthConfig;
use crate::filter_path::FilterPath;
use crate::identity::{self, MediaType, Product};
use crate::ndjson::Defaults;
use crate::pattern::{self, Methods};
use crate::query::query_pairs;
use crate::route::{self, Access, Call, Handled, Route};
use crate::state::Shared;
use crate::tls::ClientCertified;
use crate::{admin, discovery, passthrough, single};

use crate::config::PRIORITY_HEADER;

/// Answers one request, with the headers of the presented product (`X-Elastic-Product`
/// when presenting Elasticsearch) and the media type the request asked for.
pub(crate) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let gzip = body::accepts_gzip(req.headers());
    let (mut answer, media) = match identity::media_type(req.headers(), shared.compatible()) {
        Ok(media) => (route(&shared, req).await, media),
        Err(refused) => (
            Answer::json(StatusCode::BAD_REQUEST, &refused),
            MediaType::Plain,
        ),
    };
    if method != Method::HEAD {
        body::compress(&mut answer, gzip).await;
    }
    let mut resp = Response::new(Full::new(if method == Method::HEAD {
        Bytes::new()
    } else {
        answer.body
    }));
    *resp.status_mut() = answer.status;
    let headers = resp.headers_mut();
    *headers = answer.headers;
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(identity::answer_type(media)),
        );
    }
    if shared.presented() == Product::Elasticsearch {
        headers.insert(
            identity::ELASTIC_PRODUCT_HEADER,
            HeaderValue::from_static("Elasticsearch"),
        );
    }
    if shared.draining.load(Ordering::Relaxed) {
        // Draining: the client should open its next connection elsewhere (through the load
        // balancer, to another relay), and a refused write may be retried at once.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        if answer.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
    }
    resp
}

/// The route table, read top to bottom: the first row whose methods and pattern take the
/// request answers it (see [`crate::pattern`] for the patterns). The last row takes
/// everything else.
pub(crate) static ROUTES: &[Route] = &[
    Route {
        methods: GET_HEAD,
        pattern: "/health/live",
        when: None,
        access: Access::Public,
        handler: live,
    },
    Route {
        methods: GET_HEAD,
        pattern: "/health/retry-queue",
        when: None,
        access: Access::Public,
        handler: retry_queue,
    },
    Route {
        methods: GET_HEAD,
        pattern: "/",
        when: None,
        access: Access::Relay,
        handler: root,
    },
    Route {
        methods: Methods::GET,
        pattern: "/metrics",
        when: None,
        access: Access::Relay,
        handler: metrics_text,
    },
    Route {
        methods: POST_PUT,
        pattern: "/_bulk",
        when: None,
        access: Access::Write,
        handler: bulk,
    },
    Route {
        methods: POST_PUT,
        pattern: "/{index}/_bulk",
        when: None,
        access: Access::Write,
        handler: bulk,
    },
    Route {
        methods: Methods::ANY,
        pattern: "/_bulk",
        when: None,
        access: Access::Relay,
        handler: method_not_allowed,
    },
    Route {
        methods: Methods::ANY,
        pattern: "/{index}/_bulk",
        when: None,
        access: Access::Relay,
        handler: method_not_allowed,
    },
    Route {
        methods: Methods::ANY,
        pattern: "/*/_doc",
        when: None,
        access: Access::Write,
        handler: single_write,
    },
    Route {
        methods: NOT_GET_HEAD,
        pattern: "/*/_doc/*",
        when: None,
        access: Access::Write,
        handler: single_write,
    },
    Route {
        methods: Methods::ANY,
        pattern: "/*/_create/*",
        when: None,
        access: Access::Write,
        handler: single_write,
    },
    Route {
        methods: Methods::ANY,
        pattern: "/*/_update/*",
        when: None,
        access: Access::Write,
        handler: single_write,
    },
    Route {
        methods: Methods::POST,
        pattern: "/_searchwire/dead_letters/_replay",
        when: None,
        access: Access::Relay,
        handler: admin::replay,
    },
    Route {
        methods: Methods::POST,
        pattern: "/_searchwire/dead_letters/_purge",
        when: None,
        access: Access::Relay,
        handler: admin::purge,
    },
    Route {
        methods: Methods::GET,
        pattern: "/_searchwire/dead_letters",
        when: None,
        access: Access::Relay,
        handler: admin::list,
    },
    Route {
        methods: Methods::GET,
        pattern: "/_searchwire/dead_letters/{id}",
        when: None,
        access: Access::Relay,
        handler: admin::show,
    },
    Route {
        methods: Methods::GET,
        pattern: "/_nodes/**",
        when: Some(discovery::is_info),
        access: Access::Relay,
        handler: discovery::nodes,
    },
    Route {
        methods: Methods::ANY,
        pattern: "/**",
        when: None,
        access: Access::Forwarded,
        handler: passthrough::handler,
    },
];

const GET_HEAD: Methods = Methods::GET.or(Methods::HEAD);
const POST_PUT: Methods = Methods::POST.or(Methods::PUT);
/// Every method but the reads: `GET /{index}/_doc/{id}` passes through.
const NOT_GET_HEAD: Methods = Methods::POST
    .or(Methods::PUT)
    .or(Methods::DELETE)
    .or(Methods::PATCH)
    .or(Methods::OPTIONS);

/// Finds the request's row, checks its access, and runs its handler.
async fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Answer {
    let segs = pattern::segments(req.uri().path());
    let Some((row, params)) = route::find(ROUTES, req.method(), &segs) else {
        return not_found_answer(req.method(), req.uri().path());
    };
    // Mutual TLS: only the health paths answer a connection without a verified client
    // certificate (load balancers' probes present none).
    if row.access != Access::Public
        && shared.tls.as_ref().is_some_and(|t| t.mutual())
        && req.extensions().get::<ClientCertified>().is_none()
    {
        return route::certificate_required();
    }
    let relay_client = authorized(&shared.config.auth, req.headers());
    match row.access {
        Access::Public | Access::Forwarded => {}
        Access::Relay | Access::Write if !relay_client => return route::unauthorized(),
        Access::Relay => {}
        Access::Write if shared.draining.load(Ordering::Relaxed) => {
            metrics::counter!("searchwire_relay_requests_total", "result" => "draining")
                .increment(1);
            return Answer::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "node_closed_exception",
                "the searchwire relay is shutting down and takes no new writes; send the \
                 request again (to another relay)",
            );
        }
        Access::Write => {}
    }
    (row.handler)(Call {
        shared: shared.clone(),
        req,
        segs,
        params,
        relay_client,
    })
    .await
}

fn live(_: Call) -> Handled {
    Box::pin(async { Answer::json(StatusCode::OK, &json!({"status": "live"})) })
}

fn retry_queue(c: Call) -> Handled {
    Box::pin(async move { health(&c.shared).await })
}

fn root(c: Call) -> Handled {
    Box::pin(async move { Answer::json(StatusCode::OK, &identity::root(&c.shared).await) })
}

fn metrics_text(c: Call) -> Handled {
    Box::pin(async move {
        match &c.shared.config_metrics() {
            Some(render) => {
                let mut text = render();
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                // The equation's terms from one snapshot, rendered here rather than by the
                // recorder (whose series are read one by one).
                match c.shared.ledger.snapshot(&c.shared.queue).await {
                    Some(s) => text.push_str(&s.render()),
                    None => text.push_str(
                        "# searchwire relay: the ledger's series are left out of this scrape (the queue could not be read in time)\n",
                    ),
                }
                Answer {
                    status: StatusCode::OK,
                    body: Bytes::from(text),
                    headers: content_type("text/plain; version=0.0.4"),
                }
            }
            None => Answer::error(
                StatusCode::NOT_FOUND,
                "not_found",
                "no metrics recorder is installed in this process",
            ),
        }
    })
}

fn method_not_allowed(c: Call) -> Handled {
    Box::pin(async move {
        Answer::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            &format!(
                "{} is not allowed on {}: use POST or PUT",
                c.req.method(),
                c.req.uri().path()
            ),
        )
    })
}

fn not_found_answer(method: &Method, path: &str) -> Answer {
    Answer::error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no route of the searchwire relay takes {method} {path}"),
    )
}

/// Headers holding only a `Content-Type`.
pub(crate) fn content_type(v: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(v));
    h
}

impl Shared {
    fn config_metrics(&self) -> Option<crate::state::MetricsRender> {
        self.metrics.clone()
    }
}

fn bulk(c: Call) -> Handled {
    Box::pin(async move {
        let index = c.params.get("index").map(str::to_owned);
        bulk_request(&c.shared, c.req, index).await
    })
}

async fn bulk_request(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    index: Option<String>,
) -> Answer {
    let priority = match priority(req.headers()) {
        Ok(p) => p,
        Err(a) => return a,
    };
    let mut defaults = Defaults {
        index,
        ..Defaults::default()
    };
    let mut query = Vec::new();
    let mut filter = None;
    for (k, v) in query_pairs(req.uri().query().unwrap_or("")) {
        match k.as_str() {
            "routing" => defaults.routing = Some(v),
            "pipeline" => defaults.pipeline = Some(v),
            // The default: nothing to pass on (and the items keep sharing requests).
            "refresh" if v == "false" => {}
            // Passed on as given; the cluster checks the values (a bad one is its 400).
            "refresh" | "timeout" | "wait_for_active_shards" => query.push((k, v)),
            // Applied to the relay's answer, as the cluster applies it to its own.
            "filter_path" => filter = FilterPath::parse(&v),
            // Only shape the answer; the full answer is a superset every client reads.
            "pretty" | "human" | "error_trace" | "_source" | "_source_includes"
            | "_source_excludes" => {}
            _ => {
                return Answer::error(
                    StatusCode::BAD_REQUEST,
                    "illegal_argument_exception",
                    &format!(
                        "request [{}] contains unrecognized parameter: [{k}]",
                        req.uri().path()
                    ),
                )
            }
        }
    }
    let body = match body::read(shared, req).await {
        Ok((_, body)) => body,
        Err(refused) => return refused,
    };
    accept::bulk(
        shared,
        BulkRequest {
            body,
            defaults,
            query,
            priority,
            filter,
        },
    )
    .await
}

/// A single-document write ([`single`]): its row's access refuses it while draining, like
/// `_bulk`; the body is read (and decoded) under the same limits.
fn single_write(c: Call) -> Handled {
    Box::pin(async move {
        let Call { shared, req, .. } = c;
        let priority = match priority(req.headers()) {
            Ok(p) => p,
            Err(a) => return a,
        };
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let query = query_pairs(req.uri().query().unwrap_or(""));
        let body = match body::read(&shared, req).await {
            Ok((_, body)) => body,
            Err(refused) => return refused,
        };
        single::serve(
            &shared,
            single::SingleRequest {
                method: &method,
                path: &path,
                query,
                priority,
                body,
            },
        )
        .await
    })
}

/// `X-Searchwire-Priority`, when given.
fn priority(headers: &HeaderMap) -> Result<Option<u8>, Answer> {
    match headers.get(PRIORITY_HEADER) {
        None => Ok(None),
        Some(v) => match v.to_str().ok().and_then(|s| s.trim().parse::<u8>().ok()) {
            Some(p) => Ok(Some(p)),
            None => Err(Answer::error(
                StatusCode::BAD_REQUEST,
                "illegal_argument_exception",
                "X-Searchwire-Priority must be a number from 0 to 255 (higher is delivered first)",
            )),
        },
    }
}

/// `/health/retry-queue`: 200 while ready, 503 when draining or over the backlog threshold
/// (or when the queue cannot be read).
pub(crate) async fn health(shared: &Shared) -> Answer {
    let draining = shared.draining.load(Ordering::Relaxed);
    let breaker = shared.client.breaker_state().as_str();
    match shared.queue.stats().await {
        Ok(s) => {
            let over = s.backlog > shared.config.backlog_threshold;
            let overloaded = shared.admission.overloaded();
            let ready = !draining && !over && overloaded.is_none();
            metrics::gauge!("searchwire_relay_backlog").set(s.backlog as f64);
            metrics::gauge!("searchwire_relay_dead_letters").set(s.dead_letters as f64);
            let mut body = json!({
                "backlog": s.backlog,
                "due": s.due,
                "leased": s.leased,
                "oldest_age_seconds": s.oldest_age.map(|d| d.as_secs_f64()),
                "dead_letters": s.dead_letters,
                "backlog_threshold": shared.config.backlog_threshold,
                "breaker": breaker,
                "draining": draining,
                "ready": ready,
            });
            if let (Some(b), serde_json::Value::Object(limits)) =
                (body.as_object_mut(), shared.admission.health())
            {
                b.extend(limits);
                if let Some(why) = overloaded {
                    b.insert("overloaded_reason".into(), why.into());
                }
            }
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            Answer::json(status, &body)
        }
        Err(e) => Answer::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"ready": false, "draining": draining, "breaker": breaker,
                    "error": format!("cannot read the retry queue: {e}")}),
        ),
    }
}

/// Constant-time check of the `Authorization` header (both sides hashed first, so neither
/// the content nor the length of the secret leaks through timing).
pub(crate) fn authorized(auth: &AuthConfig, headers: &HeaderMap) -> bool {
    let expected = match auth {
        AuthConfig::None => return true,
        AuthConfig::Bearer(t) => format!("Bearer {t}"),
        AuthConfig::Basic { user, password } => {
            format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
        }
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .map_or(&b""[..], |v| v.as_bytes());
    let a = Sha256::digest(expected.as_bytes());
    let b = Sha256::digest(given);
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::decode;

    /// The pattern of the row that takes `method` on `path`.
    fn row(method: Method, path: &str) -> &'static str {
        let segs = pattern::segments(path);
        route::find(ROUTES, &method, &segs).map_or("none", |(r, _)| r.pattern)
    }

    #[test]
    fn single_document_writes_have_rows_and_reads_pass_through() {
        assert_eq!(row(Method::PUT, "/i/_doc/1"), "/*/_doc/*");
        assert_eq!(row(Method::POST, "/i/_doc"), "/*/_doc");
        assert_eq!(row(Method::DELETE, "/i/_doc/1"), "/*/_doc/*");
        // Any index and id segment: ids may start with `_`, and a bad index name gets
        // the cluster's own 400 from the single-document handler, not the allow list's 403.
        assert_eq!(row(Method::PUT, "/i/_doc/_x"), "/*/_doc/*");
        assert_eq!(row(Method::PUT, "/_bad/_doc/7"), "/*/_doc/*");
        assert_eq!(
            row(Method::GET, "/i/_doc/1"),
            "/**",
            "a read is not a write"
        );
        assert_eq!(row(Method::HEAD, "/i/_doc/1"), "/**");
        // A wrong method gets the single-document handler's 405.
        assert_eq!(row(Method::GET, "/i/_create/1"), "/*/_create/*");
        assert_eq!(row(Method::POST, "/i/_update/1"), "/*/_update/*");
        assert_eq!(row(Method::POST, "/i/_bulk"), "/{index}/_bulk");
        assert_eq!(row(Method::POST, "/i/_update_by_query"), "/**");
        assert_eq!(row(Method::POST, "/i/_doc/1/x"), "/**");
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    }

    #[test]
    fn query_is_decoded() {
        assert_eq!(
            query_pairs("pipeline=a%2Fb&refresh=false&x"),
            vec![
                ("pipeline".into(), "a/b".into()),
                ("refresh".into(), "false".into()),
                ("x".into(), "".into())
            ]
        );
        assert_eq!(decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn auth_is_checked() {
        let mut h = HeaderMap::new();
        let basic = AuthConfig::Basic {
            user: "user".into(),
            password: "pass".into(),
        };
        assert!(!authorized(&basic, &h));
        h.insert(header::AUTHORIZATION, "Basic dXNlcjpwYXNz".parse().unwrap());
        assert!(authorized(&basic, &h));
        assert!(!authorized(&AuthConfig::Bearer("pass".into()), &h));
        assert!(authorized(&AuthConfig::None, &h));
    }
}
