//! A real-ish `_bulk` endpoint with item-level faults, shared by the nodes of a fake
//! cluster: it parses the NDJSON body, stores documents per index and id (so tests count
//! exactly what landed), honours `create` (409 when the id exists), and plays scripted
//! faults — items answered 429/503, a connection reset *after* the batch was applied,
//! whole-request answers, mapping errors for marked documents, missing indices. Answers
//! carry what OpenSearch's do: `_shards`, engine errors with `index`/`shard`/`index_uuid`,
//! mapping errors with `caused_by`, `noop` for an `update` whose body is what the document
//! holds (the fake stores an update's body as the source), `forced_refresh` on
//! `refresh=true`, a 400 for a bad `refresh` or `wait_for_active_shards`; every query string
//! is recorded ([`FakeBulk::queries`]).
//!
//! ```
//! use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};
//! # fn main() -> std::io::Result<()> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let cluster = FakeCluster::start(2).await?;
//! let bulk = FakeBulk::new();
//! bulk.install(&cluster);                       // POST /_bulk and /{index}/_bulk on every node
//! bulk.item_faults([BulkFault::Throttle, BulkFault::Ok, BulkFault::Unavailable]);
//! bulk.reset_after_apply(1);                    // the next request lands, then the socket resets
//! // ... run an indexer against cluster.urls(), then:
//! assert_eq!(bulk.count("logs"), 0);
//! # Ok(())
//! # })
//! # }
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::behavior::{Behavior, Handler, HandlerRequest, Match};
use crate::cluster::FakeCluster;
use crate::node::FakeNode;

/// What happens to one item, when scripted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkFault {
    /// Processed normally.
    Ok,
    /// 429 `es_rejected_execution_exception`; not applied.
    Throttle,
    /// 503 `unavailable_shards_exception`; not applied.
    Unavailable,
    /// 409 `version_conflict_engine_exception`; not applied.
    Conflict,
}

/// A stored document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDoc {
    /// The source as sent.
    pub source: Bytes,
    /// 1 on creation, +1 per overwrite.
    pub version: u64,
    /// The `_seq_no` of its last write: the write order within its index (one shard).
    pub seq_no: u64,
}

#[derive(Default)]
struct State {
    indices: HashMap<String, HashMap<String, StoredDoc>>,
    /// Writes applied per index and id (creations and overwrites): "exactly once" is 1.
    writes: HashMap<(String, String), u32>,
    auto_create: bool,
    faults: VecDeque<BulkFault>,
    /// Every `n`-th item (1-based counter over all items) gets the fault.
    every: Option<(u64, BulkFault)>,
    items_seen: u64,
    reset_after_apply: u32,
    /// Bodies longer than this are refused with 413, as a node with a small
    /// `http.max_content_length` refuses them (nothing applied).
    max_content_length: Option<usize>,
    /// Random faults: a seeded generator, the share of items throttled and the share of
    /// requests reset after they were applied.
    random: Option<RandomFaults>,
    request_answers: VecDeque<Behavior>,
    mapping_marker: Option<String>,
    delay: Option<Duration>,
    batch_sizes: Vec<usize>,
    filter_paths: Vec<Option<String>>,
    /// The query string of each bulk request, in arrival order.
    queries: Vec<Option<String>>,
    /// The next `_seq_no` per index (one shard per index: write order).
    seq_nos: HashMap<String, u64>,
}

/// Seeded random faults ([`FakeBulk::random_faults`]).
#[derive(Clone, Copy, Debug)]
struct RandomFaults {
    state: u64,
    throttle: f64,
    reset: f64,
}

impl RandomFaults {
    /// splitmix64, as a uniform draw in [0, 1).
    fn draw(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The shared `_bulk` store and fault script. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct FakeBulk {
    state: Arc<Mutex<State>>,
}

impl Default for FakeBulk {
    fn default() -> FakeBulk {
        FakeBulk::new()
    }
}

impl std::fmt::Debug for FakeBulk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("FakeBulk")
            .field("indices", &st.indices.len())
            .field("items_seen", &st.items_seen)
            .finish()
    }
}

impl FakeBulk {
    /// An empty store that creates indices on first write (like `action.auto_create_index`).
    pub fn new() -> FakeBulk {
        FakeBulk {
            state: Arc::new(Mutex::new(State {
                auto_create: true,
                ..State::default()
            })),
        }
    }

    /// The behavior to install for bulk paths (what [`FakeBulk::install`] does).
    pub fn behavior(&self) -> Behavior {
        let me = self.clone();
        Behavior::Handler(Handler::new(move |req| me.handle(req)))
    }

    /// Installs the handler on every node of `cluster` for `POST /_bulk` and
    /// `POST /{index}/_bulk`, and for `GET /{index}/_count`.
    pub fn install(&self, cluster: &FakeCluster) {
        for node in cluster.nodes() {
            self.install_on(node);
        }
    }

    /// Installs the handler on one node.
    pub fn install_on(&self, node: &FakeNode) {
        let b = self.behavior();
        node.on(Match::Any, b);
    }

    /// Whether indices are created by the first write (default yes). When off, items for
    /// an index not made with [`FakeBulk::create_index`] get 404 `index_not_found_exception`.
    pub fn set_auto_create(&self, on: bool) {
        self.state.lock().auto_create = on;
    }

    /// Creates an empty index.
    pub fn create_index(&self, name: &str) {
        self.state
            .lock()
            .indices
            .entry(name.to_owned())
            .or_default();
    }

    /// Queues per-item faults, consumed one per item in arrival order (across requests).
    pub fn item_faults(&self, faults: impl IntoIterator<Item = BulkFault>) {
        self.state.lock().faults.extend(faults);
    }

    /// Every `n`-th item seen (counting all items, 1-based) gets `fault` — a share of 1/n.
    /// `None` stops it.
    pub fn fault_every(&self, every: Option<(u64, BulkFault)>) {
        self.state.lock().every = every;
    }

    /// Refuses bulk bodies longer than `limit` bytes with a bare 413, as OpenSearch does for
    /// a body over its `http.max_content_length` (nothing is applied). `None`: no limit.
    pub fn max_content_length(&self, limit: Option<usize>) {
        self.state.lock().max_content_length = limit;
    }

    /// Random faults from a seeded generator (the same seed plays the same faults for the
    /// same requests): each item is throttled (429 `es_rejected_execution_exception`, not
    /// applied) with probability `throttle`, and each request is applied, then its
    /// connection reset without an answer, with probability `reset_after_apply`. Scripted
    /// faults come first. `None` stops them.
    pub fn random_faults(&self, faults: Option<(u64, f64, f64)>) {
        self.state.lock().random = faults.map(|(seed, throttle, reset)| RandomFaults {
            state: seed,
            throttle,
            reset,
        });
    }

    /// The next `n` bulk requests are applied in full, then the connection is reset
    /// without an answer: the client cannot know that its documents landed.
    pub fn reset_after_apply(&self, n: u32) {
        self.state.lock().reset_after_apply += n;
    }

    /// The next bulk request gets `behavior` instead of being processed (e.g.
    /// `Behavior::status(503)` or a 429 with `Retry-After`); nothing is applied.
    pub fn answer_next(&self, behavior: Behavior) {
        self.state.lock().request_answers.push_back(behavior);
    }

    /// Items whose source contains `marker` are answered 400 `mapper_parsing_exception`.
    pub fn mapping_error_marker(&self, marker: &str) {
        self.state.lock().mapping_marker = Some(marker.to_owned());
    }

    /// Every bulk answer is delayed by `d` (tokio time: paused tests skip it).
    pub fn set_delay(&self, d: Option<Duration>) {
        self.state.lock().delay = d;
    }

    /// Documents in `index`.
    pub fn count(&self, index: &str) -> usize {
        self.state.lock().indices.get(index).map_or(0, HashMap::len)
    }

    /// A stored document.
    pub fn get(&self, index: &str, id: &str) -> Option<StoredDoc> {
        self.state.lock().indices.get(index)?.get(id).cloned()
    }

    /// The ids in `index`, sorted.
    pub fn ids(&self, index: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .state
            .lock()
            .indices
            .get(index)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// How many writes were applied for this id (1 = exactly once; overwrites count).
    pub fn writes(&self, index: &str, id: &str) -> u32 {
        let st = self.state.lock();
        st.writes
            .get(&(index.to_owned(), id.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// The largest number of writes any document got.
    pub fn max_writes(&self) -> u32 {
        self.state
            .lock()
            .writes
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Items seen over all bulk requests (retries included).
    pub fn items_seen(&self) -> u64 {
        self.state.lock().items_seen
    }

    /// The number of items of each bulk request, in arrival order.
    pub fn batch_sizes(&self) -> Vec<usize> {
        self.state.lock().batch_sizes.clone()
    }

    /// The `filter_path` query parameter of each bulk request, in arrival order.
    pub fn filter_paths(&self) -> Vec<Option<String>> {
        self.state.lock().filter_paths.clone()
    }

    /// The whole query string of each bulk request (not percent-decoded), in arrival order.
    pub fn queries(&self) -> Vec<Option<String>> {
        self.state.lock().queries.clone()
    }

    fn handle(&self, req: &HandlerRequest<'_>) -> Behavior {
        let segs: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        match (req.method, segs.as_slice()) {
            ("POST" | "PUT", ["_bulk"]) => self.bulk(req, None),
            ("POST" | "PUT", [index, "_bulk"]) => self.bulk(req, Some(index)),
            ("GET" | "POST", [index, "_count"]) => {
                Behavior::json(200, json!({ "count": self.count(index) }))
            }
            _ => Behavior::Default,
        }
    }

    fn bulk(&self, req: &HandlerRequest<'_>, default_index: Option<&str>) -> Behavior {
        let filter = req.query.and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("filter_path="))
                .map(str::to_owned)
        });
        let mut st = self.state.lock();
        st.filter_paths.push(filter.clone());
        st.queries.push(req.query.map(str::to_owned));
        if let Some(b) = st.request_answers.pop_front() {
            st.batch_sizes.push(0);
            return b;
        }
        if st
            .max_content_length
            .is_some_and(|limit| req.body.len() > limit)
        {
            st.batch_sizes.push(0);
            return Behavior::status(413);
        }
        // `refresh` and `wait_for_active_shards` are checked like OpenSearch does, before
        // any item: a bad value is a 400 for the whole request.
        let mut forced_refresh = false;
        for (k, v) in req
            .query
            .unwrap_or("")
            .split('&')
            .filter_map(|kv| kv.split_once('='))
        {
            match k {
                "refresh" if v == "true" || v.is_empty() => forced_refresh = true,
                "refresh" if v == "false" || v == "wait_for" => {}
                "refresh" => {
                    return bad_request(&format!("Unknown value for refresh: [{v}]."));
                }
                "wait_for_active_shards"
                    if v != "all" && v != "index-setting" && v.parse::<u32>().is_err() =>
                {
                    return bad_request(&format!(
                        "failed to parse wait_for_active_shards [{v}]: not a number or all"
                    ));
                }
                _ => {}
            }
        }
        let lines: Vec<&[u8]> = req
            .body
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .collect();
        let mut items = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let Ok(meta) = serde_json::from_slice::<Value>(lines[i]) else {
                return bad_request(&format!("malformed action line {}", i + 1));
            };
            let Some((op, params)) = meta.as_object().and_then(|o| o.iter().next()) else {
                return bad_request(&format!("malformed action line {}", i + 1));
            };
            let op = op.clone();
            let index = params
                .get("_index")
                .and_then(Value::as_str)
                .or(default_index)
                .unwrap_or("")
                .to_owned();
            let id = params.get("_id").and_then(Value::as_str).map(str::to_owned);
            let source = if op == "delete" {
                None
            } else {
                i += 1;
                match lines.get(i) {
                    Some(s) => Some(Bytes::copy_from_slice(s)),
                    None => return bad_request("the last action has no source line"),
                }
            };
            i += 1;
            let cond = Conditions::of(params);
            let mut item = st.apply_item(&op, index, id, source, cond);
            if forced_refresh && item.1 < 300 {
                if let Some(o) = item.2.as_object_mut() {
                    o.insert("forced_refresh".into(), Value::Bool(true));
                }
            }
            items.push(item);
        }
        st.batch_sizes.push(items.len());
        let errors = items.iter().any(|v| v.1 >= 300);
        let filtered = filter.is_some();
        // The item fields the filter names (`items.*.status`, `items.*.error.type`, ...).
        let kept: Vec<String> = filter
            .as_deref()
            .unwrap_or("")
            .replace("%2C", ",")
            .replace("%2c", ",")
            .replace("%2A", "*")
            .replace("%2a", "*")
            .split(',')
            .filter_map(|f| f.strip_prefix("items.*."))
            .map(|f| f.split('.').next().unwrap_or(f).to_owned())
            .collect();
        let items: Vec<Value> = items
            .into_iter()
            .map(|(op, _status, mut body)| {
                if filtered {
                    if let Some(o) = body.as_object_mut() {
                        o.retain(|k, _| kept.iter().any(|f| f == k));
                    }
                }
                json!({ op: body })
            })
            .collect();
        let body = if filtered {
            json!({ "errors": errors, "items": items })
        } else {
            json!({ "took": 1, "errors": errors, "items": items })
        };
        let mut reset = st.reset_after_apply > 0;
        if reset {
            st.reset_after_apply -= 1;
        } else if let Some(r) = st.random.as_mut() {
            reset = r.draw() < r.reset;
        }
        let delay = st.delay;
        drop(st);
        let b = if reset {
            Behavior::Reset
        } else {
            Behavior::json(200, body)
        };
        match delay {
            Some(d) => b.delayed(d),
            None => b,
        }
    }
}

fn bad_request(reason: &str) -> Behavior {
    Behavior::json(
        400,
        json!({"error": {"type": "illegal_argument_exception", "reason": reason}, "status": 400}),
    )
}

fn error_item(status: u16, kind: &str, reason: &str, index: &str, id: &str) -> Value {
    json!({
        "_index": index, "_id": id, "status": status,
        "error": { "type": kind, "reason": reason },
    })
}

/// An error item carrying the shard it failed on, as OpenSearch reports engine errors
/// (a conflict, a missing document).
fn shard_error_item(status: u16, kind: &str, reason: &str, index: &str, id: &str) -> Value {
    json!({
        "_index": index, "_id": id, "status": status,
        "error": { "type": kind, "reason": reason, "index": index, "shard": "0",
                   "index_uuid": "fake-index-uuid" },
    })
}

/// An item's conditions: `if_seq_no`/`if_primary_term` and external versions, checked as
/// OpenSearch checks them (one shard, primary term 1), with its conflict reasons.
#[derive(Clone, Copy, Debug, Default)]
struct Conditions {
    if_seq_no: Option<u64>,
    if_primary_term: Option<u64>,
    /// `version` with `version_type` `external` (false) or `external_gte` (true).
    external: Option<(u64, bool)>,
}

impl Conditions {
    fn of(params: &Value) -> Conditions {
        let n = |k: &str| params.get(k).and_then(Value::as_u64);
        let external = match params.get("version_type").and_then(Value::as_str) {
            Some("external") => n("version").map(|v| (v, false)),
            Some("external_gte") => n("version").map(|v| (v, true)),
            _ => None,
        };
        Conditions {
            if_seq_no: n("if_seq_no"),
            if_primary_term: n("if_primary_term"),
            external,
        }
    }

    /// The conflict reason, when the condition does not hold for `doc`.
    fn conflict(&self, id: &str, doc: Option<&StoredDoc>) -> Option<String> {
        if let Some(seq) = self.if_seq_no {
            let term = self.if_primary_term.unwrap_or(0);
            return match doc {
                Some(d) if d.seq_no == seq && term == 1 => None,
                Some(d) => Some(format!(
                    "[{id}]: version conflict, required seqNo [{seq}], primary term [{term}]. \
                     current document has seqNo [{}] and primary term [1]",
                    d.seq_no
                )),
                None => Some(format!(
                    "[{id}]: version conflict, required seqNo [{seq}], primary term [{term}]. \
                     but no document was found"
                )),
            };
        }
        match (self.external, doc) {
            (Some((v, gte)), Some(d)) if d.version > v || (d.version == v && !gte) => Some(format!(
                "[{id}]: version conflict, current version [{}] is higher or equal to the one provided [{v}]",
                d.version
            )),
            _ => None,
        }
    }
}

impl State {
    /// Applies one item; returns (op, status, item body).
    fn apply_item(
        &mut self,
        op: &str,
        index: String,
        id: Option<String>,
        source: Option<Bytes>,
        cond: Conditions,
    ) -> (String, u16, Value) {
        self.items_seen += 1;
        let scripted = self.faults.pop_front();
        let mut fault = scripted.unwrap_or(BulkFault::Ok);
        if let (None, Some(r)) = (scripted, self.random.as_mut()) {
            if r.draw() < r.throttle {
                fault = BulkFault::Throttle;
            }
        }
        if let Some((n, f)) = self.every {
            if n > 0 && self.items_seen % n == 0 {
                fault = f;
            }
        }
        let id = id.unwrap_or_else(|| format!("auto-{}", self.items_seen));
        let out = |status: u16, body: Value| (op.to_owned(), status, body);
        match fault {
            BulkFault::Ok => {}
            BulkFault::Throttle => {
                return out(
                    429,
                    error_item(
                        429,
                        "es_rejected_execution_exception",
                        "rejected execution of primary operation [fake]: queue capacity reached",
                        &index,
                        &id,
                    ),
                );
            }
            BulkFault::Unavailable => {
                return out(
                    503,
                    error_item(
                        503,
                        "unavailable_shards_exception",
                        "[fake][0] primary shard is not active",
                        &index,
                        &id,
                    ),
                );
            }
            BulkFault::Conflict => {
                return out(
                    409,
                    error_item(
                        409,
                        "version_conflict_engine_exception",
                        "[fake]: version conflict (scripted)",
                        &index,
                        &id,
                    ),
                );
            }
        }
        if !self.auto_create && !self.indices.contains_key(&index) {
            return out(
                404,
                error_item(
                    404,
                    "index_not_found_exception",
                    &format!("no such index [{index}]"),
                    &index,
                    &id,
                ),
            );
        }
        if let (Some(marker), Some(src)) = (&self.mapping_marker, &source) {
            if src.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                return out(
                    400,
                    json!({
                        "_index": index, "_id": id, "status": 400,
                        "error": {
                            "type": "mapper_parsing_exception",
                            "reason": "failed to parse field [fake] of type [long]",
                            "caused_by": { "type": "illegal_argument_exception",
                                           "reason": "For input string: \"fake\"" },
                        },
                    }),
                );
            }
        }
        let docs = self.indices.entry(index.clone()).or_default();
        let exists = docs.contains_key(&id);
        let mut version = docs.get(&id).map_or(1, |d| d.version + 1);
        if let Some(reason) = cond.conflict(&id, docs.get(&id)) {
            return out(
                409,
                shard_error_item(
                    409,
                    "version_conflict_engine_exception",
                    &reason,
                    &index,
                    &id,
                ),
            );
        }
        if let Some((v, _)) = cond.external {
            version = v;
        }
        // `doc_as_upsert` / `upsert` on a missing document: created from the body.
        let upsert = op == "update"
            && !exists
            && source.as_ref().is_some_and(|s| {
                serde_json::from_slice::<Value>(s).is_ok_and(|b| {
                    b.get("upsert").is_some() || b.get("doc_as_upsert") == Some(&Value::Bool(true))
                })
            });
        let next_seq = self.seq_nos.get(&index).copied().unwrap_or(0);
        let (status, result) = match op {
            "create" if exists => {
                return out(
                    409,
                    shard_error_item(
                        409,
                        "version_conflict_engine_exception",
                        &format!("[{id}]: version conflict, document already exists"),
                        &index,
                        &id,
                    ),
                );
            }
            "delete" => {
                if docs.remove(&id).is_some() {
                    (200, "deleted")
                } else {
                    (404, "not_found")
                }
            }
            "update" if !exists && !upsert => {
                return out(
                    404,
                    shard_error_item(
                        404,
                        "document_missing_exception",
                        &format!("[{id}]: document missing"),
                        &index,
                        &id,
                    ),
                );
            }
            // An update that sends what the document holds changes nothing (OpenSearch's
            // `detect_noop`): same version and `_seq_no`; `_shards` as OpenSearch 2.19 reports it.
            "update" if docs.get(&id).map(|d| &d.source) == source.as_ref() => {
                let (version, seq_no) = docs.get(&id).map_or((1, 0), |d| (d.version, d.seq_no));
                return out(
                    200,
                    json!({
                        "_index": index, "_id": id, "_version": version, "result": "noop",
                        "_shards": { "total": 2, "successful": 2, "failed": 0 },
                        "_seq_no": seq_no, "_primary_term": 1, "status": 200,
                    }),
                );
            }
            _ => {
                docs.insert(
                    id.clone(),
                    StoredDoc {
                        source: source.unwrap_or_default(),
                        version,
                        seq_no: next_seq,
                    },
                );
                *self.writes.entry((index.clone(), id.clone())).or_default() += 1;
                if exists {
                    (200, "updated")
                } else {
                    (201, "created")
                }
            }
        };
        let seq = self.seq_nos.entry(index.clone()).or_default();
        let seq_no = *seq;
        *seq += 1;
        out(
            status,
            json!({
                "_index": index, "_id": id, "_version": version, "result": result, "status": status,
                "_shards": { "total": 2, "successful": 2, "failed": 0 },
                "_seq_no": seq_no, "_primary_term": 1,
            }),
        )
    }
}
