//! The products the relay can present itself as, and how a cluster's `GET /` tells which one
//! it is: plain data at the bottom of the crate, read by the configuration, the shared state
//! and the identity logic alike.

use http::HeaderMap;
use serde_json::Value;

/// The product header of Elasticsearch.
pub const ELASTIC_PRODUCT_HEADER: &str = "x-elastic-product";

/// What the relay presents itself as (`--present-as`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PresentAs {
    /// The product of the fronted cluster, learned from its `GET /` (OpenSearch until the
    /// cluster first answers).
    #[default]
    Auto,
    /// Always OpenSearch.
    OpenSearch,
    /// Always Elasticsearch: `X-Elastic-Product: Elasticsearch` on every response.
    Elasticsearch,
}

impl PresentAs {
    /// Parses `auto`, `opensearch` or `elasticsearch`; the error names the choices.
    pub fn parse(s: &str) -> Result<PresentAs, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(PresentAs::Auto),
            "opensearch" => Ok(PresentAs::OpenSearch),
            "elasticsearch" => Ok(PresentAs::Elasticsearch),
            _ => Err(format!(
                "{} is not a product the relay can present: give auto, opensearch or elasticsearch",
                searchwire::echo(s)
            )),
        }
    }
}

/// A search product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Product {
    /// OpenSearch.
    OpenSearch,
    /// Elasticsearch.
    Elasticsearch,
}

impl Product {
    /// `opensearch` or `elasticsearch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Product::OpenSearch => "opensearch",
            Product::Elasticsearch => "elasticsearch",
        }
    }

    /// The product a `GET /` answer comes from: the `X-Elastic-Product` header, else
    /// `version.distribution` (absent: Elasticsearch, which never sends it).
    pub fn of_root(headers: &HeaderMap, body: &Value) -> Product {
        let header = headers
            .get(ELASTIC_PRODUCT_HEADER)
            .and_then(|v| v.to_str().ok());
        if header == Some("Elasticsearch") {
            return Product::Elasticsearch;
        }
        match body["version"]["distribution"].as_str() {
            Some("opensearch") => Product::OpenSearch,
            Some(_) | None => Product::Elasticsearch,
        }
    }
}
