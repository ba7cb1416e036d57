//! The client: configuration, the node pool, the connector, and the one attempt loop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method};
use http_body_util::Full;
use tokio::time::Instant;
use tracing::Instrument;

use crate::classify::OutcomeKind;
use crate::config::ClientBuilder;
use crate::http::addr::NodeAddr;
use crate::http::connector::{ConnSettings, Connector, HyperConnector, RawResponse};
use crate::message::error::{Attempt, Error, ErrorKind};
use crate::message::request::{Deadline, Request};
use crate::message::response::Response;
use crate::nodes::pool::{lock, Pool, PoolNode, Transition};
use crate::observe::{
    AttemptEvent, BreakerEvent, DenyReason, NodeEvent, Observer, RequestEvent, RetryDeniedEvent,
    RetryEvent,
};
use crate::policy::backoff::Backoff;
use crate::policy::breaker::{Admission, Breaker, BreakerState, Change, ProbeSlot, Verdict};
use crate::policy::budget::Budget;
use crate::policy::class_backoff::ClassBackoff;
use crate::policy::load::RetryCounter;
use crate::policy::retry::{NoRetry, RetryPolicy};

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

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) retry: RetryPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) headers: HeaderMap,
    pub(crate) rng: Mutex<fastrand::Rng>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) next_request_id: AtomicU64,
    pub(crate) resurrection_timers: bool,
    pub(crate) health_timeout: Duration,
    /// When Unavailable nodes are probed for cluster health again.
    pub(crate) reprobe: crate::nodes::capability::ReprobePolicy,
    /// The user's callback applied to every background request.
    pub(crate) health_modifier: Option<crate::health::RequestModifier>,
    /// Periodic refresh of live nodes' cluster health (see `refresh`).
    pub(crate) health_refresh: bool,
    pub(crate) refresh_started: std::sync::atomic::AtomicBool,
    /// Discovery settings and state (the background task holds only a `Weak<Inner>`).
    pub(crate) discovery: crate::discovery::Discovery,
    /// Dropped with the client: wakes and ends every background task.
    pub(crate) shutdown: tokio::sync::watch::Sender<()>,
    /// Wall clock, for `Retry-After` HTTP-dates; injectable in tests.
    pub(crate) wall_clock: fn() -> SystemTime,
    /// The retry budget (none: switched off).
    pub(crate) budget: Option<Budget>,
    /// The cluster circuit breaker (none: switched off).
    pub(crate) breaker: Option<Breaker>,
    /// Per-class backoff and retry limits.
    pub(crate) class_backoff: ClassBackoff,
    /// Recent retries, for the adaptive jitter multiplier.
    pub(crate) retry_counter: RetryCounter,
    /// Consecutive gateway errors that eject a node (0: never).
    pub(crate) gateway_eject: u32,
}

/// The wall clock. The one place that reads system time (`Retry-After` dates need it);
/// every other timing decision uses tokio's clock, which tests pause.
#[allow(clippy::disallowed_methods)]
fn system_now() -> SystemTime {
    SystemTime::now()
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
        let seed = b.seed.unwrap_or_else(|| fastrand::u64(..));
        let discovery = crate::discovery::Discovery::new(b.discovery, addrs.clone());
        let nodes = addrs
            .into_iter()
            .map(|a| Arc::new(PoolNode::new(a, String::new(), true, 0)))
            .collect();
        let pool = Pool::new(nodes, b.resurrection, b.server_cores, seed.wrapping_add(1));
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
                next_request_id: AtomicU64::new(1),
                resurrection_timers: b.resurrection_timers,
                health_timeout: b.health_timeout,
                reprobe: b.reprobe,
                health_modifier: b.health_modifier,
                health_refresh: b.health_refresh,
                refresh_started: std::sync::atomic::AtomicBool::new(false),
                discovery,
                wall_clock: system_now,
                shutdown: tokio::sync::watch::channel(()).0,
                budget: b.budget.map(|cfg| Budget::new(cfg, now)),
                breaker: b.breaker.map(|cfg| Breaker::new(cfg, now)),
                class_backoff: b.class_backoff,
                retry_counter: RetryCounter::new(b.adaptive_jitter, now),
                gateway_eject: b.gateway_eject,
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
    pub async fn send(&self, request: Request) -> Result<Response, Error> {
        request.validate()?;
        crate::discovery::ensure_started(&self.inner);
        crate::health::refresh::ensure_started(&self.inner);
        let id = self.inner.next_request_id.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "searchwire.request",
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            db.system = "opensearch",
            server.address = tracing::field::Empty,
            server.port = tracing::field::Empty,
            http.request.method = %request.method,
            url.path = %request.path,
            db.collection.name = request.index().unwrap_or(""),
            retry_id = id,
            retries = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self
            .inner
            .execute(&request, id, started)
            .instrument(span.clone())
            .await;
        let (status, attempts, error) = match &result {
            Ok(r) => (Some(r.status()), r.attempts().len(), None),
            Err(e) => (e.status(), e.attempts().len(), Some(e.kind())),
        };
        span.record("retries", attempts.saturating_sub(1));
        if let Some(s) = status {
            span.record("http.response.status_code", s.as_u16());
        }
        if let Some(k) = error {
            span.record("error.type", k.as_str());
            span.record("otel.status_code", "ERROR");
        }
        self.inner.observer.request_finished(&RequestEvent {
            method: &request.method,
            status,
            attempts: attempts as u32,
            elapsed: started.elapsed(),
            error,
        });
        result
    }

    /// The cluster circuit breaker's state: `closed`, `open` or `half_open` (see
    /// [`crate::policy::breaker`]). Always [`BreakerState::Closed`] when the breaker is switched off.
    /// An open breaker whose cool-down has ended reads as half-open.
    pub fn breaker_state(&self) -> BreakerState {
        match &self.inner.breaker {
            Some(b) => {
                let (state, change) = b.state(Instant::now());
                self.inner.breaker_changed(change);
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

/// Per-request retry bookkeeping, consulted and updated by [`Inner::plan_retry`].
struct RetryState {
    idempotent: bool,
    /// The previous backoff (decorrelated jitter grows from it).
    prev_delay: Duration,
    /// Retries made so far, per outcome kind (for class backoff rules).
    class_retries: Vec<(OutcomeKind, u32)>,
}

/// The outcome of one attempt, before it is turned into a record.
struct AttemptResult {
    kind: OutcomeKind,
    raw: Option<RawResponse>,
    detail: Option<String>,
}

impl Inner {
    fn effective_deadline(&self, request: &Request, start: Instant) -> Option<Instant> {
        match request.deadline {
            Some(Deadline::At(at)) => Some(at),
            // A budget too large to represent as an instant is no deadline at all.
            Some(Deadline::Within(d)) => start.checked_add(d),
            None => self.deadline.and_then(|d| start.checked_add(d)),
        }
    }

    fn build_http(
        &self,
        request: &Request,
        node: &NodeAddr,
        query: &str,
    ) -> Result<http::Request<Full<Bytes>>, Error> {
        let uri = node.uri(&request.path, query)?;
        let mut headers = self.headers.clone();
        for (k, v) in request.headers.iter() {
            headers.insert(k, v.clone());
        }
        let body = request.body.clone().unwrap_or_default();
        let mut req = http::Request::new(Full::new(body));
        *req.method_mut() = request.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        Ok(req)
    }

    async fn execute(
        self: &Arc<Self>,
        request: &Request,
        request_id: u64,
        start: Instant,
    ) -> Result<Response, Error> {
        let deadline = self.effective_deadline(request, start);
        let attempt_timeout = request.attempt_timeout.or(self.attempt_timeout);
        let query = encode_query(&request.query);
        let mut attempts: Vec<Attempt> = Vec::new();
        // Nodes already tried by this request, so retries prefer other nodes. Inline (no
        // allocation on the hot path); past 8 attempts older entries are forgotten, which
        // only means a retry may revisit a node.
        let mut tried = [0usize; 8];
        let mut plan = RetryState {
            idempotent: request.is_idempotent(),
            prev_delay: Duration::ZERO,
            class_retries: Vec::new(),
        };
        // The last failed attempt, kept while its retry waits for the breaker's admission.
        let mut pending: Option<(Arc<PoolNode>, AttemptResult)> = None;

        if deadline.is_some_and(|d| d <= start) {
            return Err(Error::new(
                ErrorKind::DeadlineExceeded,
                "the request's deadline had already passed; nothing was sent",
            ));
        }

        loop {
            let number = attempts.len() as u32 + 1;
            // The cluster breaker admits (or refuses) every attempt.
            let mut probe = None;
            if let Some(breaker) = &self.breaker {
                let (admission, change, round) = breaker.admit_in_round(Instant::now());
                self.breaker_changed(change);
                match admission {
                    Admission::Allowed => {}
                    Admission::Probe => probe = Some(ProbeSlot::new(breaker, round)),
                    Admission::Refused { retry_in } => {
                        return Err(match pending.take() {
                            Some((node, last)) => {
                                self.retry_denied(
                                    request,
                                    request_id,
                                    &node,
                                    &last,
                                    DenyReason::Breaker,
                                );
                                final_error(
                                    request,
                                    &node,
                                    last,
                                    attempts,
                                    NoRetry::Exhausted,
                                    Some(BREAKER_NOTE.to_string()),
                                )
                            }
                            None => circuit_open_error(request, &breaker.reason(), retry_in),
                        });
                    }
                }
            }
            if number == 1 {
                if let Some(budget) = &self.budget {
                    budget.deposit(Instant::now());
                }
            }
            let seen = (number as usize - 1).min(tried.len());
            let Some(node) = self.pool.select(&tried[..seen]) else {
                return Err(Error::new(
                    ErrorKind::NoNodeReachable,
                    "no node reachable: no node is alive and none has ever answered",
                )
                .with_attempts(attempts));
            };
            tried[(number as usize - 1) % 8] = crate::nodes::pool::node_key(&node);
            let http_req = self.build_http(request, &node.addr, &query)?;
            let (result, elapsed) = self
                .run_attempt(
                    request,
                    request_id,
                    &node,
                    http_req,
                    number,
                    attempt_timeout,
                    deadline,
                )
                .await;
            let status = result.raw.as_ref().map(|r| r.status);
            if let Some(breaker) = &self.breaker {
                let verdict = Verdict::of(result.kind);
                let now = Instant::now();
                let change = match probe.take() {
                    Some(slot) => slot.record(now, verdict),
                    None => breaker.record(now, verdict, false),
                };
                self.breaker_changed(change);
            }
            self.update_node(&node, &result);
            attempts.push(Attempt {
                number,
                node: node.addr.shared(),
                outcome: result.kind,
                status,
                elapsed,
                backoff: Duration::ZERO,
                detail: result.detail.clone(),
            });

            match (result.kind, result.raw) {
                (OutcomeKind::Success, Some(raw)) => {
                    return Ok(Response {
                        status: raw.status,
                        headers: raw.headers,
                        body: raw.body,
                        node: node.addr.shared(),
                        attempts,
                    });
                }
                (OutcomeKind::Cancelled, _) => {
                    let total = deadline
                        .map(|d| d.saturating_duration_since(start))
                        .unwrap_or_default();
                    return Err(Error::new(
                        ErrorKind::DeadlineExceeded,
                        format!(
                            "deadline of {} exceeded after {} attempt(s); the last attempt to {} was cancelled (the node was not marked dead)",
                            crate::clock::duration::format_duration(total),
                            attempts.len(),
                            node.addr
                        ),
                    )
                    .with_attempts(attempts));
                }
                (kind, raw) => {
                    let result = AttemptResult {
                        kind,
                        raw,
                        detail: result.detail,
                    };
                    let delay = match self.plan_retry(
                        request, request_id, &node, &result, number, deadline, &mut plan,
                    ) {
                        Ok(delay) => delay,
                        Err((why, note)) => {
                            return Err(final_error(request, &node, result, attempts, why, note));
                        }
                    };
                    if let Some(last) = attempts.last_mut() {
                        last.backoff = delay;
                    }
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    pending = Some((node, result));
                }
            }
        }
    }

    /// One attempt on `node`: sends, bounded by the attempt timeout and the deadline,
    /// classifies the outcome, and reports it (span, log, observer). Returns the
    /// classified result and how long the attempt took.
    #[allow(clippy::too_many_arguments)]
    async fn run_attempt(
        &self,
        request: &Request,
        request_id: u64,
        node: &PoolNode,
        http_req: http::Request<Full<Bytes>>,
        number: u32,
        attempt_timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> (AttemptResult, Duration) {
        let span = tracing::debug_span!(
            "searchwire.attempt",
            attempt = number,
            server.address = node.addr.host(),
            server.port = node.addr.port(),
            http.request.resend_count = tracing::field::Empty,
            outcome = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
        );
        if number > 1 {
            span.record("http.request.resend_count", number - 1);
        }
        let current = tracing::Span::current();
        current.record("server.address", node.addr.host());
        current.record("server.port", node.addr.port());
        let attempt_start = Instant::now();
        let send = self.connector.send(&node.addr, http_req);
        let bounded = async {
            match attempt_timeout {
                Some(t) => tokio::time::timeout(t, send).await.ok(),
                None => Some(send.await),
            }
        };
        let outcome: Option<Option<Result<RawResponse, crate::http::connector::SendError>>> =
            match deadline {
                Some(d) => {
                    tokio::select! {
                        r = bounded.instrument(span.clone()) => Some(r),
                        _ = tokio::time::sleep_until(d) => None,
                    }
                }
                None => Some(bounded.instrument(span.clone()).await),
            };
        let elapsed = attempt_start.elapsed();
        let result = match outcome {
            None => AttemptResult {
                kind: OutcomeKind::Cancelled,
                raw: None,
                detail: Some("the request's deadline expired during the attempt".into()),
            },
            Some(None) => AttemptResult {
                kind: OutcomeKind::Timeout,
                raw: None,
                detail: Some(format!(
                    "no complete response within the attempt timeout of {}",
                    crate::clock::duration::format_duration(attempt_timeout.unwrap_or_default())
                )),
            },
            Some(Some(Err(e))) => AttemptResult {
                kind: e.kind,
                raw: None,
                detail: Some(error_chain(&*e.source)),
            },
            Some(Some(Ok(raw))) => AttemptResult {
                kind: OutcomeKind::from_status(raw.status),
                raw: Some(raw),
                detail: None,
            },
        };
        let status = result.raw.as_ref().map(|r| r.status);
        span.record("outcome", result.kind.as_str());
        span.record("elapsed_ms", elapsed.as_millis() as u64);
        if let Some(s) = status {
            span.record("http.response.status_code", s.as_u16());
        }
        span.in_scope(|| {
            tracing::debug!(
                retry_id = request_id,
                attempt = number,
                node = %node.addr,
                index = request.index().unwrap_or(""),
                outcome = result.kind.as_str(),
                status = status.map(|s| s.as_u16()),
                elapsed_ms = elapsed.as_millis() as u64,
                "attempt finished"
            )
        });
        self.observer.attempt_finished(&AttemptEvent {
            method: &request.method,
            path: &request.path,
            node: node.addr.as_str(),
            attempt: number,
            outcome: result.kind,
            status,
            elapsed,
        });
        (result, elapsed)
    }

    /// Whether and after how long the failed attempt `number` is retried. Asks, in order:
    /// the retry policy (within the class rule's limit, or `max_retries`), the breaker (an
    /// open one refuses now rather than after a pointless backoff), the delay (Retry-After,
    /// else the class rule's or the client's backoff, stretched by the adaptive jitter),
    /// the deadline (a backoff that would end after it is not started), and the retry
    /// budget — so a retry the deadline forbids never spends budget. `Err` says why not,
    /// with a note for the error message.
    #[allow(clippy::too_many_arguments)]
    fn plan_retry(
        &self,
        request: &Request,
        request_id: u64,
        node: &PoolNode,
        result: &AttemptResult,
        number: u32,
        deadline: Option<Instant>,
        plan: &mut RetryState,
    ) -> Result<Duration, (NoRetry, Option<String>)> {
        let status = result.raw.as_ref().map(|r| r.status);
        let retries_done = number - 1;
        let class_done = plan
            .class_retries
            .iter()
            .find(|(k, _)| *k == result.kind)
            .map_or(0, |(_, n)| *n);
        let (done, limit) = match self.class_backoff.rule_for(result.kind) {
            Some(r) => (class_done, r.max_retries),
            None => (retries_done, self.retry.max_retries),
        };
        self.retry
            .decide_within(result.kind, status, plan.idempotent, done, limit)
            .map_err(|why| (why, None))?;
        let now = Instant::now();
        let breaker_state = match &self.breaker {
            Some(b) => {
                let (state, change) = b.state(now);
                self.breaker_changed(change);
                state
            }
            None => BreakerState::Closed,
        };
        if breaker_state == BreakerState::Open {
            self.retry_denied(request, request_id, node, result, DenyReason::Breaker);
            return Err((NoRetry::Exhausted, Some(BREAKER_NOTE.to_string())));
        }
        let hint = self.retry.server_hint(
            status,
            result.raw.as_ref().map(|r| &r.headers),
            (self.wall_clock)(),
        );
        let (delay, multiplier) = match hint {
            Some(h) => (h, 1.0),
            None => {
                let base = {
                    let mut rng = lock(&self.rng);
                    match self
                        .class_backoff
                        .delay(result.kind, class_done + 1, &mut rng)
                    {
                        Some(d) => d,
                        None => self.backoff.delay(number, plan.prev_delay, &mut rng),
                    }
                };
                let m = self
                    .retry_counter
                    .multiplier(now, breaker_state == BreakerState::Closed);
                (crate::policy::load::scale(base, m), m)
            }
        };
        if let Some(d) = deadline {
            if now.checked_add(delay).is_none_or(|end| end >= d) {
                return Err((
                    NoRetry::Exhausted,
                    Some(format!(
                        "not retried: the next backoff ({}) would end after the deadline",
                        crate::clock::duration::format_duration(delay)
                    )),
                ));
            }
        }
        if let Some(budget) = &self.budget {
            if !budget.withdraw(now) {
                self.retry_denied(request, request_id, node, result, DenyReason::Budget);
                let cfg = budget.config();
                return Err((
                    NoRetry::Exhausted,
                    Some(format!(
                        "not retried: the client's retry budget is exhausted (retries may add {}% to the requests of the last {}, plus {}/s) — the cluster is failing many requests",
                        (cfg.ratio * 100.0).round(),
                        crate::clock::duration::format_duration(cfg.window),
                        cfg.min_per_sec
                    )),
                ));
            }
        }
        self.retry_counter.record_retry(now);
        match plan
            .class_retries
            .iter_mut()
            .find(|(k, _)| *k == result.kind)
        {
            Some((_, n)) => *n += 1,
            None => plan.class_retries.push((result.kind, 1)),
        }
        self.observer.retry_scheduled(&RetryEvent {
            method: &request.method,
            node: node.addr.as_str(),
            attempt: number,
            outcome: result.kind,
            delay,
            jitter_multiplier: multiplier,
        });
        plan.prev_delay = delay;
        if !delay.is_zero() {
            tracing::debug!(
                retry_id = request_id,
                attempt = number,
                node = %node.addr,
                index = request.index().unwrap_or(""),
                class = result.kind.as_str(),
                backoff_ms = delay.as_millis() as u64,
                jitter_multiplier = multiplier,
                "backing off before retry"
            );
        }
        Ok(delay)
    }

    fn retry_denied(
        &self,
        request: &Request,
        request_id: u64,
        node: &PoolNode,
        last: &AttemptResult,
        reason: DenyReason,
    ) {
        tracing::debug!(
            retry_id = request_id,
            node = %node.addr,
            index = request.index().unwrap_or(""),
            outcome = last.kind.as_str(),
            reason = reason.as_str(),
            "retry not made"
        );
        self.observer.retry_denied(&RetryDeniedEvent {
            method: &request.method,
            outcome: last.kind,
            reason,
        });
    }

    /// Logs and reports a cluster breaker transition.
    fn breaker_changed(&self, change: Option<Change>) {
        let Some(c) = change else { return };
        if c.to == BreakerState::Open {
            tracing::warn!(
                breaker.scope = "cluster",
                from = c.from.as_str(),
                to = c.to.as_str(),
                reason = %c.reason,
                "circuit breaker open"
            );
        } else {
            tracing::info!(
                breaker.scope = "cluster",
                from = c.from.as_str(),
                to = c.to.as_str(),
                reason = %c.reason,
                "circuit breaker {}",
                c.to.as_str()
            );
        }
        self.observer.breaker_transition(&BreakerEvent {
            scope: "cluster",
            from: c.from,
            to: c.to,
            reason: &c.reason,
        });
    }

    /// Applies an attempt's outcome to its node: connectivity failures mark it dead (and
    /// drop its pooled connections), `node_gateway_failures_to_eject` consecutive gateway
    /// errors mark it dead, other answers mark it alive, cancellation changes nothing.
    fn update_node(self: &Arc<Self>, node: &Arc<PoolNode>, result: &AttemptResult) {
        if result.kind.marks_node_dead() {
            // Never reuse a connection that timed out or broke: the retry gets a fresh one.
            self.connector.reset(&node.addr);
            let reason = result.detail.as_deref().unwrap_or(result.kind.as_str());
            let t = self.pool.mark_failed(node, Instant::now(), reason);
            if t == Transition::Died {
                self.node_died(node, reason);
            }
        } else if result.kind == OutcomeKind::Gateway {
            let status = result
                .raw
                .as_ref()
                .map_or_else(|| "gateway error".to_string(), |r| r.status.to_string());
            match self
                .pool
                .mark_gateway(node, self.gateway_eject, Instant::now(), &status)
            {
                Transition::Died => {
                    let reason = node.health().last_error.unwrap_or(status);
                    self.node_died(node, &reason);
                }
                Transition::Revived => self.node_revived(node),
                _ => {}
            }
        } else if result.kind.node_answered() {
            // Only a 401 on a user request says something about the node's view of our
            // credentials. A 403 is about one action or index (the same user may read one
            // index and not another), and a 403 cluster block means the credentials were
            // accepted: neither is recorded on the node. Health checks, which need no
            // privilege beyond logging in, record 403s themselves.
            let auth = result
                .raw
                .as_ref()
                .map(|r| r.status.as_u16())
                .filter(|s| *s == 401);
            if self.pool.mark_answered(node, auth) == Transition::Revived {
                self.node_revived(node);
            }
        }
    }

    fn node_died(self: &Arc<Self>, node: &Arc<PoolNode>, reason: &str) {
        self.observer.node_transition(&NodeEvent {
            node: node.addr.as_str(),
            alive: false,
            failures: node.health().failures,
            reason,
        });
        if self.resurrection_timers {
            crate::resurrection::ensure_timer(self, node);
        }
        crate::discovery::node_died(self);
    }

    fn node_revived(&self, node: &PoolNode) {
        self.observer.node_transition(&NodeEvent {
            node: node.addr.as_str(),
            alive: true,
            failures: 0,
            reason: "answered a request",
        });
    }
}

/// The note of a retry refused because the cluster breaker is open.
const BREAKER_NOTE: &str =
    "not retried: the cluster circuit breaker is open (most recent attempts failed)";

/// The error of a request the cluster breaker refused before anything was sent.
fn circuit_open_error(request: &Request, reason: &str, retry_in: Duration) -> Error {
    let when = if retry_in.is_zero() {
        "probes are in flight".to_string()
    } else {
        format!(
            "the next probe may go in {}",
            crate::clock::duration::format_duration(retry_in)
        )
    };
    Error::new(
        ErrorKind::CircuitOpen,
        format!(
            "the cluster circuit breaker is open ({reason}); {} {} was refused without being sent — {when}",
            request.method, request.path
        ),
    )
}

/// Renders an error and its sources on one line.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// Percent-encodes query pairs.
fn encode_query(pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish()
}

/// Whether a response is a 403 `cluster_block_exception`.
pub(crate) fn is_cluster_block(status: u16, body: &[u8]) -> bool {
    status == 403 && error_reason(body).is_some_and(|r| r.contains("cluster_block_exception"))
}

/// The `error.reason` (or `error.type`) of an OpenSearch error body, shortened.
fn error_reason(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let err = v.get("error")?;
    let text = match err {
        serde_json::Value::String(s) => s.clone(),
        _ => {
            let ty = err.get("type").and_then(|t| t.as_str()).unwrap_or("");
            let reason = err.get("reason").and_then(|t| t.as_str()).unwrap_or("");
            match (ty.is_empty(), reason.is_empty()) {
                (false, false) => format!("{ty}: {reason}"),
                (false, true) => ty.to_string(),
                (true, false) => reason.to_string(),
                (true, true) => return None,
            }
        }
    };
    let mut t: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        t.push('…');
    }
    Some(t)
}

/// Turns the last attempt into the error the caller sees, with a message that says what
/// happened and what to do.
fn final_error(
    request: &Request,
    node: &PoolNode,
    result: AttemptResult,
    attempts: Vec<Attempt>,
    why: NoRetry,
    note: Option<String>,
) -> Error {
    let n = attempts.len();
    let what = format!("{} {}", request.method, request.path);
    let suffix = match (why, &note) {
        (_, Some(note)) => format!("; {note}"),
        (NoRetry::NotIdempotent, None) => format!(
            "; not retried because {what} may have been processed and is not idempotent (mark it with Request::idempotent(true) if it is safe to repeat)"
        ),
        (NoRetry::Exhausted, None) if n > 1 => format!("; gave up after {n} attempts"),
        _ => String::new(),
    };
    let (kind, message) = match (&result.raw, result.kind) {
        (Some(raw), OutcomeKind::Auth) => {
            let s = raw.status.as_u16();
            let reason = error_reason(&raw.body);
            if s == 401 {
                (ErrorKind::Auth, format!(
                    "node {} rejected the credentials (401) for {what} — check the username/password or token; the node is reachable and was not marked dead",
                    node.addr
                ))
            } else if is_cluster_block(s, &raw.body) {
                // The credentials were accepted; the cluster refuses writes. Not an auth
                // problem for the operator to fix in the client's configuration.
                (ErrorKind::Status, format!(
                    "node {} refused {what} because of a cluster block (403: {}) — the cluster or index is read-only or blocked, e.g. by a full disk; the node is reachable and was not marked dead",
                    node.addr,
                    reason.unwrap_or_default()
                ))
            } else {
                (ErrorKind::Auth, format!(
                    "node {} denied permission (403) for {what}{} — the user lacks a privilege for this action; the node is reachable and was not marked dead",
                    node.addr,
                    reason.map(|r| format!(": {r}")).unwrap_or_default()
                ))
            }
        }
        (Some(raw), OutcomeKind::Throttled) => (
            ErrorKind::Throttled,
            format!(
                "node {} is throttling requests (429) for {what}{} — reduce the request rate or concurrency",
                node.addr,
                error_reason(&raw.body).map(|r| format!(": {r}")).unwrap_or_default()
            ),
        ),
        (Some(raw), _) => (
            ErrorKind::Status,
            format!(
                "node {} answered {} for {what}{}",
                node.addr,
                raw.status,
                error_reason(&raw.body).map(|r| format!(": {r}")).unwrap_or_default()
            ),
        ),
        (None, OutcomeKind::TooLarge) => (
            ErrorKind::ResponseTooLarge,
            format!(
                "node {} sent too large a response for {what} ({}) — ask for less (size, _source filtering, search_after or scroll) or raise ClientBuilder::max_response_bytes; the node was not marked dead",
                node.addr,
                result.detail.clone().unwrap_or_default()
            ),
        ),
        (None, kind) => {
            let detail = result.detail.clone().unwrap_or_default();
            let advice = match kind {
                OutcomeKind::Connect => "check that the cluster is running and the URLs are right",
                OutcomeKind::Timeout => "the node may be overloaded or paused; raise the attempt timeout if the request is legitimately slow",
                _ => "the connection broke mid-exchange; check the node's logs",
            };
            (
                ErrorKind::NoNodeReachable,
                format!(
                    "no node reachable for {what}: last attempt to {} failed ({kind}: {detail}) — {advice}",
                    node.addr
                ),
            )
        }
    };
    let mut err = Error::new(kind, format!("{message}{suffix}")).with_attempts(attempts);
    if let Some(raw) = result.raw {
        err = err.with_response(Response {
            status: raw.status,
            headers: raw.headers,
            body: raw.body,
            node: node.addr.shared(),
            attempts: Vec::new(),
        });
    }
    err
}

impl Client {
    /// Convenience: `GET path`.
    pub async fn get(&self, path: &str) -> Result<Response, Error> {
        self.send(Request::new(Method::GET, path)).await
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
    /// `cores` cyclically (0 = unknown), weight the round-robin wheel. Does no I/O.
    #[doc(hidden)]
    pub fn __bench_client(n_nodes: usize, cores: &[u32]) -> Client {
        let urls = (0..n_nodes).map(|i| format!("http://127.0.0.1:{}", 20000 + i));
        let client = match Client::builder()
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
                Arc::new(PoolNode::new(n.addr.clone(), String::new(), true, c))
            })
            .collect();
        client
            .inner
            .pool
            .replace(crate::nodes::pool::Topology::new(nodes));
        client
    }
}
