//! The receipt log verifiable from outside (issue: verifiable from outside): thousands of
//! receipts in a real `capdir serve`, a signed checkpoint, inclusion proofs for the first, a
//! middle and the last receipt checked by `capdir ledger verify` with nothing but files and the
//! log's public key; a byte changed in a stored receipt fails that check naming the receipt;
//! a consistency proof between two checkpoints holds, and a forged one does not. On PostgreSQL,
//! two dispatchers append at once and every checkpoint either issued verifies against the
//! last.

use crate::common::{self, Served};
use capdir::trust::note::Verifier;
use capdir::trust::proof::{ConsistencyProof, InclusionProof};
use serde_json::Value as Json;
use std::path::Path;
use std::process::{Command, Output};

const OWNER: &str = "receipt-log-owner";
const TOKEN_KEY: &str = "receipt-log-test-signing-key-0123456789";
const BIN: &str = env!("CARGO_BIN_EXE_capdir");

fn capdir(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("CAPDIR_LEDGER")
        .output()
        .expect("run capdir")
}

/// `capdir ledger verify --key KEY` with `rest`: offline, with files only.
fn verify(dir: &Path, key: &str, rest: &[&str]) -> Output {
    let mut args = vec!["ledger", "verify", "--key", key];
    args.extend_from_slice(rest);
    capdir(dir, &args)
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn text(client: &reqwest::Client, url: &str) -> String {
    let r = client.get(url).send().await.expect(url);
    assert_eq!(r.status(), 200, "{url}");
    r.text().await.expect("body")
}

async fn json(client: &reqwest::Client, url: &str) -> Json {
    serde_json::from_str(&text(client, url).await).expect("json")
}

/// `n` ECHO calls, `width` at once, on the dispatcher at `port`; the receipt ids in no order.
async fn invoke_many(port: u16, n: usize, width: usize, tag: &str) -> Vec<String> {
    let client = common::client();
    let mut tasks = Vec::new();
    for w in 0..width {
        let (client, tag) = (client.clone(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in (w..n).step_by(width) {
                let id = common::invoke_echo(&client, port, OWNER, &format!("{tag} {i}"))
                    .await
                    .expect("an acknowledged call");
                ids.push(id);
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.expect("client"));
    }
    ids
}

fn size_of(checkpoint: &str) -> u64 {
    checkpoint
        .lines()
        .nth(1)
        .expect("a size line")
        .parse()
        .expect("a size")
}

/// The full receipt (`capdir ledger show`) with its inclusion proof, as a file an auditor
/// is handed.
async fn receipt_with_proof(
    dir: &Path,
    served: &Served,
    ledger: &str,
    id: &str,
    name: &str,
) -> std::path::PathBuf {
    let show = capdir(dir, &["ledger", "show", id, "--ledger", ledger]);
    assert!(show.status.success(), "{}", said(&show));
    let mut receipt: Json = serde_json::from_slice(&show.stdout).expect("receipt json");
    let confirm = json(
        &common::client(),
        &served.url(&format!("/api/dispatch?confirm={id}&proof=1")),
    )
    .await;
    receipt["proof"] = confirm["proof"].clone();
    let file = dir.join(name);
    std::fs::write(&file, receipt.to_string()).expect("write receipt");
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_receipts_proven_offline_from_first_to_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    capdir::build::run(&capdir::build::Options::new(catalogue, d.join("site"))).expect("build");
    let served = Served::start(
        d,
        &["--checkpoint-every", "3600s"],
        &[("CAPDIR_OWNER_KEY", OWNER)],
    )
    .await;
    let ledger = format!("sqlite:{}", d.join("ledger.sqlite").display());
    let client = common::client();
    invoke_many(served.port, 2500, 16, "call").await;

    // The log's key and a checkpoint, as an auditor keeps them.
    let key = text(&client, &served.url("/api/ledger/key")).await;
    // An anonymous caller reads the log's public key and its checkpoints, never the private
    // key that signs them: not from the key route, nor as a file through the static handler.
    let private = std::fs::read_to_string(d.join("data/log.key")).expect("the log key");
    // PRIVATE+KEY+NAME+KEYID+BASE64: the key data is all after the fourth '+' (base64 has its
    // own '+', so the last '+' would leave a fragment short enough to occur in any text).
    let seed = private
        .trim()
        .splitn(5, '+')
        .nth(4)
        .expect("key data")
        .to_string();
    assert_eq!(
        seed.len(),
        44,
        "the key data is base64 of 0x01 and a 32-byte seed"
    );
    assert!(!key.contains(&seed), "the key route served the private key");
    Verifier::parse(&key).expect("a verifier key");
    for path in [
        "/log.key",
        "/data/log.key",
        "/../data/log.key",
        "/%2e%2e/data/log.key",
        "/k/..%2f..%2fdata%2flog.key",
    ] {
        let r = client.get(served.url(path)).send().await.unwrap();
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        assert!(
            !body.contains(&seed),
            "{path} served the private log key ({status})"
        );
    }
    let key_file = d.join("log.pub");
    std::fs::write(&key_file, &key).unwrap();
    // A checkpoint is signed on demand at most once a second: wait for the next one.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let cp1 = text(&client, &served.url("/api/ledger/checkpoint")).await;
    assert_eq!(size_of(&cp1), 2500);
    let cp1_file = d.join("cp1");
    std::fs::write(&cp1_file, &cp1).unwrap();
    // The same checkpoint again, kept by size, and its copy in the data directory.
    assert_eq!(
        text(&client, &served.url("/api/ledger/checkpoint?size=2500")).await,
        cp1
    );
    assert_eq!(
        std::fs::read_to_string(d.join("data/checkpoints/2500")).unwrap(),
        cp1
    );

    // The ids at the first, a middle and the last place in the log.
    let db = rusqlite::Connection::open(d.join("ledger.sqlite")).unwrap();
    let id_at = |seq: i64| -> String {
        db.query_row("SELECT id FROM receipts WHERE seq = ?1", [seq], |r| {
            r.get(0)
        })
        .unwrap()
    };
    let (first, middle, last) = (id_at(1), id_at(1250), id_at(2500));
    let key_arg = key_file.to_str().unwrap();
    let cp1_arg = cp1_file.to_str().unwrap();
    for (id, name) in [(&first, "first"), (&middle, "middle"), (&last, "last")] {
        let file = receipt_with_proof(d, &served, &ledger, id, name).await;
        let v = verify(
            d,
            key_arg,
            &["--checkpoint", cp1_arg, "--receipt", file.to_str().unwrap()],
        );
        assert!(v.status.success(), "{name}: {}", said(&v));
        assert!(
            said(&v).contains(&format!("ok: receipt {id}")),
            "{}",
            said(&v)
        );
    }
    // The keyless confirmation with its proof verifies too (its hash is the leaf).
    let confirm = json(
        &client,
        &served.url(&format!("/api/dispatch?confirm={middle}&proof=1")),
    )
    .await;
    let proof: InclusionProof = serde_json::from_value(confirm["proof"].clone()).unwrap();
    assert!(
        proof.hashes.len() <= 12,
        "{} hashes at 2500 receipts",
        proof.hashes.len()
    );
    let confirm_file = d.join("confirm.json");
    std::fs::write(&confirm_file, confirm.to_string()).unwrap();
    let v = verify(d, key_arg, &["--receipt", confirm_file.to_str().unwrap()]);
    assert!(v.status.success(), "{}", said(&v));

    // Another receipt's proof does not prove this one.
    let mut swapped: Json =
        serde_json::from_str(&std::fs::read_to_string(d.join("first")).unwrap()).unwrap();
    let other: Json =
        serde_json::from_str(&std::fs::read_to_string(d.join("last")).unwrap()).unwrap();
    swapped["proof"] = other["proof"].clone();
    std::fs::write(d.join("swapped"), swapped.to_string()).unwrap();
    let v = verify(
        d,
        key_arg,
        &["--receipt", d.join("swapped").to_str().unwrap()],
    );
    assert_eq!(v.status.code(), Some(1), "{}", said(&v));

    // A byte changed in the stored middle receipt: its proof no longer holds, and the check
    // names it.
    db.execute(
        "UPDATE receipts SET body = replace(body, '\"call ', '\"cal1 ') WHERE seq = 1250",
        [],
    )
    .unwrap();
    let tampered = receipt_with_proof(d, &served, &ledger, &middle, "tampered").await;
    let v = verify(
        d,
        key_arg,
        &[
            "--checkpoint",
            cp1_arg,
            "--receipt",
            tampered.to_str().unwrap(),
        ],
    );
    assert_eq!(v.status.code(), Some(1), "{}", said(&v));
    assert!(
        said(&v).contains(&middle) && said(&v).contains("was changed"),
        "{}",
        said(&v)
    );

    // The log grows; the consistency proof shows the second checkpoint's log extends the
    // first's, offline.
    invoke_many(served.port, 100, 8, "more").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let cp2 = text(&client, &served.url("/api/ledger/checkpoint")).await;
    assert_eq!(size_of(&cp2), 2600);
    let cp2_file = d.join("cp2");
    std::fs::write(&cp2_file, &cp2).unwrap();
    let proof = text(
        &client,
        &served.url("/api/ledger/consistency?from=2500&to=2600"),
    )
    .await;
    let proof_file = d.join("consistency.json");
    std::fs::write(&proof_file, &proof).unwrap();
    let cp2_arg = cp2_file.to_str().unwrap();
    let proof_arg = proof_file.to_str().unwrap();
    let both = [
        "--checkpoint",
        cp1_arg,
        "--checkpoint",
        cp2_arg,
        "--proof",
        proof_arg,
    ];
    let v = verify(d, key_arg, &both);
    assert!(v.status.success(), "{}", said(&v));
    // A forged proof (one hash changed), or the checkpoints the wrong way round: refused.
    let mut forged: ConsistencyProof = serde_json::from_str(&proof).unwrap();
    forged.hashes[0] = forged.hashes[1].clone();
    std::fs::write(&proof_file, serde_json::to_string(&forged).unwrap()).unwrap();
    let v = verify(d, key_arg, &both);
    assert_eq!(v.status.code(), Some(1), "{}", said(&v));
    std::fs::write(&proof_file, &proof).unwrap();
    let v = verify(
        d,
        key_arg,
        &[
            "--checkpoint",
            cp2_arg,
            "--checkpoint",
            cp1_arg,
            "--proof",
            proof_arg,
        ],
    );
    assert_ne!(v.status.code(), Some(0), "{}", said(&v));
    // Sizes the log does not have are refused with their code.
    let r = client
        .get(served.url("/api/ledger/consistency?from=2600&to=9999"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Copies of the checkpoints published with a build are in its manifest.
    let published = d.join("published");
    let b = capdir(
        d,
        &[
            "build",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("catalogue")
                .to_str()
                .unwrap(),
            "--out",
            published.to_str().unwrap(),
            "--checkpoints",
            d.join("data/checkpoints").to_str().unwrap(),
        ],
    );
    assert!(b.status.success(), "{}", said(&b));
    let manifest = std::fs::read_to_string(published.join("build.json")).unwrap();
    assert!(
        manifest.contains("\"ledger/checkpoints/2500\""),
        "{manifest}"
    );
    assert_eq!(
        std::fs::read_to_string(published.join("ledger/checkpoints/2600")).unwrap(),
        cp2
    );
}

/// A dispatcher in `dir` on a site built there from the bundled catalogue, the owner key set.
async fn serve_bundled(dir: &Path) -> Served {
    serve_bundled_logging(dir, "info").await
}

/// [`serve_bundled`] with its log at `level` (`RUST_LOG`).
async fn serve_bundled_logging(dir: &Path, level: &str) -> Served {
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    capdir::build::run(&capdir::build::Options::new(catalogue, dir.join("site"))).expect("build");
    Served::start(
        dir,
        &[],
        &[
            ("CAPDIR_OWNER_KEY", OWNER),
            ("CAPDIR_TOKEN_KEY", TOKEN_KEY),
            ("RUST_LOG", level),
        ],
    )
    .await
}

/// The dispatcher's log at its default level names every call that did not run as asked and
/// none that did, whose receipts are their record; at debug it names both. The calls that went
/// wrong: one refused for its missing argument, and one of a caller whose token does not reach
/// the row (an untrusted caller cannot keep a refusal out of the default log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_names_the_calls_that_went_wrong() {
    for (level, names_a_call_that_ran) in [("info", false), ("debug", true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let served = serve_bundled_logging(dir.path(), level).await;
        let client = common::client();
        let ran = common::invoke_echo(&client, served.port, OWNER, "a call that runs")
            .await
            .expect("ECHO ran");
        let echo_only = capdir::access::token::TokenKey::from_text(TOKEN_KEY)
            .expect("token key")
            .sign(&common::claims_for(&served.url(""), &["ECHO"]));
        let mut refused = Vec::new();
        for (header, credential, body, code) in [
            ("x-owner-key", OWNER.to_string(), "", "refused"),
            (
                "authorization",
                format!("Bearer {echo_only}"),
                "text",
                "scope",
            ),
        ] {
            let answer: Json = client
                .post(served.url("/api/dispatch"))
                .header(header, credential)
                .json(&serde_json::json!({"key": "SHA256", "body": body}))
                .send()
                .await
                .expect("refused call")
                .json()
                .await
                .expect("json");
            assert_eq!(answer["error"]["code"], code, "{answer}");
            refused.push(answer["receipt"].as_str().expect("a receipt").to_string());
        }
        drop(served);
        let log = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "log"))
            .map(|p| std::fs::read_to_string(p).expect("log"))
            .expect("the server's log");
        let line_of = |id: &str| log.lines().find(|l| l.contains(id)).map(str::to_string);
        for id in &refused {
            let line = line_of(id).unwrap_or_else(|| panic!("{level}: {id} not in {log}"));
            assert!(
                line.contains("INFO") && line.contains("status=REFUSED"),
                "{line}"
            );
        }
        assert_eq!(
            line_of(&ran).is_some(),
            names_a_call_that_ran,
            "{level}: {log}"
        );
    }
}

/// The tree is the chain's: `capdir ledger verify` (online) finds a changed tree node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tree_node_breaks_the_online_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve_bundled(d).await;
    invoke_many(served.port, 37, 4, "node").await;
    drop(served);
    let ledger = format!("sqlite:{}", d.join("ledger.sqlite").display());
    let v = capdir(d, &["ledger", "verify", "--ledger", &ledger]);
    assert!(v.status.success(), "{}", said(&v));
    let db = rusqlite::Connection::open(d.join("ledger.sqlite")).unwrap();
    db.execute(
        "UPDATE receipts SET nodes = zeroblob(128) WHERE seq = 16",
        [],
    )
    .unwrap();
    let v = capdir(d, &["ledger", "verify", "--ledger", &ledger]);
    assert_eq!(v.status.code(), Some(1), "{}", said(&v));
    assert!(said(&v).contains("Merkle tree"), "{}", said(&v));
    assert!(said(&v).contains("were changed"), "{}", said(&v));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_on_postgresql_issue_checkpoints_that_all_verify() {
    let Some(db) = common::pg_database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    capdir::build::run(&capdir::build::Options::new(catalogue, d.join("site"))).expect("build");
    let key_file = d.join("log.key");
    let made = capdir(
        d,
        &[
            "key",
            "new",
            key_file.to_str().unwrap(),
            "--name",
            "shared.test/ledger",
        ],
    );
    assert!(made.status.success(), "{}", said(&made));
    let key = Verifier::parse(&String::from_utf8_lossy(&made.stdout)).expect("public key");
    let start = |name: &str| {
        let dd = d.join(name);
        std::fs::create_dir_all(&dd).unwrap();
        std::os::unix::fs::symlink(d.join("site"), dd.join("site")).unwrap();
        let key = key_file.to_str().unwrap().to_string();
        let url = db.url.clone();
        async move {
            Served::start_on(
                &dd,
                &url,
                &["--log-key", &key, "--checkpoint-every", "1s"],
                &[("CAPDIR_OWNER_KEY", OWNER)],
            )
            .await
        }
    };
    let a = start("a").await;
    let b = start("b").await;
    let client = common::client();

    // Both dispatchers append at once while checkpoints are taken from either.
    let load = tokio::spawn({
        let (pa, pb) = (a.port, b.port);
        async move {
            let (x, y) = tokio::join!(invoke_many(pa, 600, 4, "a"), invoke_many(pb, 600, 4, "b"));
            x.len() + y.len()
        }
    });
    let mut checkpoints = Vec::new();
    let mut turn = 0;
    while !load.is_finished() {
        let served = if turn % 2 == 0 { &a } else { &b };
        turn += 1;
        checkpoints.push(text(&client, &served.url("/api/ledger/checkpoint")).await);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(load.await.unwrap(), 1200);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let last = text(&client, &b.url("/api/ledger/checkpoint")).await;
    let last_size = size_of(&last);
    assert_eq!(last_size, 1200);
    assert!(
        checkpoints.len() >= 3,
        "{} checkpoints taken",
        checkpoints.len()
    );
    // Every checkpoint either dispatcher signed is a prefix of the last one's log.
    for cp in &checkpoints {
        let size = size_of(cp);
        let proof: ConsistencyProof = serde_json::from_value(
            json(
                &client,
                &a.url(&format!(
                    "/api/ledger/consistency?from={size}&to={last_size}"
                )),
            )
            .await,
        )
        .unwrap();
        if size == last_size || size == 0 {
            continue;
        }
        proof
            .verify(cp, &last, &key)
            .unwrap_or_else(|e| panic!("{size} → {last_size}: {e}"));
    }
    // Receipts from both dispatchers are included in it.
    let pg = common::pg_connect(&db.url).await;
    for seq in [1i64, 599, 1200] {
        let row = pg
            .query_one("SELECT id, hash FROM receipts WHERE seq = $1", &[&seq])
            .await
            .unwrap();
        let (id, hash): (String, String) = (row.get(0), row.get(1));
        let confirm = json(
            &client,
            &a.url(&format!("/api/dispatch?confirm={id}&proof=1")),
        )
        .await;
        let proof: InclusionProof = serde_json::from_value(confirm["proof"].clone()).unwrap();
        proof
            .verify(&hex_bytes(&hash), &key, Some(&last))
            .unwrap_or_else(|e| panic!("receipt {seq}: {e}"));
    }
    // And the chain with its tree holds, read back from PostgreSQL.
    let v = capdir(d, &["ledger", "verify", "--ledger", &db.url]);
    assert!(v.status.success(), "{}", said(&v));
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A tree behind its chain (receipts whose nodes are not made yet) proves nothing past its
/// edge: a proof asked for such a receipt is refused (503), never answered with a checkpoint
/// that does not hold it, while a receipt inside the tree still proves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_past_the_tree_gets_no_proof() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve_bundled(d).await;
    // One at a time: receipt i of the list is the ledger's receipt i + 1.
    let ids = invoke_many(served.port, 9, 1, "behind").await;
    let db = rusqlite::Connection::open(d.join("ledger.sqlite")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    db.execute("UPDATE receipts SET nodes = NULL WHERE seq >= 5", [])
        .unwrap();
    let client = common::client();
    let confirm = |id: &str| served.url(&format!("/api/dispatch?confirm={id}&proof=1"));
    let inside = client.get(confirm(&ids[2])).send().await.expect("confirm");
    assert_eq!(inside.status(), 200);
    let inside: Json = inside.json().await.expect("json");
    assert_eq!(inside["seq"], 3, "{inside}");
    assert_eq!(
        size_of(inside["proof"]["checkpoint"].as_str().expect("checkpoint")),
        4
    );
    let past = client.get(confirm(&ids[7])).send().await.expect("confirm");
    assert_eq!(past.status(), 503);
    let body: Json = past.json().await.expect("json");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(body.get("proof").is_none(), "{body}");
    // Both asks came with no key: an anonymous caller's proof request runs nothing (no
    // receipt is added) and its refusal names nothing of the ledger's inside.
    let receipts: i64 = db
        .query_row("SELECT count(*) FROM receipts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(receipts, 9);
    assert!(!body.to_string().contains("covers"), "{body}");
}
