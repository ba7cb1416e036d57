use super::*;

fn cfg() -> BreakerConfig {
    BreakerConfig {
        window: Duration::from_secs(300),
        min_requests: 50,
        failure_rate: 0.6,
        cool_down: Duration::from_secs(5),
        max_cool_down: Duration::from_secs(60),
        probes: 3,
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test(start_paused = true)]
async fn verdicts_follow_the_classification() {
    use OutcomeKind::*;
    for k in [Connect, Reset, Timeout, Gateway, ServerError] {
        assert_eq!(Verdict::of(k), Verdict::Failure, "{k}");
    }
    for k in [Success, Throttled, Auth, ClientError] {
        assert_eq!(Verdict::of(k), Verdict::Success, "{k}");
    }
    assert_eq!(Verdict::of(Cancelled), Verdict::Ignored);
}

#[tokio::test(start_paused = true)]
async fn it_opens_only_with_enough_requests_and_a_high_enough_failure_rate() {
    let t0 = Instant::now();
    let b = Breaker::new(cfg(), t0);
    // 49 failures: below min_requests, stays closed.
    for _ in 0..49 {
        assert_eq!(b.record(t0, Verdict::Failure, false), None);
    }
    // 20 successes: 49 of 69 = 71 % > 60 %, but only a failure can open it.
    for _ in 0..20 {
        assert_eq!(b.record(t0, Verdict::Success, false), None);
    }
    assert_eq!(b.state(t0).0, BreakerState::Closed);
    // 30 more successes: 49 of 99 = 49 %; a failure makes 50 of 100 = 50 %: closed.
    for _ in 0..30 {
        b.record(t0, Verdict::Success, false);
    }
    assert_eq!(b.record(t0, Verdict::Failure, false), None);
    // Cancellations are not counted.
    for _ in 0..100 {
        b.record(t0, Verdict::Ignored, false);
    }
    // Push the rate above 60 %: 50 + 26 = 76 of 126 = 60.3 %.
    let mut opened = None;
    for i in 0..26 {
        if let Some(c) = b.record(t0, Verdict::Failure, false) {
            opened = Some((i, c));
            break;
        }
    }
    let (i, change) = opened.unwrap();
    assert_eq!(i, 25, "the 26th extra failure crosses 60 %");
    assert_eq!(change.from, BreakerState::Closed);
    assert_eq!(change.to, BreakerState::Open);
    assert!(
        change.reason.contains("76 of the last 126"),
        "{}",
        change.reason
    );
}

#[tokio::test(start_paused = true)]
async fn old_outcomes_leave_the_window() {
    let t0 = Instant::now();
    let b = Breaker::new(cfg(), t0);
    for _ in 0..40 {
        b.record(t0, Verdict::Failure, false);
    }
    // Five minutes later those 40 failures are gone: 20 new failures are not enough.
    let later = t0 + secs(300);
    for _ in 0..20 {
        assert_eq!(b.record(later, Verdict::Failure, false), None);
    }
    assert_eq!(b.state(later).0, BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn every_transition_with_paused_time() {
    let t0 = Instant::now();
    let b = Breaker::new(cfg(), t0);
    for _ in 0..50 {
        b.record(t0, Verdict::Failure, false);
    }
    // closed → open
    assert_eq!(b.state(t0).0, BreakerState::Open);
    assert_eq!(b.admit(t0).0, Admission::Refused { retry_in: secs(5) });
    let t1 = t0 + Duration::from_millis(4_999);
    assert_eq!(
        b.admit(t1).0,
        Admission::Refused {
            retry_in: Duration::from_millis(1)
        }
    );
    // open → half_open after the cool-down, on the next request.
    let t2 = t0 + secs(5);
    let (a, change) = b.admit(t2);
    assert_eq!(a, Admission::Probe);
    let change = change.unwrap();
    assert_eq!(
        (change.from, change.to),
        (BreakerState::Open, BreakerState::HalfOpen)
    );
    assert_eq!(b.admit(t2).0, Admission::Probe);
    assert_eq!(b.admit(t2).0, Admission::Probe);
    // Three probes out: the fourth request is refused.
    assert_eq!(
        b.admit(t2).0,
        Admission::Refused {
            retry_in: Duration::ZERO
        }
    );
    // half_open → open on a failed probe, with the cool-down doubled.
    let c = b.record(t2, Verdict::Failure, true).unwrap();
    assert_eq!((c.from, c.to), (BreakerState::HalfOpen, BreakerState::Open));
    assert_eq!(b.admit(t2).0, Admission::Refused { retry_in: secs(10) });
    // Late reports of the other two probes change nothing.
    assert_eq!(b.record(t2, Verdict::Success, true), None);
    assert_eq!(b.record(t2, Verdict::Success, true), None);
    assert_eq!(b.state(t2).0, BreakerState::Open);
    // Fails again at 10 s, 20 s, 40 s, then the cool-down stays at 60 s.
    let mut t = t2;
    for expected in [10, 20, 40, 60, 60] {
        t += secs(expected);
        assert_eq!(b.admit(t).0, Admission::Probe, "after {expected}s");
        let c = b.record(t, Verdict::Failure, true).unwrap();
        assert_eq!(c.to, BreakerState::Open);
        let next = (expected * 2).min(60);
        assert_eq!(
            b.admit(t).0,
            Admission::Refused {
                retry_in: secs(next)
            }
        );
    }
    // half_open → closed after three successful probes.
    t += secs(60);
    for _ in 0..3 {
        assert_eq!(b.admit(t).0, Admission::Probe);
    }
    assert_eq!(b.record(t, Verdict::Success, true), None);
    assert_eq!(b.record(t, Verdict::Success, true), None);
    let c = b.record(t, Verdict::Success, true).unwrap();
    assert_eq!(
        (c.from, c.to),
        (BreakerState::HalfOpen, BreakerState::Closed)
    );
    assert_eq!(b.admit(t).0, Admission::Allowed);
    // Closed with an empty window and the initial cool-down: 50 new failures reopen it
    // for 5 s.
    for _ in 0..49 {
        assert_eq!(b.record(t, Verdict::Failure, false), None);
    }
    assert!(b.record(t, Verdict::Failure, false).is_some());
    assert_eq!(b.admit(t).0, Admission::Refused { retry_in: secs(5) });
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_frees_its_slot() {
    let t0 = Instant::now();
    let b = Breaker::new(cfg(), t0);
    for _ in 0..50 {
        b.record(t0, Verdict::Failure, false);
    }
    let t = t0 + secs(5);
    let slots: Vec<_> = (0..3)
        .map(|_| {
            let (a, _, round) = b.admit_in_round(t);
            assert_eq!(a, Admission::Probe);
            ProbeSlot::new(&b, round)
        })
        .collect();
    assert!(matches!(b.admit(t).0, Admission::Refused { .. }));
    drop(slots);
    assert_eq!(
        b.admit(t).0,
        Admission::Probe,
        "dropped probes free their slots"
    );
    // A cancelled (ignored) probe verdict frees its slot too.
    assert_eq!(b.record(t, Verdict::Ignored, true), None);
    assert_eq!(b.admit(t).0, Admission::Probe);
}

#[tokio::test(start_paused = true)]
async fn a_late_probe_from_an_earlier_round_neither_counts_nor_frees_a_slot() {
    let t0 = Instant::now();
    let b = Breaker::new(cfg(), t0);
    for _ in 0..50 {
        b.record(t0, Verdict::Failure, false);
    }
    // The first half-open round: three probes out; one fails and reopens the breaker
    // (cool-down 10 s).
    let t1 = t0 + secs(5);
    let mut round1: Vec<ProbeSlot<'_>> = (0..3)
        .map(|_| {
            let (a, _, round) = b.admit_in_round(t1);
            assert_eq!(a, Admission::Probe);
            ProbeSlot::new(&b, round)
        })
        .collect();
    let failed = round1.remove(0);
    assert!(failed.record(t1, Verdict::Failure).is_some());
    // The second half-open round, after the cool-down: three fresh probes fill it.
    let t2 = t1 + secs(10);
    let round2: Vec<ProbeSlot<'_>> = (0..3)
        .map(|_| {
            let (a, _, round) = b.admit_in_round(t2);
            assert_eq!(a, Admission::Probe);
            ProbeSlot::new(&b, round)
        })
        .collect();
    // A round-1 probe finishing late: its success does not count toward closing, and
    // the other round-1 probe being dropped does not free a round-2 slot.
    let late = round1.remove(0);
    assert_eq!(late.record(t2, Verdict::Success), None);
    drop(round1);
    assert!(matches!(b.admit(t2).0, Admission::Refused { .. }));
    // The second round's own three successes close it.
    let mut closed = None;
    for slot in round2 {
        closed = closed.or(slot.record(t2, Verdict::Success));
    }
    let c = closed.expect("closed by the second round's probes");
    assert_eq!(
        (c.from, c.to),
        (BreakerState::HalfOpen, BreakerState::Closed)
    );
}

#[test]
fn state_names_are_written_once() {
    let names: Vec<&str> = BreakerState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(names, ["closed", "open", "half_open"]);
}

#[test]
fn validation() {
    assert!(BreakerConfig::default().validate().is_ok());
    let bad = BreakerConfig {
        failure_rate: 1.5,
        ..BreakerConfig::default()
    };
    assert!(bad.validate().unwrap_err().contains("failure_rate"));
}
