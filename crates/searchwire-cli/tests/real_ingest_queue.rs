//! The ingest's durable queue against the three real OpenSearch nodes and `searchwire ingest --queue-dir`: every
//! node stopped (SIGSTOP), 10,000 low-priority then 10,000 high-priority documents are
//! ingested into the embedded queue; the nodes resume, `searchwire queue deliver` drains the
//! queue to zero, and the one-shard index holds exactly the 20,000 ids, each once; of what
//! delivery wrote (requests sent into the stopped nodes' socket buffers land at resume; the
//! test waits until the nodes answered them all, then leaves them out), every high-priority
//! document precedes every low-priority one by `_seq_no`, and within a priority only
//! documents retried by class are out of arrival order (printed; the nodes' write queue of 1
//! throttles). Gated like `real_outage.rs`; run only under the
//! machine-wide cluster lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;

use std::process::Stdio;
use std::time::Duration;

use real_support::{
    cluster_cmd, create_ordered_index, landed, settled_after_outage, Landed, ResumeAll, BIN,
    OPENSEARCH,
};
use searchwire::{Client, Request};
use serde_json::Value;

const INDEX: &str = "sw-ingest-queue";
const N: usize = 10_000;

async fn run(args: &[&str], code: i32) -> Value {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env("SEARCHWIRE_REQUEST_TIMEOUT", "1s")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("finished within 60 s")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

#[test]
fn an_ingest_while_every_node_is_stopped_completes_into_the_queue_and_drains_in_order() {
    let Some(urls) = OPENSEARCH.urls("real_ingest_queue") else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let joined = urls.join(",");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        create_ordered_index(&client, INDEX).await;
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("queue");
        let q = queue.to_str().unwrap();
        for name in ["lo", "hi"] {
            let mut s = String::new();
            for i in 0..N {
                s.push_str(&format!(
                    "{{\"id\":\"{name}-{i:05}\",\"p\":\"{name}\",\"n\":{i}}}\n"
                ));
            }
            std::fs::write(dir.path().join(name), s).unwrap();
        }

        let resume = ResumeAll;
        for n in ["1", "2", "3"] {
            let (ok, out) = cluster_cmd(&["pause", n]);
            assert!(ok, "pause {n}: {out}");
        }
        // Low priority first, so high-first delivery is not arrival order.
        for (name, prio) in [("lo", "1"), ("hi", "9")] {
            let input = dir.path().join(name);
            let s = run(
                &[
                    "ingest",
                    input.to_str().unwrap(),
                    "--url",
                    &joined,
                    "--index",
                    INDEX,
                    "--id-field",
                    "id",
                    "--queue-dir",
                    q,
                    "--priority",
                    prio,
                    "--timeout",
                    "1s",
                    "--connection-retries",
                    "0",
                    "--unavailable-retries",
                    "0",
                    "--queue-after",
                    "2s",
                    "--concurrency",
                    "1",
                    "--drain-timeout",
                    "0s",
                ],
                6,
            ) // completed, messages left queued
            .await;
            assert_eq!(s["dead_letters"], 0, "{s}");
            assert_eq!(s["queue"]["queued"], N, "{s}");
        }
        drop(resume); // every node resumes

        // What the stopped nodes had in their socket buffers (bulks the ingest sent before
        // its requests timed out) lands now: wait until the nodes answered all of it, so
        // delivery below writes after it (real_support::settled_after_outage). This test
        // holds no connection meanwhile.
        drop(client);
        let (open, tasks, pre) = settled_after_outage(&urls, INDEX).await;
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        // The `_seq_no` above which delivery wrote.
        let mut pre_max = None;
        for name in ["lo", "hi"] {
            let top = landed(&client, INDEX, name)
                .await
                .iter()
                .map(|d| d.seq_no)
                .max();
            pre_max = pre_max.max(top);
        }

        let r = run(
            &[
                "queue",
                "deliver",
                "--queue-dir",
                q,
                "--url",
                &joined,
                "--concurrency",
                "1",
                "--json",
            ],
            0,
        )
        .await;
        assert_eq!(r["delivered"], 2 * N, "{r}");
        assert_eq!(r["left"], 0, "{r}");
        client
            .send(Request::post(format!("/{INDEX}/_refresh")))
            .await
            .unwrap();
        let (lo, hi) = (
            landed(&client, INDEX, "lo").await,
            landed(&client, INDEX, "hi").await,
        );
        for (name, docs) in [("lo", &lo), ("hi", &hi)] {
            assert_eq!(docs.len(), N);
            for (i, d) in docs.iter().enumerate() {
                assert_eq!(d.id, format!("{name}-{i:05}"));
                assert_eq!(d.version, 1, "written once: {d:?}");
            }
        }
        let by_delivery = |v: &[Landed]| -> Vec<u64> {
            v.iter()
                .map(|d| d.seq_no)
                .filter(|s| pre_max.is_none_or(|m| *s > m))
                .collect()
        };
        let (lo_d, hi_d) = (by_delivery(&lo), by_delivery(&hi));
        // Within a priority, a throttled item retried by class goes behind (the test nodes
        // have a write queue of 1): count the documents written after a later arrival.
        let behind = |v: &[u64]| v.windows(2).filter(|w| w[0] > w[1]).count();
        if let (Some(h), Some(l)) = (hi_d.iter().max(), lo_d.iter().min()) {
            assert!(
                h < l,
                "high priority first: a low document at {l}, a high one at {h}"
            );
        }
        eprintln!(
            "{pre} documents landed from the stopped nodes' buffers ({open} HTTP connections \
             and {tasks} bulk tasks open at resume); delivery wrote {} high ({} behind a later \
             arrival), {} low ({} behind); {r}",
            hi_d.len(),
            behind(&hi_d),
            lo_d.len(),
            behind(&lo_d)
        );
    });
}
