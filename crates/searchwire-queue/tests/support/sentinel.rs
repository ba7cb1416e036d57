//! A primary, 2 replicas and 3 Sentinels of the test's own (`scripts/redis sentinel-start`),
//! stopped when dropped; and the Toxiproxy the failover tests slow the replication link with.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use redis::Value;

/// The first of the loopback ports the destructive Sentinel tests use (10 per test).
pub const PORT_BASE_ENV: &str = "SEARCHWIRE_TEST_REDIS_PORT_BASE";
/// Toxiproxy's API address (`scripts/toxiproxy start`).
pub const TOXIPROXY_ENV: &str = "SEARCHWIRE_TEST_TOXIPROXY";
/// The master name `scripts/redis sentinel-start` configures.
pub const MASTER: &str = "searchwire";

fn required(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var(super::REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{}=1 but {var} is not set ({what})", super::REQUIRE_ENV);
            }
            eprintln!("skipping: set {var} ({what}) to run this test");
            None
        }
    }
}

/// This test's block of 10 ports, or `None` (skip).
pub fn ports(slot: u16) -> Option<u16> {
    let base: u16 = required(PORT_BASE_ENV, "scripts/test sets it")?
        .parse()
        .expect("a port number");
    Some(base + slot * 10)
}

/// Toxiproxy's API address, or `None` (skip).
pub fn toxiproxy() -> Option<String> {
    required(TOXIPROXY_ENV, "scripts/toxiproxy start")
}

#[derive(Debug, Clone)]
pub struct Node {
    pub addr: String,
    pub port: u16,
    pub pid: u32,
    pub data: PathBuf,
}

impl Node {
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    pub async fn cmd(&self, args: &[&str]) -> redis::RedisResult<Value> {
        let mut c = redis::Client::open(self.url())?
            .get_multiplexed_async_connection()
            .await?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut c).await
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {}", self.pid);
    }
}

pub struct Topology {
    state: PathBuf,
    pub primary: Node,
    pub replicas: Vec<Node>,
    pub sentinels: Vec<Node>,
}

pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name)
}

impl Topology {
    /// Starts a set on the ports from `base` (`None`: free ports), with these extra
    /// `scripts/redis` settings.
    pub fn start(name: &str, base: Option<u16>, env: &[(&str, String)]) -> Topology {
        let state = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.redis/sentinel-tests")
            .join(format!("{name}-{}", std::process::id()));
        let mut cmd = Command::new(script("redis"));
        cmd.arg("sentinel-start")
            .env("SEARCHWIRE_REDIS_DIR", &state);
        match base {
            Some(b) => cmd.env("SEARCHWIRE_REDIS_PORT_BASE", b.to_string()),
            None => cmd.env_remove("SEARCHWIRE_REDIS_PORT_BASE"),
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let mut t = Topology {
            state,
            primary: Node {
                addr: String::new(),
                port: 0,
                pid: 0,
                data: PathBuf::new(),
            },
            replicas: Vec::new(),
            sentinels: Vec::new(),
        };
        assert!(
            out.status.success(),
            "scripts/redis sentinel-start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 4 {
                continue;
            }
            let node = Node {
                addr: f[1].to_owned(),
                port: f[1].rsplit_once(':').unwrap().1.parse().unwrap(),
                pid: f[2].parse().unwrap(),
                data: PathBuf::from(f[3]),
            };
            match f[0] {
                "primary" => t.primary = node,
                "replica" => t.replicas.push(node),
                "sentinel" => t.sentinels.push(node),
                _ => {}
            }
        }
        assert_eq!((t.replicas.len(), t.sentinels.len()), (2, 3));
        t
    }

    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.addr.clone()).collect()
    }

    /// The data nodes, primary first as started.
    pub fn servers(&self) -> Vec<&Node> {
        std::iter::once(&self.primary)
            .chain(self.replicas.iter())
            .collect()
    }

    pub fn server(&self, addr: &str) -> &Node {
        self.servers()
            .into_iter()
            .find(|n| n.addr == addr)
            .unwrap_or_else(|| panic!("no server at {addr}"))
    }

    /// What the first Sentinel that answers names as the primary.
    pub async fn named_primary(&self) -> Option<String> {
        for s in &self.sentinels {
            if let Ok(Value::Array(a)) = s
                .cmd(&["SENTINEL", "get-master-addr-by-name", MASTER])
                .await
            {
                if let [Value::BulkString(h), Value::BulkString(p)] = a.as_slice() {
                    return Some(format!(
                        "{}:{}",
                        String::from_utf8_lossy(h),
                        String::from_utf8_lossy(p)
                    ));
                }
            }
        }
        None
    }

    /// Polls (every 50 ms, up to `limit`) until every Sentinel names a primary other than
    /// `old`; returns it.
    pub async fn wait_for_new_primary(&self, old: &str, limit: Duration) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let mut names = Vec::new();
            for s in &self.sentinels {
                if let Ok(Value::Array(a)) = s
                    .cmd(&["SENTINEL", "get-master-addr-by-name", MASTER])
                    .await
                {
                    if let [Value::BulkString(h), Value::BulkString(p)] = a.as_slice() {
                        names.push(format!(
                            "{}:{}",
                            String::from_utf8_lossy(h),
                            String::from_utf8_lossy(p)
                        ));
                    }
                }
            }
            if names.len() == self.sentinels.len()
                && names.iter().all(|n| n != old && *n == names[0])
            {
                return names.remove(0);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Sentinels did not agree on a new primary within {limit:?}: {names:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls until `primary` answers ROLE master and at least `linked` other servers
    /// replicate from it with the link up (a forced failover may start then).
    pub async fn wait_settled(&self, primary: &str, linked: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        let port = primary.rsplit_once(':').unwrap().1;
        loop {
            let mut up = 0;
            for n in self.servers() {
                if n.addr == primary {
                    continue;
                }
                if let Ok(Value::BulkString(info)) = n.cmd(&["INFO", "replication"]).await {
                    let info = String::from_utf8_lossy(&info);
                    if info.contains("master_link_status:up")
                        && info.contains(&format!("master_port:{port}\r"))
                    {
                        up += 1;
                    }
                }
            }
            if up >= linked {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {up} replicas linked to {primary} within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Stopped replicas (SIGSTOP) must run again to be stopped gently.
        for n in self.servers() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(n.pid.to_string())
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = Command::new(script("redis"))
            .arg("sentinel-stop")
            .env("SEARCHWIRE_REDIS_DIR", &self.state)
            .status();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// One Toxiproxy API call (`curl`, as scripts/toxiproxy uses): `method path [json body]`.
pub fn toxiproxy_call(api: &str, method: &str, path: &str, body: Option<&str>) {
    let mut cmd = Command::new("curl");
    cmd.args(["-fsS", "-X", method, &format!("http://{api}{path}")]);
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "-d", b]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "toxiproxy {method} {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
