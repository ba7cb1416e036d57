//! Where the listener's TLS files are (plain data of [`crate::RelayConfig`]); what is done
//! with them is `tls`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the TLS certificate, key and client CA files are checked for changes: a
/// renewed certificate (cert-manager, certbot, a Kubernetes secret) is served within 10 s
/// without a SIGHUP, for the cost of three `stat` calls.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// Where the listener's certificate, key and (for mutual TLS) client CA are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// The private key of the leaf certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Require client certificates signed by the CA(s) in this PEM file (mutual TLS).
    pub client_ca: Option<PathBuf>,
    /// How often the files are checked for changes; zero: only on [`crate::TlsReload::reload`].
    /// Default [`TLS_RELOAD_INTERVAL`].
    pub reload_interval: Duration,
}

impl TlsFiles {
    /// The certificate and key files, checked for changes every
    /// [`TLS_RELOAD_INTERVAL`], without a client CA.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsFiles {
        TlsFiles {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            reload_interval: TLS_RELOAD_INTERVAL,
        }
    }

    pub(crate) fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(self.cert.as_path()), Some(self.key.as_path())]
            .into_iter()
            .chain(std::iter::once(self.client_ca.as_deref()))
            .flatten()
    }
}
