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
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const SECS: fn(u64) -> Duration = Duration::from_secs;

    /// Failures well past the cutoff: the base timeout is saturated at max.
    const SATURATED: u32 = 10;

    fn row(live: usize, dead: usize, failures: u32) -> ScheduleRow {
        compute(
            &ResurrectionConfig::default(),
            &Capacity::default(),
            live,
            dead,
            failures,
        )
    }

    /// How the reference prints a timeout: seconds to one decimal, halves up.
    fn tenths(d: Duration) -> u128 {
        (d.as_millis() + 50) / 100
    }

    #[test]
    fn capacity_from_cores_follows_reference() {
        let c = Capacity::from_cores(8);
        assert_eq!(c.clients_per_server, 8.0);
        assert_eq!(c.server_max_new_conns_per_sec, 32.0);
        assert_eq!(c.health_check_rate, 0.8);
        assert_eq!(Capacity::default(), c);
        assert_eq!(Capacity::DEFAULT_CORES, 8);
        let one = Capacity::from_cores(1);
        assert_eq!(Capacity::from_cores(0), one);
        assert_eq!(one.server_max_new_conns_per_sec, 4.0);
        assert_eq!(one.health_check_rate, 0.1);
    }

    #[test]
    fn resurrection_defaults_follow_reference() {
        let c = ResurrectionConfig::default();
        assert_eq!(c.initial, SECS(5));
        assert_eq!(c.max, SECS(30));
        assert_eq!(c.factor_cutoff, 5);
        assert_eq!(c.minimum, MS(500));
        assert_eq!(c.jitter_scale, 0.5);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn validate_names_the_bad_field() {
        let good = ResurrectionConfig::default();
        let cases = [
            (
                ResurrectionConfig {
                    initial: Duration::ZERO,
                    ..good
                },
                "initial",
            ),
            (
                ResurrectionConfig {
                    max: SECS(4),
                    ..good
                },
                "max",
            ),
            (
                ResurrectionConfig {
                    minimum: SECS(31),
                    ..good
                },
                "minimum",
            ),
            (
                ResurrectionConfig {
                    jitter_scale: -0.1,
                    ..good
                },
                "jitter_scale",
            ),
            (
                ResurrectionConfig {
                    jitter_scale: 10.5,
                    ..good
                },
                "jitter_scale",
            ),
            (
                ResurrectionConfig {
                    jitter_scale: f64::NAN,
                    ..good
                },
                "jitter_scale",
            ),
            (
                ResurrectionConfig {
                    jitter_scale: f64::INFINITY,
                    ..good
                },
                "jitter_scale",
            ),
        ];
        for (cfg, field) in cases {
            match cfg.validate() {
                Ok(()) => panic!("{cfg:?} should be invalid"),
                Err(e) => assert!(e.contains(field), "{field}: {e}"),
            }
        }
        for ok in [
            ResurrectionConfig {
                jitter_scale: 0.0,
                ..good
            },
            ResurrectionConfig {
                jitter_scale: 10.0,
                ..good
            },
            ResurrectionConfig {
                max: SECS(5),
                minimum: SECS(5),
                ..good
            },
        ] {
            assert_eq!(ok.validate(), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn validate_message_shows_values() {
        let cfg = ResurrectionConfig {
            max: SECS(4),
            ..ResurrectionConfig::default()
        };
        assert_eq!(
            cfg.validate(),
            Err("resurrection max timeout (4s) must be at least the initial timeout (5s)".into())
        );
    }

    #[test]
    fn large_cluster_recovery_table() {
        // Reference: 150-node cluster recovering from a full outage, base
        // saturated at 30 s. (live, exact final, reference's printed value.)
        let table = [
            (0, MS(500), 5),
            (5, MS(1250), 13),
            (10, MS(2500), 25),
            (25, MS(6250), 63),
            (50, MS(12_500), 125),
            (75, MS(18_750), 188),
            // The reference's summary table says 30 s; the formula (and its
            // detailed table) say 25 s. The formula wins.
            (100, SECS(25), 250),
            (149, SECS(30), 300),
        ];
        for (live, exact, printed_tenths) in table {
            let r = row(live, 150 - live, SATURATED);
            assert_eq!(r.base, SECS(30), "live {live}");
            assert_eq!(r.final_timeout, exact, "live {live}");
            assert_eq!(tenths(r.final_timeout), printed_tenths, "live {live}");
            assert_eq!(r.jitter_max, exact / 2, "live {live}");
        }
    }

    #[test]
    fn large_cluster_table_intermediate_columns() {
        // Health column: 30 s × live/150; rate column: live × 8 / 32.
        let r = row(5, 145, SATURATED);
        assert_eq!((r.health, r.rate_limit), (SECS(1), MS(1250)));
        let r = row(25, 125, SATURATED);
        assert_eq!((r.health, r.rate_limit), (SECS(5), MS(6250)));
        let r = row(75, 75, SATURATED);
        assert_eq!((r.health, r.rate_limit), (SECS(15), MS(18_750)));
        let r = row(100, 50, SATURATED);
        assert_eq!((r.health, r.rate_limit), (SECS(20), SECS(25)));
        // 149 × 8 / 32 = 37.25 s, capped at max; health 29.8 s.
        let r = row(149, 1, SATURATED);
        assert_eq!((r.health, r.rate_limit), (MS(29_800), SECS(30)));
        let r = row(0, 150, SATURATED);
        assert_eq!((r.health, r.rate_limit), (Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn small_cluster_table() {
        let table = [(0, MS(500)), (1, SECS(10)), (2, SECS(20))];
        for (live, want) in table {
            let r = row(live, 3 - live, SATURATED);
            assert_eq!(r.final_timeout, want, "live {live}");
        }
        assert_eq!(row(1, 2, SATURATED).rate_limit, MS(250));
        assert_eq!(row(2, 1, SATURATED).rate_limit, MS(500));
    }

    #[test]
    fn failure_progression_two_of_three_live() {
        let want = [
            (1, SECS(5), MS(3333), 33),
            (2, SECS(10), MS(6667), 67),
            (3, SECS(20), MS(13_333), 133),
            (4, SECS(30), SECS(20), 200),
            (5, SECS(30), SECS(20), 200),
            (6, SECS(30), SECS(20), 200),
            (u32::MAX, SECS(30), SECS(20), 200),
        ];
        for (failures, base, exact, printed_tenths) in want {
            let r = row(2, 1, failures);
            assert_eq!(r.failures, failures);
            assert_eq!(r.base, base, "failures {failures}");
            assert_eq!(r.final_timeout, exact, "failures {failures}");
            assert_eq!(
                tenths(r.final_timeout),
                printed_tenths,
                "failures {failures}"
            );
        }
    }

    #[test]
    fn zero_failures_count_as_one() {
        let r = row(2, 1, 0);
        assert_eq!(r.failures, 1);
        assert_eq!(r, row(2, 1, 1));
    }

    #[test]
    fn factor_cutoff_bounds_the_exponent() {
        let cfg = ResurrectionConfig {
            initial: MS(100),
            max: SECS(3600),
            factor_cutoff: 5,
            ..ResurrectionConfig::default()
        };
        let base = |f| compute(&cfg, &Capacity::default(), 1, 0, f).base;
        assert_eq!(base(6), MS(3200));
        assert_eq!(base(7), MS(3200));
        assert_eq!(base(u32::MAX), MS(3200));
        let uncut = ResurrectionConfig {
            factor_cutoff: u32::MAX,
            ..cfg
        };
        let base = |f| compute(&uncut, &Capacity::default(), 1, 0, f).base;
        assert_eq!(base(10), MS(51_200));
        assert_eq!(base(40), SECS(3600));
        assert_eq!(base(u32::MAX), SECS(3600));
    }

    #[test]
    fn empty_pool_uses_minimum() {
        let r = row(0, 0, 1);
        assert_eq!(r.health, Duration::ZERO);
        assert_eq!(r.final_timeout, MS(500));
    }

    #[test]
    fn single_live_node_alone_gets_full_base() {
        // live/total = 1: a pool whose only other node is not dead.
        let r = row(1, 0, 1);
        assert_eq!(r.health, SECS(5));
    }

    #[test]
    fn hostile_inputs_never_panic() {
        let weird = [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            1e300,
        ];
        let cfgs = [
            ResurrectionConfig::default(),
            ResurrectionConfig {
                initial: Duration::MAX,
                max: Duration::MAX,
                factor_cutoff: u32::MAX,
                minimum: Duration::MAX,
                jitter_scale: 1e300,
            },
            ResurrectionConfig {
                initial: Duration::ZERO,
                max: Duration::ZERO,
                factor_cutoff: 0,
                minimum: Duration::ZERO,
                jitter_scale: f64::NAN,
            },
        ];
        let mut rng = fastrand::Rng::with_seed(1);
        for cfg in cfgs {
            for &a in &weird {
                for &b in &weird {
                    let cap = Capacity {
                        clients_per_server: a,
                        server_max_new_conns_per_sec: b,
                        health_check_rate: b,
                    };
                    for (live, dead) in [(0, 0), (usize::MAX, usize::MAX), (3, 0), (1, usize::MAX)]
                    {
                        for failures in [0, 1, u32::MAX] {
                            let r = compute(&cfg, &cap, live, dead, failures);
                            assert!(r.rate_limit <= cfg.max);
                            assert!(r.health <= r.base);
                            let _ = timeout_with_jitter(&r, &mut rng);
                        }
                        let _ = health_refresh_interval(&cap, live);
                    }
                }
            }
        }
    }

    #[test]
    fn broken_capacity_is_conservative() {
        let cfg = ResurrectionConfig::default();
        let zero = Capacity {
            clients_per_server: 0.0,
            server_max_new_conns_per_sec: 0.0,
            health_check_rate: 0.0,
        };
        assert_eq!(compute(&cfg, &zero, 5, 5, 1).rate_limit, SECS(30));
        assert_eq!(
            health_refresh_interval(&zero, 5),
            Some(crate::defaults::MAX_HEALTH_REFRESH)
        );
        let div0 = Capacity {
            server_max_new_conns_per_sec: 0.0,
            health_check_rate: 0.0,
            ..Capacity::default()
        };
        assert_eq!(compute(&cfg, &div0, 5, 5, 1).rate_limit, SECS(30));
        assert_eq!(
            health_refresh_interval(&div0, 5),
            Some(crate::defaults::MAX_HEALTH_REFRESH)
        );
    }

    #[test]
    fn jitter_off_gives_exact_final_timeout() {
        let cfg = ResurrectionConfig {
            jitter_scale: 0.0,
            ..ResurrectionConfig::default()
        };
        let r = compute(&cfg, &Capacity::default(), 2, 1, 3);
        assert_eq!(r.jitter_max, Duration::ZERO);
        let mut rng = fastrand::Rng::with_seed(3);
        assert_eq!(timeout_with_jitter(&r, &mut rng), MS(13_333));
        // No randomness was consumed.
        assert_eq!(rng.u64(..), fastrand::Rng::with_seed(3).u64(..));
    }

    #[test]
    fn jitter_stays_within_bounds() {
        for (live, dead, failures) in [(0, 150, 10), (2, 1, 1), (50, 100, 3), (149, 1, 10)] {
            let r = row(live, dead, failures);
            let mut low = Duration::MAX;
            let mut high = Duration::ZERO;
            for seed in 0..2000 {
                let t = timeout_with_jitter(&r, &mut fastrand::Rng::with_seed(seed));
                assert!(
                    t >= r.final_timeout && t < r.final_timeout + r.jitter_max,
                    "{t:?}"
                );
                low = low.min(t);
                high = high.max(t);
            }
            // The draws really spread over the window.
            assert!(low < r.final_timeout + r.jitter_max / 10, "{low:?}");
            assert!(high > r.final_timeout + r.jitter_max * 9 / 10, "{high:?}");
        }
    }

    #[test]
    fn jitter_is_deterministic_per_seed() {
        let r = row(10, 140, SATURATED);
        let a = timeout_with_jitter(&r, &mut fastrand::Rng::with_seed(5));
        let b = timeout_with_jitter(&r, &mut fastrand::Rng::with_seed(5));
        assert_eq!(a, b);
    }

    #[test]
    fn health_refresh_intervals_follow_reference() {
        let cap = Capacity::default();
        assert_eq!(health_refresh_interval(&cap, 0), None);
        assert_eq!(health_refresh_interval(&cap, 1), None);
        assert_eq!(health_refresh_interval(&cap, 3), Some(SECS(30)));
        assert_eq!(health_refresh_interval(&cap, 10), Some(SECS(100)));
        assert_eq!(health_refresh_interval(&cap, 30), Some(SECS(300)));
        assert_eq!(health_refresh_interval(&cap, 100), Some(SECS(300)));
        assert_eq!(health_refresh_interval(&cap, usize::MAX), Some(SECS(300)));
        assert_eq!(health_refresh_interval(&cap, 2), Some(SECS(20)));
    }

    #[test]
    fn health_refresh_has_a_floor() {
        let chatty = Capacity {
            health_check_rate: 100.0,
            ..Capacity::default()
        };
        assert_eq!(
            health_refresh_interval(&chatty, 2),
            Some(crate::defaults::MIN_HEALTH_REFRESH)
        );
    }
}
