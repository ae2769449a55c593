//! The fn runner through whole invocations: every error string, every builtin reached through a
//! row, and the refusals that happen before any runner (unknown key, missing and bad args).

use crate::common;

use capdir::invoke::Input;
use capdir::invoke::outcome::Status;
use capdir::invoke::runner::Environment;
use common::{bundled, call, invoker, row, row_with};
use serde_json::json;

#[tokio::test]
async fn fn_error_strings() {
    let inv = invoker(
        vec![
            row("NO_SUCH_FN", "fn", "frobnicate", r#"["$1"]"#),
            row("BAD_JSON", "fn", "echo", r#"["$1", ]"#),
            row("NOT_ARRAY", "fn", "echo", r#"{"a": "$1"}"#),
            row("JSON_FAILS", "fn", "json_get", r#"["$1", "a"]"#),
            row("EMPTY", "fn", "uuid", ""),
        ],
        Environment::default(),
    );
    let o = call(&inv, "NO_SUCH_FN", "x").await;
    assert_eq!(o.output, "ERR:fn:unknown_target:frobnicate");
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Failed, Some("fn:unknown_target"))
    );

    let o = call(&inv, "BAD_JSON", "x").await;
    assert!(
        o.output.starts_with("ERR:fn:bad_content_json:"),
        "{}",
        o.output
    );
    assert_eq!(o.error_code(), Some("fn:bad_content_json"));

    let o = call(&inv, "NOT_ARRAY", "x").await;
    assert_eq!(o.output, "ERR:fn:content_not_array");

    let o = call(&inv, "JSON_FAILS", "{not json").await;
    assert!(
        o.output.starts_with("ERR:fn:json_get:not JSON"),
        "{}",
        o.output
    );
    assert_eq!(o.error_code(), Some("fn:json_get"));

    // An empty payload means no arguments.
    let o = call(&inv, "EMPTY", "").await;
    assert_eq!(
        (o.status, o.output.len()),
        (Status::ProvenMaterialResult, 36)
    );
}

/// Every builtin is reachable through a bundled row, and that row's example runs.
#[tokio::test]
async fn every_builtin_reachable_through_a_row() {
    let inv = bundled();
    let rows = inv.rows();
    for name in capdir::row::builtins::names() {
        let callers: Vec<&str> = rows
            .keys()
            .into_iter()
            .filter(|k| {
                rows.row(k)
                    .is_some_and(|r| r.kind == capdir::row::RowType::Fn && r.target.trim() == name)
            })
            .collect();
        assert!(!callers.is_empty(), "no bundled row calls builtin `{name}`");
        for key in callers {
            let r = rows.row(key).expect("row");
            let ex = r
                .examples
                .first()
                .cloned()
                .or_else(|| r.doc().ex.clone().filter(|e| e != "(empty)"))
                .unwrap_or_default();
            let o = call(&inv, key, &ex).await;
            assert_eq!(
                o.status,
                Status::ProvenMaterialResult,
                "{key} with {ex:?}: {}",
                o.output
            );
        }
    }
}

#[tokio::test]
async fn results_of_bundled_rows() {
    let inv = bundled();
    let cases = [
        (
            "SHA256",
            "abc",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
        ("ECHO", "a|b|c", "a|b|c"),
        ("JSON_GET", r#"items.1|{"items": ["a", "b|c"]}"#, "b|c"),
        ("HTTP_BODY", r#"HTTP 200:{"ok": true}"#, r#"{"ok": true}"#),
        (
            "REGEX_EXTRACT",
            "v([0-9.]+)|released capdir v1.4.2 today",
            "1.4.2",
        ),
        ("BASE64_ENCODE", "hello", "aGVsbG8="),
        ("URL_ENCODE", "a b&c", "a%20b%26c"),
    ];
    for (key, body, want) in cases {
        let o = call(&inv, key, body).await;
        assert_eq!(o.output, want, "{key}");
        assert_eq!(o.runner, "fn");
    }
}

#[tokio::test]
async fn refusals_before_running() {
    let inv = bundled();
    let o = call(&inv, "SHA265", "x").await;
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Refused, Some("unknown_key"))
    );
    assert_eq!(
        o.error.as_ref().map(|e| e.did_you_mean.clone()),
        Some(vec!["SHA256".to_string()])
    );
    assert!(o.output.contains("did you mean SHA256"), "{}", o.output);

    let o = call(&inv, "JSON_GET", "a.b").await;
    assert_eq!(o.error_code(), Some("missing_args"));
    assert!(
        o.output
            .contains("# ARGS: $1=dotted path (e.g. a.b.0.c), $2+=the JSON text"),
        "{}",
        o.output
    );

    let o = call(&inv, "WEATHER_CURRENT_TEMPERATURE", "123|0").await;
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Refused, Some("bad_args"))
    );
    assert!(
        o.output.starts_with("ERR:bad_args:latitude:"),
        "{}",
        o.output
    );

    // Named arguments: put in the schema's order, pipes kept inside a piece.
    let args = json!({"pattern": "(a|b)+", "text": "xxabbay"});
    let o = inv
        .invoke(
            "REGEX_EXTRACT",
            Input::Args(args.as_object().cloned().unwrap_or_default()),
        )
        .await;
    assert_eq!(o.output, "a", "{}", o.output);
    let args = json!({"patern": "x", "text": "y"});
    let o = inv
        .invoke(
            "REGEX_EXTRACT",
            Input::Args(args.as_object().cloned().unwrap_or_default()),
        )
        .await;
    assert_eq!(o.error_code(), Some("bad_args"));
    assert!(o.output.contains("did you mean `pattern`"), "{}", o.output);
}

#[tokio::test]
async fn args_without_schema_and_disabled_rows() {
    let inv = invoker(
        vec![
            row("PLAIN", "fn", "echo", r#"["$1"]"#),
            row_with("OFF", "fn", "echo", r#"["$1"]"#, json!({"enabled": false})),
            row("BLANK", "fn", "echo", r#"["$1"]"#),
        ],
        Environment::default(),
    );
    let o = inv
        .invoke(
            "PLAIN",
            Input::Args(json!({"a": 1}).as_object().cloned().unwrap_or_default()),
        )
        .await;
    assert_eq!(o.error_code(), Some("bad_args"));
    assert!(
        o.output.contains("declares no input_schema"),
        "{}",
        o.output
    );
    let o = call(&inv, "OFF", "x").await;
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Refused, Some("disabled"))
    );
    // An empty result is a run with no material.
    let o = call(&inv, "BLANK", "|").await;
    assert_eq!((o.status, o.output.as_str()), (Status::RanNoMaterial, ""));
}
