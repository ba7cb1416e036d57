//! Latency-aware selection through a client, on the scripted connector under paused time:
//! which node each request goes to as nodes turn slow and recover.

use std::time::Duration;

use tokio::time::Instant;

use crate::testing::{client, ms, Scripted, Step};
use crate::{Request, Selection};

fn slow(d: Duration) -> Step {
    Step::After(d, Box::new(Step::Status(200)))
}

/// Requests per port (1..=3) among those sent from `since` on.
fn shares(c: &Scripted, since: Instant) -> [usize; 3] {
    let mut out = [0; 3];
    for s in c.sent() {
        if s.at >= since {
            out[usize::from(s.port) - 1] += 1;
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_node_fifty_ms_slower_gets_almost_nothing_and_round_robin_gives_it_a_third() {
    for (selection, slow_at_most, slow_at_least) in [
        (Selection::LatencyAware, 6, 0),
        (Selection::RoundRobin, 100, 100),
    ] {
        let c = Scripted::default();
        c.default_step(1, slow(ms(51)));
        c.default_step(2, slow(ms(1)));
        c.default_step(3, slow(ms(1)));
        let cl = client(3, &c, |b| b.selection(selection));
        let t0 = Instant::now();
        for _ in 0..300 {
            cl.send(Request::get("/"))
                .await
                .expect("every node answers");
        }
        let got = shares(&c, t0);
        assert!(
            (slow_at_least..=slow_at_most).contains(&got[0]),
            "{selection}: {got:?}"
        );
        assert_eq!(got.iter().sum::<usize>(), 300);
    }
}

#[tokio::test(start_paused = true)]
async fn a_recovered_node_is_back_to_its_share_within_one_decay() {
    let c = Scripted::default();
    c.default_step(1, slow(ms(51)));
    c.default_step(2, slow(ms(1)));
    c.default_step(3, slow(ms(1)));
    let cl = client(3, &c, |b| b.selection(Selection::LatencyAware));
    // 100 requests a second for 5 s, node 1 slow: it is avoided.
    let paced = |until: Instant| {
        let cl = cl.clone();
        async move {
            while Instant::now() < until {
                cl.send(Request::get("/"))
                    .await
                    .expect("every node answers");
                tokio::time::sleep(ms(9)).await;
            }
        }
    };
    let t0 = Instant::now();
    paced(t0 + Duration::from_secs(5)).await;
    let before = shares(&c, t0);
    assert!(before[0] <= 6, "{before:?}");
    // Node 1 recovers. Within one decay (10 s) plus a second its estimate went stale and
    // restarted at the median: from then on it has its share again.
    c.default_step(1, slow(ms(1)));
    let recovered = Instant::now();
    paced(recovered + Duration::from_secs(11)).await;
    let settled = Instant::now();
    paced(settled + Duration::from_secs(4)).await;
    let after = shares(&c, settled);
    let total: usize = after.iter().sum();
    assert!(
        after[0] * 3 >= total * 8 / 10 && after[0] * 3 <= total * 12 / 10,
        "node 1 within ±20 % of a fair third: {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_that_fails_fast_does_not_attract_traffic() {
    // Node 1 answers 503 at once; the others take 5 ms. Without the failure penalty node 1
    // would look fastest; with it, after its first answers it gets (almost) nothing, and the
    // requests it did get were retried elsewhere.
    let c = Scripted::default();
    c.default_step(1, Step::Status(503));
    c.default_step(2, slow(ms(5)));
    c.default_step(3, slow(ms(5)));
    let cl = client(3, &c, |b| {
        b.selection(Selection::LatencyAware)
            .node_gateway_failures_to_eject(0)
    });
    let t0 = Instant::now();
    for _ in 0..200 {
        cl.send(Request::get("/"))
            .await
            .expect("retried on a healthy node");
    }
    let got = shares(&c, t0);
    assert!(got[0] <= 6, "{got:?}");
}
