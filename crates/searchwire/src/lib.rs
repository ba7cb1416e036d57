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
//! [`OutcomeKind`] per attempt), [`retry`] (whether to retry) and [`backoff`] (how long to
//! wait), and [`schedule`] with the resurrection timers for dead nodes. See
//! `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backoff;
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
mod loop_tests;
mod node;
pub mod observe;
mod pool;
pub mod request;
mod response;
mod resurrect;
pub mod retry;
pub mod schedule;

pub use backoff::{Backoff, Jitter};
pub use classify::OutcomeKind;
pub use client::{Client, NodeSnapshot};
pub use config::ClientBuilder;
pub use discovery::DiscoveryReport;
pub use error::{Attempt, Error, ErrorKind};
pub use health::NodeInfo;
pub use node::{Credentials, NodeAddr};
pub use observe::Observer;
pub use request::{Deadline, Request};
pub use response::Response;
pub use retry::RetryPolicy;
pub use schedule::{Capacity, ResurrectionConfig};
