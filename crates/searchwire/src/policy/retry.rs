//! The retry decision: pure, given the outcome, the request's idempotency and the count
//! of retries already made. The transport loop asks; this module never sleeps or sends.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};

use crate::classify::OutcomeKind;
use crate::policy::backoff::parse_retry_after;

/// When to retry. Plain data; see [`crate::defaults`] for the defaults and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    /// HTTP statuses that are retried.
    pub retry_on_status: Vec<u16>,
    /// Whether connect failures, resets and attempt timeouts are retried (resets and
    /// timeouts only for idempotent requests).
    pub retry_on_connection_errors: bool,
    /// Longest `Retry-After` honoured.
    pub retry_after_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: crate::defaults::MAX_RETRIES,
            retry_on_status: crate::defaults::RETRY_ON_STATUS.to_vec(),
            retry_on_connection_errors: crate::defaults::RETRY_ON_CONNECTION_ERRORS,
            retry_after_cap: crate::defaults::RETRY_AFTER_CAP,
        }
    }
}

/// Why a failed attempt is not retried (for the error message and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRetry {
    /// The outcome is final (success, client error, auth, a status not in the list).
    Final,
    /// Every allowed retry was used.
    Exhausted,
    /// The request is not idempotent and the node may have processed it.
    NotIdempotent,
    /// The caller cancelled or the deadline expired.
    Cancelled,
}

impl RetryPolicy {
    #[cfg(test)]
    /// Decides whether the attempt that ended with `outcome` is retried, given that
    /// `retries_done` retries were already made.
    ///
    /// A non-idempotent request is retried only where it was certainly not processed:
    /// a connect failure (never sent) or a 429 (rejected before processing, RFC 6585) —
    /// never after a timeout, a reset or a 502/503/504 (a gateway may have forwarded it).
    pub fn decide(
        &self,
        outcome: OutcomeKind,
        status: Option<StatusCode>,
        idempotent: bool,
        retries_done: u32,
    ) -> Result<(), NoRetry> {
        self.decide_within(outcome, status, idempotent, retries_done, self.max_retries)
    }

    /// [`decide`](Self::decide) with another retry limit than `max_retries` (a
    /// [`ClassBackoff`](crate::ClassBackoff) rule's, with `retries_done` counting the
    /// retries of that class).
    pub fn decide_within(
        &self,
        outcome: OutcomeKind,
        status: Option<StatusCode>,
        idempotent: bool,
        retries_done: u32,
        limit: u32,
    ) -> Result<(), NoRetry> {
        let eligible = match outcome {
            OutcomeKind::Success => return Err(NoRetry::Final),
            OutcomeKind::Cancelled => return Err(NoRetry::Cancelled),
            OutcomeKind::Connect => self.retry_on_connection_errors,
            OutcomeKind::Reset | OutcomeKind::Timeout => {
                if !self.retry_on_connection_errors {
                    false
                } else if !idempotent {
                    return Err(NoRetry::NotIdempotent);
                } else {
                    true
                }
            }
            _ => {
                let listed = status.is_some_and(|s| self.retry_on_status.contains(&s.as_u16()));
                if !listed {
                    false
                } else if !idempotent && !outcome.certainly_not_processed() {
                    return Err(NoRetry::NotIdempotent);
                } else {
                    true
                }
            }
        };
        if !eligible {
            return Err(NoRetry::Final);
        }
        if retries_done >= limit {
            return Err(NoRetry::Exhausted);
        }
        Ok(())
    }

    /// The server's `Retry-After` hint on a 429 or 503, capped at `retry_after_cap`.
    pub fn server_hint(
        &self,
        status: Option<StatusCode>,
        headers: Option<&HeaderMap>,
        now: SystemTime,
    ) -> Option<Duration> {
        let s = status?.as_u16();
        if s != 429 && s != 503 {
            return None;
        }
        let v = headers?.get(http::header::RETRY_AFTER)?.to_str().ok()?;
        parse_retry_after(v, now).map(|d| d.min(self.retry_after_cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutcomeKind::*;

    fn st(s: u16) -> Option<StatusCode> {
        StatusCode::from_u16(s).ok()
    }

    #[test]
    fn default_statuses_and_limits() {
        let p = RetryPolicy::default();
        for s in [502, 503, 504] {
            assert_eq!(p.decide(Gateway, st(s), true, 0), Ok(()));
        }
        assert_eq!(p.decide(Throttled, st(429), true, 0), Ok(()));
        assert_eq!(p.decide(ServerError, st(500), true, 0), Err(NoRetry::Final));
        assert_eq!(p.decide(ClientError, st(404), true, 0), Err(NoRetry::Final));
        assert_eq!(p.decide(Auth, st(401), true, 0), Err(NoRetry::Final));
        assert_eq!(p.decide(Connect, None, true, 2), Ok(()));
        assert_eq!(p.decide(Connect, None, true, 3), Err(NoRetry::Exhausted));
        assert_eq!(p.decide(Success, st(200), true, 0), Err(NoRetry::Final));
        assert_eq!(p.decide(Cancelled, None, true, 0), Err(NoRetry::Cancelled));
    }

    #[test]
    fn zero_max_retries_means_no_retry() {
        let p = RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        };
        assert_eq!(p.decide(Connect, None, true, 0), Err(NoRetry::Exhausted));
        assert_eq!(p.decide(Gateway, st(503), true, 0), Err(NoRetry::Exhausted));
    }

    #[test]
    fn post_is_retried_only_when_certainly_not_processed() {
        let p = RetryPolicy::default();
        assert_eq!(p.decide(Connect, None, false, 0), Ok(()));
        assert_eq!(p.decide(Throttled, st(429), false, 0), Ok(()));
        assert_eq!(
            p.decide(Timeout, None, false, 0),
            Err(NoRetry::NotIdempotent)
        );
        assert_eq!(p.decide(Reset, None, false, 0), Err(NoRetry::NotIdempotent));
        assert_eq!(
            p.decide(Gateway, st(503), false, 0),
            Err(NoRetry::NotIdempotent)
        );
        assert_eq!(p.decide(Timeout, None, true, 0), Ok(()));
        assert_eq!(p.decide(Reset, None, true, 0), Ok(()));
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = RetryPolicy::default();
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            p.server_hint(st(429), Some(&h), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            p.server_hint(st(503), Some(&h), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(p.server_hint(st(502), Some(&h), now), None);
        h.insert(http::header::RETRY_AFTER, "3600".parse().unwrap());
        assert_eq!(
            p.server_hint(st(429), Some(&h), now),
            Some(Duration::from_secs(30))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        h.insert(http::header::RETRY_AFTER, date.parse().unwrap());
        assert_eq!(
            p.server_hint(st(429), Some(&h), now),
            Some(Duration::from_secs(7))
        );
        h.insert(http::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(p.server_hint(st(429), Some(&h), now), None);
    }
}
