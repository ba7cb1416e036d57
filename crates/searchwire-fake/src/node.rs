//! One fake node: its scripted rules, its recordings, and its life cycle (kill, revive, drop).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::behavior::{Behavior, Match};
use crate::load::{Load, LoadState};
use crate::opensearch::{self, Member};
use crate::recorded::Recorded;
use crate::server;
use crate::shared::{Shared, State};

/// How long [`FakeNode::kill`] waits for connection tasks to reset their sockets. They react
/// to the kill signal immediately, so this only bounds a bug, it is never the normal path.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// A fake OpenSearch node listening on `127.0.0.1` on an ephemeral port.
///
/// Cloning is cheap and every clone controls the same node. When the last clone is dropped
/// the node stops: the listener closes and open connections are reset.
#[derive(Clone)]
pub struct FakeNode {
    handle: Arc<Handle>,
}

/// Owned only by [`FakeNode`] clones, never by the node's tasks, so its drop means "nobody
/// can script or observe this node any more".
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.stop_generation();
        if let Some(task) = self.shared.accept_task.lock().take() {
            task.abort();
        }
    }
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

impl FakeNode {
    /// Starts a node called `name` on `127.0.0.1:0`. Must be called within a tokio runtime.
    pub async fn start(name: &str) -> io::Result<FakeNode> {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            addr,
            state: Mutex::new(State {
                once: VecDeque::new(),
                rules: Vec::new(),
                default: Behavior::Default,
                requests: Vec::new(),
                seen: 0,
                recording: true,
                members: Arc::from(vec![Member::new(name, addr)]),
                load: None,
            }),
            notify: Notify::new(),
            generation: watch::Sender::new(0),
            stall_epoch: AtomicU64::new(0),
            next_connection: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            accept_task: Mutex::new(None),
            lifecycle: tokio::sync::Mutex::new(()),
        });
        let task = tokio::spawn(server::accept_loop(shared.clone(), listener, 0));
        *shared.accept_task.lock() = Some(task);
        Ok(FakeNode {
            handle: Arc::new(Handle { shared }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// `"http://127.0.0.1:PORT"`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared().addr)
    }

    /// The address the node listens on (the same after [`FakeNode::revive`]).
    pub fn addr(&self) -> SocketAddr {
        self.shared().addr
    }

    /// The node name, as reported in `GET /` and nodes info.
    pub fn name(&self) -> String {
        self.shared().name.clone()
    }

    /// The node id reported in nodes info (`"id-<name>"`).
    pub fn id(&self) -> String {
        opensearch::node_id(&self.shared().name)
    }

    /// Persistent rule: requests matching `m` get `b` (last added matching rule wins) until
    /// cleared.
    pub fn on(&self, m: Match, b: Behavior) {
        self.shared().state.lock().rules.push((m, b));
    }

    /// One-shot: the next request matching `m` gets `b` (FIFO queue; consulted before
    /// persistent rules).
    pub fn once(&self, m: Match, b: Behavior) {
        self.shared().state.lock().once.push_back((m, b));
    }

    /// Drops all rules and queued one-shots (the default set by [`FakeNode::set_default`]
    /// stays).
    pub fn clear_rules(&self) {
        let mut st = self.shared().state.lock();
        st.rules.clear();
        st.once.clear();
    }

    /// The fallback when no rule or one-shot matches. Initially [`Behavior::Default`].
    pub fn set_default(&self, b: Behavior) {
        self.shared().state.lock().default = b;
    }

    /// Installs a performance model (latency distribution, pauses, capacity; see [`Load`]) for
    /// the requests it selects, replacing any earlier one. Its pauses count from now; requests
    /// already waiting under the earlier model finish under it.
    pub fn set_load(&self, load: Load) {
        let state = Arc::new(LoadState::new(load, Instant::now()));
        self.shared().state.lock().load = Some(state);
    }

    /// Removes the performance model: requests are served at once again.
    pub fn clear_load(&self) {
        self.shared().state.lock().load = None;
    }

    /// Under a [`Load`] with a capacity: (requests being served, requests waiting for a
    /// slot) right now. `(0, 0)` without one.
    pub fn load_queue(&self) -> (usize, usize) {
        match &self.shared().state.lock().load {
            Some(l) => (l.serving(), l.waiting()),
            None => (0, 0),
        }
    }

    /// Simulates a crash: closes the listener (new connects are refused) and resets (RST,
    /// `SO_LINGER` 0) every open connection, including hung ones. Returns once both have
    /// happened. Killing a dead node does nothing.
    pub async fn kill(&self) {
        let shared = self.shared();
        let _lifecycle = shared.lifecycle.lock().await;
        let task = shared.accept_task.lock().take();
        let Some(task) = task else { return };
        shared.stop_generation();
        // The accept task drops the listener when it ends.
        let _ = task.await;
        self.wait_until(KILL_GRACE, |n| n.open_connections() == 0)
            .await;
    }

    /// Listens again on the same port (`SO_REUSEADDR`) after [`FakeNode::kill`], with the same
    /// rules and recordings. Reviving a live node does nothing.
    pub async fn revive(&self) -> io::Result<()> {
        let shared = &self.handle.shared;
        let _lifecycle = shared.lifecycle.lock().await;
        if shared.accept_task.lock().is_some() {
            return Ok(());
        }
        let listener = bind(shared.addr)?;
        let generation = *shared.generation.borrow();
        let task = tokio::spawn(server::accept_loop(shared.clone(), listener, generation));
        *shared.accept_task.lock() = Some(task);
        Ok(())
    }

    /// Whether the node is listening (not killed).
    pub fn is_alive(&self) -> bool {
        self.shared().accept_task.lock().is_some()
    }

    /// Makes every request that arrives on currently-open connections hang forever from now on
    /// (a black-holed path), while new connections behave normally. Such requests are still
    /// recorded, with behavior `"Stalled"`, and do not consume one-shots.
    pub fn stall_open_connections(&self) {
        self.shared().stall_epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Every request seen (since start or [`FakeNode::clear_requests`]), in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared().state.lock().requests.clone()
    }

    /// How many requests were seen (since start or [`FakeNode::clear_requests`]); counts even
    /// while recording is off.
    pub fn request_count(&self) -> usize {
        self.shared().state.lock().seen
    }

    /// The recorded requests selected by `m`, in arrival order.
    pub fn requests_matching(&self, m: &Match) -> Vec<Recorded> {
        self.shared()
            .state
            .lock()
            .requests
            .iter()
            .filter(|r| m.matches(&r.method, &r.path, r.query.as_deref()))
            .cloned()
            .collect()
    }

    /// Forgets recorded requests and resets [`FakeNode::request_count`].
    pub fn clear_requests(&self) {
        let mut st = self.shared().state.lock();
        st.requests.clear();
        st.seen = 0;
    }

    /// Turns storing of requests on or off (on by default). Benchmarks turn it off so memory
    /// stays flat; [`FakeNode::request_count`] keeps counting.
    pub fn set_recording(&self, on: bool) {
        self.shared().state.lock().recording = on;
    }

    /// How many connections this node has accepted, over its whole life.
    pub fn connections_accepted(&self) -> u64 {
        self.shared().next_connection.load(Ordering::SeqCst)
    }

    /// How many connections are open right now.
    pub fn open_connections(&self) -> usize {
        self.shared().open.load(Ordering::SeqCst)
    }

    /// Waits (at most `timeout`) until `pred(self)` holds, re-checking whenever a request is
    /// recorded or a connection opens or closes. Returns whether it held.
    pub async fn wait_until(&self, timeout: Duration, pred: impl Fn(&FakeNode) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            // Register interest before checking, so an event between the check and the
            // await is not missed.
            let mut notified = pin!(self.shared().notify.notified());
            notified.as_mut().enable();
            if pred(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return pred(self);
            }
        }
    }

    /// Sets the cluster this node reports in health and nodes info.
    pub(crate) fn set_members(&self, members: Arc<[Member]>) {
        self.shared().state.lock().members = members;
    }
}

impl std::fmt::Debug for FakeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNode")
            .field("name", &self.shared().name)
            .field("addr", &self.shared().addr)
            .field("alive", &self.is_alive())
            .finish()
    }
}
