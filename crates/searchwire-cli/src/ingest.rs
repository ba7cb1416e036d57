//! `searchwire ingest FILE|-`: NDJSON into the cluster through one `searchwire_bulk::BulkIndexer`.
//!
//! Input: plain documents (one JSON object per line, into `--index`) or bulk-format
//! action/source pairs. Every action gets an id before its first send (`--id-field`, the
//! action line's `_id`, a content hash, or a UUIDv7), plain documents are written with
//! `create`, and a 409 on `create` counts as already present — so a re-run or a resumed run
//! never writes a document twice.
//!
//! `--resume FILE` keeps a checkpoint: the input offset below which every line is finished
//! (acknowledged by the cluster, or written to the dead letters and flushed). A killed
//! ingest started again with the same `--resume FILE` continues from there; the lines after
//! the checkpoint that had landed already come back 409 and count as already present.

use std::io::{IsTerminal, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, ValueEnum};
use searchwire::explain::{format_duration, parse_duration};
use searchwire_bulk::defaults as d;
use searchwire_bulk::{AddError, BulkIndexer, FailedItem, IdScheme, OpType, SinkError, Stats};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::args::ConnectArgs;
use crate::exit;
use crate::ingest_parse::{trim_line, Line, LineParser, ParseSpec};
use crate::output;
use crate::request::{connect, start, Auth};
use crate::signals::Signals;

/// Exit code after Ctrl-C (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

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
Exit codes: 0 every line acknowledged (or durably queued), 1 some lines dead-lettered, 2 usage or configuration \
error (or unreadable input), 4 the cluster was unreachable, 5 credentials rejected, 130 interrupted.";

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

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, help = format!("Deadline of one bulk request, every attempt included [default: {}]", format_duration(d::REQUEST_TIMEOUT)))]
    pub timeout: Option<Duration>,

    #[arg(
        long,
        value_name = "N",
        help = format!("Retries of a throttled (429) item [default: {}, reference 004 §3.3]", d::THROTTLED.max_retries)
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
        conflicts_with = "redis",
        help = "Queue what the cluster cannot take now in this embedded queue (created if missing)"
    )]
    pub queue_dir: Option<PathBuf>,

    #[arg(
        long,
        value_name = "URL",
        help = "Queue what the cluster cannot take now in Redis: redis://[user:password@]host:port[/db]"
    )]
    pub redis: Option<String>,

    #[arg(long, value_name = "NAME", requires = "redis", default_value = searchwire_queue::redis::DEFAULT_STREAM, help = "The Redis stream (the queue's name)")]
    pub redis_stream: String,

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

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

impl IngestQueueArgs {
    fn configured(&self) -> bool {
        self.queue_dir.is_some() || self.redis.is_some()
    }
}

pub(crate) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!(
            "{s:?} is zero; give a positive duration such as 5s"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `1000`, `64KiB`, `5MiB` (also `k`/`m`, `KB`/`MB` as powers of 1024).
fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size; give bytes such as 1000, 64KiB or 5MiB"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        _ => return Err(format!("{s:?}: unknown unit; use KiB or MiB")),
    };
    match n.checked_mul(mult) {
        Some(0) | None => Err(format!(
            "{s:?} must be between 1 byte and {} bytes",
            usize::MAX
        )),
        Some(v) => Ok(v),
    }
}

/// The checkpoint file: everything before `offset` (line `line`) is finished.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Checkpoint {
    input: String,
    offset: u64,
    line: u64,
}

/// One input record in flight: its end offset and line, and the action's sequence number
/// (`None` for malformed lines, finished as soon as they are dead-lettered).
struct Pending {
    seq: Option<u64>,
    start_line: u64,
    end_offset: u64,
    end_line: u64,
}

/// Input records not known to be finished, in input order, and the checkpoint reached.
struct Tracker {
    pending: std::collections::VecDeque<Pending>,
    done: Checkpoint,
}

impl Tracker {
    /// Advances the checkpoint over the finished prefix; returns whether it moved.
    fn advance(&mut self, acknowledged_below: u64) -> bool {
        let mut moved = false;
        while let Some(p) = self.pending.front() {
            if p.seq.is_some_and(|s| s >= acknowledged_below) {
                break;
            }
            self.done.offset = p.end_offset;
            self.done.line = p.end_line;
            self.pending.pop_front();
            moved = true;
        }
        moved
    }

    fn line_of(&self, seq: u64) -> Option<u64> {
        self.pending
            .iter()
            .find(|p| p.seq == Some(seq))
            .map(|p| p.start_line)
    }
}

/// Where dead letters go: a file (buffered; flushed before each checkpoint) or stderr.
struct DeadLetters {
    file: Option<std::io::BufWriter<std::fs::File>>,
    count: u64,
    /// The most telling request-level failure seen, for the exit code.
    worst: Option<&'static str>,
}

impl DeadLetters {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.count += 1;
        match &mut self.file {
            Some(f) => f.write_all(line),
            None => {
                output::stderr(&format!("dead letter: {}", String::from_utf8_lossy(line)));
                Ok(())
            }
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        if let Some(f) = &mut self.file {
            f.flush()?;
            f.get_ref().sync_data()?;
        }
        Ok(())
    }
}

struct Shared {
    tracker: Mutex<Tracker>,
    dead: Mutex<DeadLetters>,
    /// Credentials rejected or similar: stop reading.
    fatal: AtomicBool,
    malformed: AtomicU64,
    /// Input lines read in this run.
    lines: AtomicU64,
    /// With a queue: where undeliverable items go (the checkpoint waits for their appends).
    queue_sink: std::sync::OnceLock<searchwire_bulk::QueueSink>,
}

#[derive(Serialize)]
struct Summary<'a> {
    input: &'a str,
    lines: u64,
    #[serde(flatten)]
    stats: &'a Stats,
    malformed: u64,
    dead_letters: u64,
    checkpoint: Option<u64>,
    elapsed_ms: f64,
    docs_per_sec: f64,
    interrupted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<QueueSummary>,
}

/// The summary's `queue` object: what went into the queue, what the drain delivered, and
/// what is `left` queued.
#[derive(Serialize)]
struct QueueSummary {
    #[serde(flatten)]
    sink: searchwire_bulk::QueueSinkReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery: Option<searchwire_bulk::DeliveryReport>,
}

/// Opens the queue of `--queue-dir` or `--redis`, if one is given.
async fn open_queue(a: &IngestQueueArgs) -> Result<Option<searchwire_queue::Queue>, String> {
    use searchwire_queue::{EmbeddedConfig, Queue, RedisConfig};
    if let Some(dir) = a.queue_dir.clone() {
        let shown = dir.display().to_string();
        let q = tokio::task::spawn_blocking(move || Queue::open_embedded(EmbeddedConfig::new(dir)))
            .await
            .map_err(|e| format!("opening the queue {shown} failed: {e}"))?
            .map_err(|e| format!("cannot open the queue {shown}: {e}"))?;
        return Ok(Some(q));
    }
    if let Some(url) = &a.redis {
        let mut c = RedisConfig::new(url.clone());
        c.stream = a.redis_stream.clone();
        let q = Queue::connect_redis(c)
            .await
            .map_err(|e| format!("cannot connect to the Redis queue: {e}"))?;
        return Ok(Some(q));
    }
    Ok(None)
}

/// After the input: delivers from the queue for up to `timeout`, then gives back what
/// this process still holds (due at once, for the next consumer).
async fn drain(
    queue: &searchwire_queue::Queue,
    client: &searchwire::Client,
    builder: searchwire_bulk::BulkIndexerBuilder,
    timeout: Duration,
) -> Result<searchwire_bulk::DeliveryReport, String> {
    let report = if timeout.is_zero() {
        Ok(searchwire_bulk::DeliveryReport {
            left: queue.stats().await.map_err(|e| e.to_string())?.backlog,
            ..Default::default()
        })
    } else {
        crate::queue::deliver_with(queue, client, builder, Some(Instant::now() + timeout)).await
    };
    if let Err(e) = queue.release().await {
        output::error_message(format!("cannot release the queue's leases: {e}"));
    }
    if let searchwire_queue::Queue::Embedded(q) = queue {
        let _ = q.close().await;
    }
    report
}

/// Runs the subcommand; returns the exit code.
pub async fn run(a: IngestArgs, auth: Auth) -> u8 {
    match run_inner(a, auth).await {
        Ok(code) => code,
        Err(msg) => {
            output::error_message(msg);
            exit::USAGE
        }
    }
}

async fn run_inner(a: IngestArgs, auth: Auth) -> Result<u8, String> {
    // Ctrl-C (SIGINT), or SIGTERM (a service manager stopping the ingest): registered
    // before anything is sent, so either one always means the clean stop.
    let mut signals = Signals::install();
    let docs = match a.format {
        Format::Docs if a.index.is_none() => {
            return Err("--format docs needs --index NAME".into());
        }
        Format::Docs => true,
        Format::Bulk => false,
        Format::Auto => a.index.is_some(),
    };
    if a.id_field.is_some() && !docs {
        return Err(
            "--id-field applies to plain documents (--index); bulk-format lines carry _id".into(),
        );
    }
    if a.resume.is_some() && a.input == "-" {
        return Err("--resume needs a FILE to seek in, not stdin".into());
    }
    let ids = if a.content_hash_ids || (a.resume.is_some() && a.id_field.is_none()) {
        IdScheme::ContentHash
    } else {
        IdScheme::UuidV7
    };

    // The checkpoint to resume from.
    let mut start_at = Checkpoint {
        input: a.input.clone(),
        ..Checkpoint::default()
    };
    if let Some(path) = &a.resume {
        if let Some(cp) = read_checkpoint(path)? {
            if cp.input != a.input {
                return Err(format!(
                    "the checkpoint {} is for input {:?}, not {:?}; use another --resume file",
                    path.display(),
                    cp.input,
                    a.input
                ));
            }
            start_at = cp;
        }
    }

    let dead_file = match &a.dead_letter {
        Some(p) => {
            let mut o = std::fs::OpenOptions::new();
            o.create(true);
            if a.resume.is_some() {
                o.append(true);
            } else {
                o.write(true).truncate(true);
            }
            Some(std::io::BufWriter::new(o.open(p).map_err(|e| {
                format!("cannot open --dead-letter file {}: {e}", p.display())
            })?))
        }
        None => None,
    };

    let client = match start(a.metrics_addr, || {
        connect(&a.conn, auth)?.build().map_err(|e| e.to_string())
    }) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };

    // Every node once: an unreachable cluster or rejected credentials end the run before
    // any input is read, and the cluster name reaches the retry logs.
    let report = client.check_all().await;
    if report.reachable() == 0 && a.queue.configured() {
        output::error_message(
            "no node reachable: queueing what cannot be written (the cluster may come back)",
        );
    } else if report.reachable() == 0 {
        let why: Vec<String> = report
            .nodes
            .iter()
            .map(|n| format!("{}: {}", n.url, n.error.as_deref().unwrap_or("unreachable")))
            .collect();
        output::error_message(format!("no node reachable ({})", why.join("; ")));
        return Ok(exit::NO_NODE);
    }
    if report.all_reachable_rejected_credentials() {
        output::error_message("every reachable node rejected the credentials");
        return Ok(exit::AUTH);
    }

    let shared = Arc::new(Shared {
        tracker: Mutex::new(Tracker {
            pending: Default::default(),
            done: Checkpoint {
                input: a.input.clone(),
                offset: start_at.offset,
                line: start_at.line,
            },
        }),
        dead: Mutex::new(DeadLetters {
            file: dead_file,
            count: 0,
            worst: None,
        }),
        fatal: AtomicBool::new(false),
        malformed: AtomicU64::new(0),
        lines: AtomicU64::new(0),
        queue_sink: std::sync::OnceLock::new(),
    });

    let mut delivery = BulkIndexer::builder(client.clone())
        .conflict_is_present(true)
        .item_deadline(a.queue.queue_after);
    if let Some(n) = a.batch_actions {
        delivery = delivery.batch_actions(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(n) = a.concurrency {
        delivery = delivery.max_concurrency(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let mut b = BulkIndexer::builder(client.clone())
        .id_scheme(ids)
        .conflict_is_present(true)
        .dead_letter_sink(sink(shared.clone()));
    if let Some(n) = a.batch_actions {
        b = b.batch_actions(usize::try_from(n).unwrap_or(usize::MAX));
        b = b.max_pending_actions(
            usize::try_from(n)
                .unwrap_or(usize::MAX)
                .saturating_mul(a.concurrency.map_or(d::MAX_CONCURRENCY, |c| c as usize) + 1),
        );
    }
    if let Some(n) = a.batch_bytes {
        b = b.batch_bytes(n).max_pending_bytes(
            n.saturating_mul(a.concurrency.map_or(d::MAX_CONCURRENCY, |c| c as usize) + 1)
                .min(u32::MAX as usize),
        );
    }
    if let Some(d) = a.flush_interval {
        b = b.flush_interval(d);
    }
    if let Some(n) = a.concurrency {
        b = b.max_concurrency(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(d) = a.timeout {
        b = b.request_timeout(d);
    }
    let mut policy = searchwire_bulk::RetryPolicy::default();
    if let Some(n) = a.throttle_retries {
        policy.throttled.max_retries = n;
    }
    if let Some(n) = a.unavailable_retries {
        policy.unavailable.max_retries = n;
    }
    if let Some(n) = a.connection_retries {
        policy.connection.max_retries = n;
    }
    let queue = match open_queue(&a.queue).await? {
        Some(q) => {
            let sink = searchwire_bulk::QueueSink::start(
                q.clone(),
                searchwire_bulk::QueueSinkConfig {
                    priority: a.queue.priority,
                    ..Default::default()
                },
                sink(shared.clone()),
            );
            b = b
                .retry_sink(sink.clone())
                .item_deadline(a.queue.queue_after);
            let _ = shared.queue_sink.set(sink);
            Some(q)
        }
        None => None,
    };
    let ix = Arc::new(b.retry_policy(policy).build().map_err(|e| e.to_string())?);

    let input = if a.input == "-" {
        Input::Stdin(std::io::stdin())
    } else {
        let mut f = std::fs::File::open(&a.input)
            .map_err(|e| format!("cannot open input {}: {e}", a.input))?;
        if start_at.offset > 0 {
            f.seek(std::io::SeekFrom::Start(start_at.offset))
                .map_err(|e| format!("cannot seek input {} to the checkpoint: {e}", a.input))?;
        }
        Input::File(f)
    };

    let started = Instant::now();
    let reporter = tokio::spawn(report_loop(
        ix.clone(),
        shared.clone(),
        a.resume.clone(),
        a.progress_every,
        a.checkpoint_every,
        started,
    ));

    let parse = ParseSpec {
        docs,
        index: a.index.clone(),
        op: match a.op {
            DocOp::Create => OpType::Create,
            DocOp::Index => OpType::Index,
        },
        id_path: a
            .id_field
            .as_deref()
            .map(|f| f.split('.').map(str::to_owned).collect())
            .unwrap_or_default(),
        id_field: a.id_field.clone(),
    };
    let mut interrupted = false;
    let read_result = {
        let read = read_input(input, &parse, &ix, &shared, start_at.offset, start_at.line);
        tokio::pin!(read);
        tokio::select! {
            r = &mut read => r,
            _ = signals.recv() => {
                interrupted = true;
                output::error_message("interrupted: delivering what was read, then stopping (Ctrl-C again to quit now)");
                Ok(0)
            }
        }
    };
    let lines = shared.lines.load(Ordering::Relaxed);
    let stats = tokio::select! {
        s = ix.close() => s,
        _ = signals.recv() => {
            output::error_message("interrupted again: quitting; the checkpoint covers what was acknowledged");
            reporter.abort();
            final_checkpoint(&ix, &shared, a.resume.as_deref());
            return Ok(INTERRUPTED);
        }
    };
    let queued = match shared.queue_sink.get() {
        Some(q) => Some(q.close().await),
        None => None,
    };
    reporter.abort();
    let checkpoint = final_checkpoint(&ix, &shared, a.resume.as_deref());
    let drained = match &queue {
        Some(q) if !interrupted => Some(drain(q, &client, delivery, a.queue.drain_timeout).await),
        _ => None,
    };
    clear_progress_line();

    let elapsed = started.elapsed();
    let (dead_count, worst) = match shared.dead.lock() {
        Ok(d) => (d.count, d.worst),
        Err(_) => (0, None),
    };
    let summary = Summary {
        input: &a.input,
        lines,
        stats: &stats,
        malformed: shared.malformed.load(Ordering::Relaxed),
        dead_letters: dead_count,
        checkpoint: a.resume.as_ref().map(|_| checkpoint),
        elapsed_ms: output::ms(elapsed),
        docs_per_sec: if elapsed.as_secs_f64() > 0.0 {
            (stats.indexed as f64 / elapsed.as_secs_f64()).round()
        } else {
            0.0
        },
        interrupted,
        queue: queued.map(|q| QueueSummary {
            sink: q,
            delivery: drained.clone().and_then(Result::ok),
        }),
    };
    if let Some(Err(e)) = &drained {
        output::error_message(format!("delivering from the queue failed: {e}"));
    }
    output::stdout(output::to_json_line(&summary).as_bytes());
    if let Err(e) = read_result {
        output::error_message(e);
        return Ok(exit::USAGE);
    }
    Ok(if interrupted {
        INTERRUPTED
    } else if let Some(w) = worst {
        match w {
            "auth" => exit::AUTH,
            "unreachable" if stats.indexed == 0 => exit::NO_NODE,
            _ => exit::HTTP_ERROR,
        }
    } else if dead_count > 0 || stats.sink_errors > 0 {
        exit::HTTP_ERROR
    } else {
        exit::SUCCESS
    })
}

fn read_checkpoint(path: &Path) -> Result<Option<Checkpoint>, String> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            format!(
                "the checkpoint {} is not a searchwire checkpoint ({e}); delete it to start over",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "cannot read the checkpoint {}: {e}",
            path.display()
        )),
    }
}

/// Writes the checkpoint atomically (temporary file, fsync, rename).
fn write_checkpoint(path: &Path, cp: &Checkpoint) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(output::to_json_line(cp).as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Advances and writes the checkpoint (dead letters flushed first); returns the offset.
fn final_checkpoint(ix: &BulkIndexer, shared: &Shared, path: Option<&Path>) -> u64 {
    checkpoint_now(ix, shared, path, true).unwrap_or(0)
}

fn checkpoint_now(
    ix: &BulkIndexer,
    shared: &Shared,
    path: Option<&Path>,
    force: bool,
) -> Option<u64> {
    let below = match shared.queue_sink.get() {
        Some(q) => q.acknowledged_below(ix),
        None => ix.acknowledged_below(),
    };
    let (moved, cp) = {
        let mut t = shared.tracker.lock().ok()?;
        let moved = t.advance(below);
        (
            moved,
            Checkpoint {
                input: t.done.input.clone(),
                offset: t.done.offset,
                line: t.done.line,
            },
        )
    };
    if let Some(path) = path {
        if moved || force {
            // The dead letters below the checkpoint must be on disk before it moves.
            if let Ok(mut d) = shared.dead.lock() {
                if let Err(e) = d.sync() {
                    output::error_message(format!(
                        "cannot write the dead letters: {e}; checkpoint not advanced"
                    ));
                    return None;
                }
            }
            if let Err(e) = write_checkpoint(path, &cp) {
                output::error_message(format!(
                    "cannot write the checkpoint {}: {e}",
                    path.display()
                ));
            }
        }
    }
    Some(cp.offset)
}

async fn report_loop(
    ix: Arc<BulkIndexer>,
    shared: Arc<Shared>,
    resume: Option<PathBuf>,
    progress_every: Duration,
    checkpoint_every: Duration,
    started: Instant,
) {
    let tty = std::io::stderr().is_terminal();
    let tick = if tty {
        checkpoint_every.min(Duration::from_millis(500))
    } else {
        checkpoint_every.min(progress_every)
    };
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_progress = started;
    let mut last_checkpoint = started;
    loop {
        interval.tick().await;
        let now = Instant::now();
        if now.duration_since(last_checkpoint) >= checkpoint_every {
            last_checkpoint = now;
            checkpoint_now(&ix, &shared, resume.as_deref(), false);
        }
        if tty || now.duration_since(last_progress) >= progress_every {
            last_progress = now;
            let s = ix.stats();
            let secs = now.duration_since(started).as_secs_f64().max(0.001);
            let dead = shared.dead.lock().map(|d| d.count).unwrap_or(0);
            let line = format!(
                "ingest: {} indexed ({:.0} docs/s), {} retries, {} dead letters, {}/{} requests in flight, {:.1}s",
                s.indexed,
                s.indexed as f64 / secs,
                s.retried(),
                dead,
                s.in_flight,
                s.concurrency,
                secs
            );
            if tty {
                output::stderr(&format!("\r\x1b[2K{line}"));
            } else {
                output::stderr(&format!("{line}\n"));
            }
        }
    }
}

fn clear_progress_line() {
    if std::io::stderr().is_terminal() {
        output::stderr("\r\x1b[2K");
    }
}

/// The dead-letter sink: one NDJSON line per item, with its input line number.
fn sink(
    shared: Arc<Shared>,
) -> impl Fn(&FailedItem) -> Result<(), SinkError> + Send + Sync + 'static {
    move |item: &FailedItem| {
        let line = shared.tracker.lock().ok().and_then(|t| t.line_of(item.seq));
        let mut json = item.to_json_line();
        if let Some(n) = line {
            // {"line":N, ...the item...}
            let mut with_line = format!("{{\"line\":{n},").into_bytes();
            with_line.extend_from_slice(json.get(1..).unwrap_or_default());
            json = with_line;
        }
        let worst = match (item.reason.error_type.as_str(), item.reason.retry_class) {
            ("auth", _) => Some("auth"),
            (_, Some("connection")) => Some("unreachable"),
            _ => None,
        };
        let mut d = shared
            .dead
            .lock()
            .map_err(|_| SinkError("dead-letter writer poisoned".into()))?;
        if worst == Some("auth") {
            shared.fatal.store(true, Ordering::Relaxed);
        }
        if d.worst != Some("auth") {
            d.worst = worst.or(d.worst);
        }
        d.write(&json)
            .map_err(|e| SinkError(format!("cannot write the dead-letter file: {e}")))
    }
}

/// How much of the input is read at once: lines are cut out of this buffer without a copy.
const READ_CHUNK: usize = 256 * 1024;

/// Reads the input from `offset` (line `line`), adding each record to the indexer.
/// Returns the number of lines read.
async fn read_input(
    input: Input,
    spec: &ParseSpec,
    ix: &BulkIndexer,
    shared: &Shared,
    mut offset: u64,
    mut line: u64,
) -> Result<u64, String> {
    let mut input = Some(input);
    // Lines are split off this buffer as `Bytes` that share it: `fill` reads into it, and a
    // document's bytes are copied from it only into the request body (see `fill`).
    let mut chunk = Bytes::new();
    let mut scanned = 0;
    let mut eof = false;
    let mut lines_read = 0u64;
    let mut parser = LineParser::new(spec);
    loop {
        if shared.fatal.load(Ordering::Relaxed) {
            output::error_message("stopping: the cluster rejected the credentials");
            break;
        }
        let buf = match memchr::memchr(b'\n', &chunk[scanned..]) {
            Some(i) => {
                let n = scanned + i + 1;
                scanned = 0;
                chunk.split_to(n)
            }
            None if eof && chunk.is_empty() => break,
            None if eof => {
                scanned = 0;
                std::mem::take(&mut chunk)
            }
            None => {
                scanned = chunk.len();
                let (r, filled, n) = fill(input.take(), chunk).await;
                input = r;
                chunk = filled;
                let n =
                    n.map_err(|e| format!("cannot read the input at line {}: {e}", line + 1))?;
                eof = n == 0;
                continue;
            }
        };
        let n = buf.len();
        offset += n as u64;
        line += 1;
        lines_read += 1;
        shared.lines.store(lines_read, Ordering::Relaxed);
        let text = buf.slice_ref(trim_line(&buf));
        let record = match parser.feed(&text, line) {
            // Blank lines finish immediately.
            Line::Blank => {
                push_pending(shared, None, line, offset, line);
                continue;
            }
            Line::Pending => continue,
            Line::Record(record) => record,
        };
        match record {
            Ok((action, start_line)) => match add(ix, shared, action).await {
                Ok(seq) => push_pending(shared, Some(seq), start_line, offset, line),
                Err(AddError::Invalid(reason)) => {
                    malformed(
                        shared,
                        start_line,
                        &text,
                        &format!("invalid action: {reason}"),
                    );
                    push_pending(shared, None, start_line, offset, line);
                }
                Err(e) => return Err(format!("cannot add line {start_line}: {e}")),
            },
            Err(reason) => {
                malformed(shared, line, &text, &reason);
                push_pending(shared, None, line, offset, line);
            }
        }
    }
    if let Some(start) = parser.finish() {
        malformed(
            shared,
            start,
            b"",
            "the input ends after an action line without its source line",
        );
        push_pending(shared, None, start, offset, line);
    }
    Ok(lines_read)
}

/// The input: a file, or stdin.
pub(crate) enum Input {
    File(std::fs::File),
    Stdin(std::io::Stdin),
}

/// One read of the input into the buffer holding the partial line `chunk`, on a blocking
/// thread (a file or pipe read blocks; `tokio::fs` and `tokio::io::stdin` would read into
/// a buffer of their own and copy from it). Returns the input and the buffer for the next
/// read.
///
/// The lines cut from the buffer are sent as they are (the request body is their only
/// copy), so they keep it alive while their batch is in flight: each read fills a fresh
/// buffer, after the partial line copied to its front. A file is read with `read_to_end`
/// (up to `READ_CHUNK` bytes), which reads into the buffer's free capacity without zeroing
/// it first; stdin is read once into zeroed capacity, as `read_to_end` would wait for
/// `READ_CHUNK` bytes of a slow pipe before the lines already there could be sent.
async fn fill(
    input: Option<Input>,
    partial: Bytes,
) -> (Option<Input>, Bytes, std::io::Result<usize>) {
    let Some(mut input) = input else {
        return (None, partial, Ok(0));
    };
    let joined = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(partial.len() + READ_CHUNK);
        buf.extend_from_slice(&partial);
        let n = loop {
            let r = match &mut input {
                Input::File(f) => f.take(READ_CHUNK as u64).read_to_end(&mut buf),
                Input::Stdin(s) => {
                    let len = buf.len();
                    buf.resize(len + READ_CHUNK, 0);
                    let r = s.read(&mut buf[len..]);
                    buf.truncate(len + *r.as_ref().unwrap_or(&0));
                    r
                }
            };
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        (Some(input), Bytes::from(buf), n)
    })
    .await;
    match joined {
        Ok(r) => r,
        Err(e) => (
            None,
            Bytes::new(),
            Err(std::io::Error::other(format!(
                "the input reader stopped: {e}"
            ))),
        ),
    }
}

fn push_pending(
    shared: &Shared,
    seq: Option<u64>,
    start_line: u64,
    end_offset: u64,
    end_line: u64,
) {
    if let Ok(mut t) = shared.tracker.lock() {
        t.pending.push_back(Pending {
            seq,
            start_line,
            end_offset,
            end_line,
        });
    }
}

/// Reports a malformed line on stderr and writes it to the dead letters.
fn malformed(shared: &Shared, line: u64, text: &[u8], reason: &str) {
    shared.malformed.fetch_add(1, Ordering::Relaxed);
    output::error_message(format!(
        "line {line}: {reason} (written to the dead letters)"
    ));
    #[derive(Serialize)]
    struct Bad<'a> {
        line: u64,
        error_type: &'static str,
        reason: &'a str,
        text: String,
    }
    let shown = String::from_utf8_lossy(&text[..text.len().min(64 * 1024)]).into_owned();
    let json = output::to_json_line(&Bad {
        line,
        error_type: "malformed_input",
        reason,
        text: shown,
    });
    if let Ok(mut d) = shared.dead.lock() {
        if let Err(e) = d.write(json.as_bytes()) {
            output::error_message(format!("cannot write the dead-letter file: {e}"));
        }
    }
}

/// Adds after waiting for room in the queue's appender (back-pressure while everything is
/// being queued).
async fn add(
    ix: &BulkIndexer,
    shared: &Shared,
    action: searchwire_bulk::Action,
) -> Result<u64, AddError> {
    if let Some(q) = shared.queue_sink.get() {
        q.room().await;
    }
    ix.add(action).await
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn checkpoint_advances_over_the_finished_prefix_only() {
        let mut t = Tracker {
            pending: Default::default(),
            done: Checkpoint::default(),
        };
        for (seq, off) in [(Some(0), 10), (None, 11), (Some(1), 20), (Some(2), 30)] {
            t.pending.push_back(Pending {
                seq,
                start_line: off,
                end_offset: off,
                end_line: off,
            });
        }
        assert!(!t.advance(0));
        assert!(t.advance(1));
        assert_eq!(
            t.done.offset, 11,
            "the malformed line after seq 0 is finished too"
        );
        assert!(t.advance(3));
        assert_eq!(t.done.offset, 30);
    }
}
