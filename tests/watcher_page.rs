//! The approvals page (`/approvals`) in a real browser: Debian's chromium, headless, driven by
//! playwright-core from npm (tests/browser/approvals.mjs). The real `capdir serve` holds a
//! call a low-risk token made to a sensitive row; the page, signed in with the owner key,
//! finds it by itself, then finds a second call queued after it loaded (no reload), and
//! approves the first. The caller's poll then answers the run, the loopback upstream counts
//! one hit, and the second call still waits. Screenshots land in target/screenshots/.

use crate::browser::{manifest, require_browser_tools};
use crate::common::{self, Built, Repo, Served};

use axum::extract::Path;
use axum::routing::get;
use capdir::access::token::TokenKey;
use serde_json::{Value as Json, json};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const OWNER: &str = "watcher-page-owner-key";
const TOKEN_KEY: &str = "watcher-page-test-signing-key-0123456789abcdef";
const KEY: &str = "APPROVED_HIT";

/// A catalogue of one sensitive http row on a loopback upstream that records each path it
/// is asked for.
async fn fixture() -> (Built, Arc<Mutex<Vec<String>>>) {
    let hits = Arc::new(Mutex::new(Vec::new()));
    let seen = hits.clone();
    let upstream = common::serve(axum::Router::new().route(
        "/hit/{x}",
        get(move |Path(x): Path<String>| {
            let seen = seen.clone();
            async move {
                seen.lock().expect("hits").push(x);
                "hit"
            }
        }),
    ))
    .await;
    let repo = Repo::new();
    repo.write(
        &format!("{KEY}.yaml"),
        &format!(
            "key: {KEY}\ntype: http\ntarget: GET http://{upstream}/hit/$1\ncategory: net\nsensitive: true\ninput_schema:\n  type: object\n  properties:\n    x: {{type: string}}\n  required: [x]\ncontent: |\n  # WHAT: One hit on the test upstream, once a person approves it.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
        ),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    (Built::new(repo), hits)
}

/// A low-risk token for the row, for the dispatcher at `audience`.
fn low_token(audience: &str) -> String {
    let claims = common::claims_for(audience, &[KEY]);
    TokenKey::from_text(TOKEN_KEY).expect("key").sign(&claims)
}

/// Call the row as the token; it must wait for a person (202 `PENDING_APPROVAL`).
async fn ask(client: &reqwest::Client, served: &Served, token: &str, body: &str) -> Json {
    let res = client
        .post(served.url("/api/dispatch"))
        .bearer_auth(token)
        .json(&json!({"key": KEY, "body": body}))
        .send()
        .await
        .expect("POST /api/dispatch");
    let status = res.status().as_u16();
    let v: Json = res.json().await.expect("json answer");
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["status"], "PENDING_APPROVAL", "{v}");
    let poll_url = v["poll_url"].as_str().unwrap_or_default();
    assert!(
        poll_url.starts_with(&served.url("/api/approvals/apr_")) && poll_url.ends_with("/result"),
        "{v}"
    );
    v
}

/// The caller's poll of its call (`?wait=` long-polls): the status and the answer.
async fn poll(
    client: &reqwest::Client,
    ticket: &Json,
    token: &str,
    wait: Option<&str>,
) -> (u16, Json) {
    let mut url = ticket["poll_url"].as_str().expect("poll_url").to_string();
    if let Some(w) = wait {
        url.push_str(&format!("?wait={w}"));
    }
    let res = client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("GET poll_url");
    let status = res.status().as_u16();
    (status, res.json().await.expect("json answer"))
}

/// What the page script is told of a call: its id, the row, the arguments the runner takes.
fn shown(ticket: &Json, body: &str) -> String {
    json!({"approval": ticket["approval"], "key": KEY, "arguments": [body]}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvals_page_in_chromium() {
    let chromium = require_browser_tools();
    let (built, hits) = fixture().await;
    let env = [
        ("CAPDIR_OWNER_KEY", OWNER),
        ("CAPDIR_TOKEN_KEY", TOKEN_KEY),
        ("RUST_LOG", "warn"),
    ];
    let served = Served::start(built.dir.path(), &[], &env).await;
    let client = common::client();
    let token = low_token(&served.url(""));
    let first = ask(&client, &served, &token, "alpha").await;

    let shots = manifest().join("target/screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let mut node = tokio::process::Command::new("node")
        .arg("approvals.mjs")
        .current_dir(manifest().join("tests/browser"))
        .env("CAPDIR_SITE_DIR", built.site())
        .env("CAPDIR_SERVED_URL", served.url(""))
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("CAPDIR_CHROMIUM", &chromium)
        .env("CAPDIR_SCREENSHOTS", &shots)
        .env("CAPDIR_FIRST_CALL", shown(&first, "alpha"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node");
    let mut stdin = node.stdin.take().expect("node's stdin");
    let mut stdout = BufReader::new(node.stdout.take().expect("node's stdout")).lines();
    let mut stderr = node.stderr.take().expect("node's stderr");
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });

    // The script says READY once the page shows the first call; then the second is asked.
    let mut said = Vec::new();
    let ready = tokio::time::timeout(Duration::from_secs(45), async {
        while let Ok(Some(line)) = stdout.next_line().await {
            let done = line == "READY";
            said.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    let mut second = None;
    if ready {
        let ticket = ask(&client, &served, &token, "bravo").await;
        assert_eq!(
            *hits.lock().expect("hits"),
            Vec::<String>::new(),
            "a call that waits for a person does not run"
        );
        stdin
            .write_all(format!("{}\n", shown(&ticket, "bravo")).as_bytes())
            .await
            .expect("write to node");
        stdin.flush().await.expect("flush node's stdin");
        second = Some(ticket);
    }
    drop(stdin);
    let finished = tokio::time::timeout(Duration::from_secs(45), async {
        while let Ok(Some(line)) = stdout.next_line().await {
            said.push(line);
        }
        node.wait().await
    })
    .await;
    if finished.is_err() {
        let _ = node.start_kill();
        let _ = node.wait().await;
    }
    let text = format!(
        "stdout:\n{}\nstderr:\n{}",
        said.join("\n"),
        errors.await.unwrap_or_default()
    );
    println!("{text}");
    assert!(
        ready,
        "the page never showed the first pending call:\n{text}"
    );
    let status = match finished {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => panic!("waiting for node: {e}\n{text}"),
        Err(_) => panic!("the browser script did not finish within 45 s:\n{text}"),
    };
    assert!(
        status.success(),
        "the approvals page test failed ({status}):\n{text}"
    );
    // The script got to its end: a script that exits 0 early proves nothing.
    assert!(
        said.iter().any(|l| l == "DONE"),
        "the browser script did not finish its steps:\n{text}"
    );

    // The caller's poll answers the approved run; the upstream saw it once.
    let (code, v) = poll(&client, &first, &token, Some("10s")).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"], "PROVEN_MATERIAL_RESULT", "{v}");
    assert_eq!(v["key"], KEY, "{v}");
    assert!(
        v["output"].as_str().is_some_and(|o| o.contains("hit")),
        "{v}"
    );
    assert_eq!(*hits.lock().expect("hits"), ["alpha"]);
    // The second call still waits for a person.
    let second = second.expect("the second call");
    let (code, v) = poll(&client, &second, &token, None).await;
    assert_eq!(code, 202, "{v}");
    assert_eq!(v["status"], "PENDING_APPROVAL", "{v}");
    assert_eq!(v["approval"], second["approval"], "{v}");
}
