//! How every subcommand that talks to a cluster reaches it: the connection flags, the
//! resolved credentials, and the client builder they make.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use searchwire::Client;

use crate::exit;
use crate::output;

/// Where the cluster is and how to authenticate: shared by every subcommand that talks to it.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    #[arg(
        long = "url",
        value_name = "URL[,URL...]",
        required = true,
        value_delimiter = ',',
        action = ArgAction::Append,
        help = "Node URLs, comma-separated; may be repeated (http(s)://[user:pass@]host[:port])"
    )]
    pub urls: Vec<String>,

    #[arg(
        long,
        value_name = "U",
        conflicts_with = "bearer",
        help = "Basic-auth user; needs --password (or SEARCHWIRE_PASSWORD)"
    )]
    pub user: Option<String>,

    #[arg(
        long,
        value_name = "P",
        requires = "user",
        help = "Basic-auth password; falls back to the environment variable \
                SEARCHWIRE_PASSWORD (safer: not visible in the process list). Never printed"
    )]
    pub password: Option<String>,

    #[arg(long, value_name = "TOKEN", help = "Send Authorization: Bearer TOKEN")]
    pub bearer: Option<String>,

    #[arg(
        long,
        value_name = "FILE",
        help = "Trust the CA certificate(s) in this PEM file (in addition to the system roots)"
    )]
    pub ca_cert: Option<PathBuf>,

    #[arg(
        long,
        value_name = "FILE",
        requires = "client_key",
        help = "Mutual TLS: present the client certificate in this PEM file (with --client-key)"
    )]
    pub client_cert: Option<PathBuf>,

    #[arg(
        long,
        value_name = "FILE",
        requires = "client_cert",
        help = "Mutual TLS: the private key (PEM) of --client-cert"
    )]
    pub client_key: Option<PathBuf>,

    #[cfg(feature = "aws-sigv4")]
    #[arg(
        long,
        value_name = "REGION[:SERVICE]",
        conflicts_with_all = ["user", "bearer"],
        help = "Sign every request with AWS SigV4 for Amazon OpenSearch Service (service es, \
                the default) or Serverless (aoss), e.g. eu-west-1:aoss. Credentials from \
                AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, else the profile \
                AWS_PROFILE (default) of ~/.aws/credentials and ~/.aws/config"
    )]
    pub aws_sigv4: Option<String>,

    #[arg(
        long,
        value_name = "HOW",
        value_parser = parse_selection,
        help = "How each attempt's node is chosen: latency (two random choices over each \
                node's latency estimate x attempts in flight) or round-robin (weighted, blind \
                to latency); `searchwire explain selection` describes both [default: latency]"
    )]
    pub selection: Option<searchwire::Selection>,
}

/// `--selection`: `latency` or `round-robin`.
fn parse_selection(s: &str) -> Result<searchwire::Selection, String> {
    s.parse()
}

/// How to authenticate, resolved from `--user`/`--password`/`SEARCHWIRE_PASSWORD`/`--bearer`.
pub enum Auth {
    None,
    Basic { user: String, password: String },
    Bearer(String),
}

/// A client builder for the cluster the connection flags name: URLs, credentials, CA,
/// node selection.
/// Errors (an unreadable CA file) are configuration errors (exit 2).
pub fn connect(conn: &ConnectArgs, auth: Auth) -> Result<searchwire::ClientBuilder, String> {
    let mut b = Client::builder().nodes(conn.urls.iter().map(|u| u.trim().to_string()));
    if let Some(selection) = conn.selection {
        b = b.selection(selection);
    }
    match auth {
        Auth::None => {}
        Auth::Basic { user, password } => b = b.basic_auth(user, password),
        Auth::Bearer(token) => b = b.bearer_auth(token),
    }
    #[cfg(feature = "aws-sigv4")]
    if let Some(spec) = &conn.aws_sigv4 {
        b = b.aws_sigv4(searchwire::AwsSigV4::from_spec(spec).map_err(|e| e.to_string())?);
    }
    if let Some(path) = &conn.ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read --ca-cert file {}: {e}", path.display()))?;
        b = b.ca_certificate_pem(pem);
    }
    if let (Some(cert), Some(key)) = (&conn.client_cert, &conn.client_key) {
        let read = |flag: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| format!("cannot read {flag} file {}: {e}", path.display()))
        };
        b = b.client_certificate_pem(read("--client-cert", cert)?, read("--client-key", key)?);
    }
    Ok(b)
}

/// Starts the metrics endpoint (if asked) and then builds the command's client, so the
/// client's metrics are described to the recorder. A failure of either is a usage error
/// (exit 2), already reported on stderr.
pub fn start(
    metrics_addr: Option<std::net::SocketAddr>,
    build: impl FnOnce() -> Result<Client, String>,
) -> Result<Client, u8> {
    if let Some(addr) = metrics_addr {
        if let Err(e) = crate::metrics::serve(addr) {
            output::error_message(&e);
            return Err(exit::USAGE);
        }
    }
    build().map_err(|e| {
        output::error_message(&e);
        exit::USAGE
    })
}
