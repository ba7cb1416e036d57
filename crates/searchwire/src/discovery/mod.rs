//! Discovery ("sniffing"): learning the cluster's nodes from `GET /_nodes/http,os`.
//!
//! Off by default. Behind a load balancer, a proxy, or in a container network, the
//! addresses nodes publish are often not reachable from the client, and a client that
//! replaced its working seed URLs with unreachable ones would be worse than one that never
//! looked. Turn it on with [`ClientBuilder::discover_on_start`],
//! [`ClientBuilder::discover_interval`] or [`ClientBuilder::rediscover_on_failure`], or run
//! one round with [`Client::discover_now`].
//!
//! One round:
//!
//! 1. `GET /_nodes/http,os` with the client's headers and credentials, bounded by the
//!    discovery timeout, to the live nodes in turn (then the dead ones, then seeds that
//!    are not in the pool) until one answers `200`. A `200` reply is authoritative: if it
//!    is malformed, partial (`_nodes.failed > 0`) or lists no node that can take requests,
//!    the pool stays as it is and the round is an error (and a warning in the log).
//! 2. [`parse_nodes`] turns the reply into nodes. Each node's URL is the answering node's
//!    scheme and path prefix plus the node's `http.publish_address`; for the
//!    `hostname/ip:port` form the **host name** is used (the ip when the host name is
//!    empty), as the Java and Go clients do: TLS certificates name hosts, not addresses.
//!    Dedicated cluster-manager nodes (a `cluster_manager` or `master` role and no
//!    `data*` or `ingest` role) never receive user requests. A node without a `roles`
//!    list (old versions) is kept.
//! 3. [`Pool::merge`] applies it: unchanged nodes keep their state, seeds are never dropped
//!    (a seed reported as a dedicated cluster manager leaves the user-traffic pool but stays
//!    a discovery contact point), vanished nodes leave, new nodes join *not alive*.
//!    At most `discover_max_nodes` (1,000) routable nodes are accepted; a reply listing
//!    more keeps the nodes already in the pool first and ignores the rest, with a warning.
//! 4. Every node that has never answered gets a `GET /` health check now (at most 8 at a
//!    time); it receives user traffic only after it answered. One that does not answer is handed to its
//!    resurrection timer like any dead node.
//!
//! `os.allocated_processors` becomes the node's core count, which weights the round-robin
//! wheel (8/16/24 cores → 1/2/3 shares) and feeds the capacity model of the resurrection
//! schedule (from the smallest node).
//!
//! [`ClientBuilder::discover_on_start`]: crate::ClientBuilder::discover_on_start
//! [`ClientBuilder::discover_interval`]: crate::ClientBuilder::discover_interval
//! [`ClientBuilder::rediscover_on_failure`]: crate::ClientBuilder::rediscover_on_failure
//! [`Client::discover_now`]: crate::Client::discover_now
//! [`Pool::merge`]: crate::nodes::pool::Pool::merge

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::config::DiscoveryConfig;
use crate::health::{apply, check_node, Cause, CheckResult};
use crate::http::addr::NodeAddr;
use crate::message::error::{Error, ErrorKind};
use crate::nodes::pool::{Member, PoolNode};
use crate::shared::Inner;
use crate::sync::{lock, ClearOnDrop};

/// The nodes-info request: HTTP addresses and OS facts (allocated processors) only.
pub(crate) const NODES_PATH: &str = "/_nodes/http,os";

/// Shortest gap between two failure-triggered discoveries: 10 s. A cluster losing nodes
/// one after another should not be asked for its node list once per casualty.
pub(crate) const REDISCOVER_MIN_GAP: Duration = crate::defaults::REDISCOVER_MIN_GAP;

/// What one discovery round did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscoveryReport {
    /// The node that answered `GET /_nodes/http,os`.
    pub answered_by: String,
    /// URLs of the nodes that joined the pool.
    pub added: Vec<String>,
    /// URLs of the nodes that left the pool.
    pub removed: Vec<String>,
    /// URLs of nodes (new or not) that did not answer their first health check: in the
    /// pool, but without traffic until they answer.
    pub not_answering: Vec<String>,
    /// Nodes in the pool after the round.
    pub nodes: usize,
}

/// One node of a nodes-info reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DiscoveredNode {
    /// The node id (the key under `nodes`).
    pub id: String,
    /// `name`.
    pub name: String,
    /// Where to send requests: the seed's scheme and prefix, the published host and port.
    pub addr: NodeAddr,
    /// `roles` (empty when the reply has none).
    pub roles: Vec<String>,
    /// `os.allocated_processors` (else `available_processors`, else 0 = unknown).
    pub cores: u32,
    /// False for dedicated cluster-manager nodes: they never receive user requests.
    pub routable: bool,
}

#[derive(Deserialize)]
struct Reply {
    #[serde(rename = "_nodes")]
    header: Option<Header>,
    nodes: Option<BTreeMap<String, Entry>>,
}

#[derive(Deserialize)]
struct Header {
    total: Option<u64>,
    failed: Option<u64>,
    #[serde(default)]
    failures: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    name: String,
    roles: Option<Vec<String>>,
    http: Option<Http>,
    os: Option<Os>,
}

#[derive(Deserialize)]
struct Http {
    publish_address: Option<String>,
}

#[derive(Deserialize)]
struct Os {
    allocated_processors: Option<u32>,
    available_processors: Option<u32>,
}

/// Parses a `GET /_nodes/http,os` reply into nodes reachable with `seed_scheme` and the
/// path `prefix`. Nodes without an HTTP publish address (HTTP disabled) are skipped.
///
/// Errors (the caller keeps its pool): not JSON, `_nodes.failed > 0`, no `nodes` object, an
/// unparseable publish address, or no node that can take user requests.
pub(crate) fn parse_nodes(
    body: &[u8],
    seed_scheme: &str,
    prefix: &str,
) -> Result<Vec<DiscoveredNode>, String> {
    let reply: Reply = serde_json::from_slice(body)
        .map_err(|e| format!("the reply is not a nodes-info document ({e})"))?;
    if let Some(h) = &reply.header {
        let failed = h.failed.unwrap_or(0);
        if failed > 0 {
            let why = h
                .failures
                .first()
                .and_then(failure_reason)
                .map(|r| format!(" (first failure: {r})"))
                .unwrap_or_default();
            return Err(format!(
                "the reply is partial: {failed} of {} nodes failed to report{why}",
                h.total.map_or("?".to_string(), |t| t.to_string())
            ));
        }
    }
    let Some(entries) = reply.nodes else {
        return Err("the reply has no \"nodes\" object".to_string());
    };
    let mut out = Vec::with_capacity(entries.len());
    for (id, e) in entries {
        let Some(published) = e.http.and_then(|h| h.publish_address) else {
            continue;
        };
        let (host, port) = parse_publish_address(&published)
            .map_err(|why| format!("node {id} ({}) has {why}", e.name))?;
        let roles = e.roles.unwrap_or_default();
        let routable = !is_dedicated_cluster_manager(&roles);
        let cores =
            e.os.and_then(|o| o.allocated_processors.or(o.available_processors))
                .unwrap_or(0);
        out.push(DiscoveredNode {
            addr: NodeAddr::from_parts(seed_scheme, &host, port, prefix),
            id,
            name: e.name,
            roles,
            cores,
            routable,
        });
    }
    if !out.iter().any(|n| n.routable) {
        return Err(format!(
            "the reply lists no node that can take requests ({} node(s), none with an HTTP address that is not a dedicated cluster manager)",
            out.len()
        ));
    }
    Ok(out)
}

/// `reason` (or `caused_by.reason`) of one `_nodes.failures` entry.
fn failure_reason(v: &serde_json::Value) -> Option<String> {
    let r = v
        .pointer("/caused_by/reason")
        .or_else(|| v.get("reason"))?
        .as_str()?;
    Some(r.chars().take(200).collect())
}

/// Whether a node only manages the cluster: a cluster-manager role and no data or ingest
/// role. Data tiers (`data_hot`, `data_content`, ...) count as data.
fn is_dedicated_cluster_manager(roles: &[String]) -> bool {
    let manager = roles
        .iter()
        .any(|r| r == "cluster_manager" || r == "master");
    let serves = roles.iter().any(|r| r.starts_with("data") || r == "ingest");
    manager && !serves
}

/// Splits `ip:port`, `[v6]:port`, `host/ip:port` or `/ip:port` into the host to connect
/// to (the host name when present, else the ip; IPv6 in brackets) and the port.
fn parse_publish_address(s: &str) -> Result<(String, u16), String> {
    let shown = crate::http::addr::redact_userinfo(s);
    let bad = |what: &str| format!("an invalid http.publish_address {shown:?}: {what}");
    let (name, ip_port) = match s.split_once('/') {
        Some((name, rest)) => (name.trim(), rest.trim()),
        None => ("", s.trim()),
    };
    let (ip, port) = if let Some(rest) = ip_port.strip_prefix('[') {
        let (ip, port) = rest
            .split_once("]:")
            .ok_or_else(|| bad("expected [ipv6]:port"))?;
        (ip, port)
    } else {
        let (ip, port) = ip_port.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if ip.contains(':') {
            return Err(bad("an IPv6 address must be in brackets"));
        }
        (ip, port)
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?;
    let host = if name.is_empty() { ip } else { name };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok((normalize_host(host).map_err(|e| bad(&e))?, port))
}

/// The host as `NodeAddr::parse` spells it (lower case, IPv6 compressed and bracketed), so a
/// reported node and a seed URL naming the same host compare equal.
fn normalize_host(host: &str) -> Result<String, String> {
    let inner = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let candidate = if inner.contains(':') {
        format!("[{inner}]")
    } else {
        inner.to_string()
    };
    match url::Host::parse(&candidate) {
        Ok(url::Host::Ipv6(a)) => Ok(format!("[{a}]")),
        Ok(h) => Ok(h.to_string()),
        Err(e) => Err(format!("host {host:?} is not valid ({e})")),
    }
}

/// Runs one discovery round (see the module docs). Rounds are serialized.
pub(crate) async fn discover(inner: &Arc<Inner>) -> Result<DiscoveryReport, Error> {
    let _round = inner.discovery.round.lock().await;
    let (answered_by, body) = fetch_nodes(inner).await.inspect_err(|e| {
        tracing::warn!(error = %e, "discovery failed; the node pool is unchanged");
    })?;
    let parsed = parse_nodes(&body, answered_by.scheme(), answered_by.prefix()).map_err(|why| {
        tracing::warn!(node = %answered_by, reason = %why, "discovery reply not usable; the node pool is unchanged");
        Error::new(
            ErrorKind::Status,
            format!(
                "discovery: node {answered_by} answered GET {NODES_PATH}, but {why}; the node pool is unchanged"
            ),
        )
    })?;

    let mut members: Vec<Member> = Vec::new();
    // Keyed by the URL text (which is what `NodeAddr` equality compares).
    let mut first_id: HashMap<Arc<str>, usize> = HashMap::new();
    let mut excluded: Vec<NodeAddr> = Vec::new();
    for n in parsed {
        if !n.routable {
            tracing::debug!(node = %n.addr, id = %n.id, name = %n.name, roles = ?n.roles, "dedicated cluster-manager node: no user requests");
            excluded.push(n.addr);
        } else if let Some(&i) = first_id.get(n.addr.as_str()) {
            tracing::warn!(node = %n.addr, id = %n.id, other = %members[i].id, "two nodes publish the same HTTP address; using the first");
        } else {
            first_id.insert(n.addr.shared(), members.len());
            members.push(Member {
                addr: n.addr,
                id: n.id,
                cores: n.cores,
            });
        }
    }
    cap_members(inner, &mut members);

    let change = inner
        .pool
        .merge(&members, &inner.discovery.seeds, &excluded);
    for n in &change.removed {
        inner.connector.reset(&n.addr);
        tracing::info!(node = %n.addr, id = %n.id(), "node left the pool (no longer reported by the cluster)");
    }
    for n in &change.added {
        tracing::info!(node = %n.addr, id = %n.id(), cores = n.cores.load(Ordering::Relaxed), "node joined the pool; it receives traffic once it answers");
    }
    let (live, total) = inner.pool.counts();
    if change.added.is_empty() && change.removed.is_empty() {
        tracing::debug!(node = %answered_by, nodes = total, live, "discovery: the node pool is unchanged");
    } else {
        tracing::info!(
            node = %answered_by,
            added = change.added.len(),
            removed = change.removed.len(),
            nodes = total,
            live,
            "discovery changed the node pool"
        );
    }
    let not_answering = check_unproven(inner).await;
    Ok(DiscoveryReport {
        answered_by: answered_by.to_string(),
        added: change.added.iter().map(|n| n.addr.to_string()).collect(),
        removed: change.removed.iter().map(|n| n.addr.to_string()).collect(),
        not_answering,
        nodes: total,
    })
}

/// Keeps at most `discover_max_nodes` members: those already in the pool first (in reply
/// order), then new ones; warns when the reply listed more.
fn cap_members(inner: &Inner, members: &mut Vec<Member>) {
    let max = inner.discovery.config.max_nodes;
    if members.len() <= max {
        return;
    }
    let listed = members.len();
    let known: HashSet<Arc<str>> = inner
        .pool
        .topology()
        .nodes
        .iter()
        .map(|n| n.addr.shared())
        .collect();
    // A stable sort: known nodes first, each group in reply order.
    members.sort_by_key(|m| !known.contains(m.addr.as_str()));
    members.truncate(max);
    tracing::warn!(
        listed,
        max,
        ignored = listed - max,
        "discovery: the nodes reply lists more nodes than discover_max_nodes; keeping the nodes already in the pool first and ignoring the rest"
    );
}

/// Asks the nodes in turn for `GET /_nodes/http,os` until one answers `200`: live nodes
/// first (starting at a rotating offset), then the other pool nodes, then seeds not in the
/// pool.
async fn fetch_nodes(inner: &Inner) -> Result<(NodeAddr, Bytes), Error> {
    let topology = inner.pool.topology();
    let (mut live, others): (Vec<&Arc<PoolNode>>, Vec<&Arc<PoolNode>>) =
        topology.nodes.iter().partition(|n| n.is_alive());
    if !live.is_empty() {
        let k = inner.discovery.next_start.fetch_add(1, Ordering::Relaxed) % live.len();
        live.rotate_left(k);
    }
    let mut candidates: Vec<NodeAddr> = live
        .into_iter()
        .chain(others)
        .map(|n| n.addr.clone())
        .collect();
    for s in &inner.discovery.seeds {
        if !candidates.contains(s) {
            candidates.push(s.clone());
        }
    }

    let mut failures: Vec<String> = Vec::new();
    let mut kind = ErrorKind::NoNodeReachable;
    for addr in candidates {
        match fetch_from(inner, &addr).await {
            Ok(a) if a.status == 200 => return Ok((addr, a.body)),
            Ok(a) => {
                kind = match (kind, a.outcome.rejection) {
                    (_, Some(_)) | (ErrorKind::Auth, _) => ErrorKind::Auth,
                    _ => ErrorKind::Status,
                };
                failures.push(format!("{addr} answered {}", a.status));
            }
            Err(e) => failures.push(format!("{addr}: {e}")),
        }
    }
    let advice = match kind {
        ErrorKind::Auth => {
            " — the credentials lack the cluster:monitor/nodes/info privilege or are wrong"
        }
        ErrorKind::Status => "",
        _ => " — check that the cluster is running and the URLs are right",
    };
    Err(Error::new(
        kind,
        format!(
            "discovery: no node answered GET {NODES_PATH} ({}){advice}",
            failures.join("; ")
        ),
    ))
}

/// One nodes-info request: the client's headers and credentials, the discovery timeout.
async fn fetch_from(inner: &Inner, addr: &NodeAddr) -> Result<crate::health::Answer, String> {
    crate::health::background_get(inner, addr, NODES_PATH, "", inner.discovery.config.timeout).await
}

/// Health-checks, concurrently, every pool node that has never answered and has no
/// resurrection timer yet. Those that answer become alive; the others are marked failed
/// and get a resurrection timer, which checks them from then on (a later discovery round
/// does not check them again: that would double the checks and skew their schedule).
/// Returns the URLs of those that did not answer.
async fn check_unproven(inner: &Arc<Inner>) -> Vec<String> {
    let unproven: Vec<Arc<PoolNode>> = inner
        .pool
        .topology()
        .nodes
        .iter()
        .filter(|n| {
            let h = n.health();
            !n.is_alive() && !h.viable && !h.timer_running
        })
        .cloned()
        .collect();
    let mut checks = tokio::task::JoinSet::new();
    // Bounded like every fan-out of health checks: a round adding many nodes must not
    // open a connection to each at once.
    let permits = Arc::new(tokio::sync::Semaphore::new(
        crate::defaults::HEALTH_CHECK_CONCURRENCY,
    ));
    for node in unproven {
        let inner = Arc::clone(inner);
        let permits = Arc::clone(&permits);
        checks.spawn(async move {
            let _permit = permits.acquire_owned().await.ok();
            let check = check_node(&inner, &node);
            let result = crate::health::reported(&inner, &node, "discovery", check).await;
            (node, result)
        });
    }
    let mut not_answering = Vec::new();
    while let Some(joined) = checks.join_next().await {
        let Ok((node, result)) = joined else { continue };
        apply(inner, &node, &result, Cause::Discovery);
        if !matches!(result, CheckResult::Healthy | CheckResult::AuthRejected(_)) {
            not_answering.push(node.addr.to_string());
        }
    }
    not_answering.sort();
    not_answering
}

/// Starts the background task if the settings need one and it is not running. Without a
/// tokio runtime this does nothing; the client calls it again on every request.
pub(crate) fn ensure_started(inner: &Arc<Inner>) {
    let d = &inner.discovery;
    if !d.config.background() || d.started.load(Ordering::Acquire) {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if d.started.swap(true, Ordering::AcqRel) {
        return;
    }
    handle.spawn(run(
        Arc::downgrade(inner),
        inner.shutdown.subscribe(),
        Arc::clone(&d.wake),
        d.config,
    ));
}

/// A node was just marked dead: with `rediscover_on_failure`, wake the background task,
/// at most once per [`REDISCOVER_MIN_GAP`].
pub(crate) fn node_died(inner: &Arc<Inner>) {
    let d = &inner.discovery;
    if !d.config.on_failure {
        return;
    }
    if !admit_trigger(&mut lock(&d.last_triggered), Instant::now()) {
        return;
    }
    tracing::info!("a node was marked dead; re-discovering the cluster");
    ensure_started(inner);
    d.wake.notify_one();
}

/// The rate limit of failure-triggered rounds: true (and records `now`) when the last one
/// was at least [`REDISCOVER_MIN_GAP`] ago.
fn admit_trigger(last: &mut Option<Instant>, now: Instant) -> bool {
    if last.is_some_and(|t| now.saturating_duration_since(t) < REDISCOVER_MIN_GAP) {
        return false;
    }
    *last = Some(now);
    true
}

/// The background task: a round on start (if configured), then one per interval and one
/// per failure trigger. Holds only a weak reference to the client between rounds and ends
/// when the client is dropped.
async fn run(
    weak: Weak<Inner>,
    mut shutdown: watch::Receiver<()>,
    wake: Arc<Notify>,
    cfg: DiscoveryConfig,
) {
    // However the task ends (even dropped with the runtime it was started on), the next
    // request may start it again.
    let _started = ClearOnDrop::new(|| {
        if let Some(inner) = weak.upgrade() {
            inner.discovery.started.store(false, Ordering::Release);
        }
    });
    let mut due = cfg.on_start;
    loop {
        if !due {
            let next = cfg.interval.and_then(|i| Instant::now().checked_add(i));
            let periodic = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = periodic => {}
                _ = wake.notified() => {}
                _ = shutdown.changed() => break,
            }
        }
        due = false;
        let Some(inner) = weak.upgrade() else { break };
        // Failures are logged by `discover`; the next round tries again.
        let _ = discover(&inner).await;
    }
}

#[cfg(test)]
mod tests;
