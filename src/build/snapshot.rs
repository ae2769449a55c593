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
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Counts {
        let rows: Vec<&Row> = rows.into_iter().collect();
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
    for r in rows {
        insert_row(&tx, r, history, prints)?;
    }
    for t in tombstones {
        insert_tombstone(&tx, t)?;
    }
    insert_build(&tx, info)?;
    tx.commit()?;
    Ok(())
}

/// A row's `directory` values besides its dates and fingerprint, in column order: what a
/// rebuild compares to tell whether the row changed.
pub fn columns(r: &Row) -> Vec<rusqlite::types::Value> {
    use rusqlite::types::Value;
    let text = |s: &str| Value::Text(s.to_string());
    vec![
        text(&r.key),
        text(r.kind.as_str()),
        text(&r.target),
        text(&r.auth),
        text(&r.content),
        text(&r.category),
        text(&json_list(&r.allowed_categories)),
        r.seq.map_or(Value::Null, Value::Integer),
        Value::Integer(r.enabled.into()),
        Value::Integer(r.planner_visible.into()),
        Value::Integer(r.planner_rank),
        r.input_schema
            .as_ref()
            .map_or(Value::Null, |s| Value::Text(s.to_string())),
        text(&json_list(&r.examples)),
        Value::Integer(r.sensitive.into()),
        text(&r.runner),
        text(&json_list(&r.includes)),
        text(&json_list(&r.asks)),
        text(&r.path.to_string_lossy()),
        Value::Integer(r.route_reply.into()),
    ]
}

/// The columns a row is stored with, borrowed from it: every field of `Row` but those derived
/// from its file. [`same_columns`] compares them and [`column_digest`] hashes them. Every field
/// of `Row` is named in [`stored`], so a field added to rows must be placed here (and in
/// `columns`) or left out on purpose.
#[derive(PartialEq)]
struct Stored<'a> {
    key: &'a str,
    kind: RowType,
    target: &'a str,
    auth: &'a str,
    content: &'a str,
    category: &'a str,
    allowed_categories: &'a [String],
    seq: Option<i64>,
    enabled: bool,
    planner_visible: bool,
    planner_rank: i64,
    examples: &'a [String],
    sensitive: bool,
    runner: &'a str,
    includes: &'a [String],
    asks: &'a [String],
    route_reply: bool,
    path: &'a std::ffi::OsStr,
}

/// A row's stored columns, and its input schema (compared by its text, apart: a value
/// comparison would ignore the key order the snapshot keeps).
fn stored(row: &Row) -> (Stored<'_>, Option<&serde_json::Value>) {
    let Row {
        key,
        kind,
        target,
        auth,
        content,
        category,
        allowed_categories,
        seq,
        enabled,
        planner_visible,
        planner_rank,
        input_schema,
        examples,
        sensitive,
        runner,
        includes,
        asks,
        route_reply,
        path,
        // Derived from `content`, and where the fields sit in the file: not stored.
        parsed: _,
        spans: _,
    } = row;
    let columns = Stored {
        key,
        kind: *kind,
        target,
        auth,
        content,
        category,
        allowed_categories,
        seq: *seq,
        enabled: *enabled,
        planner_visible: *planner_visible,
        planner_rank: *planner_rank,
        examples,
        sensitive: *sensitive,
        runner,
        includes,
        asks,
        route_reply: *route_reply,
        path: path.as_os_str(),
    };
    (columns, input_schema.as_ref())
}

/// Whether `a` and `b` make the same directory row (equal [`columns`]), compared in place: a
/// rebuild compares every row of the catalogue with the snapshot's, and building the columns
/// of both (twenty values each, most of them copied strings) would copy every row twice.
pub fn same_columns(a: &Row, b: &Row) -> bool {
    let ((a, a_schema), (b, b_schema)) = (stored(a), stored(b));
    a == b
        && (a_schema.is_none() && b_schema.is_none()
            || a_schema.map(ToString::to_string) == b_schema.map(ToString::to_string))
}

/// The SHA-256 of the columns [`same_columns`] compares: two rows with the same columns have
/// the same digest. What `.checked` records of the row the snapshot holds for a clean file
/// (`build::checked`).
pub fn column_digest(row: &Row) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    let (c, schema) = stored(row);
    let mut h = Sha256::new();
    // Each value with its length first, so no two rows' fields run into the same bytes.
    let mut text = |s: &str| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    let texts = [c.key, c.kind.as_str(), c.target, c.auth, c.content];
    for s in texts.into_iter().chain([c.category, c.runner]) {
        text(s);
    }
    for list in [c.allowed_categories, c.examples, c.includes, c.asks] {
        text(&list.len().to_string());
        list.iter().for_each(|s| text(s));
    }
    text(&c.path.to_string_lossy());
    text(&schema.map_or_else(|| "-".into(), |v| format!("+{v}")));
    text(&format!(
        "{:?} {} {} {} {} {}",
        c.seq, c.enabled, c.planner_visible, c.planner_rank, c.sensitive, c.route_reply
    ));
    h.finalize().into()
}

/// One row and its history.
fn insert_row(
    tx: &rusqlite::Transaction,
    r: &Row,
    history: &History,
    prints: &HashMap<String, String>,
) -> Result<()> {
    let mut ins = tx.prepare_cached(
        "INSERT INTO directory (key, type, target, auth, content, category, allowed_categories,
           seq, enabled, planner_visible, planner_rank, input_schema, examples, sensitive, runner,
           includes, asks, path, route_reply, created_at, updated_at, contract_hash)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22)",
    )?;
    let file = r.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let mut values = columns(r);
    let text = |s: Option<&str>| s.map_or(rusqlite::types::Value::Null, |s| s.to_string().into());
    values.push(text(history.created_at(file)));
    values.push(text(history.updated_at(file)));
    values.push(
        prints
            .get(&r.key)
            .cloned()
            .unwrap_or_else(|| fingerprint(r))
            .into(),
    );
    ins.execute(rusqlite::params_from_iter(values))?;
    let mut hist = tx.prepare_cached("INSERT INTO row_history VALUES (?1,?2,?3,?4,?5,?6,?7)")?;
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
    Ok(())
}

fn insert_tombstone(tx: &rusqlite::Transaction, t: &Tombstone) -> Result<()> {
    tx.prepare_cached("INSERT INTO tombstones VALUES (?1,?2,?3,?4,?5)")?
        .execute(params![
            t.key,
            t.removed_at,
            t.removed_by,
            t.removed_subject,
            t.replaced_by
        ])?;
    Ok(())
}

fn insert_build(tx: &rusqlite::Transaction, info: &BuildInfo) -> Result<()> {
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
    Ok(())
}

/// What an incremental rebuild changes in a snapshot.
pub struct Update<'a> {
    /// Rows added or changed (their history too), or whose dates or history changed.
    pub rows: Vec<&'a Row>,
    /// Keys of rows no longer in the catalogue.
    pub removed: Vec<&'a str>,
    /// Rows whose fingerprint changed and nothing else (a row they compose changed).
    pub prints: Vec<(&'a str, &'a str)>,
    /// Tombstones made or unmade: each key's tombstone replaced by this one, or removed.
    pub tombstones: Vec<(&'a str, Option<&'a Tombstone>)>,
    pub info: &'a BuildInfo,
}

/// Change the snapshot at `path` in place, in one transaction: a reader (a dispatcher
/// reloading, `invoke --site`) sees it before or after, never halfway.
pub fn update(
    path: &Path,
    change: &Update,
    history: &History,
    prints: &HashMap<String, String>,
) -> Result<()> {
    let mut db = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    db.busy_timeout(std::time::Duration::from_secs(5))?;
    db.execute_batch("PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF;")?;
    let tx = db.transaction()?;
    {
        let mut gone = tx.prepare_cached("DELETE FROM directory WHERE key = ?1")?;
        let mut gone_history = tx.prepare_cached("DELETE FROM row_history WHERE key = ?1")?;
        let keys = change
            .rows
            .iter()
            .map(|r| r.key.as_str())
            .chain(change.removed.iter().copied());
        for key in keys {
            gone.execute([key])?;
            gone_history.execute([key])?;
        }
    }
    for r in &change.rows {
        insert_row(&tx, r, history, prints)?;
    }
    {
        let mut set =
            tx.prepare_cached("UPDATE directory SET contract_hash = ?2 WHERE key = ?1")?;
        for (key, print) in &change.prints {
            set.execute([key, print])?;
        }
        let mut gone = tx.prepare_cached("DELETE FROM tombstones WHERE key = ?1")?;
        for (key, tomb) in &change.tombstones {
            gone.execute([key])?;
            if let Some(t) = tomb {
                insert_tombstone(&tx, t)?;
            }
        }
    }
    tx.execute("DELETE FROM build", [])?;
    insert_build(&tx, change.info)?;
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
    // Most rows' lists are empty: no parser for those.
    if text == "[]" {
        return Vec::new();
    }
    serde_json::from_str(&text).unwrap_or_default()
}

/// The most rows [`open`] makes room for before reading them (a catalogue past it grows its
/// list as it reads).
const MAX_PRESIZED: usize = 1 << 20;

/// Read a snapshot back into rows, for the dispatcher and `invoke --site`.
pub fn open(path: &Path) -> Result<Snapshot> {
    let db = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening snapshot {}", path.display()))?;
    let mut stmt = db.prepare(
        "SELECT key, type, target, auth, content, category, allowed_categories, seq, enabled,
                planner_visible, planner_rank, input_schema, examples, sensitive, runner, includes,
                asks, path, route_reply FROM directory ORDER BY key",
    )?;
    // Room for every row at once: a growing list moved its rows (each some hundred bytes)
    // at every doubling, a sixth of the read at 10,000 rows. Up to a bound, so that a file
    // made to hold many tiny rows cannot ask for memory before any row is read.
    let count: i64 = db.query_row("SELECT count(*) FROM directory", [], |r| r.get(0))?;
    let mut rows = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(MAX_PRESIZED));
    for row in stmt.query_map([], |r| {
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
    })? {
        rows.push(row?);
    }
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

/// The snapshot's file name in the site.
pub const FILE: &str = "catalogue.sqlite";

/// What an incremental rebuild reads of the site it changes, besides the rows.
#[derive(Debug, Default)]
pub struct Built {
    /// Each enabled row's contract fingerprint.
    pub prints: HashMap<String, String>,
    /// Each row's commits, newest first.
    pub histories: crate::FastMap<String, Vec<String>>,
    /// Each tombstone's removing commit.
    pub removals: HashMap<String, String>,
}

/// Read what [`Built`] holds from the snapshot at `path`.
pub fn built(path: &Path) -> Result<Built> {
    let db = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening snapshot {}", path.display()))?;
    let prints = db
        .prepare("SELECT key, contract_hash FROM directory WHERE enabled")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<HashMap<String, String>>>()?;
    // The history of a row comes as a run of lines with its key: the key is taken once a
    // run, not once a line (a string made and hashed per commit of every row was a fifth of
    // this read at 10,000 rows).
    let mut histories: crate::FastMap<String, Vec<String>> = crate::FastMap::default();
    let mut stmt = db.prepare("SELECT key, sha FROM row_history ORDER BY key, seq")?;
    let mut rows = stmt.query([])?;
    let mut run: Option<(String, Vec<String>)> = None;
    let mut end_run = |run: Option<(String, Vec<String>)>| {
        if let Some((key, shas)) = run {
            histories.entry(key).or_default().extend(shas);
        }
    };
    while let Some(r) = rows.next()? {
        let key = r.get_ref(0)?.as_str()?;
        let sha: String = r.get(1)?;
        match &mut run {
            Some((k, shas)) if k == key => shas.push(sha),
            _ => end_run(run.replace((key.to_string(), vec![sha]))),
        }
    }
    end_run(run);
    let removals = db
        .prepare("SELECT key, removed_by FROM tombstones")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<HashMap<String, String>>>()?;
    Ok(Built {
        prints,
        histories,
        removals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256_row() -> Row {
        let path = Path::new("SHA256.yaml");
        let bytes = include_bytes!("../../catalogue/SHA256.yaml");
        crate::row::parse_row(path, bytes)
            .row
            .expect("the bundled row parses")
    }

    /// The row, then one copy per stored field with that field changed.
    fn variations() -> Vec<Row> {
        let base = sha256_row();
        let mut out = vec![base.clone()];
        let mut vary = |f: &dyn Fn(&mut Row)| {
            let mut r = base.clone();
            f(&mut r);
            out.push(r);
        };
        vary(&|r| r.key.push('X'));
        vary(&|r| r.kind = RowType::Http);
        vary(&|r| r.target.push('X'));
        vary(&|r| r.auth = "bearer:TOKEN".into());
        vary(&|r| r.content.push('X'));
        vary(&|r| r.category.push('X'));
        vary(&|r| r.allowed_categories.push("x".into()));
        vary(&|r| r.seq = Some(7));
        vary(&|r| r.enabled = !r.enabled);
        vary(&|r| r.planner_visible = !r.planner_visible);
        vary(&|r| r.planner_rank += 1);
        vary(&|r| r.input_schema = None);
        // The same schema with its keys in another order is stored as other text.
        vary(&|r| {
            let mut reordered = serde_json::Map::new();
            let schema = r.input_schema.as_ref().unwrap().as_object().unwrap();
            for (k, v) in schema.iter().rev() {
                reordered.insert(k.clone(), v.clone());
            }
            r.input_schema = Some(serde_json::Value::Object(reordered));
        });
        vary(&|r| r.examples.push("x".into()));
        vary(&|r| r.sensitive = !r.sensitive);
        vary(&|r| r.runner = "fn".into());
        vary(&|r| r.includes.push("X".into()));
        vary(&|r| r.asks.push("x".into()));
        vary(&|r| r.route_reply = !r.route_reply);
        vary(&|r| r.path = PathBuf::from("other/SHA256.yaml"));
        out
    }

    #[test]
    fn same_columns_says_what_comparing_the_columns_says() {
        let rows = variations();
        for (i, a) in rows.iter().enumerate() {
            for (j, b) in rows.iter().enumerate() {
                let by_columns = columns(a) == columns(b);
                assert_eq!(by_columns, i == j, "variations {i} and {j}");
                assert_eq!(same_columns(a, b), by_columns, "variations {i} and {j}");
            }
        }
        // What is not stored does not count.
        let mut moved = sha256_row();
        moved.spans = Default::default();
        assert!(same_columns(&sha256_row(), &moved));
    }
}
