//! What `searchwire queue` and `searchwire queue dead-letters` share: where the queue is
//! ([`QueueArgs`]) and a message's JSON line ([`Listed`]).

use std::path::PathBuf;

use clap::{ArgGroup, Args};
use searchwire_queue::redis::{DEFAULT_GROUP, DEFAULT_STREAM};
use searchwire_queue::Message;
use serde::Serialize;

/// Where the queue is.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("backend").required(true).args(["queue_dir", "redis", "redis_sentinel", "redis_cluster"])))]
#[command(group(ArgGroup::new("redis_target").args(["redis", "redis_sentinel", "redis_cluster"])))]
pub struct QueueArgs {
    /// The embedded queue's data directory.
    #[arg(long, value_name = "DIR")]
    pub queue_dir: Option<PathBuf>,
    /// A Redis queue: redis://[user:password@]host:port[/db].
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// The Redis stream (the queue's name).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_STREAM, requires = "redis_target")]
    pub stream: String,
    /// The Redis consumer group.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_GROUP, requires = "redis_target")]
    pub group: String,
    #[command(flatten)]
    pub redis_ha: crate::redis_args::RedisHaArgs,
    /// JSON output (see `searchwire queue --help`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
pub(crate) struct Listed<'a> {
    #[serde(flatten)]
    message: &'a Message,
    payload_bytes: usize,
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
}

impl<'a> Listed<'a> {
    pub(crate) fn new(m: &'a Message) -> Self {
        let text = std::str::from_utf8(&m.payload).ok();
        Listed {
            message: m,
            payload_bytes: m.payload.len(),
            payload: text,
            payload_hex: match text {
                Some(_) => None,
                None => Some(m.payload.iter().map(|b| format!("{b:02x}")).collect()),
            },
        }
    }
}
