//! An error answer's body is not parsed whole to build the error message: a 500 with a
//! 20 MB body raises the process's peak resident memory by about the body itself (read
//! once, kept in the error), not by the ~16× a `serde_json::Value` of it would cost. Own
//! test binary, so no other test's memory counts; Linux (`/proc/self`), where CI runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use searchwire::{Client, ErrorKind, Request};
use searchwire_fake::{Behavior, FakeNode, Match};

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_error_body_costs_about_its_size_not_a_parsed_tree() {
    const SIZE: usize = 20 * 1024 * 1024;
    // `{"error":{...},"pad":[0,0,0,...]}`: ten million tiny values, the worst case for a
    // parsed tree (each one a 32-byte `Value` in a growing vector).
    let mut body = br#"{"error":{"type":"t","reason":"r"},"pad":[0"#.to_vec();
    while body.len() < SIZE {
        body.extend_from_slice(b",0");
    }
    body.extend_from_slice(b"]}");
    let len = body.len();
    let node = FakeNode::start("n").await.unwrap();
    node.on(
        Match::Any,
        Behavior::Respond {
            status: 500,
            headers: Vec::new(),
            body: Bytes::from(body),
        },
    );
    let client = Client::builder()
        .node(node.url())
        .max_retries(0)
        .read_environment(false)
        .build()
        .unwrap();
    // Writing 5 to clear_refs resets the peak (VmHWM) to the current resident size.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_bytes("VmRSS:");
    let e = client.send(Request::get("/")).await.unwrap_err();
    let grew = status_bytes("VmHWM:").saturating_sub(before);
    assert_eq!(e.kind(), ErrorKind::Status);
    assert!(e.to_string().contains("t: r"), "{e}");
    assert_eq!(e.response().unwrap().body().len(), len);
    // Reading the body can hold it twice (the chunks and the contiguous copy); a parsed
    // tree would add about 16× on top.
    eprintln!(
        "peak resident memory grew by {} MB for a {} MB body",
        grew >> 20,
        len >> 20
    );
    assert!(
        grew < 3 * len + (16 << 20),
        "peak resident memory grew by {} MB for a {} MB body",
        grew >> 20,
        len >> 20
    );
}
