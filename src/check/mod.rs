//! The gate: every rule a catalogue must pass before it merges or builds.
//!
//! Rules run per row (fields, templates, credentials, secrets, schemas) and across rows
//! (duplicate keys, includes, flow steps and cycles). All problems are collected. With a base
//! revision, the asymmetric rule lets legacy rows be edited without being fixed in full, while
//! a row that was clean must stay clean and a new row must be clean.

pub mod review;
pub mod scaffold;
pub mod secrets;

use crate::row::args::{self, ArgSchema};
use crate::row::binding::Bindings;
use crate::row::builtins;
use crate::row::call;
use crate::row::catalogue::SourceFile;
use crate::row::credential::Credential;
use crate::row::diag::{Diagnostic, did_you_mean};
use crate::row::flow;
use crate::row::mcp::{McpServer, McpTarget};
use crate::row::target::HttpTarget;
use crate::row::{self, Row, RowType, is_category, is_valid_key, line_col};
use std::collections::{BTreeMap, HashMap};
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

/// Rules that need only the row itself.
pub fn check_row(row: &Row) -> Vec<Diagnostic> {
    let p = &row.path;
    let s = &row.spans;
    let mut d = Vec::new();
    let stem = p.file_stem().and_then(|x| x.to_str()).unwrap_or("");
    if !is_valid_key(&row.key) {
        d.push(Diagnostic::error(
            p,
            s.value("key"),
            "bad_key",
            format!("`{}` is not a valid key", row.key),
            "keys are 2–64 characters of A–Z, 0–9 and _, starting with a letter: `GITHUB_LIST_ISSUES`",
        ));
    } else if row.key != stem {
        d.push(Diagnostic::error(
            p,
            s.value("key"),
            "key_mismatch",
            format!("key `{}` does not match the file name `{stem}`", row.key),
            format!(
                "rename the file to `{}.yaml`, or set `key: {stem}`",
                row.key
            ),
        ));
    }
    if row.kind != RowType::Flow && row.target.trim().is_empty() {
        let what = match row.kind {
            RowType::Fn => "the builtin's name, e.g. `target: sha256`",
            RowType::Http if row.is_mcp() => {
                "the MCP server and tool, e.g. `target: mcp+stdio:npx -y @scope/server@1.0.0#TOOL`"
            }
            RowType::Http => "`METHOD url`, e.g. `target: GET https://api.example.com/items/$1`",
            _ => "the model id, e.g. `target: gw:openai/gpt-4o-mini`",
        };
        d.push(Diagnostic::error(
            p,
            s.key("type"),
            "missing_target",
            format!("a `{}` row needs a target", row.kind.as_str()),
            format!("add {what}"),
        ));
    }
    if row.route_reply && row.kind != RowType::Agent {
        d.push(Diagnostic::error(
            p,
            s.value("route_reply"),
            "bad_route_reply",
            format!(
                "`route_reply` routes an agent's reply; this is a `{}` row",
                row.kind.as_str()
            ),
            "remove `route_reply`, or make the row an agent",
        ));
    }
    if !row.runner.is_empty() && !crate::row::RUNNERS.contains(&row.runner.as_str()) {
        let help = match did_you_mean(&row.runner, crate::row::RUNNERS.iter().copied()) {
            Some(s) => format!(
                "did you mean `runner: {s}`? Or leave `runner` out: the type names the runner"
            ),
            None => format!(
                "runners are {}; leave `runner` out to use the one the type names",
                crate::row::RUNNERS.join(", ")
            ),
        };
        d.push(Diagnostic::error(
            p,
            s.value("runner"),
            "unknown_runner",
            format!(
                "no runner is called `{}`: every call of this row would fail",
                row.runner
            ),
            help,
        ));
    }
    match row.kind {
        _ if row.is_mcp() => check_mcp(row, &mut d),
        RowType::Fn if !row.target.trim().is_empty() => check_fn(row, &mut d),
        RowType::Http if !row.target.trim().is_empty() => {
            if let Err(e) = HttpTarget::parse(&row.target) {
                let help = if McpTarget::looks_like(&row.target) {
                    "this is an MCP target: add `runner: mcp` so the MCP runner calls it".into()
                } else {
                    e.help
                };
                d.push(Diagnostic::error(
                    p,
                    s.value("target"),
                    "bad_http_target",
                    e.message,
                    help,
                ));
            }
            // Named arguments (`{?limit}`, `{form:name}`): well formed, and declared.
            let schema = row.input_schema.as_ref();
            let problems = crate::row::expand::problems(&row.target, row.payload(), schema);
            if !problems.is_empty() {
                let at = s.content_at(row.parsed.payload_line);
                for (message, help) in problems {
                    d.push(Diagnostic::error(p, at, "bad_named_args", message, help));
                }
            }
        }
        RowType::Flow => {
            if let Err(e) = flow::parse(row.payload()) {
                d.push(flow_error(row, &e));
            }
        }
        _ => {}
    }
    if row
        .doc()
        .what
        .as_deref()
        .is_none_or(|w| w.trim().is_empty())
    {
        d.push(Diagnostic::error(
            p,
            s.content_at(0),
            "missing_description",
            "the docstring has no `# WHAT:` line",
            "start `content` with `# WHAT: <one line saying what this does>`",
        ));
    }
    match Credential::parse(&row.auth) {
        Err(e) => d.push(Diagnostic::error(
            p,
            s.value("auth"),
            e.code,
            e.message,
            e.help,
        )),
        Ok(Some(Credential::Env { .. })) if !row.is_mcp() => d.push(Diagnostic::error(
            p,
            s.value("auth"),
            "bad_auth_for_runner",
            "`env:` hands variables to an MCP server started as a command; this row starts none",
            "use bearer:ENV, basic:ENV, headers:{\"Header\":\"$ENV\"} or query:param=ENV",
        )),
        Ok(_) => {}
    }
    if !row.category.is_empty() && !is_category(&row.category) {
        d.push(Diagnostic::error(
            p,
            s.value("category"),
            "bad_category",
            format!(
                "category `{}` is not lowercase letters, digits and dashes",
                row.category
            ),
            format!("write it as `{}`", slug(&row.category)),
        ));
    }
    for (i, c) in row.allowed_categories.iter().enumerate() {
        if c != "*" && !is_category(c) {
            d.push(Diagnostic::error(
                p,
                s.item("allowed_categories", i),
                "bad_category",
                format!("allowed category `{c}` is not lowercase letters, digits and dashes"),
                "list category names like `text`, or `*` for all",
            ));
        }
    }
    check_schema_and_examples(row, &mut d);
    d
}

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

fn check_fn(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if builtins::find(row.target.trim()).is_none() {
        let help = match did_you_mean(row.target.trim(), builtins::names()) {
            Some(n) => format!("did you mean `{n}`?"),
            None => format!(
                "use one of: {}",
                builtins::names().collect::<Vec<_>>().join(", ")
            ),
        };
        d.push(Diagnostic::error(
            p,
            s.value("target"),
            "unknown_builtin",
            format!("`{}` is not a builtin function", row.target.trim()),
            help,
        ));
    }
    let payload = row.payload().trim();
    if payload.is_empty() {
        return;
    }
    // Where the payload starts is looked up only for a diagnostic: finding it parses the file
    // a second time (marked-yaml), a quarter of checking a row that has no problem.
    let at = || s.content_at(row.parsed.payload_line);
    // Slots outside strings (`[$1]`) are legal in the template; check the shape with them filled.
    match probe_json(payload) {
        Ok(serde_json::Value::Array(_)) => {}
        Ok(_) => d.push(Diagnostic::error(
            p,
            at(),
            "bad_fn_template",
            "an fn row's payload must be a JSON array of the builtin's arguments",
            r#"write the payload as an array, e.g. `["$1", "$2"]`"#,
        )),
        Err(e) => {
            let (line, column) = at();
            d.push(Diagnostic::error(
                p,
                (
                    line + e.line().saturating_sub(1),
                    if e.line() <= 1 {
                        column + e.column().saturating_sub(1)
                    } else {
                        e.column()
                    },
                ),
                "bad_fn_template",
                format!("an fn row's payload is not valid JSON: {e}"),
                r#"write the payload as a JSON array, e.g. `["$1", "$2"]`"#,
            ))
        }
    }
}

/// A `runner: mcp` row: a `type: http` row (a call to a server), an MCP target, a payload that
/// is the arguments' JSON object template if there is one, and a credential its server can take.
fn check_mcp(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    if row.kind != RowType::Http {
        d.push(Diagnostic::error(
            p,
            s.value("type"),
            "runner_type_mismatch",
            format!(
                "`runner: mcp` forwards a call to an MCP server; this is a `{}` row",
                row.kind.as_str()
            ),
            "set `type: http`: a call to a server, as the contract, the gate and MCP hints treat it",
        ));
    }
    if row.target.trim().is_empty() {
        return;
    }
    let target = match McpTarget::parse(&row.target) {
        Ok(t) => t,
        Err(e) => {
            d.push(Diagnostic::error(
                p,
                s.value("target"),
                "bad_mcp_target",
                e.message,
                e.help,
            ));
            return;
        }
    };
    let payload = row.payload().trim();
    if !payload.is_empty() && !matches!(probe_json(payload), Ok(serde_json::Value::Object(_))) {
        d.push(Diagnostic::error(
            p,
            s.content_at(row.parsed.payload_line),
            "bad_mcp_payload",
            "an mcp row's payload is the tool's arguments: a JSON object template",
            r#"write `{"message": "$1"}`, or leave the payload out to send the arguments input_schema names"#,
        ));
    }
    let credential = Credential::parse(&row.auth).ok().flatten();
    let wrong = match (&target.server, &credential) {
        (McpServer::Stdio { .. }, Some(c)) if !matches!(c, Credential::Env { .. }) => Some((
            format!(
                "`{}:` applies to HTTP requests; this server is started as a command",
                c.form()
            ),
            "hand the server its secret in its environment: `auth: env:MY_SERVICE_TOKEN`",
        )),
        (McpServer::Http { .. }, Some(Credential::Env { .. })) => Some((
            "`env:` hands variables to a server started as a command; this one is reached over HTTP".to_string(),
            "use bearer:ENV, basic:ENV, headers:{\"Header\":\"$ENV\"} or query:param=ENV",
        )),
        _ => None,
    };
    if let Some((message, help)) = wrong {
        d.push(Diagnostic::error(
            p,
            s.value("auth"),
            "bad_auth_for_runner",
            message,
            help,
        ));
    }
}

/// A JSON template as it reads with every `$N` filled (slots outside strings are legal).
fn probe_json(payload: &str) -> Result<serde_json::Value, serde_json::Error> {
    let probe = vec!["0".to_string(); crate::row::template::highest_slot(payload)];
    let filled = crate::row::template::render(
        payload,
        crate::row::template::Context::Json,
        crate::row::template::Vars {
            args: &probe,
            ..Default::default()
        },
    )
    .unwrap_or_default();
    serde_json::from_str(&filled)
}

fn check_schema_and_examples(row: &Row, d: &mut Vec<Diagnostic>) {
    let (p, s) = (&row.path, &row.spans);
    let Some(schema) = &row.input_schema else {
        if row.sensitive {
            d.push(Diagnostic::error(
                p,
                s.key("sensitive"),
                "high_risk_missing_schema",
                "a sensitive row must declare its arguments in `input_schema`",
                "add `input_schema:` with `type: object`, the arguments as `properties` in positional order, and `required`",
            ));
        }
        return;
    };
    let compiled = match ArgSchema::compile(schema) {
        Ok(c) => c,
        Err(e) => {
            let at = args::schema_fault(schema)
                .map(|pointer| s.at_pointer("input_schema", &pointer))
                .unwrap_or_else(|| s.value("input_schema"));
            d.push(Diagnostic::error(
                p,
                at,
                "bad_input_schema",
                format!("`input_schema` {e}"),
                "write a JSON Schema object: `type: object`, `properties: {name: {type: string}}`, `required: [name]`",
            ));
            return;
        }
    };
    for (i, ex) in row.examples.iter().enumerate() {
        let obj = args::positional_to_object(schema, &args::split_body(ex));
        let problems = compiled.problems(&serde_json::Value::Object(obj));
        if !problems.is_empty() {
            d.push(Diagnostic::error(
                p,
                s.item("examples", i),
                "example_fails_schema",
                format!(
                    "example {ex:?} does not satisfy input_schema: {}",
                    problems.join("; ")
                ),
                "fix the example, or the schema if the example is right",
            ));
        }
    }
}

fn flow_error(row: &Row, e: &flow::FlowError) -> Diagnostic {
    let payload = row.payload();
    let (line, col) = line_col(payload.as_bytes(), e.offset);
    let base = row.spans.content_at(row.parsed.payload_line + line - 1);
    Diagnostic::error(
        &row.path,
        (
            base.0,
            if row.spans.content_line() == 0 {
                base.1
            } else {
                base.1 + col - 1
            },
        ),
        "bad_flow_step",
        format!("malformed flow: {}", e.message),
        "write steps as `KEY: body`, joined by `>`; `=> NAME` binds a step's output; `{ A: x | B: y }` runs branches at once",
    )
}

/// Rules across rows: duplicates, includes, flow steps and cycles.
pub fn check_across(rows: &[&Row]) -> Vec<Diagnostic> {
    let mut d = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_key.entry(&r.key).or_default().push(r);
    }
    for same in by_key.values().filter(|v| v.len() > 1) {
        for r in &same[1..] {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.value("key"),
                "duplicate_key",
                format!(
                    "key `{}` is already defined in {}",
                    r.key,
                    same[0].path.display()
                ),
                "keep one file per key: remove or rename one of them",
            ));
        }
    }
    let keys: Vec<&str> = by_key.keys().copied().collect();
    let suggest = |k: &str| match did_you_mean(k, keys.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None => "add that row, or fix the key".to_string(),
    };
    let mut edges: HashMap<&str, Vec<String>> = HashMap::new();
    for r in rows {
        for (i, inc) in r.includes.iter().enumerate() {
            if !by_key.contains_key(inc.as_str()) {
                d.push(Diagnostic::error(
                    &r.path,
                    r.spans.item("includes", i),
                    "unknown_include",
                    format!("included row `{inc}` does not exist"),
                    suggest(inc),
                ));
            }
        }
        if r.kind != RowType::Flow {
            continue;
        }
        let Ok(f) = flow::parse(r.payload()) else {
            continue;
        };
        for k in f.keys() {
            if !by_key.contains_key(k) {
                let offset = r.payload().find(&format!("{k}:")).unwrap_or(0);
                let (line, col) = line_col(r.payload().as_bytes(), offset);
                let base = r.spans.content_at(r.parsed.payload_line + line - 1);
                d.push(Diagnostic::error(
                    &r.path,
                    (base.0, base.1 + col - 1),
                    "unknown_flow_step",
                    format!("flow step calls `{k}`, which is not in the catalogue"),
                    suggest(k),
                ));
            }
        }
        edges
            .entry(&r.key)
            .or_default()
            .extend(f.keys().map(str::to_string));
    }
    // What runs under a row's authority: a flow's steps, an agent's tool categories.
    for r in rows.iter().filter(|r| !r.sensitive) {
        if let Some(path) = reaches_sensitive(r, &edges, &by_key) {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.key("type"),
                "reaches_sensitive",
                format!(
                    "`{}` can run the sensitive row `{}` ({}) but is not marked sensitive",
                    r.key,
                    path.last().copied().unwrap_or_default(),
                    path.join(" → ")
                ),
                "mark this row `sensitive: true` (with an input_schema): a row that can reach a sensitive one is as risky as it",
            ));
        }
    }
    // What one call may set going: its whole tree, in the worst case.
    let firsts: HashMap<&str, &Row> = by_key
        .iter()
        .filter_map(|(k, v)| Some((*k, *v.first()?)))
        .collect();
    for r in rows.iter().filter(|r| call::makes_nested_calls(r)) {
        let worst = call::worst_case_calls(&r.key, &firsts);
        if worst > call::MAX_TREE_CALLS {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.key("type"),
                "call_budget",
                format!(
                    "one call of `{}` can make {} nested calls in the worst case; one call may make at most {}",
                    r.key,
                    if worst == u64::MAX { "unbounded".to_string() } else { worst.to_string() },
                    call::MAX_TREE_CALLS
                ),
                "make fewer steps or smaller fan-outs, or split the work into calls of their own (each of an agent's tool calls counts as its costliest tool)",
            ));
        }
    }
    for r in rows.iter().filter(|r| r.kind == RowType::Flow) {
        if let Some(cycle) = find_cycle(&r.key, &edges) {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.content_at(r.parsed.payload_line),
                "flow_cycle",
                format!("flow calls itself: {}", cycle.join(" → ")),
                "break the cycle: a flow may not reach itself through its steps",
            ));
        }
    }
    d
}

/// A sensitive row `row` can run, and the path to it: through a flow's steps (and theirs),
/// among the categories an agent's tools are limited to (`*`: every category), or anywhere in
/// the catalogue for an agent whose reply is routed (a tag may name any key).
fn reaches_sensitive<'a>(
    row: &'a Row,
    edges: &'a HashMap<&'a str, Vec<String>>,
    by_key: &BTreeMap<&'a str, Vec<&'a Row>>,
) -> Option<Vec<&'a str>> {
    if row.kind == RowType::Agent && (!row.allowed_categories.is_empty() || row.route_reply) {
        // A routed reply's tags may name any row of the catalogue; tools, those offered.
        let hit = by_key
            .values()
            .flatten()
            .find(|other| other.sensitive && (row.route_reply || row.offers_tool(other)))?;
        return Some(vec![row.key.as_str(), hit.key.as_str()]);
    }
    let mut seen = std::collections::HashSet::new();
    let mut todo: Vec<Vec<&str>> = vec![vec![row.key.as_str()]];
    while let Some(path) = todo.pop() {
        let last = *path.last()?;
        for next in edges.get(last).into_iter().flatten() {
            let Some(target) = by_key.get(next.as_str()).and_then(|v| v.first()) else {
                continue;
            };
            if !seen.insert(target.key.as_str()) {
                continue;
            }
            let mut longer = path.clone();
            longer.push(target.key.as_str());
            if target.sensitive {
                return Some(longer);
            }
            todo.push(longer);
        }
    }
    None
}

/// A path from `start` back to itself, if there is one.
fn find_cycle<'a>(
    start: &'a str,
    edges: &'a HashMap<&'a str, Vec<String>>,
) -> Option<Vec<&'a str>> {
    fn walk<'a>(
        node: &'a str,
        start: &'a str,
        edges: &'a HashMap<&'a str, Vec<String>>,
        path: &mut Vec<&'a str>,
        seen: &mut std::collections::HashSet<&'a str>,
    ) -> bool {
        for next in edges.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            let next = next.as_str();
            if next == start {
                path.push(next);
                return true;
            }
            if seen.insert(next) {
                path.push(next);
                if walk(next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start];
    let mut seen = std::collections::HashSet::new();
    walk(start, start, edges, &mut path, &mut seen).then_some(path)
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
