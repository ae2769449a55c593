//! Several dispatchers, one ledger: two real `capdir serve` processes on different loopback
//! ports share one PostgreSQL database while clients invoke against both at once; one is
//! killed with SIGKILL mid-load. Every invocation a client saw acknowledged must have exactly
//! one receipt, both dispatchers' receipts must sit in one chain, and `capdir ledger verify`
//! must find every link intact.

use crate::common;

use capdir::build::{self, Options};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OWNER: &str = "scale-out-owner";
const BIN: &str = env!("CARGO_BIN_EXE_capdir");

/// Two distinct free loopback ports (both held while choosing, so they differ).
fn two_free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = |l: &std::net::TcpListener| l.local_addr().expect("addr").port();
    (port(&a), port(&b))
}

/// A dispatcher on `port`; the ledger URL goes in the environment, as in a deployment.
fn start(dir: &Path, port: u16, ledger: &str, name: &str) -> Child {
    Command::new(BIN)
        .args(["serve", "--site"])
        .arg(dir.join("site"))
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .arg("--data")
        .arg(dir.join(name))
        .env("CAPDIR_LEDGER", ledger)
        .env("CAPDIR_OWNER_KEY", OWNER)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn capdir serve")
}

type Acked = Arc<Mutex<Vec<String>>>;

fn count(acked: &Acked) -> usize {
    acked.lock().expect("lock").len()
}

/// Wait until `done` holds, at most `limit`; `what` says what was awaited and how far it got.
async fn wait_for(limit: Duration, what: impl Fn() -> String, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "timed out waiting for {}",
            what()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_one_chain_survive_a_sigkill() {
    let Some(db) = common::pg_database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    build::run(&Options::new(catalogue, dir.path().join("site"))).expect("build");
    let (port_a, port_b) = two_free_ports();
    let client = crate::common::client();
    let mut a = start(dir.path(), port_a, &db.url, "data-a");
    let mut b = start(dir.path(), port_b, &db.url, "data-b");
    common::wait_ready(&client, port_a, &mut a).await;
    common::wait_ready(&client, port_b, &mut b).await;

    // Four clients on each dispatcher. Those on A stop at their first failure (A is killed);
    // those on B go on until told to stop. Every loop is bounded in calls.
    let acked_a: Acked = Arc::default();
    let acked_b: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (port, acked) = if c % 2 == 0 {
            (port_a, acked_a.clone())
        } else {
            (port_b, acked_b.clone())
        };
        let (client, stop) = (client.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut failures = 0;
            for i in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match common::invoke_echo(&client, port, OWNER, &format!("client {c} call {i}"))
                    .await
                {
                    Some(id) => acked.lock().expect("lock").push(id),
                    None if port == port_a => break,
                    None => failures += 1,
                }
            }
            failures
        }));
    }

    let limit = Duration::from_secs(60);
    let progress = || {
        format!(
            "acknowledged calls (A {}, B {})",
            count(&acked_a),
            count(&acked_b)
        )
    };
    wait_for(limit, progress, || {
        count(&acked_a) >= 400 && count(&acked_b) >= 400
    })
    .await;
    a.kill().expect("SIGKILL dispatcher A");
    a.wait().expect("reap A");
    let b_at_kill = count(&acked_b);
    // B keeps appending to the chain A left, with A's lock and connection gone.
    wait_for(limit, progress, || count(&acked_b) >= b_at_kill + 400).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures_on_b = 0;
    for c in clients {
        failures_on_b += c.await.expect("client task");
    }
    assert_eq!(failures_on_b, 0, "dispatcher B refused calls while A died");

    // A restarted on the same database appends again.
    let mut a = start(dir.path(), port_a, &db.url, "data-a");
    common::wait_ready(&client, port_a, &mut a).await;
    let after = common::invoke_echo(&client, port_a, OWNER, "after the restart")
        .await
        .expect("the restarted dispatcher invokes");
    for server in [&mut a, &mut b] {
        server.kill().expect("kill");
        server.wait().expect("reap");
    }

    let acked_a = acked_a.lock().expect("lock").clone();
    let acked_b = acked_b.lock().expect("lock").clone();
    let pg = db.client().await;
    let rows = pg
        .query("SELECT id, seq FROM receipts", &[])
        .await
        .expect("read receipts");
    let mut seq_of: HashMap<String, i64> = HashMap::new();
    let mut copies: HashMap<String, usize> = HashMap::new();
    for r in &rows {
        let id: String = r.get(0);
        *copies.entry(id.clone()).or_default() += 1;
        seq_of.insert(id, r.get(1));
    }
    for id in acked_a.iter().chain(&acked_b).chain([&after]) {
        assert_eq!(
            copies.get(id).copied().unwrap_or(0),
            1,
            "receipt {id} was acknowledged; it must be stored exactly once"
        );
    }
    let acked_total = acked_a.len() + acked_b.len() + 1;
    assert!(
        rows.len() >= acked_total,
        "{} receipts stored, {acked_total} acknowledged",
        rows.len()
    );
    // Both dispatchers appended while the other did: their receipts interleave in one chain.
    let span = |ids: &[String]| {
        let seqs: Vec<i64> = ids.iter().map(|id| seq_of[id]).collect();
        (
            seqs.iter().copied().min().unwrap_or(0),
            seqs.iter().copied().max().unwrap_or(0),
        )
    };
    let ((a_min, a_max), (b_min, b_max)) = (span(&acked_a), span(&acked_b));
    assert!(
        a_min < b_max && b_min < a_max,
        "A's receipts span {a_min}..{a_max} and B's {b_min}..{b_max}: they did not interleave"
    );

    eprintln!(
        "acknowledged: {} by A before its SIGKILL, {} by B ({} after), 1 by A restarted; \
         {} receipts stored",
        acked_a.len(),
        acked_b.len(),
        acked_b.len() - b_at_kill,
        rows.len()
    );
    let verify = Command::new(BIN)
        .args(["ledger", "verify", "--ledger", &db.url])
        .output()
        .expect("run capdir ledger verify");
    let out = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert_eq!(
        out,
        format!("ok: {} receipts, every link holds\n", rows.len())
    );
    let show = Command::new(BIN)
        .args(["ledger", "show", &acked_b[0], "--ledger", &db.url])
        .output()
        .expect("run capdir ledger show");
    let shown: Json = serde_json::from_slice(&show.stdout).expect("a receipt as JSON");
    assert_eq!(shown["id"], acked_b[0].as_str());
    assert_eq!(shown["seq"], seq_of[&acked_b[0]]);
}
