//! The model's mechanisms under paused time: queueing at capacity, the queue limit, pauses.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Latency, Load, LoadState, Pauses};
use crate::behavior::Behavior;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Starts `n` requests at once on `state`; returns when each finished (from `t0`) and its
/// status, in start order.
async fn burst(state: &Arc<LoadState>, n: usize) -> Vec<(Duration, u16)> {
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let state = Arc::clone(state);
            tokio::spawn(async move {
                let (b, _slot) = state.enter(Behavior::status(200), &Notify::new()).await;
                let status = match b {
                    Behavior::Respond { status, .. } => status,
                    _ => 0,
                };
                (Instant::now() - t0, status)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap_or((Duration::MAX, 0)));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn past_capacity_requests_queue_and_latency_builds_in_waves() {
    let load = Load::new().base(ms(10)).capacity(2);
    let state = Arc::new(LoadState::new(load, Instant::now()));
    let done = burst(&state, 5).await;
    let times: Vec<Duration> = done.iter().map(|(t, _)| *t).collect();
    // Two at a time, FIFO: 10, 10, 20, 20, 30 ms.
    assert_eq!(times, vec![ms(10), ms(10), ms(20), ms(20), ms(30)]);
    assert!(done.iter().all(|(_, s)| *s == 200));
    assert_eq!((state.serving(), state.waiting()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_turns_requests_away_with_429_at_once() {
    let load = Load::new().base(ms(10)).capacity(1).queue_limit(2);
    let state = Arc::new(LoadState::new(load, Instant::now()));
    let done = burst(&state, 5).await;
    // One served, two queued, two rejected on arrival.
    assert_eq!(
        done,
        vec![
            (ms(10), 200),
            (ms(20), 200),
            (ms(30), 200),
            (Duration::ZERO, 429),
            (Duration::ZERO, 429),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn without_capacity_everything_runs_at_once() {
    let load = Load::new().base(ms(5)).latency(Latency::Fixed(ms(5)));
    let state = Arc::new(LoadState::new(load, Instant::now()));
    let done = burst(&state, 50).await;
    assert!(done.iter().all(|d| *d == (ms(10), 200)));
}

#[tokio::test(start_paused = true)]
async fn a_pause_holds_every_request_on_the_node_until_it_ends() {
    let t0 = Instant::now();
    let load = Load::new()
        .base(ms(1))
        .pauses(Pauses::new(Duration::from_secs(3), ms(300)));
    let state = Arc::new(LoadState::new(load, t0));
    tokio::time::sleep_until(t0 + ms(3_050)).await;
    let done = burst(&state, 3).await;
    // Arrived 50 ms into the pause: done 250 ms + 1 ms later.
    assert!(done.iter().all(|d| *d == (ms(251), 200)), "{done:?}");
    let done = burst(&state, 1).await;
    assert_eq!(done, vec![(ms(1), 200)], "after the pause, served at once");
}

#[tokio::test(start_paused = true)]
async fn the_seed_makes_a_runs_latencies_repeat() {
    let load = Load::new()
        .latency(Latency::LogNormal {
            median: ms(5),
            sigma: 0.8,
        })
        .seed(11);
    let a = Arc::new(LoadState::new(load.clone(), Instant::now()));
    let b = Arc::new(LoadState::new(load, Instant::now()));
    let mut ta = Vec::new();
    let mut tb = Vec::new();
    for _ in 0..20 {
        ta.push(burst(&a, 1).await[0]);
        tb.push(burst(&b, 1).await[0]);
    }
    assert_eq!(ta, tb);
    assert!(ta.iter().any(|(t, _)| *t != ta[0].0), "draws vary");
}
