//! `searchwire queue dead-letters list|show|replay|purge`: the dead letters of a retry queue
//! (embedded or Redis), chosen by index, error type and age
//! ([`searchwire_queue::DeadLetterFilter`], the same filter the relay's admin endpoint uses).
//! A dead letter keeps its payload — the original action line and source, as the client
//! sent them, with the id the relay gave it — the cluster's error and its attempt count;
//! `replay` puts the chosen ones back into the queue once (same id, attempts reset, due
//! now), after the cause was fixed.

use std::time::Duration;

use clap::{Args, Subcommand};
use searchwire_queue::{error_type, DeadLetter, DeadLetterFilter, MessageId, Queue};
use serde::Serialize;

use crate::output;
use crate::queue_args::{Listed, QueueArgs};

/// `searchwire queue dead-letters ...`
#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    /// Dead letters by id: index, error type, attempts, when, why.
    List(DeadListArgs),
    /// One dead letter in full: its action and source, the cluster's error, its attempts.
    Show(ShowArgs),
    /// Put the chosen dead letters back into the queue, once (same id and op, attempts
    /// reset, due now). Fix the cause first (the mapping, the pipeline, the index).
    Replay(ActArgs),
    /// Delete the chosen dead letters for good (needs --yes).
    Purge(ActArgs),
}

pub const AFTER_HELP: &str = "\
Filters (all that are given must hold): --index NAME (exact, or a prefix ending in *: \
'logs-*'), --error-type TYPE (the type of the cluster's error, e.g. mapper_parsing_exception; \
deadline_exceeded for items still undeliverable after the item deadline; lease_expired; other), \
--older-than DUR / --newer-than DUR (how long ago it became a dead letter), --id ID,...
replay and purge act on every dead letter the filters choose, and need --all when no filter is \
given; purge also needs --yes. A replayed dead letter keeps its id, its action and source; a \
second replay of the same selection finds nothing (they are queued, not dead).
JSON (--json): list: one object per line, as `queue list --dead-letters` plus \"error_type\"; \
show: one such object; replay {\"replayed\",\"duplicates\",\"ids\"}; purge {\"purged\",\"ids\"}.
Exit codes: 0 success, 1 the queue failed (or show: no dead letter has that id), 2 usage error.";

/// The filters shared by every subcommand.
#[derive(Debug, Args, Clone)]
pub struct FilterArgs {
    /// Only dead letters for this index (a prefix when it ends in `*`).
    #[arg(long, value_name = "NAME")]
    pub index: Option<String>,
    /// Only dead letters of this error type (e.g. mapper_parsing_exception).
    #[arg(long, value_name = "TYPE")]
    pub error_type: Option<String>,
    /// Only those that became dead letters at least this long ago (e.g. 1h).
    #[arg(long, value_name = "DUR", value_parser = crate::durations::parse_duration_arg)]
    pub older_than: Option<Duration>,
    /// Only those that became dead letters at most this long ago.
    #[arg(long, value_name = "DUR", value_parser = crate::durations::parse_duration_arg)]
    pub newer_than: Option<Duration>,
    /// Only these ids (comma-separated or repeated).
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub id: Vec<u64>,
}

impl FilterArgs {
    pub fn filter(&self) -> DeadLetterFilter {
        DeadLetterFilter {
            index: self.index.clone(),
            error_type: self.error_type.clone(),
            older_than: self.older_than,
            newer_than: self.newer_than,
            ids: self.id.iter().copied().map(MessageId).collect(),
        }
    }
}

/// `dead-letters list`
#[derive(Debug, Args)]
pub struct DeadListArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Start after this id (for paging).
    #[arg(long, value_name = "ID")]
    pub after: Option<u64>,
    /// At most this many.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
}

/// `dead-letters show`
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    /// The dead letter's id.
    #[arg(value_name = "ID")]
    pub id_arg: u64,
}

/// `dead-letters replay` / `purge`
#[derive(Debug, Args)]
pub struct ActArgs {
    #[command(flatten)]
    pub queue: QueueArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Act on every dead letter (required when no filter is given).
    #[arg(long)]
    pub all: bool,
    /// Confirms a purge (it cannot be undone); ignored by replay.
    #[arg(long)]
    pub yes: bool,
}

impl DeadLettersCommand {
    pub fn queue_args(&self) -> &QueueArgs {
        match self {
            DeadLettersCommand::List(a) => &a.queue,
            DeadLettersCommand::Show(a) => &a.queue,
            DeadLettersCommand::Replay(a) | DeadLettersCommand::Purge(a) => &a.queue,
        }
    }

    /// A usage error found before the queue is opened.
    pub fn usage_error(&self) -> Option<&'static str> {
        match self {
            DeadLettersCommand::Replay(a) | DeadLettersCommand::Purge(a)
                if a.filter.filter().is_empty() && !a.all =>
            {
                Some("choose the dead letters with --index, --error-type, --older-than, --newer-than or --id, or give --all")
            }
            DeadLettersCommand::Purge(a) if !a.yes => {
                Some("purge deletes dead letters for good: add --yes to confirm")
            }
            _ => None,
        }
    }
}

/// What a subcommand printed, or why it failed.
pub enum Outcome {
    /// The text for stdout.
    Text(String),
    /// `show` of an id that is no dead letter.
    NotFound(u64),
}

/// Runs the subcommand against an open queue.
pub async fn run(q: &Queue, cmd: &DeadLettersCommand) -> searchwire_queue::Result<Outcome> {
    let json = cmd.queue_args().json;
    match cmd {
        DeadLettersCommand::List(a) => {
            let dead = q
                .find_dead_letters(&a.filter.filter(), a.after.map(MessageId), a.limit)
                .await?;
            let mut out = String::new();
            if !json {
                out.push_str("ID\tINDEX\tERROR_TYPE\tATTEMPTS\tDEAD_AT\tBYTES\tREASON\n");
            }
            for d in &dead {
                out.push_str(&if json {
                    output::to_json_line(&Shown::new(d))
                } else {
                    format!(
                        "{}\t{}\t{}\t{}/{}\t{}\t{}\t{}\n",
                        d.message.id,
                        d.message.index.as_deref().unwrap_or("-"),
                        error_type(&d.reason),
                        d.message.attempts,
                        d.message.max_retries,
                        d.dead_at,
                        d.message.payload.len(),
                        d.reason.replace(['\n', '\t'], " ")
                    )
                });
            }
            Ok(Outcome::Text(out))
        }
        DeadLettersCommand::Show(a) => match q.dead_letter_by_id(MessageId(a.id_arg)).await? {
            None => Ok(Outcome::NotFound(a.id_arg)),
            Some(d) if json => Ok(Outcome::Text(output::to_json_line(&Shown::new(&d)))),
            Some(d) => Ok(Outcome::Text(show_text(&d))),
        },
        DeadLettersCommand::Replay(a) => {
            let ids = chosen(q, a).await?;
            let r = q.replay(&ids.0).await?;
            Ok(Outcome::Text(if json {
                output::to_json_line(&serde_json::json!({
                    "replayed": r.replayed, "duplicates": r.duplicates, "ids": ids.1,
                }))
            } else {
                format!(
                    "replayed {}, dropped as duplicates {}\n",
                    r.replayed, r.duplicates
                )
            }))
        }
        DeadLettersCommand::Purge(a) => {
            let ids = chosen(q, a).await?;
            let n = q.purge(&ids.0).await?;
            Ok(Outcome::Text(if json {
                output::to_json_line(&serde_json::json!({ "purged": n, "ids": ids.1 }))
            } else {
                format!("purged {n}\n")
            }))
        }
    }
}

/// The selection of `a` and its ids (`None` for all).
async fn chosen(
    q: &Queue,
    a: &ActArgs,
) -> searchwire_queue::Result<(searchwire_queue::Selection, Option<Vec<MessageId>>)> {
    let sel = q.select_dead_letters(&a.filter.filter()).await?;
    let ids = match &sel {
        searchwire_queue::Selection::Ids(ids) => Some(ids.clone()),
        _ => None,
    };
    Ok((sel, ids))
}

/// A dead letter as `show` prints it: the facts, then the payload as stored.
fn show_text(d: &DeadLetter) -> String {
    let m = &d.message;
    let payload = match std::str::from_utf8(&m.payload) {
        Ok(t) => t.to_owned(),
        Err(_) => format!(
            "(not UTF-8, {} bytes) {}",
            m.payload.len(),
            m.payload
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    };
    format!(
        "id            {}\nindex         {}\nerror_type    {}\nreason        {}\nattempts      {}/{}\n\
         enqueued_at   {}\ndead_at       {}\npriority      {}\npayload_hash  {}\n\
         payload ({} bytes: the action line and source):\n{}{}",
        m.id,
        m.index.as_deref().unwrap_or("-"),
        error_type(&d.reason),
        d.reason.replace('\n', " "),
        m.attempts,
        m.max_retries,
        m.enqueued_at,
        d.dead_at,
        m.priority,
        m.payload_hash.to_hex(),
        m.payload.len(),
        payload,
        if payload.ends_with('\n') { "" } else { "\n" }
    )
}

/// The JSON of a dead letter: `queue list --dead-letters`'s object plus `error_type`.
#[derive(Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    listed: Listed<'a>,
    reason: &'a str,
    error_type: String,
    dead_at: searchwire_queue::Timestamp,
}

impl<'a> Shown<'a> {
    fn new(d: &'a DeadLetter) -> Self {
        Shown {
            listed: Listed::new(&d.message),
            reason: &d.reason,
            error_type: error_type(&d.reason),
            dead_at: d.dead_at,
        }
    }
}
