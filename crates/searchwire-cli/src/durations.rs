//! The value parsers of duration flags, shared by every subcommand.

use std::time::Duration;

use searchwire::explain::parse_duration;

/// A duration such as `500ms`, `5s`, `2m`; zero allowed.
pub(crate) fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// A duration greater than zero.
pub(crate) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration_arg(s)?;
    if d.is_zero() {
        return Err(format!(
            "{} is zero; give a positive duration such as 5s",
            searchwire::echo(s)
        ));
    }
    Ok(d)
}
