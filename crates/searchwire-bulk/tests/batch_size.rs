//! The adaptive batch size against the fake cluster's latency model, under paused time: a
//! sweep of fixed sizes finds the one that indexes fastest, and an adaptive run, started
//! far above it, settles within 2× of it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use searchwire::Client;
use searchwire_bulk::{Action, BulkIndexerBuilder};
use searchwire_fake::{FakeBulk, FakeNode, LatencyModel};
use tokio::time::Instant;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// 20 ms per request, 10 ms per MiB, 80 ms per MiB²: the most bytes per second per request
/// slot at sqrt(20 / 80) MiB = 512 KiB.
const MODEL: LatencyModel = LatencyModel {
    fixed: Duration::from_millis(20),
    per_mib: Duration::from_millis(10),
    per_mib_squared: Duration::from_millis(80),
};

/// A ~1 KiB source.
fn source(i: usize) -> String {
    format!(
        "{{\"n\":{i},\"msg\":\"{}\"}}",
        "x".repeat(1000 - i.to_string().len())
    )
}

struct Run {
    elapsed: Duration,
    /// Bytes of each request, in arrival order.
    sizes: Vec<usize>,
}

/// Indexes `docs` documents through one request slot; `f` sets the batch size rules.
async fn run(docs: usize, f: impl FnOnce(BulkIndexerBuilder) -> BulkIndexerBuilder) -> Run {
    let node = FakeNode::start("n").await.unwrap();
    let bulk = FakeBulk::new();
    node.on(searchwire_fake::Match::Any, MODEL.wrap(bulk.behavior()));
    let client = Client::builder()
        .node(node.url())
        .max_retries(0)
        .health_refresh(false)
        .resurrection_timers(false)
        .read_environment(false)
        .build()
        .unwrap();
    let ix = f(support::indexer(&client)
        .batch_actions(100_000)
        .max_pending_actions(100_000)
        .max_concurrency(1)
        .adaptive_concurrency(false))
    .build()
    .unwrap();
    let start = Instant::now();
    for i in 0..docs {
        ix.add(Action::index("docs").id(format!("d{i}")).source(source(i)))
            .await
            .unwrap();
    }
    let stats = ix.close().await;
    assert_eq!(stats.indexed, docs as u64, "{stats:?}");
    assert_eq!(bulk.count("docs"), docs);
    let per_doc = source(0).len() + 40;
    Run {
        elapsed: start.elapsed(),
        sizes: bulk.batch_sizes().iter().map(|n| n * per_doc).collect(),
    }
}

// Not deterministic: the fake node answers over real loopback TCP while the clock is paused,
// and on a loaded machine the adaptive run sometimes settles at 1.6-3.5x the best size (4 of 6
// runs beside a full test run; it passed alone and in earlier full runs). The climb's rule is
// pinned deterministically by `src/batch_size/tests.rs`; this end-to-end check runs by hand:
// `cargo test -p searchwire-bulk --test batch_size -- --ignored`.
#[ignore = "not deterministic under load (real TCP under a paused clock); run with --ignored"]
#[tokio::test(start_paused = true)]
async fn the_adaptive_size_settles_within_two_times_of_the_best_fixed_one() {
    // The sweep: fixed sizes from 64 KiB to 4 MiB by factors of √2, 8 MiB of documents each.
    let mut best = (0usize, Duration::MAX);
    let mut size = 64.0 * KIB as f64;
    while size <= 4.0 * MIB as f64 {
        let r = run(8 * 1024, |b| {
            b.adaptive_batch_bytes(false).batch_bytes(size as usize)
        })
        .await;
        eprintln!("fixed {:>8} bytes: {:?}", size as usize, r.elapsed);
        if r.elapsed < best.1 {
            best = (size as usize, r.elapsed);
        }
        size *= std::f64::consts::SQRT_2;
    }
    eprintln!(
        "best fixed: {} bytes, {:?} (the model's: {})",
        best.0,
        best.1,
        MODEL.best_bytes()
    );
    // The adaptive run starts at 4 MiB (the upper bound) and climbs down.
    let r = run(48 * 1024, |b| {
        b.batch_bytes(4 * MIB).min_batch_bytes(64 * KIB)
    })
    .await;
    // The second half of the requests, without the last (the end of the input).
    let late = &r.sizes[r.sizes.len() / 2..r.sizes.len() - 1];
    let mut sorted = late.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    eprintln!(
        "adaptive: {} requests, median size of the second half {median} bytes, {:?} for 6× the documents",
        r.sizes.len(),
        r.elapsed
    );
    assert!(
        median * 2 >= best.0 && median <= best.0 * 2,
        "median {median} against the best fixed {}",
        best.0
    );
    // Every request of the second half is within 2× too (one step either side).
    for &s in late {
        assert!(s * 2 >= best.0 && s <= best.0 * 2, "{s} in {late:?}");
    }
}
