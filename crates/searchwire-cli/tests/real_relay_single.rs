//! The relay's single-document answers next to a real OpenSearch node's for the same calls:
//! one index written directly, a twin written through `searchwire relay`, the same calls to
//! both — index, overwrite, `refresh=true`, `_create` and `op_type=create` conflicts, an
//! `if_seq_no` conflict and a matching one, external versions, deletes (found and missing),
//! partial updates (`doc`, a noop, a missing document, `doc_as_upsert`, `upsert`), a mapping
//! error, `filter_path`, parameter values the cluster refuses, an unknown parameter, a wrong
//! method and a bad index name — and the answers compared field by field, the status first.
//! Only what must differ is left out: the index name (replaced by `<index>`), `index_uuid`,
//! the values of `_seq_no`/`_primary_term` (compared as present numbers), and the order of the
//! methods a 405 lists.
//!
//! Gated like the other real-node tests: skipped without `SEARCHWIRE_TEST_CLUSTER` unless
//! `SEARCHWIRE_REQUIRE_CLUSTER=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fidelity_support;
mod real_support;
mod relay_support;

use std::net::SocketAddr;

use searchwire::Client;

use fidelity_support::{assert_same, steady_index, twins};
use real_support::{tmp, OPENSEARCH};
use relay_support::{free_port, http, spawn_relay, terminate};
use serde_json::{json, Value};

const DIRECT: &str = "sw-single-direct";
const RELAYED: &str = "sw-single-relay";

/// One call's answer: status, the body as sent (index name replaced) and normalized.
struct Answer {
    status: u16,
    raw: Value,
    norm: Value,
}

async fn call(addr: SocketAddr, index: &str, method: &str, path: &str, body: &str) -> Answer {
    let path = path.replace("{index}", index);
    let (status, text) = http(addr, method, &path, body.as_bytes())
        .await
        .unwrap_or_else(|| panic!("no answer from {addr} for {method} {path}"));
    let raw: Value = serde_json::from_str(&text.replace(index, "<index>"))
        .unwrap_or_else(|e| panic!("{addr} {method} {path}: not JSON ({e}): {text}"));
    let mut norm = raw.clone();
    normalize(&mut norm);
    Answer { status, raw, norm }
}

fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "index_uuid" if x.is_string() => *x = Value::from("<uuid>"),
                    "_seq_no" | "_primary_term" | "took" if x.is_number() => {
                        *x = Value::from("<number>")
                    }
                    "error" if x.is_string() => {
                        *x = Value::from(allowed_sorted(x.as_str().unwrap_or("")))
                    }
                    _ => normalize(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// A 405's `allowed: [PUT, POST]` in one order: OpenSearch lists them from a hash set, in
/// an order that changes from one node start to the next.
fn allowed_sorted(error: &str) -> String {
    let Some((head, rest)) = error.split_once("allowed: [") else {
        return error.to_owned();
    };
    let (list, tail) = rest.split_once(']').unwrap_or((rest, ""));
    let mut methods: Vec<&str> = list.split(", ").collect();
    methods.sort_unstable();
    format!("{head}allowed: [{}]{tail}", methods.join(", "))
}

struct Pair {
    node: SocketAddr,
    relay: SocketAddr,
}

impl Pair {
    /// The same call to the node and to the relay, each for its own index; `path` holds
    /// `{index}`. Asserts the same status and the same answer; returns both raw answers.
    async fn same(&self, method: &str, path: &str, body: &str) -> (Value, Value) {
        let d = call(self.node, DIRECT, method, path, body).await;
        let r = call(self.relay, RELAYED, method, path, body).await;
        let what = format!("{method} {path} {body}");
        assert_eq!(
            d.status, r.status,
            "{what}: HTTP status: direct {}, relayed {}",
            d.raw, r.raw
        );
        assert_same(&what, &d.norm, &r.norm);
        (d.raw, r.raw)
    }

    /// The same call, with the path made from each side's own earlier answer (its `_seq_no`).
    async fn same_with_seq(
        &self,
        method: &str,
        path: impl Fn(u64) -> String,
        seqs: (u64, u64),
        body: &str,
    ) {
        let d = call(self.node, DIRECT, method, &path(seqs.0), body).await;
        let r = call(self.relay, RELAYED, method, &path(seqs.1), body).await;
        assert_eq!(
            d.status,
            r.status,
            "{}: direct {}, relayed {}",
            path(0),
            d.raw,
            r.raw
        );
        // The conflict reason names each side's own numbers.
        let (mut dn, mut rn) = (d.norm, r.norm);
        for v in [&mut dn, &mut rn] {
            strip_numbers(v);
        }
        assert_same(&path(0), &dn, &rn);
    }

    /// Status and error type only: the relay refuses these itself, in its own words.
    async fn same_kind(&self, method: &str, path: &str, body: &str) {
        let d = call(self.node, DIRECT, method, path, body).await;
        let r = call(self.relay, RELAYED, method, path, body).await;
        assert_eq!(
            (d.status, &d.raw["error"]["type"]),
            (r.status, &r.raw["error"]["type"]),
            "{method} {path} {body:?}: direct {}, relayed {}",
            d.raw,
            r.raw
        );
    }
}

/// Digits out of `reason`s (the seqNo values differ between the two indices).
fn strip_numbers(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), x.as_str()) {
                    ("reason", Some(s)) => {
                        *x = Value::from(s.replace(|c: char| c.is_ascii_digit(), "#"))
                    }
                    _ => strip_numbers(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_numbers),
        _ => {}
    }
}

fn seq(v: &Value) -> u64 {
    v["_seq_no"]
        .as_u64()
        .unwrap_or_else(|| panic!("no _seq_no in {v}"))
}

#[test]
fn the_relay_answers_single_document_writes_as_opensearch_does() {
    let Some(urls) = OPENSEARCH.urls("real_relay_single") else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let (node, relay) = twins(&urls, DIRECT, RELAYED, "single-queue").await;
        let p = Pair {
            node,
            relay: relay.addr,
        };

        // Index, overwrite, refresh.
        p.same("PUT", "/{index}/_doc/1", "{\"n\":1}").await;
        p.same("POST", "/{index}/_doc/1", "{\"n\":2}").await;
        let (d, r) = p
            .same("PUT", "/{index}/_doc/1?refresh=true", "{\"n\":3}")
            .await;
        assert_eq!(r["forced_refresh"], true, "{r}");
        let seqs = (seq(&d), seq(&r));
        // Conflicts.
        let (d, _) = p.same("PUT", "/{index}/_create/1", "{\"n\":1}").await;
        assert_eq!(d["status"], 409, "{d}");
        p.same("POST", "/{index}/_create/2", "{\"n\":1}").await;
        p.same("PUT", "/{index}/_doc/1?op_type=create", "{\"n\":1}")
            .await;
        // Compare-and-set: a stale seqNo, a missing document, then the right one.
        p.same_with_seq(
            "PUT",
            |s| format!("/{{index}}/_doc/1?if_seq_no={}&if_primary_term=1", s + 100),
            seqs,
            "{\"n\":4}",
        )
        .await;
        p.same(
            "PUT",
            "/{index}/_doc/nope?if_seq_no=0&if_primary_term=1",
            "{\"n\":4}",
        )
        .await;
        p.same_with_seq(
            "PUT",
            |s| format!("/{{index}}/_doc/1?if_seq_no={s}&if_primary_term=1"),
            seqs,
            "{\"n\":5}",
        )
        .await;
        // External versions.
        p.same(
            "PUT",
            "/{index}/_doc/3?version=5&version_type=external",
            "{\"n\":1}",
        )
        .await;
        let (d, _) = p
            .same(
                "PUT",
                "/{index}/_doc/3?version=5&version_type=external",
                "{\"n\":1}",
            )
            .await;
        assert_eq!(d["status"], 409, "{d}");
        p.same(
            "PUT",
            "/{index}/_doc/3?version=5&version_type=external_gte",
            "{\"n\":1}",
        )
        .await;
        p.same("PUT", "/{index}/_doc/3?version=5", "{\"n\":1}")
            .await;
        // Deletes.
        p.same("DELETE", "/{index}/_doc/3", "").await;
        let (d, _) = p.same("DELETE", "/{index}/_doc/missing", "").await;
        assert_eq!(d["result"], "not_found", "{d}");
        // Partial updates.
        p.same("POST", "/{index}/_update/1", "{\"doc\":{\"n\":6}}")
            .await;
        let (d, _) = p
            .same("POST", "/{index}/_update/1", "{\"doc\":{\"n\":6}}")
            .await;
        assert_eq!(d["result"], "noop", "{d}");
        p.same("POST", "/{index}/_update/u", "{\"doc\":{\"n\":1}}")
            .await;
        p.same(
            "POST",
            "/{index}/_update/u",
            "{\"doc\":{\"n\":1},\"doc_as_upsert\":true}",
        )
        .await;
        p.same(
            "POST",
            "/{index}/_update/v?retry_on_conflict=2",
            "{\"doc\":{\"n\":2},\"upsert\":{\"n\":1}}",
        )
        .await;
        p.same(
            "POST",
            "/{index}/_update/v",
            "{\"doc\":{\"n\":3},\"upsert\":{\"n\":1}}",
        )
        .await;
        // A mapping error keeps its cause.
        let (d, _) = p
            .same("PUT", "/{index}/_doc/4", "{\"n\":\"not a number\"}")
            .await;
        assert_eq!(d["error"]["type"], "mapper_parsing_exception", "{d}");
        // `filter_path` on a success answer; not on an error answer.
        p.same("PUT", "/{index}/_doc/5?filter_path=_id,result", "{\"n\":1}")
            .await;
        p.same("DELETE", "/{index}/_doc/none?filter_path=result", "")
            .await;
        p.same("PUT", "/{index}/_create/5?filter_path=result", "{\"n\":1}")
            .await;
        p.same(
            "PUT",
            "/{index}/_doc/6?filter_path=-_shards,-_version",
            "{\"n\":1}",
        )
        .await;
        // Values the cluster refuses: its own 400.
        p.same(
            "PUT",
            "/{index}/_doc/7?wait_for_active_shards=bogus",
            "{\"n\":1}",
        )
        .await;
        p.same("PUT", "/{index}/_doc/7?refresh=bogus", "{\"n\":1}")
            .await;
        // What the relay refuses itself, as the cluster does.
        p.same("PUT", "/{index}/_doc/7?bogus=1", "{\"n\":1}").await;
        p.same("PUT", "/{index}/_doc/7?op_type=bogus", "{\"n\":1}")
            .await;
        p.same("GET", "/{index}/_create/7", "").await;
        p.same("PUT", "/{index}/_doc", "{\"n\":1}").await;
        p.same("GET", "/{index}/_update/7", "").await;
        p.same("PUT", "/BAD/_doc/7", "{\"n\":1}").await;
        p.same("PUT", "/_bad/_doc/7", "{\"n\":1}").await;
        let long = "x".repeat(513);
        p.same("PUT", &format!("/{{index}}/_doc/{long}"), "{\"n\":1}")
            .await;
        p.same(
            "POST",
            &format!("/{{index}}/_update/{long}"),
            "{\"doc\":{}}",
        )
        .await;
        p.same("DELETE", &format!("/{{index}}/_doc/{long}"), "")
            .await;
        for bad in ["a*b", "a:b", "a%23b", "a%20b", "a,b"] {
            p.same("PUT", &format!("/{bad}/_doc/7"), "{\"n\":1}").await;
        }
        p.same("POST", "/{index}/_update/7", "{}").await;
        p.same_kind("PUT", "/{index}/_doc/7", "").await;
        p.same_kind("PUT", "/{index}/_doc/7", "not json").await;
        p.same_kind("POST", "/{index}/_update/7", "{\"doc\":{},\"bogus\":1}")
            .await;
        // The id the relay assigns: a UUIDv7 where OpenSearch makes its own; the rest alike.
        let d = call(node, DIRECT, "POST", "/{index}/_doc", "{\"n\":1}").await;
        let r = call(relay.addr, RELAYED, "POST", "/{index}/_doc", "{\"n\":1}").await;
        assert_eq!((d.status, r.status), (201, 201), "{} / {}", d.raw, r.raw);
        let id = r.raw["_id"].as_str().unwrap();
        assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 7);
        let (mut dn, mut rn) = (d.norm, r.norm);
        dn["_id"] = Value::Null;
        rn["_id"] = Value::Null;
        assert_same("POST /{index}/_doc", &dn, &rn);

        let (status, h) = http(relay.addr, "GET", "/health/retry-queue", b"")
            .await
            .unwrap();
        assert_eq!(status, 200, "{h}");
        let h: Value = serde_json::from_str(&h).unwrap();
        assert_eq!(h["backlog"], 0, "nothing was queued: {h}");
        terminate(relay).await;
    });
}

/// `filter_path` on bulk answers, the relay's next to the node's: the forms clients send
/// (go-docappender's, `items.*.error`, `took,errors,items.*.status`), exclusions, `**`, and
/// a filter that matches nothing.
#[test]
fn the_relay_filters_bulk_answers_as_opensearch_does() {
    let Some(urls) = OPENSEARCH.urls("real_relay_single") else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let (direct, relayed) = ("sw-filter-direct", "sw-filter-relay");
        let (node, relay) = twins(&urls, direct, relayed, "filter-queue").await;
        let body = concat!(
            "{\"index\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
            "{\"create\":{\"_id\":\"1\"}}\n{\"n\":1}\n",
            "{\"delete\":{\"_id\":\"missing\"}}\n",
            "{\"index\":{\"_id\":\"2\"}}\n{\"n\":\"not a number\"}\n",
        );
        for filter in [
            "items.*._index,items.*.status,items.*.error.type,items.*.error.reason",
            "items.*._index,items.*.status,items.*.failure_store,items.*.error.type,items.*.error.reason",
            "items.*.error",
            "took,errors,items.*.status",
            "errors,items.*.status,items.*.result,items.*.error.type,items.*.error.reason",
            "-took",
            "-items.*._shards,-took",
            "-items.*.error.*",
            "items.*.status,-items.*.status",
            "errors,-items",
            "**.status",
            "items.**.type",
            "*.*._id",
            "items.*._shards.*",
            "nomatch",
        ] {
            let path = format!("/{{index}}/_bulk?filter_path={}", filter.replace(',', "%2C"));
            let d = call(node, direct, "POST", &path, body).await;
            let r = call(relay.addr, relayed, "POST", &path, body).await;
            assert_eq!((d.status, r.status), (200, 200), "{filter}: {} / {}", d.raw, r.raw);
            assert_same(&format!("filter_path={filter}"), &d.norm, &r.norm);
        }
        terminate(relay).await;
    });
}

const OS_SINGLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/os_single.py");

/// The unmodified opensearch-py client's `index`, `create`, `update` and `delete`: through
/// a relay in front of the real nodes they return what the cluster says (409 and 404 as its
/// exceptions); through a relay whose cluster cannot be reached every one returns the queued
/// answer (202), no exception.
#[test]
fn opensearch_py_single_document_calls_work_through_the_relay() {
    let Some(urls) = OPENSEARCH.urls("real_relay_single") else {
        return;
    };
    let Some(python) = real_support::python_venv(
        &OPENSEARCH,
        "os-py-venv",
        "opensearch-py>=3,<4",
        "import opensearchpy",
    ) else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let index = "sw-single-py";
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        steady_index(&client, index).await;
        let live = spawn_relay(&urls.join(","), &tmp("py-live-queue"), free_port(), &[]).await;
        // Nothing listens on a freed port: every node of this relay is down.
        let nowhere = format!("http://127.0.0.1:{}", free_port());
        let down = spawn_relay(
            &nowhere,
            &tmp("py-down-queue"),
            free_port(),
            &["--present-as", "opensearch", "--live-budget", "1s"],
        )
        .await;
        let out = tokio::process::Command::new(&python)
            .args([
                OS_SINGLE,
                &format!("http://{}", live.addr),
                &format!("http://{}", down.addr),
                index,
            ])
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        let live_out = &v["live"];
        assert_eq!(live_out["index"]["result"], "created", "{v}");
        assert_eq!(live_out["index_auto_id"]["result"], "created", "{v}");
        assert_eq!(live_out["create"]["result"], "created", "{v}");
        assert_eq!(
            live_out["create_again"],
            json!({"status": 409, "error": "version_conflict_engine_exception"}),
            "{v}"
        );
        assert_eq!(
            (
                &live_out["update"]["result"],
                &live_out["update"]["_version"]
            ),
            (&json!("updated"), &json!(2)),
            "{v}"
        );
        assert_eq!(live_out["delete"]["result"], "deleted", "{v}");
        assert_eq!(live_out["delete_missing"]["status"], 404, "{v}");
        for (call, answer) in v["down"].as_object().unwrap() {
            assert_eq!(answer["result"], "queued", "{call}: {v}");
        }
        let id = v["down"]["index_auto_id"]["_id"].as_str().unwrap();
        assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 7);
        terminate(down).await;
        terminate(live).await;
    });
}
