//! Per-request overhead of searchwire over a bare hyper-util legacy client.
//!
//! A keep-alive HTTP/1.1 server answering `200 {"ok":true}` runs on 127.0.0.1 on its own
//! thread and its own single-threaded tokio runtime. Both clients run on a second,
//! single-threaded runtime (criterion's `to_async`), connect the same way (`HttpConnector`,
//! `TCP_NODELAY`, up to 64 idle keep-alive connections, 50 s idle timeout) and read the
//! whole body. The bare client keeps its connections in hyper-util's pool; searchwire in its
//! own per-node set over `hyper::client::conn::http1` (`http/conns.rs`), so
//! the difference is what searchwire adds — request validation, node selection, header map
//! building, tracing spans, the attempt timeout, classification and bookkeeping — less what
//! its connection set saves over hyper-util's pool.
//!
//! Groups: `overhead/c1` (one request per iteration) and `overhead/c64` (an iteration is 64
//! concurrent requests joined with `join_all`). Throughput is reported in requests.
//!
//! After criterion, a paired A/B run (bare and searchwire alternating block by block)
//! prints medians of wall time, client-thread CPU time and per-request latency that a
//! noisy, shared machine cannot bias toward either side; rounds via
//! `PAIRED_ROUNDS_C1` (default 20000) and `PAIRED_ROUNDS_C64` (default 400), 0 skips it.
//! Filter `paired` runs only it. `SW_BENCH_SELECTION=round-robin` (or `latency`, the default)
//! picks searchwire's node selection, to compare the two against the same bare client. `SW_BENCH_ONLY=bare` or `searchwire` runs one client alone
//! (`SW_BENCH_ONLY_CONC`, `SW_BENCH_ONLY_REQS`) for `perf`/`strace`.
//!
//! Filter `paired-selection` runs, instead, latency-aware selection against round robin:
//! two searchwire clients over the same three servers, alternating ABBA block by block, and
//! prints per concurrency the median over block pairs of the client-thread CPU ratio
//! (latency / round robin) and of the wall-time ratio (`PAIRED_SELECTION_C1`, default 20000
//! requests; `PAIRED_SELECTION_C64`, default 400 rounds of 64). One node would not do: a
//! pool of one node skips the choice.
//!
//! Run: `cargo bench -p searchwire --bench overhead -- --warm-up-time 1 --measurement-time 5 --sample-size 20`

// Benchmarks measure wall-clock time, which the library itself must not read directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use futures_util::future::join_all;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use searchwire::{Client, Request};

#[path = "support/bare.rs"]
mod bare;
use bare::{bare_client, bare_get, Bare};

const BODY: &[u8] = br#"{"ok":true}"#;

/// Starts the server on its own thread and runtime; returns its address.
fn start_server() -> SocketAddr {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    stream.set_nodelay(true).unwrap();
                    tokio::spawn(async move {
                        let svc = service_fn(|_req: http::Request<hyper::body::Incoming>| async {
                            let resp = http::Response::builder()
                                .status(200)
                                .header(http::header::CONTENT_TYPE, "application/json")
                                .body(Full::new(Bytes::from_static(BODY)))
                                .unwrap();
                            Ok::<_, Infallible>(resp)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            });
        })
        .unwrap();
    addr
}

async fn sw_get(client: &Client) -> Bytes {
    let resp = client.send(Request::get("/")).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.body().clone()
}

/// A server on its own thread, the client runtime, and both clients pointed at it. The
/// ablation knobs (`SW_BENCH_LEAN`, `SW_BENCH_NO_TIMEOUT`) shape the searchwire client.
fn setup() -> (tokio::runtime::Runtime, http::Uri, Bare, Client) {
    let addr = start_server();
    let url = format!("http://{addr}");
    let uri: http::Uri = format!("{url}/").parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bare = bare_client();
    let mut b = Client::builder().node(url);
    if std::env::var_os("SW_BENCH_LEAN").is_some() {
        b = b.metrics(false).no_retry_budget().no_circuit_breaker();
    }
    if std::env::var_os("SW_BENCH_NO_TIMEOUT").is_some() {
        b = b.no_attempt_timeout();
    }
    if let Ok(name) = std::env::var("SW_BENCH_SELECTION") {
        b = b.selection(
            name.parse()
                .expect("SW_BENCH_SELECTION: latency or round-robin"),
        );
    }
    let sw = b.build().expect("searchwire client");
    (rt, uri, bare, sw)
}

fn overhead(c: &mut Criterion) {
    let (rt, uri, bare, sw) = setup();

    // Sanity check and connection warm-up (64 connections for each client).
    rt.block_on(async {
        assert_eq!(&bare_get(&bare, &uri).await[..], BODY);
        assert_eq!(&sw_get(&sw).await[..], BODY);
        join_all((0..64).map(|_| bare_get(&bare, &uri))).await;
        join_all((0..64).map(|_| sw_get(&sw))).await;
    });

    for conc in [1usize, 64] {
        let mut g = c.benchmark_group(format!("overhead/c{conc}"));
        g.throughput(Throughput::Elements(conc as u64));
        g.bench_function(BenchmarkId::from_parameter("bare"), |b| {
            b.to_async(&rt).iter(|| async {
                if conc == 1 {
                    bare_get(&bare, &uri).await;
                } else {
                    join_all((0..conc).map(|_| bare_get(&bare, &uri))).await;
                }
            })
        });
        g.bench_function(BenchmarkId::from_parameter("searchwire"), |b| {
            b.to_async(&rt).iter(|| async {
                if conc == 1 {
                    sw_get(&sw).await;
                } else {
                    join_all((0..conc).map(|_| sw_get(&sw))).await;
                }
            })
        });
        g.finish();
    }
}

/// Paired A/B run, robust to the machine's load drifting between criterion's (sequential)
/// benchmarks: bare and searchwire alternate block by block (ABBA order) on the same
/// runtime, connections and server. Per block it records the wall time and the client
/// thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`; the server runs on another thread), and it records every request's own latency. Prints medians and ratios.
fn paired() {
    let rounds_c1: usize = env_usize("PAIRED_ROUNDS_C1", 20_000);
    let rounds_c64: usize = env_usize("PAIRED_ROUNDS_C64", 400);
    if rounds_c1 == 0 && rounds_c64 == 0 {
        return;
    }
    let (rt, uri, bare, sw) = setup();
    println!();
    println!("paired A/B: blocks alternate ABBA; per block: wall time and client-thread CPU time");
    println!(
        "{:<5} {:>7} | {:>9} {:>9} {:>7} | {:>9} {:>9} {:>7} | {:>9} {:>9} {:>7}",
        "conc",
        "reqs",
        "bare µs",
        "sw µs",
        "sw/bare",
        "bare cpu",
        "sw cpu",
        "sw/bare",
        "bare req/s",
        "sw req/s",
        "sw/bare"
    );
    rt.block_on(async {
        join_all((0..64).map(|_| bare_get(&bare, &uri))).await;
        join_all((0..64).map(|_| sw_get(&sw))).await;
        for (conc, rounds, per_block) in [(1usize, rounds_c1, 100usize), (64, rounds_c64, 2)] {
            if rounds == 0 {
                continue;
            }
            let blocks = rounds.div_ceil(per_block);
            // Per block (wall, cpu) per request, in µs; and every request's latency.
            let (mut bw, mut sww) = (Vec::new(), Vec::new());
            let (mut bl, mut swl) = (Vec::new(), Vec::new());
            for i in 0..blocks {
                let run_bare = || async {
                    let (t, c) = (std::time::Instant::now(), thread_cpu_ns());
                    let mut lat = Vec::with_capacity(per_block * conc);
                    for _ in 0..per_block {
                        lat.extend(
                            join_all((0..conc).map(|_| async {
                                let t = std::time::Instant::now();
                                bare_get(&bare, &uri).await;
                                t.elapsed()
                            }))
                            .await,
                        );
                    }
                    (t.elapsed(), thread_cpu_ns() - c, lat)
                };
                let run_sw = || async {
                    let (t, c) = (std::time::Instant::now(), thread_cpu_ns());
                    let mut lat = Vec::with_capacity(per_block * conc);
                    for _ in 0..per_block {
                        lat.extend(
                            join_all((0..conc).map(|_| async {
                                let t = std::time::Instant::now();
                                sw_get(&sw).await;
                                t.elapsed()
                            }))
                            .await,
                        );
                    }
                    (t.elapsed(), thread_cpu_ns() - c, lat)
                };
                let (x, y) = if i % 2 == 0 {
                    let x = run_bare().await;
                    (x, run_sw().await)
                } else {
                    let y = run_sw().await;
                    (run_bare().await, y)
                };
                let n = (per_block * conc) as f64;
                bw.push((x.0.as_secs_f64() * 1e6 / n, x.1 as f64 / 1e3 / n));
                sww.push((y.0.as_secs_f64() * 1e6 / n, y.1 as f64 / 1e3 / n));
                bl.extend(x.2);
                swl.extend(y.2);
            }
            let med = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let bwall = med(bw.iter().map(|p| p.0).collect());
            let swall = med(sww.iter().map(|p| p.0).collect());
            let bcpu = med(bw.iter().map(|p| p.1).collect());
            let swcpu = med(sww.iter().map(|p| p.1).collect());
            println!(
                "{:<5} {:>7} | {:>9.2} {:>9.2} {:>7.3} | {:>9.2} {:>9.2} {:>7.3} | {:>9.0} {:>9.0} {:>7.3}",
                conc, blocks * per_block * conc,
                bwall, swall, swall / bwall,
                bcpu, swcpu, swcpu / bcpu,
                1e6 / bwall, 1e6 / swall, bwall / swall,
            );
            let lat = |v: &mut Vec<Duration>, p: f64| {
                v.sort();
                v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
            };
            let (b50, s50) = (lat(&mut bl, 0.5), lat(&mut swl, 0.5));
            println!(
                "      per-request latency: p50 bare {:.1} µs, searchwire {:.1} µs (added {:.1} µs); p90 bare {:.1}, searchwire {:.1}",
                b50, s50, s50 - b50, lat(&mut bl, 0.9), lat(&mut swl, 0.9)
            );
        }
    });
    println!("(µs columns are per request: block wall or CPU time / requests in the block; medians over blocks)");
}

/// One block of `per_block` rounds of `conc` concurrent requests through `client`: its
/// wall time and the client thread's CPU time.
async fn sw_block(client: &Client, conc: usize, per_block: usize) -> (Duration, u64) {
    let (t, c) = (std::time::Instant::now(), thread_cpu_ns());
    for _ in 0..per_block {
        join_all((0..conc).map(|_| sw_get(client))).await;
    }
    (t.elapsed(), thread_cpu_ns() - c)
}

/// Latency-aware selection against round robin, paired (see the module docs).
fn paired_selection() {
    let rounds_c1 = env_usize("PAIRED_SELECTION_C1", 20_000);
    let rounds_c64 = env_usize("PAIRED_SELECTION_C64", 400);
    let urls: Vec<String> = (0..3)
        .map(|_| format!("http://{}", start_server()))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let build = |selection: searchwire::Selection| {
        Client::builder()
            .nodes(urls.clone())
            .selection(selection)
            .read_environment(false)
            .build()
            .expect("searchwire client")
    };
    let latency = build(searchwire::Selection::LatencyAware);
    let rr = build(searchwire::Selection::RoundRobin);
    println!();
    println!("paired selection: latency-aware (L) against round robin (R), 3 nodes, ABBA blocks");
    println!(
        "{:<5} {:>7} {:>6} | {:>9} {:>9} {:>11} | {:>9} {:>9} {:>11}",
        "conc",
        "reqs",
        "pairs",
        "R cpu µs",
        "L cpu µs",
        "L/R cpu",
        "R wall µs",
        "L wall µs",
        "L/R wall"
    );
    rt.block_on(async {
        join_all((0..64).map(|_| sw_get(&latency))).await;
        join_all((0..64).map(|_| sw_get(&rr))).await;
        for (conc, rounds, per_block) in [(1usize, rounds_c1, 100usize), (64, rounds_c64, 2)] {
            if rounds == 0 {
                continue;
            }
            let blocks = rounds.div_ceil(per_block);
            let n = (per_block * conc) as f64;
            // Per pair: (R cpu, L cpu, R wall, L wall) per request in µs.
            let mut pairs = Vec::with_capacity(blocks);
            for i in 0..blocks {
                let (r, l) = if i % 2 == 0 {
                    let r = sw_block(&rr, conc, per_block).await;
                    (r, sw_block(&latency, conc, per_block).await)
                } else {
                    let l = sw_block(&latency, conc, per_block).await;
                    (sw_block(&rr, conc, per_block).await, l)
                };
                pairs.push((
                    r.1 as f64 / 1e3 / n,
                    l.1 as f64 / 1e3 / n,
                    r.0.as_secs_f64() * 1e6 / n,
                    l.0.as_secs_f64() * 1e6 / n,
                ));
            }
            let med = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let quartiles = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                (v[v.len() / 4], v[v.len() / 2], v[v.len() * 3 / 4])
            };
            let cpu = quartiles(pairs.iter().filter(|p| p.0 > 0.0).map(|p| p.1 / p.0).collect());
            let wall = quartiles(pairs.iter().map(|p| p.3 / p.2).collect());
            println!(
                "{:<5} {:>7} {:>6} | {:>9.2} {:>9.2} {:>11} | {:>9.2} {:>9.2} {:>11}",
                conc,
                blocks * per_block * conc,
                blocks,
                med(pairs.iter().map(|p| p.0).collect()),
                med(pairs.iter().map(|p| p.1).collect()),
                format!("{:.3}", cpu.1),
                med(pairs.iter().map(|p| p.2).collect()),
                med(pairs.iter().map(|p| p.3).collect()),
                format!("{:.3}", wall.1),
            );
            println!(
                "      L/R per pair, quartiles: cpu {:.3} / {:.3} / {:.3}; wall {:.3} / {:.3} / {:.3}",
                cpu.0, cpu.1, cpu.2, wall.0, wall.1, wall.2
            );
        }
    });
    println!("(ratios: the median over block pairs of latency-aware / round robin; goal: CPU within 3 %)");
}

/// CPU time consumed by the calling thread so far, in ns: `CLOCK_THREAD_CPUTIME_ID`, which
/// the kernel brings up to date on every read (0 where it cannot be read).
///
/// Not `/proc/thread-self/schedstat`: its runtime field is only updated when the thread is
/// descheduled or at a scheduler tick (1–4 ms). At c=64 the client thread rarely sleeps and
/// a block lasts about a millisecond, so most blocks read a delta of 0 and the column's
/// median printed 0.00 (and 0/0 = NaN as the ratio).
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One client alone (`SW_BENCH_ONLY=bare` or `searchwire`), `SW_BENCH_ONLY_REQS` requests
/// (default 100000) at concurrency `SW_BENCH_ONLY_CONC` (default 1), then exit: a process
/// that `perf stat`, `perf record` or `strace -c` can attribute to one client.
fn only(side: &str) {
    let reqs = env_usize("SW_BENCH_ONLY_REQS", 100_000);
    let conc = env_usize("SW_BENCH_ONLY_CONC", 1).max(1);
    let (rt, uri, bare, sw) = setup();
    let t = std::time::Instant::now();
    let c = thread_cpu_ns();
    rt.block_on(async {
        for _ in 0..reqs.div_ceil(conc) {
            if side == "bare" {
                join_all((0..conc).map(|_| bare_get(&bare, &uri))).await;
            } else {
                join_all((0..conc).map(|_| sw_get(&sw))).await;
            }
        }
    });
    let n = (reqs.div_ceil(conc) * conc) as f64;
    println!(
        "{side} c={conc}: {n} requests, {:.2} µs wall, {:.2} µs client-thread CPU per request",
        t.elapsed().as_secs_f64() * 1e6 / n,
        (thread_cpu_ns() - c) as f64 / 1e3 / n
    );
}

criterion_group!(benches, overhead);

fn main() {
    if let Ok(side) = std::env::var("SW_BENCH_ONLY") {
        only(&side);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "paired-selection") {
        paired_selection();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Only under `cargo bench` (which passes --bench), not `cargo test --benches`, and
    // not when a filter selects only some criterion benchmarks.
    let filtered = args
        .iter()
        .skip(1)
        .any(|a| !a.starts_with('-') && a.parse::<f64>().is_err());
    if args.iter().any(|a| a == "--bench") && (!filtered || args.iter().any(|a| a == "paired")) {
        paired();
    }
}
