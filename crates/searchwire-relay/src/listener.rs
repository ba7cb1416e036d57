//! The accept loop: one task per connection, bounded by the connection semaphore, over
//! plain TCP or TLS (`tls`), each served by hyper's HTTP/1 until the relay stops.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::server;
use crate::state::Shared;
use crate::tls::ClientCertified;

pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    conns: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    loop {
        let Ok(permit) = conns.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: try again shortly rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        metrics::counter!("searchwire_relay_connections_total").increment(1);
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            connection(shared, stream, stop).await;
        });
    }
}

/// One connection: the TLS handshake first when the relay has TLS (bounded by the header
/// read timeout, like a client that never sends its headers), then HTTP/1.
async fn connection(shared: Arc<Shared>, stream: TcpStream, stop: watch::Receiver<bool>) {
    let Some(tls) = shared.tls.clone() else {
        serve(shared, TokioIo::new(stream), false, stop).await;
        return;
    };
    let handshake = tls.acceptor().accept(stream);
    match tokio::time::timeout(shared.config.header_read_timeout, handshake).await {
        Ok(Ok(stream)) => {
            // The verifier only lets through certificates the client CA signed.
            let certified = tls.mutual()
                && stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty());
            serve(shared, TokioIo::new(stream), certified, stop).await;
        }
        Ok(Err(e)) => {
            metrics::counter!("searchwire_relay_tls_handshake_failures_total").increment(1);
            tracing::debug!(error = %e, "TLS handshake failed");
        }
        Err(_) => {
            metrics::counter!("searchwire_relay_tls_handshake_failures_total").increment(1);
            tracing::debug!("TLS handshake timed out");
        }
    }
}

async fn serve<I>(shared: Arc<Shared>, io: I, certified: bool, mut stop: watch::Receiver<bool>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc_shared = shared.clone();
    let service = hyper::service::service_fn(move |mut req| {
        let s = svc_shared.clone();
        if certified {
            req.extensions_mut().insert(ClientCertified);
        }
        async move { Ok::<_, Infallible>(server::handle(s, req).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(shared.config.header_read_timeout);
    let conn = http.serve_connection(io, service);
    tokio::pin!(conn);
    let stopping = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopping => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
