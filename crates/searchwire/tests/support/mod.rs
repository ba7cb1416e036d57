//! Helpers shared by the integration tests (`mod support;` in each test file): observers
//! that turn the client's node transitions into something a test can wait on, and small
//! time helpers. Waits are on events, bounded so a broken test fails instead of hanging.
//! [`real`]: the plumbing and scenarios of the real-node suites (OpenSearch, Elasticsearch).
#![allow(dead_code)] // Each test binary uses a different subset.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod real;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::{NodeEvent, Observer};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Notify;

/// Bound for positive waits, so a broken test fails instead of hanging.
pub const BOUND: Duration = Duration::from_secs(10);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A fast resurrection schedule for real-time tests: the given initial, max and floor (ms),
/// factor cutoff 5, no jitter.
pub fn fast_schedule(initial: u64, max: u64, minimum: u64) -> searchwire::ResurrectionConfig {
    searchwire::ResurrectionConfig {
        initial: ms(initial),
        max: ms(max),
        factor_cutoff: 5,
        minimum: ms(minimum),
        jitter_scale: 0.0,
    }
}

/// Node transitions, as the client reports them to its observer: `(url, alive)`.
pub struct Transitions(tokio::sync::mpsc::UnboundedSender<(String, bool)>);

impl Observer for Transitions {
    fn node_transition(&self, e: &NodeEvent<'_>) {
        let _ = self.0.send((e.node.to_string(), e.alive));
    }
}

/// An observer for `ClientBuilder::observer` and the receiving end of its transitions.
pub fn transitions() -> (Arc<Transitions>, UnboundedReceiver<(String, bool)>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (Arc::new(Transitions(tx)), rx)
}

/// Waits until the client reports `url` with `alive`; false if it did not within `within`.
pub async fn wait_transition(
    rx: &mut UnboundedReceiver<(String, bool)>,
    url: &str,
    alive: bool,
    within: Duration,
) -> bool {
    tokio::time::timeout(within, async {
        while let Some((node, a)) = rx.recv().await {
            if a == alive && node == url {
                return;
            }
        }
        // The client (and its observer) is gone: the transition can no longer come.
        std::future::pending::<()>().await;
    })
    .await
    .is_ok()
}

/// Waits (bounded) until the client reports `url` with `alive`.
pub async fn transition(rx: &mut UnboundedReceiver<(String, bool)>, url: &str, alive: bool) {
    if !wait_transition(rx, url, alive, BOUND).await {
        panic!("{url} did not become alive={alive}");
    }
}

/// Waits (bounded) until the client reports `url` alive again.
pub async fn revived(rx: &mut UnboundedReceiver<(String, bool)>, url: &str, within: Duration) {
    if !wait_transition(rx, url, true, within).await {
        panic!("{url} was not resurrected within {within:?}");
    }
}

/// Collects "node came back / joined" events and lets a test wait for them.
#[derive(Default)]
pub struct Joins {
    alive: Mutex<Vec<String>>,
    changed: Notify,
}

impl Observer for Joins {
    fn node_transition(&self, e: &NodeEvent<'_>) {
        if e.alive {
            self.alive.lock().unwrap().push(e.node.to_string());
            self.changed.notify_waiters();
        }
    }
}

impl Joins {
    /// Whether `url` joined (or came back), waiting up to [`BOUND`] for it.
    pub async fn wait_for(&self, url: &str) -> bool {
        tokio::time::timeout(BOUND, async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.alive.lock().unwrap().iter().any(|u| u == url) {
                    return;
                }
                notified.await;
            }
        })
        .await
        .is_ok()
    }
}
