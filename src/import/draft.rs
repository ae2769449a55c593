//! One operation drafted as one `http` row, in the row language as it is:
//!
//! - Arguments, in this order: the path parameters (in path order), the required query
//!   parameters, then the request body as one JSON argument. `$N` slots put them in the
//!   target; the body is the payload `$N+` (the last argument may contain pipes).
//! - A slot is always sent and every slot is a required piece, so only what the operation
//!   requires gets one: optional query parameters, and header and cookie parameters (rows
//!   have no header templates), are reported, not placed. The body is one argument rather
//!   than a slot per field so that optional, nested and list fields can all be sent: the
//!   row's `input_schema` holds the body's schema and validates it before anything runs.
//! - What cannot be sent at all when the operation requires it (a required header, a form or
//!   multipart body) means the operation is not imported; it is reported with the reason.

use crate::check::slug;
use crate::import::arguments::{body_arg, param_arg, piece};
use crate::import::auth::Schemes;
use crate::import::document::Document;
use crate::import::operation::{In, Operation};
use crate::import::schema::{self, Refs, SchemaReader};
use crate::import::{Note, Options, docstring, server, text, yaml};
use crate::row::args::ArgSchema;
use crate::row::target::HttpTarget;
use crate::row::template::COMPONENT;
use serde_json::{Map, Value as Json, json};

/// Characters of an argument's description.
pub const ARG_DESCRIPTION_CHARS: usize = 200;
/// An `input_schema` larger than this (compact JSON) loses nested descriptions, then depth.
pub const SCHEMA_BYTES: usize = 24 * 1024;
/// Examples kept per row.
const MAX_EXAMPLES: usize = 3;

/// A row drafted from an operation, before its key is final.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The key's words before it is made unique (see `key.rs`).
    pub name: Vec<String>,
    pub operation: String,
    pub operation_id: Option<String>,
    pub target: String,
    /// The base URL the target starts with (where its credential goes).
    pub base: String,
    pub auth: String,
    pub category: String,
    pub sensitive: bool,
    pub input_schema: Json,
    pub examples: Vec<String>,
    pub doc: Vec<String>,
    pub payload: String,
    pub asks: Vec<String>,
    pub notes: Vec<Note>,
}

/// What the document gives every operation.
pub struct Context<'d> {
    pub doc: &'d Document,
    pub refs: Refs<'d>,
    pub schemes: Schemes,
    pub options: &'d Options,
    /// The document's base URL, or why there is none.
    pub base: Result<String, String>,
    pub title: String,
}

/// An argument: a parameter or the body.
pub(super) struct Arg {
    pub name: String,
    pub schema: Json,
    pub examples: Vec<Json>,
    /// The body: sent as the payload, its JSON given whole.
    pub body: bool,
}

pub(super) fn note(kind: &'static str, message: impl Into<String>) -> Note {
    Note {
        kind,
        message: message.into(),
    }
}

/// Draft `op`, or say why it cannot be imported.
pub fn draft(cx: &Context<'_>, op: &Operation<'_>) -> Result<Draft, Vec<Note>> {
    if !op.malformed.is_empty() {
        return Err(op
            .malformed
            .iter()
            .map(|m| note("malformed", m.clone()))
            .collect());
    }
    if !crate::row::target::METHODS.contains(&op.method.as_str()) {
        return Err(vec![note(
            "method",
            format!("{} is not a method rows can send", op.method),
        )]);
    }
    let mut notes = Vec::new();
    let mut skip = Vec::new();
    let mut reader = SchemaReader::new(cx.refs);
    let mut args: Vec<Arg> = Vec::new();

    // Path parameters, in the order the path names them.
    let path_names = path_params(&op.path);
    for name in &path_names {
        let declared = op
            .params
            .iter()
            .find(|p| p.location == In::Path && &p.name == name);
        let arg = match declared {
            Some(p) => param_arg(cx, &mut reader, p, &mut notes, &mut skip),
            None => {
                notes.push(note(
                    "undeclared_path_parameter",
                    format!("path parameter `{name}` is not declared; taken as a string"),
                ));
                Some(Arg {
                    name: name.clone(),
                    schema: json!({"type": "string"}),
                    examples: Vec::new(),
                    body: false,
                })
            }
        };
        args.extend(arg);
    }
    let mut optional: Vec<(In, &str)> = Vec::new();
    for p in &op.params {
        match p.location {
            In::Path => {
                if !path_names.contains(&p.name) {
                    notes.push(note(
                        "undeclared_path_parameter",
                        format!(
                            "path parameter `{}` does not appear in the path; left out",
                            p.name
                        ),
                    ));
                }
            }
            In::Query if p.required => {
                args.extend(param_arg(cx, &mut reader, p, &mut notes, &mut skip))
            }
            In::Header
                if ["accept", "content-type", "authorization"]
                    .contains(&p.name.to_ascii_lowercase().as_str()) => {}
            In::Header | In::Cookie if p.required => skip.push(note(
                if p.location == In::Header {
                    "header_parameter"
                } else {
                    "cookie_parameter"
                },
                format!(
                    "required {} parameter `{}` cannot be sent: rows set no {} from arguments",
                    p.location.name(),
                    p.name,
                    if p.location == In::Header {
                        "headers"
                    } else {
                        "cookies"
                    }
                ),
            )),
            _ => optional.push((p.location, &p.name)),
        }
    }
    for location in [In::Query, In::Header, In::Cookie] {
        let names: Vec<&str> = optional
            .iter()
            .filter(|(l, _)| *l == location)
            .map(|(_, n)| *n)
            .collect();
        if !names.is_empty() {
            notes.push(note(
                match location {
                    In::Query => "optional_query",
                    In::Header => "optional_header",
                    _ => "optional_cookie",
                },
                format!(
                    "optional {} parameter{} not placed: {} ({})",
                    location.name(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", "),
                    if location == In::Query {
                        "a slot is a required piece and is always sent"
                    } else {
                        "rows send no such values from arguments"
                    }
                ),
            ));
        }
    }
    if let Some(body) = &op.body {
        args.extend(body_arg(
            cx,
            &mut reader,
            body,
            &args,
            &mut notes,
            &mut skip,
        ));
    }
    if !op.callbacks.is_empty() {
        notes.push(note(
            "callbacks",
            format!(
                "callbacks not imported (a row makes one request and receives none): {}",
                op.callbacks.join(", ")
            ),
        ));
    }
    for n in std::mem::take(&mut reader.notes) {
        notes.push(note("schema", n));
    }
    if !skip.is_empty() {
        skip.extend(notes);
        return Err(skip);
    }

    let base = match op
        .servers
        .and_then(|s| server::of_servers(s, &cx.doc.origin).ok())
    {
        Some(b) => b,
        None => cx.base.clone().map_err(|e| vec![note("no_server", e)])?,
    };
    let target = target(&op.method, &base, &op.path, &path_names, &args)
        .map_err(|e| vec![note("target", e)])?;
    let payload = match args.iter().position(|a| a.body) {
        Some(i) => format!("${}+", i + 1),
        None => String::new(),
    };

    let (auth, auth_notes) = match &cx.options.auth {
        Some(a) => (a.clone(), Vec::new()),
        None => cx.schemes.auth_for(op.security),
    };
    notes.extend(auth_notes.into_iter().map(|m| note("security", m)));

    let input_schema = input_schema(&args, &mut notes);
    let examples = examples(&args, &input_schema, &mut notes);
    let doc = docstring::lines(&cx.title, op, &args, examples.first());
    let category = match &cx.options.category {
        Some(c) => c.clone(),
        None => op
            .tags
            .first()
            .map(|t| slug(t))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| slug(&cx.title)),
    };
    let ask = text::plain(&op.summary)
        .trim_end_matches(['.', ' '])
        .to_lowercase();
    let asks = if ask.split_whitespace().count() >= 2 && ask.chars().count() <= 100 {
        vec![ask]
    } else {
        Vec::new()
    };
    let read_only = matches!(op.method.as_str(), "GET" | "HEAD" | "OPTIONS");
    Ok(Draft {
        name: crate::import::key::name_words(op.id.as_deref(), &op.method, &op.path),
        operation: op.label(),
        operation_id: op.id.clone(),
        target,
        base,
        sensitive: !read_only && !auth.is_empty(),
        auth,
        category,
        input_schema,
        examples,
        doc,
        payload,
        asks,
        notes,
    })
}

/// `{name}` placeholders of a path template, in order, each once.
pub fn path_params(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        rest = &rest[open + close + 1..];
    }
    out
}

/// The target: base URL, path with `$N` for its parameters, required query parameters.
fn target(
    method: &str,
    base: &str,
    path: &str,
    path_names: &[String],
    args: &[Arg],
) -> Result<String, String> {
    let slot = |name: &str, body: bool| {
        args.iter()
            .position(|a| a.name == name && a.body == body)
            .map(|i| format!("${}", i + 1))
    };
    let mut url = base.to_string();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        push_literal(&mut url, &rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            push_literal(&mut url, &rest[open..]);
            rest = "";
            break;
        };
        let name = &rest[open + 1..open + close];
        match path_names
            .iter()
            .find(|n| *n == name)
            .and_then(|n| slot(n, false))
        {
            Some(s) => url.push_str(&s),
            None => push_literal(&mut url, &rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    push_literal(&mut url, rest);
    let mut sep = if url.contains('?') { '&' } else { '?' };
    for (i, a) in args.iter().enumerate() {
        if a.body || path_names.contains(&a.name) {
            continue;
        }
        url.push(sep);
        url.extend(percent_encoding::utf8_percent_encode(&a.name, COMPONENT));
        url.push_str(&format!("=${}", i + 1));
        sep = '&';
    }
    let target = format!("{method} {url}");
    HttpTarget::parse(&target).map_err(|e| format!("{}: {}", e.message, e.help))?;
    Ok(target)
}

/// Literal path text, with `$` and anything a URL cannot hold percent-encoded (so no literal
/// is ever read as a slot).
fn push_literal(url: &mut String, text: &str) {
    const KEEP: &str = "/-._~!&'()*+,;=:@?%";
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || KEEP.contains(c) {
            url.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                url.push_str(&format!("%{b:02X}"));
            }
        }
    }
}

/// `input_schema`: every argument, all required, in positional order; cut to size, and
/// simplified when the validator cannot compile it.
fn input_schema(args: &[Arg], notes: &mut Vec<Note>) -> Json {
    let mut props = Map::new();
    for a in args {
        props.insert(a.name.clone(), a.schema.clone());
    }
    let mut s = json!({"type": "object", "properties": props});
    if !args.is_empty() {
        s["required"] = json!(args.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
    }
    if schema::size(&s) > SCHEMA_BYTES {
        s = schema::without_nested_docs(&s);
        notes.push(note(
            "schema",
            "the argument schema is large: nested descriptions are left out",
        ));
    }
    let mut levels = 6;
    while schema::size(&s) > SCHEMA_BYTES && levels > 1 {
        levels -= 1;
        s = schema::shallow(&s, levels);
    }
    if levels < 6 {
        notes.push(note(
            "schema",
            format!("the argument schema is large: cut to {levels} levels of fields"),
        ));
    }
    if ArgSchema::compile(&s).is_err() {
        let plain = schema::without_patterns(&s);
        if ArgSchema::compile(&plain).is_ok() {
            notes.push(note(
                "schema",
                "a `pattern` or `format` the validator cannot compile is left out",
            ));
            s = plain;
        } else {
            notes.push(note(
                "schema",
                "the argument schema could not be compiled; only the arguments' types are kept",
            ));
            s = schema::shallow(&s, 1);
        }
    }
    s
}

/// Argument strings from the document's examples, when it has one for every argument; each
/// checked against `input_schema`.
fn examples(args: &[Arg], schema: &Json, notes: &mut Vec<Note>) -> Vec<String> {
    if args.is_empty() || args.iter().any(|a| a.examples.is_empty()) {
        return Vec::new();
    }
    let Ok(compiled) = ArgSchema::compile(schema) else {
        return Vec::new();
    };
    let variants = args
        .iter()
        .map(|a| a.examples.len())
        .max()
        .unwrap_or(0)
        .min(MAX_EXAMPLES);
    let mut out = Vec::new();
    let mut dropped = 0;
    for v in 0..variants {
        let mut pieces = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let Some(p) = piece(&a.examples[v.min(a.examples.len() - 1)]) else {
                break;
            };
            // Only the last argument may contain a pipe; `$N+` puts it back.
            if i + 1 < args.len() && p.contains('|') {
                break;
            }
            // An example is one line of text: `# EX:` shows it as it is.
            if p.chars().any(|c| c.is_control() || text::is_invisible(c)) {
                break;
            }
            pieces.push(p);
        }
        if pieces.len() != args.len() {
            dropped += 1;
            continue;
        }
        let joined = pieces.join("|");
        let obj =
            crate::row::args::positional_to_object(schema, &crate::row::args::split_body(&joined));
        if !compiled.problems(&Json::Object(obj)).is_empty() {
            dropped += 1;
            continue;
        }
        if !out.contains(&joined) {
            out.push(joined);
        }
    }
    if dropped > 0 {
        notes.push(note(
            "example",
            format!("{dropped} document example(s) left out: they do not satisfy the argument schema or do not fit one line"),
        ));
    }
    out
}

impl Draft {
    /// Everything taken from the document's prose left out (docstring, argument
    /// descriptions, examples, asks): what is tried when the row with them fails the gate.
    pub fn without_prose(&mut self) {
        self.examples.clear();
        self.asks.clear();
        let no_args = self.input_schema["properties"]
            .as_object()
            .is_none_or(|p| p.is_empty());
        let args = self
            .doc
            .get(2)
            .cloned()
            .unwrap_or_else(|| "# ARGS: none".into());
        self.doc = vec![
            format!("# WHAT: {}", self.operation),
            "# WHEN_TO_USE: See the API's documentation of this operation.".into(),
            args,
            format!(
                "# EX: {}",
                if no_args {
                    "(no arguments)"
                } else {
                    "(none in the document)"
                }
            ),
            "# OUTPUT: The API's answer.".into(),
        ];
        self.input_schema = schema::without_docs(&self.input_schema);
    }

    /// The row file's text after the provenance line: what the digest covers.
    pub fn body_text(&self, key: &str) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "key: {key}\ntype: http\ntarget: {}\n",
            yaml::quoted(&self.target)
        ));
        if !self.auth.is_empty() {
            yaml::field(&mut out, 0, "auth", &json!(self.auth));
        }
        if !self.category.is_empty() {
            yaml::field(&mut out, 0, "category", &json!(self.category));
        }
        if self.sensitive {
            out.push_str("sensitive: true\n");
        }
        yaml::field(&mut out, 0, "input_schema", &self.input_schema);
        if !self.examples.is_empty() {
            out.push_str("examples:\n");
            for e in &self.examples {
                yaml::list_item(&mut out, 2, &json!(e));
            }
        }
        let mut lines = self.doc.clone();
        if !self.payload.is_empty() {
            lines.push(self.payload.clone());
        }
        yaml::block(&mut out, "content", &lines);
        if !self.asks.is_empty() {
            out.push_str("asks:\n");
            for a in &self.asks {
                yaml::list_item(&mut out, 2, &json!(a));
            }
        }
        out
    }
}
