//! `searchwire ingest` against an in-process fake cluster with the `_bulk` store: exact
//! counts, dead letters with line numbers, exit codes, and exactly-once across a SIGKILL
//! and `--resume`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use searchwire_fake::{Behavior, BulkFault, FakeBulk, FakeCluster};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

struct Fake {
    cluster: FakeCluster,
    bulk: FakeBulk,
}

async fn fake(n: usize) -> Fake {
    let cluster = FakeCluster::start(n).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    for node in cluster.nodes() {
        node.set_recording(false);
    }
    Fake { cluster, bulk }
}

impl Fake {
    fn url(&self) -> String {
        self.cluster.urls().join(",")
    }
}

fn command(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ingest")
        .args(args)
        .env_remove("SEARCHWIRE_REQUEST_TIMEOUT")
        .env_remove("SEARCHWIRE_PASSWORD")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn ingest(args: &[&str]) -> Output {
    let out = command(args).output();
    tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("ingest finished within 60 s")
        .unwrap()
}

fn summary(o: &Output) -> Value {
    let text = String::from_utf8_lossy(&o.stdout);
    let last = text
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary; stderr: {}", String::from_utf8_lossy(&o.stderr)));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("summary not JSON ({e}): {last}"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("searchwire-ingest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// `n` documents `{"id":"doc-I","n":I,...}` one per line.
fn write_docs(path: &Path, n: usize) {
    let mut s = String::with_capacity(n * 60);
    for i in 0..n {
        s.push_str(&format!(
            "{{\"id\":\"doc-{i:06}\",\"n\":{i},\"msg\":\"hello {i}\"}}\n"
        ));
    }
    std::fs::write(path, s).unwrap();
}

fn dead_letters(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_are_ingested_exactly_once_through_throttling_and_a_reset() {
    let f = fake(3).await;
    let input = tmp("docs.ndjson");
    write_docs(&input, 3000);
    f.bulk.fault_every(Some((7, BulkFault::Throttle)));
    f.bulk.reset_after_apply(1);
    let out = ingest(&[
        input.to_str().unwrap(),
        "--url",
        &f.url(),
        "--index",
        "docs",
        "--id-field",
        "id",
        "--batch-actions",
        "500",
        "--progress-every",
        "50ms",
    ])
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert_eq!(f.bulk.count("docs"), 3000);
    assert_eq!(f.bulk.max_writes(), 1, "nothing written twice");
    assert_eq!(f.bulk.ids("docs")[0], "doc-000000");
    let s = summary(&out);
    assert_eq!(s["lines"], 3000);
    assert_eq!(s["added"], 3000);
    assert_eq!(s["indexed"], 3000);
    assert_eq!(s["dead_letters"], 0);
    assert!(s["retried_throttled"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(
        s["retried_connection"], 500,
        "the reset batch was retried whole"
    );
    // The reset batch landed except its throttled items (every 7th: 71 of 500); the rest
    // came back 409 on the retry and count as present.
    assert_eq!(
        s["already_present"],
        500 - 500 / 7,
        "…and its 409s counted as present"
    );
    assert_eq!(s["created"], 3000 - (500 - 500 / 7));
    assert!(!err.contains('\r'), "not a terminal: plain lines");
}

/// The input is read in 256 KiB buffers and documents are cut out of them: lines that
/// cross a buffer's end, and a line longer than a whole buffer, arrive intact, from a file
/// and from stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_across_read_buffers_and_longer_than_one_arrive_intact() {
    use tokio::io::AsyncWriteExt;
    let f = fake(1).await;
    let big = format!("{{\"id\":\"big\",\"msg\":\"{}\"}}", "x".repeat(700_000));
    let mut text = String::new();
    for i in 0..30_000 {
        text.push_str(&format!(
            "{{\"id\":\"doc-{i:06}\",\"msg\":\"hello {i}\"}}\n"
        ));
        if i == 15_000 {
            text.push_str(&big);
            text.push('\n');
        }
    }
    // The last line has no line end.
    text.push_str("{\"id\":\"last\"}");
    let input = tmp("long-lines.ndjson");
    std::fs::write(&input, &text).unwrap();
    for (index, from) in [("file", input.to_str().unwrap()), ("stdin", "-")] {
        let mut cmd = command(&[
            from,
            "--url",
            &f.url(),
            "--index",
            index,
            "--id-field",
            "id",
        ]);
        let mut child = cmd.stdin(Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if from == "-" {
            stdin.write_all(text.as_bytes()).await.unwrap();
        }
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("ingest finished within 60 s")
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{index}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(summary(&out)["lines"], 30_002, "{index}");
        assert_eq!(f.bulk.count(index), 30_002, "{index}");
        assert_eq!(
            f.bulk.get(index, "big").unwrap().source,
            big.as_bytes(),
            "{index}"
        );
        assert_eq!(
            f.bulk.get(index, "doc-029999").unwrap().source.as_ref(),
            br#"{"id":"doc-029999","msg":"hello 29999"}"#
        );
        assert!(f.bulk.get(index, "last").is_some(), "{index}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lines_and_refused_documents_go_to_the_dead_letters_with_line_numbers() {
    let f = fake(1).await;
    f.bulk.mapping_error_marker("\"bad\":true");
    let input = tmp("mixed.ndjson");
    std::fs::write(
        &input,
        "{\"id\":\"a\",\"n\":1}\n\
         {\"id\":\"b\",\"bad\":true}\n\
         this is not json\n\
         \n\
         {\"n\":3}\n\
         {\"id\":\"c\",\"n\":4}\n",
    )
    .unwrap();
    let dead = tmp("mixed.dead.ndjson");
    let out = ingest(&[
        input.to_str().unwrap(),
        "--url",
        &f.url(),
        "--index",
        "m",
        "--id-field",
        "id",
        "--dead-letter",
        dead.to_str().unwrap(),
    ])
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "dead letters exit 1; stderr: {err}"
    );
    assert!(err.contains("line 3: not a JSON"), "{err}");
    assert!(err.contains("line 5: no id field \"id\""), "{err}");
    assert_eq!(f.bulk.ids("m"), vec!["a", "c"]);
    let mut d = dead_letters(&dead);
    d.sort_by_key(|v| v["line"].as_u64());
    let lines: Vec<u64> = d.iter().map(|v| v["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![2, 3, 5]);
    assert_eq!(d[0]["error_type"], "mapper_parsing_exception");
    assert_eq!(d[0]["status"], 400);
    assert_eq!(d[0]["id"], "b");
    assert_eq!(d[0]["source"]["bad"], true);
    assert_eq!(d[1]["error_type"], "malformed_input");
    assert_eq!(d[1]["text"], "this is not json");
    let s = summary(&out);
    assert_eq!(
        (s["indexed"].as_u64(), s["malformed"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(s["dead_letters"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_format_pairs_from_stdin() {
    use tokio::io::AsyncWriteExt;
    let f = fake(2).await;
    f.bulk.create_index("x");
    let input = "{\"index\":{\"_index\":\"x\",\"_id\":\"1\"}}\n{\"v\":1}\n\
                 {\"create\":{\"_index\":\"x\",\"_id\":\"2\"}}\n{\"v\":2}\n\
                 {\"delete\":{\"_index\":\"x\",\"_id\":\"1\"}}\n\
                 {\"create\":{\"_index\":\"y\"}}\n{\"v\":3}\n";
    let mut child = command(&["-", "--url", &f.url(), "--content-hash-ids"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Same id: the delete waited for the index of "1".
    assert_eq!(f.bulk.ids("x"), vec!["2"]);
    assert_eq!(f.bulk.writes("x", "1"), 1);
    let hash = f.bulk.ids("y");
    assert_eq!(hash.len(), 1);
    assert_eq!(hash[0].len(), 64, "content-hash id");
    let s = summary(&out);
    assert_eq!(
        (s["created"].as_u64(), s["deleted"].as_u64()),
        (Some(3), Some(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2() {
    let f = fake(1).await;
    let out = ingest(&["-", "--url", &f.url(), "--format", "docs"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--format docs needs --index"));
    let out = ingest(&["-", "--url", &f.url(), "--index", "i", "--resume", "/tmp/x"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not stdin"));
    let out = ingest(&["/nonexistent/file", "--url", &f.url(), "--index", "i"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open input"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_credentials_exit_5_and_stop_reading() {
    let f = fake(1).await;
    f.bulk.answer_next(Behavior::status(401));
    let input = tmp("auth.ndjson");
    write_docs(&input, 50);
    let out = ingest(&[
        input.to_str().unwrap(),
        "--url",
        &f.url(),
        "--index",
        "a",
        "--id-field",
        "id",
    ])
    .await;
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ingest INPUT --index k --id-field id --resume CP`, at full speed.
async fn resume_run(f: &Fake, input: &Path, cp: &Path) -> Output {
    f.bulk.set_delay(None);
    let (input, cp) = (input.to_str().unwrap(), cp.to_str().unwrap());
    ingest(&[
        input,
        "--url",
        &f.url(),
        "--index",
        "k",
        "--id-field",
        "id",
        "--resume",
        cp,
    ])
    .await
}

fn checkpoint(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Starts an ingest that takes a while (each bulk answer is delayed), waits until its
/// checkpoint is past the start but not at the end, and returns the running child.
async fn slow_ingest_until_checkpoint(
    f: &Fake,
    input: &Path,
    cp: &Path,
    total_bytes: u64,
) -> tokio::process::Child {
    f.bulk.set_delay(Some(Duration::from_millis(40)));
    let child = command(&[
        input.to_str().unwrap(),
        "--url",
        &f.url(),
        "--index",
        "k",
        "--id-field",
        "id",
        "--batch-actions",
        "200",
        "--concurrency",
        "2",
        "--resume",
        cp.to_str().unwrap(),
        "--checkpoint-every",
        "50ms",
    ])
    .spawn()
    .unwrap();
    let ok = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(c) = checkpoint(cp) {
                let off = c["offset"].as_u64().unwrap();
                if off > total_bytes / 4 {
                    assert!(
                        off < total_bytes,
                        "finished before the kill; slow the fake down"
                    );
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "the checkpoint did not advance");
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_kill_9_delivers_every_document_exactly_once() {
    let f = fake(2).await;
    let input = tmp("resume.ndjson");
    let n = 10_000;
    write_docs(&input, n);
    let total = std::fs::metadata(&input).unwrap().len();
    let cp = tmp("resume.checkpoint");
    let mut child = slow_ingest_until_checkpoint(&f, &input, &cp, total).await;
    child.start_kill().unwrap(); // SIGKILL
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), None, "killed by a signal");
    let landed = f.bulk.count("k");
    let at_kill = checkpoint(&cp).unwrap()["offset"].as_u64().unwrap();
    assert!(landed > 0 && landed < n, "{landed}");

    let out = resume_run(&f, &input, &cp).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(f.bulk.count("k"), n, "every document");
    assert_eq!(f.bulk.max_writes(), 1, "exactly once");
    let s = summary(&out);
    assert_eq!(s["checkpoint"].as_u64(), Some(total));
    // The second run read only what was after the checkpoint.
    let reread = s["lines"].as_u64().unwrap();
    assert!(reread < n as u64, "resumed, not restarted: {reread}");
    // Whatever it re-sent that had landed came back 409 → already present, not an error.
    assert_eq!(
        s["created"].as_u64().unwrap() + s["already_present"].as_u64().unwrap(),
        reread
    );
    assert!(at_kill <= total);
    // A third run has nothing left to do.
    let out = resume_run(&f, &input, &cp).await;
    assert_eq!(summary(&out)["lines"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_cleanly_and_resume_finishes_the_job() {
    interrupt_stops_cleanly_and_resume_finishes_the_job("-INT", "sigint").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_too() {
    interrupt_stops_cleanly_and_resume_finishes_the_job("-TERM", "sigterm").await;
}

async fn interrupt_stops_cleanly_and_resume_finishes_the_job(signal: &str, name: &str) {
    let f = fake(1).await;
    let input = tmp(&format!("{name}.ndjson"));
    let n = 10_000;
    write_docs(&input, n);
    let total = std::fs::metadata(&input).unwrap().len();
    let cp = tmp(&format!("{name}.checkpoint"));
    let child = slow_ingest_until_checkpoint(&f, &input, &cp, total).await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&out);
    assert_eq!(s["interrupted"], true);
    // Everything read was delivered: the checkpoint is exactly what landed.
    let landed = f.bulk.count("k") as u64;
    assert_eq!(s["indexed"].as_u64(), Some(landed));
    assert_eq!(s["pending"], 0);
    let out = resume_run(&f, &input, &cp).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(f.bulk.count("k"), n);
    assert_eq!(f.bulk.max_writes(), 1);
    assert_eq!(
        summary(&out)["already_present"],
        0,
        "a clean stop leaves no overlap"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_exits_4_before_reading() {
    let f = fake(1).await;
    let url = f.url();
    f.cluster.node(0).kill().await;
    let out = ingest(&["-", "--url", &url, "--index", "i"]).await;
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no node reachable"));
}

/// The slow-cluster scenario through the command: 20,000 documents while the cluster
/// answers 20 % of items 429, resets 5 % of connections after applying the bulk, and loses
/// a node for 3 s. No good document is a dead letter (retryable items are retried past
/// their class count until the item deadline), exactly 20,000 are stored, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_cluster_dead_letters_no_good_document_and_ingest_exits_0() {
    let f = fake(3).await;
    let input = tmp("slow.ndjson");
    let dead = tmp("slow.dead.ndjson");
    write_docs(&input, 20_000);
    f.bulk.random_faults(Some((7, 0.20, 0.05)));
    let lost = f.cluster.node(2).clone();
    let outage = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        lost.kill().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        lost.revive().await.unwrap();
    });
    let out = ingest(&[
        input.to_str().unwrap(),
        "--url",
        &f.url(),
        "--index",
        "docs",
        "--id-field",
        "id",
        "--batch-actions",
        "500",
        "--dead-letter",
        dead.to_str().unwrap(),
    ])
    .await;
    outage.await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(dead_letters(&dead).is_empty(), "{:?}", dead_letters(&dead));
    assert_eq!(f.bulk.count("docs"), 20_000);
    assert_eq!(f.bulk.max_writes(), 1, "nothing written twice");
    let s = summary(&out);
    assert_eq!(s["dead_letters"], 0, "{s}");
    assert_eq!(s["indexed"], 20_000, "{s}");
    assert!(s["retried_throttled"].as_u64().unwrap() > 4_000, "{s}");
    assert!(s["retried_connection"].as_u64().unwrap() > 0, "{s}");
}
