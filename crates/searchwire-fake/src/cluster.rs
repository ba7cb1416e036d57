//! A set of fake nodes that report each other as one cluster.

use std::io;
use std::sync::Arc;

use crate::node::FakeNode;
use crate::opensearch::Member;

/// `n` fake nodes, named `node-0` .. `node-{n-1}`, that report each other in
/// `GET /_cluster/health` (`number_of_nodes`) and `GET /_nodes/http,os`.
///
/// Dropping the cluster stops every node no other [`FakeNode`] clone keeps alive.
#[derive(Debug)]
pub struct FakeCluster {
    nodes: Vec<FakeNode>,
}

impl FakeCluster {
    /// Starts `n` nodes on ephemeral `127.0.0.1` ports.
    pub async fn start(n: usize) -> io::Result<FakeCluster> {
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            nodes.push(FakeNode::start(&format!("node-{i}")).await?);
        }
        let members: Arc<[Member]> = nodes
            .iter()
            .map(|node| Member::new(&node.name(), node.addr()))
            .collect();
        for node in &nodes {
            node.set_members(members.clone());
        }
        Ok(FakeCluster { nodes })
    }

    /// Node `i` (0-based).
    ///
    /// # Panics
    ///
    /// If `i` is not below the cluster size, like slice indexing.
    pub fn node(&self, i: usize) -> &FakeNode {
        &self.nodes[i]
    }

    /// All nodes, in start order.
    pub fn nodes(&self) -> &[FakeNode] {
        &self.nodes
    }

    /// The nodes' URLs (`"http://127.0.0.1:PORT"`), in start order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(FakeNode::url).collect()
    }

    /// Total requests seen by all nodes.
    pub fn request_count(&self) -> usize {
        self.nodes.iter().map(FakeNode::request_count).sum()
    }
}
