//! A latency model for `_bulk`: a request of `b` body bytes is answered after
//! `fixed + per_mib × b + per_mib_squared × b²` (b in MiB), with the answer of the handler
//! it wraps (usually [`FakeBulk`](crate::FakeBulk)'s, applied when the request arrives). The
//! fixed part is the round trip and the fan-out to shards; the linear part the indexing; the
//! square the heap pressure and merges of large requests, which gives the bytes per second
//! of a request slot a maximum at `sqrt(fixed / per_mib_squared)` MiB. The delay is a
//! `tokio::time::sleep`, so paused-time tests run it in no real time.

use std::time::Duration;

use crate::behavior::{Behavior, Handler};

/// See the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyModel {
    /// The cost of any request.
    pub fixed: Duration,
    /// The cost per MiB of body.
    pub per_mib: Duration,
    /// The cost per MiB², the superlinear part.
    pub per_mib_squared: Duration,
}

impl LatencyModel {
    /// The latency of a request of `bytes` body bytes.
    pub fn latency(&self, bytes: usize) -> Duration {
        let mib = bytes as f64 / (1024.0 * 1024.0);
        self.fixed + self.per_mib.mul_f64(mib) + self.per_mib_squared.mul_f64(mib * mib)
    }

    /// The body size with the most bytes per second per request slot.
    pub fn best_bytes(&self) -> usize {
        let mib = (self.fixed.as_secs_f64() / self.per_mib_squared.as_secs_f64()).sqrt();
        (mib * 1024.0 * 1024.0) as usize
    }

    /// `inner`'s behavior for each request, delayed by the model's latency for its body.
    /// `inner` is usually `FakeBulk::behavior()`: a handler.
    pub fn wrap(self, inner: Behavior) -> Behavior {
        Behavior::Handler(Handler::new(move |req| {
            let answer = match &inner {
                Behavior::Handler(h) => h.call(req),
                other => other.clone(),
            };
            answer.delayed(self.latency(req.body.len()))
        }))
    }
}
