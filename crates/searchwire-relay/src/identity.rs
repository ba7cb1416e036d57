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
/// (`application/vnd.elasticsearch+json; compatible-with=9`, `+x-ndjson` for bulk bodies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MediaType {
    /// Plain JSON / NDJSON, a versioned type without `compatible-with`, or no header.
    Plain,
    /// An Elasticsearch versioned media type with `compatible-with=8`.
    Compatible8,
    /// An Elasticsearch versioned media type with `compatible-with=9`.
    Compatible9,
}

/// The `compatible-with` majors the relay accepts, as Elasticsearch does: the fronted
/// cluster's major and the one before (`current`, `oldest`), limited to the formats the
/// relay answers in (8 and 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Compatible {
    current: u32,
    oldest: u32,
}

impl Compatible {
    /// In front of an Elasticsearch cluster of `major`: 9 and 8 for 9.x (what Elasticsearch
    /// 9 takes), 8 alone for 8.x (Elasticsearch 8 also takes 7, whose format the relay
    /// does not write). `None` (not learned yet, or not Elasticsearch): 9 and 8, so a client
    /// of either major starts against a relay whose cluster has not answered.
    pub(crate) fn fronting(major: Option<u32>) -> Compatible {
        match major {
            Some(m) if m <= 8 => Compatible {
                current: 8,
                oldest: 8,
            },
            _ => Compatible {
                current: 9,
                oldest: 8,
            },
        }
    }

    fn accepts(self, version: u32) -> bool {
        (self.oldest..=self.current).contains(&version)
    }
}

impl Learned {
    /// The major version of the fronted cluster when it is Elasticsearch and has answered
    /// `GET /` (`9` of `9.5.3`).
    fn elasticsearch_major(&self) -> Option<u32> {
        if self.product != Some(Product::Elasticsearch) {
            return None;
        }
        self.root.as_ref()?["version"]["number"]
            .as_str()?
            .split('.')
            .next()?
            .parse()
            .ok()
    }
}

impl Shared {
    /// The `compatible-with` majors accepted now (see [`Compatible::fronting`]).
    pub(crate) fn compatible(&self) -> Compatible {
        Compatible::fronting(self.learned().elasticsearch_major())
    }
}

/// Reads the request's media types: the versioned type asked for (`Plain` when neither
/// header is an `application/vnd.elasticsearch+…` type with `compatible-with`), or the
/// error document Elasticsearch answers with a 400 when a version is not accepted or the
/// two headers ask for different versions.
pub(crate) fn media_type(headers: &HeaderMap, accepted: Compatible) -> Result<MediaType, Value> {
    let mut asked: Option<(u32, String)> = None;
    for name in [http::header::ACCEPT, http::header::CONTENT_TYPE] {
        let label = if name == http::header::ACCEPT {
            "Accept"
        } else {
            "Content-Type"
        };
        for v in headers.get_all(&name) {
            let Ok(v) = v.to_str() else { continue };
            let mut parts = v.split(';');
            let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if !essence.starts_with("application/vnd.elasticsearch+") {
                continue;
            }
            let Some(version) = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("compatible-with"))
                .map(|(_, v)| v.trim().trim_matches('"').to_owned())
            else {
                // Elasticsearch reads a versioned type without a version as plain JSON.
                continue;
            };
            let Some(n) = version.parse::<u32>().ok().filter(|n| accepted.accepts(*n)) else {
                return Err(media_type_error(&version_refused(
                    label, v, &version, accepted,
                )));
            };
            let header = format!("{label}={}", searchwire::cut(v));
            match &asked {
                Some((first, first_header)) if *first != n => {
                    return Err(media_type_error(&format!(
                        "A compatible version is required on both Content-Type and Accept \
                         headers if either one has requested a compatible version and the \
                         compatible versions must match. {first_header}, {header}"
                    )))
                }
                Some(_) => {}
                None => asked = Some((n, header)),
            }
        }
    }
    Ok(match asked {
        Some((9, _)) => MediaType::Compatible9,
        Some(_) => MediaType::Compatible8,
        None => MediaType::Plain,
    })
}

/// Elasticsearch's sentence for a `compatible-with` version it does not take ("Accept
/// version must be either version 9 or 8, but found 7. Accept=…"; in front of 8.x the
/// sentence of Elasticsearch 8, which names 8 and 7). A 7 in front of 8.x, which
/// Elasticsearch 8 would take, is refused with the reason: the relay does not write the
/// 7.x format.
fn version_refused(label: &str, value: &str, found: &str, accepted: Compatible) -> String {
    // Header values are visible ASCII (`to_str` checked it): cut, not quoted, so the
    // message keeps Elasticsearch's wording.
    let (value, found) = (searchwire::cut(value), searchwire::cut(found));
    if accepted.current == 8 && found == "7" {
        return format!(
            "{label} version must be version 8, but found 7: the searchwire relay does not \
             answer in the Elasticsearch 7 format (send compatible-with=8). {label}={value}"
        );
    }
    let oldest = if accepted.current == 8 {
        7
    } else {
        accepted.oldest
    };
    format!(
        "{label} version must be either version {} or {oldest}, but found {found}. {label}={value}",
        accepted.current
    )
}

/// The 400 document of Elasticsearch for a refused media type, `cause` its inner reason.
fn media_type_error(cause: &str) -> Value {
    let reason = "Invalid media-type value on headers [Content-Type, Accept]";
    let outer = json!({"type": "media_type_header_exception", "reason": reason});
    json!({
        "error": {
            "root_cause": [outer],
            "type": "media_type_header_exception",
            "reason": reason,
            "caused_by": {"type": "status_exception", "reason": cause}
        },
        "status": 400
    })
}

/// The `Content-Type` of a JSON answer to a request with this media type.
pub(crate) fn answer_type(m: MediaType) -> &'static str {
    match m {
        MediaType::Plain => "application/json; charset=UTF-8",
        MediaType::Compatible8 => "application/vnd.elasticsearch+json;compatible-with=8",
        MediaType::Compatible9 => "application/vnd.elasticsearch+json;compatible-with=9",
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

    fn cause(e: &Value) -> &str {
        e["error"]["caused_by"]["reason"]
            .as_str()
            .unwrap_or_default()
    }

    #[test]
    fn versioned_media_types_are_read() {
        let any = Compatible::fronting(None);
        assert_eq!(
            media_type(&HeaderMap::new(), any).unwrap(),
            MediaType::Plain
        );
        let plain = headers(&[("Content-Type", "application/x-ndjson")]);
        assert_eq!(media_type(&plain, any).unwrap(), MediaType::Plain);
        let es = |v: u32| {
            headers(&[
                (
                    "Accept",
                    &format!("application/vnd.elasticsearch+json; compatible-with={v}"),
                ),
                (
                    "Content-Type",
                    &format!("application/vnd.elasticsearch+x-ndjson; compatible-with={v}"),
                ),
            ])
        };
        assert_eq!(media_type(&es(8), any).unwrap(), MediaType::Compatible8);
        assert_eq!(media_type(&es(9), any).unwrap(), MediaType::Compatible9);
        // Elasticsearch reads a versioned type without a version as plain JSON.
        let bare = headers(&[("Content-Type", "application/vnd.elasticsearch+json")]);
        assert_eq!(media_type(&bare, any).unwrap(), MediaType::Plain);
    }

    #[test]
    fn the_accepted_versions_follow_the_fronted_major() {
        let nine = Compatible::fronting(Some(9));
        let eight = Compatible::fronting(Some(8));
        let accept = |v: &str| headers(&[("Accept", v)]);
        let v9 = accept("application/vnd.elasticsearch+json; compatible-with=9");
        let v8 = accept("application/vnd.elasticsearch+json; compatible-with=8");
        assert_eq!(media_type(&v9, nine).unwrap(), MediaType::Compatible9);
        assert_eq!(media_type(&v8, nine).unwrap(), MediaType::Compatible8);
        assert_eq!(media_type(&v8, eight).unwrap(), MediaType::Compatible8);

        // Elasticsearch's own answer, word for word (measured on 9.5.3).
        let seven = accept("application/vnd.elasticsearch+json; compatible-with=7");
        let e = media_type(&seven, nine).unwrap_err();
        assert_eq!(e["status"], 400);
        assert_eq!(e["error"]["type"], "media_type_header_exception");
        assert_eq!(
            e["error"]["reason"],
            "Invalid media-type value on headers [Content-Type, Accept]"
        );
        assert_eq!(e["error"]["caused_by"]["type"], "status_exception");
        assert_eq!(
            cause(&e),
            "Accept version must be either version 9 or 8, but found 7. \
             Accept=application/vnd.elasticsearch+json; compatible-with=7"
        );
        // A 9.x client in front of 8.x: Elasticsearch 8's sentence.
        let e = media_type(&v9, eight).unwrap_err();
        assert_eq!(
            cause(&e),
            "Accept version must be either version 8 or 7, but found 9. \
             Accept=application/vnd.elasticsearch+json; compatible-with=9"
        );
        // 7 in front of 8.x: refused with the reason.
        let e = media_type(&seven, eight).unwrap_err();
        assert!(
            cause(&e).contains("does not answer in the Elasticsearch 7 format"),
            "{e}"
        );
        let ct = headers(&[(
            "Content-Type",
            "application/vnd.elasticsearch+x-ndjson; compatible-with=10",
        )]);
        assert!(cause(&media_type(&ct, nine).unwrap_err())
            .starts_with("Content-Type version must be either version 9 or 8, but found 10."));
        let junk = accept("application/vnd.elasticsearch+json; compatible-with=x");
        assert!(cause(&media_type(&junk, nine).unwrap_err()).contains("but found x."));
        // A huge header value is cut in the error, its start kept.
        let huge = format!(
            "application/vnd.elasticsearch+json;compatible-with={}",
            "7".repeat(1_000_000)
        );
        let e = cause(&media_type(&accept(&huge), nine).unwrap_err()).to_owned();
        assert!(e.len() < 600, "{}", e.len());
        assert!(e.contains("more characters)"), "{e}");
        assert!(
            e.contains("application/vnd.elasticsearch+json;compatible-with=777"),
            "{e}"
        );
    }

    #[test]
    fn the_two_headers_must_ask_for_the_same_version() {
        let mixed = headers(&[
            (
                "Accept",
                "application/vnd.elasticsearch+json; compatible-with=9",
            ),
            (
                "Content-Type",
                "application/vnd.elasticsearch+x-ndjson; compatible-with=8",
            ),
        ]);
        let e = media_type(&mixed, Compatible::fronting(Some(9))).unwrap_err();
        assert_eq!(
            cause(&e),
            "A compatible version is required on both Content-Type and Accept headers if \
             either one has requested a compatible version and the compatible versions must \
             match. Accept=application/vnd.elasticsearch+json; compatible-with=9, \
             Content-Type=application/vnd.elasticsearch+x-ndjson; compatible-with=8"
        );
    }

    #[test]
    fn the_fronted_major_is_read_from_what_the_cluster_answered() {
        // Learned product and root, as `learn` stores them.
        let learned = |product, number: &str| Learned {
            root: Some(json!({"version": {"number": number}})),
            product: Some(product),
        };
        let major = |l: Learned| l.elasticsearch_major();
        assert_eq!(major(learned(Product::Elasticsearch, "9.5.3")), Some(9));
        assert_eq!(major(learned(Product::Elasticsearch, "8.19.21")), Some(8));
        assert_eq!(major(learned(Product::OpenSearch, "3.9.0")), None);
        assert_eq!(major(Learned::default()), None);
        assert_eq!(
            Compatible::fronting(major(learned(Product::Elasticsearch, "8.19.21"))),
            Compatible::fronting(Some(8))
        );
    }
}
