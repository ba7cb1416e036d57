//! Real clients that no one here wrote, unmodified, against `searchwire relay` in front of
//! the real nodes `scripts/test` starts: the programs under `compat/` (opensearch-py,
//! opensearch-js, Elastic's go-docappender, go-elasticsearch's `esutil.BulkIndexer`,
//! elasticsearch-java's `BulkIngester`), each using its library as an application does.
//!
//! One run per engine, every client of that engine at once, each into its own index: the
//! clients make their start-up calls through the relay (version, an index template, the
//! index), then write documents with ids at a steady pace while node 3 is SIGKILLed and
//! restarted; once the relay has drained its queue, each searches what it wrote. The check
//! is exact, per client: every document it handed its library was acknowledged, the index
//! holds exactly the acknowledged ids (count and `mget`), each `_version` 1, the template's
//! 3 shards are on the index, and the client's own search and count see every document.
//! Every client is checked before the test fails, and the failure lists each one's
//! problems, so one missing route does not hide how the others did.
//!
//! The client programs speak a line protocol on stdout (`progress N`, `acked ID`,
//! `written`, a JSON summary last) and take `stop` and `search` on stdin; see
//! `compat/README.md`. They are installed by `scripts/compat-clients install` (a venv, `npm
//! ci`, `go build`, `mvn package`) into `SEARCHWIRE_COMPAT_DIR` (default
//! `<repo>/target/compat`) and `compat/`; a missing one skips with a note, unless
//! `SEARCHWIRE_REQUIRE_COMPAT=1` (`scripts/test` sets it), which makes it a failure. Gated
//! like the other real-node tests on `SEARCHWIRE_TEST_CLUSTER` / `SEARCHWIRE_TEST_ES_CLUSTER`
//! (and their `SEARCHWIRE_REQUIRE_*`). Kills and restarts node 3 of the cluster in
//! `SEARCHWIRE_CLUSTER_DIR` / `SEARCHWIRE_ES_CLUSTER_DIR`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;
mod relay_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use real_support::{cluster_cmd, cluster_health, ELASTICSEARCH, OPENSEARCH};
use relay_support::{free_port, spawn_relay, terminate, wait_drained, RelayProc};
use searchwire::{Client, Request};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const VICTIM: &str = "3";
/// Documents each client must have handed its library before node 3 is killed, and again
/// after it is back, so every client writes through the whole outage.
const LEAD: u64 = 300;
/// Documents per second per client (`COMPAT_RATE`): ~30 s of outage and recovery make
/// about 3,000-5,000 documents per client.
const RATE: &str = "100";

/// The two engine runs share the machine's two cores with six JVMs: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Where `scripts/compat-clients install` put the virtualenv and the Go binary.
fn compat_dir() -> PathBuf {
    std::env::var_os("SEARCHWIRE_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join("target/compat"))
}

/// One client program to run: a name for the report, the command line, its index.
struct Spec {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    index: String,
    /// What must be installed for it (the install's products).
    needs: Vec<PathBuf>,
    /// What else its summary must say (beyond the checks every client gets).
    extra: fn(&Value, &str) -> Vec<String>,
}

fn no_extra(_: &Value, _: &str) -> Vec<String> {
    Vec::new()
}

/// The installed programs, or `None` (a note) when one is missing and not required.
fn installed(test: &str, needed: &[PathBuf]) -> bool {
    let required = std::env::var("SEARCHWIRE_REQUIRE_COMPAT").is_ok_and(|v| v.trim() == "1");
    let missing: Vec<String> = needed
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !required,
        "{test}: SEARCHWIRE_REQUIRE_COMPAT=1 but these are not installed (run \
         scripts/compat-clients install): {missing:?}"
    );
    eprintln!("{test}: skipped (run scripts/compat-clients install; missing {missing:?})");
    false
}

/// What a running client program has said so far.
#[derive(Default)]
struct Seen {
    progress: u64,
    acked: Vec<String>,
    written: bool,
    summary: Option<Value>,
    exited: bool,
    /// Lines that are none of the protocol's, and the last lines of stderr.
    other: Vec<String>,
}

struct Running {
    spec: Spec,
    child: Child,
    stdin: Option<ChildStdin>,
    seen: Arc<Mutex<Seen>>,
}

fn spawn_client(spec: Spec, relay_url: &str) -> Running {
    let mut child = Command::new(&spec.program)
        .args(&spec.args)
        .arg(relay_url)
        .arg(&spec.index)
        .env("COMPAT_RATE", RATE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: cannot start {:?}: {e}", spec.name, spec.program));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let mut s = seen.lock().unwrap();
                if let Some(n) = l.strip_prefix("progress ") {
                    s.progress = s.progress.max(n.trim().parse().unwrap_or(0));
                } else if let Some(id) = l.strip_prefix("acked ") {
                    s.acked.push(id.trim().to_owned());
                } else if l == "written" {
                    s.written = true;
                } else if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&l) {
                    s.summary = Some(v);
                } else {
                    s.other.push(l);
                }
            }
            seen.lock().unwrap().exited = true;
        });
    }
    {
        let (seen, name) = (seen.clone(), spec.name.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                eprintln!("[{name}] {l}");
                let mut s = seen.lock().unwrap();
                s.other.push(l);
                if s.other.len() > 40 {
                    s.other.remove(0);
                }
            }
        });
    }
    let stdin = child.stdin.take();
    Running {
        spec,
        child,
        stdin,
        seen,
    }
}

impl Running {
    fn progress(&self) -> u64 {
        let s = self.seen.lock().unwrap();
        s.progress.max(s.acked.len() as u64)
    }

    /// It printed `written` (it stopped writing, by itself when something failed).
    fn done_writing(&self) -> bool {
        self.seen.lock().unwrap().written
    }

    fn gone(&self) -> bool {
        self.seen.lock().unwrap().exited
    }

    async fn say(&mut self, word: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            // A client that has exited cannot hear it; its report says why.
            let _ = stdin.write_all(format!("{word}\n").as_bytes()).await;
            let _ = stdin.flush().await;
        }
    }
}

/// Waits until every client still running satisfies `cond`, for at most `within`.
async fn wait_all(
    clients: &[Running],
    what: &str,
    within: Duration,
    cond: impl Fn(&Running) -> bool,
) {
    let deadline = Instant::now() + within;
    loop {
        let pending: Vec<&str> = clients
            .iter()
            .filter(|c| !c.gone() && !cond(c))
            .map(|c| c.spec.name.as_str())
            .collect();
        if pending.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "real_dropin_clients: {what}: still waiting for {pending:?} after {within:?}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Node 3 restarted if it is dead when the run ends, even on panic.
struct RestartVictim(&'static [&'static str]);

impl Drop for RestartVictim {
    fn drop(&mut self) {
        let args = |verb: &'static str| -> Vec<&str> {
            let mut a = self.0.to_vec();
            a.push(verb);
            a
        };
        let (_, status) = cluster_cmd(&args("status"));
        let dead = status.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&VICTIM) && f.last() == Some(&"dead")
        });
        if dead {
            let mut a = args("restart");
            a.push(VICTIM);
            let (ok, out) = cluster_cmd(&a);
            if !ok {
                eprintln!("restore: scripts/cluster restart {VICTIM} failed: {out}");
            }
        }
    }
}

/// Runs `specs` against a relay in front of `urls` through a kill and restart of node 3
/// (`engine_args` selects the engine for `scripts/cluster`), then checks each client;
/// panics with every client's problems.
async fn run(
    urls: Vec<String>,
    engine_args: &'static [&'static str],
    version: &str,
    specs: Vec<Spec>,
) {
    let t0 = Instant::now();
    let _restore = RestartVictim(engine_args);
    let direct = Client::builder().nodes(urls.clone()).build().unwrap();
    cluster_health(
        &direct,
        "",
        &[("wait_for_nodes", "3"), ("wait_for_status", "yellow")],
        Duration::from_secs(120),
    )
    .await;
    for s in &specs {
        let _ = direct.send(Request::delete(format!("/{}", s.index))).await;
        let _ = direct
            .send(Request::delete(format!(
                "/_index_template/{}-template",
                s.index
            )))
            .await;
    }
    let queue = tempfile::tempdir().unwrap();
    let relay = spawn_relay(&urls.join(","), queue.path(), free_port(), &[]).await;
    let relay_url = format!("http://{}", relay.addr);
    let mut clients: Vec<Running> = specs
        .into_iter()
        .map(|s| spawn_client(s, &relay_url))
        .collect();

    wait_all(
        &clients,
        "the lead before the kill",
        Duration::from_secs(120),
        |c| c.progress() >= LEAD || c.done_writing(),
    )
    .await;
    let cmd = |verb: &'static str| {
        let mut a = engine_args.to_vec();
        a.extend([verb, VICTIM]);
        a
    };
    let (ok, out) = cluster_cmd(&cmd("kill"));
    assert!(ok, "scripts/cluster kill {VICTIM}: {out}");
    eprintln!(
        "node {VICTIM} SIGKILLed at {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    // The clients write on while the node is gone, before the restart brings it back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restart = cmd("restart");
    let (ok, out) = tokio::task::spawn_blocking(move || cluster_cmd(&restart))
        .await
        .unwrap();
    assert!(ok, "scripts/cluster restart {VICTIM}: {out}");
    eprintln!(
        "node {VICTIM} restarted at {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let at_restart: Vec<u64> = clients.iter().map(Running::progress).collect();
    let after: Vec<(String, u64)> = clients
        .iter()
        .zip(&at_restart)
        .map(|(c, p)| (c.spec.name.clone(), p + LEAD))
        .collect();
    wait_all(
        &clients,
        "the lead after the restart",
        Duration::from_secs(120),
        |c| {
            let want = after
                .iter()
                .find(|(n, _)| *n == c.spec.name)
                .map_or(0, |(_, p)| *p);
            c.progress() >= want || c.done_writing()
        },
    )
    .await;

    for c in &mut clients {
        c.say("stop").await;
    }
    wait_all(
        &clients,
        "every answer",
        Duration::from_secs(240),
        Running::done_writing,
    )
    .await;
    eprintln!(
        "clients stopped writing at {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    wait_drained(relay.addr, Duration::from_secs(300)).await;
    eprintln!("relay drained at {:.1}s", t0.elapsed().as_secs_f64());
    for c in &mut clients {
        c.say("search").await;
    }
    for c in &mut clients {
        let _ = tokio::time::timeout(Duration::from_secs(120), c.child.wait()).await;
        c.stdin = None;
    }
    // The reader tasks see end of stream once the processes are gone.
    wait_all(&clients, "the summaries", Duration::from_secs(10), |_| {
        false
    })
    .await;

    let mut report = Vec::new();
    let mut failed = false;
    for c in &clients {
        let problems = check(&direct, &relay, c, version).await;
        let acked = c.seen.lock().unwrap().acked.len();
        report.push(format!(
            "{:<34} {:>5} acked  {}",
            c.spec.name,
            acked,
            if problems.is_empty() {
                "ok".to_owned()
            } else {
                failed = true;
                format!("FAILED:\n      {}", problems.join("\n      "))
            }
        ));
    }
    assert_eq!(
        terminate(relay).await,
        Some(0),
        "the relay exits 0 on SIGTERM"
    );
    // The indices and templates go: the suites after this one share the cluster.
    for c in &clients {
        let index = &c.spec.index;
        let _ = direct.send(Request::delete(format!("/{index}"))).await;
        let _ = direct
            .send(Request::delete(format!(
                "/_index_template/{index}-template"
            )))
            .await;
    }
    eprintln!(
        "real_dropin_clients ({:.1}s):\n  {}",
        t0.elapsed().as_secs_f64(),
        report.join("\n  ")
    );
    assert!(
        !failed,
        "clients through the relay:\n  {}",
        report.join("\n  ")
    );
}

/// Everything wrong with one client's run (empty: it passed).
async fn check(direct: &Client, relay: &RelayProc, c: &Running, version: &str) -> Vec<String> {
    let (acked, progress, summary, other) = {
        let s = c.seen.lock().unwrap();
        (
            s.acked.clone(),
            s.progress,
            s.summary.clone(),
            s.other.clone(),
        )
    };
    let mut p = Vec::new();
    let Some(summary) = summary else {
        p.push(format!(
            "no summary; its last output: {:?}",
            &other[other.len().saturating_sub(15)..]
        ));
        return p;
    };
    eprintln!("{}: {summary}", c.spec.name);
    let unique: BTreeSet<&String> = acked.iter().collect();
    if unique.len() != acked.len() {
        p.push(format!(
            "{} ids acknowledged twice",
            acked.len() - unique.len()
        ));
    }
    if (acked.len() as u64) < 2 * LEAD {
        p.push(format!(
            "only {} acknowledged: it did not write through the outage",
            acked.len()
        ));
    }
    // A `create` the cluster answered 409 although only this client writes its ids: the
    // cluster re-ran a shard's bulk on a new primary when the node died, and its second run
    // found the document the first had written. The relay passes such a 409 on
    // (docs/architecture/relay.md, "A live `create` answered 409"); every client reports it
    // as "already exists", and the document must then be in the index once, like an
    // acknowledged one. The clients hand ids doc-000000, doc-000001, ... in order.
    let acked_set: BTreeSet<&str> = acked.iter().map(String::as_str).collect();
    let exists: Vec<String> = (0..progress)
        .map(|n| format!("doc-{n:06}"))
        .filter(|id| !acked_set.contains(id.as_str()))
        .collect();
    let errors = summary["errors"].as_array().cloned().unwrap_or_default();
    let all_conflicts = errors.iter().all(|e| {
        e.as_str()
            .is_some_and(|e| e.contains("409") && e.contains("version_conflict_engine_exception"))
    });
    let conflicts_only =
        all_conflicts && summary["error_count"].as_u64() == Some(exists.len() as u64);
    if acked.len() as u64 != progress && !conflicts_only {
        p.push(format!(
            "{} documents handed to the client, {} acknowledged",
            progress,
            acked.len()
        ));
    }
    if summary["error_count"] != 0 && !conflicts_only {
        p.push(format!("errors: {}", summary["errors"]));
    }
    if conflicts_only && !exists.is_empty() {
        eprintln!(
            "{}: {} creates answered 409 (the cluster's own re-run), checked as present",
            c.spec.name,
            exists.len()
        );
    }
    let present: Vec<String> = acked.iter().cloned().chain(exists).collect();
    let acked = &present;
    // The index holds exactly the acknowledged ids, each written once.
    let index = &c.spec.index;
    let _ = direct
        .send(Request::post(format!("/{index}/_refresh")))
        .await;
    let count = match direct.send(Request::get(format!("/{index}/_count"))).await {
        Ok(r) => r.json::<Value>().ok().and_then(|v| v["count"].as_u64()),
        Err(_) => None,
    };
    if count != Some(acked.len() as u64) {
        p.push(format!(
            "the index counts {count:?}, {} were acknowledged",
            acked.len()
        ));
    }
    let (mut missing, mut rewritten) = (0usize, 0usize);
    for chunk in acked.chunks(2_000) {
        let r = direct
            .send(
                Request::post(format!("/{index}/_mget?_source=false")).json(&json!({"ids": chunk})),
            )
            .await;
        let docs = match r.map(|r| r.json::<Value>()) {
            Ok(Ok(v)) => v["docs"].as_array().cloned().unwrap_or_default(),
            other => {
                p.push(format!("mget failed: {other:?}"));
                break;
            }
        };
        for d in docs {
            if d["found"] != true {
                missing += 1;
            } else if d["_version"] != 1 {
                rewritten += 1;
            }
        }
    }
    if missing > 0 {
        p.push(format!("{missing} acknowledged documents are missing"));
    }
    if rewritten > 0 {
        p.push(format!(
            "{rewritten} documents have _version > 1 (written twice)"
        ));
    }
    // Its ordinary calls, through the relay.
    if !summary["info"]
        .as_str()
        .is_some_and(|v| v.starts_with(version))
    {
        p.push(format!("version: {}", summary["info"]));
    }
    for step in ["template", "create_index", "refresh"] {
        if summary[step] != true {
            p.push(format!("{step}: {}", summary[step]));
        }
    }
    for step in ["search_total", "count"] {
        if summary[step].as_u64() != Some(acked.len() as u64) {
            p.push(format!(
                "{step}: {} (acknowledged {})",
                summary[step],
                acked.len()
            ));
        }
    }
    let shards = match direct
        .send(Request::get(format!("/{index}/_settings")))
        .await
    {
        Ok(r) => r
            .json::<Value>()
            .ok()
            .map(|v| v[index.as_str()]["settings"]["index"]["number_of_shards"].clone()),
        Err(_) => None,
    };
    if shards != Some(json!("3")) {
        p.push(format!(
            "the index has {shards:?} shards, not the template's 3"
        ));
    }
    p.extend((c.spec.extra)(&summary, &relay.addr.to_string()));
    p
}

fn python_spec(mode: &str) -> Spec {
    let python = compat_dir().join("venv/bin/python");
    Spec {
        name: format!("opensearch-py {mode}"),
        program: python.clone(),
        args: vec![
            format!("{REPO}/compat/python/opensearch_py_client.py"),
            mode.to_owned(),
        ],
        index: format!("sw-dropin-py-{}", mode.replace('_', "-")),
        needs: vec![python],
        extra: if mode == "sniff" {
            sniffed_the_relay
        } else {
            no_extra
        },
    }
}

fn js_spec() -> Spec {
    Spec {
        name: "opensearch-js helpers.bulk".into(),
        program: "node".into(),
        args: vec![format!("{REPO}/compat/js/opensearch_js_client.js")],
        index: "sw-dropin-js".into(),
        needs: vec![Path::new(REPO)
            .join("compat/js/node_modules/@opensearch-project/opensearch/package.json")],
        extra: no_extra,
    }
}

fn go_spec(mode: &str, what: &str) -> Spec {
    let bin = compat_dir().join("bin/compat-go");
    Spec {
        name: what.into(),
        program: bin.clone(),
        args: vec![mode.to_owned()],
        index: format!("sw-dropin-go-{mode}"),
        needs: vec![bin],
        extra: no_extra,
    }
}

fn java_spec() -> Spec {
    let target = Path::new(REPO).join("compat/java/target");
    Spec {
        name: "elasticsearch-java BulkIngester".into(),
        program: "java".into(),
        args: vec![
            "-cp".into(),
            format!(
                "{}:{}/lib/*",
                target.join("compat-java.jar").display(),
                target.display()
            ),
            "searchwire.compat.ElasticsearchJavaClient".into(),
        ],
        index: "sw-dropin-java".into(),
        needs: vec![target.join("compat-java.jar")],
        extra: no_extra,
    }
}

/// After `sniff_on_start`, the client's pool holds the relay and nothing else.
fn sniffed_the_relay(summary: &Value, relay: &str) -> Vec<String> {
    let mut p = Vec::new();
    if summary["sniff"] != "ok" {
        p.push(format!("sniff: {}", summary["sniff"]));
    }
    if summary["hosts"] != json!([format!("http://{relay}")]) {
        p.push(format!(
            "after sniffing the client talks to {}, not only {relay}",
            summary["hosts"]
        ));
    }
    p
}

#[test]
fn opensearch_clients_write_exactly_once_through_the_relay_while_a_node_is_killed() {
    let test = "opensearch_clients_write_exactly_once_through_the_relay_while_a_node_is_killed";
    let Some(urls) = OPENSEARCH.urls(test) else {
        return;
    };
    let mut specs: Vec<Spec> = ["bulk", "streaming_bulk", "parallel_bulk", "single", "sniff"]
        .into_iter()
        .map(python_spec)
        .collect();
    specs.push(js_spec());
    let needed: Vec<PathBuf> = specs.iter().flat_map(|s| s.needs.clone()).collect();
    if !installed(test, &needed) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let version = OPENSEARCH.expected_version();
    real_support::runtime().block_on(run(urls, &[], &version, specs));
}

#[test]
fn elasticsearch_clients_write_exactly_once_through_the_relay_while_a_node_is_killed() {
    let test = "elasticsearch_clients_write_exactly_once_through_the_relay_while_a_node_is_killed";
    let Some(urls) = ELASTICSEARCH.urls(test) else {
        return;
    };
    let specs = vec![
        go_spec("docappender", "go-docappender v2 BulkIndexer"),
        go_spec("esutil", "go-elasticsearch esutil.BulkIndexer"),
        java_spec(),
    ];
    let needed: Vec<PathBuf> = specs.iter().flat_map(|s| s.needs.clone()).collect();
    if !installed(test, &needed) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let version = ELASTICSEARCH.expected_version();
    real_support::runtime().block_on(run(urls, &["--engine", "elasticsearch"], &version, specs));
}
