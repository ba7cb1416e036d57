//! What a fake node's handles and its tasks share: the scripted rules, the recordings and
//! the connection counts.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::behavior::{Behavior, Match};
use crate::http::Request;
use crate::load::LoadState;
use crate::opensearch::Member;
use crate::recorded::Recorded;

/// State shared between the handles and the node's tasks.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    pub(crate) state: Mutex<State>,
    /// Woken on every recorded request and every connection opened or closed.
    pub(crate) notify: Notify,
    /// Bumped by kill (and drop). A task started under generation `g` ends, resetting its
    /// socket, as soon as the value differs from `g`.
    pub(crate) generation: watch::Sender<u64>,
    /// Bumped by [`FakeNode::stall_open_connections`]; a connection opened under an older
    /// epoch black-holes every further request.
    pub(crate) stall_epoch: AtomicU64,
    pub(crate) next_connection: AtomicU64,
    pub(crate) open: AtomicUsize,
    pub(crate) accept_task: Mutex<Option<JoinHandle<()>>>,
    /// Serializes kill and revive.
    pub(crate) lifecycle: tokio::sync::Mutex<()>,
}

pub(crate) struct State {
    pub(crate) once: VecDeque<(Match, Behavior)>,
    pub(crate) rules: Vec<(Match, Behavior)>,
    pub(crate) default: Behavior,
    pub(crate) requests: Vec<Recorded>,
    pub(crate) seen: usize,
    pub(crate) recording: bool,
    pub(crate) members: Arc<[Member]>,
    /// The performance model set by [`FakeNode::set_load`](crate::FakeNode::set_load).
    pub(crate) load: Option<Arc<LoadState>>,
}

impl Shared {
    pub(crate) fn stop_generation(&self) {
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Chooses the behavior for `req` (one-shots first, then the last matching rule, then the
    /// default) and records the request, in one step so recordings and rule consumption agree.
    pub(crate) fn admit(&self, req: &Request, connection: u64, stalled: bool) -> Option<Behavior> {
        let mut st = self.state.lock();
        let behavior = if stalled {
            None
        } else {
            let matches = |m: &Match| m.matches(&req.method, &req.path, req.query.as_deref());
            Some(
                if let Some(i) = st.once.iter().position(|(m, _)| matches(m)) {
                    st.once.remove(i).map_or(Behavior::Default, |(_, b)| b)
                } else if let Some((_, b)) = st.rules.iter().rev().find(|(m, _)| matches(m)) {
                    b.clone()
                } else {
                    st.default.clone()
                },
            )
        };
        st.seen += 1;
        if st.recording {
            st.requests.push(Recorded {
                at: Instant::now(),
                method: req.method.clone(),
                path: req.path.clone(),
                query: req.query.clone(),
                headers: req.headers.clone(),
                body: req.body.clone(),
                connection,
                behavior: behavior.as_ref().map_or("Stalled", Behavior::name),
            });
        }
        drop(st);
        self.notify.notify_waiters();
        behavior
    }

    /// The load model that applies to `req`, if any.
    pub(crate) fn load_for(&self, req: &Request) -> Option<Arc<LoadState>> {
        let st = self.state.lock();
        let load = st.load.as_ref()?;
        load.load
            .only
            .matches(&req.method, &req.path, req.query.as_deref())
            .then(|| Arc::clone(load))
    }

    pub(crate) fn members(&self) -> Arc<[Member]> {
        self.state.lock().members.clone()
    }

    /// Registers a newly accepted connection and returns its id.
    pub(crate) fn connection_opened(&self) -> u64 {
        let id = self.next_connection.fetch_add(1, Ordering::SeqCst) + 1;
        self.open.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
        id
    }

    pub(crate) fn connection_closed(&self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}
