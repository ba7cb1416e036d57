//! What the server, the handlers and the delivery loop share.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use searchwire::Client;
use searchwire_bulk::BulkIndexer;
use searchwire_queue::Queue;
use tokio::sync::Notify;

use crate::config::RelayConfig;
use serde_json::Value;

use crate::product::Product;

/// Renders the process's metrics (Prometheus text); installed by the binary that owns the
/// recorder.
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

pub(crate) struct Shared {
    pub config: RelayConfig,
    /// The address the relay is bound to (the port, when the configuration said 0).
    pub listen: std::net::SocketAddr,
    pub client: Client,
    pub queue: Queue,
    /// The first try of client items: short item deadline (the live budget).
    pub live: BulkIndexer,
    /// Delivery from the queue: the delivery budget, a `create` 409 is delivered.
    pub delivering: BulkIndexer,
    /// Set on the first shutdown signal: readiness is 503 from then on.
    pub draining: AtomicBool,
    /// Wakes the delivery loop when something was queued.
    pub wake: Notify,
    /// What the fronted cluster's `GET /` said, once it answered.
    pub learned: Mutex<Learned>,
    pub metrics: Option<MetricsRender>,
    /// TLS on the listener (`RelayConfig::tls`), its configuration reloadable.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// The queue's limits under overload (`crate::admission`).
    pub admission: crate::admission::Admission,
    /// Every item accounted for (`crate::ledger`): the flows, guarded against scrapes.
    pub ledger: crate::ledger::Ledger,
}

/// What the relay last learned from the cluster's `GET /`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Learned {
    /// The cluster's answer, `name` replaced by `searchwire-relay`.
    pub root: Option<Value>,
    /// Its product.
    pub product: Option<Product>,
}
