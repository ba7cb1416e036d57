//! Time: durations as people write them, and (see `transport`) the one wall-clock read.

pub mod duration;

/// The wall clock. The one place that reads system time (`Retry-After` HTTP-dates need it);
/// every other timing decision uses tokio's clock, which tests pause.
#[allow(clippy::disallowed_methods)]
pub(crate) fn system_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}
