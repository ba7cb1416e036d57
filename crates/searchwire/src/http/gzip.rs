//! Gzip, both ways, bounded: request bodies compressed once before the first attempt, and
//! answers inflated within `max_response_bytes` (a gzip bomb stops at the limit, it never
//! costs more memory than the limit). Public as [`crate::compression`] so the relay, which
//! decodes its clients' gzip and deflate bodies, inflates with the same bounded reader.

use std::io::{Read, Write};

/// Bodies (compressed or not) at least this large are compressed or inflated on a blocking
/// thread, so the async workers keep serving other requests meanwhile. 64 KiB takes well
/// under a millisecond either way; a 5 MiB bulk body takes tens of milliseconds at level 1.
pub const BLOCKING_FROM: usize = 64 * 1024;

/// Marks an HTTP request whose gzip answer the connector inflates (the transport asked for
/// it with `Accept-Encoding: gzip`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InflateAnswer;

/// Compresses `input` as one gzip member at `level` (0–9; 1 is fastest).
pub fn gzip(input: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(input.len() / 4 + 64),
        flate2::Compression::new(level.min(9)),
    );
    // Writing into a `Vec` cannot fail.
    let _ = e.write_all(input);
    e.finish().unwrap_or_default()
}

/// Reads `r` to its end into a buffer that never holds more than `limit` bytes (it grows by
/// doubling, capped at the limit): `Ok(None)` when there is more than `limit`.
pub fn read_bounded(mut r: impl Read, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut out: Vec<u8> = Vec::with_capacity(limit.min(BLOCKING_FROM));
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Ok(Some(out)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if out.len() + n > limit {
            return Ok(None);
        }
        if out.capacity() - out.len() < n {
            let want = (out.capacity() * 2).max(out.len() + n).min(limit);
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Inflates gzip data (several members allowed, as `cat a.gz b.gz` makes) within `limit`
/// bytes of output: `Ok(None)` when the inflated data is larger.
pub fn gunzip_bounded(input: &[u8], limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    read_bounded(flate2::read::MultiGzDecoder::new(input), limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gzipped_body_inflates_to_itself() {
        let data = b"{\"index\":{}}\n{\"message\":\"GET /index.html 200\"}\n".repeat(200);
        for level in [0, 1, 6, 9] {
            let gz = gzip(&data, level);
            assert_eq!(gunzip_bounded(&gz, data.len()).unwrap().unwrap(), data);
        }
        assert!(gzip(&data, 1).len() * 10 < data.len());
    }

    #[test]
    fn inflating_stops_at_the_limit_and_bad_data_is_an_error() {
        let bomb = gzip(&vec![0u8; 10 << 20], 9);
        assert!(bomb.len() < 20 << 10, "{}", bomb.len());
        assert_eq!(gunzip_bounded(&bomb, 1 << 20).unwrap(), None);
        // Exactly at the limit is fine.
        assert_eq!(
            gunzip_bounded(&gzip(&[1u8; 100], 1), 100)
                .unwrap()
                .map(|v| v.len()),
            Some(100)
        );
        assert!(gunzip_bounded(b"{\"took\":1}", 100).is_err());
    }
}
