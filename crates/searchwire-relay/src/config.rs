//! The relay's settings and their defaults (one table: [`defaults`], rendered into
//! `docs/configuration.md`).

use std::net::SocketAddr;
use std::time::Duration;

use crate::pattern::{self, Methods};
use crate::product::PresentAs;
use crate::tls_files::TlsFiles;

/// The request header that sets a bulk request's queue priority (0–255, higher first).
pub const PRIORITY_HEADER: &str = "x-searchwire-priority";

/// Default listen address: loopback only, so a relay is never an open proxy to the cluster
/// by accident (port 9280: next to OpenSearch's 9200, free in a default install).
pub const LISTEN: &str = "127.0.0.1:9280";
/// Backlog above which `/health/retry-queue` answers 503 (reference 004 ch. 5 alarms at 500).
pub const BACKLOG_THRESHOLD: u64 = 500;
/// Time the delivery loop gets to finish its cycle on SIGTERM (reference 004 ch. 5: 4 s, well
/// inside Kubernetes' default 30 s grace period).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);
/// After SIGTERM, how long the relay keeps its listener open while readiness is 503 and new
/// `_bulk` requests are answered 503 (retryable, with `Connection: close`), before it stops
/// accepting. Kubernetes removes a terminating pod from its Service's endpoints while the
/// pod is told to stop, but kube-proxy, ingress controllers and cloud load balancers notice
/// only a moment later: without this window their last connections would be refused
/// (a connect error) instead of getting an answer that says "go elsewhere".
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Largest request body: 100 MB, OpenSearch's `http.max_content_length`.
pub const MAX_BODY_BYTES: usize = 100 * 1024 * 1024;
/// Budget of the first try of a request against the cluster. Short: a client is waiting, and
/// what does not make it in time is queued durably instead.
pub const LIVE_BUDGET: Duration = Duration::from_secs(5);
/// Budget of one delivery request from the queue.
pub const DELIVERY_BUDGET: Duration = Duration::from_secs(30);
/// Messages leased per delivery cycle (one bulk request).
pub const DELIVERY_BATCH: usize = 500;
/// First reschedule delay of a message whose delivery failed; doubled per attempt.
pub const RETRY_BASE: Duration = Duration::from_secs(1);
/// Largest reschedule delay.
pub const RETRY_CAP: Duration = Duration::from_secs(60);
/// Failed deliveries before a message becomes a dead letter: with the 60 s cap, about 1.6 h of
/// an unreachable cluster (while the breaker is open nothing is tried, so nothing is counted).
pub const MAX_RETRIES: u32 = 100;
/// A client that has not sent its headers within this is disconnected.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that has not sent its whole body within this gets 408.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections served at once; more wait in the kernel's accept backlog.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a delivery holds its messages (the CLI's `--lease-timeout`): twice the delivery
/// budget, so a live relay keeps its lease and a dead one's messages (Redis) return within a
/// minute.
pub const LEASE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the delivery loop looks for due messages when idle, or at the breaker while open.
pub const IDLE_POLL: Duration = Duration::from_millis(500);
/// Bulk requests in flight at most per bulk indexer (the live one and the delivery one), the
/// bulk indexer's default: the adaptive limit (AIMD) stays at or below it and halves on 429.
pub const BULK_CONCURRENCY: usize = searchwire_bulk::defaults::MAX_CONCURRENCY;
/// How long an indexer waits for more items before it sends a partly filled batch: short,
/// because a client waits for its answer; items of concurrent requests that arrive while every
/// request slot is busy share the next `_bulk` anyway.
pub const BULK_LINGER: Duration = Duration::from_millis(2);
/// How often the TLS files are checked for changes (defined with [`TlsFiles`]).
pub use crate::tls_files::TLS_RELOAD_INTERVAL;

/// How often the queue's size and the free disk are measured.
pub const REFRESH: Duration = Duration::from_secs(1);
/// A write is refused for overload only on a measurement at most this old: a refusal on an
/// older one measures again first (one measurement at a time), so a relay whose queue just
/// drained takes writes at once instead of answering 429 until the next [`REFRESH`].
pub const FRESH_TO_REFUSE: Duration = Duration::from_millis(100);
/// `Retry-After` of a 429 for overload: long enough for the delivery loop to drain a
/// slice of the backlog, short enough that a shipper's own backoff dominates.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Default `max_queue_bytes` of the embedded queue: this share (percent) of the free space
/// of the queue directory's filesystem when the relay starts, so the queue cannot take the
/// disk from the system it runs on. Redis has no default cap: its `maxmemory` is the bound
/// and an OOM there is answered 503 (set `--max-queue-bytes` to stop earlier, with 429).
pub const DEFAULT_MAX_QUEUE_SHARE_PERCENT: u64 = 50;
/// Default free-disk floor: this share (percent) of the filesystem's size, at most
/// [`DEFAULT_MIN_FREE_DISK_CAP`]: the room redb needs for a commit (it writes new pages
/// before it frees old ones) and the system for its logs.
pub const DEFAULT_MIN_FREE_DISK_PERCENT: u64 = 5;
/// Upper bound of the default free-disk floor: 1 GiB.
pub const DEFAULT_MIN_FREE_DISK_CAP: u64 = 1 << 30;
/// The low-water mark: once at its cap, the relay takes writes again when the queue is
/// under this share (percent) of the cap.
pub const LOW_WATER_PERCENT: u64 = 90;
/// Bytes the queue stores per message besides its payload, index and error text (headers,
/// ids, times, hash; measured per backend in docs/benchmarks.md, rounded up).
pub const RECORD_OVERHEAD: u64 = 96;

fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The defaults as (setting, value, why) rows, rendered from the constants above.
pub fn defaults() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "listen",
            LISTEN.to_owned(),
            "loopback: never an open proxy by accident",
        ),
        (
            "backlog threshold",
            BACKLOG_THRESHOLD.to_string(),
            "reference 004 ch. 5 backlog alarm",
        ),
        (
            "drain timeout",
            secs(DRAIN_TIMEOUT),
            "reference 004 ch. 5: finish the retry cycle within 4 s",
        ),
        (
            "drain grace",
            secs(DRAIN_GRACE),
            "after SIGTERM: health and new _bulk answered 503 while load balancers notice",
        ),
        (
            "max body",
            format!("{} MB", MAX_BODY_BYTES / (1024 * 1024)),
            "OpenSearch http.max_content_length",
        ),
        (
            "live budget",
            secs(LIVE_BUDGET),
            "a client waits; what misses it is queued durably",
        ),
        (
            "delivery budget",
            secs(DELIVERY_BUDGET),
            "one bulk request from the queue",
        ),
        (
            "delivery batch",
            DELIVERY_BATCH.to_string(),
            "messages per delivery request",
        ),
        (
            "retry delay",
            format!("{} doubling, cap {}", secs(RETRY_BASE), secs(RETRY_CAP)),
            "a recovering cluster is not stampeded",
        ),
        (
            "max retries",
            MAX_RETRIES.to_string(),
            "about 1.6 h of failed deliveries before a dead letter",
        ),
        (
            "lease timeout",
            secs(LEASE_TIMEOUT),
            "twice the delivery budget; a dead relay's leases return within a minute",
        ),
        (
            "header read timeout",
            secs(HEADER_READ_TIMEOUT),
            "slow or idle clients are dropped",
        ),
        (
            "body read timeout",
            secs(BODY_READ_TIMEOUT),
            "a body that trickles in is refused (408)",
        ),
        (
            "max connections",
            MAX_CONNECTIONS.to_string(),
            "bounded memory and file descriptors",
        ),
        (
            "idle poll",
            secs(IDLE_POLL),
            "how soon an idle delivery loop sees due messages",
        ),
        (
            "bulk concurrency",
            BULK_CONCURRENCY.to_string(),
            "bulk requests in flight per indexer (live, delivery); adaptive below, halved on 429",
        ),
        (
            "pass-through with the relay's credentials",
            format!("{} rules", DEFAULT_PASS_THROUGH.len()),
            "reads, _refresh, index/data stream/template creation; never deletes (see DEFAULT_PASS_THROUGH)",
        ),
        (
            "bulk linger",
            secs(BULK_LINGER),
            "a partly filled batch waits this long for more items; a client is waiting",
        ),
        (
            "TLS reload interval",
            secs(TLS_RELOAD_INTERVAL),
            "a renewed certificate is served within this without a SIGHUP; three stat calls",
        ),
        (
            "max queue bytes",
            format!(
                "embedded: {}% of the free disk at start; Redis: none",
                DEFAULT_MAX_QUEUE_SHARE_PERCENT
            ),
            "the queue cannot take the disk; Redis is bounded by its maxmemory (OOM: 503)",
        ),
        (
            "min free disk",
            format!(
                "{}% of the filesystem, at most {} GiB",
                DEFAULT_MIN_FREE_DISK_PERCENT,
                DEFAULT_MIN_FREE_DISK_CAP >> 30
            ),
            "redb writes new pages before it frees old ones: a full disk stops even deliveries",
        ),
        (
            "overload Retry-After",
            secs(RETRY_AFTER),
            "429 at the high-water mark; the shipper's own backoff dominates",
        ),
        (
            "overload low-water mark",
            format!("{}% of the cap", LOW_WATER_PERCENT),
            "once at the cap, writes are taken again under it: readiness does not flap",
        ),
    ]
}

/// A Markdown table of [`defaults`].
pub fn markdown_table() -> String {
    let mut s = String::from("| Setting | Default | Why |\n|---|---|---|\n");
    for (k, v, why) in defaults() {
        s.push_str(&format!("| {k} | {v} | {why} |\n"));
    }
    s
}

/// Who may use the relay besides the health endpoints.
#[derive(Clone, Default)]
pub enum AuthConfig {
    /// Anyone who can connect (only allowed on loopback).
    #[default]
    None,
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// `Authorization: Basic ...` with these credentials.
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthConfig::None => f.write_str("None"),
            AuthConfig::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            AuthConfig::Basic { user, .. } => write!(f, "Basic({user}, <redacted>)"),
        }
    }
}

/// The pass-through routes on which the relay lends a client its own cluster credentials
/// (`--pass-through` adds to them, `--no-default-pass-through` starts from none): what log
/// shippers and clients do at start-up and in normal reading — reads (every `GET` and
/// `HEAD`; the read-only `POST`s; clearing a scroll or point in time), `_refresh`, and the
/// creation of indices, data streams and index, component and legacy templates. Nothing that
/// deletes, closes or reindexes data, changes settings or mappings of existing indices, or
/// installs lifecycle policies (an ISM/ILM policy can delete indices) or ingest pipelines (one
/// can drop or reroute documents): a client holding only the relay's token cannot do those
/// through the relay unless the operator lists them. A client that sends its own
/// `Authorization` is never lent anything: its credentials go to the cluster as they are,
/// and the cluster decides (see SECURITY.md).
pub const DEFAULT_PASS_THROUGH: &[&str] = &[
    "GET,HEAD /**",
    "POST /_search",
    "POST /{index}/_search",
    "POST /_msearch",
    "POST /{index}/_msearch",
    "POST /_count",
    "POST /{index}/_count",
    "POST /_mget",
    "POST /{index}/_mget",
    "POST /_field_caps",
    "POST /{index}/_field_caps",
    "POST /_search/scroll",
    "DELETE /_search/scroll",
    "POST /{index}/_search/point_in_time",
    "DELETE /_search/point_in_time",
    "POST /{index}/_pit",
    "DELETE /_pit",
    "POST /_refresh",
    "POST /{index}/_refresh",
    "PUT /{index}",
    "PUT /_data_stream/{name}",
    "PUT,POST /_index_template/{name}",
    "PUT,POST /_component_template/{name}",
    "PUT,POST /_template/{name}",
];

/// A pass-through allow rule: methods and a path pattern (see [`crate::pattern`]), written
/// `METHOD[,METHOD] PATTERN`, e.g. `DELETE /{index}` or `PUT,POST /_ilm/policy/{name}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassRule {
    /// The methods it allows.
    pub methods: Methods,
    /// The path pattern.
    pub pattern: String,
}

impl PassRule {
    /// Parses `METHOD[,METHOD] PATTERN`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<PassRule, String> {
        let (m, p) = s.trim().split_once(char::is_whitespace).ok_or_else(|| {
            format!("{s:?}: give METHODS PATTERN, e.g. \"DELETE /{{index}}\" or \"PUT,POST /_ilm/policy/{{name}}\"")
        })?;
        let mut methods: Option<Methods> = None;
        for name in m.split([',', '|']) {
            let one = Methods::parse(name)
                .ok_or_else(|| format!("{s:?}: {name:?} is not an HTTP method"))?;
            methods = Some(methods.map_or(one, |ms| ms | one));
        }
        let pattern = p.trim();
        if !pattern.starts_with('/') {
            return Err(format!("{s:?}: the path pattern must start with /"));
        }
        if pattern
            .split('/')
            .collect::<Vec<_>>()
            .iter()
            .rev()
            .skip(1)
            .any(|seg| *seg == "**")
        {
            return Err(format!("{s:?}: ** may only end a pattern"));
        }
        Ok(PassRule {
            methods: methods.ok_or_else(|| format!("{s:?}: no method given"))?,
            pattern: pattern.to_owned(),
        })
    }

    /// Whether the rule allows `method` on the decoded path segments `segs`.
    pub fn allows(&self, method: &http::Method, segs: &[String]) -> bool {
        self.methods.contains(method) && pattern::matches(&self.pattern, segs).is_some()
    }
}

/// [`DEFAULT_PASS_THROUGH`], parsed.
pub fn default_pass_through() -> Vec<PassRule> {
    DEFAULT_PASS_THROUGH
        .iter()
        .filter_map(|r| PassRule::parse(r).ok())
        .collect()
}

/// A per-index priority rule: indices whose name starts with `prefix` get `priority`
/// (the `X-Searchwire-Priority` header wins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityRule {
    /// Index name prefix (`*` at the end is allowed and ignored).
    pub prefix: String,
    /// 0..=255, higher first.
    pub priority: u8,
}

/// The relay's configuration: plain data with documented defaults.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Where to listen. Default [`LISTEN`].
    pub listen: SocketAddr,
    /// Authentication; required unless `listen` is a loopback address (or a client CA
    /// authenticates clients by certificate, [`TlsFiles::client_ca`]).
    pub auth: AuthConfig,
    /// TLS on the listener; required unless `listen` is a loopback address or
    /// `allow_plaintext` is set.
    pub tls: Option<TlsFiles>,
    /// Listen in plaintext on a non-loopback address (a proxy in front terminates TLS).
    pub allow_plaintext: bool,
    /// Default [`BACKLOG_THRESHOLD`].
    pub backlog_threshold: u64,
    /// Default [`DRAIN_TIMEOUT`].
    pub drain_timeout: Duration,
    /// Default [`DRAIN_GRACE`]; zero stops accepting at once.
    pub drain_grace: Duration,
    /// Default [`MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// Default [`LIVE_BUDGET`].
    pub live_budget: Duration,
    /// Default [`DELIVERY_BUDGET`].
    pub delivery_budget: Duration,
    /// Default [`DELIVERY_BATCH`].
    pub delivery_batch: usize,
    /// Default [`RETRY_BASE`].
    pub retry_base: Duration,
    /// Default [`RETRY_CAP`].
    pub retry_cap: Duration,
    /// Default [`MAX_RETRIES`].
    pub max_retries: u32,
    /// Default [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// Default [`BODY_READ_TIMEOUT`].
    pub body_read_timeout: Duration,
    /// Default [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// Default [`IDLE_POLL`].
    pub idle_poll: Duration,
    /// Per-index priorities (first match wins).
    pub priority_rules: Vec<PriorityRule>,
    /// Skip the first try: every item goes to the queue (the delivery loop sends it).
    pub queue_only: bool,
    /// Run the delivery loop (off: this relay only accepts and queues).
    pub deliver: bool,
    /// Default [`BULK_CONCURRENCY`].
    pub bulk_concurrency: usize,

    /// The product the relay presents itself as (`GET /`, `X-Elastic-Product`).
    pub present_as: PresentAs,
    /// The address the relay names as its own in `GET /_nodes` (what sniffing clients then
    /// connect to). Default: the listen address.
    pub advertise_address: Option<String>,
    /// Pass-through routes that may use the relay's own cluster credentials. Default
    /// [`DEFAULT_PASS_THROUGH`].
    pub pass_through: Vec<PassRule>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9280)),
            auth: AuthConfig::None,
            tls: None,
            allow_plaintext: false,
            backlog_threshold: BACKLOG_THRESHOLD,
            drain_timeout: DRAIN_TIMEOUT,
            drain_grace: DRAIN_GRACE,
            max_body_bytes: MAX_BODY_BYTES,
            live_budget: LIVE_BUDGET,
            delivery_budget: DELIVERY_BUDGET,
            delivery_batch: DELIVERY_BATCH,
            retry_base: RETRY_BASE,
            retry_cap: RETRY_CAP,
            max_retries: MAX_RETRIES,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            idle_poll: IDLE_POLL,
            priority_rules: Vec::new(),
            queue_only: false,
            deliver: true,
            bulk_concurrency: BULK_CONCURRENCY,

            present_as: PresentAs::Auto,
            advertise_address: None,
            pass_through: default_pass_through(),
        }
    }
}

impl RelayConfig {
    /// Checks the settings; the error is a sentence naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let public = !self.listen.ip().is_loopback();
        if public && self.tls.is_none() && !self.allow_plaintext {
            return Err(format!(
                "refusing to listen on {} in plaintext: credentials and documents would cross \
                 the network unencrypted; give --tls-cert FILE --tls-key FILE (PEM), or \
                 --allow-plaintext when a proxy in front of the relay terminates TLS, or \
                 listen on 127.0.0.1",
                self.listen
            ));
        }
        let by_certificate = self.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        if public && matches!(self.auth, AuthConfig::None) && !by_certificate {
            return Err(format!(
                "refusing to listen on {} without authentication: the relay writes to the \
                 cluster with its own credentials, so anyone who can reach it could write; \
                 give --auth-token or --auth-user/--auth-password, or --tls-client-ca FILE \
                 (client certificates), or listen on 127.0.0.1",
                self.listen
            ));
        }
        match &self.auth {
            AuthConfig::Bearer(t) if t.is_empty() => {
                return Err("the auth token is empty".into());
            }
            AuthConfig::Basic { user, password } if user.is_empty() || password.is_empty() => {
                return Err("basic credentials need a user and a password".into());
            }
            _ => {}
        }
        if self.max_connections == 0
            || self.delivery_batch == 0
            || self.max_body_bytes == 0
            || self.bulk_concurrency == 0
        {
            return Err(
                "max connections, delivery batch, max body and bulk concurrency must be above zero"
                    .into(),
            );
        }
        if self.live_budget.is_zero() || self.delivery_budget.is_zero() {
            return Err("the live and delivery budgets must be above zero".into());
        }
        Ok(())
    }

    /// The priority of an item for `index`, given the request's header value.
    pub fn priority(&self, header: Option<u8>, index: &str) -> u8 {
        header.unwrap_or_else(|| {
            self.priority_rules
                .iter()
                .find(|r| index.starts_with(r.prefix.trim_end_matches('*')))
                .map_or(0, |r| r.priority)
        })
    }

    /// Reschedule delay after `attempts` failed deliveries: base × 2^(attempts-1), capped.
    pub fn retry_delay(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(20);
        self.retry_base
            .saturating_mul(1u32 << shift)
            .min(self.retry_cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_needs_auth() {
        let mut c = RelayConfig {
            listen: "0.0.0.0:9280".parse().unwrap(),
            allow_plaintext: true,
            ..RelayConfig::default()
        };
        assert!(c.validate().unwrap_err().contains("without authentication"));
        c.auth = AuthConfig::Bearer("t".into());
        assert!(c.validate().is_ok());
        assert!(!format!("{c:?}").contains("\"t\""));
        // A client CA authenticates by certificate.
        c.auth = AuthConfig::None;
        c.tls = Some(TlsFiles {
            client_ca: Some("ca.pem".into()),
            ..TlsFiles::new("c.pem", "k.pem")
        });
        assert!(c.validate().is_ok());
    }

    #[test]
    fn non_loopback_needs_tls_unless_plaintext_is_allowed() {
        let mut c = RelayConfig {
            listen: "0.0.0.0:9280".parse().unwrap(),
            auth: AuthConfig::Bearer("t".into()),
            ..RelayConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.contains("in plaintext"), "{e}");
        assert!(e.contains("--tls-cert FILE --tls-key FILE"), "{e}");
        assert!(e.contains("--allow-plaintext"), "{e}");
        c.tls = Some(TlsFiles::new("c.pem", "k.pem"));
        assert!(c.validate().is_ok());
        c.tls = None;
        c.allow_plaintext = true;
        assert!(c.validate().is_ok());
        // Loopback needs neither.
        let c = RelayConfig::default();
        assert!(c.validate().is_ok());
        let c = RelayConfig {
            listen: "[::1]:9280".parse().unwrap(),
            ..RelayConfig::default()
        };
        assert!(c.validate().is_ok());
    }

    #[test]
    fn pass_rules_parse_and_the_default_never_deletes_an_index() {
        assert_eq!(default_pass_through().len(), DEFAULT_PASS_THROUGH.len());
        let r = PassRule::parse("PUT,POST /_ilm/policy/{name}").unwrap();
        let segs = crate::pattern::segments("/_ilm/policy/logs");
        assert!(r.allows(&http::Method::PUT, &segs));
        assert!(!r.allows(&http::Method::DELETE, &segs));
        assert!(PassRule::parse("FETCH /x").unwrap_err().contains("FETCH"));
        assert!(PassRule::parse("GET x")
            .unwrap_err()
            .contains("start with /"));
        assert!(PassRule::parse("GET").is_err());
        assert!(PassRule::parse("GET /**/x").unwrap_err().contains("**"));
        let allowed = |m: http::Method, p: &str| {
            let segs = crate::pattern::segments(p);
            default_pass_through().iter().any(|r| r.allows(&m, &segs))
        };
        use http::Method as M;
        assert!(allowed(M::GET, "/logs/_search"));
        assert!(allowed(M::POST, "/logs/_search"));
        assert!(allowed(M::PUT, "/logs-2026"));
        assert!(allowed(M::PUT, "/_index_template/logs"));
        assert!(!allowed(M::DELETE, "/logs"));
        assert!(!allowed(M::DELETE, "/_all"));
        assert!(!allowed(M::POST, "/logs/_delete_by_query"));
        assert!(!allowed(M::PUT, "/_settings"));
        assert!(!allowed(M::PUT, "/%5Fsettings"));
        assert!(!allowed(M::PUT, "/logs/_settings"));
        assert!(!allowed(M::PUT, "/_cluster/settings"));
        assert!(!allowed(M::POST, "/logs/_close"));
        assert!(!allowed(M::PUT, "/_plugins/_ism/policies/p"));
        assert!(!allowed(M::POST, "/_reindex"));
    }

    #[test]
    fn retry_delay_doubles_to_the_cap() {
        let c = RelayConfig::default();
        let d: Vec<u64> = [1, 2, 3, 6, 7, 50]
            .iter()
            .map(|a| c.retry_delay(*a).as_secs())
            .collect();
        assert_eq!(d, [1, 2, 4, 32, 60, 60]);
    }

    #[test]
    fn priority_header_then_rule() {
        let c = RelayConfig {
            priority_rules: vec![PriorityRule {
                prefix: "audit-*".into(),
                priority: 9,
            }],
            ..RelayConfig::default()
        };
        assert_eq!(c.priority(None, "audit-2026"), 9);
        assert_eq!(c.priority(None, "logs"), 0);
        assert_eq!(c.priority(Some(3), "audit-2026"), 3);
    }
}
