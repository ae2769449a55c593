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

use crate::import::auth::Schemes;
use crate::import::document::{Document, Version};
use crate::import::operation::{Body, In, Operation, Param};
use crate::import::schema::{self, Refs, SchemaReader};
use crate::import::{Note, Options, text, yaml};
use crate::row::args::ArgSchema;
use crate::row::target::HttpTarget;
use crate::row::template::COMPONENT;
use serde_json::{Map, Value as Json, json};

/// Docstring budgets, in characters: a contract stays a few KB, and a planner reads these
/// lines in every candidate it weighs.
pub const WHAT_CHARS: usize = 160;
pub const WHEN_CHARS: usize = 480;
pub const ARGS_CHARS: usize = 400;
pub const OUTPUT_CHARS: usize = 240;
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
struct Arg {
    name: String,
    schema: Json,
    examples: Vec<Json>,
    /// The body: sent as the payload, its JSON given whole.
    body: bool,
}

fn note(kind: &'static str, message: impl Into<String>) -> Note {
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

    let base = match op.servers.and_then(|s| server_url(cx, s).ok()) {
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
    let doc = docstring(cx, op, &args, examples.first());
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

/// `schema` with `description` set, placed after `type` where a reader looks first.
fn described(schema: Json, description: &str) -> Json {
    let Json::Object(m) = schema else {
        return schema;
    };
    let mut out = Map::new();
    if let Some(t) = m.get("type") {
        out.insert("type".into(), t.clone());
    }
    out.insert("description".into(), json!(description));
    for (k, v) in m {
        if k != "type" && k != "description" {
            out.insert(k, v);
        }
    }
    Json::Object(out)
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

/// An argument from a parameter: its schema (the parameter's description on top), and the
/// document's examples of it. Lists are sent as one comma-separated value; objects cannot
/// be sent in one slot.
fn param_arg(
    cx: &Context<'_>,
    reader: &mut SchemaReader<'_>,
    p: &Param<'_>,
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> Option<Arg> {
    let raw = match cx.doc.version {
        Version::Swagger2 => Json::Object(
            p.def
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "name" | "in" | "required" | "description" | "allowEmptyValue"
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => match (
            p.def.get("schema"),
            p.def.get("content").and_then(Json::as_object),
        ) {
            (Some(s), _) => s.clone(),
            (None, Some(content)) => content
                .values()
                .next()
                .and_then(|m| m.get("schema"))
                .cloned()
                .unwrap_or_else(|| json!({})),
            (None, None) => json!({}),
        },
    };
    let mut schema = reader.read(&raw);
    match schema::json_type(&schema) {
        Some("array") => {
            let explode = p.def.get("explode").and_then(Json::as_bool);
            let style = p.def.get("style").and_then(Json::as_str).unwrap_or("form");
            let repeated = match cx.doc.version {
                Version::Swagger2 => {
                    p.def.get("collectionFormat").and_then(Json::as_str) == Some("multi")
                }
                _ => p.location == In::Query && explode != Some(false) && style == "form",
            };
            if repeated {
                notes.push(note(
                    "list_parameter",
                    format!(
                        "list parameter `{}` is sent as one comma-separated value, not repeated",
                        p.name
                    ),
                ));
            }
            let values: Vec<String> = schema
                .pointer("/items/enum")
                .and_then(Json::as_array)
                .map(|e| e.iter().filter_map(piece).collect())
                .unwrap_or_default();
            let what = if values.is_empty() {
                "comma-separated values".to_string()
            } else {
                format!("comma-separated values of: {}", values.join(", "))
            };
            schema = json!({"type": "string", "description": what});
        }
        Some("object") => {
            let n = note(
                "object_parameter",
                format!(
                    "{} parameter `{}` is an object, which one slot cannot carry",
                    p.location.name(),
                    p.name
                ),
            );
            if p.required {
                skip.push(n);
            } else {
                notes.push(n);
            }
            return None;
        }
        _ => {}
    }
    let description = text::plain(
        p.def
            .get("description")
            .and_then(Json::as_str)
            .unwrap_or(""),
    );
    let previous = schema
        .get("description")
        .and_then(Json::as_str)
        .unwrap_or("")
        .to_string();
    let joined = match (description.is_empty(), previous.is_empty()) {
        (true, _) => previous,
        (false, true) => description,
        (false, false) if previous == description => description,
        (false, false) => format!("{description} ({previous})"),
    };
    if !joined.is_empty() {
        schema = described(schema, &text::cut(&joined, ARG_DESCRIPTION_CHARS));
    }
    if p.def.get("deprecated") == Some(&Json::Bool(true))
        && let Json::Object(m) = &mut schema
    {
        m.insert("deprecated".into(), json!(true));
    }
    let mut examples = Vec::new();
    examples.extend(p.def.get("example").cloned());
    examples.extend(p.def.get("x-example").cloned());
    examples.extend(named_examples(cx, p.def.get("examples")));
    examples.extend(raw.get("example").cloned());
    if let Some(Json::Array(list)) = raw.get("examples") {
        examples.extend(list.iter().cloned());
    }
    let examples = examples
        .into_iter()
        .map(|e| match e {
            Json::Array(items) => Json::String(
                items
                    .iter()
                    .map(piece)
                    .collect::<Option<Vec<_>>>()
                    .map(|v| v.join(","))
                    .unwrap_or_default(),
            ),
            other => other,
        })
        .collect();
    Some(Arg {
        name: p.name.clone(),
        schema,
        examples,
        body: false,
    })
}

/// OpenAPI 3 `examples`: a mapping of names to `{value}` (or references to them).
fn named_examples(cx: &Context<'_>, examples: Option<&Json>) -> Vec<Json> {
    let Some(Json::Object(named)) = examples else {
        return Vec::new();
    };
    named
        .values()
        .filter_map(|e| cx.refs.follow(e).ok())
        .filter_map(|e| e.get("value").cloned())
        .collect()
}

fn is_json_media(media: &str) -> bool {
    let m = media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    m == "application/json" || m.ends_with("+json") || m.ends_with("/json") || m == "*/*"
}

/// The body as one argument: its JSON schema and examples, or a note (and, when the body is
/// required, a reason not to import) when it is not JSON or text.
fn body_arg(
    cx: &Context<'_>,
    reader: &mut SchemaReader<'_>,
    body: &Body<'_>,
    args: &[Arg],
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> Option<Arg> {
    let unsupported =
        |required: bool, what: String, notes: &mut Vec<Note>, skip: &mut Vec<Note>| {
            let kind = if what.contains("multipart") {
                "multipart_body"
            } else {
                "body_media"
            };
            if required {
                skip.push(note(kind, format!("required request body {what}")));
            } else {
                notes.push(note(
                    kind,
                    format!("optional request body {what}; the row sends none"),
                ));
            }
            None
        };
    let (required, description, raw_schema, examples, text_body) = match body {
        Body::Content {
            required,
            description,
            content,
        } => {
            let json_media = content
                .keys()
                .find(|m| m.eq_ignore_ascii_case("application/json"))
                .or_else(|| content.keys().find(|m| is_json_media(m)));
            let (media, text_body) = match json_media {
                Some(m) => (m, false),
                None => match content.keys().find(|m| m.starts_with("text/plain")) {
                    Some(m) => (m, true),
                    None => {
                        let kinds: Vec<&str> = content.keys().map(String::as_str).collect();
                        return unsupported(
                            *required,
                            format!(
                                "as {} cannot be sent: rows send JSON or text bodies",
                                if kinds.is_empty() {
                                    "nothing".to_string()
                                } else {
                                    kinds.join(", ")
                                }
                            ),
                            notes,
                            skip,
                        );
                    }
                },
            };
            let m = &content[media.as_str()];
            let mut examples: Vec<Json> = m.get("example").cloned().into_iter().collect();
            examples.extend(named_examples(cx, m.get("examples")));
            (
                *required,
                description.clone(),
                m.get("schema").cloned().unwrap_or_else(|| json!({})),
                examples,
                text_body,
            )
        }
        Body::Schema {
            required,
            description,
            param,
            consumes,
        } => {
            if !consumes.is_empty() && !consumes.iter().any(|c| is_json_media(c)) {
                return unsupported(
                    *required,
                    format!(
                        "as {} cannot be sent: rows send JSON bodies",
                        consumes.join(", ")
                    ),
                    notes,
                    skip,
                );
            }
            let mut examples: Vec<Json> = Vec::new();
            if let Some(Json::Object(x)) = param.get("x-examples") {
                examples.extend(x.values().cloned());
            }
            (
                *required,
                description.clone(),
                param.get("schema").cloned().unwrap_or_else(|| json!({})),
                examples,
                false,
            )
        }
        Body::Form {
            required,
            multipart,
            fields,
        } => {
            return unsupported(
                *required,
                format!(
                    "as {} fields ({}) cannot be sent: rows send JSON or text bodies",
                    if *multipart {
                        "multipart form"
                    } else {
                        "URL-encoded form"
                    },
                    fields.join(", ")
                ),
                notes,
                skip,
            );
        }
    };
    let mut schema = reader.read(&raw_schema);
    let mut examples = examples;
    if let Some(e) = raw_schema.get("example").cloned() {
        examples.push(e);
    }
    if text_body {
        schema = json!({"type": "string"});
    } else {
        match schema::json_type(&schema) {
            Some("object") | Some("array") => {}
            None => {
                // A schema that names no type (a bare `oneOf`, or any value): the row sends
                // a JSON object, which coercion needs to know to parse the argument.
                if let Json::Object(m) = &mut schema {
                    m.insert("type".into(), json!("object"));
                }
            }
            Some(other) => {
                return unsupported(
                    required,
                    format!("is a JSON {other}, which the row cannot encode from an argument"),
                    notes,
                    skip,
                );
            }
        }
        if let Json::Object(m) = &mut schema
            && m.get("type").and_then(Json::as_str).is_none()
            && let Some(t) = schema::json_type(&Json::Object(m.clone())).map(str::to_string)
        {
            m.insert("type".into(), json!(t));
        }
    }
    let fields = body_fields(&schema);
    let mut d = if text_body {
        "The request body, as text".to_string()
    } else {
        format!("The request body as JSON{fields}")
    };
    let description = text::plain(&description);
    if !description.is_empty() {
        d = format!("{d}. {description}");
    }
    if !required {
        d.push_str(if text_body {
            ". Optional: send an empty text for none"
        } else {
            ". Optional: send {} for none"
        });
    }
    let schema = described(schema, &text::cut(&d, ARG_DESCRIPTION_CHARS));
    let taken = |n: &str| args.iter().any(|a| a.name == n);
    let name = ["body", "request_body", "request_body_json"]
        .into_iter()
        .find(|n| !taken(n))
        .unwrap_or("request_body_json");
    Some(Arg {
        name: name.to_string(),
        schema,
        examples,
        body: true,
    })
}

/// `: title (required), body, labels` for an object schema with properties.
fn body_fields(schema: &Json) -> String {
    let Some(props) = schema.get("properties").and_then(Json::as_object) else {
        return String::new();
    };
    if props.is_empty() {
        return String::new();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Json::as_array)
        .map(|r| r.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = props
        .keys()
        .map(|k| {
            if required.contains(&k.as_str()) {
                format!("{k} (required)")
            } else {
                k.clone()
            }
        })
        .collect();
    format!(": {}", fields.join(", "))
}

/// The server URL a `servers` list names: its first entry, variables at their defaults,
/// relative to where the document came from when it is relative.
fn server_url(cx: &Context<'_>, servers: &Json) -> Result<String, String> {
    let first = servers
        .as_array()
        .and_then(|s| s.first())
        .ok_or("the document lists no servers")?;
    let mut url = first
        .get("url")
        .and_then(Json::as_str)
        .ok_or("the first server has no `url`")?
        .to_string();
    for name in path_params(&url) {
        let default = first
            .pointer(&format!(
                "/variables/{}/default",
                crate::import::document::escape_pointer(&name)
            ))
            .and_then(Json::as_str)
            .ok_or_else(|| format!("server variable `{name}` has no default"))?;
        url = url.replace(&format!("{{{name}}}"), default);
    }
    absolute(&url, &cx.doc.origin)
}

/// `url` made absolute against the document's origin when that is a URL.
fn absolute(url: &str, origin: &str) -> Result<String, String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(url.trim_end_matches('/').to_string());
    }
    let base = reqwest::Url::parse(origin)
        .ok()
        .filter(|u| u.scheme().starts_with("http"));
    match base.and_then(|b| b.join(url).ok()) {
        Some(u) => Ok(u.as_str().trim_end_matches('/').to_string()),
        None => Err(format!(
            "the server URL `{url}` is relative and the document was not fetched from a URL; pass --server https://…"
        )),
    }
}

/// The base URL of the whole document (every operation without servers of its own uses it).
pub fn document_base(doc: &Document, server: Option<&str>) -> Result<String, String> {
    if let Some(s) = server {
        return absolute(s, &doc.origin);
    }
    match doc.version {
        Version::Swagger2 => {
            let origin = reqwest::Url::parse(&doc.origin).ok();
            let host = doc
                .root
                .get("host")
                .and_then(Json::as_str)
                .map(str::to_string)
                .or_else(|| {
                    origin
                        .as_ref()
                        .filter(|o| o.scheme().starts_with("http"))
                        .and_then(|o| o.host_str().map(|h| match o.port() {
                            Some(p) => format!("{h}:{p}"),
                            None => h.to_string(),
                        }))
                })
                .ok_or("the document names no `host` and was not fetched from a URL; pass --server https://…")?;
            let schemes: Vec<&str> = doc
                .root
                .get("schemes")
                .and_then(Json::as_array)
                .map(|s| s.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            let scheme = if schemes.contains(&"https") {
                "https"
            } else if schemes.contains(&"http") {
                "http"
            } else {
                origin
                    .as_ref()
                    .map(|o| o.scheme())
                    .filter(|s| *s == "http")
                    .unwrap_or("https")
            };
            let base_path = doc
                .root
                .get("basePath")
                .and_then(Json::as_str)
                .unwrap_or("");
            Ok(format!(
                "{scheme}://{host}{}",
                base_path.trim_end_matches('/')
            ))
        }
        _ => {
            let servers = doc
                .root
                .get("servers")
                .filter(|s| s.as_array().is_some_and(|a| !a.is_empty()));
            let cx_servers = servers.cloned().unwrap_or_else(|| json!([{"url": "/"}]));
            let first = &cx_servers[0];
            let mut url = first
                .get("url")
                .and_then(Json::as_str)
                .unwrap_or("/")
                .to_string();
            for name in path_params(&url) {
                let default = first
                    .pointer(&format!(
                        "/variables/{}/default",
                        crate::import::document::escape_pointer(&name)
                    ))
                    .and_then(Json::as_str)
                    .ok_or_else(|| {
                        format!("server variable `{name}` has no default; pass --server https://…")
                    })?;
                url = url.replace(&format!("{{{name}}}"), default);
            }
            absolute(&url, &doc.origin)
        }
    }
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

/// A JSON value as one argument piece: text as it is, anything else as JSON.
fn piece(v: &Json) -> Option<String> {
    match v {
        Json::Null => None,
        Json::String(s) => Some(s.clone()),
        other => serde_json::to_string(other).ok(),
    }
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

/// The `#` lines: WHAT, WHEN_TO_USE, ARGS, EX, OUTPUT, each cut to its budget.
fn docstring(
    cx: &Context<'_>,
    op: &Operation<'_>,
    args: &[Arg],
    example: Option<&String>,
) -> Vec<String> {
    let summary = text::plain(&op.summary);
    let description = text::plain(&op.description);
    let what = if !summary.is_empty() {
        summary.clone()
    } else if !description.is_empty() {
        text::first_sentence(&description).to_string()
    } else {
        op.label()
    };
    let what = text::cut(&what, WHAT_CHARS);
    let mut when = if description.is_empty() || description == what {
        let mut lowered = what.clone();
        if let Some(first) = lowered.get(..1) {
            let first = first.to_ascii_lowercase();
            lowered.replace_range(..1, &first);
        }
        format!(
            "To {} through the {} API ({}).",
            lowered.trim_end_matches('.'),
            cx.title,
            op.label()
        )
    } else {
        description
    };
    if op.deprecated {
        when = format!("Deprecated by the API. {when}");
    }
    let when = text::cut(&when, WHEN_CHARS);
    let args_line = if args.is_empty() {
        "none".to_string()
    } else {
        args.iter()
            .enumerate()
            .map(|(i, a)| {
                if a.body && schema::json_type(&a.schema) == Some("string") {
                    format!("${}+={} (text)", i + 1, a.name)
                } else if a.body {
                    let fields = body_fields(&a.schema);
                    format!("${}+={} (JSON{fields})", i + 1, a.name)
                } else {
                    format!("${}={}", i + 1, a.name)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let args_line = text::cut(&args_line, ARGS_CHARS);
    let ex = match example {
        Some(e) => e.clone(),
        None if args.is_empty() => "(no arguments)".to_string(),
        None => "(none in the document)".to_string(),
    };
    let output = match &op.success {
        Some((code, response)) => {
            let media: Vec<&str> = response
                .get("content")
                .and_then(Json::as_object)
                .map(|c| c.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let described = text::plain(
                response
                    .get("description")
                    .and_then(Json::as_str)
                    .unwrap_or(""),
            );
            let status = if code == "default" {
                "HTTP 2xx".to_string()
            } else {
                format!("HTTP {code}")
            };
            let with = match media.first() {
                Some(m) => format!(" with {m}"),
                None if response.get("schema").is_some() => " with JSON".to_string(),
                None => String::new(),
            };
            if described.is_empty() {
                format!("{status}{with}")
            } else {
                format!("{status}{with}: {described}")
            }
        }
        None => "The API's answer; the document describes no success response.".to_string(),
    };
    let output = text::cut(&output, OUTPUT_CHARS);
    vec![
        format!("# WHAT: {what}"),
        format!("# WHEN_TO_USE: {when}"),
        format!("# ARGS: {args_line}"),
        format!("# EX: {ex}"),
        format!("# OUTPUT: {output}"),
    ]
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
