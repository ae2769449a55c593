//! The write API (`capdir serve --catalogue DIR --write direct|propose`) on a real dispatcher
//! over loopback, against real Git repositories in temporary directories: a row created,
//! patched and removed becomes a commit and is served on the next request; the gate refuses
//! with diagnostics and changes nothing; tokens need a write scope; writers at once both land;
//! a write that fails halfway, or meets a file with uncommitted changes, leaves the work
//! tree, the index and HEAD as they were; `propose` pushes a branch to a bare repository.

use crate::common;

use capdir::access::token::{Claims, TokenKey};
use capdir::build::Options;
use capdir::ledger::SqliteLedger;
use capdir::serve::{AppState, Settings, app};
use capdir::write::{Mode, Ready};
use common::{Repo, fixture, fn_row};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const OWNER: &str = "write-test-owner-key";
const TOKEN_KEY: &str = "write-test-token-key-0123456789abcdef0123";
const BASE: &str = "http://127.0.0.1:8080";

/// A row whose ask ranks it below three others that say the same words in their WHAT (the
/// clocks): it fails `capdir check`'s asks gate, yet builds (the build does not search
/// asks). A legacy row, as catalogues have them.
fn legacy_row() -> String {
    fn_row("LEGACY_ROW", "text", "Legacy helper.")
        .replace("  - echo my words\n", "  - current time of day\n")
}

fn clock_row(key: &str) -> String {
    fn_row(key, "time", "Tells the current time of day.")
        .replace("  - echo my words\n", "  - current time of day\n")
}

/// A catalogue in Git, its site, and a dispatcher taking writes on loopback.
struct Served {
    repo: Repo,
    dir: tempfile::TempDir,
    url: String,
    client: reqwest::Client,
}

impl Served {
    async fn start(mode: Mode, setup: impl FnOnce(&Repo)) -> Served {
        let repo = Repo::new();
        repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
        repo.write("GOOD_NOW.yaml", &fixture("good/GOOD_NOW.yaml"));
        repo.write("GOOD_FLOW.yaml", &fixture("good/GOOD_FLOW.yaml"));
        repo.write(
            "OTHER_ROW.yaml",
            &fn_row("OTHER_ROW", "misc", "Other words."),
        );
        repo.write("LEGACY_ROW.yaml", &legacy_row());
        for clock in ["CLOCK_ONE", "CLOCK_TWO", "CLOCK_THREE"] {
            repo.write(&format!("{clock}.yaml"), &clock_row(clock));
        }
        repo.commit("First rows", "2024-01-01T10:00:00Z");
        setup(&repo);
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            dispatcher_url: BASE.into(),
            ..Options::new(repo.catalogue(), dir.path().join("site"))
        };
        let ready = Ready::open(mode, options).expect("site opened for writes");
        let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
        let settings = Settings {
            owner_key: Some(OWNER.into()),
            token_key: Some(TokenKey::from_text(TOKEN_KEY).expect("key")),
            write: Some(ready),
            ..Settings::new(dir.path().join("site"), Arc::new(ledger))
        };
        let state = AppState::new(settings).expect("state");
        let addr = common::serve(app(state)).await;
        Served {
            repo,
            dir,
            url: format!("http://{addr}"),
            client: crate::common::client(),
        }
    }

    fn git(&self, args: &[&str]) -> String {
        git(self.repo.path(), args)
    }

    /// The receipt a write's answer names, read back with the owner key.
    async fn receipt(&self, answer: &Json) -> Json {
        let id = answer["receipt"].as_str().expect("receipt");
        let res = self
            .client
            .get(format!("{}/receipt/{id}", self.url))
            .header("x-owner-key", OWNER)
            .send()
            .await
            .expect("receipt");
        assert_eq!(res.status(), 200);
        res.json().await.expect("json")
    }

    fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// HEAD, the index file (its digest) and `git status`: what a failed write must leave
    /// alone.
    fn state(&self) -> (String, String, String) {
        let index = std::fs::read(self.repo.path().join(".git/index")).expect("index");
        (
            self.head(),
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&index)),
            self.git(&["status", "--porcelain", "--untracked-files=all"]),
        )
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        credential: Option<&str>,
        content_type: &str,
        body: String,
    ) -> (u16, Json) {
        let mut req = self
            .client
            .request(
                method.parse().expect("method"),
                format!("{}{path}", self.url),
            )
            .header("content-type", content_type)
            .body(body);
        if let Some(c) = credential {
            req = req.header("authorization", format!("Bearer {c}"));
        }
        let res = req.send().await.expect("response");
        let status = res.status().as_u16();
        let text = res.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(json!({"raw": text})),
        )
    }

    async fn put_yaml(&self, key: &str, yaml: &str) -> (u16, Json) {
        self.send(
            "PUT",
            &format!("/api/directory/{key}"),
            Some(OWNER),
            "application/yaml",
            yaml.into(),
        )
        .await
    }

    async fn patch(&self, key: &str, fields: Json, credential: &str) -> (u16, Json) {
        self.send(
            "PATCH",
            &format!("/api/directory/{key}"),
            Some(credential),
            "application/json",
            fields.to_string(),
        )
        .await
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let res = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("response");
        (res.status().as_u16(), res.text().await.expect("body"))
    }

    /// The contract of `key` as JSON, and the status it came with.
    async fn contract(&self, key: &str) -> (u16, Json) {
        let (status, text) = self
            .get(&format!("/api/dispatch?key={key}&format=json"))
            .await;
        (status, serde_json::from_str(&text).unwrap_or(Json::Null))
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.repo.catalogue().join(name)).ok()
    }

    fn site(&self) -> PathBuf {
        self.dir.path().join("site")
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn token(write: &[&str], keys: &[&str]) -> String {
    let claims = Claims {
        write: write.iter().map(|w| w.to_string()).collect(),
        ..crate::common::claims_for(BASE, keys)
    };
    TokenKey::from_text(TOKEN_KEY).expect("key").sign(&claims)
}

fn new_row(key: &str, what: &str) -> String {
    // The ask's words in the row's WHAT: the gate ranks the row for its ask among rows that
    // echo too, lexically and by meaning.
    fn_row(key, "text", &format!("Shout my words loudly. {what}"))
        .replace("  - echo my words\n", "  - shout my words loudly\n")
}

#[tokio::test]
async fn a_created_row_is_a_commit_served_on_the_next_request() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let before = s.head();
    let (status, v) = s
        .put_yaml(
            "SHOUT_BACK",
            &new_row("SHOUT_BACK", "Shouts its input back."),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let commit = v["commit"].as_str().expect("commit").to_string();
    assert_eq!(v["change"], "added");
    assert!(v["receipt"].as_str().is_some_and(|r| r.starts_with("inv_")));
    assert!(
        v["contract_url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/api/dispatch?key=SHOUT_BACK&format=markdown")),
        "{v}"
    );
    // The very next request serves it: its contract, an ask, an invocation.
    let (status, contract) = s.contract("SHOUT_BACK").await;
    assert_eq!(status, 200, "{contract}");
    assert_eq!(contract["history"][0]["sha"], commit.as_str());
    assert_eq!(contract["history"][0]["author"], "capdir owner");
    let (_, ask) = s.get("/api/dispatch?ask=shout+my+words+back+loudly").await;
    let ask: Json = serde_json::from_str(&ask).expect("json");
    assert_eq!(ask["best"]["key"], "SHOUT_BACK", "{ask}");
    let (status, ran) = s
        .send(
            "POST",
            "/api/dispatch",
            Some(OWNER),
            "application/json",
            json!({"key": "SHOUT_BACK", "body": "hey"}).to_string(),
        )
        .await;
    assert_eq!(
        (status, ran["output"].as_str()),
        (200, Some("hey")),
        "{ran}"
    );

    // In Git: one commit on the branch, by the owner, the work tree and index with it.
    assert_eq!(s.head(), commit);
    assert_eq!(s.git(&["rev-parse", "HEAD~1"]), before);
    assert_eq!(
        s.git(&["log", "-1", "--format=%an|%s"]),
        "capdir owner|Add SHOUT_BACK"
    );
    assert_eq!(
        s.git(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    assert_eq!(
        s.git(&["show", "--name-status", "--format=", "HEAD"]),
        "A\tcatalogue/SHOUT_BACK.yaml"
    );
    // The write's receipt, like an invocation's.
    let r = s.receipt(&v).await;
    assert_eq!(
        (&r["runner"], &r["status"], &r["catalogue_commit"]),
        (
            &json!("write"),
            &json!("PROVEN_MATERIAL_RESULT"),
            &json!(commit)
        ),
        "{r}"
    );

    // The row sent again as it is: nothing to commit.
    let (status, same) = s
        .put_yaml(
            "SHOUT_BACK",
            &new_row("SHOUT_BACK", "Shouts its input back."),
        )
        .await;
    assert_eq!(
        (status, &same["change"]),
        (200, &json!("unchanged")),
        "{same}"
    );
    assert_eq!(same["commit"], commit.as_str());
    assert_eq!(s.head(), commit);
    // JSON replaces a row too, and a message given is the commit's.
    let (status, v) = s
        .send(
            "PUT",
            "/api/directory/SHOUT_BACK?message=Shout%20louder",
            Some(OWNER),
            "application/json",
            json!({
                "key": "SHOUT_BACK", "type": "fn", "target": "upper", "category": "text",
                "content": "# WHAT: Shouts its input back in capitals.\n# WHEN_TO_USE: Tests.\n# ARGS: $1=text\n# EX: hi\n# OUTPUT: text\n[\"$1\"]\n",
                "asks": ["shout my words back loudly"]
            })
            .to_string(),
        )
        .await;
    assert_eq!((status, &v["change"]), (201, &json!("modified")), "{v}");
    assert_eq!(s.git(&["log", "-1", "--format=%s"]), "Shout louder");
    let (_, contract) = s.contract("SHOUT_BACK").await;
    assert_eq!(contract["target"], "upper");
    assert_eq!(contract["history"].as_array().map(Vec::len), Some(2));

    // The listing pages follow: the registry and the index page name the new row.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let registry = std::fs::read_to_string(s.site().join("registry.json")).unwrap_or_default();
        let manifest = std::fs::read_to_string(s.site().join("build.json")).unwrap_or_default();
        if registry.contains("SHOUT_BACK") && manifest.contains(&s.head()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pages never followed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_gate_refuses_a_clean_row_made_dirty_and_lets_a_legacy_row_change() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let before = s.state();
    let echo = s.file("GOOD_ECHO.yaml");

    let (status, v) = s
        .patch("GOOD_ECHO", json!({"category": "Bad Cat"}), OWNER)
        .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error"]["code"], "refused");
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "bad_category", "{v}");
    assert_eq!(d["path"], "catalogue/GOOD_ECHO.yaml");
    assert!(
        d["line"].as_u64() > Some(0) && d["column"].as_u64() > Some(0),
        "{d}"
    );
    assert!(d["help"].as_str().is_some_and(|h| !h.is_empty()), "{d}");
    assert_eq!(
        v["status"], "REFUSED",
        "a refused write has its receipt: {v}"
    );
    assert_eq!(
        s.state(),
        before,
        "a refused write changed Git or the work tree"
    );
    assert_eq!(s.file("GOOD_ECHO.yaml"), echo);
    let (_, contract) = s.contract("GOOD_ECHO").await;
    assert_eq!(contract["category"], "text");

    // A legacy row (its ask ranks it fourth) may change without getting better...
    let (status, v) = s
        .patch(
            "LEGACY_ROW",
            json!({"content": "# WHAT: Legacy helper, improved.\n# WHEN_TO_USE: Tests.\n# ARGS: $1=text\n# EX: hi\n# OUTPUT: text\n[\"$1\"]\n"}),
            OWNER,
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let warning = &v["warnings"][0];
    assert_eq!(warning["code"], "ask_not_found", "{v}");
    assert!(
        warning["message"]
            .as_str()
            .is_some_and(|m| m.contains("legacy problem")),
        "{v}"
    );
    assert!(
        s.file("LEGACY_ROW.yaml")
            .is_some_and(|f| f.contains("improved"))
    );
    // ...but not get worse.
    let head = s.head();
    let (status, v) = s
        .patch("LEGACY_ROW", json!({"category": "Bad Cat"}), OWNER)
        .await;
    assert_eq!(status, 422, "{v}");
    let codes: Vec<&str> = v["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|d| d["code"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(codes, ["bad_category"], "{v}");
    assert_eq!(s.head(), head);

    // Field names a row does not have.
    let (status, v) = s
        .patch("GOOD_ECHO", json!({"categroy": "text"}), OWNER)
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "no_recognized_fields");
    assert!(
        v["error"]["how_to_fix"]
            .as_str()
            .is_some_and(|h| h.contains("category")),
        "{v}"
    );
    // A body over the dispatcher's limit is refused before it is read whole.
    let (status, v) = s.put_yaml("GOOD_ECHO", &"# padding\n".repeat(40_000)).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (413, &json!("body_too_large")),
        "{v}"
    );
    // A body that is not YAML says where.
    let (status, v) = s.put_yaml("GOOD_ECHO", "key: GOOD_ECHO\ntype: [fn\n").await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("bad_body")),
        "{v}"
    );
    assert!(
        v["line"].as_u64().is_some() && v["column"].as_u64().is_some(),
        "{v}"
    );
    assert_eq!(s.head(), head);
}

#[tokio::test]
async fn a_removed_row_leaves_a_tombstone_naming_its_replacement() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    // A row a flow steps to cannot go: the flow would break.
    let (status, v) = s
        .send(
            "DELETE",
            "/api/directory/GOOD_NOW",
            Some(OWNER),
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["diagnostics"][0]["code"], "unknown_flow_step", "{v}");
    assert_eq!(v["diagnostics"][0]["path"], "catalogue/GOOD_FLOW.yaml");
    // A replacement must be a row.
    let (status, v) = s
        .send(
            "DELETE",
            "/api/directory/OTHER_ROW?replaced_by=NO_SUCH_ROW",
            Some(OWNER),
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["diagnostics"][0]["code"], "unknown_replacement");

    let (status, v) = s
        .send(
            "DELETE",
            "/api/directory/OTHER_ROW?replaced_by=GOOD_ECHO",
            Some(OWNER),
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!((status, &v["change"]), (201, &json!("deleted")), "{v}");
    assert_eq!(
        s.git(&["log", "-1", "--format=%B"]),
        "Remove OTHER_ROW\n\nReplaced-by: GOOD_ECHO"
    );
    assert!(s.file("OTHER_ROW.yaml").is_none());
    assert_eq!(s.git(&["status", "--porcelain"]), "");
    let (status, tomb) = s.contract("OTHER_ROW").await;
    assert_eq!(status, 410, "{tomb}");
    assert_eq!(tomb["replaced_by"], "GOOD_ECHO");
    assert_eq!(tomb["removed_by"], v["commit"]);
    // Gone from asks and invocations.
    let (status, _) = s
        .send(
            "POST",
            "/api/dispatch",
            Some(OWNER),
            "application/json",
            json!({"key": "OTHER_ROW", "body": "x"}).to_string(),
        )
        .await;
    assert_eq!(status, 404);
    // PATCH and DELETE need a row; PUT brings it back.
    let (status, v) = s.patch("OTHER_ROW", json!({"seq": 1}), OWNER).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &json!("unknown_key")),
        "{v}"
    );
    let (status, _) = s
        .put_yaml(
            "OTHER_ROW",
            &fn_row("OTHER_ROW", "misc", "Other words again."),
        )
        .await;
    assert_eq!(status, 201);
    let (status, contract) = s.contract("OTHER_ROW").await;
    assert_eq!(status, 200, "{contract}");
}

#[tokio::test]
async fn tokens_need_a_write_scope_that_covers_the_row() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let before = s.state();
    // A token that may invoke the row may not write it.
    let invoke_only = token(&[], &["GOOD_ECHO"]);
    let (status, v) = s.patch("GOOD_ECHO", json!({"seq": 3}), &invoke_only).await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "scope");
    assert_eq!(v["status"], "REFUSED", "{v}");
    assert!(v["receipt"].as_str().is_some(), "{v}");
    // Nor may a category token move a row out of its category.
    let text_writer = token(&["text"], &[]);
    let (status, v) = s
        .patch("GOOD_ECHO", json!({"category": "misc"}), &text_writer)
        .await;
    assert_eq!((status, &v["error"]["code"]), (403, &json!("scope")), "{v}");
    // Nor anything without a credential, or with a wrong one.
    let (status, v) = s
        .send(
            "PATCH",
            "/api/directory/GOOD_ECHO",
            None,
            "application/json",
            "{}".into(),
        )
        .await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (401, &json!("unauthorized")),
        "{v}"
    );
    let (status, _) = s
        .patch("GOOD_ECHO", json!({"seq": 3}), "not-the-owner")
        .await;
    assert_eq!(status, 403);
    assert_eq!(s.state(), before);

    // Within its category it writes, and the commit is the token's.
    let (status, v) = s.patch("GOOD_ECHO", json!({"seq": 3}), &text_writer).await;
    assert_eq!(status, 201, "{v}");
    let claims_id = {
        let payload = text_writer.split('.').nth(1).expect("claims");
        let raw = base64_url(payload);
        serde_json::from_slice::<Json>(&raw).expect("claims")["id"]
            .as_str()
            .expect("id")
            .to_string()
    };
    assert_eq!(
        s.git(&["log", "-1", "--format=%an <%ae>"]),
        format!("{claims_id} <{claims_id}@capdir.invalid>")
    );
    // And a token naming a key creates that row wherever it goes.
    let by_key = token(&["BRAND_NEW"], &[]);
    let (status, v) = s
        .send(
            "PUT",
            "/api/directory/BRAND_NEW",
            Some(&by_key),
            "application/yaml",
            fn_row(
                "BRAND_NEW",
                "misc",
                "Counts the letters of a word, brand new.",
            )
            .replace("  - echo my words\n", "  - count the letters of a word\n"),
        )
        .await;
    assert_eq!(status, 201, "{v}");
}

fn base64_url(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64url") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Two writes overlap in the dispatcher: both are held at the index's lock (another git's,
/// taken here for a quarter of a second) until both have started, which their receipts'
/// times prove; then both land, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_at_once_both_land() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let before = s.head();
    let index_lock = s.repo.path().join(".git/index.lock");
    let hold = || {
        std::fs::write(&index_lock, "").expect("lock");
        let lock = index_lock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(250));
            std::fs::remove_file(lock).expect("unlock");
        })
    };
    // Two rows, and two fields of one row, each pair sent at once.
    let (first, second) = (
        new_row("FIRST_NEW", "First new row."),
        new_row("SECOND_NEW", "Second new row."),
    );
    let held = hold();
    let (a, b) = tokio::join!(
        s.put_yaml("FIRST_NEW", &first),
        s.put_yaml("SECOND_NEW", &second),
    );
    held.join().unwrap();
    assert_eq!((a.0, b.0), (201, 201), "{a:?} {b:?}");
    let held = hold();
    let (c, d) = tokio::join!(
        s.patch("GOOD_ECHO", json!({"seq": 7}), OWNER),
        s.patch("GOOD_ECHO", json!({"planner_rank": 42}), OWNER),
    );
    held.join().unwrap();
    assert_eq!((c.0, d.0), (201, 201), "{c:?} {d:?}");
    for (x, y) in [(&a.1, &b.1), (&c.1, &d.1)] {
        let (x, y) = (s.receipt(x).await, s.receipt(y).await);
        let (x_start, x_end) = (x["started_at"].as_str(), x["finished_at"].as_str());
        let (y_start, y_end) = (y["started_at"].as_str(), y["finished_at"].as_str());
        assert!(
            x_start.is_some() && y_start.is_some() && x_start < y_end && y_start < x_end,
            "the two writes did not overlap: {x} {y}"
        );
    }
    // Four commits in a line, none lost.
    let log = s.git(&["log", "--format=%H", &format!("{before}..HEAD")]);
    let commits: Vec<&str> = log.lines().collect();
    assert_eq!(commits.len(), 4, "{log}");
    for v in [&a.1, &b.1, &c.1, &d.1] {
        assert!(
            commits.contains(&v["commit"].as_str().expect("commit")),
            "{v}"
        );
    }
    let echo = s.git(&["show", "HEAD:catalogue/GOOD_ECHO.yaml"]);
    assert!(
        echo.contains("seq: 7") && echo.contains("planner_rank: 42"),
        "{echo}"
    );
    for key in ["FIRST_NEW", "SECOND_NEW"] {
        assert_eq!(s.contract(key).await.0, 200, "{key}");
    }
    assert_eq!(s.git(&["status", "--porcelain"]), "");
}

#[tokio::test]
async fn a_write_that_fails_halfway_changes_nothing() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let before = s.state();
    // Another git holds the branch's lock: the write gets as far as the commit's objects,
    // the file written beside the row's and the index's lock, then cannot move the branch.
    let lock = s.repo.path().join(".git/refs/heads/main.lock");
    std::fs::write(&lock, "").expect("lock");
    let (status, v) = s
        .put_yaml("HALF_WAY", &new_row("HALF_WAY", "Half way."))
        .await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "write_conflict");
    assert_eq!(
        s.state(),
        before,
        "HEAD, the index or the work tree changed"
    );
    assert!(s.file("HALF_WAY.yaml").is_none());
    assert_eq!(s.contract("HALF_WAY").await.0, 404);
    // The index held by another git: the same.
    std::fs::remove_file(&lock).expect("unlock");
    let index_lock = s.repo.path().join(".git/index.lock");
    std::fs::write(&index_lock, "").expect("lock");
    let (status, v) = s.patch("GOOD_ECHO", json!({"seq": 9}), OWNER).await;
    assert_eq!(status, 409, "{v}");
    std::fs::remove_file(&index_lock).expect("unlock");
    assert_eq!(s.state(), before);
    let (_, contract) = s.contract("GOOD_ECHO").await;
    assert_eq!(contract["history"].as_array().map(Vec::len), Some(1));
    // Once the locks are gone, the same writes go through.
    assert_eq!(
        s.put_yaml("HALF_WAY", &new_row("HALF_WAY", "Half way."))
            .await
            .0,
        201
    );
    assert_eq!(s.patch("GOOD_ECHO", json!({"seq": 9}), OWNER).await.0, 201);
}

#[tokio::test]
async fn a_row_with_uncommitted_changes_is_refused() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let edited = fixture("good/GOOD_ECHO.yaml").replace("Returns", "Gives back");
    s.repo.write("GOOD_ECHO.yaml", &edited);
    let before = s.state();
    let (status, v) = s.patch("GOOD_ECHO", json!({"seq": 2}), OWNER).await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "dirty_row");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("catalogue/GOOD_ECHO.yaml")),
        "{v}"
    );
    assert_eq!(s.state(), before);
    assert_eq!(s.file("GOOD_ECHO.yaml").as_deref(), Some(edited.as_str()));
    // Staged changes count too, and so does a file not yet committed for a new key.
    s.git(&["add", "catalogue/GOOD_ECHO.yaml"]);
    assert_eq!(s.patch("GOOD_ECHO", json!({"seq": 2}), OWNER).await.0, 409);
    s.repo.write(
        "UNTRACKED_ROW.yaml",
        &new_row("UNTRACKED_ROW", "Untracked."),
    );
    let (status, _) = s
        .put_yaml("UNTRACKED_ROW", &new_row("UNTRACKED_ROW", "Untracked."))
        .await;
    assert_eq!(status, 409);
    // Other rows are not held up by one dirty file.
    assert_eq!(s.patch("OTHER_ROW", json!({"seq": 2}), OWNER).await.0, 201);
}

#[tokio::test]
async fn propose_pushes_a_branch_and_changes_nothing_live() {
    let origin = tempfile::tempdir().expect("tempdir");
    let origin_path = origin.path().join("origin.git");
    let s = Served::start(Mode::Propose, |repo| {
        git(
            origin.path(),
            &["init", "-q", "--bare", "-b", "main", "origin.git"],
        );
        repo.git(
            &[
                "remote",
                "add",
                "origin",
                origin_path.to_str().expect("path"),
            ],
            None,
        );
        repo.git(&["push", "-q", "origin", "main"], None);
    })
    .await;
    let before = s.state();
    let origin_main = git(&origin_path, &["rev-parse", "main"]);
    let (status, v) = s
        .put_yaml("PROPOSED_ROW", &new_row("PROPOSED_ROW", "A proposed row."))
        .await;
    assert_eq!(status, 202, "{v}");
    let branch = v["branch"].as_str().expect("branch");
    assert!(branch.starts_with("capdir/PROPOSED_ROW-"), "{branch}");
    assert_eq!(v["pushed"], true);
    // On origin: the branch, with the commit on top of main; main itself untouched.
    assert_eq!(
        git(&origin_path, &["rev-parse", branch]),
        v["commit"].as_str().unwrap()
    );
    assert_eq!(
        git(&origin_path, &["rev-parse", &format!("{branch}~1")]),
        origin_main
    );
    assert_eq!(git(&origin_path, &["rev-parse", "main"]), origin_main);
    assert_eq!(
        git(
            &origin_path,
            &["show", "--name-status", "--format=", branch]
        ),
        "A\tcatalogue/PROPOSED_ROW.yaml"
    );
    // Here: HEAD, the index and the work tree as they were, and nothing live.
    assert_eq!(s.state(), before);
    assert_eq!(s.contract("PROPOSED_ROW").await.0, 404);
    // A gate refusal proposes nothing.
    let (status, _) = s
        .patch("GOOD_ECHO", json!({"category": "Bad Cat"}), OWNER)
        .await;
    assert_eq!(status, 422);
    let branches = git(&origin_path, &["branch", "--list", "capdir/*"]);
    assert_eq!(branches.lines().count(), 1, "{branches}");
}

#[tokio::test]
async fn writes_are_off_unless_asked_for() {
    let repo = Repo::new();
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.commit("First", "2024-01-01T10:00:00Z");
    let dir = tempfile::tempdir().expect("tempdir");
    capdir::build::run(&Options::new(repo.catalogue(), dir.path().join("site"))).expect("build");
    let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
    let settings = Settings {
        owner_key: Some(OWNER.into()),
        ..Settings::new(dir.path().join("site"), Arc::new(ledger))
    };
    let addr = common::serve(app(AppState::new(settings).expect("state"))).await;
    let res = crate::common::client()
        .put(format!("http://{addr}/api/directory/GOOD_ECHO"))
        .header("x-owner-key", OWNER)
        .body(fixture("good/GOOD_ECHO.yaml"))
        .send()
        .await
        .expect("response");
    assert_eq!(res.status().as_u16(), 403);
    let v: Json = res.json().await.expect("json");
    assert_eq!(v["error"]["code"], "writes_off");
}

/// A token of one category cannot make its row the answer to another category's asks: the
/// write that would push GOOD_ECHO (category text) down for its own ask is refused with the
/// row it displaces named, and nothing is committed; a writer of every row it displaces, or the
/// owner, may.
#[tokio::test]
async fn a_write_cannot_take_another_categorys_asks() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let before = s.state();
    let takeover = "key: TAKEOVER\ntype: fn\ntarget: echo\ncategory: misc\nplanner_rank: 0\ncontent: |\n  # WHAT: Repeat my text back: returns its arguments unchanged.\n  # WHEN_TO_USE: To repeat my text back, to test a call end to end.\n  # ARGS: $1=text\n  # EX: hello\n  # OUTPUT: the text\n  [\"$1\"]\nasks:\n  - repeat my text back\n";
    let misc_writer = token(&["misc"], &[]);
    let (status, v) = s
        .send(
            "PUT",
            "/api/directory/TAKEOVER",
            Some(&misc_writer),
            "application/yaml",
            takeover.into(),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    let taken: Vec<&Json> = v["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter(|d| d["code"] == "takes_asks")
        .collect();
    assert!(
        taken
            .iter()
            .any(|d| d["message"].as_str().unwrap().contains("`GOOD_ECHO`")),
        "{v}"
    );
    assert_eq!(s.state(), before, "nothing committed");
    assert_eq!(s.file("TAKEOVER.yaml"), None);
    // A token that may write the displaced rows too may make the change (GOOD_FLOW's ask,
    // "echo my text with the time", is close to TAKEOVER's words as well).
    let both = token(&["misc", "text", "flows"], &[]);
    let (status, v) = s
        .send(
            "PUT",
            "/api/directory/TAKEOVER",
            Some(&both),
            "application/yaml",
            takeover.into(),
        )
        .await;
    assert_eq!(status, 201, "{v}");
}

/// The write API as an operator starts it and a contributor's script uses it: `capdir serve
/// --catalogue DIR --write direct` from the command line, a write token minted with `capdir
/// token mint --write`, a row created with it (a commit, served at once), and a row outside
/// its scope refused with nothing committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_serves_writes_for_a_minted_token() {
    let repo = Repo::new();
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.write(
        "OTHER_ROW.yaml",
        &fn_row("OTHER_ROW", "misc", "Other words."),
    );
    repo.commit("First rows", "2024-01-01T10:00:00Z");
    let dir = tempfile::tempdir().expect("tempdir");
    let catalogue = repo.catalogue().display().to_string();
    let env = [("CAPDIR_OWNER_KEY", OWNER), ("CAPDIR_TOKEN_KEY", TOKEN_KEY)];
    let served = common::Served::start(
        dir.path(),
        &["--catalogue", &catalogue, "--write", "direct"],
        &env,
    )
    .await;
    let before = git(repo.path(), &["rev-parse", "HEAD"]);
    let mint = Command::new(env!("CARGO_BIN_EXE_capdir"))
        .args(["token", "mint", "--write", "CLI_ROW", "--audience"])
        .arg(served.url(""))
        .arg("--site")
        .arg(dir.path().join("site"))
        .arg("--ledger")
        .arg(format!(
            "sqlite:{}",
            dir.path().join("ledger.sqlite").display()
        ))
        .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
        .output()
        .expect("capdir token mint");
    let out = String::from_utf8_lossy(&mint.stdout);
    assert!(
        mint.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&mint.stderr)
    );
    let token = out.lines().last().expect("the token").to_string();
    let client = crate::common::client();
    let put = |key: &'static str| {
        client
            .put(served.url(&format!("/api/directory/{key}")))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/yaml")
            .body(new_row(key, "From the command line."))
            .send()
    };
    let res = put("CLI_ROW").await.expect("put");
    let status = res.status();
    let v: Json = res.json().await.expect("json");
    assert_eq!(status, 201, "{v}");
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    assert_eq!(v["commit"], head.as_str(), "{v}");
    assert_eq!(
        git(repo.path(), &["show", "--name-status", "--format=", "HEAD"]),
        "A\tcatalogue/CLI_ROW.yaml"
    );
    let contract = client
        .get(served.url("/api/dispatch?key=CLI_ROW&format=json"))
        .send()
        .await
        .expect("contract");
    assert_eq!(contract.status(), 200, "the new row is served at once");
    // Outside the token's write scope: refused, nothing committed.
    let res = put("NOT_MINE").await.expect("put");
    assert_eq!(
        res.status(),
        403,
        "{}",
        res.text().await.unwrap_or_default()
    );
    assert_eq!(git(repo.path(), &["rev-parse", "HEAD"]), head);
    assert_ne!(head, before);
    drop(served);
}

/// An agent fixing a row reads it as stored (YAML or JSON, the commit, the ETag) and sends
/// its change with `If-Match`: a second agent that read the same version is refused with
/// 412 and the current ETag, and nothing of its change is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_read_as_stored_is_written_back_with_if_match() {
    let s = Served::start(Mode::Direct, |_| {}).await;
    let read = |format: &'static str| {
        let s = &s;
        async move {
            let res = s
                .client
                .get(format!("{}/api/directory/GOOD_ECHO?format={format}", s.url))
                .send()
                .await
                .expect("response");
            let status = res.status().as_u16();
            let etag = res
                .headers()
                .get("etag")
                .map(|v| v.to_str().unwrap().to_string());
            let commit = res
                .headers()
                .get("x-capdir-commit")
                .map(|v| v.to_str().unwrap().to_string());
            (status, etag, commit, res.text().await.expect("body"))
        }
    };
    let (st, etag, commit, yaml) = read("yaml").await;
    assert_eq!(st, 200, "{yaml}");
    assert_eq!(
        yaml,
        s.file("GOOD_ECHO.yaml").expect("file"),
        "the file as stored"
    );
    let etag = etag.expect("an ETag");
    assert_eq!(commit.as_deref(), Some(s.head().as_str()));
    let (st, etag_json, _, json_text) = read("json").await;
    assert_eq!(st, 200);
    assert_eq!(etag_json.as_deref(), Some(etag.as_str()));
    let doc: Json = serde_json::from_str(&json_text).expect("json");
    assert_eq!(doc["row"]["key"], "GOOD_ECHO");
    assert_eq!(doc["etag"], etag.as_str());
    assert_eq!(doc["commit"], s.head().as_str());

    // Two agents read the same version; the first write lands, the second is refused.
    let send = |if_match: String, what: &'static str| {
        let s = &s;
        async move {
            let res = s
                .client
                .patch(format!("{}/api/directory/GOOD_ECHO", s.url))
                .header("authorization", format!("Bearer {OWNER}"))
                .header("content-type", "application/json")
                .header("if-match", if_match)
                .body(json!({"category": what}).to_string())
                .send()
                .await
                .expect("response");
            let status = res.status().as_u16();
            (status, res.json::<Json>().await.expect("json"))
        }
    };
    let (st, v) = send(etag.clone(), "first").await;
    assert_eq!(st, 201, "{v}");
    let before = s.state();
    let (st, v) = send(etag.clone(), "second").await;
    assert_eq!(st, 412, "{v}");
    assert_eq!(v["error"]["code"], "precondition_failed", "{v}");
    let (_, now_etag, _, _) = read("yaml").await;
    assert_eq!(v["etag"].as_str(), now_etag.as_deref(), "{v}");
    assert_eq!(s.state(), before, "the refused write changed nothing");
    assert!(
        s.file("GOOD_ECHO.yaml")
            .unwrap()
            .contains("category: first")
    );
    // With the current ETag it lands; `*` matches any version that exists.
    let (st, v) = send(now_etag.clone().unwrap(), "second").await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = send("*".into(), "third").await;
    assert_eq!(st, 201, "{v}");

    // Unknown keys, bad keys and the field list.
    let (st, _, _, text) = {
        let res = s
            .client
            .get(format!("{}/api/directory/NO_SUCH_ROW", s.url))
            .send()
            .await
            .expect("response");
        (res.status().as_u16(), (), (), res.text().await.unwrap())
    };
    assert_eq!(st, 404, "{text}");
    let (st, text) = s.get("/api/directory").await;
    assert_eq!(st, 200, "{text}");
    let list: Json = serde_json::from_str(&text).expect("json");
    let content = list["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .find(|f| f["name"] == "content")
        .expect("content");
    assert_eq!(content["required"], true);
    assert_eq!(content["writable"], true);
    assert!(list["schema"]["properties"].is_object());
}

/// Where an `oauth:` row sends its client secret is its API and its token endpoint: a token's
/// write that moves the endpoint (even to another origin the variables are bound to) or
/// widens the scope decides where a secret goes, and is refused without the credential named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cannot_move_an_oauth_rows_token_endpoint_without_the_credential() {
    let oauth = |endpoint: &str, scope: &str| {
        format!(
            "key: SHOP_ORDERS\ntype: http\ntarget: GET https://api.shop.example/orders\ncategory: shop\nauth: 'oauth:{{\"token_url\": \"{endpoint}\", \"client_id\": \"$SHOP_ID\", \"client_secret\": \"$SHOP_SECRET\", \"scope\": \"{scope}\"}}'\ncontent: |\n  # WHAT: List the shop's orders.\n  # WHEN_TO_USE: Tests.\n  # ARGS: none\n  # EX: none\n  # OUTPUT: JSON\n"
        )
    };
    let s = Served::start(Mode::Direct, |repo| {
        let origins = "[\"https://api.shop.example\", \"https://auth.shop.example\", \"https://other.shop.example\"]";
        repo.write(
            "bindings.yaml",
            &format!("credentials:\n  SHOP_ID:\n    origins: {origins}\n  SHOP_SECRET:\n    origins: {origins}\n"),
        );
        repo.write(
            "SHOP_ORDERS.yaml",
            &oauth("https://auth.shop.example/token", "read"),
        );
        repo.commit("An oauth row", "2024-01-02T10:00:00Z");
    })
    .await;
    let writer = token(&["SHOP_ORDERS"], &[]);
    let put = |yaml: String| {
        let s = &s;
        let writer = writer.clone();
        async move {
            s.send(
                "PUT",
                "/api/directory/SHOP_ORDERS",
                Some(&writer),
                "application/yaml",
                yaml,
            )
            .await
        }
    };
    for (what, yaml) in [
        (
            "another endpoint",
            oauth("https://other.shop.example/token", "read"),
        ),
        (
            "a wider scope",
            oauth("https://auth.shop.example/token", "read write"),
        ),
    ] {
        let (st, v) = put(yaml).await;
        assert_eq!(st, 403, "{what}: {v}");
        assert_eq!(v["error"]["code"], "scope", "{what}: {v}");
    }
    // What does not change where the secret goes is the token's to write.
    let (st, v) = put(oauth("https://auth.shop.example/token", "read")
        .replace("List the shop's orders.", "List every order of the shop."))
    .await;
    assert_eq!(st, 201, "{v}");
}
