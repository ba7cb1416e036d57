//! Finding the primary that owns one slot, and again after a failover or a `MOVED`.
//!
//! The redis crate's cluster client routes single commands but cannot carry the queue's
//! `MULTI`/`EXEC` pipelines (redis-rs #731), so each shard has a plain connection to the
//! primary of its slot, found here: the node a `MOVED`/`ASK` named last, then the seeds in
//! turn, are asked `CLUSTER SLOTS`; the primary it names is accepted only once it answers
//! `ROLE` with `master` (the slot map of a node may lag a failover by a moment).
//!
//! The shards whose slots one primary serves share one connection to it ([`Primaries`]):
//! the connection is multiplexed (a pipeline is written whole, so the shards' `MULTI`/`EXEC`
//! blocks never interleave), and one connection per primary lets the server read the
//! concurrent calls of all its shards in one pass, as one server reads them from the
//! single-server queue's one connection: with group commit per shard, eight connections
//! over three primaries cost those servers about a third more CPU per message; with the
//! rounds per primary that `cluster/sharded.rs` sends, a connection per shard measured the
//! same within the noise, and one connection per primary is the fewer sockets (see
//! docs/benchmarks.md, "Redis queue: on a Redis Cluster").

use redis::aio::ConnectionManager;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::slots::{parse_redirect, slot_owner};
use crate::error::{Error, ErrorKind, Result};
use crate::redis::config::CONNECT_TIMEOUT;
use crate::redis::conn::{connect_primary, is_master};

/// The connections to the Cluster's primaries, by address, shared by the routes of one
/// queue's shards. Cheap to clone.
#[derive(Clone, Default)]
pub(in crate::redis) struct Primaries {
    by_addr: Arc<Mutex<HashMap<String, ConnectionManager>>>,
}

impl Primaries {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ConnectionManager>> {
        match self.by_addr.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A connection to `named`, the primary that `asked` names: the shared one if there is
    /// one and the server still answers `ROLE` with `master` on it, else a new one (checked
    /// the same way by `connect_primary`), which the other shards then share.
    async fn connect(
        &self,
        info: &ConnectionInfo,
        asked: &str,
        named: (String, u16),
    ) -> std::result::Result<(ConnectionManager, String), String> {
        let shown = format!("{}:{}", named.0, named.1);
        let shared = self.lock().get(&shown).cloned();
        if let Some(mut conn) = shared {
            let role = redis::cmd("ROLE").query_async::<Value>(&mut conn).await;
            if matches!(&role, Ok(r) if is_master(r)) {
                return Ok((conn, shown));
            }
            // A former primary, or a connection that no longer answers: the next shard to
            // resolve connects anew.
            self.lock().remove(&shown);
        }
        let (conn, addr) = connect_primary(info, asked, named).await?;
        // Another shard may have connected meanwhile: keep one connection per primary.
        let conn = self.lock().entry(addr.clone()).or_insert(conn).clone();
        Ok((conn, addr))
    }

    /// How many primaries have a connection. A former primary's stays until a shard
    /// resolves to that address again (and finds it no longer a primary): an idle
    /// connection manager costs nothing and reconnects only when used.
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}

/// Where one slot's primary is found.
pub(in crate::redis) struct SlotRoute {
    seeds: Vec<(String, u16)>,
    slot: u16,
    /// The node a `MOVED`/`ASK` for this slot named last: asked first.
    hint: Mutex<Option<(String, u16)>>,
    primaries: Primaries,
}

impl SlotRoute {
    /// The primary of `slot`, found through `seeds`, its connection shared through
    /// `primaries` with the other shards it serves.
    pub fn new(seeds: Vec<(String, u16)>, slot: u16, primaries: Primaries) -> Self {
        SlotRoute {
            seeds,
            slot,
            hint: Mutex::new(None),
            primaries,
        }
    }

    /// A call failed with `error`: if it is a `MOVED`/`ASK` for this slot, its node is
    /// asked first at the next resolution.
    pub fn redirected(&self, error: &redis::RedisError) {
        let (Some(code), Some(detail)) = (error.code(), error.detail()) else {
            return;
        };
        if let Some(r) = parse_redirect(&format!("{code} {detail}")) {
            if r.slot == self.slot {
                tracing::debug!(slot = r.slot, to = %format!("{}:{}", r.host, r.port), ask = r.ask, "redis: a shard's slot is served elsewhere");
                let mut hint = match self.hint.lock() {
                    Ok(h) => h,
                    Err(poisoned) => poisoned.into_inner(),
                };
                *hint = Some((r.host, r.port));
            }
        }
    }

    fn take_hint(&self) -> Option<(String, u16)> {
        match self.hint.lock() {
            Ok(mut h) => h.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }

    /// Connects to the slot's primary (credentials from `info`); returns the connection and
    /// its address.
    pub async fn resolve(&self, info: &ConnectionInfo) -> Result<(ConnectionManager, String)> {
        let mut asked = Vec::with_capacity(self.seeds.len() + 1);
        asked.extend(self.take_hint());
        asked.extend(self.seeds.iter().cloned());
        let mut why = Vec::new();
        for (host, port) in &asked {
            let named = match slot_map(info, host, *port).await {
                Ok(answer) => match slot_owner(&answer, self.slot) {
                    Some((h, p)) if h.is_empty() => (host.clone(), p),
                    Some(found) => found,
                    None => {
                        why.push(format!(
                            "{host}:{port} names no primary for slot {}",
                            self.slot
                        ));
                        continue;
                    }
                },
                Err(e) => {
                    why.push(format!("{host}:{port}: {e}"));
                    continue;
                }
            };
            match self
                .primaries
                .connect(info, &format!("{host}:{port}"), named)
                .await
            {
                Ok(found) => return Ok(found),
                Err(e) => why.push(e),
            }
        }
        Err(Error::new(
            ErrorKind::Redis,
            format!(
                "redis: no Cluster node names a reachable primary for slot {} ({}); check the \
                 --redis-cluster addresses, or wait for the cluster's failover to finish",
                self.slot,
                why.join("; ")
            ),
        ))
    }
}

/// `CLUSTER SLOTS` of the node at `host:port`.
async fn slot_map(info: &ConnectionInfo, host: &str, port: u16) -> redis::RedisResult<Value> {
    let mut node = info.clone();
    node.addr = ConnectionAddr::Tcp(host.to_owned(), port);
    let client = redis::Client::open(node)?;
    let asking = async {
        let mut c = client.get_multiplexed_async_connection().await?;
        redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Value>(&mut c)
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
