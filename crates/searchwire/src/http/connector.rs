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

use crate::classify::{classify_send_error, OutcomeKind};
use crate::http::addr::NodeAddr;
use crate::http::conns::{NodeConns, Sender};
use crate::message::error::Error;

/// A complete response as read off the wire.
pub(crate) struct RawResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub(crate) use crate::http::send_error::SendError;

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

pub(crate) use crate::http::connect_timeout::Https;

/// The production connector: hyper 1's HTTP/1 connections over rustls, kept per node
/// (`conns.rs`).
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

    /// `node`'s connections, made on first use (or first after a reset).
    fn conns(&self, node: &NodeAddr) -> Arc<NodeConns> {
        if let Some(conns) = &*node.conn.load() {
            return Arc::clone(conns);
        }
        // Two racing requests may each make a set; the last store wins and the other is
        // dropped once its request finishes (its connection is then closed, not kept).
        // Harmless, and it keeps the hot path lock-free.
        let conns = Arc::new(NodeConns::new(
            self.https.clone(),
            self.settings.pool_idle_timeout,
            self.settings.pool_max_idle_per_node,
        ));
        node.conn.store(Some(Arc::clone(&conns)));
        conns
    }
}

impl Connector for HyperConnector {
    fn send(&self, node: &NodeAddr, mut req: http::Request<Full<Bytes>>) -> SendFuture {
        // hyper's connections send only the headers they are given. The transport sets
        // `Host` (made once per node); a background request may not have: it gets the
        // node's, cloned only then.
        if !req.headers().contains_key(http::header::HOST) {
            let host = node.host_header().cloned();
            if let Some(host) = host.or_else(|| crate::http::addr::host_header(req.uri())) {
                req.headers_mut().insert(http::header::HOST, host);
            }
        }
        let max = self.settings.max_response_bytes;
        let inflate = req
            .extensions()
            .get::<crate::http::gzip::InflateAnswer>()
            .is_some();
        Box::pin(exchange(self.conns(node), req, max, inflate))
    }

    fn reset(&self, node: &NodeAddr) {
        // The idle connections are closed now; new requests get a new, empty set. An
        // exchange still in flight on the old set puts its connection back there, and it
        // is closed when that exchange's handle on the old set is dropped.
        if let Some(old) = node.conn.swap(None) {
            old.close_idle();
        }
    }
}

/// One exchange: a connection (an idle one of the node's, or a new one), the request, the
/// whole response; the connection goes back to the node's set only if all of it went well.
async fn exchange(
    conns: Arc<NodeConns>,
    req: http::Request<Full<Bytes>>,
    max: usize,
    inflate: bool,
) -> Result<RawResponse, SendError> {
    let (tx, resp) = send_on_a_connection(&conns, req).await?;
    let mut raw = read_body(resp, max).await?;
    conns.put(tx);
    if inflate {
        let body = std::mem::take(&mut raw.body);
        raw.body = crate::http::inflate::answer(&mut raw.headers, body, max).await?;
    }
    Ok(raw)
}

/// Sends the request head and body and waits for the response head.
///
/// An idle connection may turn out closed — the server closed it while it was idle — or
/// refuse the request before a byte of it was written. Either way nothing was sent, so the
/// request goes on the next idle connection, or on a new one; that is not a failure of
/// the node. A new connection's failure is the attempt's.
async fn send_on_a_connection(
    conns: &NodeConns,
    req: http::Request<Full<Bytes>>,
) -> Result<(Sender, hyper::Response<hyper::body::Incoming>), SendError> {
    let (mut parts, body) = req.into_parts();
    // hyper sends the URI as it is given: a server is sent the origin form (path and
    // query), and the absolute URI is kept to connect with.
    let origin = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let target = std::mem::replace(&mut parts.uri, http::Uri::from(origin));
    let mut req = http::Request::from_parts(parts, body);
    let mut idle = conns.take();
    loop {
        let (mut tx, reused) = match idle.take() {
            Some(tx) => (tx, true),
            None => (conns.connect(&target).await?, false),
        };
        // A reused connection may still be finishing its last exchange (hyper's
        // connection task has not yet seen the end of it): wait for it. A new one
        // takes its first request at once.
        if reused && !tx.is_ready() && tx.ready().await.is_err() {
            idle = conns.take();
            continue;
        }
        match tx.try_send_request(req).await {
            Ok(resp) => return Ok((tx, resp)),
            Err(mut e) => match e.take_message() {
                Some(unsent) if reused => {
                    req = unsent;
                    idle = conns.take();
                }
                _ => {
                    let e = e.into_error();
                    return Err(SendError {
                        kind: classify_send_error(false, &e),
                        source: Box::new(e),
                    });
                }
            },
        }
    }
}

/// Reads the whole response body, up to `max` bytes.
async fn read_body(
    resp: hyper::Response<hyper::body::Incoming>,
    max: usize,
) -> Result<RawResponse, SendError> {
    let (parts, body) = resp.into_parts();
    let too_large = |what: String| SendError {
        kind: OutcomeKind::TooLarge,
        source: format!("{what}, more than the limit of {max} bytes (max_response_bytes)").into(),
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
}
