//! Crash tests: child processes (this test binary, re-run in a child mode) work on a queue
//! and are killed with SIGKILL at random moments; the parent then counts.
//!
//! - Embedded: a child appends and acks under load, printing each append and ack on stdout
//!   only after the call returned. After each of 20+ kills, every append that returned is
//!   still queued (with its payload) or was acked, and nothing acked is queued.
//! - Redis: two consumer processes share one queue; one is killed while it holds leases.
//!   The other takes over once the leases time out, and every message is delivered.
//! - Redis: a child appends (in one script call or through transactions) and acks as the
//!   embedded one does, killed 20+ times: the same counts, and no append is left half
//!   written (every record has its hash and arrival entry and is scheduled or held).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use searchwire_queue::{
    Appended, EmbeddedConfig, MessageId, NewMessage, Queue, QueueOptions, RedisConfig,
};

/// Set in a child: which role it plays ("embedded", "redis-consumer" or "redis-appender").
const ROLE_ENV: &str = "SEARCHWIRE_QUEUE_CRASH_ROLE";
/// The data directory (embedded) or stream name (Redis) the child works on.
const TARGET_ENV: &str = "SEARCHWIRE_QUEUE_CRASH_TARGET";
/// In a Redis consumer: hold the first leases without acking (to be killed mid-lease).
const HANG_ENV: &str = "SEARCHWIRE_QUEUE_CRASH_HANG";

const ROUNDS: usize = 24;

/// Runs this test binary again as a child in `role`, with its stdout piped. Only the test
/// `child_process` runs in it, and it does the role's work.
fn spawn_child(role: &str, target: &str, extra: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE_ENV, role)
    .env(TARGET_ENV, target)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Reads a child's stdout on a thread; sends each *complete* line (a line cut by the kill
/// is dropped: it was never fully reported).
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match out.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let line = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                if tx.send(line).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Waits up to `timeout` for a line ending with `marker` (the test harness may print its
/// own text before the child's first line); returns every line up to it.
fn wait_for(rx: &mpsc::Receiver<String>, marker: &str, timeout: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let hit = l.ends_with(marker);
                seen.push(l);
                if hit {
                    return seen;
                }
            }
            Err(e) => panic!(
                "no {marker:?} line from the child within {timeout:?}: {e}; last lines {:?}",
                &seen[seen.len().saturating_sub(5)..]
            ),
        }
    }
}

/// A child process that is SIGKILLed when dropped (also when the test panics).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
}

/// The child side. Does nothing unless this process was started by `spawn_child`.
#[test]
fn child_process() {
    let (Ok(role), Ok(target)) = (std::env::var(ROLE_ENV), std::env::var(TARGET_ENV)) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match role.as_str() {
        "embedded" => rt.block_on(embedded_child(&target)),
        "redis-consumer" => rt.block_on(redis_consumer(&target)),
        "redis-appender" => rt.block_on(redis_appender(&target)),
        other => panic!("unknown child role {other}"),
    }
}

async fn embedded_child(dir: &str) {
    let mut c = EmbeddedConfig::new(dir);
    c.options = QueueOptions::default().lease_timeout(Duration::from_millis(200));
    let q = Queue::open_embedded(c).unwrap();
    println!("READY");
    append_and_ack(q).await;
}

/// Appends (4 tasks, batches of 1..=16) and leases+acks, forever; reports after each call
/// returned: `A <id> <payload>` and `K <id>`, and `k <id>` before an ack is sent.
async fn append_and_ack(q: Queue) {
    let nonce = format!("{}-{:x}", std::process::id(), fastrand::u64(..));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let q = q.clone();
        let nonce = nonce.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0u64.. {
                let n = fastrand::usize(1..=16);
                let batch: Vec<NewMessage> = (0..n)
                    .map(|j| {
                        let pad = "x".repeat(fastrand::usize(0..900));
                        NewMessage::new(format!("{nonce}-{t}-{i}-{j}-{pad}"))
                    })
                    .collect();
                let payloads: Vec<String> = batch
                    .iter()
                    .map(|m| String::from_utf8(m.payload.clone()).unwrap())
                    .collect();
                let r = q.append(batch).await.unwrap();
                let mut out = String::new();
                for (a, p) in r.iter().zip(&payloads) {
                    if let Appended::New(id) = a {
                        out.push_str(&format!("A {id} {p}\n"));
                    }
                }
                print!("{out}");
                if t % 2 == 0 {
                    let leased = q.lease(8).await.unwrap();
                    let ids: Vec<MessageId> = leased
                        .iter()
                        .filter(|_| fastrand::bool())
                        .map(|l| l.id())
                        .collect();
                    // Announced first: an ack the kill cuts off may or may not have landed.
                    let out: String = ids.iter().map(|id| format!("k {id}\n")).collect();
                    print!("{out}");
                    q.ack(&ids).await.unwrap();
                    let out: String = ids.iter().map(|id| format!("K {id}\n")).collect();
                    print!("{out}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[test]
fn embedded_kill_9_loses_no_returned_append_and_resurrects_no_ack() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().to_str().unwrap().to_owned();
    let mut reports = Reports::default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for round in 0..ROUNDS {
        reports.run_and_kill("embedded", &target);
        // Open what the kill left and count.
        let present = rt.block_on(async {
            let q = Queue::open_embedded(EmbeddedConfig::new(&target)).unwrap();
            let present = everything_kept(&q).await;
            if let Queue::Embedded(e) = &q {
                e.close().await.unwrap();
            }
            present
        });
        reports.check(round, &present);
    }
    reports.summary();
}

/// What the children of a crash test reported, over all its rounds.
#[derive(Default)]
struct Reports {
    appended: HashMap<u64, String>,
    acked: HashSet<u64>,
    ack_sent: HashSet<u64>,
}

impl Reports {
    /// Starts a child in `role` on `target` and SIGKILLs it at a random moment of its load,
    /// 5–300 ms after its queue opened; then reads what it reported.
    fn run_and_kill(&mut self, role: &str, target: &str) {
        let mut child = Killed(spawn_child(role, target, &[]));
        let rx = lines(&mut child.0);
        wait_for(&rx, "READY", Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(fastrand::u64(5..300)));
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the child exited on its own"
        );
        kill(&mut child.0);
        self.read(rx);
    }

    /// Reads a killed child's lines.
    fn read(&mut self, rx: mpsc::Receiver<String>) {
        for line in rx.iter() {
            let mut f = line.splitn(3, ' ');
            match (f.next(), f.next(), f.next()) {
                (Some("A"), Some(id), Some(p)) => {
                    self.appended.insert(id.parse().unwrap(), p.to_owned());
                }
                (Some("K"), Some(id), None) => {
                    self.acked.insert(id.parse().unwrap());
                }
                (Some("k"), Some(id), None) => {
                    self.ack_sent.insert(id.parse().unwrap());
                }
                _ => {}
            }
        }
    }

    /// Every append that returned is still there (queued or dead) with its payload, unless
    /// it was acked; nothing acked is.
    fn check(&self, round: usize, present: &HashMap<u64, String>) {
        for (id, payload) in &self.appended {
            if self.acked.contains(id) {
                assert!(
                    !present.contains_key(id),
                    "round {round}: acked message {id} came back"
                );
            } else if self.ack_sent.contains(id) {
                // Its ack was cut off by a kill: either outcome is right, but never a
                // different payload.
                if let Some(p) = present.get(id) {
                    assert_eq!(p, payload, "round {round}: message {id} changed");
                }
            } else {
                assert_eq!(
                    present.get(id),
                    Some(payload),
                    "round {round}: message {id} was appended (the call returned) but is lost"
                );
            }
        }
    }

    fn summary(&self) {
        eprintln!(
            "{ROUNDS} kills: {} appends reported, {} acks reported",
            self.appended.len(),
            self.acked.len()
        );
        assert!(
            self.appended.len() > ROUNDS * 10,
            "too little load to mean anything"
        );
        assert!(!self.acked.is_empty());
        let cut_off = self.ack_sent.difference(&self.acked).count();
        eprintln!("{cut_off} acks were cut off by a kill");
    }
}

/// Every message queued or dead, by id, with its payload.
async fn everything_kept(q: &Queue) -> HashMap<u64, String> {
    let mut present = HashMap::new();
    let mut after = None;
    loop {
        let page = q.list(after, 1000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for m in page {
            present.insert(m.id.0, String::from_utf8(m.payload).unwrap());
        }
    }
    // A lease the kill (or the 200 ms lease timeout) left unacked counts an attempt each
    // time it expires, and ends in the dead letters after three: still there.
    let mut after = None;
    loop {
        let page = q.dead_letters(after, 1000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.message.id);
        for d in page {
            present.insert(
                d.message.id.0,
                String::from_utf8(d.message.payload).unwrap(),
            );
        }
    }
    present
}

/// A Redis consumer: leases (lease timeout 500 ms, wall clock), reports `L <id>` for each
/// lease, then delivers (`D <id> <payload>`) and acks. With `HANG_ENV` it reports its first
/// leases and then hangs holding them. It stops when the queue is empty (`DONE`).
async fn redis_consumer(stream: &str) {
    let mut c = RedisConfig::new(support::redis_url().unwrap());
    c.stream = stream.to_owned();
    c.options = QueueOptions::default().lease_timeout(Duration::from_millis(500));
    let q = Queue::connect_redis(c).await.unwrap();
    let hang = std::env::var(HANG_ENV).is_ok();
    loop {
        let leases = q.lease(25).await.unwrap();
        if leases.is_empty() {
            if q.stats().await.unwrap().backlog == 0 {
                println!("DONE");
                return;
            }
            // Others hold the rest: poll again, as a relay's delivery loop would.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let out: String = leases.iter().map(|l| format!("L {}\n", l.id())).collect();
        print!("{out}");
        if hang {
            println!("HOLDING");
            std::future::pending::<()>().await;
        }
        let out: String = leases
            .iter()
            .map(|l| {
                format!(
                    "D {} {}\n",
                    l.id(),
                    String::from_utf8_lossy(&l.message.payload)
                )
            })
            .collect();
        print!("{out}");
        let ids: Vec<MessageId> = leases.iter().map(|l| l.id()).collect();
        q.ack(&ids).await.unwrap();
    }
}

#[test]
fn redis_a_consumer_killed_mid_lease_loses_nothing() {
    let Some(url) = support::redis_url() else {
        return;
    };
    let stream = support::unique_stream("crash");
    let rt = tokio::runtime::Runtime::new().unwrap();
    const N: usize = 1000;
    let ids: HashSet<u64> = rt.block_on(async {
        let mut c = RedisConfig::new(url);
        c.stream = stream.clone();
        let q = Queue::connect_redis(c).await.unwrap();
        let batch = (0..N)
            .map(|i| NewMessage::new(format!("doc-{i}")))
            .collect();
        q.append(batch)
            .await
            .unwrap()
            .iter()
            .map(|a| a.id().0)
            .collect()
    });
    assert_eq!(ids.len(), N);

    let mut a = Killed(spawn_child("redis-consumer", &stream, &[(HANG_ENV, "1")]));
    let a_lines = lines(&mut a.0);
    let mut b = Killed(spawn_child("redis-consumer", &stream, &[]));
    let b_lines = lines(&mut b.0);
    let held: Vec<u64> = wait_for(&a_lines, "HOLDING", Duration::from_secs(60))
        .iter()
        .filter_map(|l| l.split_once("L ").map(|(_, id)| id.parse().unwrap()))
        .collect();
    assert!(!held.is_empty());
    kill(&mut a.0); // SIGKILL while it holds `held`
    let b_out = wait_for(&b_lines, "DONE", Duration::from_secs(120));
    b.0.wait().unwrap();

    let mut delivered: HashMap<u64, String> = HashMap::new();
    for l in &b_out {
        if let Some(rest) = l.strip_prefix("D ") {
            let (id, payload) = rest.split_once(' ').unwrap();
            delivered.insert(id.parse().unwrap(), payload.to_owned());
        }
    }
    for id in &held {
        assert!(
            delivered.contains_key(id),
            "message {id} held by the killed consumer was never delivered"
        );
    }
    let missing: Vec<_> = ids
        .iter()
        .filter(|id| !delivered.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    eprintln!(
        "killed consumer held {} leases; the survivor delivered all {N}",
        held.len()
    );
}

/// A Redis appender: the load of [`append_and_ack`] on the queue `stream` (lease timeout
/// 200 ms, wall clock), with appends of up to 8 messages in one script call and larger ones
/// through the transaction path, so a kill can land in either.
async fn redis_appender(stream: &str) {
    let mut c = RedisConfig::new(support::redis_url().unwrap());
    c.stream = stream.to_owned();
    c.small_append = 8;
    c.options = QueueOptions::default().lease_timeout(Duration::from_millis(200));
    let q = Queue::connect_redis(c).await.unwrap();
    println!("READY");
    append_and_ack(q).await;
}

/// How many members each of the queue's structures holds; for a queue at rest they agree:
/// every record has its hash and arrival entry, and is scheduled or held.
async fn redis_counts(url: &str, stream: &str) -> [u64; 4] {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let (msg, hashes, arrival, ready, delayed, held): (u64, u64, u64, u64, u64, u64) =
        redis::pipe()
            .cmd("HLEN")
            .arg(format!("{stream}:msg"))
            .cmd("HLEN")
            .arg(format!("{stream}:hashes"))
            .cmd("ZCARD")
            .arg(format!("{stream}:arrival"))
            .cmd("ZCARD")
            .arg(format!("{stream}:ready"))
            .cmd("ZCARD")
            .arg(format!("{stream}:delayed"))
            .cmd("HLEN")
            .arg(format!("{stream}:held"))
            .query_async(&mut c)
            .await
            .unwrap();
    [msg, hashes, arrival, ready + delayed + held]
}

#[test]
fn redis_kill_9_of_an_appender_loses_no_returned_append_and_leaves_no_half_append() {
    let Some(url) = support::redis_url() else {
        return;
    };
    let stream = support::unique_stream("crash-append");
    let mut reports = Reports::default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for round in 0..ROUNDS {
        reports.run_and_kill("redis-appender", &stream);
        let present = rt.block_on(async {
            let counts = redis_counts(&url, &stream).await;
            assert!(
                counts.iter().all(|&n| n == counts[0]),
                "round {round}: records, hashes, arrival and scheduled+held disagree: {counts:?}"
            );
            let mut c = RedisConfig::new(url.clone());
            c.stream = stream.clone();
            let q = Queue::connect_redis(c).await.unwrap();
            everything_kept(&q).await
        });
        reports.check(round, &present);
    }
    reports.summary();
}
