//! The adaptive batch size against the fake cluster's latency model, under paused time: a
//! sweep of fixed sizes finds the one that indexes fastest, and an adaptive run, started
//! far above it, settles within 2× of it.
//!
//! End to end: the indexer, the client, HTTP over loopback TCP, a fake node answering after
//! the model's latency. The paused clock auto-advances only while the node holds a request
//! (see [`ModelClock`]), so every request measures exactly the model's latency however
//! loaded the machine is, and each run's elapsed time is the sum of them (checked).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::Client;
use searchwire_bulk::{Action, BulkIndexerBuilder};
use searchwire_fake::{Behavior, FakeBulk, FakeNode, Handler, LatencyModel};
use tokio::sync::mpsc;
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

/// The longest one phase of the test may take in real time with the clock held before the
/// test is stopped as hung: a task would be waiting for a timer while nothing can reach it.
const HUNG_AFTER: Duration = Duration::from_secs(120);

/// The paused clock, moving only while the fake node holds a request for the model's
/// latency.
///
/// Tokio auto-advances a paused clock to the next timer whenever the runtime finds nothing
/// ready when it parks (an `epoll` with a zero timeout). That includes the moments when
/// request or response bytes are still on their way through loopback TCP: on a loaded
/// machine they may not be readable yet when the runtime looks (the kernel delivers
/// loopback packets in its network receive work, which can wait for a CPU), and meanwhile
/// the clock has jumped to whatever timer is next — the request's 120 s attempt timeout (the request times out), an earlier run's
/// idle-connection reaper (seconds added to one request's latency) — and the climb steps on
/// a false measurement.
///
/// So auto-advance is held off (by a blocking task, tokio's documented way) except while
/// the node holds a request: the node reports the answer's deadline as it starts its sleep;
/// the clock lets auto-advance run until that deadline (it sleeps until it too) and holds
/// it off again before the answer is on the wire. With one request in flight at a time,
/// nothing is in transit while the node holds it, so the clock moves exactly as far as the
/// model says, once every task has done what it can at the current instant — as a quiet
/// machine did.
struct ModelClock {
    deadlines: mpsc::UnboundedSender<Instant>,
    advancer: tokio::task::JoinHandle<()>,
}

/// While alive, the paused clock does not auto-advance: a blocking task is running (tokio
/// counts it from the spawn until it ends). Dropping it ends the task.
struct Hold {
    _release: std::sync::mpsc::Sender<()>,
}

impl Hold {
    fn new() -> Hold {
        let (release, held) = std::sync::mpsc::channel::<()>();
        drop(tokio::task::spawn_blocking(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = held.recv_timeout(HUNG_AFTER) {
                eprintln!("hung: a task waits for a timer while the clock is held");
                std::process::abort();
            }
        }));
        Hold { _release: release }
    }
}

impl ModelClock {
    fn start() -> ModelClock {
        let (deadlines, mut rx) = mpsc::unbounded_channel::<Instant>();
        let mut hold = Hold::new();
        let advancer = tokio::spawn(async move {
            while let Some(deadline) = rx.recv().await {
                // The node's sleep ends at the same timer tick as this one; both wake in
                // one turn of the timer wheel, and the runtime runs every woken task (this
                // one holding the clock again) before it parks again.
                let wake = tokio::time::sleep_until(deadline);
                drop(hold);
                wake.await;
                hold = Hold::new();
            }
        });
        ModelClock {
            deadlines,
            advancer,
        }
    }

    /// The model's answer of `inner` (the node's `_bulk` handler), each request's deadline
    /// reported to the clock; each request's body length is pushed to `sizes`.
    fn answer(&self, inner: Behavior, sizes: Arc<Mutex<Vec<usize>>>) -> Behavior {
        let delayed = MODEL.wrap(inner);
        let deadlines = self.deadlines.clone();
        Behavior::Handler(Handler::new(move |req| {
            sizes.lock().unwrap().push(req.body.len());
            // The node's sleep starts now (the clock is held: it cannot move before).
            let _ = deadlines.send(Instant::now() + MODEL.latency(req.body.len()));
            match &delayed {
                Behavior::Handler(h) => h.call(req),
                other => other.clone(),
            }
        }))
    }
}

impl Drop for ModelClock {
    fn drop(&mut self) {
        self.advancer.abort();
    }
}

/// The model's latency of a `bytes` request as the paused clock measures it: rounded up to
/// the timer's millisecond (tokio's timer wheel rounds deadlines up; the clock starts on a
/// millisecond and moves only to timer ticks).
fn measured(bytes: usize) -> Duration {
    let ms = MODEL.latency(bytes).as_nanos().div_ceil(1_000_000);
    Duration::from_millis(ms as u64)
}

/// The bytes of one action, about (its action line and its source). Per-document work takes
/// most of the test's (real) time, so the documents are large: with 1 KiB ones the test took
/// three times as long.
const DOC: usize = 4 * KIB;

/// A source of about 4,000 bytes.
fn source(i: usize) -> String {
    format!(
        "{{\"n\":{i},\"msg\":\"{}\"}}",
        "x".repeat(4000 - i.to_string().len())
    )
}

struct Run {
    elapsed: Duration,
    /// Body bytes of each request, in arrival order.
    sizes: Vec<usize>,
}

/// Indexes `docs` documents through one request slot, the node's answers timed by `clock`;
/// `f` sets the batch size rules.
async fn run(
    clock: &ModelClock,
    docs: usize,
    f: impl FnOnce(BulkIndexerBuilder) -> BulkIndexerBuilder,
) -> Run {
    let node = FakeNode::start("n").await.unwrap();
    let bulk = FakeBulk::new();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    node.on(
        searchwire_fake::Match::Any,
        clock.answer(bulk.behavior(), sizes.clone()),
    );
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
    let elapsed = start.elapsed();
    assert_eq!(stats.indexed, docs as u64, "{stats:?}");
    assert_eq!(bulk.count("docs"), docs);
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.len() as u64, stats.requests, "{stats:?}");
    // The clock moved only to the model's deadlines, one request after the other.
    let model: Duration = sizes.iter().map(|&b| measured(b)).sum();
    assert_eq!(
        elapsed, model,
        "the clock moved other than by the model's latencies"
    );
    Run { elapsed, sizes }
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_size_settles_within_two_times_of_the_best_fixed_one() {
    let clock = ModelClock::start();
    // The sweep: fixed sizes from 64 KiB to 4 MiB by factors of √2, 8 MiB of documents each.
    let mut best = (0usize, Duration::MAX);
    let mut size = 64.0 * KIB as f64;
    while size <= 4.0 * MIB as f64 {
        let r = run(&clock, 8 * MIB / DOC, |b| {
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
    let r = run(&clock, 48 * MIB / DOC, |b| {
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
