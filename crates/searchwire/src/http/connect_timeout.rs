//! The connect timeout bounds all of connecting: TCP *and* the TLS handshake.
//!
//! hyper's `HttpConnector` times only the TCP connect; a server that accepts the
//! connection and never finishes the handshake would otherwise hold the attempt for its
//! whole attempt timeout and end as a `timeout` — ambiguous, so a POST would not fail
//! over, although nothing was sent. Wrapped here, a stalled handshake is a connect failure
//! (hyper reports every connector error as one), which even a POST may retry elsewhere.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector whose every connection (TCP and TLS) must be ready within `timeout`.
#[derive(Clone, Debug)]
pub(crate) struct ConnectTimeout<C> {
    inner: C,
    timeout: Duration,
}

impl<C> ConnectTimeout<C> {
    pub(crate) fn new(inner: C, timeout: Duration) -> ConnectTimeout<C> {
        ConnectTimeout { inner, timeout }
    }
}

impl<C> tower_service::Service<Uri> for ConnectTimeout<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.timeout;
        let connecting = self.inner.call(uri);
        Box::pin(async move {
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
