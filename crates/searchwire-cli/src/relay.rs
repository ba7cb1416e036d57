//! `searchwire relay`: parses the flags, opens the queue, builds the client and runs
//! [`searchwire_relay::Relay`] until SIGTERM/SIGINT (a second signal exits at once).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{
    config as defaults, AuthConfig, PassRule, PresentAs, PriorityRule, Relay, RelayConfig,
    TlsFiles, TlsReload,
};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::connect::{connect, Auth, ConnectArgs};
use crate::durations::{parse_duration_arg, parse_positive_duration};
use crate::exit;
use crate::output;
use crate::signals::Signals;

/// The consumer name of an embedded queue (one owner at a time).
const EMBEDDED_CONSUMER: &str = "relay";

/// Exit code when a second signal cut the graceful shutdown short.
pub const FORCED: u8 = 130;

const AFTER_HELP: &str = "\
Serves POST /_bulk and POST|PUT /{index}/_bulk in OpenSearch's format, and passes every \
other request to the cluster through the same transport (retries, breaker, metrics): a \
request carrying its own Authorization is sent with exactly that (the cluster decides); the \
relay's own cluster credentials are used only for the bulk path and the --pass-through routes \
(others are refused 403). GET /_nodes answers with the relay as the only node \
(--advertise-address). Bodies may be gzip or deflate (bounded by --max-body-bytes once \
decompressed); answers are gzip when the client accepts it. Each request is tried \
once against the cluster (--live-budget); items the cluster cannot take now (429, 5xx, no node, \
timeout, breaker open) are written durably to the queue and answered \
{\"status\":200,\"result\":\"queued\"}; items refused for good keep their status and error. \
A background loop delivers the queue (priority from X-Searchwire-Priority or --priority, then \
arrival) and dead-letters what the cluster refuses for good (see `searchwire queue`).
Single-document writes take the same path: PUT|POST /{index}/_doc/{id}, POST /{index}/_doc, \
PUT|POST /{index}/_create/{id}, DELETE /{index}/_doc/{id}, POST /{index}/_update/{id}; a \
queued one is answered 202 {\"result\":\"queued\"}; a scripted _update is passed through \
once, never queued; a conditional (if_seq_no) write is never queued. filter_path is honoured.
Health: GET /health/retry-queue (200 ready; 503 over --backlog-threshold or draining), \
GET /health/live, GET /metrics. Neither health path needs credentials.
Overload: at --max-queue-bytes or --min-free-disk-bytes new writes get 429 with Retry-After \
and es_rejected_execution_exception, and readiness is 503, until the queue drains under 90% of \
the cap. Dead letters (with the relay's credentials): GET /_searchwire/dead_letters \
(?index=&error_type=&older_than=&newer_than=&id=&after=&limit=), GET \
/_searchwire/dead_letters/{id}, POST /_searchwire/dead_letters/_replay|_purge (a filter, or \
all=true); see `searchwire queue dead-letters --help`.
GET / answers as the fronted cluster (--present-as): its own GET / and, for Elasticsearch, \
X-Elastic-Product: Elasticsearch on every response and the compatible-with media types of \
the official clients (9 and 8 in front of 9.x, 8 in front of 8.x).
SIGTERM/SIGINT: readiness 503 and new _bulk requests 503 for --drain-grace, then stop \
accepting, answer requests in flight, finish the delivery cycle within --drain-timeout, \
release leased messages, exit 0. A second signal exits 130 at \
once; nothing acknowledged is lost either way.
TLS: --tls-cert/--tls-key serve HTTPS (TLS 1.3 and 1.2); SIGHUP, and a change of the \
files (checked every --tls-reload-interval), reload them; a new pair that does not load is \
logged and the previous one kept. --tls-client-ca requires client certificates signed by \
that CA: a verified certificate authenticates its client (with --auth-token or --auth-user \
too, both are needed); only the health paths answer a connection without one. A listen \
address that is not loopback needs TLS (or --allow-plaintext behind a TLS-terminating \
proxy) and an authentication (token, user or client CA): otherwise exit 2.
Configuration: --config FILE (TOML) takes every flag by its name (url = [\"https://a:9200\"], \
queue-dir = \"/var/lib/relay\", queue-only = true); each is also the environment variable \
SEARCHWIRE_RELAY_<NAME> (SEARCHWIRE_RELAY_QUEUE_DIR; a repeatable flag takes one value per \
line). Order: flag, then variable, then file, then default. --check prints the result \
(secrets redacted) and exits 0 if it is valid, 2 if not.
Exit codes: 0 stopped gracefully, 2 usage or configuration error (or the queue cannot be \
opened), 130 forced by a second signal.";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
#[command(group(clap::ArgGroup::new("queue").required(true).args(["queue_dir", "redis", "redis_sentinel", "redis_cluster"])))]
#[command(group(clap::ArgGroup::new("redis_target").args(["redis", "redis_sentinel", "redis_cluster"])))]
pub struct RelayArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,

    #[command(flatten)]
    pub compress: crate::compress_args::CompressArgs,

    #[arg(long, value_name = "ADDR", default_value = defaults::LISTEN, help = "Address to serve the bulk endpoint on (not loopback: needs TLS, or --allow-plaintext, and --auth-token, --auth-user or --tls-client-ca)")]
    pub listen: SocketAddr,

    #[arg(
        long,
        value_name = "DIR",
        help = "Embedded durable queue in this directory (one relay per directory)"
    )]
    pub queue_dir: Option<PathBuf>,

    #[arg(
        long,
        value_name = "URL",
        help = "Redis Streams queue shared by several relays (redis://host:port)"
    )]
    pub redis: Option<String>,

    #[arg(long, value_name = "NAME", requires = "redis_target", default_value = searchwire_queue::redis::DEFAULT_STREAM, help = "Redis stream key of the queue: relays with the same one share it")]
    pub redis_stream: String,

    #[command(flatten)]
    pub redis_ha: crate::redis_args::RedisHaArgs,

    #[arg(
        long,
        value_name = "TOKEN",
        conflicts_with = "auth_user",
        help = "Require Authorization: Bearer TOKEN from clients"
    )]
    pub auth_token: Option<String>,

    #[arg(
        long,
        value_name = "USER",
        requires = "auth_password",
        help = "Require basic credentials from clients"
    )]
    pub auth_user: Option<String>,

    #[arg(long, value_name = "PASSWORD", help = "Password for --auth-user")]
    pub auth_password: Option<String>,

    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        help = "Serve HTTPS (TLS 1.3 and 1.2) with this certificate chain (PEM, leaf first); reloaded on SIGHUP and when the files change"
    )]
    pub tls_cert: Option<PathBuf>,

    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        help = "The private key (PEM) of --tls-cert"
    )]
    pub tls_key: Option<PathBuf>,

    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        help = "Mutual TLS: require client certificates signed by the CA(s) in this PEM file; a verified certificate authenticates its client (only the health paths answer without one)"
    )]
    pub tls_client_ca: Option<PathBuf>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, default_value = "10s", help = "How often the TLS files are checked for changes (0s: only on SIGHUP)")]
    pub tls_reload_interval: Duration,

    #[arg(
        long,
        help = "Allow a non-loopback --listen without TLS (a proxy in front terminates TLS)"
    )]
    pub allow_plaintext: bool,

    #[arg(
        long,
        value_name = "FILE",
        help = "Read settings from this TOML file: each key is a flag's name (queue-dir = \"/var/lib/relay\"); flags, then SEARCHWIRE_RELAY_<NAME> variables, override it"
    )]
    pub config: Option<PathBuf>,

    #[arg(
        long,
        help = "Validate the configuration, print it (secrets redacted) with where each value came from, and exit: 0 valid, 2 not"
    )]
    pub check: bool,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "60s", help = "How long a delivery holds its messages; a dead relay's are delivered by others after this (Redis)")]
    pub lease_timeout: Duration,

    #[arg(long, value_name = "N", default_value_t = defaults::BACKLOG_THRESHOLD, help = "Readiness is 503 while the backlog is above N")]
    pub backlog_threshold: u64,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "4s", help = "Time the delivery loop gets to finish its cycle on shutdown")]
    pub drain_timeout: Duration,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, default_value = "2s", help = "After SIGTERM: keep answering health and new _bulk with 503 this long (load balancers notice the pod is going), then stop accepting; 0s stops at once")]
    pub drain_grace: Duration,

    #[arg(long, value_name = "PRODUCT", value_parser = PresentAs::parse, default_value = "auto", help = "Answer GET / and headers as: auto (learned from the cluster's GET /; OpenSearch until it answers), opensearch, or elasticsearch (X-Elastic-Product on every response; set it when the relay may start while Elasticsearch is down)")]
    pub present_as: PresentAs,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "5s", help = "Budget of the first try of a request against the cluster")]
    pub live_budget: Duration,

    #[arg(long, value_name = "BYTES", default_value_t = defaults::MAX_BODY_BYTES, help = "Largest request body (413 above)")]
    pub max_body_bytes: usize,

    #[arg(long, value_name = "N", default_value_t = defaults::MAX_RETRIES, help = "Failed deliveries before a queued item becomes a dead letter")]
    pub max_retries: u32,

    #[arg(long, value_name = "N", default_value_t = defaults::DELIVERY_BATCH, help = "Queued items per delivery request")]
    pub delivery_batch: usize,

    #[arg(long, value_name = "N", default_value_t = defaults::BULK_CONCURRENCY, help = "Most bulk requests in flight per indexer (the first try, delivery); adapts below it, halved on 429")]
    pub bulk_concurrency: usize,

    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CONNECTIONS, help = "Client connections served at once")]
    pub max_connections: usize,

    #[arg(long, value_name = "PREFIX=N", value_parser = parse_priority, help = "Queue priority (0-255, higher first) for indices starting with PREFIX; repeatable")]
    pub priority: Vec<PriorityRule>,

    #[arg(
        long,
        help = "Do not try the cluster while answering: queue every item (the delivery loop sends it)"
    )]
    pub queue_only: bool,

    #[arg(
        long,
        value_name = "ADDR",
        help = "Address (host:port) the relay names as its own in GET /_nodes, so sniffing clients keep talking to it [default: the listen address; the client's Host when listening on 0.0.0.0]"
    )]
    pub advertise_address: Option<String>,

    #[arg(long, value_name = "RULE", value_parser = PassRule::parse, help = "Also send requests matching METHODS PATTERN (e.g. \"DELETE /{index}\", \"PUT /_ilm/policy/{name}\") with the relay's own cluster credentials; repeatable. Requests carrying their own Authorization always pass with it, never with the relay's")]
    pub pass_through: Vec<PassRule>,

    #[arg(
        long,
        help = "Start the --pass-through list empty instead of from the defaults (reads, _refresh, index, data stream and template creation)"
    )]
    pub no_default_pass_through: bool,

    #[arg(long, value_name = "BYTES", value_parser = crate::relay_limits::parse_bytes, help = "Largest size of the queue (queued items and dead letters, estimated); at it, new writes get 429 with Retry-After and readiness is 503 [default: embedded, half the free disk of --queue-dir at start; Redis, none (maxmemory bounds it)]")]
    pub max_queue_bytes: Option<u64>,

    #[arg(long, value_name = "BYTES", value_parser = crate::relay_limits::parse_bytes, help = "Embedded queue: free space its filesystem keeps; below it, new writes get 429 and readiness is 503 [default: 5% of the filesystem, at most 1GiB]")]
    pub min_free_disk_bytes: Option<u64>,
}

/// The pass-through allow list: the defaults (unless `--no-default-pass-through`), then
/// each `--pass-through`.
fn pass_through(a: &RelayArgs) -> Vec<PassRule> {
    let mut rules = if a.no_default_pass_through {
        Vec::new()
    } else {
        defaults::default_pass_through()
    };
    rules.extend(a.pass_through.iter().cloned());
    rules
}

fn parse_priority(s: &str) -> Result<PriorityRule, String> {
    let (prefix, n) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{}: give PREFIX=N, e.g. audit-=10", searchwire::echo(s)))?;
    let priority = n.trim().parse::<u8>().map_err(|_| {
        format!(
            "{}: the priority must be a number from 0 to 255",
            searchwire::echo(s)
        )
    })?;
    Ok(PriorityRule {
        prefix: prefix.to_owned(),
        priority,
    })
}

/// Runs the relay (or, with `--check`, validates and prints `effective`, the configuration
/// with each value's source); returns the exit code.
pub async fn run(a: RelayArgs, auth: Auth, effective: Option<String>) -> u8 {
    if a.check {
        return check(&a, auth, effective.as_deref().unwrap_or_default());
    }
    // The handlers are installed before the port is bound: a SIGTERM that arrives once the
    // relay answers must start the graceful shutdown, never kill the process outright; a
    // SIGHUP reloads the TLS certificate instead of ending the process.
    let signals = Signals::install();
    let hangups = signal(SignalKind::hangup()).ok();
    let handle = match crate::metrics::install() {
        Ok(h) => Some(h),
        Err(e) => {
            output::error_message(format!("metrics are off: {e}"));
            None
        }
    };
    let client = match connect(&a.conn, auth)
        .and_then(|b| a.compress.apply(b).build().map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            output::error_message(e);
            return exit::USAGE;
        }
    };
    let auth = relay_auth(&a);
    let limits = match crate::relay_limits::limits(
        a.redis_ha.config(a.redis.as_deref()).is_some(),
        a.queue_dir.clone(),
        a.max_queue_bytes,
        a.min_free_disk_bytes,
    ) {
        Ok(l) => l,
        Err(e) => {
            output::error_message(e);
            return exit::USAGE;
        }
    };
    let pass_through = pass_through(&a);
    let config = RelayConfig {
        listen: a.listen,
        auth,
        tls: tls_files(&a),
        allow_plaintext: a.allow_plaintext,
        backlog_threshold: a.backlog_threshold,
        drain_timeout: a.drain_timeout,
        drain_grace: a.drain_grace,
        present_as: a.present_as,
        max_body_bytes: a.max_body_bytes,
        live_budget: a.live_budget,
        max_retries: a.max_retries,
        delivery_batch: a.delivery_batch,
        bulk_concurrency: a.bulk_concurrency,
        max_connections: a.max_connections,
        priority_rules: a.priority.clone(),
        queue_only: a.queue_only,
        advertise_address: a.advertise_address.clone(),
        pass_through,
        ..RelayConfig::default()
    };
    let queue = match open_queue(&a).await {
        Ok(q) => q,
        Err(e) => {
            output::error_message(e);
            return exit::USAGE;
        }
    };
    let mut relay = match Relay::bind(config, client, queue).await {
        Ok(r) => r,
        Err(e) => {
            output::error_message(e);
            return exit::USAGE;
        }
    };
    relay = relay.admission(limits);
    if let Some(h) = handle {
        relay = relay.metrics_render(Arc::new(move || h.render()));
    }
    if let Some(h) = hangups {
        reload_on_hangup(h, relay.tls_reload());
    }
    let addr = relay
        .local_addr()
        .map_or_else(|_| a.listen.to_string(), |x| x.to_string());
    let scheme = if a.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    // One line on stderr that scripts wait for.
    output::stderr(&format!(
        "searchwire relay listening on {scheme}://{addr}\n"
    ));
    let report = relay.run(first_signal(signals)).await;
    output::stderr(&format!(
        "searchwire relay stopped: {} leased messages released, delivery {}, connections {}\n",
        report.released,
        if report.delivery_drained {
            "drained"
        } else {
            "cut at the drain timeout"
        },
        if report.connections_drained {
            "drained"
        } else {
            "cut"
        },
    ));
    exit::SUCCESS
}

/// The clients' credentials the relay requires.
fn relay_auth(a: &RelayArgs) -> AuthConfig {
    match (&a.auth_token, &a.auth_user, &a.auth_password) {
        (Some(t), _, _) => AuthConfig::Bearer(t.clone()),
        (None, Some(u), Some(p)) => AuthConfig::Basic {
            user: u.clone(),
            password: p.clone(),
        },
        _ => AuthConfig::None,
    }
}

/// The listener's TLS files, when `--tls-cert` is given (clap requires `--tls-key` with it).
fn tls_files(a: &RelayArgs) -> Option<TlsFiles> {
    let (cert, key) = (a.tls_cert.clone()?, a.tls_key.clone()?);
    Some(TlsFiles {
        client_ca: a.tls_client_ca.clone(),
        reload_interval: a.tls_reload_interval,
        ..TlsFiles::new(cert, key)
    })
}

/// `--check`: prints the effective configuration, then checks what the relay checks before
/// it binds (the cluster client, the settings, the TLS files), without opening the queue or
/// the port. Every problem is reported; exit 0 or 2.
fn check(a: &RelayArgs, auth: Auth, effective: &str) -> u8 {
    output::stdout(effective.as_bytes());
    let mut problems = Vec::new();
    if let Err(e) = connect(&a.conn, auth).and_then(|b| b.build().map_err(|e| e.to_string())) {
        problems.push(e);
    }
    // What `RelayConfig::validate` reads, as `run` sets it.
    let config = RelayConfig {
        listen: a.listen,
        auth: relay_auth(a),
        tls: tls_files(a),
        allow_plaintext: a.allow_plaintext,
        max_body_bytes: a.max_body_bytes,
        live_budget: a.live_budget,
        delivery_batch: a.delivery_batch,
        max_connections: a.max_connections,
        ..RelayConfig::default()
    };
    if let Err(e) = config.validate() {
        problems.push(e);
    }
    let mut tls = String::new();
    if let Some(files) = &config.tls {
        match searchwire_relay::tls::check(files) {
            Ok(fingerprint) => tls = format!(", TLS certificate {fingerprint}"),
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        output::stderr(&format!(
            "searchwire relay: the configuration is valid{tls}\n"
        ));
        return exit::SUCCESS;
    }
    for p in problems {
        output::error_message(p);
    }
    exit::USAGE
}

/// Each SIGHUP reloads the TLS certificate, key and client CA (a failure is logged by the
/// relay, which keeps the previous certificate).
fn reload_on_hangup(mut hangups: Signal, reload: Option<TlsReload>) {
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match &reload {
                Some(r) => {
                    if let Ok(fingerprint) = r.reload() {
                        output::stderr(&format!(
                            "searchwire relay: SIGHUP: TLS certificate reloaded ({fingerprint})\n"
                        ));
                    }
                }
                None => {
                    output::stderr("searchwire relay: SIGHUP: nothing to reload (no --tls-cert)\n")
                }
            }
        }
    });
}

// The default is the relay's, spelled for clap.
const _: () = assert!(defaults::TLS_RELOAD_INTERVAL.as_secs() == 10);

async fn open_queue(a: &RelayArgs) -> Result<Queue, String> {
    if let Some(mut cfg) = a.redis_ha.config(a.redis.as_deref()) {
        cfg.stream = a.redis_stream.clone();
        // Several relays share a Redis queue: each has its own consumer name (the default,
        // per process); a dead relay's leases are taken over after the lease timeout.
        cfg.options = cfg.options.lease_timeout(a.lease_timeout);
        return Queue::connect_redis(cfg)
            .await
            .map_err(|e| format!("cannot connect to the Redis queue: {e}"));
    }
    let dir = a
        .queue_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("relay-queue"));
    let mut cfg = EmbeddedConfig::new(dir.clone());
    // One process owns an embedded queue, so one fixed consumer name: the leases a killed
    // relay held are this relay's to release at start (no wait for the lease timeout).
    cfg.options = cfg
        .options
        .consumer(EMBEDDED_CONSUMER)
        .lease_timeout(a.lease_timeout);
    tokio::task::spawn_blocking(move || Queue::open_embedded(cfg))
        .await
        .map_err(|e| format!("cannot open the queue: {e}"))?
        .map_err(|e| format!("cannot open the queue in {}: {e}", dir.display()))
}

/// Completes on the first SIGTERM or SIGINT, and arms the second one: it exits at once.
async fn first_signal(mut signals: Signals) {
    signals.recv().await;
    output::stderr("searchwire relay: shutting down (a second signal exits at once)\n");
    tokio::spawn(async move {
        signals.recv().await;
        output::stderr("searchwire relay: second signal, exiting now\n");
        std::process::exit(i32::from(FORCED));
    });
}
