//! The SQLite ledger, the embedded default: one file in WAL mode with `synchronous=FULL`.
//!
//! Receipts are appended by one writer thread that owns the connection. Callers send a draft
//! over a channel; the writer takes every draft that queued up meanwhile, commits them in one
//! transaction (one fsync for the batch: group commit) and answers each caller through its
//! oneshot. The transaction is IMMEDIATE, so it holds the write lock before it reads the last
//! link: two processes on the same file wait for each other instead of forking the chain.

use super::tlog;
use super::watch::{self, Approval, Counters, Decision, Pending};
use super::{
    BoxFuture, Draft, Job, Ledger, Link, Receipt, Stats, TokenEntry, Verdict, Walk, answer_all,
    batch, entries, link, now_rfc3339, queue, row_to_receipt, token_entry,
};
use crate::access::token::Claims;
use crate::access::watch::Counter;
use crate::trust::merkle::Frontier;
use anyhow::{Context as _, Result, bail};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

/// The SQLite ledger (WAL, `synchronous=FULL`).
pub struct SqliteLedger {
    path: PathBuf,
    jobs: mpsc::UnboundedSender<Job>,
    stats: Arc<Stats>,
    /// A second connection for the token record: rare writes, one lookup per token call.
    tokens: Arc<Mutex<Connection>>,
    /// Tokens' counters, in memory (one dispatcher writes a SQLite ledger) and written back
    /// every second by the flusher thread.
    counters: Arc<Counters>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS receipts (
  seq INTEGER PRIMARY KEY NOT NULL,
  id TEXT NOT NULL UNIQUE,
  body TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
  n INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  claims TEXT,
  minted_at TEXT,
  revoked_at TEXT
);
CREATE TABLE IF NOT EXISTS approvals (
  n INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  request TEXT NOT NULL,
  state TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  decision TEXT,
  result TEXT
);
CREATE INDEX IF NOT EXISTS approvals_pending ON approvals (n) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS counters (
  token TEXT NOT NULL,
  name TEXT NOT NULL,
  n INTEGER NOT NULL,
  expires INTEGER NOT NULL,
  PRIMARY KEY (token, name)
);
CREATE TABLE IF NOT EXISTS checkpoints (
  size INTEGER PRIMARY KEY NOT NULL,
  note TEXT NOT NULL,
  issued_at TEXT NOT NULL
);";

/// The columns a receipt names its tree's root and the call it repairs in, indexed where set,
/// and keeps its Merkle tree nodes in (`tlog`), indexed where not yet made (added to ledgers
/// made before them).
const LINKS: &str = "
CREATE INDEX IF NOT EXISTS receipts_root ON receipts (root) WHERE root IS NOT NULL;
CREATE INDEX IF NOT EXISTS receipts_repairs ON receipts (repairs) WHERE repairs IS NOT NULL;
CREATE INDEX IF NOT EXISTS receipts_untreed ON receipts (seq) WHERE nodes IS NULL;";

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
    for (column, kind) in [("root", "TEXT"), ("repairs", "TEXT"), ("nodes", "BLOB")] {
        let has: bool = db
            .prepare("SELECT 1 FROM pragma_table_info('receipts') WHERE name = ?1")?
            .exists([column])?;
        if !has {
            db.execute_batch(&format!("ALTER TABLE receipts ADD COLUMN {column} {kind}"))?;
        }
    }
    db.execute_batch(LINKS)?;
    // Before the receipts' rows kept the tree, it was kept in tables of its own: the nodes
    // are the receipts' to make again, and the writer does (its catch-up).
    db.execute_batch("DROP TABLE IF EXISTS merkle; DROP TABLE IF EXISTS merkle_edge;")?;
    Ok(db)
}

/// `sqlite:PATH` (or a bare path) to a path.
pub fn parse_url(url: &str) -> PathBuf {
    PathBuf::from(url.strip_prefix("sqlite:").unwrap_or(url))
}

impl SqliteLedger {
    /// Open (or create) the ledger and start its writer thread.
    pub fn open(path: &Path) -> Result<SqliteLedger> {
        let mut db = open_db(path)?;
        // The tree made for receipts that keep none yet before the ledger answers anyone, so
        // its size is the chain's from the first checkpoint on.
        let frontier = match catch_up(&mut db) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "the receipt log's tree could not catch up");
                None
            }
        };
        let tokens = open_db(path)?;
        let counters = Arc::new(load_counters(&tokens)?);
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        let writer_stats = stats.clone();
        std::thread::Builder::new()
            .name("capdir-ledger".into())
            .spawn(move || writer(db, frontier, rx, &writer_stats))?;
        let tokens = Arc::new(Mutex::new(tokens));
        spawn_flusher(Arc::downgrade(&tokens), Arc::downgrade(&counters))?;
        Ok(SqliteLedger {
            path: path.to_path_buf(),
            jobs: tx,
            stats,
            tokens,
            counters,
        })
    }
}

fn load_counters(db: &Connection) -> Result<Counters> {
    let now = chrono::Utc::now().timestamp();
    let mut q = db.prepare("SELECT token, name, n, expires FROM counters WHERE expires > ?1")?;
    let rows = q.query_map([now], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64, r.get(3)?))
    })?;
    Ok(Counters::load(rows.collect::<Result<_, _>>()?))
}

/// Write changed counters back every second, until the ledger is dropped.
fn spawn_flusher(
    db: std::sync::Weak<Mutex<Connection>>,
    counters: std::sync::Weak<Counters>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("capdir-counters".into())
        .spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let (Some(db), Some(counters)) = (db.upgrade(), counters.upgrade()) else {
                    return;
                };
                if let Err(e) = flush_counters(&db, &counters) {
                    tracing::warn!(error = %format!("{e:#}"), "writing tokens' counters back failed");
                }
            }
        })?;
    Ok(())
}

fn flush_counters(db: &Mutex<Connection>, counters: &Counters) -> Result<()> {
    let now = chrono::Utc::now().timestamp();
    let changed = counters.take_dirty(now);
    let mut db = db.lock().unwrap_or_else(|p| p.into_inner());
    let tx = db.transaction()?;
    {
        let mut put = tx.prepare_cached(
            "INSERT INTO counters (token, name, n, expires) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (token, name) DO UPDATE SET n = excluded.n, expires = excluded.expires",
        )?;
        for (token, name, n, expires) in &changed {
            put.execute(params![token, name, *n as i64, expires])?;
        }
    }
    tx.execute("DELETE FROM counters WHERE expires <= ?1", [now])?;
    tx.commit()?;
    Ok(())
}

fn approval_row(r: &rusqlite::Row<'_>, now: i64) -> rusqlite::Result<Result<Approval>> {
    let request: String = r.get(0)?;
    let (state, decision, result) = (r.get(1)?, r.get(2)?, r.get(3)?);
    Ok(serde_json::from_str::<Pending>(&request)
        .map_err(anyhow::Error::from)
        .and_then(|p| Approval::read(p, state, decision, result, now)))
}

fn last_link(db: &Connection) -> rusqlite::Result<(i64, String)> {
    Ok(db
        .prepare_cached("SELECT seq, hash FROM receipts ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((0, super::GENESIS.to_string())))
}

/// How many leaves the stored tree has: the receipts up to the first that keeps no nodes yet.
fn stored_tree_size(db: &Connection) -> rusqlite::Result<u64> {
    db.prepare_cached(
        "SELECT coalesce((SELECT min(seq) - 1 FROM receipts WHERE nodes IS NULL),
                         (SELECT max(seq) FROM receipts), 0)",
    )?
    .query_row([], |r| Ok(r.get::<_, i64>(0)? as u64))
}

/// The receipt rows at `seqs`, as the tree reads them.
fn read_rows(db: &Connection, seqs: &[i64]) -> rusqlite::Result<tlog::Rows> {
    let mut get = db.prepare_cached("SELECT hash, nodes FROM receipts WHERE seq = ?1")?;
    let mut rows = tlog::Rows::new();
    for &seq in seqs {
        if let Some(row) = get
            .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
        {
            rows.insert(seq, row);
        }
    }
    Ok(rows)
}

fn read_nodes(db: &Connection, wanted: &[(u32, u64)]) -> Result<tlog::Nodes> {
    tlog::pick(wanted, &read_rows(db, &tlog::rows_for(wanted))?)
}

/// The tree's right edge for the first `size` receipts, from the rows it lies in, after
/// catching up the receipts that keep no nodes yet (a ledger made before they did; in this
/// transaction).
fn frontier_at(db: &Connection, size: u64) -> Result<Frontier> {
    let made = stored_tree_size(db)?;
    let coordinates = Frontier::coordinates(made);
    let mut frontier = Frontier::load(made, &read_nodes(db, &coordinates)?).ok_or_else(|| {
        anyhow::anyhow!("the ledger lacks the tree's right edge at {made} receipts")
    })?;
    if made < size {
        let mut q = db.prepare("SELECT seq, hash FROM receipts WHERE seq > ?1 ORDER BY seq")?;
        let mut put = db.prepare("UPDATE receipts SET nodes = ?2 WHERE seq = ?1")?;
        let mut rows = q.query([made as i64])?;
        while let Some(r) = rows.next()? {
            let (seq, hash): (i64, String) = (r.get(0)?, r.get(1)?);
            if seq as u64 != frontier.size() + 1 {
                bail!("the ledger's receipts are not numbered 1 to {size}");
            }
            put.execute(params![
                seq,
                tlog::row_nodes(&frontier.push(tlog::leaf(&hash)?))
            ])?;
        }
        if frontier.size() != size {
            bail!("the ledger's receipts are not numbered 1 to {size}");
        }
        tracing::info!(receipts = size, "the receipt log's Merkle tree caught up");
    }
    Ok(frontier)
}

/// Commit one batch of receipts in one transaction (one fsync) and return their links; the
/// tree's new nodes go in the same transaction. `frontier` is the writer's right edge of the
/// tree, kept between batches and reloaded when another process appended meanwhile.
fn commit_batch(
    db: &mut Connection,
    jobs: &[Job],
    frontier: &mut Option<Frontier>,
) -> Result<Vec<Link>> {
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let last = last_link(&tx)?;
    let mut edge = match frontier.take() {
        Some(f) if f.size() == last.0 as u64 => f,
        _ => frontier_at(&tx, last.0 as u64)?,
    };
    let links = link(last, jobs);
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO receipts (seq, id, body, prev_hash, hash, root, repairs, nodes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for (entry, (seq, prev_hash, hash)) in entries(jobs).zip(&links) {
            insert.execute(params![
                seq,
                entry.draft.id,
                entry.body,
                prev_hash,
                hash,
                entry.draft.root,
                entry.draft.repairs,
                tlog::row_nodes(&edge.push(tlog::leaf(hash)?)),
            ])?;
        }
    }
    tx.commit()?;
    *frontier = Some(edge);
    Ok(links)
}

/// Bring the tree up to the chain before the first batch (a ledger made before the tree).
fn catch_up(db: &mut Connection) -> Result<Frontier> {
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let size = last_link(&tx)?.0 as u64;
    let frontier = frontier_at(&tx, size)?;
    tx.commit()?;
    Ok(frontier)
}

fn writer(
    mut db: Connection,
    mut frontier: Option<Frontier>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    stats: &Stats,
) {
    let synchronous = db
        .query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))
        .map_or("unknown", |level| match level {
            0 => "off",
            1 => "normal",
            2 => "full",
            3 => "extra",
            _ => "unknown",
        });
    let _ = stats.durability.set(format!("synchronous={synchronous}"));
    while let Some(first) = rx.blocking_recv() {
        let jobs = batch(first, &mut rx);
        let started = Instant::now();
        let result = commit_batch(&mut db, &jobs, &mut frontier);
        stats.add(started.elapsed());
        answer_all(jobs, result);
    }
}

fn read_only(path: &Path) -> Result<Connection> {
    Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening ledger {}", path.display()))
}

impl Ledger for SqliteLedger {
    fn append_all(&self, drafts: Vec<Draft>) -> BoxFuture<'static, Result<Vec<Receipt>>> {
        queue(&self.jobs, drafts)
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Receipt>>> {
        let (path, id) = (self.path.clone(), id.to_string());
        Box::pin(async move { tokio::task::spawn_blocking(move || get(&path, &id)).await? })
    }

    fn tree<'a>(&'a self, root: &'a str) -> BoxFuture<'a, Result<Vec<Receipt>>> {
        let (path, root) = (self.path.clone(), root.to_string());
        Box::pin(async move { tokio::task::spawn_blocking(move || tree(&path, &root)).await? })
    }

    fn repaired_by<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        let (path, id) = (self.path.clone(), id.to_string());
        Box::pin(async move { tokio::task::spawn_blocking(move || repaired_by(&path, &id)).await? })
    }

    fn verify(&self) -> BoxFuture<'_, Result<Verdict>> {
        let path = self.path.clone();
        Box::pin(async move { tokio::task::spawn_blocking(move || verify(&path)).await? })
    }

    fn commit_stats(&self) -> (u64, f64) {
        self.stats.read()
    }

    fn durability(&self) -> Option<String> {
        self.stats.durability.get().cloned()
    }

    fn tree_size(&self) -> BoxFuture<'_, Result<u64>> {
        let path = self.path.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || Ok(stored_tree_size(&read_only(&path)?)?)).await?
        })
    }

    fn tree_nodes<'a>(&'a self, wanted: &'a [(u32, u64)]) -> BoxFuture<'a, Result<tlog::Nodes>> {
        let (path, wanted) = (self.path.clone(), wanted.to_vec());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_nodes(&read_only(&path)?, &wanted)).await?
        })
    }

    fn record_checkpoint<'a>(&'a self, size: u64, note: &'a str) -> BoxFuture<'a, Result<()>> {
        let note = note.to_string();
        self.on_tokens(move |db| {
            db.execute(
                "INSERT INTO checkpoints (size, note, issued_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (size) DO NOTHING",
                params![size as i64, note, now_rfc3339()],
            )?;
            Ok(())
        })
    }

    fn checkpoint(&self, size: Option<u64>) -> BoxFuture<'_, Result<Option<(u64, String)>>> {
        self.on_tokens(move |db| {
            let sql = match size {
                Some(_) => "SELECT size, note FROM checkpoints WHERE size = ?1",
                None => {
                    "SELECT size, note FROM checkpoints WHERE ?1 IS NULL ORDER BY size DESC LIMIT 1"
                }
            };
            Ok(db
                .prepare_cached(sql)?
                .query_row([size.map(|s| s as i64)], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
                })
                .optional()?)
        })
    }

    fn record_token<'a>(&'a self, claims: &'a Claims) -> BoxFuture<'a, Result<()>> {
        let claims = claims.clone();
        self.on_tokens(move |db| {
            db.execute(
                "INSERT INTO tokens (id, claims, minted_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET claims = coalesce(claims, excluded.claims),
                   minted_at = coalesce(minted_at, excluded.minted_at)",
                params![claims.id, serde_json::to_string(&claims)?, now_rfc3339()],
            )?;
            Ok(())
        })
    }

    fn revoke<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        let id = id.to_string();
        self.on_tokens(move |db| {
            let changed = db.execute(
                "INSERT INTO tokens (id, revoked_at) VALUES (?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET revoked_at = excluded.revoked_at
                 WHERE revoked_at IS NULL",
                params![id, now_rfc3339()],
            )?;
            Ok(changed == 1)
        })
    }

    fn is_revoked<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        let id = id.to_string();
        self.on_tokens(move |db| {
            let mut stmt =
                db.prepare_cached("SELECT 1 FROM tokens WHERE id = ?1 AND revoked_at IS NOT NULL")?;
            Ok(stmt.exists([id])?)
        })
    }

    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenEntry>>> {
        self.on_tokens(|db| {
            let mut stmt =
                db.prepare("SELECT id, claims, minted_at, revoked_at FROM tokens ORDER BY n")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (id, claims, minted_at, revoked_at) = row?;
                out.push(token_entry(id, claims, minted_at, revoked_at)?);
            }
            Ok(out)
        })
    }

    fn queue_approval<'a>(&'a self, pending: &'a Pending) -> BoxFuture<'a, Result<()>> {
        let (id, expires, request) = (
            pending.id.clone(),
            pending.expires_at,
            serde_json::to_string(pending),
        );
        self.on_tokens(move |db| {
            db.execute(
                "INSERT INTO approvals (id, request, state, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![id, request?, watch::PENDING, expires],
            )?;
            Ok(())
        })
    }

    fn approval<'a>(&'a self, id: &'a str, now: i64) -> BoxFuture<'a, Result<Option<Approval>>> {
        let id = id.to_string();
        self.on_tokens(move |db| {
            db.prepare_cached(
                "SELECT request, state, decision, result FROM approvals WHERE id = ?1",
            )?
            .query_row([id], |r| approval_row(r, now))
            .optional()?
            .transpose()
        })
    }

    fn pending_approvals(&self, now: i64) -> BoxFuture<'_, Result<Vec<Approval>>> {
        self.on_tokens(move |db| {
            let mut q = db.prepare_cached(
                "SELECT request, state, decision, result FROM approvals
                 WHERE state = 'pending' AND expires_at > ?1 ORDER BY n LIMIT 1000",
            )?;
            let rows = q.query_map([now], |r| approval_row(r, now))?;
            rows.map(|r| r?).collect()
        })
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        decision: &'a Decision,
        now: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        let (id, state, json) = (
            id.to_string(),
            decision.state.clone(),
            serde_json::to_string(decision),
        );
        self.on_tokens(move |db| {
            let changed = db.execute(
                "UPDATE approvals SET state = ?2, decision = ?3
                 WHERE id = ?1 AND state = 'pending' AND expires_at > ?4",
                params![id, state, json?, now],
            )?;
            Ok(changed == 1)
        })
    }

    fn record_result<'a>(
        &'a self,
        id: &'a str,
        result: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<()>> {
        let (id, result) = (id.to_string(), result.to_string());
        self.on_tokens(move |db| {
            db.execute(
                "UPDATE approvals SET result = ?2 WHERE id = ?1 AND result IS NULL",
                params![id, result],
            )?;
            Ok(())
        })
    }

    fn charge<'a>(
        &'a self,
        token: &'a str,
        counters: &'a [Counter],
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(usize, u64)>>> {
        let over = self.counters.charge(token, counters, now);
        Box::pin(async move { Ok(over) })
    }

    fn add_to_counters<'a>(
        &'a self,
        token: &'a str,
        counters: &'a [Counter],
        now: i64,
    ) -> BoxFuture<'a, Result<()>> {
        self.counters.add(token, counters, now);
        Box::pin(async { Ok(()) })
    }
}

impl SqliteLedger {
    /// Write the counters back now (what the flusher does every second).
    pub fn flush_counters(&self) -> Result<()> {
        flush_counters(&self.tokens, &self.counters)
    }

    /// Run `f` on the token connection off the async threads.
    fn on_tokens<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> BoxFuture<'static, Result<T>> {
        let tokens = self.tokens.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let db = tokens.lock().unwrap_or_else(|p| p.into_inner());
                f(&db)
            })
            .await?
        })
    }
}

/// One receipt by id, read from the file.
/// The receipts below the top-level call `root`, in chain order.
pub fn tree(path: &Path, root: &str) -> Result<Vec<Receipt>> {
    let db = read_only(path)?;
    let mut q =
        db.prepare("SELECT seq, body, prev_hash, hash FROM receipts WHERE root = ?1 ORDER BY seq")?;
    let rows = q.query_map([root], |r| {
        Ok((r.get(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get(3)?))
    })?;
    rows.map(|row| {
        let (seq, body, prev, hash) = row?;
        row_to_receipt(seq, &body, prev, hash)
    })
    .collect()
}

/// The ids of the receipts that name `id` in `repairs`, in chain order.
pub fn repaired_by(path: &Path, id: &str) -> Result<Vec<String>> {
    let db = read_only(path)?;
    let mut q = db.prepare("SELECT id FROM receipts WHERE repairs = ?1 ORDER BY seq")?;
    let ids = q.query_map([id], |r| r.get(0))?;
    Ok(ids.collect::<Result<_, _>>()?)
}

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

/// Walk the chain from the first receipt; stop at the first broken link.
pub fn verify(path: &Path) -> Result<Verdict> {
    if !path.exists() {
        bail!("no ledger at {}", path.display());
    }
    let db = read_only(path)?;
    let mut stmt = db
        .prepare("SELECT seq, id, body, prev_hash, hash, nodes FROM receipts ORDER BY seq")
        .context(
            "the ledger's receipts keep no Merkle tree yet: serve it once with this capdir, \
             which makes the tree, then verify",
        )?;
    let mut rows = stmt.query([])?;
    let mut walk = Walk::new();
    while let Some(r) = rows.next()? {
        let (seq, id, body, prev_hash, hash): (i64, String, String, String, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
        // As bytes whatever their stored type: nodes changed to text are changed nodes, and
        // so are nodes changed to a number.
        let nodes = match r.get_ref(5)? {
            rusqlite::types::ValueRef::Integer(_) | rusqlite::types::ValueRef::Real(_) => {
                return Ok(Verdict::Broken {
                    seq,
                    id,
                    why: "the Merkle tree nodes this receipt keeps are a number: they were changed"
                        .into(),
                });
            }
            value => value.as_bytes_or_null()?,
        };
        if let Some(broken) = walk.step(seq, &id, &body, &prev_hash, &hash, nodes)? {
            return Ok(broken);
        }
    }
    Ok(walk.finish())
}
