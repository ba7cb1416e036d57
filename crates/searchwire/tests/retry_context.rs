//! Retry context (reference 004 ch. 5): every span and retry log of a
//! request carries its retry id (a UUID v7, one per logical request), the cluster's name
//! once a health answer told it, the attempt number and the target index. The tracing
//! output is captured by a small layer and checked field by field, against the fake cluster.
//!
//! One test per binary: tracing caches each callsite's interest, so every request here runs
//! with the capture installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::{Backoff, Client, Request, RetryBudget};
use searchwire_fake::{Behavior, FakeCluster, Match, CLUSTER_NAME};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Fields rendered as text: `Display`/`str` values as they are, others with `Debug`.
type Fields = HashMap<String, String>;

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().to_string(), format!("{v:?}"));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().to_string(), v.to_string());
    }
}

#[derive(Clone, Default)]
struct Capture {
    /// Every span when it closed: name and fields.
    spans: Arc<Mutex<Vec<(String, Fields)>>>,
    /// Every event: its fields (`message` included).
    events: Arc<Mutex<Vec<Fields>>>,
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::new();
        attrs.record(&mut Collect(&mut f));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(f);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(f) = span.extensions_mut().get_mut::<Fields>() {
                values.record(&mut Collect(f));
            }
        }
    }
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::new();
        event.record(&mut Collect(&mut f));
        self.events.lock().unwrap().push(f);
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let f = span
                .extensions()
                .get::<Fields>()
                .cloned()
                .unwrap_or_default();
            self.spans
                .lock()
                .unwrap()
                .push((span.name().to_string(), f));
        }
    }
}

impl Capture {
    fn take_events(&self, message: &str) -> Vec<Fields> {
        let mut all = self.events.lock().unwrap();
        let (hit, rest): (Vec<_>, Vec<_>) = all
            .drain(..)
            .partition(|e| e.get("message").map(String::as_str) == Some(message));
        *all = rest;
        hit
    }
    fn take_spans(&self, name: &str) -> Vec<Fields> {
        let mut all = self.spans.lock().unwrap();
        let (hit, rest): (Vec<_>, Vec<_>) = all.drain(..).partition(|(n, _)| n == name);
        *all = rest;
        hit.into_iter().map(|(_, f)| f).collect()
    }
}

fn field<'a>(f: &'a Fields, name: &str) -> &'a str {
    f.get(name)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no field {name} in {f:?}"))
}

fn uuid_v7(s: &str) -> String {
    let u = uuid::Uuid::parse_str(s).unwrap_or_else(|e| panic!("retry_id {s:?}: {e}"));
    assert_eq!(u.get_version_num(), 7, "retry_id {s} is not a UUID v7");
    s.to_string()
}

/// Both nodes answer the next search with 503: attempts 1 and 2 fail, attempt 3 succeeds.
fn fail_twice(cluster: &FakeCluster) {
    for n in cluster.nodes() {
        n.once(Match::Path("/logs/_search".into()), Behavior::status(503));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn spans_and_retry_logs_carry_the_retry_id_cluster_attempt_and_index() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(
        capture
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let cluster = FakeCluster::start(2).await.unwrap();
    let client = Client::builder()
        .nodes(cluster.urls())
        .read_environment(false)
        .backoff(Backoff::constant(Duration::from_millis(5)))
        .build()
        .unwrap();

    // Before any health answer the cluster's name is unknown: no `db.namespace`, an empty
    // `cluster` in the logs.
    fail_twice(&cluster);
    client.send(Request::get("/logs/_search")).await.unwrap();
    let before = capture.take_spans("searchwire.request");
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].get("db.namespace"), None, "{:?}", before[0]);
    let first_id = uuid_v7(field(&before[0], "retry_id"));
    for a in capture.take_spans("searchwire.attempt") {
        assert_eq!(field(&a, "retry_id"), first_id);
    }
    let first_finished = capture.take_events("attempt finished");
    assert_eq!(first_finished.len(), 3, "{first_finished:?}");
    for e in first_finished {
        assert_eq!(field(&e, "cluster"), "");
        assert_eq!(field(&e, "retry_id"), first_id);
    }
    capture.take_events("backing off before retry");

    // A health check learns the name (`GET /` and `_cluster/health` both carry it).
    let report = client.check_all().await;
    assert_eq!(report.cluster_name(), Some(CLUSTER_NAME));

    fail_twice(&cluster);
    client.send(Request::get("/logs/_search")).await.unwrap();

    let req = capture.take_spans("searchwire.request");
    assert_eq!(req.len(), 1);
    let r = &req[0];
    let id = uuid_v7(field(r, "retry_id"));
    assert_ne!(id, first_id, "one retry id per logical request");
    assert_eq!(field(r, "db.namespace"), CLUSTER_NAME);
    assert_eq!(field(r, "db.collection.name"), "logs");
    assert_eq!(field(r, "retries"), "2");

    let attempts = capture.take_spans("searchwire.attempt");
    assert_eq!(attempts.len(), 3);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(field(a, "retry_id"), id);
        assert_eq!(field(a, "attempt"), (i + 1).to_string());
    }

    let finished = capture.take_events("attempt finished");
    assert_eq!(finished.len(), 3, "{finished:?}");
    for (i, e) in finished.iter().enumerate() {
        assert_eq!(field(e, "retry_id"), id);
        assert_eq!(field(e, "cluster"), CLUSTER_NAME);
        assert_eq!(field(e, "attempt"), (i + 1).to_string());
        assert_eq!(field(e, "index"), "logs");
    }
    assert_eq!(field(&finished[0], "status"), "503");
    assert_eq!(field(&finished[2], "status"), "200");

    let backoffs = capture.take_events("backing off before retry");
    assert_eq!(backoffs.len(), 2, "{backoffs:?}");
    for (i, e) in backoffs.iter().enumerate() {
        assert_eq!(field(e, "retry_id"), id);
        assert_eq!(field(e, "cluster"), CLUSTER_NAME);
        assert_eq!(field(e, "attempt"), (i + 1).to_string());
        assert_eq!(field(e, "index"), "logs");
        assert_eq!(field(e, "class"), "gateway");
    }

    // A retry the budget refuses is logged with the same context.
    let stingy = Client::builder()
        .nodes(cluster.urls())
        .read_environment(false)
        .retry_budget(RetryBudget {
            ratio: 0.0,
            min_per_sec: 0,
            window: Duration::from_secs(10),
        })
        .build()
        .unwrap();
    stingy.check_all().await;
    fail_twice(&cluster);
    stingy
        .send(Request::get("/logs/_search"))
        .await
        .unwrap_err();
    let denied = capture.take_events("retry not made");
    assert_eq!(denied.len(), 1, "{denied:?}");
    let d = &denied[0];
    uuid_v7(field(d, "retry_id"));
    assert_eq!(field(d, "cluster"), CLUSTER_NAME);
    assert_eq!(field(d, "index"), "logs");
    assert_eq!(field(d, "reason"), "budget");
}
