//! Every step of a composition under the caller's authority (issue: "every step of a flow or an
//! agent under the caller's authority"): a flow's steps pass the caller's gate one by one, each
//! with a receipt of its own below the flow's, and a pinned token sees a change anywhere in
//! what a row composes. The upstream counts its hits, so "never ran" is measured.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use capdir::access::token::{self, Claims, Risk, TokenKey};
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use common::{Built, Repo};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::ServiceExt;

const OWNER: &str = "composition-test-owner-key";
const TOKEN_KEY: &str = "composition-test-signing-key-0123456789abcdef";
const BASE: &str = "http://127.0.0.1:8080";

async fn upstream() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = axum::Router::new().route(
        "/hit/{x}",
        axum::routing::get(move |axum::extract::Path(x): axum::extract::Path<String>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                format!("hit {x}")
            }
        }),
    );
    (common::serve(router).await, hits)
}

fn fn_row(key: &str, target: &str) -> String {
    format!(
        "key: {key}\ntype: fn\ntarget: {target}\ncategory: text\ncontent: |\n  # WHAT: {key} for the composition tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n"
    )
}

fn http_row(key: &str, addr: std::net::SocketAddr, sensitive: bool) -> String {
    let schema = if sensitive {
        "sensitive: true\ninput_schema:\n  type: object\n  properties:\n    x: {type: string}\n  required: [x]\n"
    } else {
        ""
    };
    format!(
        "key: {key}\ntype: http\ntarget: GET http://{addr}/hit/$1\nauth: bearer:COMPOSITION_TEST_CREDENTIAL\ncategory: net\n{schema}content: |\n  # WHAT: {key}: one hit on the test upstream, with a credential.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: HTTP 200 with text\n"
    )
}

fn flow_row(key: &str, steps: &str, sensitive: bool) -> String {
    let schema = if sensitive {
        "sensitive: true\ninput_schema:\n  type: object\n  properties:\n    x: {type: string}\n  required: [x]\n"
    } else {
        ""
    };
    format!(
        "key: {key}\ntype: flow\ncategory: flows\n{schema}content: |\n  # WHAT: {key}, a flow for the composition tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n  {steps}\n"
    )
}

fn agent_rows(block: &str) -> [(String, String); 2] {
    [
        (
            "PB_TEST_BLOCK".into(),
            format!(
                "key: PB_TEST_BLOCK\ntype: agent\ntarget: gw:openai/gpt-4o-mini\ncategory: agents\nplanner_visible: false\ncontent: |\n  # WHAT: Prompt block for the tests.\n  # WHEN_TO_USE: Included by agent rows.\n  # ARGS: none\n  # EX: (included by agent rows)\n  # OUTPUT: none\n  {block}\n"
            ),
        ),
        (
            "TEST_AGENT".into(),
            "key: TEST_AGENT\ntype: agent\ntarget: gw:openai/gpt-4o-mini\ncategory: agents\nincludes: [PB_TEST_BLOCK]\ncontent: |\n  # WHAT: Answers briefly, for the tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: why?\n  # OUTPUT: text\n  You answer briefly.\n".into(),
        ),
    ]
}

async fn fixture() -> (Built, Arc<AtomicUsize>) {
    let (addr, hits) = upstream().await;
    let repo = Repo::new();
    repo.write("UPPER_STEP.yaml", &fn_row("UPPER_STEP", "upper"));
    repo.write("ECHO_STEP.yaml", &fn_row("ECHO_STEP", "echo"));
    repo.write("CRED_HIT.yaml", &http_row("CRED_HIT", addr, false));
    repo.write(
        "bindings.yaml",
        &common::bindings_yaml(&[("COMPOSITION_TEST_CREDENTIAL", &format!("http://{addr}"))]),
    );
    repo.write("SECRET_HIT.yaml", &http_row("SECRET_HIT", addr, true));
    repo.write(
        "OPEN_FLOW.yaml",
        &flow_row(
            "OPEN_FLOW",
            "UPPER_STEP: $1 > CRED_HIT: $PREV > ECHO_STEP: $PREV",
            false,
        ),
    );
    repo.write(
        "SENSITIVE_FLOW.yaml",
        &flow_row(
            "SENSITIVE_FLOW",
            "UPPER_STEP: $1 > SECRET_HIT: $PREV > ECHO_STEP: $PREV",
            true,
        ),
    );
    for (key, text) in agent_rows("Use short sentences.") {
        repo.write(&format!("{key}.yaml"), &text);
    }
    repo.commit("rows", "2024-01-01T00:00:00Z");
    (Built::new(repo), hits)
}

fn state(f: &Built, open: bool) -> AppState {
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.token_key = Some(TokenKey::from_text(TOKEN_KEY).expect("key"));
    s.base_url = BASE.into();
    s.open = open;
    s.config.egress = capdir::invoke::egress::Egress::loopback();
    s.config.env = capdir::invoke::runner::Environment::fixed([(
        "COMPOSITION_TEST_CREDENTIAL",
        "composition-upstream-credential",
    )]);
    // Agent rows reach no model: without a gateway they fail `agent:no_gateway`.
    s.config.agent.gateway = None;
    AppState::new(s).expect("state")
}

fn token(keys: &[&str], risk: Risk, pin: Option<String>) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        id: token::new_id(),
        iat: now,
        exp: now + 600,
        aud: BASE.into(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        categories: vec![],
        write: vec![],
        risk,
        pin,
        body: None,
        max_payload: None,
        credentials: vec![],
        watch: Default::default(),
        parent: None,
    };
    TokenKey::from_text(TOKEN_KEY).expect("key").sign(&claims)
}

async fn invoke(
    state: &AppState,
    credential: Option<&str>,
    key: &str,
    body: &str,
) -> (StatusCode, Json) {
    let mut r = Request::post("/api/dispatch").header("content-type", "application/json");
    if let Some(c) = credential {
        r = r.header("authorization", format!("Bearer {c}"));
    }
    let req = r
        .body(Body::from(json!({"key": key, "body": body}).to_string()))
        .expect("request");
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).expect("json"))
}

#[tokio::test]
async fn an_anonymous_flow_stops_at_the_step_that_uses_a_credential() {
    let (f, hits) = fixture().await;
    let s = state(&f, true);
    let (status, v) = invoke(&s, None, "OPEN_FLOW", "hi").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("ERR:flow:step_refused:CRED_HIT:anonymous:the row uses a credential"),
        "{message}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the refused step never ran");
    let all = f.receipts();
    let keys: Vec<(&str, &str)> = all
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    // The first step ran and has its receipt, the refused one has a REFUSED receipt, the
    // third never ran; the flow's own receipt comes last.
    assert_eq!(
        keys,
        [
            ("UPPER_STEP", "PROVEN_MATERIAL_RESULT"),
            ("CRED_HIT", "REFUSED"),
            ("OPEN_FLOW", "FAILED"),
        ]
    );
    let top = &all[2];
    assert_eq!(top["id"], v["receipt"]);
    assert!(top.get("parent").is_none());
    for child in &all[..2] {
        assert_eq!(child["parent"], top["id"]);
        assert_eq!(child["root"], top["id"]);
        assert_eq!(child["trace_id"], top["trace_id"]);
        assert_eq!(child["actor"], "anonymous");
    }
    assert_eq!(all[1]["error_code"], "anonymous");
    assert_eq!(all[0]["output"], "HI");
}

#[tokio::test]
async fn a_token_for_a_flow_runs_its_steps_each_with_a_receipt_but_not_above_its_ceiling() {
    let (f, hits) = fixture().await;
    let s = state(&f, false);
    // Scoped to the flow alone: the steps it names are covered, the risk ceiling is not lifted;
    // the call waits for a person instead (tests/watcher.rs decides such calls).
    let low = token(&["SENSITIVE_FLOW"], Risk::Low, None);
    let (status, v) = invoke(&s, Some(&low), "SENSITIVE_FLOW", "hi").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["status"], "PENDING_APPROVAL", "{v}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    let high = token(&["SENSITIVE_FLOW"], Risk::High, None);
    let (status, v) = invoke(&s, Some(&high), "SENSITIVE_FLOW", "hi").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["output"], "HTTP 200:hit HI");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let all = f.receipts();
    let tree: Vec<&Json> = all
        .iter()
        .filter(|r| r["root"] == v["receipt"] || r["id"] == v["receipt"])
        .collect();
    let keys: Vec<&str> = tree.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["UPPER_STEP", "SECRET_HIT", "ECHO_STEP", "SENSITIVE_FLOW"]
    );
    assert!(tree[..3].iter().all(|r| r["parent"] == v["receipt"]));
    // The credential the step used is in no receipt.
    assert!(
        !serde_json::to_string(&all)
            .unwrap()
            .contains("composition-upstream-credential")
    );
    // The flow's full receipt shows the calls it made; each step's names its caller.
    let top = v["receipt"].as_str().unwrap();
    let req = Request::get(format!("/receipt/{top}"))
        .header("x-owner-key", OWNER)
        .body(Body::empty())
        .unwrap();
    let res = app(s.clone()).oneshot(req).await.expect("receipt");
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    let full: Json = serde_json::from_slice(&bytes).expect("json");
    let children: Vec<&str> = full["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(children, ["UPPER_STEP", "SECRET_HIT", "ECHO_STEP"]);
    let req = Request::get(format!("/receipt/{top}"))
        .header("x-owner-key", OWNER)
        .header("accept", "text/html")
        .body(Body::empty())
        .unwrap();
    let res = app(s.clone()).oneshot(req).await.expect("page");
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    let page = String::from_utf8_lossy(&bytes);
    assert!(page.contains("Calls it made"), "{page}");
    for r in &tree[..3] {
        assert!(page.contains(&format!("href=\"{}\"", r["id"].as_str().unwrap())));
    }
    // The steps' receipts confirm keylessly like any other.
    let id = tree[1]["id"].as_str().unwrap();
    let req = Request::get(format!("/api/dispatch?confirm={id}"))
        .body(Body::empty())
        .unwrap();
    let res = app(s.clone()).oneshot(req).await.expect("confirm");
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_pinned_token_sees_a_changed_prompt_block_as_a_changed_contract() {
    let (f, _) = fixture().await;
    let s = state(&f, false);
    let pin = s
        .live()
        .invoker
        .rows()
        .get("TEST_AGENT")
        .expect("agent")
        .fingerprint
        .clone();
    let pinned = token(&["TEST_AGENT"], Risk::Low, Some(pin.clone()));
    let (status, v) = invoke(&s, Some(&pinned), "TEST_AGENT", "why?").await;
    assert_ne!(status, StatusCode::CONFLICT, "{v}");

    // Only the included block changes; the agent row itself is untouched.
    for (key, text) in agent_rows("Use long, winding sentences.") {
        if key == "PB_TEST_BLOCK" {
            f.repo.write(&format!("{key}.yaml"), &text);
        }
    }
    f.repo.commit("a new house style", "2024-01-02T00:00:00Z");
    f.build();
    assert!(s.reload_if_changed());
    let now = s
        .live()
        .invoker
        .rows()
        .get("TEST_AGENT")
        .unwrap()
        .fingerprint
        .clone();
    assert_ne!(now, pin, "the agent's fingerprint covers its block");
    let (status, v) = invoke(&s, Some(&pinned), "TEST_AGENT", "why?").await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["code"], "contract_changed");
}

#[tokio::test]
async fn router_tags_run_in_order_each_through_the_gate_and_their_output_is_never_run() {
    let (f, hits) = fixture().await;
    let s = state(&f, false);
    let scoped = token(&["UPPER_STEP", "ECHO_STEP"], Risk::Low, None);
    let text = "Loud: [UPPER_STEP]hi[/UPPER_STEP]. Secret: [SECRET_HIT]x[/SECRET_HIT]. \
                Echoed: [ECHO_STEP][UPPER_STEP]not run[/UPPER_STEP][/ECHO_STEP]. [NOPE]open";
    let req = Request::post("/api/route")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {scoped}"))
        .body(Body::from(json!({"text": text}).to_string()))
        .unwrap();
    let res = app(s.clone()).oneshot(req).await.expect("route");
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    let v: Json = serde_json::from_slice(&bytes).expect("json");
    let routed = v["text"].as_str().expect("text");
    assert!(
        routed.starts_with("Loud: HI. Secret: ERR:scope:"),
        "{routed}"
    );
    assert!(
        routed.ends_with("Echoed: [UPPER_STEP]not run[/UPPER_STEP]. [NOPE]open"),
        "a tag's output is never run: {routed}"
    );
    let tags = v["tags"].as_array().expect("tags");
    let got: Vec<(&str, &str)> = tags
        .iter()
        .map(|t| (t["key"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("UPPER_STEP", "PROVEN_MATERIAL_RESULT"),
            ("SECRET_HIT", "REFUSED"),
            ("ECHO_STEP", "PROVEN_MATERIAL_RESULT"),
        ]
    );
    assert_eq!(tags[1]["error"], "scope");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the refused tag never ran");
    // Each tag has its receipt in the ledger, in the order the tags ran.
    let all = f.receipts();
    let ids: Vec<&Json> = all.iter().map(|r| &r["id"]).collect();
    for t in tags {
        assert!(ids.contains(&&t["receipt"]), "{t}");
    }
    assert_eq!(all.len(), 3);

    // Without a credential on a closed dispatcher: 401 before anything runs.
    let req = Request::post("/api/route")
        .header("content-type", "application/json")
        .body(Body::from(json!({"text": text}).to_string()))
        .unwrap();
    let res = app(s.clone()).oneshot(req).await.expect("route");
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(f.receipts().len(), 3);

    // The command line, as the local owner, on the same site and ledger.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args([
            "route",
            "[UPPER_STEP]from the shell[/UPPER_STEP] [NOPE_X]y[/NOPE_X]",
        ])
        .arg("--site")
        .arg(f.site())
        .arg("--ledger")
        .arg(format!("sqlite:{}", f.ledger_path().display()))
        .arg("--data")
        .arg(f.dir.path().join("data"))
        .output()
        .expect("capdir route");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a tag did not succeed: {printed}"
    );
    assert!(
        printed.starts_with("FROM THE SHELL ERR:unknown_key:no row has the key `NOPE_X`"),
        "{printed}"
    );
    assert_eq!(f.receipts().len(), 4, "the shell's tag has its receipt too");
}

/// The receipt of a step that reached outside (an http call) is in the ledger before the flow
/// ends, with the builtin step held before it, so a dispatcher that died mid-flow would still
/// show the side effect; the flow's own receipt follows, after every step, when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_side_effect_is_receipted_before_the_flow_ends() {
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let router = axum::Router::new()
        .route(
            "/hit/{x}",
            axum::routing::get(|| async { "hit".to_string() }),
        )
        .route(
            "/wait/{x}",
            axum::routing::get(move || {
                let (entered_tx, gate) = (entered_tx.clone(), gate.clone());
                async move {
                    let _ = entered_tx.send(());
                    gate.notified().await;
                    "released".to_string()
                }
            }),
        );
    let addr = common::serve(router).await;
    let repo = Repo::new();
    repo.write("UPPER_STEP.yaml", &fn_row("UPPER_STEP", "upper"));
    repo.write("CRED_HIT.yaml", &http_row("CRED_HIT", addr, false));
    repo.write(
        "bindings.yaml",
        &common::bindings_yaml(&[("COMPOSITION_TEST_CREDENTIAL", &format!("http://{addr}"))]),
    );
    repo.write(
        "WAIT_HIT.yaml",
        &http_row("WAIT_HIT", addr, false).replace("/hit/", "/wait/"),
    );
    repo.write(
        "SLOW_FLOW.yaml",
        &flow_row(
            "SLOW_FLOW",
            "UPPER_STEP: $1 > CRED_HIT: $PREV > WAIT_HIT: $PREV",
            false,
        ),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Built::new(repo);
    let s = state(&f, false);

    let running = tokio::spawn({
        let s = s.clone();
        async move { invoke(&s, Some(OWNER), "SLOW_FLOW", "a").await }
    });
    // The flow is now waiting in its third step.
    tokio::time::timeout(std::time::Duration::from_secs(10), entered.recv())
        .await
        .expect("the third step reached its upstream");
    let keys = |f: &Built| -> Vec<String> {
        f.receipts()
            .iter()
            .map(|r| r["key"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while keys(&f).len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        keys(&f),
        ["UPPER_STEP", "CRED_HIT"],
        "the http step and the builtin before it are durable while the flow still runs"
    );
    release.notify_one();
    let (status, answer) = running.await.expect("flow task");
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        keys(&f),
        ["UPPER_STEP", "CRED_HIT", "WAIT_HIT", "SLOW_FLOW"],
        "the tree in the order its calls ended"
    );
    let all = f.receipts();
    let flow_id = all[3]["id"].as_str().expect("flow id");
    assert_eq!(answer["receipt"].as_str(), Some(flow_id));
    for step in &all[..3] {
        assert_eq!(step["root"].as_str(), Some(flow_id), "{step}");
    }
}
