//! Request bodies in, answer bodies out: every route reads its body through [`read`], and
//! every answer leaves through [`compress`].
//!
//! - **In.** The body is read within the body read timeout (408) and the relay's
//!   `max_body_bytes` (413; a declared `Content-Length` over it is refused before a byte is
//!   read), then decoded by its `Content-Encoding`: `gzip` (`x-gzip`, several members
//!   allowed), `deflate` (zlib-wrapped as RFC 9110 says, or raw, as some clients send it;
//!   OpenSearch takes both) and `identity`, several in the order applied. The *decoded* size
//!   is bounded by the same limit, checked while inflating: a gzip bomb stops at the limit
//!   and is answered 413, so a request costs at most its compressed bytes plus the limit.
//!   Any other encoding is a 415 that names it (never a parse error of compressed bytes).
//! - **Out.** With `Accept-Encoding: gzip` the answer is gzip-compressed (level 3, as
//!   OpenSearch's `http.compression_level` default), unless it is empty or already encoded
//!   (a pass-through answer the cluster compressed itself is passed on as it came).

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use searchwire::compression::{read_bounded, BLOCKING_FROM};

use crate::accept::Answer;
use crate::state::Shared;

/// A content coding the relay decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    Gzip,
    Deflate,
}

/// The request's head and its decoded body, or the answer that refuses it.
pub(crate) async fn read(
    shared: &Shared,
    req: Request<Incoming>,
) -> Result<(Parts, Bytes), Answer> {
    let limit = shared.config.max_body_bytes;
    let codings = codings(req.headers()).map_err(|a| *a)?;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit, false));
    }
    let (parts, body) = req.into_parts();
    let body = Limited::new(body, limit);
    let timeout = shared.config.body_read_timeout;
    let mut bytes = match tokio::time::timeout(timeout, body.collect()).await {
        Err(_) => {
            return Err(Answer::error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                &format!(
                    "the request body did not arrive within {}s",
                    timeout.as_secs()
                ),
            ))
        }
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Err(too_large(limit, false));
            }
            return Err(Answer::error(
                StatusCode::BAD_REQUEST,
                "parse_exception",
                &format!("cannot read the request body: {e}"),
            ));
        }
        Ok(Ok(b)) => b.to_bytes(),
    };
    // Applied in the order listed: undone in reverse.
    for coding in codings.into_iter().rev() {
        bytes = if bytes.len() >= BLOCKING_FROM {
            let input = bytes;
            tokio::task::spawn_blocking(move || decode(coding, &input, limit))
                .await
                .map_err(|e| {
                    Answer::error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "exception",
                        &format!("decompressing the request body failed: {e}"),
                    )
                })?
                .map_err(|a| *a)?
        } else {
            decode(coding, &bytes, limit).map_err(|a| *a)?
        };
    }
    Ok((parts, bytes))
}

/// The codings of `Content-Encoding`, in the order applied; a 415 naming one the relay does
/// not decode.
fn codings(headers: &HeaderMap) -> Result<Vec<Coding>, Box<Answer>> {
    let mut out = Vec::new();
    for v in headers.get_all(header::CONTENT_ENCODING) {
        let text = v.to_str().unwrap_or("(not ASCII)");
        for c in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            match c.to_ascii_lowercase().as_str() {
                "gzip" | "x-gzip" => out.push(Coding::Gzip),
                "deflate" => out.push(Coding::Deflate),
                "identity" => {}
                _ => {
                    metrics::counter!("searchwire_relay_requests_total", "result" => "bad_encoding")
                        .increment(1);
                    return Err(Box::new(Answer::error(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "content_encoding_exception",
                        &format!(
                            "Content-Encoding [{c}] is not supported by the searchwire relay; \
                             send the body uncompressed, or compressed with gzip or deflate"
                        ),
                    )));
                }
            }
        }
    }
    Ok(out)
}

/// Inflates `input`, stopping (413) as soon as the output would exceed `limit`.
fn decode(coding: Coding, input: &[u8], limit: usize) -> Result<Bytes, Box<Answer>> {
    let result = match coding {
        Coding::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input), limit),
        // A zlib header: CMF (method 8, deflate) and FLG with (CMF·256 + FLG) % 31 == 0.
        Coding::Deflate
            if input.len() >= 2
                && input[0] & 0x0f == 8
                && (u16::from(input[0]) * 256 + u16::from(input[1])) % 31 == 0 =>
        {
            read_bounded(flate2::read::ZlibDecoder::new(input), limit)
        }
        Coding::Deflate => read_bounded(flate2::read::DeflateDecoder::new(input), limit),
    };
    let name = match coding {
        Coding::Gzip => "gzip",
        Coding::Deflate => "deflate",
    };
    match result {
        Ok(Some(v)) => Ok(Bytes::from(v)),
        Ok(None) => Err(Box::new(too_large(limit, true))),
        Err(e) => {
            metrics::counter!("searchwire_relay_requests_total", "result" => "bad_request")
                .increment(1);
            Err(Box::new(Answer::error(
                StatusCode::BAD_REQUEST,
                "parse_exception",
                &format!(
                    "the request body is not valid {name} data (Content-Encoding: {name}): {e}"
                ),
            )))
        }
    }
}

/// The 413 answer: the body (`inflated`: once decompressed) is over the limit.
pub(crate) fn too_large(limit: usize, inflated: bool) -> Answer {
    metrics::counter!("searchwire_relay_requests_total", "result" => "too_large").increment(1);
    let what = if inflated {
        "the decompressed request body"
    } else {
        "the request body"
    };
    Answer::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "content_too_long_exception",
        &format!("{what} is larger than the relay's limit of {limit} bytes; split it into smaller requests"),
    )
}

/// Whether `Accept-Encoding` takes gzip (`gzip`, `x-gzip` or `*`, with a non-zero q).
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            matches!(name.as_str(), "gzip" | "x-gzip" | "*") && !q_zero
        })
}

/// Compresses `answer` with gzip when the client accepts it (see the module docs).
pub(crate) async fn compress(answer: &mut Answer, accepted: bool) {
    if !accepted || answer.body.is_empty() || answer.headers.contains_key(header::CONTENT_ENCODING)
    {
        return;
    }
    let body = std::mem::take(&mut answer.body);
    let gz = if body.len() >= BLOCKING_FROM {
        let input = body.clone();
        tokio::task::spawn_blocking(move || gzip(&input)).await.ok()
    } else {
        Some(gzip(&body))
    };
    match gz {
        Some(gz) => {
            answer.body = Bytes::from(gz);
            answer
                .headers
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            answer
                .headers
                .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        }
        None => answer.body = body,
    }
}

/// Level 3, as OpenSearch's `http.compression_level` default.
fn gzip(input: &[u8]) -> Vec<u8> {
    searchwire::compression::gzip(input, 3)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gz(data: &[u8]) -> Vec<u8> {
        gzip(data)
    }

    #[test]
    fn gzip_and_both_deflate_forms_are_inflated() {
        let data = b"{\"index\":{}}\n{\"n\":1}\n".repeat(50);
        assert_eq!(decode(Coding::Gzip, &gz(&data), 1 << 20).unwrap(), data);
        // Two gzip members, as `cat a.gz b.gz` makes.
        let mut two = gz(b"ab");
        two.extend(gz(b"cd"));
        assert_eq!(&decode(Coding::Gzip, &two, 100).unwrap()[..], b"abcd");
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&data).unwrap();
        assert_eq!(
            decode(Coding::Deflate, &z.finish().unwrap(), 1 << 20).unwrap(),
            data
        );
        let mut raw =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        raw.write_all(&data).unwrap();
        assert_eq!(
            decode(Coding::Deflate, &raw.finish().unwrap(), 1 << 20).unwrap(),
            data
        );
    }

    #[test]
    fn the_decoded_size_is_bounded_and_bad_data_is_a_400() {
        let bomb = gz(&vec![0u8; 10 << 20]);
        assert!(bomb.len() < 20 << 10, "{}", bomb.len());
        let a = decode(Coding::Gzip, &bomb, 1 << 20).unwrap_err();
        assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(String::from_utf8_lossy(&a.body).contains("decompressed"));
        // Exactly at the limit is fine.
        assert_eq!(
            decode(Coding::Gzip, &gz(&[1u8; 100]), 100).unwrap().len(),
            100
        );
        let a = decode(Coding::Gzip, b"{\"index\":{}}", 100).unwrap_err();
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(String::from_utf8_lossy(&a.body).contains("not valid gzip"));
    }

    #[test]
    fn encodings_are_read_in_order_and_unknown_ones_named() {
        let mut h = HeaderMap::new();
        assert!(codings(&h).unwrap().is_empty());
        h.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static("deflate, GZIP"),
        );
        assert_eq!(codings(&h).unwrap(), [Coding::Deflate, Coding::Gzip]);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        let a = codings(&h).unwrap_err();
        assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(String::from_utf8_lossy(&a.body).contains("[br]"));
    }

    #[test]
    fn accept_encoding_is_read_with_q_values() {
        let h = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(v));
            h
        };
        assert!(accepts_gzip(&h("gzip")));
        assert!(accepts_gzip(&h("deflate, gzip;q=0.5")));
        assert!(accepts_gzip(&h("*")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        assert!(!accepts_gzip(&h("br, deflate")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
