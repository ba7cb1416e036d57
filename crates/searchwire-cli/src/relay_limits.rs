//! The relay's limits under overload (`--max-queue-bytes`, `--min-free-disk-bytes`): parsing
//! sizes and choosing the defaults of the backend in use
//! ([`searchwire_relay::admission::AdmissionConfig`]).

use std::path::PathBuf;

use searchwire_relay::admission::AdmissionConfig;

/// A size in bytes: `1048576`, `512KiB`, `64MiB`, `10GiB`, `1TiB` (or `KB`/`MB`/`GB`/`TB`,
/// powers of 1000).
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        format!(
            "{}: give a size in bytes such as 1073741824, 512MiB or 10GiB",
            searchwire::echo(s)
        )
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "{}: unknown unit {}; use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)",
                searchwire::echo(s),
                searchwire::echo(other)
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{}: too large", searchwire::echo(s)))
}

/// The limits of this relay: an embedded queue (in `queue_dir`) gets the defaults from its
/// disk; Redis (`redis`) only what is given.
pub(crate) fn limits(
    redis: bool,
    queue_dir: Option<PathBuf>,
    max_queue_bytes: Option<u64>,
    min_free_disk_bytes: Option<u64>,
) -> Result<AdmissionConfig, String> {
    if redis {
        if min_free_disk_bytes.is_some() {
            return Err(
                "--min-free-disk-bytes is for the embedded queue (--queue-dir); a Redis queue is \
                 bounded by --max-queue-bytes and Redis's maxmemory"
                    .to_owned(),
            );
        }
        return Ok(AdmissionConfig::redis(max_queue_bytes));
    }
    let dir = queue_dir.unwrap_or_else(|| PathBuf::from("relay-queue"));
    AdmissionConfig::embedded(dir, max_queue_bytes, min_free_disk_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("8MiB"), Ok(8 << 20));
        assert_eq!(parse_bytes("10 GiB"), Ok(10 << 30));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert!(parse_bytes("ten").unwrap_err().contains("512MiB"));
        assert!(parse_bytes("5 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_bytes("99999999999TiB")
            .unwrap_err()
            .contains("too large"));
    }
}
