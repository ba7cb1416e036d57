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

pub mod backoff;
pub mod breaker;
pub mod budget;
mod capability;
pub mod class_backoff;
pub mod classify;
mod client;
pub mod config;
mod conn;
pub mod defaults;
mod discovery;
pub mod duration;
mod error;
mod health;
#[cfg(test)]
mod health_tests;
pub mod jitter;
#[cfg(test)]
mod loop_tests;
#[cfg(feature = "metrics")]
pub mod metrics;
mod node;
pub mod observe;
mod pool;
mod refresh;
mod report;
pub mod request;
#[cfg(test)]
mod resilience_tests;
mod response;
mod resurrect;
pub mod retry;
pub mod schedule;
#[cfg(test)]
mod testing;
mod window;

pub use backoff::{Backoff, Jitter};
pub use breaker::{BreakerConfig, BreakerState};
pub use budget::RetryBudget;
pub use capability::Capability;
pub use class_backoff::{ClassBackoff, ClassRule};
pub use classify::OutcomeKind;
pub use client::{Client, NodeSnapshot};
pub use config::ClientBuilder;
pub use discovery::DiscoveryReport;
pub use error::{Attempt, Error, ErrorKind};
pub use health::{ClusterHealthLocal, ClusterStatus, NodeInfo};
pub use jitter::AdaptiveJitter;
pub use node::{Credentials, NodeAddr};
pub use observe::Observer;
pub use report::{ClusterHealth, ClusterHealthSample, HealthReport, NodeHealthView, NodeReport};
pub use request::{Deadline, Request};
pub use response::Response;
pub use retry::RetryPolicy;
pub use schedule::{Capacity, ResurrectionConfig};
