//! The builder's settings of the request path beyond retries: hedged reads and the
//! adaptive concurrency limit.

use crate::config::ClientBuilder;
use crate::policy::hedge::Hedging;
use crate::policy::limit::AdaptiveConcurrency;

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

    /// Limits the requests this client has in flight to the cluster, learning the limit
    /// from latency and overload signals (default: off; see
    /// [`AdaptiveConcurrency`](crate::AdaptiveConcurrency) and
    /// `docs/architecture/transport.md`). Over the limit a request waits up to
    /// [`max_wait`](crate::AdaptiveConcurrency::max_wait) (default: none) within its
    /// deadline, then fails with
    /// [`ErrorKind::ConcurrencyLimited`](crate::ErrorKind::ConcurrencyLimited) without
    /// being sent.
    pub fn adaptive_concurrency(mut self, cfg: AdaptiveConcurrency) -> ClientBuilder {
        self.adaptive_concurrency = Some(cfg);
        self
    }
}
