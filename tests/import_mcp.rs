//! `capdir import mcp` and the `mcp` runner against real MCP servers: the reference
//! "everything" server from npm (pinned in tests/mcp_server, installed by `.ci/deps`), over
//! stdio and Streamable HTTP, and a small misbehaving server (tests/fixtures/mcp/fake_server.py)
//! for pagination, odd names, credentials, and servers that die or hang.

use crate::common;

use capdir::invoke::InvokerConfig;
use capdir::invoke::runner::Environment;
use capdir::invoke::runner::mcp::McpConfig;
use common::{Repo, Served, call, capdir_in as capdir, invoker_with, row_with};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const OWNER: &str = "owner-key-for-mcp-import-tests";

/// The everything server's entry point: `CAPDIR_MCP_EVERYTHING`, else where `.ci/deps` puts it.
fn everything() -> PathBuf {
    let path = std::env::var_os("CAPDIR_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "tests/mcp_server/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    assert!(
        path.is_file(),
        "the MCP server these tests run is missing at {}: run `.ci/deps` (it runs `npm ci --prefix tests/mcp_server`), or point CAPDIR_MCP_EVERYTHING at server-everything's dist/index.js",
        path.display()
    );
    path
}

fn fake() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/fake_server.py")
        .display()
        .to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Import the everything server over stdio into `out`.
fn import_everything(dir: &Path, out: &Path, prefix: &str) -> Output {
    let server = everything().display().to_string();
    let out = out.display().to_string();
    let mut args = vec!["import", "mcp", "--out", &out, "--category", "demo"];
    if !prefix.is_empty() {
        args.extend(["--prefix", prefix]);
    }
    args.extend(["--", "node", &server, "stdio"]);
    capdir(dir, &args, &[])
}

/// Every file of a directory with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect()
}

fn editor_schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/row.schema.json"),
    )
    .expect("schema");
    jsonschema::validator_for(&serde_json::from_str(&text).expect("json")).expect("compiles")
}

#[test]
fn stdio_import_passes_check_and_importing_again_changes_nothing() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = root.path().join("catalogue");
    let first = import_everything(root.path(), &out, "everything");
    assert!(first.status.success(), "{first:?}");
    let before = snapshot(&out);
    for key in [
        "EVERYTHING_ECHO",
        "EVERYTHING_GET_SUM",
        "EVERYTHING_GET_ENV",
    ] {
        assert!(before.contains_key(&format!("{key}.yaml")), "{before:?}");
    }
    assert!(
        stdout(&first).contains(&format!(
            "{} tools, {} written, 0 unchanged, 0 skipped",
            before.len(),
            before.len()
        )),
        "{}",
        stdout(&first)
    );
    let sum = String::from_utf8(before["EVERYTHING_GET_SUM.yaml"].clone()).expect("utf-8");
    assert!(sum.contains("type: http\nrunner: mcp\n"), "{sum}");
    assert!(sum.contains("#get-sum\n"), "{sum}");
    assert!(sum.contains("# ARGS: $1=a (number, required)"), "{sum}");

    let checked = capdir(root.path(), &["check", "catalogue"], &[]);
    assert!(checked.status.success(), "{checked:?}");
    assert!(
        stdout(&checked).contains("0 errors, 0 warnings"),
        "{checked:?}"
    );
    let schema = editor_schema();
    for (name, bytes) in &before {
        let yaml: serde_yaml::Value = serde_yaml::from_slice(bytes).expect("yaml");
        let errors: Vec<String> = schema
            .iter_errors(&serde_json::to_value(yaml).expect("json"))
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }

    let again = import_everything(root.path(), &out, "everything");
    assert!(again.status.success(), "{again:?}");
    assert!(
        stdout(&again).contains(&format!("0 written, {} unchanged", before.len())),
        "{}",
        stdout(&again)
    );
    assert_eq!(snapshot(&out), before, "a second import changed the files");
}

#[test]
fn imported_tools_run_through_capdir_invoke() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = root.path().join("catalogue");
    assert!(import_everything(root.path(), &out, "ev").status.success());
    let invoke = |args: &[&str]| {
        let mut all = vec!["invoke"];
        all.extend_from_slice(args);
        capdir(root.path(), &all, &[])
    };

    let sum = invoke(&["EV_GET_SUM", "2|3"]);
    assert!(sum.status.success(), "{sum:?}");
    assert_eq!(stdout(&sum), "The sum of 2 and 3 is 5.\n");

    let echo = invoke(&["EV_ECHO", "--args", r#"{"message": "a|b"}"#]);
    assert!(echo.status.success(), "{echo:?}");
    assert_eq!(stdout(&echo), "Echo: a|b\n");

    // The tool runs and reports an error: a named failure, exit 1.
    let failed = invoke(&[
        "EV_GZIP_FILE_AS_RESOURCE",
        "|ftp://example.invalid/x",
        "--json",
    ]);
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let o: Json = serde_json::from_str(&stdout(&failed)).expect("json");
    assert_eq!(o["runner"], "mcp");
    assert_eq!(o["status"], "FAILED");
    assert_eq!(o["error"]["code"], "mcp:tool_error", "{o}");
    let text = o["output"].as_str().expect("output");
    assert!(
        text.starts_with("ERR:mcp:tool_error:") && text.contains("Unsupported URL protocol"),
        "{text}"
    );

    // Arguments the tool's schema refuses never reach the server.
    let refused = invoke(&["EV_GET_SUM", "two|3"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stdout(&refused).starts_with("ERR:bad_args:a:"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_real_dispatcher_with_receipts() {
    let repo = Repo::new();
    let imported = import_everything(repo.path(), &repo.catalogue(), "everything");
    assert!(imported.status.success(), "{imported:?}");
    let fake = fake();
    // A server that ignores SIGTERM and the end of its input: only the kernel's SIGKILL ends it.
    let args = [
        "import", "mcp", "--prefix", "fake", "--", "python3", &fake, "stubborn",
    ];
    let imported = capdir(repo.path(), &args, &[]);
    assert!(imported.status.success(), "{imported:?}");
    repo.commit("import two MCP servers", "2024-01-01T00:00:00Z");
    let work = tempfile::tempdir().expect("tempdir");
    let site = work.path().join("site").display().to_string();
    let catalogue = repo.catalogue().display().to_string();
    let built = capdir(work.path(), &["build", &catalogue, "--out", &site], &[]);
    assert!(built.status.success(), "{built:?}");
    let served = Served::start(
        work.path(),
        &["--upstream-timeout", "2s"],
        &[("CAPDIR_OWNER_KEY", OWNER)],
    )
    .await;
    let client = crate::common::client();
    let post = |body: Json| {
        client
            .post(served.url("/api/dispatch"))
            .header("x-owner-key", OWNER)
            .json(&body)
            .send()
    };
    let receipt = |id: String| {
        client
            .get(served.url(&format!("/receipt/{id}")))
            .header("x-owner-key", OWNER)
            .send()
    };

    let res = post(json!({"key": "EVERYTHING_GET_SUM", "args": {"a": 2, "b": 3}}))
        .await
        .expect("post");
    assert_eq!(res.status(), 200);
    let v: Json = res.json().await.expect("json");
    assert_eq!(v["output"], "The sum of 2 and 3 is 5.", "{v}");
    let id = v["receipt"].as_str().expect("receipt").to_string();
    let r: Json = receipt(id).await.expect("get").json().await.expect("json");
    assert_eq!(r["runner"], "mcp", "{r}");
    assert_eq!(r["status"], "PROVEN_MATERIAL_RESULT");
    assert_eq!(r["key"], "EVERYTHING_GET_SUM");
    assert_eq!(r["output"], "The sum of 2 and 3 is 5.");

    // A tool error: 502 with the receipt of the failure and its code.
    let res = post(
        json!({"key": "EVERYTHING_GZIP_FILE_AS_RESOURCE", "body": "|ftp://example.invalid/x"}),
    )
    .await
    .expect("post");
    assert_eq!(res.status(), 502);
    let v: Json = res.json().await.expect("json");
    assert_eq!(v["error"]["code"], "upstream_failed", "{v}");
    assert_eq!(v["reason"], "mcp:tool_error");
    let r: Json = receipt(v["receipt"].as_str().expect("receipt").to_string())
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(r["status"], "FAILED");
    assert_eq!(r["error_code"], "mcp:tool_error", "{r}");

    // A tool that takes longer than --upstream-timeout: 504 within the limit, not a hang.
    let started = Instant::now();
    let res = post(json!({"key": "EVERYTHING_TRIGGER_LONG_RUNNING_OPERATION", "args": {"duration": 20, "steps": 2}}))
        .await
        .expect("post");
    assert_eq!(res.status(), 504);
    let v: Json = res.json().await.expect("json");
    assert_eq!(v["error"]["code"], "upstream_timeout", "{v}");
    assert_eq!(v["reason"], "mcp:timeout");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // The server's session outlives a timed-out call.
    let res = post(json!({"key": "EVERYTHING_ECHO", "body": "still here"}))
        .await
        .expect("post");
    assert_eq!(res.status(), 200);
    let v: Json = res.json().await.expect("json");
    assert_eq!(v["output"], "Echo: still here");

    let ledger = format!("sqlite:{}", work.path().join("ledger.sqlite").display());
    let verified = capdir(work.path(), &["ledger", "verify", "--ledger", &ledger], &[]);
    assert!(verified.status.success(), "{verified:?}");

    // A dispatcher killed outright (no cleanup runs) takes its servers with it.
    let res = post(json!({"key": "FAKE_PID", "body": ""}))
        .await
        .expect("post");
    assert_eq!(res.status(), 200);
    let v: Json = res.json().await.expect("json");
    let pid = v["output"].as_str().expect("pid").to_string();
    assert!(!gone(&pid), "server {pid} runs while the dispatcher does");
    drop(served);
    let killed = Instant::now();
    while !gone(&pid) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "server {pid} outlived its dispatcher"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server child process, killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn streamable_http_import_and_invoke() {
    let port = common::free_port();
    let root = tempfile::tempdir().expect("tempdir");
    let log = std::fs::File::create(root.path().join("server.log")).expect("log");
    let _server = Child(
        Command::new("node")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start the everything server"),
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server did not listen: {}",
            std::fs::read_to_string(root.path().join("server.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("http://127.0.0.1:{port}/mcp");
    let token = [("EVH_TOKEN", "evh-token-value")];
    let imported = capdir(
        root.path(),
        &[
            "import",
            "mcp",
            "--url",
            &url,
            "--prefix",
            "evh",
            "--out",
            "catalogue",
            "--auth",
            "bearer:EVH_TOKEN",
        ],
        &token,
    );
    assert!(imported.status.success(), "{imported:?}");
    // The credential is bound to the server's endpoint, for the imported rows.
    let bindings: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.path().join("catalogue/bindings.yaml")).expect("bindings"),
    )
    .expect("yaml");
    let binding = &bindings["credentials"]["EVH_TOKEN"];
    assert_eq!(
        binding["origins"],
        serde_yaml::from_str::<serde_yaml::Value>(&format!("[{url:?}]")).unwrap()
    );
    assert!(
        binding["keys"]
            .as_sequence()
            .expect("keys")
            .iter()
            .any(|k| k.as_str() == Some("EVH_ECHO")),
        "{binding:?}"
    );
    let echo = std::fs::read_to_string(root.path().join("catalogue/EVH_ECHO.yaml")).expect("row");
    assert!(
        echo.contains(&format!("target: mcp+{url}#echo\n")),
        "{echo}"
    );
    let checked = capdir(root.path(), &["check", "catalogue"], &[]);
    assert!(checked.status.success(), "{checked:?}");
    // The server is on loopback, which rows reach only when the operator allows it.
    let env = [token[0], ("CAPDIR_ALLOW_EGRESS", "loopback")];
    let out = capdir(root.path(), &["invoke", "EVH_ECHO", "over http"], &env);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "Echo: over http\n");
}

#[test]
fn pages_odd_names_and_credentials_with_a_fake_server() {
    let root = tempfile::tempdir().expect("tempdir");
    let secret = [("FAKE_VAR", "fake-secret-value-42")];
    let server = fake();
    let import = |env: &[(&str, &str)]| {
        capdir(
            root.path(),
            &[
                "import",
                "mcp",
                "--prefix",
                "fake",
                "--auth",
                "env:FAKE_VAR",
                "--",
                "python3",
                &server,
            ],
            env,
        )
    };
    // The import reaches the server as its rows will: without the variable, it cannot.
    let missing = import(&[]);
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
    assert!(
        stderr(&missing).contains("ERR:auth:missing_env:FAKE_VAR"),
        "{missing:?}"
    );

    let imported = import(&secret);
    assert!(imported.status.success(), "{imported:?}");
    let files: Vec<String> = snapshot(&root.path().join("catalogue"))
        .into_keys()
        .collect();
    // Nine tools, two to a page: every page was followed.
    assert_eq!(
        files,
        [
            "FAKE_A_B.yaml",
            "FAKE_A_B_2.yaml",
            "FAKE_DIE.yaml",
            "FAKE_ECHO.yaml",
            "FAKE_ENV.yaml",
            "FAKE_FAIL.yaml",
            "FAKE_HANG.yaml",
            "FAKE_PID.yaml",
            "FAKE_WEIRD_NAME_1.yaml",
            "bindings.yaml"
        ]
    );
    // The variable handed to the server's process is bound to `stdio:`, for these rows.
    let bindings =
        std::fs::read_to_string(root.path().join("catalogue/bindings.yaml")).expect("bindings");
    assert!(
        bindings.starts_with("# "),
        "a comment says what it is: {bindings}"
    );
    let keys: String = [
        "FAKE_A_B",
        "FAKE_A_B_2",
        "FAKE_DIE",
        "FAKE_ECHO",
        "FAKE_ENV",
        "FAKE_FAIL",
        "FAKE_HANG",
        "FAKE_PID",
        "FAKE_WEIRD_NAME_1",
    ]
    .iter()
    .map(|k| format!("      - {k}\n"))
    .collect();
    assert!(
        bindings.ends_with(&format!(
            "credentials:\n  FAKE_VAR:\n    origins: [\"stdio:\"]\n    keys:\n{keys}"
        )),
        "{bindings}"
    );
    assert!(
        stdout(&imported).contains("bound FAKE_VAR to stdio: for its 9 rows"),
        "{}",
        stdout(&imported)
    );
    let weird =
        std::fs::read_to_string(root.path().join("catalogue/FAKE_WEIRD_NAME_1.yaml")).expect("row");
    assert!(weird.contains("#weird%20name%231\n"), "{weird}");
    assert!(weird.contains("auth: env:FAKE_VAR\n"), "{weird}");
    let checked = capdir(root.path(), &["check", "catalogue"], &[]);
    assert!(checked.status.success(), "{checked:?}");

    let invoke = |key: &str, body: &str, env: &[(&str, &str)]| {
        capdir(root.path(), &["invoke", key, body], env)
    };
    let odd = invoke("FAKE_WEIRD_NAME_1", "", &secret);
    assert_eq!(stdout(&odd), "called weird name#1\n", "{odd:?}");
    let a_b = invoke("FAKE_A_B_2", "", &secret);
    assert_eq!(stdout(&a_b), "called a.b\n", "{a_b:?}");
    let echo = invoke("FAKE_ECHO", "hi|7", &secret);
    assert_eq!(stdout(&echo), "{\"n\": 7, \"text\": \"hi\"}\n", "{echo:?}");

    // The server gets the variable its row names, scrubbed from what comes back, and nothing
    // of the dispatcher's own.
    let env = invoke(
        "FAKE_ENV",
        "",
        &[secret[0], ("CAPDIR_OWNER_KEY", "owner-key-never-passed")],
    );
    assert!(env.status.success(), "{env:?}");
    assert_eq!(
        stdout(&env),
        "{\"FAKE_VAR\": \"[REDACTED]\", \"owner_key_set\": false}\n"
    );
    let without = invoke("FAKE_ENV", "", &[]);
    assert_eq!(stdout(&without), "ERR:auth:missing_env:FAKE_VAR\n");

    let fail = invoke("FAKE_FAIL", "because", &secret);
    assert_eq!(fail.status.code(), Some(1));
    assert_eq!(stdout(&fail), "ERR:mcp:tool_error:it went wrong: because\n");

    // Importing again changes nothing, the bindings included; a binding of another
    // credential survives an import that extends the file.
    let before = snapshot(&root.path().join("catalogue"));
    let again = import(&secret);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(snapshot(&root.path().join("catalogue")), before);
    let unrelated =
        "  UNRELATED_KEY:\n    origins: [\"https://unrelated.example/v1/\"]\n    methods: [GET]\n";
    let text = String::from_utf8(before["bindings.yaml"].clone()).expect("utf-8");
    let with_other = format!("{text}{unrelated}");
    let without_keys = with_other.replace("      - FAKE_ECHO\n", "");
    assert_ne!(without_keys, with_other);
    std::fs::write(root.path().join("catalogue/bindings.yaml"), &without_keys).expect("write");
    let extended = import(&secret);
    assert!(extended.status.success(), "{extended:?}");
    assert!(
        stdout(&extended).contains("FAKE_VAR: added the keys of 1 row to its binding"),
        "{}",
        stdout(&extended)
    );
    let after =
        std::fs::read_to_string(root.path().join("catalogue/bindings.yaml")).expect("bindings");
    assert_eq!(
        after, with_other,
        "the key is back and the other binding kept as it was"
    );
}

#[test]
fn an_import_never_overwrites_a_row_of_another_source() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = root.path().join("catalogue");
    std::fs::create_dir(&out).expect("mkdir");
    // The bundled catalogue's own ECHO row is where an unprefixed import would write `echo`.
    let bundled = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue/ECHO.yaml"))
        .expect("bundled ECHO");
    std::fs::write(out.join("ECHO.yaml"), &bundled).expect("write");
    let refused = import_everything(root.path(), &out, "");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(stderr(&refused).contains("ECHO.yaml"), "{refused:?}");
    assert!(stderr(&refused).contains("--prefix"), "{refused:?}");
    assert_eq!(snapshot(&out).len(), 1, "nothing else was written");
    assert_eq!(std::fs::read(out.join("ECHO.yaml")).expect("read"), bundled);

    // A row of the same server for a tool it no longer lists is named, not deleted.
    let ok = import_everything(root.path(), &out, "ev");
    assert!(ok.status.success(), "{ok:?}");
    let sum = std::fs::read_to_string(out.join("EV_GET_SUM.yaml")).expect("row");
    let gone = sum
        .replace("key: EV_GET_SUM", "key: EV_GONE")
        .replace("#get-sum\n", "#gone\n");
    std::fs::write(out.join("EV_GONE.yaml"), &gone).expect("write");
    let again = import_everything(root.path(), &out, "ev");
    assert!(again.status.success(), "{again:?}");
    assert!(
        stdout(&again).contains("not from this import: EV_GONE (tool gone"),
        "{}",
        stdout(&again)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("EV_GONE.yaml")).expect("kept"),
        gone
    );
}

/// Rows on the fake server, in an invoker whose limits are short.
fn fake_invoker(rows: &[(&str, &str)]) -> capdir::invoke::Invoker {
    let server = fake();
    let rows = rows
        .iter()
        .map(|(key, target)| {
            let target = target.replace("FAKE", &format!("mcp+stdio:python3 {server}"));
            row_with(key, "http", &target, "", json!({"runner": "mcp"}))
        })
        .collect();
    invoker_with(
        rows,
        InvokerConfig {
            mcp: McpConfig {
                connect_timeout: Duration::from_secs(2),
                timeout: Duration::from_secs(1),
                ..Default::default()
            },
            env: Environment::fixed::<&str, &str>([]),
            ..Default::default()
        },
    )
}

/// Is this process gone (or a zombie, dead and not yet reaped)?
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_die_or_hang_answer_with_named_failures() {
    let checks = async {
        let inv = fake_invoker(&[
            // Its own server (another command line): a fake server that hangs answers nothing
            // else.
            ("HANG", "FAKE slow#hang"),
            // A server only SIGKILL ends: dropping its session must kill it, not ask it to go.
            ("PID", "FAKE stubborn#pid"),
            ("DIE", "FAKE stubborn#die"),
            ("NOPE", "FAKE#nope"),
            ("HANG_INIT", "FAKE hang-init#pid"),
            ("EXIT_AT_START", "FAKE exit-at-start#pid"),
            ("NO_PROGRAM", "mcp+stdio:/no/such/program#pid"),
        ]);
        let started = Instant::now();
        let o = call(&inv, "HANG", "").await;
        assert!(
            o.output
                .starts_with("ERR:mcp:timeout:timed out after 1000 ms waiting for tools/call hang"),
            "{}",
            o.output
        );
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{:?}",
            started.elapsed()
        );

        // One session per server: the same process answers twice.
        let first = call(&inv, "PID", "").await.output;
        assert!(first.parse::<u32>().is_ok(), "{first}");
        assert_eq!(call(&inv, "PID", "").await.output, first);

        // A server that exits mid-call: closed, and the next call starts a new one.
        let o = call(&inv, "DIE", "").await;
        assert!(o.output.starts_with("ERR:mcp:closed:"), "{}", o.output);
        let second = call(&inv, "PID", "").await.output;
        assert!(second.parse::<u32>().is_ok(), "{second}");
        assert_ne!(second, first);

        let o = call(&inv, "NOPE", "").await;
        assert_eq!(o.output, "ERR:mcp:rpc:-32602: unknown tool nope");

        let o = call(&inv, "HANG_INIT", "").await;
        assert!(
            o.output
                .starts_with("ERR:mcp:timeout:timed out after 2000 ms waiting for initialize"),
            "{}",
            o.output
        );
        let o = call(&inv, "EXIT_AT_START", "").await;
        assert!(o.output.starts_with("ERR:mcp:connect:"), "{}", o.output);
        assert!(
            o.output.ends_with("fake: refusing to start"),
            "{}",
            o.output
        );
        let o = call(&inv, "NO_PROGRAM", "").await;
        assert!(
            o.output
                .starts_with("ERR:mcp:spawn:cannot start `/no/such/program`"),
            "{}",
            o.output
        );

        // Dropping the invoker kills its servers.
        assert!(!gone(&second), "the server runs while its session is kept");
        drop(inv);
        let dropped = Instant::now();
        while !gone(&second) {
            // Asking it to go (end of input, SIGTERM after 3 s) would take longer than this.
            assert!(
                dropped.elapsed() < Duration::from_secs(2),
                "server {second} outlived its invoker"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), checks)
        .await
        .expect("every failure came back within 30 s: nothing hung");
}
