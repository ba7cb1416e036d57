//! A node's address (parsed and validated once) and its credentials.

use std::fmt;

use bytes::Bytes;

use http::HeaderValue;

use crate::message::error::Error;

/// Credentials sent with every request (user requests and background checks alike).
#[derive(Clone)]
pub enum Credentials {
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

impl Credentials {
    /// The `Authorization` header value, marked sensitive so HTTP stacks never log it.
    pub(crate) fn header_value(&self) -> Result<HeaderValue, Error> {
        let raw = match self {
            Credentials::Basic { username, password } => {
                format!(
                    "Basic {}",
                    base64_encode(format!("{username}:{password}").as_bytes())
                )
            }
            Credentials::Bearer(t) => format!("Bearer {t}"),
        };
        let mut v = HeaderValue::from_str(&raw).map_err(|_| {
            Error::config("credentials contain characters that cannot be sent in an HTTP header")
        })?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl Credentials {
    /// Whether two sets of credentials are the same (no `PartialEq`, so that secrets are
    /// compared only where this is called on purpose).
    pub(crate) fn same_as(&self, other: &Credentials) -> bool {
        match (self, other) {
            (
                Credentials::Basic { username, password },
                Credentials::Basic {
                    username: u,
                    password: p,
                },
            ) => username == u && password == p,
            (Credentials::Bearer(a), Credentials::Bearer(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// Standard base64 (RFC 4648) with padding; the only use is the basic-auth header.
fn base64_encode(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A node's validated address: scheme, host, port and optional path prefix. Credentials
/// embedded in the URL are split off; the address's `Display` never shows them.
///
/// Two addresses are equal when their URLs are. Clones share the node's connection pool.
#[derive(Clone)]
pub struct NodeAddr {
    scheme: String,
    host: String,
    port: u16,
    prefix: String,
    display: std::sync::Arc<str>,
    /// `scheme://host:port` already parsed, so building an attempt's URI parses only its
    /// path and query (`None` if the origin does not parse: then [`NodeAddr::uri`] parses
    /// the whole string, as before, and reports the error).
    origin: Option<std::sync::Arc<Origin>>,
    /// This node's keep-alive connection pool, created on first use by the connector and
    /// dropped by `Connector::reset`. Lives with the address so the send path needs no
    /// shared map and no lock.
    pub(crate) conn: std::sync::Arc<crate::http::conns::ConnSlot>,
}

impl PartialEq for NodeAddr {
    fn eq(&self, other: &NodeAddr) -> bool {
        self.display == other.display
    }
}

impl Eq for NodeAddr {}

impl std::hash::Hash for NodeAddr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.display.hash(state);
    }
}

impl NodeAddr {
    /// Parses `http(s)://[user:pass@]host[:port][/prefix]`. Returns the address and the
    /// credentials found in the URL, if any. The default port is 9200 when none is given,
    /// as for every OpenSearch client.
    pub fn parse(input: &str) -> Result<(NodeAddr, Option<Credentials>), Error> {
        let trimmed = input.trim();
        let with_scheme = if trimmed.contains("://") {
            trimmed.to_string()
        } else {
            format!("http://{trimmed}")
        };
        let url = url::Url::parse(&with_scheme).map_err(|e| {
            Error::config(format!(
                "node URL {} is not valid ({e}); expected http(s)://host[:port][/prefix]",
                shown_url(trimmed)
            ))
        })?;
        let scheme = url.scheme().to_string();
        if scheme != "http" && scheme != "https" {
            return Err(Error::config(format!(
                "node URL {} has scheme {}; only http and https are supported",
                shown_url(trimmed),
                crate::echo::echo(&scheme)
            )));
        }
        let host = match url.host() {
            Some(url::Host::Ipv6(a)) => format!("[{a}]"),
            Some(h) => h.to_string(),
            None => {
                return Err(Error::config(format!(
                    "node URL {} has no host",
                    shown_url(trimmed)
                )))
            }
        };
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::config(format!(
                "node URL {} must not have a query or fragment",
                shown_url(trimmed)
            )));
        }
        // Without an explicit port, OpenSearch's 9200 (as every OpenSearch client does);
        // an explicit port is kept even when it is the scheme's default (`https://h:443`),
        // which the URL parser reports as "no port".
        let port = match url.port() {
            Some(p) => p,
            None if has_explicit_port(&with_scheme) => url.port_or_known_default().unwrap_or(9200),
            None => 9200,
        };
        let prefix = url.path().trim_end_matches('/').to_string();
        // `https//user:PW@host` (a scheme typo) parses as host `https` with the path
        // prefix `//user:PW@host`: the password would be sent as a path on every request
        // and shown in every log line. A path prefix never holds `@` or starts with `//`.
        if prefix.contains('@') || prefix.starts_with("//") {
            return Err(Error::config(format!(
                "node URL {} has a path prefix that looks like a host or credentials; \
                 is the scheme mistyped? write it as http(s)://[user:password@]host[:port][/prefix]",
                shown_url(trimmed)
            )));
        }
        let creds = if !url.username().is_empty() || url.password().is_some() {
            // Userinfo is percent-encoded (RFC 3986); `+` and `&` are literal characters
            // there, unlike in form encoding.
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            Some(Credentials::Basic {
                username: decode(url.username()),
                password: decode(url.password().unwrap_or("")),
            })
        } else {
            None
        };
        let display = format!("{scheme}://{host}:{port}{prefix}");
        Ok((
            NodeAddr {
                origin: parse_origin(&scheme, &host, port),
                scheme,
                host,
                port,
                prefix,
                display: display.into(),
                conn: Default::default(),
            },
            creds,
        ))
    }

    /// Builds an address from parts (used by discovery, which keeps the seed's scheme).
    pub(crate) fn from_parts(scheme: &str, host: &str, port: u16, prefix: &str) -> NodeAddr {
        let display = format!("{scheme}://{host}:{port}{prefix}");
        NodeAddr {
            scheme: scheme.to_string(),
            host: host.to_string(),
            port,
            prefix: prefix.to_string(),
            display: display.into(),
            origin: parse_origin(scheme, host, port),
            conn: Default::default(),
        }
    }

    /// The `Host` header of a request to this node, exactly as hyper would add it (made
    /// once, so hyper finds it set and formats none per request).
    pub(crate) fn host_header(&self) -> Option<&http::HeaderValue> {
        self.origin.as_ref().and_then(|o| o.host.as_ref())
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// Host name or IP (IPv6 in brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Path prefix without a trailing slash (empty when none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URL without credentials, e.g. `http://127.0.0.1:9201`.
    pub fn as_str(&self) -> &str {
        &self.display
    }

    /// The URL without credentials, shared (no allocation).
    pub(crate) fn shared(&self) -> std::sync::Arc<str> {
        std::sync::Arc::clone(&self.display)
    }

    /// The full URI for a path and an already-encoded query string.
    pub(crate) fn uri(&self, path: &str, query: &str) -> Result<http::Uri, Error> {
        // The hot path: the origin is parsed once; the last few URIs built for this node
        // are reused when the same path and query come again (most traffic repeats a few
        // paths); otherwise only the path and query are parsed here.
        if let Some(origin) = &self.origin {
            if path.starts_with('/') {
                if let Some(uri) = origin.cached(&self.prefix, path, query) {
                    return Ok(uri);
                }
                let sep = usize::from(!query.is_empty());
                // Exact capacity: the bytes are then taken over without a second allocation.
                let mut s =
                    String::with_capacity(self.prefix.len() + path.len() + sep + query.len());
                s.push_str(&self.prefix);
                push_path_and_query(&mut s, path, query);
                if let Ok(pq) = http::uri::PathAndQuery::from_maybe_shared(Bytes::from(s)) {
                    let mut parts = http::uri::Parts::default();
                    parts.scheme = Some(origin.scheme.clone());
                    parts.authority = Some(origin.authority.clone());
                    parts.path_and_query = Some(pq);
                    if let Ok(uri) = http::Uri::from_parts(parts) {
                        origin.remember(&uri);
                        return Ok(uri);
                    }
                }
            }
        }
        // Anything unusual (a path without a leading `/`, characters a URI cannot hold):
        // the whole string, parsed as before, so the result and the error are unchanged.
        let mut s = String::with_capacity(self.display.len() + path.len() + query.len() + 1);
        s.push_str(&self.display);
        push_path_and_query(&mut s, path, query);
        s.parse::<http::Uri>().map_err(|e| {
            Error::invalid_request(format!(
                "cannot form a valid URI from path {}: {e}",
                crate::echo::echo(path)
            ))
        })
    }
}

/// Appends `path`, then `query` after `?` (or `&` when the path has a query already).
fn push_path_and_query(s: &mut String, path: &str, query: &str) {
    s.push_str(path);
    if !query.is_empty() {
        s.push(if path.contains('?') { '&' } else { '?' });
        s.push_str(query);
    }
}

/// How many recent URIs a node keeps: traffic that alternates a few paths (a search and
/// a bulk endpoint, say) finds each of them; a longer cycle replaces the oldest.
const RECENT_URIS: usize = 4;

/// `scheme://host:port` as URI parts, parsed once per address, the `Host` header a
/// request to it carries, and the last URIs built for it.
struct Origin {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    host: Option<http::HeaderValue>,
    /// The last URIs [`NodeAddr::uri`] built on the hot path. Only ever `try_lock`ed: a
    /// request that finds it busy builds its URI instead of waiting.
    recent: std::sync::Mutex<Recent>,
}

/// The last [`RECENT_URIS`] URIs built, and the slot the next one replaces.
#[derive(Default)]
struct Recent {
    uris: [Option<http::Uri>; RECENT_URIS],
    next: usize,
}

impl Origin {
    /// A recent URI whose path and query are exactly `prefix` + `path` (+ `?` or `&` +
    /// `query`), i.e. the string a new one would be parsed from.
    fn cached(&self, prefix: &str, path: &str, query: &str) -> Option<http::Uri> {
        let recent = self.recent.try_lock().ok()?;
        let same = |uri: &http::Uri| {
            let Some(rest) = uri
                .path_and_query()
                .and_then(|pq| pq.as_str().strip_prefix(prefix))
                .and_then(|r| r.strip_prefix(path))
            else {
                return false;
            };
            if query.is_empty() {
                rest.is_empty()
            } else {
                let sep = if path.contains('?') { '&' } else { '?' };
                rest.strip_prefix(sep) == Some(query)
            }
        };
        recent.uris.iter().flatten().find(|u| same(u)).cloned()
    }

    /// Keeps `uri` for the next request with the same path and query, in place of the
    /// oldest one kept (skipped when another request holds the list).
    fn remember(&self, uri: &http::Uri) {
        if let Ok(mut recent) = self.recent.try_lock() {
            let slot = recent.next % RECENT_URIS;
            recent.uris[slot] = Some(uri.clone());
            recent.next = (slot + 1) % RECENT_URIS;
        }
    }
}

fn parse_origin(scheme: &str, host: &str, port: u16) -> Option<std::sync::Arc<Origin>> {
    let scheme = http::uri::Scheme::try_from(scheme).ok()?;
    let authority = http::uri::Authority::try_from(format!("{host}:{port}")).ok()?;
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(scheme.clone());
    parts.authority = Some(authority.clone());
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    let host = http::Uri::from_parts(parts)
        .ok()
        .and_then(|u| host_header(&u));
    Some(std::sync::Arc::new(Origin {
        scheme,
        authority,
        host,
        recent: std::sync::Mutex::new(Recent::default()),
    }))
}

/// The Host header hyper would send: the authority without userinfo, the port left out
/// when it is the scheme's default.
pub(crate) fn host_header(uri: &http::Uri) -> Option<http::HeaderValue> {
    let host = uri.host()?;
    let default = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let value = match uri.port_u16() {
        Some(p) if p != default => format!("{host}:{p}"),
        _ => host.to_string(),
    };
    http::HeaderValue::from_str(&value).ok()
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({})", self.display)
    }
}

/// Whether the authority of `url` (scheme present) ends with `:digits`.
fn has_explicit_port(url: &str) -> bool {
    let after = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = after.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    match host_port.rsplit_once(':') {
        Some((host, port)) => {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.starts_with('[') || host.ends_with(']'))
        }
        None => false,
    }
}

/// The one redaction of URL-shaped text for display (errors, logs, `Debug`), used for node
/// URLs and by `searchwire-queue` for Redis URLs: anything credential-shaped — the text
/// between the scheme's `://` (or the start, when there is none before it) and the last
/// `@` — becomes `<redacted>`. Errs on the side of hiding: `h/a@b` loses `h/a`. A valid
/// node address never needs it (its display has no userinfo, and a path prefix with `@`
/// is rejected).
///
/// ```
/// assert_eq!(searchwire::redact_userinfo("redis://u:pw@h:6379/0"), "redis://<redacted>@h:6379/0");
/// assert_eq!(searchwire::redact_userinfo("u:pw@h:6379"), "<redacted>@h:6379");
/// assert_eq!(searchwire::redact_userinfo("http://h:9200"), "http://h:9200");
/// ```
pub fn redact_userinfo(s: &str) -> String {
    let Some(at) = s.rfind('@') else {
        return s.to_string();
    };
    // The scheme is kept only when its `://` comes before every `@`: with an `@` before it,
    // that text is credential-shaped too (found by the `node_url` fuzz target:
    // `a:PW@h/http://u:p@x` showed `a:PW`).
    let first_at = s.find('@').unwrap_or(at);
    let start = match s.find("://") {
        Some(i) if i < first_at => i + 3,
        _ => 0,
    };
    format!("{}<redacted>@{}", &s[..start], &s[at + 1..])
}

/// A node URL as an error shows it: userinfo redacted, then quoted and cut.
fn shown_url(url: &str) -> String {
    crate::echo::echo(&redact_userinfo(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_with_prefix_port_and_userinfo() {
        let (a, c) = NodeAddr::parse("https://elastic:s3cr%40t@search.example:9243/es/").unwrap();
        assert_eq!(a.as_str(), "https://search.example:9243/es");
        assert_eq!(a.prefix(), "/es");
        match c {
            Some(Credentials::Basic { username, password }) => {
                assert_eq!(username, "elastic");
                assert_eq!(password, "s3cr@t");
            }
            other => panic!("{other:?}"),
        }
        let (a, c) = NodeAddr::parse("127.0.0.1").unwrap();
        assert_eq!(a.as_str(), "http://127.0.0.1:9200");
        assert!(c.is_none());
        let (a, _) = NodeAddr::parse("http://[::1]:9201").unwrap();
        assert_eq!(a.as_str(), "http://[::1]:9201");
        let (a, _) = NodeAddr::parse("http://[::1]").unwrap();
        assert_eq!(a.as_str(), "http://[::1]:9200");
        // Reserved characters in userinfo are percent-decoded, not form-decoded.
        match NodeAddr::parse("https://u%40corp:a+b&c%25d%3A@h:9200")
            .unwrap()
            .1
        {
            Some(Credentials::Basic { username, password }) => {
                assert_eq!(username, "u@corp");
                assert_eq!(password, "a+b&c%d:");
            }
            other => panic!("{other:?}"),
        }
        // An explicit default port is kept, not replaced by 9200.
        let (a, _) = NodeAddr::parse("https://search.example:443").unwrap();
        assert_eq!(a.as_str(), "https://search.example:443");
        let (a, _) = NodeAddr::parse("http://u:p@h:80/x").unwrap();
        assert_eq!(a.as_str(), "http://h:80/x");
        let (a, _) = NodeAddr::parse("https://search.example").unwrap();
        assert_eq!(a.as_str(), "https://search.example:9200");
    }

    #[test]
    fn rejects_bad_urls_without_leaking_secrets() {
        let e = NodeAddr::parse("ftp://u:hunter2@x").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.to_string().contains("scheme"), "{e}");
        let e = NodeAddr::parse("http://u:hunter2@host:99999").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(NodeAddr::parse("http://h:9200/?q=1").is_err());
    }

    #[test]
    fn a_scheme_typo_that_moves_credentials_into_the_path_is_rejected_without_echo() {
        for typo in [
            "https//user:hunter2@search.example:9200",
            "http//user:hunter2@10.0.0.1",
            "https:/user:hunter2@search.example",
            "http://h:9200/x/user:hunter2@y",
        ] {
            let e = NodeAddr::parse(typo).unwrap_err();
            let m = e.to_string();
            assert!(!m.contains("hunter2"), "{typo}: {m}");
            assert!(m.contains("scheme"), "{typo}: {m}");
        }
        // A legitimate prefix is still fine.
        assert_eq!(
            NodeAddr::parse("http://h:1/es/v1").unwrap().0.prefix(),
            "/es/v1"
        );
    }

    #[test]
    fn redaction_hides_credentials_before_a_later_scheme_separator() {
        assert_eq!(redact_userinfo("a:PW@h/http://u:p@x"), "<redacted>@x");
        assert_eq!(
            redact_userinfo("0u:PW@..ser:Puser:PW@..stp://st:92W@..st"),
            "<redacted>@..st"
        );
        assert_eq!(redact_userinfo("https://u:p@h"), "https://<redacted>@h");
    }

    #[test]
    fn redaction_hides_userinfo_wherever_the_scheme_separator_is() {
        for (input, shown) in [
            ("http://u:pw@h:1", "http://<redacted>@h:1"),
            ("u:pw@h/x://y", "<redacted>@h/x://y"),
            ("https//u:pw@h", "<redacted>@h"),
            ("h:9200/a://b:pw@c", "h:9200/a://<redacted>@c"),
            ("http://h:1", "http://h:1"),
        ] {
            assert_eq!(redact_userinfo(input), shown, "{input}");
        }
        // The config error for a scheme-less URL with `://` later on.
        let e = NodeAddr::parse("u:hunter2@h:99999/x://y").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn basic_auth_header_and_redacted_debug() {
        let c = Credentials::Basic {
            username: "Aladdin".into(),
            password: "open sesame".into(),
        };
        assert_eq!(
            c.header_value().unwrap().to_str().unwrap(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert!(!format!("{c:?}").contains("sesame"));
        assert!(!format!("{:?}", Credentials::Bearer("tok".into())).contains("tok"));
        assert_eq!(base64_encode(b"a"), "YQ==");
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_encode(b""), "");
    }

    #[test]
    fn the_host_header_is_what_hyper_would_add() {
        // hyper-util: the URI's host, with the port unless it is the scheme's default.
        for (url, host) in [
            ("http://127.0.0.1:9200", "127.0.0.1:9200"),
            ("http://h", "h:9200"),
            ("http://h:80/p", "h"),
            ("https://h:443", "h"),
            ("https://h:80", "h:80"),
            ("https://[::1]:9200/a", "[::1]:9200"),
        ] {
            let (a, _) = NodeAddr::parse(url).unwrap();
            assert_eq!(a.host_header().unwrap(), host, "{url}");
        }
    }

    #[test]
    fn uri_from_parsed_origin_equals_the_whole_string_parsed() {
        for url in [
            "http://h:1",
            "http://h:1/p",
            "https://[::1]:9200/a/b",
            "http://10.0.0.1",
        ] {
            let (a, _) = NodeAddr::parse(url).unwrap();
            assert!(a.origin.is_some(), "{url}");
            for (path, query) in [
                ("/", ""),
                ("/i/_search", "q=x"),
                ("/i?pretty", "q=x&r=%20"),
                ("/_cat/nodes?v", ""),
            ] {
                let fast = a.uri(path, query).unwrap();
                let whole = format!(
                    "{}{path}{}{query}",
                    a.display,
                    if query.is_empty() {
                        ""
                    } else if path.contains('?') {
                        "&"
                    } else {
                        "?"
                    }
                );
                assert_eq!(
                    fast,
                    whole.parse::<http::Uri>().unwrap(),
                    "{url} {path} {query}"
                );
                assert_eq!(fast.to_string(), whole, "{url} {path} {query}");
            }
            // Not a path: the old way, with its error.
            assert!(a.uri("/bad path", "").is_err());
        }
    }

    #[test]
    fn the_last_uri_is_reused_only_for_the_same_path_and_query() {
        let (a, _) = NodeAddr::parse("http://h:1/p").unwrap();
        let first = a.uri("/i/_search", "q=x").unwrap();
        // A repeat is the cached URI (the same bytes, not a new parse).
        let again = a.uri("/i/_search", "q=x").unwrap();
        assert_eq!(again, first);
        assert_eq!(
            again.path_and_query().unwrap().as_str().as_ptr(),
            first.path_and_query().unwrap().as_str().as_ptr()
        );
        // Anything that differs, even where the joined strings overlap, is built afresh
        // and equals the whole string parsed.
        for (path, query, want) in [
            ("/i/_search", "", "http://h:1/p/i/_search"),
            ("/i/_search", "q=xy", "http://h:1/p/i/_search?q=xy"),
            ("/i/_search", "q=", "http://h:1/p/i/_search?q="),
            ("/i/_searc", "q=x", "http://h:1/p/i/_searc?q=x"),
            ("/i/_search?q=x", "", "http://h:1/p/i/_search?q=x"),
            ("/i/_search?a", "q=x", "http://h:1/p/i/_search?a&q=x"),
            ("/i/_search?a", "q=x", "http://h:1/p/i/_search?a&q=x"),
            ("/i/_search", "q=x", "http://h:1/p/i/_search?q=x"),
        ] {
            let uri = a.uri(path, query).unwrap();
            assert_eq!(uri.to_string(), want, "{path} {query}");
            assert_eq!(uri, want.parse::<http::Uri>().unwrap(), "{path} {query}");
        }
        // Clones share the node's cache; a bad path is still rejected after a hit.
        let b = a.clone();
        let from_clone = b.uri("/i/_search", "q=x").unwrap();
        assert_eq!(from_clone.to_string(), "http://h:1/p/i/_search?q=x");
        assert!(b.uri("/bad path", "").is_err());
    }

    #[test]
    fn a_few_alternating_paths_each_reuse_their_uri() {
        let (a, _) = NodeAddr::parse("http://h:1/p").unwrap();
        let paths = ["/a/_search", "/_bulk", "/b/_doc/1", "/"];
        let first: Vec<http::Uri> = paths.iter().map(|p| a.uri(p, "x=1").unwrap()).collect();
        let ptr = |u: &http::Uri| u.path_and_query().unwrap().as_str().as_ptr();
        for _ in 0..3 {
            for (p, f) in paths.iter().zip(&first) {
                let again = a.uri(p, "x=1").unwrap();
                assert_eq!(&again, f);
                assert_eq!(ptr(&again), ptr(f), "{p} is reused");
            }
        }
        // A fifth path replaces the oldest; every answer is still right.
        let fifth = a.uri("/c", "").unwrap();
        assert_eq!(fifth.to_string(), "http://h:1/p/c");
        assert_eq!(ptr(&a.uri(paths[1], "x=1").unwrap()), ptr(&first[1]));
        assert_eq!(ptr(&a.uri("/c", "").unwrap()), ptr(&fifth));
        let rebuilt = a.uri(paths[0], "x=1").unwrap();
        assert_eq!(rebuilt, first[0]);
        assert_ne!(ptr(&rebuilt), ptr(&first[0]));
    }

    #[test]
    fn uri_joins_prefix_path_and_query() {
        let (a, _) = NodeAddr::parse("http://h:1/p").unwrap();
        assert_eq!(
            a.uri("/i/_search", "q=x").unwrap().to_string(),
            "http://h:1/p/i/_search?q=x"
        );
        assert_eq!(
            a.uri("/i?pretty", "q=x").unwrap().to_string(),
            "http://h:1/p/i?pretty&q=x"
        );
    }
}
