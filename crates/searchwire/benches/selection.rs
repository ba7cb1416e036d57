//! Node selection on the hot path: one `Pool::select(&[])`, exactly what every attempt
//! does, through the `Client::__bench_select` hook.
//!
//! Pools of 3, 30 and 300 live nodes with varied core counts, so the weighted round-robin
//! wheel has uneven weights (cores cycle through 8, 16, 24, 0 (unknown), 4 → weights
//! 2, 4, 6, 1, 1; the 3-node pool gets 8/16/24 → 1, 2, 3).
//!
//! * `selection/single/<nodes>`: ns per pick on one thread (latency-aware, the default;
//!   every node has a latency estimate).
//! * `selection/single-rr/<nodes>`: the same with `Selection::RoundRobin`.
//! * `selection/threads<T>/<nodes>`: T threads pick in a loop on one shared client; an
//!   iteration is one pick by any thread, so the reported time is wall time per pick of
//!   the whole group (aggregate throughput), measured with `iter_custom`.
//!
//! Run: `cargo bench -p searchwire --bench selection -- --warm-up-time 1 --measurement-time 5 --sample-size 20`

// Benchmarks measure wall-clock time, which the library itself must not read directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use searchwire::{Client, Selection};

const NODE_COUNTS: [usize; 3] = [3, 30, 300];

fn client(n: usize) -> Client {
    if n == 3 {
        Client::__bench_client(n, &[8, 16, 24])
    } else {
        Client::__bench_client(n, &[8, 16, 24, 0, 4])
    }
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("selection/single");
    g.throughput(Throughput::Elements(1));
    for n in NODE_COUNTS {
        let cl = client(n);
        // Two random choices, the cheaper wins: with fixed estimates and weights the most
        // expensive node never wins a draw, but the picks spread over the others.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100_000 {
            seen.insert(cl.__bench_select());
        }
        assert!(seen.len() > n / 2, "picks spread: {} of {n}", seen.len());
        g.bench_with_input(BenchmarkId::from_parameter(n), &cl, |b, cl| {
            b.iter(|| black_box(cl.__bench_select()))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("selection/single-rr");
    g.throughput(Throughput::Elements(1));
    for n in NODE_COUNTS {
        let cores: &[u32] = if n == 3 {
            &[8, 16, 24]
        } else {
            &[8, 16, 24, 0, 4]
        };
        let cl = Client::__bench_client_with(n, cores, Selection::RoundRobin);
        // Every node is reachable by selection (all alive, all on the wheel).
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100_000 {
            seen.insert(cl.__bench_select());
        }
        assert_eq!(seen.len(), n, "every node gets picked");
        g.bench_with_input(BenchmarkId::from_parameter(n), &cl, |b, cl| {
            b.iter(|| black_box(cl.__bench_select()))
        });
    }
    g.finish();
}

/// `iters` picks split over `threads` threads on one shared client; returns wall time from
/// the common start (after every thread is spawned and waiting) to the last finish.
fn concurrent_picks(cl: &Client, threads: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(threads as u64);
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut acc = 0usize;
                    for _ in 0..per {
                        acc = acc.wrapping_add(cl.__bench_select());
                    }
                    black_box(acc);
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().unwrap();
        }
        start.elapsed()
    })
}

fn concurrent(c: &mut Criterion) {
    for threads in [1usize, 2, 8] {
        let mut g = c.benchmark_group(format!("selection/threads{threads}"));
        g.throughput(Throughput::Elements(1));
        for n in NODE_COUNTS {
            let cl = client(n);
            g.bench_with_input(BenchmarkId::from_parameter(n), &cl, |b, cl| {
                b.iter_custom(|iters| concurrent_picks(cl, threads, iters))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, single, concurrent);
criterion_main!(benches);
