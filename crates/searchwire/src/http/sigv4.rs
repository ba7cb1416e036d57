//! AWS Signature Version 4 for Amazon OpenSearch Service (`es`) and OpenSearch Serverless
//! (`aoss`); feature `aws-sigv4`.
//!
//! Signing is a [`Connector`] wrapped around the real one, so it is the last step before
//! the bytes leave: every attempt (a retry too) and every background request (health
//! checks, capability probes, discovery, resurrection checks) is signed at the moment it is
//! sent, with that moment's `X-Amz-Date`. The body's SHA-256 is signed and sent as
//! `x-amz-content-sha256` (Serverless requires it).
//!
//! Credentials are read once, at `build()`: from `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, else from the profile `AWS_PROFILE`
//! (default `default`) of the shared files `~/.aws/credentials` and `~/.aws/config`
//! (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`). Nothing else of the AWS SDK's chain
//! (SSO, instance metadata, `credential_process`) is read: `aws-config` would bring a second
//! HTTP stack for it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::Full;

use crate::classify::OutcomeKind;
use crate::http::addr::NodeAddr;
use crate::http::connector::{Connector, SendError, SendFuture};
use crate::message::error::Error;

/// AWS credentials for SigV4. Their `Debug` shows the access key id only.
#[derive(Clone)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl AwsCredentials {
    /// Credentials given directly (a session token for temporary credentials).
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> AwsCredentials {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: session_token.filter(|t| !t.is_empty()),
        }
    }

    /// The access key id (not secret; it names the key in AWS logs).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// Reads the credentials the way the AWS CLI does for static keys: the environment
    /// variables `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), else
    /// the profile `AWS_PROFILE` (or `default`) in `AWS_SHARED_CREDENTIALS_FILE` (default
    /// `~/.aws/credentials`), then in `AWS_CONFIG_FILE` (default `~/.aws/config`).
    pub fn from_environment() -> Result<AwsCredentials, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let home = var("HOME").map(PathBuf::from);
        let aws_file = |env: &str, name: &str| {
            var(env)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
        };
        credentials_from(
            var("AWS_ACCESS_KEY_ID"),
            var("AWS_SECRET_ACCESS_KEY"),
            var("AWS_SESSION_TOKEN"),
            var("AWS_PROFILE"),
            aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
            aws_file("AWS_CONFIG_FILE", "config"),
        )
    }
}

/// The precedence of [`AwsCredentials::from_environment`], over given values and files.
fn credentials_from(
    key_id: Option<String>,
    secret: Option<String>,
    token: Option<String>,
    profile: Option<String>,
    credentials_file: Option<PathBuf>,
    config_file: Option<PathBuf>,
) -> Result<AwsCredentials, Error> {
    match (key_id, secret) {
        (Some(id), Some(secret)) => return Ok(AwsCredentials::new(id, secret, token)),
        (Some(_), None) => {
            return Err(Error::config(
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both (or neither, to use a profile)",
            ))
        }
        (None, Some(_)) => {
            return Err(Error::config(
                "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not; set both (or neither, to use a profile)",
            ))
        }
        (None, None) => {}
    }
    let profile = profile.unwrap_or_else(|| "default".to_string());
    // In the credentials file a section is `[name]`; in the config file `[profile name]`
    // (and `[default]`).
    let config_section = if profile == "default" {
        profile.clone()
    } else {
        format!("profile {profile}")
    };
    let mut looked = Vec::new();
    for (file, section) in [(credentials_file, &profile), (config_file, &config_section)] {
        let Some(file) = file else { continue };
        looked.push(file.display().to_string());
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::config(format!(
                    "cannot read the AWS file {}: {e}",
                    file.display()
                )))
            }
        };
        if let Some(c) = profile_credentials(&text, section, &file)? {
            return Ok(c);
        }
    }
    Err(Error::config(format!(
        "no AWS credentials for SigV4: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or put aws_access_key_id and aws_secret_access_key in profile {profile:?} of {} (AWS_PROFILE chooses the profile)",
        if looked.is_empty() { "~/.aws/credentials".to_string() } else { looked.join(" or ") }
    )))
}

/// The static keys of `section` in an AWS INI file: `None` when the section is absent or
/// has no `aws_access_key_id`. Errors never quote a line (it may hold a secret).
pub(crate) fn profile_credentials(
    text: &str,
    section: &str,
    file: &Path,
) -> Result<Option<AwsCredentials>, Error> {
    let mut inside = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            inside = name == section;
            continue;
        }
        if !inside {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim().to_string();
        match k.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = Some(v),
            "aws_secret_access_key" => secret = Some(v),
            "aws_session_token" => token = Some(v),
            _ => {}
        }
    }
    match (id, secret) {
        (Some(id), Some(secret)) if !id.is_empty() && !secret.is_empty() => {
            Ok(Some(AwsCredentials::new(id, secret, token)))
        }
        (Some(_), _) => Err(Error::config(format!(
            "profile [{section}] of {} has aws_access_key_id but no aws_secret_access_key; add it",
            file.display()
        ))),
        _ => Ok(None),
    }
}

/// Where and as what to sign: the region, the service (`es` for Amazon OpenSearch
/// Service, `aoss` for OpenSearch Serverless) and the credentials.
#[derive(Clone)]
pub struct AwsSigV4 {
    region: String,
    service: String,
    credentials: AwsCredentials,
    /// The signing time; the system clock unless a test injects one.
    clock: Arc<dyn Fn() -> SystemTime + Send + Sync>,
}

impl fmt::Debug for AwsSigV4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsSigV4")
            .field("region", &self.region)
            .field("service", &self.service)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl AwsSigV4 {
    /// Signs for `service` (`es` or `aoss`) in `region` (e.g. `eu-west-1`) with
    /// `credentials`.
    pub fn new(
        region: impl Into<String>,
        service: impl Into<String>,
        credentials: AwsCredentials,
    ) -> AwsSigV4 {
        AwsSigV4 {
            region: region.into(),
            service: service.into(),
            credentials,
            clock: Arc::new(crate::clock::system_now),
        }
    }

    /// Parses `REGION[:SERVICE]` (the CLI's `--aws-sigv4`; the service defaults to `es`)
    /// and reads the credentials with [`AwsCredentials::from_environment`].
    pub fn from_spec(spec: &str) -> Result<AwsSigV4, Error> {
        let (region, service) = parse_spec(spec)?;
        Ok(AwsSigV4::new(
            region,
            service,
            AwsCredentials::from_environment()?,
        ))
    }

    /// The region signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The service signed for.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Signs with times from `clock` instead of the system clock (tests).
    #[doc(hidden)]
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Checked at `build()`: a region and a service that can be signed for.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        parse_spec(&format!("{}:{}", self.region, self.service)).map(|_| ())
    }

    /// Signs `req` as it will be sent: sets `host`, `x-amz-date`,
    /// `x-amz-content-sha256`, `x-amz-security-token` (temporary credentials) and
    /// `authorization`.
    pub(crate) fn sign(&self, req: &mut http::Request<Full<Bytes>>) -> Result<(), String> {
        use aws_sigv4::http_request::{
            sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
        };
        // The signature covers the Host header; set it as hyper would send it, so what is
        // signed is what goes on the wire.
        if let Some(host) = crate::http::addr::host_header(req.uri()) {
            req.headers_mut().insert(http::header::HOST, host);
        }
        if let Some(uri) = canonical_query_uri(req.uri()) {
            *req.uri_mut() = uri;
        }
        let body = body_bytes(req.body());
        let credentials = aws_credential_types::Credentials::new(
            &self.credentials.access_key_id,
            &self.credentials.secret_access_key,
            self.credentials.session_token.clone(),
            None,
            "searchwire",
        );
        let identity = credentials.into();
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time((self.clock)())
            .settings(settings)
            .build()
            .map_err(|e| format!("AWS SigV4 signing parameters: {e}"))?
            .into();
        let uri = req.uri().to_string();
        // A header value that is not text cannot be signed; it is sent unsigned (and the
        // service will say the signature does not match).
        let headers = req
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
        let signable = SignableRequest::new(
            req.method().as_str(),
            uri,
            headers,
            SignableBody::Bytes(&body),
        )
        .map_err(|e| format!("AWS SigV4 cannot sign this request: {e}"))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| format!("AWS SigV4 signing failed: {e}"))?
            .into_parts();
        instructions.apply_to_request_http1x(req);
        for name in ["authorization", "x-amz-security-token"] {
            if let Some(v) = req.headers_mut().get_mut(name) {
                v.set_sensitive(true);
            }
        }
        Ok(())
    }
}

/// `REGION[:SERVICE]` → (region, service); the service defaults to `es`.
fn parse_spec(spec: &str) -> Result<(String, String), Error> {
    let (region, service) = match spec.split_once(':') {
        Some((r, s)) => (r.trim(), s.trim()),
        None => (spec.trim(), "es"),
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !token(region) {
        return Err(Error::config(format!(
            "AWS SigV4 region {} is not a region name; give one like eu-west-1 (REGION[:SERVICE])",
            crate::echo::echo(region)
        )));
    }
    if !token(service) {
        return Err(Error::config(format!(
            "AWS SigV4 service {} is not a service name; use es (Amazon OpenSearch Service) or aoss (OpenSearch Serverless)",
            crate::echo::echo(service)
        )));
    }
    Ok((region.to_string(), service.to_string()))
}

/// Bytes a SigV4 canonical query leaves as they are: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The same URI with its query re-encoded the way SigV4 canonicalizes it (`%20`, not
/// `+`, for a space; every byte but the unreserved ones escaped), so the query on the wire
/// is the one signed, whichever way the service decodes it. `None` without a query.
fn canonical_query_uri(uri: &http::Uri) -> Option<http::Uri> {
    let query = uri.query()?;
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string();
    let canonical = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| format!("{}={}", enc(&k), enc(&v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = format!("{}?{canonical}", uri.path()).parse().ok();
    http::Uri::from_parts(parts).ok()
}

/// The bytes of a request body. A `Full` yields its one frame at once.
fn body_bytes(body: &Full<Bytes>) -> Bytes {
    use hyper::body::Body;
    let mut body = body.clone();
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

/// The connector that signs each request, then hands it to the real one.
pub(crate) struct Signing {
    pub(crate) inner: Arc<dyn Connector>,
    pub(crate) signer: AwsSigV4,
}

impl Connector for Signing {
    fn send(&self, node: &NodeAddr, mut req: http::Request<Full<Bytes>>) -> SendFuture {
        // A request sent without the client's credentials is not signed either.
        if req
            .extensions()
            .get::<crate::message::request::WithoutClientCredentials>()
            .is_some()
        {
            return self.inner.send(node, req);
        }
        match self.signer.sign(&mut req) {
            Ok(()) => self.inner.send(node, req),
            // Nothing was sent, and nothing is wrong with the node: the request is
            // abandoned with the reason.
            Err(reason) => Box::pin(async move {
                Err(SendError {
                    kind: OutcomeKind::Cancelled,
                    source: reason.into(),
                })
            }),
        }
    }

    fn reset(&self, node: &NodeAddr) {
        self.inner.reset(node);
    }

    fn after(&self, node: &NodeAddr, kind: OutcomeKind) {
        self.inner.after(node, kind);
    }
}

/// The connector a client uses: `inner`, signing first when SigV4 is configured.
pub(crate) fn wrap(inner: Arc<dyn Connector>, signer: Option<&AwsSigV4>) -> Arc<dyn Connector> {
    match signer {
        Some(signer) => Arc::new(Signing {
            inner,
            signer: signer.clone(),
        }),
        None => inner,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn signer() -> AwsSigV4 {
        AwsSigV4::new(
            "eu-west-1",
            "aoss",
            AwsCredentials::new("AKIDEXAMPLE", "SECRET/KEY+x", Some("TOKEN123".into())),
        )
    }

    #[test]
    fn debug_never_shows_the_secret_or_the_token() {
        let shown = format!("{:?}", signer());
        assert!(shown.contains("AKIDEXAMPLE"), "{shown}");
        assert!(!shown.contains("SECRET/KEY"), "{shown}");
        assert!(!shown.contains("TOKEN123"), "{shown}");
    }

    #[test]
    fn signing_sets_host_date_body_hash_token_and_sensitive_authorization() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let s = signer().with_clock(move || at);
        let mut req = http::Request::new(Full::new(Bytes::from_static(b"{\"a\":1}")));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = "http://127.0.0.1:9200/idx/_doc?refresh=true"
            .parse()
            .unwrap();
        s.sign(&mut req).unwrap();
        let h = req.headers();
        assert_eq!(h["host"], "127.0.0.1:9200");
        assert_eq!(h["x-amz-date"], "20231114T221320Z");
        // sha256 of {"a":1}
        assert_eq!(
            h["x-amz-content-sha256"],
            "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
        );
        assert_eq!(h["x-amz-security-token"], "TOKEN123");
        let auth = h["authorization"].to_str().unwrap();
        assert!(auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20231114/eu-west-1/aoss/aws4_request"
        ));
        assert!(h["authorization"].is_sensitive());
        assert!(h["x-amz-security-token"].is_sensitive());
        assert!(!auth.contains("SECRET"));
    }

    #[test]
    fn the_query_is_sent_in_its_canonical_form() {
        let u: http::Uri = "http://h:1/p?q=a+b%3Ac&x=%2A%7E-_.&empty=".parse().unwrap();
        assert_eq!(
            canonical_query_uri(&u).unwrap().to_string(),
            "http://h:1/p?q=a%20b%3Ac&x=%2A~-_.&empty="
        );
        assert!(canonical_query_uri(&"http://h:1/p".parse().unwrap()).is_none());
    }

    #[test]
    fn default_ports_are_left_out_of_the_host_header() {
        let h = |u: &str| crate::http::addr::host_header(&u.parse().unwrap()).unwrap();
        assert_eq!(
            h("https://search-x.eu-west-1.es.amazonaws.com:443/"),
            "search-x.eu-west-1.es.amazonaws.com"
        );
        assert_eq!(h("http://h:80/"), "h");
        assert_eq!(h("https://h:9200/"), "h:9200");
    }

    #[test]
    fn specs_parse_and_bad_ones_say_what_to_give() {
        assert_eq!(
            parse_spec("eu-west-1").unwrap(),
            ("eu-west-1".into(), "es".into())
        );
        assert_eq!(
            parse_spec("us-east-1:aoss").unwrap(),
            ("us-east-1".into(), "aoss".into())
        );
        for bad in [
            "",
            ":es",
            "eu-west-1:",
            "EU WEST:es",
            "eu-west-1:es\u{1b}[2J",
        ] {
            let e = parse_spec(bad).unwrap_err().to_string();
            assert!(e.contains("AWS SigV4"), "{e}");
            assert!(!e.contains('\u{1b}'), "{e}");
        }
    }

    #[test]
    fn environment_keys_win_then_the_profile_in_the_credentials_then_the_config_file() {
        let dir = std::env::temp_dir().join(format!("sw-aws-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let creds = dir.join("credentials");
        let config = dir.join("config");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n[prod]\n# c\naws_access_key_id=PROD\naws_secret_access_key=prodsecret\naws_session_token=prodtoken\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "[profile other]\nregion = eu-west-1\naws_access_key_id = OTHER\naws_secret_access_key = othersecret\n",
        )
        .unwrap();
        let get = |id: Option<&str>, secret: Option<&str>, profile: Option<&str>| {
            credentials_from(
                id.map(String::from),
                secret.map(String::from),
                None,
                profile.map(String::from),
                Some(creds.clone()),
                Some(config.clone()),
            )
        };
        assert_eq!(
            get(Some("ENV"), Some("s"), Some("prod"))
                .unwrap()
                .access_key_id(),
            "ENV"
        );
        assert_eq!(get(None, None, None).unwrap().access_key_id(), "DEF");
        let prod = get(None, None, Some("prod")).unwrap();
        assert_eq!(prod.access_key_id(), "PROD");
        assert_eq!(prod.session_token.as_deref(), Some("prodtoken"));
        assert_eq!(
            get(None, None, Some("other")).unwrap().access_key_id(),
            "OTHER"
        );
        let missing = get(None, None, Some("nope")).unwrap_err().to_string();
        assert!(
            missing.contains("\"nope\"") && missing.contains("AWS_ACCESS_KEY_ID"),
            "{missing}"
        );
        let half = get(Some("ENV"), None, None).unwrap_err().to_string();
        assert!(half.contains("AWS_SECRET_ACCESS_KEY is not"), "{half}");
        std::fs::write(&creds, "[default]\naws_access_key_id = X\n").unwrap();
        let e = get(None, None, None).unwrap_err().to_string();
        assert!(e.contains("no aws_secret_access_key"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A clock that moves one second further at every reading.
    fn ticking() -> impl Fn() -> SystemTime + Send + Sync + 'static {
        let n = std::sync::atomic::AtomicU64::new(0);
        move || {
            let k = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000 + k)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_attempt_and_every_check_is_signed_afresh() {
        use crate::testing::{client, Scripted, Step};
        let c = Scripted::default();
        // Each node throttles its first search: the request succeeds on its third attempt.
        c.push_path(1, "/idx/_search", Step::Status(429));
        c.push_path(2, "/idx/_search", Step::Status(429));
        let cl = client(2, &c, |b| b.aws_sigv4(signer().with_clock(ticking())));
        let r = cl
            .send(crate::Request::post("/idx/_search").body(Bytes::from_static(b"{}")))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.attempts().len(), 3);
        let _ = cl.check_all().await;
        let sent = c.sent();
        let search: Vec<_> = sent.iter().filter(|s| s.target == "/idx/_search").collect();
        assert_eq!(search.len(), 3);
        let mut dates: Vec<_> = search
            .iter()
            .map(|s| s.headers["x-amz-date"].clone())
            .collect();
        let mut sigs: Vec<_> = search
            .iter()
            .map(|s| s.headers["authorization"].clone())
            .collect();
        dates.dedup();
        sigs.dedup();
        assert_eq!(dates.len(), 3, "each retry gets a new X-Amz-Date");
        assert_eq!(sigs.len(), 3, "and so a new signature");
        // Every request that left, user or background, carries a signature of its own.
        let checks = sent.iter().filter(|s| s.target != "/idx/_search").count();
        assert!(checks >= 2, "the health checks went out: {sent:?}");
        let mut all_dates = Vec::new();
        for s in &sent {
            let auth = s
                .headers
                .get("authorization")
                .expect("signed")
                .to_str()
                .unwrap();
            assert!(auth.starts_with("AWS4-HMAC-SHA256 "), "{auth}");
            assert!(s.headers.contains_key("x-amz-content-sha256"));
            all_dates.push(s.headers["x-amz-date"].clone());
        }
        all_dates.dedup();
        assert_eq!(
            all_dates.len(),
            sent.len(),
            "each request signed at its own time"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_client_credentials_is_sent_unsigned_with_its_own() {
        use crate::testing::{client, Scripted};
        let c = Scripted::default();
        let cl = client(1, &c, |b| b.aws_sigv4(signer().with_clock(ticking())));
        cl.send(
            crate::Request::get("/theirs")
                .header("Authorization", "Bearer theirs")
                .without_client_credentials(),
        )
        .await
        .unwrap();
        cl.send(crate::Request::get("/ours")).await.unwrap();
        let sent = c.sent();
        let theirs = sent.iter().find(|s| s.target == "/theirs").unwrap();
        assert_eq!(theirs.headers["authorization"], "Bearer theirs");
        assert!(!theirs.headers.contains_key("x-amz-date"), "not signed");
        let ours = sent.iter().find(|s| s.target == "/ours").unwrap();
        let auth = ours.headers["authorization"].to_str().unwrap();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 "), "{auth}");
    }

    #[test]
    fn sigv4_with_other_credentials_fails_build_without_echoing_them() {
        let c = crate::testing::Scripted::default();
        for b in [
            crate::Client::builder()
                .basic_auth("u", "pw-secret")
                .node("http://h:9201"),
            crate::Client::builder().node("http://u:pw-secret@h:9200"),
            crate::Client::builder()
                .header("Authorization", "Bearer pw-secret")
                .node("http://h:9201"),
        ] {
            let e = b
                .aws_sigv4(signer())
                .read_environment(false)
                .build_with_connector(None, Arc::new(c.clone()))
                .unwrap_err();
            let e = e.to_string();
            assert!(e.contains("AWS SigV4"), "{e}");
            assert!(!e.contains("pw-secret"), "{e}");
        }
    }
}
