//! The node pool: each node's state (alive or dead, failures, capability) and selection.

pub(crate) mod capability;
pub(crate) mod choice;
pub(crate) mod info;
pub(crate) mod latency;
pub(crate) mod node;
pub(crate) mod pool;
pub(crate) mod progress;
