//! The OTLP/HTTP export (cargo feature `otlp`) end to end: a real OTLP/HTTP receiver runs
//! in-process (a hyper server decoding each `POST /v1/traces` body as an
//! `ExportTraceServiceRequest` with the `opentelemetry-proto` crate), and the spans of a
//! request that needed a retry must arrive with their retry context (retry id, cluster name,
//! attempt number, target index).
//!
//! - `the_cli_exports_a_requests_spans`: the `searchwire` binary with `--otlp-endpoint`.
//! - `spans_carry_the_cluster_name_once_known`: the CLI's own exporting layer
//!   (`src/otlp.rs`) in-process, around a client that has health-checked the cluster first,
//!   so the cluster's name is known (a one-shot CLI run sends no health check).
#![cfg(feature = "otlp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../src/otlp.rs"]
#[allow(dead_code)]
mod otlp;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use searchwire_fake::{Behavior, FakeCluster, Match, CLUSTER_NAME};

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

/// One exported span: its name, ids and attributes (values rendered as text).
#[derive(Clone, Debug)]
struct Span {
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    attrs: HashMap<String, String>,
}

impl Span {
    fn attr(&self, k: &str) -> &str {
        self.attrs
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("span {} has no attribute {k}: {:?}", self.name, self.attrs))
    }
}

/// An OTLP/HTTP receiver (protobuf encoding) on a loopback port; keeps every span and the
/// `service.name` of every resource.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
    rejected: Arc<Mutex<Vec<String>>>,
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

impl Receiver {
    fn accept(&self, path: &str, content_type: Option<&str>, body: &[u8]) -> Result<(), String> {
        if path != "/v1/traces" {
            return Err(format!("POST to {path}, not /v1/traces"));
        }
        if content_type != Some("application/x-protobuf") {
            return Err(format!("content-type {content_type:?}"));
        }
        let req = ExportTraceServiceRequest::decode(body).map_err(|e| e.to_string())?;
        for rs in req.resource_spans {
            if let Some(r) = &rs.resource {
                for kv in &r.attributes {
                    if kv.key == "service.name" {
                        self.services.lock().unwrap().push(text(&kv.value));
                    }
                }
            }
            for ss in rs.scope_spans {
                for s in ss.spans {
                    self.spans.lock().unwrap().push(Span {
                        name: s.name,
                        trace_id: s.trace_id,
                        span_id: s.span_id,
                        parent: s.parent_span_id,
                        attrs: s
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), text(&kv.value)))
                            .collect(),
                    });
                }
            }
        }
        Ok(())
    }

    async fn start(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let me = me.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let me = me.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let ct = req
                                .headers()
                                .get("content-type")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string);
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let status = match me.accept(&path, ct.as_deref(), &body) {
                                Ok(()) => 200,
                                Err(e) => {
                                    me.rejected.lock().unwrap().push(e);
                                    400
                                }
                            };
                            // An empty ExportTraceServiceResponse encodes to no bytes.
                            let resp = hyper::Response::builder()
                                .status(status)
                                .header("content-type", "application/x-protobuf")
                                .body(Full::new(Bytes::new()))
                                .unwrap();
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    }

    fn spans(&self, name: &str) -> Vec<Span> {
        assert!(
            self.rejected.lock().unwrap().is_empty(),
            "the receiver rejected exports: {:?}",
            self.rejected.lock().unwrap()
        );
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }
}

fn uuid_v7(s: &str) {
    let u = uuid::Uuid::parse_str(s).unwrap_or_else(|e| panic!("retry_id {s:?}: {e}"));
    assert_eq!(u.get_version_num(), 7, "retry_id {s}");
}

/// The spans of one request whose first attempt was answered 503 and whose second
/// succeeded: one request span, two attempt spans in the same trace under it.
fn check_request_spans(r: &Receiver) -> Span {
    // OpenTelemetry's database conventions: the span is named
    // `{db.operation.name} {db.collection.name}`.
    let req = r.spans("search logs");
    assert_eq!(req.len(), 1, "{:?}", r.spans.lock().unwrap());
    let req = req.into_iter().next().unwrap();
    uuid_v7(req.attr("retry_id"));
    assert_eq!(req.attr("db.system.name"), "opensearch");
    assert_eq!(req.attr("db.operation.name"), "search");
    assert_eq!(req.attr("db.collection.name"), "logs");
    assert_eq!(req.attr("db.response.status_code"), "200");
    assert_eq!(req.attr("http.request.resend_count"), "1");
    assert_eq!(req.attr("server.address"), "127.0.0.1");
    assert!(req.attr("server.port").parse::<u16>().is_ok());
    assert_eq!(req.attrs.get("error.type"), None, "it succeeded");
    assert_eq!(req.attr("http.request.method"), "GET");
    assert_eq!(req.attr("url.path"), "/logs/_search");
    assert_eq!(req.attr("retries"), "1");
    assert_eq!(req.attr("http.response.status_code"), "200");
    let mut attempts: Vec<Span> = r
        .spans("searchwire.attempt")
        .into_iter()
        .filter(|a| a.attrs.get("retry_id") == req.attrs.get("retry_id"))
        .collect();
    attempts.sort_by_key(|a| a.attr("attempt").to_string());
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.trace_id, req.trace_id, "one trace per request");
        assert_eq!(
            a.parent, req.span_id,
            "attempts are children of the request"
        );
        assert_eq!(a.attr("retry_id"), req.attr("retry_id"));
        assert_eq!(a.attr("attempt"), (i + 1).to_string());
        assert_eq!(a.attr("server.address"), "127.0.0.1");
    }
    assert_eq!(attempts[0].attr("http.response.status_code"), "503");
    assert_eq!(attempts[0].attr("outcome"), "gateway");
    assert_eq!(attempts[1].attr("http.request.resend_count"), "1");
    assert_eq!(attempts[1].attr("outcome"), "ok");
    assert_eq!(
        *r.services.lock().unwrap().first().unwrap(),
        "searchwire",
        "service.name"
    );
    req
}

/// One node that answers the first search with 503 and the retry with 200.
async fn one_503_then_ok() -> FakeCluster {
    let cluster = FakeCluster::start(1).await.unwrap();
    cluster
        .node(0)
        .once(Match::Path("/logs/_search".into()), Behavior::status(503));
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_exports_a_requests_spans() {
    let receiver = Receiver::default();
    let addr = receiver.start().await;
    let cluster = one_503_then_ok().await;
    let endpoint = format!("http://{addr}/v1/traces");
    let urls = cluster.urls().join(",");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(BIN)
            .args([
                "--otlp-endpoint",
                &endpoint,
                "request",
                "GET",
                "/logs/_search",
            ])
            .args(["--url", &urls])
            .env_remove("RUST_LOG")
            .env_remove("SEARCHWIRE_ATTEMPT_TIMEOUT")
            .env_remove("SEARCHWIRE_REQUEST_TIMEOUT")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the CLI finished within 60 s")
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The CLI flushes its spans before exiting: they are here once it has exited.
    let req = check_request_spans(&receiver);
    // A one-shot CLI run sends no health check, so the cluster's name is not known.
    assert_eq!(req.attrs.get("db.namespace"), None);
}

#[test]
fn spans_carry_the_cluster_name_once_known() {
    use tracing_subscriber::layer::SubscriberExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::default();
    let addr = rt.block_on(receiver.start());
    let cluster = rt.block_on(one_503_then_ok());
    cluster
        .node(0)
        .on(Match::Path("/missing/_doc/1".into()), Behavior::status(404));
    // The exporter (a blocking HTTP client) is built and shut down outside the runtime.
    let (layer, provider) =
        otlp::layer::<tracing_subscriber::Registry>(&format!("http://{addr}/v1/traces")).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let client = searchwire::Client::builder()
                .nodes(cluster.urls())
                .read_environment(false)
                .backoff(searchwire::Backoff::constant(Duration::from_millis(5)))
                .build()
                .unwrap();
            client.check_all().await;
            client
                .send(searchwire::Request::get("/logs/_search"))
                .await
                .unwrap();
            let e = client
                .send(searchwire::Request::get("/missing/_doc/1"))
                .await
                .unwrap_err();
            assert_eq!(e.status().map(|s| s.as_u16()), Some(404));
        })
    });
    provider.shutdown().unwrap();
    let req = check_request_spans(&receiver);
    assert_eq!(req.attr("db.namespace"), CLUSTER_NAME);
    // A failed request: its error class, the status as the database reported it.
    let failed = receiver.spans("get missing");
    assert_eq!(failed.len(), 1, "{:?}", receiver.spans.lock().unwrap());
    assert_eq!(failed[0].attr("db.operation.name"), "get");
    assert_eq!(failed[0].attr("error.type"), "status");
    assert_eq!(failed[0].attr("db.response.status_code"), "404");
    assert_eq!(failed[0].attr("db.namespace"), CLUSTER_NAME);
    drop(rt);
}
