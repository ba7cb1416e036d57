//! The relay's admin endpoint: its dead letters, looked at, replayed and purged over HTTP,
//! with the same filter as `searchwire queue dead-letters`
//! ([`searchwire_queue::DeadLetterFilter`]). Only the relay's own clients may use it (its
//! `--auth-token` / `--auth-user`, or anyone on a loopback relay without credentials).
//!
//! - `GET /_searchwire/dead_letters?index=&error_type=&older_than=&newer_than=&id=&after=&limit=`
//!   → `{"dead_letters":[..],"next_after":ID|null}`
//! - `GET /_searchwire/dead_letters/{id}` → one dead letter, or 404
//! - `POST /_searchwire/dead_letters/_replay?FILTERS` (or `?all=true`) →
//!   `{"replayed","duplicates","ids"}`
//! - `POST /_searchwire/dead_letters/_purge?FILTERS` (or `?all=true`) → `{"purged","ids"}`
//!
//! A dead letter's object is the queue's message (`id`, `index`, `attempts`, `max_retries`,
//! `enqueued_at`, `payload_hash`, ...) with `reason` (the cluster's error), `error_type`,
//! `dead_at` and `payload` (the original action line and source; `payload_hex` when it is
//! not UTF-8).

use std::time::Duration;

use http::StatusCode;
use searchwire_queue::{error_type, DeadLetter, DeadLetterFilter, MessageId, Selection};
use serde_json::{json, Value};

use crate::accept::Answer;
use crate::route::{Call, Handled};

/// Dead letters per page when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;
/// Largest page.
const MAX_LIMIT: usize = 10_000;

/// What the query string asked for.
struct Query {
    filter: DeadLetterFilter,
    all: bool,
    after: Option<MessageId>,
    limit: usize,
}

fn bad(reason: &str) -> Answer {
    Answer::error(
        StatusCode::BAD_REQUEST,
        "illegal_argument_exception",
        reason,
    )
}

fn duration(k: &str, v: &str) -> Result<Duration, Answer> {
    searchwire::explain::parse_duration(v).map_err(|e| {
        bad(&format!(
            "[{k}] must be a duration such as 30s, 10m or 24h: {e}"
        ))
    })
}

fn number(k: &str, v: &str) -> Result<u64, Answer> {
    v.trim().parse::<u64>().map_err(|_| {
        bad(&format!(
            "[{k}] must be a whole number, not {}",
            searchwire::echo(v)
        ))
    })
}

fn query(c: &Call) -> Result<Query, Answer> {
    let mut q = Query {
        filter: DeadLetterFilter::default(),
        all: false,
        after: None,
        limit: DEFAULT_LIMIT,
    };
    for (k, v) in crate::query::query_pairs(c.req.uri().query().unwrap_or("")) {
        match k.as_str() {
            "index" => q.filter.index = Some(v),
            "error_type" => q.filter.error_type = Some(v),
            "older_than" => q.filter.older_than = Some(duration(&k, &v)?),
            "newer_than" => q.filter.newer_than = Some(duration(&k, &v)?),
            "id" => {
                for id in v.split(',').filter(|s| !s.is_empty()) {
                    q.filter.ids.push(MessageId(number(&k, id)?));
                }
            }
            "after" => q.after = Some(MessageId(number(&k, &v)?)),
            "limit" => {
                q.limit = usize::try_from(number(&k, &v)?)
                    .unwrap_or(MAX_LIMIT)
                    .clamp(1, MAX_LIMIT)
            }
            "all" => q.all = v.is_empty() || v == "true",
            "pretty" | "human" => {}
            _ => {
                return Err(bad(&format!(
                "unknown parameter [{k}]: use index, error_type, older_than, newer_than, id, after, limit or all"
            )))
            }
        }
    }
    Ok(q)
}

/// A dead letter as the endpoint shows it.
pub(crate) fn dead_json(d: &DeadLetter) -> Value {
    let mut v = serde_json::to_value(d).unwrap_or_else(|_| json!({}));
    // The queue's shape nests the message; the endpoint shows it flat, as the CLI does.
    let mut out = match v.get_mut("message").map(Value::take) {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    out.insert("reason".into(), Value::String(d.reason.clone()));
    out.insert("error_type".into(), Value::String(error_type(&d.reason)));
    out.insert("dead_at".into(), Value::String(d.dead_at.to_string()));
    out.insert("payload_bytes".into(), json!(d.message.payload.len()));
    match std::str::from_utf8(&d.message.payload) {
        Ok(t) => {
            out.insert("payload".into(), Value::String(t.to_owned()));
        }
        Err(_) => {
            out.insert("payload".into(), Value::Null);
            out.insert(
                "payload_hex".into(),
                Value::String(
                    d.message
                        .payload
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                ),
            );
        }
    }
    Value::Object(out)
}

fn queue_failed(e: &searchwire_queue::Error) -> Answer {
    Answer::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "searchwire_queue_unavailable",
        &format!("cannot read the relay's queue: {e}"),
    )
}

/// `GET /_searchwire/dead_letters`
pub(crate) fn list(c: Call) -> Handled {
    Box::pin(async move {
        let q = match query(&c) {
            Ok(q) => q,
            Err(a) => return a,
        };
        match c
            .shared
            .queue
            .find_dead_letters(&q.filter, q.after, q.limit)
            .await
        {
            Ok(dead) => {
                let next = (dead.len() == q.limit)
                    .then(|| dead.last().map(|d| d.message.id.0))
                    .flatten();
                Answer::json(
                    StatusCode::OK,
                    &json!({
                        "dead_letters": dead.iter().map(dead_json).collect::<Vec<_>>(),
                        "next_after": next,
                    }),
                )
            }
            Err(e) => queue_failed(&e),
        }
    })
}

/// `GET /_searchwire/dead_letters/{id}`
pub(crate) fn show(c: Call) -> Handled {
    Box::pin(async move {
        let id = match c.params.get("id").map(|s| number("id", s)) {
            Some(Ok(id)) => MessageId(id),
            Some(Err(a)) => return a,
            None => return bad("give the dead letter's id"),
        };
        match c.shared.queue.dead_letter_by_id(id).await {
            Ok(Some(d)) => Answer::json(StatusCode::OK, &dead_json(&d)),
            Ok(None) => Answer::error(
                StatusCode::NOT_FOUND,
                "resource_not_found_exception",
                &format!("no dead letter has id {id}"),
            ),
            Err(e) => queue_failed(&e),
        }
    })
}

/// The selection of a replay or purge request, or its refusal.
async fn selection(c: &Call) -> Result<(Selection, Value), Answer> {
    let q = query(c)?;
    if q.filter.is_empty() && !q.all {
        return Err(bad(
            "choose the dead letters with index, error_type, older_than, newer_than or id, or give all=true",
        ));
    }
    let sel = c
        .shared
        .queue
        .select_dead_letters(&q.filter)
        .await
        .map_err(|e| queue_failed(&e))?;
    let ids = match &sel {
        Selection::Ids(ids) => json!(ids.iter().map(|i| i.0).collect::<Vec<_>>()),
        Selection::All => Value::Null,
    };
    Ok((sel, ids))
}

/// `POST /_searchwire/dead_letters/_replay`
pub(crate) fn replay(c: Call) -> Handled {
    Box::pin(async move {
        let (sel, ids) = match selection(&c).await {
            Ok(s) => s,
            Err(a) => return a,
        };
        match c.shared.ledger.replay(&c.shared.queue, sel).await {
            Ok(r) => {
                tracing::info!(
                    replayed = r.replayed,
                    duplicates = r.duplicates,
                    "dead letters replayed through the admin endpoint"
                );
                if r.replayed > 0 {
                    c.shared.wake.notify_one();
                }
                Answer::json(
                    StatusCode::OK,
                    &json!({"replayed": r.replayed, "duplicates": r.duplicates, "ids": ids}),
                )
            }
            Err(e) => queue_failed(&e),
        }
    })
}

/// `POST /_searchwire/dead_letters/_purge`
pub(crate) fn purge(c: Call) -> Handled {
    Box::pin(async move {
        let (sel, ids) = match selection(&c).await {
            Ok(s) => s,
            Err(a) => return a,
        };
        match c.shared.ledger.purge(&c.shared.queue, sel).await {
            Ok(n) => {
                tracing::info!(purged = n, "dead letters purged through the admin endpoint");
                Answer::json(StatusCode::OK, &json!({"purged": n, "ids": ids}))
            }
            Err(e) => queue_failed(&e),
        }
    })
}
