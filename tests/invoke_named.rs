//! Named arguments on the wire (issue 31): optional query parameters and path pieces, bodies
//! built field by field (JSON, form with the bracket convention, multipart), headers from
//! arguments — each request checked as a loopback server received it. And the attacker: an
//! argument that tries to leave its slot (a query parameter, a header line, a form field, a
//! JSON key) arrives as the one value it was, or is refused.

use crate::common;

use axum::Router;
use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, Method, Uri};
use axum::routing::any;
use capdir::invoke::Input;
use capdir::invoke::outcome::{Outcome, Status};
use capdir::invoke::runner::Environment;
use common::{invoker, row_with, serve};
use serde_json::{Value as Json, json};
use std::net::SocketAddr;

/// A server that answers every request with what it received: method, path, the raw query,
/// its pairs decoded, the headers that matter and the body (form bodies also as pairs).
pub async fn recorder() -> SocketAddr {
    let app = Router::new().fallback(any(
        |method: Method, uri: Uri, RawQuery(q): RawQuery, h: HeaderMap, body: Bytes| async move {
            let pairs = |s: &[u8]| -> Vec<Json> {
                url::form_urlencoded::parse(s)
                    .map(|(k, v)| json!([k, v]))
                    .collect()
            };
            let header = |n: &str| {
                h.get(n)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            let content_type = header("content-type").unwrap_or_default();
            let form = if content_type.starts_with("application/x-www-form-urlencoded") {
                json!(pairs(&body))
            } else {
                Json::Null
            };
            let mut headers = serde_json::Map::new();
            let mut digests = serde_json::Map::new();
            for (name, value) in &h {
                headers.insert(
                    name.as_str().to_string(),
                    json!(String::from_utf8_lossy(value.as_bytes())),
                );
                // The runner scrubs a credential out of the answer: its digest shows it came.
                digests.insert(name.as_str().to_string(), json!(sha256(value.as_bytes())));
            }
            axum::Json(json!({
                "method": method.as_str(),
                "path": uri.path(),
                "query_sha256": sha256(q.as_deref().unwrap_or("").as_bytes()),
                "query": q,
                "query_pairs": pairs(q.as_deref().unwrap_or("").as_bytes()),
                "content_type": content_type,
                "headers": headers,
                "header_sha256": digests,
                "body": String::from_utf8_lossy(&body),
                "form": form,
            }))
        },
    ));
    serve(app).await
}

/// Hex SHA-256, for what the recorder must not echo (credentials).
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// What the recorder saw, from an outcome; panics with the outcome when the call failed.
pub fn seen(o: &Outcome) -> Json {
    assert_eq!(o.status, Status::ProvenMaterialResult, "{}", o.output);
    let body = o.output.strip_prefix("HTTP 200:").expect("HTTP 200");
    serde_json::from_str(body).expect("the recorder's JSON")
}

/// The `[name, value]` pairs the recorder saw under `field` (query, form).
pub fn pairs(v: &Json, field: &str) -> Vec<(String, String)> {
    v[field]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p[0].as_str().unwrap_or("").to_string(),
                        p[1].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn p(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

fn schema() -> Json {
    json!({"type": "object", "properties": {
        "id": {"type": "string"},
        "limit": {"type": "integer"},
        "starting_after": {"type": "string"},
        "expand": {"type": "array", "items": {"type": "string"}},
        "name": {"type": "string"},
        "metadata": {"type": "object"},
        "key": {"type": "string"}
    }, "required": ["id"]})
}

fn args(v: Json) -> Input {
    Input::Args(v.as_object().cloned().unwrap_or_default())
}

#[tokio::test]
async fn optional_query_parameters_are_sent_only_when_given() {
    let addr = recorder().await;
    let row = row_with(
        "NAMED_LIST",
        "http",
        &format!("GET http://{addr}/v1/items/$1{{?limit,starting_after,expand[]}}"),
        "",
        json!({"input_schema": schema()}),
    );
    let inv = invoker(vec![row], Environment::fixed::<&str, &str>([]));
    let all = seen(
        &inv.invoke(
            "NAMED_LIST",
            args(json!({"id": "c 1", "limit": 3, "starting_after": "cus_9", "expand": ["data.customer", "x"]})),
        )
        .await,
    );
    assert_eq!(all["path"], "/v1/items/c%201");
    assert_eq!(
        pairs(&all, "query_pairs"),
        vec![
            p("limit", "3"),
            p("starting_after", "cus_9"),
            p("expand[]", "data.customer"),
            p("expand[]", "x")
        ]
    );
    // Absent ones are left out, not sent empty; positional pieces fill the same names.
    let some = seen(
        &inv.invoke("NAMED_LIST", args(json!({"id": "a", "limit": 2})))
            .await,
    );
    assert_eq!(some["query"], "limit=2");
    let none = seen(&inv.invoke("NAMED_LIST", Input::body("a")).await);
    assert_eq!(none["query"], Json::Null);
    let positional = seen(&inv.invoke("NAMED_LIST", Input::body("a|5||[\"x\"]")).await);
    assert_eq!(positional["query"], "limit=5&expand%5B%5D=x");
    // The required one is still required.
    let missing = inv.invoke("NAMED_LIST", args(json!({"limit": 2}))).await;
    assert_eq!(missing.status, Status::Refused, "{}", missing.output);
}

#[tokio::test]
async fn bodies_are_built_from_the_fields_given() {
    let addr = recorder().await;
    let form = row_with(
        "NAMED_FORM",
        "http",
        &format!("POST http://{addr}/v1/customers/$1"),
        "{header:Idempotency-Key=key}\n{form:name,metadata,expand}",
        json!({"input_schema": schema()}),
    );
    let json_row = row_with(
        "NAMED_JSON",
        "http",
        &format!("POST http://{addr}/v1/customers/$1"),
        "{json:name,metadata,limit}",
        json!({"input_schema": schema()}),
    );
    let multipart = row_with(
        "NAMED_MULTIPART",
        "http",
        &format!("POST http://{addr}/v1/files/$1"),
        "{multipart:name,metadata}",
        json!({"input_schema": schema()}),
    );
    let inv = invoker(
        vec![form, json_row, multipart],
        Environment::fixed::<&str, &str>([]),
    );
    let full = json!({"id": "c1", "name": "Ada L", "metadata": {"order_id": "6735"},
                      "expand": ["customer"], "key": "idem-1"});
    let f = seen(&inv.invoke("NAMED_FORM", args(full.clone())).await);
    assert_eq!(f["method"], "POST");
    assert_eq!(f["content_type"], "application/x-www-form-urlencoded");
    assert_eq!(f["headers"]["idempotency-key"], "idem-1");
    assert_eq!(
        pairs(&f, "form"),
        vec![
            p("name", "Ada L"),
            p("metadata[order_id]", "6735"),
            p("expand[]", "customer")
        ]
    );
    // Without optional fields: no field sent empty, no header, and no body at all.
    let bare = seen(&inv.invoke("NAMED_FORM", args(json!({"id": "c1"}))).await);
    assert_eq!(bare["body"], "");
    assert!(bare["headers"].get("idempotency-key").is_none());
    let j = seen(
        &inv.invoke(
            "NAMED_JSON",
            args(json!({"id": "c1", "name": "Ada", "limit": 4})),
        )
        .await,
    );
    assert_eq!(j["content_type"], "application/json");
    let body: Json = serde_json::from_str(j["body"].as_str().unwrap_or("")).expect("JSON body");
    assert_eq!(body, json!({"name": "Ada", "limit": 4}));
    let m = seen(&inv.invoke("NAMED_MULTIPART", args(full)).await);
    let ct = m["content_type"].as_str().unwrap_or("");
    let boundary = ct
        .strip_prefix("multipart/form-data; boundary=")
        .expect("multipart content type");
    let text = m["body"].as_str().unwrap_or("");
    assert!(text.contains(&format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nAda L\r\n"
    )));
    assert!(text.contains("name=\"metadata[order_id]\"\r\n\r\n6735\r\n"));
    assert!(text.ends_with(&format!("--{boundary}--\r\n")));
}

/// The attacker: every value below tries to leave its slot. Each arrives as one value of the
/// one field it was given for, or the call is refused before anything is sent.
#[tokio::test]
async fn an_argument_never_leaves_its_slot() {
    let addr = recorder().await;
    let q = row_with(
        "EVIL_QUERY",
        "http",
        &format!("GET http://{addr}/v1/items/$1{{?limit,starting_after,expand[]}}"),
        "{header:X-Name=name}",
        json!({"input_schema": schema()}),
    );
    let f = row_with(
        "EVIL_FORM",
        "http",
        &format!("POST http://{addr}/v1/c/$1"),
        "{form:name,metadata}",
        json!({"input_schema": schema()}),
    );
    let j = row_with(
        "EVIL_JSON",
        "http",
        &format!("POST http://{addr}/v1/c/$1"),
        "{json:name,metadata}",
        json!({"input_schema": schema()}),
    );
    let inv = invoker(vec![q, f, j], Environment::fixed::<&str, &str>([]));
    // A query parameter, a fragment and a path: all stay inside `starting_after` and `id`.
    let got = seen(
        &inv.invoke(
            "EVIL_QUERY",
            args(
                json!({"id": "../admin?x=1", "starting_after": "a&limit=999&admin=true#frag",
                        "expand": ["x&admin=1"]}),
            ),
        )
        .await,
    );
    assert_eq!(got["path"], "/v1/items/..%2Fadmin%3Fx%3D1");
    assert_eq!(
        pairs(&got, "query_pairs"),
        vec![
            p("starting_after", "a&limit=999&admin=true#frag"),
            p("expand[]", "x&admin=1")
        ]
    );
    // A header line: refused, nothing sent.
    let header = inv
        .invoke(
            "EVIL_QUERY",
            args(json!({"id": "a", "name": "x\r\nX-Admin: true"})),
        )
        .await;
    assert_eq!(header.status, Status::Refused, "{}", header.output);
    assert_eq!(header.error_code(), Some("bad_args"));
    // A form field: one field, its value intact; a key with brackets is refused.
    let form = seen(
        &inv.invoke(
            "EVIL_FORM",
            args(json!({"id": "a", "name": "x&admin=true", "metadata": {"k=v&admin": "1"}})),
        )
        .await,
    );
    assert_eq!(
        pairs(&form, "form"),
        vec![p("name", "x&admin=true"), p("metadata[k=v&admin]", "1")]
    );
    let bracket = inv
        .invoke(
            "EVIL_FORM",
            args(json!({"id": "a", "metadata": {"a][admin": "1"}})),
        )
        .await;
    assert_eq!(bracket.error_code(), Some("bad_args"), "{}", bracket.output);
    // A JSON key: the value stays a string of `name`.
    let js = seen(
        &inv.invoke(
            "EVIL_JSON",
            args(json!({"id": "a", "name": "\",\"admin\":true,\"x\":\""})),
        )
        .await,
    );
    let body: Json = serde_json::from_str(js["body"].as_str().unwrap_or("")).expect("JSON");
    assert_eq!(body, json!({"name": "\",\"admin\":true,\"x\":\""}));
}
