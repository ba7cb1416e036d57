//! Appends + acks per second with 1 KB payloads, per backend, and what durability costs
//! (batch size and concurrency vs throughput vs syncs). A plain bench binary: each
//! configuration appends N messages (C concurrent tasks, batches of B), then leases and acks
//! them all (batches of 500), RUNS times; it prints the median of each measure.
//!
//!   cargo bench -p searchwire-queue --bench throughput
//!   QUEUE_BENCH_N=20000 QUEUE_BENCH_RUNS=5 cargo bench -p searchwire-queue --bench throughput
//!   SEARCHWIRE_TEST_REDIS=$(scripts/redis start) cargo bench -p searchwire-queue --bench throughput
//!   QUEUE_BENCH_CONFIGS=1000x1,1000x4 cargo bench -p searchwire-queue --bench throughput
//!   QUEUE_BENCH_PIPELINE=1 ...   # the consumer acks batch k while it leases batch k+1
//!   QUEUE_BENCH_BACKENDS=redis ...  # only this backend (embedded, redis; default both)
//!   QUEUE_BENCH_SMALL=0 ...         # Redis: RedisConfig::small_append (0: no one-call appends)
//!   QUEUE_BENCH_GROUP=0 ...         # Redis: RedisConfig::group_commit off (each append its own call)
//!   QUEUE_BENCH_MIN_REPLICAS=1 ...  # Redis: RedisConfig::min_replicas (every append and lease
//!                                   # confirmed by WAIT; point SEARCHWIRE_TEST_REDIS at a primary
//!                                   # with replicas, e.g. of scripts/redis sentinel-start)
//!   QUEUE_BENCH_SENTINEL=H:P,H:P ...  # Redis: find the primary through these Sentinels (master
//!                                   # `searchwire`, as scripts/redis sentinel-start names it;
//!                                   # SEARCHWIRE_TEST_REDIS then names the primary, whose CPU
//!                                   # is read): the link that writes a receipt per append
//!   QUEUE_BENCH_CLUSTER=H:P,H:P ... # Redis: the Cluster backend on these nodes (its default
//!                                   # shards, or QUEUE_BENCH_SHARDS); SEARCHWIRE_TEST_REDIS is
//!                                   # then not read
//!   QUEUE_BENCH_SERVER_PIDS=P,P ... # Redis: `server µs/msg` is these redis-servers' CPU
//!                                   # (utime + stime of /proc/PID/stat, summed) instead of
//!                                   # INFO cpu of one server: every node of a Cluster
//!   QUEUE_BENCH_SERVER_PIDS_ALSO=P,P ... # Redis: a last column `also µs/msg`, the same for
//!                                   # these redis-servers, measured in the same runs (a
//!                                   # Cluster's primaries and all its nodes at once)
//!   QUEUE_BENCH_OPEN=200000 ...     # also: how long an embedded open takes with this backlog
//!   QUEUE_BENCH_FAIL=20000 ...      # also: embedded lease + reschedule, lease + dead-letter
//!
//! `cpu µs/msg` is this process's CPU time (user + system, all threads, from
//! `/proc/self/stat`) per message appended, leased and acked; `server µs/msg` is
//! redis-server's (`INFO cpu`) — on a loaded machine these move less than the rates.
//!
//! The embedded queue lives in a temporary directory under `target/` (a real disk: a tmpfs
//! would make every sync free and the numbers meaningless).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use searchwire_queue::redis::{ClusterConfig, SentinelConfig};
use searchwire_queue::{EmbeddedConfig, MessageId, NewMessage, Queue, RedisConfig};
use tokio::time::Instant;

const PAYLOAD: usize = 1024;
const LEASE_BATCH: usize = 500;

struct Run {
    append_s: f64,
    ack_s: f64,
    syncs: u64,
    cpu_s: f64,
    server_cpu_s: f64,
    also_cpu_s: f64,
}

/// This process's CPU seconds (user + system, all threads).
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds (user + system) of the process `pid`, from `/proc/PID/stat`.
fn pid_cpu(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The summed CPU seconds of `QUEUE_BENCH_SERVER_PIDS_ALSO`, 0 if not set.
fn also_cpu() -> f64 {
    std::env::var("QUEUE_BENCH_SERVER_PIDS_ALSO")
        .map(|pids| pids.split(',').filter(|p| !p.is_empty()).map(pid_cpu).sum())
        .unwrap_or(0.0)
}

fn also_measured() -> bool {
    std::env::var("QUEUE_BENCH_SERVER_PIDS_ALSO").is_ok_and(|p| !p.is_empty())
}

/// redis-server's CPU seconds (`INFO cpu`, or the summed `QUEUE_BENCH_SERVER_PIDS`), 0 for
/// the embedded backend.
async fn server_cpu(q: &Queue) -> f64 {
    if let Ok(pids) = std::env::var("QUEUE_BENCH_SERVER_PIDS") {
        if !pids.is_empty() {
            return pids.split(',').map(pid_cpu).sum();
        }
    }
    let Ok(url) = std::env::var("SEARCHWIRE_TEST_REDIS") else {
        return 0.0;
    };
    if !matches!(q, Queue::Redis(_)) {
        return 0.0;
    }
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| {
            l.split_once(':')
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        })
        .sum()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn payload(run: usize, i: usize) -> Vec<u8> {
    let mut p = format!("{{\"run\":{run},\"doc\":{i},\"pad\":\"").into_bytes();
    p.resize(PAYLOAD - 2, b'x');
    p.extend_from_slice(b"\"}");
    p
}

async fn one_run(q: &Queue, n: usize, batch: usize, conc: usize, run: usize) -> Run {
    let commits_before = commits(q);
    let (cpu_before, server_before, also_before) = (process_cpu(), server_cpu(q).await, also_cpu());
    let start = Instant::now();
    let per_task = n / conc;
    let mut tasks = Vec::new();
    for t in 0..conc {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while i < per_task {
                let k = batch.min(per_task - i);
                let msgs = (0..k)
                    .map(|j| NewMessage::new(payload(run, t * per_task + i + j)))
                    .collect();
                q.append(msgs).await.unwrap();
                i += k;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let append_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut acked = 0;
    if pipelined() {
        // A consumer that acks batch k while it leases batch k+1 (one ack in flight), as a
        // delivery loop does: the two calls can share a commit.
        let mut leased = 0;
        let mut in_flight: Option<tokio::task::JoinHandle<u64>> = None;
        while leased < per_task * conc {
            let leases = q.lease(LEASE_BATCH).await.unwrap();
            assert!(!leases.is_empty(), "queue ran dry after {leased}");
            leased += leases.len();
            if let Some(h) = in_flight.take() {
                acked += h.await.unwrap() as usize;
            }
            let ids: Vec<MessageId> = leases.iter().map(|l| l.id()).collect();
            let q = q.clone();
            in_flight = Some(tokio::spawn(async move { q.ack(&ids).await.unwrap() }));
        }
        if let Some(h) = in_flight {
            acked += h.await.unwrap() as usize;
        }
        assert_eq!(acked, per_task * conc);
    }
    while acked < per_task * conc {
        let leases = q.lease(LEASE_BATCH).await.unwrap();
        assert!(!leases.is_empty(), "queue ran dry after {acked}");
        let ids: Vec<MessageId> = leases.iter().map(|l| l.id()).collect();
        acked += q.ack(&ids).await.unwrap() as usize;
    }
    let ack_s = start.elapsed().as_secs_f64();
    Run {
        append_s,
        ack_s,
        syncs: commits(q) - commits_before,
        cpu_s: process_cpu() - cpu_before,
        server_cpu_s: server_cpu(q).await - server_before,
        also_cpu_s: also_cpu() - also_before,
    }
}

/// QUEUE_BENCH_PIPELINE=1: the consumer acks batch k while it leases batch k+1.
fn pipelined() -> bool {
    std::env::var("QUEUE_BENCH_PIPELINE").as_deref() == Ok("1")
}

fn commits(q: &Queue) -> u64 {
    match q {
        Queue::Embedded(e) => e.commits(),
        Queue::Redis(_) | Queue::RedisCluster(_) => 0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn bench(name: &str, q: &Queue, n: usize, batch: usize, conc: usize, runs: usize) {
    let mut rates = Vec::new();
    let mut appends = Vec::new();
    let mut acks = Vec::new();
    let mut syncs = Vec::new();
    let mut cpu = Vec::new();
    let mut server = Vec::new();
    let mut also = Vec::new();
    for r in 0..runs {
        let run = one_run(q, n, batch, conc, r).await;
        let total = (n / conc * conc) as f64;
        rates.push(total / (run.append_s + run.ack_s));
        appends.push(total / run.append_s);
        acks.push(total / run.ack_s);
        syncs.push(run.syncs as f64);
        cpu.push(run.cpu_s * 1e6 / total);
        server.push(run.server_cpu_s * 1e6 / total);
        also.push(run.also_cpu_s * 1e6 / total);
    }
    let sync_col = if matches!(q, Queue::Embedded(_)) {
        let s = median(syncs);
        format!("{s:>8.0} {:>10.1}", (n as f64) / s.max(1.0))
    } else {
        format!("{:>8} {:>10}", "-", "-")
    };
    let server_col = if matches!(q, Queue::Redis(_) | Queue::RedisCluster(_)) {
        format!("{:>14.1}", median(server))
    } else {
        format!("{:>14}", "-")
    };
    let also_col = if also_measured() {
        format!(" {:>14.1}", median(also))
    } else {
        String::new()
    };
    println!(
        "{name:<9} {batch:>6} {conc:>5} {n:>7} {:>14.0} {:>12.0} {:>12.0} {sync_col} {:>11.1} {server_col}{also_col}",
        median(rates),
        median(appends),
        median(acks),
        median(cpu),
    );
}

fn header() {
    let mut line = format!(
        "{:<9} {:>6} {:>5} {:>7} {:>14} {:>12} {:>12} {:>8} {:>10} {:>11} {:>14}",
        "backend",
        "batch",
        "tasks",
        "msgs",
        "append+ack/s",
        "append/s",
        "ack/s",
        "syncs",
        "msgs/sync",
        "cpu µs/msg",
        "server µs/msg"
    );
    if also_measured() {
        line.push_str(&format!(" {:>14}", "also µs/msg"));
    }
    println!("{line}");
}

/// How long opening an embedded queue takes with `backlog` messages queued (1 KB each, a
/// tenth of them leased): open rebuilds the in-memory indexes from the segment headers.
async fn open_cost(target: &std::path::Path, backlog: usize) {
    let dir = tempfile::tempdir_in(target).unwrap();
    let q = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    for start in (0..backlog).step_by(1000) {
        let msgs = (start..(start + 1000).min(backlog))
            .map(|i| NewMessage::new(payload(0, i)))
            .collect();
        q.append(msgs).await.unwrap();
    }
    q.lease(backlog / 10).await.unwrap();
    if let Queue::Embedded(e) = &q {
        e.close().await.unwrap();
    }
    let bytes = std::fs::metadata(dir.path().join(searchwire_queue::embedded::DB_FILE))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let q = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
        times.push(start.elapsed().as_secs_f64());
        assert_eq!(q.stats().await.unwrap().backlog, backlog as u64);
        if let Queue::Embedded(e) = &q {
            e.close().await.unwrap();
        }
    }
    let t = median(times);
    println!(
        "embedded open with a backlog of {backlog} ({:.0} MB file): {:.0} ms median of 3, {:.2} µs per message",
        bytes as f64 / 1e6,
        t * 1e3,
        t * 1e6 / backlog as f64
    );
}

/// What a consumer does with each lease of a batch in [`fail_cost`].
#[derive(Clone, Copy)]
enum Fail {
    Reschedule,
    DeadLetter,
}

/// Leases + reschedules (or dead-letters) per second on the embedded backend: `n` queued
/// 1 KB messages are leased in batches of 500 and every lease of a batch is rescheduled an
/// hour later (or dead-lettered) by its own task, as a delivery loop does after a failed
/// bulk; the calls of a batch share commits. Median of `runs`, a fresh queue each run.
async fn fail_cost(target: &std::path::Path, n: usize, runs: usize, mode: Fail) {
    let mut rates = Vec::new();
    let mut syncs = Vec::new();
    let mut cpu = Vec::new();
    for run in 0..runs {
        let dir = tempfile::tempdir_in(target).unwrap();
        let q = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
        for start in (0..n).step_by(1000) {
            let msgs = (start..(start + 1000).min(n))
                .map(|i| NewMessage::new(payload(run, i)).max_retries(10))
                .collect();
            q.append(msgs).await.unwrap();
        }
        let Queue::Embedded(e) = &q else {
            unreachable!()
        };
        let (commits_before, cpu_before) = (e.commits(), process_cpu());
        let start = Instant::now();
        let mut done = 0;
        while done < n {
            let leases = q.lease(LEASE_BATCH).await.unwrap();
            assert!(!leases.is_empty(), "queue ran dry after {done}");
            let later = searchwire_queue::Timestamp::from_millis(
                q.options().clock.now().as_millis() + 3_600_000,
            );
            let mut tasks = tokio::task::JoinSet::new();
            for l in leases {
                let q = q.clone();
                tasks.spawn(async move {
                    match mode {
                        Fail::Reschedule => {
                            q.reschedule(&l, later, "bench: 503").await.unwrap();
                        }
                        Fail::DeadLetter => {
                            assert!(q.dead_letter(&l, "bench: 400").await.unwrap());
                        }
                    }
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.unwrap();
                done += 1;
            }
        }
        let t = start.elapsed().as_secs_f64();
        rates.push(n as f64 / t);
        syncs.push((e.commits() - commits_before) as f64);
        cpu.push((process_cpu() - cpu_before) * 1e6 / n as f64);
        e.close().await.unwrap();
    }
    let what = match mode {
        Fail::Reschedule => "lease+reschedule",
        Fail::DeadLetter => "lease+dead-letter",
    };
    println!(
        "embedded {what:<17} {n:>7} msgs: {:>8.0} msgs/s, {:>6.0} syncs, {:>6.1} cpu µs/msg (median of {runs})",
        median(rates),
        median(syncs),
        median(cpu),
    );
}

fn main() {
    let n = env_usize("QUEUE_BENCH_N", 50_000);
    let runs = env_usize("QUEUE_BENCH_RUNS", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // (batch, concurrent tasks): one message per call from one task is the cost of a
        // sync per message; from 64 tasks, what group commit recovers; bigger batches, what a
        // bulk indexer handing over whole failed bulks gets.
        let all = [(1, 1), (1, 64), (10, 64), (100, 8), (1000, 1), (1000, 4)];
        // QUEUE_BENCH_CONFIGS=1000x1,100x64 runs those instead (any BATCHxTASKS).
        let only = std::env::var("QUEUE_BENCH_CONFIGS").unwrap_or_default();
        let configs: Vec<(usize, usize)> = if only.is_empty() {
            all.to_vec()
        } else {
            only.split(',')
                .map(|o| {
                    let (b, c) = o
                        .split_once('x')
                        .expect("QUEUE_BENCH_CONFIGS: BATCHxTASKS,...");
                    (
                        b.parse().expect("a batch size"),
                        c.parse().expect("a task count"),
                    )
                })
                .collect()
        };
        header();
        let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
        let backends = std::env::var("QUEUE_BENCH_BACKENDS").unwrap_or_default();
        let wanted = |b: &str| backends.is_empty() || backends.split(',').any(|x| x == b);
        for &(batch, conc) in configs.iter().filter(|_| wanted("embedded")) {
            // Fewer messages for the one-sync-per-message case: it is slow by design.
            let n = if batch * conc < 16 { n.min(2_000) } else { n };
            let dir = tempfile::tempdir_in(&target).unwrap();
            let q = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
            bench("embedded", &q, n, batch, conc, runs).await;
            if let Queue::Embedded(e) = &q {
                e.close().await.unwrap();
            }
        }
        let backlog = env_usize("QUEUE_BENCH_OPEN", 0);
        if backlog > 0 && wanted("embedded") {
            open_cost(&target, backlog).await;
        }
        let fail = env_usize("QUEUE_BENCH_FAIL", 0);
        if fail > 0 && wanted("embedded") {
            fail_cost(&target, fail, runs, Fail::Reschedule).await;
            fail_cost(&target, fail, runs, Fail::DeadLetter).await;
        }
        let cluster = std::env::var("QUEUE_BENCH_CLUSTER").unwrap_or_default();
        if !cluster.is_empty() && wanted("redis") {
            for &(batch, conc) in &configs {
                let mut cc = ClusterConfig::new(cluster.split(','));
                cc.shards = env_usize("QUEUE_BENCH_SHARDS", cc.shards);
                let mut c = RedisConfig::cluster(cc);
                c.stream = format!("bench-{}-{batch}-{conc}", std::process::id());
                c.small_append = env_usize("QUEUE_BENCH_SMALL", c.small_append);
                c.group_commit = std::env::var("QUEUE_BENCH_GROUP").as_deref() != Ok("0");
                c.min_replicas = env_usize("QUEUE_BENCH_MIN_REPLICAS", 0);
                let shards = c.cluster.as_ref().map_or(0, |c| c.shards);
                let name = match c.min_replicas {
                    0 => format!("cluster/{shards}"),
                    n => format!("cluster/{shards}+wait{n}"),
                };
                let q = Queue::connect_redis(c).await.unwrap();
                let n = if batch * conc < 16 { n.min(10_000) } else { n };
                bench(&name, &q, n, batch, conc, runs).await;
            }
            return;
        }
        match std::env::var("SEARCHWIRE_TEST_REDIS") {
            Ok(url) if !url.is_empty() && wanted("redis") => {
                for &(batch, conc) in &configs {
                    let mut c = RedisConfig::new(url.clone());
                    let sentinels = std::env::var("QUEUE_BENCH_SENTINEL").unwrap_or_default();
                    if !sentinels.is_empty() {
                        c.sentinel = Some(SentinelConfig::new(sentinels.split(','), "searchwire"));
                    }
                    c.stream = format!("bench-{}-{batch}-{conc}", std::process::id());
                    c.small_append = env_usize("QUEUE_BENCH_SMALL", c.small_append);
                    c.group_commit = std::env::var("QUEUE_BENCH_GROUP").as_deref() != Ok("0");
                    c.min_replicas = env_usize("QUEUE_BENCH_MIN_REPLICAS", 0);
                    let via = if c.sentinel.is_some() {
                        "redis-sentinel"
                    } else {
                        "redis"
                    };
                    let name = match c.min_replicas {
                        0 => via.to_owned(),
                        n => format!("{via}+wait{n}"),
                    };
                    let q = Queue::connect_redis(c).await.unwrap();
                    let n = if batch * conc < 16 { n.min(10_000) } else { n };
                    bench(&name, &q, n, batch, conc, runs).await;
                }
            }
            _ => eprintln!(
                "redis: skipped (set SEARCHWIRE_TEST_REDIS, e.g. from scripts/redis start)"
            ),
        }
    });
}
