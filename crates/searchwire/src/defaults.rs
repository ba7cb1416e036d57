//! The one table of defaults. Every default lives here once, with the reason it is what it
//! is; the builder, the CLI's `--help` and `docs/configuration.md` read (or are checked
//! against) this table, so code and documentation cannot drift apart.

use std::time::Duration;

/// Retries after the first attempt: 3, so at most 4 attempts. Enough to step over one or
/// two dead nodes and a brief hiccup; more multiplies load during an outage, which is what
/// the retry budget exists to bound.
pub const MAX_RETRIES: u32 = 3;

/// Statuses that are retried: 502, 503 and 504 (a node or proxy cannot serve right now)
/// and 429 (throttling: retried after `Retry-After` or the backoff). Other 4xx are the
/// caller's fault; 500 usually repeats.
pub const RETRY_ON_STATUS: [u16; 4] = [502, 503, 504, 429];

/// Per-attempt timeout: 30 s. opensearch-go disables it by default (an attempt may hang
/// forever on a stalled connection); 30 s matches the Java RestClient's socket timeout and
/// fits heavy searches and bulk requests. Tighten it per request, or cap the whole request
/// with a deadline.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Timeout of the liveness check (`GET /`) that decides whether a node whose attempt timed
/// out is dead or the request merely slow: 2 s (never more than the attempt timeout). A
/// node that cannot answer `GET /` in 2 s right after a timeout is hung; one that does is
/// alive and keeps its traffic.
pub const LIVENESS_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// TCP (and TLS) connect timeout: 5 s. A SYN that is not answered in 5 s is a dead path;
/// classifying it as a connect failure (request never sent) lets even a POST move on to
/// another node.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest `Retry-After` honoured: 30 s. A server asking for more is treated as asking for
/// 30 s, so one misconfigured proxy cannot park callers for an hour; the deadline bounds it
/// further.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// Idle keep-alive connections are closed after 50 s: below the idle timeouts of the load
/// balancers usually in front of clusters (AWS ALB 60 s, nginx 75 s), so the client closes
/// an idle connection before a balancer silently drops it — a dropped connection would
/// come back as a reset on the next request and mark a healthy node dead.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// Idle connections kept per node: 64, enough for the concurrency of a busy application
/// without hoarding sockets on every node.
pub const POOL_MAX_IDLE_PER_NODE: usize = 64;

/// Whether connect failures, resets and attempt timeouts are retried (subject to
/// idempotency): yes. They are the failures a multi-node client exists to hide.
pub const RETRY_ON_CONNECTION_ERRORS: bool = true;

/// Timeout of one health-check request (resurrection checks, capability probes): 5 s.
/// A node that cannot answer `GET /` in 5 s should not get user traffic yet.
pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a node whose credentials lack `cluster:monitor/health` (its probe of
/// `/_cluster/health?local=true` answered 401/403) keeps using `GET /` before it is probed
/// again: 4 h, the reference's `MaxRetryClusterHealth`. Permissions change on the scale of
/// hours (an operator edits a role mapping), and a denied probe costs the cluster an audit-log
/// entry, so probing more often buys nothing.
pub const CLUSTER_HEALTH_REPROBE_AFTER: Duration = Duration::from_secs(4 * 3600);

/// Jitter of the re-probe interval: ± 10 %, the reference's `HealthCheckJitter`. Clients
/// started together (a deployment) would otherwise re-probe the cluster together.
pub const HEALTH_CHECK_JITTER: f64 = 0.1;

/// Whether the stored cluster health of live nodes is refreshed periodically: yes. The
/// reference always runs it; the interval spreads all clients' polls so each server sees
/// about `health_check_rate` requests per second (at most one per client per 5 s, and single-node
/// clusters are skipped), and without it `Client::cluster_health` goes stale and live nodes
/// that never failed are never probed.
pub const HEALTH_REFRESH: bool = true;

/// How many nodes the periodic health cycle checks at once: 8. One slow node must not hold
/// up the others, and a 100-node cluster must not see 100 simultaneous requests from every
/// client.
pub const HEALTH_CHECK_CONCURRENCY: usize = 8;

/// How many nodes `Client::check_all` checks at once, at most: every node, up to 256. It is
/// asked for by a person or a script (`searchwire health`, often during an incident) who
/// wants the answer in about one health-check timeout, however many nodes hang; checking 8
/// at a time made 50 hung nodes take 7 timeouts. 256 connections stay well clear of the
/// common limit of 1,024 open files; past that, the caller's overall limit bounds the wait.
pub const CHECK_ALL_MAX_CONCURRENCY: usize = 256;

/// Timeout of one discovery request (`GET /_nodes/http,os`): 5 s, like a health check. The
/// reply is small; a node that cannot produce it in 5 s is not the one to ask.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most nodes one discovery round accepts into the pool: 1,000. Far above any real
/// OpenSearch cluster's HTTP nodes, far below what a broken or hostile `_nodes` reply can
/// list (20,000 nodes cost seconds of CPU for the selection wheel, a health check each and
/// a resurrection timer each, every one carrying the credentials). Above it, the nodes
/// already in the pool are kept first, the rest ignored, and a warning says so.
pub const DISCOVER_MAX_NODES: usize = 1_000;

/// Shortest gap between two failure-triggered discoveries: 10 s. A cluster losing nodes one
/// after another should not be asked for its node list once per casualty.
pub const REDISCOVER_MIN_GAP: Duration = Duration::from_secs(10);

/// Largest response body read: 256 MiB. Search and bulk responses can be large, but a
/// broken or hostile node streaming an endless body must not exhaust the client's memory
/// (the attempt timeout bounds the time, not the bytes). Page big reads instead (`size`,
/// `search_after`, scroll).
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// The smallest request body `searchwire --compress` gzips: 1 KiB. A smaller body fits in
/// one TCP segment either way (the MSS is about 1,460 bytes), so compressing it saves no
/// packet and still costs the gzip header, CPU on both sides and the node's inflater.
/// (`ClientBuilder::compress_requests` takes the threshold as its argument.)
pub const COMPRESS_MIN_BYTES: usize = 1024;

/// The gzip level of compressed request bodies: 1, the fastest. On bulk bodies of log
/// documents it keeps most of level 6's ratio for a fraction of its CPU
/// (`docs/benchmarks.md`, "Compressed requests"), as Beats' and Logstash's default level 1
/// does; OpenSearch inflates every level at the same speed.
pub const GZIP_LEVEL: u32 = 1;

/// The environment variable that overrides the attempt timeout.
pub const ATTEMPT_TIMEOUT_ENV: &str = "SEARCHWIRE_ATTEMPT_TIMEOUT";

/// The deprecated old name of [`ATTEMPT_TIMEOUT_ENV`], still read (after it) for one release:
/// it named a per-attempt value "request timeout".
pub const REQUEST_TIMEOUT_ENV: &str = "SEARCHWIRE_REQUEST_TIMEOUT";

/// opensearch-go's name for the same per-attempt timeout, read as an alias after the two
/// `SEARCHWIRE_*` names (reference 000): a deployment configured for that client keeps it.
pub const OPENSEARCH_GO_TIMEOUT_ENV: &str = "OPENSEARCH_GO_REQUEST_TIMEOUT";

/// Retry budget ratio: 0.2, so retries add at most 20 % load on top of the requests the
/// client sends anyway. Enough to step over a dead node or a hiccup on a good day (a few
/// percent of requests need a retry); in an outage it caps the retry storm at 1.2× the
/// offered load instead of `max_retries + 1` = 4× (Finagle and tower use 20 % too).
pub const RETRY_BUDGET_RATIO: f64 = 0.2;

/// Retries always allowed per second on top of the ratio: 10. A client that sends one
/// request a minute still gets its retries; 10/s is negligible load for any cluster.
pub const RETRY_BUDGET_MIN_PER_SEC: u32 = 10;

/// How long a request's deposit (and a retry's withdrawal) counts: 10 s. Long enough to
/// smooth bursts, short enough that the budget follows the current traffic (tower's default).
pub const RETRY_BUDGET_WINDOW: Duration = Duration::from_secs(10);

/// The cluster breaker's window: 5 minutes (the reference's sliding window). Long enough
/// that a burst of failures in a quiet minute does not trip it on its own.
pub const BREAKER_WINDOW: Duration = Duration::from_secs(300);

/// Attempts the breaker's window must hold before it may open: 50 (the reference). A
/// handful of failures of a quiet client is not evidence of a dead cluster.
pub const BREAKER_MIN_REQUESTS: u32 = 50;

/// Failure rate above which the breaker opens: 60 % (the reference). A cluster with one node
/// of three down fails at most a third of first attempts; 60 % means the cluster as a whole
/// is failing.
pub const BREAKER_FAILURE_RATE: f64 = 0.6;

/// First cool-down of an open breaker: 5 s. The half-open probes cost 3 attempts, so
/// probing early is cheap, and a cluster that recovers in seconds (a restart, a GC pause)
/// gets its traffic back in seconds. (The reference's example uses 30 s; its own recovery
/// measurement is in seconds.)
pub const BREAKER_COOL_DOWN: Duration = Duration::from_secs(5);

/// Longest cool-down: 60 s. Each failed probe doubles the cool-down, so a long outage is
/// probed once a minute, like the resurrection schedule's order of magnitude.
pub const BREAKER_MAX_COOL_DOWN: Duration = Duration::from_secs(60);

/// Probes admitted while half-open, and successes needed to close: 3 (the reference's
/// `probeCount`). One success can be luck; three in a row is a cluster that answers.
pub const BREAKER_PROBES: u32 = 3;

/// Consecutive 502/503/504 answers after which a node is ejected (marked dead and handed to
/// resurrection): 5. One 503 is a relocating shard; five in a row is a node that cannot
/// serve. Connectivity failures eject after one, as before: a refused connection is certain.
pub const NODE_GATEWAY_FAILURES_TO_EJECT: u32 = 5;

/// Cap of every [`ClassBackoff::reference`](crate::ClassBackoff::reference) delay: 30 s (the
/// reference's cap).
pub const CLASS_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// Jitter spread of the reference class backoff: 0.2, a multiplier uniform in [0.8, 1.2].
pub const CLASS_BACKOFF_JITTER: f64 = 0.2;

/// Adaptive jitter counts the retries of the last 5 minutes (the reference's window for
/// `es_retry_count`).
pub const ADAPTIVE_JITTER_WINDOW: Duration = Duration::from_secs(300);

/// From 3 retries in the window, backoffs are stretched by 1.8 (the reference's table).
pub const ADAPTIVE_JITTER_MID_THRESHOLD: u32 = 3;

/// From 10 retries in the window, or with the breaker not closed, by 3.0.
pub const ADAPTIVE_JITTER_HIGH_THRESHOLD: u32 = 10;

/// The middle multiplier: 1.8.
pub const ADAPTIVE_JITTER_MID: f64 = 1.8;

/// The high multiplier: 3.0.
pub const ADAPTIVE_JITTER_HIGH: f64 = 3.0;

/// First exponential retry delay: 100 ms. Most transient failures of a search cluster (a
/// node restarting a listener, a 503 while a shard relocates, a connection reset) clear
/// within tens to hundreds of milliseconds, and the retry usually goes to a different node
/// anyway. Waiting longer on the first retry mostly adds latency; waiting less hits the
/// same hiccup again.
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);

/// Largest exponential retry delay: 10 s. Doubling from 100 ms passes 10 s at the eighth
/// retry. A node still failing after that is the node pool's problem (it is marked dead
/// and resurrected on its own schedule), not the request's; sleeping longer inside one
/// request just burns the caller's deadline.
pub const BACKOFF_CAP: Duration = Duration::from_secs(10);

/// Largest delay of a linear backoff: 30 s. Linear growth is slow, so the cap only matters
/// for long retry budgets; 30 s matches the dead-node resurrection maximum, so a single
/// request never waits between attempts longer than a dead node waits between checks.
pub const LINEAR_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// First resurrection timeout of a dead node: 5 s. A node that just refused connections is
/// usually restarting (a JVM takes tens of seconds); checking sooner mostly produces more
/// refusals, while a brief network blip costs only seconds.
pub const RESURRECT_INITIAL: Duration = Duration::from_secs(5);

/// Largest resurrection timeout: 30 s, the longest a recovered node can stay out of
/// rotation; beyond that the client runs on reduced capacity for no gain.
pub const RESURRECT_MAX: Duration = Duration::from_secs(30);

/// Failures after which the resurrection exponent stops growing: 5 (2^5 = 32 × initial).
/// With the default initial timeout the 30 s cap is reached at the fourth failure, so the
/// cutoff only matters when `initial` is lowered.
pub const RESURRECT_FACTOR_CUTOFF: u32 = 5;

/// Shortest resurrection timeout, used when every node is dead: 500 ms. Recovering capacity
/// is then all that matters, but two checks per second per node is as aggressive as it gets
/// without becoming a busy loop.
pub const RESURRECT_MINIMUM: Duration = Duration::from_millis(500);

/// Resurrection jitter, in timeouts: 0.5. Spreads the checks of clients that lost the
/// cluster at the same moment over an extra half-timeout, so they do not return as one
/// thundering herd of TLS handshakes.
pub const RESURRECT_JITTER_SCALE: f64 = 0.5;

/// Cores assumed for a server that has not reported `allocated_processors`: 8 (the
/// reference's default), a common production node size and a middle guess that is neither
/// reckless for small nodes nor timid for large ones.
pub const SERVER_CORES: u32 = 8;

/// The hedge delay when hedging is on: the observed p95 of recent attempts. Hedging after
/// the p95 sends at most ~5 % of reads twice on a steady cluster, and exactly the slow
/// ones ("The Tail at Scale" hedged after the p95 as well).
pub const HEDGE_PERCENTILE: f64 = 95.0;

/// Hedges allowed per read sent: 0.05 (at most 5 % extra attempts, over the retry budget's
/// window). A stalled node is a few percent of traffic; more hedges than that would be
/// load the cluster pays for a cluster-wide slowdown hedging cannot fix.
pub const HEDGE_MAX_EXTRA: f64 = 0.05;

/// The adaptive concurrency limit before anything was learned: 1 request in flight, TCP's
/// slow start. Vegas grows it by max(1, log10(limit)) per uncongested sample, so by at least
/// the limit per round trip: it doubles every round trip, from 1 to 256 in eight. Netflix
/// concurrency-limits starts at 20, which on a small cluster is a burst of 20 queued
/// requests before the first latency arrives (on the fake cluster's one-node capacity model,
/// a third of the admitted requests' top 1 % of latencies in a 15 s run).
pub const CONCURRENCY_INITIAL_LIMIT: u32 = 1;

/// The adaptive concurrency limit's floor: 1. Even a cluster refusing everything gets one
/// request at a time, so the client sees it recover.
pub const CONCURRENCY_MIN_LIMIT: u32 = 1;

/// The adaptive concurrency limit's ceiling: 1,000 requests in flight. Far above what one
/// client should have outstanding; a bound on what a run of fast samples can grow it to.
pub const CONCURRENCY_MAX_LIMIT: u32 = 1000;

/// How long a request over the limit waits for a slot: 0, it fails at once. Shedding at
/// once keeps the admitted requests' latency (the point of the limit); a caller who would
/// rather queue sets a wait, which its deadline still bounds.
pub const CONCURRENCY_MAX_WAIT: Duration = Duration::ZERO;

/// Shortest periodic cluster-health refresh interval: 5 s. Small clusters would otherwise
/// poll every second or two for no routing benefit.
pub const MIN_HEALTH_REFRESH: Duration = Duration::from_secs(5);

/// Longest periodic cluster-health refresh interval: 5 min. The stored health is reported
/// (`Client::cluster_health`), not used for routing or load-shedding (node selection reads
/// each node's own outcomes); older than 5 minutes it would mislead whoever reads it.
pub const MAX_HEALTH_REFRESH: Duration = Duration::from_secs(300);

/// Latency-aware selection's time constant: 10 s (linkerd2-proxy's and Finagle's peak-EWMA
/// default). An estimate forgets a slow answer over about this long, so one slow second does
/// not steer traffic for a minute, while a burst of fast answers does not make a slow node
/// look healthy. A node that gets no request for this long (because it was slow) is given
/// the cluster median and tried again: a slow node costs a few requests per 10 s, and a
/// recovered one is back within about 10 s.
pub const SELECTION_DECAY: Duration = Duration::from_secs(10);

/// One row of the defaults table, as printed in docs and `--help`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultEntry {
    /// The builder method that changes it.
    pub setting: &'static str,
    /// The default, rendered.
    pub value: String,
    /// Why.
    pub why: &'static str,
}

/// Every default of the client, for documentation and `--help`.
pub fn table() -> Vec<DefaultEntry> {
    use crate::clock::duration::format_duration as d;
    vec![
        DefaultEntry {
            setting: "max_retries",
            value: MAX_RETRIES.to_string(),
            why:
                "up to 4 attempts: enough to step over a dead node or two without multiplying load",
        },
        DefaultEntry {
            setting: "retry_on_status",
            value: "502,503,504,429".to_string(),
            why: "gateway errors and throttling are transient; other statuses repeat",
        },
        DefaultEntry {
            setting: "backoff",
            value: format!(
                "exp:{}:{} (full jitter)",
                d(BACKOFF_BASE),
                d(BACKOFF_CAP)
            ),
            why: "retries spread out instead of stampeding a recovering node",
        },
        DefaultEntry {
            setting: "attempt_timeout",
            value: d(ATTEMPT_TIMEOUT),
            why: "no attempt hangs forever on a stalled connection; generous for bulk. A timed-out node is only suspect: it is marked dead when it also fails GET / within min(2s, attempt timeout), else the slow request fails and the node keeps its traffic",
        },
        DefaultEntry {
            setting: "connect_timeout",
            value: d(CONNECT_TIMEOUT),
            why: "an unanswered SYN is a dead path; the request was never sent",
        },
        DefaultEntry {
            setting: "timeout",
            value: "none".to_string(),
            why: "only the caller knows its SLA; set one per request or per client",
        },
        DefaultEntry {
            setting: "health_check_timeout",
            value: d(HEALTH_CHECK_TIMEOUT),
            why: "a node that cannot answer GET / in 5 s gets no user traffic yet",
        },
        DefaultEntry {
            setting: "cluster_health_reprobe_after",
            value: d(CLUSTER_HEALTH_REPROBE_AFTER),
            why: "a node denied cluster:monitor/health is probed again this often; permissions change on the scale of hours. An Available node that starts answering 401/403 is probed again at its next check (reference 003's runtime fallback), not after this interval (its refresh section says so): a revoked permission is seen at once, a restored one within a check",
        },
        DefaultEntry {
            setting: "health_check_jitter",
            value: format!("{}%", HEALTH_CHECK_JITTER * 100.0),
            why: "clients deployed together do not re-probe together",
        },
        DefaultEntry {
            setting: "health_refresh",
            value: format!(
                "on (every clamp(live × clients_per_server / health_check_rate, {}, {}); not for single-node clusters)",
                d(MIN_HEALTH_REFRESH),
                d(MAX_HEALTH_REFRESH)
            ),
            why: "keeps per-node cluster health current (Client::cluster_health, the bulk retry log's cluster) while spreading all clients' polls over the servers. No routing or load-shedding decision reads it (the reference's reason for the interval): node selection uses each node's own request outcomes, which are fresher than any poll",
        },
        DefaultEntry {
            setting: "discover_on_start / discover_interval",
            value: "off / never".to_string(),
            why: "sniffing needs cluster:monitor/nodes/info and may expose internal addresses; opt in",
        },
        DefaultEntry {
            setting: "discovery_timeout",
            value: d(DISCOVERY_TIMEOUT),
            why: "the node list is small; a node that cannot send it in 5 s is not the one to ask",
        },
        DefaultEntry {
            setting: "discover_max_nodes",
            value: DISCOVER_MAX_NODES.to_string(),
            why: "far above a real cluster, far below what a broken or hostile nodes reply can list; more is ignored with a warning",
        },
        DefaultEntry {
            setting: "rediscover_on_failure",
            value: format!("off (at most every {})", d(REDISCOVER_MIN_GAP)),
            why: "a cluster losing nodes one by one is not asked once per casualty",
        },
        DefaultEntry {
            setting: "retry_budget",
            value: format!(
                "{}% of requests + {}/s over {}",
                (RETRY_BUDGET_RATIO * 100.0).round(),
                RETRY_BUDGET_MIN_PER_SEC,
                d(RETRY_BUDGET_WINDOW)
            ),
            why: "an outage costs at most 1.2x the offered load, not max_retries+1 times",
        },
        DefaultEntry {
            setting: "class_backoff",
            value: "off (ClassBackoff::reference() for the reference table)".to_string(),
            why: "the default stays one exponential curve; per-class rules are opt-in",
        },
        DefaultEntry {
            setting: "adaptive_jitter",
            value: format!(
                "x1 below {} retries in {}, x{} below {}, x{} above or breaker not closed",
                ADAPTIVE_JITTER_MID_THRESHOLD,
                d(ADAPTIVE_JITTER_WINDOW),
                ADAPTIVE_JITTER_MID,
                ADAPTIVE_JITTER_HIGH_THRESHOLD,
                ADAPTIVE_JITTER_HIGH
            ),
            why: "a client that keeps retrying spreads its retries further apart. It reads the client's own retry counter, not Prometheus as the reference does: no metrics pipeline or scrape lag, and only the retries this client makes are its to slow down. Half-open counts as open (x3): the probes after an outage must not all come back at once",
        },
        DefaultEntry {
            setting: "circuit_breaker",
            value: format!(
                "opens at >{}% of >={} attempts in {}; cool-down {} doubling to {}; {} probes",
                (BREAKER_FAILURE_RATE * 100.0).round(),
                BREAKER_MIN_REQUESTS,
                d(BREAKER_WINDOW),
                d(BREAKER_COOL_DOWN),
                d(BREAKER_MAX_COOL_DOWN),
                BREAKER_PROBES
            ),
            why: "a failing cluster gets no traffic but probes; callers fail fast. The trip rule is reference 004 §5's failure rate over a window, not §4.2's 5 consecutive failures (one burst of a quiet client does not trip it), with §4.2's 3 probes; >=50 where §5 says >50: min_requests means at least, one attempt apart",
        },
        DefaultEntry {
            setting: "node_gateway_failures_to_eject",
            value: NODE_GATEWAY_FAILURES_TO_EJECT.to_string(),
            why: "one 503 is a relocating shard; five in a row is a node that cannot serve",
        },
        DefaultEntry {
            setting: "max_response_bytes",
            value: format!("{} MiB", MAX_RESPONSE_BYTES / (1024 * 1024)),
            why: "an endless or huge body must not exhaust memory; page big reads instead",
        },
        DefaultEntry {
            setting: "compress_requests",
            value: format!(
                "off; --compress: bodies of {} KiB and more, gzip level {}",
                COMPRESS_MIN_BYTES / 1024,
                GZIP_LEVEL
            ),
            why: "a body under one TCP segment saves no packet; level 1 keeps most of the ratio for the least CPU",
        },
        DefaultEntry {
            setting: "retry_after_cap",
            value: d(RETRY_AFTER_CAP),
            why: "one misconfigured proxy cannot park callers for an hour",
        },
        DefaultEntry {
            setting: "pool_idle_timeout",
            value: d(POOL_IDLE_TIMEOUT),
            why: "close idle connections before load balancers (ALB 60 s, nginx 75 s) drop them",
        },
        DefaultEntry {
            setting: "pool_max_idle_per_node",
            value: POOL_MAX_IDLE_PER_NODE.to_string(),
            why: "enough keep-alive connections for busy applications",
        },
        DefaultEntry {
            setting: "resurrect_initial",
            value: d(RESURRECT_INITIAL),
            why: "first retry of a dead node, before scaling by cluster health",
        },
        DefaultEntry {
            setting: "resurrect_max",
            value: d(RESURRECT_MAX),
            why: "cap of the exponential resurrection timeout",
        },
        DefaultEntry {
            setting: "resurrect_factor_cutoff",
            value: RESURRECT_FACTOR_CUTOFF.to_string(),
            why: "the exponent stops growing after this many failures",
        },
        DefaultEntry {
            setting: "resurrect_minimum",
            value: d(RESURRECT_MINIMUM),
            why: "floor: how aggressively a fully dead cluster is retried",
        },
        DefaultEntry {
            setting: "resurrect_jitter_scale",
            value: format!("{}", RESURRECT_JITTER_SCALE),
            why: "spreads many clients' resurrection checks apart",
        },
        DefaultEntry {
            setting: "server_cores",
            value: SERVER_CORES.to_string(),
            why: "capacity model when discovery has not reported allocated_processors",
        },
        DefaultEntry {
            setting: "hedging",
            value: format!(
                "off (when on: after the observed p{HEDGE_PERCENTILE} of recent attempts, at most {}% extra attempts)",
                (HEDGE_MAX_EXTRA * 100.0).round()
            ),
            why: "a second copy of a read is load; opt in, for reads only. A hedge also takes one retry from the retry budget, and none is sent while the breaker is not closed",
        },
        DefaultEntry {
            setting: "adaptive_concurrency",
            value: format!(
                "off (when on: Vegas from {CONCURRENCY_INITIAL_LIMIT} in flight, within {CONCURRENCY_MIN_LIMIT}..{CONCURRENCY_MAX_LIMIT}; over the limit fail at once)"
            ),
            why: "a limit on requests in flight keeps goodput when the cluster is past capacity; opt in, since a single caller never needs it. Failing at once (ConcurrencyLimited) keeps the admitted requests' latency; max_wait lets a request queue, within its deadline",
        },
        DefaultEntry {
            setting: "selection / selection_decay",
            value: format!("latency (two random choices, peak EWMA) / {}", d(SELECTION_DECAY)),
            why: "a slow, stalled or overloaded node gets almost no new requests, where round robin sends it a full share; an estimate forgets over the decay, and a node unsampled for one decay starts again from the cluster median, so a recovered node is back within it. selection(RoundRobin) / --selection round-robin keeps weighted round robin",
        },
    ]
}

/// The defaults table as Markdown rows (`| setting | value | why |`), as in
/// `docs/configuration.md`.
pub fn markdown_table() -> String {
    let mut s = String::from("| setting | default | why |\n| --- | --- | --- |\n");
    for e in table() {
        s.push_str(&format!("| `{}` | {} | {} |\n", e.setting, e.value, e.why));
    }
    s
}
