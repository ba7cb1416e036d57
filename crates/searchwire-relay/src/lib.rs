//! # searchwire-relay
//!
//! An OpenSearch-compatible `_bulk` endpoint that never drops a write it acknowledged
//! (reference 004 ch. 5). Log shippers and clients point their bulk output at the
//! relay instead of the cluster:
//!
//! - **Accept** ([`accept`]): each `POST /_bulk` (or `/{index}/_bulk`) is parsed as OpenSearch
//!   does (a 400 names the bad line), every item without an `_id` gets a UUIDv7 first, and the
//!   items go through the relay's live [`searchwire_bulk::BulkIndexer`] ([`send`]): batched
//!   with the items of concurrent requests, retried by class (429, 503, connection) within the
//!   live budget (the item deadline), adaptive concurrency, nothing sent while the breaker is
//!   open. The cluster's own item answers are passed through (indexed with `_version`,
//!   `_seq_no`, `_primary_term`; or failed for good: mapping errors keep their status). Items
//!   still undeliverable when the budget runs out (or that arrive while the breaker is open)
//!   are appended to the durable [`searchwire_queue::Queue`] in one batch and answered
//!   `"status":200,"result":"queued"`. The answer is sent only once the append returned,
//!   i.e. the item is on disk (embedded) or in Redis.
//! - **Deliver** (`delivery`): a background loop leases due messages (priority, due time,
//!   arrival) and submits them to a second, patient bulk indexer (the delivery budget), several
//!   batches in flight; acks what landed, reschedules what can pass (doubling delay,
//!   [`config::RETRY_CAP`]), dead-letters what cannot.
//! - **Health**: `GET /health/retry-queue` (backlog, due, leased, oldest age, dead letters,
//!   breaker, draining; 503 over [`config::BACKLOG_THRESHOLD`] or while draining),
//!   `GET /health/live`, `GET /metrics`.
//! - **Presents itself** ([`identity`]) as the product it fronts: the cluster's own `GET /`
//!   (name `searchwire-relay`), `X-Elastic-Product: Elasticsearch` on every response when
//!   that is Elasticsearch, and the `compatible-with` media types of the Elasticsearch
//!   clients, as the fronted major takes them (9 and 8 in front of 9.x, 8 in front of 8.x;
//!   another is refused with Elasticsearch's own 400) ([`PresentAs`], learned from the
//!   cluster by default).
//! - **Everything else** (`passthrough`): the last row of the route table (`server::ROUTES`,
//!   read top to bottom; patterns in [`pattern`]) passes any other request to the cluster
//!   through the same transport client, with the client's own `Authorization` and without
//!   the relay's credentials, or with the relay's on the allow list
//!   ([`config::DEFAULT_PASS_THROUGH`], `--pass-through`); otherwise 403. `GET /_nodes`
//!   (`discovery`) names the relay as the only node. Every body may be gzip or deflate
//!   (`body`: decoded size bounded, 415 for other codings); answers are gzip on request.
//! - **Shutdown** ([`Relay::run`]): readiness goes 503 and, for [`config::DRAIN_GRACE`],
//!   new `_bulk` requests are answered 503 (retry elsewhere), then the listener closes, requests in
//!   flight are answered, the delivery loop gets [`config::DRAIN_TIMEOUT`] to finish its cycle,
//!   and every message still leased is released back to the queue (`pending_shutdown`).
//!
//! ## Durability promise
//!
//! An item answered 2xx is either in the cluster (the cluster said so) or in the queue (the
//! append returned). With the embedded queue that survives `kill -9` and power loss (as far as
//! the disk honours `fdatasync`); with Redis, what Redis's own persistence promises. Delivery is
//! at-least-once with idempotent writes: a replay of an `index` writes the same document under
//! the same id, a replayed `create` answered 409 counts as delivered. `update` items with
//! scripts are not idempotent: a replay after an ambiguous failure may apply them twice.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// An `Answer` (status, body, headers) is what refuses a request: made at most once per
// request and moved once into the response, so boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

pub mod accept;
mod admin;
pub mod admission;
mod body;
pub mod config;
mod delivery;
mod discovery;
pub mod filter_path;
pub mod identity;
mod ledger;
mod listener;
mod measure;
pub mod ndjson;
mod passthrough;
pub mod pattern;
mod product;
mod query;
mod route;
pub mod send;
mod server;
mod single;
mod state;
pub mod tls;
mod tls_files;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use searchwire::Client;
use searchwire_bulk::BulkIndexer;
use searchwire_queue::Queue;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore};

pub use accept::QUEUED;
pub use config::PRIORITY_HEADER;
pub use config::{AuthConfig, PassRule, PriorityRule, RelayConfig};
pub use identity::{FALLBACK_ES_VERSION, FALLBACK_VERSION};
pub use product::{PresentAs, Product};
pub use single::{OUTCOME_UNKNOWN, QUEUED_STATUS};
pub use state::MetricsRender;
pub use tls::TlsReload;
pub use tls_files::TlsFiles;

use state::Shared;

/// What a graceful shutdown did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The delivery loop finished its cycle within the drain timeout.
    pub delivery_drained: bool,
    /// Every connection finished (in-flight requests answered) in time.
    pub connections_drained: bool,
    /// Messages released back to the queue (`pending_shutdown`).
    pub released: u64,
}

/// A bound relay, ready to [`run`](Relay::run).
pub struct Relay {
    shared: Arc<Shared>,
    listener: TcpListener,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("listen", &self.listener.local_addr().ok())
            .finish()
    }
}

impl Relay {
    /// Checks `config` and binds its listen address. The error is a sentence for the user.
    pub async fn bind(config: RelayConfig, client: Client, queue: Queue) -> Result<Relay, String> {
        config.validate()?;
        // The files are read before the port is bound: a bad certificate is an error at
        // start, never a listener that fails every handshake.
        let tls = match &config.tls {
            Some(files) => Some(Arc::new(tls::Tls::new(files.clone())?)),
            None => None,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let (live, delivering) = indexers(&config, &client)?;
        let listen = listener.local_addr().unwrap_or(config.listen);
        Ok(Relay {
            shared: Arc::new(Shared {
                listen,
                config,
                client,
                queue,
                live,
                delivering,
                draining: AtomicBool::new(false),
                wake: Notify::new(),
                learned: Mutex::new(state::Learned::default()),
                metrics: None,
                tls,
                admission: admission::Admission::new(admission::AdmissionConfig::default()),
                ledger: ledger::Ledger::default(),
            }),
            listener,
        })
    }

    /// Serves `GET /metrics` with this renderer (the process's Prometheus recorder).
    pub fn metrics_render(mut self, render: MetricsRender) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.metrics = Some(render);
        }
        self
    }

    /// Reloads the listener's TLS certificate from its files (SIGHUP); `None` without TLS.
    pub fn tls_reload(&self) -> Option<TlsReload> {
        self.shared.tls.clone().map(TlsReload)
    }

    /// Bounds the queue under overload with these limits (see [`admission`]); without this
    /// call there is none.
    pub fn admission(mut self, config: admission::AdmissionConfig) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.admission = admission::Admission::new(config);
        }
        self
    }

    /// The address it listens on (the port, when bound to port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then shuts down gracefully (see the crate docs).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> ShutdownReport {
        let Relay { shared, listener } = self;
        let cfg = shared.config.clone();
        // Leases this consumer still holds from a previous run (a crash or a kill -9 of a
        // relay with the same consumer name): due again now, not after the lease timeout.
        match shared.queue.release().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                released = n,
                "messages leased by a previous run are due again"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot release a previous run's leases"),
        }
        // What the queue holds before this relay serves is "recovered" in the ledger.
        if shared.ledger.snapshot(&shared.queue).await.is_none() {
            tracing::warn!("cannot read the queue at start: the ledger measures what it recovered at the first scrape");
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        // The queue's size and the free disk are known before the first write is admitted.
        measure::refresh(&shared).await;
        let admission = tokio::spawn(measure::refresh_loop(shared.clone(), stop_rx.clone()));
        let delivery = cfg
            .deliver
            .then(|| tokio::spawn(delivery::run(shared.clone(), stop_rx.clone())));
        // Auto: learn what the cluster is before the first request is answered, so a client
        // that checks the product on its first answer sees it (bounded by the `GET /` budget).
        let known = cfg.present_as == PresentAs::Auto && identity::learn(&shared).await;
        let identity = tokio::spawn(identity::refresh_loop(
            shared.clone(),
            stop_rx.clone(),
            known,
        ));
        let tls_watch = shared
            .tls
            .clone()
            .map(|t| tokio::spawn(t.watch(stop_rx.clone())));
        let conns = Arc::new(Semaphore::new(cfg.max_connections));
        // Boxed so that dropping it closes the listener (and gives back its permit).
        let mut accept = Box::pin(listener::accept_loop(
            shared.clone(),
            listener,
            conns.clone(),
            stop_rx,
        ));
        tokio::pin!(shutdown);
        tokio::select! {
            _ = &mut shutdown => {}
            _ = &mut accept => {}
        }
        // 1. Not ready any more: load balancers stop sending. For the drain grace the
        //    listener stays open, so what they still send gets a 503 that says "elsewhere"
        //    (health, new `_bulk`) instead of a refused connection.
        shared.draining.store(true, Ordering::Relaxed);
        metrics::gauge!("searchwire_relay_draining").set(1.0);
        tracing::info!(
            grace_ms = cfg.drain_grace.as_millis() as u64,
            "shutting down: readiness 503, new bulk requests 503 during the drain grace"
        );
        tokio::select! {
            _ = tokio::time::sleep(cfg.drain_grace) => {}
            _ = &mut accept => {}
        }
        // 2. The listener is closed; connections finish their request.
        drop(accept);
        tracing::info!("not accepting connections any more, draining");
        let _ = stop_tx.send(true);
        identity.abort();
        if let Some(t) = tls_watch {
            t.abort();
        }
        admission.abort();
        let delivery_drained = match delivery {
            None => true,
            Some(mut task) => {
                match tokio::time::timeout(cfg.drain_timeout, &mut task).await {
                    Ok(_) => true,
                    Err(_) => {
                        // The cycle's messages stay leased: released below.
                        task.abort();
                        let _ = task.await;
                        tracing::warn!(
                            timeout_ms = cfg.drain_timeout.as_millis() as u64,
                            "the delivery cycle did not finish within the drain timeout"
                        );
                        false
                    }
                }
            }
        };
        // In-flight requests get their budget plus the drain timeout to be answered.
        let wait = cfg.live_budget + cfg.drain_timeout;
        let all = u32::try_from(cfg.max_connections).unwrap_or(u32::MAX);
        let connections_drained = tokio::time::timeout(wait, conns.acquire_many(all))
            .await
            .is_ok();
        let released = match shared.queue.release().await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot release leased messages; they return after the lease timeout");
                0
            }
        };
        tracing::info!(
            released,
            delivery_drained,
            connections_drained,
            "relay stopped"
        );
        ShutdownReport {
            delivery_drained,
            connections_drained,
            released,
        }
    }
}

/// The two bulk indexers: live (the first try; the live budget is each item's deadline and
/// bounds its requests) and delivery (from the queue; the delivery budget, which a throttled
/// message gets whole before it is rescheduled, so later, lower-priority messages do not
/// overtake it; a `create` answered 409 is a delivered message — our own earlier write).
fn indexers(cfg: &RelayConfig, client: &Client) -> Result<(BulkIndexer, BulkIndexer), String> {
    let base = || {
        BulkIndexer::builder(client.clone())
            .max_concurrency(cfg.bulk_concurrency)
            .flush_interval(config::BULK_LINGER)
    };
    let live = base()
        .item_deadline(cfg.live_budget)
        .request_timeout(cfg.live_budget)
        .build()
        .map_err(|e| e.to_string())?;
    let delivering = base()
        .batch_actions(
            cfg.delivery_batch
                .min(searchwire_bulk::defaults::BATCH_ACTIONS),
        )
        .item_deadline(cfg.delivery_budget)
        .tracked_until_deadline(true)
        .request_timeout(cfg.delivery_budget)
        .conflict_is_present(true)
        .build()
        .map_err(|e| e.to_string())?;
    Ok((live, delivering))
}
