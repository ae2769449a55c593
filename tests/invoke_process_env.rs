//! Credentials are read from the real process environment at call time, not at start-up.
//!
//! Its own test binary with one test, because setting a variable while other threads read the
//! environment is unsound; here no other test runs in this process.

mod common;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use capdir::invoke::runner::Environment;
use common::{call, invoker, row_with, serve};
use serde_json::json;

#[tokio::test]
async fn credential_is_read_when_the_call_is_made() {
    let app = Router::new().route(
        "/t",
        get(|h: HeaderMap| async move {
            match h.get("authorization").and_then(|v| v.to_str().ok()) {
                Some("Bearer rotated-value-2") => (StatusCode::OK, "second"),
                Some("Bearer first-value-1") => (StatusCode::OK, "first"),
                _ => (StatusCode::UNAUTHORIZED, "none"),
            }
        }),
    );
    let addr = serve(app).await;
    let inv = invoker(
        vec![row_with(
            "T",
            "http",
            &format!("GET http://{addr}/t"),
            "",
            json!({"auth": "bearer:PROCESS_ENV_TEST_TOKEN"}),
        )],
        Environment::Process,
    );
    assert_eq!(
        call(&inv, "T", "").await.output,
        "ERR:auth:missing_env:PROCESS_ENV_TEST_TOKEN"
    );
    // SAFETY: this binary runs this single test; the server and client threads do not read
    // the environment while it is set.
    unsafe { std::env::set_var("PROCESS_ENV_TEST_TOKEN", "first-value-1") };
    assert_eq!(call(&inv, "T", "").await.output, "HTTP 200:first");
    // SAFETY: as above.
    unsafe { std::env::set_var("PROCESS_ENV_TEST_TOKEN", "rotated-value-2") };
    assert_eq!(call(&inv, "T", "").await.output, "HTTP 200:second");
}
