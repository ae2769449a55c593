//! The ledger: every invocation's receipt, durable before its caller hears the answer, chained
//! by SHA-256 so that editing or deleting one shows (DESIGN.md §7).
//!
//! Receipts are appended by one writer thread that owns the SQLite connection. Callers send
//! a draft over a channel; the writer takes every draft that queued up meanwhile, commits them
//! in one transaction (one fsync for the batch: group commit) and answers each caller through
//! its oneshot. `Ledger` is a trait so a PostgreSQL backend can stand beside SQLite later.

use anyhow::{Context as _, Result, bail};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// What an invocation hands the ledger; the ledger adds the id's place in the chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Draft {
    pub id: String,
    pub key: String,
    pub actor: String,
    pub runner: String,
    pub trace_id: String,
    pub started_at: String,
    pub finished_at: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    pub cost_usd: Option<f64>,
    pub input_sha256: String,
    pub output_sha256: String,
    pub contract_sha256: String,
    pub catalogue_commit: String,
    pub repairs: Option<String>,
    /// The input with credentials redacted.
    pub input: String,
    /// The output with credentials redacted.
    pub output: String,
}

/// A committed receipt: the draft, its place in the chain and the chain's hashes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    pub seq: i64,
    #[serde(flatten)]
    pub draft: Draft,
    pub prev_hash: String,
    pub hash: String,
}

/// SHA-256 of text, hex.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A new receipt id: `inv_` and a UUIDv7 without dashes. Version 7 starts with the time, so
/// ids made one after another sort together and the id index grows at its right edge (one
/// page touched per commit rather than one per receipt); 74 random bits keep it unguessable.
pub fn new_id() -> String {
    format!("inv_{}", uuid::Uuid::now_v7().simple())
}

/// The hash of a receipt: SHA-256 over the previous hash and the receipt's canonical JSON,
/// `seq` first, then the draft's fields in declaration order (the hashes left out). `body` is
/// the draft's JSON as `serde_json::to_string` writes it (and the ledger stores it): the
/// canonical form is that object with `"seq":N,` put first, so the writer hashes without
/// serialising again.
fn chain_hash_body(prev_hash: &str, seq: i64, body: &str) -> String {
    let fields = body.strip_prefix('{').unwrap_or(body);
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(format!("{{\"seq\":{seq},").as_bytes());
    h.update(fields.as_bytes());
    hex::encode(h.finalize())
}

/// The hash the first receipt chains from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where receipts live.
pub trait Ledger: Send + Sync {
    /// Make the receipt durable and return it with its place in the chain.
    fn append(&self, draft: Draft) -> BoxFuture<'_, Result<Receipt>>;
    /// One receipt by id.
    fn get(&self, id: &str) -> Result<Option<Receipt>>;
    /// Commits so far and their total time in seconds (for `/metrics`).
    fn commit_stats(&self) -> (u64, f64);
}

struct Job {
    draft: Draft,
    /// The draft's JSON, made by the caller so the one writer thread does not.
    body: String,
    answer: oneshot::Sender<Result<Receipt, String>>,
}

/// The SQLite ledger (WAL, `synchronous=FULL`).
pub struct SqliteLedger {
    path: PathBuf,
    jobs: mpsc::UnboundedSender<Job>,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    micros: AtomicU64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS receipts (
  seq INTEGER PRIMARY KEY NOT NULL,
  id TEXT NOT NULL UNIQUE,
  body TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL
);";

fn open_db(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the ledger directory {}", dir.display()))?;
    }
    let db =
        Connection::open(path).with_context(|| format!("opening ledger {}", path.display()))?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    db.pragma_update(None, "synchronous", "FULL")?;
    db.busy_timeout(std::time::Duration::from_secs(5))?;
    db.execute_batch(SCHEMA)?;
    Ok(db)
}

/// `sqlite:PATH` (or a bare path) to a path.
pub fn parse_url(url: &str) -> PathBuf {
    PathBuf::from(url.strip_prefix("sqlite:").unwrap_or(url))
}

impl SqliteLedger {
    /// Open (or create) the ledger and start its writer thread.
    pub fn open(path: &Path) -> Result<SqliteLedger> {
        let db = open_db(path)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        let writer_stats = stats.clone();
        std::thread::Builder::new()
            .name("capdir-ledger".into())
            .spawn(move || writer(db, rx, &writer_stats))?;
        Ok(SqliteLedger {
            path: path.to_path_buf(),
            jobs: tx,
            stats,
        })
    }
}

fn last_link(db: &Connection) -> rusqlite::Result<(i64, String)> {
    Ok(db
        .prepare_cached("SELECT seq, hash FROM receipts ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((0, GENESIS.to_string())))
}

/// One link of the chain as committed: `seq`, `prev_hash`, `hash`.
type Link = (i64, String, String);

/// Commit one batch of receipts in one transaction (one fsync) and return their links.
fn commit_batch(db: &mut Connection, jobs: &[Job]) -> Result<Vec<Link>> {
    let tx = db.transaction()?;
    let (mut seq, mut prev) = last_link(&tx)?;
    let mut out = Vec::with_capacity(jobs.len());
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO receipts (seq, id, body, prev_hash, hash) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for job in jobs {
            seq += 1;
            let hash = chain_hash_body(&prev, seq, &job.body);
            insert.execute(params![seq, job.draft.id, job.body, prev, hash])?;
            let prev_hash = std::mem::replace(&mut prev, hash.clone());
            out.push((seq, prev_hash, hash));
        }
    }
    tx.commit()?;
    Ok(out)
}

fn writer(mut db: Connection, mut rx: mpsc::UnboundedReceiver<Job>, stats: &Stats) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        while let Ok(more) = rx.try_recv() {
            jobs.push(more);
        }
        let started = Instant::now();
        let result = commit_batch(&mut db, &jobs);
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats
            .micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match result {
            Ok(links) => {
                for (job, (seq, prev_hash, hash)) in jobs.into_iter().zip(links) {
                    let receipt = Receipt {
                        seq,
                        draft: job.draft,
                        prev_hash,
                        hash,
                    };
                    let _ = job.answer.send(Ok(receipt));
                }
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), batch = jobs.len(), "ledger commit failed");
                for job in jobs {
                    let _ = job.answer.send(Err(format!("{e:#}")));
                }
            }
        }
    }
}

fn row_to_receipt(seq: i64, body: &str, prev_hash: String, hash: String) -> Result<Receipt> {
    let draft: Draft = serde_json::from_str(body)
        .with_context(|| format!("receipt {seq}: the stored body is not a receipt"))?;
    Ok(Receipt {
        seq,
        draft,
        prev_hash,
        hash,
    })
}

fn read_only(path: &Path) -> Result<Connection> {
    Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening ledger {}", path.display()))
}

impl Ledger for SqliteLedger {
    fn append(&self, draft: Draft) -> BoxFuture<'_, Result<Receipt>> {
        Box::pin(async move {
            let body = serde_json::to_string(&draft)?;
            let (answer, rx) = oneshot::channel();
            if self
                .jobs
                .send(Job {
                    draft,
                    body,
                    answer,
                })
                .is_err()
            {
                bail!("the ledger writer has stopped");
            }
            match rx.await {
                Ok(Ok(receipt)) => Ok(receipt),
                Ok(Err(e)) => bail!("the ledger could not commit: {e}"),
                Err(_) => bail!("the ledger writer has stopped"),
            }
        })
    }

    fn get(&self, id: &str) -> Result<Option<Receipt>> {
        get(&self.path, id)
    }

    fn commit_stats(&self) -> (u64, f64) {
        (
            self.stats.commits.load(Ordering::Relaxed),
            self.stats.micros.load(Ordering::Relaxed) as f64 / 1e6,
        )
    }
}

/// One receipt by id, read from the file.
pub fn get(path: &Path, id: &str) -> Result<Option<Receipt>> {
    let db = read_only(path)?;
    let found = db
        .query_row(
            "SELECT seq, body, prev_hash, hash FROM receipts WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    found
        .map(|(seq, body, prev, hash)| row_to_receipt(seq, &body, prev, hash))
        .transpose()
}

/// What `verify` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every link holds.
    Intact { receipts: u64 },
    /// The first receipt whose link does not hold, and why.
    Broken { seq: i64, id: String, why: String },
}

/// Walk the chain from the first receipt; stop at the first broken link.
pub fn verify(path: &Path) -> Result<Verdict> {
    if !path.exists() {
        bail!("no ledger at {}", path.display());
    }
    let db = read_only(path)?;
    let mut stmt =
        db.prepare("SELECT seq, id, body, prev_hash, hash FROM receipts ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    let mut prev = GENESIS.to_string();
    let mut expected_seq = 1;
    let mut count = 0;
    while let Some(r) = rows.next()? {
        let seq: i64 = r.get(0)?;
        let id: String = r.get(1)?;
        let body: String = r.get(2)?;
        let prev_hash: String = r.get(3)?;
        let hash: String = r.get(4)?;
        let broken = |why: String| Verdict::Broken {
            seq,
            id: id.clone(),
            why,
        };
        if seq != expected_seq {
            return Ok(broken(format!(
                "expected receipt {expected_seq} here: a receipt is missing"
            )));
        }
        if prev_hash != prev {
            return Ok(broken(
                "prev_hash does not match the previous receipt's hash".into(),
            ));
        }
        let draft: Draft = match serde_json::from_str(&body) {
            Ok(d) => d,
            Err(e) => return Ok(broken(format!("the body is not a receipt: {e}"))),
        };
        if draft.id != id {
            return Ok(broken(format!("the body names another id, {}", draft.id)));
        }
        if chain_hash_body(&prev, seq, &body) != hash {
            return Ok(broken(
                "the hash does not match the receipt: it was edited".into(),
            ));
        }
        prev = hash;
        expected_seq += 1;
        count += 1;
    }
    Ok(Verdict::Intact { receipts: count })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical JSON written out by serde, as the chain was first defined.
    fn chain_hash_by_serde(prev_hash: &str, seq: i64, draft: &Draft) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            seq: i64,
            #[serde(flatten)]
            draft: &'a Draft,
        }
        let body = serde_json::to_string(&Canonical { seq, draft }).unwrap();
        sha256_hex(&format!("{prev_hash}{body}"))
    }

    #[test]
    fn hashing_the_stored_body_equals_hashing_the_canonical_receipt() {
        let mut d = draft("K");
        d.cost_usd = Some(0.125);
        d.error_code = Some("x".into());
        d.output = "quote \" and \u{e9} and \n".into();
        for seq in [1, 42, 1_000_000] {
            let body = serde_json::to_string(&d).unwrap();
            assert_eq!(
                chain_hash_body(GENESIS, seq, &body),
                chain_hash_by_serde(GENESIS, seq, &d)
            );
        }
    }

    fn draft(key: &str) -> Draft {
        Draft {
            id: new_id(),
            key: key.into(),
            actor: "owner".into(),
            runner: "fn".into(),
            trace_id: "t".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:00:00Z".into(),
            status: "PROVEN_MATERIAL_RESULT".into(),
            error_code: None,
            cost_usd: None,
            input_sha256: sha256_hex("a"),
            output_sha256: sha256_hex("b"),
            contract_sha256: sha256_hex("c"),
            catalogue_commit: "abc".into(),
            repairs: None,
            input: "a".into(),
            output: "b".into(),
        }
    }

    #[tokio::test]
    async fn chains_and_detects_tampering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("l.sqlite");
        let ledger = SqliteLedger::open(&path).expect("open");
        let mut ids = Vec::new();
        for i in 0..5 {
            let r = ledger
                .append(draft(&format!("K{i}")))
                .await
                .expect("append");
            assert_eq!(r.seq, i + 1);
            ids.push(r.draft.id);
        }
        let got = ledger.get(&ids[2]).expect("get").expect("found");
        assert_eq!(got.draft.key, "K2");
        assert_eq!(
            verify(&path).expect("verify"),
            Verdict::Intact { receipts: 5 }
        );
        let db = Connection::open(&path).expect("db");
        db.execute(
            "UPDATE receipts SET body = replace(body, 'K3', 'K9') WHERE seq = 4",
            [],
        )
        .expect("tamper");
        match verify(&path).expect("verify") {
            Verdict::Broken { seq, .. } => assert_eq!(seq, 4),
            v => panic!("{v:?}"),
        }
        db.execute("DELETE FROM receipts WHERE seq = 4", [])
            .expect("delete");
        match verify(&path).expect("verify") {
            Verdict::Broken { seq, why, .. } => {
                assert_eq!(seq, 5);
                assert!(why.contains("missing"), "{why}");
            }
            v => panic!("{v:?}"),
        }
    }
}
