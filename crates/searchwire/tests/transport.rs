//! The transport against the in-process fake cluster: real sockets, real HTTP, scripted
//! faults. Real time with short timeouts; no sleep is used to synchronize.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use searchwire::{Backoff, Client, ErrorKind, OutcomeKind, Request};
use searchwire_fake::{Behavior, FakeCluster, FakeNode, Match};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client_for(urls: &[String]) -> searchwire::ClientBuilder {
    Client::builder()
        .nodes(urls.iter().cloned())
        .backoff(Backoff::constant(ms(10)))
        .attempt_timeout(ms(500))
        .resurrection_timers(false)
        .read_environment(false)
        .seed(9)
}

#[test]
fn client_is_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<Client>();
}

#[tokio::test]
async fn a_refused_node_is_skipped_and_marked_dead() {
    let cluster = FakeCluster::start(3).await.unwrap();
    cluster.node(0).kill().await;
    let client = client_for(&cluster.urls()).build().unwrap();
    for _ in 0..9 {
        let r = client.send(Request::get("/idx/_doc/1")).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_ne!(r.node(), cluster.node(0).url());
    }
    let snap = client.nodes();
    let dead: Vec<_> = snap.iter().filter(|n| !n.alive).collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].url, cluster.node(0).url());
    assert!(
        dead[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("connect"),
        "{dead:?}"
    );
}

#[tokio::test]
async fn a_reset_mid_exchange_is_retried_for_get_but_not_for_post() {
    let node = FakeNode::start("n").await.unwrap();
    node.once(Match::Any, Behavior::Reset);
    let client = client_for(&[node.url()]).build().unwrap();
    let r = client.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts()[0].outcome, OutcomeKind::Reset);
    assert_eq!(r.attempts().len(), 2);

    node.once(Match::Any, Behavior::Reset);
    let e = client
        .send(Request::post("/idx/_doc").json(&serde_json::json!({"a": 1})))
        .await
        .unwrap_err();
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset));
    assert_eq!(e.attempts().len(), 1);
    let posts = node.requests_matching(&Match::MethodPath("POST".into(), "/idx/_doc".into()));
    assert_eq!(posts.len(), 1, "the POST reached the node exactly once");
}

#[tokio::test]
async fn eof_mid_body_is_a_reset() {
    let node = FakeNode::start("n").await.unwrap();
    node.once(Match::Any, Behavior::CloseAfterHeaders);
    let client = client_for(&[node.url()]).max_retries(0).build().unwrap();
    let e = client.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset));
}

#[tokio::test]
async fn a_body_that_stalls_half_way_times_out_and_fails_over() {
    let cluster = FakeCluster::start(2).await.unwrap();
    // Each node stalls twice: the request, then the liveness check that decides the node
    // is hung (a node answering it would be alive, and the slow request would not fail over).
    for n in cluster.nodes() {
        for _ in 0..2 {
            n.once(
                Match::Any,
                Behavior::StallBody {
                    status: 200,
                    body: bytes::Bytes::from_static(b"{\"hits\":[1,2,3,4,5,6,7,8]}"),
                },
            );
        }
    }
    let client = client_for(&cluster.urls())
        .attempt_timeout(ms(300))
        .build()
        .unwrap();
    let r = client.send(Request::get("/idx/_search")).await.unwrap();
    assert_eq!(r.attempts()[0].outcome, OutcomeKind::Timeout);
    assert!(r.attempts()[0].elapsed >= ms(300));
    assert_ne!(r.attempts()[0].node, r.attempts()[1].node);
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_hung_node_times_out_per_attempt_and_the_deadline_bounds_everything() {
    let node = FakeNode::start("n").await.unwrap();
    node.set_default(Behavior::Hang);
    let client = client_for(&[node.url()])
        .attempt_timeout(ms(200))
        .build()
        .unwrap();
    let e = client
        .send(Request::get("/").timeout(ms(700)))
        .await
        .unwrap_err();
    // 200 ms attempts, each followed by a 200 ms liveness check that hangs too, with 10 ms
    // backoff: the deadline cuts the second attempt or its liveness check.
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert!(e.attempts().len() >= 2, "{e}");
    assert!(matches!(
        e.attempts().last().unwrap().outcome,
        OutcomeKind::Cancelled | OutcomeKind::Timeout
    ));
    assert!(e.attempts()[0].outcome == OutcomeKind::Timeout);
}

#[tokio::test]
async fn after_a_timeout_the_retry_never_reuses_a_pooled_connection() {
    // Two keep-alive connections are idle in the pool; then every open connection goes
    // silent (a black-holed path). The first attempt rides one of them and times out; the
    // retry must open a fresh connection rather than take the other stale one.
    let node = FakeNode::start("n").await.unwrap();
    node.set_default(Behavior::Default.delayed(ms(50)));
    let client = client_for(&[node.url()])
        .attempt_timeout(ms(300))
        .max_retries(1)
        .build()
        .unwrap();
    let (a, b) = tokio::join!(
        client.send(Request::get("/")),
        client.send(Request::get("/"))
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(node.connections_accepted(), 2);
    node.set_default(Behavior::Default);
    node.stall_open_connections();
    let r = client.send(Request::get("/x")).await.unwrap();
    assert_eq!(r.attempts().len(), 2, "{:?}", r.attempts());
    assert_eq!(r.attempts()[0].outcome, OutcomeKind::Timeout);
    let reqs = node.requests_matching(&Match::Path("/x".into()));
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[0].connection <= 2,
        "the first attempt reused a pooled connection"
    );
    assert_eq!(reqs[1].connection, 3, "the retry opened a fresh connection");
}

#[tokio::test]
async fn headers_credentials_prefix_and_query_reach_the_node() {
    let node = FakeNode::start("n").await.unwrap();
    let url = format!("{}/search-proxy", node.url());
    let client = Client::builder()
        .node(url)
        .basic_auth("alice", "s3cret")
        .header("x-opaque-id", "job-7")
        .read_environment(false)
        .build()
        .unwrap();
    client
        .send(
            Request::get("/logs/_search")
                .query("q", "a b&c")
                .header("x-extra", "1"),
        )
        .await
        .unwrap();
    let r = &node.requests()[0];
    assert_eq!(r.path, "/search-proxy/logs/_search");
    assert_eq!(r.query.as_deref(), Some("q=a+b%26c"));
    assert_eq!(r.header("authorization"), Some("Basic YWxpY2U6czNjcmV0"));
    assert_eq!(r.header("x-opaque-id"), Some("job-7"));
    assert_eq!(r.header("x-extra"), Some("1"));
    assert!(r.header("user-agent").unwrap().starts_with("searchwire/"));
}

#[tokio::test]
async fn bearer_tokens_and_url_credentials_are_sent_and_never_displayed() {
    let node = FakeNode::start("n").await.unwrap();
    let url = node.url().replace("http://", "http://bob:pa%24%24@");
    let client = Client::builder()
        .node(url)
        .read_environment(false)
        .build()
        .unwrap();
    node.once(Match::Any, Behavior::status(401));
    let e = client.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth);
    let r = &node.requests()[0];
    assert_eq!(r.header("authorization"), Some("Basic Ym9iOnBhJCQ="));
    for text in [e.to_string(), format!("{e:?}"), format!("{client:?}")] {
        assert!(
            !text.contains("pa$$") && !text.contains("pa%24%24"),
            "{text}"
        );
    }
    let client = Client::builder()
        .node(node.url())
        .bearer_auth("tok-123")
        .read_environment(false)
        .build()
        .unwrap();
    client.send(Request::get("/")).await.unwrap();
    assert_eq!(
        node.requests().last().unwrap().header("authorization"),
        Some("Bearer tok-123")
    );
}

#[tokio::test]
async fn a_request_without_client_credentials_carries_only_its_own() {
    let node = FakeNode::start("n").await.unwrap();
    let client = Client::builder()
        .node(node.url())
        .basic_auth("relay", "s3cret")
        .read_environment(false)
        .build()
        .unwrap();
    client
        .send(Request::get("/a").without_client_credentials())
        .await
        .unwrap();
    client
        .send(
            Request::get("/b")
                .header("Authorization", "Bearer theirs")
                .without_client_credentials(),
        )
        .await
        .unwrap();
    client.send(Request::get("/c")).await.unwrap();
    let seen: Vec<_> = node
        .requests()
        .iter()
        .map(|r| (r.path.clone(), r.header("authorization").map(str::to_owned)))
        .collect();
    assert_eq!(
        seen,
        [
            ("/a".to_owned(), None),
            ("/b".to_owned(), Some("Bearer theirs".to_owned())),
            ("/c".to_owned(), Some("Basic cmVsYXk6czNjcmV0".to_owned())),
        ]
    );
}

#[tokio::test]
async fn a_throttled_node_is_retried_after_retry_after() {
    let node = FakeNode::start("n").await.unwrap();
    node.once(Match::Any, Behavior::retry_after(429, "1"));
    let client = client_for(&[node.url()]).build().unwrap();
    let r = client
        .send(Request::post("/_bulk").body("{}\n"))
        .await
        .unwrap();
    assert_eq!(r.attempts()[0].outcome, OutcomeKind::Throttled);
    assert_eq!(r.attempts()[0].backoff, Duration::from_secs(1));
    let reqs = node.requests();
    assert!(reqs[1].at - reqs[0].at >= Duration::from_secs(1));
}

#[tokio::test]
async fn many_tasks_share_one_client() {
    let cluster = FakeCluster::start(3).await.unwrap();
    let client = client_for(&cluster.urls()).build().unwrap();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            c.send(Request::get(format!("/i/_doc/{i}")))
                .await
                .map(|r| r.status())
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), 200);
    }
    assert_eq!(cluster.request_count(), 32);
    // Round robin spreads them.
    for n in cluster.nodes() {
        assert!(n.request_count() >= 8, "{}", n.request_count());
    }
}

#[tokio::test]
async fn configuration_mistakes_fail_at_build() {
    let cases: Vec<(searchwire::ClientBuilder, &str)> = vec![
        (Client::builder(), "no node URL"),
        (Client::builder().node("ftp://x"), "scheme"),
        (
            Client::builder().node("http://a:1").node("http://a:1"),
            "listed twice",
        ),
        (
            Client::builder().node("http://a:1").retry_on_status([200]),
            "retry_on_status",
        ),
        (
            Client::builder()
                .node("http://a:1")
                .attempt_timeout(Duration::ZERO),
            "attempt_timeout",
        ),
        (
            Client::builder().node("http://a:1").header("bad name", "v"),
            "bad name",
        ),
        (
            Client::builder()
                .node("https://a:1")
                .ca_certificate_pem(b"not a pem".to_vec()),
            "CERTIFICATE",
        ),
    ];
    for (b, needle) in cases {
        let e = b.read_environment(false).build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(
            e.to_string().contains(needle),
            "{e} should mention {needle}"
        );
    }
}

#[tokio::test]
async fn a_response_larger_than_the_limit_fails_clearly_and_the_node_stays_alive() {
    let node = FakeNode::start("n").await.unwrap();
    let big = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    node.on(
        Match::Path("/big".into()),
        Behavior::Respond {
            status: 200,
            headers: vec![],
            body: big,
        },
    );
    let client = client_for(&[node.url()])
        .max_response_bytes(16 * 1024)
        .build()
        .unwrap();
    let e = client.send(Request::get("/big")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResponseTooLarge);
    assert_eq!(e.last_outcome(), Some(OutcomeKind::TooLarge));
    assert_eq!(e.attempts().len(), 1, "not retried");
    assert!(e.to_string().contains("max_response_bytes"), "{e}");
    assert!(client.nodes()[0].alive);
    // Small answers still work, on a fresh connection.
    client.send(Request::get("/small")).await.unwrap();
}

#[tokio::test]
async fn a_declared_length_over_the_limit_fails_before_reading_the_body() {
    let node = FakeNode::start("n").await.unwrap();
    node.on(
        Match::Path("/liar".into()),
        Behavior::Respond {
            status: 200,
            headers: vec![("content-length".into(), "999999999".into())],
            body: bytes::Bytes::from_static(b"{}"),
        },
    );
    let client = client_for(&[node.url()])
        .max_response_bytes(1024)
        .build()
        .unwrap();
    let e = client.send(Request::get("/liar")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResponseTooLarge);
    assert!(e.to_string().contains("999999999"), "{e}");
}

#[tokio::test]
async fn redirects_are_never_followed() {
    let node = FakeNode::start("n").await.unwrap();
    let elsewhere = FakeNode::start("elsewhere").await.unwrap();
    for status in [301, 302, 307, 308] {
        node.once(
            Match::Any,
            Behavior::Respond {
                status,
                headers: vec![("location".into(), format!("{}/stolen", elsewhere.url()))],
                body: bytes::Bytes::new(),
            },
        );
        let client = client_for(&[node.url()]).build().unwrap();
        let r = client
            .send(Request::get("/").header("authorization", "Bearer tok"))
            .await
            .unwrap();
        assert_eq!(r.status(), status);
        assert_eq!(r.attempts().len(), 1);
    }
    assert!(
        elsewhere.requests().is_empty(),
        "nothing went to the redirect target"
    );
}

#[tokio::test]
async fn the_host_header_is_sent_once_and_a_request_may_replace_it() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let url = cluster.node(0).url();
    let client = client_for(std::slice::from_ref(&url)).build().unwrap();
    client.get("/").await.unwrap();
    let own = Request::get("/x").header("host", "example.org");
    client.send(own).await.unwrap();
    let seen = cluster.node(0).requests();
    let hosts = |i: usize| -> Vec<&str> {
        seen[i]
            .headers
            .iter()
            .filter(|(k, _)| k == "host")
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let authority = url.trim_start_matches("http://");
    assert_eq!(hosts(0), vec![authority], "the node's host:port, once");
    assert_eq!(hosts(1), vec!["example.org"], "the request's own, once");
}

/// A request's own retry limit replaces the client's and the class rules' limits: with
/// `max_retries(0)` every send is one attempt, whatever the outcome (a caller that retries
/// itself — the bulk indexer — is not doubled by the transport).
#[tokio::test(start_paused = true)]
async fn a_request_with_max_retries_zero_is_sent_once() {
    let node = FakeNode::start("n").await.unwrap();
    node.set_default(Behavior::retry_after(429, "1"));
    let client = client_for(&[node.url()])
        .max_retries(3)
        .class_backoff(searchwire::ClassBackoff::reference().without_jitter())
        .build()
        .unwrap();
    let e = client
        .send(Request::post("/_bulk").body("{}\n").max_retries(0))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Throttled, "{e}");
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(node.request_count(), 1);
    // The same request without its own limit: the reference's 5 throttled retries.
    node.clear_requests();
    let e = client
        .send(Request::post("/_bulk").body("{}\n"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Throttled, "{e}");
    assert_eq!(node.request_count(), 6);
    // A limit of 1: one retry.
    node.clear_requests();
    let _ = client
        .send(Request::post("/_bulk").body("{}\n").max_retries(1))
        .await;
    assert_eq!(node.request_count(), 2);
}

/// `Request::deadline(at)` bounds the whole request by an instant on the client's clock,
/// like `timeout` does by a budget: a hung node's attempt is cut at that instant.
#[tokio::test(start_paused = true)]
async fn a_deadline_given_as_an_instant_bounds_the_request() {
    let node = FakeNode::start("n").await.unwrap();
    node.set_default(Behavior::Hang);
    let client = client_for(&[node.url()])
        .attempt_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let at = start + ms(750);
    let e = client
        .send(Request::get("/").deadline(at))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert_eq!(
        tokio::time::Instant::now(),
        at,
        "cut exactly at the deadline"
    );
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(e.attempts()[0].outcome, OutcomeKind::Cancelled);
    // An instant already past fails before anything is sent.
    node.clear_requests();
    let e = client
        .send(Request::get("/").deadline(start))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert_eq!(node.request_count(), 0);
}
