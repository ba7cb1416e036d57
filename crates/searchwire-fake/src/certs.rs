//! Certificates made for a test: a throwaway CA and the server or client certificates it
//! signs, as PEM, and the atomic file replacement that certificate deployments use (so a
//! reload test sees what a secret volume or certbot's deploy hook produces).

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority made for one test.
pub struct TestCa {
    /// The CA's certificate, PEM: what a client or server trusts.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new self-signed CA whose common name is `name`.
    pub fn new(name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let pem = params.self_signed(&key)?.pem();
        Ok(TestCa {
            pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate for `localhost` and `127.0.0.1` signed by this CA, and its key, both PEM:
    /// for a client (`client`) or a server.
    pub fn leaf(&self, client: bool) -> Result<(String, String), rcgen::Error> {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// Writes `text` to `path` as a secret volume does: a new file renamed over the old one.
pub fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
