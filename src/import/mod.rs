//! Rows from what already exists: an OpenAPI document (Swagger 2.0, OpenAPI 3.0 or 3.1, JSON
//! or YAML) becomes one `http` row per operation; an MCP server's tools become one
//! `runner: mcp` row each (`mcp`).
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
//!
//! The catalogue's credential bindings (`bindings.yaml`) gain what the rows need, for review:
//! each credential they use bound to the base URL they call, for those rows (`bindings`).

pub mod arguments;
pub mod auth;
pub mod bindings;
pub mod docstring;
pub mod document;
pub mod draft;
pub mod key;
pub mod mcp;
pub mod operation;
pub mod parts;
mod plan;
mod provenance;
pub mod schema;
pub mod server;
pub mod text;
pub mod yaml;

use crate::row::catalogue::SourceFile;
use document::{Document, DocumentError};
use parts::{Context, Draft};
use plan::Planned;
use provenance::{OnDisk, read_marker};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
    /// Selected operations whose row can send every parameter they document.
    pub reachable: usize,
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
    /// Per credential the rows use, where they send it and what the import added to its
    /// binding in `bindings.yaml`.
    pub bindings: Vec<bindings::Bound>,
}

impl Report {
    pub fn count(&self, status: Status) -> usize {
        self.rows.iter().filter(|r| r.status == status).count()
    }

    /// Selected operations whose row can send every parameter the operation documents (its
    /// notes name nothing in [`UNREACHABLE`]); the rest are rows with such a note, or skipped.
    pub fn fully_reachable(&self) -> usize {
        self.rows.iter().filter(|r| r.reachable()).count()
    }
}

/// Note kinds that say a parameter the operation documents cannot be sent by its row: an
/// object in a path or header, a cookie, a file, a body of another media type, a list with a
/// delimiter other than the comma, a name a request line cannot hold.
pub const UNREACHABLE: &[&str] = &[
    "object_parameter",
    "cookie_parameter",
    "header_parameter",
    "body_media",
    "body_field",
    "file_field",
    "list_format",
];

impl RowReport {
    /// Every parameter of the operation can be sent.
    pub fn reachable(&self) -> bool {
        !self.notes.iter().any(|n| UNREACHABLE.contains(&n.kind))
    }
}

/// The files to write (name → text; the rows, and `bindings.yaml` when it changes) and
/// delete, and the report.
#[derive(Debug, Clone, Default)]
pub struct Import {
    pub writes: Vec<(String, String)>,
    pub deletes: Vec<String>,
    pub report: Report,
}

impl Import {
    /// The files it writes, as the catalogue directory `dir` would hold them: what the gate
    /// reads to judge the import.
    pub fn files(&self, dir: &Path) -> Vec<SourceFile> {
        self.writes
            .iter()
            .map(|(name, text)| SourceFile {
                path: dir.join(name),
                bytes: text.clone().into_bytes(),
            })
            .collect()
    }
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
    let title = title_of(doc);
    let mut report = Report::of_document(doc, &title, ops.len(), &bad_items);
    check_auth(doc, options)?;
    let chosen: Vec<&operation::Operation<'_>> = ops
        .iter()
        .filter(|op| selected(&options.only, &op.tags, &op.path))
        .collect();
    report.selected = chosen.len();
    let cx = context(doc, options, &title, &chosen)?;
    report.schemes = cx
        .schemes
        .all()
        .map(|(n, s)| (n.clone(), s.describe()))
        .collect();
    let drafts = drafts(&cx, &chosen, &mut report);
    let on_disk = on_disk(existing);
    let rows = keyed(options, drafts, &on_disk, &title);
    let binding_file = existing
        .iter()
        .find(|f| f.file_name() == crate::row::binding::FILE);
    // The bindings the rows need, merged into the catalogue's: the gate judges every row with
    // the file the import will write.
    let merged = merge_bindings(binding_file, &rows, dir)?;
    let mut rows = through_gate(rows, merged.file.as_ref(), dir, &title, &mut report);
    // Bound for the rows kept alone.
    let merged = merge_bindings(binding_file, &rows, dir)?;
    report.bindings = merged.bound.clone();
    mark_edited(&mut rows, &on_disk, options.force);
    let deletes = gone(&on_disk, &rows, &ops, &title, options.prune, &mut report);
    // The catalogue as it will be, for the cross-row rules and the asks gate.
    plan::asks_gate(
        &mut rows,
        existing,
        &deletes,
        merged.file.as_ref(),
        dir,
        &title,
        &mut report,
    );
    let writes = writes(merged.write, rows, &mut report);
    report.reachable = report.fully_reachable();
    Ok(Import {
        writes,
        deletes,
        report,
    })
}

/// The API's name: the document's title as plain text, or "the API".
fn title_of(doc: &Document) -> String {
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
}

impl Report {
    /// The report's start: what the document is, its webhooks (not imported) and the items
    /// that could not be read as operations.
    fn of_document(
        doc: &Document,
        title: &str,
        operations: usize,
        bad_items: &[operation::BadPathItem],
    ) -> Report {
        let mut report = Report {
            document: title.to_string(),
            version: doc.version.name().to_string(),
            operations,
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
        for b in bad_items {
            report.skipped.push(Skipped {
                operation: String::new(),
                pointer: b.pointer.clone(),
                notes: vec![Note {
                    kind: "malformed",
                    message: format!("{}: {}", b.pointer, b.message),
                }],
            });
        }
        report
    }
}

/// `--auth`, when given, is a credential form.
fn check_auth(doc: &Document, options: &Options) -> Result<(), DocumentError> {
    match &options.auth {
        Some(a) => crate::row::credential::Credential::parse(a)
            .map(|_| ())
            .map_err(|e| {
                DocumentError::at(
                    &doc.origin,
                    "",
                    format!("--auth {a}: {}; {}", e.message, e.help),
                )
            }),
        None => Ok(()),
    }
}

/// What the document gives every operation: its credentials' names and schemes, and its base
/// URL (an error when an operation chosen has no servers of its own to fall back on).
fn context<'d>(
    doc: &'d Document,
    options: &'d Options,
    title: &str,
    chosen: &[&operation::Operation<'_>],
) -> Result<Context<'d>, DocumentError> {
    let env_base = if options.prefix.is_empty() {
        auth::env_part(title)
    } else {
        auth::env_part(&options.prefix)
    };
    let schemes = auth::Schemes::read(&doc.root, doc.version, &env_base);
    let base = server::of_document(doc, options.server.as_deref());
    if let Err(e) = &base
        && chosen.iter().any(|op| op.servers.is_none())
    {
        return Err(DocumentError::at(&doc.origin, "/servers", e.clone()));
    }
    Ok(Context {
        doc,
        refs: schema::Refs::new(&doc.root),
        schemes,
        options,
        base,
        title: title.to_string(),
        env_base,
    })
}

/// A draft of each operation chosen; those that cannot be imported go to the report.
fn drafts(
    cx: &Context<'_>,
    chosen: &[&operation::Operation<'_>],
    report: &mut Report,
) -> Vec<Draft> {
    let mut drafts = Vec::new();
    for op in chosen {
        match draft::draft(cx, op) {
            Ok(d) => drafts.push(d),
            Err(notes) => report.skipped.push(Skipped {
                operation: op.label(),
                pointer: op.pointer.clone(),
                notes,
            }),
        }
    }
    drafts
}

/// What is on disk: whose each file is, and which operation it holds, by key.
fn on_disk(existing: &[SourceFile]) -> BTreeMap<String, OnDisk<'_>> {
    let mut on_disk = BTreeMap::new();
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
    on_disk
}

/// The drafts with their keys, made around the files this document did not write.
fn keyed(
    options: &Options,
    mut drafts: Vec<Draft>,
    on_disk: &BTreeMap<String, OnDisk<'_>>,
    title: &str,
) -> Vec<Planned> {
    let ours = |key: &str| {
        on_disk
            .get(key)
            .and_then(|d| d.provenance.as_ref())
            .is_some_and(|(m, _)| m.document == title)
    };
    let keys = key::assign(&options.prefix, &mut drafts, |k| {
        on_disk.contains_key(k) && !ours(k)
    });
    drafts
        .into_iter()
        .zip(keys)
        .map(|(d, key)| Planned::new(d, key, title))
        .collect()
}

/// The catalogue's bindings with what `rows` need added.
fn merge_bindings(
    binding_file: Option<&SourceFile>,
    rows: &[Planned],
    dir: &Path,
) -> Result<bindings::Merged, DocumentError> {
    let uses: Vec<bindings::Use> = rows.iter().flat_map(Planned::uses).collect();
    bindings::merge(binding_file, &uses, &dir.join(crate::row::binding::FILE)).map_err(|e| {
        DocumentError {
            origin: binding_file.map_or_else(String::new, |f| f.path.display().to_string()),
            line_col: Some((e.line, e.col)),
            pointer: None,
            message: format!(
                "the catalogue's bindings do not read, so the import cannot add the ones its rows need: {}",
                e.message
            ),
        }
    })
}

/// Each row through the gate on its own; one that fails is drafted again without the
/// document's examples and prose (secret-shaped text hides there), else not imported.
fn through_gate(
    mut rows: Vec<Planned>,
    bindings: Option<&SourceFile>,
    dir: &Path,
    title: &str,
    report: &mut Report,
) -> Vec<Planned> {
    let failing = plan::self_check(&rows, bindings, dir);
    for &i in failing.keys() {
        rows[i].draft.without_prose();
        rows[i].render(title);
    }
    let still = plan::self_check(&rows, bindings, dir);
    let mut kept = Vec::new();
    for (i, mut row) in rows.into_iter().enumerate() {
        if let Some(diags) = still.get(&i) {
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
            continue;
        }
        if let Some(why) = failing.get(&i) {
            row.draft.notes.push(Note {
                kind: "gate",
                message: format!(
                    "the document's prose (docstring, descriptions, examples, asks) was left out: with it the row fails the gate ({})",
                    why.join("; ")
                ),
            });
        }
        kept.push(row);
    }
    kept
}

/// Rows edited by hand since they were imported stay as they are (unless forced). Keys were
/// chosen around files this document did not write, so any file under a row's key is this
/// document's.
fn mark_edited(rows: &mut [Planned], on_disk: &BTreeMap<String, OnDisk<'_>>, force: bool) {
    for row in rows {
        if let Some(d) = on_disk.get(&row.key) {
            row.existing = Some(d.file.bytes.clone());
            let intact = d.provenance.as_ref().is_some_and(|(_, intact)| *intact);
            row.edited = !intact && !force;
        }
    }
}

/// Rows of this document whose operation is gone, or now has another key: reported, and
/// deleted (the names returned) when `prune` and not edited by hand.
fn gone(
    on_disk: &BTreeMap<String, OnDisk<'_>>,
    rows: &[Planned],
    ops: &[operation::Operation<'_>],
    title: &str,
    prune: bool,
    report: &mut Report,
) -> Vec<String> {
    let written: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let key_of: BTreeMap<String, &str> = rows
        .iter()
        .map(|r| (r.draft.operation.clone(), r.key.as_str()))
        .collect();
    let in_document: BTreeSet<String> = ops.iter().map(|o| o.label()).collect();
    let mut deletes = Vec::new();
    for (key, d) in on_disk {
        let Some((marker, intact)) = &d.provenance else {
            continue;
        };
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
        } else if prune {
            deletes.push(d.file.file_name().to_string());
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
    deletes
}

/// The files to write (the bindings file first, then each new or changed row), each row's
/// status reported.
fn writes(
    bindings: Option<String>,
    rows: Vec<Planned>,
    report: &mut Report,
) -> Vec<(String, String)> {
    let mut writes = Vec::new();
    if let Some(text) = bindings {
        writes.push((crate::row::binding::FILE.to_string(), text));
    }
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
    writes
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
}
