//! Method sets and path patterns: what a row of the route table (`server::ROUTES`) and a
//! pass-through allow rule ([`crate::config::PassRule`]) match.
//!
//! A pattern is a path of segments; each is matched against the request's segments
//! *percent-decoded*, as the cluster decodes them (so `/%5Fsettings` is `/_settings` to the
//! relay as it is to the cluster, and no encoding slips a path past a row or an allow rule):
//!
//! - a literal (`_bulk`, `_nodes`) matches itself;
//! - `{name}` matches one segment that does not start with `_` (an index, alias, template or
//!   document name: OpenSearch refuses index names starting with `_`, so `{index}` never
//!   matches an API such as `_settings`), captured as `name`;
//! - `*` matches any one segment;
//! - `**` (last only) matches the rest, zero segments or more.
//!
//! Empty segments (`//`, a trailing `/`) are skipped, as the cluster does.

use http::Method;

/// A set of methods, as a bit mask: `GET | HEAD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Methods(u16);

impl Methods {
    /// `GET`.
    pub const GET: Methods = Methods(1);
    /// `HEAD`.
    pub const HEAD: Methods = Methods(1 << 1);
    /// `POST`.
    pub const POST: Methods = Methods(1 << 2);
    /// `PUT`.
    pub const PUT: Methods = Methods(1 << 3);
    /// `DELETE`.
    pub const DELETE: Methods = Methods(1 << 4);
    /// `PATCH`.
    pub const PATCH: Methods = Methods(1 << 5);
    /// `OPTIONS`.
    pub const OPTIONS: Methods = Methods(1 << 6);
    /// Any method, including ones not named here.
    pub const ANY: Methods = Methods(u16::MAX);

    /// The union of the two sets (usable in constants).
    pub const fn or(self, o: Methods) -> Methods {
        Methods(self.0 | o.0)
    }

    /// Whether `m` is in the set.
    pub fn contains(self, m: &Method) -> bool {
        let bit = match *m {
            Method::GET => Self::GET.0,
            Method::HEAD => Self::HEAD.0,
            Method::POST => Self::POST.0,
            Method::PUT => Self::PUT.0,
            Method::DELETE => Self::DELETE.0,
            Method::PATCH => Self::PATCH.0,
            Method::OPTIONS => Self::OPTIONS.0,
            _ => 1 << 15,
        };
        self.0 & bit != 0
    }

    /// Parses one method name (`GET`, `put`, ...) or `*` for any.
    pub fn parse(s: &str) -> Option<Methods> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "GET" => Self::GET,
            "HEAD" => Self::HEAD,
            "POST" => Self::POST,
            "PUT" => Self::PUT,
            "DELETE" => Self::DELETE,
            "PATCH" => Self::PATCH,
            "OPTIONS" => Self::OPTIONS,
            "*" | "ANY" => Self::ANY,
            _ => return None,
        })
    }
}

impl std::ops::BitOr for Methods {
    type Output = Methods;
    fn bitor(self, o: Methods) -> Methods {
        Methods(self.0 | o.0)
    }
}

/// The request path's segments, percent-decoded, empty ones skipped.
pub fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode(s).unwrap_or_else(|| s.to_owned()))
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1).and_then(|c| (*c as char).to_digit(16))?;
            let l = b.get(i + 2).and_then(|c| (*c as char).to_digit(16))?;
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a matched pattern captured: the `{name}` segments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    named: Vec<(String, String)>,
}

impl Params {
    /// The segment captured as `{name}`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.named
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Matches `pattern` against decoded `segs`: the captures, or `None`.
pub fn matches(pattern: &str, segs: &[String]) -> Option<Params> {
    let mut params = Params::default();
    let mut given = segs.iter();
    for p in pattern.split('/').filter(|s| !s.is_empty()) {
        if p == "**" {
            return Some(params);
        }
        let seg = given.next()?;
        if p == "*" {
            continue;
        }
        if let Some(name) = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if seg.starts_with('_') {
                return None;
            }
            params.named.push((name.to_owned(), seg.clone()));
        } else if p != seg {
            return None;
        }
    }
    given.next().is_none().then_some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<String> {
        segments(p)
    }

    #[test]
    fn patterns_match_decoded_segments() {
        assert!(matches("/_bulk", &segs("/_bulk")).is_some());
        assert!(matches("/_bulk", &segs("/%5Fbulk")).is_some());
        assert!(matches("/_bulk", &segs("//_bulk/")).is_some());
        let p = matches("/{index}/_bulk", &segs("/logs/_bulk")).unwrap();
        assert_eq!(p.get("index"), Some("logs"));
        assert!(matches("/{index}/_bulk", &segs("/_all/_bulk")).is_none());
        assert!(matches("/{index}", &segs("/%5Fsettings")).is_none());
        assert!(matches("/*/_bulk", &segs("/_all/_bulk")).is_some());
        assert!(matches("/**", &segs("/")).is_some());
        assert!(matches("/_nodes/**", &segs("/_nodes/_all/http")).is_some());
        assert!(matches("/_nodes/**", &segs("/_cat")).is_none());
        assert!(matches("/{index}", &segs("/a/b")).is_none());
        assert!(matches("/", &segs("/")).is_some());
        assert!(matches("/", &segs("/a")).is_none());
    }

    #[test]
    fn method_sets() {
        let m = Methods::GET | Methods::HEAD;
        assert!(m.contains(&Method::GET) && m.contains(&Method::HEAD));
        assert!(!m.contains(&Method::POST));
        assert!(Methods::ANY.contains(&Method::from_bytes(b"PURGE").unwrap()));
        assert_eq!(Methods::parse("put"), Some(Methods::PUT));
        assert_eq!(Methods::parse("FETCH"), None);
    }
}
