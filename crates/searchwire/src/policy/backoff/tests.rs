use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn rng() -> fastrand::Rng {
    fastrand::Rng::with_seed(42)
}

/// Delays for retries 1..=n, feeding each delay back as `prev`.
fn sequence(b: &Backoff, n: u32, rng: &mut fastrand::Rng) -> Vec<Duration> {
    let mut prev = Duration::ZERO;
    (1..=n)
        .map(|i| {
            prev = b.delay(i, prev, rng);
            prev
        })
        .collect()
}

fn ms_list(v: &[u64]) -> Vec<Duration> {
    v.iter().copied().map(MS).collect()
}

#[test]
fn defaults_are_exponential_full_jitter_100ms_to_10s() {
    match Backoff::default() {
        Backoff::Exponential { base, cap, jitter } => {
            assert_eq!(base, MS(100));
            assert_eq!(cap, SECS(10));
            assert_eq!(jitter, Jitter::Full);
        }
        other => panic!("unexpected default {other:?}"),
    }
    assert_eq!(Jitter::default(), Jitter::Full);
}

#[test]
fn exponential_without_jitter_doubles_then_caps() {
    let b = Backoff::default().with_jitter(Jitter::None);
    assert_eq!(
        sequence(&b, 10, &mut rng()),
        ms_list(&[100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000])
    );
}

#[test]
fn exponential_huge_retry_numbers_saturate_to_cap() {
    let b = Backoff::default().with_jitter(Jitter::None);
    for retry in [31, 32, 33, 64, 1000, u32::MAX] {
        assert_eq!(
            b.delay(retry, Duration::ZERO, &mut rng()),
            SECS(10),
            "{retry}"
        );
    }
    let huge = Backoff::exponential(Duration::MAX, Duration::MAX).with_jitter(Jitter::None);
    assert_eq!(
        huge.delay(u32::MAX, Duration::MAX, &mut rng()),
        Duration::MAX
    );
    for j in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
        let b = Backoff::exponential(Duration::MAX, Duration::MAX).with_jitter(j);
        let _ = b.delay(u32::MAX, Duration::MAX, &mut rng());
    }
}

#[test]
fn retry_zero_is_treated_as_first_retry() {
    let b = Backoff::default().with_jitter(Jitter::None);
    assert_eq!(b.delay(0, Duration::ZERO, &mut rng()), MS(100));
    assert_eq!(
        Backoff::linear(MS(50)).delay(0, Duration::ZERO, &mut rng()),
        MS(50)
    );
    let seen = Backoff::from_fn(|i| MS(u64::from(i)));
    assert_eq!(seen.delay(0, Duration::ZERO, &mut rng()), MS(1));
}

#[test]
fn zero_base_exponential_is_always_zero() {
    let b = Backoff::exponential(Duration::ZERO, SECS(1)).with_jitter(Jitter::None);
    assert_eq!(b.delay(40, Duration::ZERO, &mut rng()), Duration::ZERO);
}

#[test]
fn cap_below_base_wins() {
    let b = Backoff::exponential(SECS(5), SECS(1)).with_jitter(Jitter::None);
    assert_eq!(b.delay(1, Duration::ZERO, &mut rng()), SECS(1));
    let b = b.with_jitter(Jitter::Decorrelated);
    assert_eq!(b.delay(3, SECS(9), &mut rng()), SECS(1));
}

#[test]
fn constant_none_and_linear_sequences() {
    assert_eq!(
        sequence(&Backoff::None, 3, &mut rng()),
        vec![Duration::ZERO; 3]
    );
    assert_eq!(
        sequence(&Backoff::constant(MS(250)), 3, &mut rng()),
        vec![MS(250); 3]
    );
    assert_eq!(
        sequence(&Backoff::linear(MS(100)), 4, &mut rng()),
        ms_list(&[100, 200, 300, 400])
    );
    let linear = Backoff::linear(SECS(7));
    assert_eq!(linear.delay(4, Duration::ZERO, &mut rng()), SECS(28));
    assert_eq!(
        linear.delay(5, Duration::ZERO, &mut rng()),
        crate::defaults::LINEAR_BACKOFF_CAP
    );
    assert_eq!(
        linear.delay(u32::MAX, Duration::ZERO, &mut rng()),
        crate::defaults::LINEAR_BACKOFF_CAP
    );
    let uncapped = Backoff::Linear {
        step: Duration::MAX,
        cap: Duration::MAX,
    };
    assert_eq!(
        uncapped.delay(u32::MAX, Duration::ZERO, &mut rng()),
        Duration::MAX
    );
}

#[test]
fn reference_incremental_backoff_function() {
    // opensearch-go's docs: RetryBackoff: func(i int) { i * 100ms }.
    let b = Backoff::from_fn(|i| MS(100).saturating_mul(i));
    assert_eq!(sequence(&b, 4, &mut rng()), ms_list(&[100, 200, 300, 400]));
}

#[test]
fn with_jitter_only_changes_exponential() {
    let c = Backoff::constant(SECS(1)).with_jitter(Jitter::None);
    assert_eq!(format!("{c:?}"), "Constant(1s)");
    let e = Backoff::exponential(MS(1), MS(2)).with_jitter(Jitter::Equal);
    assert_eq!(
        format!("{e:?}"),
        "Exponential { base: 1ms, cap: 2ms, jitter: Equal }"
    );
}

#[test]
fn debug_hides_custom_function() {
    assert_eq!(format!("{:?}", Backoff::from_fn(|_| MS(1))), "Custom(<fn>)");
    assert_eq!(format!("{:?}", Backoff::None), "None");
    assert_eq!(
        format!("{:?}", Backoff::linear(MS(5))),
        "Linear { step: 5ms, cap: 30s }"
    );
}

#[test]
fn full_jitter_stays_within_zero_and_exponential_delay() {
    let b = Backoff::default();
    for seed in 0..500 {
        let mut rng = fastrand::Rng::with_seed(seed);
        for retry in 1..=12 {
            let ceiling = MS(100).saturating_mul(1 << (retry - 1)).min(SECS(10));
            let d = b.delay(retry, Duration::ZERO, &mut rng);
            assert!(
                d <= ceiling,
                "seed {seed} retry {retry}: {d:?} > {ceiling:?}"
            );
        }
    }
}

#[test]
fn full_jitter_actually_spreads() {
    let b = Backoff::default();
    let mut rng = rng();
    let draws: Vec<Duration> = (0..1000)
        .map(|_| b.delay(8, Duration::ZERO, &mut rng))
        .collect();
    assert!(draws.iter().any(|d| *d < SECS(2)));
    assert!(draws.iter().any(|d| *d > SECS(8)));
}

#[test]
fn equal_jitter_stays_within_half_and_full_delay() {
    let b = Backoff::default().with_jitter(Jitter::Equal);
    for seed in 0..500 {
        let mut rng = fastrand::Rng::with_seed(seed);
        for retry in 1..=12 {
            let ceiling = MS(100).saturating_mul(1 << (retry - 1)).min(SECS(10));
            let d = b.delay(retry, Duration::ZERO, &mut rng);
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "seed {seed} retry {retry}: {d:?}"
            );
        }
    }
}

#[test]
fn decorrelated_jitter_stays_within_base_and_cap() {
    let b = Backoff::default().with_jitter(Jitter::Decorrelated);
    for seed in 0..500 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut prev = Duration::ZERO;
        for retry in 1..=30 {
            let d = b.delay(retry, prev, &mut rng);
            assert!(
                d >= MS(100) && d <= SECS(10),
                "seed {seed} retry {retry}: {d:?}"
            );
            assert!(
                d <= prev.saturating_mul(3).max(MS(300)),
                "grew more than 3x"
            );
            prev = d;
        }
    }
}

#[test]
fn decorrelated_first_retry_is_between_base_and_three_bases() {
    let b = Backoff::default().with_jitter(Jitter::Decorrelated);
    for seed in 0..200 {
        let d = b.delay(1, Duration::ZERO, &mut fastrand::Rng::with_seed(seed));
        assert!(d >= MS(100) && d <= MS(300), "{d:?}");
    }
}

#[test]
fn same_seed_gives_same_sequence() {
    for j in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
        let b = Backoff::default().with_jitter(j);
        let a = sequence(&b, 20, &mut fastrand::Rng::with_seed(9));
        let again = sequence(&b, 20, &mut fastrand::Rng::with_seed(9));
        let other = sequence(&b, 20, &mut fastrand::Rng::with_seed(10));
        assert_eq!(a, again, "{j:?}");
        assert_ne!(a, other, "{j:?}");
    }
}

#[test]
fn no_jitter_does_not_consume_randomness() {
    let mut used = rng();
    let _ = Backoff::default()
        .with_jitter(Jitter::None)
        .delay(3, Duration::ZERO, &mut used);
    assert_eq!(used.u64(..), rng().u64(..));
}

#[test]
fn parse_accepted_forms() {
    let show = |s: &str| match Backoff::parse(s) {
        Ok(b) => format!("{b:?}"),
        Err(e) => panic!("{s}: {e}"),
    };
    assert_eq!(show("none"), "None");
    assert_eq!(show(" NONE "), "None");
    assert_eq!(show("const:250ms"), "Constant(250ms)");
    assert_eq!(show("const:0"), "Constant(0ns)");
    assert_eq!(show("linear:1.5s"), "Linear { step: 1.5s, cap: 30s }");
    assert_eq!(
        show("exp:100ms:10s"),
        "Exponential { base: 100ms, cap: 10s, jitter: Full }"
    );
    assert_eq!(
        show("exp:1:1m"),
        "Exponential { base: 1s, cap: 60s, jitter: Full }"
    );
}

#[test]
fn parse_rejects_bad_forms_with_actionable_messages() {
    for s in [
        "",
        "exp",
        "exp:100ms",
        "exp:100ms:10s:1",
        "const",
        "const:",
        "linear:abc",
        "exp:0:1s",
        "exp:2s:1s",
        "exp:-1s:1s",
        "fixed:1s",
        "none:1s",
        ":",
    ] {
        match Backoff::parse(s) {
            Ok(b) => panic!("{s:?} parsed as {b:?}"),
            Err(e) => {
                assert!(e.contains(&format!("{s:?}")), "{e}");
                assert!(e.contains("exp:BASE:CAP (e.g. exp:100ms:10s)"), "{e}");
            }
        }
    }
    let e = Backoff::parse("exp:2s:1s").err().unwrap_or_default();
    assert!(e.contains("CAP must be at least BASE"), "{e}");
    let e = Backoff::parse("const:5x").err().unwrap_or_default();
    assert!(e.contains("unknown unit"), "{e}");
}

fn date(s: &str) -> SystemTime {
    match httpdate::parse_http_date(s) {
        Ok(t) => t,
        Err(e) => panic!("{s}: {e}"),
    }
}

#[test]
fn retry_after_delay_seconds() {
    let now = SystemTime::UNIX_EPOCH;
    assert_eq!(parse_retry_after("120", now), Some(SECS(120)));
    assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
    assert_eq!(parse_retry_after("007", now), Some(SECS(7)));
}

#[test]
fn retry_after_huge_number_saturates() {
    let now = SystemTime::UNIX_EPOCH;
    assert_eq!(
        parse_retry_after("99999999999999999999", now),
        Some(SECS(u64::MAX))
    );
    let absurd = "9".repeat(100_000);
    assert_eq!(parse_retry_after(&absurd, now), Some(SECS(u64::MAX)));
}

#[test]
fn retry_after_http_date_is_relative_to_now() {
    let now = date("Wed, 21 Oct 2015 07:26:00 GMT");
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
        Some(SECS(120))
    );
    // The obsolete RFC 850 and asctime forms are valid HTTP-dates too.
    assert_eq!(
        parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now),
        Some(SECS(120))
    );
    assert_eq!(
        parse_retry_after("Wed Oct 21 07:28:00 2015", now),
        Some(SECS(120))
    );
}

#[test]
fn retry_after_past_date_means_now() {
    let now = date("Wed, 21 Oct 2015 07:28:00 GMT");
    assert_eq!(
        parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
        Some(Duration::ZERO)
    );
}

#[test]
fn retry_after_garbage_is_none() {
    let now = SystemTime::UNIX_EPOCH;
    for s in [
        "",
        "  ",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "120s",
        "soon",
        "Wed, 99 Oct 2015 07:28:00 GMT",
        "Wed, 21 Oct 2015 07:28:00 PST",
        "\u{0}",
        "١٢٠",
        "Wed, 21 Oct 2015 25:28:00 GMT",
    ] {
        assert_eq!(parse_retry_after(s, now), None, "{s:?}");
    }
    let junk: String = (0u32..5000).filter_map(char::from_u32).collect();
    assert_eq!(parse_retry_after(&junk, now), None);
}
