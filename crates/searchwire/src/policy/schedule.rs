//! When to probe a dead node again, and how often to refresh cluster health.
//!
//! This is the opensearch-go resurrection schedule, reproduced formula for
//! formula so that both clients put the same load on a recovering cluster.
//! Three inputs compete and the largest wins:
//!
//! - **health-ratio timeout** — exponential backoff on consecutive failures,
//!   scaled by the fraction of nodes that are live: a healthy cluster can
//!   afford to wait for one bad node, a cluster that is all down cannot;
//! - **rate limit** — the TLS-handshake pressure on *recovering* servers:
//!   every client reconnects to every server that comes back, so the wait
//!   grows with the number of live nodes (dead servers are unreachable, so
//!   probing them faster creates load nowhere);
//! - **minimum floor** — an absolute lower bound so a cluster that is
//!   entirely down is probed aggressively but never in a busy loop.
//!
//! Then jitter is added so many clients that lost the cluster at the same
//! moment do not all come back at the same moment.
//!
//! Everything here is pure: time and randomness are passed in, and
//! [`compute`] returns every intermediate value as a [`ScheduleRow`] so
//! `searchwire explain resurrection` can print the same table the reference
//! documentation prints, and tests can assert it to the millisecond.

use std::time::Duration;

use crate::clock::duration::format_duration;

/// Capacity model of one server, derived from its CPU core count.
///
/// The reference derives all three values from the cores reported by
/// `/_nodes/http,os`: `clients_per_server = cores`,
/// `server_max_new_conns_per_sec = 4 × cores`, `health_check_rate = 0.1 ×
/// cores`. Note that the cores cancel out of both formulas that use the model
/// (rate limit = live / 4 s, refresh = 10 × live s): the core count matters
/// only when the fields are set independently.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// How many clients are assumed to share one server.
    pub clients_per_server: f64,
    /// New (TLS) connections per second one server can accept while
    /// recovering.
    pub server_max_new_conns_per_sec: f64,
    /// Cluster-health requests per second one server should serve, across
    /// all clients.
    pub health_check_rate: f64,
}

impl Capacity {
    /// Cores assumed when the server has not told us:
    /// [`defaults::SERVER_CORES`](crate::defaults::SERVER_CORES).
    pub const DEFAULT_CORES: u32 = crate::defaults::SERVER_CORES;

    /// The capacity model of a server with `cores` CPU cores (0 is treated as
    /// 1: a server always has at least one core, and zero would divide by
    /// zero).
    pub fn from_cores(cores: u32) -> Capacity {
        let cores = f64::from(cores.max(1));
        Capacity {
            clients_per_server: cores,
            server_max_new_conns_per_sec: 4.0 * cores,
            // cores / 10 rather than 0.1 × cores: 8 / 10 rounds to the same
            // f64 as the literal 0.8, keeping printed intervals exact.
            health_check_rate: cores / 10.0,
        }
    }
}

impl Default for Capacity {
    /// The model for [`Capacity::DEFAULT_CORES`] cores.
    fn default() -> Capacity {
        Capacity::from_cores(Capacity::DEFAULT_CORES)
    }
}

/// Tuning of the dead-node resurrection schedule; defaults are the
/// reference's (opensearch-go `ResurrectTimeout*`, `MinimumResurrectTimeout`,
/// `JitterScale`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResurrectionConfig {
    /// Base timeout after the first failure.
    pub initial: Duration,
    /// Cap of the base timeout and of the rate limit (before jitter).
    pub max: Duration,
    /// Largest exponent: the base timeout is `initial × 2^min(f−1, cutoff)`.
    pub factor_cutoff: u32,
    /// Absolute floor of the timeout (before jitter).
    pub minimum: Duration,
    /// Jitter is uniform in `[0, jitter_scale × timeout)`.
    pub jitter_scale: f64,
}

impl Default for ResurrectionConfig {
    fn default() -> ResurrectionConfig {
        // Each value, and why: `crate::defaults`.
        ResurrectionConfig {
            initial: crate::defaults::RESURRECT_INITIAL,
            max: crate::defaults::RESURRECT_MAX,
            factor_cutoff: crate::defaults::RESURRECT_FACTOR_CUTOFF,
            minimum: crate::defaults::RESURRECT_MINIMUM,
            jitter_scale: crate::defaults::RESURRECT_JITTER_SCALE,
        }
    }
}

/// Largest accepted [`ResurrectionConfig::jitter_scale`]: more than ten
/// timeouts of jitter is certainly a typo.
const MAX_JITTER_SCALE: f64 = 10.0;

/// Largest accepted `ResurrectionConfig::max`: one day. A dead node checked less often than
/// daily is a node nobody wants back; the bound also keeps every computed instant in range.
pub const MAX_RESURRECT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl ResurrectionConfig {
    /// Check the configuration; the error names the offending field and
    /// value.
    ///
    /// Requires `initial > 0`, `max >= initial`, `minimum <= max` and a
    /// finite `jitter_scale` in `[0, 10]`.
    pub fn validate(&self) -> Result<(), String> {
        if self.initial.is_zero() {
            return Err("resurrection initial timeout must be greater than zero (got 0s)".into());
        }
        if self.max > MAX_RESURRECT_TIMEOUT {
            return Err(format!(
                "resurrection max timeout ({}) must be at most {}",
                format_duration(self.max),
                format_duration(MAX_RESURRECT_TIMEOUT)
            ));
        }
        if self.max < self.initial {
            return Err(format!(
                "resurrection max timeout ({}) must be at least the initial timeout ({})",
                format_duration(self.max),
                format_duration(self.initial)
            ));
        }
        if self.minimum > self.max {
            return Err(format!(
                "resurrection minimum timeout ({}) must not exceed the max timeout ({})",
                format_duration(self.minimum),
                format_duration(self.max)
            ));
        }
        if !self.jitter_scale.is_finite()
            || self.jitter_scale < 0.0
            || self.jitter_scale > MAX_JITTER_SCALE
        {
            return Err(format!(
                "resurrection jitter_scale must be a number from 0 to {MAX_JITTER_SCALE} (got {})",
                self.jitter_scale
            ));
        }
        Ok(())
    }
}

/// Every input and output of one schedule computation, for `searchwire
/// explain resurrection` and for tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduleRow {
    /// Live nodes in the pool.
    pub live: usize,
    /// Dead nodes in the pool.
    pub dead: usize,
    /// Consecutive failures of the node being scheduled (at least 1).
    pub failures: u32,
    /// `initial × 2^min(failures−1, cutoff)`, capped at `max`.
    pub base: Duration,
    /// `base × live / (live + dead)`.
    pub health: Duration,
    /// `live × clients_per_server / server_max_new_conns_per_sec` seconds,
    /// capped at `max`.
    pub rate_limit: Duration,
    /// `max(health, rate_limit, minimum)`; excludes jitter.
    pub final_timeout: Duration,
    /// `jitter_scale × final_timeout`: the exclusive upper bound of the
    /// jitter added by [`timeout_with_jitter`].
    pub jitter_max: Duration,
}

/// Compute the resurrection timeout of a dead node, without jitter.
///
/// With `f` consecutive failures (`f >= 1`; 0 is treated as 1):
/// - `base = initial × 2^min(f−1, factor_cutoff)`, capped at `max`;
/// - `health = base × live / total` (`total = live + dead`; a ratio of 0
///   when `total` is 0);
/// - `rate_limit = live × clients_per_server / server_max_new_conns_per_sec`
///   seconds, capped at `max`;
/// - `final_timeout = max(health, rate_limit, minimum)`;
/// - `jitter_max = jitter_scale × final_timeout`.
///
/// Computed values are rounded to whole milliseconds: no timer is finer, and
/// `explain` should print `20s`, not float noise such as `19.999999999s`.
///
/// Never panics: NaN, infinite or negative intermediate values (possible only
/// with a hand-built [`Capacity`] or an unvalidated config) are clamped — a
/// rate limit that cannot be computed is taken as `max`, the conservative
/// choice.
///
/// Note on the reference: its first 150-node table prints 30 s for 100 live
/// nodes ("rate limit capped at max"), but the formula gives
/// `100 × 8 / 32 = 25 s`, as its own detailed table says. The formula wins.
pub fn compute(
    cfg: &ResurrectionConfig,
    cap: &Capacity,
    live: usize,
    dead: usize,
    failures: u32,
) -> ScheduleRow {
    let failures = failures.max(1);
    let exponent = (failures - 1).min(cfg.factor_cutoff);
    let base = if cfg.initial.is_zero() {
        Duration::ZERO
    } else if exponent < 32 {
        cfg.initial.saturating_mul(1u32 << exponent)
    } else {
        Duration::MAX
    }
    .min(cfg.max);

    let total = live.saturating_add(dead);
    let ratio = if total == 0 {
        0.0
    } else {
        live as f64 / total as f64
    };
    let health = secs_to_duration(base.as_secs_f64() * ratio, base, Duration::ZERO);

    let rate_limit = if live == 0 {
        Duration::ZERO
    } else {
        let secs = live as f64 * cap.clients_per_server / cap.server_max_new_conns_per_sec;
        secs_to_duration(secs, cfg.max, cfg.max)
    };

    let final_timeout = health.max(rate_limit).max(cfg.minimum);
    let jitter_max = secs_to_duration(
        final_timeout.as_secs_f64() * cfg.jitter_scale,
        Duration::MAX,
        Duration::ZERO,
    );

    ScheduleRow {
        live,
        dead,
        failures,
        base,
        health,
        rate_limit,
        final_timeout,
        jitter_max,
    }
}

/// The timeout to actually wait: `final_timeout` plus jitter drawn uniformly
/// from `[0, jitter_max)` at nanosecond resolution.
///
/// When `jitter_max` is zero (`jitter_scale` 0) the result is exactly
/// `final_timeout` and `rng` is not used, so tests can switch jitter off with
/// one knob.
pub fn timeout_with_jitter(row: &ScheduleRow, rng: &mut fastrand::Rng) -> Duration {
    let bound = u64::try_from(row.jitter_max.as_nanos()).unwrap_or(u64::MAX);
    if bound == 0 {
        return row.final_timeout;
    }
    row.final_timeout
        .saturating_add(Duration::from_nanos(rng.u64(0..bound)))
}

/// Interval of the periodic cluster-health refresh of live connections.
///
/// `clamp(live × clients_per_server / health_check_rate seconds, 5 s, 5 min)`:
/// the polls of all clients sharing a server are spread so each server sees
/// about `health_check_rate` health requests per second, so each client polls
/// less often as the cluster grows. `None` when `live <= 1`: a single-node
/// cluster has no routing choice for health data to inform, so it skips the
/// refresh. A value that cannot be computed (a hand-built [`Capacity`] with
/// zero or NaN rates) is taken as 5 min, the gentlest choice.
pub fn health_refresh_interval(cap: &Capacity, live: usize) -> Option<Duration> {
    if live <= 1 {
        return None;
    }
    let secs = live as f64 * cap.clients_per_server / cap.health_check_rate;
    let interval = secs_to_duration(
        secs,
        crate::defaults::MAX_HEALTH_REFRESH,
        crate::defaults::MAX_HEALTH_REFRESH,
    );
    Some(interval.max(crate::defaults::MIN_HEALTH_REFRESH))
}

/// `secs` as a Duration rounded to whole milliseconds, clamped to
/// `[0, ceiling]`; NaN becomes `if_nan`. Never panics.
fn secs_to_duration(secs: f64, ceiling: Duration, if_nan: Duration) -> Duration {
    if secs.is_nan() {
        return if_nan.min(ceiling);
    }
    if secs <= 0.0 {
        return Duration::ZERO;
    }
    let millis = (secs * 1000.0).round();
    if millis >= ceiling.as_millis() as f64 {
        return ceiling;
    }
    // In range, finite and non-negative; `as` saturates regardless.
    Duration::from_millis(millis as u64).min(ceiling)
}

#[cfg(test)]
mod tests;
