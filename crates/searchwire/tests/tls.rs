//! https with a custom CA: a local TLS server whose certificate is signed by a throwaway
//! CA. The client trusts it only when given the CA's PEM, and says why when it does not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use searchwire::{Client, ErrorKind, OutcomeKind, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Starts a TLS server on 127.0.0.1 answering every request with a tiny JSON body.
/// Returns its URL and the PEM of the certificate it presents (self-signed: its own CA).
async fn tls_server() -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert_pem = ck.cert.pem();
    let cert_der = ck.cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der], key_der)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = tls.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let body = br#"{"tls":true}"#;
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        if tls.write_all(head.as_bytes()).await.is_err()
                            || tls.write_all(body).await.is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("https://127.0.0.1:{port}"), cert_pem)
}

#[tokio::test]
async fn https_works_with_the_callers_ca_certificate() {
    let (url, pem) = tls_server().await;
    let client = Client::builder()
        .node(&url)
        .ca_certificate_pem(pem)
        .native_roots(false)
        .read_environment(false)
        .build()
        .unwrap();
    let r = client.send(Request::get("/")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text(), r#"{"tls":true}"#);
    // Keep-alive over TLS: a second request works too.
    client.send(Request::get("/again")).await.unwrap();
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_connect_failure_that_names_the_problem() {
    let (url, _pem) = tls_server().await;
    let client = Client::builder()
        .node(&url)
        .native_roots(false)
        .max_retries(0)
        .read_environment(false)
        .build()
        .unwrap();
    let e = client.send(Request::get("/")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoNodeReachable);
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Connect));
    let m = e.to_string().to_lowercase();
    assert!(m.contains("certificate"), "{e}");
}

/// A TLS "server" that accepts TCP connections and never answers the handshake. Returns
/// its URL and a counter of accepted connections.
async fn stalled_handshake_server() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut tcp, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut hello = [0u8; 1024];
            // Read the ClientHello, then say nothing; keep the socket open.
            let _ = tcp.read(&mut hello).await;
            held.push(tcp);
        }
    });
    (format!("https://127.0.0.1:{port}"), accepted)
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_a_connect_failure_so_a_post_fails_over() {
    let (stalled, accepted) = stalled_handshake_server().await;
    let (good, pem) = tls_server().await;
    let client = Client::builder()
        .nodes([stalled, good])
        .ca_certificate_pem(pem)
        .native_roots(false)
        .connect_timeout(std::time::Duration::from_millis(200))
        .attempt_timeout(std::time::Duration::from_secs(10))
        .read_environment(false)
        .build()
        .unwrap();
    // Round-robin over two nodes: one of two requests starts at the stalled node.
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let r = client
            .send(Request::post("/i/_doc").body("{}"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        outcomes.extend(r.attempts().iter().map(|a| a.outcome_label()));
    }
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    outcomes.sort();
    assert_eq!(outcomes, ["connect", "ok", "ok"], "{outcomes:?}");
}
