//! The resilience policies inside the attempt loop, with the scripted connector and tokio's
//! paused clock: retry budget, per-class backoff, the cluster breaker, gateway ejection and
//! adaptive jitter — exact token counts, delays and transitions.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use crate::observe::DenyReason;
use crate::testing::{client, ms, Recorder, Scripted, Step};
use crate::{
    AdaptiveJitter, Backoff, BreakerConfig, BreakerState, ClassBackoff, ErrorKind, OutcomeKind,
    Request, RetryBudget,
};

fn send_times(c: &Scripted, t0: Instant) -> Vec<Duration> {
    c.log().iter().map(|l| l.3 - t0).collect()
}

// ---- retry budget ------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_budget_caps_retries_at_a_fifth_of_the_requests_plus_the_floor() {
    // A cluster answering 503 to everything; 1,000 requests that would each make 4 attempts.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.backoff(Backoff::None)
            .no_circuit_breaker()
            .node_gateway_failures_to_eject(0)
    });
    let mut budget_errors = 0;
    for _ in 0..1000 {
        let e = cl.send(Request::get("/")).await.unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::Status,
            "the kind is the last outcome's"
        );
        assert_eq!(e.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
        if e.message().contains("retry budget is exhausted") {
            budget_errors += 1;
        }
    }
    // Deposits 1000 × 0.2 = 200 retries, plus the reserve 10/s × 10 s = 100: exactly 300.
    assert_eq!(c.log().len(), 1300);
    assert!(budget_errors > 900, "{budget_errors}");

    // Switched off, every request makes its 4 attempts.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.backoff(Backoff::None)
            .no_circuit_breaker()
            .no_retry_budget()
            .node_gateway_failures_to_eject(0)
    });
    for _ in 0..1000 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert_eq!(c.log().len(), 4000);
}

#[tokio::test(start_paused = true)]
async fn a_denied_retry_fails_with_the_last_outcome_and_says_why() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let rec = Arc::new(Recorder::default());
    let cl = client(1, &c, |b| {
        b.retry_budget(RetryBudget {
            ratio: 0.0,
            min_per_sec: 0,
            window: Duration::from_secs(10),
        })
        .observer(rec.clone())
    });
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.attempts().len(), 1, "first attempts are never refused");
    assert_eq!(e.kind(), ErrorKind::NoNodeReachable);
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Connect));
    assert!(e.to_string().contains("retry budget is exhausted"), "{e}");
    assert_eq!(
        *rec.denied.lock().unwrap(),
        vec![(OutcomeKind::Connect, DenyReason::Budget)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_paced_by_the_server_not_the_budget() {
    // An empty budget (ratio 0, no floor) refuses every retry it is asked to pay for.
    let empty = || RetryBudget {
        ratio: 0.0,
        min_per_sec: 0,
        window: Duration::from_secs(10),
    };
    let c = Scripted::default();
    c.push(1, Step::StatusWith(429, "retry-after", "1".into()));
    c.push(1, Step::StatusWith(429, "retry-after", "1".into()));
    let cl = client(1, &c, |b| b.retry_budget(empty()));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(send_times(&c, t0), vec![ms(0), ms(1000), ms(2000)]);
    // Not charged either: a 429 without Retry-After right after is still refused, and a
    // 503 (an outage) is charged as before.
    for step in [Step::Status(429), Step::Status(503)] {
        c.push(1, step.clone());
        let e = cl.send(Request::get("/")).await.unwrap_err();
        assert_eq!(e.attempts().len(), 1, "{step:?}");
        assert!(e.to_string().contains("retry budget is exhausted"), "{e}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_floor_comes_back_after_the_window() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.backoff(Backoff::None)
            .max_retries(1)
            .retry_budget(RetryBudget {
                ratio: 0.0,
                min_per_sec: 1,
                window: Duration::from_secs(10),
            })
            .no_circuit_breaker()
            .node_gateway_failures_to_eject(0)
    });
    // Reserve: 1/s × 10 s = 10 retries.
    for _ in 0..20 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert_eq!(c.log().len(), 30);
    tokio::time::advance(Duration::from_secs(10)).await;
    for _ in 0..20 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert_eq!(c.log().len(), 60);
}

// ---- per-class backoff -------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn class_backoff_reference_delays_are_exact_with_jitter_off() {
    let reference = || ClassBackoff::reference().without_jitter();

    // 429 without Retry-After: 100 ms × 1.5^i, five retries (more than max_retries = 3).
    let c = Scripted::default();
    c.default_step(1, Step::Status(429));
    let cl = client(1, &c, |b| b.class_backoff(reference()));
    let t0 = Instant::now();
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Throttled);
    assert_eq!(e.attempts().len(), 6);
    let backoffs: Vec<Duration> = e.attempts().iter().map(|a| a.backoff).collect();
    assert_eq!(
        backoffs,
        vec![
            ms(100),
            ms(150),
            ms(225),
            Duration::from_micros(337_500),
            Duration::from_micros(506_250),
            ms(0)
        ]
    );
    // tokio's timer has millisecond resolution: sub-millisecond sleeps end on the next one.
    assert_eq!(
        send_times(&c, t0),
        vec![ms(0), ms(100), ms(250), ms(475), ms(813), ms(1320)]
    );

    // 503: 500 ms × 2^i, three retries.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| b.class_backoff(reference()));
    let t0 = Instant::now();
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.attempts().len(), 4);
    assert_eq!(send_times(&c, t0), vec![ms(0), ms(500), ms(1500), ms(3500)]);

    // Connection reset: 200 ms × 1.8^i, four retries.
    let c = Scripted::default();
    c.default_step(1, Step::Reset);
    let cl = client(1, &c, |b| b.class_backoff(reference()));
    let t0 = Instant::now();
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.attempts().len(), 5);
    let backoffs: Vec<Duration> = e.attempts().iter().map(|a| a.backoff).collect();
    assert_eq!(
        backoffs,
        vec![
            ms(200),
            ms(360),
            ms(648),
            Duration::from_micros(1_166_400),
            ms(0)
        ]
    );
    assert_eq!(
        send_times(&c, t0),
        vec![ms(0), ms(200), ms(560), ms(1208), ms(2375)]
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_the_base_of_the_class_rule_and_is_capped() {
    // 429 with Retry-After: 2 s on the first retry (base × 1.5^0); then a 429 without it
    // continues the class's curve at its second step (150 ms).
    let c = Scripted::default();
    c.push(1, Step::StatusWith(429, "retry-after", "2".into()));
    c.push(1, Step::Status(429));
    let cl = client(1, &c, |b| {
        b.class_backoff(ClassBackoff::reference().without_jitter())
    });
    let t0 = Instant::now();
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(send_times(&c, t0), vec![ms(0), ms(2000), ms(2150)]);

    // Retry-After: 1 again and again: the reference's 429 curve grows from it (× 1.5),
    // never below it.
    let c = Scripted::default();
    for _ in 0..4 {
        c.push(1, Step::StatusWith(429, "retry-after", "1".into()));
    }
    let cl = client(1, &c, |b| {
        b.class_backoff(ClassBackoff::reference().without_jitter())
    });
    let t0 = Instant::now();
    let r = cl.send(Request::get("/")).await.unwrap();
    let backoffs: Vec<u64> = r
        .attempts()
        .iter()
        .map(|a| a.backoff.as_millis() as u64)
        .collect();
    assert_eq!(backoffs, vec![1000, 1500, 2250, 3375, 0]);
    assert_eq!(
        send_times(&c, t0),
        vec![ms(0), ms(1000), ms(2500), ms(4750), ms(8125)]
    );

    // Capped by retry_after_cap, and by the deadline (not started when it would end after).
    let c = Scripted::default();
    c.push(1, Step::StatusWith(429, "retry-after", "3600".into()));
    let cl = client(1, &c, |b| {
        b.class_backoff(ClassBackoff::reference().without_jitter())
            .retry_after_cap(Duration::from_secs(4))
    });
    let t0 = Instant::now();
    cl.send(Request::get("/")).await.unwrap();
    assert_eq!(send_times(&c, t0), vec![ms(0), ms(4000)]);
    c.push(1, Step::StatusWith(429, "retry-after", "3".into()));
    let e = cl
        .send(Request::get("/").timeout(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Throttled);
    assert!(
        e.to_string().contains("would end after the deadline"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn kinds_without_a_rule_keep_the_clients_backoff_and_max_retries() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(500));
    let only_gateway = ClassBackoff::new().rule(
        OutcomeKind::Gateway,
        crate::ClassRule::new(ms(500), 2.0, 1, Duration::from_secs(30)),
    );
    let cl = client(1, &c, |b| {
        b.retry_on_status([500, 503])
            .class_backoff(only_gateway.clone())
    });
    let t0 = Instant::now();
    let e = cl.send(Request::get("/")).await.unwrap_err();
    // 500 has no rule: constant 100 ms, max_retries 3.
    assert_eq!(send_times(&c, t0), vec![ms(0), ms(100), ms(200), ms(300)]);
    assert_eq!(e.attempts().len(), 4);
    // 503's rule allows one retry only, even though max_retries is 3.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| b.class_backoff(only_gateway));
    assert_eq!(
        cl.send(Request::get("/"))
            .await
            .unwrap_err()
            .attempts()
            .len(),
        2
    );
}

// ---- cluster breaker ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_cluster_breaker_goes_through_every_state() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let rec = Arc::new(Recorder::default());
    let cl = client(1, &c, |b| {
        b.max_retries(0)
            .no_retry_budget()
            .node_gateway_failures_to_eject(0)
            .observer(rec.clone())
    });
    assert_eq!(cl.breaker_state(), BreakerState::Closed);
    // 404s are answers, not failures: they never open it.
    c.push(1, Step::Status(404));
    let _ = cl.send(Request::get("/")).await;
    for _ in 0..48 {
        let _ = cl.send(Request::get("/")).await;
        assert_eq!(cl.breaker_state(), BreakerState::Closed);
    }
    // The 50th attempt: 49 of 50 failed (98 % > 60 %, and at least 50 attempts): open.
    let _ = cl.send(Request::get("/")).await;
    assert_eq!(cl.breaker_state(), BreakerState::Open);
    assert_eq!(c.log().len(), 50);

    // Open: refused at once, without traffic.
    let t0 = Instant::now();
    let e = cl.send(Request::get("/x")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CircuitOpen);
    assert!(e.attempts().is_empty());
    assert!(e.to_string().contains("next probe may go in 5s"), "{e}");
    assert_eq!(Instant::now(), t0);
    assert_eq!(c.log().len(), 50);

    // After the cool-down: half-open, a failed probe reopens it for 10 s.
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(cl.breaker_state(), BreakerState::HalfOpen);
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Status);
    assert_eq!(cl.breaker_state(), BreakerState::Open);
    tokio::time::advance(Duration::from_millis(9_999)).await;
    assert_eq!(
        cl.send(Request::get("/")).await.unwrap_err().kind(),
        ErrorKind::CircuitOpen
    );
    tokio::time::advance(ms(1)).await;

    // The cluster is back: three successful probes close it.
    c.default_step(1, Step::Status(200));
    for _ in 0..3 {
        cl.send(Request::get("/")).await.unwrap();
    }
    assert_eq!(cl.breaker_state(), BreakerState::Closed);
    use BreakerState::*;
    assert_eq!(
        *rec.breaker.lock().unwrap(),
        vec![
            (Closed, Open),
            (Open, HalfOpen),
            (HalfOpen, Open),
            (Open, HalfOpen),
            (HalfOpen, Closed)
        ]
    );
}

/// Polls `fut` once: `Pending` leaves it in flight (admitted and sent, or waiting).
async fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx))).await
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_the_probes_and_a_dropped_probe_frees_its_slot() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.max_retries(0)
            .no_retry_budget()
            .node_gateway_failures_to_eject(0)
            .circuit_breaker(BreakerConfig {
                min_requests: 3,
                probes: 2,
                ..BreakerConfig::default()
            })
    });
    for _ in 0..3 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert_eq!(cl.breaker_state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(cl.breaker_state(), BreakerState::HalfOpen);

    // Probes that never answer stay in flight (time does not move while they are pending).
    c.default_step(1, Step::Hang);
    let mut p1 = Box::pin(cl.send(Request::get("/p1")));
    let mut p2 = Box::pin(cl.send(Request::get("/p2")));
    assert!(poll_once(&mut p1).await.is_pending());
    assert!(poll_once(&mut p2).await.is_pending());
    assert_eq!(c.log().len(), 5, "both probes were sent");

    // Every probe is out: the rest are refused at once, without traffic.
    for _ in 0..3 {
        let e = cl.send(Request::get("/refused")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CircuitOpen);
        assert!(e.attempts().is_empty());
        assert!(e.to_string().contains("probes are in flight"), "{e}");
    }
    assert_eq!(c.log().len(), 5);
    assert_eq!(cl.breaker_state(), BreakerState::HalfOpen);

    // The caller of probe 1 gives up (drops the future): its slot is free for the next one.
    drop(p1);
    let mut p3 = Box::pin(cl.send(Request::get("/p3")));
    assert!(poll_once(&mut p3).await.is_pending());
    assert_eq!(c.log().len(), 6, "the freed slot admitted a new probe");
    let e = cl.send(Request::get("/refused")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CircuitOpen);
    assert_eq!(c.log().len(), 6);
    assert_eq!(cl.breaker_state(), BreakerState::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn a_half_open_retry_without_a_probe_slot_is_refused_before_its_backoff() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    c.push_path(
        1,
        "/b",
        Step::After(Duration::from_secs(10), Box::new(Step::Status(503))),
    );
    c.push_path(1, "/e", Step::Hang);
    let cl = client(1, &c, |b| {
        b.backoff(Backoff::constant(Duration::from_secs(1)))
            .no_retry_budget()
            .node_gateway_failures_to_eject(0)
            .circuit_breaker(BreakerConfig {
                min_requests: 3,
                probes: 1,
                ..BreakerConfig::default()
            })
    });
    let t0 = Instant::now();
    // B is admitted while the breaker is closed; its answer (a 503) takes 10 s.
    let mut b = Box::pin(cl.send(Request::get("/b")));
    assert!(poll_once(&mut b).await.is_pending());
    // Meanwhile three non-idempotent requests fail (not retried) and open the breaker.
    for _ in 0..3 {
        let _ = cl.send(Request::post("/x")).await;
    }
    assert_eq!(cl.breaker_state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(5)).await;
    // E takes the only probe slot of the half-open round and stays in flight.
    let mut e = Box::pin(cl.send(Request::get("/e")));
    assert!(poll_once(&mut e).await.is_pending());
    // B's 503 arrives at 10 s: its retry finds no probe slot and is refused at once —
    // no backoff is planned or slept first.
    let err = b.await.unwrap_err();
    assert_eq!(Instant::now() - t0, Duration::from_secs(10));
    assert_eq!(err.attempts().len(), 1);
    assert_eq!(err.attempts()[0].backoff, Duration::ZERO);
    assert!(err.to_string().contains("circuit breaker is open"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_retry_is_not_made_once_the_breaker_opened() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    c.default_step(2, Step::Status(503));
    let rec = Arc::new(Recorder::default());
    let cl = client(2, &c, |b| {
        b.no_retry_budget()
            .node_gateway_failures_to_eject(0)
            .circuit_breaker(BreakerConfig {
                min_requests: 3,
                ..BreakerConfig::default()
            })
            .observer(rec.clone())
    });
    // Attempt 3 fails: 3 of 3 failed, the breaker opens; retry 3 is not made.
    let e = cl.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.attempts().len(), 3);
    assert_eq!(e.kind(), ErrorKind::Status);
    assert_eq!(e.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert!(e.to_string().contains("circuit breaker is open"), "{e}");
    assert_eq!(
        *rec.denied.lock().unwrap(),
        vec![(OutcomeKind::Gateway, DenyReason::Breaker)]
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_can_be_switched_off() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let cl = client(1, &c, |b| b.max_retries(0).no_circuit_breaker());
    for _ in 0..200 {
        let e = cl.send(Request::get("/")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoNodeReachable);
    }
    assert_eq!(cl.breaker_state(), BreakerState::Closed);
    assert_eq!(c.log().len(), 200);
}

// ---- per-node gateway ejection -----------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn five_consecutive_gateway_errors_eject_a_node() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(502));
    let rec = Arc::new(Recorder::default());
    let cl = client(3, &c, |b| b.backoff(Backoff::None).observer(rec.clone()));
    for _ in 0..60 {
        let _ = cl.send(Request::get("/")).await;
    }
    let hits = c.ports().iter().filter(|p| **p == 1).count();
    assert_eq!(hits, 5, "ejected after the fifth 502, then no user traffic");
    let n1 = cl
        .nodes()
        .into_iter()
        .find(|n| n.url.ends_with(":1"))
        .unwrap();
    assert!(!n1.alive);
    assert_eq!(
        n1.last_error.as_deref(),
        Some("5 consecutive gateway errors (last: 502 Bad Gateway)")
    );
    let nodes = rec.nodes.lock().unwrap().clone();
    assert_eq!(nodes.len(), 1);
    assert!(!nodes[0].1);
}

#[tokio::test(start_paused = true)]
async fn any_other_answer_resets_the_gateway_count() {
    let c = Scripted::default();
    let cl = client(1, &c, |b| b.max_retries(0));
    for _ in 0..3 {
        for _ in 0..4 {
            c.push(1, Step::Status(503));
        }
        c.push(1, Step::Status(404));
    }
    for _ in 0..15 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert!(cl.nodes()[0].alive);
    // The threshold 0 never ejects.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.max_retries(0)
            .node_gateway_failures_to_eject(0)
            .no_circuit_breaker()
    });
    for _ in 0..20 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert!(cl.nodes()[0].alive);
}

// ---- adaptive jitter ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn adaptive_jitter_follows_the_retry_count() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    let cl = client(1, &c, |b| {
        b.adaptive_jitter(AdaptiveJitter::default())
            .node_gateway_failures_to_eject(0)
    });
    let mut backoffs = Vec::new();
    for _ in 0..4 {
        let e = cl.send(Request::get("/")).await.unwrap_err();
        backoffs.extend(e.attempts().iter().take(3).map(|a| a.backoff.as_millis()));
    }
    // Retries already made in the window before each retry: 0..=11.
    assert_eq!(
        backoffs,
        vec![100, 100, 100, 180, 180, 180, 180, 180, 180, 180, 300, 300]
    );
    // A server's Retry-After is never scaled.
    c.push(1, Step::StatusWith(503, "retry-after", "2".into()));
    c.push(1, Step::Status(200));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts()[0].backoff, ms(2000));
    // Five minutes later the window is empty again.
    tokio::time::advance(Duration::from_secs(300)).await;
    c.push(1, Step::Status(503));
    c.push(1, Step::Status(200));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts()[0].backoff, ms(100));
}

#[tokio::test(start_paused = true)]
async fn a_half_open_breaker_triples_the_backoff() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let rec = Arc::new(Recorder::default());
    // Thresholds out of reach: only the breaker can raise the multiplier.
    let table = AdaptiveJitter {
        mid_threshold: 1_000_000,
        high_threshold: 1_000_000,
        ..AdaptiveJitter::default()
    };
    let cl = client(1, &c, |b| {
        b.adaptive_jitter(table)
            .no_retry_budget()
            .observer(rec.clone())
    });
    for _ in 0..20 {
        let _ = cl.send(Request::get("/")).await;
    }
    assert_eq!(cl.breaker_state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(5)).await;
    // A probe answered 429 (an answer: the probe succeeded) and is retried: 100 ms × 3.
    c.push(1, Step::Status(429));
    c.default_step(1, Step::Status(200));
    let r = cl.send(Request::get("/")).await.unwrap();
    assert_eq!(r.attempts()[0].backoff, ms(300));
    let retries = rec.retries.lock().unwrap().clone();
    assert_eq!(
        retries.last().copied(),
        Some((OutcomeKind::Throttled, ms(300), 3.0))
    );
}

#[test]
fn the_request_future_is_send() {
    // Callers spawn requests on multi-threaded runtimes (the storm example does 200 of them).
    fn assert_send<T: Send>(_: &T) {}
    let c = Scripted::default();
    let cl = client(1, &c, |b| b);
    let fut = cl.send(Request::get("/"));
    assert_send(&fut);
}

// ---- the health-check hook ---------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn health_checks_are_reported_to_the_observer() {
    let c = Scripted::default();
    c.default_step(1, Step::Root);
    c.default_step(2, Step::Connect);
    let rec = Arc::new(Recorder::default());
    let cl = client(2, &c, |b| b.observer(rec.clone()));
    cl.check_all().await;
    let mut seen = rec.health.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("http://node:1".into(), "check_all".into(), "healthy".into()),
            (
                "http://node:2".into(),
                "check_all".into(),
                "unreachable".into()
            ),
        ]
    );
}

// ---- a node that stopped making progress -----------------------------------------------------

#[tokio::test(start_paused = true)]
async fn new_requests_avoid_a_node_whose_attempts_have_stopped_making_progress() {
    // Node 1 takes connections and never answers (a partition); node 2 answers at once.
    let c = Scripted::default();
    c.default_step(1, Step::Hang);
    let cl = client(2, &c, |b| b);
    // Two requests in a row: round-robin puts one of them on node 1, where it hangs.
    let timed = |cl: crate::Client| async move {
        let t = Instant::now();
        let r = cl.send(Request::get("/")).await;
        (r.map(|r| r.status()), Instant::now() - t)
    };
    let a = tokio::spawn(timed(cl.clone()));
    let b = tokio::spawn(timed(cl.clone()));
    while c.ports().len() < 2 {
        tokio::time::sleep(ms(1)).await;
    }
    let on_node_1 = || c.ports().iter().filter(|p| **p == 1).count();
    assert_eq!(on_node_1(), 1);
    // Past the stall limit, every new request goes to node 2, at once.
    tokio::time::sleep(crate::nodes::progress::STALLED_AFTER + ms(10)).await;
    let t0 = Instant::now();
    for _ in 0..10 {
        let r = cl.send(Request::get("/")).await.unwrap();
        assert!(r.node().ends_with(":2"), "{}", r.node());
    }
    assert_eq!(Instant::now(), t0, "no request waited on node 1");
    assert_eq!(on_node_1(), 1, "nothing more was sent to node 1");
    // The attempt on node 1 is not cut: it runs to its attempt timeout (30 s) and the
    // liveness check after it, then fails over to node 2.
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let slow = if a.1 > b.1 { a } else { b };
    assert!(slow.1 >= Duration::from_secs(30), "{:?}", slow.1);
    assert_eq!(slow.0.ok(), Some(StatusCode::OK));
}
