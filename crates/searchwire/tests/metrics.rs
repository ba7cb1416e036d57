//! The built-in metrics, scraped in Prometheus text format after a scripted scenario
//! against the fake cluster (the recorder is `metrics-exporter-prometheus`'s).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "metrics")]

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use searchwire::metrics::MetricsObserver;
use searchwire::{
    Backoff, BreakerConfig, Client, ErrorKind, HealthCheckEvent, Observer, Request, RetryBudget,
};
use searchwire_fake::{Behavior, FakeCluster, Match};

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test]
async fn counters_after_a_scripted_scenario() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();

    let cluster = FakeCluster::start(1).await.unwrap();
    let builder = || {
        Client::builder()
            .nodes(cluster.urls())
            .backoff(Backoff::constant(Duration::from_millis(1)))
            .resurrection_timers(false)
            .read_environment(false)
    };
    let client = builder().build().unwrap();
    // 1. A 503 then a success: 2 attempts, 1 retry of class gateway, 1 request ok.
    let node = cluster.node(0);
    node.once(Match::Any, Behavior::status(503));
    client.send(Request::get("/logs/_doc/1")).await.unwrap();
    // 2. A 404: final, 1 attempt.
    node.once(Match::Any, Behavior::status(404));
    let e = client.send(Request::get("/missing")).await.unwrap_err();
    assert_eq!(e.status().map(|s| s.as_u16()), Some(404));

    // 3. A budget denial: a client with an empty budget.
    let broke = builder()
        .retry_budget(RetryBudget {
            ratio: 0.0,
            min_per_sec: 0,
            window: Duration::from_secs(10),
        })
        .build()
        .unwrap();
    node.once(Match::Any, Behavior::status(502));
    let e = broke
        .send(Request::post("/logs/_search"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("retry budget"), "{e}");

    // 4. A breaker that opens after 2 failed attempts, then refuses a request.
    let fragile = builder()
        .max_retries(0)
        .circuit_breaker(BreakerConfig {
            min_requests: 2,
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    node.once(Match::Any, Behavior::status(504));
    node.once(Match::Any, Behavior::status(504));
    for _ in 0..2 {
        let _ = fragile.send(Request::get("/")).await;
    }
    let e = fragile.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CircuitOpen);

    // 5. The health-check hook, as the health checker calls it.
    MetricsObserver::new().health_check(&HealthCheckEvent::new(
        "http://127.0.0.1:1",
        "resurrection",
        "healthy",
        Duration::from_millis(3),
    ));

    let text = handle.render();
    let v = |s: &str| value(&text, s);
    assert_eq!(
        v(r#"searchwire_requests_total{method="GET",status_class="2xx",result="ok"}"#),
        1.0
    );
    assert_eq!(
        v(r#"searchwire_requests_total{method="GET",status_class="5xx",result="status"}"#),
        2.0
    );
    assert_eq!(
        v(r#"searchwire_requests_total{method="GET",status_class="4xx",result="status"}"#),
        1.0
    );
    assert_eq!(
        v(r#"searchwire_requests_total{method="POST",status_class="5xx",result="status"}"#),
        1.0
    );
    assert_eq!(
        v(r#"searchwire_requests_total{method="GET",status_class="none",result="circuit_open"}"#),
        1.0
    );
    assert_eq!(v(r#"searchwire_attempts_total{outcome="gateway"}"#), 4.0);
    assert_eq!(v(r#"searchwire_attempts_total{outcome="ok"}"#), 1.0);
    assert_eq!(
        v(r#"searchwire_attempts_total{outcome="client_error"}"#),
        1.0
    );
    assert_eq!(v(r#"searchwire_retries_total{class="gateway"}"#), 1.0);
    assert_eq!(v("searchwire_retry_budget_denials_total"), 1.0);
    assert_eq!(
        v(r#"searchwire_breaker_rejections_total{scope="cluster"}"#),
        1.0
    );
    assert_eq!(
        v(r#"searchwire_breaker_transitions_total{scope="cluster",to="open"}"#),
        1.0
    );
    assert_eq!(
        v(r#"searchwire_breaker_state{scope="cluster",state="open"}"#),
        1.0
    );
    assert_eq!(
        v(r#"searchwire_health_checks_total{kind="resurrection",result="healthy"}"#),
        1.0
    );
    assert!(
        text.contains("searchwire_request_duration_seconds"),
        "{text}"
    );
    // OpenTelemetry's histogram, spelled the Prometheus way (dots become underscores).
    assert!(text.contains("db_client_operation_duration"), "{text}");
    // Hedging and the adaptive limit are off in this scenario (their series are tested
    // with their own observers: transport/tests/hedge.rs, limit.rs).
    for name in searchwire::metrics::NAMES {
        if name != "searchwire_node_up"
            && name != "searchwire_node_ejections_total"
            && name != "searchwire_resurrections_total"
            && name != "searchwire_hedges_total"
            && name != "searchwire_concurrency_limit"
            && name != "searchwire_concurrency_rejections_total"
            && name != "db.client.operation.duration"
        {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
