//! Shared by the queue's integration tests: opening either backend on a manual clock.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

pub mod cluster;
pub mod sentinel;

use searchwire_queue::redis::{ClusterConfig, SentinelConfig};
use searchwire_queue::{EmbeddedConfig, ManualClock, Queue, QueueOptions, RedisConfig, Timestamp};

/// The Redis URL of the test server (`scripts/redis start`).
pub const REDIS_ENV: &str = "SEARCHWIRE_TEST_REDIS";
/// The Sentinels (`HOST:PORT,...`, master `searchwire`) of a test set
/// (`scripts/redis sentinel-start`).
pub const SENTINEL_ENV: &str = "SEARCHWIRE_TEST_REDIS_SENTINEL";
/// Every node (`HOST:PORT,...`) of a test Redis Cluster (`scripts/redis cluster-start`).
pub const CLUSTER_ENV: &str = "SEARCHWIRE_TEST_REDIS_CLUSTER";
/// Set to 1 (scripts/test does) to make the Redis tests fail instead of skip without one.
pub const REQUIRE_ENV: &str = "SEARCHWIRE_REQUIRE_REDIS";

/// The lease timeout the tests use.
pub const LEASE: Duration = Duration::from_secs(60);
/// Where the manual clock starts: 2026-01-01T00:00:00Z.
pub const T0: Timestamp = Timestamp::from_millis(1_767_225_600_000);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Embedded,
    /// Redis as configured by default (appends of a few messages are one script call).
    Redis,
    /// Redis with every append on the transaction path (`small_append` 0).
    RedisTransactions,
    /// Redis with every append (up to `MAX_LEASE` messages) one script call.
    RedisOneCall,
    /// Redis through Sentinels, every append confirmed by a replica (`min_replicas` 1).
    RedisSentinel,
    /// The Redis Cluster backend with one shard, every append confirmed by a replica: the
    /// whole contract, order across messages included, through the Cluster's links.
    RedisCluster,
    /// The Redis Cluster backend with its default shards, every append confirmed by a
    /// replica: the scenarios that assume no order across messages (order holds per shard).
    RedisClusterSharded,
}

/// The Redis URL, or `None` (skip) when there is none and it is not required.
pub fn redis_url() -> Option<String> {
    match std::env::var(REDIS_ENV) {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_ENV}=1 but {REDIS_ENV} is not set: start one with scripts/redis start");
            }
            eprintln!("skipping: set {REDIS_ENV} (scripts/redis start) to run the Redis tests");
            None
        }
    }
}

/// The test Sentinels, or `None` (skip) when there are none and Redis is not required.
pub fn sentinel_addrs() -> Option<Vec<String>> {
    match std::env::var(SENTINEL_ENV) {
        Ok(u) if !u.is_empty() => Some(u.split(',').map(str::to_owned).collect()),
        _ => {
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_ENV}=1 but {SENTINEL_ENV} is not set: start a set with scripts/redis sentinel-start");
            }
            eprintln!("skipping: set {SENTINEL_ENV} (scripts/redis sentinel-start) to run the Sentinel tests");
            None
        }
    }
}

/// The test Cluster's nodes, or `None` (skip) when there is none and Redis is not required.
pub fn cluster_addrs() -> Option<Vec<String>> {
    match std::env::var(CLUSTER_ENV) {
        Ok(u) if !u.is_empty() => Some(u.split(',').map(str::to_owned).collect()),
        _ => {
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_ENV}=1 but {CLUSTER_ENV} is not set: start one with scripts/redis cluster-start");
            }
            eprintln!("skipping: set {CLUSTER_ENV} (scripts/redis cluster-start) to run the Redis Cluster tests");
            None
        }
    }
}

/// A unique stream name per test, so tests share one Redis without meeting.
pub fn unique_stream(prefix: &str) -> String {
    format!("{prefix}-{}-{:016x}", std::process::id(), fastrand::u64(..))
}

/// One queue under test, on a manual clock.
pub struct Ctx {
    pub backend: Backend,
    queue: Option<Queue>,
    pub clock: ManualClock,
    pub dir: Option<tempfile::TempDir>,
    pub url: Option<String>,
    pub stream: String,
}

impl Ctx {
    /// `None` when the backend is Redis and no server is configured (the test skips).
    pub async fn new(backend: Backend) -> Option<Ctx> {
        let clock = ManualClock::new(T0);
        let (dir, url) = match backend {
            Backend::Embedded => (Some(tempfile::tempdir().unwrap()), None),
            Backend::Redis | Backend::RedisTransactions | Backend::RedisOneCall => {
                (None, Some(redis_url()?))
            }
            Backend::RedisSentinel => (None, Some(sentinel_addrs()?.join(","))),
            Backend::RedisCluster | Backend::RedisClusterSharded => {
                (None, Some(cluster_addrs()?.join(",")))
            }
        };
        let mut ctx = Ctx {
            backend,
            queue: None,
            clock,
            dir,
            url,
            stream: unique_stream("conformance"),
        };
        ctx.queue = Some(ctx.open("consumer-a").await);
        Some(ctx)
    }

    pub fn options(&self, consumer: &str) -> QueueOptions {
        QueueOptions::default()
            .clock(Arc::new(self.clock.clone()))
            .lease_timeout(LEASE)
            .consumer(consumer)
    }

    /// Opens the queue (again) as `consumer`.
    pub async fn open(&self, consumer: &str) -> Queue {
        match self.backend {
            Backend::Embedded => {
                let mut c = EmbeddedConfig::new(self.dir.as_ref().unwrap().path());
                c.options = self.options(consumer);
                Queue::open_embedded(c).unwrap()
            }
            Backend::Redis | Backend::RedisTransactions | Backend::RedisOneCall => {
                let mut c = RedisConfig::new(self.url.clone().unwrap());
                c.stream = self.stream.clone();
                c.options = self.options(consumer);
                match self.backend {
                    Backend::RedisTransactions => c.small_append = 0,
                    Backend::RedisOneCall => c.small_append = searchwire_queue::redis::MAX_LEASE,
                    _ => {}
                }
                Queue::connect_redis(c).await.unwrap()
            }
            Backend::RedisSentinel => {
                let addrs = self.url.as_ref().unwrap().split(',');
                let mut c = RedisConfig::sentinel(SentinelConfig::new(addrs, sentinel::MASTER));
                c.stream = self.stream.clone();
                c.options = self.options(consumer);
                c.min_replicas = 1;
                Queue::connect_redis(c).await.unwrap()
            }
            Backend::RedisCluster | Backend::RedisClusterSharded => {
                let nodes = self.url.as_ref().unwrap().split(',');
                let mut cluster = ClusterConfig::new(nodes);
                if self.backend == Backend::RedisCluster {
                    cluster.shards = 1;
                }
                let mut c = RedisConfig::cluster(cluster);
                c.stream = self.stream.clone();
                c.options = self.options(consumer);
                c.min_replicas = 1;
                Queue::connect_redis(c).await.unwrap()
            }
        }
    }

    /// Closes the queue as a crash would leave it, and opens it again as `consumer`.
    pub async fn reopen(&mut self, consumer: &str) {
        if let Some(Queue::Embedded(q)) = self.queue.take() {
            q.close().await.unwrap();
        }
        self.queue = Some(self.open(consumer).await);
    }

    /// The queue under test.
    pub fn q(&self) -> &Queue {
        self.queue.as_ref().unwrap()
    }

    pub fn at(&self, ms_after_t0: u64) -> Timestamp {
        Timestamp::from_millis(T0.as_millis() + ms_after_t0)
    }
}
