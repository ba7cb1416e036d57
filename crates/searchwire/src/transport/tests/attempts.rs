//! The attempt loop with injected time: a scripted in-memory connector and tokio's paused
//! clock, so backoff, timeouts and deadlines are asserted to the millisecond.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::classify::OutcomeKind;
use crate::http::addr::NodeAddr;
use crate::testing::{client, ms, Scripted, Step};
use crate::{Backoff, Client, ErrorKind, Request};

#[tokio::test(start_paused = true)]
async fn a_503_is_retried_on_a_different_node_after_the_backoff() {
    let c = Scripted::default();
    let cl = client(3, &c, |b| b);
    let first = cl.inner.pool.topology().nodes[0].addr.port();
    c.push(first, Step::Status(503));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.status(), 200);
    let ports = c.ports();
    assert_eq!(ports.len(), 2);
    assert_ne!(ports[0], ports[1], "the retry must go to a different node");
    assert_eq!(c.log()[1].3 - t0, ms(100));
    assert_eq!(r.attempts()[0].outcome_label(), "status:503");
    assert_eq!(r.attempts()[0].backoff, ms(100));
    // A 503 is an answer: the node stays alive.
    assert!(cl.nodes().iter().all(|n| n.alive));
}

#[tokio::test(start_paused = true)]
async fn the_references_example_configuration_behaves_exactly() {
    // RetryOnStatus 502/503/504/429, backoff i × 100 ms, MaxRetries 4, 5 min per attempt.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.retry_on_status([502, 503, 504, 429])
            .backoff(Backoff::from_fn(|i| ms(100) * i))
            .max_retries(4)
            .attempt_timeout(Duration::from_secs(300))
    });
    let t0 = Instant::now();
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Status);
    assert_eq!(e.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(e.attempts().len(), 5);
    let backoffs: Vec<u64> = e
        .attempts()
        .iter()
        .map(|a| a.backoff.as_millis() as u64)
        .collect();
    assert_eq!(backoffs, vec![100, 200, 300, 400, 0]);
    let times: Vec<u64> = c
        .log()
        .iter()
        .map(|l| (l.3 - t0).as_millis() as u64)
        .collect();
    assert_eq!(times, vec![0, 100, 300, 600, 1000]);
    assert!(e.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn default_is_three_retries_and_zero_means_none() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(502));
    let cl = client(1, &c, |b| b);
    assert_eq!(
        cl.send(Request::get("/"))
            .await
            .unwrap_err()
            .attempts()
            .len(),
        4
    );
    let c = Scripted::default();
    c.default_step(1, Step::Status(502));
    let cl = client(1, &c, |b| b.max_retries(0));
    assert_eq!(
        cl.send(Request::get("/"))
            .await
            .unwrap_err()
            .attempts()
            .len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_seconds_and_http_date_are_honoured_and_capped() {
    let c = Scripted::default();
    c.push(1, Step::StatusWith(429, "retry-after", "2".into()));
    let cl = client(1, &c, |b| b);
    let t0 = Instant::now();
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(c.log()[1].3 - t0, ms(2000));

    // An HTTP-date 7 s after the (injected) wall clock.
    let c = Scripted::default();
    let mut cl = client(1, &c, |b| b);
    fn fixed() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
    Arc::get_mut(&mut cl.inner).unwrap().wall_clock = fixed;
    let date = httpdate::fmt_http_date(fixed() + Duration::from_secs(7));
    c.push(1, Step::StatusWith(429, "retry-after", date));
    let t0 = Instant::now();
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(c.log()[1].3 - t0, ms(7000));

    // An hour is capped at the configured cap.
    let c = Scripted::default();
    c.push(1, Step::StatusWith(429, "retry-after", "3600".into()));
    let cl = client(1, &c, |b| b.retry_after_cap(Duration::from_secs(5)));
    let t0 = Instant::now();
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(c.log()[1].3 - t0, ms(5000));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_steers_traffic_to_another_node_instead_of_stalling_the_request() {
    let c = Scripted::default();
    let cl = client(2, &c, |b| b);
    let first = cl.inner.pool.topology().nodes[0].addr.port();
    let other = 3 - first;
    c.push(first, Step::StatusWith(429, "retry-after", "30".into()));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(c.ports(), vec![first, other]);
    assert_eq!(
        r.attempts()[0].backoff,
        ms(100),
        "the ordinary backoff, not 30 s"
    );
    assert_eq!(Instant::now() - t0, ms(100));
    // While its pause runs, the node that asked for it gets no traffic.
    for _ in 0..4 {
        cl.send(Request::get("/")).await.unwrap();
    }
    assert!(
        c.ports()[2..].iter().all(|&p| p == other),
        "{:?}",
        c.ports()
    );
    // After it, both nodes share the traffic again.
    tokio::time::advance(Duration::from_secs(30)).await;
    for _ in 0..2 {
        cl.send(Request::get("/")).await.unwrap();
    }
    let mut last: Vec<u16> = c.ports()[6..].to_vec();
    last.sort();
    assert_eq!(last, vec![1, 2]);
    // With no other node free, the request waits the pause out as before.
    let c = Scripted::default();
    let cl = client(1, &c, |b| b);
    c.push(1, Step::StatusWith(429, "retry-after", "3".into()));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts()[0].backoff, Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_on_a_hung_node_marks_it_dead_after_its_liveness_check_and_fails_over() {
    let c = Scripted::default();
    let cl = client(2, &c, |b| b.attempt_timeout(ms(250)));
    let first = cl.inner.pool.topology().nodes[0].addr.port();
    // The request hangs, and so does the liveness check that follows it.
    c.push(first, Step::Hang);
    c.push(first, Step::Hang);
    let t0 = Instant::now();
    let r = cl.send(Request::get("/_search")).await.unwrap();
    let log = c.log();
    assert_eq!(log.len(), 3);
    assert_eq!(
        (log[1].0, log[1].2.as_str()),
        (first, "/"),
        "the liveness check"
    );
    assert_eq!(log[1].3 - t0, ms(250));
    assert_ne!(log[2].0, first);
    assert_eq!(
        log[2].3 - t0,
        ms(600),
        "250 ms timeout + 250 ms liveness check (min(2 s, attempt timeout)) + 100 ms backoff"
    );
    assert_eq!(r.attempts()[0].outcome, OutcomeKind::Timeout);
    assert_eq!(r.attempts()[0].elapsed, ms(250));
    let resets = c.resets();
    assert!(
        !resets.is_empty() && resets.iter().all(|p| *p == first),
        "the timed-out node's pool is dropped: {resets:?}"
    );
    let dead: Vec<_> = cl.nodes().into_iter().filter(|n| !n.alive).collect();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].url.ends_with(&format!(":{first}")));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_on_a_node_that_answers_its_liveness_check_keeps_the_node_and_is_not_retried(
) {
    let c = Scripted::default();
    let cl = client(2, &c, |b| b.attempt_timeout(ms(250)));
    let first = cl.inner.pool.topology().nodes[0].addr.port();
    for port in [1, 2] {
        c.on_path(port, "/_cluster/health", Step::Hang);
        c.default_step(port, Step::Root);
    }
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/_cluster/health").query("wait_for_nodes", "99"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AttemptTimeout, "{e}");
    assert!(e.is_timeout());
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Timeout));
    assert_eq!(
        e.attempts().len(),
        1,
        "a slow request is not repeated elsewhere"
    );
    let log = c.log();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(
        (log[1].0, log[1].2.as_str()),
        (first, "/"),
        "the liveness check"
    );
    assert_eq!(Instant::now() - t0, ms(250), "the node answered at once");
    assert!(cl.nodes().iter().all(|n| n.alive), "nothing is ejected");
    let msg = e.to_string();
    for part in [
        "timed out after the attempt timeout of 250ms",
        "which is alive",
        "not marked dead",
        "Request::attempt_timeout",
        "--attempt-timeout",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    assert!(e.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_during_the_liveness_check_ends_the_request_without_marking_the_node_dead() {
    let c = Scripted::default();
    let cl = client(2, &c, |b| b.attempt_timeout(ms(250)));
    let first = cl.inner.pool.topology().nodes[0].addr.port();
    c.default_step(first, Step::Hang);
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/").timeout(ms(400)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert_eq!(
        Instant::now() - t0,
        ms(400),
        "the deadline bounds the check too"
    );
    assert!(cl.nodes().iter().all(|n| n.alive));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cancels_the_attempt_in_flight_without_marking_the_node_dead() {
    let c = Scripted::default();
    c.default_step(1, Step::Hang);
    let cl = client(1, &c, |b| b);
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/").timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(e.attempts()[0].outcome, OutcomeKind::Cancelled);
    assert!(
        cl.nodes()[0].alive,
        "a deadline says nothing about the node"
    );
    assert!(c.resets().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cancels_a_retry_in_flight_after_a_backoff() {
    // Attempt 1 hangs 600 ms then 503s; the backoff of 300 ms would end at 900 ms, inside
    // a 1 s deadline; attempt 2 hangs and is cancelled at exactly 1 s.
    let c = Scripted::default();
    c.push(1, Step::After(ms(600), Box::new(Step::Status(503))));
    c.push(1, Step::Hang);
    let cl = client(1, &c, |b| b.backoff(Backoff::constant(ms(300))));
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/").timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    assert_eq!(e.attempts().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_that_would_end_after_the_deadline_is_not_started() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.backoff(Backoff::constant(Duration::from_secs(2)))
    });
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/").timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(Instant::now(), t0, "fails at once, without sleeping");
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(e.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert!(
        e.to_string().contains("would end after the deadline"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_ends_before_the_first_attempt_can_start_sends_nothing() {
    // Passed, or closer than the timer's resolution (1 ms): an attempt started then would
    // not be bounded by the deadline, so none starts.
    let c = Scripted::default();
    let cl = client(2, &c, |b| b);
    let now = Instant::now();
    let requests = [
        Request::get("/").timeout(Duration::from_nanos(1)),
        Request::get("/").timeout(Duration::from_micros(999)),
        Request::get("/").deadline(now),
        Request::get("/").deadline(now - Duration::from_secs(1)),
    ];
    for r in requests {
        let e = cl.send(r).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
        assert!(e.attempts().is_empty(), "{e}");
        assert!(e.to_string().contains("nothing was sent"), "{e}");
    }
    assert_eq!(c.log().len(), 0, "not one request may be sent");
    assert_eq!(Instant::now(), now, "fails at once");
    assert!(
        cl.nodes().iter().all(|n| n.alive),
        "says nothing about a node"
    );
    // A millisecond is enough to start one.
    let r = cl.send(Request::get("/").timeout(ms(1))).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(c.log().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_ends_before_a_retry_can_start_sends_no_retry() {
    // Attempt 1 is a 503; the 300 ms backoff ends half a millisecond before the deadline,
    // too late for attempt 2 to start within it: the same as a backoff that would end
    // after the deadline.
    let c = Scripted::default();
    c.push(1, Step::Status(503));
    let cl = client(1, &c, |b| b.backoff(Backoff::constant(ms(300))));
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/").timeout(ms(300) + Duration::from_micros(500)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert_eq!(Instant::now() - t0, ms(300));
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(c.log().len(), 1, "attempt 2 is not sent");
    assert!(e.to_string().contains("attempt 2 was not sent"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn the_callers_cancellation_never_marks_a_node_dead() {
    let c = Scripted::default();
    c.default_step(1, Step::Hang);
    let cl = client(1, &c, |b| b);
    let r = tokio::time::timeout(ms(500), cl.send(Request::get("/"))).await;
    assert!(r.is_err(), "the caller gave up");
    let n = &cl.nodes()[0];
    assert!(n.alive);
    assert_eq!(n.failures, 0);
    assert!(c.resets().is_empty());
}

#[tokio::test(start_paused = true)]
async fn post_is_retried_after_a_connect_failure_or_429_but_never_after_a_timeout_or_reset() {
    let c = Scripted::default();
    c.push(1, Step::Connect);
    let cl = client(1, &c, |b| b);
    cl.send(Request::post("/i/_doc").body("{}")).await.unwrap();
    assert_eq!(c.log().len(), 2);

    let c = Scripted::default();
    c.push(1, Step::Status(429));
    let cl = client(1, &c, |b| b);
    cl.send(Request::post("/i/_doc").body("{}")).await.unwrap();
    assert_eq!(c.log().len(), 2);

    // A hung node: the attempt and its liveness check both hang (a node that answers its
    // liveness check ends the request without a retry, idempotent or not).
    let posts = |c: &Scripted| c.log().iter().filter(|l| l.1 == "POST").count();
    for step in [Step::Reset, Step::Hang, Step::Status(503)] {
        let c = Scripted::default();
        let cl = client(2, &c, |b| b.attempt_timeout(ms(100)));
        let first = cl.inner.pool.topology().nodes[0].addr.port();
        c.push(first, step.clone());
        c.push(first, step.clone());
        let e = cl
            .send(Request::post("/i/_doc").body("{}"))
            .await
            .unwrap_err();
        assert_eq!(posts(&c), 1, "{step:?}: POST must not be repeated");
        assert!(e.to_string().contains("not idempotent"), "{e}");
        // The same failure on a search (POST but read-only) is retried.
        let c2 = Scripted::default();
        let cl2 = client(2, &c2, |b| b.attempt_timeout(ms(100)));
        let first = cl2.inner.pool.topology().nodes[0].addr.port();
        c2.push(first, step.clone());
        c2.push(first, step.clone());
        cl2.send(Request::post("/i/_search").body("{}"))
            .await
            .unwrap();
        assert_eq!(posts(&c2), 2, "{step:?}: _search is idempotent");
    }
}

#[tokio::test(start_paused = true)]
async fn put_bulk_put_create_and_a_fragment_bulk_are_not_repeated_after_a_reset() {
    for path in [
        "/_bulk",
        "/logs/_bulk",
        "/logs/_create/1",
        "/_bulk#/_search",
    ] {
        for method in [http::Method::PUT, http::Method::POST] {
            let c = Scripted::default();
            c.push(1, Step::Reset);
            let cl = client(1, &c, |b| b);
            let e = cl
                .send(Request::new(method.clone(), path).body("{}"))
                .await
                .unwrap_err();
            assert_eq!(c.log().len(), 1, "{method} {path} must not be repeated");
            assert!(e.to_string().contains("not idempotent"), "{e}");
        }
    }
    // The fragment never reaches the wire.
    let c = Scripted::default();
    let cl = client(1, &c, |b| b);
    cl.send(Request::post("/i/_search#frag").body("{}"))
        .await
        .unwrap();
    assert_eq!(c.targets(1), vec!["/i/_search".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_409_after_an_ambiguous_attempt_says_the_earlier_attempt_may_have_written() {
    let c = Scripted::default();
    c.push(1, Step::Reset);
    c.push(1, Step::Body(409, r#"{"error":{"type":"version_conflict_engine_exception","reason":"[1]: version conflict, document already exists"},"status":409}"#.into()));
    let cl = client(1, &c, |b| b);
    let e = cl
        .send(Request::put("/i/_create/1").body("{}").idempotent(true))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::CONFLICT));
    assert_eq!(e.kind(), ErrorKind::Status);
    let m = e.to_string();
    assert!(m.contains("earlier attempt"), "{m}");
    assert!(m.contains("may have written"), "{m}");
    // A plain conflict (no ambiguous attempt before it) is reported as a conflict.
    let c = Scripted::default();
    c.push(1, Step::Status(409));
    let cl = client(1, &c, |b| b);
    let e = cl
        .send(Request::put("/i/_create/1").body("{}"))
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("earlier attempt"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn connectivity_failures_mark_nodes_dead_but_answers_never_do() {
    for (step, dead) in [
        (Step::Connect, true),
        (Step::Reset, true),
        (Step::Status(401), false),
        (Step::Status(403), false),
        (Step::Status(429), false),
        (Step::Status(503), false),
        (Step::Status(500), false),
        (Step::Status(404), false),
    ] {
        let c = Scripted::default();
        c.push(1, step.clone());
        let cl = client(2, &c, |b| b.max_retries(0));
        let first = cl.inner.pool.topology().nodes[0].addr.port();
        assert_eq!(first, 1);
        let _ = cl.send(Request::get("/")).await;
        assert_eq!(!cl.nodes()[0].alive, dead, "{step:?}");
        // A connectivity failure drops the node's pooled connections (the idle ones are as
        // suspect as the one that failed); an answer leaves them.
        let expected: Vec<u16> = if dead { vec![1] } else { vec![] };
        assert_eq!(c.resets(), expected, "{step:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn auth_errors_are_final_actionable_and_recorded_on_the_node() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(401));
    let cl = client(1, &c, |b| b.basic_auth("alice", "hunter2"));
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth);
    assert_eq!(e.attempts().len(), 1, "auth is not retried");
    let m = e.to_string();
    assert!(m.contains("rejected the credentials (401)"), "{m}");
    assert!(m.contains("not marked dead"), "{m}");
    assert!(!m.contains("hunter2") && !format!("{e:?}").contains("hunter2"));
    assert_eq!(
        cl.nodes()[0].auth_problem.as_deref(),
        Some("credentials rejected (401)")
    );
    assert!(!format!("{cl:?}").contains("hunter2"));
}

#[tokio::test(start_paused = true)]
async fn when_every_node_is_dead_the_soonest_due_is_still_tried() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    c.default_step(2, Step::Connect);
    let cl = client(2, &c, |b| b.max_retries(1));
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoNodeReachable);
    assert!(cl.nodes().iter().all(|n| !n.alive));
    // Both dead: a request still goes out (to the node due soonest) rather than being
    // refused, and succeeds once that node is back.
    c.default_step(1, Step::Status(200));
    c.default_step(2, Step::Status(200));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts().len(), 1);
    assert_eq!(cl.nodes().iter().filter(|n| n.alive).count(), 1);
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_with_a_seed_is_reproducible() {
    let delays = |seed| async move {
        let c = Scripted::default();
        c.default_step(1, Step::Status(503));
        let cl = client(1, &c, |b| {
            b.backoff(Backoff::exponential(ms(100), Duration::from_secs(10)))
                .seed(seed)
        });
        let e = cl.send(Request::get("/")).await.unwrap_err();
        e.attempts().iter().map(|a| a.backoff).collect::<Vec<_>>()
    };
    let a = delays(42).await;
    assert_eq!(a, delays(42).await);
    assert_eq!(a.len(), 4);
    for (i, d) in a.iter().take(3).enumerate() {
        assert!(
            *d <= ms(100) * (1 << i),
            "full jitter stays under base × 2^i"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_environment_override_replaces_the_programmatic_attempt_timeout() {
    // Through the real build path: the override replaces the builder's 300 s.
    let build = |env: &str, c: &Scripted| {
        Client::builder()
            .node("http://node:1")
            .attempt_timeout(Duration::from_secs(300))
            .max_retries(0)
            .resurrection_timers(false)
            .health_refresh(false)
            .build_with_connector(
                crate::config::timeout_override(Some(env)).unwrap(),
                Arc::new(c.clone()),
            )
            .unwrap()
    };
    // A slow request on a node that answers its liveness check (`GET /`) at once.
    let c = Scripted::default();
    c.on_path(1, "/slow", Step::Hang);
    let cl = build("1.5", &c);
    let t0 = Instant::now();
    let e = cl.send(Request::get("/slow")).await.unwrap_err();
    assert_eq!(Instant::now() - t0, ms(1500));
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Timeout));
    // A request's own attempt timeout is the code's statement about that request: it wins.
    let t0 = Instant::now();
    let _ = cl
        .send(Request::get("/slow").attempt_timeout(ms(200)))
        .await
        .unwrap_err();
    assert_eq!(Instant::now() - t0, ms(200));
    // "0" disables the per-attempt timeout: only the deadline ends a hung attempt.
    let cl = build("0", &c);
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/slow").timeout(Duration::from_secs(400)))
        .await
        .unwrap_err();
    assert_eq!(Instant::now() - t0, Duration::from_secs(400));
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
}

#[tokio::test(start_paused = true)]
async fn huge_deadlines_and_delays_never_panic() {
    let c = Scripted::default();
    c.push(1, Step::Status(503));
    let cl = client(1, &c, |b| b);
    // A budget too large to be an instant is no deadline at all.
    cl.send(Request::get("/").timeout(Duration::MAX))
        .await
        .unwrap();
    // A backoff that cannot be added to "now" is one that would end after any deadline.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| b.backoff(Backoff::from_fn(|_| Duration::MAX)));
    let e = cl
        .send(Request::get("/").timeout(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(e.attempts().len(), 1);
    assert!(
        e.to_string().contains("would end after the deadline"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_connection_errors_not_retried_a_refused_node_fails_at_once() {
    let c = Scripted::default();
    c.push(1, Step::Connect);
    let cl = client(2, &c, |b| b.retry_on_connection_errors(false));
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(e.kind(), ErrorKind::NoNodeReachable);
    // Statuses are still retried.
    let c = Scripted::default();
    c.push(1, Step::Status(503));
    let cl = client(2, &c, |b| b.retry_on_connection_errors(false));
    assert_eq!(
        cl.send(Request::get("/")).await.unwrap().attempts().len(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_ejected_for_gateway_errors_is_not_revived_by_another_one() {
    // One node answering 503 to everything: after 5 consecutive gateway errors it is
    // ejected. Still tried as the last resort, its next 503 must not bring it back — only
    // its resurrection check readmits it.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| b.max_retries(0));
    for _ in 0..5 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert!(!cl.nodes()[0].alive, "ejected after 5 gateway errors");
    for _ in 0..3 {
        let _ = cl.send(Request::get("/")).await;
        assert!(
            !cl.nodes()[0].alive,
            "a 503 from a dead node does not revive it"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_node_is_resurrected_by_its_timer_on_schedule() {
    // 3 nodes, node 1 refuses: after the first failure it gets no user traffic, only
    // health checks at the scheduled times (2 live of 3: 3.33 s, then 6.67 s); once it
    // answers GET / it takes traffic again.
    let c = Scripted::default();
    let cl = {
        let b = Client::builder()
            .backoff(Backoff::constant(ms(100)))
            .resurrection(crate::ResurrectionConfig {
                jitter_scale: 0.0,
                ..Default::default()
            })
            .seed(3);
        let addrs: Vec<NodeAddr> = (1..=3)
            .map(|p| NodeAddr::from_parts("http", "node", p, ""))
            .collect();
        Client::with_connector(b, addrs, HeaderMap::new(), Arc::new(c.clone()))
    };
    c.default_step(1, Step::Connect);
    let t0 = Instant::now();
    // Route the first request to node 1 by sending until it has been hit.
    while !c.ports().contains(&1) {
        cl.send(Request::get("/x")).await.unwrap();
    }
    let died_at = c.log().iter().find(|l| l.0 == 1).unwrap().3;
    for _ in 0..50 {
        cl.send(Request::get("/x")).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(12)).await;
    let node1: Vec<(String, Instant)> = c
        .log()
        .into_iter()
        .filter(|l| l.0 == 1)
        .map(|l| (l.2, l.3))
        .collect();
    assert_eq!(node1[0].0, "/x");
    let checks: Vec<u64> = node1[1..]
        .iter()
        .map(|(p, t)| {
            assert_eq!(p, "/", "only health checks reach a dead node");
            (*t - died_at).as_millis() as u64
        })
        .collect();
    assert_eq!(checks, vec![3333, 3333 + 6667]);
    // Revive it: the next check (13.3 s later) brings it back.
    c.default_step(1, Step::Root);
    tokio::time::sleep(Duration::from_secs(14)).await;
    assert!(cl.nodes().iter().all(|n| n.alive), "{:?}", cl.nodes());
    let before = c.ports().iter().filter(|p| **p == 1).count();
    for _ in 0..6 {
        cl.send(Request::get("/x")).await.unwrap();
    }
    let after = c.ports().iter().filter(|p| **p == 1).count();
    assert!(after > before, "the resurrected node takes traffic again");
    let _ = t0;
}

#[tokio::test(start_paused = true)]
async fn every_request_and_attempt_gets_a_span_with_the_conventional_fields() {
    let capture = crate::testing::Warnings::default();
    let _guard = capture.install();
    let c = Scripted::default();
    let cl = client(2, &c, |b| b);
    let first = cl.inner.pool.topology().nodes[0].addr.port();
    c.push(first, Step::Status(503));
    cl.send(Request::get("/logs/_search")).await.unwrap();

    let req = capture.spans("searchwire.request");
    assert_eq!(req.len(), 1);
    let r = &req[0];
    // OpenTelemetry's database conventions (`observe/semconv.rs`).
    assert_eq!(r.get("db.system.name"), Some("opensearch"));
    assert_eq!(r.get("db.operation.name"), Some("search"));
    assert_eq!(r.get("otel.name"), Some("search logs"));
    assert_eq!(r.get("db.response.status_code"), Some("200"));
    assert_eq!(r.get("http.request.resend_count"), Some("1"));
    assert_eq!(r.get("error.type"), None);
    assert_eq!(r.get("http.request.method"), Some("GET"));
    assert_eq!(r.get("url.path"), Some("/logs/_search"));
    assert_eq!(r.get("db.collection.name"), Some("logs"));
    assert_eq!(r.get("retries"), Some("1"));
    assert_eq!(r.get("http.response.status_code"), Some("200"));
    assert!(r.get("retry_id").is_some());

    let attempts = capture.spans("searchwire.attempt");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].get("attempt"), Some("1"));
    assert_eq!(attempts[0].get("outcome"), Some("gateway"));
    assert_eq!(attempts[0].get("http.response.status_code"), Some("503"));
    // OpenTelemetry: server.address is the host, server.port the port (not the URL).
    assert_eq!(attempts[0].get("server.address"), Some("node"));
    assert_eq!(
        attempts[0].get("server.port"),
        Some(first.to_string().as_str())
    );
    assert_eq!(attempts[0].get("http.request.resend_count"), None);
    assert_eq!(attempts[1].get("http.request.resend_count"), Some("1"));
    let second = if first == 1 { "2" } else { "1" };
    assert_eq!(r.get("server.address"), Some("node"));
    assert_eq!(
        r.get("server.port"),
        Some(second),
        "the node of the last attempt"
    );
    assert_eq!(r.get("otel.kind"), Some("client"));
    assert_eq!(attempts[1].get("attempt"), Some("2"));
    assert_eq!(attempts[1].get("outcome"), Some("ok"));
    assert!(attempts[1].get("elapsed_ms").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_at_the_attempt_timeout_ends_the_request_as_the_deadline() {
    // One timer bounds an attempt, at the earlier of its timeout and the deadline; when
    // both fall on the same instant, the deadline decides: no liveness check, no verdict
    // on the node, no connection reset.
    let c = Scripted::default();
    c.default_step(1, Step::Hang);
    let cl = client(1, &c, |b| b.attempt_timeout(Duration::from_secs(1)));
    let t0 = Instant::now();
    let e = cl
        .send(Request::get("/").timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert_eq!(e.attempts().len(), 1);
    assert_eq!(e.attempts()[0].outcome, OutcomeKind::Cancelled);
    assert_eq!(c.log().len(), 1, "no liveness check was sent");
    assert!(cl.nodes()[0].alive);
    assert!(c.resets().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_fires_on_time_with_a_timer_kept_from_earlier_attempts() {
    // An attempt's timer is a finished attempt's, kept (`run/timer.rs`): still registered
    // at its old instant, with the waker of whoever polled it last. Neither may move the
    // next attempt's timeout: not answered requests, not a cancelled one.
    let c = Scripted::default();
    let cl = client(1, &c, |b| b.attempt_timeout(ms(250)));
    c.on_path(1, "/slow", Step::Hang);
    c.default_step(1, Step::Root);
    for _ in 0..3 {
        cl.send(Request::get("/")).await.unwrap();
    }
    let cancelled = tokio::time::timeout(ms(100), cl.send(Request::get("/slow"))).await;
    assert!(cancelled.is_err(), "the caller gave up first");
    let t0 = Instant::now();
    let e = cl.send(Request::get("/slow")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AttemptTimeout, "{e}");
    assert_eq!(
        Instant::now() - t0,
        ms(250),
        "the node answered its check at once"
    );
    // And a later attempt with an earlier end than the kept timer's.
    let t1 = Instant::now();
    let e = cl
        .send(Request::get("/slow").attempt_timeout(ms(40)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AttemptTimeout, "{e}");
    assert_eq!(Instant::now() - t1, ms(40));
}

#[tokio::test(start_paused = true)]
async fn the_retry_id_is_made_only_when_a_span_or_log_shows_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static READS: AtomicUsize = AtomicUsize::new(0);
    fn counted() -> SystemTime {
        READS.fetch_add(1, Ordering::SeqCst);
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
    let c = Scripted::default();
    let mut cl = client(1, &c, |b| b);
    Arc::get_mut(&mut cl.inner).unwrap().wall_clock = counted;
    // Nobody listens: no wall-clock reading for an id (the one reading is the retry's
    // look for an HTTP-date `Retry-After`).
    c.push(1, Step::Status(503));
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(READS.load(Ordering::SeqCst), 1);
    // With a subscriber the request span shows it at the start: one reading more, one id
    // for the request and its attempts.
    let capture = crate::testing::Warnings::default();
    let _guard = capture.install();
    c.push(1, Step::Status(503));
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(READS.load(Ordering::SeqCst), 3);
    let id = capture.spans("searchwire.request")[0]
        .get("retry_id")
        .map(str::to_string);
    assert!(id.is_some());
    let attempts = capture.spans("searchwire.attempt");
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().all(|a| a.get("retry_id") == id.as_deref()));
}

/// Records the `elapsed` of every finished request.
#[derive(Default)]
struct RequestTimes(std::sync::Mutex<Vec<Duration>>);

impl crate::Observer for RequestTimes {
    fn request_finished(&self, e: &crate::observe::RequestEvent<'_>) {
        self.0.lock().unwrap().push(e.elapsed);
    }
}

#[tokio::test(start_paused = true)]
async fn a_requests_reported_duration_is_its_attempts_or_all_of_it_with_backoff() {
    let c = Scripted::default();
    let times = Arc::new(RequestTimes::default());
    let cl = client(1, &c, |b| b.observer(times.clone()));
    let port = cl.inner.pool.topology().nodes[0].addr.port();
    // One attempt, answered after 300 ms: the request took the attempt's 300 ms.
    c.push(port, Step::After(ms(300), Box::new(Step::Status(200))));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts()[0].elapsed, ms(300));
    // A 503 after 50 ms, 100 ms of backoff, a 200 after 200 ms: 350 ms in all.
    c.push(port, Step::After(ms(50), Box::new(Step::Status(503))));
    c.push(port, Step::After(ms(200), Box::new(Step::Status(200))));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts().len(), 2);
    // A failed request: one 404 after 70 ms.
    c.push(port, Step::After(ms(70), Box::new(Step::Status(404))));
    assert!(cl.send(Request::get("/")).await.is_err());
    assert_eq!(*times.0.lock().unwrap(), [ms(300), ms(350), ms(70)]);
}
