//! Each `Behavior`, as seen on the wire by a client.

mod support;

use std::io;
use std::time::Duration;

use bytes::Bytes;
use searchwire_fake::{Behavior, FakeNode, Match};
use support::{Conn, TestResult, BOUND};
use tokio::time::Instant;

#[tokio::test]
async fn respond_sends_status_headers_and_body_and_keeps_the_connection() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(
        Match::Any,
        Behavior::Respond {
            status: 201,
            headers: vec![("x-custom".into(), "yes".into())],
            body: Bytes::from_static(b"{\"ok\":true}"),
        },
    );
    let mut conn = Conn::open(&node).await?;
    let resp = conn.request("PUT", "/i/_doc/1").await?;
    assert_eq!(resp.status, 201);
    assert_eq!(resp.header("x-custom"), Some("yes"));
    assert_eq!(resp.header("content-type"), Some("application/json"));
    assert_eq!(resp.body, b"{\"ok\":true}");
    assert_eq!(conn.request("PUT", "/i/_doc/2").await?.status, 201);
    assert_eq!(node.requests()[0].behavior, "Respond");
    Ok(())
}

#[tokio::test]
async fn status_json_and_retry_after_helpers() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(Match::Path("/401".into()), Behavior::status(401));
    node.on(
        Match::Path("/json".into()),
        Behavior::json(200, serde_json::json!({"took": 3})).with_header("x-a", "b"),
    );
    node.on(Match::Path("/429".into()), Behavior::retry_after(429, "7"));
    let mut conn = Conn::open(&node).await?;

    let resp = conn.request("GET", "/401").await?;
    assert_eq!(resp.status, 401);
    assert_eq!(resp.json()["status"], 401);
    assert_eq!(resp.json()["error"]["reason"], "Unauthorized");

    let resp = conn.request("GET", "/json").await?;
    assert_eq!((resp.status, resp.json()["took"].as_u64()), (200, Some(3)));
    assert_eq!(resp.header("x-a"), Some("b"));

    let resp = conn.request("GET", "/429").await?;
    assert_eq!(resp.status, 429);
    assert_eq!(resp.header("retry-after"), Some("7"));
    Ok(())
}

#[tokio::test]
async fn custom_content_type_is_not_duplicated() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(
        Match::Any,
        Behavior::Respond {
            status: 502,
            headers: vec![("content-type".into(), "text/html".into())],
            body: Bytes::from_static(b"<html>bad gateway</html>"),
        },
    );
    let resp = Conn::open(&node).await?.request("GET", "/").await?;
    assert_eq!(resp.status, 502);
    let types = resp
        .headers
        .iter()
        .filter(|(k, _)| k == "content-type")
        .count();
    assert_eq!(types, 1);
    assert_eq!(resp.header("content-type"), Some("text/html"));
    Ok(())
}

#[tokio::test]
async fn reset_closes_with_rst_after_reading_the_request() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.once(Match::Any, Behavior::Reset);
    let mut conn = Conn::open(&node).await?;
    conn.send(b"POST /_bulk HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc")
        .await?;
    let err = conn.read_response().await.err().map(|e| e.kind());
    assert_eq!(err, Some(io::ErrorKind::ConnectionReset));
    let recorded = node.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].behavior, "Reset");
    assert_eq!(&recorded[0].body[..], b"abc");
    Ok(())
}

#[tokio::test]
async fn close_after_headers_ends_the_body_early() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.once(Match::Any, Behavior::CloseAfterHeaders);
    let mut conn = Conn::open(&node).await?;
    conn.send_request("GET", "/_search").await?;
    let head = conn.read_head().await?;
    assert_eq!(head.status, 200);
    assert!(head.content_length() > 0);
    let rest = conn.read_to_end().await?;
    assert!(rest.len() < head.content_length(), "EOF must come mid-body");
    Ok(())
}

#[tokio::test]
async fn hang_never_answers_and_lets_go_when_the_client_leaves() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(Match::Path("/slow".into()), Behavior::Hang);
    let mut conn = Conn::open(&node).await?;
    conn.send_request("GET", "/slow").await?;
    assert!(node.wait_until(BOUND, |n| n.request_count() == 1).await);
    assert!(conn.is_silent().await);
    assert_eq!(node.open_connections(), 1);
    drop(conn);
    assert!(node.wait_until(BOUND, |n| n.open_connections() == 0).await);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn delay_waits_on_tokio_time_then_applies_the_inner_behavior() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.once(
        Match::Any,
        Behavior::Delay(Duration::from_secs(10), Box::new(Behavior::status(503))),
    );
    let mut conn = Conn::open(&node).await?;
    let started = Instant::now();
    let resp = conn.request("GET", "/").await?;
    assert_eq!(resp.status, 503);
    assert!(started.elapsed() >= Duration::from_secs(10));
    assert_eq!(node.requests()[0].behavior, "Delay");

    // Recorded timestamps are tokio instants: with time paused the gap is exact.
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    let recorded = node.requests();
    assert_eq!(recorded[1].at - recorded[0].at, Duration::from_secs(10));
    Ok(())
}

#[tokio::test]
async fn stall_body_sends_half_the_body_then_hangs() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.once(
        Match::Any,
        Behavior::StallBody {
            status: 200,
            body: Bytes::from_static(b"0123456789"),
        },
    );
    let mut conn = Conn::open(&node).await?;
    conn.send_request("GET", "/_search").await?;
    let head = conn.read_head().await?;
    assert_eq!((head.status, head.content_length()), (200, 10));
    assert_eq!(conn.read_exact(5).await?, b"01234");
    assert!(conn.is_silent().await);
    Ok(())
}

#[tokio::test]
async fn default_behavior_answers_like_opensearch() -> TestResult {
    let node = FakeNode::start("solo").await?;
    let mut conn = Conn::open(&node).await?;

    let root = conn.request("GET", "/").await?;
    assert_eq!(root.status, 200);
    assert_eq!(root.header("content-type"), Some("application/json"));
    let root = root.json();
    assert_eq!(root["name"], "solo");
    assert_eq!(root["cluster_name"], "fake-cluster");
    assert_eq!(root["version"]["distribution"], "opensearch");
    assert_eq!(root["version"]["number"], "2.19.0");

    let health = conn
        .request("GET", "/_cluster/health?wait_for_status=yellow")
        .await?
        .json();
    assert_eq!(health["status"], "green");
    assert_eq!(health["timed_out"], false);
    assert_eq!(health["number_of_nodes"], 1);
    assert_eq!(health["discovered_cluster_manager"], true);
    assert_eq!(health["active_shards_percent_as_number"], 100.0);

    let echo = conn.request("DELETE", "/idx").await?.json();
    assert_eq!(
        echo,
        serde_json::json!({"node": "solo", "method": "DELETE", "path": "/idx"})
    );

    let nodes = conn.request("GET", "/_nodes/http,os").await?.json();
    assert_eq!(
        nodes["nodes"][node.id()]["http"]["publish_address"],
        node.addr().to_string()
    );
    assert_eq!(node.requests()[0].behavior, "Default");
    Ok(())
}

#[tokio::test]
async fn head_gets_headers_only() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut conn = Conn::open(&node).await?;
    conn.send_request("HEAD", "/").await?;
    let head = conn.read_head().await?;
    assert_eq!(head.status, 200);
    assert!(head.content_length() > 0);
    // No body was sent: the next response starts right away on the same connection.
    let resp = conn.request("GET", "/x").await?;
    assert_eq!(resp.json()["path"], "/x");
    Ok(())
}
