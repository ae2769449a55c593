//! The gate: every rule a catalogue must pass before it merges or builds.
//!
//! Rules run per row (fields, templates, credentials, secrets, schemas) and across rows
//! (duplicate keys, includes, flow steps and cycles). All problems are collected. With a base
//! revision, the asymmetric rule lets legacy rows be edited without being fixed in full, while
//! a row that was clean must stay clean and a new row must be clean.

mod across;
pub mod review;
mod rules;
pub mod scaffold;
pub mod secrets;

use crate::row::binding::Bindings;
use crate::row::catalogue::SourceFile;
use crate::row::credential::Credential;
use crate::row::diag::Diagnostic;
use crate::row::{self, Row, line_col};
use std::collections::HashMap;
use std::path::Path;

/// A checked catalogue: the rows that could be read, and every diagnostic.
#[derive(Debug, Default)]
pub struct Checked {
    pub rows: Vec<Row>,
    /// The catalogue's credential bindings (`bindings.yaml`; none: no credential may be used).
    pub bindings: Bindings,
    pub diags: Vec<Diagnostic>,
    pub files: usize,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diags.iter().any(Diagnostic::is_error)
    }
}

/// Parse and check every file, on all cores; rows come back sorted by key. The bindings
/// file among them (`bindings.yaml`) is read as the bindings, and every row's credential is
/// judged against it.
pub fn check_files(files: &[SourceFile]) -> Checked {
    check_files_known(files, &|_| None, &[])
}

/// [`check_files`], taking the row `known` gives for a file as that file's verdict: its row,
/// found clean by the rules of one file before (a rebuild in place knows the files whose bytes
/// it checked, `build::checked`). `unread` are the rows of files found clean before and not
/// read this time (their stamps say they did not change): they count as files checked, and
/// the rules across rows and the bindings' run over them with the others, but they are the
/// caller's and not among the rows returned.
pub fn check_files_known(
    files: &[SourceFile],
    known: &(dyn Fn(&SourceFile) -> Option<Row> + Sync),
    unread: &[&Row],
) -> Checked {
    let (binding_files, files): (Vec<&SourceFile>, Vec<&SourceFile>) = files
        .iter()
        .partition(|f| f.file_name() == crate::row::binding::FILE);
    let (bindings, mut binding_diags) = read_bindings(binding_files.first().copied());
    let mut out = check_row_files(&files, known, unread);
    let rows: Vec<&Row> = out.rows.iter().chain(unread.iter().copied()).collect();
    binding_diags.extend(check_bindings(&rows, &bindings));
    out.diags.extend(binding_diags);
    crate::row::diag::sort(&mut out.diags);
    out.bindings = bindings;
    out
}

/// The bindings a catalogue's `bindings.yaml` declares (none when it has none), and what is
/// wrong with the file: it does not parse, or names a reserved variable, a bad origin or a
/// bad method.
pub fn read_bindings(file: Option<&SourceFile>) -> (Bindings, Vec<Diagnostic>) {
    let Some(file) = file else {
        return (Bindings::default(), Vec::new());
    };
    let bindings = match Bindings::parse(&file.bytes) {
        Ok(b) => b,
        Err(e) => {
            let d = Diagnostic::error(
                &file.path,
                (e.line, e.col),
                "bad_bindings",
                format!("the bindings do not read: {}", e.message),
                "write `credentials:` then, per variable, `origins:` (and optionally `methods:`, `keys:`, `categories:`)",
            );
            return (Bindings::default(), vec![d]);
        }
    };
    let text = String::from_utf8_lossy(&file.bytes);
    let line_of = |env: &str| {
        let key = format!("{env}:");
        crate::row::yaml_lines(&text)
            .position(|l| l.trim_start().starts_with(&key))
            .map_or(1, |i| i + 1)
    };
    let diags = bindings
        .problems()
        .into_iter()
        .map(|(env, message)| {
            let code = if crate::row::binding::is_reserved(&env) {
                "reserved_credential"
            } else {
                "bad_bindings"
            };
            Diagnostic::error(
                &file.path,
                (line_of(&env), 3),
                code,
                message,
                "bind only the upstreams' credentials, each to the https:// origins it belongs to",
            )
        })
        .collect();
    (bindings, diags)
}

/// Every row's credential against the bindings: each variable it names is bound, not the
/// dispatcher's own, to the origin its target calls (the path is judged on the wire, once
/// its slots are filled), with its method, for this row.
pub fn check_bindings(rows: &[&Row], bindings: &Bindings) -> Vec<Diagnostic> {
    use crate::row::binding::{Destination, destination_of};
    let mut d = Vec::new();
    for row in rows {
        let Ok(Some(credential)) = Credential::parse(&row.auth) else {
            continue;
        };
        let Some(destination) = destination_of(row) else {
            continue;
        };
        // An `oauth:` credential's variables go to its token endpoint too, with POST.
        let token_endpoint = match &credential {
            Credential::OAuth(o) => url::Url::parse(&o.token_url).ok(),
            _ => None,
        };
        for env in credential.envs() {
            let judged = match &destination {
                Destination::Http { origin, method } => bindings
                    .admit_origin(&env, origin, method, &row.key, &row.category)
                    .and_then(|()| match &token_endpoint {
                        Some(t) => bindings.admit_origin(&env, t, "POST", &row.key, &row.category),
                        None => Ok(()),
                    }),
                Destination::Stdio => bindings.admit_stdio(&env, &row.key, &row.category),
                Destination::Model => bindings
                    .binding_for(&env, &row.key, &row.category)
                    .map(|_| ()),
            };
            if let Err(refusal) = judged {
                let help = match refusal.code {
                    "reserved_credential" => {
                        "a row may never use the dispatcher's own variables (CAPDIR_*); name the upstream's credential".to_string()
                    }
                    "unbound_credential" => format!(
                        "add `{env}` to catalogue/{} with the origins it belongs to (the owner reviews that file)",
                        crate::row::binding::FILE
                    ),
                    _ => format!(
                        "point the row at an origin `{env}` is bound to, or ask the owner to bind it (catalogue/{})",
                        crate::row::binding::FILE
                    ),
                };
                d.push(Diagnostic::error(
                    &row.path,
                    row.spans.value("auth"),
                    refusal.code,
                    format!("`{}`: {}", row.key, refusal.message),
                    help,
                ));
            }
        }
    }
    d
}

/// `check_files` of row files alone.
fn check_row_files(
    files: &[&SourceFile],
    known: &(dyn Fn(&SourceFile) -> Option<Row> + Sync),
    unread: &[&Row],
) -> Checked {
    let workers = crate::cores().min(8);
    // Small catalogues are not worth a thread.
    let chunk = files.len().div_ceil(workers).max(256);
    let parts: Vec<(Vec<Row>, Vec<Diagnostic>)> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| s.spawn(move || check_each(part, known)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("checking a row does not panic"))
            .collect()
    });
    let mut out = Checked {
        files: files.len() + unread.len(),
        ..Default::default()
    };
    for (rows, diags) in parts {
        out.rows.extend(rows);
        out.diags.extend(diags);
    }
    let by_key_and_path = |a: &Row, b: &Row| a.key.cmp(&b.key).then_with(|| a.path.cmp(&b.path));
    out.rows.sort_by(by_key_and_path);
    let mut rows: Vec<&Row> = out.rows.iter().chain(unread.iter().copied()).collect();
    rows.sort_by(|a, b| by_key_and_path(a, b));
    out.diags.extend(check_across(&rows));
    crate::row::diag::sort(&mut out.diags);
    out
}

/// The rules of one file at a time: its rows and their diagnostics.
fn check_each(
    files: &[&SourceFile],
    known: &(dyn Fn(&SourceFile) -> Option<Row> + Sync),
) -> (Vec<Row>, Vec<Diagnostic>) {
    let (mut rows, mut diags) = (Vec::new(), Vec::new());
    for file in files {
        if let Some(row) = known(file) {
            rows.push(row);
            continue;
        }
        let (row, d) = check_file(file);
        diags.extend(d);
        rows.extend(row);
    }
    (rows, diags)
}

/// The rules of one file: its row, when it parses, and every problem of the file alone.
pub fn check_file(file: &SourceFile) -> (Option<Row>, Vec<Diagnostic>) {
    let parsed = row::parse_row(&file.path, &file.bytes);
    let mut diags = parsed.diags;
    if let Ok(text) = std::str::from_utf8(&file.bytes)
        && file.bytes.len() <= row::MAX_ROW_BYTES
    {
        diags.extend(check_secrets(&file.path, text));
        diags.extend(check_placeholders(&file.path, text));
    }
    if let Some(row) = &parsed.row {
        diags.extend(check_row(row));
    }
    (parsed.row, diags)
}

fn check_secrets(path: &Path, text: &str) -> Vec<Diagnostic> {
    secrets::scan(text)
        .into_iter()
        .map(|f| {
            Diagnostic::error(
                path,
                line_col(text.as_bytes(), f.start),
                "secret_value",
                format!("this looks like a credential ({}); rows must not hold secrets", f.kind),
                "remove the value and name the environment variable that holds it (`auth: bearer:MY_TOKEN`); rotate the secret if it was ever committed",
            )
        })
        .collect()
}

fn check_placeholders(path: &Path, text: &str) -> Vec<Diagnostic> {
    let marker = crate::check::scaffold::PLACEHOLDER;
    crate::row::yaml_lines(text)
        .enumerate()
        .filter_map(|(i, line)| {
            line.find(marker).map(|c| {
                Diagnostic::error(
                    path,
                    (i + 1, c + 1),
                    "scaffold_placeholder",
                    format!("`{marker}` marks a prompt of the scaffold that is not filled in"),
                    "replace it with the real text, then run `capdir check` again",
                )
            })
        })
        .collect()
}

pub use across::check_across;
pub use rules::check_row;

/// A lowercase category name: letters, digits and dashes.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The asymmetric rule of a pull-request check against `base` (the same catalogue at the
/// target branch): new rows and rows that were clean must be clean now; a row that was
/// already failing may be edited as long as it gets no worse, and its old problems become
/// warnings.
pub fn against_base(current: &[SourceFile], checked: &mut Checked, base: &[SourceFile]) {
    let base_checked = check_files(base);
    let base_bytes: HashMap<&str, &[u8]> = base
        .iter()
        .map(|f| (f.file_name(), f.bytes.as_slice()))
        .collect();
    let current_bytes: HashMap<&str, &[u8]> = current
        .iter()
        .map(|f| (f.file_name(), f.bytes.as_slice()))
        .collect();
    demote_legacy(&mut checked.diags, &base_checked.diags, &|file| {
        base_bytes.get(file) == current_bytes.get(file)
    });
    checked.diags.extend(bindings_changed(
        &base_checked.bindings,
        &checked.bindings,
        current,
    ));
    checked.diags.extend(review::callable_changes(
        &base_checked.rows,
        &checked.rows,
        &base_checked.bindings,
        &checked.bindings,
    ));
}

/// A change to the bindings is a review item of its own: which credential may now go where
/// (or no longer), one warning per credential that changed.
fn bindings_changed(base: &Bindings, now: &Bindings, current: &[SourceFile]) -> Vec<Diagnostic> {
    let path = current
        .iter()
        .find(|f| f.file_name() == crate::row::binding::FILE)
        .map(|f| f.path.clone())
        .unwrap_or_else(|| Path::new(crate::row::binding::FILE).to_path_buf());
    let names: std::collections::BTreeSet<&String> = base
        .credentials
        .keys()
        .chain(now.credentials.keys())
        .collect();
    let show = |b: Option<&crate::row::binding::Binding>| match b {
        None => "unbound".to_string(),
        Some(b) => {
            let mut s = b.origins.join(", ");
            if !b.methods.is_empty() {
                s.push_str(&format!(" ({})", b.methods.join(", ")));
            }
            if !b.keys.is_empty() || !b.categories.is_empty() {
                let rows: Vec<String> = b
                    .keys
                    .iter()
                    .cloned()
                    .chain(b.categories.iter().map(|c| format!("category {c}")))
                    .collect();
                s.push_str(&format!(" for {}", rows.join(", ")));
            }
            s
        }
    };
    names
        .into_iter()
        .filter(|env| base.credentials.get(*env) != now.credentials.get(*env))
        .map(|env| {
            Diagnostic::error(
                &path,
                (1, 1),
                "bindings_changed",
                format!(
                    "credential `{env}` goes to: {} → {}",
                    show(base.credentials.get(env)),
                    show(now.credentials.get(env))
                ),
                "a reviewer who owns the bindings approves where the dispatcher's secrets may go",
            )
            .warning()
        })
        .collect()
}

/// The base rule over diagnostics already found: an error in a file that had errors at the
/// base becomes a warning ("legacy problem") when the file is `unchanged` (by name), or as
/// many times as the base had that error's code in it; the errors of files that were clean
/// at the base, or new, stand.
pub fn demote_legacy(
    diags: &mut [Diagnostic],
    base: &[Diagnostic],
    unchanged: &dyn Fn(&str) -> bool,
) {
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string()
    };
    let mut base_codes: HashMap<String, HashMap<&str, usize>> = HashMap::new();
    for diag in base.iter().filter(|d| d.is_error()) {
        *base_codes
            .entry(name(&diag.path))
            .or_default()
            .entry(diag.code)
            .or_default() += 1;
    }
    let mut used: HashMap<String, HashMap<&str, usize>> = HashMap::new();
    for diag in diags.iter_mut().filter(|d| d.is_error()) {
        let file = name(&diag.path);
        let Some(old) = base_codes.get(&file) else {
            continue; // new row, or a row that was clean: its errors stand
        };
        let n = used
            .entry(file.clone())
            .or_default()
            .entry(diag.code)
            .or_default();
        *n += 1;
        if unchanged(&file) || *n <= old.get(diag.code).copied().unwrap_or(0) {
            diag.severity = crate::row::diag::Severity::Warning;
            diag.message = format!(
                "legacy problem, already present at the base revision: {}",
                diag.message
            );
        }
    }
}

/// One row file changed in a catalogue: its bytes before (none for a new row) and after
/// (none for a removed one).
#[derive(Debug, Clone, Copy)]
pub struct FileChange<'a> {
    /// Where the file is, as diagnostics name it (`catalogue/KEY.yaml`).
    pub path: &'a Path,
    pub before: Option<&'a [u8]>,
    pub after: Option<&'a [u8]>,
}

/// What the gate says of a catalogue after one file changed, with the base rule of
/// `capdir check --base` taking the catalogue before the change as the base, computed from
/// the change alone: the file's own rules before and after, the rules across rows over the
/// rows before (`base`) and after, and the asks of the changed row (searched in `searchers`:
/// the catalogue's index before and after). A new row must be clean; a row that was clean
/// must stay clean, and so must every other row (removing a flow's step breaks the flow); a
/// row that already failed may change as long as it gets no worse. The asks of the other
/// rows are not searched again: a new row that outranks them is for `capdir check` in CI to
/// find, which searches every ask. `base_across`, when known (the last change's `across`),
/// spares going over every row of the base again.
pub fn check_change(
    base: &[&Row],
    change: FileChange,
    searchers: (&crate::search::Searcher, &crate::search::Searcher),
    base_across: Option<&[Diagnostic]>,
    bindings: &Bindings,
) -> ChangeChecked {
    let file_of = |r: &Row| r.path.file_name().map(|n| n.to_owned());
    let changed_name = change.path.file_name().map(|n| n.to_owned());
    let own = |bytes: Option<&[u8]>, searcher: &crate::search::Searcher| {
        let Some(bytes) = bytes else {
            return (None, Vec::new());
        };
        let (row, mut diags) = check_file(&SourceFile {
            path: change.path.to_path_buf(),
            bytes: bytes.to_vec(),
        });
        if let Some(r) = &row {
            diags.extend(check_bindings(&[r], bindings));
        }
        if let Some(r) = &row
            && !diags.iter().any(Diagnostic::is_error)
        {
            diags.extend(asks_of(searcher, &[r]));
        }
        (row, diags)
    };
    let (_, mut before) = own(change.before, searchers.0);
    let (after_row, mut after) = own(change.after, searchers.1);
    match base_across {
        Some(known) => before.extend_from_slice(known),
        None => before.extend(check_across(base)),
    }
    let mut rows: Vec<&Row> = base
        .iter()
        .copied()
        .filter(|r| file_of(r) != changed_name)
        .collect();
    if let Some(r) = &after_row {
        rows.push(r);
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.path.cmp(&b.path)));
    let across = check_across(&rows);
    after.extend_from_slice(&across);
    let changed = changed_name.and_then(|n| n.to_str().map(str::to_string));
    demote_legacy(&mut after, &before, &|file| {
        Some(file) != changed.as_deref()
    });
    crate::row::diag::sort(&mut after);
    ChangeChecked {
        diagnostics: after,
        across,
    }
}

/// What [`check_change`] found: every diagnostic of the catalogue after the change (the
/// base rule applied), and the rules across rows of that catalogue alone, which are the
/// next change's `base_across` when this one is made.
#[derive(Debug, Default)]
pub struct ChangeChecked {
    pub diagnostics: Vec<Diagnostic>,
    pub across: Vec<Diagnostic>,
}

/// One ask of another row that a changed row would push down: the other row ranked
/// `before` for it (`None`: not in the top 12) and `after` with the change, the changed row
/// now above it.
#[derive(Debug, Clone)]
pub struct Displaced<'r> {
    pub row: &'r Row,
    pub ask: &'r str,
    pub before: Option<usize>,
    pub after: Option<usize>,
}

/// The asks of `rows` (other than `changed`'s own) that the changed row `changed` takes out of
/// their place: the row that asks was the best answer and `changed` now is, or it was in the
/// asks gate's top [`ASK_TOP`] and `changed` pushed it out. `before` and `after` are the
/// catalogue's index without and with the change. The write API refuses such a change unless
/// the writer may write every row it displaces: a row's asks are its own to keep, and a
/// writer of one category could otherwise make its row the best answer to another's asks.
pub fn displaced_by<'r>(
    changed: &str,
    rows: &[&'r Row],
    before: &crate::search::Searcher,
    after: &crate::search::Searcher,
) -> Vec<Displaced<'r>> {
    const DEPTH: usize = 12;
    let rank = |hits: &[crate::search::Hit], key: &str| {
        hits.iter().position(|h| h.key == key).map(|p| p + 1)
    };
    let mut out = Vec::new();
    for row in rows
        .iter()
        .filter(|r| r.key != changed && r.enabled && r.planner_visible)
    {
        for ask in &row.asks {
            let Ok(now) = after.ask(ask, DEPTH) else {
                continue;
            };
            let (Some(theirs), ours) = (rank(&now, changed), rank(&now, &row.key)) else {
                continue;
            };
            if ours.is_some_and(|o| o < theirs) {
                continue;
            }
            let was = before.ask(ask, DEPTH).ok().and_then(|h| rank(&h, &row.key));
            // Its place: the best answer to its ask, or found at all (the asks gate's top).
            let lost_best = was == Some(1) && theirs == 1;
            let lost_found = was.is_some_and(|w| w <= ASK_TOP) && ours.is_none_or(|o| o > ASK_TOP);
            if lost_best || lost_found {
                out.push(Displaced {
                    row,
                    ask,
                    before: was,
                    after: ours,
                });
            }
        }
    }
    out
}

/// The asks gate: every ask of an enabled row must rank that row in the top [`ASK_TOP`] of
/// the catalogue's own search, so a row nobody can find does not merge.
pub const ASK_TOP: usize = 3;

pub fn asks_gate(rows: &[Row]) -> Vec<Diagnostic> {
    let searcher = match crate::search::Searcher::in_memory(rows) {
        Ok(s) => s,
        Err(e) => {
            return vec![Diagnostic::error(
                Path::new("."),
                (1, 1),
                "search_index",
                format!("cannot build the search index for the asks gate: {e:#}"),
                "report this as a bug",
            )];
        }
    };
    let rows: Vec<&Row> = rows.iter().collect();
    asks_of(&searcher, &rows)
}

/// The asks gate for `rows`, searched in `searcher` (the index of the catalogue they are in).
pub fn asks_of(searcher: &crate::search::Searcher, rows: &[&Row]) -> Vec<Diagnostic> {
    let mut d = Vec::new();
    // A row kept from planners is not asked for: its asks are not checked.
    for row in rows.iter().filter(|r| r.enabled && r.planner_visible) {
        for (i, ask) in row.asks.iter().enumerate() {
            let hits = match searcher.ask(ask, 12) {
                Ok(h) => h,
                Err(_) => continue,
            };
            let rank = hits.iter().position(|h| h.key == row.key).map(|p| p + 1);
            if rank.is_some_and(|r| r <= ASK_TOP) {
                continue;
            }
            let top: Vec<&str> = hits.iter().take(ASK_TOP).map(|h| h.key.as_str()).collect();
            let place = match rank {
                Some(r) => format!("ranks this row #{r}"),
                None => "does not find this row in the top 12".to_string(),
            };
            d.push(Diagnostic::error(
                &row.path,
                row.spans.item("asks", i),
                "ask_not_found",
                format!(
                    "ask {ask:?} {place}; the top {ASK_TOP} are {}",
                    top.join(", ")
                ),
                "use the words people would use in WHAT or WHEN_TO_USE, or rephrase the ask",
            ));
        }
    }
    d
}
