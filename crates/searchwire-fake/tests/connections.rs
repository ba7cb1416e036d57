//! HTTP/1.1 on the wire: keep-alive, connection ids, framing, 100-continue, malformed input,
//! and waiting on node events.

mod support;

use std::time::Duration;

use searchwire_fake::{Behavior, FakeNode, Match};
use support::{Conn, TestResult, BOUND};

#[tokio::test]
async fn keep_alive_reuses_a_connection_and_ids_count_from_one() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut first = Conn::open(&node).await?;
    first.request("GET", "/a").await?;
    first.request("GET", "/b").await?;
    let mut second = Conn::open(&node).await?;
    second.request("GET", "/c").await?;
    first.request("GET", "/d").await?;

    let ids: Vec<(String, u64)> = node
        .requests()
        .into_iter()
        .map(|r| (r.path, r.connection))
        .collect();
    let expected = [("/a", 1), ("/b", 1), ("/c", 2), ("/d", 1)].map(|(p, c)| (p.to_owned(), c));
    assert_eq!(ids, expected);
    assert_eq!(node.connections_accepted(), 2);
    assert_eq!(node.open_connections(), 2);
    Ok(())
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut conn = Conn::open(&node).await?;
    conn.send(b"GET /one HTTP/1.1\r\n\r\nGET /two HTTP/1.1\r\n\r\n")
        .await?;
    assert_eq!(conn.read_response().await?.json()["path"], "/one");
    assert_eq!(conn.read_response().await?.json()["path"], "/two");
    Ok(())
}

#[tokio::test]
async fn connection_close_is_honoured() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut conn = Conn::open(&node).await?;
    conn.send(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await?;
    let resp = conn.read_response().await?;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(conn.read_to_end().await?.is_empty());
    drop(conn);
    assert!(node.wait_until(BOUND, |n| n.open_connections() == 0).await);
    Ok(())
}

#[tokio::test]
async fn chunked_request_bodies_are_decoded() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut conn = Conn::open(&node).await?;
    conn.send(
        b"POST /_bulk HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/x-ndjson\r\n\r\n\
          5\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\n\r\n",
    )
    .await?;
    assert_eq!(conn.read_response().await?.status, 200);
    assert_eq!(conn.request("GET", "/after").await?.status, 200);
    let recorded = node.requests();
    assert_eq!(&recorded[0].body[..], b"{\"a\":1}\n");
    assert_eq!(
        recorded[0].header("Content-Type"),
        Some("application/x-ndjson")
    );
    assert_eq!(recorded[1].connection, recorded[0].connection);
    Ok(())
}

#[tokio::test]
async fn expect_100_continue_gets_an_interim_response() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut conn = Conn::open(&node).await?;
    conn.send(b"PUT /i/_doc/1 HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n")
        .await?;
    let interim = conn.read_head().await?;
    assert_eq!(interim.status, 100);
    conn.send(b"{\"a\":1}").await?;
    assert_eq!(conn.read_response().await?.status, 200);
    assert_eq!(&node.requests()[0].body[..], b"{\"a\":1}");
    assert_eq!(node.requests()[0].header("expect"), Some("100-continue"));
    Ok(())
}

#[tokio::test]
async fn malformed_requests_get_400_and_the_connection_is_closed() -> TestResult {
    let node = FakeNode::start("n").await?;
    let garbage: [&[u8]; 5] = [
        b"GARBAGE\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", // a TLS ClientHello
        b"GET / HTTP/1.1\r\nContent-Length: lots\r\n\r\n",
        b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n",
    ];
    for bytes in garbage {
        let mut conn = Conn::open(&node).await?;
        conn.send(bytes).await?;
        let resp = conn.read_response().await?;
        assert_eq!(resp.status, 400, "{:?}", String::from_utf8_lossy(bytes));
        assert_eq!(resp.json()["status"], 400);
        assert!(conn.read_to_end().await?.is_empty());
    }
    assert_eq!(
        node.request_count(),
        0,
        "malformed requests are not recorded"
    );
    assert_eq!(
        Conn::open(&node).await?.request("GET", "/").await?.status,
        200
    );
    Ok(())
}

#[tokio::test]
async fn wait_until_wakes_on_requests_and_connections() -> TestResult {
    let node = FakeNode::start("n").await?;
    let client = tokio::spawn({
        let node = node.clone();
        async move {
            let mut conn = Conn::open(&node).await?;
            conn.request("GET", "/").await?;
            conn.request("GET", "/").await?;
            Ok::<_, std::io::Error>(conn)
        }
    });
    assert!(node.wait_until(BOUND, |n| n.request_count() == 2).await);
    let conn = client.await??;
    assert!(node.wait_until(BOUND, |n| n.open_connections() == 1).await);
    drop(conn);
    assert!(node.wait_until(BOUND, |n| n.open_connections() == 0).await);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn wait_until_gives_up_at_the_timeout() -> TestResult {
    let node = FakeNode::start("n").await?;
    let started = tokio::time::Instant::now();
    assert!(
        !node
            .wait_until(Duration::from_secs(30), |n| n.request_count() > 0)
            .await
    );
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    Ok(())
}

#[tokio::test]
async fn recording_can_be_turned_off_and_cleared() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.set_recording(false);
    let mut conn = Conn::open(&node).await?;
    conn.request("GET", "/").await?;
    assert_eq!((node.request_count(), node.requests().len()), (1, 0));
    node.set_recording(true);
    node.on(Match::Any, Behavior::status(200));
    conn.request("GET", "/").await?;
    assert_eq!((node.request_count(), node.requests().len()), (2, 1));
    node.clear_requests();
    assert_eq!((node.request_count(), node.requests().len()), (0, 0));
    Ok(())
}
