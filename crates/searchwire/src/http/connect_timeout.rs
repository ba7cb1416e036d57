//! The connect timeout bounds all of connecting: TCP *and* the TLS handshake.
//!
//! hyper's `HttpConnector` times only the TCP connect; a server that accepts the
//! connection and never finishes the handshake would otherwise hold the attempt for its
//! whole attempt timeout and end as a `timeout` — ambiguous, so a POST would not fail
//! over, although nothing was sent. Wrapped here, a stalled handshake is a connect failure
//! (hyper reports every connector error as one), which even a POST may retry elsewhere.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;

/// TCP and TLS, bounded together by the connect timeout.
pub(crate) type Https = ConnectTimeout<hyper_rustls::HttpsConnector<HttpConnector>>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector whose every connection (TCP and TLS) must be ready within `timeout`.
///
/// The inner connector is shared: each node's connection set (`conns.rs`) holds a clone,
/// and one reference count is cheaper to clone and drop than the TLS connector's three.
/// It is cloned out only to open a connection.
#[derive(Debug)]
pub(crate) struct ConnectTimeout<C> {
    inner: Arc<C>,
    timeout: Duration,
}

impl<C> Clone for ConnectTimeout<C> {
    fn clone(&self) -> Self {
        ConnectTimeout {
            inner: Arc::clone(&self.inner),
            timeout: self.timeout,
        }
    }
}

impl<C> ConnectTimeout<C> {
    pub(crate) fn new(inner: C, timeout: Duration) -> ConnectTimeout<C> {
        ConnectTimeout {
            inner: Arc::new(inner),
            timeout,
        }
    }
}

impl<C> tower_service::Service<Uri> for ConnectTimeout<C>
where
    C: tower_service::Service<Uri> + Clone + Send + Sync + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    /// Always ready: the connector that connects is a fresh clone, made ready in `call`.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.timeout;
        let mut inner = C::clone(&self.inner);
        Box::pin(async move {
            let connecting = async move {
                std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(uri).await
            };
            match tokio::time::timeout(timeout, connecting).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "connecting (TCP and TLS handshake) took longer than the connect timeout of {}",
                        crate::clock::duration::format_duration(timeout)
                    ),
                )
                .into()),
            }
        })
    }
}
