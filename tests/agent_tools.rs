//! Agents that use the catalogue as their tools: a local server speaking OpenAI's
//! chat-completions protocol with `tool_calls`, scripted per test, stands in for the model. Each
//! tool call runs under the caller's authority as a child of the agent's receipt; a call
//! outside the agent's categories is refused to the model and never runs (the loopback
//! upstream counts its hits).

use crate::common;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use capdir::invoke::runner::agent::AgentLimits;
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use common::{Built, Repo};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tower::ServiceExt;

const OWNER: &str = "agent-tools-owner-key";
const TOKEN_KEY: &str = "agent-tools-token-signing-key-0123456789abcdef";

/// The scripted model: the first turn asks for `plan` (name, JSON arguments); once tool
/// results are in, it answers `done:` and the results joined. Every request is kept.
#[derive(Clone)]
struct Model {
    plan: Arc<Vec<(String, String)>>,
    /// Asks for the plan's tools on every turn and never answers.
    stubborn: bool,
    /// The answer of a model that calls no tools.
    reply: Option<String>,
    seen: Arc<Mutex<Vec<Json>>>,
    /// The path each request was sent to, in order.
    paths: Arc<Mutex<Vec<String>>>,
}

async fn completions(
    State(m): State<Model>,
    uri: axum::http::Uri,
    axum::Json(body): axum::Json<Json>,
) -> axum::Json<Json> {
    m.paths.lock().unwrap().push(uri.path().to_string());
    m.seen.lock().unwrap().push(body.clone());
    let results: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|msg| msg["role"] == "tool")
        .map(|msg| msg["content"].as_str().unwrap_or_default())
        .collect();
    let message = if let Some(reply) = &m.reply {
        json!({"role": "assistant", "content": reply})
    } else if results.is_empty() || m.stubborn {
        let calls: Vec<Json> = m
            .plan
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    } else {
        json!({"role": "assistant", "content": format!("done: {}", results.join(" | "))})
    };
    axum::Json(json!({
        "id": "chatcmpl-t",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }))
}

async fn fixture(plan: &[(&str, &str)]) -> (Built, AppState, Model, Arc<AtomicUsize>) {
    fixture_with(plan, false, AgentLimits::default()).await
}

async fn fixture_with(
    plan: &[(&str, &str)],
    stubborn: bool,
    limits: AgentLimits,
) -> (Built, AppState, Model, Arc<AtomicUsize>) {
    let model = Model {
        plan: Arc::new(
            plan.iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
        ),
        stubborn,
        reply: None,
        seen: Arc::default(),
        paths: Arc::default(),
    };
    fixture_model(model, limits).await
}

async fn fixture_model(
    model: Model,
    limits: AgentLimits,
) -> (Built, AppState, Model, Arc<AtomicUsize>) {
    let model_addr = common::serve(
        axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/provider/v1/chat/completions", post(completions))
            .with_state(model.clone()),
    )
    .await;
    let (upstream, hits) = counting_upstream("hit").await;
    let fn_row = |key: &str, target: &str| {
        format!(
            "key: {key}\ntype: fn\ntarget: {target}\ncategory: text\ncontent: |\n  # WHAT: {key}, a tool for the agent tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n"
        )
    };
    let repo = Repo::new();
    repo.write("SHA_TOOL.yaml", &fn_row("SHA_TOOL", "sha256"));
    repo.write("UPPER_TOOL.yaml", &fn_row("UPPER_TOOL", "upper"));
    repo.write(
        "NET_HIT.yaml",
        &format!(
            "key: NET_HIT\ntype: http\ntarget: GET http://{upstream}/hit/$1\ncategory: net\ncontent: |\n  # WHAT: One hit on the test upstream.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
        ),
    );
    repo.write(
        "TOOL_AGENT.yaml",
        "key: TOOL_AGENT\ntype: agent\ntarget: test-model\ncategory: agents\nallowed_categories: [text]\ncontent: |\n  # WHAT: Answers with the help of the text tools.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: hash hello\n  # OUTPUT: text\n  Use the tools.\n",
    );
    repo.write(
        "ROUTING_AGENT.yaml",
        "key: ROUTING_AGENT\ntype: agent\ntarget: test-model\ncategory: agents\nroute_reply: true\ncontent: |\n  # WHAT: Answers with router tags in its reply.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: hash hello\n  # OUTPUT: text\n  Write router tags.\n",
    );
    repo.write(
        "PROVIDER_AGENT.yaml",
        "key: PROVIDER_AGENT\ntype: agent\ntarget: local:test-model\ncategory: agents\ncontent: |\n  # WHAT: Answers through a provider named by its target's prefix.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: hello\n  # OUTPUT: text\n  Answer.\n",
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Built::new(repo);
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.config.agent.direct.base_url = format!("http://{model_addr}/v1");
    s.config.agent.direct.key_env = String::new();
    // `local:` names the same scripted model through the provider table; the direct endpoint
    // answers only under /v1, the provider's under /provider/v1.
    s.config.agent.providers.insert(
        "local".into(),
        capdir::invoke::runner::agent::Endpoint {
            base_url: format!("http://{model_addr}/provider/v1"),
            key_env: String::new(),
        },
    );
    s.config.agent.limits = limits;
    let state = AppState::new(s).expect("state");
    (f, state, model, hits)
}

/// A loopback upstream answering `answer` on `/hit/{x}`, and how often it was asked.
async fn counting_upstream(answer: &'static str) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let upstream = common::serve(axum::Router::new().route(
        "/hit/{x}",
        axum::routing::get(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                answer
            }
        }),
    ))
    .await;
    (upstream, hits)
}

async fn invoke(state: &AppState, body: &str) -> (StatusCode, Json) {
    invoke_key(state, "TOOL_AGENT", body).await
}

/// POST /api/dispatch of `key` with `body`, as the owner.
async fn invoke_key(state: &AppState, key: &str, body: &str) -> (StatusCode, Json) {
    let req = Request::post("/api/dispatch")
        .header("content-type", "application/json")
        .header("x-owner-key", OWNER)
        .body(Body::from(json!({"key": key, "body": body}).to_string()))
        .unwrap();
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).expect("json"))
}

/// The names of the tools a request to the model offered.
fn offered(request: &Json) -> Vec<&str> {
    request["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn an_agent_calls_its_tools_each_under_the_gate_with_a_receipt() {
    let (f, s, model, _) = fixture(&[
        ("SHA_TOOL", r#"{"body": "hello"}"#),
        ("UPPER_TOOL", r#"{"body": "hi"}"#),
    ])
    .await;
    let (status, v) = invoke(&s, "hash hello and shout hi").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v["output"],
        "done: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 | HI"
    );
    // The model was offered the agent's categories only, as function tools.
    let seen = model.seen.lock().unwrap().clone();
    let offered = offered(&seen[0]);
    assert_eq!(offered, ["SHA_TOOL", "UPPER_TOOL"]);
    assert_eq!(seen.len(), 2, "one turn for the calls, one for the answer");
    // Three nodes: the two tool calls below the agent's receipt; usage summed over turns.
    let all = f.receipts();
    let keys: Vec<&str> = all.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["SHA_TOOL", "UPPER_TOOL", "TOOL_AGENT"]);
    // Each turn used 10 + 5 tokens (the scripted model's usage): two turns, summed.
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 20, "completion_tokens": 10}),
        "{v}"
    );
    for child in &all[..2] {
        assert_eq!(child["parent"], v["receipt"]);
        assert_eq!(child["status"], "PROVEN_MATERIAL_RESULT");
    }
}

#[tokio::test]
async fn a_tool_outside_the_agents_categories_is_refused_to_the_model_and_never_runs() {
    let (f, s, model, hits) = fixture(&[("NET_HIT", r#"{"body": "x"}"#)]).await;
    let (status, v) = invoke(&s, "hit the network").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let answer = v["output"].as_str().unwrap();
    assert!(
        answer.starts_with("done: ERR:refused:`NET_HIT` is not one of this agent's tools"),
        "{answer}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the row never ran");
    let keys: Vec<String> = f
        .receipts()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["TOOL_AGENT"]);
    // The refusal went back as the tool's result, tied to the call that asked.
    let seen = model.seen.lock().unwrap().clone();
    let tool_msg = seen[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .expect("a tool message");
    assert_eq!(tool_msg["tool_call_id"], "call_0");
}

/// An agent's fingerprint covers its tool listing: a tool that changes changes it (so a pinned
/// token answers 409), a row of another category does not.
#[tokio::test]
async fn an_agents_fingerprint_covers_its_tools() {
    let (f, s, _, _) = fixture(&[]).await;
    let print = |s: &AppState| {
        s.live()
            .invoker
            .rows()
            .get("TOOL_AGENT")
            .expect("agent")
            .fingerprint
            .clone()
    };
    let first = print(&s);
    let net = std::fs::read_to_string(f.repo.catalogue().join("NET_HIT.yaml")).unwrap();
    f.repo
        .write("NET_HIT.yaml", &net.replace("/hit/$1", "/hit/v2/$1"));
    f.repo
        .commit("another category changes", "2024-01-02T00:00:00Z");
    f.build();
    assert!(s.reload_if_changed());
    assert_eq!(
        print(&s),
        first,
        "a row outside its categories is not its tool"
    );
    let upper = std::fs::read_to_string(f.repo.catalogue().join("UPPER_TOOL.yaml")).unwrap();
    f.repo.write(
        "UPPER_TOOL.yaml",
        &upper.replace("target: upper", "target: lower"),
    );
    f.repo.commit("a tool changes", "2024-01-03T00:00:00Z");
    f.build();
    assert!(s.reload_if_changed());
    assert_ne!(
        print(&s),
        first,
        "a changed tool changes the agent's contract"
    );
}

/// A model that never stops calling tools hits the turn limit, and one that uses too many
/// tokens the token limit: named failures, with the usage so far and every tool call's receipt.
#[tokio::test]
async fn an_agent_that_does_not_stop_is_stopped_by_its_limits() {
    let turns = AgentLimits {
        turns: 3,
        ..AgentLimits::default()
    };
    let (f, s, model, _) =
        fixture_with(&[("UPPER_TOOL", r#"{"body": "again"}"#)], true, turns).await;
    let (status, v) = invoke(&s, "loop").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(v["reason"], "agent:turn_limit");
    assert_eq!(model.seen.lock().unwrap().len(), 3);
    let all = f.receipts();
    let top = all.last().expect("the agent's receipt");
    assert_eq!(top["key"], "TOOL_AGENT");
    assert_eq!(top["error_code"], "agent:turn_limit");
    assert_eq!(all.len(), 4, "three tool calls below the agent's receipt");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 30, "completion_tokens": 15}),
        "the usage of all three turns: {v}"
    );

    let tokens = AgentLimits {
        tokens: 20,
        ..AgentLimits::default()
    };
    let (_, s, model, _) =
        fixture_with(&[("UPPER_TOOL", r#"{"body": "again"}"#)], true, tokens).await;
    let (_, v) = invoke(&s, "loop").await;
    assert_eq!(v["reason"], "agent:token_limit", "{v}");
    assert_eq!(
        model.seen.lock().unwrap().len(),
        2,
        "15 tokens a turn: stopped after the second"
    );
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 20, "completion_tokens": 10}),
        "the usage so far, past the limit of 20: {v}"
    );
}

/// An agent row with `route_reply: true`: the tags in its final reply run (under the caller's
/// authority, a receipt each below the agent's) and their outputs take their places.
#[tokio::test]
async fn an_agent_that_routes_its_reply_runs_the_tags_in_it() {
    let model = Model {
        plan: Arc::new(Vec::new()),
        stubborn: false,
        reply: Some("Digest: [SHA_TOOL]hello[/SHA_TOOL]; then [NOPE_Q]x[/NOPE_Q].".into()),
        seen: Arc::default(),
        paths: Arc::default(),
    };
    let (f, s, _, _) = fixture_model(model, AgentLimits::default()).await;
    let (_, v) = invoke_key(&s, "ROUTING_AGENT", "hash hello").await;
    let out = v["output"].as_str().expect("output");
    assert!(
        out.starts_with(
            "Digest: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824; then ERR:unknown_key:NOPE_Q"
        ),
        "{out}"
    );
    let all = f.receipts();
    let keys: Vec<&str> = all.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["SHA_TOOL", "NOPE_Q", "ROUTING_AGENT"]);
    assert!(all[..2].iter().all(|r| r["parent"] == v["receipt"]));
}

/// A listing past the limits (here one tool) is replaced by the meta tools `ask`, `contract`
/// and `invoke` over the same rows: ask answers from the build's index within the agent's
/// categories, contract describes a tool, invoke runs one under the gate with its receipt, and
/// a key outside the categories is refused without running.
#[tokio::test]
async fn an_agent_with_too_many_tools_gets_the_meta_tools() {
    let one = AgentLimits {
        tools: 1,
        ..AgentLimits::default()
    };
    let (f, s, model, hits) = fixture_with(
        &[
            ("ask", r#"{"query": "sha tool"}"#),
            ("contract", r#"{"key": "SHA_TOOL"}"#),
            (
                "invoke",
                r#"{"key": "SHA_TOOL", "arguments": {"body": "hello"}}"#,
            ),
            (
                "invoke",
                r#"{"key": "NET_HIT", "arguments": {"body": "x"}}"#,
            ),
            ("SHA_TOOL", r#"{"body": "hello"}"#),
        ],
        false,
        one,
    )
    .await;
    let (status, v) = invoke(&s, "hash hello").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let seen = model.seen.lock().unwrap().clone();
    let offered = offered(&seen[0]);
    assert_eq!(offered, ["ask", "contract", "invoke"]);
    let results: Vec<&str> = seen[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    let asked: Json = serde_json::from_str(results[0]).expect("ask answers JSON");
    let keys: Vec<&str> = asked
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys[0], "SHA_TOOL", "{asked}");
    assert!(
        !keys.contains(&"NET_HIT") && !keys.contains(&"TOOL_AGENT"),
        "{asked}"
    );
    let contract: Json = serde_json::from_str(results[1]).expect("contract answers JSON");
    assert_eq!(contract["name"], "SHA_TOOL");
    assert!(contract["parameters"].is_object(), "{contract}");
    assert_eq!(
        results[2],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    assert!(
        results[3].starts_with("ERR:refused:`NET_HIT`"),
        "{}",
        results[3]
    );
    assert!(
        results[4].starts_with("ERR:bad_args:`SHA_TOOL` is not a tool here"),
        "with meta tools, a row is called through invoke: {}",
        results[4]
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the refused row never ran");
    let all = f.receipts();
    let keys: Vec<&str> = all.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["SHA_TOOL", "TOOL_AGENT"],
        "one tool call ran, below the agent"
    );
    assert_eq!(all[0]["parent"], all[1]["id"]);
}

/// A target `PROVIDER:model` goes to that provider's endpoint with the model name alone.
#[tokio::test]
async fn a_provider_prefix_names_the_endpoint() {
    let model = Model {
        plan: Arc::new(Vec::new()),
        stubborn: false,
        reply: Some("from the provider".into()),
        seen: Arc::default(),
        paths: Arc::default(),
    };
    let (_f, s, model) = {
        let (f, s, m, _) = fixture_model(model, AgentLimits::default()).await;
        (f, s, m)
    };
    let (status, v) = invoke_key(&s, "PROVIDER_AGENT", "hi").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let seen = model.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["model"], "test-model", "the prefix is not sent");
    // Both endpoints share the scripted model; only the provider's path proves the prefix
    // chose the provider's endpoint rather than the direct one.
    assert_eq!(
        *model.paths.lock().unwrap(),
        ["/provider/v1/chat/completions"],
        "a `local:` target is sent to the provider's endpoint"
    );
}

/// What a model could make of a person's approval: the approval of an agent's call is not an
/// approval of the tools its model then picks. A low-risk token's call of a sensitive agent
/// waits for a person; once approved, the agent runs, and its model's call of a sensitive tool
/// is still refused at the risk ceiling: the vault is never opened.
#[tokio::test]
async fn an_approved_agent_call_does_not_approve_the_sensitive_tools_its_model_picks() {
    let model = Model {
        plan: Arc::new(vec![(
            "VAULT_OPEN".to_string(),
            r#"{"x": "open"}"#.to_string(),
        )]),
        stubborn: false,
        reply: None,
        seen: Arc::default(),
        paths: Arc::default(),
    };
    let model_addr = common::serve(
        axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(model),
    )
    .await;
    let (upstream, hits) = counting_upstream("opened").await;
    // A sensitive tool on the counting upstream, and a sensitive agent that may call it.
    let schema =
        "input_schema:\n  type: object\n  properties:\n    x: {type: string}\n  required: [x]\n";
    let repo = Repo::new();
    repo.write(
        "VAULT_OPEN.yaml",
        &format!(
            "key: VAULT_OPEN\ntype: http\ntarget: GET http://{upstream}/hit/$1\ncategory: vault\nsensitive: true\n{schema}content: |\n  # WHAT: Opens the vault, sensitive.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
        ),
    );
    repo.write(
        "VAULT_AGENT.yaml",
        &format!(
            "key: VAULT_AGENT\ntype: agent\ntarget: test-model\ncategory: agents\nallowed_categories: [vault]\nsensitive: true\n{schema}content: |\n  # WHAT: Answers with the vault tools.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n  Use the tools.\n"
        ),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Built::new(repo);
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut settings = Settings::new(f.site(), Arc::new(ledger));
    settings.owner_key = Some(OWNER.into());
    settings.token_key = Some(capdir::access::token::TokenKey::from_text(TOKEN_KEY).expect("key"));
    settings.config.agent.direct.base_url = format!("http://{model_addr}/v1");
    settings.config.agent.direct.key_env = String::new();
    settings.config.egress = capdir::invoke::egress::Egress::loopback();
    let s = AppState::new(settings).expect("state");
    let tok = capdir::access::token::TokenKey::from_text(TOKEN_KEY)
        .expect("key")
        .sign(&common::claims_for(
            "http://127.0.0.1:8080",
            &["VAULT_AGENT"],
        ));
    let send = |req: Request<Body>| {
        let s = s.clone();
        async move {
            let res = app(s).oneshot(req).await.expect("response");
            let status = res.status();
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<Json>(&bytes).expect("json"),
            )
        }
    };
    let (status, pending) = send(
        Request::post("/api/dispatch")
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {tok}"))
            .body(Body::from(
                json!({"key": "VAULT_AGENT", "body": "go"}).to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{pending}");
    let id = pending["approval"].as_str().expect("approval");
    let (status, decided) = send(
        Request::post(format!("/api/approvals/{id}"))
            .header("content-type", "application/json")
            .header("x-owner-key", OWNER)
            .body(Body::from(json!({"decision": "approve"}).to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the vault was opened: {decided}"
    );
    let refused = f
        .receipts()
        .into_iter()
        .find(|r| r["key"] == "VAULT_OPEN")
        .expect("the tool call's receipt");
    assert_eq!(refused["error_code"], "risk_ceiling:low", "{refused}");
}
