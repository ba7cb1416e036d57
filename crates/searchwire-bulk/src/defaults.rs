//! The one table of the bulk indexer's defaults, each with the reason it is what it is.
//! [`BulkIndexer::builder`](crate::BulkIndexer::builder) and [`RetryPolicy::default`](crate::RetryPolicy) read these constants, and `docs/bulk.md`
//! contains [`markdown_table`] verbatim (checked by `cargo test -p searchwire-bulk --test docs`).

use std::time::Duration;

use crate::rule::ClassRule;

/// Actions per bulk request: 1,000. Large enough that the per-request overhead (HTTP, the
/// coordinating node's fan-out to shards) is amortized, small enough that one rejected
/// request costs little to resend and that a response stays small. Elastic's and
/// OpenSearch's sizing advice starts in the hundreds to low thousands of documents.
pub const BATCH_ACTIONS: usize = 1_000;

/// Bytes per bulk request (action lines and sources): 5 MiB, the low end of the 5–15 MB
/// that the OpenSearch and Elasticsearch tuning guides recommend. Bigger requests stress the
/// coordinating node's heap and make every rejection more expensive. A cluster that
/// answers 413 (its `http.max_content_length` is lower) halves it for the indexer's life,
/// until a request fits; the refused items are sent again at once, never dead-lettered.
pub const BATCH_BYTES: usize = 5 * 1024 * 1024;

/// The smallest size the adaptive batch size goes down to: 128 KiB. Below about 100 KB a
/// bulk request's fixed cost (the round trip, the coordinating node's fan-out to every
/// shard it touches) outweighs its documents, and the cluster does more work per document,
/// not less, when it is already throttling.
pub const MIN_BATCH_BYTES: usize = 128 * 1024;

/// A bulk request slower than 10 s makes the adapted batch size one step smaller. A
/// healthy cluster indexes 5 MiB in well under a second or two; ten seconds is a batch that
/// holds its items, their permits and a request slot far longer than it should, and far
/// from the 2-minute request timeout that would cut it and send it again.
pub const BATCH_LATENCY_TARGET: Duration = Duration::from_secs(10);

/// A partly filled batch is sent after 1 s. A trickle of documents becomes searchable
/// within about the default refresh interval (also 1 s) instead of waiting for a full batch.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Bulk requests in flight at most: 4. One or two per node of a typical 3-node cluster;
/// the write thread pools of the data nodes, not the client, are the bottleneck, and the
/// adaptive limit lowers this as soon as the cluster answers 429.
pub const MAX_CONCURRENCY: usize = 4;

/// Actions the indexer holds at most (buffered, in flight, or waiting for a retry) before
/// `add` waits: 5 × [`BATCH_ACTIONS`] — every request in flight plus one batch being filled.
/// This is the back-pressure bound; memory is about this many actions' bytes.
pub const MAX_PENDING_ACTIONS: usize = (MAX_CONCURRENCY + 1) * BATCH_ACTIONS;

/// Bytes the indexer holds at most before `add` waits: 5 × [`BATCH_BYTES`] (25 MiB), for
/// the same reason as [`MAX_PENDING_ACTIONS`].
pub const MAX_PENDING_BYTES: usize = (MAX_CONCURRENCY + 1) * BATCH_BYTES;

/// Time limit of one bulk request: 2 minutes, as its deadline and as its attempt timeout.
/// The transport makes one attempt per send (the indexer owns the retries), and that
/// attempt gets this whole limit rather than the client's 30 s default attempt timeout: a
/// bulk request waiting for a primary shard (after a node died) waits up to the cluster's
/// 1-minute `timeout`, and the limit sits above that so the cluster answers first instead
/// of the batch being cut and sent again. Reference 000 advises a generous per-attempt
/// timeout for bulk for the same reason.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Per-item retry rule for throttling (429, `rejected_execution_exception`): reference 004
/// §3.3 — `Retry-After` or 100 ms, ×1.5, 5 retries. Rejections clear as soon as the write
/// queue drains, so start soon and grow gently.
pub const THROTTLED: ClassRule = ClassRule::new(Duration::from_millis(100), 1.5, 5);

/// Per-item retry rule for unavailable shards (503, `unavailable_shards_exception`, other
/// 5xx): reference 004 §3.3 — 500 ms, ×2, 3 retries. A primary being relocated or promoted
/// takes seconds, so start later and back off faster.
pub const UNAVAILABLE: ClassRule = ClassRule::new(Duration::from_millis(500), 2.0, 3);

/// Per-item retry rule for request-level resets and timeouts: reference 004 §3.3 —
/// 200 ms, ×1.8, 4 retries. The transport already failed over to other nodes; this is the
/// indexer's own retry of the whole batch (safe because every action has an id).
pub const CONNECTION: ClassRule = ClassRule::new(Duration::from_millis(200), 1.8, 4);

/// Jitter multiplies every computed delay by a uniform factor in 0.8–1.2 (reference 004
/// §3.3), so clients rejected together do not return together. A `Retry-After` is jittered
/// too, upwards only: the delay never falls below what the server asked for.
pub const JITTER: (f64, f64) = (0.8, 1.2);

/// No retry delay exceeds 30 s (reference 004 §3.3), `Retry-After` included.
pub const DELAY_CAP: Duration = Duration::from_secs(30);

/// An item's deadline: 5 minutes after `add`. Until then a retryable item (429, 503, a
/// reset, a timeout, no node) is retried — past its class's count at the class's capped
/// delay — and never dead-lettered: a throttled document is not a bad one, and Logstash and
/// Beats likewise retry 429s for as long as it takes. Five minutes outlasts a burst of
/// throttling, the cluster's 1-minute wait for a primary, and a node's restart and shard
/// recovery, while an import against a cluster that stays down for longer still ends with
/// its documents reported (dead letters with `retryable: true`, `deadline_exceeded`).
/// With a retry sink (a durable queue) the class count hands an item on first; see
/// [`INGEST_QUEUE_AFTER`].
pub const ITEM_DEADLINE: Option<Duration> = Some(Duration::from_secs(300));

/// While the transport's circuit breaker is open, the indexer checks it again every 250 ms
/// instead of sending (the breaker turns half-open lazily, on the next look).
pub const BREAKER_POLL: Duration = Duration::from_millis(250);

/// Adaptive concurrency: on a response with throttled items the limit is multiplied by 0.5
/// (at most once per round of requests in flight), like TCP's congestion window. Halving
/// drains a full write queue within one round; smaller cuts keep the cluster rejecting.
pub const DECREASE_FACTOR: f64 = 0.5;

/// The response is read with `filter_path` so a 10,000-item response carries only what the
/// indexer reads (status, result, error type and reason per item) — about 30 bytes per
/// successful item instead of about 200.
pub const FILTER_PATH: &str =
    "errors,items.*.status,items.*.result,items.*.error.type,items.*.error.reason";

/// The `filter_path` of a request that carries a tracked item
/// ([`BulkIndexer::add_tracked`](crate::BulkIndexer::add_tracked)): what a tracked item's
/// outcome reports (a relay passes it on to its client as the cluster said it) —
/// [`FILTER_PATH`] plus `_version`, `_seq_no`, `_primary_term`, `_shards`, `forced_refresh`
/// and the whole error object (`caused_by`, `index`, `shard`, ...; kept up to
/// [`MAX_ERROR_DETAIL_BYTES`](crate::MAX_ERROR_DETAIL_BYTES) per item). Still no `_index` or
/// `_id` (the caller knows them): about 60 bytes more per successful item.
pub const FILTER_PATH_TRACKED: &str = "errors,items.*.status,items.*.result,items.*.error,items.*._version,items.*._seq_no,items.*._primary_term,items.*._shards,items.*.forced_refresh";

fn rule(r: &ClassRule) -> String {
    format!(
        "{} ×{}, {} retries",
        fmt_duration(r.base),
        r.factor,
        r.max_retries
    )
}

/// [`QueueSink`](crate::QueueSink): items waiting for their append before `room()` waits.
pub const QUEUE_SINK_CAPACITY: usize = 10_000;

/// [`QueueSink`](crate::QueueSink): messages per append at most.
pub const QUEUE_SINK_MAX_BATCH: usize = 1_000;

/// [`deliver`](crate::deliver): messages leased at once (four default bulk requests).
pub const DELIVERY_LEASE_BATCH: usize = MAX_CONCURRENCY * BATCH_ACTIONS;

/// [`deliver`](crate::deliver): the wait between polls when nothing is due or the breaker
/// is open.
pub const DELIVERY_IDLE_POLL: Duration = BREAKER_POLL;

/// [`deliver`](crate::deliver): a queued message that keeps failing retryably (throttled,
/// unavailable, no connection) is retried — past its `max_retries` deferred, not counted —
/// until it is 24 hours old, and only then is it a dead letter. A queue exists to outlast
/// outages longer than an ingest waits; a day covers a cluster down overnight, and a
/// message older than that is reported rather than retried for ever. While the breaker is
/// open nothing is leased, so an outage itself costs no attempts.
pub const DELIVERY_ITEM_DEADLINE: Option<Duration> = Some(Duration::from_secs(24 * 3600));

/// `searchwire ingest --queue-after`: with a queue, the item deadline.
pub const INGEST_QUEUE_AFTER: Duration = Duration::from_secs(10);

/// `searchwire ingest --drain-timeout`: how long an ingest delivers from its queue.
pub const INGEST_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// `100ms`, `1.5s`, `2m`, `30s`.
fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 3_600_000 == 0 && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 && ms > 0 {
        format!("{}s", ms / 1000)
    } else if ms >= 1000 {
        format!("{}s", d.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}

/// The defaults as a Markdown table (setting, default, why), as in `docs/bulk.md`.
pub fn markdown_table() -> String {
    let rows: Vec<(&str, String, &str)> = vec![
        (
            "batch_actions",
            BATCH_ACTIONS.to_string(),
            "amortizes per-request overhead; a rejected request is cheap to resend",
        ),
        (
            "batch_bytes",
            format!("{} MiB", BATCH_BYTES / (1024 * 1024)),
            "low end of the 5–15 MB the tuning guides recommend; the adaptive size's upper bound, halved after a 413 (the cluster's http.max_content_length) until a request fits",
        ),
        (
            "adaptive_batch_bytes",
            "on".to_string(),
            "halved on 429, a step down past the latency target, else climbs toward the most bytes per second",
        ),
        (
            "min_batch_bytes",
            format!("{} KiB", MIN_BATCH_BYTES / 1024),
            "below ~100 KB the fixed cost of a bulk request outweighs its documents",
        ),
        (
            "batch_latency_target",
            fmt_duration(BATCH_LATENCY_TARGET),
            "a slower request holds items, permits and a slot too long, yet stays far from the request timeout",
        ),
        (
            "flush_interval",
            fmt_duration(FLUSH_INTERVAL),
            "a trickle becomes searchable about as fast as the refresh interval",
        ),
        (
            "max_concurrency",
            MAX_CONCURRENCY.to_string(),
            "one or two requests per node of a 3-node cluster; lowered on 429",
        ),
        (
            "max_pending_actions",
            MAX_PENDING_ACTIONS.to_string(),
            "back-pressure: every request in flight plus one batch being filled",
        ),
        (
            "max_pending_bytes",
            format!("{} MiB", MAX_PENDING_BYTES / (1024 * 1024)),
            "the same bound in bytes; memory stays flat whatever the input size",
        ),
        (
            "request_timeout",
            fmt_duration(REQUEST_TIMEOUT),
            "deadline and attempt timeout of a bulk request (one transport attempt): above the cluster's 1-minute wait for an unavailable primary",
        ),
        (
            "throttled (429)",
            format!("Retry-After or {}", rule(&THROTTLED)),
            "reference 004 §3.3: rejections clear as the write queue drains",
        ),
        (
            "unavailable (503, 5xx)",
            rule(&UNAVAILABLE),
            "reference 004 §3.3: primary promotion takes seconds",
        ),
        (
            "connection (reset, timeout)",
            rule(&CONNECTION),
            "reference 004 §3.3: the whole batch again, safe because every action has an id",
        ),
        (
            "jitter",
            format!("×{}–{}", JITTER.0, JITTER.1),
            "clients rejected together do not return together",
        ),
        (
            "delay_cap",
            fmt_duration(DELAY_CAP),
            "reference 004 §3.3; Retry-After included",
        ),
        (
            "item_deadline",
            ITEM_DEADLINE.map_or_else(|| "none".to_string(), fmt_duration),
            "a retryable item is retried (past its class count at the capped delay) and never dead-lettered before it: throttling, a primary's 1-minute wait and a node restart are waited out",
        ),
        (
            "breaker_poll",
            fmt_duration(BREAKER_POLL),
            "nothing is sent while the transport's breaker is open",
        ),
        (
            "adaptive concurrency",
            format!("×{DECREASE_FACTOR} on 429 (once per round), +1 per clean round"),
            "AIMD: drains a full write queue in one round, probes upward slowly",
        ),
        (
            "ids",
            "UUIDv7 (or SHA-256 of the source)".to_string(),
            "every retry is idempotent; UUIDv7 ids are time-ordered, friendly to the index",
        ),
        (
            "filter_path",
            format!("`{FILTER_PATH}`"),
            "a 10,000-item response carries only what is read",
        ),
        (
            "filter_path (tracked items)",
            "the above with the whole `items.*.error` + `items.*._version,items.*._seq_no,items.*._primary_term,items.*._shards,items.*.forced_refresh`".to_string(),
            "only a request carrying a tracked item asks for what its outcome reports",
        ),
        (
            "queue sink capacity",
            QUEUE_SINK_CAPACITY.to_string(),
            "items waiting for a durable append before the producer waits (back-pressure)",
        ),
        (
            "queue sink max batch",
            QUEUE_SINK_MAX_BATCH.to_string(),
            "one group commit per append; the next batch collects meanwhile",
        ),
        (
            "delivery lease batch",
            DELIVERY_LEASE_BATCH.to_string(),
            "enough for every request in flight of the delivery indexer",
        ),
        (
            "delivery idle poll",
            fmt_duration(DELIVERY_IDLE_POLL),
            "as the breaker poll: a recovered cluster is seen within it",
        ),
        (
            "delivery item deadline",
            DELIVERY_ITEM_DEADLINE.map_or_else(|| "none".to_string(), fmt_duration),
            "a queued message failing retryably is retried (past `max_retries` deferred, not counted) until this old: a queue outlasts outages",
        ),
        (
            "ingest --queue-after",
            fmt_duration(INGEST_QUEUE_AFTER),
            "the connection class's 4 retries (~2.4 s) and a breaker probe fit before an item is queued",
        ),
        (
            "ingest --drain-timeout",
            fmt_duration(INGEST_DRAIN_TIMEOUT),
            "an ingest is a batch job: a longer outage is left to `searchwire queue deliver`",
        ),
    ];
    let mut out = String::from("| setting | default | why |\n| --- | --- | --- |\n");
    for (name, value, why) in rows {
        out.push_str(&format!("| `{name}` | {value} | {why} |\n"));
    }
    out
}
