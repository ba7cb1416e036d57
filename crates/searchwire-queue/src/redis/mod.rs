//! The Redis backend: one queue shared by any number of processes on any number of machines.
//!
//! # Layout
//!
//! A queue named `S` (default [`DEFAULT_STREAM`], `es-retry-stream` as in reference 004
//! ch. 5) is these keys (layout 2, since 2026-12-01; `S:layout` holds `2`):
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `S` | stream, consumer group (default [`DEFAULT_GROUP`]) | one entry per **lease call** (fields `n`: its number of leases, `ids`: its messages): the in-flight log; each consumer's pending-entries list is what it holds |
//! | `S:delayed` | sorted set, score `retry_at` | messages not due yet |
//! | `S:ready` | sorted set, all scores 0, ordered by member | due messages; the member (`255 − priority`, `retry_at`, id as big-endian bytes, then the payload hash and the id in decimal) sorts in delivery order and tells a lease the hash and id without a lookup |
//! | `S:msg` | hash id → record | every queued message (leased or not) |
//! | `S:hashes` | hash SHA-256 (32 bytes) → id | de-duplication while queued |
//! | `S:held` | hash id → hash, lease token, stream entry | leased messages: by whom (the entry's consumer) and which lease |
//! | `S:calls` | sorted set, score lease end | lease calls (stream entries) in flight |
//! | `S:entries` | hash stream entry → leases of it not ended yet | when an entry may be acknowledged and deleted |
//! | `S:dead`, `S:dead-ids` | hash id → dead-letter record, sorted set of ids | dead letters |
//! | `S:arrival` | sorted set, score id | queued ids in arrival order (oldest, listing) |
//! | `S:seq`, `S:lease-seq` | counters | message ids, lease tokens (one per lease call) |
//! | `S:layout` | string | the layout version |
//! | `S:receipt:TOKEN:CHUNK` | string, expires | on a Sentinel or Cluster link, what one append call (one transaction of it) answered, for its resend |
//!
//! Per message, an append writes 4 members (record, hash, arrival, schedule member), a lease
//! pops 1 and writes 1 (`S:held`), an ack deletes 4. Layout 1 also kept, per message, where
//! it was (`S:meta`), who held it (`S:inflight`) and its lease end (`S:leases`), and passed
//! every record through Lua; see "Migration".
//!
//! # Why a stream *and* sorted sets
//!
//! A stream delivers in the order entries were added and hands every entry out as soon as it
//! exists: it cannot hold a message back until its `retry_at`, nor deliver a priority-9
//! message before a priority-0 one added earlier. So scheduling lives in two sorted sets
//! (`delayed` by time, `ready` in delivery order) and the stream carries exactly what is
//! leased: a lease is one Lua script that moves due messages from `delayed` to `ready`,
//! takes the first `max` of `ready` (one ZPOPMIN: all scores are 0), XADDs one entry for
//! the whole call (with its message ids) and XREADGROUPs it into the consumer's pending
//! list. Ack, reschedule and dead-lettering count the entry's leases down (`S:entries`);
//! when the last one ends, the entry is XACKed and then XDELed, so only acknowledged
//! entries are ever trimmed and the stream stays as long as the number of lease calls in
//! flight. `XPENDING es-retry-stream searchwire` shows each consumer's lease calls and their
//! idle time; `XRANGE` shows which messages each carries.
//!
//! Nothing is delivered early: a message enters `ready` only when a lease script runs at a
//! `now` at or after its `retry_at`.
//!
//! # A consumer that dies
//!
//! Lease ends are kept per lease call in `S:calls` by the **caller's clock** (the injected
//! [`Clock`](crate::Clock)), not by XAUTOCLAIM's idle time (Redis's clock): both backends
//! then expire leases identically and tests drive expiry with a manual clock. Each lease
//! script first ends expired lease calls: every message the call still holds goes back to
//! `ready`, where it is leased again in its place in the delivery order — an XAUTOCLAIM
//! would hand them to whoever claims first, ahead of higher-priority messages — and the
//! entry is XACKed and XDELed. Each expiry counts a failed attempt (a dead letter once
//! `max_retries` is reached, as in the embedded backend). The effect is the same
//! guarantee: a holder that dies loses nothing; its messages come back after the lease
//! timeout. Machines sharing a queue need synchronized clocks (NTP): a skew shifts due
//! times and lease ends by the skew. [`RedisQueue::release`] finds a consumer's lease
//! calls in its pending-entries list.
//!
//! # Atomicity, batching, durability
//!
//! Every operation is atomic in Redis. An append of more than
//! [`RedisConfig::small_append`] messages reserves its ids with one INCRBY, then sends its
//! messages in chunks of [`RedisConfig::chunk`], each one `MULTI`/`EXEC` of plain commands
//! (records, arrival, schedule members) and a small de-duplication script (sent whole with
//! `EVAL`: an `EVALSHA` inside `MULTI` that met an emptied script cache would fail after the
//! records were written), which deletes again what it finds queued already; all chunks are
//! pipelined in one round trip, so two processes appending the same payload store it once.
//! A smaller append (by default: one message) is one `EVALSHA` of one script that reserves
//! the ids, de-duplicates and writes the same keys and values: one round trip and, with
//! `appendfsync always`, one AOF sync instead of two, and a kill of the appender can leave
//! no gap in the ids; its record passes through Lua, which is why larger appends do not
//! take this path. If Redis lost its scripts (a restart, `SCRIPT FLUSH`), the `NOSCRIPT`
//! answer means nothing ran: the scripts are loaded and the call sent again, as for every
//! other script call. A lease is the lease script (it returns ids) and one `HMGET` of the
//! records; an ack is one script per 1000 ids, pipelined. The 1 KB records never pass
//! through Lua in batch appends, leases and acks (they did in layout 1: about half of its
//! Redis time per message was the Lua interpreter).
//!
//! `append` returns when Redis has executed the transactions. That survives the death of
//! the appending process. Whether it survives a crash of Redis or of its machine is Redis's
//! persistence setting: with `appendonly yes` and `appendfsync always`, Redis syncs its AOF
//! before it replies, so everything whose append returned survives (this is what
//! `scripts/redis` configures); with `appendfsync everysec` up to about one second of
//! acknowledged writes can be lost. That protects against a crash of the Redis process,
//! not against the loss of its machine; replicas alone do not change this (replication is
//! asynchronous). See the next two sections for what does.
//!
//! # Sentinel
//!
//! With [`RedisConfig::sentinel`] the queue finds the primary through Sentinels
//! (`SENTINEL get-master-addr-by-name`, each Sentinel in turn) and accepts an address only
//! when the server there answers `ROLE` with `master`. It resolves the primary again after a
//! connection error, a `READONLY` answer, a `ROLE` check that found a replica, or a
//! `+switch-master` message for its master from any Sentinel (it subscribes to each). The
//! redis crate's own Sentinel client resolves once and keeps the address after a failover,
//! hence this small wrapper (`link.rs`). A call that failed because the primary moved
//! without running anything (`READONLY`, a refused connection) is sent once more to the new
//! one; an append that failed because the primary moved is sent once more whole, within
//! [`RESEND_WITHIN`] of its first try, with that try's receipt: each append call on a
//! Sentinel link carries a random token, and the script that stores its messages (per
//! transaction of a large append) also writes `S:receipt:TOKEN:CHUNK` with its answer,
//! expiring after [`RECEIPT_TTL`]. Written with the messages, the receipt replicates and
//! survives a failover exactly when they do, and unlike `S:hashes` it outlives their
//! delivery: a resend that finds it stores nothing and answers what the first try did. A
//! payload de-duplication alone missed a first try that had landed, been replicated and
//! been delivered and acknowledged on the new primary before the resend came, and stored
//! the payload twice.
//! The ids of a large append are reserved and written on the same connection: a newly
//! promoted primary may hand out the same ids again, so an append whose primary changed
//! between the two steps fails (and is sent once more) instead of writing under them.
//!
//! On a Sentinel link every append (and lease) ends with `ROLE` in the same pipeline: a
//! server demoted meanwhile never acknowledges one. The scripts are loaded again when a new
//! primary does not have them (`NOSCRIPT` means nothing ran), so the first append after a
//! failover succeeds (tested: `tests/redis_failover.rs`). Sentinels are reached without
//! authentication; the primary with [`RedisConfig::url`]'s credentials and database.
//!
//! # Replicated appends
//!
//! With [`RedisConfig::min_replicas`] `N > 0`, an append returns only after `WAIT N
//! timeout` confirmed that `N` replicas received its writes; fewer within
//! [`RedisConfig::replica_timeout`] fails it (the relay answers its items 503, the client
//! sends them again, and de-duplication by payload keeps that exact while the first copy is
//! queued). `WAIT` is sent after the `EXEC`s and the script call, never inside them (where
//! it does not block), and in the same pipeline, so on the same connection: a `WAIT` sent on
//! a reconnected connection has nothing of its own to wait for and would confirm at once.
//! Leases are confirmed the same way, so a consumer never hands out a message a failover
//! could take back.
//!
//! What it promises, in Redis's words (the `WAIT` reference): it "does not make Redis a
//! strongly consistent store"; Sentinel makes "a best-effort attempt to promote the best
//! replica", so "it is possible to still lose a write synchronously replicated to multiple
//! replicas". What it buys: an acknowledged append survives the loss of one
//! machine — the primary, its disk and everything not yet sent from it — because Sentinel
//! promotes the replica with the most data, and one of them has it (with 2 replicas and
//! `N = 1`, tested with the replication link slowed to 300 ms: 0 of the acknowledged lost;
//! with `N = 0` thousands). A *forced* failover (`SENTINEL FAILOVER`) is the case `N = 1`
//! does not cover: one replica is promoted while the other still follows the old primary
//! for up to a second, and a write confirmed by that one alone is lost; `N` equal to the
//! number of replicas closes that window (tested: 20 forced failovers under load, 0 lost, 0
//! stored twice), at the price of refusing appends while any replica is down. Two
//! simultaneous machine losses, or a network partition that isolates a primary with its
//! clients, are beyond it. On the server, set `min-replicas-to-write N` (and
//! `min-replicas-max-lag`) as well: then a primary cut off from its replicas refuses writes
//! itself instead of accepting ones no client will count.
//!
//! # Group commit
//!
//! With [`RedisConfig::group_commit`] (the default) the appends of concurrent callers are
//! sent as one call: a caller that finds no append in flight sends its batch with the ones
//! waiting beside it (whole, oldest first, up to [`RedisConfig::chunk`] messages), and each
//! caller gets its own answers; see `group.rs`. Redis's cost per call — the script or
//! transaction, the AOF write and sync of its event-loop pass, a `WAIT` — is then paid once
//! for all of them. [`RedisQueue::append_calls`] counts the calls sent. On a Redis Cluster
//! the group commit is per primary, not per shard: a round carries what waits for every
//! shard the primary serves and sends one call per shard at once on its connection
//! ([`RedisClusterQueue::append_rounds`] counts the rounds).
//!
//! # Migration
//!
//! [`RedisQueue::connect`] brings a queue left by layout 1 to layout 2 with one script
//! (`scripts::MIGRATE`), guarded by `S:layout`: atomic, and safe when several processes
//! connect at once (the first migrates, the others find `2`). Every queued message is
//! scheduled again from its record; one leased under layout 1 is given back, due at its
//! `retry_at` and marked `pending_shutdown` (at-least-once: its holder may have delivered
//! it), without an attempt counted; layout 1's stream entries are acknowledged and deleted.
//! The script blocks Redis for a time proportional to the backlog (it reads every record
//! once). Processes of both versions must not share a queue: stop the old ones
//! before starting the new.
//!
//! # Redis Cluster
//!
//! With [`RedisConfig::cluster`] the queue is a [`RedisClusterQueue`]: [`ClusterConfig::shards`]
//! shards (default [`DEFAULT_SHARDS`]), shard `K` a `RedisQueue` on the stream `{S:K}`, so
//! every key of its layout shares that hash tag and one slot, and its scripts and
//! transactions run as on one server. A payload's shard comes from its hash (exact
//! de-duplication); an id keeps its shard in its low 8 bits; each shard has its own link to
//! the primary of its slot (`CLUSTER SLOTS`, `ROLE` checked; the shards of one primary share
//! one connection to it), resolved again after `MOVED`, `ASK`, `CLUSTERDOWN`, `READONLY` or a
//! connection error (a call refused with `CLUSTERDOWN` or `TRYAGAIN` is sent again at
//! growing intervals for up to [`CLUSTER_DOWN_PATIENCE`]), with receipts as on a Sentinel
//! link but without the `ROLE` tail (a Cluster node refuses a slot's writes with `MOVED`
//! unless it is that slot's primary).
//! Delivery order holds per shard only. A lease call takes from the shards of one primary
//! (the starting shard's, the start going round the shards), then from the others if that
//! was not enough, so every shard gets its share over calls and one call's leases and acks
//! cost one primary one pass. See `docs/architecture/queue.md`, "The Redis queue on a Redis
//! Cluster".

mod append_scripts;
mod cluster;
mod config;
mod conn;
mod group;
mod keys;
mod link;
mod read;
mod scripts;
mod write;

#[cfg(test)]
mod migrate_tests;
#[cfg(test)]
mod receipt_tests;

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::message::{Lease, Message, Rescheduled};
use crate::{record, QueueOptions, Timestamp};
pub use cluster::{key_slot, RedisClusterQueue};
pub use config::{ClusterConfig, SentinelConfig, DEFAULT_SHARDS, MAX_SHARDS};
pub use config::{
    RedisConfig, CLUSTER_DOWN_PATIENCE, CONNECT_TIMEOUT, DEFAULT_CHUNK, DEFAULT_GROUP,
    DEFAULT_REPLICA_TIMEOUT, DEFAULT_SMALL_APPEND, DEFAULT_STREAM, MAX_LEASE, RECEIPT_TTL,
    RECONNECT_TRIES, RESEND_WITHIN, RESPONSE_TIMEOUT,
};
use keys::Keys;
use link::Link;
use scripts::Scripts;

/// A Redis URL as it may be shown: the transport's one redaction (`searchwire::redact_userinfo`),
/// so a password never appears, even in a URL without a scheme.
use searchwire::redact_userinfo as redact;

/// The Redis queue. Cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct RedisQueue {
    link: Link,
    scripts: Arc<Scripts>,
    keys: Arc<Keys>,
    config: Arc<RedisConfig>,
    /// The appends waiting for a group-commit call (shared by clones).
    group: Arc<group::Group>,
}

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueue")
            .field("config", &self.config)
            .finish()
    }
}

fn redis_err(what: &str, e: redis::RedisError) -> Error {
    Error::with_source(ErrorKind::Redis, format!("redis: {what} failed"), e)
}

/// A call refused with `CLUSTERDOWN`/`TRYAGAIN` for `waited`, past the patience.
fn cluster_down_err(what: &str, waited: Duration, e: redis::RedisError) -> Error {
    Error::with_source(
        ErrorKind::Redis,
        format!(
            "redis: {what} failed: the Redis Cluster did not serve the slot for {waited:.1?} \
             (a failover, a slot migration, or a primary lost and not replaced yet); nothing \
             ran: send it again, and see CLUSTER INFO"
        ),
        e,
    )
}

/// Whether `e` refused the call before anything of it ran in a way a primary resolved
/// anew cures at once: a replica now (`READONLY`), a slot served elsewhere (`MOVED`,
/// `ASK`), no connection.
fn refused_before_running(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::ReadOnly | redis::ErrorKind::Moved | redis::ErrorKind::Ask
    ) || e.is_connection_refusal()
}

/// Whether `e` is `CLUSTERDOWN` or `TRYAGAIN`: refused before running, and over by itself.
fn is_cluster_wait(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::ClusterDown | redis::ErrorKind::TryAgain
    )
}

/// The first wait after a `CLUSTERDOWN` or `TRYAGAIN`; each next one doubles, up to
/// [`CLUSTER_DOWN_STEP_CAP`].
const CLUSTER_DOWN_FIRST_STEP: Duration = Duration::from_millis(25);
const CLUSTER_DOWN_STEP_CAP: Duration = Duration::from_millis(500);

/// How long to wait before sending again a call refused with `CLUSTERDOWN` (the node does
/// not see every slot served: a failover or a slot change in progress) or `TRYAGAIN` (the
/// slot's keys are being migrated): both refuse before running anything, and both end by
/// themselves, so the call waits for that (`down` keeps when the first came and the last
/// step) up to [`CLUSTER_DOWN_PATIENCE`] in all. `None`: another error, or waited enough.
fn wait_for_cluster(
    e: &redis::RedisError,
    down: &mut Option<(tokio::time::Instant, Duration)>,
) -> Option<Duration> {
    if !is_cluster_wait(e) {
        return None;
    }
    let (since, step) = match *down {
        None => (tokio::time::Instant::now(), CLUSTER_DOWN_FIRST_STEP),
        Some((since, last)) => (since, (last * 2).min(CLUSTER_DOWN_STEP_CAP)),
    };
    if since.elapsed() + step > CLUSTER_DOWN_PATIENCE {
        return None;
    }
    *down = Some((since, step));
    Some(step)
}

impl RedisQueue {
    /// Connects, creates the stream and consumer group if missing, and loads the scripts.
    /// A configuration with [`RedisConfig::cluster`] is refused: that queue is a
    /// [`RedisClusterQueue`] ([`crate::Queue::connect_redis`] opens either).
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        if config.cluster.is_some() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a queue on a Redis Cluster is sharded: open it with Queue::connect_redis or \
                 RedisClusterQueue::connect",
            ));
        }
        let (info, shown) = Self::check(&config)?;
        let link = match &config.sentinel {
            None => Link::direct(info, &shown).await?,
            Some(sentinel) => Link::sentinel(info, sentinel.clone()).await?,
        };
        Self::open(config, link).await
    }

    /// Checks a configuration; returns its URL parsed and as it may be shown.
    pub(in crate::redis) fn check(config: &RedisConfig) -> Result<(redis::ConnectionInfo, String)> {
        config.options.validate()?;
        if config.sentinel.is_some() && config.cluster.is_some() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "give either Sentinels or a Redis Cluster, not both",
            ));
        }
        for (what, v) in [("stream", &config.stream), ("group", &config.group)] {
            if v.is_empty() || v.contains(char::is_whitespace) {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "invalid {what} name {}: use a non-empty name without spaces",
                        searchwire::echo(v)
                    ),
                ));
            }
        }
        if config.min_replicas > 0
            && (config.replica_timeout.is_zero() || config.replica_timeout >= RESPONSE_TIMEOUT)
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "replica_timeout must be above zero and below the response timeout                      ({RESPONSE_TIMEOUT:?}) when min_replicas is set (WAIT 0 would wait forever)"
                ),
            ));
        }
        if config.chunk == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "chunk must be at least 1",
            ));
        }
        let shown = redact(&config.url);
        let info: redis::ConnectionInfo = config.url.as_str().parse().map_err(|e| {
            Error::with_source(
                ErrorKind::InvalidInput,
                format!(
                    "invalid Redis URL {} (expected redis://[user:password@]host:port[/db])",
                    searchwire::echo(&shown)
                ),
                e,
            )
        })?;
        Ok((info, shown))
    }

    /// Creates the stream and consumer group on `link` if missing, loads the scripts and
    /// brings the layout up to date.
    pub(in crate::redis) async fn open(config: RedisConfig, link: Link) -> Result<Self> {
        let mut conn = link.get().await?.conn;
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&config.stream)
            .arg(&config.group)
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            Ok(()) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(redis_err("creating the consumer group", e)),
        }
        let scripts = Scripts::new();
        for s in scripts.all() {
            s.prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(|e| redis_err("loading the queue scripts", e))?;
        }
        let queue = RedisQueue {
            keys: Arc::new(Keys::new(&config.stream)),
            link,
            scripts: Arc::new(scripts),
            config: Arc::new(config),
            group: Arc::default(),
        };
        let mut inv = queue.invocation(&queue.scripts.migrate);
        inv.arg(queue.now().as_millis())
            .arg(scripts::LAYOUT_VERSION);
        let _migrated: u64 = queue
            .run("migrating the queue to the current layout", &inv)
            .await?;
        Ok(queue)
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        &self.config.options
    }

    /// A handle on the same queue for another consumer (its own leases to release), sharing
    /// the connection.
    pub fn with_consumer(&self, consumer: impl Into<String>) -> Result<Self> {
        let mut config = (*self.config).clone();
        config.options = config.options.consumer(consumer);
        config.options.validate()?;
        Ok(RedisQueue {
            config: Arc::new(config),
            ..self.clone()
        })
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.config.stream
    }

    /// The address (`host:port`) commands go to now: with Sentinels, the primary last
    /// resolved.
    pub fn primary(&self) -> String {
        self.link.addr()
    }

    fn now(&self) -> Timestamp {
        self.config.options.clock.now()
    }

    /// `EVALSHA script <keys> group`: add the script's other arguments to it.
    fn invocation(&self, script: &redis::Script) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(self.keys.all.len())
            .arg(&self.keys.all)
            .arg(&self.config.group);
        cmd
    }

    async fn run<T: redis::FromRedisValue>(&self, what: &str, cmd: &redis::Cmd) -> Result<T> {
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone());
        let (v,): (T,) = self.run_pipe(what, &pipe).await?;
        Ok(v)
    }

    /// Sends a pipeline of script calls; if Redis lost its script cache (a restart, a
    /// failover to a replica that never loaded them), loads the scripts and sends it again
    /// (a NOSCRIPT reply means no script ran). On a Sentinel or Cluster link a failure marks the
    /// connection stale (the next call resolves the primary again). A call refused before
    /// anything ran is sent again to the primary resolved anew: once at once when the
    /// server is a replica now (`READONLY`), the slot is served elsewhere (`MOVED`, `ASK`)
    /// or the connection was refused; at growing intervals for up to
    /// [`CLUSTER_DOWN_PATIENCE`] after `CLUSTERDOWN` or `TRYAGAIN` (see `wait_for_cluster`).
    async fn run_pipe<T: redis::FromRedisValue>(
        &self,
        what: &str,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        self.run_pipe_pinned(what, pipe, None).await
    }

    /// [`Self::run_pipe`], pinned to one connection when `pin` is given: the first call
    /// records the connection's generation there (and may be sent again as above, the pin
    /// then taking the new generation), a later one with the same `pin` fails (and sends
    /// nothing) if the primary was resolved anew since, and is not sent again.
    /// For the steps of one operation that must reach the same server (ids reserved on one
    /// primary must be written there: a newly promoted one may hand out the same ids).
    async fn run_pipe_pinned<T: redis::FromRedisValue>(
        &self,
        what: &str,
        pipe: &redis::Pipeline,
        mut pin: Option<&mut Option<u64>>,
    ) -> Result<T> {
        // Only a call that is an operation's first step (nothing of it reached a server yet)
        // may be sent again: a later pinned step must reach the same server or fail.
        let first_step = self.link.follows_failover() && pin.as_deref().is_none_or(Option::is_none);
        let mut resent = false;
        let mut down = None;
        loop {
            let handle = self.link.get().await?;
            if let Some(pin) = pin.as_deref_mut() {
                match *pin {
                    None => *pin = Some(handle.generation),
                    Some(g) if g != handle.generation => {
                        return Err(Error::new(
                            ErrorKind::Redis,
                            format!(
                                "redis: {what} failed: the primary moved to {} during the \
                                 operation; nothing was acknowledged: send it again",
                                self.link.addr()
                            ),
                        ));
                    }
                    Some(_) => {}
                }
            }
            let mut conn = handle.conn;
            let mut sent = pipe.query_async(&mut conn).await;
            if matches!(&sent, Err(e) if e.kind() == redis::ErrorKind::NoScriptError) {
                for s in self.scripts.all() {
                    if let Err(e) = s.prepare_invoke().load_async(&mut conn).await {
                        self.link.failed(handle.generation, &e);
                        return Err(redis_err("reloading the queue scripts", e));
                    }
                }
                sent = pipe.query_async(&mut conn).await;
            }
            match sent {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.link.failed(handle.generation, &e);
                    if first_step {
                        if let Some(wait) = wait_for_cluster(&e, &mut down) {
                            tracing::debug!(error = %e, ?wait, "redis: {what}: the cluster is not serving the slot yet; waiting");
                            tokio::time::sleep(wait).await;
                        } else if !resent && refused_before_running(&e) {
                            resent = true;
                        } else if let Some((since, _)) = down.filter(|_| is_cluster_wait(&e)) {
                            return Err(cluster_down_err(what, since.elapsed(), e));
                        } else {
                            return Err(redis_err(what, e));
                        }
                        if let Some(pin) = pin.as_deref_mut() {
                            *pin = None;
                        }
                        continue;
                    }
                    return Err(redis_err(what, e));
                }
            }
        }
    }

    /// See [`Queue::reschedule`](crate::Queue::reschedule).
    pub async fn reschedule(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        self.put_back(lease, retry_at, error, true).await
    }

    /// See [`Queue::defer`](crate::Queue::defer).
    pub async fn defer(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
    ) -> Result<Rescheduled> {
        self.put_back(lease, retry_at, error, false).await
    }

    /// A reschedule (`counted`: one more attempt, a dead letter past `max_retries`) or a
    /// deferral (attempts kept, never a dead letter).
    async fn put_back(
        &self,
        lease: &Lease,
        retry_at: Timestamp,
        error: &str,
        counted: bool,
    ) -> Result<Rescheduled> {
        let now = self.now();
        let mut m = lease.message.clone();
        let attempts = if counted {
            m.attempts.saturating_add(1)
        } else {
            m.attempts
        };
        if counted && crate::exhausted(attempts, m.max_retries) {
            m.attempts = attempts;
            return Ok(if self.kill(lease, m, error, now).await? {
                Rescheduled::DeadLettered
            } else {
                Rescheduled::LeaseLost
            });
        }
        m.attempts = attempts;
        m.retry_at = retry_at;
        m.last_error = Some(error.to_owned());
        m.pending_shutdown = false;
        let mut inv = self.invocation(&self.scripts.reschedule);
        inv.arg(now.as_millis())
            .arg(m.id.0)
            .arg(&lease.token.0.to_be_bytes()[..])
            .arg(record::encode(&m))
            .arg(write::member(m.priority, m.retry_at, m.id, &m.payload_hash))
            .arg(retry_at.as_millis());
        let done: i64 = self.run("rescheduling", &inv).await?;
        Ok(if done == 1 {
            Rescheduled::Scheduled { attempts, retry_at }
        } else {
            Rescheduled::LeaseLost
        })
    }

    async fn kill(
        &self,
        lease: &Lease,
        mut m: Message,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool> {
        m.last_error = Some(reason.to_owned());
        let mut inv = self.invocation(&self.scripts.kill);
        inv.arg(m.id.0)
            .arg(&lease.token.0.to_be_bytes()[..])
            .arg(record::encode_dead(&m, reason, now));
        let done: i64 = self.run("dead-lettering", &inv).await?;
        Ok(done == 1)
    }

    /// See [`Queue::dead_letter`](crate::Queue::dead_letter).
    pub async fn dead_letter(&self, lease: &Lease, reason: &str) -> Result<bool> {
        self.kill(lease, lease.message.clone(), reason, self.now())
            .await
    }

    /// See [`Queue::release`](crate::Queue::release).
    pub async fn release(&self) -> Result<u64> {
        let mut inv = self.invocation(&self.scripts.release);
        inv.arg(&self.config.options.consumer);
        self.run("releasing leases", &inv).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("redis://:secret@h:6379/0"),
            "redis://<redacted>@h:6379/0"
        );
        assert_eq!(
            redact("redis://u:secret@h:6379"),
            "redis://<redacted>@h:6379"
        );
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        // The old queue-only redaction showed these whole.
        assert_eq!(redact("u:secret@h:6379"), "<redacted>@h:6379");
        assert_eq!(redact("redis//u:secret@h:6379"), "<redacted>@h:6379");
    }

    /// The waits after `CLUSTERDOWN`/`TRYAGAIN`: 25 ms doubling to 500 ms, as long as the
    /// next one ends within the patience; none for other errors.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_cluster_down_is_waited_for_with_growing_steps_up_to_the_patience() {
        let down = redis::RedisError::from((redis::ErrorKind::ClusterDown, "The cluster is down"));
        let again = redis::RedisError::from((redis::ErrorKind::TryAgain, "Multiple keys"));
        let moved = redis::RedisError::from((redis::ErrorKind::Moved, "3999 127.0.0.1:6381"));
        let mut state = None;
        assert_eq!(wait_for_cluster(&moved, &mut state), None);
        assert_eq!(state, None, "another error starts no wait");
        let started = tokio::time::Instant::now();
        let mut steps = Vec::new();
        while let Some(step) = wait_for_cluster(
            if steps.len() % 2 == 0 { &down } else { &again },
            &mut state,
        ) {
            steps.push(step.as_millis());
            tokio::time::sleep(step).await;
        }
        assert_eq!(&steps[..6], &[25, 50, 100, 200, 400, 500]);
        assert!(steps[6..].iter().all(|&s| s == 500), "{steps:?}");
        let waited = started.elapsed();
        assert!(waited <= CLUSTER_DOWN_PATIENCE, "{waited:?}");
        assert!(
            waited + CLUSTER_DOWN_STEP_CAP > CLUSTER_DOWN_PATIENCE,
            "{waited:?}"
        );
        // 25 + 50 + ... + 400 = 775 ms, then 500 ms steps while they end within 5 s.
        assert_eq!(steps.len(), 5 + 8);
    }
}
