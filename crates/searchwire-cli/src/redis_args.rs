//! How the shared queue reaches Redis besides `--redis URL`: through Sentinels, and with
//! appends confirmed by replicas. The same flags for `relay`, `queue` and `ingest`.

use std::time::Duration;

use clap::Args;
use searchwire_queue::redis::{SentinelConfig, DEFAULT_REPLICA_TIMEOUT};
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
        value_name = "N",
        default_value_t = 0,
        help = "An append counts only once N replicas confirmed it (WAIT); fewer within --redis-replica-timeout fails it (0: no wait)"
    )]
    pub redis_min_replicas: usize,

    #[arg(long, value_name = "DUR", value_parser = parse_positive_duration, default_value = "2s", help = "How long an append waits for --redis-min-replicas replicas")]
    pub redis_replica_timeout: Duration,
}

impl RedisHaArgs {
    /// The Redis queue's configuration: at `url` (`--redis`), or through the Sentinels;
    /// `None` when neither is given.
    pub fn config(&self, url: Option<&str>) -> Option<RedisConfig> {
        let mut c = match (url, &self.redis_master) {
            (Some(url), _) => RedisConfig::new(url),
            (None, Some(master)) if !self.redis_sentinel.is_empty() => RedisConfig::sentinel(
                SentinelConfig::new(self.redis_sentinel.iter().cloned(), master.clone()),
            ),
            _ => return None,
        };
        c.min_replicas = self.redis_min_replicas;
        c.replica_timeout = self.redis_replica_timeout;
        Some(c)
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
