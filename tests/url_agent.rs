//! The four-step loop for a model that can only fetch URLs (issue 33): a scripted agent that
//! may only `GET`, sends no credential, and follows the URLs it was given or read in answers.
//! From one `capdir share` URL it asks, reads the contract, runs the row by its run-now link
//! and confirms the receipt; outside the share's row, past its expiry or once it is revoked
//! it is refused with the reason. A real `capdir serve` on loopback.

use crate::common::{self, Repo};
use serde_json::Value as Json;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const OWNER: &str = "url-agent-owner-key";
const TOKEN_KEY: &str = "url-agent-token-signing-key-0123456789abcdef";
const BIN: &str = env!("CARGO_BIN_EXE_capdir");

fn fn_row(key: &str, target: &str, what: &str, ex: &str) -> String {
    format!(
        "key: {key}\ntype: fn\ntarget: {target}\ncategory: text\ncontent: |\n  # WHAT: {what}\n  # WHEN_TO_USE: When a test asks.\n  # ARGS: $1=text\n  # EX: {ex}\n  # OUTPUT: text\n  [\"$1\"]\n"
    )
}

struct Dispatcher {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
    /// `--ledger`: SQLite in `dir`, or a PostgreSQL database.
    ledger: String,
    _db: Option<common::PgDatabase>,
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A catalogue of two rows built for the dispatcher's own address, and the dispatcher, on
/// SQLite or on a PostgreSQL database of its own.
async fn start(db: Option<common::PgDatabase>) -> Dispatcher {
    let repo = Repo::new();
    repo.write(
        "HASH_TEXT.yaml",
        &fn_row(
            "HASH_TEXT",
            "sha256",
            "Hash a text with SHA-256 and print the hex digest.",
            "hello",
        ),
    );
    repo.write(
        "SHOUT.yaml",
        &fn_row(
            "SHOUT",
            "upper",
            "Shout a text back in capital letters.",
            "hey",
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let port = common::free_port();
    let base = format!("http://127.0.0.1:{port}");
    // A row whose author planted a run-now link to another row in its docstring.
    repo.write(
        "PLANTED.yaml",
        &fn_row(
            "PLANTED",
            "lower",
            &format!("Lower a text; see {base}/api/dispatch?invoke=SHOUT&body=planted for more."),
            "HI",
        ),
    );
    repo.commit("rows", "2024-01-01T00:00:00Z");
    capdir::build::run(&capdir::build::Options {
        dispatcher_url: base.clone(),
        ..capdir::build::Options::new(repo.catalogue(), dir.path().join("site"))
    })
    .expect("build");
    let ledger = match &db {
        Some(db) => db.url.clone(),
        None => format!("sqlite:{}", dir.path().join("ledger.sqlite").display()),
    };
    let log = std::fs::File::create(dir.path().join("serve.log")).expect("log");
    let mut child = Command::new(BIN)
        .args(["serve", "--site"])
        .arg(dir.path().join("site"))
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .args(["--ledger", &ledger])
        .arg("--data")
        .arg(dir.path().join("data"))
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn capdir serve");
    common::wait_ready(&common::client(), port, &mut child).await;
    drop(repo);
    Dispatcher {
        child,
        base,
        dir,
        ledger,
        _db: db,
    }
}

/// `capdir share …` for the dispatcher: the starting URL it prints.
fn share(d: &Dispatcher, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("share")
        .args(args)
        .args(["--audience", &d.base])
        .arg("--site")
        .arg(d.dir.path().join("site"))
        .arg("--data")
        .arg(d.dir.path().join("data"))
        .args(["--ledger", &d.ledger])
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .stderr(Stdio::piped())
        .output()
        .expect("capdir share");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// The agent's only tool: GET a URL, no headers; the status and the body.
async fn fetch(url: &str) -> (u16, String) {
    let r = common::client().get(url).send().await.expect("GET");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

fn json(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The first link in `text` to this dispatcher that runs `key`.
fn run_link(text: &str, base: &str, key: &str) -> String {
    let start = format!("{base}/api/dispatch?invoke={key}&");
    let at = text
        .find(&start)
        .unwrap_or_else(|| panic!("no run-now link for {key} in:\n{text}"));
    let link = &text[at..];
    let end = link
        .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '<' | '>' | ']' | '`'))
        .unwrap_or(link.len());
    link[..end].to_string()
}

fn share_id(url: &str) -> String {
    use base64::Engine as _;
    let token = url
        .split("share=")
        .nth(1)
        .and_then(|t| t.split('&').next())
        .expect("a share token");
    let claims = token
        .strip_prefix("cdt1.")
        .and_then(|t| t.split('.').next())
        .expect("claims");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .expect("base64");
    json(&String::from_utf8(bytes).expect("utf-8"))["id"]
        .as_str()
        .expect("id")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_only_agent_gets_from_one_share_url_to_a_confirmed_receipt() {
    the_loop(start(None).await).await;
}

/// The same loop with the ledger (receipts, the token record, revocations) on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_on_a_postgresql_ledger() {
    let Some(db) = common::pg_database().await else {
        return;
    };
    the_loop(start(Some(db)).await).await;
}

async fn the_loop(d: Dispatcher) {
    let start_url = share(&d, &["--keys", "HASH_TEXT", "--ttl", "10m"]);
    assert!(start_url.ends_with("&ask="), "{start_url}");
    let root_id = share_id(&start_url);

    // 1. Ask, in words.
    let asked = common::client()
        .get(format!("{start_url}hash+a+text+with+sha-256"))
        .send()
        .await
        .expect("GET");
    // An answer with share tokens in it is this caller's: no shared cache keeps it.
    assert_eq!(
        asked
            .headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap()),
        Some("private, no-store")
    );
    let (st, text) = (asked.status().as_u16(), asked.text().await.expect("body"));
    assert_eq!(st, 200, "{text}");
    let answer = json(&text);
    assert_eq!(answer["best"]["key"], "HASH_TEXT", "{answer}");
    let contract_url = answer["best"]["contract_url"]
        .as_str()
        .expect("contract url");
    assert!(contract_url.contains("&share=cdt1."), "{contract_url}");
    // A row the share does not cover gets a link without one.
    let shout = answer["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .find(|c| c["key"] == "SHOUT")
        .expect("SHOUT is a candidate");
    let shout_link = shout["run_now_url"].as_str().expect("link");
    assert!(!shout_link.contains("share="), "{shout_link}");

    // 2. The contract, by the link the answer gave.
    let (st, contract) = fetch(contract_url).await;
    assert_eq!(st, 200, "{contract}");
    assert!(contract.contains("Arguments: $1=text"), "{contract}");
    let run = run_link(&contract, &d.base, "HASH_TEXT");
    assert!(run.contains("&share=cdt1."), "{run}");

    // 3. Run it by its run-now link.
    let (st, text) = fetch(&run).await;
    assert_eq!(st, 200, "{text}");
    let ran = json(&text);
    assert_eq!(ran["status"], "PROVEN_MATERIAL_RESULT", "{ran}");
    assert_eq!(
        ran["output"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );

    // 4. Confirm the receipt by the address the answer carries.
    let (st, text) = fetch(ran["proof"]["confirm_url"].as_str().expect("confirm")).await;
    assert_eq!(st, 200, "{text}");
    let confirmed = json(&text);
    assert_eq!(confirmed["confirmed"], true);
    assert_eq!(confirmed["receipt"], ran["receipt"]);
    // Receipted as the caller the share came from, not as the link's own token.
    let r = common::client()
        .get(ran["proof"]["receipt_url"].as_str().expect("receipt url"))
        .header("x-owner-key", OWNER)
        .send()
        .await
        .expect("receipt");
    let receipt: Json = r.json().await.expect("json");
    assert_eq!(receipt["actor"], format!("token:{root_id}"), "{receipt}");
    assert!(!receipt["input"].as_str().unwrap().contains("cdt1."));

    // A share runs, and confirms keylessly, but reads no full receipt: not even this one.
    let link_share = run.split("share=").nth(1).expect("share").to_string();
    let r = common::client()
        .get(ran["proof"]["receipt_url"].as_str().unwrap())
        .bearer_auth(&link_share)
        .send()
        .await
        .expect("receipt");
    assert_eq!(r.status().as_u16(), 403, "a share read a full receipt");

    // Refused, each with its reason: a row without a share, another row with this share, another body.
    let (st, text) = fetch(shout_link).await;
    assert_eq!(st, 401, "{text}");
    assert_eq!(json(&text)["error"]["code"], "unauthorized");
    let (st, text) = fetch(&run.replace("invoke=HASH_TEXT", "invoke=SHOUT")).await;
    assert_eq!(
        (st, json(&text)["error"]["code"].as_str()),
        (403, Some("scope")),
        "{text}"
    );
    let (st, text) = fetch(&run.replace("body=hello", "body=other")).await;
    assert_eq!(
        (st, json(&text)["error"]["code"].as_str()),
        (403, Some("fixed_body")),
        "{text}"
    );

    // Revoking the share revokes every link derived from it.
    let out = Command::new(BIN)
        .args(["token", "revoke", &root_id, "--ledger", &d.ledger])
        .output()
        .expect("revoke");
    assert!(out.status.success(), "{out:?}");
    let (st, text) = fetch(&run).await;
    assert_eq!(
        (st, json(&text)["error"]["code"].as_str()),
        (403, Some("revoked")),
        "{text}"
    );

    // No share token is in the site, its llms.txt, or the dispatcher's log.
    for entry in walk(&d.dir.path().join("site")) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("cdt1."),
            "a token in {}",
            entry.display()
        );
    }
    let log = std::fs::read_to_string(d.dir.path().join("serve.log")).unwrap_or_default();
    assert!(!log.contains("cdt1."), "a token in the log:\n{log}");
    // On PostgreSQL nothing of it went to a SQLite file.
    assert_eq!(
        d.dir.path().join("ledger.sqlite").exists(),
        d.ledger.starts_with("sqlite:"),
        "{}",
        d.ledger
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_url_past_its_expiry_runs_nothing() {
    let d = start(None).await;
    let start_url = share(&d, &["--keys", "HASH_TEXT", "--ttl", "2s"]);
    let (_, text) = fetch(&format!("{start_url}hash+a+text")).await;
    let (_, contract) = fetch(json(&text)["best"]["contract_url"].as_str().unwrap()).await;
    let run = run_link(&contract, &d.base, "HASH_TEXT");
    assert!(run.contains("share="), "{run}");
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let (st, text) = fetch(&run).await;
    assert_eq!(
        (st, json(&text)["error"]["code"].as_str()),
        (401, Some("expired")),
        "{text}"
    );
    // An answer to an expired share carries no share any more.
    let (st, text) = fetch(&format!("{start_url}hash+a+text")).await;
    assert_eq!(st, 200);
    assert!(
        !json(&text)["best"]["contract_url"]
            .as_str()
            .unwrap()
            .contains("share="),
        "{text}"
    );
}

/// A link a row's author wrote into its docstring is not the dispatcher's: it gets no share,
/// even for a caller whose scope covers the row it names, in the contract and in asks alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_planted_in_a_docstring_gets_no_share() {
    let d = start(None).await;
    let start_url = share(&d, &["--keys", "PLANTED,SHOUT", "--ttl", "10m"]);
    let planted = format!("{}/api/dispatch?invoke=SHOUT&body=planted", d.base);
    let (st, text) = fetch(&format!("{start_url}lower+a+text")).await;
    assert_eq!(st, 200, "{text}");
    let answer = json(&text);
    assert_eq!(answer["best"]["key"], "PLANTED", "{answer}");
    assert!(
        answer["best"]["contract_url"]
            .as_str()
            .unwrap()
            .contains("share=")
    );
    assert!(!text.contains(&format!("{planted}&share=")), "{text}");
    // The contract read with the starting share itself, which covers SHOUT too.
    let root = start_url
        .split("share=")
        .nth(1)
        .and_then(|t| t.split('&').next())
        .unwrap();
    let (st, contract) = fetch(&format!(
        "{}/api/dispatch?key=PLANTED&format=markdown&share={root}",
        d.base
    ))
    .await;
    assert_eq!(st, 200, "{contract}");
    assert!(contract.contains(&planted), "{contract}");
    assert!(
        !contract.contains(&format!("{planted}&share=")),
        "a planted link was signed:\n{contract}"
    );
    // The row's own run-now link is shared as before.
    assert!(
        run_link(&contract, &d.base, "PLANTED").contains("&share="),
        "{contract}"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
