//! Rows from what already exists: an OpenAPI document (Swagger 2.0, OpenAPI 3.0 or 3.1, JSON
//! or YAML) becomes one `http` row per operation.
//!
//! A pure stage: the document's text and the catalogue directory's files come in; the files
//! to write and delete and a report of everything that could not be mapped go out. The
//! command line fetches and writes. Every row it proposes has passed the gate (each row, and
//! the catalogue with it, asks included) before it is proposed.
//!
//! Each file it writes names its document and operation in a comment, with a digest of the
//! rest of the file. So a re-import knows its own rows: one unchanged is not rewritten (the
//! bytes are the same), one edited by hand since is kept, an operation gone from the document
//! is reported (and with `prune`, its row deleted, which the site shows as a tombstone), and a
//! row written by someone else is never overwritten.

pub mod auth;
pub mod document;
pub mod draft;
pub mod key;
pub mod operation;
pub mod schema;
pub mod text;
pub mod yaml;

use crate::row::catalogue::SourceFile;
use crate::row::diag::Diagnostic;
use crate::row::{Row, parse_row};
use document::{Document, DocumentError};
use draft::{Context, Draft};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What `capdir import openapi` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Put in front of every key (`GITHUB` → `GITHUB_ISSUES_CREATE`) and every credential's
    /// variable name.
    pub prefix: String,
    /// Every row's category; default: the operation's first tag.
    pub category: Option<String>,
    /// Only operations with one of these tags, or whose path matches one of these globs
    /// (`/repos/*/*/issues*`; `*` stays within a segment, `**` crosses them).
    pub only: Vec<String>,
    /// The base URL, instead of the document's servers.
    pub server: Option<String>,
    /// Every row's `auth`, instead of what the document's security says.
    pub auth: Option<String>,
    /// Delete rows this document imported whose operation is gone (or has a new key).
    pub prune: bool,
    /// Overwrite rows edited by hand since they were imported.
    pub force: bool,
}

/// Something about an operation that could not be mapped as the document says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    /// Stable: `optional_query`, `header_parameter`, `multipart_body`, `security`, …
    pub kind: &'static str,
    pub message: String,
}

/// What happened to one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    New,
    Changed,
    Unchanged,
    /// Edited by hand since it was imported: not overwritten (`force` overwrites).
    KeptEdited,
}

#[derive(Debug, Clone, Serialize)]
pub struct RowReport {
    pub key: String,
    pub operation: String,
    pub operation_id: Option<String>,
    pub status: Status,
    pub notes: Vec<Note>,
}

/// An operation that was not imported, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub operation: String,
    pub pointer: String,
    pub notes: Vec<Note>,
}

/// A row this document imported earlier whose operation is gone, or has another key now.
#[derive(Debug, Clone, Serialize)]
pub struct Gone {
    pub key: String,
    pub operation: String,
    /// `gone` or `superseded by KEY`.
    pub reason: String,
    /// `kept`, `deleted`, or `kept_edited` (edited by hand: never deleted).
    pub action: &'static str,
}

/// Everything an import did and could not do.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub document: String,
    pub version: String,
    pub operations: usize,
    pub selected: usize,
    /// About the document as a whole (its webhooks, which no row receives).
    pub document_notes: Vec<Note>,
    pub rows: Vec<RowReport>,
    pub skipped: Vec<Skipped>,
    pub gone: Vec<Gone>,
    /// Security schemes and how each was mapped.
    pub schemes: Vec<(String, String)>,
    /// Asks left out because the catalogue's search would not find their row in its top
    /// `check::ASK_TOP`: `(key, ask)`.
    pub asks_left_out: Vec<(String, String)>,
    /// Errors the gate finds in the catalogue with these rows that it did not find before
    /// (in rows this import does not write, as a rule: an ask of a hand-written row that new
    /// rows now outrank). The command exits 1 when there are any.
    pub catalogue_problems: Vec<String>,
}

impl Report {
    pub fn count(&self, status: Status) -> usize {
        self.rows.iter().filter(|r| r.status == status).count()
    }
}

/// The files to write (name → text) and delete, and the report.
#[derive(Debug, Clone, Default)]
pub struct Import {
    pub writes: Vec<(String, String)>,
    pub deletes: Vec<String>,
    pub report: Report,
}

/// The first line of every row file, as hand-written rows have it.
const SCHEMA_LINE: &str = "# yaml-language-server: $schema=../schema/row.schema.json\n";
/// Starts the line naming the document, the operation and the digest of the rest.
const MARKER: &str = "# capdir import openapi: ";

/// What a file's provenance line says.
#[derive(Debug, Clone, serde::Deserialize, Serialize)]
struct Marker {
    document: String,
    operation: String,
    sha256: String,
}

fn digest(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

/// A row file in the catalogue directory, and what its provenance line says: its marker, and
/// whether the rest of the file still has the digest the marker names.
struct OnDisk<'a> {
    file: &'a SourceFile,
    provenance: Option<(Marker, bool)>,
}

/// A file's marker, and whether the rest of the file still has the digest it names.
fn read_marker(text: &str) -> Option<(Marker, bool)> {
    let mut offset = 0;
    for line in text.split_inclusive('\n').take(3) {
        if let Some(json) = line.strip_prefix(MARKER) {
            let marker: Marker = serde_json::from_str(json.trim_end()).ok()?;
            let rest = &text[offset + line.len()..];
            let intact = digest(rest) == marker.sha256;
            return Some((marker, intact));
        }
        offset += line.len();
    }
    None
}

/// Does `path` match the glob (`*` within a segment, `**` across)?
pub fn glob_matches(glob: &str, path: &str) -> bool {
    fn go(g: &[u8], p: &[u8]) -> bool {
        match g {
            [] => p.is_empty(),
            [b'*', b'*', rest @ ..] => (0..=p.len()).any(|i| go(rest, &p[i..])),
            [b'*', rest @ ..] => (0..=p.len())
                .take_while(|&i| i == 0 || p[i - 1] != b'/')
                .any(|i| go(rest, &p[i..])),
            [c, rest @ ..] => p.first() == Some(c) && go(rest, &p[1..]),
        }
    }
    go(glob.as_bytes(), path.as_bytes())
}

fn selected(only: &[String], tags: &[String], path: &str) -> bool {
    only.is_empty()
        || only.iter().any(|o| {
            if o.contains('/') || o.contains('*') {
                glob_matches(o, path)
            } else {
                tags.iter().any(|t| t == o)
            }
        })
}

/// Import `doc` into the catalogue whose files are `existing` (read from `dir`, which only
/// names them in diagnostics).
pub fn import(
    doc: &Document,
    options: &Options,
    existing: &[SourceFile],
    dir: &Path,
) -> Result<Import, DocumentError> {
    let (ops, bad_items) = operation::read(doc);
    let title = {
        let t = text::plain(
            doc.root
                .pointer("/info/title")
                .and_then(|v| v.as_str())
                .unwrap_or(""),
        );
        if t.is_empty() {
            "the API".to_string()
        } else {
            text::cut(&t, 120)
        }
    };
    let mut report = Report {
        document: title.clone(),
        version: doc.version.name().to_string(),
        operations: ops.len(),
        ..Default::default()
    };
    if let Some(hooks) = doc.root.get("webhooks").and_then(|w| w.as_object())
        && !hooks.is_empty()
    {
        report.document_notes.push(Note {
            kind: "webhooks",
            message: format!(
                "webhooks not imported (a row makes requests, it receives none): {}",
                hooks.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        });
    }
    for b in &bad_items {
        report.skipped.push(Skipped {
            operation: String::new(),
            pointer: b.pointer.clone(),
            notes: vec![Note {
                kind: "malformed",
                message: format!("{}: {}", b.pointer, b.message),
            }],
        });
    }
    if let Some(a) = &options.auth
        && let Err(e) = crate::row::credential::Credential::parse(a)
    {
        return Err(DocumentError::at(
            &doc.origin,
            "",
            format!("--auth {a}: {}; {}", e.message, e.help),
        ));
    }
    let chosen: Vec<&operation::Operation<'_>> = ops
        .iter()
        .filter(|op| selected(&options.only, &op.tags, &op.path))
        .collect();
    report.selected = chosen.len();

    let env_base = if options.prefix.is_empty() {
        auth::env_part(&title)
    } else {
        auth::env_part(&options.prefix)
    };
    let schemes = auth::Schemes::read(&doc.root, doc.version, &env_base);
    report.schemes = schemes
        .all()
        .map(|(n, s)| (n.clone(), s.describe()))
        .collect();
    let base = draft::document_base(doc, options.server.as_deref());
    if let Err(e) = &base
        && chosen.iter().any(|op| op.servers.is_none())
    {
        return Err(DocumentError::at(&doc.origin, "/servers", e.clone()));
    }
    let cx = Context {
        doc,
        refs: schema::Refs::new(&doc.root),
        schemes,
        options,
        base,
        title: title.clone(),
    };

    let mut drafts: Vec<Draft> = Vec::new();
    for op in &chosen {
        match draft::draft(&cx, op) {
            Ok(d) => drafts.push(d),
            Err(notes) => report.skipped.push(Skipped {
                operation: op.label(),
                pointer: op.pointer.clone(),
                notes,
            }),
        }
    }

    // What is on disk: whose each file is, and which operation it holds.
    let mut on_disk: BTreeMap<String, OnDisk<'_>> = BTreeMap::new();
    for f in existing {
        let Some(stem) = f
            .file_name()
            .strip_suffix(".yaml")
            .or_else(|| f.file_name().strip_suffix(".yml"))
        else {
            continue;
        };
        let marker = std::str::from_utf8(&f.bytes).ok().and_then(read_marker);
        on_disk.insert(
            stem.to_string(),
            OnDisk {
                file: f,
                provenance: marker,
            },
        );
    }
    let ours = |key: &str| {
        on_disk
            .get(key)
            .and_then(|d| d.provenance.as_ref())
            .is_some_and(|(m, _)| m.document == title)
    };

    let keys = assign_keys(&options.prefix, &mut drafts, |k| {
        on_disk.contains_key(k) && !ours(k)
    });
    let mut rows: Vec<Planned> = drafts
        .into_iter()
        .zip(keys)
        .map(|(d, key)| Planned::new(d, key, &title))
        .collect();

    // Each row passes the gate on its own; one that does not is drafted again without the
    // document's examples and prose (secret-shaped text hides there), else not imported.
    let failing = self_check(&rows, dir);
    for &i in failing.keys() {
        rows[i].draft.without_prose();
        rows[i].render(&title);
    }
    let still = self_check(&rows, dir);
    let mut kept = Vec::new();
    for (i, row) in rows.into_iter().enumerate() {
        match still.get(&i) {
            Some(diags) => {
                let mut notes = row.draft.notes.clone();
                notes.extend(diags.iter().map(|d| Note {
                    kind: "gate",
                    message: d.clone(),
                }));
                report.skipped.push(Skipped {
                    operation: row.draft.operation.clone(),
                    pointer: String::new(),
                    notes,
                });
            }
            None => {
                if failing.contains_key(&i) {
                    let mut row = row;
                    row.draft.notes.push(Note {
                        kind: "gate",
                        message: format!(
                            "the document's prose (docstring, descriptions, examples, asks) was left out: with it the row fails the gate ({})",
                            failing[&i].join("; ")
                        ),
                    });
                    kept.push(row);
                } else {
                    kept.push(row);
                }
            }
        }
    }
    let mut rows = kept;

    // Rows edited by hand since they were imported stay as they are (unless forced).
    // (Keys were chosen around files this document did not write, so any file under a row's
    // key is this document's.)
    for row in &mut rows {
        if let Some(d) = on_disk.get(&row.key) {
            row.existing = Some(d.file.bytes.clone());
            let intact = d.provenance.as_ref().is_some_and(|(_, intact)| *intact);
            row.edited = !intact && !options.force;
        }
    }

    // Rows of this document whose operation is gone, or now has another key.
    let written: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let key_of: BTreeMap<String, &str> = rows
        .iter()
        .map(|r| (r.draft.operation.clone(), r.key.as_str()))
        .collect();
    let in_document: BTreeSet<String> = ops.iter().map(|o| o.label()).collect();
    let mut deletes = Vec::new();
    for (key, d) in &on_disk {
        let Some((marker, intact)) = &d.provenance else {
            continue;
        };
        let file = d.file;
        if marker.document != title || written.contains(key.as_str()) {
            continue;
        }
        let reason = if !in_document.contains(&marker.operation) {
            "gone from the document".to_string()
        } else if let Some(new_key) = key_of.get(&marker.operation) {
            format!("superseded by {new_key}")
        } else {
            continue; // still in the document, only not selected this time
        };
        let action = if !intact {
            "kept_edited"
        } else if options.prune {
            deletes.push(file.file_name().to_string());
            "deleted"
        } else {
            "kept"
        };
        report.gone.push(Gone {
            key: key.clone(),
            operation: marker.operation.clone(),
            reason,
            action,
        });
    }

    // The catalogue as it will be, for the cross-row rules and the asks gate.
    asks_gate(&mut rows, existing, &deletes, dir, &title, &mut report);

    let mut writes = Vec::new();
    for row in rows {
        let status = match &row.existing {
            _ if row.edited => Status::KeptEdited,
            None => Status::New,
            Some(bytes) if bytes == row.text.as_bytes() => Status::Unchanged,
            Some(_) => Status::Changed,
        };
        if matches!(status, Status::New | Status::Changed) {
            writes.push((format!("{}.yaml", row.key), row.text.clone()));
        }
        report.rows.push(RowReport {
            key: row.key,
            operation: row.draft.operation,
            operation_id: row.draft.operation_id,
            status,
            notes: row.draft.notes,
        });
    }
    Ok(Import {
        writes,
        deletes,
        report,
    })
}

/// Unique keys for the drafts, independent of the order operations come in: of several
/// operations with the same key, the first by path and method keeps it and the others get a
/// tag of theirs; a key a row not from this document holds is tagged too.
fn assign_keys(prefix: &str, drafts: &mut [Draft], taken: impl Fn(&str) -> bool) -> Vec<String> {
    let base: Vec<String> = drafts
        .iter()
        .map(|d| key::make(prefix, &d.name, &d.operation))
        .collect();
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, k) in base.iter().enumerate() {
        groups.entry(k.as_str()).or_default().push(i);
    }
    let mut keys = base.clone();
    for members in groups.values() {
        let mut members = members.clone();
        members.sort_by(|a, b| {
            let (pa, pb) = (&drafts[*a].operation, &drafts[*b].operation);
            let path = |s: &str| {
                s.split_once(' ')
                    .map(|(m, p)| (p.to_string(), m.to_string()))
            };
            path(pa).cmp(&path(pb))
        });
        for (n, &i) in members.iter().enumerate() {
            if n > 0 {
                keys[i] = key::with_tag(&base[i], &drafts[i].operation);
                drafts[i].notes.push(Note {
                    kind: "key",
                    message: format!(
                        "key {} is taken by another operation of the document ({}); this one is {}",
                        base[i], drafts[members[0]].operation, keys[i]
                    ),
                });
            }
        }
    }
    let mut used: BTreeSet<String> = BTreeSet::new();
    for (i, k) in keys.iter_mut().enumerate() {
        if taken(k) {
            let tagged = key::with_tag(k, &drafts[i].operation);
            drafts[i].notes.push(Note {
                kind: "key",
                message: format!(
                    "key {k} belongs to a row not imported from this document; this one is {tagged}"
                ),
            });
            *k = tagged;
        }
        // Tags of different operations could meet; a counter settles it.
        let mut candidate = k.clone();
        let mut n = 2;
        while used.contains(&candidate) || taken(&candidate) {
            candidate = key::with_tag(k, &format!("{} {n}", drafts[i].operation));
            n += 1;
        }
        *k = candidate.clone();
        used.insert(candidate);
    }
    keys
}

/// A draft with its key and file text, and what is on disk under that key.
struct Planned {
    draft: Draft,
    key: String,
    text: String,
    existing: Option<Vec<u8>>,
    edited: bool,
}

impl Planned {
    fn new(draft: Draft, key: String, title: &str) -> Planned {
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

    fn render(&mut self, title: &str) {
        let body = self.draft.body_text(&self.key);
        let marker = Marker {
            document: title.to_string(),
            operation: self.draft.operation.clone(),
            sha256: digest(&body),
        };
        let marker = serde_json::to_string(&marker).unwrap_or_default();
        self.text = format!("{SCHEMA_LINE}{MARKER}{marker}\n{body}");
    }

    fn file(&self, dir: &Path) -> SourceFile {
        SourceFile {
            path: dir.join(format!("{}.yaml", self.key)),
            bytes: self.text.clone().into_bytes(),
        }
    }
}

/// The gate's errors for each row on its own, by index.
fn self_check(rows: &[Planned], dir: &Path) -> BTreeMap<usize, Vec<String>> {
    let files: Vec<SourceFile> = rows.iter().map(|r| r.file(dir)).collect();
    let checked = crate::check::check_files(&files);
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

/// Check the catalogue as it will be and keep only the asks the search answers: an ask of a
/// new row that does not find it in the top `ASK_TOP` is left out (and the gate run again,
/// since asks are searched text too). Problems the import causes elsewhere are reported.
fn asks_gate(
    rows: &mut [Planned],
    existing: &[SourceFile],
    deletes: &[String],
    dir: &Path,
    title: &str,
    report: &mut Report,
) {
    let replaced: BTreeSet<String> = rows
        .iter()
        .filter(|r| !r.edited)
        .map(|r| format!("{}.yaml", r.key))
        .chain(deletes.iter().cloned())
        .collect();
    let mut files: Vec<SourceFile> = existing
        .iter()
        .filter(|f| !replaced.contains(f.file_name()))
        .cloned()
        .collect();
    let first_new = files.len();
    files.extend(rows.iter().filter(|r| !r.edited).map(|r| r.file(dir)));
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

    // What fails now and did not before is this import's doing: typically asks of rows
    // written by hand that many new rows now outrank.
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
    for d in after {
        if !before.contains(&(d.path.clone(), d.line, d.col, d.code)) {
            report.catalogue_problems.push(format!(
                "{}:{}:{}: {}: {}",
                d.path.display(),
                d.line,
                d.col,
                d.code,
                d.message
            ));
        }
    }
    report.catalogue_problems.sort();
    report.catalogue_problems.dedup();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_matches(
            "/repos/*/*/issues",
            "/repos/{owner}/{repo}/issues"
        ));
        assert!(!glob_matches(
            "/repos/*/issues",
            "/repos/{owner}/{repo}/issues"
        ));
        assert!(glob_matches("/repos/**", "/repos/{owner}/{repo}/issues"));
        assert!(glob_matches("/pets*", "/pets"));
        assert!(!glob_matches("/pets*", "/pets/{id}"));
        assert!(selected(&["pet".into()], &["pet".into()], "/x"));
        assert!(!selected(&["store".into()], &["pet".into()], "/x"));
    }

    #[test]
    fn markers_detect_edits() {
        let body = "key: A_B\n";
        let m = Marker {
            document: "D".into(),
            operation: "GET /a".into(),
            sha256: digest(body),
        };
        let text = format!(
            "{SCHEMA_LINE}{MARKER}{}\n{body}",
            serde_json::to_string(&m).unwrap()
        );
        assert!(read_marker(&text).expect("marker").1);
        let edited = text.replace("A_B", "A_C");
        assert!(!read_marker(&edited).expect("marker").1);
        assert!(read_marker("key: X\n").is_none());
    }
}
