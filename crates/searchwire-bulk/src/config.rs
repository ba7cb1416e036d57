//! The indexer's settings as plain data: the builder ([`crate::BulkIndexerBuilder`]) fills
//! them, the driver reads them.

use std::time::Duration;

use crate::action::IdScheme;
use crate::backoff::RetryPolicy;

/// The indexer's settings (plain data; defaults in [`crate::defaults`]).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub batch_actions: usize,
    pub batch_bytes: usize,
    /// The batch size adapts within `[min_batch_bytes, batch_bytes]` (see `batch_size`).
    pub adaptive_batch_bytes: bool,
    pub min_batch_bytes: usize,
    pub batch_latency_target: Duration,
    pub flush_interval: Duration,
    pub max_concurrency: usize,
    pub adaptive: bool,
    pub max_pending_actions: usize,
    pub max_pending_bytes: usize,
    pub request_timeout: Duration,
    pub attempt_timeout: Option<Duration>,
    pub retry: RetryPolicy,
    pub seed: Option<u64>,
    pub ids: IdScheme,
    pub conflict_is_present: bool,
    pub breaker_poll: Duration,
    pub filter_path: bool,
    pub item_deadline: Option<Duration>,
    pub tracked_until_deadline: bool,
}
