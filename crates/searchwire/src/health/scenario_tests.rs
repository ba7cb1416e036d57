//! Health checking with injected time: the capability state machine driven through the
//! client (checks, probes, the 4 h re-probe, the runtime fallback, the periodic refresh and
//! its interval), auth kept apart from death, and background requests that look like user
//! requests. A scripted in-memory connector under tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::health::{check_node, CheckResult, ClusterStatus};
use crate::http::addr::NodeAddr;
use crate::nodes::capability::Capability;
use crate::nodes::pool::PoolNode;
use crate::testing::{client, cluster_health_body, ms, Scripted, Step, Warnings};
use crate::{Client, ClientBuilder, ErrorKind, Request};

const HEALTH: &str = "/_cluster/health";
const PROBE: &str = "/_cluster/health?local=true";
const H4: Duration = Duration::from_secs(4 * 3600);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn node(cl: &Client, port: u16) -> Arc<PoolNode> {
    cl.inner
        .pool
        .topology()
        .nodes
        .iter()
        .find(|n| n.addr.port() == port)
        .cloned()
        .unwrap()
}

fn cap(cl: &Client, port: u16) -> Capability {
    node(cl, port).capability().state
}

/// Lets spawned tasks (a background probe) run to completion: advances the paused clock in
/// 1 ms steps until `done`, at most `within`. Always yields at least once, so tasks spawned
/// just before get to run even when `done` already holds (otherwise an assertion that
/// "nothing else happens" could never fail).
async fn until(within: Duration, done: impl Fn() -> bool) {
    let end = Instant::now() + within;
    tokio::time::sleep(ms(1)).await;
    while !done() {
        assert!(
            Instant::now() < end,
            "condition not reached within {within:?}"
        );
        tokio::time::sleep(ms(1)).await;
    }
}

fn with_root(c: &Scripted, ports: impl IntoIterator<Item = u16>) {
    for p in ports {
        c.on_path(p, "/", Step::Root);
        c.on_path(p, HEALTH, Step::Health);
    }
}

/// Resurrection timers on with the default schedule and no jitter, and no retries, so each
/// user request is one attempt.
fn timers_on(b: ClientBuilder) -> ClientBuilder {
    b.resurrection_timers(true)
        .resurrection(crate::ResurrectionConfig {
            jitter_scale: 0.0,
            ..Default::default()
        })
        .max_retries(0)
}

/// Sends user requests until one reaches node 1 (scripted to fail), which marks it dead.
async fn mark_node_1_dead(c: &Scripted, cl: &Client) {
    while !c.ports().contains(&1) {
        let _ = cl.send(Request::get("/x")).await;
    }
}

fn jitter_off(b: ClientBuilder) -> ClientBuilder {
    b.health_check_jitter(0.0)
}

// ---- the state machine through checks ------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_pending_node_is_checked_with_get_root_and_probed_without_delaying_the_check() {
    let c = Scripted::default();
    with_root(&c, [1]);
    c.on_path(1, HEALTH, Step::After(secs(2), Box::new(Step::Health)));
    let cl = client(1, &c, jitter_off);
    let n = node(&cl, 1);
    let t0 = Instant::now();
    assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
    assert_eq!(Instant::now(), t0, "the check does not wait for the probe");
    assert_eq!(cap(&cl, 1), Capability::Pending);
    until(secs(3), || cap(&cl, 1) == Capability::Available).await;
    let stored_at = n.capability().health.as_ref().map(|h| h.1);
    assert_eq!(
        stored_at,
        Some(t0 + secs(2)),
        "stored when the probe answered"
    );
    assert_eq!(c.targets(1), vec!["/", PROBE]);
    let v = cl.cluster_health();
    assert_eq!(v.nodes[0].version.as_deref(), Some("2.19.0"));
    assert_eq!(v.nodes[0].distribution.as_deref(), Some("opensearch"));
    // Available: the next check uses cluster health only, and no wait_for_status ever.
    assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
    assert_eq!(c.targets(1), vec!["/", PROBE, PROBE]);
    assert!(c.sent().iter().all(|s| !s.target.contains("wait_for")));
}

#[tokio::test(start_paused = true)]
async fn a_denied_probe_makes_the_node_unavailable_and_it_is_reprobed_after_four_hours() {
    for status in [401, 403] {
        let c = Scripted::default();
        with_root(&c, [1]);
        c.on_path(1, HEALTH, Step::Status(status));
        let cl = client(1, &c, jitter_off);
        let n = node(&cl, 1);
        let t0 = Instant::now();
        assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
        until(ms(10), || cap(&cl, 1) == Capability::Unavailable).await;
        assert!(n.is_alive(), "{status}: a denied probe is never death");
        assert_eq!(
            n.health().auth_rejected,
            None,
            "GET / accepted the credentials"
        );
        // Within the 4 h: GET / only.
        tokio::time::sleep_until(t0 + H4 - secs(1)).await;
        assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
        until(ms(5), || true).await;
        assert_eq!(c.targets(1), vec!["/", PROBE, "/"]);
        assert_eq!(
            cl.cluster_health().nodes[0].reprobe_in,
            Some((t0 + H4) - Instant::now()),
            "re-probe due exactly 4 h after the denial"
        );
        // The permission was granted meanwhile: the re-probe after 4 h finds it.
        c.on_path(1, HEALTH, Step::Health);
        tokio::time::sleep_until(t0 + H4).await;
        assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
        until(ms(10), || cap(&cl, 1) == Capability::Available).await;
        assert_eq!(c.targets(1), vec!["/", PROBE, "/", "/", PROBE]);
    }
}

#[tokio::test(start_paused = true)]
async fn transient_probe_failures_stay_pending_and_probe_again_on_the_next_check() {
    for step in [
        Step::Status(503),
        Step::Status(500),
        Step::Connect,
        Step::Hang,
    ] {
        let c = Scripted::default();
        with_root(&c, [1]);
        c.push_path(1, HEALTH, step.clone());
        let cl = client(1, &c, |b| jitter_off(b).health_check_timeout(secs(5)));
        let n = node(&cl, 1);
        let t0 = Instant::now();
        check_node(&cl.inner, &n).await;
        if matches!(step, Step::Hang) {
            tokio::time::sleep_until(t0 + secs(5) - ms(1)).await;
            assert!(n.capability().probing, "probes have the health timeout");
        }
        until(secs(6), || !n.capability().probing).await;
        assert!(Instant::now() <= t0 + secs(5) + ms(1));
        assert_eq!(cap(&cl, 1), Capability::Pending, "{step:?}");
        assert_eq!(n.capability().unavailable_since, None, "{step:?}");
        check_node(&cl.inner, &n).await;
        until(secs(1), || cap(&cl, 1) == Capability::Available).await;
        assert_eq!(c.targets(1), vec!["/", PROBE, "/", PROBE], "{step:?}");
        assert!(
            n.is_alive(),
            "{step:?}: a failed probe never marks the node dead"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_available_node_answering_401_or_403_falls_back_to_get_root_and_returns_to_pending() {
    for status in [401, 403] {
        let c = Scripted::default();
        with_root(&c, [1]);
        let cl = client(1, &c, jitter_off);
        let n = node(&cl, 1);
        check_node(&cl.inner, &n).await;
        until(ms(10), || cap(&cl, 1) == Capability::Available).await;
        assert!(cl.cluster_health().latest.is_some());
        // The permission is revoked.
        c.on_path(1, HEALTH, Step::Status(status));
        assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
        assert_eq!(cap(&cl, 1), Capability::Pending);
        assert!(n.capability().health.is_none(), "stale health cleared");
        assert!(cl.cluster_health().latest.is_none());
        until(ms(5), || true).await;
        assert_eq!(
            c.targets(1),
            vec!["/", PROBE, PROBE, "/"],
            "{status}: fallback GET /, no probe in the same check"
        );
        // The next check probes again (and finds it still denied).
        check_node(&cl.inner, &n).await;
        until(ms(10), || cap(&cl, 1) == Capability::Unavailable).await;
        assert_eq!(c.targets(1), vec!["/", PROBE, PROBE, "/", "/", PROBE]);
        assert!(n.is_alive());
    }
}

#[tokio::test(start_paused = true)]
async fn reprobe_zero_means_the_default_and_disabled_never_reprobes() {
    let c = Scripted::default();
    let cl = client(1, &c, |b| b.cluster_health_reprobe_after(Duration::ZERO));
    assert_eq!(cl.inner.reprobe.after, Some(H4));
    assert_eq!(cl.inner.reprobe.jitter, 0.1);
    let cl = client(1, &c, |b| b.cluster_health_reprobe_after(secs(60)));
    assert_eq!(cl.inner.reprobe.after, Some(secs(60)));

    with_root(&c, [1]);
    c.on_path(1, HEALTH, Step::Status(403));
    let cl = client(1, &c, |b| b.no_cluster_health_reprobe());
    let n = node(&cl, 1);
    check_node(&cl.inner, &n).await;
    until(ms(10), || cap(&cl, 1) == Capability::Unavailable).await;
    tokio::time::sleep(H4 * 100).await;
    check_node(&cl.inner, &n).await;
    until(ms(5), || true).await;
    assert_eq!(c.targets(1), vec!["/", PROBE, "/"]);
    assert_eq!(cl.cluster_health().nodes[0].reprobe_in, None);

    for bad in [-0.1, 1.0, f64::NAN] {
        let e = Client::builder()
            .node("http://localhost:9200")
            .health_check_jitter(bad)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("health_check_jitter"), "{e}");
    }
}

// ---- auth is not death ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_dead_node_answering_its_health_check_with_401_is_alive_and_the_problem_is_reported_once()
{
    let warnings = Warnings::default();
    let _guard = warnings.install();
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let cl = client(2, &c, timers_on);
    mark_node_1_dead(&c, &cl).await;
    assert!(!cl.nodes()[0].alive);
    // Reachable again, but the credentials are now rejected.
    c.default_step(1, Step::Status(401));
    until(secs(10), || cl.nodes()[0].alive).await;
    let snap = &cl.nodes()[0];
    assert_eq!(
        snap.auth_problem.as_deref(),
        Some("credentials rejected (401)")
    );
    assert_eq!(snap.failures, 0);
    // User requests get an Auth error; the node stays alive, and the warning is not
    // repeated per answer.
    for _ in 0..6 {
        let r = cl.send(Request::get("/y")).await;
        if let Err(e) = r {
            assert_eq!(e.kind(), ErrorKind::Auth);
        }
    }
    assert!(cl.nodes()[0].alive);
    assert_eq!(warnings.count("rejected the credentials (401)"), 1);
    // Accepted again, then rejected again: a second state change, a second warning.
    c.default_step(1, Step::Status(200));
    while cl.nodes()[0].auth_problem.is_some() {
        cl.send(Request::get("/z")).await.unwrap();
    }
    c.default_step(1, Step::Status(401));
    while cl.nodes()[0].auth_problem.is_none() {
        let _ = cl.send(Request::get("/w")).await;
    }
    assert_eq!(warnings.count("rejected the credentials (401)"), 2);
}

#[tokio::test(start_paused = true)]
async fn the_unavailable_warning_is_logged_once_per_state_change_not_per_probe() {
    let warnings = Warnings::default();
    let _guard = warnings.install();
    let c = Scripted::default();
    with_root(&c, [1]);
    c.on_path(1, HEALTH, Step::Status(403));
    let cl = client(1, &c, |b| {
        jitter_off(b).cluster_health_reprobe_after(secs(60))
    });
    let n = node(&cl, 1);
    for _ in 0..4 {
        check_node(&cl.inner, &n).await;
        until(ms(10), || !n.capability().probing).await;
        tokio::time::sleep(secs(61)).await;
    }
    assert_eq!(c.targets(1).iter().filter(|t| *t == PROBE).count(), 4);
    assert_eq!(warnings.count("cluster:monitor/health"), 1);
}

#[tokio::test(start_paused = true)]
async fn connectivity_failures_of_a_health_check_keep_the_node_dead() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let cl = client(2, &c, |b| b.max_retries(0));
    let n = node(&cl, 1);
    for step in [Step::Connect, Step::Reset, Step::Status(503)] {
        c.default_step(1, step.clone());
        let r = check_node(&cl.inner, &n).await;
        assert!(
            matches!(r, CheckResult::Unreachable(_) | CheckResult::Unhealthy(_)),
            "{step:?}: {r:?}"
        );
    }
    c.default_step(1, Step::Status(403));
    assert_eq!(
        check_node(&cl.inner, &n).await,
        CheckResult::AuthRejected(403)
    );
}

// ---- cluster blocks and cluster-wide data --------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_cluster_block_403_on_a_write_is_neither_death_nor_an_auth_problem() {
    let c = Scripted::default();
    let block = r#"{"error":{"root_cause":[{"type":"cluster_block_exception","reason":"index [logs] blocked by: [FORBIDDEN/8/index write (api)];"}],"type":"cluster_block_exception","reason":"index [logs] blocked by: [FORBIDDEN/8/index write (api)];"},"status":403}"#;
    c.default_step(1, Step::Body(403, block.to_string()));
    let cl = client(1, &c, |b| b);
    let e = cl
        .send(Request::post("/logs/_doc").body("{}"))
        .await
        .unwrap_err();
    // The credentials were accepted: a status error, not an auth error.
    assert_eq!(e.kind(), ErrorKind::Status);
    assert_eq!(e.status().map(|s| s.as_u16()), Some(403));
    assert!(e.to_string().contains("cluster block"), "{e}");
    assert!(e.to_string().contains("not marked dead"), "{e}");
    let snap = &cl.nodes()[0];
    assert!(snap.alive);
    assert_eq!(
        snap.auth_problem, None,
        "a block is not a credentials problem"
    );
    // Health logic: a blocked cluster still serves GET /; a 403 block on cluster health
    // would only make the capability Unavailable, never the node dead.
    with_root(&c, [1]);
    c.on_path(1, HEALTH, Step::Body(403, block.to_string()));
    let n = node(&cl, 1);
    assert_eq!(check_node(&cl.inner, &n).await, CheckResult::Healthy);
    until(ms(10), || cap(&cl, 1) == Capability::Unavailable).await;
    assert!(n.is_alive());
}

#[tokio::test(start_paused = true)]
async fn red_status_and_initializing_shards_never_block_resurrection() {
    let c = Scripted::default();
    with_root(&c, [1, 2]);
    let cl = client(2, &c, timers_on);
    let n = node(&cl, 1);
    check_node(&cl.inner, &n).await;
    until(ms(10), || cap(&cl, 1) == Capability::Available).await;
    // It dies, and comes back into a red cluster with shards initializing.
    c.default_step(1, Step::Connect);
    c.on_path(1, "/", Step::Connect);
    c.on_path(1, HEALTH, Step::Connect);
    while n.is_alive() {
        let _ = cl.send(Request::get("/x")).await;
    }
    let red = cluster_health_body("red", 7).replace("\"timed_out\":false", "\"timed_out\":true");
    c.on_path(1, HEALTH, Step::Body(200, red));
    until(secs(30), || n.is_alive()).await;
    let h = cl.cluster_health();
    let latest = h.latest.unwrap();
    assert_eq!(latest.health.status, ClusterStatus::Red);
    assert_eq!(latest.health.initializing_shards, 7);
    assert!(latest.health.timed_out);
    assert_eq!(h.nodes[0].capability, Capability::Available);
}

#[tokio::test(start_paused = true)]
async fn cluster_health_reports_the_freshest_answer_its_age_and_every_nodes_capability() {
    let c = Scripted::default();
    with_root(&c, [1, 2, 3]);
    c.on_path(2, HEALTH, Step::Body(200, cluster_health_body("yellow", 0)));
    c.on_path(3, HEALTH, Step::Status(403));
    let cl = client(3, &c, jitter_off);
    assert!(cl.cluster_health().latest.is_none());
    check_node(&cl.inner, &node(&cl, 1)).await;
    tokio::time::sleep(secs(10)).await;
    check_node(&cl.inner, &node(&cl, 2)).await;
    check_node(&cl.inner, &node(&cl, 3)).await;
    tokio::time::sleep(secs(4)).await;
    let h = cl.cluster_health();
    let latest = h.latest.unwrap();
    assert!(latest.node.ends_with(":2"), "{}", latest.node);
    assert_eq!(latest.age, secs(4));
    assert_eq!(latest.health.status, ClusterStatus::Yellow);
    let caps: Vec<Capability> = h.nodes.iter().map(|n| n.capability).collect();
    assert_eq!(
        caps,
        [
            Capability::Available,
            Capability::Available,
            Capability::Unavailable
        ]
    );
    assert_eq!(h.nodes[0].health_age, Some(secs(14)));
    assert!(h
        .nodes
        .iter()
        .all(|n| n.version.as_deref() == Some("2.19.0")));
}

// ---- check_all -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn check_all_waits_for_the_probe_and_reports_every_node() {
    let c = Scripted::default();
    with_root(&c, [1, 2, 3, 4]);
    c.on_path(1, HEALTH, Step::After(secs(1), Box::new(Step::Health)));
    c.on_path(2, HEALTH, Step::Status(403));
    c.on_path(3, "/", Step::Status(401));
    c.on_path(4, "/", Step::Connect);
    let cl = client(4, &c, jitter_off);
    let t0 = Instant::now();
    let r = cl.check_all().await;
    assert_eq!(
        Instant::now() - t0,
        secs(1),
        "waited for the probe's answer"
    );
    assert_eq!(r.status(), ClusterStatus::Green);
    assert_eq!(r.cluster_name(), Some("c"));
    let n = &r.nodes;
    assert_eq!(n.len(), 4);
    assert_eq!(
        (n[0].alive, n[0].capability, n[0].version.as_deref()),
        (true, Capability::Available, Some("2.19.0"))
    );
    assert_eq!(
        (n[1].alive, n[1].capability),
        (true, Capability::Unavailable)
    );
    assert_eq!(
        (n[2].alive, n[2].auth_rejected, n[2].error.as_deref()),
        (true, Some(401), Some("credentials rejected (401)"))
    );
    assert!(!n[3].alive);
    assert!(
        n[3].error.as_deref().unwrap().contains("connect"),
        "{:?}",
        n[3].error
    );
    assert!(!cl.nodes()[3].alive, "an unreachable node is marked dead");
    assert_eq!(r.reachable(), 3);
    assert!(!r.all_reachable_rejected_credentials());
    // No node able to report cluster health: unknown.
    let c2 = Scripted::default();
    with_root(&c2, [1]);
    c2.on_path(1, HEALTH, Step::Status(403));
    assert_eq!(
        client(1, &c2, |b| b).check_all().await.status(),
        ClusterStatus::Unknown
    );
}

#[tokio::test(start_paused = true)]
async fn check_all_within_ends_on_time_and_reports_the_nodes_that_did_not_answer() {
    let c = Scripted::default();
    with_root(&c, [1, 2, 3]);
    c.on_path(1, HEALTH, Step::Health);
    c.on_path(2, "/", Step::Hang);
    c.on_path(3, HEALTH, Step::After(secs(60), Box::new(Step::Health)));
    let cl = client(3, &c, |b| b.health_check_timeout(secs(120)));
    let t0 = Instant::now();
    let r = cl.check_all_within(ms(300)).await;
    assert_eq!(Instant::now() - t0, ms(300), "ends at the limit");
    assert_eq!(r.nodes.len(), 3, "no node is dropped");
    assert!(!r.nodes[0].timed_out);
    assert_eq!(r.nodes[0].capability, Capability::Available);
    let hung = &r.nodes[1];
    assert!(hung.timed_out, "{hung:?}");
    assert_eq!(
        hung.error.as_deref(),
        Some("no answer within the overall limit of 300ms")
    );
    // Node 3 answered `GET /`; only its probe was cut: it keeps what `GET /` found.
    let probing = &r.nodes[2];
    assert!(!probing.timed_out && probing.alive, "{probing:?}");
    assert_eq!(probing.version.as_deref(), Some("2.19.0"));
    assert_eq!(probing.capability, Capability::Pending);
    assert_eq!(probing.error, None);
    assert_eq!((r.reachable(), r.timed_out()), (2, 1));
    // Cancelled checks mark nothing.
    assert!(cl.nodes().iter().all(|n| n.alive));
    // With a limit past the health check timeout, the hung node's own check ends first.
    let t0 = Instant::now();
    let r = cl.check_all_within(secs(600)).await;
    assert_eq!(
        Instant::now() - t0,
        secs(120),
        "the hung node's check timeout"
    );
    assert_eq!(r.timed_out(), 1);
    assert_eq!(
        r.nodes[1].error.as_deref(),
        Some("no answer within the health check timeout of 2m")
    );
}

#[tokio::test(start_paused = true)]
async fn check_all_of_fifty_hung_nodes_takes_one_health_check_timeout() {
    // Every node at once: 50 nodes that never answer take one 5 s timeout, not one per
    // batch of a few; each is reported as not answering in time.
    let c = Scripted::default();
    for port in 1..=50 {
        c.default_step(port, Step::Hang);
    }
    let cl = client(50, &c, |b| b);
    let t0 = Instant::now();
    let r = cl.check_all().await;
    assert_eq!(Instant::now() - t0, secs(5), "one health check timeout");
    assert_eq!(c.sent().len(), 50, "one GET / per node");
    assert_eq!(r.nodes.len(), 50);
    for n in &r.nodes {
        assert!(n.timed_out && !n.alive, "{n:?}");
        assert_eq!(
            n.error.as_deref(),
            Some("no answer within the health check timeout of 5s")
        );
    }
    assert_eq!((r.reachable(), r.timed_out()), (0, 50));
    // A refused connection is an answer of sorts: dead, not "no answer".
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let r = client(1, &c, |b| b).check_all().await;
    assert!(
        !r.nodes[0].timed_out && !r.nodes[0].alive,
        "{:?}",
        r.nodes[0]
    );
}

// ---- the periodic refresh ------------------------------------------------------------------

/// (time since `t0` in whole seconds, port) of every cluster-health request.
fn probe_times(c: &Scripted, t0: Instant) -> Vec<(u64, u16)> {
    c.sent()
        .into_iter()
        .filter(|s| s.target == PROBE)
        .map(|s| ((s.at - t0).as_secs(), s.port))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_refresh_interval_follows_the_live_count_and_is_recomputed_after_each_cycle() {
    let c = Scripted::default();
    with_root(&c, [1, 2, 3]);
    let t0 = Instant::now();
    let cl = client(3, &c, |b| jitter_off(b).health_refresh(true));
    // 3 live × 8 / 0.8 = 30 s. The first cycle gives the never-checked nodes GET / and the
    // probe; the next ones refresh.
    tokio::time::sleep(secs(95)).await;
    let at = |port| -> Vec<u64> {
        probe_times(&c, t0)
            .into_iter()
            .filter(|(_, p)| *p == port)
            .map(|(t, _)| t)
            .collect()
    };
    assert_eq!(at(1), vec![30, 60, 90]);
    assert_eq!(c.targets(1)[0], "/");
    assert_eq!(c.targets(1).iter().filter(|t| *t == "/").count(), 1);
    // A node dies: the interval computed after the next cycle (at 120 s) is 2 × 10 = 20 s.
    cl.inner
        .pool
        .mark_failed(&node(&cl, 3), Instant::now(), "test");
    tokio::time::sleep(secs(50)).await;
    assert_eq!(at(1), vec![30, 60, 90, 120, 140]);
    assert_eq!(at(3), vec![30, 60, 90], "dead nodes are not refreshed");
    // Down to one live node: no refresh at all.
    cl.inner
        .pool
        .mark_failed(&node(&cl, 2), Instant::now(), "test");
    tokio::time::sleep(secs(3600)).await;
    assert_eq!(at(1), vec![30, 60, 90, 120, 140]);
}

#[tokio::test(start_paused = true)]
async fn the_refresh_stores_200_resets_on_401_403_and_skips_5xx_and_network_errors() {
    let c = Scripted::default();
    with_root(&c, [1, 2]);
    let cl = client(2, &c, |b| jitter_off(b).health_refresh(true));
    // 2 live: every 20 s. After the first cycle both are Available.
    tokio::time::sleep(secs(21)).await;
    assert_eq!(cap(&cl, 1), Capability::Available);
    let age = |cl: &Client| cl.cluster_health().nodes[0].health_age;
    assert_eq!(age(&cl), Some(secs(1)));
    tokio::time::sleep(secs(20)).await;
    assert_eq!(age(&cl), Some(secs(1)), "200 stores the new answer");
    for step in [Step::Status(503), Step::Connect, Step::Hang] {
        c.push_path(1, HEALTH, step.clone());
        tokio::time::sleep(secs(20)).await;
        assert_eq!(cap(&cl, 1), Capability::Available, "{step:?} is skipped");
        assert!(node(&cl, 1).is_alive(), "{step:?}: the refresh never kills");
        assert!(
            age(&cl) > Some(secs(20)),
            "{step:?}: data kept, not refreshed"
        );
        // Back in step with the 20 s cycle after a hanging request (5 s timeout).
        if matches!(step, Step::Hang) {
            tokio::time::sleep(secs(20)).await;
        }
    }
    c.on_path(1, HEALTH, Step::Status(403));
    tokio::time::sleep(secs(20)).await;
    assert_eq!(cap(&cl, 1), Capability::Pending);
    assert_eq!(age(&cl), None, "stale health cleared");
    // Next cycle: Pending → GET / and the probe → Unavailable for 4 h.
    tokio::time::sleep(secs(20)).await;
    assert_eq!(cap(&cl, 1), Capability::Unavailable);
    assert!(node(&cl, 1).is_alive());
}

#[tokio::test(start_paused = true)]
async fn the_background_cycle_reprobes_an_unavailable_node_four_hours_later() {
    let c = Scripted::default();
    with_root(&c, [1, 2, 3]);
    c.on_path(2, HEALTH, Step::Status(403));
    let t0 = Instant::now();
    let cl = client(3, &c, |b| jitter_off(b).health_refresh(true));
    tokio::time::sleep(H4 + secs(100)).await;
    let node2: Vec<u64> = probe_times(&c, t0)
        .into_iter()
        .filter(|(_, p)| *p == 2)
        .map(|(t, _)| t)
        .collect();
    // Probed at the first cycle (30 s), then exactly 4 h later (a cycle boundary).
    assert_eq!(node2, vec![30, 30 + H4.as_secs()]);
    assert_eq!(cap(&cl, 2), Capability::Unavailable);
    assert_eq!(cap(&cl, 1), Capability::Available);
}

#[tokio::test(start_paused = true)]
async fn the_reprobe_time_is_jittered_by_ten_percent() {
    let c = Scripted::default();
    with_root(&c, [1]);
    c.on_path(1, HEALTH, Step::Status(403));
    let mut seen = Vec::new();
    for seed in 0..20 {
        let cl = client(1, &c, |b| b.seed(seed));
        let n = node(&cl, 1);
        check_node(&cl.inner, &n).await;
        until(ms(10), || cap(&cl, 1) == Capability::Unavailable).await;
        let d = cl.cluster_health().nodes[0].reprobe_in.unwrap();
        assert!(d >= H4.mul_f64(0.9) && d <= H4.mul_f64(1.1), "{d:?}");
        seen.push(d);
    }
    seen.dedup();
    assert!(seen.len() > 10, "jitter varies with the seed");
}

#[tokio::test(start_paused = true)]
async fn the_refresh_checks_at_most_eight_nodes_at_a_time() {
    let c = Scripted::default();
    with_root(&c, 1..=20);
    for p in 1..=20 {
        c.on_path(p, HEALTH, Step::After(secs(1), Box::new(Step::Health)));
    }
    let cl = client(20, &c, |b| b);
    let t0 = Instant::now();
    crate::health::refresh::cycle(&cl.inner).await;
    assert_eq!(
        Instant::now() - t0,
        secs(3),
        "20 nodes, 8 at a time, 1 s each"
    );
    let mut per_second = [0usize; 3];
    for (t, _) in probe_times(&c, t0) {
        per_second[t as usize] += 1;
    }
    assert_eq!(per_second, [8, 8, 4]);
}

#[tokio::test(start_paused = true)]
async fn background_tasks_end_with_the_client() {
    let c = Scripted::default();
    with_root(&c, [1, 2]);
    let cl = client(2, &c, |b| b.health_refresh(true));
    let weak = Arc::downgrade(&cl.inner);
    tokio::time::sleep(secs(25)).await;
    let sent = c.sent().len();
    drop(cl);
    tokio::time::sleep(secs(3600)).await;
    assert!(weak.upgrade().is_none());
    assert_eq!(
        c.sent().len(),
        sent,
        "no background request after the client is gone"
    );
}

// ---- background requests look like user requests -------------------------------------------

#[tokio::test(start_paused = true)]
async fn background_requests_carry_headers_credentials_and_the_request_modifier() {
    let c = Scripted::default();
    with_root(&c, [1]);
    c.on_path(
        1,
        "/_nodes/http,os",
        Step::Body(
            200,
            r#"{"_nodes":{"total":1,"successful":1,"failed":0},"nodes":{"a":{"name":"a","http":{"publish_address":"node:1"}}}}"#.into(),
        ),
    );
    let b = Client::builder()
        .resurrection_timers(false)
        .health_refresh(false)
        .health_check_request_modifier(|req| {
            let sig = format!("signed {}", req.uri().path());
            if let Ok(v) = HeaderValue::from_str(&sig) {
                req.headers_mut().insert("x-signature", v);
            }
        });
    let mut headers = HeaderMap::new();
    headers.insert("authorization", HeaderValue::from_static("Basic YTpi"));
    headers.insert("x-tenant", HeaderValue::from_static("blue"));
    let addrs = vec![NodeAddr::from_parts("http", "node", 1, "")];
    let cl = Client::with_connector(b, addrs, headers, Arc::new(c.clone()));
    let n = node(&cl, 1);
    check_node(&cl.inner, &n).await;
    until(ms(10), || cap(&cl, 1) == Capability::Available).await;
    cl.discover_now().await.unwrap();
    cl.send(Request::get("/user")).await.unwrap();
    let sent = c.sent();
    let targets: Vec<&str> = sent.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(targets, vec!["/", PROBE, "/_nodes/http,os", "/user"]);
    for s in &sent {
        assert_eq!(s.headers["authorization"], "Basic YTpi", "{}", s.target);
        assert_eq!(s.headers["x-tenant"], "blue", "{}", s.target);
    }
    for s in &sent[..3] {
        let path = s.target.split('?').next().unwrap();
        assert_eq!(s.headers["x-signature"], format!("signed {path}").as_str());
    }
    assert!(
        sent[3].headers.get("x-signature").is_none(),
        "the modifier is for background requests"
    );
    assert!(!format!(
        "{:?}",
        Client::builder().health_check_request_modifier(|_| {})
    )
    .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_panicking_request_modifier_fails_the_check_but_never_kills_the_resurrection_timer() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let cl = client(2, &c, |b| {
        timers_on(b)
            // The first background request panics inside the caller's modifier.
            .health_check_request_modifier(move |_| {
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("modifier bug");
                }
            })
    });
    mark_node_1_dead(&c, &cl).await;
    assert!(!cl.nodes()[0].alive);
    with_root(&c, [1]);
    // First check: the modifier panics, no request is sent, the node stays dead and is
    // rescheduled. Second check: it answers and comes back.
    until(secs(30), || cl.nodes()[0].alive).await;
    assert!(
        calls.load(Ordering::SeqCst) >= 2,
        "the timer survived and checked again"
    );
    let snap = &cl.nodes()[0];
    assert_eq!(snap.failures, 0);
}

#[tokio::test(start_paused = true)]
async fn check_all_on_a_dead_node_with_a_timer_leaves_its_schedule_alone() {
    let c = Scripted::default();
    c.default_step(1, Step::Connect);
    let cl = client(2, &c, timers_on);
    mark_node_1_dead(&c, &cl).await;
    let before = cl.nodes()[0].clone();
    assert!(!before.alive);
    let report = cl.check_all().await;
    assert!(!report.nodes[0].alive);
    let after = cl.nodes()[0].clone();
    assert_eq!(
        after.failures, before.failures,
        "an on-demand check is not a failure more"
    );
    assert_eq!(
        after.next_check_in, before.next_check_in,
        "the timer's schedule is unchanged"
    );
}
