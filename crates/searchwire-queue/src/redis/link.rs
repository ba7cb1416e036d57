//! Where the queue's commands go: one Redis at a fixed address, or the primary a set of
//! Sentinels names, found again after a failover.
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

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::config::{SentinelConfig, CONNECT_TIMEOUT, RECONNECT_TRIES, RESPONSE_TIMEOUT};
use crate::error::{Error, ErrorKind, Result};

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
    sentinel: Option<(SentinelConfig, Vec<(String, u16)>)>,
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

fn manager_config(retries: usize) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_response_timeout(RESPONSE_TIMEOUT)
        .set_number_of_retries(retries)
        .set_factor(100)
        .set_max_delay(1000)
}

async fn manager(info: ConnectionInfo, retries: usize) -> redis::RedisResult<ConnectionManager> {
    let client = redis::Client::open(info)?;
    match tokio::time::timeout(
        CONNECT_TIMEOUT * 2,
        ConnectionManager::new_with_config(client, manager_config(retries)),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {:?}", CONNECT_TIMEOUT * 2),
        ))),
    }
}

fn show(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
        other => other.to_string(),
    }
}

/// Whether the server's `ROLE` answer says it is a primary.
pub(super) fn is_master(role: &Value) -> bool {
    match role {
        Value::Array(items) => {
            matches!(
                items.first(),
                Some(Value::BulkString(b)) if b.as_slice() == b"master"
            ) || matches!(items.first(), Some(Value::SimpleString(s)) if s == "master")
        }
        _ => false,
    }
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
            Some((sentinel, addrs)),
            conn,
            addr,
            watchers,
            shared,
        ))
    }

    fn new(
        info: ConnectionInfo,
        sentinel: Option<(SentinelConfig, Vec<(String, u16)>)>,
        conn: ConnectionManager,
        addr: String,
        watchers: Vec<tokio::task::JoinHandle<()>>,
        shared: Arc<Shared>,
    ) -> Link {
        Link {
            inner: Arc::new(Inner {
                info,
                sentinel,
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

    /// Whether the primary is found through Sentinels.
    pub fn is_sentinel(&self) -> bool {
        self.inner.sentinel.is_some()
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
        let Some((sentinel, addrs)) = &self.inner.sentinel else {
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
        let (conn, addr) = match resolve(&self.inner.info, sentinel, addrs).await {
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

    /// A call on the connection of `generation` failed in a way that may mean the primary
    /// moved: the next call resolves it again (Sentinel links only).
    pub fn failed(&self, generation: u64) {
        if self.inner.sentinel.is_some() && self.current().generation == generation {
            self.inner.shared.stale.store(true, Ordering::Release);
        }
    }

    /// The current connection may lead to a former primary: the next call resolves it
    /// again (Sentinel links only).
    pub fn mark_stale(&self) {
        if self.inner.sentinel.is_some() {
            self.inner.shared.stale.store(true, Ordering::Release);
        }
    }

    /// The generation of the connection in use (it grows with each resolution).
    pub fn generation(&self) -> u64 {
        self.current().generation
    }

    /// Whether the next call resolves the primary again.
    pub fn is_stale(&self) -> bool {
        self.inner.sentinel.is_some() && self.inner.shared.stale.load(Ordering::Acquire)
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
        let mut primary = info.clone();
        primary.addr = ConnectionAddr::Tcp(named.0.clone(), named.1);
        let shown = format!("{}:{}", named.0, named.1);
        let mut conn = match manager(primary, 0).await {
            Ok(c) => c,
            Err(e) => {
                why.push(format!(
                    "{host}:{port} names {shown}, which does not answer: {e}"
                ));
                continue;
            }
        };
        match redis::cmd("ROLE").query_async::<Value>(&mut conn).await {
            Ok(role) if is_master(&role) => return Ok((conn, shown)),
            Ok(_) => why.push(format!(
                "{host}:{port} names {shown}, which is not a primary (a failover is under way)"
            )),
            Err(e) => why.push(format!("{host}:{port} names {shown}; its ROLE failed: {e}")),
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

    #[test]
    fn role_answers_are_read() {
        let master = Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(1)]);
        let replica = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert!(!is_master(&Value::Nil));
    }
}
