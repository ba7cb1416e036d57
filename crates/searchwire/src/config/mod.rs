//! The client builder: validated configuration. Every mistake is an error at
//! [`ClientBuilder::build`], never a surprise at the first request. The setters are here;
//! the checks `build` runs are in `validate`.

mod compression;
mod read_path;
mod selection;
mod validate;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::duration::parse_duration;
use crate::defaults;
use crate::http::addr::Credentials;
use crate::message::error::Error;
use crate::observe::Observer;
use crate::policy::backoff::Backoff;
use crate::policy::breaker::BreakerConfig;
use crate::policy::budget::RetryBudget;
use crate::policy::class_backoff::ClassBackoff;
use crate::policy::load::AdaptiveJitter;
use crate::policy::retry::RetryPolicy;
use crate::policy::schedule::ResurrectionConfig;

#[cfg(test)]
/// Reads the attempt-timeout override from the value of `SEARCHWIRE_REQUEST_TIMEOUT` (the
/// deprecated name of `SEARCHWIRE_ATTEMPT_TIMEOUT`).
///
/// Returns `Ok(None)` when unset or empty (no override), `Ok(Some(None))` for `0`
/// (per-attempt timeout disabled), `Ok(Some(Some(d)))` otherwise. An unparseable value is
/// an error naming the variable and the value — never silently ignored.
pub(crate) fn timeout_override(value: Option<&str>) -> Result<Option<Option<Duration>>, Error> {
    timeout_override_from(defaults::REQUEST_TIMEOUT_ENV, value)
}

/// [`timeout_override`] for the environment variable `name` (named in the error).
pub(crate) fn timeout_override_from(
    name: &str,
    value: Option<&str>,
) -> Result<Option<Option<Duration>>, Error> {
    let Some(v) = value else { return Ok(None) };
    if v.trim().is_empty() {
        return Ok(None);
    }
    match parse_duration(v) {
        Ok(d) if d.is_zero() => Ok(Some(None)),
        Ok(d) => Ok(Some(Some(d))),
        Err(e) => Err(Error::config(format!(
            "environment variable {name} has an invalid value: {e}"
        ))),
    }
}

/// Builds a [`Client`](crate::Client). Start with [`Client::builder`](crate::Client::builder).
pub struct ClientBuilder {
    pub(crate) nodes: Vec<String>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) ca_pem: Vec<Vec<u8>>,
    pub(crate) client_identity: Option<crate::http::connector::ClientIdentityPem>,
    pub(crate) native_roots: bool,
    pub(crate) retry: RetryPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) deadline: Option<Duration>,
    pub(crate) pool_idle_timeout: Duration,
    pub(crate) pool_max_idle_per_node: usize,
    pub(crate) max_response_bytes: usize,
    pub(crate) resurrection: ResurrectionConfig,
    pub(crate) server_cores: u32,
    pub(crate) seed: Option<u64>,
    pub(crate) read_env: bool,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    pub(crate) resurrection_timers: bool,
    pub(crate) health_timeout: Duration,
    pub(crate) reprobe: crate::nodes::capability::ReprobePolicy,
    pub(crate) health_refresh: bool,
    pub(crate) health_modifier: Option<RequestModifier>,
    pub(crate) discovery: DiscoveryConfig,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) class_backoff: ClassBackoff,
    pub(crate) adaptive_jitter: AdaptiveJitter,
    pub(crate) breaker: Option<BreakerConfig>,
    pub(crate) gateway_eject: u32,
    pub(crate) metrics: bool,
    pub(crate) hedging: Option<crate::policy::hedge::Hedging>,
    pub(crate) adaptive_concurrency: Option<crate::policy::limit::AdaptiveConcurrency>,
    #[cfg(feature = "aws-sigv4")]
    pub(crate) aws_sigv4: Option<crate::http::sigv4::AwsSigV4>,
    pub(crate) selection: crate::nodes::choice::Selection,
    pub(crate) selection_decay: Duration,
    /// Gzip request bodies of at least this many bytes, and ask for gzip answers (none: off).
    pub(crate) compress_min_bytes: Option<usize>,
}

impl Default for ClientBuilder {
    fn default() -> ClientBuilder {
        ClientBuilder {
            nodes: Vec::new(),
            credentials: None,
            headers: Vec::new(),
            ca_pem: Vec::new(),
            client_identity: None,
            native_roots: true,
            retry: RetryPolicy::default(),
            backoff: Backoff::default(),
            attempt_timeout: Some(defaults::ATTEMPT_TIMEOUT),
            connect_timeout: defaults::CONNECT_TIMEOUT,
            deadline: None,
            pool_idle_timeout: defaults::POOL_IDLE_TIMEOUT,
            pool_max_idle_per_node: defaults::POOL_MAX_IDLE_PER_NODE,
            max_response_bytes: defaults::MAX_RESPONSE_BYTES,
            resurrection: ResurrectionConfig::default(),
            server_cores: 0,
            seed: None,
            read_env: true,
            observer: None,
            resurrection_timers: true,
            health_timeout: defaults::HEALTH_CHECK_TIMEOUT,
            reprobe: crate::nodes::capability::ReprobePolicy::default(),
            health_refresh: defaults::HEALTH_REFRESH,
            health_modifier: None,
            discovery: DiscoveryConfig::default(),
            budget: Some(RetryBudget::default()),
            class_backoff: ClassBackoff::new(),
            adaptive_jitter: AdaptiveJitter::default(),
            breaker: Some(BreakerConfig::default()),
            gateway_eject: defaults::NODE_GATEWAY_FAILURES_TO_EJECT,
            metrics: true,
            hedging: None,
            adaptive_concurrency: None,
            #[cfg(feature = "aws-sigv4")]
            aws_sigv4: None,
            selection: crate::nodes::choice::Selection::default(),
            selection_decay: defaults::SELECTION_DECAY,
            compress_min_bytes: None,
        }
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| crate::http::addr::redact_userinfo(n))
            .collect();
        f.debug_struct("ClientBuilder")
            .field("nodes", &nodes)
            .field("credentials", &self.credentials)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("retry", &self.retry)
            .field("backoff", &self.backoff)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("deadline", &self.deadline)
            .field(
                "health_check_request_modifier",
                &self.health_modifier.is_some(),
            )
            .field("retry_budget", &self.budget)
            .field("class_backoff", &self.class_backoff)
            .field("adaptive_jitter", &self.adaptive_jitter)
            .field("circuit_breaker", &self.breaker)
            .field("gateway_eject", &self.gateway_eject)
            .field("hedging", &self.hedging)
            .field("adaptive_concurrency", &self.adaptive_concurrency)
            .field("aws_sigv4", &self.aws_sigv4_shown())
            .field("compress_min_bytes", &self.compress_min_bytes)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Signs every request (retries, health checks, probes and discovery too) with AWS
    /// Signature Version 4, for Amazon OpenSearch Service (`es`) or OpenSearch Serverless
    /// (`aoss`). Replaces basic/bearer credentials (both together fail `build()`).
    /// Feature `aws-sigv4`.
    #[cfg(feature = "aws-sigv4")]
    pub fn aws_sigv4(mut self, signing: crate::http::sigv4::AwsSigV4) -> ClientBuilder {
        self.aws_sigv4 = Some(signing);
        self
    }

    /// What `Debug` shows of the SigV4 settings: region and service, never a secret.
    fn aws_sigv4_shown(&self) -> Option<String> {
        #[cfg(feature = "aws-sigv4")]
        {
            self.aws_sigv4
                .as_ref()
                .map(|s| format!("{}:{}", s.region(), s.service()))
        }
        #[cfg(not(feature = "aws-sigv4"))]
        None
    }

    /// Adds a seed node URL: `http(s)://[user:pass@]host[:port][/prefix]`.
    pub fn node(mut self, url: impl Into<String>) -> ClientBuilder {
        self.nodes.push(url.into());
        self
    }

    /// Adds several seed node URLs.
    pub fn nodes<I, S>(mut self, urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// HTTP basic authentication on every request, including health checks.
    pub fn basic_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> ClientBuilder {
        self.credentials = Some(Credentials::Basic {
            username: username.into(),
            password: password.into(),
        });
        self
    }

    /// `Authorization: Bearer <token>` on every request, including health checks.
    pub fn bearer_auth(mut self, token: impl Into<String>) -> ClientBuilder {
        self.credentials = Some(Credentials::Bearer(token.into()));
        self
    }

    /// A header sent with every request (validated at `build`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> ClientBuilder {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Trusts the CA certificate(s) in this PEM data for https nodes, in addition to the
    /// operating system's roots.
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.ca_pem.push(pem.into());
        self
    }

    /// Mutual TLS: presents this client certificate (PEM, optionally followed by its
    /// intermediates) and its private key (PEM: PKCS#8, PKCS#1 or SEC1) to https nodes
    /// that ask for one. Every request uses it, background ones (health checks, probes,
    /// discovery) included. `build()` fails when either PEM cannot be parsed or the two do
    /// not belong together. The key is never shown in `Debug` or errors.
    pub fn client_certificate_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> ClientBuilder {
        self.client_identity = Some(crate::http::connector::ClientIdentityPem {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }

    /// Whether to trust the operating system's root certificates (default: yes).
    pub fn native_roots(mut self, yes: bool) -> ClientBuilder {
        self.native_roots = yes;
        self
    }

    /// Retries after the first attempt; 0 disables retries.
    pub fn max_retries(mut self, n: u32) -> ClientBuilder {
        self.retry.max_retries = n;
        self
    }

    /// HTTP statuses to retry (default 502, 503, 504, 429).
    pub fn retry_on_status(mut self, statuses: impl IntoIterator<Item = u16>) -> ClientBuilder {
        self.retry.retry_on_status = statuses.into_iter().collect();
        self
    }

    /// Whether to retry connect failures, resets and attempt timeouts (default: yes).
    pub fn retry_on_connection_errors(mut self, yes: bool) -> ClientBuilder {
        self.retry.retry_on_connection_errors = yes;
        self
    }

    /// Longest `Retry-After` honoured (default 30 s).
    pub fn retry_after_cap(mut self, cap: Duration) -> ClientBuilder {
        self.retry.retry_after_cap = cap;
        self
    }

    /// The backoff between retries (default: exponential, full jitter, 100 ms base, 10 s cap).
    pub fn backoff(mut self, backoff: Backoff) -> ClientBuilder {
        self.backoff = backoff;
        self
    }

    /// The attempt timeout (default 30 s): bounds each round trip including reading the
    /// body; every retry gets a fresh one. The `SEARCHWIRE_ATTEMPT_TIMEOUT` environment
    /// variable overrides it (`SEARCHWIRE_REQUEST_TIMEOUT`, its deprecated old name, too,
    /// and then opensearch-go's `OPENSEARCH_GO_REQUEST_TIMEOUT`, read as an alias).
    pub fn attempt_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// Disables the per-attempt timeout (not recommended: an attempt may then hang until
    /// the deadline, or forever without one).
    pub fn no_attempt_timeout(mut self) -> ClientBuilder {
        self.attempt_timeout = None;
        self
    }

    /// TCP/TLS connect timeout (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// The default timeout of every request: its overall time budget across every attempt
    /// and backoff, measured from [`Client::send`](crate::Client::send) (default: none). A
    /// request's own [`Request::timeout`](crate::Request::timeout) or
    /// [`Request::deadline`](crate::Request::deadline) takes precedence.
    pub fn timeout(mut self, budget: Duration) -> ClientBuilder {
        self.deadline = Some(budget);
        self
    }

    /// The old name of [`timeout`](Self::timeout): a *deadline* is an instant, and this
    /// takes a duration.
    #[deprecated(since = "0.2.0", note = "renamed to `ClientBuilder::timeout`")]
    pub fn deadline(self, budget: Duration) -> ClientBuilder {
        self.timeout(budget)
    }

    /// Idle keep-alive connections are closed after this long (default
    /// [`POOL_IDLE_TIMEOUT`](crate::defaults::POOL_IDLE_TIMEOUT), 50 s): a connection idle
    /// for between ¾ of it and all of it is closed, never one idle for longer. Zero keeps
    /// no connection idle (every request opens its own).
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.pool_idle_timeout = timeout;
        self
    }

    /// Largest response body the client reads (default 256 MiB). A larger response fails
    /// the request with [`ErrorKind::ResponseTooLarge`](crate::ErrorKind::ResponseTooLarge)
    /// and is not retried; the node is not marked dead.
    pub fn max_response_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_response_bytes = bytes;
        self
    }

    /// Idle connections kept per node (default 64).
    pub fn pool_max_idle_per_node(mut self, n: usize) -> ClientBuilder {
        self.pool_max_idle_per_node = n;
        self
    }

    /// The dead-node resurrection schedule.
    pub fn resurrection(mut self, cfg: ResurrectionConfig) -> ClientBuilder {
        self.resurrection = cfg;
        self
    }

    /// Server core count for the capacity model, overriding what discovery reports.
    pub fn server_cores(mut self, cores: u32) -> ClientBuilder {
        self.server_cores = cores;
        self
    }

    /// Seeds the client's random source (backoff and resurrection jitter), so runs are
    /// reproducible. By default the seed is random.
    pub fn seed(mut self, seed: u64) -> ClientBuilder {
        self.seed = Some(seed);
        self
    }

    /// Whether to read the attempt-timeout environment variables at build (default: yes):
    /// `SEARCHWIRE_ATTEMPT_TIMEOUT`, `SEARCHWIRE_REQUEST_TIMEOUT`, `OPENSEARCH_GO_REQUEST_TIMEOUT`.
    pub fn read_environment(mut self, yes: bool) -> ClientBuilder {
        self.read_env = yes;
        self
    }

    /// Receives attempt, request and node events (metrics, tests).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> ClientBuilder {
        self.observer = Some(observer);
        self
    }

    /// Whether each dead node gets a background resurrection timer (default: yes). With
    /// timers off, dead nodes come back only when every node is dead and a request tries
    /// them.
    pub fn resurrection_timers(mut self, yes: bool) -> ClientBuilder {
        self.resurrection_timers = yes;
        self
    }

    /// Timeout of health-check requests (default 5 s).
    pub fn health_check_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.health_timeout = timeout;
        self
    }

    /// How long a node whose credentials lack `cluster:monitor/health` (its probe of
    /// `/_cluster/health?local=true` answered 401/403: capability *Unavailable*) is
    /// health-checked with `GET /` before it is probed again (default 4 h, ± the
    /// [`health_check_jitter`](Self::health_check_jitter)). `Duration::ZERO` means the
    /// default.
    ///
    /// The reference's `MaxRetryClusterHealth` maps as: `0` → `Duration::ZERO` (the
    /// default), a positive value → that duration, a negative value →
    /// [`no_cluster_health_reprobe`](Self::no_cluster_health_reprobe).
    pub fn cluster_health_reprobe_after(mut self, after: Duration) -> ClientBuilder {
        self.reprobe.after = Some(if after.is_zero() {
            defaults::CLUSTER_HEALTH_REPROBE_AFTER
        } else {
            after
        });
        self
    }

    /// Never probes an Unavailable node again: once a node denied
    /// `/_cluster/health?local=true`, it is health-checked with `GET /` for the life of the
    /// client. Nodes that were never probed (Pending) are still probed once. This is the
    /// reference's negative `MaxRetryClusterHealth`.
    pub fn no_cluster_health_reprobe(mut self) -> ClientBuilder {
        self.reprobe.after = None;
        self
    }

    /// The old name of [`no_cluster_health_reprobe`](Self::no_cluster_health_reprobe)
    /// (features are switched off with `no_…`).
    #[deprecated(
        since = "0.2.0",
        note = "renamed to `ClientBuilder::no_cluster_health_reprobe`"
    )]
    pub fn disable_cluster_health_reprobe(self) -> ClientBuilder {
        self.no_cluster_health_reprobe()
    }

    /// Relative jitter of the cluster-health re-probe interval, from 0 (none) to below 1
    /// (default 0.1: ± 10 %), so clients started together do not re-probe together.
    pub fn health_check_jitter(mut self, fraction: f64) -> ClientBuilder {
        self.reprobe.jitter = fraction;
        self
    }

    /// Whether to refresh the stored cluster health of every live node that serves
    /// `/_cluster/health?local=true` periodically (default: yes). The interval is
    /// `clamp(live × clients_per_server / health_check_rate, 5 s, 5 min)`, recomputed after
    /// each cycle; single-node clusters are not refreshed. The same cycle gives live nodes
    /// that were never health-checked their `GET /` and capability probe. It never marks a
    /// node dead (user requests and resurrection checks decide that).
    pub fn health_refresh(mut self, yes: bool) -> ClientBuilder {
        self.health_refresh = yes;
        self
    }

    /// A callback applied to every background request — health checks (`GET /` and
    /// `/_cluster/health?local=true`), capability probes, the periodic refresh and discovery
    /// — after the client's default headers and credentials were set: for custom auth
    /// headers or request signing. The reference's `HealthCheckRequestModifier`.
    ///
    /// ```
    /// let client = searchwire::Client::builder()
    ///     .node("http://localhost:9200")
    ///     .health_check_request_modifier(|req| {
    ///         req.headers_mut()
    ///             .insert("x-custom-auth", http::HeaderValue::from_static("my-token"));
    ///     })
    ///     .build();
    /// # let _ = client;
    /// ```
    pub fn health_check_request_modifier(
        mut self,
        modifier: impl Fn(&mut http::Request<()>) + Send + Sync + 'static,
    ) -> ClientBuilder {
        self.health_modifier = Some(Arc::new(modifier));
        self
    }

    /// Discovers the cluster's nodes (`GET /_nodes/http,os`) once, right after the client
    /// is built (default: no). Discovery adds the nodes the cluster reports, removes the
    /// ones it no longer reports (never the seeds given with [`node`](Self::node)), skips
    /// dedicated cluster-manager nodes, and weights nodes by their allocated processors.
    /// Off by default because behind a load balancer, a proxy or a container network the
    /// addresses nodes publish are often not reachable from the client.
    pub fn discover_on_start(mut self, yes: bool) -> ClientBuilder {
        self.discovery.on_start = yes;
        self
    }

    /// Re-discovers the cluster's nodes every `interval` (default: never). See
    /// [`discover_on_start`](Self::discover_on_start).
    pub fn discover_interval(mut self, interval: Duration) -> ClientBuilder {
        self.discovery.interval = Some(interval);
        self
    }

    /// Timeout of one discovery request (default 5 s); discovery tries the next node when
    /// one does not answer in time.
    pub fn discovery_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.discovery.timeout = timeout;
        self
    }

    /// Most nodes one discovery round accepts (default 1,000). A reply listing more keeps
    /// the nodes already in the pool first, ignores the rest and logs a warning; the
    /// round's new nodes are health-checked at most 8 at a time.
    pub fn discover_max_nodes(mut self, max: usize) -> ClientBuilder {
        self.discovery.max_nodes = max;
        self
    }

    /// Re-discovers the cluster when a node is marked dead, at most once every 10 s
    /// (default: no), so a cluster that replaced a node is followed without waiting for the
    /// next [`discover_interval`](Self::discover_interval).
    pub fn rediscover_on_failure(mut self, yes: bool) -> ClientBuilder {
        self.discovery.on_failure = yes;
        self
    }

    /// The client's retry budget (default: retries add at most 20 % of the requests, plus
    /// 10 per second, over 10 s; see [`RetryBudget`](crate::RetryBudget) and `docs/architecture/transport.md`).
    pub fn retry_budget(mut self, budget: RetryBudget) -> ClientBuilder {
        self.budget = Some(budget);
        self
    }

    /// Switches the retry budget off: every retry the retry policy allows is made.
    pub fn no_retry_budget(mut self) -> ClientBuilder {
        self.budget = None;
        self
    }

    /// Backoff and retry limits per outcome kind (default: none; every kind uses
    /// [`backoff`](Self::backoff) and [`max_retries`](Self::max_retries)). A rule's retry
    /// limit replaces `max_retries` for its kind. [`ClassBackoff::reference`] is the
    /// reference table. See [`ClassBackoff`](crate::ClassBackoff).
    pub fn class_backoff(mut self, rules: ClassBackoff) -> ClientBuilder {
        self.class_backoff = rules;
        self
    }

    /// The adaptive jitter table (default: on, the reference's table; see
    /// [`AdaptiveJitter`](crate::AdaptiveJitter)). [`AdaptiveJitter::off`] keeps every backoff as computed.
    pub fn adaptive_jitter(mut self, table: AdaptiveJitter) -> ClientBuilder {
        self.adaptive_jitter = table;
        self
    }

    /// Switches the adaptive jitter off: every backoff is waited as the backoff policy
    /// computes it, however often this client retries (the same as
    /// `adaptive_jitter(AdaptiveJitter::off())`). Use it when your own backoff function must
    /// be followed exactly.
    pub fn no_adaptive_jitter(self) -> ClientBuilder {
        self.adaptive_jitter(AdaptiveJitter::off())
    }

    /// The cluster circuit breaker (default: on; see [`BreakerConfig`](crate::BreakerConfig)).
    pub fn circuit_breaker(mut self, cfg: BreakerConfig) -> ClientBuilder {
        self.breaker = Some(cfg);
        self
    }

    /// Switches the cluster circuit breaker off.
    pub fn no_circuit_breaker(mut self) -> ClientBuilder {
        self.breaker = None;
        self
    }

    /// Consecutive 502/503/504 answers after which a node is ejected: marked dead and
    /// readmitted by its resurrection check (default 5; 0 never ejects for gateway errors).
    /// Connectivity failures eject a node after one failure regardless.
    pub fn node_gateway_failures_to_eject(mut self, n: u32) -> ClientBuilder {
        self.gateway_eject = n;
        self
    }

    /// Whether this client records the built-in metrics (default: yes, when the `metrics`
    /// feature is on). See `docs/metrics.md`.
    pub fn metrics(mut self, yes: bool) -> ClientBuilder {
        self.metrics = yes;
        self
    }
}

/// A user callback applied to every background request (health checks, probes, refresh,
/// discovery) after the client's headers and credentials are set.
pub(crate) type RequestModifier =
    std::sync::Arc<dyn Fn(&mut http::Request<()>) + Send + Sync + 'static>;

/// When discovery runs (builder settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DiscoveryConfig {
    pub on_start: bool,
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub on_failure: bool,
    pub max_nodes: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> DiscoveryConfig {
        DiscoveryConfig {
            on_start: false,
            interval: None,
            timeout: defaults::DISCOVERY_TIMEOUT,
            on_failure: false,
            max_nodes: defaults::DISCOVER_MAX_NODES,
        }
    }
}

impl DiscoveryConfig {
    /// Whether a background task is needed at all.
    pub(crate) fn background(&self) -> bool {
        self.on_start || self.interval.is_some() || self.on_failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_override_formats() {
        assert_eq!(timeout_override(None).unwrap(), None);
        assert_eq!(timeout_override(Some("")).unwrap(), None);
        assert_eq!(timeout_override(Some("0")).unwrap(), Some(None));
        let ms = |n| Some(Some(Duration::from_millis(n)));
        assert_eq!(timeout_override(Some("500ms")).unwrap(), ms(500));
        assert_eq!(timeout_override(Some("30s")).unwrap(), ms(30_000));
        assert_eq!(timeout_override(Some("1m")).unwrap(), ms(60_000));
        assert_eq!(timeout_override(Some("1m30s")).unwrap(), ms(90_000));
        assert_eq!(timeout_override(Some("30")).unwrap(), ms(30_000));
        assert_eq!(timeout_override(Some("1.5")).unwrap(), ms(1_500));
    }

    #[test]
    fn malformed_env_override_is_an_error_naming_variable_and_value() {
        let e = timeout_override(Some("5 minutes")).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Config);
        let m = e.to_string();
        assert!(m.contains("SEARCHWIRE_REQUEST_TIMEOUT"), "{m}");
        assert!(m.contains("5 minutes"), "{m}");
    }

    fn prepared(
        urls: &[&str],
        b: impl Fn(ClientBuilder) -> ClientBuilder,
    ) -> Result<HeaderMapAuth, String> {
        b(ClientBuilder::default().nodes(urls.iter().copied()))
            .prepare(None)
            .map(|(_, _, headers, _)| {
                headers
                    .get(http::header::AUTHORIZATION)
                    .map(|v| v.to_str().unwrap().to_string())
            })
            .map_err(|e| e.to_string())
    }
    type HeaderMapAuth = Option<String>;

    #[test]
    fn url_credentials_are_one_set_for_every_node_or_an_error() {
        // The same userinfo in every URL: sent (to every node).
        let ok = prepared(&["http://bob:pw@a:1", "http://bob:pw@b:1"], |b| b).unwrap();
        assert_eq!(ok.as_deref(), Some("Basic Ym9iOnB3"));
        // Userinfo in one URL only: an error, not a leak to the other host.
        let e = prepared(&["http://bob:hunter2@a:1", "http://b:1"], |b| b).unwrap_err();
        assert!(e.contains("http://a:1") && e.contains("http://b:1"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        // Different userinfo per URL: an error, not one of them silently ignored.
        let e = prepared(
            &["http://bob:hunter2@a:1", "http://eve:swordfish@b:1"],
            |b| b,
        )
        .unwrap_err();
        assert!(e.contains("different credentials"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains("swordfish"), "{e}");
        // Userinfo and basic_auth together: given twice.
        let e = prepared(&["http://bob:hunter2@a:1"], |b| b.basic_auth("u", "p")).unwrap_err();
        assert!(e.contains("once"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        // No userinfo: basic_auth for every node.
        let ok = prepared(&["http://a:1", "http://b:1"], |b| b.basic_auth("bob", "pw")).unwrap();
        assert_eq!(ok.as_deref(), Some("Basic Ym9iOnB3"));
    }
}
