//! The watcher (issue 28), against real `capdir serve` processes: a call that needs a person
//! waits (202) and runs once approved, as its caller, below the decision; denied, expired and
//! changed calls never run; nobody decides their own call or reads another's; and tokens'
//! limits answer 429 with `Retry-After` and a `REFUSED` receipt naming the limit. The
//! loopback upstream counts what reached it, so "never ran" is measured.

use crate::common;

use axum::routing::get;
use capdir::access::token::{self, Claims, TokenKey};
use capdir::access::watch::{Rate, Watch};
use common::{Built, Repo, Served};
use serde_json::{Value as Json, json};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const OWNER: &str = "watcher-test-owner-key";
const TOKEN_KEY: &str = "watcher-test-signing-key-0123456789abcdef";
/// A sensitive row declares its arguments.
const SENSITIVE: &str = "sensitive: true\ninput_schema:\n  type: object\n  properties:\n    x: {type: string}\n  required: [x]\n";

fn row(key: &str, kind: &str, target: &str, extra: &str) -> String {
    format!(
        "key: {key}\ntype: {kind}\ntarget: {target}\ncategory: watched\n{extra}content: |\n  # WHAT: {key} for the watcher tests.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=x\n  # EX: hi\n  # OUTPUT: text\n"
    )
}

/// A catalogue with a sensitive http row on a counting loopback upstream, a builtin, a flow
/// of builtins and a sensitive flow whose step is the sensitive row.
async fn fixture() -> (Built, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let upstream = common::serve(axum::Router::new().route(
        "/hit/{x}",
        get(move |axum::extract::Path(x): axum::extract::Path<String>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                format!("hit {x}")
            }
        }),
    ))
    .await;
    let repo = Repo::new();
    repo.write(
        "SECRET_HIT.yaml",
        &row(
            "SECRET_HIT",
            "http",
            &format!("GET http://{upstream}/hit/$1"),
            SENSITIVE,
        ),
    );
    repo.write(
        "ECHO.yaml",
        &format!("{}  [\"$1\"]\n", row("ECHO", "fn", "echo", "")),
    );
    repo.write(
        "TRIM.yaml",
        &format!("{}  [\"$1\"]\n", row("TRIM", "fn", "trim", "")),
    );
    repo.write(
        "TWO_ECHOES.yaml",
        &format!(
            "{}  ECHO: $1 > ECHO: $PREV\n",
            row("TWO_ECHOES", "flow", "", "").replace("target: \n", "")
        ),
    );
    repo.write(
        "SENSITIVE_FLOW.yaml",
        &format!(
            "{}  ECHO: $1 > SECRET_HIT: $PREV\n",
            row("SENSITIVE_FLOW", "flow", "", SENSITIVE).replace("target: \n", "")
        ),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    (Built::new(repo), hits)
}

async fn start(f: &Built, extra: &[&str]) -> Served {
    Served::start(
        f.dir.path(),
        extra,
        &[("CAPDIR_OWNER_KEY", OWNER), ("CAPDIR_TOKEN_KEY", TOKEN_KEY)],
    )
    .await
}

fn claims(served: &Served, keys: &[&str], watch: Watch) -> Claims {
    Claims {
        watch,
        ..common::claims_for(&served.url(""), keys)
    }
}

fn sign(c: &Claims) -> String {
    TokenKey::from_text(TOKEN_KEY).expect("key").sign(c)
}

/// One HTTP request: status, `Retry-After` and the JSON body.
async fn send(
    method: reqwest::Method,
    url: String,
    credential: Option<&str>,
    body: Option<Json>,
) -> (u16, Option<String>, Json) {
    let mut req = common::client().request(method, url);
    if let Some(c) = credential {
        req = req.bearer_auth(c);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("the dispatcher answers");
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("").to_string());
    let text = r.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Json::String(text));
    (status, retry, body)
}

async fn invoke(
    s: &Served,
    credential: &str,
    key: &str,
    body: &str,
) -> (u16, Option<String>, Json) {
    send(
        reqwest::Method::POST,
        s.url("/api/dispatch"),
        Some(credential),
        Some(json!({"key": key, "body": body})),
    )
    .await
}

async fn poll(s: &Served, credential: &str, id: &str) -> (u16, Json) {
    let (st, _, v) = send(
        reqwest::Method::GET,
        s.url(&format!("/api/approvals/{id}/result")),
        Some(credential),
        None,
    )
    .await;
    (st, v)
}

async fn decide(s: &Served, credential: &str, id: &str, decision: &str) -> (u16, Json) {
    let (st, _, v) = send(
        reqwest::Method::POST,
        s.url(&format!("/api/approvals/{id}")),
        Some(credential),
        Some(json!({"decision": decision, "note": "checked by the test"})),
    )
    .await;
    (st, v)
}

/// The answer is the refusal `code` with `status`.
#[track_caller]
fn says(st: u16, v: &Json, status: u16, code: &str) {
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (status, Some(code)),
        "{v}"
    );
}

/// `capdir approvals …` against `s` with the owner key.
fn cli(s: &Served, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capdir"))
        .arg("approvals")
        .args(args)
        .args(["--dispatcher", &s.url("")])
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env_remove("CAPDIR_TOKEN")
        .output()
        .expect("capdir approvals")
}

fn receipt<'a>(all: &'a [Json], id: &str) -> &'a Json {
    all.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no receipt {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sensitive_call_waits_for_a_person_and_runs_once_when_approved() {
    let (f, hits) = fixture().await;
    let s = start(&f, &[]).await;
    let low = claims(&s, &["SECRET_HIT"], Watch::default());
    let tok = sign(&low);

    let (st, _, ticket) = invoke(&s, &tok, "SECRET_HIT", "abc").await;
    assert_eq!(st, 202, "{ticket}");
    assert_eq!(ticket["status"], "PENDING_APPROVAL");
    assert_eq!(ticket["needs"], "sensitive");
    let id = ticket["approval"]
        .as_str()
        .expect("approval id")
        .to_string();
    assert!(id.starts_with("apr_"), "{id}");
    assert_eq!(
        ticket["poll_url"],
        s.url(&format!("/api/approvals/{id}/result"))
    );
    assert_eq!(ticket["approval_url"], s.url(&format!("/approvals#{id}")));
    assert!(ticket["expires_at"].as_str().is_some());
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing ran");
    let (st, v) = poll(&s, &tok, &id).await;
    assert_eq!(
        (st, v["status"].as_str()),
        (202, Some("PENDING_APPROVAL")),
        "{v}"
    );

    // The caller sees none of the queue and decides nothing, its own call included.
    let (st, _, v) = send(
        reqwest::Method::GET,
        s.url("/api/approvals"),
        Some(&tok),
        None,
    )
    .await;
    says(st, &v, 403, "not_approver");
    let (st, v) = decide(&s, &tok, &id, "approve").await;
    says(st, &v, 403, "not_approver");
    // Nor does anyone without a credential.
    let (st, _, _) = send(reqwest::Method::GET, s.url("/api/approvals"), None, None).await;
    assert_eq!(st, 403);

    // The owner sees it with its exact arguments, as the runner will receive them.
    let listed = cli(&s, &["list"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{listed:?}");
    assert!(text.contains(&id) && text.contains("SECRET_HIT"), "{text}");
    let (st, _, v) = send(
        reqwest::Method::GET,
        s.url("/api/approvals"),
        Some(OWNER),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let pending = &v["pending"][0];
    assert_eq!(pending["approval"], id.as_str());
    assert_eq!(pending["arguments"], json!(["abc"]));
    assert_eq!(pending["caller"], format!("token:{}", low.id));
    assert_eq!(pending["contract_current"], true);
    assert_eq!(pending["args_sha256"], capdir::ledger::sha256_hex("abc"));

    // Approved from the command line: it runs once, here, and answers its result.
    let approved = cli(&s, &["approve", &id, "--note", "looks right"]);
    assert!(approved.status.success(), "{approved:?}");
    let decided: Json = serde_json::from_slice(&approved.stdout).expect("json");
    assert_eq!(decided["state"], "approved");
    assert_eq!(
        decided["result"]["status"], "PROVEN_MATERIAL_RESULT",
        "{decided}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let (st, v) = poll(&s, &tok, &id).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["output"], "HTTP 200:hit abc", "{v}");
    let run_id = v["receipt"].as_str().expect("run receipt").to_string();
    assert_eq!(
        v["proof"]["confirm_url"],
        s.url(&format!("/api/dispatch?confirm={run_id}")),
        "the polled answer carries its proof: {v}"
    );

    // Once only: a second decision is refused and nothing runs again.
    let (st, v) = decide(&s, OWNER, &id, "approve").await;
    says(st, &v, 409, "already_decided");
    let (st, v) = decide(&s, OWNER, &id, "deny").await;
    assert_eq!(st, 409, "{v}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // The receipts: request → decision → run, each confirmed keylessly.
    let all = f.receipts();
    let request = receipt(&all, ticket["receipt"].as_str().unwrap());
    assert_eq!(request["status"], "PENDING_APPROVAL");
    assert_eq!(request["actor"], format!("token:{}", low.id));
    let decision = all
        .iter()
        .find(|r| r["parent"] == request["id"])
        .expect("the decision's receipt");
    assert_eq!(decision["status"], "APPROVED");
    assert_eq!(decision["actor"], "owner");
    assert_eq!(decision["input"], "looks right");
    let run = receipt(&all, &run_id);
    assert_eq!(run["parent"], decision["id"]);
    assert_eq!(run["root"], request["id"]);
    assert_eq!(
        run["actor"],
        format!("token:{}", low.id),
        "it ran as its caller"
    );
    assert_eq!(run["status"], "PROVEN_MATERIAL_RESULT");
    for r in [request, decision, run] {
        let (st, _, v) = send(
            reqwest::Method::GET,
            s.url(&format!(
                "/api/dispatch?confirm={}",
                r["id"].as_str().unwrap()
            )),
            None,
            None,
        )
        .await;
        assert_eq!((st, v["confirmed"].as_bool()), (200, Some(true)), "{v}");
    }
    // The whole tree, from the request's full receipt.
    let (st, _, tree) = send(
        reqwest::Method::GET,
        s.url(&format!("/receipt/{}", request["id"].as_str().unwrap())),
        Some(OWNER),
        None,
    )
    .await;
    assert_eq!(st, 200, "{tree}");
    assert_eq!(tree["children"][0]["id"], decision["id"], "{tree}");
    assert_eq!(
        tree["children"][0]["children"][0]["id"],
        run_id.as_str(),
        "{tree}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_expired_and_changed_calls_never_run() {
    let (f, hits) = fixture().await;
    let s = start(&f, &["--approval-ttl", "2s"]).await;
    let tok = sign(&claims(&s, &["SECRET_HIT"], Watch::default()));
    let ask = |body: &'static str| {
        let (s, tok) = (&s, tok.clone());
        async move {
            let (st, _, v) = invoke(s, &tok, "SECRET_HIT", body).await;
            assert_eq!(st, 202, "{v}");
            v["approval"].as_str().unwrap().to_string()
        }
    };
    // Denied, with a note the caller reads.
    let denied = ask("d").await;
    let out = cli(&s, &["deny", &denied, "--note", "not today"]);
    assert!(out.status.success(), "{out:?}");
    let (st, v) = poll(&s, &tok, &denied).await;
    says(st, &v, 403, "approval_denied");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not today"),
        "{v}"
    );
    let (st, v) = decide(&s, OWNER, &denied, "approve").await;
    says(st, &v, 409, "already_decided");

    // Expired: nobody decided in time; it can no longer be approved.
    let expired = ask("e").await;
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    let (st, v) = poll(&s, &tok, &expired).await;
    says(st, &v, 409, "approval_expired");
    let (st, v) = decide(&s, OWNER, &expired, "approve").await;
    says(st, &v, 409, "approval_expired");

    // Changed: the row's contract moved between the request and the approval.
    let changed = ask("c").await;
    let text = std::fs::read_to_string(f.repo.catalogue().join("SECRET_HIT.yaml")).unwrap();
    f.repo
        .write("SECRET_HIT.yaml", &text.replace("/hit/$1", "/hit/other-$1"));
    f.repo.commit("change the row", "2024-01-02T00:00:00Z");
    f.build();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, _, v) = send(
            reqwest::Method::GET,
            s.url(&format!("/api/approvals/{changed}")),
            Some(OWNER),
            None,
        )
        .await;
        if v["contract_current"] == false {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new build was not served: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (st, v) = decide(&s, OWNER, &changed, "approve").await;
    says(st, &v, 409, "contract_changed");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "none of them ran");
    // Unknown and malformed ids.
    let (st, v) = decide(&s, OWNER, "apr_00000000000000000000000000000000", "approve").await;
    says(st, &v, 404, "unknown_approval");
    let (st, v) = decide(&s, OWNER, "apr_not-an-id", "approve").await;
    says(st, &v, 400, "bad_approval_id");
    let (st, v) = decide(&s, OWNER, &changed, "maybe").await;
    says(st, &v, 400, "bad_decision");
}

/// What another caller could make of someone's approval: read it, poll its result, approve
/// it with a token of its own, approve its own call. All refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_decides_their_own_call_or_reads_another_callers() {
    let (f, hits) = fixture().await;
    let s = start(&f, &[]).await;
    let approver_watch = Watch {
        approver: true,
        ..Watch::default()
    };
    // An approver that may also call: its own call still needs another person.
    let both = claims(&s, &["SECRET_HIT"], approver_watch.clone());
    let both_tok = sign(&both);
    let (st, _, v) = invoke(&s, &both_tok, "SECRET_HIT", "own").await;
    assert_eq!(st, 202, "{v}");
    let own = v["approval"].as_str().unwrap().to_string();
    let (st, v) = decide(&s, &both_tok, &own, "approve").await;
    says(st, &v, 403, "self_approval");
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // Another caller's token learns nothing of it.
    let other = sign(&claims(&s, &["SECRET_HIT"], Watch::default()));
    for path in [
        format!("/api/approvals/{own}"),
        format!("/api/approvals/{own}/result"),
    ] {
        let (st, _, v) = send(reqwest::Method::GET, s.url(&path), Some(&other), None).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (404, Some("unknown_approval")),
            "{path}: {v}"
        );
    }
    // A revoked approver decides nothing.
    let approver = claims(&s, &[], approver_watch);
    let approver_tok = sign(&approver);
    let revoke = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["token", "revoke", &approver.id, "--ledger"])
        .arg(format!("sqlite:{}", f.ledger_path().display()))
        .output()
        .expect("revoke");
    assert!(revoke.status.success(), "{revoke:?}");
    let (st, v) = decide(&s, &approver_tok, &own, "approve").await;
    says(st, &v, 403, "not_approver");
    // An approver scoped to other rows neither sees the call nor decides it.
    let elsewhere = sign(&claims(
        &s,
        &["ECHO"],
        Watch {
            approver: true,
            ..Watch::default()
        },
    ));
    let (st, _, v) = send(
        reqwest::Method::GET,
        s.url("/api/approvals"),
        Some(&elsewhere),
        None,
    )
    .await;
    assert_eq!(
        (st, v["pending"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{v}"
    );
    let (st, v) = decide(&s, &elsewhere, &own, "approve").await;
    says(st, &v, 403, "not_approver");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    // A live approver token may: the call runs as its caller, not as the approver.
    let second = claims(
        &s,
        &[],
        Watch {
            approver: true,
            ..Watch::default()
        },
    );
    let (st, v) = decide(&s, &sign(&second), &own, "approve").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["decision"]["by"], format!("token:{}", second.id));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let run = receipt(&f.receipts(), v["result"]["receipt"].as_str().unwrap()).clone();
    assert_eq!(run["actor"], format!("token:{}", both.id));
}

/// A token minted with `--approval` waits for a person on every call, even of a row that is
/// not sensitive; an approved flow runs its sensitive step (the person approved what its row
/// composes), with every receipt in one tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_token_waits_on_every_call_and_an_approved_flow_runs_its_steps() {
    let (f, hits) = fixture().await;
    let s = start(&f, &[]).await;
    let mint = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args([
            "token",
            "mint",
            "--keys",
            "ECHO",
            "--approval",
            "--audience",
            &s.url(""),
        ])
        .arg("--site")
        .arg(f.site())
        .arg("--data")
        .arg(f.dir.path().join("data"))
        .arg("--ledger")
        .arg(format!("sqlite:{}", f.ledger_path().display()))
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .output()
        .expect("mint");
    assert!(mint.status.success(), "{mint:?}");
    let printed = String::from_utf8_lossy(&mint.stdout);
    assert!(
        printed.contains("every call waits for approval"),
        "{printed}"
    );
    let tok = printed.lines().last().unwrap().trim().to_string();
    let (st, _, v) = invoke(&s, &tok, "ECHO", "hello").await;
    assert_eq!((st, v["needs"].as_str()), (202, Some("token")), "{v}");
    let id = v["approval"].as_str().unwrap().to_string();
    let (st, v) = decide(&s, OWNER, &id, "approve").await;
    assert_eq!(
        (st, v["result"]["output"].as_str()),
        (200, Some("hello")),
        "{v}"
    );

    // The sensitive flow: one approval covers its composed sensitive step.
    let low = sign(&claims(&s, &["SENSITIVE_FLOW"], Watch::default()));
    let (st, _, v) = invoke(&s, &low, "SENSITIVE_FLOW", "deep").await;
    assert_eq!(st, 202, "{v}");
    let id = v["approval"].as_str().unwrap().to_string();
    let request_receipt = v["receipt"].as_str().unwrap().to_string();
    let (st, v) = decide(&s, OWNER, &id, "approve").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["result"]["output"], "HTTP 200:hit deep", "{v}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let all = f.receipts();
    let tree: Vec<&str> = all
        .iter()
        .filter(|r| r["root"] == request_receipt.as_str())
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    // The decision, the two steps and the flow: all in the approval's tree.
    assert_eq!(tree.len(), 4, "{tree:?}");
    assert!(
        tree.contains(&"SECRET_HIT") && tree.contains(&"ECHO"),
        "{tree:?}"
    );
}

/// Limits, each answered 429 with `Retry-After` and a `REFUSED` receipt naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_429_with_retry_after_and_a_receipt() {
    let (f, _) = fixture().await;
    let s = start(&f, &[]).await;
    let refused = |v: &Json, code: &str| {
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(v["status"], "REFUSED", "{v}");
        let all = f.receipts();
        let r = receipt(&all, v["receipt"].as_str().expect("receipt"));
        assert_eq!(r["error_code"], code);
    };
    // Calls per period.
    let rate = sign(&claims(
        &s,
        &["ECHO"],
        Watch {
            rate: Some(Rate {
                calls: 2,
                per_secs: 3600,
            }),
            ..Watch::default()
        },
    ));
    for body in ["a", "b"] {
        let (st, _, v) = invoke(&s, &rate, "ECHO", body).await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, retry, v) = invoke(&s, &rate, "ECHO", "c").await;
    assert_eq!(st, 429, "{v}");
    let retry: u64 = retry.expect("Retry-After").parse().expect("seconds");
    assert!((1..=3600).contains(&retry), "{retry}");
    refused(&v, "rate_limited");

    // Calls per row, the steps of a flow counted: one flow of two echoes spends three.
    let per_row = sign(&claims(
        &s,
        &["ECHO", "TWO_ECHOES"],
        Watch {
            per_row: Some(2),
            ..Watch::default()
        },
    ));
    let (st, _, v) = invoke(&s, &per_row, "TWO_ECHOES", "x").await;
    assert_eq!(st, 200, "{v}");
    let (st, retry, v) = invoke(&s, &per_row, "ECHO", "y").await;
    assert_eq!(st, 429, "the flow's two steps spent ECHO's two calls: {v}");
    assert!(retry.is_some());
    refused(&v, "budget_exhausted");

    // A share of a token spends the token's budget, its flow's steps included.
    let parent = claims(
        &s,
        &["ECHO", "TWO_ECHOES"],
        Watch {
            per_row: Some(2),
            ..Watch::default()
        },
    );
    let now = chrono::Utc::now().timestamp();
    let shared = sign(&parent.share("TWO_ECHOES", None, now).expect("a share"));
    let (st, _, v) = invoke(&s, &shared, "TWO_ECHOES", "x").await;
    assert_eq!(st, 200, "{v}");
    let (st, _, v) = invoke(&s, &sign(&parent), "ECHO", "y").await;
    assert_eq!(
        st, 429,
        "the share's two steps spent the parent's ECHO budget: {v}"
    );

    // The loop breaker: the same call three times; other arguments are another call.
    let looping = sign(&claims(
        &s,
        &["ECHO"],
        Watch {
            max_repeats: Some(Rate {
                calls: 2,
                per_secs: 600,
            }),
            ..Watch::default()
        },
    ));
    for _ in 0..2 {
        let (st, _, v) = invoke(&s, &looping, "ECHO", "same").await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, retry, v) = invoke(&s, &looping, "ECHO", "same").await;
    assert_eq!(st, 429, "{v}");
    assert!(retry.is_some());
    refused(&v, "loop_detected");
    let (st, _, v) = invoke(&s, &looping, "ECHO", "different").await;
    assert_eq!(st, 200, "{v}");

    // A token without limits is not counted at all.
    let free = sign(&claims(&s, &["ECHO"], Watch::default()));
    for _ in 0..5 {
        let (st, _, v) = invoke(&s, &free, "ECHO", "same").await;
        assert_eq!(st, 200, "{v}");
    }
}

/// Counters and the queue survive a restart of a dispatcher on its SQLite ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_counters_and_the_queue() {
    let (f, hits) = fixture().await;
    // One public address across the restart, as a deployment has: the tokens name it.
    let base = ["--base-url", "http://watcher.test"];
    let mut s = start(&f, &base).await;
    let daily = Claims {
        aud: "http://watcher.test".into(),
        ..claims(
            &s,
            &["ECHO", "SECRET_HIT"],
            Watch {
                daily: Some(2),
                ..Watch::default()
            },
        )
    };
    let tok = sign(&daily);
    let (st, _, v) = invoke(&s, &tok, "ECHO", "one").await;
    assert_eq!(st, 200, "{v}");
    let (st, _, v) = invoke(&s, &tok, "SECRET_HIT", "two").await;
    assert_eq!(st, 202, "a queued call counts: {v}");
    let id = v["approval"].as_str().unwrap().to_string();
    // The counters are written back within a second.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let _ = s.child.kill();
    let _ = s.child.wait();
    drop(s);
    let s = start(&f, &base).await;
    let (st, _, v) = invoke(&s, &tok, "ECHO", "three").await;
    says(st, &v, 429, "rate_limited");
    // The queued call is still there, and runs once approved.
    let (st, v) = decide(&s, OWNER, &id, "approve").await;
    assert_eq!(
        (st, v["result"]["output"].as_str()),
        (200, Some("HTTP 200:hit two")),
        "{v}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// A dispatcher on the shared PostgreSQL ledger, under one public address.
async fn start_on(f: &Built, ledger: &str, name: &str) -> (std::process::Child, u16) {
    let port = common::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["serve", "--site"])
        .arg(f.site())
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .args(["--base-url", "http://watcher.test", "--ledger", ledger])
        .arg("--data")
        .arg(f.dir.path().join(name))
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .env("CAPDIR_ALLOW_EGRESS", "loopback")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn capdir serve");
    common::wait_ready(&common::client(), port, &mut child).await;
    (child, port)
}

/// Two dispatchers on one PostgreSQL ledger: a call asked on one is decided on the other and
/// runs once; two people deciding at once on both run it once; limits count across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_share_the_queue_and_the_counters() {
    let Some(db) = common::pg_database().await else {
        return;
    };
    let (f, hits) = fixture().await;
    let (mut a, port_a) = start_on(&f, &db.url, "data-a").await;
    let (mut b, port_b) = start_on(&f, &db.url, "data-b").await;
    let at = |port: u16, path: &str| format!("http://127.0.0.1:{port}{path}");
    let mut low = common::claims_for("http://watcher.test", &["SECRET_HIT", "ECHO"]);
    let tok = sign(&low);
    let ask = |port: u16, body: &'static str| {
        let tok = tok.clone();
        async move {
            let (st, _, v) = send(
                reqwest::Method::POST,
                at(port, "/api/dispatch"),
                Some(&tok),
                Some(json!({"key": "SECRET_HIT", "body": body})),
            )
            .await;
            assert_eq!(st, 202, "{v}");
            v["approval"].as_str().unwrap().to_string()
        }
    };
    let decide_at = |port: u16, id: String| async move {
        send(
            reqwest::Method::POST,
            at(port, &format!("/api/approvals/{id}")),
            Some(OWNER),
            Some(json!({"decision": "approve"})),
        )
        .await
    };
    // Asked on A, listed and approved on B, its result polled on A.
    let id = ask(port_a, "one").await;
    let (st, _, v) = send(
        reqwest::Method::GET,
        at(port_b, "/api/approvals"),
        Some(OWNER),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["pending"][0]["approval"], id.as_str(), "{v}");
    let (st, _, v) = decide_at(port_b, id.clone()).await;
    assert_eq!(
        (st, v["result"]["output"].as_str()),
        (200, Some("HTTP 200:hit one")),
        "{v}"
    );
    let (st, _, v) = send(
        reqwest::Method::GET,
        at(port_a, &format!("/api/approvals/{id}/result")),
        Some(&tok),
        None,
    )
    .await;
    assert_eq!(
        (st, v["output"].as_str()),
        (200, Some("HTTP 200:hit one")),
        "{v}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Two people approve one call at the same moment, one on each dispatcher: it runs once.
    for round in 0..5 {
        let id = ask(port_b, "race").await;
        let ((sa, _, va), (sb, _, vb)) =
            tokio::join!(decide_at(port_a, id.clone()), decide_at(port_b, id.clone()));
        let mut statuses = [sa, sb];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "round {round}: {va} / {vb}");
        assert_eq!(hits.load(Ordering::SeqCst), 2 + round, "round {round}");
    }

    // A rate across both dispatchers: three calls an hour, wherever they land.
    low.id = token::new_id();
    low.watch.rate = Some(Rate {
        calls: 3,
        per_secs: 3600,
    });
    let limited = sign(&low);
    let echo = |port: u16| {
        let limited = limited.clone();
        async move {
            send(
                reqwest::Method::POST,
                at(port, "/api/dispatch"),
                Some(&limited),
                Some(json!({"key": "ECHO", "body": "x"})),
            )
            .await
        }
    };
    for port in [port_a, port_b, port_a] {
        let (st, _, v) = echo(port).await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, retry, v) = echo(port_b).await;
    says(st, &v, 429, "rate_limited");
    assert!(retry.is_some());
    let _ = a.kill();
    let _ = b.kill();
    let _ = a.wait();
    let _ = b.wait();
}

/// The cost limit: what a token's models cost, from the price table, summed across calls; past
/// it the next call is refused `budget_exhausted` and the model is not asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_limit_stops_a_token_once_its_models_spent_it() {
    use capdir::serve::{AppState, Settings};
    let (model, asked) = common::model_stand_in("an answer").await;
    let repo = Repo::new();
    repo.write(
        "PRICED_AGENT.yaml",
        "key: PRICED_AGENT\ntype: agent\ntarget: priced-model\ncategory: agents\ncontent: |\n  # WHAT: Answers with a priced model.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=question\n  # EX: hello\n  # OUTPUT: text\n  Answer.\n",
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Built::new(repo);
    let ledger = capdir::ledger::SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.token_key = Some(TokenKey::from_text(TOKEN_KEY).expect("key"));
    s.config.agent.direct.base_url = format!("http://{model}/v1");
    s.config.agent.direct.key_env = String::new();
    // 5 tokens a call at $100,000 per million: $0.50 a call.
    s.config.agent.prices.insert(
        "priced-model".into(),
        capdir::invoke::runner::agent::Price {
            input: 100_000.0,
            output: 100_000.0,
        },
    );
    s.config.egress = capdir::invoke::egress::Egress::loopback();
    let state = AppState::new(s).expect("state");
    let c = Claims {
        watch: Watch {
            max_cost_micro_usd: Some(800_000),
            ..Watch::default()
        },
        ..common::claims_for("http://127.0.0.1:8080", &["PRICED_AGENT"])
    };
    let caller = capdir::access::auth::Caller::Token(Box::new(c));
    let ask = || capdir::dispatch::InvokeRequest {
        key: "PRICED_AGENT".into(),
        body: Some("hello".into()),
        args: None,
        repairs: None,
    };
    // $0 spent, then $0.50: both under $0.80; then $1.00: over.
    for _ in 0..2 {
        let done = state
            .dispatcher()
            .dispatch(&caller, ask())
            .await
            .expect("runs");
        assert_eq!(done.usage.and_then(|u| u.cost_usd), Some(0.5));
    }
    match state.dispatcher().dispatch(&caller, ask()).await {
        Err(e) => {
            assert_eq!(e.code(), "budget_exhausted", "{e}");
            assert_eq!(e.receipt().expect("receipt").draft.status, "REFUSED");
        }
        Ok(done) => panic!("the third call ran: {:?}", done.output),
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the model was not asked a third time"
    );
}

/// Named arguments wait and run as sent; a caller revoked while its call waited has nothing
/// run for it; an input that carries the dispatcher's own secret is never kept in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_arguments_run_as_sent_and_a_revoked_caller_runs_nothing() {
    let (f, hits) = fixture().await;
    let s = start(&f, &[]).await;
    let caller = claims(&s, &["SECRET_HIT"], Watch::default());
    let tok = sign(&caller);
    let (st, _, v) = send(
        reqwest::Method::POST,
        s.url("/api/dispatch"),
        Some(&tok),
        Some(json!({"key": "SECRET_HIT", "args": {"x": "named"}})),
    )
    .await;
    assert_eq!(st, 202, "{v}");
    let named = v["approval"].as_str().unwrap().to_string();
    let (st, v) = decide(&s, OWNER, &named, "approve").await;
    assert_eq!(
        (st, v["result"]["output"].as_str()),
        (200, Some("HTTP 200:hit named")),
        "{v}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Missing arguments are refused at once: nobody is asked to approve a call that cannot run.
    let (st, _, v) = send(
        reqwest::Method::POST,
        s.url("/api/dispatch"),
        Some(&tok),
        Some(json!({"key": "SECRET_HIT", "args": {}})),
    )
    .await;
    assert_eq!(
        (st, v["reason"].as_str()),
        (400, Some("missing_args")),
        "{v}"
    );

    // The owner key as the input: refused, and the ledger's queue never holds it.
    let (st, _, v) = invoke(&s, &tok, "SECRET_HIT", OWNER).await;
    assert_eq!(
        (st, v["reason"].as_str()),
        (400, Some("secret_in_input")),
        "{v}"
    );
    let db = rusqlite::Connection::open(f.ledger_path()).expect("ledger");
    let kept: String = db
        .query_row("SELECT group_concat(request, '') FROM approvals", [], |r| {
            r.get(0)
        })
        .expect("approvals");
    assert!(
        !kept.contains(OWNER),
        "the owner key is in the approvals table"
    );

    // Revoked while it waited: approving it runs nothing, and the run's refusal is receipted.
    let (st, _, v) = invoke(&s, &tok, "SECRET_HIT", "late").await;
    assert_eq!(st, 202, "{v}");
    let late = v["approval"].as_str().unwrap().to_string();
    let revoke = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["token", "revoke", &caller.id, "--ledger"])
        .arg(format!("sqlite:{}", f.ledger_path().display()))
        .output()
        .expect("revoke");
    assert!(revoke.status.success(), "{revoke:?}");
    let (st, v) = decide(&s, OWNER, &late, "approve").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["result"]["error"], "revoked", "{v}");
    assert_eq!(v["result"]["status"], "REFUSED", "{v}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "nothing ran for the revoked caller"
    );
}

/// Every invocation answer carries its proof: where the receipt is read and confirmed, and the
/// POST that repairs the call; a run that produced nothing can be repaired like a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_carry_their_proof_and_an_empty_run_can_be_repaired() {
    let (f, _) = fixture().await;
    let s = start(&f, &[]).await;
    // Trimming blanks runs and produces nothing.
    let (st, _, empty) = invoke(&s, OWNER, "TRIM", "   ").await;
    assert_eq!(
        (st, empty["status"].as_str()),
        (200, Some("RAN_NO_MATERIAL")),
        "{empty}"
    );
    let id = empty["receipt"].as_str().unwrap();
    let proof = &empty["proof"];
    assert_eq!(proof["receipt_url"], s.url(&format!("/receipt/{id}")));
    assert_eq!(
        proof["confirm_url"],
        s.url(&format!("/api/dispatch?confirm={id}"))
    );
    assert_eq!(proof["repair"]["method"], "POST");
    assert_eq!(proof["repair"]["url"], s.url("/api/dispatch"));
    assert_eq!(proof["repair"]["body"]["repairs"], id);
    assert_eq!(proof["repair"]["body"]["key"], "TRIM");
    // The addresses work as given: the keyless confirm, then the repair.
    let (st, _, v) = send(
        reqwest::Method::GET,
        proof["confirm_url"].as_str().unwrap().to_string(),
        None,
        None,
    )
    .await;
    assert_eq!(
        (st, v["status"].as_str()),
        (200, Some("RAN_NO_MATERIAL")),
        "{v}"
    );
    let mut repair = proof["repair"]["body"].clone();
    repair["body"] = json!("now with words");
    let (st, _, fixed) = send(
        reqwest::Method::POST,
        proof["repair"]["url"].as_str().unwrap().to_string(),
        Some(OWNER),
        Some(repair),
    )
    .await;
    assert_eq!(
        (st, fixed["output"].as_str()),
        (200, Some("now with words")),
        "{fixed}"
    );
    // Lineage both ways.
    let (_, _, full) = send(
        reqwest::Method::GET,
        proof["receipt_url"].as_str().unwrap().to_string(),
        Some(OWNER),
        None,
    )
    .await;
    assert_eq!(full["repaired_by"], json!([fixed["receipt"]]), "{full}");
    // A successful run is not repaired; a refusal's answer carries its proof too.
    let mut again = fixed["proof"]["repair"]["body"].clone();
    again["body"] = json!("x");
    let (st, _, v) = send(
        reqwest::Method::POST,
        s.url("/api/dispatch"),
        Some(OWNER),
        Some(again),
    )
    .await;
    says(st, &v, 409, "repairs_not_failed");
    let tok = sign(&claims(&s, &["ECHO"], Watch::default()));
    let (st, _, v) = invoke(&s, &tok, "SECRET_HIT", "x").await;
    says(st, &v, 403, "scope");
    assert_eq!(
        v["proof"]["confirm_url"],
        s.url(&format!(
            "/api/dispatch?confirm={}",
            v["receipt"].as_str().unwrap()
        ))
    );
}
