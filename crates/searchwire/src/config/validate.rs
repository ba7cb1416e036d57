//! The checks [`ClientBuilder::build`](crate::ClientBuilder::build) runs: every setting,
//! the node URLs, the headers and the CA certificates, each mistake an error naming it.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::ClientBuilder;
use crate::http::addr::{Credentials, NodeAddr};
use crate::message::error::Error;

impl ClientBuilder {
    /// Validates everything; returns the builder, the parsed seed addresses, the default
    /// headers (user agent, credentials, custom headers) and the extra CA roots.
    #[allow(clippy::type_complexity)]
    pub(crate) fn prepare(
        mut self,
        env: Option<Option<Duration>>,
    ) -> Result<
        (
            ClientBuilder,
            Vec<NodeAddr>,
            HeaderMap,
            Vec<rustls::pki_types::CertificateDer<'static>>,
        ),
        Error,
    > {
        if let Some(o) = env {
            self.attempt_timeout = o;
        }
        if self.nodes.is_empty() {
            return Err(Error::config(
                "no node URL given; add at least one with ClientBuilder::node (e.g. http://localhost:9200)",
            ));
        }
        let mut addrs: Vec<NodeAddr> = Vec::new();
        let mut in_urls: Vec<Option<Credentials>> = Vec::new();
        for raw in &self.nodes {
            let (addr, creds) = NodeAddr::parse(raw)?;
            if addrs.contains(&addr) {
                return Err(Error::config(format!("node {addr} is listed twice")));
            }
            addrs.push(addr);
            in_urls.push(creds);
        }
        if let Some(c) = url_credentials(&addrs, in_urls, self.credentials.is_some())? {
            self.credentials = Some(c);
        }
        #[cfg(feature = "aws-sigv4")]
        if let Some(signing) = &self.aws_sigv4 {
            signing.validate()?;
            if self.credentials.is_some()
                || self
                    .headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            {
                return Err(Error::config(
                    "AWS SigV4 signing sets the Authorization header itself; remove the basic/bearer credentials (or the user:password in the URL, or the Authorization header)",
                ));
            }
        }
        for s in &self.retry.retry_on_status {
            if !(400..=599).contains(s) {
                return Err(Error::config(format!(
                    "retry_on_status contains {s}; only 4xx and 5xx statuses can be retried"
                )));
            }
        }
        if self.attempt_timeout.is_some_and(|d| d.is_zero()) {
            return Err(Error::config(
                "attempt_timeout must be positive; use no_attempt_timeout() to disable it",
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::config("connect_timeout must be positive"));
        }
        if self.selection_decay.is_zero() {
            return Err(Error::config(
                "selection_decay must be positive (it is how fast latency estimates forget)",
            ));
        }
        if self.max_response_bytes == 0 {
            return Err(Error::config(
                "max_response_bytes must be positive (even an error answer has a body)",
            ));
        }
        if self.health_timeout.is_zero() {
            return Err(Error::config("health_check_timeout must be positive"));
        }
        let jitter = self.reprobe.jitter;
        if !jitter.is_finite() || !(0.0..1.0).contains(&jitter) {
            return Err(Error::config(format!(
                "health_check_jitter must be a fraction from 0 to below 1 (got {jitter})"
            )));
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return Err(Error::config("deadline must be positive"));
        }
        if self.discovery.interval.is_some_and(|d| d.is_zero()) {
            return Err(Error::config(
                "discover_interval must be positive; leave it unset to disable periodic discovery",
            ));
        }
        if self.discovery.max_nodes == 0 {
            return Err(Error::config(
                "discover_max_nodes must be at least 1 (leave discovery off to use the seed URLs only)",
            ));
        }
        if self.discovery.timeout.is_zero() {
            return Err(Error::config("discovery_timeout must be positive"));
        }
        if let Some(b) = &self.budget {
            b.validate().map_err(Error::config)?;
        }
        if let Some(b) = &self.breaker {
            b.validate().map_err(Error::config)?;
        }
        if let Some(h) = &self.hedging {
            h.validate().map_err(Error::config)?;
        }
        if let Some(l) = &self.adaptive_concurrency {
            l.validate().map_err(Error::config)?;
        }
        self.class_backoff.validate().map_err(Error::config)?;
        self.adaptive_jitter.validate().map_err(Error::config)?;
        self.resurrection
            .validate()
            .map_err(|e| Error::config(format!("invalid resurrection schedule: {e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(concat!("searchwire/", env!("CARGO_PKG_VERSION"))),
        );
        for (k, v) in &self.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                Error::config(format!(
                    "default header name {} is not valid",
                    crate::echo::echo(k)
                ))
            })?;
            let mut value = HeaderValue::from_str(v).map_err(|_| {
                Error::config(format!(
                    "default header {} has a value that is not valid in HTTP",
                    crate::echo::echo(k)
                ))
            })?;
            if crate::message::request::is_secret_header(&name) {
                value.set_sensitive(true);
            }
            headers.insert(name, value);
        }
        if let Some(c) = &self.credentials {
            headers.insert(http::header::AUTHORIZATION, c.header_value()?);
        }
        let mut roots = Vec::new();
        for pem in &self.ca_pem {
            use rustls::pki_types::pem::PemObject;
            let mut n = 0;
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                let cert = cert
                    .map_err(|e| Error::config(format!("CA certificate PEM is malformed: {e}")))?;
                roots.push(cert);
                n += 1;
            }
            if n == 0 {
                return Err(Error::config(
                    "CA certificate PEM contains no CERTIFICATE block; pass the CA's PEM file",
                ));
            }
        }
        if let Some(identity) = &self.client_identity {
            identity.parse()?;
        }
        Ok((self, addrs, headers, roots))
    }
}

/// The credentials the node URLs carry, checked: one set of credentials per client, sent
/// to every node (seed and discovered). So URLs carrying userinfo must all carry the same,
/// and none may be missing it, and it may not be combined with
/// `basic_auth`/`bearer_auth`: otherwise one URL's credentials would be sent to hosts they
/// were not written for, or another URL's silently ignored. The errors name the nodes,
/// never the secrets.
fn url_credentials(
    addrs: &[NodeAddr],
    in_urls: Vec<Option<Credentials>>,
    explicit: bool,
) -> Result<Option<Credentials>, Error> {
    let mut first: Option<(usize, Credentials)> = None;
    for (i, c) in in_urls.iter().enumerate() {
        let Some(c) = c else { continue };
        match &first {
            None => first = Some((i, c.clone())),
            Some((j, f)) if !f.same_as(c) => {
                return Err(Error::config(format!(
                    "nodes {} and {} carry different credentials in their URLs; searchwire sends one set of credentials to every node — give the same user:password in every URL, or none in the URLs and use basic_auth (--user/--password)",
                    addrs[*j], addrs[i]
                )))
            }
            Some(_) => {}
        }
    }
    let Some((j, creds)) = first else {
        return Ok(None);
    };
    if let Some(i) = in_urls.iter().position(Option::is_none) {
        return Err(Error::config(format!(
            "node {} carries credentials in its URL but node {} does not; searchwire sends one set of credentials to every node — put the same user:password in every URL, or none in the URLs and use basic_auth (--user/--password)",
            addrs[j], addrs[i]
        )));
    }
    if explicit {
        return Err(Error::config(format!(
            "node {} carries credentials in its URL and basic_auth/bearer_auth (--user/--password/--bearer) is set too; give the credentials once",
            addrs[j]
        )));
    }
    Ok(Some(creds))
}
