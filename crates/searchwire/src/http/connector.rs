//! The HTTP layer: one keep-alive connection pool per node, TLS with a custom CA, and the
//! one operation the transport loop needs — send a request and read the whole response.
//!
//! Each node has its own pool, and [`Connector::reset`] throws a node's pool away. The
//! transport loop calls it after an attempt timed out or was reset, so the retry never goes
//! over a connection that may be stalled (opensearch-go reuses a timed-out HTTP/2
//! connection for the retry; we never do).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::classify::{classify_send_error, OutcomeKind};
use crate::http::addr::NodeAddr;
use crate::message::error::{BoxError, Error};

/// A complete response as read off the wire.
pub(crate) struct RawResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why sending failed without a response: the kind (connect or reset) and the cause.
pub(crate) struct SendError {
    pub kind: OutcomeKind,
    pub source: BoxError,
}

pub(crate) type SendFuture = Pin<Box<dyn Future<Output = Result<RawResponse, SendError>> + Send>>;

/// Sends one request to one node. The transport loop owns timeouts and retries; a
/// connector only moves bytes and tells connect failures from mid-exchange failures.
pub(crate) trait Connector: Send + Sync + 'static {
    /// Sends `req` to `node` and reads the whole response body.
    fn send(&self, node: &NodeAddr, req: http::Request<Full<Bytes>>) -> SendFuture;
    /// Drops every pooled connection to `node`; the next request opens a fresh one.
    fn reset(&self, node: &NodeAddr);

    /// After an exchange with `node` that ended as `kind`, user or background: a
    /// connection that timed out or broke is never reused — the node's pool is dropped,
    /// so the next request (a retry, the next check) opens a fresh connection.
    fn after(&self, node: &NodeAddr, kind: OutcomeKind) {
        if kind.marks_node_dead() {
            self.reset(node);
        }
    }
}

/// Connection settings shared by every node's pool.
#[derive(Clone, Debug)]
pub(crate) struct ConnSettings {
    pub connect_timeout: Duration,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_node: usize,
    /// Largest response body read; a larger one fails the attempt as `TooLarge`.
    pub max_response_bytes: usize,
    /// Extra trusted roots (DER), from the user's CA PEM.
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Trust the operating system's roots too.
    pub native_roots: bool,
    /// The client certificate and key presented for mutual TLS (validated at `build`).
    pub client_identity: Option<ClientIdentityPem>,
}

/// A client certificate chain and its private key, PEM, for mutual TLS. Its `Debug` never
/// shows the key.
#[derive(Clone)]
pub(crate) struct ClientIdentityPem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentityPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentityPem")
            .field("cert_bytes", &self.cert.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The certificate chain and key of a [`ClientIdentityPem`], parsed; the error says which
/// part is wrong and what to pass.
pub(crate) type ClientIdentity = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

impl ClientIdentityPem {
    /// Parses the certificate chain (at least one CERTIFICATE block) and the private key
    /// (PKCS#8, PKCS#1 or SEC1 PEM).
    pub(crate) fn parse(&self) -> Result<ClientIdentity, Error> {
        use rustls::pki_types::pem::PemObject;
        let chain = rustls::pki_types::CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::config(format!("client certificate PEM is malformed: {e}")))?;
        if chain.is_empty() {
            return Err(Error::config(
                "client certificate PEM contains no CERTIFICATE block; pass the client's certificate file (PEM)",
            ));
        }
        // The key's own parse error is not shown: it could quote key material.
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&self.key).map_err(|_| {
            Error::config(
                "client key PEM contains no usable private key (PKCS#8, PKCS#1 or SEC1 PEM block); pass the key file that belongs to the client certificate",
            )
        })?;
        Ok((chain, key))
    }
}

/// TCP and TLS, bounded together by the connect timeout (`connect_timeout.rs`).
type Https =
    crate::http::connect_timeout::ConnectTimeout<hyper_rustls::HttpsConnector<HttpConnector>>;
/// One node's keep-alive connections (not to be confused with the node pool, `nodes::pool::Pool`).
type Connections = HyperClient<Https, Full<Bytes>>;

/// Where a node's connection pool lives (inside its [`NodeAddr`]): empty until the first
/// request, emptied again by [`Connector::reset`]. Loading it is lock-free.
pub(crate) type ConnSlot = arc_swap::ArcSwapOption<Connections>;

/// The production connector: hyper 1 over rustls, one pool per node.
pub(crate) struct HyperConnector {
    settings: ConnSettings,
    https: Https,
}

impl HyperConnector {
    pub(crate) fn new(settings: ConnSettings) -> Result<HyperConnector, Error> {
        let mut roots = rustls::RootCertStore::empty();
        if settings.native_roots {
            let loaded = rustls_native_certs::load_native_certs();
            for cert in loaded.certs {
                // A malformed system certificate is skipped, as every TLS client does.
                let _ = roots.add(cert);
            }
        }
        for cert in &settings.extra_roots {
            roots.add(cert.clone()).map_err(|e| {
                Error::config(format!(
                    "the CA certificate cannot be used as a trust anchor: {e}"
                ))
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::config(format!("TLS setup failed: {e}")))?
            .with_root_certificates(roots);
        let tls = match &settings.client_identity {
            None => tls.with_no_client_auth(),
            Some(pem) => {
                let (chain, key) = pem.parse()?;
                tls.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::config(format!(
                        "the client certificate and key cannot be used together: {e}"
                    ))
                })?
            }
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // The handshake belongs to connecting: one timeout for TCP and TLS together.
        let https =
            crate::http::connect_timeout::ConnectTimeout::new(https, settings.connect_timeout);
        Ok(HyperConnector { settings, https })
    }

    fn new_pool(&self) -> Arc<Connections> {
        Arc::new(
            HyperClient::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(self.settings.pool_idle_timeout)
                .pool_max_idle_per_host(self.settings.pool_max_idle_per_node)
                .build(self.https.clone()),
        )
    }
}

impl Connector for HyperConnector {
    fn send(&self, node: &NodeAddr, req: http::Request<Full<Bytes>>) -> SendFuture {
        let max = self.settings.max_response_bytes;
        let fut = {
            let guard = node.conn.load();
            match &*guard {
                Some(pool) => pool.request(req),
                None => {
                    // First use (or first after a reset). Two racing requests may each
                    // create a pool; the last store wins and the other is dropped once its
                    // request finishes. Harmless, and it keeps the hot path lock-free.
                    let pool = self.new_pool();
                    node.conn.store(Some(Arc::clone(&pool)));
                    pool.request(req)
                }
            }
        };
        Box::pin(async move {
            let resp = fut.await.map_err(|e| {
                let kind = classify_send_error(e.is_connect(), &e);
                SendError {
                    kind,
                    source: Box::new(e),
                }
            })?;
            let (parts, body) = resp.into_parts();
            let too_large = |what: String| SendError {
                kind: OutcomeKind::TooLarge,
                source: format!("{what}, more than the limit of {max} bytes (max_response_bytes)")
                    .into(),
            };
            // A declared length over the limit fails at once, without reading a byte.
            // hyper has parsed it already: a body of a declared length has that length as
            // its exact size hint, so the header is looked up again only without one
            // (chunked or read-to-close bodies, and bodiless answers such as HEAD's).
            let declared = match hyper::body::Body::size_hint(&body).exact() {
                Some(len) if len > 0 => Some(len),
                _ => parts
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok()),
            };
            if let Some(len) = declared.filter(|&l| l > max as u64) {
                return Err(too_large(format!("the response declares {len} bytes")));
            }
            // Reading the body is part of the attempt: a body that stalls half-way is a
            // timeout, one that breaks off is a reset, one that outgrows the limit is
            // abandoned (dropping it closes the connection).
            //
            // Frame by frame rather than `collect`: a body that arrives as one chunk (the
            // usual case) is kept as it came, without a buffer list; more chunks are
            // joined. Trailers are not used. The limit is counted here, frame by frame,
            // exactly as `http_body_util::Limited` would (a frame larger than what is left
            // fails), without its wrapper and boxed errors on every frame.
            let mut body = std::pin::pin!(body);
            let mut remaining = max;
            let mut first = Bytes::new();
            let mut joined: Option<bytes::BytesMut> = None;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| SendError {
                    kind: OutcomeKind::Reset,
                    source: Box::new(e),
                })?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.len() > remaining {
                    return Err(too_large("the response body grew".to_string()));
                }
                remaining -= data.len();
                if let Some(all) = joined.as_mut() {
                    all.extend_from_slice(&data);
                } else if first.is_empty() {
                    first = data;
                } else if !data.is_empty() {
                    let mut all = bytes::BytesMut::with_capacity(first.len() + data.len());
                    all.extend_from_slice(&first);
                    all.extend_from_slice(&data);
                    joined = Some(all);
                }
            }
            let body = joined.map_or(first, bytes::BytesMut::freeze);
            Ok(RawResponse {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        })
    }

    fn reset(&self, node: &NodeAddr) {
        // Dropping our handle drops the pool's idle connections once in-flight requests
        // holding it finish; new requests get a new, empty pool.
        node.conn.store(None);
    }
}
