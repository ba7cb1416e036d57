//! A node's performance model (`FakeNode::set_load`) as a client on the wire sees it.

mod support;

use std::time::Duration;

use searchwire_fake::{Behavior, FakeNode, Latency, Load, Match, Pauses};
use support::{Conn, TestResult, BOUND};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn service_time_and_pauses_delay_the_answer_on_tokio_time() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.set_load(
        Load::new()
            .base(ms(20))
            .latency(Latency::Fixed(ms(5)))
            .pauses(Pauses::new(Duration::from_secs(3), ms(300))),
    );
    let mut conn = Conn::open(&node).await?;
    let t0 = Instant::now();
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    assert_eq!(t0.elapsed(), ms(25));

    // Sent 10 ms before the pause: 10 ms of work, the pause, then the last 15 ms.
    tokio::time::sleep_until(t0 + ms(2_990)).await;
    let sent = Instant::now();
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    assert_eq!(sent.elapsed(), ms(325));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_behavior_runs_after_the_service_time_and_only_selected_requests_wait() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.set_load(
        Load::new()
            .base(ms(40))
            .only(Match::PathPrefix("/logs".into())),
    );
    node.on(Match::Path("/logs/_search".into()), Behavior::status(503));
    let mut conn = Conn::open(&node).await?;
    let t0 = Instant::now();
    assert_eq!(conn.request("GET", "/logs/_search").await?.status, 503);
    assert_eq!(t0.elapsed(), ms(40));
    let t1 = Instant::now();
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    assert_eq!(t1.elapsed(), Duration::ZERO, "not selected: served at once");

    node.clear_load();
    let t2 = Instant::now();
    assert_eq!(conn.request("GET", "/logs/_search").await?.status, 503);
    assert_eq!(t2.elapsed(), Duration::ZERO);
    Ok(())
}

#[tokio::test]
async fn a_node_at_capacity_queues_and_past_its_queue_answers_429() -> TestResult {
    let node = FakeNode::start("n").await?;
    // One slot, one place in the queue, and a service time no test waits for.
    node.set_load(
        Load::new()
            .base(Duration::from_secs(3600))
            .capacity(1)
            .queue_limit(1),
    );
    let mut first = Conn::open(&node).await?;
    first.send_request("GET", "/").await?;
    assert!(node.wait_until(BOUND, |n| n.load_queue() == (1, 0)).await);
    let mut second = Conn::open(&node).await?;
    second.send_request("GET", "/").await?;
    assert!(node.wait_until(BOUND, |n| n.load_queue() == (1, 1)).await);

    let mut third = Conn::open(&node).await?;
    let turned_away = third.request("GET", "/_search").await?;
    assert_eq!(turned_away.status, 429);
    assert_eq!(
        turned_away.json()["error"]["type"],
        "rejected_execution_exception"
    );
    assert_eq!(node.request_count(), 3, "every request is recorded");

    // A crash ends the served and the queued requests alike.
    node.kill().await;
    assert_eq!(node.load_queue(), (0, 0));
    Ok(())
}
