//! Shared by the bulk indexer's tests: a fake cluster with the `_bulk` store installed, a
//! client for it, an indexer builder with jitter off, and collecting sinks.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use searchwire::Client;
use searchwire_bulk::{BulkIndexer, BulkIndexerBuilder, FailedItem, RetrySink, SinkError};
use searchwire_fake::{FakeBulk, FakeCluster};

pub struct Setup {
    pub cluster: FakeCluster,
    pub bulk: FakeBulk,
    pub client: Client,
}

/// `n` fake nodes answering `_bulk` from one shared store. The client does not retry on
/// its own (`max_retries(0)`), so every retry a test sees is the indexer's.
pub async fn setup(n: usize) -> Setup {
    let cluster = FakeCluster::start(n).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let client = Client::builder()
        .nodes(cluster.urls())
        .max_retries(0)
        .health_refresh(false)
        .read_environment(false)
        .seed(1)
        .build()
        .unwrap();
    Setup {
        cluster,
        bulk,
        client,
    }
}

/// A client for the setup's nodes whose circuit breaker is open now: four failed requests
/// opened it; it turns half-open after `cool_down`. The nodes' request logs are cleared.
pub async fn open_breaker(s: &Setup, cool_down: std::time::Duration) -> Client {
    let client = Client::builder()
        .nodes(s.cluster.urls())
        .max_retries(0)
        .health_refresh(false)
        .read_environment(false)
        .circuit_breaker(searchwire::BreakerConfig {
            window: std::time::Duration::from_secs(60),
            min_requests: 4,
            failure_rate: 0.5,
            cool_down,
            max_cool_down: cool_down,
            probes: 1,
        })
        .build()
        .unwrap();
    let node = s.cluster.node(0);
    node.on(
        searchwire_fake::Match::Path("/fail".into()),
        searchwire_fake::Behavior::status(503),
    );
    for _ in 0..4 {
        let _ = client.send(searchwire::Request::get("/fail")).await;
    }
    assert_eq!(client.breaker_state(), searchwire::BreakerState::Open);
    node.clear_requests();
    client
}

/// An indexer builder with jitter off and a fixed seed.
pub fn indexer(client: &Client) -> BulkIndexerBuilder {
    BulkIndexer::builder(client.clone()).jitter(false).seed(7)
}

/// [`indexer`] with a dead-letter sink that keeps what it is given.
pub fn collecting(client: &Client) -> (BulkIndexerBuilder, Collect) {
    let dead = Collect::default();
    (
        indexer(client).dead_letter_sink(dead.dead_letter_sink()),
        dead,
    )
}

/// A sink that keeps what it is given.
#[derive(Clone, Default)]
pub struct Collect(pub Arc<Mutex<Vec<FailedItem>>>);

impl Collect {
    pub fn items(&self) -> Vec<FailedItem> {
        self.0.lock().unwrap().clone()
    }

    pub fn ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .items()
            .iter()
            .map(|i| i.action.doc_id().unwrap().to_owned())
            .collect();
        v.sort();
        v
    }

    pub fn dead_letter_sink(
        &self,
    ) -> impl Fn(&FailedItem) -> Result<(), SinkError> + Send + Sync + 'static {
        let me = self.clone();
        move |i: &FailedItem| {
            me.0.lock().unwrap().push(i.clone());
            Ok(())
        }
    }
}

impl RetrySink for Collect {
    fn undeliverable(&self, item: &FailedItem) -> Result<(), SinkError> {
        self.0.lock().unwrap().push(item.clone());
        Ok(())
    }
}

pub fn doc(i: usize) -> serde_json::Value {
    serde_json::json!({ "n": i, "msg": format!("document {i}") })
}

/// Arrival times of the requests to node 0 of `cluster`, in ms after the first.
pub fn arrival_offsets_of(cluster: &FakeCluster) -> Vec<u64> {
    let reqs = cluster.node(0).requests();
    let t0 = reqs[0].at;
    reqs.iter()
        .map(|r| (r.at - t0).as_millis() as u64)
        .collect()
}

/// A client as an application builds it: the transport's own retries on (3, and the
/// reference class table, which alone would send a 429 six times), the default 30 s
/// attempt timeout.
pub async fn retrying_client(n: usize) -> (FakeCluster, FakeBulk, Client) {
    let cluster = FakeCluster::start(n).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let client = Client::builder()
        .nodes(cluster.urls())
        .max_retries(3)
        .class_backoff(searchwire::ClassBackoff::reference().without_jitter())
        .health_refresh(false)
        .read_environment(false)
        .seed(1)
        .build()
        .unwrap();
    (cluster, bulk, client)
}
