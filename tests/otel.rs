//! OpenTelemetry, end to end: a real `capdir serve` exporting over OTLP/HTTP to a receiver
//! this test starts (it decodes the protocol's own protobuf messages), a flow whose steps
//! call two loopback origins, one bound in `bindings.yaml` and one not. The spans must make
//! the receipts' tree (one span per receipt, each under its parent's, all in the receipts'
//! trace, the caller's when it sent a `traceparent`); only the bound origin may be sent the
//! trace context.

use crate::common::{Built, Repo, Served, bindings_yaml, fn_row, serve};
use axum::body::Bytes;
use axum::http::HeaderMap;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value as Json, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OWNER: &str = "otel-test-owner-key";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const SECRET: &str = "peer-secret-5b1e0c";

/// Every export a receiver got: the spans decoded, and the bodies as they came.
type Received = (Arc<Mutex<Vec<Span>>>, Arc<Mutex<Vec<Bytes>>>);

/// An OTLP/HTTP trace receiver on loopback: every span exported to it, decoded.
async fn receiver() -> (String, Received) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let kept = spans.clone();
    let raw = bodies.clone();
    let router = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            let raw = raw.clone();
            async move {
                raw.lock().unwrap().push(body.clone());
                assert_eq!(
                    headers.get("content-type").map(|v| v.as_bytes()),
                    Some(&b"application/x-protobuf"[..]),
                    "OTLP/HTTP sends protobuf"
                );
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP request");
                let mut kept = kept.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        kept.extend(scope.spans);
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let addr = serve(router).await;
    (format!("http://{addr}"), (spans, bodies))
}

/// A loopback origin that answers `pong` and keeps the `traceparent` of every request.
async fn origin() -> (u16, Arc<Mutex<Vec<Option<String>>>>) {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let kept = seen.clone();
    let router = axum::Router::new().route(
        "/ping",
        axum::routing::get(move |headers: HeaderMap| {
            let kept = kept.clone();
            async move {
                let tp = headers
                    .get("traceparent")
                    .map(|v| v.to_str().unwrap().to_string());
                kept.lock().unwrap().push(tp);
                "pong"
            }
        }),
    );
    (serve(router).await.port(), seen)
}

fn http_row(key: &str, port: u16, auth: &str) -> String {
    format!(
        "key: {key}\ntype: http\ntarget: \"GET http://127.0.0.1:{port}/ping?q=$1\"\n{auth}category: tests\ncontent: |\n  # WHAT: Ping a test origin.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: pong\nasks:\n  - ping the origin\n"
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

/// The spans received so far once every receipt of `trace` has its span, or a failure
/// naming what is missing after 20 s.
async fn spans_for(spans: &Mutex<Vec<Span>>, receipts: &[Json]) -> Vec<Span> {
    let started = Instant::now();
    loop {
        let got = spans.lock().unwrap().clone();
        let missing: Vec<&str> = receipts
            .iter()
            .filter_map(|r| r["id"].as_str())
            .filter(|id| {
                !got.iter()
                    .any(|s| attribute(s, "capdir.receipt").as_deref() == Some(id))
            })
            .collect();
        if missing.is_empty() {
            return got;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no span received for receipts {missing:?}; spans: {:?}",
            got.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The tree the receipts make must be the tree their spans make, in the receipts' trace.
fn tree_matches(receipts: &[Json], spans: &[Span]) -> HashMap<String, Span> {
    let by_receipt: HashMap<String, Span> = receipts
        .iter()
        .map(|r| {
            let id = r["id"].as_str().unwrap().to_string();
            let mine: Vec<&Span> = spans
                .iter()
                .filter(|s| attribute(s, "capdir.receipt").as_deref() == Some(id.as_str()))
                .collect();
            assert_eq!(mine.len(), 1, "one span for receipt {id}");
            (id, mine[0].clone())
        })
        .collect();
    for r in receipts {
        let span = &by_receipt[r["id"].as_str().unwrap()];
        assert_eq!(
            hex(&span.trace_id),
            r["trace_id"].as_str().unwrap(),
            "the span of {} is in its receipt's trace",
            r["key"]
        );
        assert_eq!(attribute(span, "capdir.key").as_deref(), r["key"].as_str());
        assert_eq!(
            attribute(span, "capdir.status").as_deref(),
            r["status"].as_str()
        );
        if let Some(parent) = r["parent"].as_str() {
            assert_eq!(
                span.parent_span_id, by_receipt[parent].span_id,
                "the span of {} is under its parent receipt's span",
                r["key"]
            );
        }
    }
    by_receipt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_make_the_receipt_tree_and_only_bound_origins_are_sent_the_trace() {
    let (endpoint, (spans, bodies)) = receiver().await;
    let (bound, bound_seen) = origin().await;
    let (unbound, unbound_seen) = origin().await;
    let repo = Repo::new();
    repo.write("SAY.yaml", &fn_row("SAY", "tests", "Say it back."));
    // The bound row sends a secret in its query: no span may carry it (nor the URL).
    repo.write(
        "BOUND_PING.yaml",
        &http_row("BOUND_PING", bound, "auth: query:token=TRACE_PEER_TOKEN\n"),
    );
    repo.write("UNBOUND_PING.yaml", &http_row("UNBOUND_PING", unbound, ""));
    repo.write(
        "TRACED_FLOW.yaml",
        "key: TRACED_FLOW\ntype: flow\ncategory: tests\ncontent: |\n  # WHAT: Say, then ping both origins.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: pong\n  SAY: $1 > BOUND_PING: $PREV > UNBOUND_PING: $PREV\nasks:\n  - say and ping\n",
    );
    // The owner trusts the bound origin with a credential; no row needs to send it.
    let origin_url = format!("http://127.0.0.1:{bound}");
    repo.write(
        "bindings.yaml",
        &bindings_yaml(&[("TRACE_PEER_TOKEN", &origin_url)]),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let built = Built::new(repo);
    let served = Served::start(
        built.dir.path(),
        &[],
        &[
            ("CAPDIR_OWNER_KEY", OWNER),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("TRACE_PEER_TOKEN", SECRET),
        ],
    )
    .await;
    let client = crate::common::client();
    let call = |traceparent: Option<&str>| {
        let mut req = client
            .post(served.url("/api/dispatch"))
            .header("x-owner-key", OWNER)
            .json(&json!({"key": "TRACED_FLOW", "body": "hi"}));
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        req.send()
    };

    // A caller in a trace of its own: everything the call does joins it.
    let res = call(Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")))
        .await
        .expect("call");
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let receipts = built.receipts();
    assert_eq!(
        receipts.len(),
        4,
        "the flow and its three steps: {receipts:?}"
    );
    for r in &receipts {
        assert_eq!(r["trace_id"], CALLER_TRACE, "{r}");
    }
    let got = spans_for(&spans, &receipts).await;
    let by_receipt = tree_matches(&receipts, &got);
    let root = receipts.iter().find(|r| r["parent"].is_null()).unwrap();
    let root_span = &by_receipt[root["id"].as_str().unwrap()];
    let request = got
        .iter()
        .find(|s| s.span_id == root_span.parent_span_id)
        .expect("the call's span is under its request's");
    assert_eq!(request.name, "POST /api/dispatch");
    assert_eq!(
        hex(&request.parent_span_id),
        CALLER_SPAN,
        "the request joins the caller"
    );
    assert_eq!(
        attribute(request, "http.response.status_code").as_deref(),
        Some("200")
    );

    // Each step that reached an origin sent one client request, under the step's span.
    let step = |key: &str| {
        let r = receipts.iter().find(|r| r["key"] == key).unwrap();
        &by_receipt[r["id"].as_str().unwrap()]
    };
    let client_span = |under: &Span| {
        let below: Vec<&Span> = got
            .iter()
            .filter(|s| s.parent_span_id == under.span_id && s.name == "GET")
            .collect();
        assert_eq!(below.len(), 1, "one request span under {}", under.name);
        below[0].clone()
    };
    let sent_bound = client_span(step("BOUND_PING"));
    client_span(step("UNBOUND_PING"));
    // The bound origin continues the trace from its request's span; the other learns nothing.
    assert_eq!(
        bound_seen.lock().unwrap().clone(),
        vec![Some(format!(
            "00-{CALLER_TRACE}-{}-01",
            hex(&sent_bound.span_id)
        ))]
    );
    assert_eq!(unbound_seen.lock().unwrap().clone(), vec![None]);

    // No traceparent, or one that is not W3C trace context (an attacker's header), starts a
    // trace of the dispatcher's own; the receipts carry its id, never the junk.
    let mut seen = receipts.len();
    let junks = [
        None,
        Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01".to_string()),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-zzzzzzzzzzzzzzzz-01".to_string()),
        Some("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string()),
        Some(format!(
            "00-{CALLER_TRACE}-{CALLER_SPAN}-01{}",
            "-x".repeat(2000)
        )),
    ];
    for junk in junks.iter().map(Option::as_deref) {
        let res = call(junk).await.expect("call");
        assert_eq!(res.status(), 200, "{junk:?}");
        let all = built.receipts();
        let fresh: Vec<Json> = all[seen..].to_vec();
        seen = all.len();
        assert_eq!(fresh.len(), 4, "{junk:?}");
        let trace = fresh[0]["trace_id"].as_str().unwrap().to_string();
        assert_eq!(trace.len(), 32);
        assert_ne!(trace, CALLER_TRACE, "{junk:?}");
        assert_ne!(trace, "0".repeat(32));
        assert!(fresh.iter().all(|r| r["trace_id"] == trace.as_str()));
        let got = spans_for(&spans, &fresh).await;
        let by_receipt = tree_matches(&fresh, &got);
        let root = fresh.iter().find(|r| r["parent"].is_null()).unwrap();
        let root_span = &by_receipt[root["id"].as_str().unwrap()];
        let request = got
            .iter()
            .find(|s| s.span_id == root_span.parent_span_id)
            .expect("request span");
        assert!(
            request.parent_span_id.is_empty(),
            "a root of its own: {junk:?}"
        );
        // Only the bound origin was sent the new trace.
        assert_eq!(unbound_seen.lock().unwrap().last(), Some(&None));
        let last_bound = bound_seen.lock().unwrap().last().cloned().flatten();
        assert!(
            last_bound.is_some_and(|tp| tp.starts_with(&format!("00-{trace}-"))),
            "{junk:?}"
        );
    }
    // What left for the collector named no secret, no argument and no URL of a request.
    let exported = bodies.lock().unwrap().concat();
    for needle in [SECRET, "token=", "/ping", "q=hi"] {
        assert!(
            memchr::memmem::find(&exported, needle.as_bytes()).is_none(),
            "an exported span holds {needle:?}"
        );
    }
}
