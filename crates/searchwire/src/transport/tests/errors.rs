//! The error a caller sees: its kind per last outcome, its predicates, its source chain and
//! the final response taken out of it.

use std::error::Error as _;

use crate::classify::OutcomeKind;
use crate::testing::{client, ms, Scripted, Step};
use crate::{ErrorKind, Request};

#[tokio::test(start_paused = true)]
async fn a_reset_is_connection_lost_not_no_node_reachable() {
    let c = Scripted::default();
    c.default_step(1, Step::Reset);
    let cl = client(1, &c, |b| b.max_retries(0));
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset));
    assert_eq!(e.kind(), ErrorKind::ConnectionLost);
    assert!(!e.is_connect(), "the node was reached");
    assert!(e.is_retryable());
    assert!(e.to_string().contains("was reached"), "{e}");
    assert!(e.source().is_some(), "the transport cause is chained");
}

#[tokio::test(start_paused = true)]
async fn is_connect_only_for_connect_failures() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let cl = client(1, &c, |b| b.max_retries(0));
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert!(e.is_connect());
    assert!(e.source().is_some());

    let c = Scripted::default();
    c.push(1, Step::After(ms(400), Box::new(Step::Status(200))));
    let cl = client(1, &c, |b| b.attempt_timeout(ms(300)).max_retries(0));
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert!(e.is_timeout());
    assert!(
        !e.is_connect(),
        "an attempt timeout is not a connect failure"
    );
    assert_eq!(
        e.source().map(|s| s.to_string()).as_deref(),
        Some("attempt timed out after 300ms")
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_that_is_not_json_is_a_decode_error_and_the_response_comes_out() {
    let c = Scripted::default();
    c.default_step(1, Step::Body(200, "not json".into()));
    let cl = client(1, &c, |b| b);
    let r = cl.send(Request::get("/")).await.unwrap();
    let e = r.json::<serde_json::Value>().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Decode);
    assert!(e.is_decode());
    assert!(e.source().is_some());

    let c = Scripted::default();
    c.default_step(1, Step::Body(404, r#"{"found":false}"#.into()));
    let cl = client(1, &c, |b| b);
    let e = cl.send(Request::get("/")).await.unwrap_err();
    let resp = e.into_response().expect("a 404 carries its response");
    assert_eq!(resp.status().as_u16(), 404);
    assert_eq!(resp.text(), r#"{"found":false}"#);
}
