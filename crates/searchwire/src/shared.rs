//! The client's shared state: plain data that the attempt loop and the background tasks
//! (resurrection timers, health checks, the refresh, discovery) read and update. Nothing
//! here calls into those modules; what a node's death sets off is passed in as
//! [`DeathHooks`] when the client is built, so the modules below the transport never import
//! the modules beside them.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::DiscoveryConfig;
use crate::http::addr::NodeAddr;
use crate::http::connector::Connector;
use crate::nodes::pool::{Pool, PoolNode};
use crate::observe::Observer;
use crate::policy::backoff::Backoff;
use crate::policy::breaker::Breaker;
use crate::policy::budget::Budget;
use crate::policy::class_backoff::ClassBackoff;
use crate::policy::load::RetryCounter;
use crate::policy::retry::RetryPolicy;

/// Everything a client shares between its clones and its background tasks.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) retry: RetryPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) headers: HeaderMap,
    pub(crate) rng: Mutex<fastrand::Rng>,
    pub(crate) observer: Arc<dyn Observer>,
    /// The cluster's name once a health answer told it (spans and retry logs carry it).
    pub(crate) cluster_name: crate::observe::context::ClusterName,
    /// `opensearch` or `elasticsearch`, from the last `GET /` answer (the spans'
    /// `db.system.name`).
    pub(crate) system_name: crate::observe::semconv::SystemName,
    pub(crate) resurrection_timers: bool,
    pub(crate) health_timeout: Duration,
    /// When Unavailable nodes are probed for cluster health again.
    pub(crate) reprobe: crate::nodes::capability::ReprobePolicy,
    /// The user's callback applied to every background request.
    pub(crate) health_modifier: Option<crate::config::RequestModifier>,
    /// Periodic refresh of live nodes' cluster health (see `refresh`).
    pub(crate) health_refresh: bool,
    pub(crate) refresh_started: std::sync::atomic::AtomicBool,
    /// Discovery settings and state (the background task holds only a `Weak<Inner>`).
    pub(crate) discovery: Discovery,
    /// Dropped with the client: wakes and ends every background task.
    pub(crate) shutdown: tokio::sync::watch::Sender<()>,
    /// Wall clock, for `Retry-After` HTTP-dates; injectable in tests.
    pub(crate) wall_clock: fn() -> SystemTime,
    /// The retry budget (none: switched off).
    pub(crate) budget: Option<Budget>,
    /// The cluster circuit breaker (none: switched off).
    pub(crate) breaker: Option<Breaker>,
    /// Per-class backoff and retry limits.
    pub(crate) class_backoff: ClassBackoff,
    /// Recent retries, for the adaptive jitter multiplier.
    pub(crate) retry_counter: RetryCounter,
    /// Consecutive gateway errors that eject a node (0: never).
    pub(crate) gateway_eject: u32,
    /// What a node's death sets off (see [`DeathHooks`]).
    pub(crate) on_death: DeathHooks,
    /// The client's hedging setting (none: only requests that ask for it are hedged).
    pub(crate) hedging: Option<crate::policy::hedge::Hedging>,
    /// The hedge budget and the recent latencies the percentile delay reads.
    pub(crate) hedge: crate::policy::hedge::HedgeState,
    /// The adaptive concurrency limit (none: switched off).
    pub(crate) limit: Option<crate::policy::limit::Limiter>,
    /// Gzip request bodies of at least this many bytes and ask for gzip answers (none: off).
    pub(crate) compress_min_bytes: Option<usize>,
}

/// What a node's death sets off, wherever it is detected (a user request, `check_all`, a
/// discovered node failing its first check). The transport supplies these when it builds the
/// client: starting a resurrection timer and triggering a discovery round live in modules
/// that themselves run health checks, so the health checks reach them through these
/// functions rather than by importing them.
#[derive(Clone, Copy)]
pub(crate) struct DeathHooks {
    /// Hands the node to its resurrection timer (starting one if none runs). Called only
    /// when resurrection timers are on.
    pub(crate) start_timer: fn(&Arc<Inner>, &Arc<PoolNode>),
    /// A node was marked dead: re-discovers the cluster when so configured.
    pub(crate) rediscover: fn(&Arc<Inner>),
}

impl Inner {
    /// Hands a failed node to its resurrection timer, when timers are on.
    pub(crate) fn start_timer(self: &Arc<Self>, node: &Arc<PoolNode>) {
        if self.resurrection_timers {
            (self.on_death.start_timer)(self, node);
        }
    }
}

/// Discovery's part of the client: settings, the seeds, and the bookkeeping that keeps
/// rounds serialized and failure-triggered rounds rate-limited.
pub(crate) struct Discovery {
    pub(crate) config: DiscoveryConfig,
    /// The configured node URLs: never dropped, and asked when nothing else answers.
    pub(crate) seeds: Vec<NodeAddr>,
    /// Held for a whole round, so rounds (background and `discover_now`) never interleave.
    pub(crate) round: tokio::sync::Mutex<()>,
    /// Wakes the background task for a failure-triggered round. Shared with the task so
    /// it can wait without holding the client.
    pub(crate) wake: Arc<Notify>,
    pub(crate) last_triggered: Mutex<Option<Instant>>,
    pub(crate) started: AtomicBool,
    /// Rotates which live node is asked first, so rounds do not all land on one node.
    pub(crate) next_start: AtomicUsize,
}

impl Discovery {
    pub(crate) fn new(config: DiscoveryConfig, seeds: Vec<NodeAddr>) -> Discovery {
        Discovery {
            config,
            seeds,
            round: tokio::sync::Mutex::new(()),
            wake: Arc::new(Notify::new()),
            last_triggered: Mutex::new(None),
            started: AtomicBool::new(false),
            next_start: AtomicUsize::new(0),
        }
    }
}
