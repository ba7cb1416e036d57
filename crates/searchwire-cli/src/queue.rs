//! `searchwire queue`: look into a retry queue (embedded or Redis) and re-drive its dead
//! letters. It never leases: what it shows is what the queue's consumers see.
//!
//! - `stats`: backlog, due, leased, oldest age, dead letters.
//! - `list [--dead-letters]`: queued messages (or dead letters) by id, one per line.
//! - `replay --all | --id ID...`: dead letters back into the queue, due now.
//! - `purge --all | --id ID...`: dead letters deleted for good.
//! - `dead-letters list|show|replay|purge`: dead letters chosen by index, error type and age
//!   (`crate::dead_letters`).
//! - `deliver --url ...`: drains the queue into the cluster (the bulk crate's delivery loop,
//!   [`searchwire_bulk::deliver`], as `searchwire ingest` uses it after its input). Unlike
//!   the others, it leases.
//!
//! The JSON shapes (`--json`) are a contract, listed in `searchwire queue --help`.

use clap::{ArgGroup, Args, Subcommand};
use searchwire_queue::{DeadLetter, EmbeddedConfig, ErrorKind, MessageId, Queue, Selection, Stats};
use serde::Serialize;

use crate::exit;
use crate::output;
use crate::queue_args::Listed;
pub use crate::queue_args::QueueArgs;

/// `searchwire queue ...`
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Counts: backlog, due, leased, oldest age, dead letters.
    Stats(StatsArgs),
    /// Queued messages (or, with --dead-letters, dead letters) by id.
    List(ListArgs),
    /// Re-drive dead letters into the queue (attempts reset, due now, same id).
    Replay(SelectArgs),
    /// Delete dead letters for good.
    Purge(SelectArgs),
    /// Drain the queue into the cluster: lease, send, ack (until it is empty or --timeout).
    Deliver(Box<DeliverArgs>),
    /// Dead letters chosen by index, error type and age: list, show, replay, purge.
    #[command(subcommand, after_help = crate::dead_letters::AFTER_HELP)]
    DeadLetters(crate::dead_letters::DeadLettersCommand),
}

/// `queue deliver`
#[derive(Debug, Args)]
pub struct DeliverArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    #[command(flatten)]
    pub conn: crate::connect::ConnectArgs,
    /// Stop after this long even if messages are left (they stay queued); default: until empty.
    #[arg(long, value_name = "DUR", value_parser = crate::durations::parse_positive_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Bulk requests in flight at most (1: strict arrival order within a priority).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: Option<u64>,
    /// Actions per bulk request.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_actions: Option<u64>,
    /// A message failing retryably (throttled, unavailable, no connection) is retried —
    /// past its max_retries without counting — until it is this old, and only then is a
    /// dead letter [default: 24h].
    #[arg(long, value_name = "DUR", value_parser = crate::durations::parse_positive_duration)]
    pub item_deadline: Option<std::time::Duration>,
}

pub const QUEUE_AFTER_HELP: &str = "\
Which queue: --queue-dir DIR (the embedded queue; it has one owner at a time, so stop the \
process using it first) or --redis URL [--stream NAME] [--group NAME] (a queue shared through \
Redis; safe while consumers run).
Output: a table, or with --json: stats {\"backlog\",\"due\",\"leased\",\"oldest_age_ms\",\
\"dead_letters\"}; list: one object per line {\"id\",\"priority\",\"retry_at\",\"attempts\",\
\"max_retries\",\"payload_hash\",\"enqueued_at\",\"index\",\"last_error\",\"pending_shutdown\",\
\"payload_bytes\",\"payload\"} plus \"reason\" and \"dead_at\" for dead letters (payload: the \
UTF-8 text, or null with \"payload_hex\" when it is not UTF-8); replay {\"replayed\",\
\"duplicates\"}; purge {\"purged\"}; deliver {\"delivered\",\"rescheduled\",\
\"dead_lettered\",\"left\"} (deliver leases: for the embedded queue, nothing else may hold it). \
Times are RFC 3339 UTC.
Exit codes: 0 success, 1 the queue failed (storage or Redis error), 2 usage error, 6 deliver \
stopped (--timeout, or the cluster still failing) with messages left (\"left\" > 0).";

/// `queue stats`
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
}

/// `queue list`
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    /// List dead letters instead of queued messages.
    #[arg(long)]
    pub dead_letters: bool,
    /// Start after this id (for paging).
    #[arg(long, value_name = "ID")]
    pub after: Option<u64>,
    /// At most this many.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
}

/// `queue replay` / `queue purge`: which dead letters.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["all", "id"])))]
pub struct SelectArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    /// Every dead letter.
    #[arg(long)]
    pub all: bool,
    /// These dead letters (comma-separated or repeated).
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub id: Vec<u64>,
    /// Also required for `purge` (it cannot be undone); ignored by replay.
    #[arg(long)]
    pub yes: bool,
}

impl SelectArgs {
    fn selection(&self) -> Selection {
        if self.all {
            Selection::All
        } else {
            Selection::Ids(self.id.iter().copied().map(MessageId).collect())
        }
    }
}

/// Runs the subcommand; returns the exit code.
pub async fn run(cmd: QueueCommand, auth: crate::connect::Auth) -> u8 {
    let args = match &cmd {
        QueueCommand::Deliver(a) => &a.queue,
        QueueCommand::Stats(a) => &a.queue,
        QueueCommand::List(a) => &a.queue,
        QueueCommand::Replay(a) | QueueCommand::Purge(a) => &a.queue,
        QueueCommand::DeadLetters(d) => d.queue_args(),
    };
    if let QueueCommand::DeadLetters(d) = &cmd {
        if let Some(e) = d.usage_error() {
            output::error_message(e);
            return exit::USAGE;
        }
    }
    if let QueueCommand::Purge(a) = &cmd {
        if !a.yes {
            output::error_message("purge deletes dead letters for good: add --yes to confirm");
            return exit::USAGE;
        }
    }
    let json = args.json;
    let queue = match open(args).await {
        Ok(q) => q,
        Err(code) => return code,
    };
    if let QueueCommand::Deliver(a) = &cmd {
        let code = deliver(&queue, a, auth).await;
        if let Queue::Embedded(q) = &queue {
            let _ = q.close().await;
        }
        return code;
    }
    let result = match cmd {
        QueueCommand::Deliver(_) => Ok(String::new()),
        QueueCommand::DeadLetters(d) => match crate::dead_letters::run(&queue, &d).await {
            Ok(crate::dead_letters::Outcome::Text(t)) => Ok(t),
            Ok(crate::dead_letters::Outcome::NotFound(id)) => {
                if let Queue::Embedded(q) = &queue {
                    let _ = q.close().await;
                }
                output::error_message(format!(
                    "no dead letter has id {id} (see `searchwire queue dead-letters list`)"
                ));
                return exit::HTTP_ERROR;
            }
            Err(e) => Err(e),
        },
        QueueCommand::Stats(_) => queue.stats().await.map(|s| render_stats(&s, json)),
        QueueCommand::List(a) => list(&queue, &a).await,
        QueueCommand::Replay(a) => queue.replay(&a.selection()).await.map(|r| {
            if json {
                output::to_json_line(&r)
            } else {
                format!(
                    "replayed {}, dropped as duplicates {}\n",
                    r.replayed, r.duplicates
                )
            }
        }),
        QueueCommand::Purge(a) => queue.purge(&a.selection()).await.map(|n| {
            if json {
                output::to_json_line(&serde_json::json!({ "purged": n }))
            } else {
                format!("purged {n}\n")
            }
        }),
    };
    if let Queue::Embedded(q) = &queue {
        // Release the file lock before exiting, so the next owner can open it at once.
        let _ = q.close().await;
    }
    match result {
        Ok(text) => {
            output::stdout(text.as_bytes());
            exit::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// `queue deliver`: the summary is `{"delivered","rescheduled","dead_lettered","left"}`.
async fn deliver(queue: &Queue, a: &DeliverArgs, auth: crate::connect::Auth) -> u8 {
    let client = match crate::connect::connect(&a.conn, auth)
        .and_then(|b| b.build().map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            output::error_message(e);
            return exit::USAGE;
        }
    };
    // An item deadline, so a breaker that opens mid-run ends the run (rescheduled) instead
    // of holding it past --timeout.
    let mut b = searchwire_bulk::BulkIndexer::builder(client.clone())
        .conflict_is_present(true)
        .item_deadline(searchwire_bulk::defaults::INGEST_QUEUE_AFTER);
    if let Some(n) = a.concurrency {
        b = b.max_concurrency(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(n) = a.batch_actions {
        b = b.batch_actions(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let deadline = a.timeout.map(|t| tokio::time::Instant::now() + t);
    let report = deliver_with(queue, &client, b, deadline, a.item_deadline).await;
    if let Err(e) = queue.release().await {
        output::error_message(format!("cannot release the queue's leases: {e}"));
    }
    let r = match report {
        Ok(r) => r,
        Err(e) => {
            output::error_message(format!("delivering from the queue failed: {e}"));
            return exit::HTTP_ERROR;
        }
    };
    output::stdout(
        if a.queue.json {
            output::to_json_line(&r)
        } else {
            format!(
                "delivered {}, rescheduled {}, dead-lettered {}, left {}\n",
                r.delivered, r.rescheduled, r.dead_lettered, r.left
            )
        }
        .as_bytes(),
    );
    if r.left > 0 {
        exit::QUEUED
    } else {
        exit::SUCCESS
    }
}

/// The delivery loop through an indexer built from `builder` (tracked items; a `create`
/// answered 409 is delivered), until the queue is empty or `deadline`.
pub(crate) async fn deliver_with(
    queue: &Queue,
    client: &searchwire::Client,
    builder: searchwire_bulk::BulkIndexerBuilder,
    deadline: Option<tokio::time::Instant>,
    item_deadline: Option<std::time::Duration>,
) -> Result<searchwire_bulk::DeliveryReport, String> {
    let ix = builder.build().map_err(|e| e.to_string())?;
    let mut config = searchwire_bulk::DeliveryConfig::default();
    if let Some(d) = item_deadline {
        config.item_deadline = Some(d);
    }
    let r = searchwire_bulk::deliver(queue, &ix, client, &config, deadline).await;
    ix.close().await;
    r.map_err(|e| e.to_string())
}

/// Opens the queue; on failure prints why and returns the exit code.
async fn open(a: &QueueArgs) -> Result<Queue, u8> {
    let opened = match (&a.queue_dir, &a.redis) {
        (Some(dir), _) => {
            // Never create a queue by looking at one: a typo in the path is an error.
            if !dir.join(searchwire_queue::embedded::DB_FILE).is_file() {
                output::error_message(format!(
                    "no queue in {}: the file {} is not there (check --queue-dir)",
                    dir.display(),
                    searchwire_queue::embedded::DB_FILE
                ));
                return Err(exit::USAGE);
            }
            let dir = dir.clone();
            match tokio::task::spawn_blocking(move || {
                Queue::open_embedded(EmbeddedConfig::new(dir))
            })
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    output::error_message(format!("opening the queue failed: {e}"));
                    return Err(exit::HTTP_ERROR);
                }
            }
        }
        (None, url) if a.redis_ha.config(url.as_deref()).is_some() => {
            let Some(mut c) = a.redis_ha.config(url.as_deref()) else {
                return Err(exit::USAGE);
            };
            c.stream = a.stream.clone();
            c.group = a.group.clone();
            Queue::connect_redis(c).await
        }
        (None, _) => {
            // clap's `backend` group requires one of the two.
            output::error_message(
                "give --queue-dir DIR, --redis URL, --redis-sentinel HOST:PORT --redis-master NAME or \
                 --redis-cluster HOST:PORT",
            );
            return Err(exit::USAGE);
        }
    };
    opened.map_err(|e| fail(&e))
}

fn fail(e: &searchwire_queue::Error) -> u8 {
    output::error_message(e);
    match e.kind() {
        ErrorKind::InvalidInput => exit::USAGE,
        _ => exit::HTTP_ERROR,
    }
}

fn render_stats(s: &Stats, json: bool) -> String {
    if json {
        return output::to_json_line(s);
    }
    let oldest = s
        .oldest_age
        .map_or_else(|| "-".to_owned(), searchwire::explain::format_duration);
    format!(
        "backlog       {}\ndue           {}\nleased        {}\noldest_age    {}\ndead_letters  {}\n",
        s.backlog, s.due, s.leased, oldest, s.dead_letters
    )
}

async fn list(q: &Queue, a: &ListArgs) -> searchwire_queue::Result<String> {
    let after = a.after.map(MessageId);
    let json = a.queue.json;
    let mut out = String::new();
    if a.dead_letters {
        let dead = q.dead_letters(after, a.limit).await?;
        if !json {
            out.push_str("ID\tPRIORITY\tATTEMPTS\tDEAD_AT\tINDEX\tBYTES\tREASON\n");
        }
        for d in &dead {
            out.push_str(&if json {
                output::to_json_line(&ListedDead::new(d))
            } else {
                format!(
                    "{}\t{}\t{}/{}\t{}\t{}\t{}\t{}\n",
                    d.message.id,
                    d.message.priority,
                    d.message.attempts,
                    d.message.max_retries,
                    d.dead_at,
                    d.message.index.as_deref().unwrap_or("-"),
                    d.message.payload.len(),
                    one_line(&d.reason)
                )
            });
        }
    } else {
        let messages = q.list(after, a.limit).await?;
        if !json {
            out.push_str("ID\tPRIORITY\tRETRY_AT\tATTEMPTS\tINDEX\tBYTES\tLAST_ERROR\n");
        }
        for m in &messages {
            out.push_str(&if json {
                output::to_json_line(&Listed::new(m))
            } else {
                format!(
                    "{}\t{}\t{}\t{}/{}\t{}\t{}\t{}\n",
                    m.id,
                    m.priority,
                    m.retry_at,
                    m.attempts,
                    m.max_retries,
                    m.index.as_deref().unwrap_or("-"),
                    m.payload.len(),
                    m.last_error
                        .as_deref()
                        .map_or_else(|| "-".to_owned(), one_line)
                )
            });
        }
    }
    Ok(out)
}

/// A reason on one table line.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\t'], " ")
}

#[derive(Serialize)]
struct ListedDead<'a> {
    #[serde(flatten)]
    listed: Listed<'a>,
    reason: &'a str,
    dead_at: searchwire_queue::Timestamp,
}

impl<'a> ListedDead<'a> {
    fn new(d: &'a DeadLetter) -> Self {
        ListedDead {
            listed: Listed::new(&d.message),
            reason: &d.reason,
            dead_at: d.dead_at,
        }
    }
}
