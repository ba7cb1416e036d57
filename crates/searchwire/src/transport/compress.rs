//! Request compression (`ClientBuilder::compress_requests`): a body over the threshold is
//! gzipped once, in `Client::send`, before the first attempt. The request then carries the
//! compressed bytes and `Content-Encoding: gzip`, so every retry sends the very same
//! reference-counted bytes (nothing is compressed twice) and the SigV4 connector, the last
//! step before the wire, hashes and signs what is sent.

use bytes::Bytes;
use http::header::CONTENT_ENCODING;
use http::HeaderValue;

use crate::defaults::GZIP_LEVEL;
use crate::http::gzip::{gzip, BLOCKING_FROM};
use crate::message::request::Request;

/// Whether `request`'s body is to be compressed: at least `min` bytes (and not empty), and
/// the caller has not encoded it already.
pub(crate) fn wants(request: &Request, min: usize) -> bool {
    request
        .body
        .as_ref()
        .is_some_and(|b| !b.is_empty() && b.len() >= min)
        && !request.headers.contains_key(CONTENT_ENCODING)
}

/// Gzips `request`'s body (on a blocking thread from [`BLOCKING_FROM`] bytes). A body gzip
/// does not make smaller (already compressed data) is sent as it was.
pub(crate) async fn compress(request: &mut Request) {
    let Some(body) = request.body.take() else {
        return;
    };
    let gz = if body.len() >= BLOCKING_FROM {
        let input = body.clone();
        tokio::task::spawn_blocking(move || gzip(&input, GZIP_LEVEL))
            .await
            .ok()
    } else {
        Some(gzip(&body, GZIP_LEVEL))
    };
    match gz {
        Some(gz) if gz.len() < body.len() => {
            request.body = Some(Bytes::from(gz));
            request
                .headers
                .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        _ => request.body = Some(body),
    }
}
