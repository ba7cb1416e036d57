//! Exit codes: the contract scripts rely on.

use searchwire::ErrorKind;

/// Every request succeeded (2xx; the client also returns 3xx as success).
pub const SUCCESS: u8 = 0;
/// The final answer was an HTTP error response (`ErrorKind::Status` or `Throttled`).
pub const HTTP_ERROR: u8 = 1;
/// Usage or configuration error (clap errors too, via clap's own exit code 2).
pub const USAGE: u8 = 2;
/// The request timed out: its deadline expired, or an attempt timed out on a node that is
/// alive (the request is slow; give it a longer `--attempt-timeout`).
pub const DEADLINE: u8 = 3;
/// No node could be reached, the connection to the node broke mid-exchange, or the circuit
/// breaker refused the request without trying.
pub const NO_NODE: u8 = 4;
/// A node rejected the credentials (401) or denied permission (403).
pub const AUTH: u8 = 5;
/// `ingest` / `queue deliver` completed, nothing was lost or refused, but messages are left
/// durably queued, not yet in the cluster (`"left"` in the summary): run `searchwire queue
/// deliver` (or a relay) once the cluster is back. Distinct from 0, so a script can tell
/// "all in the cluster" from "all safe, some still queued".
pub const QUEUED: u8 = 6;
/// The adaptive concurrency limit (`--adaptive-concurrency`) refused a request: it was not
/// sent, the cluster is at its capacity. Send less, or later.
pub const LIMITED: u8 = 7;

/// The exit code of a failed request.
pub fn for_error(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Status | ErrorKind::Throttled => HTTP_ERROR,
        ErrorKind::Config | ErrorKind::InvalidRequest => USAGE,
        ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimeout => DEADLINE,
        ErrorKind::NoNodeReachable | ErrorKind::ConnectionLost | ErrorKind::CircuitOpen => NO_NODE,
        ErrorKind::Auth => AUTH,
        ErrorKind::ConcurrencyLimited => LIMITED,
        // `ErrorKind` is non-exhaustive: a kind added later is a failure, never success.
        _ => HTTP_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_codes() {
        assert_eq!(for_error(ErrorKind::Status), 1);
        assert_eq!(for_error(ErrorKind::Throttled), 1);
        assert_eq!(for_error(ErrorKind::Config), 2);
        assert_eq!(for_error(ErrorKind::InvalidRequest), 2);
        assert_eq!(for_error(ErrorKind::DeadlineExceeded), 3);
        assert_eq!(for_error(ErrorKind::AttemptTimeout), 3);
        assert_eq!(for_error(ErrorKind::NoNodeReachable), 4);
        assert_eq!(for_error(ErrorKind::Auth), 5);
        assert_eq!(for_error(ErrorKind::ConcurrencyLimited), 7);
    }
}
