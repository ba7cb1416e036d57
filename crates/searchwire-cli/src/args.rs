//! The command line, as clap types. Every default printed in `--help` is read from
//! `searchwire::explain` (or the backoff / resurrection defaults), never written here as a
//! literal, so the help cannot drift from what the library does.

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use searchwire::explain::{self as defaults, format_duration};
use searchwire::{echo, Backoff, Capacity, ResurrectionConfig};

use crate::connect::ConnectArgs;
use crate::durations::{parse_duration_arg, parse_positive_duration};

/// The environment variable `--password` falls back to.
pub const PASSWORD_ENV: &str = "SEARCHWIRE_PASSWORD";

#[derive(Debug, Parser)]
#[command(
    name = "searchwire",
    version,
    about = "A resilient command-line client for OpenSearch and Elasticsearch clusters",
    after_help = "Exit codes: 0 success, 1 final HTTP error response, 2 usage or configuration \
                  error, 3 deadline exceeded, 4 no node reachable, 5 credentials rejected.\n\
                  Logs go to stderr: -v (info), -vv (debug), -vvv (trace), or RUST_LOG=... when \
                  no -v is given; the default shows warnings only."
)]
pub struct Cli {
    /// More logging on stderr: -v info, -vv debug, -vvv trace. Without -v, RUST_LOG (an
    /// env-filter directive such as searchwire=debug) applies; the default is warnings only.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Export tracing spans (searchwire.request, searchwire.attempt) over OTLP/HTTP to this
    /// endpoint, e.g. http://127.0.0.1:4318/v1/traces (needs the `otlp` cargo feature).
    #[cfg(feature = "otlp")]
    #[arg(long, global = true, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send one request (or a load of them) through a searchwire client.
    #[command(after_help = REQUEST_AFTER_HELP)]
    Request(Box<RequestArgs>),
    /// Health-check every node once (or every DUR with --watch) and print a report.
    #[command(after_help = HEALTH_AFTER_HELP)]
    Health(HealthArgs),
    /// Bulk-index an NDJSON file (or stdin): idempotent, retried per item, resumable.
    Ingest(Box<crate::ingest::IngestArgs>),
    /// Serve an OpenSearch-compatible _bulk endpoint that queues durably what the cluster cannot take now.
    Relay(Box<crate::relay::RelayArgs>),
    /// Show how searchwire computes its schedules and defaults.
    #[command(subcommand)]
    Explain(ExplainCommand),
    /// Look into a retry queue (embedded or Redis) and re-drive its dead letters.
    #[command(subcommand, after_help = crate::queue::QUEUE_AFTER_HELP)]
    Queue(crate::queue::QueueCommand),
}

const HEALTH_AFTER_HELP: &str = "\
Each node gets GET / (reachability, version, distribution) and, when that succeeds, a probe of \
GET /_cluster/health?local=true (capability: available, or unavailable when the credentials \
lack cluster:monitor/health; pending when the probe failed transiently). A node that answers \
401/403 is alive: its credentials problem is shown as its last error.
Output: a table, or with --json one object per check: \
{\"cluster_name\",\"status\":\"green|yellow|red|unknown\",\"nodes\":[{\"url\",\"state\":\"alive|dead|no answer\",\
\"capability\":\"pending|available|unavailable\",\"version\",\"distribution\",\"last_error\"}]}; \
status is unknown when no node could report cluster health.
Every node is checked at once, so one check takes about one health-check timeout however many \
nodes hang. A node whose GET / gets no answer within the health-check timeout, or whose check \
has not finished within --deadline, is reported with state \"no answer\" and last_error saying \
so; it does not count as reachable.
Exit codes: 0 at least one node reachable, 2 usage or configuration error, 3 no node \
reachable and at least one did not answer in time, 4 no node reachable, 5 every \
reachable node rejected the credentials.";

#[derive(Debug, Args)]
pub struct HealthArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,

    #[arg(long, help = "Print one JSON object (one line per check with --watch)")]
    pub json: bool,

    #[arg(
        long,
        value_name = "DUR",
        value_parser = parse_positive_duration,
        help = "Check again every DUR until interrupted, e.g. 10s"
    )]
    pub watch: Option<Duration>,

    #[arg(
        long,
        value_name = "DUR",
        value_parser = parse_positive_duration,
        help = health_deadline_help()
    )]
    pub deadline: Option<Duration>,

    #[arg(
        long,
        value_name = "ADDR",
        help = "Serve Prometheus metrics on http://ADDR/metrics while the command runs, \
                e.g. 127.0.0.1:9464 (names in docs/metrics.md)"
    )]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

const REQUEST_AFTER_HELP: &str = "\
Output: the response body on stdout (with --json, an envelope {status,node,attempts,body}). \
On failure the error goes to stderr as \"searchwire: <message>\", and the body of the final \
HTTP response, if there was one, to stdout.
With --repeat/--for: one JSON summary on stdout (requests, ok, failed, attempts, retries, \
latency_ms p50/p90/p99/max, ok_latency_ms (the same over successful requests), errors, wall_s, requests_per_s, cpu_s user/system/total, \
requests_per_cpu_s) and, without --json, the same in words on stderr; the exit code is 0 only if every request \
succeeded, otherwise the code of the first request to fail (in completion order).
Exit codes: 0 success, 1 final HTTP error response, 2 usage or configuration error, \
3 deadline exceeded, 4 no node reachable, 5 credentials rejected, 7 refused by \
--adaptive-concurrency (not sent).";

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("load").args(["repeat", "for_"]).multiple(false))]
pub struct RequestArgs {
    // HTTP method: GET, POST, PUT, DELETE, HEAD, ... (case-insensitive).
    #[arg(value_name = "METHOD", value_parser = parse_method, help = "HTTP method: GET, POST, PUT, DELETE, HEAD, ... (case-insensitive)")]
    pub method: http::Method,

    #[arg(
        value_name = "PATH",
        help = "Path with optional query string, e.g. /logs/_search?size=1"
    )]
    pub path: String,

    #[command(flatten)]
    pub conn: ConnectArgs,

    #[command(flatten)]
    pub compress: crate::compress_args::CompressArgs,

    #[arg(
        long,
        value_name = "JSON|@FILE",
        help = "Request body: literal text, @FILE to read a file, @- for stdin. Sent as \
                application/json (application/x-ndjson for _bulk and _msearch)"
    )]
    pub data: Option<String>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, help = attempt_timeout_help())]
    pub attempt_timeout: Option<Duration>,

    #[arg(
        long,
        value_name = "DUR",
        value_parser = parse_duration_arg,
        conflicts_with = "attempt_timeout",
        help = "Deprecated old name of --attempt-timeout (it is per attempt, not the \
                request's timeout); still accepted in this release, removed in the next"
    )]
    pub timeout: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, help = deadline_help())]
    pub deadline: Option<Duration>,

    #[arg(
        long,
        help = "Treat this request as safe to repeat: retry it after a timeout, a reset or a \
                502/503/504 even when it is a POST to a write endpoint. Use it only when \
                repeating cannot duplicate anything (a create with an id, an index with an id)"
    )]
    pub idempotent: bool,

    #[arg(long, value_name = "N", help = max_retries_help())]
    pub max_retries: Option<u32>,

    #[arg(long, value_name = "STATUS[,STATUS...]", value_parser = parse_status_list, help = retry_on_status_help())]
    pub retry_on_status: Option<StatusList>,

    #[arg(long, value_name = "SPEC", value_parser = Backoff::parse, help = backoff_help())]
    pub backoff: Option<Backoff>,

    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..),
        help = "Send N requests and print a JSON summary instead of a body"
    )]
    pub repeat: Option<u64>,

    #[arg(
        long = "for",
        id = "for_",
        value_name = "DUR",
        value_parser = parse_positive_duration,
        help = "Keep starting requests until DUR has passed, then print a JSON summary"
    )]
    pub for_: Option<Duration>,

    #[arg(
        long,
        value_name = "C",
        requires = "load",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CONCURRENCY)),
        help = "With --repeat/--for: requests in flight at once, 1 to 10000 [default: 1]"
    )]
    pub concurrency: Option<u32>,

    #[arg(
        long,
        value_name = "PER_SEC",
        requires = "load",
        value_parser = parse_rate,
        help = "With --repeat/--for: start at most PER_SEC requests per second overall \
                [default: unlimited]"
    )]
    pub rate: Option<f64>,

    #[arg(
        long,
        help = "Write one JSON line per attempt to stderr: \
                {request,attempt,node,outcome,status,elapsed_ms,backoff_ms}"
    )]
    pub trace_attempts: bool,

    #[arg(
        long,
        help = "Print {\"status\",\"node\",\"attempts\",\"body\"} instead of the bare body"
    )]
    pub json: bool,

    #[arg(
        long,
        value_name = "ADDR",
        help = "Serve Prometheus metrics on http://ADDR/metrics while the command runs, \
                e.g. 127.0.0.1:9464 (names in docs/metrics.md)"
    )]
    pub metrics_addr: Option<std::net::SocketAddr>,

    #[arg(long, help = retry_budget_help())]
    pub no_retry_budget: bool,

    #[arg(
        long,
        value_name = "DELAY|pNN",
        num_args = 0..=1,
        default_missing_value = "p95",
        value_parser = parse_hedge,
        help = hedge_help()
    )]
    pub hedge: Option<searchwire::HedgeDelay>,

    #[arg(long, help = adaptive_concurrency_help())]
    pub adaptive_concurrency: bool,

    #[arg(long, help = breaker_help())]
    pub no_circuit_breaker: bool,

    #[arg(long, help = adaptive_jitter_help())]
    pub no_adaptive_jitter: bool,

    #[arg(
        long,
        help = "Back off per error class with the reference table (429: Retry-After, else \
                100ms, x1.5, never below Retry-After, 5 \
                retries; 502/503/504: 500ms x2, 3 retries; reset/connect/timeout: 200ms x1.8, \
                4 retries; cap 30s; jitter 0.8-1.2) [default: one curve, --backoff]"
    )]
    pub class_backoff: bool,
}

/// `--retry-on-status`: a list of statuses, or `none` to retry no status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusList(pub Vec<u16>);

#[derive(Debug, Subcommand)]
pub enum ExplainCommand {
    /// The dead-node resurrection timeout for each live count (and failure count).
    Resurrection(ResurrectionArgs),
    /// Every default of the client, with the reason it is what it is.
    Defaults(DefaultsArgs),
    /// How each attempt's node is chosen: latency-aware (the default) and round robin.
    Selection,
}

#[derive(Debug, Args)]
pub struct DefaultsArgs {
    /// Print the table as Markdown, exactly as in docs/configuration.md.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
pub struct ResurrectionArgs {
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000), help = total_help())]
    pub total: Option<u64>,

    #[arg(
        long,
        value_name = "L[,L...]",
        value_delimiter = ',',
        help = "Live node counts, each below --total [default: every count 0..total-1]"
    )]
    pub live: Vec<u64>,

    #[arg(long, value_name = "F[,F...]", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..), help = failures_help())]
    pub failures: Vec<u32>,

    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..), help = cores_help())]
    pub cores: Option<u32>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, help = initial_help())]
    pub initial: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, help = max_help())]
    pub max: Option<Duration>,

    #[arg(long, value_name = "N", help = cutoff_help())]
    pub cutoff: Option<u32>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, help = minimum_help())]
    pub minimum: Option<Duration>,

    #[arg(long, value_enum, default_value_t = Format::Table, help = "Output format")]
    pub format: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

// ---- value parsers -------------------------------------------------------------------------

fn parse_method(s: &str) -> Result<http::Method, String> {
    http::Method::from_bytes(s.to_ascii_uppercase().as_bytes()).map_err(|_| {
        format!(
            "{} is not an HTTP method (GET, POST, PUT, DELETE, HEAD, ...)",
            echo(s)
        )
    })
}

fn parse_status_list(s: &str) -> Result<StatusList, String> {
    let t = s.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("none") {
        return Ok(StatusList(Vec::new()));
    }
    t.split(',')
        .map(|part| {
            let p = part.trim();
            match p.parse::<u16>() {
                Ok(code) if (400..=599).contains(&code) => Ok(code),
                _ => Err(format!(
                    "{} is not a 4xx or 5xx HTTP status; give e.g. 502,503 or none",
                    echo(p)
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(StatusList)
}

/// Most requests in flight with `--concurrency`: each is a task with its own buffers, and
/// more than this only queues in the client (a node takes a few hundred at once at most).
pub const MAX_CONCURRENCY: u32 = 10_000;

/// Slowest accepted `--rate`: one request per 1000 s (keeps the pacing period finite).
const MIN_RATE: f64 = 0.001;
/// Fastest accepted `--rate`: the pacing period stays at least a nanosecond.
const MAX_RATE: f64 = 1e9;

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (MIN_RATE..=MAX_RATE).contains(&r) => Ok(r),
        _ => Err(format!(
            "{} is not a rate from {MIN_RATE} to {MAX_RATE:e} requests per second",
            echo(s)
        )),
    }
}

// ---- help texts with defaults taken from the library ----------------------------------------

fn attempt_timeout_help() -> String {
    format!(
        "Attempt timeout: bounds each attempt (each retry gets a fresh one); 0 disables it \
         [default: {}, or the {} environment variable]",
        format_duration(defaults::ATTEMPT_TIMEOUT),
        defaults::ATTEMPT_TIMEOUT_ENV
    )
}

fn deadline_help() -> String {
    "The request's timeout: its overall time budget across every attempt and backoff, \
     e.g. 10s (the request's deadline is its start plus this) [default: none]"
        .to_string()
}

/// How long one `health` check may take overall without `--deadline`: the health-check
/// timeout plus this, so a node answering `GET /` just before its timeout still has a moment
/// for its capability probe, and the command ends in about one timeout however many nodes
/// there are.
pub const HEALTH_DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// The overall limit of one `health` check without `--deadline`.
pub fn default_health_deadline() -> Duration {
    defaults::HEALTH_CHECK_TIMEOUT + HEALTH_DEADLINE_GRACE
}

fn health_deadline_help() -> String {
    format!(
        "Bound each check overall, e.g. 5s: nodes that have not answered by then are \
         reported with state \"no answer\" [default: {}, the health-check timeout of {} plus {}]",
        format_duration(default_health_deadline()),
        format_duration(defaults::HEALTH_CHECK_TIMEOUT),
        format_duration(HEALTH_DEADLINE_GRACE)
    )
}

fn max_retries_help() -> String {
    format!(
        "Retries after the first attempt; 0 disables retries [default: {}]",
        defaults::MAX_RETRIES
    )
}

fn retry_on_status_help() -> String {
    let list: Vec<String> = defaults::RETRY_ON_STATUS
        .iter()
        .map(|s| s.to_string())
        .collect();
    format!(
        "HTTP statuses to retry, comma-separated, or none [default: {}]",
        list.join(",")
    )
}

fn backoff_help() -> String {
    format!(
        "Delay between retries: exp:BASE:CAP (full jitter), const:DUR, linear:STEP (capped \
         at {}) or none [default: exp:{}:{}]",
        format_duration(defaults::LINEAR_BACKOFF_CAP),
        format_duration(defaults::BACKOFF_BASE),
        format_duration(defaults::BACKOFF_CAP)
    )
}

/// `--hedge`: a duration (`20ms`) or a percentile (`p95`).
fn parse_hedge(s: &str) -> Result<searchwire::HedgeDelay, String> {
    searchwire::HedgeDelay::parse(s)
}

fn hedge_help() -> String {
    format!(
        "Hedge reads (GET, HEAD, _search, _count, _mget, _msearch, _field_caps; never writes, \
         scroll, point in time or async search): with no answer after DELAY (20ms) or the \
         observed pNN of recent attempts (p99), send the read to a second node too; the first \
         answer wins. At most {}% extra attempts, each also taken from the retry budget \
         [default: off; --hedge alone: p{}]",
        (defaults::HEDGE_MAX_EXTRA * 100.0).round(),
        defaults::HEDGE_PERCENTILE
    )
}

fn adaptive_concurrency_help() -> String {
    format!(
        "Limit the requests in flight to what the cluster serves without queueing, learned \
         from latency and 429/503/timeouts (Vegas, from {} within {}..{}); a request over \
         the limit is not sent and fails with exit code 7 [default: off]",
        defaults::CONCURRENCY_INITIAL_LIMIT,
        defaults::CONCURRENCY_MIN_LIMIT,
        defaults::CONCURRENCY_MAX_LIMIT
    )
}

fn retry_budget_help() -> String {
    format!(
        "Switch the retry budget off [default: on, retries add at most {}% of requests plus \
         {}/s]",
        (defaults::RETRY_BUDGET_RATIO * 100.0).round(),
        defaults::RETRY_BUDGET_MIN_PER_SEC
    )
}

fn adaptive_jitter_help() -> String {
    format!(
        "Wait every backoff exactly as --backoff computes it [default: backoffs (never \
         Retry-After) are stretched x{} once this process made {} retries in {}, x{} from {}]",
        defaults::ADAPTIVE_JITTER_MID,
        defaults::ADAPTIVE_JITTER_MID_THRESHOLD,
        format_duration(defaults::ADAPTIVE_JITTER_WINDOW),
        defaults::ADAPTIVE_JITTER_HIGH,
        defaults::ADAPTIVE_JITTER_HIGH_THRESHOLD
    )
}

fn breaker_help() -> String {
    format!(
        "Switch the cluster circuit breaker off [default: on, opens when more than {}% of at \
         least {} attempts in {} failed]",
        (defaults::BREAKER_FAILURE_RATE * 100.0).round(),
        defaults::BREAKER_MIN_REQUESTS,
        format_duration(defaults::BREAKER_WINDOW)
    )
}

/// `--total` when not given.
pub const DEFAULT_TOTAL: u64 = 150;

fn total_help() -> String {
    format!("Nodes in the cluster, 1 to 1000000 [default: {DEFAULT_TOTAL}]")
}

fn failures_help() -> String {
    let c = ResurrectionConfig::default();
    format!(
        "Consecutive failures of the dead node; several give the failure progression \
         [default: cutoff+1 = {}, where the base timeout is saturated]",
        c.factor_cutoff.saturating_add(1)
    )
}

fn cores_help() -> String {
    format!(
        "CPU cores per server for the capacity model [default: {}]",
        Capacity::DEFAULT_CORES
    )
}

fn initial_help() -> String {
    format!(
        "Base timeout after the first failure [default: {}]",
        format_duration(ResurrectionConfig::default().initial)
    )
}

fn max_help() -> String {
    format!(
        "Cap of the base timeout and of the rate limit [default: {}]",
        format_duration(ResurrectionConfig::default().max)
    )
}

fn cutoff_help() -> String {
    format!(
        "Largest exponent of the base timeout: initial × 2^min(failures−1, cutoff) \
         [default: {}]",
        ResurrectionConfig::default().factor_cutoff
    )
}

fn minimum_help() -> String {
    format!(
        "Floor of the timeout before jitter [default: {}]",
        format_duration(ResurrectionConfig::default().minimum)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn status_lists() {
        assert_eq!(parse_status_list("none"), Ok(StatusList(vec![])));
        assert_eq!(
            parse_status_list("502, 503"),
            Ok(StatusList(vec![502, 503]))
        );
        assert!(parse_status_list("200").is_err());
        assert!(parse_status_list("abc").is_err());
    }

    #[test]
    fn rates_must_be_positive_and_finite() {
        assert_eq!(parse_rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "NaN", "inf", "x"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn methods_are_case_insensitive() {
        assert_eq!(parse_method("get"), Ok(http::Method::GET));
        assert!(parse_method("G ET").is_err());
    }
}
