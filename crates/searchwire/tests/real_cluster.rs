//! The client against real OpenSearch nodes (2.19 or 3.x) started by `scripts/cluster` (see
//! `harness/opensearch/README.md`): version detection, discovery and weighting, failover
//! when a node is killed or frozen, resurrection, and 429s from a tiny write pool. The
//! scenarios are shared with the Elasticsearch suite (`real_elasticsearch.rs`) in
//! `support/real.rs`.
//!
//! Expects the cluster CI starts:
//!
//! ```sh
//! SEARCHWIRE_CLUSTER_DIR=<dir> scripts/cluster start 3 -s thread_pool.write.size=1 \
//!   -s thread_pool.write.queue_size=1 -s 1:node.processors=1 -s 2:node.processors=2 \
//!   -s 3:node.processors=2
//! SEARCHWIRE_TEST_CLUSTER=http://127.0.0.1:9201,http://127.0.0.1:9202,http://127.0.0.1:9203 \
//!   SEARCHWIRE_REQUIRE_CLUSTER=1 SEARCHWIRE_CLUSTER_DIR=<dir> cargo test -p searchwire --test real_cluster
//! ```
//!
//! Without `SEARCHWIRE_TEST_CLUSTER` every test is skipped (a note on stderr), unless
//! `SEARCHWIRE_REQUIRE_CLUSTER=1`, which turns the skip into a failure. The tests share
//! one cluster and some kill or freeze node 3 (the only node ever disturbed), so they run
//! one at a time, and every disturbance is undone by a guard whose `Drop` resumes or
//! restarts the node and waits for the cluster to be whole again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::real::{self, run, OPENSEARCH};

#[test]
fn root_reports_opensearch_and_the_version_under_test() {
    run(
        &OPENSEARCH,
        "root_reports_opensearch_and_the_version_under_test",
        |c| async move {
            let expected = c.expected_version();
            for resp in real::root_on_every_node(&c).await {
                let v: Value = resp.json().unwrap();
                let number = v["version"]["number"].as_str().unwrap_or_default();
                assert_eq!(number, expected, "version.number from {}", resp.node());
                assert_eq!(
                    v["version"]["distribution"].as_str(),
                    Some("opensearch"),
                    "{v}"
                );
                assert_eq!(v["cluster_name"].as_str(), Some("searchwire-test"), "{v}");
            }
        },
    );
}

#[test]
fn discovery_reads_nodes_info_and_weights_by_cores() {
    run(
        &OPENSEARCH,
        "discovery_reads_nodes_info_and_weights_by_cores",
        // The CI contract: node.processors 1, 2, 2 on nodes 1, 2, 3.
        |c| async move { real::discovery_weights_by_cores(&c, [1, 2, 2]).await },
    );
}

#[test]
fn killed_node_fails_over_is_marked_dead_and_resurrected() {
    run(
        &OPENSEARCH,
        "killed_node_fails_over_is_marked_dead_and_resurrected",
        |c| async move { real::killed_node_fails_over_and_is_resurrected(&c).await },
    );
}

#[test]
fn paused_node_times_out_fails_over_and_is_resurrected() {
    run(
        &OPENSEARCH,
        "paused_node_times_out_fails_over_and_is_resurrected",
        |c| async move { real::paused_node_times_out_fails_over_and_is_resurrected(&c).await },
    );
}

#[test]
fn bulk_rejections_from_a_tiny_write_pool_reach_the_client() {
    run(
        &OPENSEARCH,
        "bulk_rejections_from_a_tiny_write_pool_reach_the_client",
        |c| async move {
            // OpenSearch renamed the type; accept the Elasticsearch name too (older forks).
            real::bulk_rejections(
                &c,
                &[
                    "rejected_execution_exception",
                    "es_rejected_execution_exception",
                ],
            )
            .await;
        },
    );
}

#[test]
fn a_request_the_server_holds_open_times_out_without_ejecting_the_node() {
    run(
        &OPENSEARCH,
        "a_request_the_server_holds_open_times_out_without_ejecting_the_node",
        |c| async move { real::slow_request_keeps_the_node_alive(&c).await },
    );
}
