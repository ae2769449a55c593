//! The row: one capability, parsed strictly from `catalogue/KEY.yaml`.
//!
//! Parsing is two reads of the same text: serde_yaml gives the values, marked-yaml gives the
//! line and column of every top-level field, so a diagnostic can point at the field itself.
//! Problems are collected as diagnostics rather than returned as the first error, and no input
//! (binary junk, huge files, odd YAML) makes this module panic.

pub mod args;
pub mod binding;
pub mod builtins;
pub mod call;
pub mod catalogue;
pub mod credential;
pub mod diag;
pub mod expand;
pub mod flow;
pub mod mcp;
pub mod route;
pub mod server_json;
pub mod target;
pub mod template;
pub mod urls;

use crate::row::diag::{Diagnostic, did_you_mean};
use serde::Serialize;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Row files larger than this are refused before parsing: a capability is a few KB.
pub const MAX_ROW_BYTES: usize = 256 * 1024;

/// Every field a row may have, in the order the design lists them.
pub const FIELDS: &[&str] = &[
    "key",
    "type",
    "target",
    "auth",
    "content",
    "category",
    "allowed_categories",
    "seq",
    "enabled",
    "planner_visible",
    "planner_rank",
    "input_schema",
    "examples",
    "sensitive",
    "runner",
    "includes",
    "asks",
    "route_reply",
];

/// Which runner executes a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RowType {
    Fn,
    Http,
    Agent,
    Flow,
}

/// The runners a row may name in `runner` (which overrides the one its type infers); the
/// invoker has one of each. `mcp` is named only: it forwards a `type: http` row's call to a
/// tool of an MCP server (`row::mcp`).
pub const RUNNERS: [&str; 5] = ["fn", "http", "agent", "flow", mcp::RUNNER];

impl RowType {
    pub const ALL: [RowType; 4] = [RowType::Fn, RowType::Http, RowType::Agent, RowType::Flow];

    pub fn as_str(self) -> &'static str {
        match self {
            RowType::Fn => "fn",
            RowType::Http => "http",
            RowType::Agent => "agent",
            RowType::Flow => "flow",
        }
    }

    pub fn parse(s: &str) -> Option<RowType> {
        RowType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The `#` lines at the top of `content`, by tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Docstring {
    pub what: Option<String>,
    pub when_to_use: Option<String>,
    pub args: Option<String>,
    pub ex: Option<String>,
    pub output: Option<String>,
    /// `#` lines without a known tag, kept for the contract.
    pub notes: Vec<String>,
}

/// `content` split into its docstring and its executable payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Content {
    pub doc: Docstring,
    pub payload: String,
    /// 0-based line of the payload's first line within `content`.
    pub payload_line: usize,
}

/// Split `content` into the leading `#` lines (blank lines among them allowed) and the rest.
pub fn split_content(content: &str) -> Content {
    let lines: Vec<&str> = content.lines().collect();
    let mut doc = Docstring::default();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        if t.is_empty() {
            i += 1;
            continue;
        }
        let Some(rest) = t.strip_prefix('#') else {
            break;
        };
        let rest = rest.trim();
        let tagged = rest.split_once(':').and_then(|(tag, text)| {
            let slot = match tag.trim() {
                "WHAT" => &mut doc.what,
                "WHEN_TO_USE" => &mut doc.when_to_use,
                "ARGS" => &mut doc.args,
                "EX" => &mut doc.ex,
                "OUTPUT" => &mut doc.output,
                _ => return None,
            };
            let text = text.trim();
            match slot {
                Some(prev) if !text.is_empty() => {
                    prev.push(' ');
                    prev.push_str(text);
                }
                Some(_) => {}
                None => *slot = Some(text.to_string()),
            }
            Some(())
        });
        if tagged.is_none() && !rest.is_empty() {
            doc.notes.push(rest.to_string());
        }
        i += 1;
    }
    let payload = lines[i.min(lines.len())..]
        .join("\n")
        .trim_end()
        .to_string();
    Content {
        doc,
        payload,
        payload_line: i,
    }
}

/// Where each top-level field sits in the file (1-based line and column), for diagnostics.
/// Found from the row's text when first asked: a row without problems never asks, and
/// locating is a second YAML parse (a third of the time of reading a row).
#[derive(Debug, Clone, Default)]
pub struct Spans {
    /// The row's text: given, or read from `file` when first asked.
    text: std::sync::OnceLock<Option<std::sync::Arc<str>>>,
    /// The file the text is read from, for a row taken as checked without reading its file
    /// (`build::checked`).
    file: Option<std::sync::Arc<Path>>,
    located: std::sync::OnceLock<Located>,
}

/// Equal when made from the same text.
impl PartialEq for Spans {
    fn eq(&self, other: &Spans) -> bool {
        self.text() == other.text()
    }
}

impl Eq for Spans {}

#[derive(Debug, Clone, Default)]
struct Located {
    keys: BTreeMap<String, (usize, usize)>,
    values: BTreeMap<String, (usize, usize)>,
    /// Positions of the items of list-valued fields (`examples`, `asks`, …).
    items: BTreeMap<String, Vec<(usize, usize)>>,
    /// 1-based file line of the first line of `content`'s text.
    content_line: usize,
    /// The file's last line (1-based), the furthest a diagnostic may point; 0 without a text.
    last_line: usize,
}

impl Spans {
    /// The spans of `text`, found when first asked for.
    pub fn of(text: &str) -> Spans {
        Spans {
            text: std::sync::OnceLock::from(Some(text.into())),
            ..Spans::default()
        }
    }

    /// The spans of the text of the file at `path`, read when first asked for (a file that
    /// does not read then has none).
    pub fn in_file(path: &Path) -> Spans {
        Spans {
            file: Some(path.into()),
            ..Spans::default()
        }
    }

    fn text(&self) -> Option<&str> {
        self.text
            .get_or_init(|| {
                let file = self.file.as_deref()?;
                Some(std::fs::read_to_string(file).ok()?.into())
            })
            .as_deref()
    }

    fn located(&self) -> &Located {
        self.located
            .get_or_init(|| self.text().map(locate).unwrap_or_default())
    }

    /// `pos`, on the file's last line when it is past it: YAML places an empty value (a
    /// content of docstring alone, a property without a schema) where the next line would
    /// start, and the file may end there. Every position a diagnostic gets passes here (a
    /// text that could not be read has no last line: 0, and nothing is moved).
    fn within(&self, (line, col): (usize, usize)) -> (usize, usize) {
        match self.located().last_line {
            0 => (line, col),
            last => (line.min(last), col),
        }
    }

    /// Position of a field's value, else its key, else the top of the file.
    pub fn value(&self, field: &str) -> (usize, usize) {
        let l = self.located();
        self.within(
            l.values
                .get(field)
                .or_else(|| l.keys.get(field))
                .copied()
                .unwrap_or((1, 1)),
        )
    }

    /// Position of item `i` of a list field, else the field's value.
    pub fn item(&self, field: &str, i: usize) -> (usize, usize) {
        self.located()
            .items
            .get(field)
            .and_then(|v| v.get(i))
            .map(|&p| self.within(p))
            .unwrap_or_else(|| self.value(field))
    }

    pub fn key(&self, field: &str) -> (usize, usize) {
        self.within(self.located().keys.get(field).copied().unwrap_or((1, 1)))
    }

    /// Position of the node at a JSON pointer inside a field (`input_schema`,
    /// `/properties/a/type`), else of the field's value.
    pub fn at_pointer(&self, field: &str, pointer: &str) -> (usize, usize) {
        self.text()
            .and_then(|t| locate_path(t, field, pointer))
            .map(|p| self.within(p))
            .unwrap_or_else(|| self.value(field))
    }

    /// 1-based file line of the first line of `content`'s text; 0 when unknown.
    pub fn content_line(&self) -> usize {
        self.located().content_line
    }

    /// File line of line `n` (0-based) of `content`.
    pub fn content_at(&self, n: usize) -> (usize, usize) {
        match self.content_line() {
            0 => self.value("content"),
            line => self.within((line + n, 3)),
        }
    }
}

/// One capability, as parsed and typed. Fields mirror DESIGN.md §1.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Unique key; equals the file stem.
    pub key: String,
    /// Which runner executes the row.
    pub kind: RowType,
    /// fn builtin, `METHOD url`, model id, or empty for flows.
    pub target: String,
    /// How to apply a credential named by environment variable; empty = none.
    pub auth: String,
    /// Docstring lines then the payload, verbatim.
    pub content: String,
    /// Grouping label.
    pub category: String,
    /// Agent rows: categories their tool listing is limited to.
    pub allowed_categories: Vec<String>,
    /// Manual ordinal.
    pub seq: Option<i64>,
    /// False hides the row from every projection.
    pub enabled: bool,
    /// False keeps it invocable but out of planners and MCP.
    pub planner_visible: bool,
    /// Tie-break among candidates; lower first.
    pub planner_rank: i64,
    /// Typed arguments, as JSON Schema.
    pub input_schema: Option<Json>,
    /// Worked argument strings.
    pub examples: Vec<String>,
    /// Only high-risk credentials may run it.
    pub sensitive: bool,
    /// Overrides the runner inferred from `type`.
    pub runner: String,
    /// Agent rows: prompt-block rows composed in front of `content`.
    pub includes: Vec<String>,
    /// Requests that must find this row.
    pub asks: Vec<String>,
    /// Agent rows: the final reply's router tags (`[KEY]args[/KEY]`) are run, each under the
    /// caller's authority, and replaced by their outputs.
    pub route_reply: bool,
    /// The parsed docstring and payload.
    pub parsed: Content,
    /// The file it came from, relative to where the catalogue was read.
    pub path: PathBuf,
    pub spans: Spans,
}

impl Row {
    pub fn doc(&self) -> &Docstring {
        &self.parsed.doc
    }

    pub fn payload(&self) -> &str {
        &self.parsed.payload
    }

    pub fn what(&self) -> &str {
        self.parsed.doc.what.as_deref().unwrap_or("")
    }

    /// The runner that executes this row: `runner` if set, else the type's.
    pub fn runner_name(&self) -> &str {
        if self.runner.is_empty() {
            self.kind.as_str()
        } else {
            &self.runner
        }
    }

    /// Does this row forward its calls to a tool of an MCP server (`runner: mcp`)?
    pub fn is_mcp(&self) -> bool {
        self.runner == mcp::RUNNER
    }

    /// Is `tool` among the tools of this agent row: enabled, visible to planners, not the agent
    /// itself, in one of its `allowed_categories` (`*`: any)? The tool listing, the composed
    /// fingerprint and the gate's `reaches_sensitive` all ask this.
    pub fn offers_tool(&self, tool: &Row) -> bool {
        tool.enabled
            && tool.planner_visible
            && tool.key != self.key
            && self
                .allowed_categories
                .iter()
                .any(|c| c == "*" || *c == tool.category)
    }

    /// Test-shaped keys stay out of the registry count (DESIGN.md §6).
    pub fn is_test_shaped(&self) -> bool {
        is_test_key(&self.key)
    }
}

/// The name a category is listed under: rows without one are `uncategorized`.
/// A category name: lowercase letters, digits and dashes.
pub fn is_category(c: &str) -> bool {
    !c.is_empty()
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

pub fn category_name(category: &str) -> &str {
    if category.is_empty() {
        "uncategorized"
    } else {
        category
    }
}

/// Where a row stands in a listing (the registry, category pages): rows with a `seq` first, in
/// `seq` order, then the rest by key.
pub fn listing_order(seq: Option<i64>, key: &str) -> (bool, i64, &str) {
    (seq.is_none(), seq.unwrap_or(0), key)
}

/// `ZZ_TEST_*`, `TEST_*`, `*_TEST`: keys that exist to exercise the system, not to be used.
pub fn is_test_key(key: &str) -> bool {
    key.starts_with("ZZ_") || key.starts_with("TEST_") || key.ends_with("_TEST")
}

/// Key syntax of DESIGN.md §1.
pub fn is_valid_key(key: &str) -> bool {
    let b = key.as_bytes();
    (2..=64).contains(&b.len())
        && b[0].is_ascii_uppercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// The result of reading one file: the row when it could be typed, and every problem found.
#[derive(Debug, Default)]
pub struct Parsed {
    pub row: Option<Row>,
    pub diags: Vec<Diagnostic>,
}

/// Parse one row file. `path` is used for diagnostics and the expected key (its stem).
pub fn parse_row(path: &Path, bytes: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    let (text, map) = match mapping(path, bytes) {
        Ok(read) => read,
        Err(d) => {
            out.diags.push(d);
            return out;
        }
    };
    let spans = Spans::of(text);
    let raw = known_fields(path, &map, &spans, &mut out.diags);
    let mut fields = Fields {
        path,
        spans: &spans,
        diags: &mut out.diags,
    };
    let key = fields.string(&raw, "key");
    let kind_text = fields.string(&raw, "type");
    let content = fields.string(&raw, "content");
    let target = fields.string(&raw, "target").unwrap_or_default();
    let auth = fields.string(&raw, "auth").unwrap_or_default();
    let category = fields.string(&raw, "category").unwrap_or_default();
    let runner = fields.string(&raw, "runner").unwrap_or_default();
    let allowed_categories = fields.strings(&raw, "allowed_categories");
    let examples = fields.strings(&raw, "examples");
    let includes = fields.strings(&raw, "includes");
    let asks = fields.strings(&raw, "asks");
    let seq = fields.int(&raw, "seq");
    let planner_rank = fields.int(&raw, "planner_rank").unwrap_or(100);
    let enabled = fields.boolean(&raw, "enabled").unwrap_or(true);
    let planner_visible = fields.boolean(&raw, "planner_visible").unwrap_or(true);
    let sensitive = fields.boolean(&raw, "sensitive").unwrap_or(false);
    let route_reply = fields.boolean(&raw, "route_reply").unwrap_or(false);
    let input_schema = fields.json(&raw, "input_schema");
    let Some(key) = key else {
        if !raw.contains_key("key") {
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            out.diags.push(Diagnostic::error(
                path,
                (1, 1),
                "missing_key",
                "row has no `key`",
                format!("add `key: {stem}` (the key equals the file name)"),
            ));
        }
        return out;
    };
    let kind = kind_of(path, kind_text, &raw, &spans, &mut out.diags);
    if content.is_none() && !raw.contains_key("content") {
        out.diags.push(Diagnostic::error(
            path,
            spans.key("key"),
            "missing_content",
            "row has no `content`",
            "add `content: |` with `# WHAT:`, `# WHEN_TO_USE:`, `# ARGS:`, `# EX:`, `# OUTPUT:` lines and the payload",
        ));
    }
    let (Some(kind), Some(content)) = (kind, content) else {
        return out;
    };
    let parsed = split_content(&content);
    out.row = Some(Row {
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
        parsed,
        path: path.to_path_buf(),
        spans,
    });
    out
}

/// The file as text and its YAML as a mapping of fields, or the first reason it is neither
/// (too large, not UTF-8, empty, not YAML, not a mapping).
fn mapping<'b>(path: &Path, bytes: &'b [u8]) -> Result<(&'b str, serde_yaml::Mapping), Diagnostic> {
    let err = |pos, code, msg: String, help: &str| Diagnostic::error(path, pos, code, msg, help);
    if bytes.len() > MAX_ROW_BYTES {
        return Err(err(
            (1, 1),
            "file_too_large",
            format!(
                "row file is {} bytes; the limit is {MAX_ROW_BYTES}",
                bytes.len()
            ),
            "a row describes one capability in a few KB; move bulk data out of the catalogue",
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        err(
            line_col(bytes, e.valid_up_to()),
            "not_utf8",
            format!(
                "row file is not UTF-8 text (invalid byte at offset {})",
                e.valid_up_to()
            ),
            "save the file as UTF-8 YAML",
        )
    })?;
    if text.trim().is_empty() {
        return Err(err(
            (1, 1),
            "empty_file",
            "row file is empty".into(),
            "write the row's fields, or run `capdir new KEY --type fn` for a scaffold",
        ));
    }
    let value: Yaml = serde_yaml::from_str(text).map_err(|e| {
        let pos = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((1, 1));
        // An error found at the end of the text (an unclosed quote or bracket runs on to the
        // end) is about the last line written, not the empty one after it.
        let pos = if pos.0 > yaml_lines(text).count() {
            last_written(text).unwrap_or(pos)
        } else {
            pos
        };
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        err(
            pos,
            "yaml_syntax",
            format!("YAML syntax error: {msg}"),
            "fix the YAML at this position (indent with spaces, close quotes, one `field: value` a line)",
        )
    })?;
    match value {
        Yaml::Mapping(map) => Ok((text, map)),
        other => Err(err(
            (1, 1),
            "not_a_mapping",
            format!(
                "a row file must be a mapping of fields, found {}",
                yaml_kind(&other)
            ),
            "write the row as `key: …`, `type: …`, `content: |` lines",
        )),
    }
}

/// The row's fields by name; each field name that is not one (or not a string) a diagnostic.
fn known_fields<'m>(
    path: &Path,
    map: &'m serde_yaml::Mapping,
    spans: &Spans,
    diags: &mut Vec<Diagnostic>,
) -> BTreeMap<&'static str, &'m Yaml> {
    let mut raw = BTreeMap::new();
    for (k, v) in map {
        let Some(name) = k.as_str() else {
            diags.push(Diagnostic::error(
                path,
                (1, 1),
                "unknown_field",
                format!("field names must be strings, found {}", yaml_kind(k)),
                "use one of the row fields: key, type, target, auth, content, …",
            ));
            continue;
        };
        if let Some(known) = FIELDS.iter().find(|f| **f == name) {
            raw.insert(*known, v);
            continue;
        }
        let help = if name == "created_at" || name == "updated_at" {
            format!("remove `{name}`: it is derived from the Git history of the file")
        } else if let Some(s) = did_you_mean(name, FIELDS.iter().copied()) {
            format!("did you mean `{s}`?")
        } else {
            format!("remove it; the row fields are: {}", FIELDS.join(", "))
        };
        diags.push(Diagnostic::error(
            path,
            spans.key(name),
            "unknown_field",
            format!("unknown field `{name}`"),
            help,
        ));
    }
    raw
}

/// The row's type, when it names one; a missing or unknown type a diagnostic.
fn kind_of(
    path: &Path,
    kind_text: Option<String>,
    raw: &BTreeMap<&'static str, &Yaml>,
    spans: &Spans,
    diags: &mut Vec<Diagnostic>,
) -> Option<RowType> {
    let Some(t) = kind_text else {
        if !raw.contains_key("type") {
            diags.push(Diagnostic::error(
                path,
                spans.key("key"),
                "missing_type",
                "row has no `type`",
                "add `type: fn` (or http, agent, flow)",
            ));
        }
        return None;
    };
    let kind = RowType::parse(&t);
    if kind.is_none() {
        diags.push(Diagnostic::error(
            path,
            spans.value("type"),
            "bad_type",
            format!("unknown row type `{t}`"),
            "use one of: fn, http, agent, flow",
        ));
    }
    kind
}

/// Typed access to the raw field values, recording a `wrong_type` diagnostic on mismatch.
struct Fields<'a> {
    path: &'a Path,
    spans: &'a Spans,
    diags: &'a mut Vec<Diagnostic>,
}

impl Fields<'_> {
    fn wrong(&mut self, field: &str, expected: &str, found: &Yaml) {
        self.diags.push(Diagnostic::error(
            self.path,
            self.spans.value(field),
            "wrong_type",
            format!("`{field}` must be {expected}, found {}", yaml_kind(found)),
            format!("write `{field}` as {expected}"),
        ));
    }

    fn string(&mut self, raw: &BTreeMap<&str, &Yaml>, field: &str) -> Option<String> {
        match raw.get(field)? {
            Yaml::Null => None,
            Yaml::String(s) => Some(s.clone()),
            other => {
                self.wrong(field, "a string", other);
                None
            }
        }
    }

    fn strings(&mut self, raw: &BTreeMap<&str, &Yaml>, field: &str) -> Vec<String> {
        match raw.get(field) {
            None | Some(Yaml::Null) => Vec::new(),
            Some(Yaml::Sequence(items)) if items.iter().all(|i| i.is_string()) => items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect(),
            Some(other) => {
                self.wrong(field, "a list of strings", other);
                Vec::new()
            }
        }
    }

    fn int(&mut self, raw: &BTreeMap<&str, &Yaml>, field: &str) -> Option<i64> {
        match raw.get(field)? {
            Yaml::Null => None,
            Yaml::Number(n) if n.as_i64().is_some() => n.as_i64(),
            other => {
                self.wrong(field, "a whole number", other);
                None
            }
        }
    }

    fn boolean(&mut self, raw: &BTreeMap<&str, &Yaml>, field: &str) -> Option<bool> {
        match raw.get(field)? {
            Yaml::Null => None,
            Yaml::Bool(b) => Some(*b),
            other => {
                self.wrong(field, "a boolean (true or false)", other);
                None
            }
        }
    }

    fn json(&mut self, raw: &BTreeMap<&str, &Yaml>, field: &str) -> Option<Json> {
        match raw.get(field)? {
            Yaml::Null => None,
            v @ Yaml::Mapping(_) => match serde_json::to_value(v) {
                Ok(j) => Some(j),
                Err(e) => {
                    self.diags.push(Diagnostic::error(
                        self.path,
                        self.spans.value(field),
                        "bad_input_schema",
                        format!("`{field}` cannot be read as JSON: {e}"),
                        "use string keys and plain values (JSON Schema written as YAML)",
                    ));
                    None
                }
            },
            other => {
                self.wrong(field, "a mapping (a JSON Schema written as YAML)", other);
                None
            }
        }
    }
}

fn yaml_kind(v: &Yaml) -> String {
    match v {
        Yaml::Null => "nothing (null)".into(),
        Yaml::Bool(b) => format!("a boolean `{b}`"),
        Yaml::Number(n) => format!("a number `{n}`"),
        Yaml::String(s) => format!("a string {:?}", truncate(s, 40)),
        Yaml::Sequence(_) => "a list".into(),
        Yaml::Mapping(_) => "a mapping".into(),
        Yaml::Tagged(t) => format!("a tagged value `{}`", t.tag),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// Whether the byte at `i` ends a line as YAML reads it: a `\n`, or a `\r` that no `\n`
/// follows (a `\r\n` ends at its `\n`).
fn breaks_at(bytes: &[u8], i: usize) -> bool {
    match bytes[i] {
        b'\n' => true,
        b'\r' => bytes.get(i + 1) != Some(&b'\n'),
        _ => false,
    }
}

/// The line breaks of `bytes` as YAML counts them (and so the line numbers of its parser):
/// `\n`, `\r\n` and a lone `\r` each end a line. A file of N breaks has at most N + 1 lines.
pub fn line_breaks(bytes: &[u8]) -> usize {
    (0..bytes.len()).filter(|&i| breaks_at(bytes, i)).count()
}

/// 1-based line and column of a byte offset, lines counted as YAML counts them.
pub fn line_col(bytes: &[u8], offset: usize) -> (usize, usize) {
    let end = offset.min(bytes.len());
    let (mut line, mut start) = (1, 0);
    for i in (0..end).filter(|&i| breaks_at(bytes, i)) {
        line += 1;
        start = i + 1;
    }
    (line, end - start + 1)
}

/// The lines of a file as YAML counts them, without their breaks: `str::lines` where a lone
/// `\r` ends a line too, so the n-th line is the one YAML's parsers call line n.
pub fn yaml_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, after) = match rest.find(['\n', '\r']) {
            Some(i) if rest[i..].starts_with("\r\n") => (&rest[..i], &rest[i + 2..]),
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        rest = after;
        Some(line)
    })
}

/// Positions of the top-level fields, from marked-yaml; a line scan when it cannot parse.
/// Line and column of the first character of the last line that has any.
fn last_written(text: &str) -> Option<(usize, usize)> {
    yaml_lines(text)
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .last()
        .map(|(i, l)| (i + 1, l.len() - l.trim_start().len() + 1))
}

/// Where the node at a JSON pointer (`/properties/a/type`) under the top-level `field` is
/// written: the deepest node of the path that the text has.
fn locate_path(text: &str, field: &str, pointer: &str) -> Option<(usize, usize)> {
    let root = marked_yaml::parse_yaml(0, text).ok()?;
    let mut node = root.as_mapping()?.get_node(field)?;
    let at = |n: &marked_yaml::Node| n.span().start().map(|m| (m.line(), m.column()));
    let mut found = at(node);
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        let next = match node {
            marked_yaml::Node::Mapping(m) => m.get_node(&part),
            marked_yaml::Node::Sequence(s) => part.parse::<usize>().ok().and_then(|i| s.get(i)),
            marked_yaml::Node::Scalar(_) => None,
        };
        let Some(next) = next else { break };
        node = next;
        found = at(node).or(found);
    }
    found
}

fn locate(text: &str) -> Located {
    let ends_line = text.ends_with(['\n', '\r']);
    let mut spans = Located {
        last_line: (line_breaks(text.as_bytes()) + usize::from(!ends_line)).max(1),
        ..Located::default()
    };
    match marked_yaml::parse_yaml(0, text) {
        Ok(node) => {
            if let Some(map) = node.as_mapping() {
                for (k, v) in map.iter() {
                    if let Some(m) = k.span().start() {
                        spans
                            .keys
                            .insert(k.as_str().to_string(), (m.line(), m.column()));
                    }
                    if let Some(m) = v.span().start() {
                        spans
                            .values
                            .insert(k.as_str().to_string(), (m.line(), m.column()));
                    }
                    if let Some(seq) = v.as_sequence() {
                        let items = seq
                            .iter()
                            .map(|n| {
                                n.span()
                                    .start()
                                    .map(|m| (m.line(), m.column()))
                                    .unwrap_or((0, 0))
                            })
                            .collect();
                        spans.items.insert(k.as_str().to_string(), items);
                    }
                }
            }
        }
        Err(_) => {
            for (i, line) in yaml_lines(text).enumerate() {
                if let Some((name, _)) = line.split_once(':')
                    && !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    spans.keys.entry(name.to_string()).or_insert((i + 1, 1));
                }
            }
        }
    }
    if let Some(&(line, _)) = spans.keys.get("content") {
        let after = yaml_lines(text)
            .nth(line - 1)
            .and_then(|l| l.split_once(':'))
            .map(|(_, rest)| rest.trim_start())
            .unwrap_or("");
        spans.content_line = if after.starts_with('|') || after.starts_with('>') {
            line + 1
        } else {
            let at = spans
                .values
                .get("content")
                .or_else(|| spans.keys.get("content"));
            at.map_or(1, |p| p.0)
        };
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_count_as_yaml_does() {
        assert_eq!(line_breaks(b""), 0);
        assert_eq!(line_breaks(b"a"), 0);
        assert_eq!(line_breaks(b"a\nb\n"), 2);
        assert_eq!(line_breaks(b"a\r\nb\rc\n\r"), 4);
        // Lines and positions by the same rule; without a lone `\r`, as `str::lines` has them.
        let text = "a\r\nb\rc\n\rd";
        assert_eq!(
            yaml_lines(text).collect::<Vec<_>>(),
            ["a", "b", "c", "", "d"]
        );
        assert_eq!(line_col(text.as_bytes(), text.len() - 1), (5, 1));
        assert_eq!(line_col(text.as_bytes(), 1), (1, 2));
        assert_eq!(line_col(text.as_bytes(), 3), (2, 1));
        for text in ["", "a", "a\n", "a\n\nb", "a\r\nb\r\n", "\n\n"] {
            let lines: Vec<_> = text.lines().collect();
            assert_eq!(yaml_lines(text).collect::<Vec<_>>(), lines, "{text:?}");
        }
        // marked-yaml puts `b:` on line 3 of a file whose first two lines end in a lone `\r`.
        let spans = Spans::of("a: 1\r\rb: 2\r");
        assert_eq!(spans.key("b"), (3, 1));
        assert_eq!(spans.located().last_line, 3);
    }

    #[test]
    fn docstring_and_payload_split() {
        let c = split_content("# WHAT: hashes\n# ARGS: $1=text\n\n# free note\n[\"$1\"]\nmore");
        assert_eq!(c.doc.what.as_deref(), Some("hashes"));
        assert_eq!(c.doc.args.as_deref(), Some("$1=text"));
        assert_eq!(c.doc.notes, vec!["free note"]);
        assert_eq!(c.payload, "[\"$1\"]\nmore");
        assert_eq!(c.payload_line, 4);
    }

    #[test]
    fn keys() {
        assert!(is_valid_key("NOW"));
        assert!(is_valid_key("GITHUB_LIST_ISSUES"));
        assert!(!is_valid_key("N"));
        assert!(!is_valid_key("lower"));
        assert!(!is_valid_key("_X"));
        assert!(!is_valid_key(&"A".repeat(65)));
    }

    #[test]
    fn field_positions() {
        let text = "key: A_B\ntype: fn\ncontent: |\n  # WHAT: x\n  [\"$1\"]\n";
        let p = parse_row(Path::new("A_B.yaml"), text.as_bytes());
        let row = p.row.expect("row");
        assert_eq!(row.spans.key("type"), (2, 1));
        assert_eq!(row.spans.content_line(), 4);
        assert_eq!(row.parsed.payload, "[\"$1\"]");
    }
}
