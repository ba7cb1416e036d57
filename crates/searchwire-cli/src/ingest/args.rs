//! The `searchwire ingest` command line: [`IngestArgs`] (input, ids, batching, retries,
//! progress, checkpoint) and [`IngestQueueArgs`] (the durable retry queue), with their
//! value parsers and the `--help` text that documents the summary and the exit codes.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use searchwire::explain::format_duration;
use searchwire_bulk::defaults as d;

use crate::connect::ConnectArgs;
use crate::durations::{parse_duration_arg, parse_positive_duration};

const AFTER_HELP: &str = "\
Input: one JSON object per line. With --index (or --format docs) each line is a document; \
otherwise lines are bulk-format pairs ({\"index\"|\"create\"|\"update\"|\"delete\":{\"_index\",\"_id\",...}} \
then the source, none for delete). Blank lines are skipped.
Ids: --id-field PATH (dotted, e.g. user.id), else the action's _id, else --content-hash-ids \
(SHA-256 of the source), else a UUIDv7. With --resume, lines without an id get content-hash \
ids (a random id would duplicate the re-sent overlap).
Output: progress on stderr (a live line on a terminal, a plain line every --progress-every \
otherwise), and one JSON summary on stdout at the end. Dead letters (items the cluster \
refused for good, retries exhausted, malformed lines with their line number) go to \
--dead-letter FILE as NDJSON with reasons, else to stderr.
Ctrl-C (or SIGTERM) stops reading, delivers what was read (the batches in flight are \
answered), writes the checkpoint and exits 130; a second one exits at once.
Queue: with --queue-dir DIR (embedded) or --redis URL, what the cluster cannot take now \
(retries or --queue-after ran out: 429, 503, connection failures, the breaker open) is \
appended durably to the queue instead of the dead letters, with --priority N; after the \
input, the ingest delivers from the queue for up to --drain-timeout and leaves the rest \
queued (summary \"queue\":{\"queued\",\"duplicates\",\"append_failed\",\"delivery\":\
{\"delivered\",\"rescheduled\",\"dead_lettered\",\"left\"}}); `searchwire queue deliver` \
drains it later. The --resume checkpoint counts a line once written or durably queued.
Exit codes: 0 every line acknowledged by the cluster, 1 some lines dead-lettered, 2 usage or \
configuration error (or unreadable input), 4 the cluster was unreachable, 5 credentials \
rejected, 6 completed with messages left durably queued (summary \"left\" > 0: run \
`searchwire queue deliver` later), 130 interrupted.";

/// Input format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Documents with --index, bulk pairs without.
    Auto,
    /// One document per line (needs --index).
    Docs,
    /// Bulk-format action/source pairs.
    Bulk,
}

/// The operation for plain documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DocOp {
    /// `create`: never overwrites; duplicates impossible by construction.
    Create,
    /// `index`: overwrites a document with the same id.
    Index,
}

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct IngestArgs {
    #[arg(value_name = "FILE|-", help = "NDJSON input file, or - for stdin")]
    pub input: String,

    #[command(flatten)]
    pub conn: ConnectArgs,

    #[command(flatten)]
    pub compress: crate::compress_args::CompressArgs,

    #[arg(
        long,
        value_name = "NAME",
        help = "Index for plain documents (and bulk actions without _index)"
    )]
    pub index: Option<String>,

    #[arg(long, value_enum, default_value = "auto", help = "Input format")]
    pub format: Format,

    #[arg(
        long,
        value_enum,
        default_value = "create",
        help = "Operation for plain documents"
    )]
    pub op: DocOp,

    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "content_hash_ids",
        help = "Take each document's id from this field (dotted path)"
    )]
    pub id_field: Option<String>,

    #[arg(
        long,
        help = "Lines without an id get the SHA-256 of their source as id"
    )]
    pub content_hash_ids: bool,

    #[arg(
        long,
        value_name = "FILE",
        help = "Write dead letters here (NDJSON with reasons); appended to with --resume"
    )]
    pub dead_letter: Option<PathBuf>,

    #[arg(
        long,
        value_name = "FILE",
        help = "Checkpoint file: continue after the acknowledged offset it records, and keep it current"
    )]
    pub resume: Option<PathBuf>,

    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help = format!("Actions per bulk request [default: {}]", d::BATCH_ACTIONS))]
    pub batch_actions: Option<u64>,

    #[arg(long, value_name = "BYTES", value_parser = parse_bytes, help = format!("Bytes per bulk request, e.g. 5MiB [default: {}MiB]", d::BATCH_BYTES / (1024 * 1024)))]
    pub batch_bytes: Option<usize>,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, help = format!("Send a partial batch after DUR [default: {}]", format_duration(d::FLUSH_INTERVAL)))]
    pub flush_interval: Option<Duration>,

    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help = format!("Bulk requests in flight at most (lowered on 429) [default: {}]", d::MAX_CONCURRENCY))]
    pub concurrency: Option<u64>,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, help = format!("Time limit of one bulk request (one attempt; the indexer retries) [default: {}]", format_duration(d::REQUEST_TIMEOUT)))]
    pub timeout: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, help = item_deadline_help())]
    pub item_deadline: Option<Duration>,

    #[arg(
        long,
        value_name = "N",
        help = format!("Retries of a throttled (429) item before it is queued (with a queue; without one it is retried on until --item-deadline) [default: {}, reference 004 §3.3]", d::THROTTLED.max_retries)
    )]
    pub throttle_retries: Option<u32>,

    #[arg(
        long,
        value_name = "N",
        help = format!("Retries of an item on unavailable shards (503) [default: {}]", d::UNAVAILABLE.max_retries)
    )]
    pub unavailable_retries: Option<u32>,

    #[arg(
        long,
        value_name = "N",
        help = format!("Retries of a batch after a reset or timeout [default: {}]", d::CONNECTION.max_retries)
    )]
    pub connection_retries: Option<u32>,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "5s", help = "Progress line interval when stderr is not a terminal")]
    pub progress_every: Duration,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "500ms", help = "How often the --resume checkpoint is written")]
    pub checkpoint_every: Duration,

    #[arg(
        long,
        value_name = "ADDR",
        help = "Serve Prometheus metrics on http://ADDR/metrics (searchwire_* and searchwire_bulk_*)"
    )]
    pub metrics_addr: Option<std::net::SocketAddr>,

    #[command(flatten)]
    pub queue: IngestQueueArgs,
}

/// The durable retry queue of an ingest.
#[derive(Debug, Args)]
pub struct IngestQueueArgs {
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["redis", "redis_sentinel", "redis_cluster"],
        help = "Queue what the cluster cannot take now in this embedded queue (created if missing)"
    )]
    pub queue_dir: Option<PathBuf>,

    #[arg(
        long,
        value_name = "URL",
        help = "Queue what the cluster cannot take now in Redis: redis://[user:password@]host:port[/db]"
    )]
    pub redis: Option<String>,

    #[arg(long, value_name = "NAME", default_value = searchwire_queue::redis::DEFAULT_STREAM, help = "The Redis stream (the queue's name)")]
    pub redis_stream: String,

    #[command(flatten)]
    pub redis_ha: crate::redis_args::RedisHaArgs,

    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help = "Priority of what this ingest queues (0-255, higher is delivered first)"
    )]
    pub priority: u8,

    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, default_value = DRAIN_TIMEOUT, help = "With a queue: how long to deliver from it after the input is read (0: do not); what is left stays queued")]
    pub drain_timeout: Duration,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = QUEUE_AFTER, help = "With a queue: an item not written within DUR of being read (e.g. while the breaker is open) is queued")]
    pub queue_after: Duration,
}

/// Default `--drain-timeout` ([`d::INGEST_DRAIN_TIMEOUT`]): an ingest is a batch job; a
/// cluster that comes back within half a minute is drained by the ingest itself, a longer
/// outage is left to `searchwire queue deliver` (or a relay) instead of holding the job open.
pub const DRAIN_TIMEOUT: &str = "30s";

/// Default `--queue-after` ([`d::INGEST_QUEUE_AFTER`]): the connection class's four retries
/// take about 2.4 s; 10 s leaves room for them and for the breaker's first probe.
pub const QUEUE_AFTER: &str = "10s";

impl IngestQueueArgs {
    pub(super) fn configured(&self) -> bool {
        self.queue_dir.is_some() || self.redis.is_some() || self.redis_ha.configured()
    }
}

/// `1000`, `64KiB`, `5MiB` (also `k`/`m`, `KB`/`MB` as powers of 1024).
pub(super) fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| {
        format!(
            "{} is not a size; give bytes such as 1000, 64KiB or 5MiB",
            searchwire::echo(s)
        )
    })?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        _ => {
            return Err(format!(
                "{}: unknown unit; use KiB or MiB",
                searchwire::echo(s)
            ))
        }
    };
    match n.checked_mul(mult) {
        Some(0) | None => Err(format!(
            "{} must be between 1 byte and {} bytes",
            searchwire::echo(s),
            usize::MAX
        )),
        Some(v) => Ok(v),
    }
}

fn item_deadline_help() -> String {
    format!(
        "A retryable item (429, 503, reset, timeout, no node) is retried for up to DUR after it was read — past its class's retries at the capped delay — and only then is a dead letter; documents the cluster refuses for good are dead letters at once. With a queue, --queue-after takes its place [default: {}]",
        d::ITEM_DEADLINE.map_or_else(|| "none".to_string(), format_duration)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use searchwire::explain::parse_duration;

    #[test]
    fn queue_defaults_match_the_defaults_table() {
        assert_eq!(
            parse_duration(DRAIN_TIMEOUT).ok(),
            Some(d::INGEST_DRAIN_TIMEOUT)
        );
        assert_eq!(
            parse_duration(QUEUE_AFTER).ok(),
            Some(d::INGEST_QUEUE_AFTER)
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("5MiB"), Ok(5 * 1024 * 1024));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("5GB").is_err());
        assert!(parse_bytes("x").is_err());
    }
}
