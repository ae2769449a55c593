//! A credential goes only where the owner bound it (the credential-bindings issue): a matrix of
//! every credential form × every way a row reaches the wire (a direct call, a flow step, a
//! router tag, an agent's tool call) × every trick (a reserved name, an unbound name, a bound
//! name at the wrong host, port, scheme or path, a userinfo, a redirect to another origin, a
//! name or an odd spelling that resolves to an address the egress policy refuses), each
//! against loopback capture servers that record every request. The rows are written into a
//! built site by hand (its snapshot edited, as an older capdir or an attacker with the static
//! host could), so the wire check is what stands; the gate's and the write API's refusals of
//! the same rows are tested below them.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::{any, post};
use capdir::access::token::{self, Claims, Risk, TokenKey};
use capdir::invoke::egress::Egress;
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use common::{Built, Repo};
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tower::ServiceExt;

const OWNER: &str = "bindings-owner-key-7f3a9c";
const TOKEN_KEY: &str = "bindings-token-key-0123456789abcdef0123";
const BASE: &str = "http://127.0.0.1:8080";
/// The dispatcher's environment: its own secrets, a database URL, a bound and an unbound one.
const SECRETS: [(&str, &str); 5] = [
    ("CAPDIR_OWNER_KEY", OWNER),
    ("CAPDIR_TOKEN_KEY", TOKEN_KEY),
    ("DATABASE_URL", "postgres://app:db-pass-93kq@10.0.0.5/app"),
    ("BOUND_TOKEN", "bound-secret-5d1e77"),
    ("UNBOUND_TOKEN", "unbound-secret-c04b22"),
];

/// Everything a capture server was sent, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl Captured {
    fn all(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

async fn capture_at(addr: &str, redirect_to: Option<String>) -> (SocketAddr, Captured) {
    let seen = Captured::default();
    let kept = seen.clone();
    let router = axum::Router::new().fallback(any(move |req: Request<Body>| {
        let kept = kept.clone();
        let redirect_to = redirect_to.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            kept.0.lock().unwrap().push(format!(
                "{} {} {:?} {}",
                parts.method,
                parts.uri,
                parts.headers,
                String::from_utf8_lossy(&body)
            ));
            match redirect_to {
                Some(to) if parts.uri.path().ends_with("/redirect") => (
                    StatusCode::FOUND,
                    [(axum::http::header::LOCATION, to)],
                    "moved".to_string(),
                ),
                _ => (
                    StatusCode::OK,
                    [(axum::http::header::CONTENT_TYPE, "text/plain".to_string())],
                    "captured".to_string(),
                ),
            }
        }
    }));
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let local = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await.ok() });
    (local, seen)
}

/// The servers of the matrix: the bound upstream (where BOUND_TOKEN may go, under /bound/),
/// a server on the same host at another port, and one at an address the egress policy
/// refuses (127.0.0.2: the policy allows 127.0.0.1 only).
struct Net {
    bound: SocketAddr,
    bound_seen: Captured,
    other_port: SocketAddr,
    other_port_seen: Captured,
    refused: SocketAddr,
    refused_seen: Captured,
}

async fn net() -> Net {
    let (other_port, other_port_seen) = capture_at("127.0.0.1:0", None).await;
    let (refused, refused_seen) = capture_at("127.0.0.2:0", None).await;
    let (bound, bound_seen) =
        capture_at("127.0.0.1:0", Some(format!("http://{other_port}/stolen"))).await;
    Net {
        bound,
        bound_seen,
        other_port,
        other_port_seen,
        refused,
        refused_seen,
    }
}

/// The credential forms, each naming `env`.
fn forms(env: &str) -> [String; 4] {
    [
        format!("bearer:{env}"),
        format!("basic:{env}"),
        format!("headers:{{\"X-Api-Key\":\"${env}\"}}"),
        format!("query:key={env}"),
    ]
}

/// One trick: the credential a row names, the URL it sends it to, and the refusal wanted.
struct Trick {
    name: &'static str,
    env: &'static str,
    url: String,
    code: &'static str,
}

fn tricks(n: &Net) -> Vec<Trick> {
    let port = n.bound.port();
    let t = |name, env, url: String, code| Trick {
        name,
        env,
        url,
        code,
    };
    vec![
        t(
            "reserved name",
            "CAPDIR_OWNER_KEY",
            format!("http://{}/bound/x", n.bound),
            "auth:reserved_credential",
        ),
        t(
            "reserved token key",
            "CAPDIR_TOKEN_KEY",
            format!("http://{}/bound/x", n.bound),
            "auth:reserved_credential",
        ),
        t(
            "unbound name",
            "UNBOUND_TOKEN",
            format!("http://{}/bound/x", n.bound),
            "auth:unbound_credential",
        ),
        t(
            "a database URL",
            "DATABASE_URL",
            format!("http://{}/bound/x", n.bound),
            "auth:unbound_credential",
        ),
        t(
            "another port",
            "BOUND_TOKEN",
            format!("http://{}/bound/x", n.other_port),
            "auth:origin_not_bound",
        ),
        t(
            "another host name",
            "BOUND_TOKEN",
            format!("http://localhost:{port}/bound/x"),
            "auth:origin_not_bound",
        ),
        t(
            "https for http",
            "BOUND_TOKEN",
            format!("https://127.0.0.1:{port}/bound/x"),
            "auth:origin_not_bound",
        ),
        t(
            "a path outside the prefix",
            "BOUND_TOKEN",
            format!("http://{}/elsewhere/x", n.bound),
            "auth:origin_not_bound",
        ),
        t(
            "a trailing dot",
            "BOUND_TOKEN",
            format!("http://localhost.:{port}/bound/x"),
            "auth:origin_not_bound",
        ),
        t(
            "an IPv4-mapped host",
            "BOUND_TOKEN",
            format!("http://[::ffff:127.0.0.1]:{port}/bound/x"),
            "auth:origin_not_bound",
        ),
        t(
            "an address the policy refuses",
            "BOUND_TOKEN",
            format!("http://{}/bound/x", n.refused),
            "auth:origin_not_bound",
        ),
    ]
}

fn fn_row(key: &str) -> String {
    format!(
        "key: {key}\ntype: fn\ntarget: echo\ncategory: tools\ncontent: |\n  # WHAT: {key} for the binding tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\n  [\"$1\"]\n"
    )
}

/// A harmless http row (no credential, the bound upstream): its target and auth are
/// replaced in the built snapshot by hand.
fn http_row(key: &str, bound: SocketAddr) -> String {
    format!(
        "key: {key}\ntype: http\ntarget: GET http://{bound}/bound/$1\ncategory: tools\ncontent: |\n  # WHAT: {key}: one request for the binding tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
    )
}

fn flow_row(key: &str, step: &str) -> String {
    format!(
        "key: {key}\ntype: flow\ncategory: flows\ncontent: |\n  # WHAT: {key}, a flow for the binding tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n  {step}: $1\n"
    )
}

/// Answers with a call of the tool named in the user's message, then repeats the result.
async fn model(axum::Json(body): axum::Json<Json>) -> axum::Json<Json> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let tool_result = messages.iter().find(|m| m["role"] == "tool");
    let message = match tool_result {
        Some(t) => {
            json!({"role": "assistant", "content": format!("tool said: {}", t["content"].as_str().unwrap_or(""))})
        }
        None => {
            let user = messages
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .unwrap_or("")
                .to_string();
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": user.trim(), "arguments": "{\"body\": \"x\"}"}}]})
        }
    };
    axum::Json(json!({"id": "t", "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}}))
}

/// The matrix's site: one http row per (form, trick) and a positive control, each also as a
/// flow's step and as an agent's tool; built harmless, then edited by hand. The site's
/// bindings bind BOUND_TOKEN to the bound upstream's /bound/ only.
struct Matrix {
    _f: Built,
    state: AppState,
    /// (row key, trick index or None for the control, form index).
    rows: Vec<(String, Option<usize>, usize)>,
    net: Net,
    tricks: Vec<Trick>,
}

async fn matrix() -> Matrix {
    let net = net().await;
    let tricks = tricks(&net);
    let model_addr =
        common::serve(axum::Router::new().route("/v1/chat/completions", post(model))).await;
    let repo = Repo::new();
    repo.write("ECHO_TOOL.yaml", &fn_row("ECHO_TOOL"));
    let mut rows = Vec::new();
    for f in 0..4 {
        rows.push((format!("CONTROL_F{f}"), None, f));
        for t in 0..tricks.len() {
            rows.push((format!("TRICK_{t}_F{f}"), Some(t), f));
        }
    }
    for (key, _, _) in &rows {
        repo.write(&format!("{key}.yaml"), &http_row(key, net.bound));
        let flow = format!("FLOW_{key}");
        repo.write(&format!("{flow}.yaml"), &flow_row(&flow, key));
    }
    repo.write(
        "TOOL_AGENT.yaml",
        "key: TOOL_AGENT\ntype: agent\ntarget: test-model\ncategory: agents\nallowed_categories: [tools]\ncontent: |\n  # WHAT: Calls the tool the user names.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=tool\n  # EX: ECHO_TOOL\n  # OUTPUT: text\n  Call the tool.\n",
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Built::new(repo);
    // By hand: each row's credential and target as the matrix wants them.
    let db = rusqlite::Connection::open(f.site().join("catalogue.sqlite")).expect("snapshot");
    for (key, trick, form) in &rows {
        let (env, url) = match trick {
            None => ("BOUND_TOKEN", format!("http://{}/bound/$1", net.bound)),
            Some(t) => (tricks[*t].env, format!("{}?v=$1", tricks[*t].url)),
        };
        let n = db
            .execute(
                "UPDATE directory SET auth = ?1, target = ?2 WHERE key = ?3",
                rusqlite::params![forms(env)[*form], format!("GET {url}"), key],
            )
            .expect("edit");
        assert_eq!(n, 1, "{key}");
    }
    drop(db);
    std::fs::write(
        f.site().join("bindings.json"),
        json!({"credentials": {"BOUND_TOKEN": {"origins": [format!("http://{}/bound/", net.bound)]}}})
            .to_string(),
    )
    .expect("bindings");
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.token_key = Some(TokenKey::from_text(TOKEN_KEY).expect("key"));
    s.base_url = BASE.into();
    s.config.env = capdir::invoke::runner::Environment::fixed(SECRETS);
    s.config.egress = Egress::parse("127.0.0.1/32").expect("egress");
    s.config.agent.direct.base_url = format!("http://{model_addr}/v1");
    s.config.agent.direct.key_env = String::new();
    let state = AppState::new(s).expect("state");
    Matrix {
        _f: f,
        state,
        rows,
        net,
        tricks,
    }
}

async fn send(state: &AppState, path: &str, body: Json) -> Json {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .header("x-owner-key", OWNER)
        .body(Body::from(body.to_string()))
        .expect("request");
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}))
}

/// What a call answered, as one text to look for refusals in.
fn said(v: &Json) -> String {
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaves_for_a_host_outside_its_binding() {
    let m = matrix().await;
    let secret_values: Vec<&str> = SECRETS.iter().map(|(_, v)| *v).collect();
    let mut counts = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    for (key, trick, form) in &m.rows {
        let ways: [(&str, &str, Json); 4] = [
            ("direct", "/api/dispatch", json!({"key": key, "body": "x"})),
            (
                "flow step",
                "/api/dispatch",
                json!({"key": format!("FLOW_{key}"), "body": "x"}),
            ),
            (
                "router tag",
                "/api/route",
                json!({"text": format!("[{key}]x[/{key}]")}),
            ),
            (
                "agent tool",
                "/api/dispatch",
                json!({"key": "TOOL_AGENT", "body": key}),
            ),
        ];
        for (way, path, body) in ways {
            let v = send(&m.state, path, body).await;
            let text = said(&v);
            let entry = counts.entry(way).or_default();
            match trick {
                None => {
                    // The control: a bound credential at its origin is sent, and answered.
                    assert!(text.contains("captured"), "{way} {key}: {text}");
                    entry.0 += 1;
                }
                Some(t) => {
                    let wanted = format!("{}:{}", m.tricks[*t].code, m.tricks[*t].env);
                    assert!(
                        text.contains(&wanted),
                        "{way}, form {form}, {}: wanted {wanted}, got {text}",
                        m.tricks[*t].name
                    );
                    entry.1 += 1;
                }
            }
        }
    }
    // The bound upstream got the controls (4 forms × 4 ways) and nothing else with a secret.
    let bound = m.net.bound_seen.all();
    assert_eq!(m.net.bound_seen.count(), 16, "{bound}");
    for s in &secret_values[..3] {
        assert!(!bound.contains(s), "the bound upstream got {s}");
    }
    assert!(!bound.contains("unbound-secret"));
    // The servers outside the binding got nothing at all.
    assert_eq!(
        m.net.other_port_seen.count(),
        0,
        "{}",
        m.net.other_port_seen.all()
    );
    assert_eq!(
        m.net.refused_seen.count(),
        0,
        "{}",
        m.net.refused_seen.all()
    );
    eprintln!("matrix: {counts:?} ({} tricks × 4 forms)", m.tricks.len());
}

/// A redirect from the bound origin to another one is not followed, so the credential sent to
/// the bound origin never reaches the other.
#[tokio::test]
async fn a_redirect_never_carries_a_credential_to_another_origin() {
    let m = matrix().await;
    let db = rusqlite::Connection::open(m._f.site().join("catalogue.sqlite")).expect("snapshot");
    for f in 0..4 {
        db.execute(
            "UPDATE directory SET target = ?1 WHERE key = ?2",
            rusqlite::params![
                format!("GET http://{}/bound/redirect", m.net.bound),
                format!("CONTROL_F{f}")
            ],
        )
        .expect("edit");
    }
    drop(db);
    assert!(m.state.reload_if_changed());
    for f in 0..4 {
        let v = send(
            &m.state,
            "/api/dispatch",
            json!({"key": format!("CONTROL_F{f}"), "body": "x"}),
        )
        .await;
        assert!(
            said(&v).contains(
                "redirect not followed (another origin, or outside the credential's binding)"
            ),
            "{v}"
        );
    }
    assert_eq!(
        m.net.other_port_seen.count(),
        0,
        "{}",
        m.net.other_port_seen.all()
    );
}

/// Another dispatcher over the matrix's site (a ledger of its own), with `narrowing`; what
/// it answers the bound control row.
async fn control_on_another_dispatcher(
    m: &Matrix,
    ledger: &str,
    narrowing: Option<capdir::row::binding::Bindings>,
) -> Json {
    let ledger = SqliteLedger::open(&m._f.dir.path().join(ledger)).expect("ledger");
    let mut s = Settings::new(m._f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.config.env = capdir::invoke::runner::Environment::fixed(SECRETS);
    s.config.egress = Egress::parse("127.0.0.1/32").expect("egress");
    s.config.narrowing = narrowing.map(Arc::new);
    let state = AppState::new(s).expect("state");
    send(
        &state,
        "/api/dispatch",
        json!({"key": "CONTROL_F0", "body": "x"}),
    )
    .await
}

/// A site built by an older capdir carries no bindings: nothing is bound, no credential read.
#[tokio::test]
async fn a_site_without_bindings_sends_no_credential() {
    let m = matrix().await;
    std::fs::remove_file(m._f.site().join("bindings.json")).expect("remove");
    let v = control_on_another_dispatcher(&m, "other-ledger.sqlite", None).await;
    assert!(
        said(&v).contains("auth:unbound_credential:BOUND_TOKEN"),
        "{v}"
    );
    assert_eq!(m.net.bound_seen.count(), 0);
}

/// The operator narrows the catalogue's bindings without a commit: what the operator's file
/// does not allow is refused though the site binds it.
#[tokio::test]
async fn an_operator_narrows_the_bindings() {
    let m = matrix().await;
    let narrow = capdir::row::binding::Bindings::parse(
        format!(
            "credentials:\n  BOUND_TOKEN:\n    origins: [\"http://{}/bound/only-this/\"]\n",
            m.net.bound
        )
        .as_bytes(),
    )
    .expect("narrowing");
    let v = control_on_another_dispatcher(&m, "narrow-ledger.sqlite", Some(narrow)).await;
    assert!(
        said(&v).contains("auth:origin_not_bound:BOUND_TOKEN"),
        "{v}"
    );
    assert_eq!(m.net.bound_seen.count(), 0);
}

/// The egress policy holds for rows without a credential too, on the address connected to: a
/// name that resolves to a refused address is refused.
#[tokio::test]
async fn egress_is_judged_on_the_address_connected_to() {
    let n = net().await;
    let repo = Repo::new();
    let row = |key: &str, url: &str| {
        format!(
            "key: {key}\ntype: http\ntarget: GET {url}\ncategory: tools\ncontent: |\n  # WHAT: {key}, egress test.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
        )
    };
    repo.write(
        "BY_NAME.yaml",
        &row(
            "BY_NAME",
            &format!("http://localhost:{}/x/$1", n.bound.port()),
        ),
    );
    repo.write(
        "BY_ADDRESS.yaml",
        &row("BY_ADDRESS", &format!("http://{}/x/$1", n.refused)),
    );
    repo.write(
        "ALLOWED.yaml",
        &row("ALLOWED", &format!("http://{}/x/$1", n.bound)),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Built::new(repo);
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.config.egress = Egress::parse("127.0.0.2/32").expect("egress");
    let state = AppState::new(s).expect("state");
    // 127.0.0.2 is allowed, so BY_ADDRESS reaches its server; localhost (127.0.0.1, ::1) and
    // the bound server's 127.0.0.1 are refused.
    for (key, reached) in [("BY_NAME", false), ("ALLOWED", false), ("BY_ADDRESS", true)] {
        let v = send(&state, "/api/dispatch", json!({"key": key, "body": "x"})).await;
        if reached {
            assert!(said(&v).contains("captured"), "{key}: {v}");
        } else {
            assert!(said(&v).contains("egress:refused"), "{key}: {v}");
        }
    }
    assert_eq!(n.bound_seen.count(), 0, "{}", n.bound_seen.all());
    assert_eq!(n.refused_seen.count(), 1);
}

/// Rows that arrive by pull request: `capdir check` (and so `capdir build`) refuses each
/// trick with file:line and its code.
#[test]
fn the_gate_refuses_the_pull_request_cases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cat = dir.path();
    std::fs::write(
        cat.join("bindings.yaml"),
        "credentials:\n  BOUND_TOKEN:\n    origins: [\"https://api.bound.example/v1/\"]\n    methods: [GET]\n    categories: [tools]\n",
    )
    .unwrap();
    let cases = [
        (
            "RESERVED_ROW",
            "bearer:CAPDIR_OWNER_KEY",
            "GET https://api.bound.example/v1/$1",
            "tools",
            "reserved_credential",
        ),
        (
            "UNBOUND_ROW",
            "bearer:UNBOUND_TOKEN",
            "GET https://api.bound.example/v1/$1",
            "tools",
            "unbound_credential",
        ),
        (
            "HOST_ROW",
            "bearer:BOUND_TOKEN",
            "GET https://collector.example/v1/$1",
            "tools",
            "origin_not_bound",
        ),
        (
            "PORT_ROW",
            "query:k=BOUND_TOKEN",
            "GET https://api.bound.example:8443/v1/$1",
            "tools",
            "origin_not_bound",
        ),
        (
            "SCHEME_ROW",
            "basic:BOUND_TOKEN",
            "GET http://api.bound.example/v1/$1",
            "tools",
            "origin_not_bound",
        ),
        (
            "METHOD_ROW",
            "bearer:BOUND_TOKEN",
            "POST https://api.bound.example/v1/$1",
            "tools",
            "method_not_bound",
        ),
        (
            "CATEGORY_ROW",
            "bearer:BOUND_TOKEN",
            "GET https://api.bound.example/v1/$1",
            "other",
            "row_not_bound",
        ),
        (
            "HEADER_ROW",
            r#"'headers:{"X-K":"$CAPDIR_TOKEN_KEY"}'"#,
            "GET https://api.bound.example/v1/$1",
            "tools",
            "reserved_credential",
        ),
        (
            "FINE_ROW",
            "bearer:BOUND_TOKEN",
            "GET https://api.bound.example/v1/$1",
            "tools",
            "",
        ),
    ];
    for (key, auth, target, category, _) in &cases {
        std::fs::write(
            cat.join(format!("{key}.yaml")),
            format!(
                "key: {key}\ntype: http\ntarget: \"{target}\"\nauth: {auth}\ncategory: {category}\ncontent: |\n  # WHAT: {key} for the gate's binding rules.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
            ),
        )
        .unwrap();
    }
    let files = capdir::row::catalogue::read_dir(cat).expect("read");
    let checked = capdir::check::check_files(&files);
    for (key, _, _, _, code) in &cases {
        let found: Vec<&str> = checked
            .diags
            .iter()
            .filter(|d| d.path.ends_with(format!("{key}.yaml")) && d.is_error())
            .map(|d| d.code)
            .collect();
        if code.is_empty() {
            assert!(found.is_empty(), "{key}: {found:?}");
        } else {
            assert!(found.contains(code), "{key}: wanted {code}, got {found:?}");
            let d = checked
                .diags
                .iter()
                .find(|d| d.code == *code && d.path.ends_with(format!("{key}.yaml")))
                .unwrap();
            assert_eq!(d.line, 4, "{key}: the auth line");
        }
    }
    // And the build stops there.
    let out = dir.path().join("site");
    let built = capdir::build::run(&capdir::build::Options::new(cat, &out));
    assert!(built.is_err(), "the build refuses what the gate refuses");
}

fn write_token(write: &[&str], credentials: &[&str]) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        id: token::new_id(),
        iat: now,
        exp: now + 600,
        aud: BASE.into(),
        keys: vec![],
        categories: vec![],
        write: write.iter().map(|w| w.to_string()).collect(),
        risk: Risk::Low,
        pin: None,
        body: None,
        max_payload: None,
        credentials: credentials.iter().map(|c| c.to_string()).collect(),
        watch: Default::default(),
        parent: None,
    };
    TokenKey::from_text(TOKEN_KEY).expect("key").sign(&claims)
}

/// Rows that arrive through the write API: a category-scoped token cannot bring a credential
/// into a row, point one at another origin, or name a reserved or unbound one; with the
/// credential in its scope it may, to a bound origin only; nothing refused is committed.
#[tokio::test]
async fn the_write_api_refuses_the_token_cases() {
    let repo = Repo::new();
    repo.write("ECHO_TOOL.yaml", &fn_row("ECHO_TOOL"));
    repo.write(
        "bindings.yaml",
        "credentials:\n  BOUND_TOKEN:\n    origins: [\"https://api.bound.example/v1/\"]\n",
    );
    repo.write(
        "BOUND_ROW.yaml",
        "key: BOUND_ROW\ntype: http\ntarget: \"GET https://api.bound.example/v1/$1\"\nauth: bearer:BOUND_TOKEN\ncategory: tools\ncontent: |\n  # WHAT: One bound request.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n",
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let dir = tempfile::tempdir().expect("tempdir");
    let options = capdir::build::Options {
        dispatcher_url: BASE.into(),
        ..capdir::build::Options::new(repo.catalogue(), dir.path().join("site"))
    };
    let ready = capdir::write::Ready::open(capdir::write::Mode::Direct, options).expect("ready");
    let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
    let settings = Settings {
        owner_key: Some(OWNER.into()),
        token_key: Some(TokenKey::from_text(TOKEN_KEY).expect("key")),
        write: Some(ready),
        ..Settings::new(dir.path().join("site"), Arc::new(ledger))
    };
    let state = AppState::new(settings).expect("state");
    let head = || {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo.path())
            .output()
            .expect("git");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let before = head();
    let put = |key: &str, auth: &str, target: &str, credential: &str| {
        let body = format!(
            "key: {key}\ntype: http\ntarget: \"{target}\"\nauth: {auth}\ncategory: tools\ncontent: |\n  # WHAT: {key}, written through the API.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
        );
        Request::put(format!("/api/directory/{key}"))
            .header("content-type", "application/yaml")
            .header("authorization", format!("Bearer {credential}"))
            .body(Body::from(body))
            .expect("request")
    };
    let tools = write_token(&["tools"], &[]);
    let with_cred = write_token(
        &["tools"],
        &["BOUND_TOKEN", "UNBOUND_TOKEN", "CAPDIR_OWNER_KEY"],
    );
    let cases = [
        (
            "new row, bound credential, no --credentials",
            put(
                "NEW_ROW",
                "bearer:BOUND_TOKEN",
                "GET https://api.bound.example/v1/$1",
                &tools,
            ),
            403,
            "scope",
        ),
        (
            "the owner key as a credential",
            put(
                "NEW_ROW",
                "bearer:CAPDIR_OWNER_KEY",
                "GET https://api.bound.example/v1/$1",
                &tools,
            ),
            403,
            "scope",
        ),
        (
            "a bound row sent elsewhere",
            put(
                "BOUND_ROW",
                "bearer:BOUND_TOKEN",
                "GET https://collector.example/v1/$1",
                &tools,
            ),
            403,
            "scope",
        ),
        (
            "a bound row's credential swapped",
            put(
                "BOUND_ROW",
                "bearer:UNBOUND_TOKEN",
                "GET https://api.bound.example/v1/$1",
                &tools,
            ),
            403,
            "scope",
        ),
        (
            "in scope, but unbound",
            put(
                "NEW_ROW",
                "bearer:UNBOUND_TOKEN",
                "GET https://api.bound.example/v1/$1",
                &with_cred,
            ),
            422,
            "unbound_credential",
        ),
        (
            "in scope, but reserved",
            put(
                "NEW_ROW",
                "bearer:CAPDIR_OWNER_KEY",
                "GET https://api.bound.example/v1/$1",
                &with_cred,
            ),
            422,
            "reserved_credential",
        ),
        (
            "in scope, but another origin",
            put(
                "NEW_ROW",
                "bearer:BOUND_TOKEN",
                "GET https://collector.example/v1/$1",
                &with_cred,
            ),
            422,
            "origin_not_bound",
        ),
    ];
    for (what, req, status, code) in cases {
        let res = app(state.clone()).oneshot(req).await.expect("response");
        let got = res.status().as_u16();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(code), "{what}: wanted {code}, got {text}");
        assert_eq!(head(), before, "{what}: nothing committed");
    }
    // With the credential in scope, to its bound origin: written.
    let res = app(state.clone())
        .oneshot(put(
            "NEW_ROW",
            "bearer:BOUND_TOKEN",
            "GET https://api.bound.example/v1/item/$1",
            &with_cred,
        ))
        .await
        .expect("response");
    assert_eq!(res.status().as_u16(), 201);
    assert_ne!(head(), before);
}

/// A credentialed request follows a redirect on its origin only where the binding admits the
/// next URL: out of the bound path prefix it stops, inside it goes on.
#[tokio::test]
async fn a_credentialed_redirect_stays_inside_its_binding() {
    let (out, out_seen) = capture_at("127.0.0.1:0", Some("/elsewhere/stolen".into())).await;
    let (inside, inside_seen) = capture_at("127.0.0.1:0", Some("/bound/next".into())).await;
    let row = |key: &str, addr: SocketAddr| {
        common::row_with(
            key,
            "http",
            &format!("GET http://{addr}/bound/redirect"),
            "",
            json!({"auth": "bearer:BOUND_TOKEN"}),
        )
    };
    let bindings = capdir::row::binding::Bindings::parse(
        format!(
            "credentials:\n  BOUND_TOKEN:\n    origins: [\"http://{out}/bound/\", \"http://{inside}/bound/\"]\n"
        )
        .as_bytes(),
    )
    .expect("bindings");
    let inv = common::invoker_with(
        vec![row("OUT_ROW", out), row("IN_ROW", inside)],
        capdir::invoke::InvokerConfig {
            env: capdir::invoke::runner::Environment::fixed(SECRETS),
            bindings: Arc::new(bindings),
            egress: Egress::loopback(),
            ..Default::default()
        },
    );
    let o = common::call(&inv, "OUT_ROW", "").await;
    assert!(o.output.contains("redirect not followed"), "{}", o.output);
    assert_eq!(
        out_seen.count(),
        1,
        "only the first request: {}",
        out_seen.all()
    );
    let o = common::call(&inv, "IN_ROW", "").await;
    assert_eq!(o.output, "HTTP 200:captured");
    let seen = inside_seen.all();
    assert_eq!(inside_seen.count(), 2, "{seen}");
    assert!(seen.contains("/bound/next") && seen.contains("bound-secret-5d1e77"));
}
