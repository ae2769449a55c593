//! The dispatcher in-process (`app(state).oneshot`): every endpoint and every error code, the
//! receipts it writes, one test over a real loopback socket, and live reload under load.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use capdir::ledger::{self, SqliteLedger, Verdict};
use capdir::serve::{AppState, Settings, app};
use common::{Repo, fixture, fn_row};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;

const OWNER: &str = "test-owner-key-123";

type Fixture = common::Built;

/// A catalogue with an echo row and a removed row (so a tombstone), built into a site.
fn fixture_site() -> Fixture {
    let repo = Repo::new();
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.write("OLD_ROW.yaml", &fn_row("OLD_ROW", "text", "An old echo."));
    repo.commit("Add echo and an old row", "2024-01-01T10:00:00Z");
    repo.remove("OLD_ROW.yaml");
    repo.commit(
        "Remove OLD_ROW\n\nReplaced-by: GOOD_ECHO",
        "2024-02-01T10:00:00Z",
    );
    Fixture::new(repo)
}

fn settings(f: &Fixture) -> Settings {
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    Settings {
        owner_key: Some(OWNER.into()),
        ..Settings::new(f.site(), Arc::new(ledger))
    }
}

fn state(f: &Fixture) -> AppState {
    AppState::new(settings(f)).expect("state")
}

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, String) {
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn get(state: &AppState, uri: &str) -> (StatusCode, String) {
    send(
        state,
        Request::get(uri).body(Body::empty()).expect("request"),
    )
    .await
}

fn post_req(body: &str, key: Option<&str>) -> Request<Body> {
    let mut b = Request::post("/api/dispatch").header("content-type", "application/json");
    if let Some(k) = key {
        b = b.header("x-owner-key", k);
    }
    b.body(Body::from(body.to_string())).expect("request")
}

async fn post(state: &AppState, body: Json) -> (StatusCode, Json) {
    let (s, text) = send(state, post_req(&body.to_string(), Some(OWNER))).await;
    (s, serde_json::from_str(&text).expect("json answer"))
}

fn error_code(text: &str) -> String {
    let v: Json = serde_json::from_str(text).expect("json error");
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(v["error"]["how_to_fix"].is_string(), "{v}");
    v["error"]["code"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn ask_contract_map_registry_and_site() {
    let f = fixture_site();
    let s = state(&f);

    let (st, text) = get(&s, "/api/dispatch?ask=repeat%20my%20text%20back").await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["best"]["key"], "GOOD_ECHO");

    let (st, text) = get(&s, "/api/dispatch?key=GOOD_ECHO&format=markdown").await;
    assert_eq!(st, StatusCode::OK);
    assert!(text.contains("GOOD_ECHO"), "{text}");
    let (st, text) = get(&s, "/api/dispatch?key=GOOD_ECHO&format=json").await;
    assert_eq!(st, StatusCode::OK);
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["key"], "GOOD_ECHO");

    let (st, text) = get(&s, "/api/dispatch?key=GOOD_ECH&format=json").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&text), "unknown_key");
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["did_you_mean"][0], "GOOD_ECHO");

    let (st, text) = get(&s, "/api/dispatch?key=OLD_ROW&format=json").await;
    assert_eq!(st, StatusCode::GONE, "{text}");
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["removed"], true);
    assert_eq!(v["replaced_by"], "GOOD_ECHO");

    let (st, text) = get(&s, "/api/dispatch?key=GOOD_ECHO&format=pdf").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&text), "bad_format");

    let (st, text) = get(&s, "/api/dispatch?map=1").await;
    assert_eq!(st, StatusCode::OK);
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["counts"]["rows"]["value"], 1);
    assert_eq!(v["counts"]["enabled"]["value"], 1);
    assert!(v["counts"]["registry"]["value"].is_number());
    assert!(v["counts"]["mcp"]["value"].is_number());

    let (st, text) = get(&s, "/api/dispatch?registry=1").await;
    assert_eq!(st, StatusCode::OK);
    let v: Json = serde_json::from_str(&text).expect("json");
    assert!(v["rows"].is_array());

    // Nothing asked: a guide to what can be asked.
    let (st, text) = get(&s, "/api/dispatch").await;
    assert_eq!(st, StatusCode::OK);
    let v: Json = serde_json::from_str(&text).expect("json");
    assert!(
        v["forms"]["ask"]
            .as_str()
            .is_some_and(|a| a.contains("?ask=")),
        "{v}"
    );
    // Every parameter is checked, whichever form is answered.
    let (st, text) = get(&s, "/api/dispatch?map=1&format=pdf").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&text), "bad_format");
    let (st, text) = get(&s, "/api/dispatch?ask=x&confirm=nope").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&text), "bad_receipt_id");
    let (st, text) = get(&s, "/api/dispatch?ask=x&limit=101").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&text), "bad_query");

    let (st, text) = get(&s, "/").await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        text.contains("<html") || text.contains("<!doctype"),
        "{text}"
    );
    let (st, _) = get(&s, "/llms.txt").await;
    assert_eq!(st, StatusCode::OK);
    for path in [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/catalogue.sqlite",
    ] {
        let (st, text) = get(&s, path).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(error_code(&text), "not_found");
    }
}

#[tokio::test]
async fn invoke_writes_a_receipt_that_confirms() {
    let f = fixture_site();
    let s = state(&f);
    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": "hello"})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["output"], "hello");
    assert_eq!(v["status"], "PROVEN_MATERIAL_RESULT");
    let id = v["receipt"].as_str().expect("receipt id").to_string();
    assert!(id.starts_with("inv_"));

    let (st, text) = get(&s, &format!("/api/dispatch?confirm={id}")).await;
    assert_eq!(st, StatusCode::OK);
    let c: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(c["confirmed"], true);
    assert_eq!(c["key"], "GOOD_ECHO");
    assert_eq!(c["input_sha256"], ledger::sha256_hex("hello"));
    assert!(c.get("output").is_none(), "fingerprints only: {c}");
    assert!(!text.contains("hello"), "{text}");

    let (st, text) = get(&s, &format!("/receipt/{id}")).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&text), "unauthorized");
    let req = |auth: &str| {
        Request::get(format!("/receipt/{id}"))
            .header("authorization", auth)
            .body(Body::empty())
            .expect("request")
    };
    let (st, text) = send(&s, req("Bearer wrong")).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert_eq!(error_code(&text), "forbidden");
    let (st, text) = send(&s, req(&format!("Bearer {OWNER}"))).await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let r: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(r["output"], "hello");
    assert_eq!(r["seq"], 1);
    assert_eq!(r["prev_hash"], ledger::GENESIS);
    assert_eq!(r["hash"], c["hash"]);
    assert_eq!(r["runner"], "fn");
    assert_eq!(r["actor"], "owner");
    let commit = r["catalogue_commit"].as_str().expect("commit");
    assert_eq!(commit.len(), 40, "{commit}");
    let html = Request::get(format!("/receipt/{id}"))
        .header("x-owner-key", OWNER)
        .header("accept", "text/html")
        .body(Body::empty())
        .expect("request");
    let (st, text) = send(&s, html).await;
    assert_eq!(st, StatusCode::OK);
    assert!(text.starts_with("<!doctype html>"), "{text}");

    let (st, text) = get(&s, "/api/dispatch?confirm=inv_doesnotexist").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&text), "unknown_receipt");
    let (st, text) = get(&s, "/api/dispatch?confirm=../../x").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&text), "bad_receipt_id");

    let (st, _) = get(&s, "/metrics").await;
    assert_eq!(
        st,
        StatusCode::UNAUTHORIZED,
        "the counts are the owner's to read"
    );
    let (st, text) = send(
        &s,
        Request::get("/metrics")
            .header("x-owner-key", OWNER)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        text.contains(
            "capdir_invocations_total{status=\"PROVEN_MATERIAL_RESULT\",runner=\"fn\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("capdir_ledger_commit_seconds_count 1"),
        "{text}"
    );
    assert!(text.contains("capdir_requests_total"), "{text}");
    // The call's duration, in the histogram of its status and runner: counted once, in
    // every bucket from the one it fell in (a builtin takes far less than 16 s).
    let series = "capdir_invocation_duration_seconds";
    let labels = "status=\"PROVEN_MATERIAL_RESULT\",runner=\"fn\"";
    assert!(
        text.contains(&format!("{series}_count{{{labels}}} 1\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{series}_bucket{{le=\"16.384\",{labels}}} 1\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{series}_bucket{{le=\"+Inf\",{labels}}} 1\n")),
        "{text}"
    );
    assert!(
        text.contains("# TYPE capdir_invocation_duration_seconds histogram"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert_eq!(
        ledger::verify(&f.ledger_path()).expect("verify"),
        Verdict::Intact { receipts: 1 }
    );
}

#[tokio::test]
async fn invoke_errors_have_codes_and_statuses() {
    let f = fixture_site();
    let s = state(&f);
    let body = json!({"key": "GOOD_ECHO", "body": "x"}).to_string();

    let (st, text) = send(&s, post_req(&body, None)).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&text), "unauthorized");
    let (st, text) = send(&s, post_req(&body, Some("not-the-key"))).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert_eq!(error_code(&text), "forbidden");

    for bad in [
        "not json",
        r#"{"body": "x"}"#,
        r#"{"key": "GOOD_ECHO", "bogus": 1}"#,
    ] {
        let (st, text) = send(&s, post_req(bad, Some(OWNER))).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(error_code(&text), "bad_body");
    }
    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": "x", "args": {}})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["code"], "bad_body");

    let big = json!({"key": "GOOD_ECHO", "body": "a".repeat(300 * 1024)}).to_string();
    let (st, text) = send(&s, post_req(&big, Some(OWNER))).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&text), "body_too_large");

    let (st, v) = post(&s, json!({"key": "GOOD_ECH", "body": "x"})).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], "unknown_key");
    assert_eq!(v["did_you_mean"][0], "GOOD_ECHO");

    // Too few arguments: refused before any runner, with a receipt all the same.
    let (st, v) = post(&s, json!({"key": "GOOD_ECHO"})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["code"], "refused");
    assert_eq!(v["status"], "REFUSED");
    assert!(v["receipt"].as_str().is_some_and(|r| r.starts_with("inv_")));

    // A row that ran and failed: 502, with the receipt to repair.
    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": "ERR:boom"})).await;
    assert_eq!(st, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(v["error"]["code"], "upstream_failed");
    assert_eq!(v["status"], "FAILED");
    let failed = v["receipt"].as_str().expect("receipt").to_string();

    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": "ok"})).await;
    assert_eq!(st, StatusCode::OK);
    let good = v["receipt"].as_str().expect("receipt").to_string();

    let (st, v) = post(
        &s,
        json!({"key": "GOOD_ECHO", "body": "again", "repairs": good}),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT);
    assert_eq!(v["error"]["code"], "repairs_not_failed");
    let (st, v) = post(
        &s,
        json!({"key": "GOOD_ECHO", "body": "again", "repairs": "inv_nosuchreceipt"}),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT);
    assert_eq!(v["error"]["code"], "repairs_unknown");
    let (st, v) = post(
        &s,
        json!({"key": "GOOD_ECHO", "body": "fixed", "repairs": failed}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let repaired = ledger::get(&f.ledger_path(), v["receipt"].as_str().expect("id"))
        .expect("read")
        .expect("found");
    assert_eq!(repaired.draft.repairs.as_deref(), Some(failed.as_str()));

    // Receipts keep no credentials.
    let secret = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z";
    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": secret})).await;
    assert_eq!(st, StatusCode::OK);
    let stored = ledger::get(&f.ledger_path(), v["receipt"].as_str().expect("id"))
        .expect("read")
        .expect("found");
    assert!(!stored.draft.input.contains(secret), "{:?}", stored.draft);
    assert!(!stored.draft.output.contains(secret), "{:?}", stored.draft);

    assert!(matches!(
        ledger::verify(&f.ledger_path()).expect("verify"),
        Verdict::Intact { receipts: 5 }
    ));
}

#[tokio::test]
async fn saturated_dispatcher_answers_503() {
    let f = fixture_site();
    let s = AppState::new(Settings {
        max_inflight: 0,
        ..settings(&f)
    })
    .expect("state");
    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": "x"})).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"]["code"], "saturated");
}

#[tokio::test]
async fn real_socket() {
    let f = fixture_site();
    let s = state(&f);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app(s)).await });
    let client = crate::common::client();
    let res = client
        .post(format!("http://{addr}/api/dispatch"))
        .header("authorization", format!("Bearer {OWNER}"))
        .json(&json!({"key": "GOOD_ECHO", "body": "over the wire"}))
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-capdir-receipt"));
    let v: Json = res.json().await.expect("json");
    assert_eq!(v["output"], "over the wire");
    server.abort();
}

fn add_row_and_rebuild(f: &Fixture, key: &str) {
    f.repo.write(
        &format!("{key}.yaml"),
        &fn_row(key, "text", "A row added while serving."),
    );
    f.repo.commit(&format!("Add {key}"), "2024-03-01T10:00:00Z");
    f.build();
}

/// Eight clients at once ask, invoke and read contracts while a new build goes live: none
/// fails, the load spans the swap (answers come from both builds), and every invocation left
/// its receipt in an intact chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_reload_under_load_drops_nothing() {
    const CLIENTS: usize = 8;
    let f = fixture_site();
    let s = state(&f);
    s.spawn_reloader(Duration::from_millis(50));
    let first_commit = s.live().info.commit.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (s, stop) = (s.clone(), stop.clone());
            tokio::spawn(async move {
                let mut commits = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (st, text) = get(&s, "/api/dispatch?ask=repeat%20my%20text").await;
                    assert_eq!(st, StatusCode::OK, "{text}");
                    let (st, v) = post(&s, json!({"key": "GOOD_ECHO", "body": "hi"})).await;
                    assert_eq!(st, StatusCode::OK, "{v}");
                    commits.push(v["catalogue_commit"].as_str().expect("commit").to_string());
                    let (st, text) = get(&s, "/api/dispatch?key=GOOD_ECHO&format=json").await;
                    assert_eq!(st, StatusCode::OK, "{text}");
                }
                commits
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let f = tokio::task::spawn_blocking(move || {
        add_row_and_rebuild(&f, "NEW_ECHO");
        f
    })
    .await
    .expect("build");
    let built = Instant::now();
    let new_commit = loop {
        let (st, v) = post(&s, json!({"key": "NEW_ECHO", "body": "fresh"})).await;
        if st == StatusCode::OK {
            assert_eq!(v["output"], "fresh");
            assert_ne!(v["catalogue_commit"], first_commit);
            break v["catalogue_commit"].as_str().expect("commit").to_string();
        }
        assert_eq!(v["error"]["code"], "unknown_key");
        assert!(
            built.elapsed() < Duration::from_secs(1),
            "the new row did not answer within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Some load after the swap too.
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut invoked = 1; // NEW_ECHO's
    let mut seen = std::collections::BTreeSet::new();
    for client in load {
        let commits = client.await.expect("no request failed");
        assert!(!commits.is_empty(), "every client ran");
        invoked += commits.len() as u64;
        seen.extend(commits);
    }
    assert!(
        seen.contains(&first_commit) && seen.contains(&new_commit),
        "the load did not span the swap: {seen:?}"
    );
    assert_eq!(
        ledger::verify(&f.ledger_path()).expect("verify"),
        Verdict::Intact { receipts: invoked },
        "one receipt for each invocation"
    );
}

/// `?registry=1&category=C` keeps one category's rows; every candidate of an ask carries the
/// run-now link of its own example, not only the best one.
#[tokio::test]
async fn registry_by_category_and_run_now_links_for_every_candidate() {
    let repo = Repo::new();
    for (key, category) in [
        ("ROW_ALPHA", "text"),
        ("ROW_BETA", "text"),
        ("ROW_GAMMA", "crypto"),
    ] {
        repo.write(
            &format!("{key}.yaml"),
            &fn_row(key, category, "Returns the words it is given, for a demo."),
        );
    }
    // `seq` pins a row's place in listings, ahead of the rows listed by key.
    repo.write(
        "ROW_ZETA.yaml",
        &format!(
            "{}seq: 1\n",
            fn_row(
                "ROW_ZETA",
                "text",
                "Returns the words it is given, pinned first."
            )
        ),
    );
    repo.commit("four rows", "2024-01-01T10:00:00Z");
    let f = Fixture::new(repo);
    let page = std::fs::read_to_string(f.site().join("c/text.html")).expect("category page");
    let at = |k: &str| page.find(k).expect(k);
    assert!(at("ROW_ZETA") < at("ROW_ALPHA") && at("ROW_ALPHA") < at("ROW_BETA"));
    let s = state(&f);

    let (st, text) = get(&s, "/api/dispatch?registry=1&category=text").await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let v: Json = serde_json::from_str(&text).expect("json");
    let keys: Vec<&str> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["ROW_ZETA", "ROW_ALPHA", "ROW_BETA"]);
    assert_eq!(v["category"], "text");
    let (_, text) = get(&s, "/api/dispatch?registry=1&category=nothing-here").await;
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(0));
    for bad in [
        "/api/dispatch?registry=1&category=Not%20Ok",
        "/api/dispatch?registry=1&category=",
    ] {
        let (st, text) = get(&s, bad).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}: {text}");
        assert_eq!(error_code(&text), "bad_query");
    }

    let (st, text) = get(&s, "/api/dispatch?ask=words+given+for+a+demo").await;
    assert_eq!(st, StatusCode::OK);
    let v: Json = serde_json::from_str(&text).expect("json");
    let candidates = v["candidates"].as_array().expect("candidates");
    assert_eq!(candidates.len(), 4, "{v}");
    for c in candidates {
        let key = c["key"].as_str().expect("key");
        assert_eq!(
            c["run_now_url"],
            format!("http://127.0.0.1:8080/api/dispatch?invoke={key}&body=hi"),
            "{c}"
        );
    }
    assert_eq!(v["best"]["run_now_url"], candidates[0]["run_now_url"]);
}
