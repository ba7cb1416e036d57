//! Scripting: how one-shots, persistent rules and the default combine.

mod support;

use searchwire_fake::{Behavior, FakeNode, Match};
use support::{Conn, TestResult};

async fn statuses(node: &FakeNode, paths: &[&str]) -> Result<Vec<u16>, std::io::Error> {
    let mut conn = Conn::open(node).await?;
    let mut out = Vec::new();
    for path in paths {
        out.push(conn.request("GET", path).await?.status);
    }
    Ok(out)
}

#[tokio::test]
async fn last_added_matching_rule_wins() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(Match::Any, Behavior::status(503));
    node.on(Match::Path("/x".into()), Behavior::status(201));
    assert_eq!(statuses(&node, &["/x", "/y"]).await?, [201, 503]);
    node.on(Match::Any, Behavior::status(500));
    assert_eq!(statuses(&node, &["/x", "/y"]).await?, [500, 500]);
    Ok(())
}

#[tokio::test]
async fn one_shots_come_first_in_fifo_order_and_are_consumed() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(Match::Path("/x".into()), Behavior::status(201));
    node.once(Match::Any, Behavior::status(500));
    node.once(Match::Path("/x".into()), Behavior::status(429));
    node.once(Match::Any, Behavior::status(502));
    // Each request takes the oldest queued one-shot that matches it.
    assert_eq!(
        statuses(&node, &["/y", "/x", "/x", "/x", "/y"]).await?,
        [500, 429, 502, 201, 200]
    );
    Ok(())
}

#[tokio::test]
async fn match_variants_select_requests() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(Match::PathPrefix("/logs-".into()), Behavior::status(404));
    node.on(
        Match::MethodPath("POST".into(), "/_bulk".into()),
        Behavior::status(413),
    );
    node.on(Match::Query("timeout=1ms".into()), Behavior::status(504));
    let mut conn = Conn::open(&node).await?;
    assert_eq!(conn.request("GET", "/logs-2024/_search").await?.status, 404);
    assert_eq!(conn.request("POST", "/_bulk").await?.status, 413);
    assert_eq!(conn.request("PUT", "/_bulk").await?.status, 200);
    assert_eq!(
        conn.request("GET", "/_search?timeout=1ms&q=x")
            .await?
            .status,
        504
    );

    let bulk = node.requests_matching(&Match::Path("/_bulk".into()));
    assert_eq!(bulk.len(), 2);
    assert_eq!(bulk[0].method, "POST");
    let timed = node.requests_matching(&Match::Query("timeout".into()));
    assert_eq!(timed.len(), 1);
    assert_eq!(timed[0].query.as_deref(), Some("timeout=1ms&q=x"));
    Ok(())
}

#[tokio::test]
async fn clear_rules_and_set_default() -> TestResult {
    let node = FakeNode::start("n").await?;
    node.on(Match::Any, Behavior::status(503));
    node.once(Match::Any, Behavior::status(429));
    node.clear_rules();
    assert_eq!(statuses(&node, &["/"]).await?, [200]);
    node.set_default(Behavior::status(401));
    node.on(Match::Path("/ok".into()), Behavior::Default);
    assert_eq!(statuses(&node, &["/x", "/ok"]).await?, [401, 200]);
    node.clear_rules();
    assert_eq!(
        statuses(&node, &["/ok"]).await?,
        [401],
        "default survives clear_rules"
    );
    Ok(())
}

#[tokio::test]
async fn rules_change_while_a_connection_is_in_use() -> TestResult {
    let node = FakeNode::start("n").await?;
    let mut conn = Conn::open(&node).await?;
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    node.on(Match::Any, Behavior::status(503));
    assert_eq!(conn.request("GET", "/").await?.status, 503);
    node.clear_rules();
    assert_eq!(conn.request("GET", "/").await?.status, 200);
    let behaviors: Vec<_> = node.requests().iter().map(|r| r.behavior).collect();
    assert_eq!(behaviors, ["Default", "Respond", "Default"]);
    Ok(())
}
