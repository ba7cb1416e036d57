//! Table tests of the retry planner: every rule, and the order in which the rules are asked.

use std::time::Duration;

use http::StatusCode;

use super::{plan, Decision, Delay, Facts, Gate, Stop};
use crate::classify::OutcomeKind;
use crate::policy::retry::{NoRetry, RetryPolicy};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A retryable failure with everything permissive: 503 on an idempotent request, no retry
/// made yet, breaker closed, 100 ms backoff, no deadline, no budget.
fn facts() -> Facts {
    Facts {
        outcome: OutcomeKind::Gateway,
        status: Some(StatusCode::SERVICE_UNAVAILABLE),
        idempotent: true,
        retries_done: 0,
        retry_limit: 3,
        breaker: Gate::Closed,
        delay: Delay::Backoff {
            base: ms(100),
            multiplier: 1.0,
        },
        deadline_remaining: None,
        budget_affords: None,
        server_paced: false,
    }
}

fn decide(f: Facts) -> Decision {
    plan(&RetryPolicy::default(), &f)
}

fn retry(delay: Duration, multiplier: f64) -> Decision {
    Decision::Retry { delay, multiplier }
}

#[test]
fn each_rule_alone() {
    let cases: Vec<(&str, Facts, Decision)> = vec![
        ("permissive", facts(), retry(ms(100), 1.0)),
        (
            "404 is final",
            Facts {
                outcome: OutcomeKind::ClientError,
                status: Some(StatusCode::NOT_FOUND),
                ..facts()
            },
            Decision::Stop(Stop::Policy(NoRetry::Final)),
        ),
        (
            "retries used up",
            Facts {
                retries_done: 3,
                ..facts()
            },
            Decision::Stop(Stop::Policy(NoRetry::Exhausted)),
        ),
        (
            "a class rule's own limit",
            Facts {
                retries_done: 1,
                retry_limit: 1,
                ..facts()
            },
            Decision::Stop(Stop::Policy(NoRetry::Exhausted)),
        ),
        (
            "a POST's 503 may have been processed",
            Facts {
                idempotent: false,
                ..facts()
            },
            Decision::Stop(Stop::Policy(NoRetry::NotIdempotent)),
        ),
        (
            "a POST's connect failure was never sent",
            Facts {
                idempotent: false,
                outcome: OutcomeKind::Connect,
                status: None,
                ..facts()
            },
            retry(ms(100), 1.0),
        ),
        (
            "cancelled",
            Facts {
                outcome: OutcomeKind::Cancelled,
                status: None,
                ..facts()
            },
            Decision::Stop(Stop::Policy(NoRetry::Cancelled)),
        ),
        (
            "breaker refuses",
            Facts {
                breaker: Gate::Refused,
                ..facts()
            },
            Decision::Stop(Stop::Breaker),
        ),
        (
            "a half-open probe slot is a retry",
            Facts {
                breaker: Gate::Probe,
                ..facts()
            },
            retry(ms(100), 1.0),
        ),
        (
            "no breaker",
            Facts {
                breaker: Gate::Off,
                ..facts()
            },
            retry(ms(100), 1.0),
        ),
        (
            "the load multiplier stretches the backoff",
            Facts {
                delay: Delay::Backoff {
                    base: ms(100),
                    multiplier: 3.0,
                },
                ..facts()
            },
            retry(ms(300), 3.0),
        ),
        (
            "Retry-After is waited exactly",
            Facts {
                delay: Delay::Hint(ms(2000)),
                ..facts()
            },
            retry(ms(2000), 1.0),
        ),
        (
            "a backoff ending at the deadline is not started",
            Facts {
                deadline_remaining: Some(ms(100)),
                ..facts()
            },
            Decision::Stop(Stop::Deadline { delay: ms(100) }),
        ),
        (
            "a backoff ending before the deadline is",
            Facts {
                deadline_remaining: Some(ms(101)),
                ..facts()
            },
            retry(ms(100), 1.0),
        ),
        (
            "the stretched delay is what must fit",
            Facts {
                delay: Delay::Backoff {
                    base: ms(100),
                    multiplier: 3.0,
                },
                deadline_remaining: Some(ms(250)),
                ..facts()
            },
            Decision::Stop(Stop::Deadline { delay: ms(300) }),
        ),
        (
            "budget exhausted",
            Facts {
                budget_affords: Some(false),
                ..facts()
            },
            Decision::Stop(Stop::Budget),
        ),
        (
            "budget affords",
            Facts {
                budget_affords: Some(true),
                ..facts()
            },
            retry(ms(100), 1.0),
        ),
    ];
    for (name, f, want) in cases {
        assert_eq!(decide(f), want, "{name}");
    }
}

/// Every rule refuses; removing the refusals one at a time, in the documented order
/// (retry → breaker → delay/deadline → budget), the next rule is the one that decides.
#[test]
fn the_rules_are_asked_in_order_retry_breaker_deadline_budget() {
    let all_refuse = Facts {
        retries_done: 3,
        breaker: Gate::Refused,
        deadline_remaining: Some(ms(50)),
        budget_affords: Some(false),
        ..facts()
    };
    assert_eq!(
        decide(all_refuse),
        Decision::Stop(Stop::Policy(NoRetry::Exhausted))
    );
    let retry_allows = Facts {
        retries_done: 0,
        ..all_refuse
    };
    assert_eq!(decide(retry_allows), Decision::Stop(Stop::Breaker));
    let breaker_allows = Facts {
        breaker: Gate::Closed,
        ..retry_allows
    };
    assert_eq!(
        decide(breaker_allows),
        Decision::Stop(Stop::Deadline { delay: ms(100) })
    );
    let deadline_allows = Facts {
        deadline_remaining: Some(ms(500)),
        ..breaker_allows
    };
    assert_eq!(decide(deadline_allows), Decision::Stop(Stop::Budget));
    let budget_allows = Facts {
        budget_affords: Some(true),
        ..deadline_allows
    };
    assert_eq!(decide(budget_allows), retry(ms(100), 1.0));
}

#[test]
fn a_non_idempotent_refusal_comes_before_an_open_breaker() {
    let f = Facts {
        idempotent: false,
        breaker: Gate::Refused,
        ..facts()
    };
    assert_eq!(
        decide(f),
        Decision::Stop(Stop::Policy(NoRetry::NotIdempotent))
    );
}

#[test]
fn a_deadline_refusal_never_reaches_the_budget() {
    // The budget says no too, but the deadline is asked first: the reason is the deadline
    // (the loop withdraws from the budget only on `Retry`).
    let f = Facts {
        deadline_remaining: Some(Duration::ZERO),
        budget_affords: Some(false),
        ..facts()
    };
    assert_eq!(decide(f), Decision::Stop(Stop::Deadline { delay: ms(100) }));
}

#[test]
fn a_retry_the_server_paced_is_not_refused_by_the_budget() {
    let throttled = Facts {
        outcome: OutcomeKind::Throttled,
        status: Some(StatusCode::TOO_MANY_REQUESTS),
        delay: Delay::Hint(ms(1000)),
        budget_affords: Some(false),
        ..facts()
    };
    let cases: Vec<(&str, Facts, Decision)> = vec![
        (
            "429 + Retry-After >= 1 s, budget empty: retried after the server's wait",
            Facts {
                server_paced: true,
                ..throttled
            },
            retry(ms(1000), 1.0),
        ),
        (
            "429 without a server wait, budget empty: refused",
            throttled,
            Decision::Stop(Stop::Budget),
        ),
        (
            "server-paced but retries used up: the retry limit still decides",
            Facts {
                server_paced: true,
                retries_done: 3,
                ..throttled
            },
            Decision::Stop(Stop::Policy(NoRetry::Exhausted)),
        ),
        (
            "server-paced but past the deadline: the deadline still decides",
            Facts {
                server_paced: true,
                deadline_remaining: Some(ms(500)),
                ..throttled
            },
            Decision::Stop(Stop::Deadline { delay: ms(1000) }),
        ),
        (
            "503 outage, budget empty: refused (charged)",
            Facts {
                budget_affords: Some(false),
                ..facts()
            },
            Decision::Stop(Stop::Budget),
        ),
    ];
    for (name, f, want) in cases {
        assert_eq!(decide(f), want, "{name}");
    }
    assert!(!Facts {
        server_paced: true,
        ..facts()
    }
    .charged_to_budget());
    assert!(facts().charged_to_budget());
}
