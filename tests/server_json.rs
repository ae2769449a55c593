//! The MCP registry's `server.json`, both ways: the build publishes the catalogue's and each
//! MCP row's description, every one valid under the registry's published schema
//! (tests/fixtures/server-json); `capdir import server-json` makes rows from an entry,
//! reaching its remote (a real `capdir serve`'s `/mcp`) or starting its package (a stand-in
//! `npx` on PATH that starts the reference "everything" server), and nothing an entry says
//! sends a secret, reaches a private address or runs a program of its choosing.

use crate::common::{Built, Repo, Served, bindings_yaml, capdir_in as capdir, fixture, fn_row};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::Output;

const OWNER: &str = "owner-key-for-server-json-tests";

fn schema() -> jsonschema::Validator {
    let schema: Json = serde_json::from_str(&fixture("server-json/server.schema.json")).unwrap();
    jsonschema::validator_for(&schema).expect("the registry's schema compiles")
}

fn problems(v: &jsonschema::Validator, doc: &Json) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn mcp_row(key: &str, target: &str, auth: &str) -> String {
    let auth = if auth.is_empty() {
        String::new()
    } else {
        format!("auth: \"{auth}\"\n")
    };
    format!(
        "key: {key}\ntype: http\nrunner: mcp\ntarget: \"{target}\"\n{auth}category: tools\ncontent: |\n  # WHAT: Call the {key} tool of an MCP server, with a description long enough that the registry's hundred characters must cut it short.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: hi\n  # OUTPUT: text\nasks:\n  - call the tool\n"
    )
}

#[test]
fn the_registry_schema_takes_its_own_examples_and_refuses_a_broken_one() {
    let v = schema();
    for name in ["with-package.json", "with-remote.json"] {
        let doc: Json = serde_json::from_str(&fixture(&format!("server-json/{name}"))).unwrap();
        assert_eq!(problems(&v, &doc), Vec::<String>::new(), "{name}");
    }
    // The validator can fail: a description over 100 characters, a package version `latest`.
    let mut doc: Json = serde_json::from_str(&fixture("server-json/with-package.json")).unwrap();
    doc["description"] = json!("x".repeat(101));
    doc["packages"][0]["version"] = json!("latest");
    assert_eq!(problems(&v, &doc).len(), 2, "{:?}", problems(&v, &doc));
}

#[test]
fn the_build_publishes_descriptions_the_registry_schema_accepts() {
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "tools", "Echo."));
    repo.write(
        "EV_ECHO.yaml",
        &mcp_row(
            "EV_ECHO",
            "mcp+stdio:npx -y @modelcontextprotocol/server-everything@2026.8.31#echo",
            "",
        ),
    );
    repo.write(
        "TIME_NOW.yaml",
        &mcp_row(
            "TIME_NOW",
            "mcp+stdio:docker run -i --rm -e TIME_TOKEN ghcr.io/example/time:1.4#now",
            "env:TIME_TOKEN",
        ),
    );
    repo.write(
        "REMOTE_ADD.yaml",
        &mcp_row(
            "REMOTE_ADD",
            "mcp+https://mcp.example.com/mcp#add",
            "bearer:EXAMPLE_TOKEN",
        ),
    );
    // A server no registry type starts has no description.
    repo.write(
        "LOCAL_TOOL.yaml",
        &mcp_row("LOCAL_TOOL", "mcp+stdio:node server.js#tool", ""),
    );
    repo.write(
        "bindings.yaml",
        &bindings_yaml(&[
            ("EXAMPLE_TOKEN", "https://mcp.example.com"),
            ("TIME_TOKEN", "stdio:"),
        ]),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let out = tempfile::tempdir().unwrap();
    let site = out.path().join("site");
    let mut options = capdir::build::Options::new(repo.catalogue(), &site);
    options.dispatcher_url = "https://capdir.example.com".into();
    capdir::build::run(&options).expect("build");

    let v = schema();
    let read = |rel: &str| -> Json {
        serde_json::from_str(&std::fs::read_to_string(site.join(rel)).expect(rel)).expect(rel)
    };
    let own = read("server.json");
    assert_eq!(problems(&v, &own), Vec::<String>::new(), "{own:#}");
    assert_eq!(own["remotes"][0]["url"], "https://capdir.example.com/mcp");
    assert_eq!(own["remotes"][0]["type"], "streamable-http");
    assert!(
        own["name"]
            .as_str()
            .unwrap()
            .starts_with("com.example.capdir/"),
        "{own}"
    );
    assert_eq!(
        own["version"].as_str().unwrap().split('+').next(),
        Some("2024.1.1")
    );

    let mut files: Vec<String> = std::fs::read_dir(site.join("mcp/servers"))
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["EV_ECHO.json", "REMOTE_ADD.json", "TIME_NOW.json"]);
    for f in &files {
        let doc = read(&format!("mcp/servers/{f}"));
        assert_eq!(problems(&v, &doc), Vec::<String>::new(), "{f}: {doc:#}");
        assert!(doc["description"].as_str().unwrap().chars().count() <= 100);
    }
    let ev = read("mcp/servers/EV_ECHO.json");
    assert_eq!(ev["packages"][0]["registryType"], "npm");
    assert_eq!(
        ev["packages"][0]["identifier"],
        "@modelcontextprotocol/server-everything"
    );
    assert_eq!(ev["packages"][0]["version"], "2026.8.31");
    assert_eq!(ev["version"], "2026.8.31");
    let time = read("mcp/servers/TIME_NOW.json");
    assert_eq!(time["packages"][0]["registryType"], "oci");
    assert_eq!(
        time["packages"][0]["environmentVariables"][0]["name"],
        "TIME_TOKEN"
    );
    let remote = read("mcp/servers/REMOTE_ADD.json");
    assert_eq!(remote["remotes"][0]["url"], "https://mcp.example.com/mcp");
    assert_eq!(remote["remotes"][0]["headers"][0]["name"], "Authorization");
    assert_eq!(remote["remotes"][0]["headers"][0]["isSecret"], true);
    // No secret, only the variable's name.
    assert!(!remote.to_string().contains("Bearer ey"));

    // A row that goes takes its description with it.
    repo.remove("EV_ECHO.yaml");
    repo.commit("drop a row", "2024-01-02T00:00:00Z");
    capdir::build::run(&options).expect("rebuild");
    assert!(!site.join("mcp/servers/EV_ECHO.json").exists());
    assert!(site.join("mcp/servers/REMOTE_ADD.json").exists());
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn rows_in(dir: &Path) -> Vec<String> {
    let mut keys: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".yaml") && n != "bindings.yaml")
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

/// A loopback HTTP server at `/mcp` that speaks no MCP: it keeps the `Authorization` header
/// of every request it gets (none when there was none) and answers 404.
async fn recorder() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>,
) {
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>> = Default::default();
    let kept = seen.clone();
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::any(move |headers: axum::http::HeaderMap| {
            let kept = kept.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .map(|v| v.to_str().unwrap().to_string());
                kept.lock().unwrap().push(auth);
                axum::http::StatusCode::NOT_FOUND
            }
        }),
    );
    let addr = crate::common::serve(router).await;
    (format!("http://{addr}/mcp"), seen)
}

fn remote_entry(path: &Path, url: &str) -> String {
    std::fs::write(
        path,
        json!({
            "$schema": capdir::row::server_json::SCHEMA,
            "name": "io.example/echo",
            "description": "Echo over MCP.",
            "version": "1.0.0",
            "remotes": [{"type": "streamable-http", "url": url,
                "headers": [{"name": "Authorization", "isSecret": true, "isRequired": true}]}],
        })
        .to_string(),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entrys_remote_is_reached_only_where_and_as_the_operator_allows() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("catalogue");
    let out_s = out.display().to_string();
    // The variable the entry's header names holds the owner key: an entry must not be able
    // to send it anywhere by naming it.
    let env = [
        ("ECHO_AUTHORIZATION", OWNER),
        ("MY_KEY", "the-operators-choice"),
    ];
    let import = |entry: &str, extra: &[&str]| {
        let mut args = vec![
            "import",
            "server-json",
            entry,
            "--out",
            &out_s,
            "--prefix",
            "echo",
            "--timeout",
            "10",
        ];
        args.extend_from_slice(extra);
        capdir(work.path(), &args, &env)
    };
    let (url, seen) = recorder().await;
    let trap = remote_entry(&work.path().join("trap.json"), &url);

    // A loopback address is not the public internet: refused before anything is sent.
    let o = import(&trap, &[]);
    assert!(!o.status.success(), "{}", said(&o));
    assert!(said(&o).contains("egress"), "{}", said(&o));
    assert!(seen.lock().unwrap().is_empty(), "nothing reached it");
    // Allowed there: reached, but with no credential (the entry's header variable is never
    // read), and nothing written for a server that is not one.
    let o = import(&trap, &["--allow-egress", "loopback"]);
    assert!(!o.status.success(), "{}", said(&o));
    let got = seen.lock().unwrap().clone();
    assert!(
        !got.is_empty() && got.iter().all(Option::is_none),
        "{got:?}"
    );
    assert_eq!(rows_in(&out), Vec::<String>::new());
    // Only a credential the operator names goes with the request.
    let o = import(
        &trap,
        &["--allow-egress", "loopback", "--auth", "bearer:MY_KEY"],
    );
    assert!(!o.status.success(), "{}", said(&o));
    let got = seen.lock().unwrap().clone();
    assert_eq!(
        got.last(),
        Some(&Some("Bearer the-operators-choice".to_string()))
    );
    assert!(!got.contains(&Some(format!("Bearer {OWNER}"))));

    // A real server, a dispatcher's /mcp whose one tool is ECHO: one row per tool, calling it,
    // naming the variable the entry's header asks for (the owner binds it, or not).
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "tools", "Echo."));
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let built = Built::new(repo);
    let served = Served::start(built.dir.path(), &[], &[("CAPDIR_OWNER_KEY", OWNER)]).await;
    let entry = remote_entry(&work.path().join("server.json"), &served.url("/mcp"));
    let o = import(&entry, &["--allow-egress", "loopback"]);
    assert!(o.status.success(), "{}", said(&o));
    assert_eq!(rows_in(&out), ["ECHO_ECHO.yaml"], "{}", said(&o));
    let row = std::fs::read_to_string(out.join("ECHO_ECHO.yaml")).unwrap();
    assert!(
        row.contains(&format!("mcp+{}#ECHO", served.url("/mcp"))),
        "{row}"
    );
    assert!(row.contains("$ECHO_AUTHORIZATION"), "{row}");
    assert!(!row.contains(OWNER) && !said(&o).contains(OWNER));
}

fn everything() -> PathBuf {
    std::env::var_os("CAPDIR_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "tests/mcp_server/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        })
}

#[test]
fn an_entrys_package_starts_with_its_registrys_runner_and_no_secret() {
    let work = tempfile::tempdir().unwrap();
    // A stand-in `npx` first on PATH: it notes its arguments and environment, then starts
    // the everything server over stdio.
    let bin = work.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let seen = work.path().join("seen.txt");
    let npx = bin.join("npx");
    std::fs::write(
        &npx,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {seen}\nenv >> {seen}\nexec /usr/bin/node {server} stdio\n",
            seen = seen.display(),
            server = everything().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let entry = work.path().join("server.json");
    let write_entry = |hint: &str| {
        std::fs::write(
            &entry,
            json!({
                "name": "io.github.modelcontextprotocol/everything",
                "description": "The reference server.",
                "version": "2026.8.31",
                "packages": [{"registryType": "npm",
                    "identifier": "@modelcontextprotocol/server-everything",
                    "version": "2026.8.31", "runtimeHint": hint,
                    "transport": {"type": "stdio"},
                    "environmentVariables": [{"name": "EVERYTHING_KEY", "isSecret": true}]}],
            })
            .to_string(),
        )
        .unwrap();
    };
    let entry_s = entry.display().to_string();
    let out = work.path().join("catalogue");
    let out_s = out.display().to_string();
    let env = [
        ("PATH", path.as_str()),
        ("EVERYTHING_KEY", "s3cret-of-the-operator"),
    ];
    let args = [
        "import",
        "server-json",
        &entry_s,
        "--out",
        &out_s,
        "--prefix",
        "ev",
        "--category",
        "demo",
    ];

    // The entry cannot pick the program: another runtime than npm's is refused, nothing run.
    write_entry("sh");
    let o = capdir(work.path(), &args, &env);
    assert!(!o.status.success(), "{}", said(&o));
    assert!(said(&o).contains("`npx` only"), "{}", said(&o));
    assert!(!seen.exists(), "nothing was started");

    write_entry("npx");
    let o = capdir(work.path(), &args, &env);
    assert!(o.status.success(), "{}", said(&o));
    let noted = std::fs::read_to_string(&seen).unwrap();
    assert!(
        noted.starts_with("-y\n@modelcontextprotocol/server-everything@2026.8.31\n"),
        "{noted}"
    );
    // The variable the entry names went into the rows, not to the package.
    assert!(!noted.contains("s3cret-of-the-operator"), "{noted}");
    let rows = rows_in(&out);
    assert!(rows.contains(&"EV_ECHO.yaml".to_string()), "{rows:?}");
    let row = std::fs::read_to_string(out.join("EV_ECHO.yaml")).unwrap();
    assert!(
        row.contains("mcp+stdio:npx -y @modelcontextprotocol/server-everything@2026.8.31#echo"),
        "{row}"
    );
    assert!(row.contains("auth: env:EVERYTHING_KEY"), "{row}");
}
