//! The adaptive concurrency limit through a client, with the scripted connector and
//! tokio's paused clock: requests over the limit fail at once or wait for a slot, and the
//! limit learns from the requests' latency and overload signals.

use std::time::Duration;

use tokio::time::Instant;

use crate::policy::vegas::PROBE_SAMPLES;
use crate::testing::{client, ms, Scripted, Step};
use crate::{AdaptiveConcurrency, Client, ErrorKind, Request};

fn after(d: u64, status: u16) -> Step {
    Step::After(ms(d), Box::new(Step::Status(status)))
}

fn limit(initial: u32, max: u32, wait: Duration) -> AdaptiveConcurrency {
    AdaptiveConcurrency {
        initial_limit: initial,
        min_limit: 1,
        max_limit: max,
        max_wait: wait,
    }
}

/// Ends the probe the limit starts with: `PROBE_SAMPLES` requests, one at a time.
async fn probe_at_start(cl: &Client) {
    for _ in 0..PROBE_SAMPLES {
        cl.send(Request::get("/")).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn the_limit_starts_with_a_probe_at_its_minimum() {
    let c = Scripted::default();
    c.default_step(1, after(100, 200));
    let cl = client(1, &c, |b| {
        b.adaptive_concurrency(limit(2, 2, Duration::ZERO))
    });
    let lim = || cl.inner.limit.as_ref().unwrap().snapshot().0;
    assert_eq!(
        lim(),
        1,
        "the minimum, until five requests have been answered"
    );
    let (a, b) = tokio::join!(cl.send(Request::get("/a")), cl.send(Request::get("/b")));
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().kind(), ErrorKind::ConcurrencyLimited);
    for _ in 1..PROBE_SAMPLES {
        cl.send(Request::get("/")).await.unwrap();
    }
    assert_eq!(lim(), 2, "the initial limit, once the probe has ended");
}

#[tokio::test(start_paused = true)]
async fn over_the_limit_a_request_fails_at_once_and_is_not_sent() {
    let c = Scripted::default();
    c.default_step(1, after(100, 200));
    let cl = client(1, &c, |b| {
        b.adaptive_concurrency(limit(2, 2, Duration::ZERO))
    });
    probe_at_start(&cl).await;
    let t0 = Instant::now();
    let (a, b, third) = tokio::join!(
        cl.send(Request::get("/a")),
        cl.send(Request::get("/b")),
        cl.send(Request::get("/c")),
    );
    assert!(a.is_ok() && b.is_ok());
    let e = third.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConcurrencyLimited);
    assert!(
        e.message()
            .contains("adaptive concurrency limit (2 in flight"),
        "{e}"
    );
    assert!(e.attempts().is_empty());
    assert!(e.is_retryable());
    assert_eq!(
        c.log().len(),
        PROBE_SAMPLES as usize + 2,
        "the refused request was not sent"
    );
    assert_eq!(t0.elapsed(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn with_a_wait_the_request_takes_the_first_freed_slot() {
    let c = Scripted::default();
    c.default_step(1, after(100, 200));
    let cl = client(1, &c, |b| b.adaptive_concurrency(limit(1, 1, ms(500))));
    let t0 = Instant::now();
    let (a, b) = tokio::join!(cl.send(Request::get("/a")), cl.send(Request::get("/b")));
    assert!(a.is_ok() && b.is_ok());
    let log = c.log();
    assert_eq!(log[1].3 - t0, ms(100), "sent when the first freed its slot");
    // The wait is bounded by the deadline too.
    let (a, b) = tokio::join!(
        cl.send(Request::get("/a")),
        cl.send(Request::get("/b").timeout(ms(30)))
    );
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().kind(), ErrorKind::ConcurrencyLimited);
}

#[tokio::test(start_paused = true)]
async fn the_limit_grows_without_queueing_and_shrinks_on_overload() {
    let c = Scripted::default();
    c.default_step(1, after(10, 200));
    let cl = client(1, &c, |b| {
        b.adaptive_concurrency(limit(1, 100, Duration::ZERO))
            .no_circuit_breaker()
            .node_gateway_failures_to_eject(0)
            .max_retries(0)
    });
    let lim = || cl.inner.limit.as_ref().unwrap().snapshot().0;
    // The probe it starts with sets the no-load latency (10 ms); the next request sees no
    // queue with the whole limit (1) in flight: + max(1, log10 1) = 2; the one after it,
    // alone again with the limit at 2, is half of it: no queue, 3.
    probe_at_start(&cl).await;
    assert_eq!(lim(), 1);
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(lim(), 2);
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(lim(), 3);
    // One at a time is less than half of 3: the client is the bound, nothing is learned.
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(lim(), 3);
    // A 503 is an overload signal: − max(1, log10 3) = −1 each, down to the floor.
    c.default_step(1, Step::Status(503));
    for _ in 0..3 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert_eq!(lim(), 1);
}
