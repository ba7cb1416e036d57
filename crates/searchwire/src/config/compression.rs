//! The request-compression setting (`compress_requests`); what it does is in
//! `transport/compress.rs` (the body) and `http/connector.rs` (the answer).

use crate::config::ClientBuilder;

impl ClientBuilder {
    /// Gzips every request body of at least `min_bytes` bytes (`Content-Encoding: gzip`,
    /// compressed once before the first attempt: retries send the same bytes, and SigV4
    /// signs them), and asks for gzip answers (`Accept-Encoding: gzip`), inflated within
    /// [`max_response_bytes`](Self::max_response_bytes) — an answer that inflates past it
    /// fails as [`ErrorKind::ResponseTooLarge`](crate::ErrorKind::ResponseTooLarge), whatever its
    /// compressed size. Off by default. A request that sets its own `Content-Encoding` is
    /// sent as it is; one that sets its own `Accept-Encoding` gets its answer as the node
    /// sent it. [`COMPRESS_MIN_BYTES`](crate::explain::COMPRESS_MIN_BYTES) is the
    /// threshold `searchwire --compress` uses; 0 compresses every body.
    pub fn compress_requests(mut self, min_bytes: usize) -> ClientBuilder {
        self.compress_min_bytes = Some(min_bytes);
        self
    }

    /// Switches request compression off (the default).
    pub fn no_request_compression(mut self) -> ClientBuilder {
        self.compress_min_bytes = None;
        self
    }
}
