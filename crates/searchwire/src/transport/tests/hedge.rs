//! Hedged reads through a client, with the scripted connector and tokio's paused clock:
//! when the hedge goes, to which node, which answer wins, that the loser's exchange is
//! dropped, and when no hedge is sent (budget, breaker, writes).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::testing::{client, ms, Recorder, Scripted, Step};
use crate::{
    BreakerConfig, HedgeDelay, HedgeResult, Hedging, OutcomeKind, Request, Response, RetryBudget,
};

fn after(d: u64, status: u16) -> Step {
    Step::After(ms(d), Box::new(Step::Status(status)))
}

fn fixed(d: u64) -> Hedging {
    Hedging::after(HedgeDelay::After(ms(d)))
}

/// Fast reads that never reach the hedge delay: each deposits 5 % of a hedge, so twenty
/// pay for one.
async fn warm(cl: &crate::Client, n: usize) {
    for _ in 0..n {
        cl.send(Request::get("/warm")).await.unwrap();
    }
}

fn outcomes(r: &Response) -> Vec<(u32, OutcomeKind)> {
    let mut v: Vec<_> = r.attempts().iter().map(|a| (a.number, a.outcome)).collect();
    v.sort_by_key(|a| a.0);
    v
}

#[tokio::test(start_paused = true)]
async fn a_read_without_an_answer_after_the_delay_is_hedged_to_another_node() {
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let rec = Arc::new(Recorder::default());
    let cl = client(2, &c, |b| b.hedging(fixed(20)).observer(rec.clone()));
    warm(&cl, 20).await;
    let before = c.log().len();
    // The next send (the first attempt, wherever it goes) takes 100 ms.
    c.push_any(after(100, 200));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/logs/_search")).await.unwrap();
    let log = c.log()[before..].to_vec();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_ne!(log[0].0, log[1].0, "the hedge goes to the other node");
    assert_eq!(log[0].3 - t0, Duration::ZERO);
    assert_eq!(
        log[1].3 - t0,
        ms(20),
        "the hedge goes after exactly the delay"
    );
    assert_eq!(t0.elapsed(), ms(25), "the hedge's answer (20 + 5 ms) wins");
    assert_eq!(
        outcomes(&r),
        vec![(1, OutcomeKind::Cancelled), (2, OutcomeKind::Success)]
    );
    assert!(r.node().ends_with(&format!(":{}", log[1].0)));
    // The first attempt's exchange was dropped when the hedge answered.
    assert_eq!(c.dropped(), vec![(log[0].0, t0 + ms(25))]);
    assert_eq!(
        *rec.hedges.lock().unwrap(),
        vec![HedgeResult::Sent, HedgeResult::Won]
    );
}

#[tokio::test(start_paused = true)]
async fn the_hedge_is_cancelled_when_the_first_attempt_answers_first() {
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let rec = Arc::new(Recorder::default());
    let cl = client(2, &c, |b| b.hedging(fixed(20)).observer(rec.clone()));
    warm(&cl, 20).await;
    let before = c.log().len();
    // First attempt: 30 ms; the hedge (sent at 20 ms) would take 50 ms.
    c.push_any(after(30, 200));
    c.push_any(after(50, 200));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/logs/_doc/1")).await.unwrap();
    let log = c.log()[before..].to_vec();
    assert_eq!(t0.elapsed(), ms(30));
    assert_eq!(
        outcomes(&r),
        vec![(1, OutcomeKind::Success), (2, OutcomeKind::Cancelled)]
    );
    let lost = r.attempts().iter().find(|a| a.number == 2).unwrap();
    assert_eq!(lost.elapsed, ms(10), "cancelled 10 ms after it was sent");
    assert!(lost
        .detail
        .as_deref()
        .unwrap()
        .contains("attempt 1 answered first"));
    assert_eq!(c.dropped(), vec![(log[1].0, t0 + ms(30))]);
    assert_eq!(
        *rec.hedges.lock().unwrap(),
        vec![HedgeResult::Sent, HedgeResult::Lost]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_hedge_leaves_the_first_attempt_running() {
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let cl = client(2, &c, |b| b.hedging(fixed(20)));
    warm(&cl, 20).await;
    c.push_any(after(100, 200));
    c.push_any(Step::Status(503));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/logs/_search")).await.unwrap();
    assert_eq!(t0.elapsed(), ms(100), "the first attempt's answer");
    assert_eq!(
        outcomes(&r),
        vec![(1, OutcomeKind::Success), (2, OutcomeKind::Gateway)]
    );
    assert!(c.dropped().is_empty());
}

#[tokio::test(start_paused = true)]
async fn two_failures_continue_in_the_retry_loop() {
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let cl = client(2, &c, |b| {
        b.hedging(fixed(20)).node_gateway_failures_to_eject(0)
    });
    warm(&cl, 20).await;
    c.push_any(after(50, 503));
    c.push_any(Step::Status(503));
    let t0 = Instant::now();
    let r = cl.send(Request::get("/logs/_search")).await.unwrap();
    // The hedge fails at 20 ms, the first attempt at 50 ms; after the constant 100 ms
    // backoff, attempt 3 answers in 5 ms.
    assert_eq!(t0.elapsed(), ms(155));
    assert_eq!(
        outcomes(&r),
        vec![
            (1, OutcomeKind::Gateway),
            (2, OutcomeKind::Gateway),
            (3, OutcomeKind::Success)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_percentile_delay_is_read_from_recent_attempts() {
    let c = Scripted::default();
    c.default_step(1, after(8, 200));
    c.default_step(2, after(8, 200));
    let cl = client(2, &c, |b| b.hedging(Hedging::default()));
    // Twenty attempts of 8 ms: the p95 is 8 ms.
    warm(&cl, 20).await;
    let before = c.log().len();
    c.push_any(after(100, 200));
    let t0 = Instant::now();
    cl.send(Request::get("/logs/_search")).await.unwrap();
    let log = c.log()[before..].to_vec();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1].3 - t0, ms(8), "hedged after the observed p95");
}

#[tokio::test(start_paused = true)]
async fn hedges_stop_when_the_hedge_budget_is_spent() {
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let rec = Arc::new(Recorder::default());
    let cl = client(2, &c, |b| b.hedging(fixed(20)).observer(rec.clone()));
    // Eighteen requests deposit 0.9 of a hedge; each read deposits its own 0.05 before
    // its hedge is decided: the first slow read has 0.95 (no hedge), the second 1.0.
    warm(&cl, 18).await;
    let before = c.log().len();
    for _ in 0..3 {
        c.push_any(after(100, 200));
        cl.send(Request::get("/logs/_search")).await.unwrap();
    }
    assert_eq!(c.log().len() - before, 4, "one hedge for 21 requests");
    assert_eq!(
        *rec.hedges.lock().unwrap(),
        vec![
            HedgeResult::DeniedBudget,
            HedgeResult::Sent,
            HedgeResult::Won,
            HedgeResult::DeniedBudget
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedge_takes_a_retry_from_the_retry_budget() {
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let rec = Arc::new(Recorder::default());
    let empty = RetryBudget {
        ratio: 0.0,
        min_per_sec: 0,
        window: Duration::from_secs(10),
    };
    let cl = client(2, &c, |b| {
        b.hedging(Hedging {
            max_extra: 1.0,
            ..fixed(20)
        })
        .retry_budget(empty)
        .observer(rec.clone())
    });
    c.push_any(after(100, 200));
    cl.send(Request::get("/logs/_search")).await.unwrap();
    assert_eq!(c.log().len(), 1);
    assert_eq!(*rec.hedges.lock().unwrap(), vec![HedgeResult::DeniedBudget]);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_while_the_breaker_is_not_closed() {
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    c.default_step(2, Step::Status(503));
    let rec = Arc::new(Recorder::default());
    let cl = client(2, &c, |b| {
        b.hedging(Hedging {
            max_extra: 1.0,
            ..fixed(20)
        })
        .circuit_breaker(BreakerConfig {
            min_requests: 3,
            probes: 1,
            ..BreakerConfig::default()
        })
        .node_gateway_failures_to_eject(0)
        .observer(rec.clone())
    });
    for _ in 0..3 {
        let _ = cl.send(Request::get("/").max_retries(0)).await;
    }
    assert_ne!(cl.breaker_state(), crate::BreakerState::Closed);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(cl.breaker_state(), crate::BreakerState::HalfOpen);
    let before = c.log().len();
    // The half-open breaker's probe: slow, and not hedged.
    c.push_any(after(100, 200));
    cl.send(Request::get("/logs/_search")).await.unwrap();
    assert_eq!(c.log().len() - before, 1);
    assert_eq!(
        *rec.hedges.lock().unwrap(),
        vec![HedgeResult::DeniedBreaker]
    );
}

#[tokio::test(start_paused = true)]
async fn writes_scrolls_and_opted_out_reads_are_never_hedged() {
    let c = Scripted::default();
    c.default_step(1, after(100, 200));
    c.default_step(2, after(100, 200));
    let cl = client(2, &c, |b| {
        b.hedging(Hedging {
            max_extra: 1.0,
            ..fixed(20)
        })
    });
    for r in [
        Request::post("/_bulk"),
        Request::put("/logs/_doc/1"),
        Request::post("/logs/_search").query("scroll", "1m"),
        Request::post("/logs/_pit"),
        Request::get("/logs/_search").no_hedge(),
    ] {
        let before = c.log().len();
        cl.send(r).await.unwrap();
        assert_eq!(c.log().len() - before, 1);
    }
    // A request may ask for a hedge on a client without hedging.
    let c = Scripted::default();
    c.default_step(1, after(5, 200));
    c.default_step(2, after(5, 200));
    let cl = client(2, &c, |b| b);
    for _ in 0..20 {
        cl.send(Request::get("/warm").hedge(HedgeDelay::After(ms(20))))
            .await
            .unwrap();
    }
    let before = c.log().len();
    c.push_any(after(100, 200));
    cl.send(Request::get("/x").hedge(HedgeDelay::After(ms(20))))
        .await
        .unwrap();
    assert_eq!(c.log().len() - before, 2);
}
