use super::*;

fn ok(s: &str) -> Duration {
    match parse_duration(s) {
        Ok(d) => d,
        Err(e) => panic!("{s:?} should parse: {e}"),
    }
}

fn err(s: &str) -> ParseDurationError {
    match parse_duration(s) {
        Ok(d) => panic!("{s:?} should not parse, got {d:?}"),
        Err(e) => e,
    }
}

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

#[test]
fn go_units_each_parse() {
    assert_eq!(ok("3ns"), Duration::from_nanos(3));
    assert_eq!(ok("3us"), Duration::from_micros(3));
    assert_eq!(ok("3µs"), Duration::from_micros(3));
    assert_eq!(ok("3\u{3bc}s"), Duration::from_micros(3));
    assert_eq!(ok("500ms"), MS(500));
    assert_eq!(ok("30s"), SECS(30));
    assert_eq!(ok("2m"), SECS(120));
    assert_eq!(ok("2h"), SECS(7200));
}

#[test]
fn go_fractions_and_sequences_parse() {
    assert_eq!(ok("1.5h"), SECS(5400));
    assert_eq!(ok("1h2m3.5s"), SECS(3723) + MS(500));
    assert_eq!(ok("1m30s"), SECS(90));
    assert_eq!(ok(".5s"), MS(500));
    assert_eq!(ok("1.s"), SECS(1));
    assert_eq!(ok("1.5ms"), Duration::from_micros(1500));
    assert_eq!(ok("0.000000001s"), Duration::from_nanos(1));
    assert_eq!(ok("1s500ms"), MS(1500));
    assert_eq!(ok("+5s"), SECS(5));
}

#[test]
fn fraction_finer_than_a_nanosecond_is_truncated() {
    assert_eq!(ok("0.0000000019s"), Duration::from_nanos(1));
    assert_eq!(ok("1.00000000000000000000000000009s"), SECS(1));
}

#[test]
fn zero_forms_parse() {
    assert_eq!(ok("0"), Duration::ZERO);
    assert_eq!(ok("0s"), Duration::ZERO);
    assert_eq!(ok("0.0"), Duration::ZERO);
    assert_eq!(ok("0h0m0s"), Duration::ZERO);
}

#[test]
fn bare_numbers_are_seconds() {
    assert_eq!(ok("30"), SECS(30));
    assert_eq!(ok("1.5"), MS(1500));
    assert_eq!(ok(".25"), MS(250));
    assert_eq!(ok("007"), SECS(7));
}

#[test]
fn surrounding_whitespace_is_trimmed() {
    assert_eq!(ok("  30s\n"), SECS(30));
    assert_eq!(ok("\t1.5 "), MS(1500));
}

#[test]
fn malformed_inputs_are_rejected() {
    for s in [
        "", "   ", "abc", "s", "ms", ".", ".s", "1..5s", "1.2.3", "1m30", "30s5", "1 m", "1m 30s",
        "5sec", "1e3s", "1e3", "NaN", "nan", "inf", "infs", "+", "+-5s", "0x10s", "1_000s", "１s",
    ] {
        err(s);
    }
}

#[test]
fn negative_values_are_rejected() {
    for s in ["-1", "-1s", "-0", "-0.5", " -2m"] {
        let e = err(s);
        assert!(e.to_string().contains("negative"), "{e}");
    }
}

#[test]
fn overflow_is_rejected() {
    // u64::MAX ns is 18446744073.709551615 s.
    assert_eq!(ok("18446744073.709551615s"), Duration::from_nanos(u64::MAX));
    for s in [
        "18446744073.709551616s",
        "18446744074",
        "9999999999999999999999999999999999999999999h",
        "5124096h",
        "5124095h5124095h",
        "340282366920938463463374607431768211456ns",
    ] {
        let e = err(s);
        assert!(e.to_string().contains("too large"), "{s}: {e}");
    }
}

#[test]
fn error_names_input_and_accepted_forms() {
    assert_eq!(
        err("abc").to_string(),
        "invalid duration \"abc\": expected a duration like 500ms, 30s, 1m30s, \
         integer seconds (30) or fractional seconds (1.5)"
    );
    let e = err("5x");
    assert_eq!(e.input(), "5x");
    let msg = e.to_string();
    assert!(msg.contains("unknown unit \"x\""), "{msg}");
    assert!(msg.contains("1m30s"), "{msg}");
    assert!(err("1m30").to_string().contains("missing its unit"));
    assert!(err(" ").to_string().contains("empty"));
}

#[test]
fn error_shortens_huge_input_and_escapes_control_characters() {
    let long = "x".repeat(10_000);
    let msg = err(&long).to_string();
    assert!(msg.len() < 400, "{}", msg.len());
    let msg = err("a\u{1b}[2Jb").to_string();
    assert!(!msg.contains('\u{1b}'), "{msg}");
    // Found by the `duration` fuzz target: an unknown unit is the rest of the input, and was
    // echoed whole (a 100 KB value gave a 100 KB+ line).
    let msg = err(&format!("1m3{}", "\u{13}".repeat(100_000))).to_string();
    assert!(msg.len() < 1200, "{}", msg.len());
    let msg = err(&format!("1{}", "q".repeat(100_000))).to_string();
    assert!(msg.len() < 1200, "{}", msg.len());
    assert!(
        msg.contains("unknown unit \"qqqqqqqqqqqqqqqq...\""),
        "{msg}"
    );
}

#[test]
fn error_is_a_std_error() {
    let e: Box<dyn std::error::Error> = Box::new(err("x"));
    assert!(e.to_string().starts_with("invalid duration"));
}

#[test]
fn format_examples() {
    let cases = [
        (Duration::ZERO, "0s"),
        (MS(500), "500ms"),
        (MS(1500), "1.5s"),
        (SECS(30), "30s"),
        (SECS(90), "1m30s"),
        (SECS(7200), "2h"),
        (MS(60_250), "1m0.25s"),
        (SECS(3605), "1h5s"),
        (SECS(3660), "1h1m"),
        (SECS(3723) + MS(500), "1h2m3.5s"),
        (Duration::from_micros(1500), "1.5ms"),
        (Duration::from_nanos(1500), "1.5us"),
        (Duration::from_nanos(7), "7ns"),
        (Duration::from_nanos(1_000_000_001), "1.000000001s"),
        (MS(1), "1ms"),
        (SECS(100 * 3600), "100h"),
    ];
    for (d, want) in cases {
        assert_eq!(format_duration(d), want, "{d:?}");
    }
}

#[test]
fn format_round_trips_through_parse() {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut samples = vec![
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_nanos(u64::MAX),
        MS(999),
        MS(1000),
        MS(59_999),
        MS(3_600_000),
    ];
    for _ in 0..2000 {
        samples.push(MS(rng.u64(0..10_000_000)));
        samples.push(Duration::from_nanos(rng.u64(..)));
    }
    for d in samples {
        let text = format_duration(d);
        assert_eq!(parse_duration(&text), Ok(d), "{text}");
    }
}
