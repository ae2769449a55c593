//! The MCP endpoint in-process: JSON-RPC handling over `/mcp` (`app(state).oneshot`) — bad
//! JSON, unknown methods, sessions, the protocol-version header, pagination, calls through the
//! dispatcher's gate with receipts, the GET stream's list_changed — and the stdio transport over
//! in-memory pipes. The official SDK drives both transports for real in tests/mcp_sdk.rs.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use capdir::ledger::{self, SqliteLedger};
use capdir::serve::mcp::{self, Projection};
use capdir::serve::{AppState, Settings, app};
use common::{Repo, fixture, fn_row};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tower::ServiceExt;

const OWNER: &str = "mcp-owner-key-456";
const V: &str = "2025-06-18";

type Fixture = common::Built;

/// The good fixture rows (five planner-visible, one prompt block that is not) and a disabled
/// row, built into a site.
fn fixture_site() -> Fixture {
    let repo = Repo::new();
    for name in [
        "GOOD_AGENT",
        "GOOD_ECHO",
        "GOOD_FLOW",
        "GOOD_HTTP_ITEM",
        "GOOD_NOW",
        "PB_PLAIN_STYLE",
    ] {
        repo.write(
            &format!("{name}.yaml"),
            &fixture(&format!("good/{name}.yaml")),
        );
    }
    repo.write("bindings.yaml", &fixture("good/bindings.yaml"));
    repo.write(
        "RETIRED_ECHO.yaml",
        &format!(
            "{}enabled: false\n",
            fn_row("RETIRED_ECHO", "text", "An old echo.")
        ),
    );
    repo.commit("Add the rows", "2024-01-01T10:00:00Z");
    Fixture::new(repo)
}

const VISIBLE: [&str; 5] = [
    "GOOD_AGENT",
    "GOOD_ECHO",
    "GOOD_FLOW",
    "GOOD_HTTP_ITEM",
    "GOOD_NOW",
];

fn state_with(f: &Fixture, projection: Projection, page_size: usize) -> AppState {
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    AppState::new(Settings {
        owner_key: Some(OWNER.into()),
        mcp: mcp::Options {
            projection,
            page_size,
        },
        ..Settings::new(f.site(), Arc::new(ledger))
    })
    .expect("state")
}

fn state(f: &Fixture) -> AppState {
    state_with(f, Projection::Full, 100)
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Json {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
    /// The stable code of a transport-level refusal (in the JSON-RPC error's data).
    fn refusal_code(&self) -> String {
        self.json()["error"]["data"]["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

async fn send(state: &AppState, req: Request<Body>) -> Answer {
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    Answer {
        status,
        headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// A POST to /mcp with the usual headers; `extra` adds or overrides some.
async fn post(state: &AppState, body: &str, extra: &[(&str, &str)]) -> Answer {
    let mut req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(body.to_string()))
        .expect("request");
    for (k, v) in extra {
        let name = axum::http::HeaderName::from_bytes(k.as_bytes()).expect("header name");
        req.headers_mut()
            .insert(name, v.parse().expect("header value"));
    }
    send(state, req).await
}

fn initialize_body(version: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
    .to_string()
}

/// Initialize a session as the owner; its id.
async fn session(state: &AppState) -> String {
    let a = post(state, &initialize_body(V), &[("authorization", &bearer())]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    a.headers["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_string()
}

fn bearer() -> String {
    format!("Bearer {OWNER}")
}

/// A request in session `sid` as the owner; the JSON-RPC answer.
async fn call(state: &AppState, sid: &str, method: &str, params: Json) -> Json {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    let a = post(
        state,
        &body.to_string(),
        &[
            ("mcp-session-id", sid),
            ("mcp-protocol-version", V),
            ("authorization", &bearer()),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let v = a.json();
    assert_eq!(v["id"], 9, "{v}");
    v
}

async fn list_all(state: &AppState, sid: &str) -> (Vec<Json>, usize) {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let v = call(state, sid, "tools/list", params).await;
        pages += 1;
        tools.extend(v["result"]["tools"].as_array().expect("tools").clone());
        match v["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return (tools, pages),
        }
    }
}

#[tokio::test]
async fn bad_json_is_a_parse_error() {
    let f = fixture_site();
    let s = state(&f);
    let a = post(&s, "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\"", &[]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let v = a.json();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v["id"], Json::Null);

    // Batches are not part of 2025-06-18; a message that is not JSON-RPC 2.0 is invalid.
    let a = post(&s, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, &[]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["error"]["code"], -32600);
    let a = post(&s, r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#, &[]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["error"]["code"], -32600);
    assert_eq!(a.json()["id"], 3);
}

#[tokio::test]
async fn unknown_method_is_32601() {
    let f = fixture_site();
    let s = state(&f);
    let sid = session(&s).await;
    let v = call(&s, &sid, "resources/list", json!({})).await;
    assert_eq!(v["error"]["code"], -32601, "{v}");
    assert!(v.get("result").is_none());
    // ping answers an empty result.
    assert_eq!(call(&s, &sid, "ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn initialize_negotiates_the_version_and_opens_a_session() {
    let f = fixture_site();
    let s = state(&f);
    let a = post(&s, &initialize_body("2025-06-18"), &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    let v = a.json();
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(v["result"]["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(v["result"]["serverInfo"]["name"], "capdir");
    let sid = a.headers["mcp-session-id"].to_str().expect("ascii");
    assert!(sid.len() >= 32 && sid.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    // Another session, another id.
    let again = post(&s, &initialize_body("2025-06-18"), &[]).await;
    assert_ne!(again.headers["mcp-session-id"], a.headers["mcp-session-id"]);

    // A version it does not speak is answered with the newest it does.
    let v = post(&s, &initialize_body("2024-11-05"), &[]).await.json();
    assert_eq!(v["result"]["protocolVersion"], mcp::PROTOCOL_VERSIONS[0]);
    // No protocolVersion at all: invalid params.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}});
    let v = post(&s, &body.to_string(), &[]).await.json();
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

#[tokio::test]
async fn requests_need_a_live_session() {
    let f = fixture_site();
    let s = state(&f);
    let list = r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#;
    let a = post(&s, list, &[]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    assert_eq!(a.refusal_code(), "missing_session");
    assert_eq!(a.json()["id"], 4);
    let a = post(&s, list, &[("mcp-session-id", "not-a-session")]).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.refusal_code(), "unknown_session");

    // DELETE ends a session; its id then answers 404.
    let sid = session(&s).await;
    let del = |sid: String| {
        Request::delete("/mcp")
            .header("mcp-session-id", sid)
            .header("authorization", bearer())
    };
    let a = send(&s, del(sid.clone()).body(Body::empty()).unwrap()).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = post(
        &s,
        list,
        &[("mcp-session-id", &sid), ("authorization", &bearer())],
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = send(&s, del(sid).body(Body::empty()).unwrap()).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn wrong_protocol_version_header_is_400() {
    let f = fixture_site();
    let s = state(&f);
    let sid = session(&s).await;
    let ping = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
    for wrong in ["1999-01-01", "2025-11-25"] {
        // Unsupported, or supported but not what this session negotiated.
        let a = post(
            &s,
            ping,
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", wrong),
                ("authorization", &bearer()),
            ],
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{wrong}: {}", a.text);
        assert_eq!(a.refusal_code(), "bad_protocol_version");
    }
    let a = post(
        &s,
        ping,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", V),
            ("authorization", &bearer()),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    // Without the header, the negotiated version is assumed.
    let a = post(
        &s,
        ping,
        &[("mcp-session-id", &sid), ("authorization", &bearer())],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn notifications_are_accepted_with_202_and_no_body() {
    let f = fixture_site();
    let s = state(&f);
    let sid = session(&s).await;
    let a = post(
        &s,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        &[("mcp-session-id", &sid), ("authorization", &bearer())],
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    assert!(a.text.is_empty());
}

#[tokio::test]
async fn a_foreign_origin_or_a_wrong_key_is_refused() {
    let f = fixture_site();
    let s = state(&f);
    let a = post(
        &s,
        &initialize_body(V),
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(a.refusal_code(), "forbidden_origin");
    let a = post(
        &s,
        &initialize_body(V),
        &[("origin", "http://localhost:5173")],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let a = post(
        &s,
        &initialize_body(V),
        &[("authorization", "Bearer not-the-key")],
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(a.refusal_code(), "forbidden");
    let a = post(&s, &initialize_body(V), &[("accept", "text/html")]).await;
    assert_eq!(a.status, StatusCode::NOT_ACCEPTABLE);
}

#[tokio::test]
async fn tools_list_pages_with_a_cursor() {
    let f = fixture_site();
    let s = state_with(&f, Projection::Full, 2);
    let sid = session(&s).await;
    let (tools, pages) = list_all(&s, &sid).await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    // Enabled and planner-visible rows only, in key order, over ceil(5/2) pages.
    assert_eq!(names, VISIBLE);
    assert_eq!(pages, 3);
    let by = |k: &str| tools.iter().find(|t| t["name"] == k).unwrap().clone();
    assert_eq!(
        by("GOOD_ECHO")["inputSchema"]["required"],
        json!(["body"]),
        "a row that needs $1 requires its body"
    );
    assert!(by("GOOD_NOW")["inputSchema"].get("required").is_none());
    assert_eq!(by("GOOD_HTTP_ITEM")["annotations"]["readOnlyHint"], true);
    assert_eq!(by("GOOD_AGENT")["annotations"]["readOnlyHint"], false);
    assert!(
        by("GOOD_ECHO")["description"]
            .as_str()
            .unwrap()
            .contains("When to use: To test a call end to end.")
    );
    // The same objects as the site's mcp/tools.json.
    let site: Json =
        serde_json::from_str(&std::fs::read_to_string(f.site().join("mcp/tools.json")).unwrap())
            .unwrap();
    assert_eq!(Json::Array(tools), site["tools"]);

    let v = call(&s, &sid, "tools/list", json!({"cursor": "%%%"})).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

fn result_document(v: &Json) -> (bool, Json) {
    let r = &v["result"];
    let text: Json = serde_json::from_str(r["content"][0]["text"].as_str().expect("text"))
        .expect("text is the JSON document");
    assert_eq!(text, r["structuredContent"]);
    (r["isError"].as_bool().expect("isError"), text)
}

#[tokio::test]
async fn tools_call_goes_through_the_gate_and_writes_a_receipt() {
    let f = fixture_site();
    let s = state(&f);
    let sid = session(&s).await;
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHO", "arguments": {"body": "hi there"}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(!is_error, "{v}");
    assert_eq!(doc["output"], "hi there");
    assert_eq!(doc["status"], "PROVEN_MATERIAL_RESULT");
    let id = doc["receipt"].as_str().expect("receipt id");
    let receipt = ledger::get(&f.ledger_path(), id)
        .expect("ledger")
        .expect("the receipt is durable before the answer");
    assert_eq!(receipt.draft.key, "GOOD_ECHO");
    assert_eq!(receipt.draft.actor, "owner");
    assert_eq!(receipt.draft.input, "hi there");

    // Too few arguments: a tool error with the stable code, and a REFUSED receipt.
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHO", "arguments": {}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(is_error);
    assert_eq!(doc["error"]["code"], "refused");
    assert_eq!(doc["reason"], "missing_args");
    let id = doc["receipt"].as_str().expect("refusals have receipts");
    let r = ledger::get(&f.ledger_path(), id).unwrap().unwrap();
    assert_eq!(r.draft.status, "REFUSED");

    // The refused call is repaired through the same tool, `repairs` beside the arguments;
    // both receipts show the lineage, one each way.
    let failed = id.to_string();
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHO", "arguments": {"body": "now with text", "repairs": failed}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(!is_error, "{v}");
    let repair = doc["receipt"].as_str().expect("receipt").to_string();
    let r = ledger::get(&f.ledger_path(), &repair).unwrap().unwrap();
    assert_eq!(r.draft.repairs.as_deref(), Some(failed.as_str()));
    assert_eq!(r.draft.input, "now with text");
    let res = app(s.clone())
        .oneshot(
            Request::get(format!("/receipt/{failed}"))
                .header("x-owner-key", OWNER)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let full: Json = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(full["repaired_by"], json!([repair]));
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHO", "arguments": {"body": "x", "repairs": 7}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(is_error);
    assert_eq!(doc["error"]["code"], "bad_body");
    // Every full tool offers `repairs`.
    let tools = call(&s, &sid, "tools/list", json!({})).await;
    for t in tools["result"]["tools"].as_array().expect("tools") {
        assert!(t["inputSchema"]["properties"]["repairs"].is_object(), "{t}");
    }

    // A typed row takes its arguments by name; a bad one is refused naming it.
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_HTTP_ITEM", "arguments": {"id": 0}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(is_error);
    assert_eq!(doc["reason"], "bad_args", "{doc}");
    // A body-only row refuses other arguments before anything runs.
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHO", "arguments": {"text": "x"}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(is_error);
    assert_eq!(doc["error"]["code"], "bad_body");
    // An unknown tool is a protocol error with a suggestion.
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHOO", "arguments": {}}),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(v["error"]["data"]["did_you_mean"][0], "GOOD_ECHO");
}

#[tokio::test]
async fn an_anonymous_caller_may_list_but_not_invoke() {
    let f = fixture_site();
    let s = state(&f);
    let a = post(&s, &initialize_body(V), &[]).await;
    let sid = a.headers["mcp-session-id"].to_str().unwrap().to_string();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "GOOD_ECHO", "arguments": {"body": "x"}}});
    let a = post(&s, &body.to_string(), &[("mcp-session-id", &sid)]).await;
    let (is_error, doc) = result_document(&a.json());
    assert!(is_error);
    assert_eq!(doc["error"]["code"], "unauthorized");
    // The session is no credential: the owner's session used without the key is no session.
    let owner_sid = session(&s).await;
    let a = post(&s, &body.to_string(), &[("mcp-session-id", &owner_sid)]).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    assert_eq!(a.refusal_code(), "unknown_session");
}

#[tokio::test]
async fn the_meta_projection_is_three_tools_whatever_the_catalogue() {
    let f = fixture_site();
    let s = state_with(&f, Projection::Meta, 100);
    let a = post(&s, &initialize_body(V), &[("authorization", &bearer())]).await;
    assert_eq!(
        a.json()["result"]["capabilities"]["tools"]["listChanged"],
        false
    );
    let sid = a.headers["mcp-session-id"].to_str().unwrap().to_string();
    let (tools, _) = list_all(&s, &sid).await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ask", "contract", "invoke"]);

    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "ask", "arguments": {"query": "repeat my text back"}}),
    )
    .await;
    assert_eq!(result_document(&v).1["best"]["key"], "GOOD_ECHO");
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "contract", "arguments": {"key": "GOOD_ECHO", "format": "json"}}),
    )
    .await;
    let contract: Json =
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(contract["key"], "GOOD_ECHO");
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "invoke", "arguments": {"key": "GOOD_ECHO", "body": "via meta"}}),
    )
    .await;
    let (is_error, doc) = result_document(&v);
    assert!(!is_error, "{v}");
    assert_eq!(doc["output"], "via meta");
    let r = ledger::get(&f.ledger_path(), doc["receipt"].as_str().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.draft.key, "GOOD_ECHO");
    // A row's key is not a meta tool.
    let v = call(
        &s,
        &sid,
        "tools/call",
        json!({"name": "GOOD_ECHO", "arguments": {}}),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602);
}

/// Read the SSE body until an event's data contains `needle`.
async fn read_until(body: &mut Body, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let frame = body.frame().await.expect("stream open").expect("frame");
        if let Some(data) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(data));
        }
    }
    seen
}

#[tokio::test]
async fn the_get_stream_says_the_tools_changed_after_a_reload() {
    let f = fixture_site();
    let s = state(&f);
    let sid = session(&s).await;
    let open = Request::get("/mcp")
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", V)
        .header("authorization", bearer())
        .body(Body::empty())
        .unwrap();
    let res = app(s.clone()).oneshot(open).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = res.into_body();

    f.repo.write(
        "PARROT_REPEAT.yaml",
        &fn_row("PARROT_REPEAT", "text", "Repeat the words."),
    );
    f.repo.commit("Add PARROT_REPEAT", "2024-02-01T10:00:00Z");
    f.build();
    assert!(s.reload_if_changed(), "the new build is picked up");
    let seen = tokio::time::timeout(
        Duration::from_secs(10),
        read_until(&mut body, "notifications/tools/list_changed"),
    )
    .await
    .expect("a list_changed event within 10 s");
    assert!(seen.contains("event: message"), "{seen}");
    let (tools, _) = list_all(&s, &sid).await;
    assert!(tools.iter().any(|t| t["name"] == "PARROT_REPEAT"));

    // Without a session id a GET is refused like a POST.
    let a = send(
        &s,
        Request::get("/mcp")
            .header("accept", "text/event-stream")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn stdio_answers_line_by_line_as_the_owner() {
    let f = fixture_site();
    let s = state(&f);
    let (client, server) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server);
    let serving = tokio::spawn(mcp::stdio::serve_on(s, server_read, server_write));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut lines = BufReader::new(client_read).lines();
    let mut next = async || -> Json {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer")
            .expect("read")
            .expect("a line");
        serde_json::from_str(&line).expect("one JSON message per line")
    };
    let mut send_line = async |text: &str| {
        client_write.write_all(text.as_bytes()).await.unwrap();
        client_write.write_all(b"\n").await.unwrap();
    };

    send_line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).await;
    assert_eq!(next().await["error"]["code"], -32600, "initialize first");
    send_line(&initialize_body(V)).await;
    assert_eq!(next().await["result"]["protocolVersion"], V);
    send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    send_line("not json").await;
    assert_eq!(next().await["error"]["code"], -32700);
    send_line(
        r#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"GOOD_ECHO","arguments":{"body":"over stdio"}}}"#,
    )
    .await;
    let v = next().await;
    assert_eq!(v["id"], "c");
    let (is_error, doc) = result_document(&v);
    assert!(!is_error, "{v}");
    let r = ledger::get(&f.ledger_path(), doc["receipt"].as_str().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.draft.actor, "owner", "stdio runs as the local owner");
    send_line(r#"{"jsonrpc":"2.0","id":2,"method":"nope"}"#).await;
    assert_eq!(next().await["error"]["code"], -32601);

    // End of input: the server finishes and returns.
    client_write.shutdown().await.unwrap();
    drop(client_write);
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("stdio ends at end of input")
        .expect("joined")
        .expect("served");
}
