//! Secrets never leave (DESIGN.md §8): a real `capdir build` and `capdir serve` run with known
//! secret values in their environment — the owner key, the token key, an upstream credential —
//! and serve representative traffic: invocations with each credential, rows whose upstream
//! echoes the credential back (in a success, in an error, in a query string), a fetch that
//! fails, refused calls, tokens in URLs, tokens pasted into bodies, contracts, receipts and the
//! site. Then every response body and header, and every file written (site, ledger database
//! with its WAL, state, the server's logs at debug level) is scanned for the secrets and for
//! the tokens handed out. None may be found.

use crate::common;

use common::{Repo, Served};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const OWNER: &str = "scan-owner-Q7mZ2vK9xL4pR8tW";
const TOKEN_KEY: &str = "scan-token-key-H3jN6bV1cX5zA9sD0fG2";
const UPSTREAM: &str = "scan-upstream-E4rT7yU1iO3pL6kJ";
const UPSTREAM_ENV: &str = "SCAN_UPSTREAM_KEY";

/// A loopback upstream that leaks whatever credential it is sent: in its body, in an error.
async fn leaky_upstream() -> std::net::SocketAddr {
    use axum::http::{HeaderMap, StatusCode, Uri};
    let router = axum::Router::new()
        .route(
            "/echo-auth/{x}",
            axum::routing::get(|headers: HeaderMap| async move {
                format!(
                    "you sent {:?}",
                    headers
                        .get("authorization")
                        .map(|v| v.to_str().unwrap_or(""))
                )
            }),
        )
        .route(
            "/echo-query",
            axum::routing::get(|uri: Uri| async move { format!("query was {}", uri) }),
        )
        .route(
            "/fail-query",
            axum::routing::get(|uri: Uri| async move {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("bad key in {uri}"),
                )
            }),
        );
    common::serve(router).await
}

fn http_row(key: &str, target: &str, auth: &str, extra: &str) -> String {
    format!(
        "key: {key}\ntype: http\ntarget: \"{target}\"\nauth: \"{auth}\"\ncategory: net\n{extra}content: |\n  # WHAT: Calls a leaky loopback upstream ({key}).\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: a\n  # OUTPUT: HTTP 200\n"
    )
}

fn capdir(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(args)
        .current_dir(dir)
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .env(UPSTREAM_ENV, UPSTREAM)
        .env("CAPDIR_ALLOW_EGRESS", "loopback")
        .output()
        .expect("capdir runs")
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

struct Traffic {
    client: reqwest::Client,
    /// Every answer: what was asked, status, headers and body.
    seen: Vec<(String, u16, String)>,
}

impl Traffic {
    async fn send(&mut self, what: &str, req: reqwest::RequestBuilder) -> (u16, Json) {
        let res = req.send().await.expect("send");
        let status = res.status().as_u16();
        let headers = format!("{:?}", res.headers());
        let body = res.text().await.expect("body");
        self.seen
            .push((what.to_string(), status, format!("{headers}\n{body}")));
        (status, serde_json::from_str(&body).unwrap_or(Json::Null))
    }
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_file_a_log_or_an_answer() {
    let up = leaky_upstream().await;
    let closed = common::closed_port();
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new();
    repo.write(
        "PLAIN_ECHO.yaml",
        &common::fn_row("PLAIN_ECHO", "text", "Echoes the text."),
    );
    repo.write(
        "LEAK_BEARER.yaml",
        &http_row(
            "LEAK_BEARER",
            &format!("GET http://{up}/echo-auth/$1"),
            &format!("bearer:{UPSTREAM_ENV}"),
            "",
        ),
    );
    repo.write(
        "LEAK_QUERY.yaml",
        &http_row(
            "LEAK_QUERY",
            &format!("GET http://{up}/echo-query?q=$1"),
            &format!("query:api_key={UPSTREAM_ENV}"),
            "",
        ),
    );
    repo.write(
        "LEAK_FAIL.yaml",
        &http_row(
            "LEAK_FAIL",
            &format!("GET http://{up}/fail-query?q=$1"),
            &format!("query:api_key={UPSTREAM_ENV}"),
            "",
        ),
    );
    repo.write(
        "UNREACHABLE.yaml",
        &http_row(
            "UNREACHABLE",
            &format!("GET http://127.0.0.1:{closed}/x?q=$1"),
            &format!("query:api_key={UPSTREAM_ENV}"),
            "",
        ),
    );
    repo.write(
        "GUARDED.yaml",
        &http_row(
            "GUARDED",
            &format!("GET http://{up}/echo-auth/$1"),
            &format!("bearer:{UPSTREAM_ENV}"),
            "sensitive: true\ninput_schema:\n  type: object\n  properties:\n    text: {type: string}\n  required: [text]\n",
        ),
    );
    repo.write(
        "bindings.yaml",
        &format!(
            "credentials:\n  {UPSTREAM_ENV}:\n    origins: [\"http://{up}\", \"http://127.0.0.1:{closed}\"]\n"
        ),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");

    let work = root.path();
    let built = capdir(
        &[
            "build",
            &repo.catalogue().display().to_string(),
            "--out",
            &work.join("site").display().to_string(),
        ],
        work,
    );
    assert!(built.status.success(), "{built:?}");
    let env = [
        ("CAPDIR_OWNER_KEY", OWNER),
        ("CAPDIR_TOKEN_KEY", TOKEN_KEY),
        (UPSTREAM_ENV, UPSTREAM),
        ("RUST_LOG", "debug"),
    ];
    let served = Served::start(work, &[], &env).await;
    let base = served.url("");
    let ledger = format!("sqlite:{}", work.join("ledger.sqlite").display());
    let site = work.join("site").display().to_string();

    let mint = |extra: &[&str]| {
        let mut args = vec![
            "token",
            "mint",
            "--audience",
            &base,
            "--site",
            &site,
            "--ledger",
            &ledger,
        ];
        args.extend_from_slice(extra);
        let out = capdir(&args, work);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let id = text
            .lines()
            .find_map(|l| l.strip_prefix("id:"))
            .expect("id")
            .trim()
            .to_string();
        (id, text.lines().last().expect("token").to_string())
    };
    let (_, net) = mint(&["--categories", "net,text", "--ttl", "1h"]);
    let (_, narrow) = mint(&["--keys", "PLAIN_ECHO"]);
    let (doomed_id, doomed) = mint(&["--keys", "PLAIN_ECHO"]);
    let (_, high) = mint(&["--keys", "GUARDED", "--risk", "high", "--pin"]);
    let tokens = [net.clone(), narrow.clone(), doomed.clone(), high.clone()];

    let mut t = Traffic {
        client: crate::common::client(),
        seen: Vec::new(),
    };
    let c = t.client.clone();
    let post = |cred: &str, body: Json| {
        c.post(format!("{base}/api/dispatch"))
            .header("authorization", format!("Bearer {cred}"))
            .json(&body)
    };
    let get = |path: &str| c.get(format!("{base}{path}"));

    // The owner: plain, credential-echoing, failing and unreachable upstreams; secrets pasted
    // into bodies.
    let mut receipts = Vec::new();
    for (key, body) in [
        ("PLAIN_ECHO", "hello"),
        ("PLAIN_ECHO", OWNER),
        ("PLAIN_ECHO", TOKEN_KEY),
        ("PLAIN_ECHO", net.as_str()),
        ("LEAK_BEARER", "a"),
        ("LEAK_QUERY", "a"),
        ("LEAK_FAIL", "a"),
        ("UNREACHABLE", "a"),
        ("GUARDED", "a"),
    ] {
        let (st, v) = t
            .send(
                &format!("owner {key}"),
                post(OWNER, json!({"key": key, "body": body})),
            )
            .await;
        assert!(st == 200 || st == 502, "{key}: {st} {v}");
        receipts.push(v["receipt"].as_str().expect("receipt").to_string());
    }
    let (_, v) = t
        .send(
            "owner x-owner-key",
            c.post(format!("{base}/api/dispatch"))
                .header("x-owner-key", OWNER)
                .json(&json!({"key": "PLAIN_ECHO", "body": "x"})),
        )
        .await;
    assert_eq!(v["status"], "PROVEN_MATERIAL_RESULT", "{v}");

    // Tokens: as bearer, in run-now URLs, refused for every kind of reason.
    let (st, v) = t
        .send(
            "token bearer",
            post(&net, json!({"key": "LEAK_BEARER", "body": "a"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    receipts.push(v["receipt"].as_str().expect("receipt").to_string());
    for (what, token, key, body, want) in [
        ("run-now", &net, "LEAK_QUERY", "a", 200),
        (
            "run-now token in body",
            &narrow,
            "PLAIN_ECHO",
            narrow.as_str(),
            200,
        ),
        ("scope", &narrow, "LEAK_QUERY", "a", 403),
        ("waits for a person", &net, "GUARDED", "a", 202),
        ("high risk", &high, "GUARDED", "a", 200),
    ] {
        let (st, v) = t
            .send(
                what,
                get(&format!(
                    "/api/dispatch?invoke={key}&body={}&share={}",
                    enc(body),
                    enc(token)
                )),
            )
            .await;
        assert_eq!(st, want, "{what}: {v}");
        if let Some(r) = v["receipt"].as_str() {
            receipts.push(r.to_string());
        }
    }
    let revoked = capdir(&["token", "revoke", &doomed_id, "--ledger", &ledger], work);
    assert!(revoked.status.success());
    let (st, v) = t
        .send(
            "revoked",
            get(&format!(
                "/api/dispatch?invoke=PLAIN_ECHO&body=a&share={}",
                enc(&doomed)
            )),
        )
        .await;
    assert_eq!((st, v["error"]["code"].as_str()), (403, Some("revoked")));
    let tampered = format!("{}x", &net[..net.len() - 1]);
    let (st, _) = t
        .send(
            "tampered",
            get(&format!(
                "/api/dispatch?invoke=PLAIN_ECHO&body=a&share={}",
                enc(&tampered)
            )),
        )
        .await;
    assert_eq!(st, 403);
    let (st, _) = t
        .send(
            "wrong owner key",
            post(
                "not-the-owner-key",
                json!({"key": "PLAIN_ECHO", "body": "a"}),
            ),
        )
        .await;
    assert_eq!(st, 403);
    let (st, _) = t
        .send(
            "no credential",
            c.post(format!("{base}/api/dispatch"))
                .json(&json!({"key": "PLAIN_ECHO", "body": "a"})),
        )
        .await;
    assert_eq!(st, 401);

    // Reading: contracts with credentials, receipts, confirmations, the site, the counts.
    for (what, cred) in [("owner", OWNER), ("token", net.as_str())] {
        for format in ["json", "markdown"] {
            t.send(
                &format!("contract {what} {format}"),
                get(&format!("/api/dispatch?key=LEAK_BEARER&format={format}"))
                    .header("authorization", format!("Bearer {cred}")),
            )
            .await;
        }
    }
    t.send(
        "contract share",
        get(&format!(
            "/api/dispatch?key=GUARDED&format=json&share={}",
            enc(&high)
        )),
    )
    .await;
    for r in &receipts {
        t.send(
            "receipt owner",
            get(&format!("/receipt/{r}")).header("x-owner-key", OWNER),
        )
        .await;
        t.send(
            "receipt html",
            get(&format!("/receipt/{r}"))
                .header("x-owner-key", OWNER)
                .header("accept", "text/html"),
        )
        .await;
        t.send(
            "receipt token",
            get(&format!("/receipt/{r}")).header("authorization", format!("Bearer {net}")),
        )
        .await;
        t.send("confirm", get(&format!("/api/dispatch?confirm={r}")))
            .await;
    }
    for path in [
        "/",
        "/index.html",
        "/llms.txt",
        "/registry.json",
        "/mcp/tools.json",
        "/search.json",
        "/k/LEAK_QUERY.json",
        "/k/LEAK_QUERY.md",
        "/k/GUARDED.html",
        "/api/dispatch?map=1",
        "/api/dispatch?registry=1",
        "/api/dispatch?ask=leaky%20upstream",
        "/api/dispatch",
        "/openapi.json",
    ] {
        let (st, _) = t.send(path, get(path)).await;
        assert_eq!(st, 200, "{path}");
    }
    // The counts are the owner's to read; what they show is scanned all the same.
    let (st, _) = t
        .send("/metrics", get("/metrics").header("x-owner-key", OWNER))
        .await;
    assert_eq!(st, 200, "/metrics");
    let log_path = served.log.clone();
    drop(served);

    let mut secrets: Vec<(String, String)> = vec![
        ("the owner key".into(), OWNER.into()),
        ("the token key".into(), TOKEN_KEY.into()),
        ("the upstream credential".into(), UPSTREAM.into()),
    ];
    for tok in &tokens {
        secrets.push(("a capability token".into(), tok.clone()));
        let mac = tok.rsplit('.').next().expect("mac");
        secrets.push(("a capability token's MAC".into(), mac.to_string()));
    }
    let mut found = Vec::new();
    for (what, status, text) in &t.seen {
        for (name, s) in &secrets {
            if text.contains(s.as_str()) || text.contains(&enc(s)) {
                found.push(format!("{name} in the answer to {what} ({status})"));
            }
        }
    }
    let written = files(work);
    let names: Vec<String> = written
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for must in [
        "ledger.sqlite",
        "catalogue.sqlite",
        "llms.txt",
        "PLAIN_ECHO.json",
    ] {
        assert!(
            names.iter().any(|n| n == must),
            "{must} was not written: {names:?}"
        );
    }
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("serve-") && n.ends_with(".log"))
    );
    for path in &written {
        let bytes = std::fs::read(path).expect("read");
        for (name, s) in &secrets {
            if bytes.windows(s.len()).any(|w| w == s.as_bytes()) {
                found.push(format!("{name} in {}", path.display()));
            }
        }
    }
    // The log is real and at debug level: it saw the invocations it must not leak.
    let log = std::fs::read_to_string(&log_path).expect("the server's log");
    assert!(log.contains("LEAK_QUERY") && log.contains("DEBUG"), "{log}");
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
    assert!(t.seen.len() > 60, "{} answers", t.seen.len());
}
