//! An in-process fake OpenSearch cluster with scripted faults.
//!
//! searchwire promises not to lose requests when nodes die, stall, throttle or reject
//! credentials. Proving that needs a server that does those things on cue, deterministically,
//! and fast enough to run in every `cargo test`: this crate. It is used by the transport's
//! tests, the CLI tests and the benchmarks.
//!
//! Each [`FakeNode`] is a small hand-written HTTP/1.1 server on `127.0.0.1` (an ephemeral
//! port). Hand-written, because faults live below HTTP: a reset after the request was read, a
//! body that stops half-way, a connection that silently swallows requests. Out of the box a
//! node answers like OpenSearch 2.19 (`GET /`, `GET /_cluster/health`,
//! `GET /_nodes/http,os`, and a small JSON echo for everything else), so a client can
//! sniff, health-check and discover it. Tests then script it while requests flow:
//!
//! - [`FakeNode::on`] installs a persistent rule ([`Match`] → [`Behavior`]; the last added
//!   matching rule wins), [`FakeNode::once`] queues a one-shot (consulted first, FIFO),
//!   [`FakeNode::set_default`] replaces the fallback.
//! - [`FakeNode::kill`] crashes the node (refuses connects, resets every open connection);
//!   [`FakeNode::revive`] brings it back on the same port.
//! - [`FakeNode::stall_open_connections`] black-holes existing connections only, like a
//!   half-dead path through a load balancer.
//! - [`FakeNode::set_load`] gives the node a performance model ([`Load`]): a latency
//!   distribution ([`Latency`]: fixed, lognormal or quantiles, seeded), stop-the-world
//!   [`Pauses`] (every T, stall D) and a [`Capacity`] (K requests at once, the rest queued,
//!   optionally 429 past a queue limit), so overload builds latency the way it does on a real
//!   node.
//! - Every request is recorded ([`Recorded`]: arrival time as a `tokio` instant, connection
//!   id, headers, body, behavior applied), and [`FakeNode::wait_until`] waits on those events
//!   instead of sleeping.
//!
//! ```
//! use std::time::Duration;
//! use searchwire_fake::{Behavior, FakeCluster, Match};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # fn main() -> std::io::Result<()> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let cluster = FakeCluster::start(2).await?;
//! // Node 0 throttles the next bulk request, then behaves; node 1 is down.
//! cluster.node(0).once(Match::Path("/_bulk".into()), Behavior::retry_after(429, "1"));
//! cluster.node(1).kill().await;
//!
//! // (A real test points a searchwire client at `cluster.urls()`.)
//! let mut conn = tokio::net::TcpStream::connect(cluster.node(0).addr()).await?;
//! conn.write_all(b"POST /_bulk HTTP/1.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await?;
//! let mut reply = String::new();
//! conn.read_to_string(&mut reply).await?;
//! assert!(reply.starts_with("HTTP/1.1 429 Too Many Requests"));
//! assert!(reply.contains("retry-after: 1"));
//!
//! assert!(tokio::net::TcpStream::connect(cluster.node(1).addr()).await.is_err());
//! let node = cluster.node(0);
//! assert!(node.wait_until(Duration::from_secs(5), |n| n.request_count() == 1).await);
//! assert_eq!(node.requests()[0].behavior, "Respond");
//! # Ok(())
//! # })
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod behavior;
mod bulk;
pub mod certs;
mod cluster;
pub mod docs;
mod http;
mod latency;
mod load;
mod node;
mod opensearch;
mod recorded;
mod server;
mod shared;

pub use behavior::{Behavior, Handler, HandlerRequest, Match};
pub use bulk::{BulkFault, FakeBulk, StoredDoc};
pub use cluster::FakeCluster;
pub use latency::LatencyModel;
pub use load::{Capacity, Latency, Load, Pauses};
pub use node::FakeNode;
pub use opensearch::{nodes_info_json, NodeInfoSpec, CLUSTER_NAME, VERSION};
pub use recorded::Recorded;
