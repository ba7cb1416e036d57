//! The Redis backend's configuration and its defaults (each default once, with why).

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::QueueOptions;
use searchwire::redact_userinfo as redact;

/// Default stream name, from reference 004 ch. 5.
pub const DEFAULT_STREAM: &str = "es-retry-stream";
/// Default consumer group.
pub const DEFAULT_GROUP: &str = "searchwire";
/// Default [`RedisConfig::chunk`]: messages per append transaction (at most [`MAX_LEASE`]).
/// With the records written by plain commands, 1000 × 1 KB is one transaction of a few ms
/// (other clients wait that long at most) and one AOF write and sync per 1000 messages
/// (with 256, four).
pub const DEFAULT_CHUNK: usize = 1000;
/// Default [`RedisConfig::small_append`]: appends of at most this many messages are one
/// script call. Measured (docs/benchmarks.md, "Redis: one-call appends"): at one message
/// per call from 64 tasks the one call gives ~1.4–1.8× the rate at half the client's CPU;
/// at 10 per call it costs redis-server ~10–20 µs more per message than the transaction
/// path (in Lua each record is copied and interned a few times over), and at 100 and 1000
/// more still. Between 1 and 10 it was not measured, so only single messages take it.
pub const DEFAULT_SMALL_APPEND: usize = 1;
/// How long connecting (or reconnecting) to Redis may take, per try.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one command may wait for Redis's answer. A lease or append script over a few
/// hundred messages takes milliseconds; 30 s means Redis is stuck, not busy.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Reconnection tries after a connection is lost, before a call fails (100 ms doubling,
/// at most 1 s apart).
pub const RECONNECT_TRIES: usize = 3;

/// Default [`RedisConfig::replica_timeout`]: how long an append waits for its replicas.
/// On a healthy network a replica confirms within milliseconds; 2 s rides out a busy one
/// and still answers a client (with an error it retries) well within its own timeouts.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the receipt of an append on a Sentinel link is kept (see "Sentinel" in the
/// module documentation): its resend must run before it expires. A resend starts within
/// [`RESEND_WITHIN`] of the first try and then may take a resolution of the primary (a
/// few Sentinels, [`CONNECT_TIMEOUT`] each and the connection) plus [`RESPONSE_TIMEOUT`]:
/// 120 s covers that with room, and costs one small key per append call for two minutes.
pub const RECEIPT_TTL: Duration = Duration::from_secs(120);

/// An append on a Sentinel link that failed as the primary moved is sent again only if
/// its first try began at most this long ago (else its receipt might expire before the
/// resend runs, and the error goes to the caller).
pub const RESEND_WITHIN: Duration = Duration::from_secs(30);

/// How long a call on a Redis Cluster refused with `CLUSTERDOWN` or `TRYAGAIN` waits for the
/// cluster, sent again at growing intervals (25 ms doubling to 500 ms), before the error
/// goes to the caller. A node answers `CLUSTERDOWN` while it sees a slot without a working
/// primary or most primaries unreachable: for a moment during a failover, or on a machine
/// so busy that the nodes' pings time out, until they answer again plus a rejoin delay
/// (`cluster-node-timeout`, at most 5 s); `TRYAGAIN` while a slot's keys are migrated.
/// Both refuse before anything runs and end by themselves, so waiting is safe, and 5 s
/// rides out those moments. Losing a primary takes `cluster-node-timeout` and an election
/// (15 s and more by default): that outlasts the wait, and the caller sees the error (the
/// relay answers 503; a client sends again).
pub const CLUSTER_DOWN_PATIENCE: Duration = Duration::from_secs(5);

/// The most messages one [`RedisQueue::lease`](super::RedisQueue::lease) returns (Lua's `unpack` limit is ~8000).
pub const MAX_LEASE: usize = 1000;

/// Default [`ClusterConfig::shards`]: 8. The shard count is part of the data's layout (a
/// payload's shard comes from its hash, so another count would look for it elsewhere and
/// de-duplication would miss it): it cannot follow the number of primaries, which grows
/// when an operator reshards. 8 spreads the queue over clusters of up to 8 primaries
/// (CRC16 places the 8 hash tags; `CLUSTER SETSLOT` can move them), while a lease round
/// (one script call per shard that has messages) stays a handful of round trips.
pub const DEFAULT_SHARDS: usize = 8;

/// The most shards: the shard is kept in a message id's low 8 bits (see
/// [`RedisClusterQueue`](super::RedisClusterQueue)).
pub const MAX_SHARDS: usize = 256;

/// Where a Redis Cluster is and how many shards the queue spreads over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Some of the cluster's nodes, as `HOST:PORT`; asked in this order for the slot map
    /// (`CLUSTER SLOTS`). One reachable node is enough.
    pub seeds: Vec<String>,
    /// The queue's shards (hash tags `{STREAM:K}`, K = 0..shards). Default
    /// [`DEFAULT_SHARDS`]; at most [`MAX_SHARDS`]. Every process sharing a queue must use
    /// the same count.
    pub shards: usize,
}

impl ClusterConfig {
    /// A cluster reached through `seeds` (`HOST:PORT`), with [`DEFAULT_SHARDS`] shards.
    pub fn new(seeds: impl IntoIterator<Item = impl Into<String>>) -> Self {
        ClusterConfig {
            seeds: seeds.into_iter().map(Into::into).collect(),
            shards: DEFAULT_SHARDS,
        }
    }

    /// The seeds as `(host, port)`; an error names what is wrong.
    pub(super) fn parsed(&self) -> Result<Vec<(String, u16)>> {
        if self.seeds.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "no Redis Cluster node given: name at least one as HOST:PORT",
            ));
        }
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "invalid shard count {}: use 1 to {MAX_SHARDS} (the default is {DEFAULT_SHARDS})",
                    self.shards
                ),
            ));
        }
        self.seeds.iter().map(|a| parse_addr(a)).collect()
    }
}

/// Configuration of the Redis backend.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` (or `rediss://`). Never printed with its
    /// password.
    pub url: String,
    /// The stream's key; the other keys start with it. Default [`DEFAULT_STREAM`].
    pub stream: String,
    /// The consumer group. Default [`DEFAULT_GROUP`].
    pub group: String,
    /// Messages per transaction in an append (at most [`MAX_LEASE`]). Default
    /// [`DEFAULT_CHUNK`].
    pub chunk: usize,
    /// Appends of at most this many messages are one script call (`EVALSHA`, records
    /// through Lua) instead of an id reservation plus transactions; 0: never. At most
    /// [`MAX_LEASE`] is used. Default [`DEFAULT_SMALL_APPEND`]. Both paths store the same
    /// keys and values.
    pub small_append: usize,
    /// Send the appends of concurrent callers as one call (a group commit; see "Group
    /// commit" in the module documentation): the server's fixed cost per call is paid once
    /// for all of them. Default `true`; `false` sends each append as its own call.
    pub group_commit: bool,
    /// Find the primary through these Sentinels instead of at `url`'s address (`url` then
    /// gives only the credentials and database). See "Sentinel" in the module
    /// documentation.
    pub sentinel: Option<SentinelConfig>,
    /// Spread the queue over the shards of this Redis Cluster instead of one server at
    /// `url`'s address (`url` then gives only the credentials). See "Redis Cluster" in the
    /// module documentation.
    pub cluster: Option<ClusterConfig>,
    /// An append returns only once this many replicas confirmed it (`WAIT`); fewer within
    /// [`Self::replica_timeout`] fails the append. 0 (the default): no wait. See
    /// "Replicated appends" in the module documentation.
    pub min_replicas: usize,
    /// How long an append waits for [`Self::min_replicas`] replicas. Default
    /// [`DEFAULT_REPLICA_TIMEOUT`].
    pub replica_timeout: Duration,
    /// Lease timeout, consumer name, clock.
    pub options: QueueOptions,
}

impl RedisConfig {
    /// Defaults for a queue at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            stream: DEFAULT_STREAM.to_owned(),
            group: DEFAULT_GROUP.to_owned(),
            chunk: DEFAULT_CHUNK,
            small_append: DEFAULT_SMALL_APPEND,
            group_commit: true,
            sentinel: None,
            cluster: None,
            min_replicas: 0,
            replica_timeout: DEFAULT_REPLICA_TIMEOUT,
            options: QueueOptions::default(),
        }
    }

    /// Defaults for a queue on the primary that `sentinel` names (no credentials, database
    /// 0; set [`Self::url`] to `redis://[user:password@]any-host[/db]` for others).
    pub fn sentinel(sentinel: SentinelConfig) -> Self {
        RedisConfig {
            sentinel: Some(sentinel),
            ..RedisConfig::new("redis://sentinel-primary")
        }
    }
}

impl RedisConfig {
    /// Defaults for a queue sharded over the Redis Cluster `cluster` names (no
    /// credentials; set [`Self::url`] to `redis://[user:password@]any-host` for others).
    pub fn cluster(cluster: ClusterConfig) -> Self {
        RedisConfig {
            cluster: Some(cluster),
            ..RedisConfig::new("redis://cluster-node")
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("stream", &self.stream)
            .field("group", &self.group)
            .field("chunk", &self.chunk)
            .field("small_append", &self.small_append)
            .field("group_commit", &self.group_commit)
            .field("sentinel", &self.sentinel)
            .field("cluster", &self.cluster)
            .field("min_replicas", &self.min_replicas)
            .field("replica_timeout", &self.replica_timeout)
            .field("options", &self.options)
            .finish()
    }
}

/// Where the Sentinels are and which master they watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelConfig {
    /// The Sentinels, as `HOST:PORT`; asked in this order. Without authentication.
    pub addrs: Vec<String>,
    /// The master's name in the Sentinels' configuration (`sentinel monitor NAME ...`).
    pub master: String,
}

impl SentinelConfig {
    /// Sentinels at `addrs` (`HOST:PORT`) watching the master `master`.
    pub fn new(
        addrs: impl IntoIterator<Item = impl Into<String>>,
        master: impl Into<String>,
    ) -> Self {
        SentinelConfig {
            addrs: addrs.into_iter().map(Into::into).collect(),
            master: master.into(),
        }
    }

    /// The Sentinels as `(host, port)`; an error names the address that does not parse.
    pub(super) fn parsed(&self) -> Result<Vec<(String, u16)>> {
        if self.addrs.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "no Sentinel given: name at least one as HOST:PORT",
            ));
        }
        if self.master.is_empty() || self.master.contains(char::is_whitespace) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "invalid Sentinel master name {:?}: use the name of `sentinel monitor NAME ...`",
                    self.master
                ),
            ));
        }
        self.addrs.iter().map(|a| parse_addr(a)).collect()
    }
}

/// `HOST:PORT` (an IPv6 host in brackets).
pub(super) fn parse_addr(addr: &str) -> Result<(String, u16)> {
    let bad = || {
        Error::new(
            ErrorKind::InvalidInput,
            format!("invalid address {addr:?}: expected HOST:PORT, e.g. 127.0.0.1:26379"),
        )
    };
    let (host, port) = addr.trim().rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}
