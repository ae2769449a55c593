//! The rows an import proposes, each with its key and file text, through the gate: each row
//! on its own first, then the catalogue as it will be, asks included (an ask the search does
//! not answer with its row is left out), compared with the catalogue as it was. The gate
//! judges the rows' credentials with the bindings file the import will write.

use crate::import::parts::Draft;
use crate::import::{Note, Report, bindings, provenance};
use crate::row::catalogue::SourceFile;
use crate::row::diag::Diagnostic;
use crate::row::{Row, parse_row};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A draft with its key and file text, and what is on disk under that key.
pub(super) struct Planned {
    pub draft: Draft,
    pub key: String,
    pub text: String,
    /// The bytes on disk under this key, if any.
    pub existing: Option<Vec<u8>>,
    /// Edited by hand since it was imported: kept as it is.
    pub edited: bool,
}

impl Planned {
    pub fn new(draft: Draft, key: String, title: &str) -> Planned {
        let mut p = Planned {
            draft,
            key,
            text: String::new(),
            existing: None,
            edited: false,
        };
        p.render(title);
        p
    }

    pub fn render(&mut self, title: &str) {
        let body = self.draft.body_text(&self.key);
        self.text = provenance::file_text(title, &self.draft.operation, &body);
    }

    /// The credentials this row uses and where it sends them.
    pub fn uses(&self) -> Vec<bindings::Use> {
        let origin = bindings::base_origin(&self.draft.base).unwrap_or_default();
        bindings::uses(&self.draft.auth, &origin, &self.key, &self.draft.category)
    }

    fn file(&self, dir: &Path) -> SourceFile {
        SourceFile {
            path: dir.join(format!("{}.yaml", self.key)),
            bytes: self.text.clone().into_bytes(),
        }
    }
}

/// The gate's errors for each row on its own (with `bindings`, the bindings file as the
/// import will write it), by index.
pub(super) fn self_check(
    rows: &[Planned],
    bindings: Option<&SourceFile>,
    dir: &Path,
) -> BTreeMap<usize, Vec<String>> {
    let files: Vec<SourceFile> = rows.iter().map(|r| r.file(dir)).collect();
    let mut all = files.clone();
    all.extend(bindings.cloned());
    let checked = crate::check::check_files(&all);
    let index: BTreeMap<PathBuf, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.clone(), i))
        .collect();
    let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for d in checked.diags.iter().filter(|d| d.is_error()) {
        if let Some(&i) = index.get(&d.path) {
            let said = format!("{}: {}", d.code, d.message);
            let list = out.entry(i).or_default();
            if !list.contains(&said) {
                list.push(said);
            }
        }
    }
    out
}

/// The catalogue's files as they will be: those the import leaves, the bindings as it will
/// write them, then its rows (from the index returned).
fn catalogue_after(
    rows: &[Planned],
    existing: &[SourceFile],
    deletes: &[String],
    bindings: Option<&SourceFile>,
    dir: &Path,
) -> (Vec<SourceFile>, usize) {
    let replaced: BTreeSet<String> = rows
        .iter()
        .filter(|r| !r.edited)
        .map(|r| format!("{}.yaml", r.key))
        .chain(deletes.iter().cloned())
        .chain(bindings.map(|_| crate::row::binding::FILE.to_string()))
        .collect();
    let mut files: Vec<SourceFile> = existing
        .iter()
        .filter(|f| !replaced.contains(f.file_name()))
        .cloned()
        .collect();
    files.extend(bindings.cloned());
    let first_new = files.len();
    files.extend(rows.iter().filter(|r| !r.edited).map(|r| r.file(dir)));
    (files, first_new)
}

/// What fails now and did not before: this import's doing (typically asks of rows written by
/// hand that many new rows now outrank), each as `file:line:col: code: message`.
fn new_problems(existing: &[SourceFile], after: Vec<Diagnostic>) -> Vec<String> {
    let before: BTreeSet<(PathBuf, usize, usize, &str)> = {
        let checked = crate::check::check_files(existing);
        let asks = crate::check::asks_gate(&checked.rows);
        checked
            .diags
            .into_iter()
            .filter(|d| d.is_error())
            .chain(asks)
            .map(|d| (d.path, d.line, d.col, d.code))
            .collect()
    };
    after
        .into_iter()
        .filter(|d| !before.contains(&(d.path.clone(), d.line, d.col, d.code)))
        .map(|d| {
            format!(
                "{}:{}:{}: {}: {}",
                d.path.display(),
                d.line,
                d.col,
                d.code,
                d.message
            )
        })
        .collect()
}

/// Check the catalogue as it will be and keep only the asks the search answers: an ask of a
/// new row that does not find it in the top `ASK_TOP` is left out (and the gate run again,
/// since asks are searched text too). Problems the import causes elsewhere are reported.
/// `bindings` is the bindings file as the import will write it, in place of the catalogue's.
pub(super) fn asks_gate(
    rows: &mut [Planned],
    existing: &[SourceFile],
    deletes: &[String],
    bindings: Option<&SourceFile>,
    dir: &Path,
    title: &str,
    report: &mut Report,
) {
    let (files, first_new) = catalogue_after(rows, existing, deletes, bindings, dir);
    let checked = crate::check::check_files(&files);
    let new_paths: BTreeSet<PathBuf> = files[first_new..].iter().map(|f| f.path.clone()).collect();
    let mut after: Vec<Diagnostic> = checked.diags.into_iter().filter(|d| d.is_error()).collect();
    let mut catalogue: Vec<Row> = checked.rows;
    let by_key: BTreeMap<String, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.key.clone(), i))
        .collect();
    // Leaving an ask out changes what is indexed, so the gate runs again until it passes or
    // only rows this import does not write fail it.
    let mut failing = crate::check::asks_gate(&catalogue);
    for _round in 0..8 {
        let mut changed = false;
        for d in &failing {
            let key = d
                .path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            let Some(&i) = by_key.get(&key).filter(|_| new_paths.contains(&d.path)) else {
                continue;
            };
            let Some(pos) = catalogue.iter().position(|r| r.path == d.path) else {
                continue;
            };
            // The message quotes the ask; find which of the row's asks it is.
            let Some(ask) = catalogue[pos]
                .asks
                .iter()
                .find(|a| d.message.contains(&format!("{a:?}")))
                .cloned()
            else {
                continue;
            };
            rows[i].draft.asks.retain(|a| *a != ask);
            rows[i].draft.notes.push(Note {
                kind: "ask",
                message: format!("ask {ask:?} left out: {}", d.message),
            });
            report.asks_left_out.push((key.clone(), ask));
            rows[i].render(title);
            if let Some(row) = parse_row(&d.path, rows[i].text.as_bytes()).row {
                catalogue[pos] = row;
                changed = true;
            }
        }
        if !changed {
            break;
        }
        failing = crate::check::asks_gate(&catalogue);
    }
    after.extend(failing);

    report
        .catalogue_problems
        .extend(new_problems(existing, after));
    report.catalogue_problems.sort();
    report.catalogue_problems.dedup();
}
