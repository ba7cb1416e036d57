//! One `_bulk` request to the cluster through the transport, and what it means for each item:
//! done (with the cluster's own answer, passed through), worth another try later (queue it),
//! or refused as a whole (the cluster's answer goes back to the caller).

use std::time::Duration;

use searchwire::{Client, ErrorKind, Request};
use serde_json::{Map, Value};

use crate::ndjson::Item;

/// What the cluster said about one item.
#[derive(Clone, Debug, PartialEq)]
pub enum ItemOutcome {
    /// Finished, successfully or for good: `status` and the cluster's item object.
    Done {
        /// The item's status.
        status: u16,
        /// The item object (`_index`, `_id`, `result`/`error`, ...).
        body: Map<String, Value>,
    },
    /// Not written now for a reason that can pass (429, 5xx, rejected execution).
    Retry(String),
}

/// What one request to the cluster gave.
#[derive(Clone, Debug, PartialEq)]
pub enum SendOutcome {
    /// One outcome per item, in order.
    Items(Vec<ItemOutcome>),
    /// No usable answer (breaker open, no node, timeout, reset, 5xx, 429 on the request,
    /// an unreadable answer): every item is worth another try; it may have been applied.
    Retry(String),
    /// The cluster refused the whole request for good (401/403, another 4xx).
    Rejected {
        /// The status.
        status: u16,
        /// The body.
        body: bytes::Bytes,
    },
}

/// Whether an item status (and error type) is worth another try.
pub fn retryable_item(status: u16, error_type: &str) -> bool {
    status == 429
        || status >= 500
        || error_type == "es_rejected_execution_exception"
        || error_type == "rejected_execution_exception"
}

/// Sends `items` in one `_bulk` request within `budget`; `query` adds parameters
/// (`timeout`, `wait_for_active_shards`).
pub async fn send(
    client: &Client,
    items: &[&Item],
    budget: Duration,
    query: &[(String, String)],
) -> SendOutcome {
    let mut body = Vec::with_capacity(
        items
            .iter()
            .map(|i| i.source.as_ref().map_or(0, |s| s.len()) + 96)
            .sum(),
    );
    for item in items {
        body.extend_from_slice(&item.encode());
    }
    let mut req = Request::post("/_bulk")
        .body_with_type(body, "application/x-ndjson")
        .timeout(budget);
    for (k, v) in query {
        req = req.query(k.as_str(), v.as_str());
    }
    match client.send(req).await {
        Ok(resp) => parse_items(resp.body(), items.len()),
        Err(e) => match (e.kind(), e.status().map(|s| s.as_u16())) {
            (ErrorKind::Auth, Some(s)) => SendOutcome::Rejected {
                status: s,
                body: e.response().map(|r| r.body().clone()).unwrap_or_default(),
            },
            (ErrorKind::Status, Some(s)) if (400..500).contains(&s) && s != 408 && s != 429 => {
                SendOutcome::Rejected {
                    status: s,
                    body: e.response().map(|r| r.body().clone()).unwrap_or_default(),
                }
            }
            _ => SendOutcome::Retry(format!("{}: {e}", e.kind())),
        },
    }
}

/// Reads a full bulk response into one outcome per item.
pub fn parse_items(body: &[u8], expected: usize) -> SendOutcome {
    #[derive(serde::Deserialize)]
    struct Raw {
        items: Vec<Map<String, Value>>,
    }
    let raw: Raw = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return SendOutcome::Retry(format!("unreadable bulk response: {e}")),
    };
    if raw.items.len() != expected {
        return SendOutcome::Retry(format!(
            "the bulk response has {} items for {expected} sent",
            raw.items.len()
        ));
    }
    let items = raw
        .items
        .into_iter()
        .map(|wrapped| {
            let Some(Value::Object(body)) = wrapped.into_iter().next().map(|(_, v)| v) else {
                return ItemOutcome::Retry("an item of the bulk response is not an object".into());
            };
            let status = body
                .get("status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(500);
            let etype = body
                .get("error")
                .and_then(|e| e.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if retryable_item(status, etype) {
                let reason = body
                    .get("error")
                    .and_then(|e| e.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                ItemOutcome::Retry(format!("{status} {etype}: {reason}"))
            } else {
                ItemOutcome::Done { status, body }
            }
        })
        .collect();
    SendOutcome::Items(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_classified() {
        let body = br#"{"took":1,"errors":true,"items":[
            {"index":{"_index":"a","_id":"1","status":201,"result":"created"}},
            {"create":{"_index":"a","_id":"2","status":429,"error":{"type":"es_rejected_execution_exception","reason":"full"}}},
            {"index":{"_index":"a","_id":"3","status":400,"error":{"type":"mapper_parsing_exception","reason":"bad"}}},
            {"index":{"_index":"a","_id":"4","status":503,"error":{"type":"unavailable_shards_exception","reason":"x"}}}]}"#;
        let SendOutcome::Items(v) = parse_items(body, 4) else {
            panic!("items expected")
        };
        assert!(matches!(&v[0], ItemOutcome::Done { status: 201, .. }));
        assert!(matches!(&v[1], ItemOutcome::Retry(r) if r.contains("429")));
        assert!(matches!(&v[2], ItemOutcome::Done { status: 400, .. }));
        assert!(matches!(&v[3], ItemOutcome::Retry(_)));
        assert!(matches!(parse_items(body, 3), SendOutcome::Retry(_)));
        assert!(matches!(parse_items(b"<html>", 1), SendOutcome::Retry(_)));
    }
}
