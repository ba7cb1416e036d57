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
        let mut env = None;
        if self.read_env {
            // The new name first; the deprecated old one still works for one release.
            for name in [defaults::ATTEMPT_TIMEOUT_ENV, defaults::REQUEST_TIMEOUT_ENV] {
                match std::env::var(name) {
                    Ok(v) => {
                        env = timeout_override_from(name, Some(&v))?;
                        break;
                    }
                    Err(std::env::VarError::NotPresent) => {}
                    Err(std::env::VarError::NotUnicode(_)) => {
                        return Err(Error::config(format!(
                            "environment variable {name} is not valid UTF-8"
                        )))
                    }
                }
            }
        }
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
