use super::*;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Latency of a bulk request of `b` bytes: 20 ms fixed, 2 ms per 100 KiB, and a cost that
/// grows with the square of the size (heap pressure, merges): 1 ms per (100 KiB)² — the
/// bytes per second of a slot peak at sqrt(20) × 100 KiB ≈ 447 KiB.
fn model(b: usize) -> Duration {
    let x = b as f64 / (100.0 * KIB as f64);
    Duration::from_secs_f64((20.0 + 2.0 * x + x * x) / 1000.0)
}

#[test]
fn the_climb_settles_within_two_times_of_the_best_fixed_size() {
    // The sweep: fixed sizes from 16 KiB to 16 MiB by factors of √2.
    let mut best = (0usize, 0.0f64);
    let mut b = 16.0 * KIB as f64;
    while b <= 16.0 * MIB as f64 {
        let rate = b / model(b as usize).as_secs_f64();
        if rate > best.1 {
            best = (b as usize, rate);
        }
        b *= std::f64::consts::SQRT_2;
    }
    assert!((362 * KIB..=724 * KIB).contains(&best.0), "{}", best.0);
    let mut s = BatchSizer::new(64 * KIB, 16 * MIB, true, Duration::from_secs(10));
    let mut sizes = Vec::new();
    for _ in 0..300 {
        let size = s.size();
        s.on_response(s.epoch(), size, model(size), Signal::Answered);
        sizes.push(s.size());
    }
    // After the descent from 16 MiB, every size stays within 2× of the best.
    for &size in &sizes[150..] {
        assert!(
            size * 2 >= best.0 && size <= best.0 * 2,
            "{size} against the best fixed {}",
            best.0
        );
    }
}

#[test]
fn throttling_halves_once_per_change_and_slowness_cuts_by_a_step() {
    let mut s = BatchSizer::new(64 * KIB, 4 * MIB, true, Duration::from_secs(1));
    let e = s.epoch();
    assert!(s.on_response(e, 4 * MIB, ms(100), Signal::Throttled));
    assert_eq!(s.size(), 2 * MIB);
    // Answers to requests of the old size do not cut again.
    assert!(!s.on_response(e, 4 * MIB, ms(100), Signal::Throttled));
    assert_eq!(s.size(), 2 * MIB);
    // A request of 512 KiB (cut short by the action count) throttled: half of what was sent.
    assert!(s.on_response(s.epoch(), 512 * KIB, ms(100), Signal::Throttled));
    assert_eq!(s.size(), 256 * KIB);
    // Past the latency target: one step down.
    assert!(s.on_response(
        s.epoch(),
        256 * KIB,
        Duration::from_secs(2),
        Signal::Answered
    ));
    assert_eq!(s.size(), 256 * KIB * 2 / 3);
    // Never below the lower bound.
    for _ in 0..10 {
        s.on_response(s.epoch(), s.size(), ms(10), Signal::Throttled);
    }
    assert_eq!(s.size(), 64 * KIB);
    // Failures that are not throttling say nothing.
    assert!(!s.on_response(s.epoch(), 64 * KIB, ms(10), Signal::Other));
}

#[test]
fn a_413_lowers_the_upper_bound_for_good_even_when_not_adaptive() {
    let mut s = BatchSizer::new(64 * KIB, 4 * MIB, false, Duration::from_secs(1));
    assert!(s.on_response(0, 4 * MIB, ms(5), Signal::TooLarge));
    assert_eq!(s.size(), 2 * MIB);
    // Not adaptive: nothing else moves it.
    for _ in 0..20 {
        s.on_response(s.epoch(), s.size(), ms(5), Signal::Answered);
        s.on_response(s.epoch(), s.size(), ms(5), Signal::Throttled);
    }
    assert_eq!(s.size(), 2 * MIB);
    let mut a = BatchSizer::new(64 * KIB, 4 * MIB, true, Duration::from_secs(1));
    a.on_response(0, 3 * MIB, ms(5), Signal::TooLarge);
    assert_eq!(a.size(), 1536 * KIB);
    // Fast answers climb, but never past the new bound.
    for _ in 0..50 {
        a.on_response(a.epoch(), a.size(), ms(5), Signal::Answered);
        assert!(a.size() <= 1536 * KIB);
    }
    // A 413 below the lower bound lowers it too.
    a.on_response(a.epoch(), 64 * KIB, ms(5), Signal::TooLarge);
    assert_eq!(a.size(), 32 * KIB);
}

#[test]
fn short_requests_do_not_measure_the_size() {
    let mut s = BatchSizer::new(64 * KIB, 4 * MIB, true, Duration::from_secs(1));
    for _ in 0..10 {
        assert!(!s.on_response(s.epoch(), 100 * KIB, ms(5), Signal::Answered));
    }
    assert_eq!(s.size(), 4 * MIB);
}
