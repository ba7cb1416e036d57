//! The request's retry id, made when something first shows it.

use std::fmt;
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::observe::context::RetryId;

/// The [`RetryId`] of one request, shared by its span, its attempts' spans and its retry
/// logs. It is made the first time one of them displays it — with a subscriber, when the
/// request's span is created at the request's start — so a request nobody traces reads no
/// wall clock and draws no UUID (~150 instructions per request).
pub(in crate::transport) struct RequestId {
    id: OnceLock<RetryId>,
    wall_clock: fn() -> SystemTime,
}

impl RequestId {
    /// An id to be made, when first shown, from `wall_clock`'s reading then.
    pub(in crate::transport) fn new(wall_clock: fn() -> SystemTime) -> Self {
        Self {
            id: OnceLock::new(),
            wall_clock,
        }
    }

    /// The id, made now if nothing showed it before.
    pub(in crate::transport) fn get(&self) -> RetryId {
        *self.id.get_or_init(|| RetryId::new((self.wall_clock)()))
    }

    /// Whether the id was made (tests).
    #[cfg(test)]
    pub(in crate::transport) fn is_made(&self) -> bool {
        self.id.get().is_some()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.get(), f)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at_1000_s() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1000)
    }

    #[test]
    fn the_id_is_made_once_when_first_shown_and_stays_the_same() {
        let id = RequestId::new(at_1000_s);
        assert!(!id.is_made());
        let first = id.to_string();
        assert!(id.is_made());
        assert_eq!(id.to_string(), first);
        assert_eq!(id.get().to_string(), first);
        // UUID v7: the first 48 bits are the Unix milliseconds of the reading.
        assert!(first.starts_with("0000000f-4240-7"), "{first}");
    }
}
