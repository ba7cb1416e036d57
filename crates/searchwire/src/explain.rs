//! What the `searchwire` CLI explains, and nothing the client needs: the table of defaults
//! (each default once, with why; `docs/configuration.md` is generated from it), the
//! resurrection schedule as a table, and the duration syntax of flags and environment
//! variables. The client's own API is at the crate root.

pub use crate::clock::duration::{format_duration, parse_duration, ParseDurationError};
pub use crate::defaults::*;
pub use crate::policy::schedule::{
    compute, health_refresh_interval, timeout_with_jitter, ScheduleRow, MAX_RESURRECT_TIMEOUT,
};
