//! # searchwire
//!
//! A resilient transport for OpenSearch and Elasticsearch clusters: one call that either
//! succeeds against some healthy node or fails within the time the caller allowed, with an
//! error that says what happened on every attempt.
//!
//! ```no_run
//! # async fn demo() -> Result<(), searchwire::Error> {
//! use std::time::Duration;
//! use searchwire::{Client, Request};
//!
//! let client = Client::builder()
//!     .nodes(["http://127.0.0.1:9201", "http://127.0.0.1:9202"])
//!     .basic_auth("admin", "admin")
//!     .build()?;
//! let resp = client
//!     .send(Request::post("/logs/_search")
//!         .json(&serde_json::json!({"query": {"match_all": {}}}))
//!         .timeout(Duration::from_secs(5)))
//!     .await?;
//! println!("{} from {}", resp.status(), resp.node());
//! # Ok(()) }
//! ```
//!
//! The modules, in the order a request flows through them: [`config`] (the validated
//! builder, with [`defaults`] in one table), [`request`], the attempt loop in [`Client::send`]
//! which consults the node pool (selection, dead/alive), [`classify`] (one
//! [`OutcomeKind`] per attempt), [`retry`] (whether to retry), [`budget`] (whether the
//! client can afford the retry), [`breaker`] (whether the cluster gets traffic at all),
//! [`backoff`], [`class_backoff`] and [`jitter`] (how long to wait), [`observe`] and
//! `metrics` (what happened), and [`schedule`] with the resurrection timers for dead nodes.
//! Health checks detect per node whether the credentials may read
//! `/_cluster/health?local=true` ([`Capability`]), refresh it periodically, and report it
//! with [`Client::cluster_health`] and [`Client::check_all`]; a 401/403 never marks a node
//! dead.
//! See `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod classify;
mod clock;
pub mod config;
pub mod defaults;
mod discovery;
mod health;
mod http;
mod message;
mod nodes;
pub mod observe;
mod policy;
mod resurrection;
mod shared;
mod sync;
#[cfg(test)]
mod testing;
mod transport;

// The public modules, at the paths they had before the reorganisation.
pub use clock::duration;
pub use message::request;
#[cfg(feature = "metrics")]
pub use observe::metrics;
pub use policy::load as jitter;
pub use policy::{backoff, breaker, budget, class_backoff, retry, schedule};

pub use classify::OutcomeKind;
pub use config::ClientBuilder;
pub use discovery::DiscoveryReport;
pub use health::report::{
    ClusterHealth, ClusterHealthSample, HealthReport, NodeHealthView, NodeReport,
};
pub use health::{ClusterHealthLocal, ClusterStatus, NodeInfo};
pub use http::addr::{Credentials, NodeAddr};
pub use message::error::{Attempt, Error, ErrorKind};
pub use message::request::{Deadline, Request};
pub use message::response::Response;
pub use nodes::capability::Capability;
pub use observe::Observer;
pub use policy::backoff::{Backoff, Jitter};
pub use policy::breaker::{BreakerConfig, BreakerState};
pub use policy::budget::RetryBudget;
pub use policy::class_backoff::{ClassBackoff, ClassRule};
pub use policy::load::AdaptiveJitter;
pub use policy::retry::RetryPolicy;
pub use policy::schedule::{Capacity, ResurrectionConfig};
pub use transport::client::{Client, NodeSnapshot};
