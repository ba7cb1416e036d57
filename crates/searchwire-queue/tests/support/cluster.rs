//! A Redis Cluster of the test's own (3 primaries, 3 replicas: `scripts/redis
//! cluster-start`), stopped when dropped.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::sentinel::{script, Node};

pub struct ClusterTopology {
    state: PathBuf,
    /// Every node, in `scripts/redis`'s order (node0..node5), with its role at start.
    pub nodes: Vec<(String, Node)>,
}

impl ClusterTopology {
    /// Starts a cluster on the ports `base`..`base + 5` (and their bus ports, -10000).
    pub fn start(name: &str, base: u16) -> ClusterTopology {
        let state = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.redis/cluster-tests")
            .join(format!("{name}-{}", std::process::id()));
        let out = Command::new(script("redis"))
            .arg("cluster-start")
            .env("SEARCHWIRE_REDIS_DIR", &state)
            .env("SEARCHWIRE_REDIS_PORT_BASE", base.to_string())
            .output()
            .unwrap();
        let mut t = ClusterTopology {
            state,
            nodes: Vec::new(),
        };
        assert!(
            out.status.success(),
            "scripts/redis cluster-start failed: {}",
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
            t.nodes.push((f[0].to_owned(), node));
        }
        assert_eq!(t.nodes.len(), 6, "six nodes");
        t
    }

    /// Every node's address, for `ClusterConfig::new`.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|(_, n)| n.addr.clone()).collect()
    }

    /// The node at `addr`.
    pub fn node(&self, addr: &str) -> (usize, &Node) {
        let i = self.nodes.iter().position(|(_, n)| n.addr == addr).unwrap();
        (i, &self.nodes[i].1)
    }

    /// Starts node `i` again after it died (`scripts/redis cluster-restart`).
    pub fn restart(&mut self, i: usize) {
        let out = Command::new(script("redis"))
            .arg("cluster-restart")
            .arg(i.to_string())
            .env("SEARCHWIRE_REDIS_DIR", &self.state)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/redis cluster-restart failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8(out.stdout).unwrap();
        let pid = line.split(' ').nth(2).unwrap().trim().parse().unwrap();
        self.nodes[i].1.pid = pid;
    }

    /// Waits until the node at `addr` answers `ROLE` with `want` (`master`, `slave`).
    pub async fn await_role(&self, addr: &str, want: &str, limit: Duration) {
        assert!(
            self.wait_role(addr, want, limit).await,
            "{addr} is not {want} within {limit:?}"
        );
    }

    /// Whether the node at `addr` answers `ROLE` with `want` within `limit`.
    pub async fn wait_role(&self, addr: &str, want: &str, limit: Duration) -> bool {
        let node = self.node(addr).1.clone();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Ok(redis::Value::Array(v)) = node.cmd(&["ROLE"]).await {
                if matches!(v.first(), Some(redis::Value::BulkString(b)) if b == want.as_bytes()) {
                    return true;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ClusterTopology {
    fn drop(&mut self) {
        let _ = Command::new(script("redis"))
            .arg("cluster-stop")
            .env("SEARCHWIRE_REDIS_DIR", &self.state)
            .status();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
