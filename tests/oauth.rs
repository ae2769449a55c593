//! `oauth:` credentials against a local authorization server speaking RFC 6749 (a token
//! endpoint with HTTP Basic client authentication, the client-credentials and refresh-token
//! grants, `expires_in`, rotated refresh tokens, `invalid_grant`) and an API that takes only
//! the access tokens it issued. What each side saw is counted.

use crate::common;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use capdir::invoke::InvokerConfig;
use capdir::invoke::outcome::Status;
use capdir::invoke::runner::Environment;
use capdir::row::binding::Bindings;
use serde_json::json;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

const CLIENT_ID: &str = "client-7";
const CLIENT_SECRET: &str = "s3cret-client-value-that-must-never-show";
const FIRST_REFRESH: &str = "refresh-token-one";

#[derive(Default)]
struct Auth {
    /// Access tokens issued and still good.
    access: HashSet<String>,
    /// Refresh tokens still good (each is used once: the endpoint rotates them).
    refresh: HashSet<String>,
    /// Token requests, by grant type.
    grants: Vec<String>,
    expires_in: u64,
    issued: u64,
}

type Shared = Arc<Mutex<Auth>>;

async fn token(
    State(auth): State<Shared>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, axum::Json<serde_json::Value>) {
    use base64::Engine as _;
    let basic = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    if basic.as_deref() != Some(&format!("{CLIENT_ID}:{CLIENT_SECRET}")) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        );
    }
    let form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(body.as_bytes())
            .into_owned()
            .collect();
    let mut a = auth.lock().unwrap();
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    a.grants.push(grant.clone());
    let mut answer = json!({"token_type": "Bearer", "expires_in": a.expires_in});
    match grant.as_str() {
        "client_credentials" => {}
        "refresh_token" => {
            let sent = form.get("refresh_token").cloned().unwrap_or_default();
            if !a.refresh.remove(&sent) {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(
                        json!({"error": "invalid_grant", "error_description": format!("refresh token {sent} is not valid")}),
                    ),
                );
            }
            a.issued += 1;
            let rotated = format!("refresh-token-{}", a.issued + 1);
            a.refresh.insert(rotated.clone());
            answer["refresh_token"] = json!(rotated);
        }
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "unsupported_grant_type"})),
            );
        }
    }
    a.issued += 1;
    let access = format!("access-{}", a.issued);
    a.access.insert(access.clone());
    answer["access_token"] = json!(access);
    (StatusCode::OK, axum::Json(answer))
}

async fn data(State(auth): State<Shared>, headers: HeaderMap) -> (StatusCode, String) {
    let sent = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    if auth.lock().unwrap().access.contains(&sent) {
        (StatusCode::OK, "the data".into())
    } else {
        (StatusCode::UNAUTHORIZED, "bad token".into())
    }
}

/// The authorization server and the API, on two loopback ports.
async fn servers(expires_in: u64) -> (Shared, SocketAddr, SocketAddr) {
    let auth: Shared = Arc::new(Mutex::new(Auth {
        expires_in,
        ..Auth::default()
    }));
    auth.lock().unwrap().refresh.insert(FIRST_REFRESH.into());
    let token_server = common::serve(
        axum::Router::new()
            .route("/oauth/token", post(token))
            .with_state(auth.clone()),
    )
    .await;
    let api = common::serve(
        axum::Router::new()
            .route("/data", get(data))
            .with_state(auth.clone()),
    )
    .await;
    (auth, token_server, api)
}

fn oauth_row(api: SocketAddr, token_server: SocketAddr, refresh: bool) -> capdir::row::Row {
    let mut o = json!({
        "token_url": format!("http://{token_server}/oauth/token"),
        "client_id": "$SHOP_CLIENT_ID",
        "client_secret": "$SHOP_CLIENT_SECRET",
    });
    if refresh {
        o["refresh_token"] = json!("$SHOP_REFRESH_TOKEN");
    }
    common::row_with(
        "SHOP_DATA",
        "http",
        &format!("GET http://{api}/data"),
        "",
        json!({"auth": format!("oauth:{o}"), "content": "# WHAT: the data\n# ARGS: none\n"}),
    )
}

/// An invoker whose variables go to the API and, when `endpoint_bound`, the token endpoint.
fn invoker(
    row: capdir::row::Row,
    api: SocketAddr,
    token_server: SocketAddr,
    endpoint_bound: bool,
) -> capdir::invoke::Invoker {
    let mut pairs = Vec::new();
    let api_origin = format!("http://{api}");
    let token_origin = format!("http://{token_server}");
    for env in ["SHOP_CLIENT_ID", "SHOP_CLIENT_SECRET", "SHOP_REFRESH_TOKEN"] {
        pairs.push((env, api_origin.clone()));
        if endpoint_bound {
            pairs.push((env, token_origin.clone()));
        }
    }
    let mut yaml = String::from("credentials:\n");
    for env in ["SHOP_CLIENT_ID", "SHOP_CLIENT_SECRET", "SHOP_REFRESH_TOKEN"] {
        let origins: Vec<String> = pairs
            .iter()
            .filter(|(e, _)| *e == env)
            .map(|(_, o)| format!("\"{o}\""))
            .collect();
        yaml.push_str(&format!(
            "  {env}:\n    origins: [{}]\n",
            origins.join(", ")
        ));
    }
    let bindings = Bindings::parse(yaml.as_bytes()).expect("bindings");
    common::invoker_with(
        vec![row],
        InvokerConfig {
            env: Environment::fixed([
                ("SHOP_CLIENT_ID", CLIENT_ID),
                ("SHOP_CLIENT_SECRET", CLIENT_SECRET),
                ("SHOP_REFRESH_TOKEN", FIRST_REFRESH),
            ]),
            bindings: Arc::new(bindings),
            ..Default::default()
        },
    )
}

fn no_secret(text: &str) {
    for s in [CLIENT_SECRET, CLIENT_ID, "access-", FIRST_REFRESH] {
        assert!(!text.contains(s), "`{s}` in: {text}");
    }
}

#[tokio::test]
async fn a_client_credentials_token_is_fetched_once_cached_and_fetched_again_near_its_expiry() {
    let (auth, token_server, api) = servers(2).await;
    let inv = invoker(oauth_row(api, token_server, false), api, token_server, true);
    for _ in 0..3 {
        let out = common::call(&inv, "SHOP_DATA", "").await;
        assert_eq!(out.status, Status::ProvenMaterialResult, "{}", out.output);
        assert_eq!(out.output, "HTTP 200:the data");
    }
    assert_eq!(
        auth.lock().unwrap().grants,
        ["client_credentials"],
        "one token for three calls"
    );
    // Past its life less the margin, the next call fetches a new one.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(out.status, Status::ProvenMaterialResult, "{}", out.output);
    assert_eq!(auth.lock().unwrap().grants.len(), 2);
    no_secret(&serde_json::to_string(&out).unwrap());
}

#[tokio::test]
async fn an_api_401_forces_one_fresh_token_before_the_call_fails() {
    let (auth, token_server, api) = servers(3600).await;
    let inv = invoker(oauth_row(api, token_server, false), api, token_server, true);
    assert_eq!(
        common::call(&inv, "SHOP_DATA", "").await.status,
        Status::ProvenMaterialResult
    );
    // The API forgets every token it issued (revoked early): one fresh token, one more try.
    auth.lock().unwrap().access.clear();
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(out.status, Status::ProvenMaterialResult, "{}", out.output);
    assert_eq!(auth.lock().unwrap().grants.len(), 2);
    // An API that refuses every token: the call fails after that one retry, not more.
    let api_refuses = common::serve(
        axum::Router::new().route("/data", get(|| async { (StatusCode::UNAUTHORIZED, "no") })),
    )
    .await;
    let inv = invoker(
        oauth_row(api_refuses, token_server, false),
        api_refuses,
        token_server,
        true,
    );
    let before = auth.lock().unwrap().grants.len();
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(
        out.error.as_ref().map(|e| e.code.as_str()),
        Some("http:401"),
        "{}",
        out.output
    );
    assert_eq!(
        auth.lock().unwrap().grants.len(),
        before + 2,
        "the first token and one refresh"
    );
    no_secret(&out.output);
}

#[tokio::test]
async fn a_refresh_token_is_rotated_and_a_revoked_one_is_a_named_failure() {
    let (auth, token_server, api) = servers(1).await;
    let inv = invoker(oauth_row(api, token_server, true), api, token_server, true);
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(out.status, Status::ProvenMaterialResult, "{}", out.output);
    // A one-second token is fetched again on every call, each time with the refresh token
    // the endpoint rotated to (the first one is spent: using it again would fail).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(out.status, Status::ProvenMaterialResult, "{}", out.output);
    assert_eq!(
        auth.lock().unwrap().grants,
        ["refresh_token", "refresh_token"]
    );
    // The authorization server revokes every refresh token: a named failure, no secret.
    auth.lock().unwrap().refresh.clear();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(out.status, Status::Failed, "{}", out.output);
    assert_eq!(
        out.error.as_ref().map(|e| e.code.as_str()),
        Some("auth:oauth:invalid_grant"),
        "{}",
        out.output
    );
    no_secret(&out.output);
    assert!(!out.output.contains("refresh-token-"), "{}", out.output);
}

#[tokio::test]
async fn a_token_endpoint_the_owner_did_not_bind_gets_no_secret() {
    let (auth, token_server, api) = servers(3600).await;
    let row = oauth_row(api, token_server, false);
    // The gate says so before anything runs…
    let mut yaml = String::from("credentials:\n");
    for env in ["SHOP_CLIENT_ID", "SHOP_CLIENT_SECRET"] {
        yaml.push_str(&format!("  {env}:\n    origins: [\"http://{api}\"]\n"));
    }
    let api_only = Bindings::parse(yaml.as_bytes()).expect("bindings");
    let diags = capdir::check::check_bindings(&[&row], &api_only);
    assert!(
        diags
            .iter()
            .any(|d| d.code == "unbound_origin" || d.message.contains(&token_server.to_string())),
        "{diags:?}"
    );
    // …and the runner refuses before it reads a secret or reaches the endpoint.
    let inv = invoker(row, api, token_server, false);
    let out = common::call(&inv, "SHOP_DATA", "").await;
    assert_eq!(out.status, Status::Failed, "{}", out.output);
    assert!(
        out.error
            .as_ref()
            .is_some_and(|e| e.code.starts_with("auth:")),
        "{}",
        out.output
    );
    assert!(
        auth.lock().unwrap().grants.is_empty(),
        "the token endpoint was reached"
    );
    no_secret(&out.output);
}
