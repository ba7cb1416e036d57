//! TLS on the listener: the certificate and key (PEM) the relay presents, the CA its clients'
//! certificates must be signed by (mutual TLS), and their reload without a restart.
//!
//! The files are read into one `rustls::ServerConfig` (TLS 1.3 and 1.2, ring, ALPN
//! `http/1.1`). Each accepted connection takes the configuration that is current at that
//! moment, so a reload applies to the next handshake and never disturbs a connection that is
//! already open. A reload reads every file again and builds a whole new configuration; only
//! when that succeeds does it replace the old one. A bad new pair (unreadable, no
//! certificate, no key, a key that is not the certificate's, an unusable CA) is logged with
//! its reason and the relay keeps serving the previous certificate.
//!
//! Reloads happen on [`TlsReload::reload`] (the CLI calls it on SIGHUP) and when the files
//! change: every [`TlsFiles::reload_interval`] the relay compares each file's modification
//! time, length and inode with what it last read (Kubernetes' secret volumes swap a
//! symlink, which changes all three). A change that fails to load is logged once, not at
//! every poll.
//!
//! With a client CA, the handshake asks for a client certificate and verifies any that is
//! presented; a connection without one still completes, but only the health paths answer it
//! (everything else is a 401 that says a certificate is needed), so load balancers' probes
//! work while every request that reaches data is authenticated by its certificate.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::tls_files::TlsFiles;

/// What one load read: the configuration and a short description for the log.
pub(crate) struct Loaded {
    pub config: Arc<ServerConfig>,
    /// `sha256:` and the first 16 hex digits of the leaf certificate's DER.
    pub fingerprint: String,
}

/// Reads the files and builds the server configuration; the error names the file and says
/// what to fix. Key material is never quoted.
pub(crate) fn load(files: &TlsFiles) -> Result<Loaded, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert_pem = read(&files.cert, "certificate")?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "the TLS certificate file {} is not valid PEM ({e}); give the certificate chain in PEM",
                files.cert.display()
            )
        })?;
    let Some(leaf) = chain.first() else {
        return Err(format!(
            "the TLS certificate file {} holds no CERTIFICATE block; give the certificate chain in PEM (leaf first)",
            files.cert.display()
        ));
    };
    let fingerprint = fingerprint(leaf);
    let key_pem = read(&files.key, "key")?;
    // The parsers' own errors are not shown: they could quote key material.
    let unusable = || {
        format!(
            "the TLS key file {} holds no usable private key (a PKCS#8, PKCS#1 or SEC1 PEM block of an RSA, ECDSA or Ed25519 key)",
            files.key.display()
        )
    };
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| unusable())?;
    // A PEM block that is no key rustls can sign with is told apart from a key that is not
    // the certificate's.
    provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|_| unusable())?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let pem = read(ca, "client CA")?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    format!(
                        "the TLS client CA file {} is not valid PEM ({e})",
                        ca.display()
                    )
                })?;
                roots.add(cert).map_err(|e| {
                    format!(
                        "the TLS client CA file {} holds a certificate that cannot be a trust anchor: {e}",
                        ca.display()
                    )
                })?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "the TLS client CA file {} holds no CERTIFICATE block; give the CA that signs the clients' certificates, in PEM",
                    ca.display()
                ));
            }
            // Verified when presented; a connection without one reaches only the health
            // paths (see the module docs).
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("cannot use the TLS client CA {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "the TLS key {} does not go with the certificate {} ({e}); give the key the certificate was issued for",
            files.key.display(),
            files.cert.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Loaded {
        config: Arc::new(config),
        fingerprint,
    })
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|e| format!("cannot read the TLS {what} file {}: {e}", path.display()))
}

fn fingerprint(cert: &CertificateDer<'_>) -> String {
    let digest = Sha256::digest(cert.as_ref());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// What identifies a file's content without reading it: modification time, length, inode.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamps(files: &TlsFiles) -> Vec<Option<Stamp>> {
    files
        .paths()
        .map(|p| {
            std::fs::metadata(p).ok().map(|m| Stamp {
                modified: m.modified().ok(),
                len: m.len(),
                inode: inode(&m),
            })
        })
        .collect()
}

#[cfg(unix)]
fn inode(m: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(m)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// The listener's TLS state: the configuration in use and what its files looked like.
pub(crate) struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The files' stamps at the last reload attempt (loaded or not): a change that failed
    /// is not tried (and logged) again until the files change once more.
    seen: Mutex<Vec<Option<Stamp>>>,
}

impl Tls {
    /// Loads the files; the error is a sentence for the user.
    pub(crate) fn new(files: TlsFiles) -> Result<Tls, String> {
        let seen = stamps(&files);
        let loaded = load(&files)?;
        tracing::info!(
            cert = %files.cert.display(),
            fingerprint = %loaded.fingerprint,
            mutual = files.client_ca.is_some(),
            "TLS certificate loaded"
        );
        Ok(Tls {
            files,
            current: RwLock::new(loaded.config),
            seen: Mutex::new(seen),
        })
    }

    /// Whether clients must present a certificate signed by the client CA.
    pub(crate) fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The acceptor for the next handshake.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        tokio_rustls::TlsAcceptor::from(config)
    }

    /// Reads the files again; on success the new configuration serves the next handshake,
    /// on failure the old one stays (both logged, and counted in
    /// `searchwire_relay_tls_reloads_total`).
    pub(crate) fn reload(&self, why: &'static str) -> Result<String, String> {
        let now = stamps(&self.files);
        if let Ok(mut seen) = self.seen.lock() {
            *seen = now;
        }
        match load(&self.files) {
            Ok(loaded) => {
                match self.current.write() {
                    Ok(mut c) => *c = loaded.config,
                    Err(poisoned) => *poisoned.into_inner() = loaded.config,
                }
                metrics::counter!("searchwire_relay_tls_reloads_total", "result" => "loaded")
                    .increment(1);
                tracing::info!(
                    trigger = why,
                    cert = %self.files.cert.display(),
                    fingerprint = %loaded.fingerprint,
                    "TLS certificate reloaded"
                );
                Ok(loaded.fingerprint)
            }
            Err(e) => {
                metrics::counter!("searchwire_relay_tls_reloads_total", "result" => "failed")
                    .increment(1);
                tracing::warn!(
                    trigger = why,
                    error = %e,
                    "TLS reload failed; still serving the previous certificate"
                );
                Err(e)
            }
        }
    }

    /// Whether a file changed since the last load or reload attempt.
    fn changed(&self) -> bool {
        let now = stamps(&self.files);
        self.seen.lock().map(|seen| *seen != now).unwrap_or(true)
    }

    /// Polls the files every reload interval until `stop`, reloading on a change.
    pub(crate) async fn watch(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let every = self.files.reload_interval;
        if every.is_zero() {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if self.changed() {
                let _ = self.reload("the files changed");
            }
        }
    }
}

/// Reloads the listener's certificate, key and client CA from their files (what the CLI
/// does on SIGHUP). Cheap to clone.
#[derive(Clone)]
pub struct TlsReload(pub(crate) Arc<Tls>);

impl std::fmt::Debug for TlsReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsReload")
            .field("cert", &self.0.files.cert)
            .finish()
    }
}

impl TlsReload {
    /// Reads the files again. `Ok` holds the new leaf certificate's fingerprint
    /// (`sha256:` and 16 hex digits); `Err` says why the files were not taken — the previous
    /// certificate is still served. Both are logged.
    pub fn reload(&self) -> Result<String, String> {
        self.0.reload("a reload was asked for")
    }
}

/// Checks that the files load (what `searchwire relay --check` does); the `Ok` value is the
/// leaf certificate's fingerprint.
pub fn check(files: &TlsFiles) -> Result<String, String> {
    load(files).map(|l| l.fingerprint)
}

/// Marks a request that came over a connection whose client presented a certificate the
/// client CA verified.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientCertified;
