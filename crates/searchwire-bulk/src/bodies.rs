//! Request-body buffers, reused once the request that carried one is answered.
//!
//! A bulk request body is a few MB (`batch_bytes`). Allocated fresh for each request, it is
//! served by `mmap` or from a heap top the allocator trims again after the free, so every
//! request faulted its pages in anew: ~500 page faults per 2 MB body, 70 % of `searchwire
//! ingest`'s page faults at ~2 KB documents (measured with `perf record`).
//! The driver keeps a handle on each body it sends; when the request is answered and the
//! transport has let go of the body, the buffer comes back here and the next request is
//! written into pages that are already mapped.
//!
//! Bounded: spare buffers and bodies in flight together are at most `max` (the driver's
//! request limit), as many as the requests in flight alone could hold, and the driver empties
//! the pool whenever it has nothing in flight and nothing buffered, so an idle indexer holds
//! no body memory.

use bytes::{Bytes, BytesMut};

/// Spare request-body buffers.
pub(crate) struct Bodies {
    spare: Vec<BytesMut>,
    max: usize,
}

impl Bodies {
    /// A pool keeping at most `max` spare buffers.
    pub(crate) fn new(max: usize) -> Bodies {
        Bodies {
            spare: Vec::new(),
            max,
        }
    }

    /// An empty buffer with room for `capacity` bytes: a spare one when there is one.
    pub(crate) fn take(&mut self, capacity: usize) -> BytesMut {
        match self.spare.pop() {
            Some(mut b) => {
                // The buffer is unique and empty: `reserve` reuses its allocation when it
                // is large enough (and grows it otherwise).
                b.reserve(capacity);
                b
            }
            None => BytesMut::with_capacity(capacity),
        }
    }

    /// Takes back a body that was sent, with `in_flight` other requests still out. Kept only
    /// if nothing else holds it any more (the transport dropped its request) and spare and
    /// in-flight bodies stay within `max`; otherwise it is just dropped.
    pub(crate) fn give_back(&mut self, body: Bytes, in_flight: usize) {
        if self.spare.len() + in_flight >= self.max {
            return;
        }
        if let Ok(mut b) = body.try_into_mut() {
            b.clear();
            self.spare.push(b);
        }
    }

    /// Frees every spare buffer.
    pub(crate) fn clear(&mut self) {
        self.spare.clear();
    }

    /// How many spare buffers are held.
    #[cfg(test)]
    pub(crate) fn spare(&self) -> usize {
        self.spare.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(pool: &mut Bodies, data: &[u8]) -> Bytes {
        let mut b = pool.take(data.len());
        b.extend_from_slice(data);
        b.freeze()
    }

    #[test]
    fn an_answered_body_is_written_into_again() {
        let mut pool = Bodies::new(4);
        let body = sent(&mut pool, &[7u8; 100_000]);
        let ptr = body.as_ptr();
        let transport = body.clone();
        drop(transport);
        pool.give_back(body, 0);
        assert_eq!(pool.spare(), 1);
        let again = pool.take(50_000);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), ptr, "the same allocation is reused");
        assert!(again.capacity() >= 100_000);
        assert_eq!(pool.spare(), 0);
    }

    #[test]
    fn a_body_still_held_elsewhere_is_not_reused() {
        let mut pool = Bodies::new(4);
        let body = sent(&mut pool, b"{\"create\":{}}\n{}\n");
        let held = body.clone();
        pool.give_back(body, 0);
        assert_eq!(pool.spare(), 0);
        // The holder's bytes are untouched.
        assert_eq!(&held[..], b"{\"create\":{}}\n{}\n");
    }

    #[test]
    fn the_pool_keeps_at_most_max_and_clear_empties_it() {
        let mut pool = Bodies::new(2);
        for _ in 0..5 {
            let b = Bytes::from(vec![1u8; 1000]);
            pool.give_back(b, 0);
        }
        assert_eq!(pool.spare(), 2);
        pool.clear();
        // With a request still in flight, one spare at most.
        for _ in 0..3 {
            pool.give_back(Bytes::from(vec![1u8; 1000]), 1);
        }
        assert_eq!(pool.spare(), 1);
        pool.clear();
        assert_eq!(pool.spare(), 0);
        // A larger request than any spare buffer still gets its room.
        pool.give_back(Bytes::from(vec![1u8; 10]), 0);
        assert!(pool.take(4096).capacity() >= 4096);
    }
}
