//! The receipt page the dispatcher serves to browsers (`/receipt/inv_…` with `Accept:
//! text/html`), in-process: the keyless confirmation for anyone, the full receipt for the
//! owner key sent as a header or typed into the page's form, the same refusal codes as the
//! JSON answer, and pages that load nothing from elsewhere.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use capdir::build::{self, Options};
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use common::{Repo, fixture};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use tower::ServiceExt;

const OWNER: &str = "receipt-page-owner-key";

struct Served {
    _repo: Repo,
    _dir: tempfile::TempDir,
    state: AppState,
}

fn served() -> Served {
    let repo = Repo::new();
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.commit("Add echo", "2024-01-01T10:00:00Z");
    let dir = tempfile::tempdir().expect("tempdir");
    let site = dir.path().join("site");
    build::run(&Options::new(repo.catalogue(), &site)).expect("build");
    let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
    let state = AppState::new(Settings {
        owner_key: Some(OWNER.into()),
        ..Settings::new(&site, Arc::new(ledger))
    })
    .expect("state");
    Served {
        _repo: repo,
        _dir: dir,
        state,
    }
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn send(state: &AppState, req: Request<Body>) -> Answer {
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn invoke(state: &AppState, body: &str) -> String {
    let req = Request::post("/api/dispatch")
        .header("content-type", "application/json")
        .header("x-owner-key", OWNER)
        .body(Body::from(
            json!({"key": "GOOD_ECHO", "body": body}).to_string(),
        ))
        .expect("request");
    let a = send(state, req).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let v: Json = serde_json::from_str(&a.body).expect("json");
    v["receipt"].as_str().expect("receipt id").to_string()
}

fn page(id: &str) -> axum::http::request::Builder {
    Request::get(format!("/receipt/{id}")).header("accept", "text/html,*/*;q=0.8")
}

/// Receipt `id`'s page as the owner sees it, the key sent as a header.
async fn full_page(state: &AppState, id: &str) -> Answer {
    let req = page(id).header("x-owner-key", OWNER).body(Body::empty());
    send(state, req.expect("request")).await
}

fn form(id: &str, fields: &str) -> Request<Body> {
    Request::post(format!("/receipt/{id}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(fields.to_string()))
        .expect("request")
}

fn is_page(a: &Answer) {
    assert_eq!(
        a.headers[header::CONTENT_TYPE],
        "text/html; charset=utf-8",
        "{}",
        a.body
    );
    assert!(a.body.starts_with("<!doctype html>"), "{}", a.body);
    // The site's layout: its stylesheet, search box and footer.
    assert!(a.body.contains(r#"href="/static/style.css""#));
    assert!(a.body.contains(r#"role="search""#));
    assert!(a.body.contains("<footer"));
    assert_eq!(a.headers[header::CACHE_CONTROL], "no-store");
    assert!(
        a.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("csp")
            .starts_with("default-src 'self'")
    );
}

#[tokio::test]
async fn keyless_page_shows_status_and_hashes_and_asks_for_the_key() {
    let s = served();
    let id = invoke(&s.state, "secret words").await;
    let a = send(&s.state, page(&id).body(Body::empty()).expect("req")).await;
    assert_eq!(a.status, StatusCode::OK);
    is_page(&a);
    assert!(a.body.contains("PROVEN_MATERIAL_RESULT"), "{}", a.body);
    assert!(a.body.contains(&capdir::ledger::sha256_hex("secret words")));
    assert!(
        !a.body.contains("secret words"),
        "input and output need a key"
    );
    assert!(
        a.body
            .contains(r#"<input id="credential" name="credential" type="password""#)
    );
    assert!(
        a.body
            .contains(&format!(r#"<form method="post" action="{id}">"#))
    );
}

#[tokio::test]
async fn the_owner_key_as_header_or_form_field_shows_the_full_receipt() {
    let s = served();
    let id = invoke(&s.state, "hello page").await;
    let by_header = full_page(&s.state, &id).await;
    let by_form = send(
        &s.state,
        form(&id, &format!("body=ignored&credential={OWNER}")),
    )
    .await;
    for a in [&by_header, &by_form] {
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        is_page(a);
        assert!(a.body.contains(r#"<pre tabindex="0" aria-labelledby="output-h" class="output"><code>hello page</code></pre>"#), "{}", a.body);
        assert!(a.body.contains("<dt>Actor</dt><dd>owner</dd>"));
        assert!(!a.body.contains(OWNER), "the key is not echoed");
        assert!(!a.body.contains("Show the full receipt"));
    }
    // Without text/html the answer stays JSON, as before.
    let json = send(
        &s.state,
        Request::get(format!("/receipt/{id}"))
            .header("x-owner-key", OWNER)
            .body(Body::empty())
            .expect("req"),
    )
    .await;
    let v: Json = serde_json::from_str(&json.body).expect("json");
    assert_eq!(v["output"], "hello page");
}

/// A caller's input is shown on the page as text: markup in it is escaped (named entities,
/// quotes too), never run, in the input, the output an echo gives back, and nowhere else.
#[tokio::test]
async fn markup_a_caller_sent_is_shown_as_text() {
    let s = served();
    let sent = r#"<script>alert('x')</script><img src=x onerror="alert(1)">"#;
    let id = invoke(&s.state, sent).await;
    let a = full_page(&s.state, &id).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let shown = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&lt;img src=x onerror=&quot;alert(1)&quot;&gt;";
    assert_eq!(
        a.body.matches(shown).count(),
        2,
        "input and output, escaped: {}",
        a.body
    );
    assert!(!a.body.contains("<script>alert"), "{}", a.body);
    assert!(!a.body.contains("<img src=x"), "{}", a.body);
}

#[tokio::test]
async fn refusals_and_unknown_ids_keep_their_codes() {
    let s = served();
    let id = invoke(&s.state, "x").await;
    let wrong = send(&s.state, form(&id, "credential=not-the-key")).await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    is_page(&wrong);
    assert!(
        wrong.body.contains("<code>forbidden</code>"),
        "{}",
        wrong.body
    );
    assert!(
        wrong.body.contains("Show the full receipt"),
        "the form again"
    );
    assert!(!wrong.body.contains("not-the-key"));
    // An empty field is no credential: the keyless page.
    let empty = send(&s.state, form(&id, "credential=")).await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(empty.body.contains("Show the full receipt"));

    let unknown = send(
        &s.state,
        page("inv_doesnotexist").body(Body::empty()).expect("req"),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    is_page(&unknown);
    assert!(unknown.body.contains("<code>unknown_receipt</code>"));
    assert!(!unknown.body.contains("<form method=\"post\""));
    let bad = send(&s.state, form("..%2Fetc", "credential=x")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("<code>bad_receipt_id</code>"));
}

#[tokio::test]
async fn static_pages_carry_the_content_security_policy() {
    let s = served();
    let a = send(
        &s.state,
        Request::get("/k/GOOD_ECHO.html")
            .body(Body::empty())
            .expect("req"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.headers.contains_key(header::CONTENT_SECURITY_POLICY));
    let css = send(
        &s.state,
        Request::get("/static/style.css")
            .body(Body::empty())
            .expect("req"),
    )
    .await;
    assert_eq!(css.headers[header::CONTENT_TYPE], "text/css");
}
