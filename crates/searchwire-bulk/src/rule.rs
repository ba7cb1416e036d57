//! One retry class's rule as plain data: the defaults table ([`crate::defaults`]) holds
//! three of them and the retry policy ([`crate::backoff`]) reads them, so the type lives
//! below both.

use std::time::Duration;

/// One class's rule: first delay, growth factor, and how many retries the class allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassRule {
    /// The delay before the first retry.
    pub base: Duration,
    /// Each further retry waits this many times longer.
    pub factor: f64,
    /// The class's count (reference 004 §3.3): after this many retries an item is handed
    /// on to whoever takes it (a retry sink, the caller of a tracked item); without one it
    /// goes on being retried, at the capped delay, until its item deadline.
    pub max_retries: u32,
}

impl ClassRule {
    /// A rule.
    pub const fn new(base: Duration, factor: f64, max_retries: u32) -> ClassRule {
        ClassRule {
            base,
            factor,
            max_retries,
        }
    }
}
