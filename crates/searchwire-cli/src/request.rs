//! `searchwire request`: turn the flags into one `searchwire::Client` and one `Request`
//! template, then send it once or run a load through the same client.

use std::io::Read;
use std::path::Path;

use searchwire::{Client, Request};

use crate::args::RequestArgs;
use crate::connect::{connect, start, Auth};
use crate::exit;
use crate::load::{self, LoadSpec, Stop};
use crate::output;

/// Runs the subcommand; returns the exit code.
pub async fn run(args: RequestArgs, auth: Auth) -> u8 {
    let client = match start(args.metrics_addr, || build_client(&args, auth)) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let template = match build_request(&args) {
        Ok(r) => r,
        Err(e) => {
            output::error_message(&e);
            return exit::USAGE;
        }
    };
    let stop = match (args.repeat, args.for_) {
        (Some(n), _) => Some(Stop::Count(n)),
        (None, Some(d)) => Some(Stop::For(d)),
        (None, None) => None,
    };
    match stop {
        Some(stop) => {
            let spec = LoadSpec {
                stop,
                concurrency: args.concurrency.unwrap_or(1),
                rate: args.rate,
                trace: args.trace_attempts,
            };
            let (summary, code) = load::run(client, template, spec).await;
            output::stdout(output::to_json_line(&summary).as_bytes());
            if !args.json {
                output::stderr(&load::human(&summary));
            }
            code
        }
        None => single(&client, template, args.trace_attempts, args.json).await,
    }
}

/// One request: the body (or `--json` envelope) on stdout; on failure the message on stderr
/// and the final response's body, if any, on stdout.
async fn single(client: &Client, request: Request, trace: bool, json: bool) -> u8 {
    match client.send(request).await {
        Ok(resp) => {
            if trace {
                output::stderr(&output::trace_lines(1, resp.attempts()));
            }
            if json {
                output::envelope(&resp, resp.attempts().len(), None);
            } else {
                output::stdout(&output::body_bytes(&resp));
            }
            exit::SUCCESS
        }
        Err(e) => {
            if trace {
                output::stderr(&output::trace_lines(1, e.attempts()));
            }
            output::error_message(&e);
            if let Some(resp) = e.response() {
                if json {
                    output::envelope(resp, e.attempts().len(), Some(&e));
                } else {
                    output::stdout(&output::body_bytes(resp));
                }
            }
            exit::for_error(e.kind())
        }
    }
}

/// The client for every request of this run. Errors are configuration errors (exit 2).
fn build_client(a: &RequestArgs, auth: Auth) -> Result<Client, String> {
    let mut b = a.compress.apply(connect(&a.conn, auth)?);
    // `--timeout` is the deprecated old name of `--attempt-timeout` (clap refuses both).
    if let Some(t) = a.attempt_timeout.or(a.timeout) {
        // An explicit flag beats the SEARCHWIRE_ATTEMPT_TIMEOUT environment override.
        b = b.read_environment(false);
        b = if t.is_zero() {
            b.no_attempt_timeout()
        } else {
            b.attempt_timeout(t)
        };
    }
    if let Some(n) = a.max_retries {
        b = b.max_retries(n);
    }
    if let Some(list) = &a.retry_on_status {
        b = b.retry_on_status(list.0.iter().copied());
    }
    if let Some(backoff) = &a.backoff {
        b = b.backoff(backoff.clone());
    }
    if a.no_retry_budget {
        b = b.no_retry_budget();
    }
    if a.no_adaptive_jitter {
        b = b.no_adaptive_jitter();
    }
    if a.no_circuit_breaker {
        b = b.no_circuit_breaker();
    }
    if a.class_backoff {
        b = b.class_backoff(searchwire::ClassBackoff::reference());
    }
    if let Some(delay) = a.hedge {
        b = b.hedging(searchwire::Hedging::after(delay));
    }
    if a.adaptive_concurrency {
        b = b.adaptive_concurrency(searchwire::AdaptiveConcurrency::default());
    }
    b.build().map_err(|e| e.to_string())
}

/// The request sent (cloned) for every repetition.
fn build_request(a: &RequestArgs) -> Result<Request, String> {
    let mut r = Request::new(a.method.clone(), a.path.clone());
    if let Some(data) = &a.data {
        let body = read_data(data)?;
        r = if is_ndjson_endpoint(&a.path) {
            r.body_with_type(body, "application/x-ndjson")
        } else {
            r.body(body)
        };
    }
    if let Some(d) = a.deadline {
        r = r.timeout(d);
    }
    if a.idempotent {
        r = r.idempotent(true);
    }
    Ok(r)
}

/// `--data`: `@-` reads stdin, `@FILE` reads a file, anything else is the body itself.
fn read_data(data: &str) -> Result<Vec<u8>, String> {
    match data.strip_prefix('@') {
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read --data from stdin: {e}"))?;
            Ok(buf)
        }
        Some(file) => std::fs::read(Path::new(file))
            .map_err(|e| format!("cannot read --data file {file}: {e}")),
        None => Ok(data.as_bytes().to_vec()),
    }
}

/// Endpoints whose body is newline-delimited JSON.
fn is_ndjson_endpoint(path: &str) -> bool {
    let p = path.split('?').next().unwrap_or("").trim_end_matches('/');
    p.ends_with("_bulk") || p.ends_with("_msearch") || p.ends_with("_msearch/template")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndjson_endpoints() {
        assert!(is_ndjson_endpoint("/_bulk"));
        assert!(is_ndjson_endpoint("/logs/_bulk?refresh=true"));
        assert!(is_ndjson_endpoint("/_msearch/"));
        assert!(is_ndjson_endpoint("/i/_msearch/template"));
        assert!(!is_ndjson_endpoint("/logs/_search"));
        assert!(!is_ndjson_endpoint("/_bulk_things/_doc"));
    }

    #[test]
    fn literal_data_is_the_body() {
        assert_eq!(read_data("{\"a\":1}"), Ok(b"{\"a\":1}".to_vec()));
        let e = read_data("@/nonexistent/searchwire-test")
            .err()
            .unwrap_or_default();
        assert!(e.contains("/nonexistent/searchwire-test"), "{e}");
    }
}
