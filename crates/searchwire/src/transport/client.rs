//! The client: its construction and its public methods; the attempt loop is `run`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, Method};
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ClientBuilder;
use crate::http::addr::NodeAddr;
use crate::http::connector::{ConnSettings, Connector, HyperConnector};
use crate::message::error::Error;
use crate::message::request::Request;
use crate::message::response::Response;
use crate::nodes::pool::{Pool, PoolNode};
use crate::observe::RequestEvent;
use crate::policy::breaker::{Breaker, BreakerState};
use crate::policy::budget::Budget;
use crate::policy::load::RetryCounter;
use crate::shared::{DeathHooks, Inner};
use crate::transport::run::RequestId;

/// A resilient client for a cluster of OpenSearch or Elasticsearch nodes.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`: share one per cluster across tasks so
/// node state carries from request to request. Background resurrection timers stop when
/// the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .inner
            .pool
            .topology()
            .nodes
            .iter()
            .map(|n| n.addr.to_string())
            .collect();
        f.debug_struct("Client")
            .field("nodes", &nodes)
            .finish_non_exhaustive()
    }
}

/// The state of one node, for display and monitoring.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeSnapshot {
    /// URL without credentials.
    pub url: String,
    /// Node id from discovery (empty for seeds not yet discovered).
    pub id: String,
    /// Whether user traffic goes to it.
    pub alive: bool,
    /// Consecutive connectivity failures.
    pub failures: u32,
    /// How long it has been dead.
    pub dead_for: Option<Duration>,
    /// Time until its next resurrection check.
    pub next_check_in: Option<Duration>,
    /// `allocated_processors` from discovery (0 when unknown).
    pub cores: u32,
    /// The last connectivity failure.
    pub last_error: Option<String>,
    /// "credentials rejected (401)" or "permission denied (403)" when the node's latest
    /// answer rejected the credentials.
    pub auth_problem: Option<String>,
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    pub(crate) fn from_parts(
        b: ClientBuilder,
        addrs: Vec<NodeAddr>,
        headers: HeaderMap,
        roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<Client, Error> {
        let connector = HyperConnector::new(ConnSettings {
            // Within the attempt timeout, so an unanswered SYN is classified as a connect
            // failure (never sent: retryable even for POST) rather than an attempt timeout.
            connect_timeout: match b.attempt_timeout {
                Some(t) => b.connect_timeout.min(t),
                None => b.connect_timeout,
            },
            pool_idle_timeout: b.pool_idle_timeout,
            pool_max_idle_per_node: b.pool_max_idle_per_node,
            max_response_bytes: b.max_response_bytes,
            extra_roots: roots,
            native_roots: b.native_roots && addrs.iter().any(|a| a.scheme() == "https"),
            client_identity: b.client_identity.clone(),
        })?;
        Ok(Client::with_connector(
            b,
            addrs,
            headers,
            Arc::new(connector),
        ))
    }

    pub(crate) fn with_connector(
        b: ClientBuilder,
        addrs: Vec<NodeAddr>,
        headers: HeaderMap,
        connector: Arc<dyn Connector>,
    ) -> Client {
        // Signing is the last step before the bytes leave, for every request and check.
        #[cfg(feature = "aws-sigv4")]
        let connector = crate::http::sigv4::wrap(connector, b.aws_sigv4.as_ref());
        let seed = b.seed.unwrap_or_else(|| fastrand::u64(..));
        let discovery = crate::shared::Discovery::new(b.discovery, addrs.clone());
        let nodes = addrs
            .into_iter()
            .map(|a| Arc::new(PoolNode::new(a, String::new(), true, 0)))
            .collect();
        let pool = Pool::new(nodes, b.resurrection, b.server_cores, seed.wrapping_add(1))
            .with_selection(b.selection, b.selection_decay, seed.wrapping_add(2));
        let now = Instant::now();
        let client = Client {
            inner: Arc::new(Inner {
                pool,
                connector,
                retry: b.retry,
                backoff: b.backoff,
                attempt_timeout: b.attempt_timeout,
                deadline: b.deadline,
                headers,
                rng: Mutex::new(fastrand::Rng::with_seed(seed)),
                observer: crate::observe::assemble(b.observer, b.metrics),
                cluster_name: Default::default(),
                system_name: Default::default(),
                resurrection_timers: b.resurrection_timers,
                health_timeout: b.health_timeout,
                reprobe: b.reprobe,
                health_modifier: b.health_modifier,
                health_refresh: b.health_refresh,
                refresh_started: std::sync::atomic::AtomicBool::new(false),
                discovery,
                wall_clock: crate::clock::system_now,
                shutdown: tokio::sync::watch::channel(()).0,
                budget: b.budget.map(|cfg| Budget::new(cfg, now)),
                breaker: b.breaker.map(|cfg| Breaker::new(cfg, now)),
                class_backoff: b.class_backoff,
                retry_counter: RetryCounter::new(b.adaptive_jitter, now),
                gateway_eject: b.gateway_eject,
                on_death: DeathHooks {
                    start_timer: crate::resurrection::ensure_timer,
                    rediscover: crate::discovery::node_died,
                },
                hedge: crate::policy::hedge::HedgeState::new(
                    b.hedging
                        .map_or(crate::defaults::HEDGE_MAX_EXTRA, |h| h.max_extra),
                    now,
                ),
                hedging: b.hedging,
                limit: b
                    .adaptive_concurrency
                    .map(crate::policy::limit::Limiter::new),
                compress_min_bytes: b.compress_min_bytes,
            }),
        };
        // Outside a runtime these are no-ops; the first request starts them then.
        crate::discovery::ensure_started(&client.inner);
        crate::health::refresh::ensure_started(&client.inner);
        client
    }

    /// Sends a request: picks a node, sends, classifies the outcome, and retries on another
    /// live node (after a backoff) while the retry policy, the request's idempotency and its
    /// deadline allow. Returns the first successful (2xx/3xx) response, or an [`Error`]
    /// listing every attempt.
    ///
    /// Dropping the returned future cancels the request; that never marks a node dead.
    pub async fn send(&self, mut request: Request) -> Result<Response, Error> {
        request.validate()?;
        // Compressed once, here: every attempt sends (and SigV4 signs) the same bytes. In
        // place and boxed, so this future (moved on every request) grows by two pointers.
        if let Some(min) = self.inner.compress_min_bytes {
            if crate::transport::compress::wants(&request, min) {
                Box::pin(crate::transport::compress::compress(&mut request)).await;
            }
        }
        crate::discovery::ensure_started(&self.inner);
        crate::health::refresh::ensure_started(&self.inner);
        // Made when a span or log first shows it: no clock reading or UUID per request
        // when nothing is listening.
        let id = RequestId::new(self.inner.wall_clock);
        // OpenTelemetry's database conventions (`observe/semconv.rs`): the exported span is
        // named `{db.operation.name} {db.collection.name}` through `otel.name`.
        let span = tracing::info_span!(
            "searchwire.request",
            otel.name = tracing::field::Empty,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            db.system.name = tracing::field::Empty,
            db.operation.name = tracing::field::Empty,
            server.address = tracing::field::Empty,
            server.port = tracing::field::Empty,
            http.request.method = %request.method,
            url.path = %request.path,
            db.collection.name = tracing::field::Empty,
            retry_id = %id,
            db.namespace = tracing::field::Empty,
            retries = tracing::field::Empty,
            http.request.resend_count = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            db.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if !span.is_disabled() {
            record_semconv(&span, &self.inner, &request);
        }
        let started = Instant::now();
        let execute = || crate::transport::run::execute(&self.inner, &request, &id, started);
        // Entering a span nobody listens to is skipped (the common case has no subscriber).
        // The future is made where it is awaited, so it is not moved once more.
        let result = match &self.inner.limit {
            None if span.is_disabled() => execute().await,
            None => execute().instrument(span.clone()).await,
            // Under the adaptive concurrency limit: a slot first (`limited.rs`).
            Some(limiter) => {
                Box::pin(
                    crate::transport::limited::send(
                        &self.inner,
                        limiter,
                        &request,
                        started,
                        execute,
                    )
                    .instrument(span.clone()),
                )
                .await
            }
        };
        let (status, attempts, error) = match &result {
            Ok(r) => (Some(r.status()), r.attempts(), None),
            Err(e) => (e.status(), e.attempts(), Some(e.kind())),
        };
        // The first attempt starts at the request's start: a response of one attempt took
        // that attempt's time, already measured (no clock reading here). Otherwise the
        // request's time, backoff and liveness checks included.
        let elapsed = match (&result, attempts) {
            (Ok(_), [only]) => only.elapsed,
            _ => started.elapsed(),
        };
        let attempts = attempts.len();
        span.record("retries", attempts.saturating_sub(1));
        if attempts > 1 {
            span.record("http.request.resend_count", attempts - 1);
        }
        if let Some(s) = status {
            span.record("http.response.status_code", s.as_u16());
            if !span.is_disabled() {
                span.record("db.response.status_code", s.as_str());
            }
        }
        if let Some(k) = error {
            span.record("error.type", k.as_str());
            span.record("otel.status_code", "ERROR");
        }
        self.inner.observer.request_finished(&RequestEvent {
            method: &request.method,
            status,
            attempts: attempts as u32,
            elapsed,
            error,
            path: &request.path,
            system: self.inner.system_name.get(),
        });
        result
    }

    /// The cluster circuit breaker's state: `closed`, `open` or `half_open` (see
    /// [`BreakerConfig`](crate::BreakerConfig)). Always [`BreakerState::Closed`] when the breaker is switched off.
    /// An open breaker whose cool-down has ended reads as half-open.
    pub fn breaker_state(&self) -> BreakerState {
        match &self.inner.breaker {
            Some(b) => {
                let (state, change) = b.state(Instant::now());
                crate::transport::run::breaker_changed(&self.inner, change);
                state
            }
            None => BreakerState::Closed,
        }
    }

    /// The state of every node.
    pub fn nodes(&self) -> Vec<NodeSnapshot> {
        let now = Instant::now();
        self.inner
            .pool
            .topology()
            .nodes
            .iter()
            .map(|n| {
                let h = n.health();
                NodeSnapshot {
                    url: n.addr.to_string(),
                    id: n.id(),
                    alive: n.is_alive(),
                    failures: h.failures,
                    dead_for: h.dead_since.map(|s| now.saturating_duration_since(s)),
                    next_check_in: h.next_check.map(|c| c.saturating_duration_since(now)),
                    cores: n.cores.load(Ordering::Relaxed),
                    last_error: h.last_error.clone(),
                    auth_problem: h.auth_rejected.map(|s| match s {
                        401 => "credentials rejected (401)".to_string(),
                        other => format!("permission denied ({other})"),
                    }),
                }
            })
            .collect()
    }

    /// Discovers the cluster's nodes now (`GET /_nodes/http,os` to a live node, trying
    /// the nodes in turn until one answers) and merges them into the pool, whatever the
    /// discovery settings. Returns once the new nodes have had their first health check:
    /// those that answered receive traffic, the others get it once they answer.
    ///
    /// A failed, partial or empty reply leaves the pool unchanged and is an error.
    pub async fn discover_now(&self) -> Result<crate::DiscoveryReport, Error> {
        crate::discovery::discover(&self.inner).await
    }
}

impl Client {
    /// What the background health checks have stored, without any I/O: the freshest
    /// cluster health (and its age) and every node's capability, version and
    /// distribution. Cluster-wide data informs; it never gates traffic.
    pub fn cluster_health(&self) -> crate::ClusterHealth {
        crate::health::report::cluster_health(&self.inner)
    }

    /// Health-checks every node now, all at once (up to
    /// [`CHECK_ALL_MAX_CONCURRENCY`](crate::explain::CHECK_ALL_MAX_CONCURRENCY) at a time,
    /// so the whole check takes about one health check timeout however many nodes hang):
    /// `GET /`, then, when it succeeded, the capability probe of
    /// `/_cluster/health?local=true`, waiting for its answer. The results are applied like
    /// any health check's: a node that cannot be reached is marked dead and handed to its
    /// resurrection timer; one that answers — even with 401/403 — is alive. A node whose
    /// `GET /` got no answer within the health check timeout is reported with
    /// [`NodeReport::timed_out`](crate::NodeReport::timed_out) set.
    pub async fn check_all(&self) -> crate::HealthReport {
        crate::health::report::check_all(&self.inner, None).await
    }

    /// [`check_all`](Self::check_all) bounded by `limit` overall: when it passes, the
    /// checks still running are cancelled and their nodes reported with
    /// [`NodeReport::timed_out`](crate::NodeReport::timed_out) set (never dropped from the
    /// report), except a node that had answered `GET /` and was still being probed: it
    /// keeps what `GET /` found. A cancelled check changes nothing about its node (cancellation never
    /// marks a node), so `alive` is what the client knew before.
    pub async fn check_all_within(&self, limit: std::time::Duration) -> crate::HealthReport {
        crate::health::report::check_all(&self.inner, Some(limit)).await
    }

    /// Convenience: `GET path`.
    pub async fn get(&self, path: &str) -> Result<Response, Error> {
        self.send(Request::new(Method::GET, path)).await
    }
}

/// Records the request span's database attributes known before the first attempt: the
/// system, the operation, the index, the cluster, and the span's name.
#[cold]
fn record_semconv(span: &tracing::Span, inner: &Inner, request: &Request) {
    use crate::observe::semconv;
    let op = semconv::operation_name(&request.method, request.sent_path());
    let index = request.index();
    span.record("otel.name", semconv::span_name(op, index).as_str());
    span.record("db.system.name", inner.system_name.get());
    span.record("db.operation.name", op);
    if let Some(i) = index {
        span.record("db.collection.name", i);
    }
    if let Some(cluster) = inner.cluster_name.get() {
        span.record("db.namespace", cluster.as_str());
    }
}

/// Benchmark hooks (`benches/selection.rs`); not part of the API.
#[doc(hidden)]
impl Client {
    /// One hot-path node pick, exactly as an attempt does it (`Pool::select(&[])`);
    /// returns the picked node's port.
    #[doc(hidden)]
    pub fn __bench_select(&self) -> usize {
        self.inner
            .pool
            .select(&[])
            .map_or(0, |n| usize::from(n.addr.port()))
    }

    /// A client over `n_nodes` local nodes (ports 20000..) whose core counts, taken from
    /// `cores` cyclically (0 = unknown), weight the selection. Does no I/O.
    #[doc(hidden)]
    pub fn __bench_client(n_nodes: usize, cores: &[u32]) -> Client {
        Client::__bench_client_with(n_nodes, cores, crate::nodes::choice::Selection::default())
    }

    /// [`__bench_client`](Self::__bench_client) with the given selection. Under latency-aware
    /// selection every node has a latency estimate (1 ms + its index in µs), as after a
    /// first answer from each.
    #[doc(hidden)]
    pub fn __bench_client_with(
        n_nodes: usize,
        cores: &[u32],
        selection: crate::nodes::choice::Selection,
    ) -> Client {
        let urls = (0..n_nodes).map(|i| format!("http://127.0.0.1:{}", 20000 + i));
        let client = match Client::builder()
            .selection(selection)
            .nodes(urls)
            .read_environment(false)
            .resurrection_timers(false)
            .build()
        {
            Ok(c) => c,
            Err(e) => panic!("bench client: {e}"),
        };
        let nodes = client
            .inner
            .pool
            .topology()
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let c = if cores.is_empty() {
                    0
                } else {
                    cores[i % cores.len()]
                };
                let node = PoolNode::new(n.addr.clone(), String::new(), true, c);
                node.latency
                    .set(1_000_000 + 1_000 * i as u64, Instant::now());
                Arc::new(node)
            })
            .collect();
        client
            .inner
            .pool
            .replace(crate::nodes::pool::Topology::new(nodes));
        client
    }
}
