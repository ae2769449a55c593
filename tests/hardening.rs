//! What a caller on each path could make the dispatcher do, and its refusal (the hardening
//! issue): a call tree past its budget, router tags in a model's reply outside the caller's
//! scope, `--open` spending the operator's model key, a revoked or expired token reading its
//! receipts, MCP sessions taken over or evicted by others, `/metrics` without the owner key,
//! keyless confirms without limit. The upstream and the model stand-in count what reached
//! them, so "never ran" is measured.

use crate::common;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use capdir::access::token::{Claims, Risk, TokenKey};
use capdir::dispatch::TreeBudget;
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use common::{Built, Repo};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::ServiceExt;

const OWNER: &str = "hardening-test-owner-key";
const TOKEN_KEY: &str = "hardening-test-signing-key-0123456789abcdef";
const BASE: &str = "http://127.0.0.1:8080";

fn fn_row(key: &str, target: &str, category: &str) -> String {
    format!(
        "key: {key}\ntype: fn\ntarget: {target}\ncategory: {category}\ncontent: |\n  # WHAT: {key} for the hardening tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n"
    )
}

fn flow_row(key: &str, steps: &str) -> String {
    format!(
        "key: {key}\ntype: flow\ncategory: flows\ncontent: |\n  # WHAT: {key}, a flow for the hardening tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n  {steps}\n"
    )
}

const SCHEMA: &str =
    "input_schema:\n  type: object\n  properties:\n    x: {type: string}\n  required: [x]\n";

/// What reached the loopback upstream and the model stand-in.
struct Seen {
    upstream: Arc<AtomicUsize>,
    model: Arc<AtomicUsize>,
}

/// A catalogue with flows that multiply, a sensitive http row, an agent whose reply is routed
/// (the stand-in model always answers `reply`) and an agent that calls the model plainly.
async fn fixture(reply: &str) -> (Built, Seen, String) {
    let upstream_hits = Arc::new(AtomicUsize::new(0));
    let counter = upstream_hits.clone();
    let upstream = common::serve(axum::Router::new().route(
        "/hit/{x}",
        get(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "hit"
            }
        }),
    ))
    .await;
    let (model, model_hits) = common::model_stand_in(reply).await;
    let repo = Repo::new();
    repo.write("ECHO_STEP.yaml", &fn_row("ECHO_STEP", "echo", "text"));
    repo.write("SHA_TOOL.yaml", &fn_row("SHA_TOOL", "sha256", "text"));
    repo.write(
        "FIVE_ECHOES.yaml",
        &flow_row("FIVE_ECHOES", &["ECHO_STEP: $1"; 5].join(" > ")),
    );
    repo.write(
        "WIDE_FLOW.yaml",
        &flow_row("WIDE_FLOW", &["FIVE_ECHOES: $1"; 5].join(" > ")),
    );
    repo.write(
        "DOUBLING_FLOW.yaml",
        &flow_row(
            "DOUBLING_FLOW",
            &format!(
                "ECHO_STEP: $1$1 > {}",
                ["ECHO_STEP: $PREV$PREV"; 9].join(" > ")
            ),
        ),
    );
    repo.write(
        "SECRET_POST.yaml",
        &format!(
            "key: SECRET_POST\ntype: http\ntarget: GET http://{upstream}/hit/$1\ncategory: net\nsensitive: true\n{SCHEMA}content: |\n  # WHAT: One hit on the test upstream, sensitive.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
        ),
    );
    // Its reply may tag any row, the sensitive one included: the gate wants it sensitive.
    repo.write(
        "ROUTING_AGENT.yaml",
        &format!(
            "key: ROUTING_AGENT\ntype: agent\ntarget: test-model\ncategory: agents\nroute_reply: true\nsensitive: true\n{SCHEMA}content: |\n  # WHAT: Answers with router tags in its reply.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: hash hello\n  # OUTPUT: text\n  Write router tags.\n"
        ),
    );
    repo.write(
        "PLAIN_AGENT.yaml",
        "key: PLAIN_AGENT\ntype: agent\ntarget: test-model\ncategory: agents\ncontent: |\n  # WHAT: Answers with the model, no tools.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: hello\n  # OUTPUT: text\n  Answer.\n",
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let seen = Seen {
        upstream: upstream_hits,
        model: model_hits,
    };
    (Built::new(repo), seen, format!("http://{model}/v1"))
}

fn settings(f: &Built, model: &str) -> Settings {
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.token_key = Some(TokenKey::from_text(TOKEN_KEY).expect("key"));
    s.base_url = BASE.into();
    s.config.agent.direct.base_url = model.to_string();
    s.config.agent.direct.key_env = String::new();
    s.config.egress = capdir::invoke::egress::Egress::loopback();
    s
}

/// A dispatcher over `f` whose call trees have `budget`.
fn budgeted(f: &Built, model: &str, budget: TreeBudget) -> AppState {
    let mut s = settings(f, model);
    s.tree_budget = budget;
    AppState::new(s).expect("state")
}

fn claims(keys: &[&str], risk: Risk, exp_in: i64) -> Claims {
    let now = chrono::Utc::now().timestamp();
    Claims {
        exp: now + exp_in,
        risk,
        ..common::claims_for(BASE, keys)
    }
}

fn sign(claims: &Claims) -> String {
    TokenKey::from_text(TOKEN_KEY).expect("key").sign(claims)
}

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Json) {
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Json::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, body)
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
    let (status, _, v) = send(state, req).await;
    (status, v)
}

/// A flow of flows stops when its tree has asked for as many nested calls as the budget
/// allows: a named failure, the later steps never run, and the receipts stay bounded.
#[tokio::test]
async fn a_call_tree_stops_at_its_budget_of_calls() {
    let (f, _, model) = fixture("").await;
    let s = budgeted(
        &f,
        &model,
        TreeBudget {
            calls: 12,
            ..TreeBudget::default()
        },
    );
    let (status, v) = invoke(&s, Some(OWNER), "WIDE_FLOW", "hi").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("budget:calls"),
        "the failure names the budget: {message}"
    );
    let all = f.receipts();
    let ran = all
        .iter()
        .filter(|r| r["status"] == "PROVEN_MATERIAL_RESULT")
        .count();
    // 5 × (1 + 5) = 30 nested calls unbounded; 12 admitted, the 13th refused.
    // Admitted: FIVE_ECHOES, its five echoes, FIVE_ECHOES, its five; the third is refused.
    assert_eq!(ran, 12, "{all:#?}");
    assert!(
        all.len() <= 2 * 12 + 1,
        "receipts stay bounded: {}",
        all.len()
    );
    let refused: Vec<&Json> = all
        .iter()
        .filter(|r| r["error_code"] == "budget:calls")
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one refusal, the step that asked past the budget"
    );
    // Unlimited, the same flow runs all thirty.
    let (f, _, model) = fixture("").await;
    let s = AppState::new(settings(&f, &model)).expect("state");
    let (status, v) = invoke(&s, Some(OWNER), "WIDE_FLOW", "hi").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(f.receipts().len(), 31);
}

/// A flow whose outputs double at each step stops once its tree has carried its budget of
/// bytes: the memory a tree holds is bounded whatever its rows compute.
#[tokio::test]
async fn a_call_tree_stops_at_its_budget_of_bytes() {
    let (f, _, model) = fixture("").await;
    let s = budgeted(
        &f,
        &model,
        TreeBudget {
            bytes: 4096,
            ..TreeBudget::default()
        },
    );
    let (status, v) = invoke(&s, Some(OWNER), "DOUBLING_FLOW", &"x".repeat(64)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("budget:bytes")),
        "{v}"
    );
    let carried: usize = f
        .receipts()
        .iter()
        .filter(|r| !r["parent"].is_null())
        .map(|r| r["input"].as_str().unwrap().len() + r["output"].as_str().unwrap().len())
        .sum();
    // Past the budget no step starts; the last one admitted may double what it was given.
    assert!(carried <= 4 * 4096, "{carried} bytes carried");
}

/// Router tags in a model's reply run under the caller's own scope: a token scoped to the
/// agent alone (even at risk high) runs none of the rows its reply names; the owner runs them.
#[tokio::test]
async fn tags_in_a_reply_pass_the_callers_own_scope() {
    let reply = "hash: [SHA_TOOL]x[/SHA_TOOL] post: [SECRET_POST]y[/SECRET_POST]";
    let (f, seen, model) = fixture(reply).await;
    let s = AppState::new(settings(&f, &model)).expect("state");
    let scoped = sign(&claims(&["ROUTING_AGENT"], Risk::High, 600));
    let (status, v) = invoke(&s, Some(&scoped), "ROUTING_AGENT", "go").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(seen.model.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.upstream.load(Ordering::SeqCst),
        0,
        "the sensitive row never ran"
    );
    let output = v["output"].as_str().expect("output");
    assert!(
        !output.contains("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"),
        "{output}"
    );
    let all = f.receipts();
    let tags: Vec<(&str, &str)> = all
        .iter()
        .filter(|r| !r["parent"].is_null())
        .map(|r| {
            (
                r["key"].as_str().unwrap(),
                r["error_code"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        tags,
        [("SHA_TOOL", "scope"), ("SECRET_POST", "scope")],
        "{all:#?}"
    );
    // A pinned token scoped to the agent: its pin covers what the agent composes, not tags.
    let mut pinned = claims(&["ROUTING_AGENT", "SHA_TOOL"], Risk::High, 600);
    pinned.pin = Some(
        s.live()
            .invoker
            .rows()
            .get("ROUTING_AGENT")
            .expect("row")
            .fingerprint
            .clone(),
    );
    let (_, v) = invoke(&s, Some(&sign(&pinned)), "ROUTING_AGENT", "go").await;
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("ERR:flow:step_refused:SHA_TOOL:scope"),
        "{v}"
    );
    // The owner's reply runs both.
    let (status, v) = invoke(&s, Some(OWNER), "ROUTING_AGENT", "go").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(seen.upstream.load(Ordering::SeqCst), 1);
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"),
        "{v}"
    );
}

/// `--open` runs nothing that spends the operator's credentials: an agent row names no `auth`,
/// but it calls the model with the provider key.
#[tokio::test]
async fn open_mode_runs_no_agent_row_for_anonymous_callers() {
    let (f, seen, model) = fixture("hello").await;
    let mut s = settings(&f, &model);
    s.open = true;
    let s = AppState::new(s).expect("state");
    let (status, v) = invoke(&s, None, "PLAIN_AGENT", "hi").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(v["reason"], "anonymous", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("provider key"),
        "{v}"
    );
    assert_eq!(
        seen.model.load(Ordering::SeqCst),
        0,
        "the model was never called"
    );
    // A plain fn row still runs for them, and the owner still runs the agent.
    let (status, _) = invoke(&s, None, "SHA_TOOL", "x").await;
    assert_eq!(status, StatusCode::OK);
    let (status, v) = invoke(&s, Some(OWNER), "PLAIN_AGENT", "hi").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(seen.model.load(Ordering::SeqCst), 1);
}

async fn read_receipt(s: &AppState, id: &str, credential: &str) -> (StatusCode, Json) {
    let req = Request::get(format!("/receipt/{id}"))
        .header("authorization", format!("Bearer {credential}"))
        .body(Body::empty())
        .expect("request");
    let (status, _, v) = send(s, req).await;
    (status, v)
}

/// A token reads its own receipts only while it holds: revoked, expired or minted for another
/// dispatcher, it reads nothing, as it could invoke nothing.
#[tokio::test]
async fn a_token_that_no_longer_holds_reads_no_receipt() {
    let (f, _, model) = fixture("").await;
    let s = AppState::new(settings(&f, &model)).expect("state");
    let revoked = claims(&["SHA_TOOL"], Risk::Low, 600);
    let (status, v) = invoke(&s, Some(&sign(&revoked)), "SHA_TOOL", "x").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let id = v["receipt"].as_str().expect("receipt").to_string();
    let (status, _) = read_receipt(&s, &id, &sign(&revoked)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "it reads its receipt while it holds"
    );
    // The same token id minted for another dispatcher.
    let elsewhere = Claims {
        aud: "http://elsewhere.example".into(),
        ..revoked.clone()
    };
    let (status, v) = read_receipt(&s, &id, &sign(&elsewhere)).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("audience"))
    );
    s.ledger().revoke(&revoked.id).await.expect("revoke");
    let (status, v) = read_receipt(&s, &id, &sign(&revoked)).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("revoked")),
        "{v}"
    );
    // Expired: the call made while it held, the read after.
    let short = claims(&["SHA_TOOL"], Risk::Low, 1);
    let (status, v) = invoke(&s, Some(&sign(&short)), "SHA_TOOL", "x").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let id = v["receipt"].as_str().expect("receipt").to_string();
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (status, v) = read_receipt(&s, &id, &sign(&short)).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("expired")),
        "{v}"
    );
    // The owner reads both.
    assert_eq!(read_receipt(&s, &id, OWNER).await.0, StatusCode::OK);
}

/// The status of `tools/list` in session `sid`, sent with `credential` from `peer`.
async fn tools_list(
    s: &AppState,
    credential: Option<&str>,
    sid: Option<&str>,
    peer: &str,
) -> StatusCode {
    send(s, mcp_request(TOOLS_LIST, credential, sid, peer))
        .await
        .0
}

fn mcp_request(
    body: &str,
    credential: Option<&str>,
    sid: Option<&str>,
    peer: &str,
) -> Request<Body> {
    let mut r = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .extension(ConnectInfo(peer.parse::<SocketAddr>().expect("addr")));
    if let Some(c) = credential {
        r = r.header("authorization", format!("Bearer {c}"));
    }
    if let Some(sid) = sid {
        r = r.header("mcp-session-id", sid);
    }
    r.body(Body::from(body.to_string())).expect("request")
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;

/// An MCP session belongs to the credential that opened it: another caller cannot use or end
/// it, and a flood of anonymous sessions evicts only that address's own.
#[tokio::test]
async fn mcp_sessions_are_bound_to_who_opened_them() {
    let (f, _, model) = fixture("").await;
    let s = AppState::new(settings(&f, &model)).expect("state");
    let (status, headers, _) = send(
        &s,
        mcp_request(INITIALIZE, Some(OWNER), None, "127.0.0.1:1000"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let sid = headers["mcp-session-id"].to_str().expect("sid").to_string();
    let (status, _, v) = send(
        &s,
        mcp_request(TOOLS_LIST, Some(OWNER), Some(&sid), "127.0.0.1:1000"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // The id alone is no credential.
    let (status, _, v) = send(
        &s,
        mcp_request(TOOLS_LIST, None, Some(&sid), "127.0.0.1:1000"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    let token = sign(&claims(&["SHA_TOOL"], Risk::Low, 600));
    let status = tools_list(&s, Some(&token), Some(&sid), "127.0.0.1:1000").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let mut delete = Request::delete("/mcp")
        .header("mcp-session-id", &sid)
        .body(Body::empty())
        .expect("request");
    delete
        .extensions_mut()
        .insert(ConnectInfo("127.0.0.2:1".parse::<SocketAddr>().unwrap()));
    assert_eq!(
        send(&s, delete).await.0,
        StatusCode::NOT_FOUND,
        "an anonymous caller cannot end it"
    );
    // An anonymous flood from one address, past its cap.
    let mut first = None;
    for _ in 0..80 {
        let (status, headers, _) =
            send(&s, mcp_request(INITIALIZE, None, None, "127.0.0.3:5")).await;
        assert_eq!(status, StatusCode::OK);
        first.get_or_insert(headers["mcp-session-id"].to_str().unwrap().to_string());
    }
    let status = tools_list(&s, Some(OWNER), Some(&sid), "127.0.0.1:1000").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the owner's session survives the flood"
    );
    let status = tools_list(&s, None, first.as_deref(), "127.0.0.3:5").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the flood evicted its own oldest session"
    );
    // Anonymous callers from many addresses share one pool: the earliest anonymous session
    // goes once it is full, and the owner's stays.
    let (_, headers, _) = send(&s, mcp_request(INITIALIZE, None, None, "10.9.0.1:5")).await;
    let earliest = headers["mcp-session-id"].to_str().unwrap().to_string();
    for i in 0..2600u32 {
        let peer = format!("10.{}.{}.{}:5", 10 + i / 65536, (i / 256) % 256, i % 256);
        let (status, _, _) = send(&s, mcp_request(INITIALIZE, None, None, &peer)).await;
        assert_eq!(status, StatusCode::OK);
    }
    let status = tools_list(&s, None, Some(&earliest), "10.9.0.1:5").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the anonymous pool is bounded"
    );
    let status = tools_list(&s, Some(OWNER), Some(&sid), "127.0.0.1:1000").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the owner's session survives them all"
    );
}

/// A model that names keys no row has still spends the tree's budget.
#[tokio::test]
async fn tags_of_unknown_keys_spend_the_budget() {
    let reply = "[NOPE_ONE]x[/NOPE_ONE] [NOPE_TWO]x[/NOPE_TWO] [NOPE_THREE]x[/NOPE_THREE] [SHA_TOOL]x[/SHA_TOOL]";
    let (f, _, model) = fixture(reply).await;
    let s = budgeted(
        &f,
        &model,
        TreeBudget {
            calls: 3,
            ..TreeBudget::default()
        },
    );
    let (_, v) = invoke(&s, Some(OWNER), "ROUTING_AGENT", "go").await;
    // The three unknown keys spent three calls: the fourth tag, a real row, is refused.
    let said = v.to_string();
    assert!(
        said.contains("ERR:unknown_key:NOPE_THREE") && said.contains("SHA_TOOL:budget:calls"),
        "{said}"
    );
}

/// `/metrics` tells what the dispatcher runs: the owner's to read, unless served in public.
#[tokio::test]
async fn metrics_need_the_owner_key_unless_public() {
    let (f, _, model) = fixture("").await;
    let s = AppState::new(settings(&f, &model)).expect("state");
    let get = |credential: Option<&str>| {
        let mut r = Request::get("/metrics");
        if let Some(c) = credential {
            r = r.header("x-owner-key", c);
        }
        r.body(Body::empty()).expect("request")
    };
    assert_eq!(send(&s, get(None)).await.0, StatusCode::UNAUTHORIZED);
    let token = sign(&claims(&["SHA_TOOL"], Risk::Low, 600));
    let mut r = Request::get("/metrics")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .expect("request");
    r.headers_mut().remove("x-owner-key");
    assert_eq!(send(&s, r).await.0, StatusCode::FORBIDDEN);
    let (status, _, text) = send(&s, get(Some(OWNER))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.as_str().unwrap().contains("capdir_requests_total"));
    let mut public = settings(&f, &model);
    public.public_metrics = true;
    let s = AppState::new(public).expect("state");
    assert_eq!(send(&s, get(None)).await.0, StatusCode::OK);
}

/// The keyless confirm answers anyone: each address gets its allowance per minute, then 429
/// with Retry-After; another address, and a caller with a credential, are not held back.
#[tokio::test]
async fn keyless_confirms_are_limited_per_address() {
    let (f, _, model) = fixture("").await;
    let mut settings = settings(&f, &model);
    settings.confirms_per_minute = 3;
    let s = AppState::new(settings).expect("state");
    let (_, v) = invoke(&s, Some(OWNER), "SHA_TOOL", "x").await;
    let id = v["receipt"].as_str().expect("receipt").to_string();
    let confirm = |peer: &str, credential: Option<&str>| {
        let mut r = Request::get(format!("/api/dispatch?confirm={id}"))
            .extension(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        if let Some(c) = credential {
            r = r.header("x-owner-key", c);
        }
        r.body(Body::empty()).expect("request")
    };
    for _ in 0..3 {
        let (status, _, v) = send(&s, confirm("127.0.0.5:1", None)).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["confirmed"], true);
    }
    let (status, headers, v) = send(&s, confirm("127.0.0.5:2", None)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["error"]["code"], "rate_limited");
    assert!(headers.contains_key("retry-after"));
    // A credential that does not hold lifts nothing.
    assert_eq!(
        send(&s, confirm("127.0.0.5:4", Some("not-the-owner-key")))
            .await
            .0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&s, confirm("127.0.0.6:1", None)).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&s, confirm("127.0.0.5:3", Some(OWNER))).await.0,
        StatusCode::OK
    );
}

/// The tags of one routed text share one budget: three tags of a 30-call flow under a
/// 40-call budget run the first whole, and the later ones stop at the budget.
#[tokio::test]
async fn the_tags_of_one_text_share_one_budget() {
    let (f, _, model) = fixture("").await;
    let s = budgeted(
        &f,
        &model,
        TreeBudget {
            calls: 40,
            ..TreeBudget::default()
        },
    );
    let text = "[WIDE_FLOW]a[/WIDE_FLOW] [WIDE_FLOW]b[/WIDE_FLOW] [WIDE_FLOW]c[/WIDE_FLOW]";
    let req = Request::post("/api/route")
        .header("content-type", "application/json")
        .header("x-owner-key", OWNER)
        .body(Body::from(json!({ "text": text }).to_string()))
        .expect("request");
    let (status, _, v) = send(&s, req).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let tags = v["tags"].as_array().expect("tags");
    let codes: Vec<&str> = tags
        .iter()
        .map(|t| t["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(codes[0], "PROVEN_MATERIAL_RESULT", "{v}");
    for t in &tags[1..] {
        assert!(
            t["output"].as_str().unwrap_or("").contains("budget:calls"),
            "{t}"
        );
    }
    let nested = f
        .receipts()
        .iter()
        .filter(|r| !r["parent"].is_null() && r["status"] == "PROVEN_MATERIAL_RESULT")
        .count();
    assert!(
        nested <= 40,
        "{nested} nested calls ran under a 40-call budget"
    );
}
