//! Single-document writes: `PUT|POST /{index}/_doc/{id}`, `POST /{index}/_doc` (the relay
//! assigns a UUIDv7 id), `PUT|POST /{index}/_create/{id}`, `DELETE /{index}/_doc/{id}` and
//! `POST /{index}/_update/{id}`.
//!
//! Each becomes the one bulk item it is (the URL's index and id, the query parameters as
//! item metadata, the body as the source line) and goes through the same durable path as
//! `_bulk` ([`accept::take`]): the first try through the live bulk indexer, the queue if
//! the cluster cannot take it now. The answer is the cluster's single-document answer made
//! from its bulk item answer — the same fields without `status`, the item's status as the
//! HTTP status (201 created, 200 updated, 404 `not_found` for a delete of a missing
//! document) — or, for an error, `{"error":{"root_cause":[..],"type","reason",..},"status"}`
//! with the cluster's error object.
//!
//! - **Queued**: `202 {"_index","_id","result":"queued"}`, the promise of a queued bulk item
//!   (on disk or in Redis, delivered with its id). 202 because the write is accepted, not
//!   done, and every client's single-document call takes any 2xx as success (opensearch-py,
//!   elasticsearch-py, opensearch-js, the Go clients); the bulk item keeps 200 because the
//!   shippers' *item* checks accept only 200/201.
//! - **Scripted `_update`** (`script` in the body) is passed to the cluster as it came,
//!   through the transport client, never queued: a script applied twice (a counter, an
//!   append) is not the write the client asked for, and a replay after an ambiguous failure
//!   cannot know whether the first one ran. The transport never sends such a POST again
//!   after an ambiguous failure; the relay then answers 500 `searchwire_outcome_unknown`
//!   (not 502/503/504, which clients retry on their own).
//! - **Conditional writes**: `if_seq_no`/`if_primary_term` are never queued (see
//!   [`accept::conditional`]); `version` with `version_type=external|external_gte` is kept
//!   in the queued item, so a replay is as conditional as the first try, and a 409 on replay
//!   means the index holds this version or a newer one — delivered.

use bytes::Bytes;
use http::{Method, StatusCode};
use searchwire::{ErrorKind, Request};
use serde_json::{json, Map, Value};

use crate::accept::{self, Answer, Taken};
use crate::filter_path::FilterPath;
use crate::ndjson::{Item, Op};
use crate::state::Shared;

/// The status of a queued single-document write.
pub const QUEUED_STATUS: StatusCode = StatusCode::ACCEPTED;

/// The error type of a scripted `_update` whose outcome the relay cannot know.
pub const OUTCOME_UNKNOWN: &str = "searchwire_outcome_unknown";

/// The parsed route.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `_doc` (`op_type=create` makes it a create) or `_create`.
    Write {
        create: bool,
    },
    Delete,
    Update,
}

/// One single-document request, as the server hands it over.
pub(crate) struct SingleRequest<'a> {
    pub method: &'a Method,
    /// The path as sent (percent-encoded).
    pub path: &'a str,
    /// Query pairs, percent-decoded.
    pub query: Vec<(String, String)>,
    /// `X-Searchwire-Priority`.
    pub priority: Option<u8>,
    pub body: Bytes,
}

/// Answers one single-document write (a row of the route table, `server::ROUTES`, sent it).
pub(crate) async fn serve(shared: &Shared, req: SingleRequest<'_>) -> Answer {
    let segs = crate::pattern::segments(req.path);
    let (index, kind, id) = match segs.as_slice() {
        [i, k] => (i.as_str(), k.as_str(), None),
        [i, k, id] => (i.as_str(), k.as_str(), Some(id.as_str())),
        _ => return no_handler(req.method, req.path),
    };
    let route = match (kind, req.method, id) {
        ("_doc", &Method::POST, None) => Route::Write { create: false },
        ("_doc", _, None) => return wrong_method(req.method, req.path, "POST"),
        ("_doc", &Method::PUT | &Method::POST, Some(_)) => Route::Write { create: false },
        ("_doc", &Method::DELETE, Some(_)) => Route::Delete,
        ("_doc", _, Some(_)) => {
            return wrong_method(req.method, req.path, "DELETE, POST, GET, PUT, HEAD")
        }
        ("_create", &Method::PUT | &Method::POST, Some(_)) => Route::Write { create: true },
        ("_create", _, _) => return wrong_method(req.method, req.path, "POST, PUT"),
        ("_update", &Method::POST, Some(_)) => Route::Update,
        ("_update", _, _) => return wrong_method(req.method, req.path, "POST"),
        _ => return no_handler(req.method, req.path),
    };
    if let Err(reason) = valid_index(index) {
        return Answer::json(
            StatusCode::BAD_REQUEST,
            &error_object(
                json!({"type": "invalid_index_name_exception", "reason": reason,
                       "index": index, "index_uuid": "_na_"}),
                400,
            ),
        );
    }
    if route == Route::Update && is_scripted(&req.body) {
        return scripted_update(shared, &req).await;
    }
    let params = match Params::parse(&route, req.path, req.query) {
        Ok(p) => p,
        Err(a) => return a,
    };
    let item = match build_item(&route, &params, index, id, &req.body) {
        Ok(item) => item,
        Err(a) => return a,
    };
    metrics::counter!("searchwire_relay_single_requests_total", "op" => item.op.as_str())
        .increment(1);
    match accept::take(
        shared,
        std::slice::from_ref(&item),
        params.query,
        req.priority,
    )
    .await
    {
        Err(refused) => refused,
        Ok(mut taken) => match taken.pop() {
            Some(t) => answer(t, params.filter.as_ref()),
            None => Answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "searchwire_internal_error",
                "the write path returned no answer for the document; send it again",
            ),
        },
    }
}

/// The query parameters of one single-document request, sorted by where they go.
#[derive(Debug, Default)]
struct Params {
    /// Item metadata (`routing`, `pipeline`, `version`, ...).
    meta: Map<String, Value>,
    /// `refresh`, `timeout`, `wait_for_active_shards`: the `_bulk` request's parameters.
    query: Vec<(String, String)>,
    /// `op_type=create` on `_doc`.
    op_create: bool,
    filter: Option<FilterPath>,
}

impl Params {
    fn parse(route: &Route, path: &str, pairs: Vec<(String, String)>) -> Result<Params, Answer> {
        let mut p = Params::default();
        let bad = |reason: String| {
            Answer::error(
                StatusCode::BAD_REQUEST,
                "illegal_argument_exception",
                &reason,
            )
        };
        let number = |k: &str, v: &str| {
            v.parse::<u64>().map(Value::from).map_err(|_| {
                bad(format!(
                    "request [{path}]: parameter [{k}] must be a non-negative whole number, found [{v}]"
                ))
            })
        };
        for (k, v) in pairs {
            match (k.as_str(), route) {
                ("routing" | "pipeline", Route::Write { .. } | Route::Delete)
                | ("routing", Route::Update) => {
                    p.meta.insert(k, Value::String(v));
                }
                ("if_seq_no" | "if_primary_term" | "version", _) => {
                    let n = number(&k, &v)?;
                    p.meta.insert(k, n);
                }
                ("version_type", Route::Write { .. } | Route::Delete) => {
                    p.meta.insert(k, Value::String(v));
                }
                ("retry_on_conflict", Route::Update) => {
                    let n = number(&k, &v)?;
                    p.meta.insert(k, n);
                }
                ("require_alias", Route::Write { .. } | Route::Update) => {
                    let b = match v.as_str() {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(bad(format!(
                                "Failed to parse value [{v}] as only [true] or [false] are allowed."
                            )))
                        }
                    };
                    p.meta.insert(k, Value::Bool(b));
                }
                ("_source", Route::Update) => {
                    let s = match v.as_str() {
                        "" | "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        fields => Value::from(fields.split(',').collect::<Vec<_>>()),
                    };
                    p.meta.insert(k, s);
                }
                ("op_type", Route::Write { create }) => match v.as_str() {
                    "create" => p.op_create = true,
                    "index" if !create => {}
                    _ => {
                        return Err(bad(format!(
                            "opType must be 'create' or 'index', found: [{v}]"
                        )))
                    }
                },
                // The default: nothing to pass on (and the item keeps sharing requests).
                ("refresh", _) if v == "false" => {}
                // Passed on as given; the cluster checks the values (a bad one is its 400).
                ("refresh" | "timeout" | "wait_for_active_shards", _) => p.query.push((k, v)),
                ("filter_path", _) => p.filter = FilterPath::parse(&v),
                ("pretty" | "human" | "error_trace", _) => {}
                _ => {
                    return Err(bad(format!(
                        "request [{}] contains unrecognized parameter: [{k}]",
                        path.split('?').next().unwrap_or(path)
                    )))
                }
            }
        }
        Ok(p)
    }
}

/// OpenSearch's limit on a document id (a delete of a longer one is the cluster's 404).
const MAX_ID_BYTES: usize = 512;

/// The bulk item for the request: index and id from the URL (a UUIDv7 for `POST /{index}/_doc`),
/// the parameters as metadata, the body as one source line.
fn build_item(
    route: &Route,
    params: &Params,
    index: &str,
    id: Option<&str>,
    body: &Bytes,
) -> Result<Item, Answer> {
    if let Some(id) = id.filter(|id| id.len() > MAX_ID_BYTES && *route != Route::Delete) {
        return Err(Answer::error(
            StatusCode::BAD_REQUEST,
            "action_request_validation_exception",
            &format!(
                "Validation Failed: 1: id [{id}] is too long, must be no longer than \
                 {MAX_ID_BYTES} bytes but was: {};",
                id.len()
            ),
        ));
    }
    let mut meta = Map::new();
    meta.insert("_index".into(), Value::String(index.to_owned()));
    let id_assigned = id.is_none();
    let id = id.map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned);
    meta.insert("_id".into(), Value::String(id));
    meta.extend(params.meta.clone());
    let (op, source) = match route {
        Route::Write { create } => (
            if *create || params.op_create {
                Op::Create
            } else {
                Op::Index
            },
            Some(source_line(body)?),
        ),
        Route::Delete => (Op::Delete, None),
        Route::Update => {
            let line = source_line(body)?;
            check_update(&line)?;
            (Op::Update, Some(line))
        }
    };
    Ok(Item {
        op,
        meta,
        source,
        line: 1,
        id_assigned,
    })
}

/// The body as one NDJSON line: it must be one JSON object (OpenSearch's
/// `mapper_parsing_exception` otherwise). A pretty-printed body has its line breaks made
/// spaces: outside strings they are whitespace, and inside one JSON allows no raw line
/// break, so the document is byte for byte the same JSON otherwise (nothing re-encoded:
/// large numbers and key order stay as sent).
fn source_line(body: &Bytes) -> Result<Bytes, Answer> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Answer::error(
            StatusCode::BAD_REQUEST,
            "parse_exception",
            "request body is required",
        ));
    }
    if let Err(e) = serde_json::from_slice::<Map<String, Value>>(body) {
        return Err(Answer::json(
            StatusCode::BAD_REQUEST,
            &error_object(
                json!({"type": "mapper_parsing_exception", "reason": "failed to parse",
                       "caused_by": {"type": "not_x_content_exception",
                                     "reason": format!("the body must be one JSON object: {e}")}}),
                400,
            ),
        ));
    }
    if body.iter().any(|b| *b == b'\n' || *b == b'\r') {
        let flat: Vec<u8> = body
            .iter()
            .map(|b| if *b == b'\n' || *b == b'\r' { b' ' } else { *b })
            .collect();
        return Ok(Bytes::from(flat));
    }
    Ok(body.clone())
}

/// The fields OpenSearch's update request takes in its body.
const UPDATE_FIELDS: &[&str] = &[
    "doc",
    "doc_as_upsert",
    "upsert",
    "detect_noop",
    "_source",
    "script",
    "scripted_upsert",
];

/// An `_update` body the cluster would refuse as a whole is refused before anything is
/// tried or queued (a queued one would only become a dead letter).
fn check_update(line: &Bytes) -> Result<(), Answer> {
    let body: Map<String, Value> = serde_json::from_slice(line).unwrap_or_default();
    if let Some(k) = body.keys().find(|k| !UPDATE_FIELDS.contains(&k.as_str())) {
        return Err(Answer::error(
            StatusCode::BAD_REQUEST,
            "x_content_parse_exception",
            &format!("[UpdateRequest] unknown field [{k}]"),
        ));
    }
    if !body.contains_key("doc") {
        return Err(Answer::error(
            StatusCode::BAD_REQUEST,
            "action_request_validation_exception",
            "Validation Failed: 1: script or doc is missing;",
        ));
    }
    Ok(())
}

fn is_scripted(body: &Bytes) -> bool {
    serde_json::from_slice::<Map<String, Value>>(body).is_ok_and(|m| m.contains_key("script"))
}

/// The single-document answer from the item's: queued, written (the item object without
/// `status`, filtered), or the cluster's error in OpenSearch's error shape.
fn answer(t: Taken, filter: Option<&FilterPath>) -> Answer {
    let Taken { status, mut body } = t;
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    if accept::is_queued(&body) {
        body.remove("status");
        return Answer::json(QUEUED_STATUS, &filtered(body, filter));
    }
    match body.remove("error") {
        Some(error) => {
            let mut a = Answer::json(code, &error_object(error, status));
            if code == StatusCode::TOO_MANY_REQUESTS {
                // The queue had no room for the document (crate::admission): the single
                // answer is the item's 429 and says when to come back, as `_bulk`'s does.
                a.headers.insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from(crate::config::RETRY_AFTER.as_secs()),
                );
            }
            a
        }
        None => {
            body.remove("status");
            // A noop wrote nothing to any shard: the single-document answer says 0 of 0,
            // where the bulk item reports its request's shards.
            if body.get("result").and_then(Value::as_str) == Some("noop") {
                body.insert(
                    "_shards".into(),
                    json!({"total": 0, "successful": 0, "failed": 0}),
                );
            }
            Answer::json(code, &filtered(body, filter))
        }
    }
}

fn filtered(body: Map<String, Value>, filter: Option<&FilterPath>) -> Value {
    let v = Value::Object(body);
    match filter {
        Some(f) => f.apply(v),
        None => v,
    }
}

/// `{"error":{"root_cause":[..],..},"status":N}` from an error object: its root cause is
/// itself without `caused_by`, as OpenSearch reports an engine error of one document.
fn error_object(error: Value, status: u16) -> Value {
    let mut error = match error {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("type".into(), Value::from("exception"));
            m.insert("reason".into(), other);
            m
        }
    };
    if !error.contains_key("root_cause") {
        let mut root = error.clone();
        root.remove("caused_by");
        error.insert("root_cause".into(), json!([root]));
    }
    json!({"error": error, "status": status})
}

fn wrong_method(method: &Method, path: &str, allowed: &str) -> Answer {
    Answer::json(
        StatusCode::METHOD_NOT_ALLOWED,
        &json!({"error": format!("Incorrect HTTP method for uri [{path}] and method [{method}], allowed: [{allowed}]"),
                "status": 405}),
    )
}

fn no_handler(method: &Method, path: &str) -> Answer {
    Answer::json(
        StatusCode::BAD_REQUEST,
        &json!({"error": format!("no handler found for uri [{path}] and method [{method}]"),
                "status": 400}),
    )
}

/// OpenSearch's index name rules (`MetadataCreateIndexService.validateIndexOrAliasName`),
/// checked in its order, with its wording.
fn valid_index(index: &str) -> Result<(), String> {
    const BAD: &[char] = &[' ', '"', '*', '\\', '<', '|', ',', '>', '/', '?'];
    if index.is_empty() {
        return Err("Invalid index name [], must not be empty".into());
    }
    if index.contains(BAD) {
        return Err(format!(
            "Invalid index name [{index}], must not contain the following characters \
             [ , \", *, \\, <, |, ,, >, /, ?]"
        ));
    }
    for c in ['#', ':'] {
        if index.contains(c) {
            return Err(format!(
                "Invalid index name [{index}], must not contain '{c}'"
            ));
        }
    }
    if index.starts_with(['_', '-', '+']) {
        return Err(format!(
            "Invalid index name [{index}], must not start with '_', '-', or '+'"
        ));
    }
    if index != index.to_lowercase() {
        return Err(format!("Invalid index name [{index}], must be lowercase"));
    }
    if index == "." || index == ".." {
        return Err(format!(
            "Invalid index name [{index}], must not be '.' or '..'"
        ));
    }
    Ok(())
}

/// A scripted `_update`: sent to the cluster as it came (path, query, body), once — the
/// transport does not repeat a POST after an ambiguous failure — and never queued.
async fn scripted_update(shared: &Shared, req: &SingleRequest<'_>) -> Answer {
    metrics::counter!("searchwire_relay_single_requests_total", "op" => "scripted_update")
        .increment(1);
    let mut r = Request::post(req.path.split('?').next().unwrap_or(req.path))
        .body_with_type(req.body.clone(), "application/json")
        .idempotent(false)
        .timeout(shared.config.live_budget);
    for (k, v) in &req.query {
        r = r.query(k.as_str(), v.as_str());
    }
    match shared.client.send(r).await {
        Ok(resp) => passed(resp.status(), resp.body().clone()),
        Err(e) => {
            let kind = e.kind();
            let never_sent = e.is_connect() || kind == ErrorKind::CircuitOpen;
            if let Some(resp) = e.response() {
                return passed(resp.status(), resp.body().clone());
            }
            if never_sent {
                Answer::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "searchwire_cluster_unavailable",
                    &format!(
                        "the cluster could not be reached ({kind}: {}); the scripted update was \
                         not sent, so not applied: send it again",
                        e.message()
                    ),
                )
            } else {
                Answer::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    OUTCOME_UNKNOWN,
                    &format!(
                        "the scripted update was sent but no answer came back ({kind}: {}); it may \
                         or may not have been applied, and it is not sent again (a script applied \
                         twice is a different write): read the document to find out",
                        e.message()
                    ),
                )
            }
        }
    }
}

/// The cluster's own answer, as it is.
fn passed(status: StatusCode, body: Bytes) -> Answer {
    Answer {
        status,
        body,
        headers: http::HeaderMap::new(),
    }
}

#[cfg(test)]
mod tests;
