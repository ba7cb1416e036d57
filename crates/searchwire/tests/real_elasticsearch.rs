//! The client against real Elasticsearch nodes (8.19 or 9.x) started by `scripts/cluster
//! --engine elasticsearch` (see `harness/elasticsearch/README.md`): version and product detection,
//! the capability probe, discovery and weighting, failover when a node is killed or frozen,
//! resurrection, and bulk items rejected by a tiny write pool with Elasticsearch's
//! `es_rejected_execution_exception`, and the `compatible-with` media types of the official
//! clients (8 and, on 9.x, 9) passed through unchanged. The scenarios are those of the OpenSearch suite
//! (`real_cluster.rs`), shared in `support/real.rs`.
//!
//! Expects the cluster CI starts (HTTP ports 9221-9223, beside OpenSearch's 9201-9203):
//!
//! ```sh
//! SEARCHWIRE_ES_CLUSTER_DIR=<dir> scripts/cluster --engine elasticsearch start 3 \
//!   -s thread_pool.write.size=1 -s thread_pool.write.queue_size=1 \
//!   -s 1:node.processors=1 -s 2:node.processors=2 -s 3:node.processors=2
//! SEARCHWIRE_TEST_ES_CLUSTER=http://127.0.0.1:9221,http://127.0.0.1:9222,http://127.0.0.1:9223 \
//!   SEARCHWIRE_REQUIRE_ES_CLUSTER=1 SEARCHWIRE_ES_CLUSTER_DIR=<dir> \
//!   cargo test -p searchwire --test real_elasticsearch
//! ```
//!
//! Without `SEARCHWIRE_TEST_ES_CLUSTER` every test is skipped (a note on stderr), unless
//! `SEARCHWIRE_REQUIRE_ES_CLUSTER=1`, which turns the skip into a failure. Node 3 is the
//! only node ever disturbed; every disturbance is undone by a guard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use searchwire::{Capability, ClusterStatus, Request};
use serde_json::Value;
use support::real::{self, run, secs, ELASTICSEARCH};

#[test]
fn root_reports_elasticsearch_the_version_under_test_and_the_product_header() {
    run(
        &ELASTICSEARCH,
        "root_reports_elasticsearch_the_version_under_test_and_the_product_header",
        |c| async move {
            let expected = c.expected_version();
            for resp in real::root_on_every_node(&c).await {
                let v: Value = resp.json().unwrap();
                let number = v["version"]["number"].as_str().unwrap_or_default();
                assert_eq!(number, expected, "version.number from {}", resp.node());
                // What sets Elasticsearch apart from OpenSearch on `GET /`.
                assert!(v["version"].get("distribution").is_none(), "{v}");
                assert_eq!(
                    v["version"]["build_flavor"].as_str(),
                    Some("default"),
                    "{v}"
                );
                assert_eq!(v["tagline"].as_str(), Some("You Know, for Search"), "{v}");
                assert_eq!(v["cluster_name"].as_str(), Some("searchwire-test"), "{v}");
                let product = resp
                    .headers()
                    .get("x-elastic-product")
                    .and_then(|h| h.to_str().ok());
                assert_eq!(product, Some("Elasticsearch"), "{:?}", resp.headers());
            }
        },
    );
}

#[test]
fn health_detects_elasticsearch_its_version_and_the_capability() {
    run(
        &ELASTICSEARCH,
        "health_detects_elasticsearch_its_version_and_the_capability",
        |c| async move {
            c.preflight().await;
            let expected = c.expected_version();
            let client = c.builder().attempt_timeout(secs(10)).build().unwrap();
            let report = client.check_all().await;
            eprintln!("  report: {report:?}");
            assert_eq!(report.nodes.len(), 3, "{report:?}");
            for n in &report.nodes {
                assert!(n.alive, "{n:?}");
                assert!(n.error.is_none(), "{n:?}");
                assert_eq!(n.distribution.as_deref(), Some("elasticsearch"), "{n:?}");
                assert_eq!(n.version.as_deref(), Some(expected.as_str()), "{n:?}");
                assert_eq!(n.cluster_name.as_deref(), Some("searchwire-test"), "{n:?}");
                // The probe: `/_cluster/health?local=true` answered (no security here).
                assert_eq!(n.capability, Capability::Available, "{n:?}");
                let h = n.cluster_health.as_ref().unwrap();
                assert_eq!(h.number_of_nodes, 3, "{h:?}");
            }
            assert!(
                matches!(
                    report.status(),
                    ClusterStatus::Green | ClusterStatus::Yellow
                ),
                "{report:?}"
            );
            assert_eq!(report.cluster_name(), Some("searchwire-test"));

            // What the client stored: every node's capability and the freshest answer.
            let stored = client.cluster_health();
            assert!(stored.latest.is_some(), "{stored:?}");
            for n in &stored.nodes {
                assert_eq!(n.capability, Capability::Available, "{n:?}");
                assert_eq!(n.distribution.as_deref(), Some("elasticsearch"), "{n:?}");
            }
        },
    );
}

#[test]
fn discovery_reads_nodes_info_and_weights_by_cores() {
    run(
        &ELASTICSEARCH,
        "discovery_reads_nodes_info_and_weights_by_cores",
        // The CI contract: node.processors 1, 2, 2 on nodes 1, 2, 3.
        |c| async move { real::discovery_weights_by_cores(&c, [1, 2, 2]).await },
    );
}

#[test]
fn killed_node_fails_over_is_marked_dead_and_resurrected() {
    run(
        &ELASTICSEARCH,
        "killed_node_fails_over_is_marked_dead_and_resurrected",
        |c| async move { real::killed_node_fails_over_and_is_resurrected(&c).await },
    );
}

#[test]
fn paused_node_times_out_fails_over_and_is_resurrected() {
    run(
        &ELASTICSEARCH,
        "paused_node_times_out_fails_over_and_is_resurrected",
        |c| async move { real::paused_node_times_out_fails_over_and_is_resurrected(&c).await },
    );
}

#[test]
fn bulk_items_rejected_with_es_rejected_execution_exception_are_throttling() {
    run(
        &ELASTICSEARCH,
        "bulk_items_rejected_with_es_rejected_execution_exception_are_throttling",
        |c| async move {
            let seen = real::bulk_rejections(&c, &["es_rejected_execution_exception"]).await;
            let sample = seen.sample.unwrap();
            assert_eq!(sample["status"].as_u64(), Some(429), "{sample}");
            let reason = sample["error"]["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("rejected execution"), "{sample}");
            assert!(reason.contains("write"), "names the write pool: {sample}");
            // Elasticsearch never uses OpenSearch's name for the rejection.
            assert!(
                !seen
                    .other_429s
                    .iter()
                    .any(|(ty, _)| ty == "rejected_execution_exception"),
                "{:?}",
                seen.other_429s.first()
            );
        },
    );
}

#[test]
fn compatible_with_media_types_pass_through() {
    run(
        &ELASTICSEARCH,
        "compatible_with_media_types_pass_through",
        |c| async move {
            c.preflight().await;
            let client = c.builder().attempt_timeout(secs(10)).build().unwrap();
            // What the official clients send: a versioned media type on both sides, of the
            // client's major. A server answers its own major and the one before (9.x takes
            // the 8.x clients' requests too).
            let major = c.major();
            for with in [major - 1, major].into_iter().filter(|m| *m >= 8) {
                compatible_bulk_and_search(&client, with).await;
            }
            // A major the server cannot answer in is refused with a 400.
            let resp = client
                .send(Request::get("/").header(
                    "accept",
                    &format!(
                        "application/vnd.elasticsearch+json; compatible-with={}",
                        major + 1
                    ),
                ))
                .await;
            let status = match &resp {
                Ok(r) => r.status().as_u16(),
                Err(e) => e.status().map_or(0, |s| s.as_u16()),
            };
            assert_eq!(status, 400, "{resp:?}");
        },
    );
}

/// A bulk then a search in `compatible-with={with}` media types: both succeed and are
/// answered in the versioned media type.
async fn compatible_bulk_and_search(client: &searchwire::Client, with: u32) {
    let json = format!("application/vnd.elasticsearch+json; compatible-with={with}");
    let ndjson = format!("application/vnd.elasticsearch+x-ndjson; compatible-with={with}");
    let index = format!("sw-compat-{with}-{:08x}", fastrand::u32(..));
    let resp = client
        .send(
            Request::post(format!("/{index}/_bulk"))
                .query("refresh", "true")
                .header("accept", json.as_str())
                .body_with_type(
                    "{\"index\":{\"_id\":\"1\"}}\n{\"msg\":\"compatible\"}\n",
                    ndjson.as_str(),
                )
                .idempotent(true),
        )
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        200,
        "compatible-with={with}: {}",
        resp.text()
    );
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("application/vnd.elasticsearch+json"),
        "the server answers in the media type asked for: {content_type}"
    );
    let v: Value = resp.json().unwrap();
    assert_eq!(v["errors"], Value::Bool(false), "{v}");

    let resp = client
        .send(
            Request::post(format!("/{index}/_search"))
                .header("accept", json.as_str())
                .body_with_type(r#"{"query":{"match":{"msg":"compatible"}}}"#, json.as_str()),
        )
        .await
        .unwrap();
    let v: Value = resp.json().unwrap();
    assert_eq!(v["hits"]["total"]["value"].as_u64(), Some(1), "{v}");
    client
        .send(Request::delete(format!("/{index}")))
        .await
        .unwrap();
}
