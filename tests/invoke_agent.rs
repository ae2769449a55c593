//! The agent runner against a loopback server speaking the chat-completions protocol: the
//! system prompt composed from includes in order, the body as the user message, gateway
//! routing, usage and cost, and the failures.

use crate::common;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use capdir::invoke::InvokerConfig;
use capdir::invoke::outcome::Status;
use capdir::invoke::runner::Environment;
use capdir::invoke::runner::agent::{AgentConfig, Endpoint, Price};
use common::{call, invoker_with, row, row_with, serve};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Every request the fake model received: which route, the bearer key, the JSON body.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, String, Value)>>>);

impl Seen {
    fn all(&self) -> Vec<(String, String, Value)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

async fn completions(
    route: &str,
    seen: Seen,
    h: HeaderMap,
    body: Value,
) -> axum::response::Response {
    let auth = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if let Ok(mut v) = seen.0.lock() {
        v.push((route.to_string(), auth.clone(), body.clone()));
    }
    if body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        == Some("fail please")
    {
        return (StatusCode::INTERNAL_SERVER_ERROR, "model exploded").into_response();
    }
    if !auth.starts_with("Bearer ") {
        return (StatusCode::UNAUTHORIZED, "no key").into_response();
    }
    Json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("answer from {route}")}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}
    }))
    .into_response()
}

async fn fake_model() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(s): State<Seen>, h: HeaderMap, Json(b): Json<Value>| async move {
                    completions("direct", s, h, b).await
                },
            ),
        )
        .route(
            "/gw/chat/completions",
            post(
                |State(s): State<Seen>, h: HeaderMap, Json(b): Json<Value>| async move {
                    completions("gateway", s, h, b).await
                },
            ),
        )
        .with_state(seen.clone());
    (serve(app).await, seen)
}

fn config(addr: SocketAddr) -> InvokerConfig {
    InvokerConfig {
        agent: AgentConfig {
            direct: Endpoint {
                base_url: format!("http://{addr}/v1"),
                key_env: "AG_DIRECT_KEY".into(),
            },
            gateway: Some(Endpoint {
                base_url: format!("http://{addr}/gw/"),
                key_env: "AG_GW_KEY".into(),
            }),
            prices: [(
                "gw:openai/gpt-4o-mini".to_string(),
                Price {
                    input: 0.15,
                    output: 0.6,
                },
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        },
        env: Environment::fixed([("AG_DIRECT_KEY", "direct-key-1"), ("AG_GW_KEY", "gw-key-2")]),
        ..Default::default()
    }
}

fn rows() -> Vec<capdir::row::Row> {
    vec![
        row("PB_FIRST", "agent", "gpt-test", "First block: be brief."),
        row(
            "PB_SECOND",
            "agent",
            "gpt-test",
            "Second block: cite sources.",
        ),
        row_with(
            "ASK_DIRECT",
            "agent",
            "gpt-test",
            "You answer questions. Placeholders like $1 stay as text.",
            json!({"includes": ["PB_FIRST", "PB_SECOND"]}),
        ),
        row_with(
            "ASK_GW",
            "agent",
            "gw:openai/gpt-4o-mini",
            "Gateway prompt.",
            json!({"includes": ["PB_SECOND"]}),
        ),
        row_with(
            "ASK_BROKEN",
            "agent",
            "gpt-test",
            "x",
            json!({"includes": ["PB_GONE"]}),
        ),
        row("UNPRICED", "agent", "gw:other/model", "Unpriced."),
        row(
            "FLOW_TWO_ASKS",
            "flow",
            "",
            "ASK_GW: one => A > ASK_GW: two and $A",
        ),
    ]
}

#[tokio::test]
async fn system_prompt_is_includes_in_order_then_payload() {
    let (addr, seen) = fake_model().await;
    let inv = invoker_with(rows(), config(addr));
    let o = call(&inv, "ASK_DIRECT", "what is a mutex?|really").await;
    assert_eq!(o.output, "answer from direct");
    assert_eq!(
        (o.status, o.runner.as_str()),
        (Status::ProvenMaterialResult, "agent")
    );
    let all = seen.all();
    let (route, auth, body) = &all[0];
    assert_eq!(
        (route.as_str(), auth.as_str()),
        ("direct", "Bearer direct-key-1")
    );
    assert_eq!(body["model"], "gpt-test");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[0]["content"],
        "First block: be brief.\n\nSecond block: cite sources.\n\nYou answer questions. Placeholders like $1 stay as text."
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "what is a mutex?|really"})
    );
    // Tokens are recorded; no price for this model, so no cost.
    let usage = o.usage.expect("usage");
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens, usage.cost_usd),
        (1200, 300, None)
    );
}

#[tokio::test]
async fn gateway_routing_and_cost() {
    let (addr, seen) = fake_model().await;
    let inv = invoker_with(rows(), config(addr));
    let o = call(&inv, "ASK_GW", "hello").await;
    assert_eq!(o.output, "answer from gateway");
    let (route, auth, body) = seen.all().remove(0);
    assert_eq!(
        (route.as_str(), auth.as_str()),
        ("gateway", "Bearer gw-key-2")
    );
    assert_eq!(body["model"], "openai/gpt-4o-mini");
    assert_eq!(
        body["messages"][0]["content"],
        "Second block: cite sources.\n\nGateway prompt."
    );
    // 1200 × 0.15 + 300 × 0.6 per million = 0.00036 USD.
    let cost = o.usage.and_then(|u| u.cost_usd).expect("cost");
    assert!((cost - 0.00036).abs() < 1e-12, "{cost}");

    // A flow sums the usage and cost of its steps.
    let o = call(&inv, "FLOW_TWO_ASKS", "").await;
    assert_eq!(o.output, "answer from gateway");
    let u = o.usage.expect("usage");
    assert_eq!((u.prompt_tokens, u.completion_tokens), (2400, 600));
    assert!((u.cost_usd.unwrap_or(0.0) - 0.00072).abs() < 1e-12);
    let last = seen.all().pop().expect("request");
    assert_eq!(
        last.2["messages"][1]["content"],
        "two and answer from gateway"
    );

    let o = call(&inv, "UNPRICED", "hi").await;
    assert_eq!(o.usage.map(|u| u.cost_usd), Some(None));
}

#[tokio::test]
async fn agent_failures_are_named() {
    let (addr, seen) = fake_model().await;
    let inv = invoker_with(rows(), config(addr));
    let o = call(&inv, "ASK_DIRECT", "fail please").await;
    assert_eq!(o.output, "ERR:agent:500:model exploded");
    assert_eq!(o.error_code(), Some("agent:500"));

    let o = call(&inv, "ASK_BROKEN", "x").await;
    assert_eq!(o.output, "ERR:agent:unknown_include:PB_GONE");

    let mut cfg = config(addr);
    cfg.env = Environment::fixed::<&str, &str>([]);
    cfg.agent.gateway = None;
    let inv = invoker_with(rows(), cfg);
    let before = seen.all().len();
    assert_eq!(
        call(&inv, "ASK_DIRECT", "x").await.output,
        "ERR:auth:missing_env:AG_DIRECT_KEY"
    );
    let o = call(&inv, "ASK_GW", "x").await;
    assert!(
        o.output.starts_with("ERR:agent:no_gateway:"),
        "{}",
        o.output
    );
    assert_eq!(seen.all().len(), before, "nothing sent");

    let mut cfg = config(addr);
    cfg.agent.direct.base_url = format!("http://127.0.0.1:{}/v1", common::closed_port());
    let inv = invoker_with(rows(), cfg);
    assert!(
        call(&inv, "ASK_DIRECT", "x")
            .await
            .output
            .starts_with("ERR:agent:fetch:")
    );
}

#[tokio::test]
async fn rejected_model_key_opens_the_breaker() {
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                (StatusCode::UNAUTHORIZED, "invalid api key")
            }
        }),
    );
    let addr = serve(app).await;
    let inv = invoker_with(rows(), config(addr));
    for _ in 0..8 {
        assert_eq!(
            call(&inv, "ASK_DIRECT", "x").await.output,
            "ERR:agent:401:invalid api key"
        );
    }
    let o = call(&inv, "ASK_DIRECT", "x").await;
    assert!(
        o.output
            .starts_with("ERR:breaker_open:AG_DIRECT_KEY:until "),
        "{}",
        o.output
    );
    assert_eq!(o.status, Status::Refused);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 8);
}
