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
                for (live, dead) in [(0, 0), (usize::MAX, usize::MAX), (3, 0), (1, usize::MAX)] {
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
