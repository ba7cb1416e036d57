//! Per-node cluster-health capability: whether this client's credentials may read
//! `GET /_cluster/health?local=true` on a node. Plain data and pure transitions; the I/O
//! lives in [`crate::health`] and [`crate::health::refresh`].
//!
//! ```text
//!            ┌──────────┐  first successful GET /  ┌────────────────────────────┐
//!  created ─►│ Pending  │ ───────────────────────► │ async probe                │
//!            └──────────┘ ◄── 5xx, timeout, ────── │ /_cluster/health?local=true│
//!               ▲    ▲        network error        └──┬───────────────┬─────────┘
//!               │    │                           200 │               │ 401/403
//!               │    │                               ▼               ▼
//!               │    │  401/403 on a check   ┌───────────┐   ┌─────────────┐
//!               │    └────────────────────── │ Available │   │ Unavailable │
//!               │     or refresh (data       └───────────┘   └──────┬──────┘
//!               │     cleared; GET / fallback)                      │ re-probe after
//!               └───────────────────────────────────────────────────┘ 4 h ± 10 %
//! ```
//!
//! Pending and Unavailable nodes are health-checked with `GET /`; Available nodes with
//! `/_cluster/health?local=true`. A probe never delays the check that triggered it. A
//! 401/403 here is a missing `cluster:monitor/health` privilege, never a dead node.

use std::time::Duration;

use tokio::time::Instant;

use crate::nodes::info::{ClusterHealthLocal, NodeInfo};

/// Whether a node serves `GET /_cluster/health?local=true` to this client's credentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// Not probed yet, or the last probe failed transiently (5xx, timeout, network): health
    /// checks use `GET /` and the next successful one probes again.
    #[default]
    Pending,
    /// The probe answered 200: health checks use `/_cluster/health?local=true`, and the
    /// answer is stored on the node.
    Available,
    /// The probe answered 401/403 (the credentials lack `cluster:monitor/health`): health
    /// checks use `GET /`; probed again after the re-probe interval.
    Unavailable,
}

impl Capability {
    /// `pending`, `available` or `unavailable`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Capability::Pending => "pending",
            Capability::Available => "available",
            Capability::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When an Unavailable node is probed again (the reference's `MaxRetryClusterHealth` and
/// `HealthCheckJitter`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ReprobePolicy {
    /// `None`: never re-probed (the reference's negative `MaxRetryClusterHealth`).
    pub after: Option<Duration>,
    /// The delay is `after × (1 ± jitter)`, uniform.
    pub jitter: f64,
}

impl Default for ReprobePolicy {
    fn default() -> ReprobePolicy {
        ReprobePolicy {
            after: Some(crate::defaults::CLUSTER_HEALTH_REPROBE_AFTER),
            jitter: crate::defaults::HEALTH_CHECK_JITTER,
        }
    }
}

impl ReprobePolicy {
    /// The delay before the next probe of a node that just became Unavailable, with jitter;
    /// `None` when re-probing is disabled. Never panics (the result saturates).
    pub(crate) fn delay(&self, rng: &mut fastrand::Rng) -> Option<Duration> {
        let after = self.after?;
        if self.jitter <= 0.0 {
            return Some(after);
        }
        let factor = 1.0 + self.jitter * (rng.f64() * 2.0 - 1.0);
        Some(Duration::try_from_secs_f64(after.as_secs_f64() * factor).unwrap_or(after))
    }
}

/// What a probe of `/_cluster/health?local=true` (or a refresh) got.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ProbeOutcome {
    /// 200 with a cluster-health document.
    Ok(ClusterHealthLocal),
    /// 401 or 403.
    Denied(u16),
    /// Anything else: 5xx, a body that is not cluster health, a timeout, a network error.
    Transient(String),
}

/// A capability change, for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub from: Capability,
    pub to: Capability,
}

/// A node's capability state and what the health requests learned about it.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeCapability {
    pub state: Capability,
    /// When the node became Unavailable.
    pub unavailable_since: Option<Instant>,
    /// When an Unavailable node is probed again (`None`: never).
    pub reprobe_at: Option<Instant>,
    /// A probe is in flight (at most one per node).
    pub probing: bool,
    /// What `GET /` last told (version, distribution).
    pub info: Option<NodeInfo>,
    /// The last `_cluster/health?local=true` answer and when it arrived.
    pub health: Option<(ClusterHealthLocal, Instant)>,
}

impl NodeCapability {
    /// Whether a successful `GET /` at `now` should be followed by a probe.
    pub(crate) fn probe_due(&self, now: Instant) -> bool {
        match self.state {
            Capability::Pending => true,
            Capability::Unavailable => self.reprobe_at.is_some_and(|t| now >= t),
            Capability::Available => false,
        }
    }

    /// Applies a probe's answer received at `now`; `reprobe` is the (jittered) delay before
    /// the next probe should it be denied. Returns the change, if the state changed.
    pub(crate) fn probe_answered(
        &mut self,
        outcome: ProbeOutcome,
        now: Instant,
        reprobe: Option<Duration>,
    ) -> Option<Change> {
        let from = self.state;
        match outcome {
            ProbeOutcome::Ok(h) => {
                self.state = Capability::Available;
                self.unavailable_since = None;
                self.reprobe_at = None;
                self.health = Some((h, now));
            }
            ProbeOutcome::Denied(_) => {
                self.state = Capability::Unavailable;
                self.unavailable_since = Some(now);
                self.reprobe_at = reprobe.and_then(|d| now.checked_add(d));
                self.health = None;
            }
            // Nothing recorded: a transient failure never locks out the next probe.
            ProbeOutcome::Transient(_) => {}
        }
        (from != self.state).then_some(Change {
            from,
            to: self.state,
        })
    }

    /// An Available node's health endpoint answered 401/403 (permission revoked): back to
    /// Pending with the stale data cleared, so the next check falls back to `GET /` and
    /// probes again.
    pub(crate) fn revoked(&mut self) -> Option<Change> {
        let from = self.state;
        self.state = Capability::Pending;
        self.unavailable_since = None;
        self.reprobe_at = None;
        self.health = None;
        (from != self.state).then_some(Change {
            from,
            to: self.state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::parse_cluster_health;
    use crate::testing::cluster_health_body;

    fn health() -> ClusterHealthLocal {
        parse_cluster_health(cluster_health_body("green", 0).as_bytes()).unwrap()
    }

    const H4: Duration = Duration::from_secs(4 * 3600);

    #[tokio::test(start_paused = true)]
    async fn pending_probes_then_200_is_available_with_data() {
        let mut c = NodeCapability::default();
        let now = Instant::now();
        assert_eq!(c.state, Capability::Pending);
        assert!(c.probe_due(now));
        let ch = c.probe_answered(ProbeOutcome::Ok(health()), now, Some(H4));
        assert_eq!(
            ch,
            Some(Change {
                from: Capability::Pending,
                to: Capability::Available
            })
        );
        assert!(!c.probe_due(now + H4 * 10));
        assert_eq!(c.health.as_ref().map(|h| h.1), Some(now));
    }

    #[tokio::test(start_paused = true)]
    async fn denied_is_unavailable_until_the_reprobe_time() {
        for status in [401, 403] {
            let mut c = NodeCapability::default();
            let now = Instant::now();
            let ch = c.probe_answered(ProbeOutcome::Denied(status), now, Some(H4));
            assert_eq!(ch.map(|c| c.to), Some(Capability::Unavailable));
            assert_eq!(c.unavailable_since, Some(now));
            assert!(!c.probe_due(now + H4 - Duration::from_millis(1)));
            assert!(c.probe_due(now + H4));
            // Denied again: stays Unavailable, the clock restarts, no change reported.
            let later = now + H4;
            assert_eq!(
                c.probe_answered(ProbeOutcome::Denied(status), later, Some(H4)),
                None
            );
            assert_eq!(c.reprobe_at, Some(later + H4));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_keep_pending_and_record_no_timestamp() {
        let mut c = NodeCapability::default();
        let now = Instant::now();
        for why in ["503", "timed out", "connection refused"] {
            assert_eq!(
                c.probe_answered(ProbeOutcome::Transient(why.into()), now, Some(H4)),
                None
            );
            assert_eq!(c.state, Capability::Pending);
            assert_eq!(c.unavailable_since, None);
            assert!(c.probe_due(now), "probed again on the next check");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_reprobe_keeps_unavailable_forever() {
        let mut c = NodeCapability::default();
        let now = Instant::now();
        c.probe_answered(ProbeOutcome::Denied(403), now, None);
        assert_eq!(c.reprobe_at, None);
        assert!(!c.probe_due(now + H4 * 1000));
    }

    #[tokio::test(start_paused = true)]
    async fn revoked_goes_back_to_pending_and_clears_data() {
        let mut c = NodeCapability::default();
        let now = Instant::now();
        c.probe_answered(ProbeOutcome::Ok(health()), now, Some(H4));
        assert_eq!(
            c.revoked(),
            Some(Change {
                from: Capability::Available,
                to: Capability::Pending
            })
        );
        assert!(c.health.is_none());
        assert!(c.probe_due(now));
    }

    #[test]
    fn reprobe_delay_jitter_stays_within_ten_percent() {
        let p = ReprobePolicy::default();
        assert_eq!(p.after, Some(H4));
        let mut rng = fastrand::Rng::with_seed(9);
        let (mut lo, mut hi) = (H4, H4);
        for _ in 0..2000 {
            let d = p.delay(&mut rng).unwrap();
            assert!(d >= H4.mul_f64(0.9) && d <= H4.mul_f64(1.1), "{d:?}");
            lo = lo.min(d);
            hi = hi.max(d);
        }
        assert!(
            lo < H4.mul_f64(0.92) && hi > H4.mul_f64(1.08),
            "{lo:?} {hi:?}"
        );
        let exact = ReprobePolicy {
            after: Some(H4),
            jitter: 0.0,
        };
        assert_eq!(exact.delay(&mut rng), Some(H4));
        let never = ReprobePolicy {
            after: None,
            jitter: 0.1,
        };
        assert_eq!(never.delay(&mut rng), None);
        let huge = ReprobePolicy {
            after: Some(Duration::MAX),
            jitter: 0.5,
        };
        assert!(huge.delay(&mut rng).is_some(), "saturates, never panics");
    }
}
