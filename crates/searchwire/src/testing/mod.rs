//! Test support shared by the paused-time test modules (`loop_tests`, `health_tests`): a
//! scripted in-memory [`Connector`], a client over scripted nodes, and a tracing capture.
//!
//! A scripted node answers from, in order: the one-shot queue of the request's path, the
//! persistent rule of its path, the node's one-shot queue, the node's default, else `200`.
//! Paths are matched without the query string; the log records path and query.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::Full;
use tokio::time::Instant;

use crate::classify::OutcomeKind;
use crate::config::ClientBuilder;
use crate::http::addr::NodeAddr;
use crate::http::connector::{Connector, RawResponse, SendError, SendFuture};
use crate::{AdaptiveJitter, Backoff, Client};

/// A valid `GET /` info document.
pub(crate) const ROOT_BODY: &str =
    r#"{"name":"n","cluster_name":"c","version":{"number":"2.19.0","distribution":"opensearch"}}"#;

/// A `_cluster/health?local=true` answer with `status` and `initializing_shards`.
pub(crate) fn cluster_health_body(status: &str, initializing: u32) -> String {
    format!(
        r#"{{"cluster_name":"c","status":"{status}","timed_out":false,"number_of_nodes":3,"number_of_data_nodes":3,"discovered_cluster_manager":true,"active_primary_shards":5,"active_shards":10,"relocating_shards":0,"initializing_shards":{initializing},"unassigned_shards":0,"delayed_unassigned_shards":0,"number_of_pending_tasks":0,"number_of_in_flight_fetch":0,"task_max_waiting_in_queue_millis":0,"active_shards_percent_as_number":100.0}}"#
    )
}

/// What a scripted node does with one request.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    Status(u16),
    StatusWith(u16, &'static str, String),
    /// This status and body.
    Body(u16, String),
    Connect,
    Reset,
    Hang,
    /// A valid `GET /` info document.
    Root,
    /// A green `_cluster/health` answer.
    Health,
    After(Duration, Box<Step>),
}

/// One request a scripted node received.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    pub port: u16,
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: HeaderMap,
    pub at: Instant,
    /// The body as handed to the connector (the same reference-counted bytes).
    pub body: Bytes,
}

#[derive(Default)]
struct Script {
    /// Per node port: queued steps; when empty, `default`.
    queues: HashMap<u16, VecDeque<Step>>,
    defaults: HashMap<u16, Step>,
    /// Per (port, path): queued steps and persistent rules, consulted first.
    path_queues: HashMap<(u16, String), VecDeque<Step>>,
    path_rules: HashMap<(u16, String), Step>,
    /// One-shot steps for the next sends, whichever node they go to (after the path's).
    any: VecDeque<Step>,
    sent: Vec<Sent>,
    resets: Vec<u16>,
    /// (port, when) of every exchange dropped before it ended (a cancelled attempt).
    dropped: Vec<(u16, Instant)>,
}

#[derive(Clone, Default)]
pub(crate) struct Scripted(Arc<Mutex<Script>>);

impl Scripted {
    /// What the node does when nothing more specific applies.
    pub(crate) fn default_step(&self, port: u16, s: Step) {
        self.0.lock().unwrap().defaults.insert(port, s);
    }
    /// Queues a one-shot step for the node.
    pub(crate) fn push(&self, port: u16, s: Step) {
        self.0
            .lock()
            .unwrap()
            .queues
            .entry(port)
            .or_default()
            .push_back(s);
    }
    /// A persistent rule for `path` (query excluded) on the node.
    pub(crate) fn on_path(&self, port: u16, path: &str, s: Step) {
        self.0
            .lock()
            .unwrap()
            .path_rules
            .insert((port, path.to_string()), s);
    }
    /// Queues a one-shot step for `path` on the node.
    pub(crate) fn push_path(&self, port: u16, path: &str, s: Step) {
        self.0
            .lock()
            .unwrap()
            .path_queues
            .entry((port, path.to_string()))
            .or_default()
            .push_back(s);
    }
    /// Queues a one-shot step for the next send to any node (consulted after the path's
    /// queue and rule, before the node's).
    pub(crate) fn push_any(&self, s: Step) {
        self.0.lock().unwrap().any.push_back(s);
    }
    /// (port, method, path and query, time) of every send.
    pub(crate) fn log(&self) -> Vec<(u16, String, String, Instant)> {
        self.sent()
            .into_iter()
            .map(|s| (s.port, s.method, s.target, s.at))
            .collect()
    }
    /// Every request, with its headers.
    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.0.lock().unwrap().sent.clone()
    }
    /// The targets (path and query) sent to `port`, in order.
    pub(crate) fn targets(&self, port: u16) -> Vec<String> {
        self.sent()
            .into_iter()
            .filter(|s| s.port == port)
            .map(|s| s.target)
            .collect()
    }
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.log().iter().map(|l| l.0).collect()
    }
    pub(crate) fn resets(&self) -> Vec<u16> {
        self.0.lock().unwrap().resets.clone()
    }
    /// (port, when) of every exchange the client dropped before it ended.
    pub(crate) fn dropped(&self) -> Vec<(u16, Instant)> {
        self.0.lock().unwrap().dropped.clone()
    }
}

/// Records its exchange as dropped unless disarmed (the exchange ended).
struct DropWatch {
    script: Arc<Mutex<Script>>,
    port: u16,
    armed: bool,
}

impl DropWatch {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut s) = self.script.lock() {
                s.dropped.push((self.port, Instant::now()));
            }
        }
    }
}

fn respond(status: u16, headers: HeaderMap, body: impl Into<Bytes>) -> SendFuture {
    let raw = RawResponse {
        status: StatusCode::from_u16(status).unwrap(),
        headers,
        body: body.into(),
    };
    Box::pin(async move { Ok(raw) })
}

fn run(step: Step, watch: DropWatch) -> SendFuture {
    Box::pin(async move {
        let out = run_step(step).await;
        watch.disarm();
        out
    })
}

async fn run_step(step: Step) -> Result<RawResponse, SendError> {
    {
        let mut step = step;
        loop {
            let fut = match step {
                Step::After(d, next) => {
                    tokio::time::sleep(d).await;
                    step = *next;
                    continue;
                }
                Step::Status(s) => respond(s, HeaderMap::new(), format!("{{\"status\":{s}}}")),
                Step::Body(s, body) => respond(s, HeaderMap::new(), body),
                Step::StatusWith(s, h, v) => {
                    let mut headers = HeaderMap::new();
                    headers.insert(h, v.parse().unwrap());
                    respond(s, headers, Bytes::new())
                }
                Step::Connect => {
                    return Err(SendError {
                        kind: OutcomeKind::Connect,
                        source: "connection refused".into(),
                    })
                }
                Step::Reset => {
                    return Err(SendError {
                        kind: OutcomeKind::Reset,
                        source: "connection reset by peer".into(),
                    })
                }
                Step::Hang => Box::pin(std::future::pending()),
                Step::Root => respond(200, HeaderMap::new(), ROOT_BODY),
                Step::Health => respond(200, HeaderMap::new(), cluster_health_body("green", 0)),
            };
            return fut.await;
        }
    }
}

impl Connector for Scripted {
    fn send(&self, node: &NodeAddr, req: http::Request<Full<Bytes>>) -> SendFuture {
        let mut s = self.0.lock().unwrap();
        let port = node.port();
        let path = req.uri().path().to_string();
        s.sent.push(Sent {
            port,
            method: req.method().to_string(),
            target: req
                .uri()
                .path_and_query()
                .map_or(path.clone(), |p| p.to_string()),
            headers: req.headers().clone(),
            at: Instant::now(),
            body: full_bytes(req.body()),
        });
        let key = (port, path);
        let step = s
            .path_queues
            .get_mut(&key)
            .and_then(|q| q.pop_front())
            .or_else(|| s.path_rules.get(&key).cloned())
            .or_else(|| s.any.pop_front())
            .or_else(|| s.queues.get_mut(&port).and_then(|q| q.pop_front()))
            .or_else(|| s.defaults.get(&port).cloned())
            .unwrap_or(Step::Status(200));
        drop(s);
        let watch = DropWatch {
            script: self.0.clone(),
            port,
            armed: true,
        };
        run(step, watch)
    }
    fn reset(&self, node: &NodeAddr) {
        self.0.lock().unwrap().resets.push(node.port());
    }
}

/// The bytes of a `Full` body (it yields its one frame at once), without copying them.
fn full_bytes(body: &Full<Bytes>) -> Bytes {
    use hyper::body::Body;
    let mut body = body.clone();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

/// A client over `n` scripted nodes on ports 1..=n, jitter off (constant backoff unless
/// configured, adaptive jitter off), resurrection timers and the health refresh off unless
/// asked, and round-robin selection unless asked (so a test knows which node each attempt
/// goes to; latency-aware selection is tested in `transport/tests/selection.rs`).
pub(crate) fn client(
    n: u16,
    conn: &Scripted,
    f: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Client {
    let b = f(Client::builder()
        .nodes((1..=n).map(|p| format!("http://node:{p}")))
        .backoff(Backoff::constant(Duration::from_millis(100)))
        .adaptive_jitter(AdaptiveJitter::off())
        .resurrection_timers(false)
        .health_refresh(false)
        .read_environment(false)
        .selection(crate::Selection::RoundRobin)
        .seed(1));
    // The real build path: every validation, the real default headers and credentials.
    b.build_with_connector(None, Arc::new(conn.clone()))
        .expect("test client configuration")
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Captures the messages of `WARN` (and above) events emitted on the current thread while
/// installed (paused-time tests run on one thread, so spawned tasks are covered).
///
/// One process-wide subscriber routes events to the capture of the emitting thread. A
/// per-test scoped subscriber (`set_default`) is not reliable when tests run in parallel:
/// tracing caches each callsite's interest globally, and a callsite first hit on a thread
/// without a subscriber can be cached as uninteresting, so events go missing.
#[derive(Clone, Default)]
pub(crate) struct Warnings(Arc<Mutex<Vec<String>>>, Arc<Mutex<Vec<SpanRecord>>>);

/// A span seen while a capture was installed: its name and every field recorded on it
/// (at creation or later), rendered with `Debug`/`Display` as text.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpanRecord {
    pub id: u64,
    pub name: &'static str,
    pub fields: Vec<(String, String)>,
}

impl SpanRecord {
    /// The last value recorded for `field`.
    pub(crate) fn get(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .rev()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.as_str())
    }
}

struct FieldVisitor<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Warnings>> = const { std::cell::RefCell::new(None) };
}

/// Removes the thread's capture when dropped.
pub(crate) struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

/// Routes events to the capture of the thread that emits them.
struct Router;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Router {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        CAPTURE.with(|c| {
            if let Some(w) = &*c.borrow() {
                let mut rec = SpanRecord {
                    id: id.into_u64(),
                    name: attrs.metadata().name(),
                    fields: Vec::new(),
                };
                attrs.record(&mut FieldVisitor(&mut rec.fields));
                w.1.lock().unwrap().push(rec);
            }
        });
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        CAPTURE.with(|c| {
            if let Some(w) = &*c.borrow() {
                let mut spans = w.1.lock().unwrap();
                if let Some(rec) = spans.iter_mut().rev().find(|r| r.id == id.into_u64()) {
                    values.record(&mut FieldVisitor(&mut rec.fields));
                }
            }
        });
    }

    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() > tracing::Level::WARN {
            return;
        }
        CAPTURE.with(|c| {
            if let Some(w) = &*c.borrow() {
                let mut m = String::new();
                event.record(&mut MessageVisitor(&mut m));
                w.0.lock().unwrap().push(m);
            }
        });
    }
}

impl Warnings {
    /// Starts capturing this thread's warnings until the guard drops.
    pub(crate) fn install(&self) -> CaptureGuard {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            use tracing_subscriber::layer::SubscriberExt;
            let subscriber = tracing_subscriber::registry().with(Router);
            // Another test harness may have installed one first; then captures stay empty
            // and the assertions say so.
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
        CAPTURE.with(|c| *c.borrow_mut() = Some(self.clone()));
        CaptureGuard(())
    }

    /// Spans named `name` captured so far, in creation order.
    pub(crate) fn spans(&self, name: &str) -> Vec<SpanRecord> {
        self.1
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.name == name)
            .cloned()
            .collect()
    }

    /// Captured warnings whose message contains `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m.contains(needle))
            .count()
    }
}

struct MessageVisitor<'a>(&'a mut String);

impl tracing::field::Visit for MessageVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        }
    }
}

/// An observer that keeps breaker transitions, retries and denials, for assertions.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) breaker: Mutex<Vec<(crate::BreakerState, crate::BreakerState)>>,
    pub(crate) retries: Mutex<Vec<(OutcomeKind, Duration, f64)>>,
    pub(crate) denied: Mutex<Vec<(OutcomeKind, crate::observe::DenyReason)>>,
    pub(crate) nodes: Mutex<Vec<(String, bool, String)>>,
    pub(crate) health: Mutex<Vec<(String, String, String)>>,
    pub(crate) hedges: Mutex<Vec<crate::HedgeResult>>,
}

impl crate::Observer for Recorder {
    fn breaker_transition(&self, e: &crate::observe::BreakerEvent<'_>) {
        self.breaker.lock().unwrap().push((e.from, e.to));
    }
    fn retry_scheduled(&self, e: &crate::observe::RetryEvent<'_>) {
        self.retries
            .lock()
            .unwrap()
            .push((e.outcome, e.delay, e.jitter_multiplier));
    }
    fn retry_denied(&self, e: &crate::observe::RetryDeniedEvent<'_>) {
        self.denied.lock().unwrap().push((e.outcome, e.reason));
    }
    fn health_check(&self, e: &crate::observe::HealthCheckEvent<'_>) {
        self.health.lock().unwrap().push((
            e.node.to_string(),
            e.kind.to_string(),
            e.result.to_string(),
        ));
    }
    fn hedge(&self, e: &crate::observe::HedgeEvent<'_>) {
        self.hedges.lock().unwrap().push(e.result);
    }
    fn node_transition(&self, e: &crate::observe::NodeEvent<'_>) {
        self.nodes
            .lock()
            .unwrap()
            .push((e.node.to_string(), e.alive, e.reason.to_string()));
    }
}
