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
//! The API is at the crate root: [`Client`] and its [`ClientBuilder`], [`Request`],
//! [`Response`] and [`Error`] (with its [`ErrorKind`] and the [`Attempt`]s made), the
//! policies' plain configuration ([`Backoff`], [`ClassBackoff`], [`RetryBudget`],
//! [`BreakerConfig`], [`AdaptiveJitter`], [`ResurrectionConfig`]), and [`Observer`] with its
//! events. [`explain`] holds what only the CLI and the docs need (the defaults table, the
//! resurrection schedule, the duration syntax); `metrics` the built-in metrics observer.
//!
//! Three words keep one meaning everywhere: a request's **timeout** is its overall time
//! budget across every attempt and backoff ([`Request::timeout`], [`ClientBuilder::timeout`]);
//! its **deadline** is the instant that budget ends ([`Request::deadline`]); the **attempt
//! timeout** bounds one attempt, and every retry gets a fresh one
//! ([`Request::attempt_timeout`], [`ClientBuilder::attempt_timeout`]).
//!
//! Inside, one attempt loop consults small policies: classification (one [`OutcomeKind`]
//! per attempt), a pure retry planner, the retry budget, the cluster breaker, the backoffs,
//! the node pool and its resurrection timers. Health checks detect per node whether the
//! credentials may read `/_cluster/health?local=true` ([`Capability`]), refresh it
//! periodically, and report it with [`Client::cluster_health`] and [`Client::check_all`];
//! a 401/403 never marks a node dead.
//! See `docs/ARCHITECTURE.md` and `docs/architecture/transport.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod classify;
mod clock;
mod config;
mod defaults;
mod discovery;
mod echo;
pub mod explain;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod http;
/// Gzip helpers the transport compresses requests and inflates answers with, bounded
/// (`ClientBuilder::compress_requests`); the relay decodes its clients' bodies with them.
pub mod compression {
    pub use crate::http::gzip::{gunzip_bounded, gzip, read_bounded, BLOCKING_FROM};
}
mod message;
#[cfg(feature = "metrics")]
pub use observe::metrics;
mod nodes;
mod observe;
mod policy;
mod resurrection;
mod shared;
mod sync;
#[cfg(test)]
mod testing;
mod transport;

pub use classify::OutcomeKind;
pub use config::ClientBuilder;
pub use discovery::DiscoveryReport;
pub use echo::{cut, echo, MAX_ECHO_CHARS};
pub use health::report::{
    ClusterHealth, ClusterHealthSample, HealthReport, NodeHealthView, NodeReport,
};
pub use health::{ClusterHealthLocal, ClusterStatus, NodeInfo};
pub use http::addr::redact_userinfo;
#[cfg(feature = "aws-sigv4")]
pub use http::sigv4::{AwsCredentials, AwsSigV4};
pub use message::error::{Attempt, Error, ErrorKind};
pub use message::request::Request;
pub use message::response::Response;
pub use nodes::capability::Capability;
pub use nodes::choice::Selection;
pub use observe::{
    AttemptEvent, BreakerEvent, DenyReason, HealthCheckEvent, HedgeEvent, HedgeResult, LimitEvent,
    NodeEvent, Observer, RequestEvent, RetryDeniedEvent, RetryEvent,
};
pub use policy::backoff::{Backoff, Jitter};
pub use policy::breaker::{BreakerConfig, BreakerState};
pub use policy::budget::RetryBudget;
pub use policy::class_backoff::{ClassBackoff, ClassRule};
pub use policy::hedge::{HedgeDelay, Hedging};
pub use policy::limit::AdaptiveConcurrency;
pub use policy::load::AdaptiveJitter;
pub use policy::schedule::{Capacity, ResurrectionConfig};
pub use transport::client::{Client, NodeSnapshot};
