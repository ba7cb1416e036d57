//! How the shared queue reaches Redis besides `--redis URL`: through Sentinels, sharded over
//! a Redis Cluster, and with appends confirmed by replicas. The same flags for `relay`,
//! `queue` and `ingest`.

use std::time::Duration;

use clap::Args;
use searchwire_queue::redis::{
    ClusterConfig, SentinelConfig, DEFAULT_REPLICA_TIMEOUT, DEFAULT_SHARDS, MAX_SHARDS,
};
use searchwire_queue::RedisConfig;

use crate::durations::parse_positive_duration;

/// The Sentinel and replication flags of a Redis queue.
#[derive(Debug, Clone, Args)]
pub struct RedisHaArgs {
    #[arg(
        long,
        value_name = "HOST:PORT[,...]",
        value_delimiter = ',',
        conflicts_with = "redis",
        requires = "redis_master",
        help = "Find the Redis primary through these Sentinels (and again after a failover) instead of --redis"
    )]
    pub redis_sentinel: Vec<String>,

    #[arg(
        long,
        value_name = "NAME",
        requires = "redis_sentinel",
        help = "The master's name in the Sentinels' configuration (sentinel monitor NAME ...)"
    )]
    pub redis_master: Option<String>,

    #[arg(
        long,
        value_name = "HOST:PORT[,...]",
        value_delimiter = ',',
        conflicts_with_all = ["redis", "redis_sentinel"],
        help = "Shard the queue over the Redis Cluster these nodes belong to (one reachable node is enough) instead of --redis"
    )]
    pub redis_cluster: Vec<String>,

    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_SHARDS,
        value_parser = parse_shards,
        requires = "redis_cluster",
        help = "With --redis-cluster: the queue's shards (1-256); every process sharing the queue must give the same"
    )]
    pub redis_shards: usize,

    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help = "An append counts only once N replicas confirmed it (WAIT); fewer within --redis-replica-timeout fails it (0: no wait)"
    )]
    pub redis_min_replicas: usize,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "2s", help = "How long an append waits for --redis-min-replicas replicas")]
    pub redis_replica_timeout: Duration,
}

impl RedisHaArgs {
    /// The Redis queue's configuration: at `url` (`--redis`), through the Sentinels, or on
    /// the Cluster; `None` when none is given.
    pub fn config(&self, url: Option<&str>) -> Option<RedisConfig> {
        let mut c = match (url, &self.redis_master) {
            (Some(url), _) => RedisConfig::new(url),
            (None, Some(master)) if !self.redis_sentinel.is_empty() => RedisConfig::sentinel(
                SentinelConfig::new(self.redis_sentinel.iter().cloned(), master.clone()),
            ),
            (None, _) if !self.redis_cluster.is_empty() => {
                let mut cluster = ClusterConfig::new(self.redis_cluster.iter().cloned());
                cluster.shards = self.redis_shards;
                RedisConfig::cluster(cluster)
            }
            _ => return None,
        };
        c.min_replicas = self.redis_min_replicas;
        c.replica_timeout = self.redis_replica_timeout;
        Some(c)
    }

    /// Whether a Redis queue is given (`--redis` aside).
    pub fn configured(&self) -> bool {
        !self.redis_sentinel.is_empty() || !self.redis_cluster.is_empty()
    }
}

/// `--redis-shards`: 1 to [`MAX_SHARDS`].
fn parse_shards(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is not a shard count: give 1 to {MAX_SHARDS} (default {DEFAULT_SHARDS})"
        )),
    }
}

// The default is the library's, spelled for clap.
const _: () = assert!(DEFAULT_REPLICA_TIMEOUT.as_secs() == 2);

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long)]
        redis: Option<String>,
        #[command(flatten)]
        ha: RedisHaArgs,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
    }

    #[test]
    fn sentinels_and_replicas_make_the_config() {
        let c = parse(&[
            "--redis-sentinel",
            "127.0.0.1:26379,127.0.0.1:26380",
            "--redis-master",
            "queue",
            "--redis-min-replicas",
            "1",
            "--redis-replica-timeout",
            "500ms",
        ])
        .unwrap();
        let cfg = c.ha.config(c.redis.as_deref()).unwrap();
        assert_eq!(
            cfg.sentinel,
            Some(SentinelConfig::new(
                ["127.0.0.1:26379", "127.0.0.1:26380"],
                "queue"
            ))
        );
        assert_eq!(cfg.min_replicas, 1);
        assert_eq!(cfg.replica_timeout, Duration::from_millis(500));
        // Today's default: one Redis, no wait.
        let c = parse(&["--redis", "redis://h:1"]).unwrap();
        let cfg = c.ha.config(c.redis.as_deref()).unwrap();
        assert_eq!((cfg.sentinel, cfg.min_replicas), (None, 0));
        assert!(parse(&[]).unwrap().ha.config(None).is_none());
    }

    #[test]
    fn a_cluster_makes_the_sharded_config_and_excludes_a_url_and_sentinels() {
        let c = parse(&[
            "--redis-cluster",
            "127.0.0.1:7000,127.0.0.1:7001",
            "--redis-min-replicas",
            "1",
        ])
        .unwrap();
        let cfg = c.ha.config(c.redis.as_deref()).unwrap();
        assert_eq!(
            cfg.cluster,
            Some(ClusterConfig::new(["127.0.0.1:7000", "127.0.0.1:7001"]))
        );
        assert_eq!(cfg.cluster.unwrap().shards, DEFAULT_SHARDS);
        assert_eq!((cfg.sentinel, cfg.min_replicas), (None, 1));
        let c = parse(&["--redis-cluster", "h:1", "--redis-shards", "3"]).unwrap();
        assert_eq!(
            c.ha.config(None).unwrap().cluster.map(|c| c.shards),
            Some(3)
        );
        for bad in [
            &["--redis-cluster", "h:1", "--redis", "redis://h:1"][..],
            &[
                "--redis-cluster",
                "h:1",
                "--redis-sentinel",
                "h:2",
                "--redis-master",
                "m",
            ],
            &["--redis-shards", "4"],
            &["--redis-cluster", "h:1", "--redis-shards", "0"],
            &["--redis-cluster", "h:1", "--redis-shards", "257"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let e = parse(&["--redis-cluster", "h:1", "--redis-shards", "0"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("1 to 256"), "{e}");
    }

    #[test]
    fn a_sentinel_needs_its_master_name_and_excludes_a_url() {
        for bad in [
            &["--redis-sentinel", "h:1"][..],
            &["--redis-master", "m"],
            &[
                "--redis",
                "redis://h:1",
                "--redis-sentinel",
                "h:1",
                "--redis-master",
                "m",
            ],
            &["--redis-replica-timeout", "0s"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
