//! One node's keep-alive HTTP/1 connections (not to be confused with the node pool,
//! `nodes::pool::Pool`).
//!
//! A stack of idle connections, the most recently used on top. A connection goes back on
//! the stack only after an exchange that ended cleanly — the whole response read — so a
//! connection whose attempt timed out, broke, or was abandoned (a body over the limit, a
//! caller that gave up) is never reused: its request future was dropped, and hyper closes
//! an HTTP/1 connection whose request is dropped mid-way.
//!
//! Why not hyper-util's pool: searchwire already keeps one set of connections per node, so
//! the pool key (scheme and authority) hyper-util hashes three times per request, its
//! per-request connector clone and its task spawned to wait for a connection to be ready
//! again are all work for nothing here (~3,400 of the ~7,800 instructions per request this set saved;
//! docs/benchmarks.md).
//!
//! Idle expiry needs no clock read per request: a reaper task, running only while some
//! connection is idle, ticks four times per idle timeout and closes the connections that
//! went idle four ticks ago or more. A connection is so closed after between ¾ and 1 idle
//! timeout of idleness — never later, which is what the timeout is for (to close before a
//! load balancer drops the connection silently).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;

use crate::classify::OutcomeKind;
use crate::http::connect_timeout::Https;
use crate::http::send_error::SendError;
use crate::sync::{lock, ClearOnDrop};

/// The sending half of one HTTP/1 connection; its connection task runs on the runtime.
pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Reaper ticks per idle timeout.
const TICKS_PER_TIMEOUT: u32 = 4;

/// The shortest reaper tick: an idle timeout of a few milliseconds (tests, or a
/// misconfiguration) must not spin the reaper.
const MIN_TICK: Duration = Duration::from_millis(1);

/// Where a node's connections live (inside its `NodeAddr`): empty until the first request,
/// emptied again by `Connector::reset`. Loading it is lock-free.
pub(crate) type ConnSlot = arc_swap::ArcSwapOption<NodeConns>;

/// One node's idle keep-alive connections, and how to open a new one.
pub(crate) struct NodeConns {
    https: Https,
    state: Mutex<State>,
    /// Reaper ticks so far; an idle connection remembers the tick it went idle at.
    tick: AtomicU64,
    idle_timeout: Duration,
    max_idle: usize,
}

struct State {
    /// Most recently used last.
    idle: Vec<Idle>,
    /// A reaper task runs (it stops when nothing is idle; the next `put` starts one).
    reaping: bool,
}

struct Idle {
    tx: Sender,
    /// The reaper tick this connection went idle at.
    since: u64,
}

impl NodeConns {
    /// No connections yet; new ones are opened with `https`; at most `max_idle` are kept
    /// idle, each for at most `idle_timeout` (none are kept when either is zero).
    pub(crate) fn new(https: Https, idle_timeout: Duration, max_idle: usize) -> NodeConns {
        NodeConns {
            https,
            state: Mutex::new(State {
                idle: Vec::new(),
                reaping: false,
            }),
            tick: AtomicU64::new(0),
            idle_timeout,
            max_idle,
        }
    }

    /// The most recently used idle connection that is still open, if any. It may still be
    /// finishing its previous exchange: wait for [`SendRequest::ready`] before sending.
    pub(crate) fn take(&self) -> Option<Sender> {
        let mut state = lock(&self.state);
        while let Some(conn) = state.idle.pop() {
            if !conn.tx.is_closed() {
                return Some(conn.tx);
            }
        }
        None
    }

    /// Puts back a connection whose exchange ended cleanly (the whole response read). It
    /// is dropped — and so closed — if the pool is full, keeps nothing, or it closed.
    pub(crate) fn put(self: &Arc<Self>, tx: Sender) {
        if tx.is_closed() || self.max_idle == 0 || self.idle_timeout.is_zero() {
            return;
        }
        let start_reaper = {
            let mut state = lock(&self.state);
            if state.idle.len() >= self.max_idle {
                return;
            }
            // Read under the lock the reaper ticks under: the tick is the one it went
            // idle at, never one the reaper has already moved past.
            let since = self.tick.load(Ordering::Relaxed);
            state.idle.push(Idle { tx, since });
            !std::mem::replace(&mut state.reaping, true)
        };
        if start_reaper {
            // The first tick is a period from now, not from when the task first runs:
            // the connection just put went idle now.
            let period = (self.idle_timeout / TICKS_PER_TIMEOUT).max(MIN_TICK);
            let first = tokio::time::Instant::now() + period;
            tokio::spawn(reap(Arc::downgrade(self), first, period));
        }
    }

    /// Opens a new connection to `target`'s scheme and authority (TCP, then TLS for
    /// `https`, within the connect timeout) and starts its connection task. Every failure
    /// here is a connect failure: nothing was sent.
    pub(crate) async fn connect(&self, target: &http::Uri) -> Result<Sender, SendError> {
        let failed = |source| SendError {
            kind: OutcomeKind::Connect,
            source,
        };
        let mut https = self.https.clone();
        let io = tower_service::Service::call(&mut https, target.clone())
            .await
            .map_err(failed)?;
        let (tx, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| failed(Box::new(e)))?;
        tokio::spawn(async move {
            // The exchange on it has seen the error already; this is for the log.
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection closed with an error");
            }
        });
        Ok(tx)
    }

    /// Closes every idle connection now.
    pub(crate) fn close_idle(&self) {
        let idle = std::mem::take(&mut lock(&self.state).idle);
        drop(idle);
    }

    /// How many idle connections hyper has not yet seen closed.
    #[cfg(test)]
    pub(crate) fn idle_open(&self) -> usize {
        lock(&self.state)
            .idle
            .iter()
            .filter(|c| !c.tx.is_closed())
            .count()
    }

    /// How many connections are idle now.
    #[cfg(test)]
    pub(crate) fn idle_len(&self) -> usize {
        lock(&self.state).idle.len()
    }
}

/// Closes connections idle for a whole idle timeout (four ticks), and those the server
/// closed. Ends when nothing is idle, or when the node's connections were thrown away
/// (a reset, or the client dropped).
async fn reap(conns: Weak<NodeConns>, first: tokio::time::Instant, period: Duration) {
    // However this task ends — dropped with its runtime included — the flag is cleared,
    // so a later `put` starts a new reaper.
    let weak = conns.clone();
    let mut clear = ClearOnDrop::new(move || {
        if let Some(conns) = weak.upgrade() {
            lock(&conns.state).reaping = false;
        }
    });
    // Missed ticks (a busy runtime) are made up at once, so the tick count keeps up with
    // the clock and no connection outlives its idle timeout by more than the delay.
    let mut ticker = tokio::time::interval_at(first, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    loop {
        ticker.tick().await;
        let Some(conns) = conns.upgrade() else {
            clear.disarm();
            return;
        };
        let mut state = lock(&conns.state);
        let now = conns.tick.fetch_add(1, Ordering::Relaxed) + 1;
        state
            .idle
            .retain(|c| now - c.since < u64::from(TICKS_PER_TIMEOUT) && !c.tx.is_closed());
        if state.idle.is_empty() {
            // Cleared under the lock, so a `put` that comes next sees it and starts a
            // new reaper; this one must not clear the flag again when it is dropped.
            state.reaping = false;
            clear.disarm();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    use crate::http::addr::NodeAddr;
    use crate::http::connector::{ConnSettings, Connector, HyperConnector};
    use searchwire_fake::{Behavior, FakeNode, Match};

    const IDLE: Duration = Duration::from_secs(40);

    fn connector(max_idle: usize, max_response_bytes: usize) -> HyperConnector {
        HyperConnector::new(ConnSettings {
            connect_timeout: Duration::from_secs(5),
            pool_idle_timeout: IDLE,
            pool_max_idle_per_node: max_idle,
            max_response_bytes,
            extra_roots: Vec::new(),
            native_roots: false,
            client_identity: None,
        })
        .unwrap()
    }

    fn get(node: &NodeAddr, path: &str) -> http::Request<Full<Bytes>> {
        let mut req = http::Request::new(Full::new(Bytes::new()));
        *req.uri_mut() = node.uri(path, "").unwrap();
        req
    }

    fn idle(node: &NodeAddr) -> usize {
        node.conn.load().as_ref().map_or(0, |c| c.idle_len())
    }

    async fn start() -> (FakeNode, NodeAddr) {
        let fake = FakeNode::start("n1").await.unwrap();
        let (addr, _) = NodeAddr::parse(&fake.url()).unwrap();
        (fake, addr)
    }

    #[tokio::test]
    async fn sequential_requests_share_one_connection_sent_in_origin_form_with_a_host() {
        let (fake, node) = start().await;
        let c = connector(64, 1 << 20);
        for _ in 0..3 {
            let resp = c.send(&node, get(&node, "/i/_search")).await.ok().unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(idle(&node), 1);
        }
        assert_eq!(fake.connections_accepted(), 1);
        let seen = fake.requests();
        assert_eq!(seen.len(), 3);
        for r in &seen {
            assert_eq!(r.path, "/i/_search");
            let hosts: Vec<&str> = r
                .headers
                .iter()
                .filter(|(k, _)| k == "host")
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(hosts, [node.host_header().unwrap().to_str().unwrap()]);
        }
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_reused_and_its_close_is_no_failure() {
        let (fake, node) = start().await;
        fake.set_default(Behavior::Respond {
            status: 200,
            headers: vec![("connection".into(), "close".into())],
            body: Bytes::from_static(b"{}"),
        });
        let c = connector(64, 1 << 20);
        for i in 1..=5 {
            // Sent back to back: the closed connection is sometimes still in the idle set
            // (hyper has not yet run its connection task), so `ready` must fail over to a
            // new connection rather than fail the request.
            let resp = c.send(&node, get(&node, "/")).await;
            assert!(resp.is_ok(), "request {i}: {}", resp.err().unwrap().source);
        }
        assert_eq!(fake.connections_accepted(), 5);
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_leaves_no_connection_to_reuse() {
        let (fake, node) = start().await;
        fake.on(
            Match::Path("/big".into()),
            Behavior::Respond {
                status: 200,
                headers: vec![],
                body: Bytes::from(vec![b'x'; 100]),
            },
        );
        fake.set_default(Behavior::Respond {
            status: 200,
            headers: vec![],
            body: Bytes::from_static(b"{}"),
        });
        let c = connector(64, 10);
        match c.send(&node, get(&node, "/big")).await {
            Err(e) => assert_eq!(e.kind, OutcomeKind::TooLarge, "{}", e.source),
            Ok(r) => panic!("answered {} with {} bytes", r.status, r.body.len()),
        }
        assert_eq!(idle(&node), 0);
        c.send(&node, get(&node, "/")).await.ok().unwrap();
        assert_eq!(fake.connections_accepted(), 2);
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_are_kept() {
        let (fake, node) = start().await;
        fake.set_default(Behavior::Delay(
            Duration::from_millis(50),
            Box::new(Behavior::Default),
        ));
        let c = connector(2, 1 << 20);
        let (a, b, d) = tokio::join!(
            c.send(&node, get(&node, "/")),
            c.send(&node, get(&node, "/")),
            c.send(&node, get(&node, "/"))
        );
        assert!(a.is_ok() && b.is_ok() && d.is_ok());
        assert_eq!(fake.connections_accepted(), 3);
        assert_eq!(idle(&node), 2);
        assert!(
            fake.wait_until(Duration::from_secs(5), |f| f.open_connections() == 2)
                .await
        );
    }

    #[tokio::test]
    async fn a_reset_closes_the_idle_connections_at_once() {
        let (fake, node) = start().await;
        let c = connector(64, 1 << 20);
        c.send(&node, get(&node, "/")).await.ok().unwrap();
        assert_eq!(fake.open_connections(), 1);
        c.reset(&node);
        assert!(
            fake.wait_until(Duration::from_secs(5), |f| f.open_connections() == 0)
                .await
        );
        c.send(&node, get(&node, "/")).await.ok().unwrap();
        assert_eq!(fake.connections_accepted(), 2);
    }

    /// A server that answers one request per connection with keep-alive, then, when told
    /// to, closes the connection (FIN) — as a server or load balancer closes one it found
    /// idle. Returns the address, the count of accepted connections, and the trigger.
    async fn closes_when_told() -> (NodeAddr, Arc<AtomicUsize>, Arc<tokio::sync::Notify>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let close = Arc::new(tokio::sync::Notify::new());
        let (count, trigger) = (Arc::clone(&accepted), Arc::clone(&close));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let trigger = Arc::clone(&trigger);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                    if s.write_all(answer).await.is_ok() {
                        trigger.notified().await;
                        let _ = s.shutdown().await;
                    }
                });
            }
        });
        let (addr, _) = NodeAddr::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        (addr, accepted, close)
    }

    #[tokio::test]
    async fn a_connection_closed_by_the_server_while_idle_is_no_failure() {
        let (node, accepted, close) = closes_when_told().await;
        let c = connector(64, 1 << 20);
        for i in 1..=3 {
            c.send(&node, get(&node, "/")).await.ok().unwrap();
            let conns = node.conn.load_full().unwrap();
            assert_eq!(
                conns.idle_open(),
                1,
                "request {i}: its connection was not kept"
            );
            close.notify_one();
            // Once hyper has seen the close, the next request must go on a new connection
            // — not fail on the closed one (which would mark a healthy node dead).
            let seen = async {
                while conns.idle_open() > 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(5), seen)
                .await
                .unwrap();
            assert_eq!(accepted.load(Ordering::SeqCst), i);
        }
        c.send(&node, get(&node, "/")).await.ok().unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }

    /// Moves the paused clock on by `secs`, a second at a time, letting the reaper run
    /// at each step as it would in real time.
    async fn pass(secs: u64) {
        for _ in 0..secs {
            tokio::time::advance(Duration::from_secs(1)).await;
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn idle_connections_are_closed_within_one_idle_timeout_and_the_reaper_starts_again() {
        let (fake, node) = start().await;
        let c = connector(64, 1 << 20);
        for round in 0..2 {
            c.send(&node, get(&node, "/")).await.ok().unwrap();
            assert_eq!(idle(&node), 1, "round {round}");
            tokio::time::pause();
            // Ticks every 10 s: idle for three ticks (went idle between ticks) is kept…
            pass(29).await;
            assert_eq!(
                idle(&node),
                1,
                "round {round}: closed before ¾ of the timeout"
            );
            // …and at the fourth tick, one idle timeout after it went idle, closed.
            pass(11).await;
            // (tokio's timers round their deadlines up to the millisecond.)
            tokio::time::advance(Duration::from_millis(1)).await;
            tokio::task::yield_now().await;
            assert_eq!(
                idle(&node),
                0,
                "round {round}: still idle after the timeout"
            );
            tokio::time::resume();
            assert!(
                fake.wait_until(Duration::from_secs(5), |f| f.open_connections() == 0)
                    .await,
                "round {round}: the server still sees the connection open"
            );
        }
        assert_eq!(fake.connections_accepted(), 2);
    }
}
