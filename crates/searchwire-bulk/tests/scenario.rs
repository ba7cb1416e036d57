//! A cluster that is only slow to take writes never produces a dead letter: 20,000
//! documents while the cluster answers 20 % of items 429, resets 5 % of connections after
//! applying the bulk, and loses a node for 3 s — repeated with 20 seeds (fault patterns
//! and jitter), under paused time. Every run stores exactly the 20,000 documents, each
//! written once, with no dead letter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire::Client;
use searchwire_bulk::{Action, BulkIndexer, Stats};
use searchwire_fake::{FakeBulk, FakeCluster};
use support::{doc, Collect};

const DOCS: usize = 20_000;

/// How many seeds: 4 by default, so the test stays quick in a debug build;
/// `scripts/slow-cluster-runs` runs 20 (`SEARCHWIRE_SCENARIO_RUNS` overrides).
fn runs() -> u64 {
    std::env::var("SEARCHWIRE_SCENARIO_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// `SEARCHWIRE_SCENARIO_COUNT_ALONE=1`: the same runs with the class count alone ending a
/// retryable item (`no_item_deadline`), the rule before the deadline — they report the
/// dead letters instead of failing on them (the comparison in docs/benchmarks.md).
fn count_alone() -> bool {
    std::env::var_os("SEARCHWIRE_SCENARIO_COUNT_ALONE").is_some()
}

/// One run: the indexer as `searchwire ingest` configures it (default rules and jitter,
/// caller ids, conflicts on create count as present), through a client with the
/// transport's defaults.
async fn run(seed: u64) -> (Stats, Vec<String>, FakeBulk) {
    let cluster = FakeCluster::start(3).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    for node in cluster.nodes() {
        node.set_recording(false);
    }
    bulk.random_faults(Some((seed, 0.20, 0.05)));
    let client = Client::builder()
        .nodes(cluster.urls())
        .health_refresh(false)
        .read_environment(false)
        .seed(seed)
        .build()
        .unwrap();
    let dead = Collect::default();
    let mut b = BulkIndexer::builder(client);
    if count_alone() {
        b = b.no_item_deadline();
    }
    let ix = b
        .seed(seed)
        .conflict_is_present(true)
        .dead_letter_sink(dead.dead_letter_sink())
        .build()
        .unwrap();
    // Node 2 is lost for 3 s, 1 s into the run: its requests in flight are reset, new
    // connections refused, then it comes back.
    let lost = cluster.node(2).clone();
    let outage = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        lost.kill().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        lost.revive().await.unwrap();
    });
    for i in 0..DOCS {
        ix.add(
            Action::create("docs")
                .id(format!("doc-{i:06}"))
                .json(&doc(i)),
        )
        .await
        .unwrap();
    }
    let stats = ix.close().await;
    outage.await.unwrap();
    (stats, dead.ids(), bulk)
}

#[tokio::test(start_paused = true)]
async fn throttling_resets_and_a_lost_node_dead_letter_no_good_document() {
    let mut totals = (0u64, 0u64, 0u64);
    if count_alone() {
        let mut dead_total = 0;
        for seed in 1..=runs() {
            let (stats, dead, bulk) = run(seed).await;
            eprintln!(
                "seed {seed}: {} dead letters (retryable), {} stored",
                dead.len(),
                bulk.count("docs")
            );
            assert_eq!(stats.dead_lettered as usize, dead.len());
            dead_total += dead.len();
        }
        eprintln!(
            "count alone: {dead_total} good documents dead-lettered in {} runs",
            runs()
        );
        return;
    }
    for seed in 1..=runs() {
        let (stats, dead, bulk) = run(seed).await;
        assert!(dead.is_empty(), "seed {seed}: dead letters {dead:?}");
        assert_eq!(stats.dead_lettered, 0, "seed {seed}");
        assert_eq!(bulk.count("docs"), DOCS, "seed {seed}");
        assert_eq!(bulk.max_writes(), 1, "seed {seed}: nothing written twice");
        assert_eq!(stats.indexed, DOCS as u64, "seed {seed}: {stats:?}");
        // The faults happened: far more throttled items than one run of five retries
        // would survive, and whole batches retried after resets and the lost node.
        assert!(stats.retried_throttled > 4_000, "seed {seed}: {stats:?}");
        assert!(stats.retried_connection > 0, "seed {seed}: {stats:?}");
        totals.0 += stats.retried_throttled;
        totals.1 += stats.retried_connection;
        totals.2 += stats.already_present;
    }
    eprintln!(
        "{} runs × {DOCS} documents: 0 dead letters; {} throttled and {} connection retries, {} already present after a reset",
        runs(),
        totals.0,
        totals.1,
        totals.2
    );
}
