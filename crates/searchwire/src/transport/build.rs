//! [`ClientBuilder::build`]: the validated configuration becomes a [`Client`]. Here rather
//! than in `config`, so the configuration (plain data) does not import the client.

use std::time::Duration;

use crate::config::{timeout_override_from, ClientBuilder};
use crate::defaults;
use crate::message::error::Error;
use crate::transport::client::Client;

impl ClientBuilder {
    /// Validates the configuration and builds the client.
    pub fn build(self) -> Result<Client, Error> {
        let env = if self.read_env {
            env_timeout_override(|name| std::env::var(name))?
        } else {
            None
        };
        self.build_with_override(env)
    }

    pub(crate) fn build_with_override(
        self,
        env: Option<Option<Duration>>,
    ) -> Result<Client, Error> {
        let (b, addrs, headers, roots) = self.prepare(env)?;
        Client::from_parts(b, addrs, headers, roots)
    }

    /// Like `build_with_override`, with every validation and the real headers, but over
    /// the given connector (tests).
    #[cfg(test)]
    pub(crate) fn build_with_connector(
        self,
        env: Option<Option<Duration>>,
        connector: std::sync::Arc<dyn crate::http::connector::Connector>,
    ) -> Result<Client, Error> {
        let (b, addrs, headers, _roots) = self.prepare(env)?;
        Ok(Client::with_connector(b, addrs, headers, connector))
    }
}

/// The attempt-timeout override from the environment, read through `var`: the first of
/// `SEARCHWIRE_ATTEMPT_TIMEOUT`, `SEARCHWIRE_REQUEST_TIMEOUT` (its deprecated old name) and
/// `OPENSEARCH_GO_REQUEST_TIMEOUT` that is set wins. opensearch-go's variable names the same
/// per-attempt bound (reference 000: "`RequestTimeout` ... per-attempt ... can also be set
/// via `OPENSEARCH_GO_REQUEST_TIMEOUT`", in the same formats), so a deployment configured
/// for that client keeps its timeout; a `SEARCHWIRE_*` value, the more specific statement,
/// overrides it.
pub(crate) fn env_timeout_override(
    var: impl Fn(&str) -> Result<String, std::env::VarError>,
) -> Result<Option<Option<Duration>>, Error> {
    for name in [
        defaults::ATTEMPT_TIMEOUT_ENV,
        defaults::REQUEST_TIMEOUT_ENV,
        defaults::OPENSEARCH_GO_TIMEOUT_ENV,
    ] {
        match var(name) {
            Ok(v) => return timeout_override_from(name, Some(&v)),
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::config(format!(
                    "environment variable {name} is not valid UTF-8"
                )))
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod env_tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Option<Option<Duration>>, Error> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env_timeout_override(|name| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .ok_or(std::env::VarError::NotPresent)
        })
    }

    #[test]
    fn opensearch_go_request_timeout_is_read_as_an_alias_after_the_searchwire_names() {
        let secs = |n| Ok(Some(Some(Duration::from_secs(n))));
        assert_eq!(read(&[]).unwrap(), None);
        // opensearch-go's formats: a Go duration, integer seconds, fractional seconds.
        assert_eq!(
            read(&[("OPENSEARCH_GO_REQUEST_TIMEOUT", "5m")]).map_err(|e| e.to_string()),
            secs(300)
        );
        assert_eq!(
            read(&[("OPENSEARCH_GO_REQUEST_TIMEOUT", "45")]).map_err(|e| e.to_string()),
            secs(45)
        );
        assert_eq!(
            read(&[("OPENSEARCH_GO_REQUEST_TIMEOUT", "1.5")]).unwrap(),
            Some(Some(Duration::from_millis(1500)))
        );
        assert_eq!(
            read(&[("OPENSEARCH_GO_REQUEST_TIMEOUT", "0")]).unwrap(),
            Some(None)
        );
        // The searchwire names win, new name first.
        let both = [
            ("OPENSEARCH_GO_REQUEST_TIMEOUT", "5m"),
            ("SEARCHWIRE_REQUEST_TIMEOUT", "20s"),
        ];
        assert_eq!(read(&both).map_err(|e| e.to_string()), secs(20));
        let all = [
            ("OPENSEARCH_GO_REQUEST_TIMEOUT", "5m"),
            ("SEARCHWIRE_REQUEST_TIMEOUT", "20s"),
            ("SEARCHWIRE_ATTEMPT_TIMEOUT", "10s"),
        ];
        assert_eq!(read(&all).map_err(|e| e.to_string()), secs(10));
        // A malformed value is an error naming the variable it came from.
        let e = read(&[("OPENSEARCH_GO_REQUEST_TIMEOUT", "soon")]).unwrap_err();
        assert!(
            e.to_string().contains("OPENSEARCH_GO_REQUEST_TIMEOUT"),
            "{e}"
        );
        assert!(e.to_string().contains("soon"), "{e}");
    }
}
