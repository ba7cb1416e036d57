//! Request compression (`ClientBuilder::compress_requests`) over real HTTP against a fake
//! node: what the node receives, what the caller gets back, and the bound on an answer that
//! inflates past `max_response_bytes`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use searchwire::compression::{gunzip_bounded, gzip};
use searchwire::{Backoff, Client, ClientBuilder, ErrorKind, Request};
use searchwire_fake::{Behavior, FakeNode, Match};

fn builder(node: &FakeNode) -> ClientBuilder {
    Client::builder()
        .node(node.url())
        .backoff(Backoff::constant(Duration::from_millis(5)))
        .resurrection_timers(false)
        .health_refresh(false)
        .read_environment(false)
}

fn bulk_body(docs: usize) -> String {
    (0..docs)
        .map(|i| {
            format!(
                "{{\"index\":{{\"_index\":\"logs\",\"_id\":\"{i}\"}}}}\n\
                 {{\"@timestamp\":\"2026-01-01T00:00:{:02}Z\",\"level\":\"info\",\
                 \"message\":\"GET /api/items/{i} 200\"}}\n",
                i % 60
            )
        })
        .collect()
}

fn ok_json(body: &str) -> Behavior {
    Behavior::Respond {
        status: 200,
        headers: Vec::new(),
        body: Bytes::from(body.to_owned()),
    }
}

fn gzip_answer(body: &[u8]) -> Behavior {
    Behavior::Respond {
        status: 200,
        headers: vec![("content-encoding".into(), "gzip".into())],
        body: Bytes::from(gzip(body, 6)),
    }
}

#[tokio::test]
async fn a_body_over_the_threshold_arrives_gzipped_and_inflates_to_the_original() {
    let node = FakeNode::start("n").await.unwrap();
    node.on(Match::Path("/_bulk".into()), ok_json(r#"{"errors":false}"#));
    let client = builder(&node).compress_requests(1024).build().unwrap();
    let body = bulk_body(100);
    client
        .send(
            Request::post("/_bulk")
                .header("content-type", "application/x-ndjson")
                .body(body.clone()),
        )
        .await
        .unwrap();
    let sent = &node.requests_matching(&Match::Path("/_bulk".into()))[0];
    assert_eq!(sent.header("content-encoding"), Some("gzip"));
    assert_eq!(sent.header("accept-encoding"), Some("gzip"));
    assert_eq!(
        sent.header("content-length"),
        Some(sent.body.len().to_string().as_str())
    );
    assert!(
        sent.body.len() * 5 < body.len(),
        "{} bytes of gzip for {} bytes of NDJSON",
        sent.body.len(),
        body.len()
    );
    let inflated = gunzip_bounded(&sent.body, 1 << 20).unwrap().unwrap();
    assert_eq!(inflated, body.as_bytes());
}

#[tokio::test]
async fn small_bodies_encoded_bodies_and_a_client_without_compression_send_as_they_are() {
    let node = FakeNode::start("n").await.unwrap();
    let client = builder(&node).compress_requests(1024).build().unwrap();
    // Under the threshold: plain, but gzip answers are still asked for.
    client
        .send(Request::put("/i/_doc/1").body(r#"{"a":1}"#))
        .await
        .unwrap();
    // The caller's own encoding is left alone.
    let own = Bytes::from(gzip(bulk_body(50).as_bytes(), 9));
    client
        .send(
            Request::post("/_bulk")
                .header("content-encoding", "gzip")
                .body(own.clone()),
        )
        .await
        .unwrap();
    let off = builder(&node).build().unwrap();
    off.send(Request::post("/_bulk").body(bulk_body(50)))
        .await
        .unwrap();
    let sent = node.requests();
    let user: Vec<_> = sent
        .iter()
        .filter(|r| r.path == "/i/_doc/1" || r.path == "/_bulk")
        .collect();
    assert_eq!(user.len(), 3);
    assert_eq!(user[0].header("content-encoding"), None);
    assert_eq!(&user[0].body[..], br#"{"a":1}"#);
    assert_eq!(user[0].header("accept-encoding"), Some("gzip"));
    assert_eq!(user[1].body, own, "sent exactly as the caller encoded it");
    assert_eq!(user[2].header("content-encoding"), None);
    assert_eq!(user[2].header("accept-encoding"), None);
    assert_eq!(user[2].body, bulk_body(50));
}

#[tokio::test]
async fn a_retry_sends_the_bytes_the_first_attempt_sent() {
    let node = FakeNode::start("n").await.unwrap();
    node.once(Match::Path("/_bulk".into()), Behavior::status(429));
    let client = builder(&node).compress_requests(0).build().unwrap();
    let r = client
        .send(Request::post("/_bulk").body(bulk_body(30)))
        .await
        .unwrap();
    assert_eq!(r.attempts().len(), 2);
    let sent = node.requests_matching(&Match::Path("/_bulk".into()));
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body, sent[1].body);
    assert_eq!(sent[1].header("content-encoding"), Some("gzip"));
}

#[tokio::test]
async fn a_gzip_answer_is_inflated_unless_the_caller_asked_for_an_encoding_itself() {
    let node = FakeNode::start("n").await.unwrap();
    let answer = format!(
        r#"{{"hits":{{"hits":[{}]}}}}"#,
        "{\"_id\":\"x\"},".repeat(999) + "{}"
    );
    node.on(
        Match::Path("/i/_search".into()),
        gzip_answer(answer.as_bytes()),
    );
    let client = builder(&node).compress_requests(1024).build().unwrap();
    let r = client.send(Request::get("/i/_search")).await.unwrap();
    assert_eq!(r.text(), answer);
    assert_eq!(r.headers().get("content-encoding"), None);
    // A caller that sets Accept-Encoding (the relay's pass-through) gets the node's bytes.
    let r = client
        .send(Request::get("/i/_search").header("accept-encoding", "gzip, br"))
        .await
        .unwrap();
    assert_eq!(r.headers().get("content-encoding").unwrap(), "gzip");
    assert_eq!(
        gunzip_bounded(r.body(), 1 << 20).unwrap().unwrap(),
        answer.as_bytes()
    );
}

#[tokio::test]
async fn an_answer_that_inflates_past_max_response_bytes_is_too_large() {
    let node = FakeNode::start("n").await.unwrap();
    // 64 MiB of zeros in about 64 KiB: far under the limit compressed, far over it inflated.
    let bomb = vec![0u8; 64 << 20];
    node.on(Match::Path("/i/_search".into()), gzip_answer(&bomb));
    drop(bomb);
    let client = builder(&node)
        .compress_requests(1024)
        .max_response_bytes(1 << 20)
        .build()
        .unwrap();
    let e = client.send(Request::get("/i/_search")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResponseTooLarge, "{e}");
    assert!(e.to_string().contains("inflates"), "{e}");
    // Exactly at the limit is fine.
    node.clear_rules();
    node.on(
        Match::Path("/i/_search".into()),
        gzip_answer(&vec![b'a'; 1 << 20]),
    );
    let r = client.send(Request::get("/i/_search")).await.unwrap();
    assert_eq!(r.body().len(), 1 << 20);
}

#[tokio::test]
async fn an_answer_labelled_gzip_that_is_not_gzip_fails_the_attempt_with_a_reason() {
    let node = FakeNode::start("n").await.unwrap();
    node.on(
        Match::Path("/i/_search".into()),
        ok_json(r#"{"took":1}"#).with_header("content-encoding", "gzip"),
    );
    let client = builder(&node)
        .compress_requests(1024)
        .max_retries(0)
        .build()
        .unwrap();
    let e = client.send(Request::get("/i/_search")).await.unwrap_err();
    assert!(e.to_string().contains("not valid gzip"), "{e}");
}
