//! TLS on the relay's listener, with certificates made in the test (rcgen) and written to
//! real files: HTTPS with TLS 1.3 and 1.2, reload when the files change and on request, a
//! bad new pair that keeps the old one, mutual TLS as an authentication, and the refusal of
//! a public listener in plaintext.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use searchwire::Client;
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::{AuthConfig, Relay, RelayConfig, ShutdownReport, TlsFiles, TlsReload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use searchwire_fake::certs::{replace_file, TestCa as Ca};

fn ca(name: &str) -> Ca {
    Ca::new(name).unwrap()
}

fn leaf(ca: &Ca, client: bool) -> (String, String) {
    ca.leaf(client).unwrap()
}

fn write(path: &Path, text: &str) {
    replace_file(path, text).unwrap();
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// Writes the server's pair.
    fn server(&self, (cert, key): &(String, String)) {
        write(&self.path("cert.pem"), cert);
        write(&self.path("key.pem"), key);
    }
    fn tls(&self, client_ca: bool, reload_interval: Duration) -> TlsFiles {
        TlsFiles {
            client_ca: client_ca.then(|| self.path("client-ca.pem")),
            reload_interval,
            ..TlsFiles::new(self.path("cert.pem"), self.path("key.pem"))
        }
    }
}

struct Setup {
    addr: SocketAddr,
    reload: TlsReload,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<ShutdownReport>,
    _queue_dir: tempfile::TempDir,
}

impl Setup {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

/// A relay with this TLS configuration, every item queued (no cluster is needed).
async fn start(tls: TlsFiles, auth: AuthConfig) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let client = Client::builder()
        .nodes(["http://127.0.0.1:1"])
        .build()
        .unwrap();
    let config = RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth,
        tls: Some(tls),
        queue_only: true,
        deliver: false,
        drain_grace: Duration::ZERO,
        drain_timeout: Duration::from_millis(300),
        present_as: searchwire_relay::PresentAs::OpenSearch,
        ..RelayConfig::default()
    };
    let relay = Relay::bind(config, client, queue).await.unwrap();
    let addr = relay.local_addr().unwrap();
    let reload = relay
        .tls_reload()
        .expect("a relay with TLS has a reload handle");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = rx.await;
    }));
    Setup {
        addr,
        reload,
        stop: Some(tx),
        task,
        _queue_dir: dir,
    }
}

static BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];
static TLS12_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];

/// How a test client connects.
struct Connect<'a> {
    trust: &'a str,
    identity: Option<&'a (String, String)>,
    versions: &'static [&'static rustls::SupportedProtocolVersion],
}

impl<'a> Connect<'a> {
    fn trusting(trust: &'a str) -> Connect<'a> {
        Connect {
            trust,
            identity: None,
            versions: BOTH,
        }
    }
}

/// What one HTTPS exchange saw.
struct Seen {
    status: u16,
    body: String,
    /// The leaf certificate the server presented.
    server_cert: Vec<u8>,
    version: Option<rustls::ProtocolVersion>,
    alpn: Option<Vec<u8>>,
}

/// One HTTPS request; `Err` is the handshake's error.
async fn https(
    addr: SocketAddr,
    c: &Connect<'_>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Seen, std::io::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(c.trust.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(c.versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match c.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    let (_, session) = tls.get_ref();
    let server_cert = session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .unwrap_or_default();
    let version = session.protocol_version();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(body).await?;
    let mut out = Vec::new();
    // A TLS 1.3 server that rejects the client's certificate says so after the handshake:
    // the error comes with the first read.
    tls.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok(Seen {
        status,
        body,
        server_cert,
        version,
        alpn,
    })
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}

const ONE_ITEM: &[u8] = b"{\"index\":{\"_index\":\"logs\"}}\n{\"m\":1}\n";

#[tokio::test]
async fn https_is_served_with_tls_1_3_and_1_2_and_http_1_1() {
    let files = Files::new();
    let root = ca("relay test CA");
    let pair = leaf(&root, false);
    files.server(&pair);
    let s = start(files.tls(false, Duration::ZERO), AuthConfig::None).await;

    let seen = https(
        s.addr,
        &Connect::trusting(&root.pem),
        "GET",
        "/health/live",
        &[],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(seen.server_cert, der(&pair.0));
    assert_eq!(seen.version, Some(rustls::ProtocolVersion::TLSv1_3));
    assert_eq!(
        seen.alpn.as_deref(),
        Some(&b"http/1.1"[..]),
        "h2 is not offered"
    );

    let tls12 = Connect {
        versions: TLS12_ONLY,
        ..Connect::trusting(&root.pem)
    };
    let seen = https(s.addr, &tls12, "POST", "/_bulk", &[], ONE_ITEM)
        .await
        .unwrap();
    assert_eq!(seen.version, Some(rustls::ProtocolVersion::TLSv1_2));
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert!(seen.body.contains("\"queued\""), "{}", seen.body);

    // Plain HTTP on the TLS port gets no answer.
    let mut tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    tcp.write_all(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out).await;
    assert!(!String::from_utf8_lossy(&out).contains("200 OK"));

    // A client that does not trust the relay's CA fails the handshake.
    let other = ca("another CA");
    assert!(
        https(s.addr, &Connect::trusting(&other.pem), "GET", "/", &[], b"")
            .await
            .is_err()
    );
    s.stop().await;
}

#[tokio::test]
async fn changed_files_are_served_at_the_next_handshake_and_a_bad_pair_keeps_the_old_one() {
    let files = Files::new();
    let first_ca = ca("first CA");
    let first = leaf(&first_ca, false);
    files.server(&first);
    let s = start(
        files.tls(false, Duration::from_millis(50)),
        AuthConfig::None,
    )
    .await;
    let get = |trust: String| async move {
        https(
            s.addr,
            &Connect::trusting(&trust),
            "GET",
            "/health/live",
            &[],
            b"",
        )
        .await
    };
    assert_eq!(
        get(first_ca.pem.clone()).await.unwrap().server_cert,
        der(&first.0)
    );

    // Renewed by another CA: served once the poll sees the files, no signal needed.
    let second_ca = ca("second CA");
    let second = leaf(&second_ca, false);
    files.server(&second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(seen) = get(second_ca.pem.clone()).await {
            assert_eq!(seen.server_cert, der(&second.0));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the renewed certificate was not served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        get(first_ca.pem.clone()).await.is_err(),
        "the old one is gone"
    );

    // A key that is not the certificate's: refused, with the reason, and the second pair
    // stays in service. The reload records the files it tried, so the poll does not try
    // (and log) the same bad pair again; the answer right after the refusal is the proof.
    let (third_cert, _) = leaf(&first_ca, false);
    write(&files.path("cert.pem"), &third_cert);
    let e = s.reload.reload().unwrap_err();
    assert!(e.contains("does not go with the certificate"), "{e}");
    assert!(
        !e.contains("PRIVATE KEY"),
        "no key material in the error: {e}"
    );
    assert_eq!(
        get(second_ca.pem.clone()).await.unwrap().server_cert,
        der(&second.0)
    );

    // Garbage in both files: the same.
    write(&files.path("cert.pem"), "not a certificate");
    let e = s.reload.reload().unwrap_err();
    assert!(e.contains("holds no CERTIFICATE block"), "{e}");
    write(&files.path("cert.pem"), &second.0);
    write(
        &files.path("key.pem"),
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    );
    let e = s.reload.reload().unwrap_err();
    assert!(e.contains("no usable private key"), "{e}");
    assert!(!e.contains("AAAA"), "{e}");
    assert_eq!(
        get(second_ca.pem.clone()).await.unwrap().server_cert,
        der(&second.0)
    );

    // A good pair again: an explicit reload takes it at once.
    files.server(&first);
    let fingerprint = s.reload.reload().unwrap();
    assert!(fingerprint.starts_with("sha256:"), "{fingerprint}");
    assert_eq!(
        get(first_ca.pem.clone()).await.unwrap().server_cert,
        der(&first.0)
    );
    s.stop().await;
}

#[tokio::test]
async fn mutual_tls_authenticates_by_certificate_and_leaves_health_open() {
    let files = Files::new();
    let server_ca = ca("server CA");
    files.server(&leaf(&server_ca, false));
    let client_ca = ca("client CA");
    write(&files.path("client-ca.pem"), &client_ca.pem);
    let s = start(files.tls(true, Duration::ZERO), AuthConfig::None).await;
    let anonymous = Connect::trusting(&server_ca.pem);

    // No certificate: the health paths answer, nothing else does.
    let seen = https(s.addr, &anonymous, "GET", "/health/retry-queue", &[], b"")
        .await
        .unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    for (method, path, body) in [
        ("POST", "/_bulk", ONE_ITEM),
        ("GET", "/", &b""[..]),
        ("GET", "/logs/_search", &b""[..]),
        ("GET", "/metrics", &b""[..]),
    ] {
        let seen = https(s.addr, &anonymous, method, path, &[], body)
            .await
            .unwrap();
        assert_eq!(seen.status, 401, "{method} {path}: {}", seen.body);
        assert!(seen.body.contains("client certificate"), "{}", seen.body);
    }

    // A certificate the client CA signed: the relay's client.
    let identity = leaf(&client_ca, true);
    let certified = Connect {
        identity: Some(&identity),
        ..Connect::trusting(&server_ca.pem)
    };
    let seen = https(s.addr, &certified, "POST", "/_bulk", &[], ONE_ITEM)
        .await
        .unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert!(seen.body.contains("\"queued\""), "{}", seen.body);

    // One from another CA: refused at the handshake.
    let stranger = leaf(&ca("stranger CA"), true);
    let refused = Connect {
        identity: Some(&stranger),
        ..Connect::trusting(&server_ca.pem)
    };
    assert!(https(s.addr, &refused, "POST", "/_bulk", &[], ONE_ITEM)
        .await
        .is_err());
    s.stop().await;
}

#[tokio::test]
async fn with_mutual_tls_and_a_token_both_are_needed() {
    let files = Files::new();
    let server_ca = ca("server CA");
    files.server(&leaf(&server_ca, false));
    let client_ca = ca("client CA");
    write(&files.path("client-ca.pem"), &client_ca.pem);
    let s = start(
        files.tls(true, Duration::ZERO),
        AuthConfig::Bearer("s3cret".into()),
    )
    .await;
    let identity = leaf(&client_ca, true);
    let certified = Connect {
        identity: Some(&identity),
        ..Connect::trusting(&server_ca.pem)
    };
    let seen = https(s.addr, &certified, "POST", "/_bulk", &[], ONE_ITEM)
        .await
        .unwrap();
    assert_eq!(
        seen.status, 401,
        "a certificate without the token: {}",
        seen.body
    );
    let token = [("Authorization", "Bearer s3cret")];
    let seen = https(s.addr, &certified, "POST", "/_bulk", &token, ONE_ITEM)
        .await
        .unwrap();
    assert_eq!(seen.status, 200, "{}", seen.body);
    let anonymous = Connect::trusting(&server_ca.pem);
    let seen = https(s.addr, &anonymous, "POST", "/_bulk", &token, ONE_ITEM)
        .await
        .unwrap();
    assert_eq!(
        seen.status, 401,
        "the token without a certificate: {}",
        seen.body
    );
    s.stop().await;
}

#[tokio::test]
async fn bad_files_at_start_are_an_error_naming_the_file() {
    let files = Files::new();
    let root = ca("CA");
    let (cert, _) = leaf(&root, false);
    let (_, other_key) = leaf(&root, false);
    files.server(&(cert, other_key));
    let bind = |tls: TlsFiles| async move {
        let dir = tempfile::tempdir().unwrap();
        let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
        let client = Client::builder()
            .nodes(["http://127.0.0.1:1"])
            .build()
            .unwrap();
        let config = RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: Some(tls),
            ..RelayConfig::default()
        };
        Relay::bind(config, client, queue).await.map(|_| ())
    };
    let e = bind(files.tls(false, Duration::ZERO)).await.unwrap_err();
    assert!(e.contains("does not go with the certificate"), "{e}");
    let e = bind(TlsFiles::new(
        files.path("missing.pem"),
        files.path("key.pem"),
    ))
    .await
    .unwrap_err();
    assert!(e.contains("cannot read the TLS certificate file"), "{e}");
    assert!(e.contains("missing.pem"), "{e}");
    files.server(&leaf(&root, false));
    write(&files.path("client-ca.pem"), "no PEM here");
    let e = bind(files.tls(true, Duration::ZERO)).await.unwrap_err();
    assert!(e.contains("client CA"), "{e}");
}

#[tokio::test]
async fn a_public_listener_in_plaintext_is_refused_with_how_to_add_tls() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let client = Client::builder()
        .nodes(["http://127.0.0.1:1"])
        .build()
        .unwrap();
    let e = Relay::bind(
        RelayConfig {
            listen: "0.0.0.0:0".parse().unwrap(),
            auth: AuthConfig::Bearer("t".into()),
            ..RelayConfig::default()
        },
        client,
        queue,
    )
    .await
    .unwrap_err();
    assert!(e.contains("in plaintext"), "{e}");
    assert!(e.contains("--tls-cert FILE --tls-key FILE"), "{e}");
    assert!(e.contains("--allow-plaintext"), "{e}");
}
