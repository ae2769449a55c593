//! The README's first command, run as a newcomer runs it: `capdir serve` in a copy of the
//! project with no `site/` and no `data/`, the owner key from the environment. It must build
//! the bundled catalogue, answer an ask, run a row with a receipt, and leave a ledger in WAL
//! mode with full fsync. The binary is the release build the tests use, or the one
//! `CAPDIR_FIRST_BIN` names: `.ci/run first` names the debug build the README's first
//! command (`cargo run -- serve`) makes, so that build is held to the same checks.

use serde_json::{Value as Json, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OWNER: &str = "change-me";

/// Copy the bundled catalogue into `dir/catalogue`, as a clone of the project has it.
fn copy_catalogue(dir: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    std::fs::create_dir(dir.join("catalogue")).expect("mkdir");
    for f in std::fs::read_dir(from).expect("catalogue") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, dir.join("catalogue").join(f.file_name().expect("name"))).expect("copy");
    }
}

#[tokio::test]
async fn the_first_command_on_a_fresh_copy() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();
    copy_catalogue(dir);
    assert!(!dir.join("site").exists() && !dir.join("data").exists());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let log = std::fs::File::create(dir.join("serve.log")).expect("log");
    // `CAPDIR_OWNER_KEY=change-me capdir serve`, on a free port instead of 8080.
    let bin = std::env::var_os("CAPDIR_FIRST_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_capdir").into());
    let mut server = Command::new(&bin)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .current_dir(dir)
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env_remove("CAPDIR_LEDGER")
        .env_remove("CAPDIR_DATA")
        .env_remove("CAPDIR_TOKEN_KEY")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("capdir serve");
    let client = crate::common::client();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let asked: Json = loop {
        if let Ok(r) = client
            .get(format!("{base}/api/dispatch?ask=what+time+is+it"))
            .send()
            .await
            && r.status() == 200
        {
            break r.json().await.expect("json");
        }
        if let Ok(Some(status)) = server.try_wait() {
            panic!(
                "capdir serve exited ({status}): {}",
                std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "capdir serve did not answer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        dir.join("site/catalogue.sqlite").exists(),
        "the site was built"
    );
    assert_eq!(asked["best"]["key"], "NOW", "{asked}");

    let invoked = client
        .post(format!("{base}/api/dispatch"))
        .header("x-owner-key", OWNER)
        .json(&json!({"key": "SHA256", "body": "hello"}))
        .send()
        .await
        .expect("invoke");
    assert_eq!(invoked.status(), 200);
    let invoked: Json = invoked.json().await.expect("json");
    assert_eq!(
        invoked["output"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    let receipt = invoked["receipt"].as_str().expect("a receipt");
    let (status, confirmed) = {
        let r = client
            .get(format!("{base}/api/dispatch?confirm={receipt}"))
            .send()
            .await
            .expect("confirm");
        (r.status(), r.json::<Json>().await.expect("json"))
    };
    assert_eq!(status, 200);
    assert_eq!(confirmed["key"], "SHA256");
    // `synchronous` belongs to each connection (a fresh one always says FULL), so the
    // dispatcher says what its own writer connection runs: read back from that connection.
    let metrics = client
        .get(format!("{base}/metrics"))
        .header("x-owner-key", OWNER)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("capdir_ledger_durability_info{setting=\"synchronous=full\"} 1"),
        "{metrics}"
    );
    let _ = server.kill();
    let _ = server.wait();

    // The ledger it made, read back: a write-ahead log (kept in the file, unlike
    // `synchronous`).
    let ledger = rusqlite::Connection::open(dir.join("data/ledger.sqlite")).expect("ledger");
    let mode: String = ledger
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    let receipts: i64 = ledger
        .query_row("SELECT count(*) FROM receipts", [], |r| r.get(0))
        .expect("receipts");
    assert_eq!(receipts, 1);
}
