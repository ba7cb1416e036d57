//! `filter_path`: the response filtering OpenSearch applies to its answers, done on the
//! relay's own answers (`_bulk`, single-document writes) so a client that asks for
//! `items.*.error` or `took,errors,items.*.status` gets what the cluster would send.
//!
//! The rules, as a real OpenSearch 2.19 node applies them (the unit tests below hold its
//! answers for the same filters on the same bulk answer):
//! - a comma list of dotted paths; a segment may hold `*` wildcards (`items.*.status`,
//!   `it*`), `**` matches any number of segments, none included (`**.status`, `items.**.type`);
//! - arrays take no segment: a path goes through them into every element;
//! - paths starting with `-` exclude; with both kinds the exclusions are applied first, then
//!   the inclusions (`items.*.status,-items.*.status` is `{}`);
//! - a field a path names in full is kept (or dropped) whole; an object or array that filtering
//!   left empty is left out, so nothing matched is `{}`;
//! - an empty `filter_path` filters nothing.
//!
//! Elastic's go-docappender (the bulk appender of APM Server and the OpenTelemetry
//! Collector's Elasticsearch exporter) asks for
//! `items.*._index,items.*.status,items.*.error.type,items.*.error.reason` (later versions add
//! `items.*.failure_store`).
//!
//! Error answers are not filtered (OpenSearch builds them without the filter), so the
//! caller applies this to success answers only.

use serde_json::{Map, Value};

/// One segment of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    /// A field name, possibly with `*` wildcards.
    Name(String),
    /// `**`: any number of segments, none included.
    AnyDepth,
}

type Path = Vec<Seg>;

/// A parsed `filter_path`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterPath {
    include: Vec<Path>,
    exclude: Vec<Path>,
}

impl FilterPath {
    /// Parses the (percent-decoded) value of `filter_path`; `None` when it filters nothing.
    pub fn parse(value: &str) -> Option<FilterPath> {
        let mut f = FilterPath::default();
        for expr in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (list, expr) = match expr.strip_prefix('-') {
                Some(rest) => (&mut f.exclude, rest),
                None => (&mut f.include, expr),
            };
            let path: Path = expr
                .split('.')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    if s == "**" {
                        Seg::AnyDepth
                    } else {
                        Seg::Name(s.to_owned())
                    }
                })
                .collect();
            if !path.is_empty() {
                list.push(path);
            }
        }
        (!f.include.is_empty() || !f.exclude.is_empty()).then_some(f)
    }

    /// The answer filtered: exclusions first, then inclusions. A value that is not an
    /// object is returned as it is.
    pub fn apply(&self, value: Value) -> Value {
        let Value::Object(root) = value else {
            return value;
        };
        let mut root = root;
        if !self.exclude.is_empty() {
            let paths: Vec<&[Seg]> = self.exclude.iter().map(Vec::as_slice).collect();
            root = object(root, &paths, Mode::Exclude);
        }
        if !self.include.is_empty() {
            let paths: Vec<&[Seg]> = self.include.iter().map(Vec::as_slice).collect();
            root = object(root, &paths, Mode::Include);
        }
        Value::Object(root)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Include,
    Exclude,
}

/// What the paths say of one field: named in full, the paths that go on below it.
fn step<'a>(paths: &[&'a [Seg]], key: &str) -> (bool, Vec<&'a [Seg]>) {
    let mut full = false;
    let mut below: Vec<&'a [Seg]> = Vec::new();
    let mut go_on = |rest: &'a [Seg], full: &mut bool| {
        if rest.is_empty() {
            *full = true;
        } else if !below.contains(&rest) {
            below.push(rest);
        }
    };
    for p in paths {
        let mut p: &'a [Seg] = p;
        // `**` matching no segment: the rest of the path is tried against this key too.
        while let Some((Seg::AnyDepth, rest)) = p.split_first() {
            if rest.is_empty() {
                // A trailing `**` names everything below.
                full = true;
                break;
            }
            // `**` also takes this key and stays for the fields below.
            go_on(p, &mut full);
            p = rest;
        }
        if let Some((Seg::Name(g), rest)) = p.split_first() {
            if glob(g, key) {
                go_on(rest, &mut full);
            }
        }
    }
    (full, below)
}

fn object(map: Map<String, Value>, paths: &[&[Seg]], mode: Mode) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in map {
        let (full, below) = step(paths, &k);
        let kept = match (mode, full) {
            (Mode::Include, true) => Some(v),
            (Mode::Exclude, true) => None,
            (_, false) if below.is_empty() => match mode {
                Mode::Include => None,
                Mode::Exclude => Some(v),
            },
            (_, false) => nested(v, &below, mode),
        };
        if let Some(v) = kept {
            out.insert(k, v);
        }
    }
    out
}

/// A value some paths go into: objects and arrays filtered (left out when that leaves them
/// empty); a scalar has no fields, so no inclusion reaches it and no exclusion removes it.
fn nested(v: Value, paths: &[&[Seg]], mode: Mode) -> Option<Value> {
    match v {
        Value::Object(m) => {
            let m = object(m, paths, mode);
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Array(a) => {
            let a: Vec<Value> = a
                .into_iter()
                .filter_map(|x| nested(x, paths, mode))
                .collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        scalar => (mode == Mode::Exclude).then_some(scalar),
    }
}

/// `*` matches any run of characters (OpenSearch's `Glob.globMatch`).
fn glob(pattern: &str, name: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let Some(mut tail) = name.strip_prefix(head) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('*').collect();
    let Some((last, middle)) = parts.split_last() else {
        return true;
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A bulk answer as a real OpenSearch 2.19 node gave it: an update, a `create` conflict,
    /// a delete of a missing document.
    fn bulk() -> Value {
        json!({"took":4,"errors":true,"items":[
            {"index":{"_index":"t3","_id":"1","_version":3,"result":"updated",
                      "_shards":{"total":2,"successful":1,"failed":0},"_seq_no":4,"_primary_term":1,"status":200}},
            {"create":{"_index":"t3","_id":"1","status":409,
                       "error":{"type":"version_conflict_engine_exception","reason":"conflict",
                                "index":"t3","shard":"0","index_uuid":"U"}}},
            {"delete":{"_index":"t3","_id":"zz","_version":3,"result":"not_found",
                       "_shards":{"total":2,"successful":1,"failed":0},"_seq_no":5,"_primary_term":1,"status":404}}
        ]})
    }

    fn f(filter: &str) -> Value {
        match FilterPath::parse(filter) {
            Some(p) => p.apply(bulk()),
            None => bulk(),
        }
    }

    #[test]
    fn the_forms_clients_send_give_what_opensearch_gives() {
        assert_eq!(
            f("items.*.error"),
            json!({"items":[{"create":{"error":{"type":"version_conflict_engine_exception",
                "reason":"conflict","index":"t3","shard":"0","index_uuid":"U"}}}]})
        );
        assert_eq!(
            f("took,errors,items.*.status"),
            json!({"took":4,"errors":true,"items":[{"index":{"status":200}},
                   {"create":{"status":409}},{"delete":{"status":404}}]})
        );
        // Elastic's go-docappender asks for exactly this.
        assert_eq!(
            f("items.*._index,items.*.status,items.*.error.type,items.*.error.reason"),
            json!({"items":[{"index":{"_index":"t3","status":200}},
                {"create":{"_index":"t3","status":409,
                           "error":{"type":"version_conflict_engine_exception","reason":"conflict"}}},
                {"delete":{"_index":"t3","status":404}}]})
        );
        // Its later versions add `failure_store` (absent here: nothing more is kept), and
        // Go's `url.Values.Encode` sends it percent-encoded (decoded before parsing).
        assert_eq!(
            f("items.*._index,items.*.status,items.*.failure_store,items.*.error.type,items.*.error.reason"),
            f("items.*._index,items.*.status,items.*.error.type,items.*.error.reason"),
        );
        assert_eq!(
            f("items.index.status"),
            json!({"items":[{"index":{"status":200}}]})
        );
        assert_eq!(
            f("*.*._id"),
            json!({"items":[{"index":{"_id":"1"}},{"create":{"_id":"1"}},{"delete":{"_id":"zz"}}]})
        );
        assert_eq!(
            f("items.*.status,items.*.stat*"),
            f("items.*.status"),
            "two paths naming one field keep it once"
        );
        // A wider path wins over a narrower one.
        assert_eq!(f("items.*.error.type,items.*.error"), f("items.*.error"));
    }

    #[test]
    fn objects_left_empty_are_left_out() {
        // The conflict item has no `_shards`: it disappears from the array.
        assert_eq!(
            f("items.*._shards.*"),
            json!({"items":[{"index":{"_shards":{"total":2,"successful":1,"failed":0}}},
                            {"delete":{"_shards":{"total":2,"successful":1,"failed":0}}}]})
        );
        assert_eq!(f("nomatch"), json!({}));
        assert_eq!(f("took.nested"), json!({}), "a scalar has no fields");
    }

    #[test]
    fn exclusions_come_first_and_can_empty_everything() {
        let mut v = bulk();
        v.as_object_mut().unwrap().remove("took");
        assert_eq!(f("-took"), v);
        assert_eq!(f("-items"), json!({"took":4,"errors":true}));
        assert_eq!(f("-items.*"), json!({"took":4,"errors":true}));
        assert_eq!(f("-items.*.*"), json!({"took":4,"errors":true}));
        assert_eq!(f("errors,-items"), json!({"errors":true}));
        assert_eq!(f("items.*.status,-items.*.status"), json!({}));
        assert_eq!(f("items.*.error.type,-items.*.error"), json!({}));
        assert_eq!(f("items.*._shards.total,-items.*._shards"), json!({}));
        assert_eq!(f("took,-took"), json!({}));
        assert_eq!(f("-*"), json!({}));
        // `_shards` emptied by the exclusion goes; the rest of each item stays.
        let out = f("-items.*._shards.*");
        assert!(out["items"][0]["index"].get("_shards").is_none(), "{out}");
        assert_eq!(out["items"][0]["index"]["_seq_no"], 4);
        assert_eq!(out["took"], 4);
        let out = f("-items.*.error.*");
        assert_eq!(
            out["items"][1],
            json!({"create":{"_index":"t3","_id":"1","status":409}})
        );
        assert_eq!(
            f("items.*.error,-took"),
            f("items.*.error"),
            "an exclusion of what is not included changes nothing"
        );
    }

    #[test]
    fn double_star_matches_any_depth() {
        assert_eq!(f("**"), bulk());
        assert_eq!(f("items.**"), f("items"));
        assert_eq!(f("*"), bulk());
        assert_eq!(f("it*"), f("items"));
        assert_eq!(f("**.status"), f("items.*.status"));
        assert_eq!(
            f("items.**.type"),
            json!({"items":[{"create":{"error":{"type":"version_conflict_engine_exception"}}}]})
        );
        assert_eq!(f("**.error.type"), f("items.**.type"));
        assert_eq!(f("**.index.status"), f("items.index.status"));
        let out = f("-**.status");
        assert!(out["items"][1]["create"].get("status").is_none(), "{out}");
        assert_eq!(out["items"][1]["create"]["_id"], "1");
        assert_eq!(f("items.**.status,-**._shards"), f("items.*.status"));
    }

    #[test]
    fn empty_filters_filter_nothing_and_single_answers_filter_too() {
        assert_eq!(FilterPath::parse(""), None);
        assert_eq!(FilterPath::parse(" , ,"), None);
        assert_eq!(f(""), bulk());
        let single = json!({"_index":"t1","_id":"4","_version":1,"result":"created",
            "_shards":{"total":2,"successful":1,"failed":0},"_seq_no":0,"_primary_term":1});
        let p = FilterPath::parse("_id,result").unwrap();
        assert_eq!(p.apply(single), json!({"_id":"4","result":"created"}));
        assert_eq!(
            p.apply(json!([1, 2])),
            json!([1, 2]),
            "not an object: as it is"
        );
    }

    #[test]
    fn glob_matches_like_opensearch() {
        assert!(glob("*", ""));
        assert!(glob("*", "abc"));
        assert!(glob("a*", "abc"));
        assert!(glob("*c", "abc"));
        assert!(glob("a*c", "abc"));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(glob("**", "x"));
        assert!(!glob("a*c", "ab"));
        assert!(!glob("a*bc", "abc_"));
        assert!(!glob("abc", "abcd"));
        assert!(glob("_id", "_id"));
        assert!(!glob("a*a", "a"), "the two a's cannot be one");
    }
}
