//! The builder's settings of the read path beyond retries: hedged reads.

use crate::config::ClientBuilder;
use crate::policy::hedge::Hedging;

impl ClientBuilder {
    /// Hedges idempotent reads (default: off; see [`Hedging`](crate::Hedging) and
    /// `docs/architecture/transport.md`): a read with no answer after the hedge delay
    /// (default: the observed p95 of recent attempts) is sent to a second node as well, and
    /// the first answer wins; the other is cancelled. At most
    /// [`max_extra`](crate::Hedging::max_extra) hedges per read (default 5 %), each one
    /// also taking a retry from the retry budget; none while the breaker is not closed.
    /// A request opts out with [`Request::no_hedge`](crate::Request::no_hedge).
    pub fn hedging(mut self, hedging: Hedging) -> ClientBuilder {
        self.hedging = Some(hedging);
        self
    }
}
