//! `/openapi.json` against the routes, in-process: the document names exactly the routes the
//! router serves, and representative requests — every operation, every documented kind of
//! answer — come back with a status, a content type and a JSON body the document allows.
//! (`tests/schemathesis.rs` then lets schemathesis generate requests against a live server.)

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use capdir::access::token::{self, Claims, Risk, TokenKey};
use capdir::build::{self, Options};
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use common::{Repo, fixture, fn_row};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use tower::ServiceExt;

const OWNER: &str = "openapi-test-owner";
const TOKEN_KEY: &str = "openapi-test-token-key-0123456789abcdef";

fn state(dir: &tempfile::TempDir, repo: &Repo) -> AppState {
    build::run(&Options::new(repo.catalogue(), dir.path().join("site"))).expect("build");
    let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
    let mut s = Settings::new(dir.path().join("site"), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.token_key = Some(TokenKey::from_text(TOKEN_KEY).expect("key"));
    AppState::new(s).expect("state")
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: String,
}

async fn send(state: &AppState, req: Request<Body>) -> Answer {
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let content_type = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    Answer {
        status,
        content_type,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The document's operation for a concrete request path.
fn operation<'a>(doc: &'a Json, method: &str, path: &str) -> &'a Json {
    let template = if path.starts_with("/receipt/") {
        "/receipt/{id}"
    } else if path.starts_with("/api/directory/") {
        "/api/directory/{key}"
    } else {
        path
    };
    let op = &doc["paths"][template][method];
    assert!(op.is_object(), "{method} {template} is not in the document");
    op
}

/// Follow a `$ref` into `components`.
fn resolve<'a>(doc: &'a Json, v: &'a Json) -> &'a Json {
    match v.get("$ref").and_then(Json::as_str) {
        Some(r) => {
            let mut at = doc;
            for part in r.trim_start_matches("#/").split('/') {
                at = &at[part];
            }
            at
        }
        None => v,
    }
}

/// Check one answer against the document; return how it was checked.
fn conforms(doc: &Json, method: &str, path: &str, a: &Answer) {
    let op = operation(doc, method, path);
    let what = format!("{method} {path} → {} {}", a.status, a.body);
    let response = op["responses"]
        .get(a.status.as_str())
        .unwrap_or_else(|| panic!("status not documented: {what}"));
    let response = resolve(doc, response);
    let media = a.content_type.split(';').next().unwrap_or("").trim();
    let content = &response["content"][media];
    assert!(
        content.is_object(),
        "content type {media} not documented: {what}"
    );
    if media == "application/json" {
        let mut schema = content["schema"].clone();
        schema["components"] = doc["components"].clone();
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        let body: Json = serde_json::from_str(&a.body).expect("a JSON body");
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{what}\n{errors:?}");
    }
}

fn get(uri: &str, credential: Option<&str>) -> Request<Body> {
    let mut r = Request::get(uri);
    if let Some(c) = credential {
        r = r.header("authorization", format!("Bearer {c}"));
    }
    r.body(Body::empty()).expect("request")
}

fn post(body: &str, credential: Option<&str>) -> Request<Body> {
    let mut r = Request::post("/api/dispatch").header("content-type", "application/json");
    if let Some(c) = credential {
        r = r.header("x-owner-key", c);
    }
    r.body(Body::from(body.to_string())).expect("request")
}

#[tokio::test]
async fn the_document_describes_every_route_and_answer() {
    let repo = Repo::new();
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.write("OLD_ROW.yaml", &fn_row("OLD_ROW", "text", "An old echo."));
    repo.commit("Add rows", "2024-01-01T10:00:00Z");
    repo.remove("OLD_ROW.yaml");
    repo.commit("Remove OLD_ROW", "2024-02-01T10:00:00Z");
    let dir = tempfile::tempdir().expect("tempdir");
    let state = state(&dir, &repo);

    let a = send(&state, get("/openapi.json", None)).await;
    assert_eq!(a.status, StatusCode::OK);
    let doc: Json = serde_json::from_str(&a.body).expect("json");
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], "http://127.0.0.1:8080");
    // The document names exactly the router's routes and methods (serve::routes, from which
    // serve::app is built), the static-site fallback aside.
    let documented: std::collections::BTreeMap<String, Vec<String>> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .map(|(path, ops)| {
            let mut methods: Vec<String> = ops
                .as_object()
                .expect("operations")
                .keys()
                .cloned()
                .collect();
            methods.sort();
            (path.clone(), methods)
        })
        .collect();
    let routed: std::collections::BTreeMap<String, Vec<String>> = capdir::serve::routes()
        .into_iter()
        .map(|(path, methods)| {
            let mut methods: Vec<String> = methods.iter().map(|m| m.to_string()).collect();
            methods.sort();
            (path.to_string(), methods)
        })
        .collect();
    assert_eq!(documented, routed);
    assert!(routed.contains_key("/mcp"), "{routed:?}");
    // And the router answers those methods on those paths, and 405 for every other.
    for (path, methods) in &routed {
        let uri = path
            .replace("{id}", "inv_0123")
            .replace("{key}", "GOOD_ECHO");
        for method in ["get", "post", "put", "delete", "patch"] {
            let req = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&uri)
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .expect("request");
            let status = send(&state, req).await.status;
            let listed = methods.iter().any(|m| m == method);
            assert_eq!(
                status == StatusCode::METHOD_NOT_ALLOWED,
                !listed,
                "{method} {uri}: {status}"
            );
        }
    }

    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        id: token::new_id(),
        iat: now,
        exp: now + 600,
        aud: "http://127.0.0.1:8080".into(),
        keys: vec!["GOOD_ECHO".into()],
        categories: vec![],
        write: vec![],
        risk: Risk::Low,
        pin: None,
        body: None,
        max_payload: Some(8),
        credentials: vec![],
        watch: Default::default(),
        parent: None,
    };
    let tok = TokenKey::from_text(TOKEN_KEY).expect("key").sign(&claims);

    let ok = send(
        &state,
        post(
            &json!({"key": "GOOD_ECHO", "body": "hi"}).to_string(),
            Some(OWNER),
        ),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    let receipt = serde_json::from_str::<Json>(&ok.body).expect("json")["receipt"]
        .as_str()
        .expect("id")
        .to_string();
    conforms(&doc, "post", "/api/dispatch", &ok);

    let cases: Vec<(&str, Request<Body>, u16)> = vec![
        (
            "get",
            get("/api/dispatch?ask=repeat%20my%20text", None),
            200,
        ),
        (
            "get",
            get("/api/dispatch?ask=zzzz%20qqqq&limit=0", None),
            200,
        ),
        (
            "get",
            get("/api/dispatch?key=GOOD_ECHO&format=json", None),
            200,
        ),
        (
            "get",
            get("/api/dispatch?key=GOOD_ECHO&format=json", Some(&tok)),
            200,
        ),
        ("get", get("/api/dispatch?key=GOOD_ECHO", Some(OWNER)), 200),
        (
            "get",
            get("/api/dispatch?key=OLD_ROW&format=json", None),
            410,
        ),
        ("get", get("/api/dispatch?key=OLD_ROW", None), 410),
        ("get", get("/api/dispatch?key=NOPE", None), 404),
        (
            "get",
            get("/api/dispatch?key=GOOD_ECHO&format=pdf", None),
            400,
        ),
        (
            "get",
            get(&format!("/api/dispatch?confirm={receipt}"), None),
            200,
        ),
        ("get", get("/api/dispatch?confirm=inv_none", None), 404),
        ("get", get("/api/dispatch?map=1", None), 200),
        ("get", get("/api/dispatch?registry=1", None), 200),
        ("get", get("/api/dispatch", None), 200),
        ("get", get("/api/dispatch?map=1&format=pdf", None), 400),
        ("get", get("/api/dispatch?ask=x&limit=101", None), 400),
        ("get", get("/api/dispatch?limit=-1&ask=x", None), 400),
        (
            "get",
            get("/api/dispatch?invoke=GOOD_ECHO&body=yo", Some(OWNER)),
            200,
        ),
        (
            "get",
            get(
                &format!("/api/dispatch?invoke=GOOD_ECHO&body=yo&share={tok}"),
                None,
            ),
            200,
        ),
        (
            "get",
            get(
                &format!("/api/dispatch?invoke=GOOD_ECHO&body=123456789&share={tok}"),
                None,
            ),
            413,
        ),
        (
            "get",
            get("/api/dispatch?invoke=GOOD_ECHO&body=yo", None),
            401,
        ),
        (
            "get",
            get(
                "/api/dispatch?invoke=GOOD_ECHO&body=yo&share=cdt1.x.y",
                None,
            ),
            403,
        ),
        (
            "get",
            get("/api/dispatch?invoke=GOOD_ECHO&body=ERR:boom", Some(OWNER)),
            502,
        ),
        (
            "get",
            get("/api/dispatch?invoke=GOOD_ECHO", Some(OWNER)),
            400,
        ),
        ("get", get(&format!("/receipt/{receipt}"), Some(OWNER)), 200),
        ("get", get(&format!("/receipt/{receipt}"), None), 401),
        ("get", get(&format!("/receipt/{receipt}"), Some(&tok)), 403),
        ("get", get("/receipt/inv_none", Some(OWNER)), 404),
        ("get", get("/receipt/bad", Some(OWNER)), 400),
        ("get", get("/metrics", None), 401),
        ("get", get("/metrics", Some(OWNER)), 200),
        ("post", post("{}", Some(OWNER)), 400),
        ("post", post(r#"{"key":"GOOD_ECHO","body":"x"}"#, None), 401),
        (
            "post",
            post(r#"{"key":"GOOD_ECHO","body":"x"}"#, Some("wrong")),
            403,
        ),
        (
            "post",
            post(r#"{"key":"NOPE","body":"x"}"#, Some(OWNER)),
            404,
        ),
        (
            "post",
            post(
                r#"{"key":"GOOD_ECHO","body":"x","repairs":"inv_none"}"#,
                Some(OWNER),
            ),
            409,
        ),
        (
            "post",
            post(
                &json!({"key": "GOOD_ECHO", "body": "a".repeat(300_000)}).to_string(),
                Some(OWNER),
            ),
            413,
        ),
    ];
    for (method, req, want) in cases {
        let path = req.uri().path().to_string();
        let uri = req.uri().to_string();
        let a = send(&state, req).await;
        assert_eq!(a.status.as_u16(), want, "{method} {uri}: {}", a.body);
        conforms(&doc, method, &path, &a);
    }

    let saturated = {
        let ledger = SqliteLedger::open(&dir.path().join("ledger2.sqlite")).expect("ledger");
        let mut s = Settings::new(dir.path().join("site"), Arc::new(ledger));
        s.owner_key = Some(OWNER.into());
        s.max_inflight = 0;
        AppState::new(s).expect("state")
    };
    let a = send(
        &saturated,
        post(r#"{"key":"GOOD_ECHO","body":"x"}"#, Some(OWNER)),
    )
    .await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    conforms(&doc, "post", "/api/dispatch", &a);
}

/// The write API's answers, from a dispatcher that takes writes (`--write direct`, then
/// `propose`): each kind of answer is one the document allows.
#[tokio::test]
async fn the_write_api_answers_as_documented() {
    let doc = capdir::serve::openapi::document("http://127.0.0.1:8080");
    for mode in [capdir::write::Mode::Direct, capdir::write::Mode::Propose] {
        let repo = Repo::new();
        repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
        repo.write(
            "OTHER_ROW.yaml",
            &fn_row("OTHER_ROW", "misc", "Other words."),
        );
        repo.commit("Rows", "2024-01-01T10:00:00Z");
        let dir = tempfile::tempdir().expect("tempdir");
        let ready = capdir::write::Ready::open(
            mode,
            Options::new(repo.catalogue(), dir.path().join("site")),
        )
        .expect("opened");
        let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
        let mut s = Settings::new(dir.path().join("site"), Arc::new(ledger));
        s.owner_key = Some(OWNER.into());
        s.token_key = Some(TokenKey::from_text(TOKEN_KEY).expect("key"));
        s.write = Some(ready);
        let state = AppState::new(s).expect("state");
        let write = |method: &str, uri: &str, ct: &str, body: &str, cred: Option<&str>| {
            let mut r = Request::builder()
                .method(method)
                .uri(uri)
                .header("content-type", ct);
            if let Some(c) = cred {
                r = r.header("x-owner-key", c);
            }
            r.body(Body::from(body.to_string())).expect("request")
        };
        let row = fn_row("NEW_ROW", "text", "A new row.")
            .replace("  - echo my words\n", "  - a brand new row please\n");
        let mut cases: Vec<(&str, Request<Body>, u16)> = vec![
            (
                "put",
                write(
                    "PUT",
                    "/api/directory/NEW_ROW",
                    "application/yaml",
                    &row,
                    Some(OWNER),
                ),
                0,
            ),
            (
                "put",
                write(
                    "PUT",
                    "/api/directory/GOOD_ECHO",
                    "application/yaml",
                    &fixture("good/GOOD_ECHO.yaml"),
                    Some(OWNER),
                ),
                200,
            ),
            (
                "patch",
                write(
                    "PATCH",
                    "/api/directory/GOOD_ECHO",
                    "application/json",
                    r#"{"category": "Bad Cat"}"#,
                    Some(OWNER),
                ),
                422,
            ),
            (
                "patch",
                write(
                    "PATCH",
                    "/api/directory/GOOD_ECHO",
                    "application/json",
                    r#"{"categroy": "x"}"#,
                    Some(OWNER),
                ),
                400,
            ),
            (
                "patch",
                write(
                    "PATCH",
                    "/api/directory/NO_ROW",
                    "application/json",
                    r#"{"seq": 1}"#,
                    Some(OWNER),
                ),
                404,
            ),
            (
                "put",
                write(
                    "PUT",
                    "/api/directory/GOOD_ECHO",
                    "text/html",
                    "x",
                    Some(OWNER),
                ),
                415,
            ),
            (
                "put",
                write(
                    "PUT",
                    "/api/directory/GOOD_ECHO",
                    "application/yaml",
                    "key: [",
                    Some(OWNER),
                ),
                400,
            ),
            (
                "put",
                write(
                    "PUT",
                    "/api/directory/GOOD_ECHO",
                    "application/yaml",
                    "x",
                    None,
                ),
                401,
            ),
            (
                "delete",
                write(
                    "DELETE",
                    "/api/directory/OTHER_ROW?replaced_by=GOOD_ECHO",
                    "application/json",
                    "",
                    Some(OWNER),
                ),
                0,
            ),
        ];
        for (_, _, want) in cases.iter_mut() {
            if *want == 0 {
                *want = if mode == capdir::write::Mode::Direct {
                    201
                } else {
                    202
                };
            }
        }
        for (method, req, want) in cases {
            let (path, uri) = (req.uri().path().to_string(), req.uri().to_string());
            let a = send(&state, req).await;
            assert_eq!(a.status.as_u16(), want, "{method} {uri}: {}", a.body);
            conforms(&doc, method, &path, &a);
        }
    }
}
