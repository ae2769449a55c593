//! Receipts survive a crash: the real `capdir serve` is killed with SIGKILL while clients
//! invoke, then restarted on the same ledger. Every invocation a client saw acknowledged must
//! have exactly one receipt, and the chain must verify.

use crate::common;

use capdir::build::{self, Options};
use rusqlite::Connection;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OWNER: &str = "crash-test-owner";
const BIN: &str = env!("CARGO_BIN_EXE_capdir");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn start(dir: &Path, port: u16) -> Child {
    Command::new(BIN)
        .args(["serve", "--site"])
        .arg(dir.join("site"))
        .args(["--addr", &format!("127.0.0.1:{port}"), "--ledger"])
        .arg(format!("sqlite:{}", dir.join("ledger.sqlite").display()))
        .arg("--data")
        .arg(dir.join("data"))
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn capdir serve")
}

/// Build the bundled catalogue, start `capdir serve`, run 8 clients of `call` (each answers
/// the receipt id of an acknowledged call, or `None` to stop) until at least `wanted` calls
/// were acknowledged, then SIGKILL the server. Returns the directory, the port and the ids.
async fn load_then_kill<F, Fut>(wanted: usize, call: F) -> (tempfile::TempDir, u16, Vec<String>)
where
    F: Fn(reqwest::Client, u16, String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    build::run(&Options::new(catalogue, dir.path().join("site"))).expect("build");
    let port = free_port();
    let client = crate::common::client();
    let mut server = start(dir.path(), port);
    common::wait_ready(&client, port, &mut server).await;
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (client, acked, call) = (client.clone(), acked.clone(), call.clone());
        clients.push(tokio::spawn(async move {
            for i in 0.. {
                match call(client.clone(), port, format!("client {c} call {i}")).await {
                    Some(id) => acked.lock().expect("lock").push(id),
                    None => break,
                }
            }
        }));
    }
    // Let load build up, then kill the server mid-flight.
    let started = Instant::now();
    while acked.lock().expect("lock").len() < wanted && started.elapsed() < Duration::from_secs(20)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill().expect("SIGKILL");
    server.wait().expect("reap");
    for c in clients {
        c.await.expect("client task");
    }
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() >= wanted,
        "only {} calls before the kill",
        acked.len()
    );
    (dir, port, acked)
}

/// `capdir ledger verify` on the ledger in `dir` passes.
fn verified(dir: &Path) {
    let verify = Command::new(BIN)
        .args(["ledger", "verify", "--ledger"])
        .arg(format!("sqlite:{}", dir.join("ledger.sqlite").display()))
        .output()
        .expect("run verify");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_invocations_survive_sigkill() {
    let (dir, port, acked) = load_then_kill(200, |client, port, body| async move {
        common::invoke_echo(&client, port, OWNER, &body).await
    })
    .await;
    let client = crate::common::client();
    let mut server = start(dir.path(), port);
    common::wait_ready(&client, port, &mut server).await;
    let after = common::invoke_echo(&client, port, OWNER, "after the restart").await;
    assert!(after.is_some(), "the restarted server invokes");
    server.kill().expect("kill");
    server.wait().expect("reap");

    let db = Connection::open(dir.path().join("ledger.sqlite")).expect("ledger");
    for id in &acked {
        let n: i64 = db
            .query_row("SELECT count(*) FROM receipts WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("count");
        assert_eq!(n, 1, "receipt {id} was acknowledged but has {n} rows");
    }
    let total: i64 = db
        .query_row("SELECT count(*) FROM receipts", [], |r| r.get(0))
        .expect("count");
    assert!(total as usize > acked.len());
    verified(dir.path());
}

/// The same with flows: SIGKILL while clients run a three-step flow (a receipt per step and
/// one for the flow). Every acknowledged flow has its receipt and all three of its steps'
/// below it, every tree in the ledger is whole, and the chain verifies.
/// The restart on the same ledger runs a flow whose tree joins the chain after the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_flows_keep_their_whole_tree_through_sigkill() {
    async fn flow(client: reqwest::Client, port: u16, body: String) -> Option<String> {
        let answer = client
            .post(format!("http://127.0.0.1:{port}/api/dispatch"))
            .header("x-owner-key", OWNER)
            .json(&serde_json::json!({"key": "HASH_AND_TIMESTAMP", "body": body}))
            .send()
            .await
            .ok()?;
        if answer.status() != 200 {
            return None;
        }
        let v: serde_json::Value = answer.json().await.ok()?;
        v["receipt"].as_str().map(str::to_string)
    }
    let (dir, port, mut acked) = load_then_kill(100, flow).await;
    let client = crate::common::client();
    let mut server = start(dir.path(), port);
    common::wait_ready(&client, port, &mut server).await;
    let after = flow(client, port, "after the restart".into()).await;
    server.kill().expect("kill");
    server.wait().expect("reap");
    acked.push(after.expect("the restarted server runs the flow"));
    let db = Connection::open(dir.path().join("ledger.sqlite")).expect("ledger");
    for id in &acked {
        let (own, steps): (i64, i64) = db
            .query_row(
                "SELECT (SELECT count(*) FROM receipts WHERE id = ?1),
                        (SELECT count(*) FROM receipts WHERE root = ?1)",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("count");
        assert_eq!((own, steps), (1, 3), "flow {id} was acknowledged");
    }
    // A tree is committed whole or not at all, acknowledged or not: no step lacks its flow,
    // and every flow's three steps sit just before it in the chain.
    let orphans: i64 = db
        .query_row(
            "SELECT count(*) FROM receipts s WHERE s.root IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM receipts f WHERE f.id = s.root)",
            [],
            |r| r.get(0),
        )
        .expect("orphans");
    assert_eq!(orphans, 0, "steps without their flow's receipt");
    let split: i64 = db
        .query_row(
            "SELECT count(*) FROM receipts f WHERE f.root IS NULL
               AND (SELECT count(*) FROM receipts s
                     WHERE s.root = f.id AND s.seq BETWEEN f.seq - 3 AND f.seq - 1) != 3",
            [],
            |r| r.get(0),
        )
        .expect("split trees");
    assert_eq!(split, 0, "flows whose steps are not just before them");
    verified(dir.path());
}
