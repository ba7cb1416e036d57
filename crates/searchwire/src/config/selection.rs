//! The setters of node selection.

use std::time::Duration;

use super::ClientBuilder;
use crate::nodes::choice::Selection;

impl ClientBuilder {
    /// How each attempt's node is chosen (default [`Selection::LatencyAware`]: the power of
    /// two choices over each node's peak-EWMA latency × attempts in flight; see
    /// `docs/architecture/transport.md`). [`Selection::RoundRobin`] is the weighted round
    /// robin of earlier versions.
    pub fn selection(mut self, selection: Selection) -> ClientBuilder {
        self.selection = selection;
        self
    }

    /// The time constant of latency-aware selection's estimates (default 10 s): how fast
    /// an estimate forgets a slow answer, and how long a node may go without a sample
    /// before its estimate is replaced by the cluster median and it is tried again. Must be
    /// positive.
    pub fn selection_decay(mut self, decay: Duration) -> ClientBuilder {
        self.selection_decay = decay;
        self
    }
}
