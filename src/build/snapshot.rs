//! The snapshot: `site/catalogue.sqlite`, the catalogue as one SQLite file that the dispatcher,
//! `invoke --site` and anyone with `sqlite3` can read. Table `directory` keeps the column
//! names of the reference design; `row_history`, `tombstones` and `build` sit beside it.

use crate::build::contract::Tombstone;
use crate::build::history::History;
use crate::row::call::fingerprint;
use crate::row::{Row, RowType, Spans, split_content};
use anyhow::{Context as _, Result};
use rusqlite::{Connection, params};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One of the four counts, with the predicate that defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Count {
    pub value: usize,
    pub predicate: String,
}

/// The four counts of DESIGN.md §6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Counts {
    pub rows: Count,
    pub enabled: Count,
    pub registry: Count,
    pub mcp: Count,
}

impl Counts {
    pub fn of(rows: &[Row]) -> Counts {
        let count = |f: &dyn Fn(&Row) -> bool, p: &str| Count {
            value: rows.iter().filter(|r| f(r)).count(),
            predicate: p.to_string(),
        };
        Counts {
            rows: count(&|_| true, "every row in the catalogue"),
            enabled: count(&|r| r.enabled, "enabled"),
            registry: count(
                &|r| r.enabled && !r.is_test_shaped(),
                "enabled and not test-shaped (keys ZZ_*, TEST_*, *_TEST)",
            ),
            mcp: count(
                &|r| r.enabled && r.planner_visible,
                "enabled and planner_visible",
            ),
        }
    }
}

/// What a build was made from.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct BuildInfo {
    /// The catalogue commit (empty outside Git).
    pub commit: String,
    /// The commit's time: builds never read the clock.
    pub date: String,
    pub capdir_version: String,
    pub history_partial: bool,
    pub counts: Counts,
}

const SCHEMA: &str = "
CREATE TABLE directory (
  key TEXT PRIMARY KEY NOT NULL,
  type TEXT NOT NULL,
  target TEXT NOT NULL,
  auth TEXT NOT NULL,
  content TEXT NOT NULL,
  category TEXT NOT NULL,
  allowed_categories TEXT NOT NULL,
  seq INTEGER,
  enabled INTEGER NOT NULL,
  planner_visible INTEGER NOT NULL,
  planner_rank INTEGER NOT NULL,
  input_schema TEXT,
  examples TEXT NOT NULL,
  sensitive INTEGER NOT NULL,
  runner TEXT NOT NULL,
  includes TEXT NOT NULL,
  created_at TEXT,
  updated_at TEXT,
  asks TEXT NOT NULL,
  path TEXT NOT NULL,
  contract_hash TEXT NOT NULL,
  route_reply INTEGER NOT NULL
);
CREATE INDEX directory_category ON directory(category, key);
CREATE TABLE row_history (
  key TEXT NOT NULL, seq INTEGER NOT NULL, sha TEXT NOT NULL, kind TEXT NOT NULL,
  author TEXT NOT NULL, date TEXT NOT NULL, subject TEXT NOT NULL,
  PRIMARY KEY (key, seq)
);
CREATE TABLE tombstones (
  key TEXT PRIMARY KEY NOT NULL, removed_at TEXT NOT NULL, removed_by TEXT NOT NULL,
  subject TEXT NOT NULL, replaced_by TEXT
);
CREATE TABLE build (
  commit_sha TEXT NOT NULL, built_at TEXT NOT NULL, capdir_version TEXT NOT NULL,
  history_partial INTEGER NOT NULL,
  rows INTEGER NOT NULL, enabled INTEGER NOT NULL, registry INTEGER NOT NULL, mcp INTEGER NOT NULL,
  counts_json TEXT NOT NULL
);
";

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

/// Write the snapshot at `path` (which must not exist) in one transaction.
pub fn write(
    path: &Path,
    rows: &[Row],
    history: &History,
    tombstones: &[Tombstone],
    info: &BuildInfo,
    prints: &HashMap<String, String>,
) -> Result<()> {
    let mut db = Connection::open(path).with_context(|| format!("creating {}", path.display()))?;
    db.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")?;
    let tx = db.transaction()?;
    tx.execute_batch(SCHEMA)?;
    {
        let mut ins = tx.prepare(
            "INSERT INTO directory VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22)",
        )?;
        let mut hist = tx.prepare("INSERT INTO row_history VALUES (?1,?2,?3,?4,?5,?6,?7)")?;
        for r in rows {
            let file = r.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            ins.execute(params![
                r.key,
                r.kind.as_str(),
                r.target,
                r.auth,
                r.content,
                r.category,
                json_list(&r.allowed_categories),
                r.seq,
                r.enabled,
                r.planner_visible,
                r.planner_rank,
                r.input_schema.as_ref().map(|s| s.to_string()),
                json_list(&r.examples),
                r.sensitive,
                r.runner,
                json_list(&r.includes),
                history.created_at(file),
                history.updated_at(file),
                json_list(&r.asks),
                r.path.to_string_lossy(),
                prints
                    .get(&r.key)
                    .cloned()
                    .unwrap_or_else(|| fingerprint(r)),
                r.route_reply,
            ])?;
            for (i, c) in history.of(file).iter().enumerate() {
                hist.execute(params![
                    r.key,
                    i as i64,
                    c.commit.sha,
                    c.kind.as_str(),
                    c.commit.author,
                    c.commit.date,
                    c.commit.subject
                ])?;
            }
        }
        let mut tomb = tx.prepare("INSERT INTO tombstones VALUES (?1,?2,?3,?4,?5)")?;
        for t in tombstones {
            tomb.execute(params![
                t.key,
                t.removed_at,
                t.removed_by,
                t.removed_subject,
                t.replaced_by
            ])?;
        }
        let c = &info.counts;
        tx.execute(
            "INSERT INTO build VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
            params![
                info.commit,
                info.date,
                info.capdir_version,
                info.history_partial,
                c.rows.value as i64,
                c.enabled.value as i64,
                c.registry.value as i64,
                c.mcp.value as i64,
                serde_json::to_string(c)?
            ],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// What `open` reads back: the rows (enabled or not), tombstones and the build's facts.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub rows: Vec<Row>,
    pub tombstones: Vec<(String, Option<String>)>,
    pub info: BuildInfo,
}

fn list(text: String) -> Vec<String> {
    serde_json::from_str(&text).unwrap_or_default()
}

/// Read a snapshot back into rows, for the dispatcher and `invoke --site`.
pub fn open(path: &Path) -> Result<Snapshot> {
    let db = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening snapshot {}", path.display()))?;
    let mut stmt = db.prepare(
        "SELECT key, type, target, auth, content, category, allowed_categories, seq, enabled,
                planner_visible, planner_rank, input_schema, examples, sensitive, runner, includes,
                asks, path, route_reply FROM directory ORDER BY key",
    )?;
    let rows = stmt
        .query_map([], |r| {
            let kind: String = r.get(1)?;
            let content: String = r.get(4)?;
            let schema: Option<String> = r.get(11)?;
            let path: String = r.get(17)?;
            Ok(Row {
                key: r.get(0)?,
                kind: RowType::parse(&kind).unwrap_or(RowType::Fn),
                target: r.get(2)?,
                auth: r.get(3)?,
                parsed: split_content(&content),
                content,
                category: r.get(5)?,
                allowed_categories: list(r.get(6)?),
                seq: r.get(7)?,
                enabled: r.get(8)?,
                planner_visible: r.get(9)?,
                planner_rank: r.get(10)?,
                input_schema: schema.and_then(|s| serde_json::from_str(&s).ok()),
                examples: list(r.get(12)?),
                sensitive: r.get(13)?,
                runner: r.get(14)?,
                includes: list(r.get(15)?),
                asks: list(r.get(16)?),
                route_reply: r.get(18)?,
                path: PathBuf::from(path),
                spans: Spans::default(),
            })
        })?
        .collect::<rusqlite::Result<Vec<Row>>>()?;
    let tombstones = db
        .prepare("SELECT key, replaced_by FROM tombstones ORDER BY key")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let info = db.query_row(
        "SELECT commit_sha, built_at, capdir_version, history_partial, counts_json FROM build",
        [],
        |r| {
            let counts: String = r.get(4)?;
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, counts))
        },
    )?;
    let info = BuildInfo {
        commit: info.0,
        date: info.1,
        capdir_version: info.2,
        history_partial: info.3,
        counts: serde_json::from_str(&info.4).context("reading build counts")?,
    };
    Ok(Snapshot {
        rows,
        tombstones,
        info,
    })
}
