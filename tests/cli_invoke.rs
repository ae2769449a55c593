//! `capdir invoke` and `capdir breaker` as a user runs them: output, `--json`, exit codes.

use std::process::Command;

fn capdir(args: &[&str], data: &std::path::Path) -> (String, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(args)
        .env("CAPDIR_DATA", data)
        .env_remove("CAPDIR_GATEWAY_BASE_URL")
        .output()
        .expect("run capdir");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn invoke_prints_and_sets_the_exit_code() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    assert_eq!(
        capdir(&["invoke", "ECHO", "a|b"], d),
        ("a|b\n".into(), String::new(), 0)
    );
    let (out, _, code) = capdir(
        &[
            "invoke",
            "JSON_GET",
            "--args",
            r#"{"path": "a", "json": "{\"a\": 7}"}"#,
        ],
        d,
    );
    assert_eq!((out.as_str(), code), ("7\n", 0));

    let (out, _, code) = capdir(&["invoke", "ECHO", "hi", "--json"], d);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(code, 0);
    assert_eq!(
        (
            v["key"].as_str(),
            v["status"].as_str(),
            v["output"].as_str()
        ),
        (Some("ECHO"), Some("PROVEN_MATERIAL_RESULT"), Some("hi"))
    );

    let (out, _, code) = capdir(&["invoke", "ECHO_", "hi", "--json"], d);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(code, 1);
    assert_eq!(v["status"], "REFUSED");
    assert_eq!(v["error"]["code"], "unknown_key");
    assert_eq!(v["error"]["did_you_mean"][0], "ECHO");

    let (out, _, code) = capdir(&["invoke", "JSON_GET", "a"], d);
    assert_eq!(code, 1);
    assert!(
        out.starts_with("ERR:missing_args:JSON_GET needs 2 arguments, got 1; # ARGS:"),
        "{out}"
    );

    let (_, err, code) = capdir(&["invoke", "ECHO", "x", "--args", "{}"], d);
    assert_eq!(code, 2);
    assert!(err.contains("not both"), "{err}");
    let (_, err, code) = capdir(
        &[
            "invoke",
            "ECHO",
            "x",
            "--catalogue",
            "tests/fixtures/broken/bad_category",
        ],
        d,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("does not pass `capdir check`") && err.contains("bad_category"),
        "{err}"
    );
    assert!(
        !d.join("state.sqlite").exists(),
        "no credential was sent, so no state file"
    );
}

#[test]
fn breaker_list_and_reset() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let (out, _, code) = capdir(&["breaker", "list"], d);
    assert_eq!(
        (out.as_str(), code),
        ("no breaker records: every credential is closed\n", 0)
    );
    let b = capdir::invoke::breaker::Breaker::in_data_dir(d);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        for _ in 0..8 {
            let before = b.admit("SOME_TOKEN").await.expect("closed");
            b.record("SOME_TOKEN", 403, before).await;
        }
    });
    let (out, _, _) = capdir(&["breaker", "list", "--data", &d.display().to_string()], d);
    assert!(out.starts_with("SOME_TOKEN\tOPEN until 20"), "{out}");
    let (out, _, code) = capdir(&["breaker", "reset", "SOME_TOKEN"], d);
    assert_eq!((out.as_str(), code), ("breaker for SOME_TOKEN closed\n", 0));
    let (out, _, _) = capdir(&["breaker", "list"], d);
    assert!(out.starts_with("no breaker records"), "{out}");
}

#[test]
fn invoke_against_a_built_site() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let site = d.join("site");
    capdir::build::run(&capdir::build::Options::new("catalogue", &site)).expect("build");
    let site = site.to_str().expect("utf-8 path");
    assert_eq!(
        capdir(&["invoke", "UPPER", "abc", "--site", site], d),
        ("ABC\n".into(), String::new(), 0)
    );
    let (out, _, code) = capdir(&["invoke", "UPPR", "abc", "--site", site], d);
    assert_eq!(code, 1);
    assert!(out.contains("unknown_key"), "{out}");
}

#[test]
fn ledger_verify_and_show() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let path = d.join("ledger.sqlite");
    let url = format!("sqlite:{}", path.display());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let id = runtime.block_on(async {
        use capdir::ledger::{Ledger, SqliteLedger};
        let ledger = SqliteLedger::open(&path).expect("open");
        let mut last = String::new();
        for key in ["A", "B", "C"] {
            let draft = capdir::ledger::Draft {
                id: capdir::ledger::new_id(),
                key: key.into(),
                actor: "owner".into(),
                runner: "fn".into(),
                trace_id: "t".into(),
                started_at: "s".into(),
                finished_at: "f".into(),
                status: "PROVEN_MATERIAL_RESULT".into(),
                error_code: None,
                cost_usd: None,
                input_sha256: String::new(),
                output_sha256: String::new(),
                contract_sha256: String::new(),
                catalogue_commit: String::new(),
                repairs: None,
                parent: None,
                root: None,
                input: "in".into(),
                output: "out".into(),
            };
            last = ledger.append(draft).await.expect("append").draft.id;
        }
        last
    });
    let (out, _, code) = capdir(&["ledger", "verify", "--ledger", &url], d);
    assert_eq!(
        (out.as_str(), code),
        ("ok: 3 receipts, every link holds\n", 0)
    );
    let (out, _, code) = capdir(&["ledger", "show", &id, "--ledger", &url], d);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["key"].as_str(), v["seq"].as_i64()), (Some("C"), Some(3)));
    let (_, _, code) = capdir(&["ledger", "show", "inv_missing", "--ledger", &url], d);
    assert_eq!(code, 1);

    rusqlite::Connection::open(&path)
        .expect("db")
        .execute(
            "UPDATE receipts SET body = replace(body, '\"B\"', '\"Z\"') WHERE seq = 2",
            [],
        )
        .expect("tamper");
    let (out, _, code) = capdir(&["ledger", "verify", "--ledger", &url], d);
    assert_eq!(code, 1);
    assert!(out.starts_with("broken at receipt 2 "), "{out}");
}
