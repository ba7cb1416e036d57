//! A whole-cluster outage behind the relay, on the three real OpenSearch nodes: while every node is stopped (SIGSTOP,
//! `scripts/cluster pause`), 20,000 documents go through `searchwire relay` with two
//! priorities (`X-Searchwire-Priority`, interleaved requests) and every one is answered
//! `queued`; after the nodes come back a second relay on the same queue drains it to zero,
//! and the one-shard index holds exactly the 20,000 ids, each written once (`_version` 1 of a
//! `create`), in the order the delivery loop guarantees (docs/architecture/relay.md, "Delivery order,
//! exactly"), read from `_seq_no`:
//! - every high-priority document was written before any low-priority one (the priority
//!   barrier; every message was due when delivery started);
//!
//! Both rules are about what delivery writes. Requests sent while the nodes were stopped (the
//! first try, a half-open probe) sit in the nodes' socket buffers and are applied when the
//! nodes resume — the ambiguous failures the relay queued anyway, later answered 409 and
//! counted as delivered. The documents already in the index before delivery starts are
//! therefore left out of the order checks (they are still counted and checked once each).
//! - within a priority, in lease order (`retry_at`, then arrival: what the first relay tried
//!   and rescheduled during the outage comes later), a document is written after a later one
//!   only when both were in requests in flight together or it was retried by class. The
//!   draining relay runs with `--bulk-concurrency 1`, so the requests in flight together are
//!   one request (`--delivery-batch`, 500 positions): the documents written "late" by more
//!   than that window are at most the item retries the relay's metrics count. With more
//!   requests in flight, one slow request lets the others carry any number of later
//!   positions past it, so no fixed window would bound what is in flight together.
//!
//! Gated like `real_relay.rs`; run only under the machine-wide cluster lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;
mod relay_support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use real_support::{
    cluster_cmd, cluster_health, create_ordered_index, landed, refreshed_count,
    settled_after_outage, Landed, ResumeAll, OPENSEARCH,
};
use relay_support::{
    free_port, health, http, http_with, spawn_relay, terminate, wait_drained, BIN,
};
use searchwire::Client;
use serde_json::Value;
use tokio::time::Instant;

const INDEX: &str = "sw-outage";
const PER_REQUEST: usize = 500;
const REQUESTS: usize = 40;
/// `--delivery-batch` (500, the default) × `--bulk-concurrency 1` of the draining relay.
const WINDOW: usize = 500;

/// `searchwire queue stats --json` of the embedded queue in `dir` (no relay may hold it).
fn queue_stats(dir: &std::path::Path) -> Value {
    let out = std::process::Command::new(BIN)
        .args(["queue", "stats", "--json", "--queue-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Document id → its place in lease order (priority, then `retry_at`, then arrival), from
/// `searchwire queue list --json` of the embedded queue in `dir`.
fn lease_order(dir: &std::path::Path) -> HashMap<String, usize> {
    let out = std::process::Command::new(BIN)
        .args([
            "queue",
            "list",
            "--json",
            "--limit",
            "100000",
            "--queue-dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut msgs: Vec<(i64, String, u64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let m: Value = serde_json::from_str(l).unwrap();
            let payload = m["payload"].as_str().unwrap();
            let action: Value = serde_json::from_str(payload.lines().next().unwrap()).unwrap();
            (
                -m["priority"].as_i64().unwrap(),
                m["retry_at"].as_str().unwrap().to_owned(),
                m["id"].as_u64().unwrap(),
                action["create"]["_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    msgs.sort();
    msgs.into_iter()
        .enumerate()
        .map(|(i, m)| (m.3, i))
        .collect()
}

/// Documents written after some document that arrived more than [`WINDOW`] places later.
fn late_beyond_window(seq: &[u64]) -> usize {
    // suffix[i] = the smallest seq_no from position i on.
    let mut suffix = vec![u64::MAX; seq.len() + 1];
    for i in (0..seq.len()).rev() {
        suffix[i] = suffix[i + 1].min(seq[i]);
    }
    (0..seq.len())
        .filter(|&i| i + WINDOW < seq.len() && suffix[i + WINDOW] < seq[i])
        .count()
}

fn retried_items(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("searchwire_bulk_docs_retried_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn an_ingest_during_a_full_outage_is_queued_then_delivered_once_in_priority_order() {
    let Some(urls) = OPENSEARCH.urls("real_outage") else {
        return;
    };
    let rt = real_support::runtime();
    rt.block_on(async {
        let t0 = Instant::now();
        let joined = urls.join(",");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        create_ordered_index(&client, INDEX).await;
        let dir = tempfile::tempdir().unwrap();
        let relay = spawn_relay(&joined, dir.path(), free_port(), &["--live-budget", "2s"]).await;

        // Every node stopped.
        let resume = ResumeAll;
        for n in ["1", "2", "3"] {
            let (ok, out) = cluster_cmd(&["pause", n]);
            assert!(ok, "pause {n}: {out}");
        }
        // Interleaved requests: low 0, high 0, low 1, high 1, ...
        let (mut lo, mut hi) = (0usize, 0usize);
        for r in 0..REQUESTS {
            let (name, prio, k) = if r % 2 == 0 {
                ("lo", "1", &mut lo)
            } else {
                ("hi", "9", &mut hi)
            };
            let mut body = String::new();
            for _ in 0..PER_REQUEST {
                body.push_str(&format!(
                    "{{\"create\":{{\"_index\":\"{INDEX}\",\"_id\":\"{name}-{:05}\"}}}}\n{{\"p\":\"{name}\",\"n\":{}}}\n",
                    *k, *k
                ));
                *k += 1;
            }
            let (status, text) = http_with(
                relay.addr,
                "POST",
                "/_bulk",
                &[("X-Searchwire-Priority", prio)],
                body.as_bytes(),
            )
            .await
            .expect("the relay answers while every node is down");
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(v["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i["create"]["result"] == "queued"));
        }
        let ingest = t0.elapsed();
        let (code, h) = health(relay.addr).await.unwrap();
        assert_eq!((code, h["backlog"].as_u64()), (503, Some(20_000)), "{h}");
        eprintln!("20,000 documents queued in {ingest:?} with every node stopped");
        assert_eq!(terminate(relay).await, Some(0));

        // Everything due before delivery starts (a message the first relay tried while its
        // breaker was half-open was rescheduled a little into the future).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = queue_stats(dir.path());
            assert_eq!(s["backlog"], 20_000, "{s}");
            if s["due"] == s["backlog"] {
                break;
            }
            assert!(Instant::now() < deadline, "never all due: {s}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let order = lease_order(dir.path());
        assert_eq!(order.len(), 20_000);
        drop(resume);
        cluster_health(
            &client,
            INDEX,
            &[("wait_for_status", "green")],
            Duration::from_secs(120),
        )
        .await;

        // What the stopped nodes had in their socket buffers (bulks the relay sent before its
        // requests timed out) lands now: wait until the nodes answered all of it, so delivery
        // below writes after it (real_support::settled_after_outage). This test holds no
        // connection meanwhile.
        drop(client);
        let (open, tasks, settled) = settled_after_outage(&urls, INDEX).await;
        eprintln!("{open} connections and {tasks} bulk tasks were still open at resume");
        let client = Client::builder().nodes(urls.clone()).build().unwrap();
        let mut before: HashSet<String> = HashSet::new();
        for name in ["hi", "lo"] {
            before.extend(landed(&client, INDEX, name).await.into_iter().map(|d| d.id));
        }
        assert_eq!(before.len() as u64, settled, "the index changed after it settled");
        eprintln!("{} documents landed from requests sent during the outage", before.len());

        let t1 = Instant::now();
        let relay = spawn_relay(&joined, dir.path(), free_port(), &["--bulk-concurrency", "1"]).await;
        wait_drained(relay.addr, Duration::from_secs(300)).await;
        let drain = t1.elapsed();
        let (_, h) = health(relay.addr).await.unwrap();
        assert_eq!(h["dead_letters"], 0, "{h}");
        let (_, metrics) = http(relay.addr, "GET", "/metrics", b"").await.unwrap();
        let retried = retried_items(&metrics);
        assert_eq!(terminate(relay).await, Some(0));

        assert_eq!(refreshed_count(&client, INDEX).await, 20_000);
        let (high, low) = (
            landed(&client, INDEX, "hi").await,
            landed(&client, INDEX, "lo").await,
        );
        for (name, docs) in [("hi", &high), ("lo", &low)] {
            assert_eq!(docs.len(), 10_000);
            for (n, d) in docs.iter().enumerate() {
                assert_eq!(d.id, format!("{name}-{n:05}"));
                assert_eq!(d.version, 1, "{} written more than once", d.id);
            }
        }
        // What delivery wrote, in arrival order.
        let delivered = |d: &[Landed]| -> Vec<Landed> {
            d.iter().filter(|x| !before.contains(&x.id)).cloned().collect()
        };
        let (high, low) = (delivered(&high), delivered(&low));
        let last_high = high.iter().map(|d| d.seq_no).max().unwrap_or(0);
        let first_low = low.iter().map(|d| d.seq_no).min().unwrap_or(u64::MAX);
        if last_high > first_low {
            let first_delivered = high
                .iter()
                .chain(low.iter())
                .map(|d| d.seq_no)
                .min()
                .unwrap_or(0);
            let early: Vec<&Landed> = low.iter().filter(|d| d.seq_no < last_high).collect();
            let late: Vec<&Landed> = high.iter().filter(|d| d.seq_no > first_low).collect();
            let span = |v: &[&Landed]| {
                format!(
                    "{} documents, ids {:?}..{:?}, seq_no {:?}..{:?}",
                    v.len(),
                    v.iter().map(|d| d.n).min(),
                    v.iter().map(|d| d.n).max(),
                    v.iter().map(|d| d.seq_no).min(),
                    v.iter().map(|d| d.seq_no).max()
                )
            };
            let outcomes: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("searchwire_relay_delivered_total"))
                .collect();
            panic!(
                "a low-priority document ({first_low}) before a high one ({last_high}); \
                 delivery's first seq_no {first_delivered}; low written early: {}; high written late: {}; \
                 the draining relay's outcomes: {outcomes:?}",
                span(&early),
                span(&late)
            );
        }
        // Within a priority, in lease order (retry_at, then arrival: a message the first relay
        // tried and rescheduled during the outage comes after later arrivals).
        let seq = |d: &[Landed]| {
            let mut v: Vec<(usize, u64)> = d.iter().map(|x| (order[&x.id], x.seq_no)).collect();
            v.sort();
            v.into_iter().map(|x| x.1).collect::<Vec<u64>>()
        };
        let late = late_beyond_window(&seq(&high)) + late_beyond_window(&seq(&low));
        assert!(
            late as u64 <= retried,
            "{late} documents written out of order beyond the window, only {retried} item retries"
        );
        eprintln!(
            "drained in {drain:?}; high before low; {late} documents late beyond {WINDOW} positions ({retried} item retries)"
        );
    });
}
