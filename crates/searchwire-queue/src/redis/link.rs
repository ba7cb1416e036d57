//! Where the queue's commands go: one Redis at a fixed address, the primary a set of
//! Sentinels names, or the Redis Cluster primary that owns one slot; the last two found
//! again after a failover.
//!
//! The redis crate's own Sentinel client resolves the primary once and keeps writing to that
//! address after a failover, so the queue resolves it itself:
//!
//! - at connect, it asks the Sentinels in turn (`SENTINEL get-master-addr-by-name`) and
//!   accepts the address only once the server there answers `ROLE` with `master`;
//! - a failed call (a connection error, `READONLY`, an append whose `ROLE` check found a
//!   replica, a short `WAIT`) marks the connection stale, and so does a `+switch-master`
//!   message for this master from any Sentinel (one subscriber task per Sentinel);
//! - the next call on a stale link resolves again (one caller resolves, the others wait for
//!   it) and goes to the new primary.
//!
//! A Cluster link (one per shard of a [`RedisClusterQueue`](super::RedisClusterQueue)) is
//! resolved the same way from `CLUSTER SLOTS` (see `cluster/route.rs`); `MOVED`, `ASK`,
//! `CLUSTERDOWN`, `READONLY` and connection errors mark it stale.

use redis::aio::ConnectionManager;
use redis::ConnectionInfo;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::cluster::SlotRoute;
use super::config::{SentinelConfig, CONNECT_TIMEOUT, RECONNECT_TRIES};
use super::conn::{connect_primary, manager, show};
use crate::error::{Error, ErrorKind, Result};

/// How a link that follows failovers finds its primary.
enum Resolver {
    /// Through these Sentinels (parsed from the configuration).
    Sentinel(SentinelConfig, Vec<(String, u16)>),
    /// The Cluster node that owns one slot.
    Cluster(SlotRoute),
}

/// The connection in use and its generation (it grows with each resolution).
#[derive(Clone)]
struct Current {
    conn: ConnectionManager,
    generation: u64,
    addr: String,
}

/// Set by a failed call or a `+switch-master` message; read by the next call.
struct Shared {
    stale: AtomicBool,
    generation: AtomicU64,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            stale: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        })
    }
}

struct Inner {
    /// Credentials, database and protocol for the primary (its address is resolved).
    info: ConnectionInfo,
    resolver: Option<Resolver>,
    current: RwLock<Current>,
    shared: Arc<Shared>,
    /// One resolution at a time.
    resolving: tokio::sync::Mutex<()>,
    /// The `+switch-master` subscribers, stopped with the last handle.
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

/// The queue's connection: shared by its clones.
#[derive(Clone)]
pub(super) struct Link {
    inner: Arc<Inner>,
}

/// A connection and the generation to name when reporting its failure.
pub(super) struct Handle {
    pub conn: ConnectionManager,
    pub generation: u64,
}

impl Link {
    /// A link to the one Redis at `info`'s address (reconnected by the connection manager).
    pub async fn direct(info: ConnectionInfo, shown: &str) -> Result<Link> {
        let addr = show(&info.addr);
        let conn = manager(info.clone(), RECONNECT_TRIES).await.map_err(|e| {
            Error::with_source(
                ErrorKind::Redis,
                format!("cannot connect to Redis at {shown}"),
                e,
            )
        })?;
        Ok(Link::new(info, None, conn, addr, Vec::new(), Shared::new()))
    }

    /// A link to the primary that `sentinel`'s Sentinels name; `info` gives its credentials
    /// and database.
    pub async fn sentinel(info: ConnectionInfo, sentinel: SentinelConfig) -> Result<Link> {
        let addrs = sentinel.parsed()?;
        let shared = Shared::new();
        let (conn, addr) = resolve(&info, &sentinel, &addrs).await?;
        let watchers = addrs
            .iter()
            .map(|a| tokio::spawn(watch(a.clone(), sentinel.master.clone(), shared.clone())))
            .collect();
        Ok(Link::new(
            info,
            Some(Resolver::Sentinel(sentinel, addrs)),
            conn,
            addr,
            watchers,
            shared,
        ))
    }

    /// A link to the Cluster primary that owns `route`'s slot; `info` gives its credentials.
    pub async fn cluster(info: ConnectionInfo, route: SlotRoute) -> Result<Link> {
        let (conn, addr) = route.resolve(&info).await?;
        Ok(Link::new(
            info,
            Some(Resolver::Cluster(route)),
            conn,
            addr,
            Vec::new(),
            Shared::new(),
        ))
    }

    fn new(
        info: ConnectionInfo,
        resolver: Option<Resolver>,
        conn: ConnectionManager,
        addr: String,
        watchers: Vec<tokio::task::JoinHandle<()>>,
        shared: Arc<Shared>,
    ) -> Link {
        Link {
            inner: Arc::new(Inner {
                info,
                resolver,
                current: RwLock::new(Current {
                    conn,
                    generation: 0,
                    addr,
                }),
                shared,
                resolving: tokio::sync::Mutex::new(()),
                watchers,
            }),
        }
    }

    /// Whether the primary is resolved (through Sentinels or the Cluster's slots) and
    /// resolved again after a failover: such a link checks `ROLE`, leaves receipts and
    /// sends a call that met a moved primary again.
    pub fn follows_failover(&self) -> bool {
        self.inner.resolver.is_some()
    }

    /// Whether an append or lease ends with `ROLE` (a Sentinel link): a Sentinel demotes a
    /// primary with `REPLICAOF`, sent on another connection, so the server that ran the
    /// writes is asked in the same pipeline whether it still is the primary. A Cluster link
    /// does not need it: a Cluster node runs a command on a slot's keys only while it is that
    /// slot's primary and answers `MOVED` otherwise, so a replica never runs the queue's
    /// writes, and a manual failover (`CLUSTER FAILOVER`) promotes the replica only after it
    /// has every write the primary acknowledged.
    pub fn checks_role(&self) -> bool {
        matches!(self.inner.resolver, Some(Resolver::Sentinel(..)))
    }

    /// The address commands go to now.
    pub fn addr(&self) -> String {
        self.current().addr
    }

    fn current(&self) -> Current {
        match self.inner.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The connection to use; on a stale Sentinel link, the primary is resolved first.
    pub async fn get(&self) -> Result<Handle> {
        let current = self.current();
        let Some(resolver) = &self.inner.resolver else {
            return Ok(Handle {
                conn: current.conn,
                generation: current.generation,
            });
        };
        if !self.inner.shared.stale.load(Ordering::Acquire) {
            return Ok(Handle {
                conn: current.conn,
                generation: current.generation,
            });
        }
        let _one = self.inner.resolving.lock().await;
        // Someone else may have resolved while this call waited.
        let now = self.current();
        if now.generation != current.generation || !self.inner.shared.stale.load(Ordering::Acquire)
        {
            return Ok(Handle {
                conn: now.conn,
                generation: now.generation,
            });
        }
        // Cleared before resolving: a `+switch-master` arriving meanwhile marks it again.
        self.inner.shared.stale.store(false, Ordering::Release);
        let resolved = match resolver {
            Resolver::Sentinel(sentinel, addrs) => resolve(&self.inner.info, sentinel, addrs).await,
            Resolver::Cluster(route) => route.resolve(&self.inner.info).await,
        };
        let (conn, addr) = match resolved {
            Ok(found) => found,
            Err(e) => {
                self.inner.shared.stale.store(true, Ordering::Release);
                return Err(e);
            }
        };
        let generation = self.inner.shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        if addr != now.addr {
            tracing::warn!(from = %now.addr, to = %addr, "redis: the queue's primary moved");
        }
        let next = Current {
            conn: conn.clone(),
            generation,
            addr,
        };
        match self.inner.current.write() {
            Ok(mut c) => *c = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(Handle { conn, generation })
    }

    /// A call on the connection of `generation` failed (with `error`) in a way that may mean
    /// the primary moved: the next call resolves it again (resolved links only). A Cluster
    /// link asks the node a `MOVED`/`ASK` names first.
    pub fn failed(&self, generation: u64, error: &redis::RedisError) {
        if let Some(Resolver::Cluster(route)) = &self.inner.resolver {
            route.redirected(error);
        }
        if self.inner.resolver.is_some() && self.current().generation == generation {
            self.inner.shared.stale.store(true, Ordering::Release);
        }
    }

    /// The current connection may lead to a former primary: the next call resolves it
    /// again (resolved links only).
    pub fn mark_stale(&self) {
        if self.inner.resolver.is_some() {
            self.inner.shared.stale.store(true, Ordering::Release);
        }
    }

    /// The generation of the connection in use (it grows with each resolution).
    pub fn generation(&self) -> u64 {
        self.current().generation
    }

    /// Whether the next call resolves the primary again.
    pub fn is_stale(&self) -> bool {
        self.inner.resolver.is_some() && self.inner.shared.stale.load(Ordering::Acquire)
    }
}

/// Asks the Sentinels in turn for the primary's address and connects to it; accepts it
/// only when it answers `ROLE` with `master` (a Sentinel may still name a demoted one).
async fn resolve(
    info: &ConnectionInfo,
    sentinel: &SentinelConfig,
    addrs: &[(String, u16)],
) -> Result<(ConnectionManager, String)> {
    let mut why = Vec::new();
    for (host, port) in addrs {
        let named = match ask(host, *port, &sentinel.master).await {
            Ok(Some(a)) => a,
            Ok(None) => {
                why.push(format!(
                    "{host}:{port} does not know the master {:?}",
                    sentinel.master
                ));
                continue;
            }
            Err(e) => {
                why.push(format!("{host}:{port}: {e}"));
                continue;
            }
        };
        match connect_primary(info, &format!("{host}:{port}"), named).await {
            Ok(found) => return Ok(found),
            Err(e) => why.push(e),
        }
    }
    Err(Error::new(
        ErrorKind::Redis,
        format!(
            "redis: no Sentinel names a reachable primary for the master {:?} ({}); check the \
             Sentinels and the master name, or wait for the failover to finish",
            sentinel.master,
            why.join("; ")
        ),
    ))
}

/// `SENTINEL get-master-addr-by-name`: the address, or `None` for an unknown master.
async fn ask(host: &str, port: u16, master: &str) -> redis::RedisResult<Option<(String, u16)>> {
    let client = redis::Client::open((host.to_owned(), port))?;
    let asking = async {
        let mut c = client.get_multiplexed_async_connection().await?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async::<Option<(String, u16)>>(&mut c)
            .await
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, asking).await {
        Ok(r) => r,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {CONNECT_TIMEOUT:?}"),
        ))),
    }
}

/// How long a subscriber waits before it connects again to a Sentinel it lost.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// Subscribes to one Sentinel's `+switch-master` and marks the link stale when it names
/// `master`; connects again after losing the Sentinel.
async fn watch(addr: (String, u16), master: String, shared: Arc<Shared>) {
    use futures_util::StreamExt;
    loop {
        let subscribed = async {
            let client = redis::Client::open(addr.clone())?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            redis::RedisResult::Ok(pubsub)
        };
        if let Ok(Ok(pubsub)) = tokio::time::timeout(CONNECT_TIMEOUT, subscribed).await {
            // A switch may have happened while this subscriber was not listening.
            shared.stale.store(true, Ordering::Release);
            let mut messages = pubsub.into_on_message();
            while let Some(m) = messages.next().await {
                let payload: String = m.get_payload().unwrap_or_default();
                // "<name> <old-ip> <old-port> <new-ip> <new-port>"
                if payload.split(' ').next() == Some(master.as_str()) {
                    tracing::info!(%payload, "redis: a Sentinel announced +switch-master");
                    shared.stale.store(true, Ordering::Release);
                }
            }
        }
        tokio::time::sleep(WATCH_RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::parse_addr;
    use super::*;

    #[test]
    fn addresses_parse_or_name_the_problem() {
        assert_eq!(
            parse_addr("127.0.0.1:26379").unwrap(),
            ("127.0.0.1".into(), 26379)
        );
        assert_eq!(parse_addr("[::1]:5").unwrap(), ("::1".into(), 5));
        for bad in ["", "host", "host:", ":1", "h:0", "h:99999", "h:x"] {
            let e = parse_addr(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains("HOST:PORT"), "{e}");
        }
        let none = SentinelConfig::new(Vec::<String>::new(), "m");
        assert!(none
            .parsed()
            .unwrap_err()
            .to_string()
            .contains("no Sentinel"));
        let bad_name = SentinelConfig::new(["h:1"], "a b");
        assert!(bad_name
            .parsed()
            .unwrap_err()
            .to_string()
            .contains("master name"));
    }
}
