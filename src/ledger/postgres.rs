//! The PostgreSQL ledger: one chain shared by several dispatchers (DESIGN.md §7).
//!
//! Each dispatcher keeps the group commit of the SQLite ledger: one writer task takes every
//! receipt queued meanwhile and commits them in one transaction. Several writers may reach
//! the database at once, so each batch transaction first takes a transaction-scoped advisory
//! lock, and only then reads the last link (under READ COMMITTED each statement sees what was
//! committed before it began, and PostgreSQL makes a commit visible before it releases the
//! locks). The lock goes when the transaction ends, and when a killed dispatcher's connection
//! drops. `seq`, `id` and `prev_hash` are unique besides, so a fork could not commit anyway.
//!
//! tokio-postgres rather than sqlx: the ledger runs a handful of fixed statements with no
//! compile-time query checking wanted, and tokio-postgres is the smaller build, already on
//! the Tokio runtime the dispatcher uses, and pipelines concurrent queries on one connection.
//!
//! Migrations are applied at start, under an advisory lock of their own, and recorded in
//! `capdir_migrations`; a database migrated by a newer capdir is refused rather than guessed at.
//! The circuit breakers' state lives here too (`breakers`), so every dispatcher sees one count.

use super::tlog;
use super::watch::{self, Approval, Decision, Pending};
use super::{
    BoxFuture, Draft, Job, Ledger, Link, Receipt, Stats, TokenEntry, Verdict, Walk, answer_all,
    batch, entries, link, now_rfc3339, queue, row_to_receipt, token_entry,
};
use crate::access::token::Claims;
use crate::access::watch::Counter;
use crate::invoke::breaker::{BreakerState, BreakerStore};
use crate::trust::merkle::Frontier;
use anyhow::{Context as _, Result, bail};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, mpsc};
use tokio_postgres::{Client, NoTls, Row, Statement};

mod schema;
use schema::migrate;

/// The advisory lock every batch transaction takes before it reads the last link.
const APPEND_LOCK: i64 = 0x6361_7064_6972_0001;
/// A `postgres://` URL: the text as given (password included, so it stays out of logs) and
/// what it means. `Display` shows it without the password.
#[derive(Clone)]
pub struct Url {
    config: tokio_postgres::Config,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url> {
        let mut config: tokio_postgres::Config = text.parse().map_err(|e| {
            anyhow::anyhow!(
                "--ledger is not a PostgreSQL URL ({e}); use postgres://user:password@host:port/database"
            )
        })?;
        if config.get_dbname().is_none() {
            bail!("--ledger names no database; use postgres://user:password@host:port/database");
        }
        config.application_name("capdir");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        Ok(Url { config })
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        write!(f, "postgres://")?;
        if let Some(user) = c.get_user() {
            write!(f, "{user}@")?;
        }
        for (i, host) in c.get_hosts().iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            match host {
                tokio_postgres::config::Host::Tcp(h) => write!(f, "{h}")?,
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(p) => write!(f, "[{}]", p.display())?,
            }
            if let Some(port) = c.get_ports().get(i) {
                write!(f, ":{port}")?;
            }
        }
        write!(f, "/{}", c.get_dbname().unwrap_or(""))
    }
}

/// A new connection, its I/O driven by a task on the current runtime.
async fn connect(url: &Url) -> Result<Client> {
    let (client, connection) = url
        .config
        .connect(NoTls)
        .await
        .with_context(|| format!("cannot connect to the ledger database {url}"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "ledger database connection closed");
        }
    });
    Ok(client)
}

/// The PostgreSQL ledger.
pub struct PgLedger {
    jobs: mpsc::UnboundedSender<Job>,
    stats: Arc<Stats>,
    reader: Reader,
    /// Charges so far: every 1024th also drops counters whose window ended.
    charges: std::sync::atomic::AtomicU64,
}

impl PgLedger {
    /// Connect, apply migrations and start the writer task (on the current runtime). Fails
    /// at once when the database cannot be reached, so a dispatcher does not start without it.
    pub async fn open(url: &Url) -> Result<PgLedger> {
        let reader = Reader::connect(url).await?;
        let writer_conn = WriterConn::open(url).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        let _ = stats
            .durability
            .set(format!("synchronous_commit={}", writer_conn.synchronous));
        tokio::spawn(writer(url.clone(), Some(writer_conn), rx, stats.clone()));
        Ok(PgLedger {
            jobs: tx,
            stats,
            reader,
            charges: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

/// The writer's own connection with its two statements prepared.
struct WriterConn {
    client: Client,
    lock: Statement,
    last: Statement,
    insert: Statement,
    /// Tree nodes of receipts made before their rows kept them (caught up).
    put_nodes: Statement,
    /// The tree's right edge after this writer's last batch; reloaded when another
    /// dispatcher appended since.
    frontier: Option<Frontier>,
    /// `SHOW synchronous_commit` on this connection.
    synchronous: String,
}

impl WriterConn {
    async fn open(url: &Url) -> Result<WriterConn> {
        let client = connect(url).await?;
        // A dispatcher that stalls inside a batch must not hold the others up for long: its
        // session is ended, its transaction rolled back and the lock released.
        client
            .batch_execute(
                "SET idle_in_transaction_session_timeout = '15s'; SET lock_timeout = '30s'",
            )
            .await
            .with_context(|| format!("setting up the ledger connection to {url}"))?;
        let lock = client.prepare("SELECT pg_advisory_xact_lock($1)").await?;
        let synchronous: String = client
            .query_one("SHOW synchronous_commit", &[])
            .await?
            .get(0);
        // The last link and, unless the tree's size is still the writer's (`$1`), the rows its
        // right edge lies in (`tlog`: the row of receipt `(size >> l) << l` for each bit `l`
        // set in the size, the last receipt's among them), in one statement: a writer that
        // another dispatcher overtook reloads its edge from them.
        let last = client
            .prepare(
                "SELECT r.seq, r.hash, r.nodes
                 FROM (SELECT max(seq) AS m FROM receipts) AS last
                 CROSS JOIN generate_series(0, 62) AS l
                 JOIN receipts r ON r.seq = (last.m >> l) << l
                 WHERE (last.m >> l) & 1 = 1 AND (last.m <> $1 OR (last.m >> l) << l = last.m)",
            )
            .await?;
        // The batch's receipts with the tree nodes each completes, in one statement.
        let insert = client
            .prepare(
                "INSERT INTO receipts (seq, id, body, prev_hash, hash, root, repairs, nodes)
                 SELECT * FROM UNNEST($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[],
                                      $6::text[], $7::text[], $8::bytea[])",
            )
            .await?;
        let put_nodes = client
            .prepare(
                "UPDATE receipts SET nodes = u.nodes
                 FROM UNNEST($1::int8[], $2::bytea[]) AS u(seq, nodes)
                 WHERE receipts.seq = u.seq",
            )
            .await?;
        let mut conn = WriterConn {
            client,
            lock,
            last,
            insert,
            put_nodes,
            frontier: None,
            synchronous,
        };
        conn.catch_up().await.with_context(|| {
            format!("making the Merkle tree of the receipts in {url} that keep none yet")
        })?;
        Ok(conn)
    }

    /// Before the first batch: the tree made for every receipt that keeps no nodes yet (a
    /// ledger migrated from before they did), under the append lock, and its right edge held.
    /// So the tree's size is the chain's from the start, and no receipt is left without nodes
    /// below rows that have them.
    async fn catch_up(&mut self) -> Result<()> {
        let c = &self.client;
        c.batch_execute("BEGIN").await?;
        c.execute(&self.lock, &[&APPEND_LOCK]).await?;
        let last: Option<i64> = c
            .query_one("SELECT max(seq) FROM receipts", &[])
            .await?
            .get(0);
        let frontier = self.frontier_at(last.unwrap_or(0) as u64).await?;
        self.client.batch_execute("COMMIT").await?;
        self.frontier = Some(frontier);
        Ok(())
    }

    /// The tree's right edge for the first `size` receipts, inside the batch's transaction
    /// (the append lock held), from the rows it lies in, after catching up the receipts that
    /// keep no nodes yet (a ledger made before they did).
    async fn frontier_at(&self, size: u64) -> Result<Frontier> {
        let c = &self.client;
        let made = tree_size(c).await?;
        let coordinates = Frontier::coordinates(made);
        let mut frontier =
            Frontier::load(made, &read_nodes(c, &coordinates).await?).ok_or_else(|| {
                anyhow::anyhow!("the ledger lacks the tree's right edge at {made} receipts")
            })?;
        if made < size {
            // Hashing a long history between statements is not a stalled session.
            c.batch_execute("SET LOCAL idle_in_transaction_session_timeout = 0")
                .await?;
            let rows = c
                .query(
                    "SELECT seq, hash FROM receipts WHERE seq > $1 ORDER BY seq",
                    &[&(made as i64)],
                )
                .await?;
            let (mut seqs, mut nodes) = (Vec::new(), Vec::new());
            for r in &rows {
                let seq: i64 = r.get(0);
                if seq as u64 != frontier.size() + 1 {
                    bail!("the ledger's receipts are not numbered 1 to {size}");
                }
                seqs.push(seq);
                nodes.push(tlog::row_nodes(&frontier.push(tlog::leaf(r.get(1))?)));
            }
            if frontier.size() != size {
                bail!("the ledger's receipts are not numbered 1 to {size}");
            }
            for (seqs, nodes) in seqs.chunks(10_000).zip(nodes.chunks(10_000)) {
                c.execute(&self.put_nodes, &[&seqs, &nodes]).await?;
            }
            tracing::info!(receipts = size, "the receipt log's Merkle tree caught up");
        }
        Ok(frontier)
    }

    /// One batch in one transaction: lock, read the last link (and the tree's right edge),
    /// insert, commit. The statements
    /// are pipelined (sent without waiting for the previous answer; the server still runs them
    /// one after another), so a batch costs two round trips: BEGIN, lock and read; then insert
    /// and COMMIT. The read's snapshot is taken when it starts, after the lock is held. When
    /// anything fails the caller drops the connection, and the server rolls back; a COMMIT
    /// after a failed insert only ends the aborted transaction, and the insert's error counts.
    async fn commit(&mut self, jobs: &[Job]) -> Result<Vec<Link>> {
        let c = &self.client;
        let held = self.frontier.as_ref().map_or(-1, |f| f.size() as i64);
        let held: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&held];
        let (begun, locked, last) = tokio::join!(
            c.batch_execute("BEGIN"),
            c.execute(&self.lock, &[&APPEND_LOCK]),
            c.query(&self.last, &held),
        );
        begun?;
        locked?;
        let edge_rows = last?;
        let last = edge_rows
            .iter()
            .max_by_key(|r| r.get::<_, i64>(0))
            .map_or_else(
                || (0, super::GENESIS.to_string()),
                |r| (r.get::<_, i64>(0), r.get::<_, String>(1)),
            );
        let size = last.0 as u64;
        let mut edge = match self.frontier.take() {
            Some(f) if f.size() == size => f,
            // Another dispatcher appended since: the right edge from the rows read with the
            // last link (or, for receipts that keep no nodes yet, caught up).
            _ => {
                let rows: tlog::Rows = edge_rows
                    .iter()
                    .map(|r| (r.get(0), (r.get(1), r.get(2))))
                    .collect();
                let coordinates = Frontier::coordinates(size);
                match Frontier::load(size, &tlog::pick(&coordinates, &rows)?) {
                    Some(f) => f,
                    None => self.frontier_at(size).await?,
                }
            }
        };
        let links = link(last, jobs);
        let mut nodes = Vec::with_capacity(links.len());
        for (_, _, hash) in &links {
            nodes.push(tlog::row_nodes(&edge.push(tlog::leaf(hash)?)));
        }
        let seqs: Vec<i64> = links.iter().map(|l| l.0).collect();
        let ids: Vec<&str> = entries(jobs).map(|e| e.draft.id.as_str()).collect();
        let bodies: Vec<&str> = entries(jobs).map(|e| e.body.as_str()).collect();
        let prevs: Vec<&str> = links.iter().map(|l| l.1.as_str()).collect();
        let hashes: Vec<&str> = links.iter().map(|l| l.2.as_str()).collect();
        let roots: Vec<Option<&str>> = entries(jobs).map(|e| e.draft.root.as_deref()).collect();
        let repairs: Vec<Option<&str>> =
            entries(jobs).map(|e| e.draft.repairs.as_deref()).collect();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &seqs, &ids, &bodies, &prevs, &hashes, &roots, &repairs, &nodes,
        ];
        let (inserted, committed) =
            tokio::join!(c.execute(&self.insert, &params), c.batch_execute("COMMIT"));
        let inserted = inserted?;
        committed?;
        if inserted != links.len() as u64 {
            bail!("{inserted} of {} receipts were inserted", links.len());
        }
        self.frontier = Some(edge);
        Ok(links)
    }
}

/// How many leaves the stored tree has: the receipts up to the first that keeps no nodes yet.
async fn tree_size(c: &Client) -> Result<u64> {
    let row = c
        .query_one(
            "SELECT coalesce((SELECT min(seq) - 1 FROM receipts WHERE nodes IS NULL),
                             (SELECT max(seq) FROM receipts), 0)",
            &[],
        )
        .await?;
    Ok(row.get::<_, i64>(0) as u64)
}

/// The stored tree nodes at these coordinates, from the rows that keep them, in one query.
async fn read_nodes(c: &Client, wanted: &[(u32, u64)]) -> Result<tlog::Nodes> {
    let rows = c
        .query(
            "SELECT seq, hash, nodes FROM receipts WHERE seq = ANY($1::int8[])",
            &[&tlog::rows_for(wanted)],
        )
        .await?;
    let rows: tlog::Rows = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    tlog::pick(wanted, &rows)
}

async fn writer(
    url: Url,
    mut conn: Option<WriterConn>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    stats: Arc<Stats>,
) {
    while let Some(first) = rx.recv().await {
        let jobs = batch(first, &mut rx);
        let started = Instant::now();
        let result = async {
            if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
                conn = Some(WriterConn::open(&url).await?);
            }
            match conn.as_mut() {
                Some(c) => c.commit(&jobs).await,
                None => bail!("no ledger connection"),
            }
        }
        .await
        .with_context(|| format!("committing {} receipts to {url}", entries(&jobs).count()));
        if result.is_err() {
            // Whatever state the connection is in, the next batch starts on a fresh one; the
            // dropped connection's transaction is rolled back by the server.
            conn = None;
        }
        stats.add(started.elapsed());
        answer_all(jobs, result);
    }
}

impl Ledger for PgLedger {
    fn append_all(&self, drafts: Vec<Draft>) -> BoxFuture<'static, Result<Vec<Receipt>>> {
        queue(&self.jobs, drafts)
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Receipt>>> {
        Box::pin(self.reader.get(id))
    }

    fn tree<'a>(&'a self, root: &'a str) -> BoxFuture<'a, Result<Vec<Receipt>>> {
        Box::pin(self.reader.tree(root))
    }

    fn repaired_by<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.reader.repaired_by(id))
    }

    fn verify(&self) -> BoxFuture<'_, Result<Verdict>> {
        Box::pin(self.reader.verify())
    }

    fn commit_stats(&self) -> (u64, f64) {
        self.stats.read()
    }

    fn durability(&self) -> Option<String> {
        self.stats.durability.get().cloned()
    }

    fn tree_size(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            let conn = self.reader.conn().await?;
            tree_size(&conn.client)
                .await
                .with_context(|| format!("reading the tree's size from {}", self.reader.url))
        })
    }

    fn tree_nodes<'a>(&'a self, wanted: &'a [(u32, u64)]) -> BoxFuture<'a, Result<tlog::Nodes>> {
        Box::pin(async move {
            let conn = self.reader.conn().await?;
            read_nodes(&conn.client, wanted)
                .await
                .with_context(|| format!("reading tree nodes from {}", self.reader.url))
        })
    }

    fn record_checkpoint<'a>(&'a self, size: u64, note: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.reader
                .query(
                    "INSERT INTO checkpoints (size, note, issued_at) VALUES ($1, $2, $3)
                     ON CONFLICT (size) DO NOTHING",
                    &[&(size as i64), &note, &now_rfc3339()],
                )
                .await
                .with_context(|| format!("keeping a checkpoint in {}", self.reader.url))?;
            Ok(())
        })
    }

    fn checkpoint(&self, size: Option<u64>) -> BoxFuture<'_, Result<Option<(u64, String)>>> {
        Box::pin(async move {
            let size = size.map(|s| s as i64);
            let rows = self
                .reader
                .query(
                    "SELECT size, note FROM checkpoints
                     WHERE $1::int8 IS NULL OR size = $1 ORDER BY size DESC LIMIT 1",
                    &[&size],
                )
                .await
                .with_context(|| format!("reading checkpoints from {}", self.reader.url))?;
            Ok(rows.first().map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
        })
    }

    fn record_token<'a>(&'a self, claims: &'a Claims) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let json = serde_json::to_string(claims)?;
            self.reader
                .query(
                    "INSERT INTO tokens (id, claims, minted_at) VALUES ($1, $2, $3)
                     ON CONFLICT (id) DO UPDATE SET
                       claims = coalesce(tokens.claims, excluded.claims),
                       minted_at = coalesce(tokens.minted_at, excluded.minted_at)",
                    &[&claims.id, &json, &now_rfc3339()],
                )
                .await
                .with_context(|| format!("recording token {} in {}", claims.id, self.reader.url))?;
            Ok(())
        })
    }

    fn revoke<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            // RETURNING answers a row only when this statement inserted or changed one.
            let rows = self
                .reader
                .query(
                    "INSERT INTO tokens (id, revoked_at) VALUES ($1, $2)
                     ON CONFLICT (id) DO UPDATE SET revoked_at = excluded.revoked_at
                     WHERE tokens.revoked_at IS NULL
                     RETURNING id",
                    &[&id, &now_rfc3339()],
                )
                .await
                .with_context(|| format!("revoking token {id} in {}", self.reader.url))?;
            Ok(rows.len() == 1)
        })
    }

    fn is_revoked<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let rows = self
                .reader
                .query(
                    "SELECT 1 FROM tokens WHERE id = $1 AND revoked_at IS NOT NULL",
                    &[&id],
                )
                .await
                .with_context(|| format!("reading revocations from {}", self.reader.url))?;
            Ok(!rows.is_empty())
        })
    }

    fn tokens(&self) -> BoxFuture<'_, Result<Vec<TokenEntry>>> {
        Box::pin(async move {
            let rows = self
                .reader
                .query(
                    "SELECT id, claims, minted_at, revoked_at FROM tokens ORDER BY n",
                    &[],
                )
                .await
                .with_context(|| format!("reading tokens from {}", self.reader.url))?;
            rows.iter()
                .map(|r| token_entry(r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect()
        })
    }

    fn queue_approval<'a>(&'a self, pending: &'a Pending) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let request = serde_json::to_string(pending)?;
            self.reader
                .query(
                    "INSERT INTO approvals (id, request, state, expires_at) VALUES ($1, $2, $3, $4)",
                    &[&pending.id, &request, &watch::PENDING, &pending.expires_at],
                )
                .await
                .with_context(|| format!("queueing approval {} in {}", pending.id, self.reader.url))?;
            Ok(())
        })
    }

    fn approval<'a>(&'a self, id: &'a str, now: i64) -> BoxFuture<'a, Result<Option<Approval>>> {
        Box::pin(async move {
            let rows = self
                .reader
                .query(
                    "SELECT request, state, decision, result FROM approvals WHERE id = $1",
                    &[&id],
                )
                .await
                .with_context(|| format!("reading approval {id} from {}", self.reader.url))?;
            rows.first().map(|r| approval_row(r, now)).transpose()
        })
    }

    fn pending_approvals(&self, now: i64) -> BoxFuture<'_, Result<Vec<Approval>>> {
        Box::pin(async move {
            let rows = self
                .reader
                .query(
                    "SELECT request, state, decision, result FROM approvals
                     WHERE state = 'pending' AND expires_at > $1 ORDER BY n LIMIT 1000",
                    &[&now],
                )
                .await
                .with_context(|| format!("reading approvals from {}", self.reader.url))?;
            rows.iter().map(|r| approval_row(r, now)).collect()
        })
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        decision: &'a Decision,
        now: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let json = serde_json::to_string(decision)?;
            let rows = self
                .reader
                .query(
                    "UPDATE approvals SET state = $2, decision = $3
                     WHERE id = $1 AND state = 'pending' AND expires_at > $4
                     RETURNING id",
                    &[&id, &decision.state, &json, &now],
                )
                .await
                .with_context(|| format!("deciding approval {id} in {}", self.reader.url))?;
            Ok(rows.len() == 1)
        })
    }

    fn record_result<'a>(
        &'a self,
        id: &'a str,
        result: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let text = result.to_string();
            self.reader
                .query(
                    "UPDATE approvals SET result = $2 WHERE id = $1 AND result IS NULL",
                    &[&id, &text],
                )
                .await
                .with_context(|| format!("recording the run of approval {id}"))?;
            Ok(())
        })
    }

    fn charge<'a>(
        &'a self,
        token: &'a str,
        counters: &'a [Counter],
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(usize, u64)>>> {
        Box::pin(async move {
            // Every counter is added at once; when one is past its limit the additions are
            // taken back. Two dispatchers racing for the last call may then both be refused,
            // never both admitted.
            let counts = self.add_counters(token, counters, now).await?;
            let over = counters.iter().enumerate().find_map(|(i, c)| {
                let after = counts.get(&c.name).copied().unwrap_or(c.add);
                let before = after.saturating_sub(c.add);
                c.over(before).then_some((i, before))
            });
            if over.is_some() {
                let back: Vec<Counter> = counters.to_vec();
                self.subtract_counters(token, &back).await?;
            }
            Ok(over)
        })
    }

    fn add_to_counters<'a>(
        &'a self,
        token: &'a str,
        counters: &'a [Counter],
        now: i64,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.add_counters(token, counters, now).await?;
            Ok(())
        })
    }
}

impl PgLedger {
    /// Add to the counters in one statement; their counts after it, by name. A counter whose
    /// window ended starts again from what is added.
    async fn add_counters(
        &self,
        token: &str,
        counters: &[Counter],
        now: i64,
    ) -> Result<HashMap<String, u64>> {
        let names: Vec<&str> = counters.iter().map(|c| c.name.as_str()).collect();
        let adds: Vec<i64> = counters.iter().map(|c| c.add as i64).collect();
        let expires: Vec<i64> = counters.iter().map(|c| c.expires).collect();
        let rows = self
            .reader
            .query(
                "INSERT INTO counters (token, name, n, expires)
                 SELECT $1, * FROM UNNEST($2::text[], $3::int8[], $4::int8[])
                 ON CONFLICT (token, name) DO UPDATE SET
                   n = CASE WHEN counters.expires <= $5 THEN excluded.n
                            ELSE counters.n + excluded.n END,
                   expires = CASE WHEN counters.expires <= $5 THEN excluded.expires
                                  ELSE greatest(counters.expires, excluded.expires) END
                 RETURNING name, n",
                &[&token, &names, &adds, &expires, &now],
            )
            .await
            .with_context(|| format!("charging token {token}'s counters"))?;
        if self
            .charges
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(1024)
        {
            self.reader
                .query("DELETE FROM counters WHERE expires <= $1", &[&now])
                .await?;
        }
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    }

    async fn subtract_counters(&self, token: &str, counters: &[Counter]) -> Result<()> {
        let names: Vec<&str> = counters.iter().map(|c| c.name.as_str()).collect();
        let adds: Vec<i64> = counters.iter().map(|c| c.add as i64).collect();
        self.reader
            .query(
                "UPDATE counters SET n = greatest(counters.n - u.add, 0)
                 FROM UNNEST($2::text[], $3::int8[]) AS u(name, add)
                 WHERE counters.token = $1 AND counters.name = u.name",
                &[&token, &names, &adds],
            )
            .await
            .with_context(|| format!("taking back token {token}'s charge"))?;
        Ok(())
    }
}

fn approval_row(r: &Row, now: i64) -> Result<Approval> {
    let pending: Pending = serde_json::from_str(r.get::<_, &str>(0))?;
    Approval::read(pending, r.get(1), r.get(2), r.get(3), now)
}

/// A shared connection for reads (receipts, breakers), opened on first use, migrated once,
/// and opened again when it drops. Concurrent queries are pipelined on it.
pub struct Reader {
    url: Url,
    conn: Mutex<Option<Arc<ReadConn>>>,
    migrated: AtomicBool,
}

/// A read connection and the statements prepared on it, by their SQL.
struct ReadConn {
    client: Client,
    statements: std::sync::Mutex<HashMap<&'static str, Statement>>,
}

type Params<'a> = &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)];

impl Reader {
    /// A reader that connects on first use.
    pub fn new(url: Url) -> Reader {
        Reader {
            url,
            conn: Mutex::new(None),
            migrated: AtomicBool::new(false),
        }
    }

    /// A reader connected now (and the schema migrated), or the reason it cannot be.
    pub async fn connect(url: &Url) -> Result<Reader> {
        let reader = Reader::new(url.clone());
        reader.conn().await?;
        Ok(reader)
    }

    async fn conn(&self) -> Result<Arc<ReadConn>> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(c.clone());
        }
        let mut client = connect(&self.url).await?;
        if !self.migrated.load(Ordering::Acquire) {
            migrate(&mut client, &self.url).await?;
            self.migrated.store(true, Ordering::Release);
        }
        let conn = Arc::new(ReadConn {
            client,
            statements: std::sync::Mutex::new(HashMap::new()),
        });
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Run one statement, prepared once per connection.
    async fn query(&self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>> {
        let conn = self.conn().await?;
        let cached = conn
            .statements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sql)
            .cloned();
        let statement = match cached {
            Some(s) => s,
            None => {
                let s = conn.client.prepare(sql).await?;
                conn.statements
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(sql, s.clone());
                s
            }
        };
        Ok(conn.client.query(&statement, params).await?)
    }

    /// One receipt by id.
    pub async fn get(&self, id: &str) -> Result<Option<Receipt>> {
        let rows = self
            .query(
                "SELECT seq, body, prev_hash, hash FROM receipts WHERE id = $1",
                &[&id],
            )
            .await
            .with_context(|| format!("reading receipt {id} from {}", self.url))?;
        rows.first()
            .map(|r| row_to_receipt(r.get(0), r.get(1), r.get(2), r.get(3)))
            .transpose()
    }

    /// The receipts below the top-level call `root` (its steps, theirs…), in chain order.
    pub async fn tree(&self, root: &str) -> Result<Vec<Receipt>> {
        let rows = self
            .query(
                "SELECT seq, body, prev_hash, hash FROM receipts WHERE root = $1 ORDER BY seq",
                &[&root],
            )
            .await
            .with_context(|| format!("reading the receipts below {root} from {}", self.url))?;
        rows.iter()
            .map(|r| row_to_receipt(r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    }

    /// The ids of the receipts that name `id` in `repairs`, in chain order.
    pub async fn repaired_by(&self, id: &str) -> Result<Vec<String>> {
        let rows = self
            .query(
                "SELECT id FROM receipts WHERE repairs = $1 ORDER BY seq",
                &[&id],
            )
            .await
            .with_context(|| format!("reading the repairs of {id} from {}", self.url))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Walk the chain in pages of `seq` order; stop at the first broken link.
    pub async fn verify(&self) -> Result<Verdict> {
        const PAGE: i64 = 5000;
        let mut walk = Walk::new();
        let mut after = 0i64;
        loop {
            let rows = self
                .query(
                    "SELECT seq, id, body, prev_hash, hash, nodes FROM receipts
                     WHERE seq > $1 ORDER BY seq LIMIT $2",
                    &[&after, &PAGE],
                )
                .await
                .with_context(|| format!("reading receipts from {}", self.url))?;
            for r in &rows {
                let seq: i64 = r.get(0);
                let nodes: Option<&[u8]> = r.get(5);
                if let Some(broken) =
                    walk.step(seq, r.get(1), r.get(2), r.get(3), r.get(4), nodes)?
                {
                    return Ok(broken);
                }
                after = seq;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(walk.finish());
            }
        }
    }
}

/// Breaker state in the ledger database: every dispatcher counts the same rejections.
pub struct PgBreakerStore {
    reader: Reader,
}

impl PgBreakerStore {
    /// Connects on first use, so commands that never send a credential never connect.
    pub fn new(url: Url) -> PgBreakerStore {
        PgBreakerStore {
            reader: Reader::new(url),
        }
    }

    async fn query(&self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>, String> {
        self.reader
            .query(sql, params)
            .await
            .map_err(|e| format!("breaker state in {}: {e:#}", self.reader.url))
    }
}

fn state(row: &Row, at: usize) -> BreakerState {
    let failures: i32 = row.get(at);
    let open_until: Option<i64> = row.get(at + 1);
    BreakerState {
        failures: failures.max(0) as u32,
        open_until: open_until.and_then(|s| Utc.timestamp_opt(s, 0).single()),
    }
}

impl BreakerStore for PgBreakerStore {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BreakerState, String>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT failures, open_until FROM breakers WHERE name = $1",
                    &[&name],
                )
                .await?;
            Ok(rows.first().map(|r| state(r, 0)).unwrap_or_default())
        })
    }

    fn record_rejection<'a>(
        &'a self,
        name: &'a str,
        threshold: u32,
        until: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<BreakerState, String>> {
        Box::pin(async move {
            let threshold = i32::try_from(threshold).unwrap_or(i32::MAX);
            // One statement, so concurrent dispatchers cannot lose a count.
            let rows = self
                .query(
                    "INSERT INTO breakers AS b (name, failures, open_until)
                     VALUES ($1, 1, CASE WHEN $2::int4 <= 1 THEN $3::int8 END)
                     ON CONFLICT (name) DO UPDATE SET
                       failures = b.failures + 1,
                       open_until = CASE WHEN b.failures + 1 >= $2::int4 THEN $3::int8
                                         ELSE b.open_until END
                     RETURNING failures, open_until",
                    &[&name, &threshold, &until.timestamp()],
                )
                .await?;
            rows.first()
                .map(|r| state(r, 0))
                .ok_or_else(|| "breaker state: the update returned nothing".to_string())
        })
    }

    fn clear<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.query("DELETE FROM breakers WHERE name = $1", &[&name])
                .await
                .map(|_| ())
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, BreakerState)>, String>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT name, failures, open_until FROM breakers ORDER BY name",
                    &[],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), state(r, 1))).collect())
        })
    }
}
