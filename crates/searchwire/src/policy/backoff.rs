//! How long to wait before retrying a request.
//!
//! This module only answers "how long": whether to retry at all, on which
//! node, and within which deadline are decided elsewhere. A [`Backoff`] is a
//! pure function of the retry number, the previous delay and a seedable random
//! source, so the whole retry schedule can be asserted exactly in tests (turn
//! jitter off with [`Jitter::None`], or fix the seed).
//!
//! Why jitter is on by default: when a node answers 503 or resets
//! connections, every client talking to it sees the failure at the same
//! moment. Without jitter they all come back at the same moment too, and the
//! retry wave is as large as the original load. "Full" jitter (AWS
//! Architecture Blog, "Exponential Backoff And Jitter") spreads the wave over
//! the whole window and, in that article's simulation, does the least total
//! work among competing clients.
//!
//! A server may also say how long to wait: [`parse_retry_after`] reads the
//! HTTP `Retry-After` header so the retry loop can honour it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::duration::parse_duration;

/// How randomness is mixed into an exponential delay `d`.
///
/// The names and formulas follow the AWS Architecture Blog article
/// "Exponential Backoff And Jitter".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Exactly `d`. Deterministic: for tests and for a single client.
    None,
    /// Uniform in `[0, d]`. The default: spreads competing clients the most
    /// and does the least total work.
    #[default]
    Full,
    /// `d/2` plus uniform in `[0, d/2]`: never retries sooner than half the
    /// exponential delay, at the price of less spreading.
    Equal,
    /// `min(cap, uniform [base, previous × 3])`: each delay grows from the
    /// previous one rather than from the retry number.
    Decorrelated,
}

/// The retry delay policy.
#[derive(Clone)]
pub enum Backoff {
    /// No delay: retry immediately (opensearch-go's behaviour when no
    /// backoff function is configured).
    None,
    /// The same delay before every retry.
    Constant(Duration),
    /// Retry `i` (1-based) waits `i × step`, never more than `cap`.
    Linear {
        /// Added delay per retry.
        step: Duration,
        /// Largest delay.
        cap: Duration,
    },
    /// `base × 2^(i-1)` for retry `i` (1-based), capped at `cap`, with
    /// `jitter` applied (Full: uniform `[0, d]`; Equal: `d/2` + uniform
    /// `[0, d/2]`; Decorrelated: `min(cap, uniform [base, prev × 3])`, per the
    /// AWS Architecture Blog article "Exponential Backoff And Jitter").
    Exponential {
        /// Delay of the first retry before jitter.
        base: Duration,
        /// Largest delay, before and after jitter.
        cap: Duration,
        /// How randomness is applied.
        jitter: Jitter,
    },
    /// A user function of the 1-based retry number (like opensearch-go's
    /// `RetryBackoff`). Its result is used as is.
    Custom(Arc<dyn Fn(u32) -> Duration + Send + Sync>),
}

impl Backoff {
    /// Exponential backoff from `base`, capped at `cap`, with full jitter
    /// (the jitter that spreads competing clients the most).
    pub fn exponential(base: Duration, cap: Duration) -> Backoff {
        Backoff::Exponential {
            base,
            cap,
            jitter: Jitter::Full,
        }
    }

    /// The same delay `d` before every retry.
    pub fn constant(d: Duration) -> Backoff {
        Backoff::Constant(d)
    }

    /// Retry `i` waits `i × step`, capped at [`crate::defaults::LINEAR_BACKOFF_CAP`].
    pub fn linear(step: Duration) -> Backoff {
        Backoff::Linear {
            step,
            cap: crate::defaults::LINEAR_BACKOFF_CAP,
        }
    }

    /// Delay computed by `f` from the 1-based retry number.
    pub fn from_fn(f: impl Fn(u32) -> Duration + Send + Sync + 'static) -> Backoff {
        Backoff::Custom(Arc::new(f))
    }

    /// Replace the jitter of an exponential backoff; other kinds have no
    /// jitter and are returned unchanged.
    pub fn with_jitter(self, j: Jitter) -> Backoff {
        match self {
            Backoff::Exponential { base, cap, .. } => Backoff::Exponential {
                base,
                cap,
                jitter: j,
            },
            other => other,
        }
    }

    /// The delay before retry number `retry`.
    ///
    /// `retry` is 1-based (the first retry is 1; 0 is treated as 1). `prev`
    /// is the delay returned for the previous retry, used only by
    /// [`Jitter::Decorrelated`]; pass `Duration::ZERO` on the first retry.
    /// Pure given `rng`: the same seed gives the same sequence, and
    /// [`Jitter::None`] does not draw from `rng` at all. All arithmetic
    /// saturates, so any `retry` (even `u32::MAX`) is safe.
    pub fn delay(&self, retry: u32, prev: Duration, rng: &mut fastrand::Rng) -> Duration {
        let retry = retry.max(1);
        match self {
            Backoff::None => Duration::ZERO,
            Backoff::Constant(d) => *d,
            Backoff::Linear { step, cap } => step.saturating_mul(retry).min(*cap),
            Backoff::Exponential { base, cap, jitter } => {
                let d = doubled(*base, retry - 1).min(*cap);
                match jitter {
                    Jitter::None => d,
                    Jitter::Full => uniform(Duration::ZERO, d, rng),
                    Jitter::Equal => {
                        let half = d / 2;
                        half.saturating_add(uniform(Duration::ZERO, d.saturating_sub(half), rng))
                    }
                    Jitter::Decorrelated => {
                        let high = prev.saturating_mul(3).max(*base);
                        uniform(*base, high, rng).min(*cap)
                    }
                }
            }
            Backoff::Custom(f) => f(retry),
        }
    }

    /// Parse the CLI syntax.
    ///
    /// Accepted: `none`; `const:DUR`; `linear:STEP` (capped at
    /// [`crate::defaults::LINEAR_BACKOFF_CAP`]); `exp:BASE:CAP` (full jitter), e.g.
    /// `exp:100ms:10s`. Durations use [`parse_duration`] syntax. For `exp`,
    /// BASE must be positive (an exponential of zero is `none`; say so) and
    /// CAP at least BASE. Errors name the input and the accepted forms.
    pub fn parse(s: &str) -> Result<Backoff, String> {
        let fail = |why: &str| {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!("{why}; ")
            };
            format!(
                "invalid backoff {}: {why}expected one of none, const:DUR, linear:STEP, \
                 exp:BASE:CAP (e.g. exp:{}:{})",
                crate::echo::echo(s),
                crate::clock::duration::format_duration(crate::defaults::BACKOFF_BASE),
                crate::clock::duration::format_duration(crate::defaults::BACKOFF_CAP),
            )
        };
        let dur = |text: &str| parse_duration(text).map_err(|e| fail(&e.to_string()));

        let parts: Vec<&str> = s.trim().split(':').collect();
        match parts.as_slice() {
            [kind] if kind.eq_ignore_ascii_case("none") => Ok(Backoff::None),
            [kind, d] if kind.eq_ignore_ascii_case("const") => Ok(Backoff::constant(dur(d)?)),
            [kind, step] if kind.eq_ignore_ascii_case("linear") => Ok(Backoff::linear(dur(step)?)),
            [kind, base, cap] if kind.eq_ignore_ascii_case("exp") => {
                let base = dur(base)?;
                let cap = dur(cap)?;
                if base.is_zero() {
                    return Err(fail("exp BASE must be greater than zero"));
                }
                if cap < base {
                    return Err(fail("exp CAP must be at least BASE"));
                }
                Ok(Backoff::exponential(base, cap))
            }
            _ => Err(fail("")),
        }
    }
}

/// `base × 2^doublings`, saturating at `Duration::MAX`.
fn doubled(base: Duration, doublings: u32) -> Duration {
    if base.is_zero() {
        Duration::ZERO
    } else if doublings < 32 {
        base.saturating_mul(1u32 << doublings)
    } else {
        Duration::MAX
    }
}

/// Uniform in `[low, high]` (inclusive) at nanosecond resolution; `low` when
/// `high <= low`. Durations beyond `u64::MAX` ns (584 years) saturate there.
fn uniform(low: Duration, high: Duration, rng: &mut fastrand::Rng) -> Duration {
    let to_nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (low, high) = (to_nanos(low), to_nanos(high));
    if high <= low {
        return Duration::from_nanos(low);
    }
    Duration::from_nanos(rng.u64(low..=high))
}

impl Default for Backoff {
    /// Exponential from [`crate::defaults::BACKOFF_BASE`] to [`crate::defaults::BACKOFF_CAP`]
    /// with full jitter; see those constants for why.
    fn default() -> Backoff {
        Backoff::exponential(crate::defaults::BACKOFF_BASE, crate::defaults::BACKOFF_CAP)
    }
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backoff::None => f.write_str("None"),
            Backoff::Constant(d) => f.debug_tuple("Constant").field(d).finish(),
            Backoff::Linear { step, cap } => f
                .debug_struct("Linear")
                .field("step", step)
                .field("cap", cap)
                .finish(),
            Backoff::Exponential { base, cap, jitter } => f
                .debug_struct("Exponential")
                .field("base", base)
                .field("cap", cap)
                .field("jitter", jitter)
                .finish(),
            Backoff::Custom(_) => f.write_str("Custom(<fn>)"),
        }
    }
}

/// Parse an HTTP `Retry-After` header value (RFC 9110 §10.2.3).
///
/// Either delay-seconds (`120`) or an HTTP-date (`Wed, 21 Oct 2015 07:28:00
/// GMT`), which is taken relative to `now`; a date in the past means "retry
/// now" (`Duration::ZERO`). Anything else — negative or signed numbers,
/// fractions, garbage — is `None`, so the caller falls back to its own
/// backoff. Never panics on hostile input: a delay-seconds value too large for
/// a `u64` saturates to `u64::MAX` seconds (the retry loop's deadline bounds
/// the actual wait).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let secs = value.bytes().fold(0u64, |acc, b| {
            acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        });
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests;
