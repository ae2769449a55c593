//! One ledger suite, two backends: every test function here runs against SQLite and against
//! PostgreSQL (`on_both_backends!` makes a `sqlite` and a `postgres` test of each). PostgreSQL
//! comes from `CAPDIR_TEST_POSTGRES` (see tests/common); each test gets its own database.

use crate::common;

use capdir::access::token::{Claims, Risk};
use capdir::invoke::breaker::Breaker;
use capdir::ledger::{self, Draft, GENESIS, Ledger, Location, Verdict};
use chrono::Utc;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

const BIN: &str = env!("CARGO_BIN_EXE_capdir");

enum Backend {
    Sqlite(tempfile::TempDir),
    Postgres(common::PgDatabase, tempfile::TempDir),
}

impl Backend {
    fn sqlite() -> Backend {
        Backend::Sqlite(tempfile::tempdir().expect("tempdir"))
    }

    async fn postgres() -> Option<Backend> {
        let db = common::pg_database().await?;
        Some(Backend::Postgres(db, tempfile::tempdir().expect("tempdir")))
    }

    fn url(&self) -> String {
        match self {
            Backend::Sqlite(dir) => {
                format!("sqlite:{}", dir.path().join("ledger.sqlite").display())
            }
            Backend::Postgres(db, _) => db.url.clone(),
        }
    }

    fn location(&self) -> Location {
        Location::parse(&self.url()).expect("location")
    }

    /// The data directory (breaker state for SQLite; unused by PostgreSQL).
    fn data(&self) -> PathBuf {
        match self {
            Backend::Sqlite(dir) | Backend::Postgres(_, dir) => dir.path().join("data"),
        }
    }

    async fn open(&self) -> Arc<dyn Ledger> {
        self.location().open().await.expect("open the ledger")
    }

    fn breaker(&self) -> Breaker {
        self.location().breaker(&self.data())
    }

    /// Run SQL on the ledger database behind the ledger's back, as an attacker would.
    async fn tamper(&self, sql: &str) {
        match self {
            Backend::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("ledger.sqlite"))
                .expect("db")
                .execute_batch(sql)
                .expect("tamper"),
            Backend::Postgres(db, _) => db.client().await.batch_execute(sql).await.expect("tamper"),
        }
    }

    /// A location of the same kind where nothing was ever created.
    fn missing(&self) -> Location {
        match self {
            Backend::Sqlite(dir) => Location::Sqlite(dir.path().join("nothing-here/ledger.sqlite")),
            Backend::Postgres(db, _) => {
                Location::parse(&common::with_database(&db.url, "capdir_no_such_database"))
                    .expect("location")
            }
        }
    }
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Backend::sqlite()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(backend) = super::Backend::postgres().await {
                    super::$name(backend).await;
                }
            }
        }
    )*};
}

on_both_backends!(
    appends_chain_and_read_back,
    an_edited_receipt_breaks_the_chain,
    a_deleted_receipt_breaks_the_chain,
    a_relinked_receipt_breaks_the_chain,
    the_chain_continues_after_reopening,
    two_writers_keep_one_chain_with_group_commit,
    a_missing_ledger_is_an_error,
    breaker_counts_every_rejection_across_stores,
    records_and_revokes_tokens,
    a_revocation_reaches_every_dispatcher,
    cli_verifies_shows_and_resets,
    a_tree_reads_back_below_its_root,
    a_group_keeps_its_order_and_stays_whole,
    receipts_commit_durably,
    a_tree_kept_the_old_way_is_made_again,
    a_one_receipt_tree_kept_the_old_way_is_made_again,
);

fn draft(key: &str) -> Draft {
    Draft {
        id: ledger::new_id(),
        key: key.into(),
        actor: "owner".into(),
        runner: "fn".into(),
        trace_id: "t".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: "2026-01-01T00:00:00Z".into(),
        status: "PROVEN_MATERIAL_RESULT".into(),
        error_code: None,
        cost_usd: Some(0.25),
        input_sha256: ledger::sha256_hex("a"),
        output_sha256: ledger::sha256_hex("b"),
        contract_sha256: ledger::sha256_hex("c"),
        catalogue_commit: "abc".into(),
        repairs: None,
        parent: None,
        root: None,
        input: "a \"quoted\" input\nwith ünïcode".into(),
        output: "b".into(),
    }
}

/// Append `n` receipts one after another, keys K0…
async fn append_n(ledger: &dyn Ledger, n: usize) -> Vec<ledger::Receipt> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(
            ledger
                .append(draft(&format!("K{i}")))
                .await
                .expect("append"),
        );
    }
    out
}

/// The writer's own connection commits with a full sync (SQLite's `synchronous=FULL`,
/// PostgreSQL's `synchronous_commit=on`), as read back from that connection.
async fn receipts_commit_durably(b: Backend) {
    let ledger = b.open().await;
    append_n(ledger.as_ref(), 1).await;
    let wanted = match b {
        Backend::Sqlite(_) => "synchronous=full",
        Backend::Postgres(..) => "synchronous_commit=on",
    };
    assert_eq!(ledger.durability().as_deref(), Some(wanted));
}

async fn appends_chain_and_read_back(b: Backend) {
    let ledger = b.open().await;
    let receipts = append_n(ledger.as_ref(), 5).await;
    assert_eq!(
        receipts.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(receipts[0].prev_hash, GENESIS);
    for pair in receipts.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
        assert_ne!(pair[1].hash, pair[0].hash);
    }
    let got = ledger
        .get(&receipts[2].draft.id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(got, receipts[2], "a receipt reads back as it was appended");
    assert_eq!(ledger.get("inv_missing").await.expect("get"), None);
    assert_eq!(
        ledger.verify().await.expect("verify"),
        Verdict::Intact { receipts: 5 }
    );
    // The command line's path: no writer, the same answers.
    let loc = b.location();
    assert_eq!(
        loc.verify().await.expect("verify"),
        Verdict::Intact { receipts: 5 }
    );
    assert_eq!(
        loc.get(&receipts[4].draft.id).await.expect("get"),
        Some(receipts[4].clone())
    );
    let (commits, seconds) = ledger.commit_stats();
    assert_eq!(commits, 5, "one commit per sequential append");
    assert!(seconds > 0.0);
}

async fn an_edited_receipt_breaks_the_chain(b: Backend) {
    let ledger = b.open().await;
    append_n(ledger.as_ref(), 5).await;
    b.tamper("UPDATE receipts SET body = replace(body, '\"K3\"', '\"K9\"') WHERE seq = 4")
        .await;
    match ledger.verify().await.expect("verify") {
        Verdict::Broken { seq, why, .. } => {
            assert_eq!(seq, 4);
            assert!(why.contains("edited"), "{why}");
        }
        v => panic!("an edit went unnoticed: {v:?}"),
    }
}

async fn a_deleted_receipt_breaks_the_chain(b: Backend) {
    let ledger = b.open().await;
    append_n(ledger.as_ref(), 5).await;
    b.tamper("DELETE FROM receipts WHERE seq = 4").await;
    match b.location().verify().await.expect("verify") {
        Verdict::Broken { seq, why, .. } => {
            assert_eq!(seq, 5);
            assert!(why.contains("missing"), "{why}");
        }
        v => panic!("a deletion went unnoticed: {v:?}"),
    }
}

async fn a_relinked_receipt_breaks_the_chain(b: Backend) {
    let ledger = b.open().await;
    append_n(ledger.as_ref(), 5).await;
    b.tamper(&format!(
        "UPDATE receipts SET prev_hash = '{}' WHERE seq = 3",
        "f".repeat(64)
    ))
    .await;
    match ledger.verify().await.expect("verify") {
        Verdict::Broken { seq, why, .. } => {
            assert_eq!(seq, 3);
            assert!(why.contains("prev_hash"), "{why}");
        }
        v => panic!("a relinked receipt went unnoticed: {v:?}"),
    }
}

/// A ledger whose tree was kept in tables of its own (the layout before receipts' rows kept
/// it) is brought up to date when a writer opens it: the old tables go, the tree is made again
/// from the receipts, and it is the same tree (same roots), so checkpoints signed before hold.
async fn a_tree_kept_the_old_way_is_made_again(b: Backend) {
    made_again(b, 37).await;
}

/// The same with one receipt, whose right edge is its own leaf: the tree is still made when
/// the writer opens, not left without nodes below rows that have them.
async fn a_one_receipt_tree_kept_the_old_way_is_made_again(b: Backend) {
    made_again(b, 1).await;
}

async fn made_again(b: Backend, n: usize) {
    let ledger = b.open().await;
    let before = append_n(ledger.as_ref(), n).await;
    let at = n as u64;
    let root = ledger::tlog::root(ledger.as_ref(), at).await.expect("root");
    let proof = ledger::tlog::inclusion(ledger.as_ref(), at / 2, at)
        .await
        .expect("proof");
    drop(ledger);
    let old_layout = "DROP INDEX receipts_untreed;
         ALTER TABLE receipts DROP COLUMN nodes;
         CREATE TABLE merkle (level INTEGER NOT NULL, idx BIGINT NOT NULL, hash BYTEA NOT NULL,
                              PRIMARY KEY (level, idx));
         INSERT INTO merkle VALUES (1, 0, zeroblob(32));
         CREATE TABLE merkle_edge (id BOOLEAN PRIMARY KEY, size BIGINT NOT NULL, edge BYTEA);";
    match &b {
        Backend::Sqlite(_) => b.tamper(&old_layout.replace("BYTEA", "BLOB")).await,
        // The migration that moved PostgreSQL's tree into the receipts' rows is taken back, to
        // run again.
        Backend::Postgres(..) => {
            b.tamper(&format!(
                "{}; DELETE FROM capdir_migrations WHERE version = 6",
                old_layout.replace("zeroblob(32)", "'\\x00'::bytea")
            ))
            .await
        }
    }
    let ledger = b.open().await;
    // Made when the writer opened, before anything is appended.
    assert_eq!(ledger.tree_size().await.expect("size"), at);
    assert_eq!(
        ledger::tlog::root(ledger.as_ref(), at).await.expect("root"),
        root
    );
    let more = append_n(ledger.as_ref(), 3).await;
    assert_eq!(more[0].prev_hash, before[n - 1].hash);
    assert_eq!(
        ledger.verify().await.expect("verify"),
        Verdict::Intact { receipts: at + 3 }
    );
    assert_eq!(ledger.tree_size().await.expect("size"), at + 3);
    assert_eq!(
        ledger::tlog::inclusion(ledger.as_ref(), at / 2, at)
            .await
            .expect("proof"),
        proof
    );
}

async fn the_chain_continues_after_reopening(b: Backend) {
    let first = append_n(b.open().await.as_ref(), 3).await;
    let ledger = b.open().await;
    let more = append_n(ledger.as_ref(), 2).await;
    assert_eq!((more[0].seq, more[1].seq), (4, 5));
    assert_eq!(more[0].prev_hash, first[2].hash);
    assert_eq!(
        ledger.verify().await.expect("verify"),
        Verdict::Intact { receipts: 5 }
    );
}

/// Two writers on one database, as two dispatchers are: many appends at once through both
/// must make one gapless chain, and each writer must batch what queued up meanwhile.
async fn two_writers_keep_one_chain_with_group_commit(b: Backend) {
    // Both open at once: the schema is created (or migrated) once, whoever comes first.
    let loc = b.location();
    let (one, two) = tokio::join!(loc.open(), loc.open());
    let writers = [one.expect("open one"), two.expect("open two")];
    const EACH: usize = 150;
    let mut tasks = Vec::new();
    for (w, ledger) in writers.iter().enumerate() {
        for i in 0..EACH {
            let ledger = ledger.clone();
            tasks.push(tokio::spawn(async move {
                ledger.append(draft(&format!("W{w}_{i}"))).await
            }));
        }
    }
    let mut receipts = Vec::new();
    for t in tasks {
        receipts.push(t.await.expect("task").expect("append"));
    }
    let mut seqs: Vec<i64> = receipts.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=(2 * EACH) as i64).collect::<Vec<_>>(),
        "every append got its own place, with no gap"
    );
    assert_eq!(
        writers[0].verify().await.expect("verify"),
        Verdict::Intact {
            receipts: 2 * EACH as u64
        }
    );
    for r in receipts.iter().step_by(37) {
        assert_eq!(
            writers[1].get(&r.draft.id).await.expect("get"),
            Some(r.clone())
        );
    }
    let commits: u64 = writers.iter().map(|w| w.commit_stats().0).sum();
    assert!(
        commits < (2 * EACH) as u64,
        "{commits} commits for {} concurrent receipts: no group commit",
        2 * EACH
    );
}

/// `append_all` (a call's tree) puts its receipts one after another in the chain, in the order
/// given, even with other writers appending at once; every one is durable and read back.
async fn a_group_keeps_its_order_and_stays_whole(b: Backend) {
    let ledger = b.open().await;
    const GROUPS: usize = 40;
    let mut tasks = Vec::new();
    for g in 0..GROUPS {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let size = 1 + g % 5;
            let drafts: Vec<Draft> = (0..size).map(|i| draft(&format!("G{g}_{i}"))).collect();
            let (group, single) = tokio::join!(
                ledger.append_all(drafts.clone()),
                ledger.append(draft(&format!("S{g}")))
            );
            single.expect("append");
            (drafts, group.expect("append_all"))
        }));
    }
    for t in tasks {
        let (drafts, receipts) = t.await.expect("task");
        assert_eq!(receipts.len(), drafts.len(), "one receipt per draft");
        for (i, (d, r)) in drafts.iter().zip(&receipts).enumerate() {
            assert_eq!(&r.draft, d, "the receipts come back in the order given");
            assert_eq!(r.seq, receipts[0].seq + i as i64, "the group is not split");
            assert_eq!(ledger.get(&d.id).await.expect("get"), Some(r.clone()));
        }
    }
    assert!(
        ledger
            .append_all(Vec::new())
            .await
            .expect("empty")
            .is_empty()
    );
    let total = (0..GROUPS).map(|g| 2 + g % 5).sum::<usize>() as u64;
    assert_eq!(
        ledger.verify().await.expect("verify"),
        Verdict::Intact { receipts: total }
    );
}

async fn a_missing_ledger_is_an_error(b: Backend) {
    let e = b
        .missing()
        .verify()
        .await
        .expect_err("verifying a ledger that is not there");
    let text = format!("{e:#}");
    assert!(
        text.contains("no ledger at") || text.contains("capdir_no_such_database"),
        "{text}"
    );
    assert!(!text.contains(":capdir@"), "a password leaked: {text}");
}

/// Two stores on the same state, as two dispatchers have: concurrent rejections all count,
/// the breaker opens for both, and a reset through one closes it for the other.
async fn breaker_counts_every_rejection_across_stores(b: Backend) {
    let (one, two) = (b.breaker(), b.breaker());
    assert!(one.store().list().await.expect("list").is_empty());
    let until = Utc::now() + chrono::Duration::hours(1);
    let mut tasks = Vec::new();
    for breaker in [one.clone(), two.clone()] {
        for _ in 0..10 {
            let breaker = breaker.clone();
            tasks.push(tokio::spawn(async move {
                breaker
                    .store()
                    .record_rejection("SHARED_TOKEN", 8, until)
                    .await
            }));
        }
    }
    for t in tasks {
        t.await.expect("task").expect("record");
    }
    let state = two.store().get("SHARED_TOKEN").await.expect("get");
    assert_eq!(state.failures, 20, "no rejection was lost");
    assert_eq!(
        state.open_until.map(|t| t.timestamp()),
        Some(until.timestamp())
    );
    assert_eq!(
        one.admit("SHARED_TOKEN").await.expect_err("open").code,
        "breaker_open"
    );
    assert!(one.admit("OTHER_TOKEN").await.is_ok());
    assert!(two.reset("SHARED_TOKEN").await.expect("reset"));
    assert!(one.admit("SHARED_TOKEN").await.is_ok());
    assert!(one.store().list().await.expect("list").is_empty());
}

fn claims(id: &str) -> Claims {
    Claims {
        id: id.into(),
        iat: 1,
        exp: 2,
        aud: "http://x".into(),
        keys: vec!["K".into()],
        categories: vec![],
        write: vec![],
        risk: Risk::Low,
        pin: None,
        body: Some("fixed \"body\"".into()),
        max_payload: None,
        credentials: vec![],
        watch: Default::default(),
        parent: None,
    }
}

async fn records_and_revokes_tokens(b: Backend) {
    let ledger = b.open().await;
    let c = claims("tok_a");
    ledger.record_token(&c).await.expect("record");
    ledger.record_token(&c).await.expect("record twice");
    assert!(!ledger.is_revoked("tok_a").await.expect("ask"));
    assert!(ledger.revoke("tok_a").await.expect("revoke"));
    assert!(!ledger.revoke("tok_a").await.expect("revoke again"));
    assert!(ledger.is_revoked("tok_a").await.expect("ask"));
    assert!(
        ledger
            .revoke("tok_elsewhere")
            .await
            .expect("revoke unknown"),
        "a token minted against another ledger can be revoked by id"
    );
    assert!(!ledger.is_revoked("tok_never").await.expect("ask"));
    let all = ledger.tokens().await.expect("list");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].claims.as_ref(), Some(&c));
    assert!(all[0].revoked_at.is_some() && all[0].minted_at.is_some());
    assert_eq!(all[1].id, "tok_elsewhere");
    assert!(all[1].claims.is_none() && all[1].minted_at.is_none());
    // Receipts append beside the token record.
    ledger.append(draft("K")).await.expect("append");
}

/// A token revoked through one dispatcher is refused by another on the same ledger at once.
async fn a_revocation_reaches_every_dispatcher(b: Backend) {
    let loc = b.location();
    let (one, two) = tokio::join!(loc.open(), loc.open());
    let (one, two) = (one.expect("open"), two.expect("open"));
    one.record_token(&claims("tok_shared"))
        .await
        .expect("record");
    assert!(!two.is_revoked("tok_shared").await.expect("ask"));
    assert!(two.revoke("tok_shared").await.expect("revoke"));
    assert!(one.is_revoked("tok_shared").await.expect("ask"));
    assert!(!one.revoke("tok_shared").await.expect("revoke again"));
    assert_eq!(
        one.tokens().await.expect("list"),
        two.tokens().await.expect("list")
    );
}

fn capdir(args: &[&str], b: &Backend) -> (String, String, i32) {
    let out = Command::new(BIN)
        .args(args)
        .env("CAPDIR_DATA", b.data())
        .env("CAPDIR_LEDGER", b.url())
        .output()
        .expect("run capdir");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// `capdir ledger verify|show` and `capdir breaker list|reset` on the backend named by
/// `CAPDIR_LEDGER`, as an operator runs them.
async fn cli_verifies_shows_and_resets(b: Backend) {
    let ledger = b.open().await;
    let receipts = append_n(ledger.as_ref(), 3).await;
    let (out, err, code) = capdir(&["ledger", "verify"], &b);
    assert_eq!(
        (out.as_str(), code),
        ("ok: 3 receipts, every link holds\n", 0),
        "{err}"
    );
    let (out, _, code) = capdir(&["ledger", "show", &receipts[1].draft.id], &b);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (v["key"].as_str(), v["seq"].as_i64()),
        (Some("K1"), Some(2))
    );
    let (_, err, code) = capdir(&["ledger", "show", "inv_missing"], &b);
    assert_eq!(code, 1);
    assert!(err.contains("no receipt inv_missing"), "{err}");
    assert!(!err.contains(":capdir@"), "a password leaked: {err}");

    let breaker = b.breaker();
    for _ in 0..8 {
        let before = breaker.admit("CLI_TOKEN").await.expect("closed");
        breaker.record("CLI_TOKEN", 401, before).await;
    }
    let (out, _, _) = capdir(&["breaker", "list"], &b);
    assert!(out.starts_with("CLI_TOKEN\tOPEN until 20"), "{out}");
    let (out, _, code) = capdir(&["breaker", "reset", "CLI_TOKEN"], &b);
    assert_eq!((out.as_str(), code), ("breaker for CLI_TOKEN closed\n", 0));
    assert!(breaker.admit("CLI_TOKEN").await.is_ok());

    let (out, _, code) = capdir(&["token", "revoke", "tok_cli"], &b);
    assert_eq!(
        (out.as_str(), code),
        (
            "revoked tok_cli: every dispatcher on this ledger refuses it from now on\n",
            0
        )
    );
    assert!(ledger.is_revoked("tok_cli").await.expect("ask"));
    let (out, _, code) = capdir(&["token", "list"], &b);
    assert_eq!(code, 0);
    assert!(out.contains("tok_cli"), "{out}");

    b.tamper("UPDATE receipts SET body = replace(body, '\"K1\"', '\"KX\"') WHERE seq = 2")
        .await;
    let (out, _, code) = capdir(&["ledger", "verify"], &b);
    assert_eq!(code, 1);
    assert!(out.starts_with("broken at receipt 2 "), "{out}");
}

/// A flow's receipts: its steps name it as parent and root, a nested flow's steps name it as
/// parent; `tree` of the root gives them all in chain order, and `nest` builds the tree, in
/// the library and on the command line (`ledger show --tree`).
async fn a_tree_reads_back_below_its_root(b: Backend) {
    let ledger = b.open().await;
    let root = ledger::new_id();
    let inner = ledger::new_id();
    let child = |key: &str, parent: &str| Draft {
        parent: Some(parent.to_string()),
        root: Some(root.clone()),
        ..draft(key)
    };
    let unrelated = ledger.append(draft("OTHER")).await.expect("append");
    let a = ledger.append(child("STEP_A", &root)).await.expect("append");
    let deep = ledger.append(child("DEEP", &inner)).await.expect("append");
    let nested = ledger
        .append(Draft {
            id: inner.clone(),
            ..child("INNER_FLOW", &root)
        })
        .await
        .expect("append");
    let top = ledger
        .append(Draft {
            id: root.clone(),
            ..draft("FLOW")
        })
        .await
        .expect("append");
    let below = ledger.tree(&root).await.expect("tree");
    assert_eq!(below, [a.clone(), deep.clone(), nested.clone()]);
    assert!(
        ledger
            .tree(&unrelated.draft.id)
            .await
            .expect("tree")
            .is_empty()
    );
    let node = ledger::nest(top.clone(), &below);
    let keys: Vec<&str> = node
        .children
        .iter()
        .map(|c| c.receipt.draft.key.as_str())
        .collect();
    assert_eq!(keys, ["STEP_A", "INNER_FLOW"]);
    assert_eq!(node.children[1].children[0].receipt, deep);
    assert_eq!(b.location().tree(&root).await.expect("tree"), below);
    let (out, err, code) = capdir(&["ledger", "show", &inner, "--tree"], &b);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["key"], "INNER_FLOW");
    assert_eq!(v["children"][0]["key"], "DEEP");
    // A repair names the call it corrects; the corrected one finds it.
    let repair = ledger
        .append(Draft {
            repairs: Some(a.draft.id.clone()),
            ..draft("STEP_A")
        })
        .await
        .expect("append");
    let repaired_by = ledger.repaired_by(&a.draft.id).await.expect("repaired_by");
    assert_eq!(repaired_by, std::slice::from_ref(&repair.draft.id));
    assert!(
        ledger
            .repaired_by(&top.draft.id)
            .await
            .expect("repaired_by")
            .is_empty()
    );
    assert_eq!(
        ledger.verify().await.expect("verify"),
        Verdict::Intact { receipts: 6 }
    );
}

/// PostgreSQL only (SQLite has no migration table): dispatchers starting together apply each
/// migration once, and a database migrated by a newer capdir is refused, not guessed at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrations_run_once_and_refuse_a_newer_schema() {
    let Some(b) = Backend::postgres().await else {
        return;
    };
    let loc = b.location();
    let opened = futures_util::future::join_all((0..4).map(|_| loc.open())).await;
    for o in opened {
        o.expect("open while others open");
    }
    let Backend::Postgres(db, _) = &b else {
        unreachable!("a PostgreSQL backend")
    };
    let pg = db.client().await;
    let versions: Vec<i32> = pg
        .query(
            "SELECT version FROM capdir_migrations ORDER BY version",
            &[],
        )
        .await
        .expect("migrations")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!versions.is_empty());
    assert_eq!(
        versions,
        (1..=versions.len() as i32).collect::<Vec<_>>(),
        "each migration recorded once, in order"
    );
    pg.batch_execute(
        "INSERT INTO capdir_migrations (version, name) VALUES (999, 'from the future')",
    )
    .await
    .expect("insert");
    let e = match loc.open().await {
        Ok(_) => panic!("a newer schema was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        e.contains("schema version 999") && e.contains("upgrade"),
        "{e}"
    );
}
