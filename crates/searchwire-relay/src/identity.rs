//! Which cluster the relay presents itself as: the `GET /` answer, the product header on
//! every response, and the media types of the official Elasticsearch clients.
//!
//! Clients check who they talk to before they send anything. opensearch-py and the
//! OpenSearch shippers read `GET /` (`version.distribution`, `version.number`); the official
//! Elasticsearch clients since 7.14 refuse every answer without `X-Elastic-Product:
//! Elasticsearch` (a 2xx without it raises `UnsupportedProductError` in elasticsearch-py 8).
//! So the relay answers as the product it fronts:
//!
//! - [`PresentAs::Auto`] (default) learns the product from the fronted cluster's own `GET /`
//!   (the `X-Elastic-Product` header, else `version.distribution`: absent means
//!   Elasticsearch, as in the transport) at start, before the first request is answered
//!   (bounded by a 2 s budget), again every [`REFRESH`] (an upgrade or a migration behind
//!   the relay shows), and every [`RETRY`] and on each `GET /` while the cluster has never
//!   answered. Until the first answer it presents OpenSearch with a placeholder `GET /`: an
//!   Elasticsearch client started against a relay whose cluster is down at the relay's
//!   start is refused by its client library until the cluster answers, which is why a relay
//!   that must take Elasticsearch writes through an outage at its own start should say
//!   `--present-as elasticsearch`.
//! - [`PresentAs::OpenSearch`] / [`PresentAs::Elasticsearch`] fix the product, whatever the
//!   cluster answers (a mismatch is logged once per change). With the cluster down, `GET /`
//!   is a placeholder of that product, so clients start and their writes are queued.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::watch;

pub use crate::product::{PresentAs, Product, ELASTIC_PRODUCT_HEADER};
use crate::state::{Learned, Shared};

/// How often a relay refreshes what it learned from the cluster's `GET /`.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How often a relay asks again while the cluster has never answered `GET /`.
pub const RETRY: Duration = Duration::from_secs(5);
/// Budget of one `GET /` to the cluster.
const ROOT_TIMEOUT: Duration = Duration::from_secs(2);

/// Version reported by `GET /` as OpenSearch while the cluster has never answered.
pub const FALLBACK_VERSION: &str = "2.19.0";
/// Version reported by `GET /` as Elasticsearch while the cluster has never answered.
pub const FALLBACK_ES_VERSION: &str = "8.19.0";

impl Shared {
    fn learned(&self) -> Learned {
        self.learned.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// The product presented now.
    pub(crate) fn presented(&self) -> Product {
        match self.config.present_as {
            PresentAs::OpenSearch => Product::OpenSearch,
            PresentAs::Elasticsearch => Product::Elasticsearch,
            PresentAs::Auto => self.learned().product.unwrap_or(Product::OpenSearch),
        }
    }
}

/// Asks the cluster's `GET /` once; remembers the answer. Whether it answered.
pub(crate) async fn learn(shared: &Shared) -> bool {
    let req = searchwire::Request::get("/").timeout(ROOT_TIMEOUT);
    let Ok(resp) = shared.client.send(req).await else {
        return false;
    };
    let Ok(mut body) = resp.json::<Value>() else {
        return false;
    };
    let product = Product::of_root(resp.headers(), &body);
    if let Some(o) = body.as_object_mut() {
        o.insert("name".into(), Value::String("searchwire-relay".into()));
    }
    let mismatch = match shared.config.present_as {
        PresentAs::Auto => None,
        PresentAs::OpenSearch => Some(Product::OpenSearch),
        PresentAs::Elasticsearch => Some(Product::Elasticsearch),
    }
    .filter(|p| *p != product);
    let Ok(mut g) = shared.learned.lock() else {
        return false;
    };
    if g.product != Some(product) {
        match mismatch {
            Some(p) => tracing::warn!(
                cluster = product.as_str(),
                presented = p.as_str(),
                "the fronted cluster is not the product the relay presents (--present-as)"
            ),
            None => tracing::info!(
                product = product.as_str(),
                "the fronted cluster answered GET /"
            ),
        }
    }
    *g = Learned {
        root: Some(body),
        product: Some(product),
    };
    true
}

/// Refreshes what the relay knows of the cluster every [`REFRESH`] ([`RETRY`] while the
/// cluster has never answered; `known`: it answered before the loop started), until `stop`.
pub(crate) async fn refresh_loop(
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    mut known: bool,
) {
    loop {
        let wait = if known { REFRESH } else { RETRY };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        known = learn(&shared).await || known;
    }
}

/// The `GET /` answer: the cluster's own (name `searchwire-relay`) when it is the presented
/// product, else a placeholder of the presented product.
pub(crate) async fn root(shared: &Shared) -> Value {
    let mut learned = shared.learned();
    if learned.root.is_none() && learn(shared).await {
        learned = shared.learned();
    }
    let presented = shared.presented();
    match learned.root {
        Some(v) if learned.product == Some(presented) => v,
        other => placeholder(presented, other.as_ref()),
    }
}

fn placeholder(product: Product, cluster: Option<&Value>) -> Value {
    let cluster_name = cluster
        .and_then(|v| v["cluster_name"].as_str())
        .unwrap_or("unknown (the cluster has not answered the relay yet)");
    match product {
        Product::OpenSearch => json!({
            "name": "searchwire-relay",
            "cluster_name": cluster_name,
            "cluster_uuid": "_na_",
            "version": {"distribution": "opensearch", "number": FALLBACK_VERSION},
            "tagline": "The OpenSearch Project: https://opensearch.org/"
        }),
        Product::Elasticsearch => json!({
            "name": "searchwire-relay",
            "cluster_name": cluster_name,
            "cluster_uuid": "_na_",
            "version": {
                "number": FALLBACK_ES_VERSION,
                "build_flavor": "default",
                "build_type": "unknown",
                "minimum_wire_compatibility_version": "7.17.0",
                "minimum_index_compatibility_version": "7.0.0"
            },
            "tagline": "You Know, for Search"
        }),
    }
}

/// The compatible-with version a request asks for in its `Accept` or `Content-Type`
/// (`application/vnd.elasticsearch+json; compatible-with=8`, `+x-ndjson` for bulk bodies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MediaType {
    /// Plain JSON / NDJSON (or no header).
    Plain,
    /// An Elasticsearch versioned media type with `compatible-with=8`.
    Compatible8,
}

/// The major version the relay answers in when asked for a versioned media type.
const COMPATIBLE_WITH: &str = "8";

/// Reads the request's media types: `Ok(Compatible8)` when either header is an
/// `application/vnd.elasticsearch+…` type with `compatible-with=8`, an error sentence when it
/// asks for another version (the relay answers only in the 8.x format, as Elasticsearch 8
/// does for an unknown version with a 400).
pub(crate) fn media_type(headers: &HeaderMap) -> Result<MediaType, String> {
    let mut found = MediaType::Plain;
    for name in [http::header::ACCEPT, http::header::CONTENT_TYPE] {
        for v in headers.get_all(&name) {
            let Ok(v) = v.to_str() else { continue };
            let mut parts = v.split(';');
            let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if !essence.starts_with("application/vnd.elasticsearch+") {
                continue;
            }
            let version = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("compatible-with"))
                .map(|(_, v)| v.trim().trim_matches('"').to_owned());
            match version.as_deref() {
                Some(COMPATIBLE_WITH) => found = MediaType::Compatible8,
                Some(other) => {
                    return Err(format!(
                        "{name} [{v}]: compatible-with={other} is not supported; the searchwire \
                         relay answers in the Elasticsearch 8 format (compatible-with=8), or send \
                         application/json"
                    ))
                }
                None => {
                    return Err(format!(
                        "{name} [{v}]: a versioned media type needs compatible-with=8 (or send \
                         application/json)"
                    ))
                }
            }
        }
    }
    Ok(found)
}

/// The `Content-Type` of a JSON answer to a request with this media type.
pub(crate) fn answer_type(m: MediaType) -> &'static str {
    match m {
        MediaType::Plain => "application/json; charset=UTF-8",
        MediaType::Compatible8 => "application/vnd.elasticsearch+json;compatible-with=8",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_product_comes_from_the_header_then_the_distribution() {
        let os = json!({"version": {"distribution": "opensearch", "number": "2.19.6"}});
        let es = json!({"version": {"number": "8.19.21", "build_flavor": "default"}});
        assert_eq!(
            Product::of_root(&HeaderMap::new(), &os),
            Product::OpenSearch
        );
        assert_eq!(
            Product::of_root(&HeaderMap::new(), &es),
            Product::Elasticsearch
        );
        let h = headers(&[("X-Elastic-Product", "Elasticsearch")]);
        assert_eq!(Product::of_root(&h, &json!({})), Product::Elasticsearch);
    }

    #[test]
    fn present_as_is_parsed_with_a_clear_error() {
        assert_eq!(
            PresentAs::parse("Elasticsearch").unwrap(),
            PresentAs::Elasticsearch
        );
        assert_eq!(PresentAs::parse("auto").unwrap(), PresentAs::Auto);
        assert!(PresentAs::parse("solr")
            .unwrap_err()
            .contains("auto, opensearch or elasticsearch"));
    }

    #[test]
    fn versioned_media_types_are_read() {
        assert_eq!(media_type(&HeaderMap::new()).unwrap(), MediaType::Plain);
        let plain = headers(&[("Content-Type", "application/x-ndjson")]);
        assert_eq!(media_type(&plain).unwrap(), MediaType::Plain);
        let es = headers(&[
            (
                "Accept",
                "application/vnd.elasticsearch+json; compatible-with=8",
            ),
            (
                "Content-Type",
                "application/vnd.elasticsearch+x-ndjson; compatible-with=8",
            ),
        ]);
        assert_eq!(media_type(&es).unwrap(), MediaType::Compatible8);
        let seven = headers(&[(
            "Accept",
            "application/vnd.elasticsearch+json;compatible-with=7",
        )]);
        assert!(media_type(&seven)
            .unwrap_err()
            .contains("compatible-with=7 is not supported"));
        let bare = headers(&[("Content-Type", "application/vnd.elasticsearch+json")]);
        assert!(media_type(&bare)
            .unwrap_err()
            .contains("needs compatible-with=8"));
    }
}
