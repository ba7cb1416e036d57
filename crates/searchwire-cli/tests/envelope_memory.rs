//! The `--json` envelope's memory: `searchwire request --json` against a node answering a
//! 64 MiB JSON array peaks at no more than twice the body (the body itself, plus the
//! process's own few MiB), because the envelope embeds the body as it came instead of
//! building a tree of it (a tree takes about 18 times the body).
//!
//! Alone in its test binary: the peak is read with `getrusage(RUSAGE_CHILDREN)`, the
//! largest resident set of any child this process has waited for, so no other test may
//! start a child here.

use std::time::Duration;

use searchwire_fake::{Behavior, FakeCluster, Match};

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

const MIB: usize = 1024 * 1024;

/// A valid JSON array of `size` bytes or a little more: small objects, one per line, the
/// kind of answer (`_search` hits, `_cat` as JSON) whose tree is many times its text.
fn json_array(size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    out.push(b'[');
    let mut i = 0u64;
    while out.len() < size {
        if i > 0 {
            out.extend_from_slice(b",\n");
        }
        out.extend_from_slice(
            format!("{{\"id\": {i}, \"ok\": true, \"tag\": \"t{}\"}}", i % 7).as_bytes(),
        );
        i += 1;
    }
    out.extend_from_slice(b"]\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_envelope_of_a_64_mib_body_peaks_under_twice_the_body() {
    let body = json_array(64 * MIB);
    let whitespace = body.iter().filter(|b| matches!(b, b' ' | b'\n')).count();
    let size = body.len();
    let c = FakeCluster::start(1)
        .await
        .unwrap_or_else(|e| panic!("cannot start the fake cluster: {e}"));
    c.node(0).on(
        Match::Path("/big".into()),
        Behavior::Respond {
            status: 200,
            headers: Vec::new(),
            body: body.into(),
        },
    );
    let url = c.node(0).url();
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["request", "GET", "/big", "--url", &url, "--json"])
        .env_remove("SEARCHWIRE_ATTEMPT_TIMEOUT")
        .env_remove("SEARCHWIRE_REQUEST_TIMEOUT")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(Duration::from_secs(120), cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("cannot run {BIN}: {e}"),
        Err(_) => panic!("{BIN} did not finish within 120 s"),
    };
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The whole body, on one line, only its whitespace dropped.
    let head = format!("{{\"status\":200,\"node\":\"{url}\",\"attempts\":1,\"body\":[{{\"id\":0,");
    assert!(out.stdout.starts_with(head.as_bytes()));
    assert!(out.stdout.ends_with(b"]}\n"));
    assert_eq!(out.stdout.len(), head.len() - 9 + size - whitespace + 2);
    assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), 1);

    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .unwrap_or_else(|e| panic!("getrusage: {e}"));
    // Kilobytes on Linux.
    let peak = usize::try_from(usage.max_rss()).unwrap_or(0) * 1024;
    eprintln!(
        "request --json of a {:.1} MiB JSON array: peak RSS {:.1} MiB ({:.2}x the body)",
        size as f64 / MIB as f64,
        peak as f64 / MIB as f64,
        peak as f64 / size as f64
    );
    assert!(peak > 0, "no peak RSS reported");
    assert!(
        peak <= 2 * size,
        "peak RSS {} MiB is over twice the {} MiB body",
        peak / MIB,
        size / MIB
    );
}
