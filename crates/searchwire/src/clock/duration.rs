//! Human-written durations: parsing and formatting.
//!
//! Durations reach searchwire from people, not programs: the
//! `SEARCHWIRE_ATTEMPT_TIMEOUT` environment override, CLI flags such as
//! `--timeout 1m30s` and the backoff syntax (`exp:100ms:10s`). The accepted
//! syntax is a superset of Go's `time.ParseDuration`, because operators who
//! move between opensearch-go and searchwire should be able to paste the same
//! value, plus the two forms opensearch-go's `OPENSEARCH_GO_REQUEST_TIMEOUT`
//! also accepts: a bare integer (seconds) and a bare decimal (fractional
//! seconds).
//!
//! [`format_duration`] is the inverse, used by `explain` output and `--help`,
//! so that every duration searchwire prints can be pasted back into a flag.

use std::fmt;
use std::time::Duration;

/// Largest accepted duration, in nanoseconds: `u64::MAX` ns (about 584 years).
///
/// Why not `Duration::MAX`: every accepted value then converts losslessly to
/// `u64` nanoseconds, so code downstream (jitter draws, deadline arithmetic)
/// never has to think about overflow for a value a person typed. Nobody needs
/// a timeout longer than this.
const MAX_NANOS: u128 = u64::MAX as u128;

/// Fraction digits beyond this many are ignored (truncated). 18 digits of the
/// largest unit (an hour, 3.6e12 ns) are already far below one nanosecond, and
/// the limit keeps the fraction arithmetic inside `u128`.
const MAX_FRACTION_DIGITS: usize = 18;

const NANOS_PER_US: u128 = 1_000;
const NANOS_PER_MS: u128 = 1_000_000;
const NANOS_PER_S: u128 = 1_000_000_000;
const NANOS_PER_M: u128 = 60 * NANOS_PER_S;
const NANOS_PER_H: u128 = 60 * NANOS_PER_M;

/// What exactly was wrong, so the message can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reason {
    Empty,
    Negative,
    Malformed,
    MissingUnit,
    UnknownUnit(String),
    Overflow,
}

/// Why parsing a duration failed.
///
/// `Display` names the input and the accepted forms, so the message can be
/// shown to the person who typed the value without further context, e.g.
/// `invalid duration "abc": expected a duration like 500ms, 30s, 1m30s,
/// integer seconds (30) or fractional seconds (1.5)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDurationError {
    input: String,
    reason: Reason,
}

impl ParseDurationError {
    fn new(input: &str, reason: Reason) -> ParseDurationError {
        ParseDurationError {
            input: input.to_owned(),
            reason,
        }
    }

    /// The text that failed to parse, exactly as it was passed in (untrimmed).
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for ParseDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Cut with a marker: a garbage environment variable cannot flood a log line.
        write!(f, "invalid duration {}: ", crate::echo::echo(&self.input))?;
        match &self.reason {
            Reason::Empty => f.write_str("the value is empty; ")?,
            Reason::Negative => f.write_str("negative durations are not allowed; ")?,
            Reason::Malformed => {}
            Reason::MissingUnit => f.write_str("a number is missing its unit; ")?,
            Reason::UnknownUnit(unit) => write!(
                f,
                "unknown unit {unit:?} (known units: ns, us, µs, ms, s, m, h); "
            )?,
            Reason::Overflow => {
                f.write_str("the value is too large (at most about 584 years); ")?
            }
        }
        f.write_str(
            "expected a duration like 500ms, 30s, 1m30s, integer seconds (30) \
             or fractional seconds (1.5)",
        )
    }
}

impl std::error::Error for ParseDurationError {}

/// Parse a human-written duration.
///
/// Accepted forms:
/// - Go `time.ParseDuration` syntax: one or more `NUMBER UNIT` pairs with
///   units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`; numbers may have a decimal
///   fraction (`1.5h`, `.5s`, `1.s`); pairs may be chained (`1h2m3.5s`). A
///   leading `+` is allowed, as in Go.
/// - A lone `0`, a bare integer (`30`, seconds) or a bare decimal (`1.5`,
///   fractional seconds) — the forms opensearch-go's request-timeout
///   environment variable accepts, so the same value works in both clients.
///
/// Surrounding whitespace is trimmed. Rejected: empty input, any negative
/// value (a negative timeout has no meaning, and silently clamping it to zero
/// would hide a typo), a number without a unit inside a sequence (`1m30`),
/// unknown units, `NaN`/`inf`, and values over `u64::MAX` nanoseconds (about
/// 584 years). Fraction digits finer than a nanosecond are truncated.
pub fn parse_duration(s: &str) -> Result<Duration, ParseDurationError> {
    parse_nanos(s.trim())
        .map(nanos_to_duration)
        .map_err(|reason| ParseDurationError::new(s, reason))
}

fn parse_nanos(s: &str) -> Result<u128, Reason> {
    if s.is_empty() {
        return Err(Reason::Empty);
    }
    if s.starts_with('-') {
        return Err(Reason::Negative);
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() {
        return Err(Reason::Malformed);
    }

    // A bare number (no unit at all) means seconds.
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let mut cursor = 0;
        let number = take_number(s, &mut cursor)?;
        if cursor != s.len() {
            // A second '.' such as "1.2.3".
            return Err(Reason::Malformed);
        }
        return number.scaled(NANOS_PER_S);
    }

    let bytes = s.as_bytes();
    let mut cursor = 0;
    let mut total: u128 = 0;
    while cursor < bytes.len() {
        let number = take_number(s, &mut cursor)?;
        let unit_start = cursor;
        // A unit runs until the next digit or '.'; both are ASCII, so the
        // slice below always ends on a char boundary even for "µs".
        while cursor < bytes.len() && !bytes[cursor].is_ascii_digit() && bytes[cursor] != b'.' {
            cursor += 1;
        }
        let unit = &s[unit_start..cursor];
        let unit_nanos = match unit {
            "" => return Err(Reason::MissingUnit),
            "ns" => 1,
            // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU, as in Go.
            "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_US,
            "ms" => NANOS_PER_MS,
            "s" => NANOS_PER_S,
            "m" => NANOS_PER_M,
            "h" => NANOS_PER_H,
            // The unit is the rest of the input: shown cut to 16 characters, like the
            // input itself (a fuzzer found a 100 KB "unit" echoed whole).
            other => {
                let mut unit: String = other.chars().take(16).collect();
                if other.chars().nth(16).is_some() {
                    unit.push_str("...");
                }
                return Err(Reason::UnknownUnit(unit));
            }
        };
        total = total
            .checked_add(number.scaled(unit_nanos)?)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or(Reason::Overflow)?;
    }
    Ok(total)
}

/// One `NUMBER` of the syntax: integer digits and (possibly empty) fraction
/// digits, kept as text until the unit is known so no precision is lost.
struct Number<'a> {
    integer: &'a str,
    fraction: &'a str,
}

impl Number<'_> {
    /// The number times `unit_nanos`, exactly (fraction truncated to whole ns).
    fn scaled(&self, unit_nanos: u128) -> Result<u128, Reason> {
        let mut integer: u128 = 0;
        for b in self.integer.bytes() {
            integer = integer
                .checked_mul(10)
                .and_then(|v| v.checked_add(u128::from(b - b'0')))
                .filter(|v| *v <= MAX_NANOS)
                .ok_or(Reason::Overflow)?;
        }
        let whole = integer
            .checked_mul(unit_nanos)
            .filter(|v| *v <= MAX_NANOS)
            .ok_or(Reason::Overflow)?;

        let digits = &self.fraction[..self.fraction.len().min(MAX_FRACTION_DIGITS)];
        let mut numerator: u128 = 0;
        let mut denominator: u128 = 1;
        for b in digits.bytes() {
            numerator = numerator * 10 + u128::from(b - b'0');
            denominator *= 10;
        }
        // numerator < 10^18 and unit_nanos <= 3.6e12, so this fits in u128.
        let part = numerator * unit_nanos / denominator;
        whole
            .checked_add(part)
            .filter(|v| *v <= MAX_NANOS)
            .ok_or(Reason::Overflow)
    }
}

/// Read `DIGITS [. DIGITS]` at `cursor`; at least one digit must be present.
fn take_number<'a>(s: &'a str, cursor: &mut usize) -> Result<Number<'a>, Reason> {
    let bytes = s.as_bytes();
    let start = *cursor;
    while *cursor < bytes.len() && bytes[*cursor].is_ascii_digit() {
        *cursor += 1;
    }
    let integer = &s[start..*cursor];
    let mut fraction = "";
    if *cursor < bytes.len() && bytes[*cursor] == b'.' {
        *cursor += 1;
        let fraction_start = *cursor;
        while *cursor < bytes.len() && bytes[*cursor].is_ascii_digit() {
            *cursor += 1;
        }
        fraction = &s[fraction_start..*cursor];
    }
    if integer.is_empty() && fraction.is_empty() {
        return Err(Reason::Malformed);
    }
    Ok(Number { integer, fraction })
}

fn nanos_to_duration(nanos: u128) -> Duration {
    // nanos <= MAX_NANOS, so both parts fit their types.
    let secs = u64::try_from(nanos / NANOS_PER_S).unwrap_or(u64::MAX);
    let sub = u32::try_from(nanos % NANOS_PER_S).unwrap_or(0);
    Duration::new(secs, sub)
}

/// Render a duration compactly and round-trippably.
///
/// Examples: `0s`, `500ms`, `1.5s`, `30s`, `1m30s`, `2h`, `1m0.25s`,
/// `1h5s`. Zero components are left out (`2h`, not Go's `2h0m0s`), because
/// `explain` tables and `--help` are read by people. Values under a second use
/// `ms`, `us` or `ns` (ASCII `us`, not `µs`, so the output can be typed back on
/// any keyboard). No precision is dropped, so
/// `parse_duration(&format_duration(d)) == Ok(d)` for every `d` up to
/// `u64::MAX` nanoseconds.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    let nanos = d.subsec_nanos();
    if d.as_secs() == 0 {
        let n = u128::from(nanos);
        return if n < NANOS_PER_US {
            format!("{n}ns")
        } else if n < NANOS_PER_MS {
            with_fraction(n, NANOS_PER_US, 3, "us")
        } else {
            with_fraction(n, NANOS_PER_MS, 6, "ms")
        };
    }

    let total_secs = d.as_secs();
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = total_secs % 60;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if secs > 0 || nanos > 0 {
        let whole_nanos = u128::from(secs) * NANOS_PER_S + u128::from(nanos);
        out.push_str(&with_fraction(whole_nanos, NANOS_PER_S, 9, "s"));
    }
    out
}

/// `value / unit` with the remainder as a decimal fraction (trailing zeros
/// trimmed), followed by `suffix`. `digits` is log10(unit).
fn with_fraction(value: u128, unit: u128, digits: usize, suffix: &str) -> String {
    let whole = value / unit;
    let rest = value % unit;
    if rest == 0 {
        format!("{whole}{suffix}")
    } else {
        let fraction = format!("{rest:0digits$}");
        format!("{whole}.{}{suffix}", fraction.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests;
