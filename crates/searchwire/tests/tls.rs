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
    tls_server_with(None).await
}

/// Like [`tls_server`], but when `client_ca` is given the server requires a client
/// certificate signed by it (mutual TLS).
async fn tls_server_with(
    client_ca: Option<rustls::pki_types::CertificateDer<'static>>,
) -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert_pem = ck.cert.pem();
    let cert_der = ck.cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(vec![cert_der], key_der).unwrap();
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
        // Round robin: the test needs exactly one of its two requests to start at the
        // stalled node (the latency-aware default may draw the good node both times).
        .selection(searchwire::Selection::RoundRobin)
        .ca_certificate_pem(pem)
        .native_roots(false)
        .connect_timeout(std::time::Duration::from_millis(200))
        .attempt_timeout(std::time::Duration::from_secs(10))
        .read_environment(false)
        .build()
        .unwrap();
    // One of two requests starts at the stalled node.
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

/// A throwaway CA and a client certificate it signed: (CA DER, client cert PEM, client key PEM).
fn client_identity() -> (rustls::pki_types::CertificateDer<'static>, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["searchwire-client".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.der().clone(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn mutual_tls_works_with_the_client_certificate_and_fails_clearly_without() {
    let (ca, cert, key) = client_identity();
    let (url, server_pem) = tls_server_with(Some(ca)).await;
    let builder = || {
        Client::builder()
            .node(&url)
            .ca_certificate_pem(server_pem.clone())
            .native_roots(false)
            .max_retries(0)
            .read_environment(false)
    };
    let client = builder()
        .client_certificate_pem(cert.clone(), key.clone())
        .build()
        .unwrap();
    let r = client.send(Request::get("/")).await.unwrap();
    assert_eq!(r.text(), r#"{"tls":true}"#);
    // Background requests share the connector, so they present it too.
    let report = client.check_all().await;
    assert!(
        client.nodes().iter().all(|n| n.alive),
        "health check over mTLS failed: {report:?}"
    );
    // (Without the certificate the same check finds the node unreachable: see below.)
    let bare = builder().build().unwrap();
    bare.check_all().await;
    assert!(
        bare.nodes().iter().all(|n| !n.alive),
        "a health check without the client certificate must fail the handshake"
    );
    let shown = format!(
        "{:?}",
        builder().client_certificate_pem(cert.clone(), key.clone())
    );
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");

    // Without it, the server refuses the handshake (TLS 1.3 reports the refusal on the
    // first read, so the attempt may end as a reset rather than a connect failure).
    let e = builder()
        .build()
        .unwrap()
        .send(Request::get("/"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::NoNodeReachable | ErrorKind::ConnectionLost
        ),
        "{e}"
    );
    let m = e.to_string().to_lowercase();
    assert!(
        m.contains("certificate"),
        "the error names the missing certificate: {e}"
    );

    // Bad PEM fails build() and says which part.
    let e = builder()
        .client_certificate_pem("not a pem", key.clone())
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("client certificate"), "{e}");
    let e = builder()
        .client_certificate_pem(cert.clone(), "no key here")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("client key"), "{e}");
}
