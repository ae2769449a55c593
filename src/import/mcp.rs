//! `capdir import mcp`: one row per tool an MCP server lists, whose call the `mcp` runner
//! forwards to that server.
//!
//! The importer reaches the server as its rows will (`invoke::runner::mcp::endpoint`: the same
//! bare environment and credential), lists every page of `tools/list`, and writes for each tool
//! a `type: http`, `runner: mcp` row: the target names the server and the tool, `input_schema`
//! is the tool's `inputSchema` (with `type: object` and `properties` made explicit, which the
//! gate needs), the docstring comes from its description, and `auth` is what the import was
//! given. Keys are the prefix and the tool's name in capitals, made valid and unique.
//!
//! The gate limits no docstring's length, but a contract is meant to be a few KB and an
//! agent's tool listing carries WHAT and WHEN_TO_USE for every tool, so the description is
//! fitted: its first sentence as WHAT (at most [`WHAT_CHARS`]), the rest as WHEN_TO_USE (at
//! most [`WHEN_CHARS`]), the arguments as ARGS (at most [`ARGS_CHARS`]), each cut at a word.
//!
//! It is safe to run again: every file is rendered from the server's answer alone, so the same
//! answer writes the same bytes and only files whose bytes change are written. A file the
//! import would write that is not a row of the same server is never overwritten: the import
//! stops before writing anything and says which. Rows of the server whose tool is gone are
//! reported, not deleted. Every row is checked by the gate before it is written; a tool that
//! would make a failing row is reported and left out.
//!
//! A row's credential goes where the catalogue's bindings say, so the import adds to
//! `bindings.yaml` what its rows need (`import::bindings`): the `auth` variables bound to the
//! server's endpoint (`scheme://host[:port]/path`) for `--url`, to `stdio:` for `env:` handed
//! to a server started as a command, for the rows written (`keys:`). Each row is checked with
//! the bindings as they will be.

use crate::check;
use crate::import::bindings::{self, Bound, Merged};
use crate::import::text;
use crate::invoke::egress::Egress;
use crate::invoke::outcome::Failure;
use crate::invoke::runner::Environment;
use crate::invoke::runner::mcp::client::{Connection, ServerInfo};
use crate::invoke::runner::mcp::endpoint;
use crate::row::args::{self, ArgSchema};
use crate::row::catalogue::{self, SourceFile};
use crate::row::credential::Credential;
use crate::row::mcp::{McpServer, McpTarget, RUNNER};
use crate::row::{is_category, parse_row};
use serde_json::{Map, Value as Json};
use sha2::Digest as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Characters of WHAT, the description's first sentence.
pub const WHAT_CHARS: usize = 160;
/// Characters of WHEN_TO_USE, the rest of the description.
pub const WHEN_CHARS: usize = 400;
/// Characters of the ARGS line.
pub const ARGS_CHARS: usize = 500;
/// Characters of one argument's description within ARGS.
const ARG_DESCRIPTION_CHARS: usize = 80;

/// What to import and where.
#[derive(Debug, Clone)]
pub struct Options {
    pub server: McpServer,
    /// Written as every row's `auth` (env var names only) and used to reach the server now.
    pub auth: String,
    /// Put in front of every key (`EVERYTHING` → `EVERYTHING_ECHO`); may be empty.
    pub prefix: String,
    /// Every row's `category`; may be empty.
    pub category: String,
    /// The catalogue directory the rows are written to.
    pub out: PathBuf,
    /// Time to start or reach the server, and for each page of `tools/list`.
    pub timeout: Duration,
    /// Where the import may connect to reach the server: anywhere for a server the operator
    /// named itself, the dispatcher's default (public addresses) for one a document names.
    pub egress: Egress,
    /// Whether `auth` is used to reach the server now (its variables read, sent or handed to
    /// the command), or only written into the rows: a document's credential is the rows' to
    /// name, but the operator's to hand out.
    pub reach_with_auth: bool,
}

/// A tool as the server lists it: what a row is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub title: String,
    pub description: String,
    pub input_schema: Json,
}

/// What happened to one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The file is new or its bytes changed.
    Written,
    /// The file already held exactly this row.
    Unchanged,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub tool: String,
    pub key: String,
    pub change: Change,
}

/// A tool no row was written for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub tool: String,
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub server: ServerInfo,
    pub rows: Vec<Entry>,
    pub skipped: Vec<Skipped>,
    /// Rows of this server already in the catalogue that this import did not write: (key, tool).
    pub stale: Vec<(String, String)>,
    /// Per credential the rows use, where they send it and what the import added to its
    /// binding in `bindings.yaml`.
    pub bindings: Vec<Bound>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{0}")]
    Options(String),
    #[error("cannot import from {server}: {failure}")]
    Server { server: String, failure: String },
    #[error("cannot read {dir}: {source}")]
    Read { dir: String, source: std::io::Error },
    #[error(
        "nothing written: {} would overwrite rows that are not from this server:\n  {}\npass --prefix to give this server's rows keys of their own",
        .0.len(),
        .0.join("\n  ")
    )]
    Conflicts(Vec<String>),
    #[error(
        "{path}:{line}:{col}: the bindings do not read, so the import cannot add the ones its rows need: {message}"
    )]
    Bindings {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
}

/// What an import would write: the report, and each file by name in the catalogue directory
/// with its text (the bindings file first). Nothing is written here: `capdir import` writes.
#[derive(Debug, Default)]
pub struct Plan {
    pub report: Report,
    pub writes: Vec<(String, String)>,
}

/// Reach the server, list its tools and plan their rows for `options.out`.
pub async fn import(options: &Options) -> Result<Plan, ImportError> {
    check_options(options)?;
    let (tools, server) = list(options).await?;
    let existing = bindings_file(&options.out)?;
    // An unreadable bindings file stops the import before anything is written.
    merged(existing.as_ref(), options, &[])?;
    let (rows, skipped) = rows_for(&tools, options, &server, existing.as_ref());
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let merged = merged(existing.as_ref(), options, &keys)?;
    let mut plan = plan(options, rows, merged.write)?;
    plan.report.server = server;
    plan.report.skipped = skipped;
    plan.report.bindings = merged.bound;
    Ok(plan)
}

/// The catalogue's bindings file, if it has one.
fn bindings_file(dir: &Path) -> Result<Option<SourceFile>, ImportError> {
    let path = dir.join(crate::row::binding::FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path).map_err(|source| ImportError::Read {
        dir: path.display().to_string(),
        source,
    })?;
    Ok(Some(SourceFile { path, bytes }))
}

/// Where the rows send their credential: the server's endpoint, or `stdio:`.
fn destination(server: &McpServer) -> String {
    match server {
        McpServer::Stdio { .. } => crate::row::binding::STDIO.to_string(),
        McpServer::Http { url } => bindings::endpoint_origin(url).unwrap_or_default(),
    }
}

/// The catalogue's bindings (`existing`) with the import's credential bound for rows `keys`.
fn merged(
    existing: Option<&SourceFile>,
    options: &Options,
    keys: &[&str],
) -> Result<Merged, ImportError> {
    let to = destination(&options.server);
    let uses: Vec<bindings::Use> = keys
        .iter()
        .flat_map(|key| bindings::uses(&options.auth, &to, key, &options.category))
        .collect();
    let path = options.out.join(crate::row::binding::FILE);
    bindings::merge(existing, &uses, &path).map_err(|e| ImportError::Bindings {
        path: path.display().to_string(),
        line: e.line,
        col: e.col,
        message: e.message,
    })
}

fn check_options(options: &Options) -> Result<(), ImportError> {
    if !options.category.is_empty() && !is_category(&options.category) {
        return Err(ImportError::Options(format!(
            "--category `{}` is not lowercase letters, digits and dashes",
            options.category
        )));
    }
    let credential = Credential::parse(&options.auth)
        .map_err(|e| ImportError::Options(format!("--auth: {} ({})", e.message, e.help)))?;
    let stdio = options.server.is_stdio();
    match credential {
        Some(Credential::Env { .. }) if !stdio => Err(ImportError::Options(
            "--auth env:… hands variables to a server started as a command; for --url use bearer:ENV, basic:ENV, headers:… or query:param=ENV".into(),
        )),
        Some(c) if stdio && !matches!(c, Credential::Env { .. }) => {
            Err(ImportError::Options(format!(
                "--auth {}:… applies to HTTP requests; a server started as a command takes env:NAME,NAME",
                c.form()
            )))
        }
        _ => Ok(()),
    }
}

/// Every tool of the server, in the order it lists them, and what it says it is.
async fn list(options: &Options) -> Result<(Vec<ToolSpec>, ServerInfo), ImportError> {
    let fail = |f: Failure| ImportError::Server {
        server: options.server.to_string(),
        failure: f.render(),
    };
    let credential = if options.reach_with_auth {
        Credential::parse(&options.auth).ok().flatten()
    } else {
        None
    };
    let (endpoint, _secrets) =
        endpoint(&options.server, credential.as_ref(), &Environment::Process).map_err(fail)?;
    let connection = Connection::open(&endpoint, options.timeout, &options.egress)
        .await
        .map_err(fail)?;
    let tools = connection.list_tools(options.timeout).await.map_err(fail)?;
    let specs = tools
        .into_iter()
        .map(|t| {
            let v = serde_json::to_value(&t).unwrap_or_default();
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            ToolSpec {
                name: text("name"),
                title: text("title"),
                description: text("description"),
                input_schema: v["inputSchema"].clone(),
            }
        })
        .collect();
    Ok((specs, connection.server_info()))
}

/// A row ready to write: its key, the tool it calls and the file's text.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFile {
    pub key: String,
    pub tool: String,
    pub text: String,
}

/// The row of every tool that makes one the gate passes, and why the others make none. Tools
/// are taken in name order, so colliding keys get the same suffixes on every import. Each row
/// is judged with the catalogue's bindings (`bindings`, its `bindings.yaml` if any) and what
/// the import adds to them for it.
pub fn rows_for(
    tools: &[ToolSpec],
    options: &Options,
    server: &ServerInfo,
    bindings: Option<&SourceFile>,
) -> (Vec<RowFile>, Vec<Skipped>) {
    let mut tools: Vec<&ToolSpec> = tools.iter().collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut used: BTreeSet<String> = BTreeSet::new();
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for tool in tools {
        let skip = |reason: String| Skipped {
            tool: tool.name.clone(),
            reason,
        };
        if tool.name.is_empty() {
            skipped.push(skip("the server lists a tool without a name".into()));
            continue;
        }
        let schema = match input_schema(&tool.input_schema) {
            Ok(s) => s,
            Err(why) => {
                skipped.push(skip(why));
                continue;
            }
        };
        let key = unique_key(&key_for(&options.prefix, &tool.name), &used);
        let text = row_text(&key, tool, &schema, options, server);
        let path = options.out.join(format!("{key}.yaml"));
        let mut files = vec![SourceFile {
            path,
            bytes: text.clone().into_bytes(),
        }];
        files.extend(merged(bindings, options, &[&key]).ok().and_then(|m| m.file));
        let checked = check::check_files(&files);
        let errors: Vec<String> = checked
            .diags
            .iter()
            .filter(|d| d.is_error())
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect();
        if !errors.is_empty() {
            skipped.push(skip(format!(
                "its row would not pass the gate: {}",
                errors.join("; ")
            )));
            continue;
        }
        used.insert(key.clone());
        rows.push(RowFile {
            key,
            tool: tool.name.clone(),
            text,
        });
    }
    (rows, skipped)
}

/// The tool's `inputSchema` as a row's `input_schema`: an object schema with its properties
/// (an empty list when it names none), or why it cannot be one.
fn input_schema(schema: &Json) -> Result<Json, String> {
    let mut schema = match schema {
        Json::Object(o) => o.clone(),
        Json::Null => Map::new(),
        _ => return Err("its inputSchema is not a JSON object".into()),
    };
    match schema.get("type") {
        None => {
            schema.insert("type".into(), Json::from("object"));
        }
        Some(Json::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "its inputSchema has type {other}; tool arguments are an object"
            ));
        }
    }
    if !schema.get("properties").is_some_and(Json::is_object) {
        schema.insert("properties".into(), Json::Object(Map::new()));
    }
    let schema = Json::Object(schema);
    ArgSchema::compile(&schema).map_err(|e| format!("its inputSchema {e}"))?;
    Ok(schema)
}

/// `PREFIX_TOOL_NAME`: capitals, digits and `_`, camelCase split, at most 64 characters (a
/// long name keeps a digest of itself at its end, so two long names stay apart).
pub fn key_for(prefix: &str, tool: &str) -> String {
    let mut key = String::new();
    let mut prev: Option<char> = None;
    for c in format!("{prefix}_{tool}").chars() {
        if c.is_ascii_alphanumeric() {
            let split = c.is_ascii_uppercase()
                && prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit());
            if split {
                key.push('_');
            }
            key.push(c.to_ascii_uppercase());
        } else if !key.ends_with('_') {
            key.push('_');
        }
        prev = Some(c);
    }
    let mut key = key.trim_matches('_').to_string();
    while key.contains("__") {
        key = key.replace("__", "_");
    }
    if !key.starts_with(|c: char| c.is_ascii_uppercase()) || key.len() < 2 {
        key = format!("MCP_{key}").trim_end_matches('_').to_string();
    }
    if key.len() > 64 {
        // In capitals, as a key's every letter is: a key with `_01222f2d` at its end failed
        // the gate, and its tool was left out (fuzz/mcp_tools found it).
        let digest = &hex::encode_upper(sha2::Sha256::digest(tool.as_bytes()))[..8];
        key.truncate(64 - 1 - digest.len());
        key = format!("{}_{digest}", key.trim_end_matches('_'));
    }
    key
}

/// `key`, or `key_2`, `key_3`, … : the first not in `used` (kept within 64 characters).
fn unique_key(key: &str, used: &BTreeSet<String>) -> String {
    if !used.contains(key) {
        return key.to_string();
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let mut base = key.to_string();
            base.truncate(64 - suffix.len());
            format!("{}{suffix}", base.trim_end_matches('_'))
        })
        .find(|k| !used.contains(k))
        .unwrap_or_default()
}

/// The docstring lines of a tool's row.
fn docstring(tool: &ToolSpec, schema: &Json, server: &ServerInfo) -> Vec<String> {
    let description = text::one_line(&tool.description);
    let title = text::one_line(&tool.title);
    let mut lines = Vec::new();
    let first = text::first_sentence(&description);
    let rest = description[first.len()..]
        .strip_prefix(' ')
        .unwrap_or_default();
    let (what, cut) = text::fit(if first.is_empty() { &title } else { first }, WHAT_CHARS);
    let what = if what.is_empty() {
        format!("Calls the MCP tool `{}`.", text::one_line(&tool.name))
    } else {
        what
    };
    lines.push(format!("# WHAT: {what}"));
    let when = text::one_line(&format!("{cut} {rest}"));
    if !when.is_empty() {
        lines.push(format!("# WHEN_TO_USE: {}", text::fit(&when, WHEN_CHARS).0));
    }
    lines.push(format!("# ARGS: {}", args_line(schema)));
    let from = if server.name.is_empty() {
        "its MCP server".to_string()
    } else {
        text::one_line(&server.name)
    };
    lines.push(format!(
        "# OUTPUT: the text the MCP tool `{}` of {from} returns; ERR:mcp:tool_error:… when it reports an error",
        text::one_line(&tool.name)
    ));
    lines
}

/// `$1=name (type, required): description, …`, fitted to [`ARGS_CHARS`]; descriptions go
/// first when it is too long.
fn args_line(schema: &Json) -> String {
    let props = args::properties(schema);
    if props.is_empty() {
        return "none".into();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Json::as_array)
        .map(|r| r.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let line = |described: bool| {
        props
            .iter()
            .enumerate()
            .map(|(i, (name, prop))| {
                let kind = match prop.get("type") {
                    Some(Json::String(t)) => t.clone(),
                    Some(Json::Array(ts)) => ts
                        .iter()
                        .filter_map(Json::as_str)
                        .collect::<Vec<_>>()
                        .join(" or "),
                    _ => "any".into(),
                };
                let need = if required.contains(name) {
                    ", required"
                } else {
                    ""
                };
                let mut part = format!("${}={} ({kind}{need})", i + 1, text::one_line(name));
                let d =
                    text::one_line(prop.get("description").and_then(Json::as_str).unwrap_or(""));
                if described && !d.is_empty() {
                    part.push_str(&format!(": {}", text::fit(&d, ARG_DESCRIPTION_CHARS).0));
                }
                part
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let full = line(true);
    if full.chars().count() <= ARGS_CHARS {
        return full;
    }
    text::fit(&line(false), ARGS_CHARS).0
}

/// A YAML scalar as serde_yaml writes it (quoted where it must be).
fn scalar(text: &str) -> String {
    serde_yaml::to_string(text)
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// The row file of one tool.
fn row_text(
    key: &str,
    tool: &ToolSpec,
    schema: &Json,
    options: &Options,
    server: &ServerInfo,
) -> String {
    let target = McpTarget {
        server: options.server.clone(),
        tool: tool.name.clone(),
    };
    let mut out = String::from("# yaml-language-server: $schema=../schema/row.schema.json\n");
    out.push_str(
        "# Written by `capdir import mcp` from the server's tools/list; import again to update.\n",
    );
    out.push_str(&format!("key: {key}\ntype: http\nrunner: {RUNNER}\n"));
    out.push_str(&format!("target: {}\n", scalar(&target.render())));
    if !options.auth.trim().is_empty() {
        out.push_str(&format!("auth: {}\n", scalar(options.auth.trim())));
    }
    if !options.category.is_empty() {
        out.push_str(&format!("category: {}\n", options.category));
    }
    out.push_str("input_schema:\n");
    for line in serde_yaml::to_string(schema).unwrap_or_default().lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("content: |\n");
    for line in docstring(tool, schema, server) {
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The rows that changed (and the bindings file, when it changes), after making sure none
/// would overwrite a row of another source.
fn plan(
    options: &Options,
    rows: Vec<RowFile>,
    bindings: Option<String>,
) -> Result<Plan, ImportError> {
    let dir = &options.out;
    let existing = if dir.is_dir() {
        catalogue::read_dir(dir).map_err(|source| ImportError::Read {
            dir: dir.display().to_string(),
            source,
        })?
    } else {
        Vec::new()
    };
    // Every row already there, by key: is it one of this server's (and which tool)?
    let mut by_key: BTreeMap<String, (PathBuf, Option<String>)> = BTreeMap::new();
    for file in &existing {
        let stem = Path::new(file.file_name())
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let ours = parse_row(&file.path, &file.bytes)
            .row
            .filter(|r| r.is_mcp())
            .and_then(|r| McpTarget::parse(&r.target).ok())
            .filter(|t| t.server == options.server)
            .map(|t| t.tool);
        by_key.insert(stem, (file.path.clone(), ours));
    }
    let conflicts: Vec<String> = rows
        .iter()
        .filter_map(|r| match by_key.get(&r.key) {
            Some((path, None)) => Some(format!("{} (tool `{}`)", path.display(), r.tool)),
            _ => None,
        })
        .collect();
    if !conflicts.is_empty() {
        return Err(ImportError::Conflicts(conflicts));
    }
    let mut report = Report::default();
    let written: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    for (key, (_, tool)) in &by_key {
        if let Some(tool) = tool
            && !written.contains(key.as_str())
        {
            report.stale.push((key.clone(), tool.clone()));
        }
    }
    let mut writes = Vec::new();
    if let Some(text) = bindings {
        writes.push((crate::row::binding::FILE.to_string(), text));
    }
    for row in rows {
        let name = format!("{}.yaml", row.key);
        let same = std::fs::read(dir.join(&name)).is_ok_and(|b| b == row.text.as_bytes());
        report.rows.push(Entry {
            tool: row.tool,
            key: row.key,
            change: if same {
                Change::Unchanged
            } else {
                Change::Written
            },
        });
        if !same {
            writes.push((name, row.text));
        }
    }
    Ok(Plan { report, writes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::is_valid_key;
    use serde_json::json;

    fn options(out: &Path) -> Options {
        Options {
            server: McpServer::Stdio {
                command: "node".into(),
                args: vec!["server.js".into()],
            },
            auth: String::new(),
            prefix: "EV".into(),
            category: "demo".into(),
            out: out.to_path_buf(),
            timeout: Duration::from_secs(5),
            egress: Egress::unrestricted(),
            reach_with_auth: true,
        }
    }

    fn tool(name: &str, description: &str, schema: Json) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: String::new(),
            description: description.into(),
            input_schema: schema,
        }
    }

    #[test]
    fn keys_are_valid_and_unique() {
        assert_eq!(key_for("EVERYTHING", "get-sum"), "EVERYTHING_GET_SUM");
        assert_eq!(key_for("", "getTinyImage"), "GET_TINY_IMAGE");
        assert_eq!(key_for("ev", "a..b"), "EV_A_B");
        assert_eq!(key_for("", "3d"), "MCP_3D");
        assert_eq!(key_for("", "x"), "MCP_X");
        assert_eq!(key_for("", "é"), "MCP");
        let long = "a".repeat(100);
        let k = key_for("P", &long);
        assert!(k.len() <= 64 && is_valid_key(&k), "{k}");
        assert_ne!(k, key_for("P", &format!("{long}b")));
        // Every long name's key is a valid key, whatever letters its digest has.
        for i in 0..40 {
            let k = key_for("P", &format!("../../{long}{i}/etc"));
            assert!(k.len() <= 64 && is_valid_key(&k), "{k}");
        }
        let used: BTreeSet<String> = ["A_B".to_string(), "A_B_2".to_string()].into();
        assert_eq!(unique_key("A_B", &used), "A_B_3");
    }

    #[test]
    fn descriptions_are_fitted() {
        let long = format!("{}. {}", "word ".repeat(50).trim(), "more ".repeat(200));
        let t = tool("t", &long, json!({"type": "object"}));
        let doc = docstring(
            &t,
            &json!({"type": "object", "properties": {}}),
            &ServerInfo::default(),
        );
        let what = doc[0].trim_start_matches("# WHAT: ");
        assert!(what.chars().count() <= WHAT_CHARS, "{what}");
        assert!(what.ends_with('…'));
        let when = doc[1].trim_start_matches("# WHEN_TO_USE: ");
        assert!(when.chars().count() <= WHEN_CHARS, "{when}");
        assert_eq!(doc[2], "# ARGS: none");
    }

    #[test]
    fn colliding_names_and_bad_schemas() {
        let dir = tempfile::tempdir().unwrap();
        let o = options(dir.path());
        let tools = vec![
            tool(
                "a-b",
                "First.",
                json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            ),
            tool("a.b", "Second.", json!({})),
            tool("arr", "An array schema.", json!({"type": "array"})),
        ];
        let (rows, skipped) = rows_for(&tools, &o, &ServerInfo::default(), None);
        let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["EV_A_B", "EV_A_B_2"]);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].tool, "arr");
        assert!(rows[1].text.contains("properties: {}"), "{}", rows[1].text);
    }

    #[test]
    fn rows_with_a_credential_pass_with_the_binding_the_import_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options(dir.path());
        o.auth = "env:EV_VAR".into();
        let tools = vec![tool("t", "A tool.", json!({}))];
        let (rows, skipped) = rows_for(&tools, &o, &ServerInfo::default(), None);
        assert_eq!((rows.len(), skipped.len()), (1, 0), "{skipped:?}");
        let m = merged(None, &o, &["EV_T"]).unwrap();
        let text = m.write.expect("a new bindings file");
        assert!(
            text.ends_with("  EV_VAR:\n    origins: [\"stdio:\"]\n    keys: [EV_T]\n"),
            "{text}"
        );
        // A binding of the variable for another row gains this row's key, and keeps the other.
        let other = merged(None, &o, &["OTHER"]).unwrap().file;
        let (rows, _) = rows_for(&tools, &o, &ServerInfo::default(), other.as_ref());
        assert_eq!(rows.len(), 1);
        let m = merged(other.as_ref(), &o, &["EV_T"]).unwrap();
        assert_eq!(m.bindings.credentials["EV_VAR"].keys, ["EV_T", "OTHER"]);

        o.server = McpServer::Http {
            url: "https://mcp.example.com/mcp".into(),
        };
        o.auth = "bearer:EV_TOKEN".into();
        let m = merged(None, &o, &["EV_T"]).unwrap();
        assert_eq!(
            m.bindings.credentials["EV_TOKEN"].origins,
            ["https://mcp.example.com/mcp"]
        );
    }
}
