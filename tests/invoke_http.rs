//! The http runner against a real loopback server: every credential form checked on the wire,
//! the error strings, the size cap, timeouts, redirects, and the circuit breaker.

use crate::common;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{any, get};
use capdir::invoke::InvokerConfig;
use capdir::invoke::breaker::Breaker;
use capdir::invoke::outcome::Status;
use capdir::invoke::runner::Environment;
use capdir::invoke::runner::http::HttpConfig;
use common::{call, closed_port, invoker, invoker_with, row, row_with, serve};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);

impl Hits {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// Answers 200 only when `name` carries exactly `want`; 401 otherwise.
fn expect_header(name: &'static str, want: &'static str) -> axum::routing::MethodRouter<Hits> {
    get(move |h: HeaderMap| async move {
        if header(&h, name) == want {
            (StatusCode::OK, "authorised").into_response()
        } else {
            (
                StatusCode::UNAUTHORIZED,
                format!("got {name}: {}", header(&h, name)),
            )
                .into_response()
        }
    })
}

async fn server() -> (SocketAddr, Hits) {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/bearer",
            expect_header("authorization", "Bearer tok-bearer-7f3"),
        )
        // base64("ada:s3cret-pw")
        .route(
            "/basic",
            expect_header("authorization", "Basic YWRhOnMzY3JldC1wdw=="),
        )
        .route(
            "/headers",
            get(|h: HeaderMap| async move {
                let ok = header(&h, "x-api-key") == "key-hdr-91"
                    && header(&h, "x-client") == "capdir id-55"
                    && header(&h, "authorization").is_empty();
                if ok {
                    (StatusCode::OK, "authorised")
                } else {
                    (StatusCode::UNAUTHORIZED, "no")
                }
            }),
        )
        .route(
            "/query",
            get(|RawQuery(q): RawQuery| async move {
                // The row's own parameter first, the credential appended, nothing else.
                if q.as_deref() == Some("city=S%C3%A3o%20Paulo%26appid%3Dx&appid=qk-204") {
                    (StatusCode::OK, "authorised".to_string())
                } else {
                    (StatusCode::UNAUTHORIZED, format!("query was {q:?}"))
                }
            }),
        )
        .route(
            "/echo",
            any(|h: HeaderMap, body: Bytes| async move {
                axum::Json(json!({
                    "content_type": header(&h, "content-type"),
                    "user_agent": header(&h, "user-agent"),
                    "body": String::from_utf8_lossy(&body),
                }))
            }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such thing") }),
        )
        .route(
            "/long-error",
            get(|| async { (StatusCode::BAD_GATEWAY, "e".repeat(2000)) }),
        )
        .route("/big", get(|| async { "x".repeat(3 * 1024 * 1024) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "too late"
            }),
        )
        .route(
            "/deny",
            get(|State(hits): State<Hits>| async move {
                hits.0.fetch_add(1, Ordering::SeqCst);
                (StatusCode::UNAUTHORIZED, "bad credentials")
            }),
        )
        .route(
            "/allow",
            get(|State(hits): State<Hits>| async move {
                hits.0.fetch_add(1, Ordering::SeqCst);
                "fine"
            }),
        )
        .route("/hop", get(|| async { Redirect::temporary("/bearer") }))
        .route(
            "/echo-key",
            get(|h: HeaderMap| async move {
                (
                    StatusCode::FORBIDDEN,
                    format!("your key {} is revoked", header(&h, "authorization")),
                )
            }),
        )
        .with_state(hits.clone());
    (serve(app).await, hits)
}

fn env() -> Environment {
    Environment::fixed([
        ("HT_BEARER", "tok-bearer-7f3"),
        ("HT_BASIC", "ada:s3cret-pw"),
        ("HT_HDR_KEY", "key-hdr-91"),
        ("HT_HDR_ID", "id-55"),
        ("HT_QUERY", "qk-204"),
        ("HT_WRONG", "not-the-token"),
    ])
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("GET http://{addr}{path}")
}

#[tokio::test]
async fn every_auth_form_on_the_wire() {
    let (addr, _) = server().await;
    let inv = invoker(
        vec![
            row_with(
                "B",
                "http",
                &url(addr, "/bearer"),
                "",
                json!({"auth": "bearer:HT_BEARER"}),
            ),
            row_with(
                "BA",
                "http",
                &url(addr, "/basic"),
                "",
                json!({"auth": "basic:HT_BASIC"}),
            ),
            row_with(
                "H",
                "http",
                &url(addr, "/headers"),
                "",
                json!({"auth": r#"headers:{"X-Api-Key":"$HT_HDR_KEY","X-Client":"capdir $HT_HDR_ID"}"#}),
            ),
            row_with(
                "Q",
                "http",
                &url(addr, "/query?city=$1"),
                "",
                json!({"auth": "query:appid=HT_QUERY"}),
            ),
            row("NONE", "http", &url(addr, "/bearer"), ""),
        ],
        env(),
    );
    for (key, body) in [("B", ""), ("BA", ""), ("H", ""), ("Q", "São Paulo&appid=x")] {
        let o = call(&inv, key, body).await;
        assert_eq!(o.output, "HTTP 200:authorised", "{key}");
        assert_eq!(o.status, Status::ProvenMaterialResult);
    }
    let o = call(&inv, "NONE", "").await;
    assert_eq!(o.output, "ERR:http:401:got authorization: ");
}

#[tokio::test]
async fn missing_env_and_unknown_prefix() {
    let (addr, hits) = server().await;
    let inv = invoker(
        vec![
            row_with(
                "B",
                "http",
                &url(addr, "/allow"),
                "",
                json!({"auth": "bearer:HT_NOT_SET_ANYWHERE"}),
            ),
            row_with(
                "H",
                "http",
                &url(addr, "/allow"),
                "",
                json!({"auth": r#"headers:{"X-A":"$HT_HDR_KEY","X-B":"$HT_NOT_SET_EITHER"}"#}),
            ),
            row_with(
                "U",
                "http",
                &url(addr, "/allow"),
                "",
                json!({"auth": "token:HT_BEARER"}),
            ),
        ],
        env(),
    );
    let o = call(&inv, "B", "").await;
    assert_eq!(o.output, "ERR:auth:missing_env:HT_NOT_SET_ANYWHERE");
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Failed, Some("auth:missing_env"))
    );
    let o = call(&inv, "H", "").await;
    assert_eq!(o.output, "ERR:auth:missing_env:HT_NOT_SET_EITHER");
    assert!(!o.output.contains("key-hdr-91"));
    let o = call(&inv, "U", "").await;
    assert_eq!(o.output, "ERR:auth:unknown_prefix:token");
    assert_eq!(hits.get(), 0, "nothing may be sent without the credential");
}

#[tokio::test]
async fn body_headers_and_status_errors() {
    let (addr, _) = server().await;
    let inv = invoker(
        vec![
            row(
                "POST_JSON",
                "http",
                &format!("POST http://{addr}/echo"),
                r#"{"title": "$1", "n": $2}"#,
            ),
            row(
                "POST_TEXT",
                "http",
                &format!("POST http://{addr}/echo"),
                "note: $1",
            ),
            row(
                "POST_WHOLE",
                "http",
                &format!("POST http://{addr}/echo"),
                "$1+",
            ),
            row("MISSING", "http", &url(addr, "/missing"), ""),
            row("LONG", "http", &url(addr, "/long-error"), ""),
            row(
                "CLOSED",
                "http",
                &format!("GET http://127.0.0.1:{}/x", closed_port()),
                "",
            ),
            row("HOP", "http", &url(addr, "/hop"), ""),
            row_with(
                "HOP_AUTH",
                "http",
                &url(addr, "/hop"),
                "",
                json!({"auth": "bearer:HT_BEARER"}),
            ),
        ],
        env(),
    );
    let o = call(&inv, "POST_JSON", "say \"hi\"|42").await;
    let body = o.output.strip_prefix("HTTP 200:").expect("200");
    let seen: serde_json::Value = serde_json::from_str(body).expect("json");
    assert_eq!(seen["content_type"], "application/json");
    assert_eq!(
        seen["user_agent"],
        format!("capdir/{}", env!("CARGO_PKG_VERSION"))
    );
    let sent: serde_json::Value =
        serde_json::from_str(seen["body"].as_str().unwrap_or("")).expect("sent json");
    assert_eq!(sent, json!({"title": "say \"hi\"", "n": 42}));

    let o = call(&inv, "POST_TEXT", "plain").await;
    let seen: serde_json::Value =
        serde_json::from_str(o.output.strip_prefix("HTTP 200:").unwrap_or("")).expect("json");
    assert_eq!(
        (seen["body"].as_str(), seen["content_type"].as_str()),
        (Some("note: plain"), Some(""))
    );

    // A body one slot fills with a whole JSON document goes as JSON; other text does not.
    for (body, content_type) in [
        (r#"{"title": "a|b"}"#, "application/json"),
        ("[1, 2]", "application/json"),
        ("{not json", ""),
        ("plain", ""),
    ] {
        let o = call(&inv, "POST_WHOLE", body).await;
        let seen: serde_json::Value =
            serde_json::from_str(o.output.strip_prefix("HTTP 200:").unwrap_or("")).expect("json");
        assert_eq!(
            (seen["body"].as_str(), seen["content_type"].as_str()),
            (Some(body), Some(content_type)),
            "{body}"
        );
    }

    let o = call(&inv, "MISSING", "").await;
    assert_eq!(o.output, "ERR:http:404:no such thing");
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Failed, Some("http:404"))
    );

    let o = call(&inv, "LONG", "").await;
    assert_eq!(o.output, format!("ERR:http:502:{}", "e".repeat(512)));

    let o = call(&inv, "CLOSED", "").await;
    assert!(o.output.starts_with("ERR:http:fetch:"), "{}", o.output);
    // The reason names the cause, never the URL (a query credential would be in it).
    assert!(
        o.output.contains("Connection refused") && !o.output.contains("127.0.0.1"),
        "{}",
        o.output
    );
    assert_eq!(o.error_code(), Some("http:fetch"));

    // A same-origin redirect is followed (here to a route that wants a token).
    let o = call(&inv, "HOP", "").await;
    assert!(o.output.starts_with("ERR:http:401:"), "{}", o.output);
    let o = call(&inv, "HOP_AUTH", "").await;
    assert_eq!(o.output, "HTTP 200:authorised");
}

#[tokio::test]
async fn redirect_to_another_origin_is_not_followed() {
    let (target, target_hits) = server().await;
    let away = Router::new().route(
        "/away",
        get(move || async move { Redirect::temporary(&format!("http://{target}/allow")) }),
    );
    let addr = serve(away).await;
    let inv = invoker(
        vec![row_with(
            "AWAY",
            "http",
            &url(addr, "/away"),
            "",
            json!({"auth": "bearer:HT_BEARER"}),
        )],
        env(),
    );
    let o = call(&inv, "AWAY", "").await;
    assert!(
        o.output
            .starts_with("ERR:http:307:redirect not followed (another origin"),
        "{}",
        o.output
    );
    assert_eq!(target_hits.get(), 0);
}

#[tokio::test]
async fn response_size_is_capped() {
    let (addr, _) = server().await;
    let inv = invoker(vec![row("BIG", "http", &url(addr, "/big"), "")], env());
    let o = call(&inv, "BIG", "").await;
    assert!(o.truncated);
    assert_eq!(o.status, Status::ProvenMaterialResult);
    let body = o.output.strip_prefix("HTTP 200:").expect("200");
    let (kept, note) = body.split_once('\n').expect("truncation note");
    assert_eq!(kept.len(), 1024 * 1024);
    assert_eq!(note, "[capdir: response truncated at 1048576 bytes]");
}

#[tokio::test]
async fn timeout_fires() {
    let (addr, _) = server().await;
    let inv = invoker_with(
        vec![row("SLOW", "http", &url(addr, "/slow"), "")],
        InvokerConfig {
            http: HttpConfig {
                timeout: Duration::from_millis(300),
                ..Default::default()
            },
            env: env(),
            ..Default::default()
        },
    );
    let started = std::time::Instant::now();
    let o = call(&inv, "SLOW", "").await;
    assert_eq!(o.output, "ERR:http:fetch:timed out after 300 ms");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn secrets_echoed_by_a_server_are_scrubbed() {
    let (addr, _) = server().await;
    let inv = invoker(
        vec![row_with(
            "ECHO_KEY",
            "http",
            &url(addr, "/echo-key"),
            "",
            json!({"auth": "bearer:HT_BEARER"}),
        )],
        env(),
    );
    let o = call(&inv, "ECHO_KEY", "").await;
    assert_eq!(
        o.output,
        "ERR:http:403:your key Bearer [REDACTED] is revoked"
    );
}

fn deny_rows(addr: SocketAddr) -> Vec<capdir::row::Row> {
    vec![
        row_with(
            "DENY",
            "http",
            &url(addr, "/deny"),
            "",
            json!({"auth": "bearer:HT_WRONG"}),
        ),
        row_with(
            "ALLOW",
            "http",
            &url(addr, "/allow"),
            "",
            json!({"auth": "bearer:HT_WRONG"}),
        ),
        row_with(
            "OTHER",
            "http",
            &url(addr, "/allow"),
            "",
            json!({"auth": "bearer:HT_BEARER"}),
        ),
    ]
}

#[tokio::test]
async fn breaker_opens_after_eight_rejections_and_survives_a_restart() {
    let (addr, hits) = server().await;
    let data = tempfile::tempdir().expect("tempdir");
    let make = || {
        invoker_with(
            deny_rows(addr),
            InvokerConfig {
                breaker: Some(Breaker::in_data_dir(data.path())),
                env: env(),
                ..Default::default()
            },
        )
    };
    let inv = make();
    for i in 1..=8 {
        let o = call(&inv, "DENY", "").await;
        assert_eq!(o.output, "ERR:http:401:bad credentials", "call {i}");
    }
    assert_eq!(hits.get(), 8);
    let o = call(&inv, "DENY", "").await;
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Refused, Some("breaker_open"))
    );
    assert!(
        o.output.starts_with("ERR:breaker_open:HT_WRONG:until 20"),
        "{}",
        o.output
    );
    // Another row with the same credential is refused too; another credential is not.
    let o = call(&inv, "ALLOW", "").await;
    assert_eq!(o.error_code(), Some("breaker_open"));
    assert_eq!(hits.get(), 8, "an open breaker sends nothing");
    assert_eq!(call(&inv, "OTHER", "").await.output, "HTTP 200:fine");
    assert_eq!(hits.get(), 9);

    // A new process (a new invoker on the same state file) still refuses.
    drop(inv);
    let inv = make();
    assert_eq!(
        call(&inv, "DENY", "").await.error_code(),
        Some("breaker_open")
    );
    assert_eq!(hits.get(), 9);

    // `capdir breaker reset`, through the same store, closes it.
    assert!(
        Breaker::in_data_dir(data.path())
            .reset("HT_WRONG")
            .await
            .expect("reset")
    );
    assert_eq!(call(&inv, "ALLOW", "").await.output, "HTTP 200:fine");
    assert_eq!(hits.get(), 10);
}

#[tokio::test]
async fn a_success_resets_the_count() {
    let (addr, hits) = server().await;
    let inv = invoker(deny_rows(addr), env());
    for _ in 0..7 {
        call(&inv, "DENY", "").await;
    }
    assert_eq!(call(&inv, "ALLOW", "").await.output, "HTTP 200:fine");
    for _ in 0..7 {
        call(&inv, "DENY", "").await;
    }
    let o = call(&inv, "DENY", "").await;
    assert_eq!(
        o.output, "ERR:http:401:bad credentials",
        "the 8th rejection since the success is still sent"
    );
    assert_eq!(hits.get(), 16);
    assert_eq!(
        call(&inv, "DENY", "").await.error_code(),
        Some("breaker_open")
    );
}

/// An origin that keeps not answering is refused at once after five timeouts in a row, with
/// its name and the time to retry after; other origins' rows run as before, whatever the
/// arguments that led to the timeouts named.
#[tokio::test]
async fn an_origin_that_keeps_timing_out_is_refused_at_once_and_others_run() {
    let (slow, _) = server().await;
    let (other, hits) = server().await;
    let inv = impatient(vec![
        row("SLOW", "http", &url(slow, "/slow?to=$1"), ""),
        row("SAME_ORIGIN", "http", &url(slow, "/allow"), ""),
        row("OTHER", "http", &url(other, "/allow"), ""),
    ]);
    // A caller's arguments naming the other origin cannot make its breaker count: the
    // breaker counts the origin the request went to.
    let aimed = format!("@{other}/allow#http://{other}/");
    for i in 1..=capdir::invoke::upstream::THRESHOLD {
        let o = call(&inv, "SLOW", &aimed).await;
        assert_eq!(
            o.output, "ERR:http:fetch:timed out after 200 ms",
            "call {i}"
        );
    }
    let started = std::time::Instant::now();
    let o = call(&inv, "SLOW", &aimed).await;
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "refused without waiting"
    );
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Refused, Some("breaker_open"))
    );
    let named = format!("ERR:breaker_open:http://{slow}:until 20");
    assert!(o.output.starts_with(&named), "{}", o.output);
    // The whole origin rests, not only the row; another origin does not.
    assert_eq!(
        call(&inv, "SAME_ORIGIN", "").await.error_code(),
        Some("breaker_open")
    );
    assert_eq!(call(&inv, "OTHER", "").await.output, "HTTP 200:fine");
    assert_eq!(hits.get(), 1);
}

/// A refused connection counts like a timeout; any HTTP answer from the origin, an error
/// status included, clears its count.
#[tokio::test]
async fn refused_connections_count_and_any_answer_clears_them() {
    let (addr, _) = server().await;
    let closed = closed_port();
    let inv = impatient(vec![
        row(
            "CLOSED",
            "http",
            &format!("GET http://127.0.0.1:{closed}/x"),
            "",
        ),
        row("SLOW", "http", &url(addr, "/slow"), ""),
        row("MISSING", "http", &url(addr, "/missing"), ""),
    ]);
    let threshold = capdir::invoke::upstream::THRESHOLD;
    for _ in 0..threshold {
        assert_eq!(
            call(&inv, "CLOSED", "").await.error_code(),
            Some("http:fetch")
        );
    }
    assert_eq!(
        call(&inv, "CLOSED", "").await.error_code(),
        Some("breaker_open")
    );
    for _ in 1..threshold {
        assert_eq!(
            call(&inv, "SLOW", "").await.error_code(),
            Some("http:fetch")
        );
    }
    assert_eq!(
        call(&inv, "MISSING", "").await.output,
        "ERR:http:404:no such thing"
    );
    for i in 0..threshold {
        let o = call(&inv, "SLOW", "").await;
        assert_eq!(
            o.error_code(),
            Some("http:fetch"),
            "timeout {i} after the 404 is sent"
        );
    }
    assert_eq!(
        call(&inv, "SLOW", "").await.error_code(),
        Some("breaker_open")
    );
}

/// An invoker whose upstreams may take 200 ms.
fn impatient(rows: Vec<capdir::row::Row>) -> capdir::invoke::Invoker {
    invoker_with(
        rows,
        InvokerConfig {
            http: HttpConfig {
                timeout: Duration::from_millis(200),
                ..Default::default()
            },
            env: env(),
            ..Default::default()
        },
    )
}

/// A credentialed row whose origin stops answering: no answer, the breaker's refusal
/// included, carries the credential, and once the origin rests the credential is not sent
/// there again.
#[tokio::test]
async fn a_resting_origin_is_sent_no_credential_and_names_none() {
    let (addr, hits) = server().await;
    let auth = || json!({"auth": "bearer:HT_BEARER"});
    let inv = impatient(vec![
        row_with("SLOW", "http", &url(addr, "/slow"), "", auth()),
        row_with("ALLOW", "http", &url(addr, "/allow"), "", auth()),
    ]);
    for _ in 0..capdir::invoke::upstream::THRESHOLD {
        let o = call(&inv, "SLOW", "").await;
        assert_eq!(o.error_code(), Some("http:fetch"));
        assert!(!o.output.contains("tok-bearer-7f3"), "{}", o.output);
    }
    let o = call(&inv, "ALLOW", "").await;
    assert_eq!(o.error_code(), Some("breaker_open"));
    assert!(!o.output.contains("tok-bearer-7f3"), "{}", o.output);
    assert_eq!(hits.get(), 0, "nothing sent to the resting origin");
}
