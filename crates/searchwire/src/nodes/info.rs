//! What a node says about itself (`GET /`) and about its cluster
//! (`GET /_cluster/health?local=true`), parsed. Plain data: the health checks fetch it,
//! the node pool stores it.

use serde::Deserialize;

/// What `GET /` tells about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// `name`.
    pub name: String,
    /// `cluster_name`.
    pub cluster_name: String,
    /// `version.number`.
    pub version: String,
    /// `opensearch` or `elasticsearch` (from `version.distribution`; absent means
    /// Elasticsearch).
    pub distribution: String,
}

/// The cluster status a node reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClusterStatus {
    /// Every primary and replica shard is assigned.
    Green,
    /// Every primary is assigned, some replicas are not (always the case on a single-node
    /// cluster with replicas configured): functional, not fully redundant.
    Yellow,
    /// Some primary shards are unassigned.
    Red,
    /// No node reported a status (or reported one this client does not know).
    #[default]
    Unknown,
}

impl ClusterStatus {
    /// `green`, `yellow`, `red` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClusterStatus::Green => "green",
            ClusterStatus::Yellow => "yellow",
            ClusterStatus::Red => "red",
            ClusterStatus::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> ClusterStatus {
        match s {
            "green" => ClusterStatus::Green,
            "yellow" => ClusterStatus::Yellow,
            "red" => ClusterStatus::Red,
            _ => ClusterStatus::Unknown,
        }
    }
}

impl std::fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's answer to `GET /_cluster/health?local=true`: the cluster as that node's local
/// cluster state sees it. Informative only; it never fails a node's health check.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ClusterHealthLocal {
    /// `cluster_name`.
    pub cluster_name: String,
    /// `status`.
    pub status: ClusterStatus,
    /// `timed_out` (only ever true with `wait_for_*`, which searchwire never sends).
    pub timed_out: bool,
    /// `number_of_nodes`.
    pub number_of_nodes: u32,
    /// `number_of_data_nodes`.
    pub number_of_data_nodes: u32,
    /// `discovered_cluster_manager` (`discovered_master` on Elasticsearch and older
    /// OpenSearch); `None` when the node did not say.
    pub discovered_cluster_manager: Option<bool>,
    /// `active_primary_shards`.
    pub active_primary_shards: u64,
    /// `active_shards`.
    pub active_shards: u64,
    /// `relocating_shards`.
    pub relocating_shards: u64,
    /// `initializing_shards`.
    pub initializing_shards: u64,
    /// `unassigned_shards`.
    pub unassigned_shards: u64,
    /// `delayed_unassigned_shards`.
    pub delayed_unassigned_shards: u64,
    /// `number_of_pending_tasks`.
    pub number_of_pending_tasks: u64,
    /// `number_of_in_flight_fetch`.
    pub number_of_in_flight_fetch: u64,
    /// `task_max_waiting_in_queue_millis`.
    pub task_max_waiting_in_queue_millis: u64,
    /// `active_shards_percent_as_number`.
    pub active_shards_percent: f64,
}

#[derive(Deserialize)]
struct RootBody {
    name: String,
    cluster_name: String,
    version: RootVersion,
}

#[derive(Deserialize)]
struct RootVersion {
    number: String,
    distribution: Option<String>,
}

/// Parses a `GET /` body. Requires `name`, `cluster_name` and `version.number`.
pub(crate) fn parse_root(body: &[u8]) -> Result<NodeInfo, String> {
    let b: RootBody = serde_json::from_slice(body).map_err(|e| {
        format!("GET / did not return an OpenSearch/Elasticsearch info document: {e}")
    })?;
    Ok(NodeInfo {
        name: b.name,
        cluster_name: b.cluster_name,
        version: b.version.number,
        distribution: b
            .version
            .distribution
            .unwrap_or_else(|| "elasticsearch".to_string()),
    })
}

#[derive(Deserialize)]
struct HealthBody {
    cluster_name: String,
    status: String,
    #[serde(default)]
    timed_out: bool,
    #[serde(default)]
    number_of_nodes: u32,
    #[serde(default)]
    number_of_data_nodes: u32,
    discovered_cluster_manager: Option<bool>,
    discovered_master: Option<bool>,
    #[serde(default)]
    active_primary_shards: u64,
    #[serde(default)]
    active_shards: u64,
    #[serde(default)]
    relocating_shards: u64,
    #[serde(default)]
    initializing_shards: u64,
    #[serde(default)]
    unassigned_shards: u64,
    #[serde(default)]
    delayed_unassigned_shards: u64,
    #[serde(default)]
    number_of_pending_tasks: u64,
    #[serde(default)]
    number_of_in_flight_fetch: u64,
    #[serde(default)]
    task_max_waiting_in_queue_millis: u64,
    #[serde(default)]
    active_shards_percent_as_number: f64,
}

/// Parses a `_cluster/health` body. Requires `cluster_name` and `status`; the counters
/// default to 0 when absent.
pub(crate) fn parse_cluster_health(body: &[u8]) -> Result<ClusterHealthLocal, String> {
    let b: HealthBody = serde_json::from_slice(body)
        .map_err(|e| format!("the reply is not a cluster-health document: {e}"))?;
    Ok(ClusterHealthLocal {
        cluster_name: b.cluster_name,
        status: ClusterStatus::parse(&b.status),
        timed_out: b.timed_out,
        number_of_nodes: b.number_of_nodes,
        number_of_data_nodes: b.number_of_data_nodes,
        discovered_cluster_manager: b.discovered_cluster_manager.or(b.discovered_master),
        active_primary_shards: b.active_primary_shards,
        active_shards: b.active_shards,
        relocating_shards: b.relocating_shards,
        initializing_shards: b.initializing_shards,
        unassigned_shards: b.unassigned_shards,
        delayed_unassigned_shards: b.delayed_unassigned_shards,
        number_of_pending_tasks: b.number_of_pending_tasks,
        number_of_in_flight_fetch: b.number_of_in_flight_fetch,
        task_max_waiting_in_queue_millis: b.task_max_waiting_in_queue_millis,
        active_shards_percent: b.active_shards_percent_as_number,
    })
}
