//! The rows an invoker can call: checked once, indexed by key, shared cheaply between tasks.
//!
//! Invoking must not re-read or re-check files, and a flow's steps or an agent's includes are
//! looked up by key on every call, so the set is built once (from a catalogue directory now, from
//! a built site later) and everything a call needs that depends only on the row — its argument
//! schema compiled, its flow parsed, its target parsed, how many `$N` it needs — is prepared here.
//! Cloning a `RowSet` clones an `Arc`.

use crate::check;
use crate::row::args::ArgSchema;
use crate::row::call::needed_args;
use crate::row::catalogue;
use crate::row::credential::{Credential, CredentialError};
use crate::row::diag::{self, Format};
use crate::row::flow::{self, Flow, FlowError};
use crate::row::mcp::McpTarget;
use crate::row::target::{HttpTarget, TargetError};
use crate::row::{Row, RowType};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A row with what the runners need parsed once. Parse failures are kept, not dropped, so the
/// runner names them at call time (a set built with `from_rows` is not necessarily checked).
pub struct Callable {
    pub row: Row,
    /// The compiled `input_schema`, or why it could not be compiled.
    pub schema: Option<Result<ArgSchema, String>>,
    /// How many `$N` pieces a call must send: the highest slot over every template of the row.
    pub needed_args: usize,
    /// `flow` rows: the parsed steps.
    pub flow: Option<Result<Flow, FlowError>>,
    /// `http` rows: the parsed `METHOD url`.
    pub http_target: Option<Result<HttpTarget, TargetError>>,
    /// `runner: mcp` rows: the parsed server and tool.
    pub mcp_target: Option<Result<McpTarget, TargetError>>,
    /// The parsed `auth`.
    pub credential: Result<Option<Credential>, CredentialError>,
    /// The contract fingerprint (DESIGN.md §5), computed once: every receipt names it.
    pub fingerprint: String,
}

impl Callable {
    pub fn new(row: Row) -> Callable {
        let schema = row.input_schema.as_ref().map(ArgSchema::compile);
        let flow = (row.kind == RowType::Flow).then(|| flow::parse(row.payload()));
        let http_target =
            (row.kind == RowType::Http && !row.is_mcp()).then(|| HttpTarget::parse(&row.target));
        let mcp_target = row.is_mcp().then(|| McpTarget::parse(&row.target));
        let needed_args = needed_args(&row);
        let credential = Credential::parse(&row.auth);
        Callable {
            fingerprint: crate::row::call::fingerprint(&row),
            row,
            schema,
            needed_args,
            flow,
            http_target,
            mcp_target,
            credential,
        }
    }
}

impl std::fmt::Debug for Callable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callable")
            .field("key", &self.row.key)
            .field("needed_args", &self.needed_args)
            .finish_non_exhaustive()
    }
}

/// Why a catalogue could not be loaded for invoking.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read catalogue directory {dir}: {source}")]
    Read { dir: String, source: std::io::Error },
    /// `check` found errors; `report` is its rendered text, every diagnostic included.
    #[error("catalogue {dir} does not pass `capdir check`:\n{report}")]
    Check { dir: String, report: String },
}

/// An immutable set of rows indexed by key. Each row is held behind its own `Arc`, so a set
/// with a few rows changed ([`RowSet::with_changes`]) shares the others with this one.
#[derive(Clone, Default)]
pub struct RowSet {
    rows: Arc<HashMap<String, Arc<Callable>>>,
}

impl std::fmt::Debug for RowSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowSet")
            .field("rows", &self.rows.len())
            .finish()
    }
}

impl RowSet {
    /// Rows as given, unchecked (tests, and sources that were checked elsewhere). A later row
    /// with the same key replaces an earlier one.
    pub fn from_rows(rows: Vec<Row>) -> RowSet {
        let mut rows: HashMap<String, Callable> = rows
            .into_iter()
            .map(|r| (r.key.clone(), Callable::new(r)))
            .collect();
        // A row's fingerprint covers what it composes (a flow's steps, an agent's blocks).
        let prints = crate::row::call::fingerprints(rows.values().map(|c| &c.row));
        for (key, c) in rows.iter_mut() {
            if let Some(p) = prints.get(key) {
                c.fingerprint.clone_from(p);
            }
        }
        RowSet {
            rows: Arc::new(rows.into_iter().map(|(k, c)| (k, Arc::new(c))).collect()),
        }
    }

    /// This set with `upserts` added or replacing the rows of their keys and `removed` gone;
    /// every other row is shared, not prepared again. `prints` are the new fingerprints of
    /// the rows whose fingerprint changed (an incremental rebuild computes them: the rows
    /// changed and those composing them, `row::call::dependents`); a row it does not name
    /// keeps its fingerprint.
    pub fn with_changes(
        &self,
        upserts: Vec<Row>,
        removed: &[String],
        prints: &HashMap<String, String>,
    ) -> RowSet {
        let mut rows = (*self.rows).clone();
        for key in removed {
            rows.remove(key);
        }
        for row in upserts {
            let mut fresh = Callable::new(row);
            if let Some(p) = prints.get(&fresh.row.key) {
                fresh.fingerprint.clone_from(p);
            }
            rows.insert(fresh.row.key.clone(), Arc::new(fresh));
        }
        for (key, print) in prints {
            if let Some(c) = rows.get_mut(key)
                && c.fingerprint != *print
            {
                let mut fresh = Callable::new(c.row.clone());
                fresh.fingerprint.clone_from(print);
                *c = Arc::new(fresh);
            }
        }
        RowSet {
            rows: Arc::new(rows),
        }
    }

    /// Read and check a catalogue directory; refuse it when `check` reports any error.
    pub fn from_dir(dir: &Path) -> Result<RowSet, LoadError> {
        let files = catalogue::read_dir(dir).map_err(|source| LoadError::Read {
            dir: dir.display().to_string(),
            source,
        })?;
        let checked = check::check_files(&files);
        if checked.has_errors() {
            return Err(LoadError::Check {
                dir: dir.display().to_string(),
                report: diag::render(&checked.diags, checked.files, Format::Text),
            });
        }
        Ok(RowSet::from_rows(checked.rows))
    }

    /// The enabled rows of a built site's snapshot (`site/catalogue.sqlite`). The build checked
    /// them, so they are not checked again.
    pub fn from_site(site: &Path) -> anyhow::Result<RowSet> {
        let snap = crate::build::snapshot::open(&site.join("catalogue.sqlite"))?;
        Ok(RowSet::from_rows(
            snap.rows.into_iter().filter(|r| r.enabled).collect(),
        ))
    }

    pub fn get(&self, key: &str) -> Option<&Callable> {
        self.rows.get(key).map(|c| &**c)
    }

    pub fn row(&self, key: &str) -> Option<&Row> {
        self.get(key).map(|c| &c.row)
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.rows.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    /// Up to three keys close to `key`, best first: by edit distance, and by shared
    /// `_`-separated words (`ZZ_TEST_TEMPERATUR` → `ZZ_TEST_TEMPERATURE`, `WEATHER` →
    /// `WEATHER_CURRENT_TEMPERATURE`).
    pub fn did_you_mean(&self, key: &str) -> Vec<String> {
        let query = key.trim().to_ascii_uppercase();
        if query.is_empty() {
            return Vec::new();
        }
        let mut scored: Vec<(f64, &str)> = self
            .rows
            .keys()
            .map(|k| (key_similarity(&query, k), k.as_str()))
            .filter(|(s, _)| *s >= 0.5)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        scored
            .into_iter()
            .take(3)
            .map(|(_, k)| k.to_string())
            .collect()
    }
}

/// 0..1: the better of whole-key edit similarity and word overlap.
fn key_similarity(query: &str, key: &str) -> f64 {
    let edit = strsim::normalized_levenshtein(query, key);
    let qw: Vec<&str> = query.split('_').filter(|w| !w.is_empty()).collect();
    let kw: Vec<&str> = key.split('_').filter(|w| !w.is_empty()).collect();
    if qw.is_empty() || kw.is_empty() {
        return edit;
    }
    // Each word's best match on the other side counts when close (a typo, a missing letter).
    let coverage = |from: &[&str], to: &[&str]| {
        from.iter()
            .map(|w| {
                to.iter()
                    .map(|t| strsim::jaro_winkler(w, t))
                    .fold(0.0, f64::max)
            })
            .filter(|s| *s >= 0.88)
            .sum::<f64>()
            / from.len() as f64
    };
    let words = (coverage(&qw, &kw) + coverage(&kw, &qw)) / 2.0;
    edit.max(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::parse_row;

    fn row(key: &str) -> Row {
        let text =
            format!("key: {key}\ntype: fn\ntarget: echo\ncontent: |\n  # WHAT: x\n  [\"$1\"]\n");
        parse_row(Path::new(&format!("{key}.yaml")), text.as_bytes())
            .row
            .expect("row")
    }

    #[test]
    fn suggests_near_keys() {
        let set = RowSet::from_rows(
            [
                "ZZ_TEST_TEMPERATURE",
                "ZZ_TEST_PRESSURE",
                "WEATHER_CURRENT_TEMPERATURE",
                "SHA256",
                "UUID",
            ]
            .into_iter()
            .map(row)
            .collect(),
        );
        assert_eq!(
            set.did_you_mean("ZZ_TEST_TEMPERATUR")
                .first()
                .map(String::as_str),
            Some("ZZ_TEST_TEMPERATURE")
        );
        assert_eq!(set.did_you_mean("sha265"), vec!["SHA256"]);
        assert!(
            set.did_you_mean("CURRENT_WEATHER")
                .contains(&"WEATHER_CURRENT_TEMPERATURE".to_string())
        );
        assert!(set.did_you_mean("COMPLETELY_UNRELATED_THING").len() <= 3);
        assert!(set.did_you_mean("").is_empty());
        assert_eq!(set.get("UUID").map(|c| c.needed_args), Some(1));
    }

    #[test]
    fn bundled_catalogue_loads() {
        let set = RowSet::from_dir(Path::new("catalogue")).expect("bundled catalogue");
        assert!(set.len() > 30);
        assert!(set.row("SHA256").is_some());
        let err = RowSet::from_dir(Path::new("tests/fixtures/broken/bad_category")).map(|_| ());
        assert!(matches!(err, Err(LoadError::Check { .. })), "{err:?}");
        assert!(matches!(
            RowSet::from_dir(Path::new("no/such/dir")),
            Err(LoadError::Read { .. })
        ));
    }
}
