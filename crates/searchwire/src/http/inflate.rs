//! A gzip answer the transport asked for (`Accept-Encoding: gzip`, request compression on),
//! inflated within `max_response_bytes`: the limit bounds the *inflated* body, so an answer
//! that inflates past it is `TooLarge` (a gzip bomb costs its compressed bytes plus at most
//! the limit), and data that is not gzip is a broken exchange (`Reset`: the node may have
//! processed the request).

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use http::HeaderMap;

use crate::classify::OutcomeKind;
use crate::http::gzip::{gunzip_bounded, BLOCKING_FROM};
use crate::http::send_error::SendError;

/// An answer's body inflated when it is gzip-encoded (its `Content-Encoding` and
/// `Content-Length` removed from `headers`: they described the compressed body); otherwise
/// as it came.
pub(crate) async fn answer(
    headers: &mut HeaderMap,
    body: Bytes,
    max: usize,
) -> Result<Bytes, SendError> {
    if !is_gzip(headers) {
        return Ok(body);
    }
    let inflated = if body.len() >= BLOCKING_FROM {
        tokio::task::spawn_blocking(move || gunzip_bounded(&body, max))
            .await
            .map_err(|e| SendError {
                kind: OutcomeKind::Reset,
                source: format!("inflating the gzip response body failed: {e}").into(),
            })?
    } else {
        gunzip_bounded(&body, max)
    };
    match inflated {
        Ok(Some(v)) => {
            headers.remove(CONTENT_ENCODING);
            headers.remove(CONTENT_LENGTH);
            Ok(Bytes::from(v))
        }
        Ok(None) => Err(SendError {
            kind: OutcomeKind::TooLarge,
            source: format!(
                "the gzip response body inflates to more than the limit of {max} bytes \
                 (max_response_bytes)"
            )
            .into(),
        }),
        Err(e) => Err(SendError {
            kind: OutcomeKind::Reset,
            source: format!(
                "the response says Content-Encoding: gzip, but its body is not valid gzip: {e}"
            )
            .into(),
        }),
    }
}

/// Whether the answer's `Content-Encoding` is gzip (`x-gzip` too), and only that.
fn is_gzip(headers: &HeaderMap) -> bool {
    let mut codings = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    matches!(
        (codings.next(), codings.next()),
        (Some(c), None) if c.eq_ignore_ascii_case("gzip") || c.eq_ignore_ascii_case("x-gzip")
    )
}
