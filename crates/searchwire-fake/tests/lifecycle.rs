//! Crashes and black holes: kill, revive, stall_open_connections, and drop.

mod support;

use std::io;

use searchwire_fake::{Behavior, FakeNode, Match};
use support::{refused, Conn, TestResult, BOUND};

#[tokio::test]
async fn killed_node_refuses_connections_and_revives_on_the_same_port() -> TestResult {
    let node = FakeNode::start("n").await?;
    let addr = node.addr();
    assert_eq!(
        Conn::open(&node).await?.request("GET", "/").await?.status,
        200
    );

    node.kill().await;
    assert!(!node.is_alive());
    assert!(refused(&node).await);

    node.revive().await?;
    assert!(node.is_alive());
    assert_eq!(node.addr(), addr);
    let mut conn = Conn::open(&node).await?;
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    // Connection ids keep counting across the crash.
    let ids: Vec<u64> = node.requests().iter().map(|r| r.connection).collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(node.connections_accepted(), 2);
    Ok(())
}

#[tokio::test]
async fn kill_resets_hung_and_idle_connections() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.once(Match::Path("/hang".into()), Behavior::Hang);
    let mut hung = Conn::open(&node).await?;
    hung.send_request("GET", "/hang").await?;
    let mut idle = Conn::open(&node).await?;
    assert_eq!(idle.request("GET", "/").await?.status, 200);
    assert!(node.wait_until(BOUND, |n| n.request_count() == 2).await);

    node.kill().await;
    assert_eq!(node.open_connections(), 0);
    for conn in [&mut hung, &mut idle] {
        let err = conn.read_response().await.err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::ConnectionReset));
    }
    Ok(())
}

#[tokio::test]
async fn kill_and_revive_are_idempotent() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.revive().await?;
    node.kill().await;
    node.kill().await;
    assert!(refused(&node).await);
    node.revive().await?;
    node.revive().await?;
    assert_eq!(
        Conn::open(&node).await?.request("GET", "/").await?.status,
        200
    );
    Ok(())
}

#[tokio::test]
async fn stalled_connections_swallow_requests_while_new_ones_work() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut old = Conn::open(&node).await?;
    assert_eq!(old.request("GET", "/").await?.status, 200);

    node.stall_open_connections();
    node.once(Match::Any, Behavior::status(503));

    old.send_request("GET", "/_search").await?;
    assert!(
        node.wait_until(BOUND, |n| n
            .requests()
            .iter()
            .any(|r| r.behavior == "Stalled"))
            .await
    );
    assert!(old.is_silent().await);

    // The one-shot was not consumed by the black-holed request.
    let mut new = Conn::open(&node).await?;
    assert_eq!(new.request("GET", "/_search").await?.status, 503);
    assert_eq!(new.request("GET", "/_search").await?.status, 200);

    let stalled: Vec<u64> = node
        .requests()
        .iter()
        .filter(|r| r.behavior == "Stalled")
        .map(|r| r.connection)
        .collect();
    assert_eq!(stalled, [1]);

    // A killed node resets stalled connections too.
    node.kill().await;
    let err = old.read_response().await.err().map(|e| e.kind());
    assert_eq!(err, Some(io::ErrorKind::ConnectionReset));
    Ok(())
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_node() -> TestResult {
    let node = FakeNode::start("n").await?;
    let clone = node.clone();
    let mut conn = Conn::open(&node).await?;
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    drop(node);
    // A clone keeps it running.
    assert_eq!(conn.request("GET", "/").await?.status, 200);

    let addr = clone.addr();
    drop(clone);
    let err = conn.read_response().await.err().map(|e| e.kind());
    assert!(
        matches!(
            err,
            Some(io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof)
        ),
        "{err:?}"
    );
    // The listener goes away as soon as its task gets to run; yield until it has.
    let mut listening = true;
    for _ in 0..1000 {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                listening = false;
                break;
            }
            _ => tokio::task::yield_now().await,
        }
    }
    assert!(
        !listening,
        "listener still open after the last handle was dropped"
    );
    Ok(())
}
