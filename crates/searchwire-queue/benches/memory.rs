//! Memory per queued message of the embedded backend's in-memory indexes.
//!
//!   cargo bench -p searchwire-queue --bench memory
//!   QUEUE_MEM_BACKLOGS=100000,1000000 cargo bench -p searchwire-queue --bench memory
//!
//! For each backlog N (1 KB messages, a tenth of them leased) it writes a queue and closes
//! it; then a fresh child process (this binary again, so no freed memory of the writing
//! phase is reused) measures its RSS growth over an open. The open's growth holds the
//! indexes and the pages redb read and keeps in its cache; a second child opens the same
//! file with redb alone and reads the rows an open reads: the difference is the indexes.
//! Each child repeats its measurement 3 times in 3 processes; the medians are printed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use redb::{ReadableTable, TableDefinition};
use searchwire_queue::{EmbeddedConfig, EmbeddedQueue, NewMessage};

/// Set in a child: what to measure ("queue" or "redb") and the directory.
const CHILD: &str = "QUEUE_MEM_CHILD";
const CHILD_DIR: &str = "QUEUE_MEM_DIR";

/// VmRSS of this process in bytes.
fn rss() -> i64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn payload(i: usize) -> Vec<u8> {
    let mut p = format!("{{\"doc\":{i},\"pad\":\"").into_bytes();
    p.resize(1022, b'x');
    p.extend_from_slice(b"\"}");
    p
}

/// The tables an open reads (on-disk format 3): segment headers, done bitmaps, lease calls.
const READ_ON_OPEN: [&str; 3] = ["segments", "segment_done", "calls"];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// In a child: RSS growth over an open of the queue in `dir` (kept open while measured).
fn child_queue(dir: &std::path::Path, rt: &tokio::runtime::Runtime) -> i64 {
    let before = rss();
    let q = EmbeddedQueue::open(EmbeddedConfig::new(dir)).unwrap();
    let backlog = rt.block_on(q.stats()).unwrap().backlog;
    std::hint::black_box(backlog);
    let grown = rss() - before;
    rt.block_on(q.close()).unwrap();
    grown
}

/// In a child: RSS growth over reading, with redb alone, the rows an open reads.
fn child_redb(dir: &std::path::Path) -> i64 {
    let before = rss();
    let db = redb::Database::create(dir.join(searchwire_queue::embedded::DB_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let mut touched = 0usize;
    for name in READ_ON_OPEN {
        let t = txn
            .open_table(TableDefinition::<u64, &[u8]>::new(name))
            .unwrap();
        for r in t.iter().unwrap() {
            let (k, v) = r.unwrap();
            touched = touched.wrapping_add(k.value() as usize + v.value().len());
        }
    }
    std::hint::black_box(touched);
    rss() - before
}

/// Runs this binary as a child measuring `what` on `dir`; its RSS growth in bytes.
fn spawn(what: &str, dir: &std::path::Path) -> i64 {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .env(CHILD, what)
        .env(CHILD_DIR, dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn measure(rt: &tokio::runtime::Runtime, target: &std::path::Path, backlog: usize) {
    let dir = tempfile::tempdir_in(target).unwrap();
    rt.block_on(async {
        let q = EmbeddedQueue::open(EmbeddedConfig::new(dir.path())).unwrap();
        for start in (0..backlog).step_by(1000) {
            let msgs = (start..(start + 1000).min(backlog))
                .map(|i| NewMessage::new(payload(i)))
                .collect();
            q.append(msgs).await.unwrap();
        }
        q.lease(backlog / 10).await.unwrap();
        q.close().await.unwrap();
    });
    let open = median((0..3).map(|_| spawn("queue", dir.path())).collect());
    let redb = median((0..3).map(|_| spawn("redb", dir.path())).collect());
    let n = backlog as f64;
    println!(
        "backlog {backlog:>8}: RSS over an open {:>7.1} MB ({:>4.0} B/msg), redb alone reading \
         the same rows {:>6.1} MB ({:>4.0} B/msg): indexes {:>4.0} B/msg",
        open as f64 / 1e6,
        open as f64 / n,
        redb as f64 / 1e6,
        redb as f64 / n,
        (open - redb) as f64 / n,
    );
}

fn main() {
    if let Ok(what) = std::env::var(CHILD) {
        let dir = std::path::PathBuf::from(std::env::var(CHILD_DIR).unwrap());
        let grown = match what.as_str() {
            "queue" => child_queue(&dir, &runtime()),
            _ => child_redb(&dir),
        };
        println!("{grown}");
        return;
    }
    let backlogs: Vec<usize> = std::env::var("QUEUE_MEM_BACKLOGS")
        .unwrap_or_else(|_| "100000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let rt = runtime();
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    for b in backlogs {
        measure(&rt, &target, b);
    }
}
