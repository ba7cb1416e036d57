//! Run a relay in-process: an OpenSearch-compatible `POST /_bulk` endpoint in front of a
//! cluster, backed by an embedded durable queue, then send it one bulk request and stop it
//! gracefully.
//!
//! ```sh
//! cargo run -p searchwire-relay --example relay -- http://localhost:9200 /tmp/relay-queue
//! cargo run -p searchwire-relay --example relay -- --fake     # an in-process fake cluster
//! ```
//!
//! The relay tries the cluster first (within `live_budget`, default 5 s) and answers each item
//! as the cluster did; an item that cannot pass now (the cluster down, throttling that
//! outlasts the budget, the breaker open) is appended to the queue and answered
//! `"result":"queued"`, and the relay's delivery loop writes it later. The answer comes only
//! once every item is written or durably queued, so an acknowledged write survives a
//! `kill -9` of the relay. `searchwire relay` is this, with flags, signals and metrics.

use std::net::SocketAddr;
use std::path::Path;

use searchwire::{Client, Request};
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{Relay, RelayConfig, ShutdownReport};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A relay serving in the background: its address, the switch that stops it, and its task.
pub struct Running {
    /// Where it listens (loopback, a free port).
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<ShutdownReport>,
}

impl Running {
    /// Stops accepting, finishes what is in flight, releases queue leases, and reports.
    pub async fn shutdown(self) -> Result<ShutdownReport, Box<dyn std::error::Error>> {
        let _ = self.stop.send(());
        Ok(self.task.await?)
    }
}

/// Starts a relay on a free loopback port in front of `urls`, queueing into `queue_dir`.
pub async fn start(
    urls: &[String],
    queue_dir: &Path,
) -> Result<Running, Box<dyn std::error::Error>> {
    let client = Client::builder().nodes(urls.iter().cloned()).build()?;
    let queue = Queue::open_embedded(EmbeddedConfig::new(queue_dir))?;
    let config = RelayConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..RelayConfig::default()
    };
    let relay = Relay::bind(config, client, queue).await?;
    let addr = relay.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = stopped.await;
    }));
    Ok(Running { addr, stop, task })
}

/// Sends `ndjson` (bulk format: action line, source line, ...) to the relay and returns its
/// answer, as a client of the relay would.
pub async fn send_bulk(
    addr: SocketAddr,
    ndjson: &str,
) -> Result<serde_json::Value, searchwire::Error> {
    let client = Client::builder().node(format!("http://{addr}")).build()?;
    let request = Request::post("/_bulk").body_with_type(ndjson.to_owned(), "application/x-ndjson");
    client.send(request).await?.json()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = tempfile::tempdir()?;
    let (_cluster, urls, queue_dir) = match args.as_slice() {
        [flag] if flag == "--fake" => {
            let cluster = searchwire_fake::FakeCluster::start(3).await?;
            searchwire_fake::FakeBulk::new().install(&cluster);
            let urls = cluster.urls();
            (Some(cluster), urls, dir.path().join("queue"))
        }
        [url, queue_dir] => (
            None,
            url.split(',').map(str::to_string).collect(),
            queue_dir.into(),
        ),
        _ => {
            eprintln!("usage: relay URL[,URL...] QUEUE_DIR | relay --fake");
            std::process::exit(2);
        }
    };
    let relay = start(&urls, &queue_dir).await?;
    println!("relay listening on http://{}", relay.addr);
    let answer = send_bulk(
        relay.addr,
        "{\"index\":{\"_index\":\"logs\",\"_id\":\"1\"}}\n{\"message\":\"hello\"}\n",
    )
    .await?;
    println!("{answer}");
    let report = relay.shutdown().await?;
    println!(
        "stopped: delivery drained {}, connections drained {}, {} leases released",
        report.delivery_drained, report.connections_drained, report.released
    );
    Ok(())
}
