//! Resurrection timers and the cluster breaker, under tokio's paused clock with a scripted
//! connector.

use std::time::Duration;

use tokio::time::Instant;

use crate::testing::{client, ms, Scripted, Step};
use crate::{BreakerConfig, BreakerState, Request};

#[tokio::test(start_paused = true)]
async fn dead_nodes_are_not_checked_while_the_breaker_is_open() {
    let c = Scripted::default();
    for port in [1, 2] {
        c.default_step(port, Step::Status(503));
    }
    let cool_down = Duration::from_secs(10);
    let cl = client(2, &c, |b| {
        b.resurrection_timers(true)
            .resurrection(crate::ResurrectionConfig {
                jitter_scale: 0.0,
                ..Default::default()
            })
            .max_retries(0)
            .node_gateway_failures_to_eject(1)
            .circuit_breaker(BreakerConfig {
                min_requests: 2,
                cool_down,
                ..Default::default()
            })
    });
    // Two 503s: both nodes ejected (every node dead: checks every 500 ms) and the breaker
    // open for 10 s.
    for _ in 0..2 {
        let _ = cl.send(Request::get("/x")).await;
    }
    let opened = Instant::now();
    assert_eq!(cl.breaker_state(), BreakerState::Open);
    let sent = c.log().len();
    assert_eq!(sent, 2);
    // The whole cool-down: without the breaker's gate, about 20 checks per node.
    tokio::time::sleep(cool_down - ms(1)).await;
    assert_eq!(c.log().len(), sent, "no check while the breaker is open");
    // When it ends, both nodes are checked at once.
    tokio::time::sleep(ms(2)).await;
    let checks: Vec<_> = c.log().into_iter().skip(sent).collect();
    assert_eq!(checks.len(), 2, "{checks:?}");
    for (_, method, target, at) in &checks {
        assert_eq!((method.as_str(), target.as_str()), ("GET", "/"));
        assert_eq!(*at, opened + cool_down);
    }
}
