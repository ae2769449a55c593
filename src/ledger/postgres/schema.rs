//! The ledger's tables, as migrations applied in order at start, each once and recorded in
//! `capdir_migrations`.

use super::Url;
use anyhow::{Context as _, Result, bail};
use tokio_postgres::Client;

/// The advisory lock migrations run under, so dispatchers starting together migrate once.
const MIGRATE_LOCK: i64 = 0x6361_7064_6972_0002;

/// Schema changes in order; each runs once, in one transaction with its record.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "receipts and breakers",
        "CREATE TABLE receipts (
       seq BIGINT PRIMARY KEY,
       id TEXT NOT NULL UNIQUE,
       body TEXT NOT NULL,
       prev_hash TEXT NOT NULL UNIQUE,
       hash TEXT NOT NULL,
       committed_at TIMESTAMPTZ NOT NULL DEFAULT now()
     );
     CREATE TABLE breakers (
       name TEXT PRIMARY KEY,
       failures INTEGER NOT NULL,
       open_until BIGINT
     );",
    ),
    (
        2,
        "capability tokens: minted claims and revocations",
        "CREATE TABLE tokens (
           n BIGSERIAL PRIMARY KEY,
           id TEXT NOT NULL UNIQUE,
           claims TEXT,
           minted_at TEXT,
           revoked_at TEXT
         );",
    ),
    (
        3,
        "receipt trees and repairs: the receipts below a call, and the ones that repaired it",
        "ALTER TABLE receipts ADD COLUMN root TEXT, ADD COLUMN repairs TEXT;
         CREATE INDEX receipts_root ON receipts (root) WHERE root IS NOT NULL;
         CREATE INDEX receipts_repairs ON receipts (repairs) WHERE repairs IS NOT NULL;",
    ),
    (
        4,
        "the watcher: calls waiting for a person's approval, and tokens' counters",
        "CREATE TABLE approvals (
           n BIGSERIAL PRIMARY KEY,
           id TEXT NOT NULL UNIQUE,
           request TEXT NOT NULL,
           state TEXT NOT NULL,
           expires_at BIGINT NOT NULL,
           decision TEXT,
           result TEXT
         );
         CREATE INDEX approvals_pending ON approvals (n) WHERE state = 'pending';
         CREATE TABLE counters (
           token TEXT NOT NULL,
           name TEXT NOT NULL,
           n BIGINT NOT NULL,
           expires BIGINT NOT NULL,
           PRIMARY KEY (token, name)
         );",
    ),
    (
        5,
        "the receipt log's Merkle tree and its signed checkpoints",
        "CREATE TABLE merkle (
           level INTEGER NOT NULL,
           idx BIGINT NOT NULL,
           hash BYTEA NOT NULL,
           PRIMARY KEY (level, idx)
         );
         CREATE TABLE checkpoints (
           size BIGINT PRIMARY KEY,
           note TEXT NOT NULL,
           issued_at TEXT NOT NULL
         );
         CREATE TABLE merkle_edge (
           id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
           size BIGINT NOT NULL,
           edge BYTEA NOT NULL
         );",
    ),
    (
        6,
        "the Merkle tree's nodes kept in the rows of the receipts that complete them",
        // The nodes are the receipts' to make again: the writer catches the tree up.
        "ALTER TABLE receipts ADD COLUMN nodes BYTEA;
         CREATE INDEX receipts_untreed ON receipts (seq) WHERE nodes IS NULL;
         DROP TABLE merkle;
         DROP TABLE merkle_edge;",
    ),
];

/// Apply the migrations this capdir knows and the database lacks.
pub(super) async fn migrate(client: &mut Client, url: &Url) -> Result<()> {
    let context = || format!("migrating the ledger database {url}");
    let tx = client.transaction().await.with_context(context)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
        .await
        .with_context(context)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS capdir_migrations (
           version INTEGER PRIMARY KEY,
           name TEXT NOT NULL,
           applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await
    .with_context(context)?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM capdir_migrations", &[])
        .await
        .with_context(context)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if let Some(newer) = applied.iter().copied().filter(|v| *v > known).max() {
        bail!(
            "the ledger database {url} is at schema version {newer}, newer than this capdir \
             knows ({known}): upgrade this dispatcher"
        );
    }
    for &(version, name, sql) in MIGRATIONS {
        if applied.contains(&version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .with_context(|| format!("applying ledger migration {version} ({name})"))?;
        tx.execute(
            "INSERT INTO capdir_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )
        .await
        .with_context(context)?;
        tracing::info!(version, name, "ledger migration applied");
    }
    tx.commit().await.with_context(context)?;
    Ok(())
}
