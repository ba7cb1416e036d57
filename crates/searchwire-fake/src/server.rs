//! The node's tasks: one accept loop per listener generation, one task per connection, and the
//! wire-level execution of each [`Behavior`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::behavior::Behavior;
use crate::http::{self, ReadError, Request};
use crate::load::Slot;
use crate::opensearch;
use crate::shared::Shared;

/// The body length [`Behavior::CloseAfterHeaders`] claims.
const CLOSE_AFTER_HEADERS_CLAIMED_LEN: usize = 64;
/// How long a graceful close keeps draining what the client still sends, so that closing with
/// unread input does not turn our FIN into an RST that could destroy the response in flight.
const LINGER_DRAIN: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(10);

/// Accepts connections until the node's generation moves past `generation`, then drops the
/// listener (so connects are refused).
pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, generation: u64) {
    let mut gen_rx = shared.generation.subscribe();
    loop {
        let accepted = tokio::select! {
            _ = gen_rx.wait_for(|g| *g != generation) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                // Small request/response exchanges: don't let Nagle add latency to benchmarks.
                let _ = stream.set_nodelay(true);
                let stall_epoch = shared.stall_epoch.load(Ordering::SeqCst);
                let id = shared.connection_opened();
                tokio::spawn(serve_connection(
                    shared.clone(),
                    stream,
                    id,
                    generation,
                    stall_epoch,
                ));
            }
            Err(_) => tokio::time::sleep(ACCEPT_ERROR_PAUSE).await,
        }
    }
}

/// How a connection ends.
enum End {
    /// Drop the socket (it was closed gracefully already, or the peer is gone).
    Done,
    /// Close with RST.
    Reset,
}

async fn serve_connection(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    id: u64,
    generation: u64,
    stall_epoch: u64,
) {
    let mut gen_rx = shared.generation.subscribe();
    let end = tokio::select! {
        end = serve_requests(&shared, &mut stream, id, stall_epoch) => end,
        _ = gen_rx.wait_for(|g| *g != generation) => End::Reset,
    };
    if let End::Reset = end {
        // SO_LINGER 0 makes close() send RST instead of FIN.
        let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    }
    drop(stream);
    shared.connection_closed();
}

/// Serves requests on one connection until it must end.
async fn serve_requests(shared: &Shared, stream: &mut TcpStream, id: u64, stall_epoch: u64) -> End {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    loop {
        let req = match http::read_request(stream, &mut buf).await {
            Ok(Some(req)) => req,
            Ok(None) | Err(ReadError::Closed) => return End::Done,
            Err(ReadError::Malformed(why)) => {
                let body = serde_json::json!({
                    "error": { "type": "bad_request", "reason": why },
                    "status": 400,
                })
                .to_string();
                let mut out = http::response_head(400, &[], body.len(), true);
                out.extend_from_slice(body.as_bytes());
                if stream.write_all(&out).await.is_ok() {
                    close_gracefully(stream).await;
                }
                return End::Done;
            }
        };
        let stalled = shared.stall_epoch.load(Ordering::SeqCst) > stall_epoch;
        let Some(behavior) = shared.admit(&req, id, stalled) else {
            return hang(stream).await;
        };
        // A performance model (`load/`) holds the request for its queueing, service time and
        // pauses; the request keeps its slot of the node's capacity while its behavior runs.
        let (behavior, _slot) = match shared.load_for(&req) {
            Some(load) => load.enter(behavior, &shared.notify).await,
            None => (behavior, Slot::none()),
        };
        match apply(shared, stream, &req, behavior).await {
            Next::KeepAlive if !req.close => {}
            Next::KeepAlive => {
                close_gracefully(stream).await;
                return End::Done;
            }
            Next::End(end) => return end,
        }
    }
}

/// What to do after a behavior ran.
enum Next {
    /// A full response was sent; read the next request unless the client asked to close.
    KeepAlive,
    /// The connection is finished.
    End(End),
}

async fn apply(shared: &Shared, stream: &mut TcpStream, req: &Request, behavior: Behavior) -> Next {
    let mut behavior = behavior;
    loop {
        match behavior {
            Behavior::Delay(d, inner) => {
                tokio::time::sleep(d).await;
                behavior = *inner;
            }
            Behavior::Respond {
                status,
                headers,
                body,
            } => return respond(stream, req, status, &headers, &body).await,
            Behavior::Default => {
                let members = shared.members();
                let (status, value) =
                    opensearch::default_answer(&shared.name, &members, &req.method, &req.path);
                let body = Bytes::from(value.to_string());
                return respond(stream, req, status, &[], &body).await;
            }
            Behavior::Handler(h) => {
                behavior = h.call(&crate::behavior::HandlerRequest {
                    method: &req.method,
                    path: &req.path,
                    query: req.query.as_deref(),
                    body: &req.body,
                });
            }
            Behavior::Reset => return Next::End(End::Reset),
            Behavior::Hang => return Next::End(hang(stream).await),
            Behavior::CloseAfterHeaders => {
                let head = http::response_head(200, &[], CLOSE_AFTER_HEADERS_CLAIMED_LEN, false);
                if stream.write_all(&head).await.is_ok() {
                    close_gracefully(stream).await;
                }
                return Next::End(End::Done);
            }
            Behavior::StallBody { status, body } => {
                let mut out = http::response_head(status, &[], body.len(), false);
                out.extend_from_slice(&body[..body.len() / 2]);
                if stream.write_all(&out).await.is_err() {
                    return Next::End(End::Done);
                }
                return Next::End(hang(stream).await);
            }
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    req: &Request,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> Next {
    let mut out = http::response_head(status, headers, body.len(), req.close);
    if !req.is_head() {
        out.extend_from_slice(body);
    }
    match stream.write_all(&out).await {
        Ok(()) => Next::KeepAlive,
        Err(_) => Next::End(End::Done),
    }
}

/// Never answers: discards whatever the client sends until it closes the connection. (Kill
/// and drop end this from the outside.)
async fn hang(stream: &mut TcpStream) -> End {
    let mut scratch = [0u8; 4096];
    loop {
        match stream.read(&mut scratch).await {
            Ok(0) | Err(_) => return End::Done,
            Ok(_) => {}
        }
    }
}

/// Sends FIN, then drains input for a while so unread bytes do not provoke an RST that could
/// destroy the response still in flight.
async fn close_gracefully(stream: &mut TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER_DRAIN, async {
        loop {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
}
