//! `searchwire relay` as a child process, and a small load generator that records every item
//! the relay acknowledged (a 2xx item status) — shared by the kill test against the fake
//! cluster and the real-node test.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

pub struct RelayProc {
    pub child: Child,
    pub addr: SocketAddr,
}

/// Starts `searchwire relay` on an embedded queue in `queue_dir` and waits until it listens;
/// its stderr is echoed with a prefix.
pub async fn spawn_relay(urls: &str, queue_dir: &Path, port: u16, extra: &[&str]) -> RelayProc {
    let dir = queue_dir.to_str().unwrap();
    let mut args = vec!["--queue-dir", dir];
    args.extend_from_slice(extra);
    spawn_relay_with(urls, port, &args).await
}

/// Starts `searchwire relay` with these queue flags and extras and waits until it listens.
pub async fn spawn_relay_with(urls: &str, port: u16, args: &[&str]) -> RelayProc {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(BIN)
        .args(["relay", "--url", urls, "--listen", &addr.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = lines.next_line().await {
            eprintln!("[relay] {l}");
            if l.contains("listening on") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(ready, "the relay did not start");
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            eprintln!("[relay] {l}");
        }
    });
    RelayProc { child, addr }
}

/// One HTTP/1.1 request on its own connection; `None` when the connection failed.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    http_with(addr, method, path, &[], body).await
}

/// [`http`] with extra headers.
pub async fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(body).await.ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((status, body.to_owned()))
}

/// What the generator saw.
#[derive(Default)]
pub struct Tally {
    pub acked: Mutex<BTreeSet<String>>,
    pub queued: AtomicU64,
    pub sent: AtomicU64,
}

/// A load: `create` bulk requests of `batch` items with ids `{prefix}-{task}-{n}` from
/// `tasks` tasks until stopped or `limit` items are acknowledged in all (the tally's total).
#[derive(Clone, Debug)]
pub struct Load {
    pub addr: SocketAddr,
    pub index: String,
    pub prefix: String,
    pub tasks: usize,
    pub batch: usize,
    pub limit: u64,
}

/// Runs `spec` until `stop` is set or its limit is reached; records acknowledged ids in
/// `tally`. Ids are never reused, so an item whose request got no answer is simply not
/// acknowledged.
pub async fn load(spec: Load, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let Load {
        addr,
        index,
        prefix,
        tasks,
        batch,
        limit,
    } = spec;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (index, prefix, stop, tally) = (
            index.to_owned(),
            prefix.to_owned(),
            stop.clone(),
            tally.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && (tally.acked.lock().unwrap().len() as u64) < limit {
                let mut body = String::new();
                let mut ids = Vec::new();
                for _ in 0..batch {
                    let id = format!("{prefix}-{t}-{n}");
                    n += 1;
                    body.push_str(&format!("{{\"create\":{{\"_index\":\"{index}\",\"_id\":\"{id}\"}}}}\n{{\"n\":{n},\"task\":{t}}}\n"));
                    ids.push(id);
                }
                tally.sent.fetch_add(batch as u64, Ordering::Relaxed);
                let Some((200, text)) = http(addr, "POST", "/_bulk", body.as_bytes()).await else {
                    // The relay is down or restarting: nothing of this request was acknowledged.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let v: Value = serde_json::from_str(&text).unwrap();
                let items = v["items"].as_array().unwrap();
                assert_eq!(items.len(), ids.len());
                let mut acked = tally.acked.lock().unwrap();
                for (item, id) in items.iter().zip(ids) {
                    let r = item.as_object().unwrap().values().next().unwrap();
                    let status = r["status"].as_u64().unwrap();
                    if (200..300).contains(&status) {
                        assert_eq!(r["_id"], id.as_str());
                        if r["result"] == "queued" {
                            tally.queued.fetch_add(1, Ordering::Relaxed);
                        }
                        acked.insert(id);
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

/// One [`load`] per relay into `logs`, ids prefixed with the relay's name: the handles.
pub fn spawn_loads(
    relays: &[(&str, SocketAddr)],
    tasks: usize,
    batch: usize,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    relays
        .iter()
        .map(|&(name, addr)| {
            let spec = Load {
                addr,
                index: "logs".into(),
                prefix: name.into(),
                tasks,
                batch,
                limit: u64::MAX,
            };
            tokio::spawn(load(spec, stop.clone(), tally.clone()))
        })
        .collect()
}

/// The relay's `/health/retry-queue` answer, if it answers.
pub async fn health(addr: SocketAddr) -> Option<(u16, Value)> {
    let (s, b) = http(addr, "GET", "/health/retry-queue", b"").await?;
    Some((s, serde_json::from_str(&b).ok()?))
}

/// Waits until the relay's queue is empty and its readiness is 200.
pub async fn wait_drained(addr: SocketAddr, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some((200, h)) = health(addr).await {
            if h["backlog"] == 0 {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay's queue did not drain: {:?}",
            health(addr).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `sig` (`-TERM`, `-INT`, ...) to the relay, if it still runs.
pub fn signal(p: &RelayProc, sig: &str) {
    if let Some(pid) = p.child.id() {
        let _ = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status();
    }
}

/// Sends SIGTERM and waits for the exit code.
pub async fn terminate(mut p: RelayProc) -> Option<i32> {
    signal(&p, "-TERM");
    tokio::time::timeout(Duration::from_secs(30), p.child.wait())
        .await
        .ok()
        .and_then(|s| s.ok())
        .and_then(|s| s.code())
}
