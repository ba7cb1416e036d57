//! The bare hyper-util client the benchmarks compare searchwire with (shared by
//! `benches/overhead.rs` and searchwire-bulk's `benches/instructions.rs` through `#[path]`).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// A hyper-util legacy client over plain HTTP.
pub type Bare = HyperClient<HttpConnector, Full<Bytes>>;

/// The baseline: a hyper-util client with the connector settings searchwire uses
/// (`TCP_NODELAY`, 5 s connect timeout, 64 idle connections per host, the same idle timeout).
pub fn bare_client() -> Bare {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    HyperClient::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(searchwire::explain::POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(64)
        .build(http)
}

/// What a hand-written hyper-util client does per request: the same `user-agent` as
/// searchwire, and the whole body collected.
pub async fn bare_get(client: &Bare, uri: &http::Uri) -> Bytes {
    let req = http::Request::builder()
        .uri(uri.clone())
        .header(
            http::header::USER_AGENT,
            concat!("searchwire/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap().to_bytes()
}
