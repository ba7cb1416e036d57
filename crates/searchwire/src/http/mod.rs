//! HTTP: node addresses and credentials, and the connector that sends one request.

pub(crate) mod addr;
pub(crate) mod connect_timeout;
pub(crate) mod connector;
pub(crate) mod conns;
pub(crate) mod gzip;
pub(crate) mod inflate;
pub(crate) mod send_error;
#[cfg(feature = "aws-sigv4")]
pub(crate) mod sigv4;
