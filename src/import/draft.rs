//! One operation drafted as one `http` row:
//!
//! - Arguments, in this order: the path parameters (in path order), then the required query
//!   and header parameters and body fields, then the optional ones. So a positional call
//!   `a|b|c` sends the required ones, and a call by name (`args`) any of them.
//! - Path parameters are `$N` slots; query parameters one RFC 6570 expression
//!   (`{?limit,starting_after,expand[]}`: the absent left out, lists and objects as the
//!   document's `style` says); headers and the body request lines (`{header:…}`,
//!   `{json:…}`, `{form:…}`, `{multipart:…}`, or `{body:body}` for a body with no fields to
//!   name). See `row/expand.rs`.
//! - A query or header parameter that carries the credential (Slack's `token`) is the row's
//!   `auth`, not an argument.
//! - What cannot be sent (a cookie, a file, a body of another media type) is a note, or, when
//!   the operation requires it, a reason not to import the operation.

use crate::check::slug;
use crate::import::arguments::{body_args, param_arg, piece};
use crate::import::operation::{Body, In, Operation, path_params};
use crate::import::parts::{Arg, Context, Draft, Place, note};
use crate::import::schema::{self, SchemaReader};
use crate::import::{Note, docstring, server, text, yaml};
use crate::row::args::ArgSchema;
use crate::row::expand::{BodyKind, Mode};
use crate::row::target::HttpTarget;
use serde_json::{Map, Value as Json, json};

/// An `input_schema` larger than this (compact JSON) loses nested descriptions, then depth.
pub const SCHEMA_BYTES: usize = 24 * 1024;
/// Examples kept per row.
const MAX_EXAMPLES: usize = 3;

/// Draft `op`, or say why it cannot be imported.
pub fn draft(cx: &Context<'_>, op: &Operation<'_>) -> Result<Draft, Vec<Note>> {
    sendable(op)?;
    let mut d = Drafting {
        cx,
        reader: SchemaReader::new(cx.refs),
        notes: Vec::new(),
        skip: Vec::new(),
        credential_param: None,
    };
    let path_names = path_params(&op.path);
    let mut args = d.path_args(op, &path_names);
    let mut others = d.other_params(op, &path_names);
    let body_kind = match &op.body {
        Some(body) => d.body_fields(body, &mut others),
        None => None,
    };
    // Required before optional, each group in the document's order; one name per argument.
    others.sort_by_key(|a| !a.required);
    unique_names(&mut args, &mut others);
    args.extend(others);
    let Drafting {
        mut notes,
        mut skip,
        reader,
        credential_param,
        ..
    } = d;
    if !op.callbacks.is_empty() {
        notes.push(note(
            "callbacks",
            format!(
                "callbacks not imported (a row makes one request and receives none): {}",
                op.callbacks.join(", ")
            ),
        ));
    }
    notes.extend(reader.notes.into_iter().map(|n| note("schema", n)));
    if !skip.is_empty() {
        skip.extend(notes);
        return Err(skip);
    }
    let base = base_of(cx, op)?;
    let target = target(&op.method, &base, &op.path, &args).map_err(|e| vec![note("target", e)])?;
    let payload = request_lines(&args, body_kind);
    let (auth, auth_notes) = auth_of(cx, op, credential_param.as_ref());
    notes.extend(auth_notes.into_iter().map(|m| note("security", m)));
    let input_schema = input_schema(&args, &mut notes);
    let examples = examples(&args, &input_schema, &mut notes);
    let doc = docstring::lines(&cx.title, op, &args, examples.first());
    let read_only = matches!(op.method.as_str(), "GET" | "HEAD" | "OPTIONS");
    Ok(Draft {
        name: crate::import::key::name_words(op.id.as_deref(), &op.method, &op.path),
        operation: op.label(),
        operation_id: op.id.clone(),
        target,
        base,
        sensitive: !read_only && !auth.is_empty(),
        auth,
        category: category_of(cx, op),
        input_schema,
        examples,
        doc,
        payload,
        asks: asks_of(op),
        notes,
    })
}

/// An operation a row can be made of at all: read whole, with a method rows send.
fn sendable(op: &Operation<'_>) -> Result<(), Vec<Note>> {
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
    Ok(())
}

/// One operation's arguments as they are read: the notes so far, the reasons not to import
/// it (`skip`), and the parameter that carries the credential, if one does.
struct Drafting<'c, 'd> {
    cx: &'c Context<'d>,
    reader: SchemaReader<'d>,
    notes: Vec<Note>,
    skip: Vec<Note>,
    credential_param: Option<(In, String)>,
}

impl Drafting<'_, '_> {
    /// What cannot be sent: a reason not to import the operation when it is required, else
    /// a note.
    fn unsendable(&mut self, required: bool, n: Note) {
        if required {
            self.skip.push(n);
        } else {
            self.notes.push(n);
        }
    }

    /// The path parameters, in the order the path names them, each required.
    fn path_args(&mut self, op: &Operation<'_>, path_names: &[String]) -> Vec<Arg> {
        let mut args = Vec::new();
        for name in path_names {
            let declared = op
                .params
                .iter()
                .find(|p| p.location == In::Path && &p.name == name);
            let arg = match declared {
                Some(p) => param_arg(
                    self.cx,
                    &mut self.reader,
                    p,
                    &mut self.notes,
                    &mut self.skip,
                ),
                None => {
                    self.notes.push(note(
                        "undeclared_path_parameter",
                        format!("path parameter `{name}` is not declared; taken as a string"),
                    ));
                    Some(Arg {
                        name: name.clone(),
                        schema: json!({"type": "string"}),
                        examples: Vec::new(),
                        place: Place::Path(name.clone()),
                        required: true,
                    })
                }
            };
            args.extend(arg.map(|mut a| {
                a.required = true;
                a
            }));
        }
        args
    }

    /// The query and header parameters that become arguments; the rest noted (a credential
    /// parameter kept aside, a cookie or a header no request line can hold).
    fn other_params(&mut self, op: &Operation<'_>, path_names: &[String]) -> Vec<Arg> {
        let mut others = Vec::new();
        for p in &op.params {
            match p.location {
                In::Path => {
                    if !path_names.contains(&p.name) {
                        self.notes.push(note(
                            "undeclared_path_parameter",
                            format!(
                                "path parameter `{}` does not appear in the path; left out",
                                p.name
                            ),
                        ));
                    }
                }
                In::Header
                    if ["accept", "content-type", "authorization", "content-length"]
                        .contains(&p.name.to_ascii_lowercase().as_str()) => {}
                In::Header | In::Query
                    if is_credential(&p.name) && self.cx.options.auth.is_none() =>
                {
                    self.credential_param
                        .get_or_insert((p.location, p.name.clone()));
                }
                // Swagger 2.0's form fields are its body (`operation::swagger_body`); one left
                // here is in a document of another version, where `formData` means nothing.
                In::FormData => self.notes.push(note(
                    "body_field",
                    format!(
                        "`formData` parameter `{}` outside Swagger 2.0 is not sent; OpenAPI 3 puts form fields in `requestBody`",
                        p.name
                    ),
                )),
                In::Cookie => {
                    let n = note(
                        "cookie_parameter",
                        format!(
                            "{} cookie parameter `{}` cannot be sent: rows set no cookies from arguments",
                            if p.required { "required" } else { "optional" },
                            p.name
                        ),
                    );
                    self.unsendable(p.required, n);
                }
                In::Header
                    if !wire_name_fits(&p.name)
                        || crate::row::expand::header_name_problem(&p.name).is_err() =>
                {
                    let why = crate::row::expand::header_name_problem(&p.name)
                        .err()
                        .unwrap_or_else(|| {
                            format!("`{}` is a name a request line cannot hold", p.name)
                        });
                    let n = note("header_parameter", format!("header parameter: {why}"));
                    self.unsendable(p.required, n);
                }
                _ => others.extend(param_arg(
                    self.cx,
                    &mut self.reader,
                    p,
                    &mut self.notes,
                    &mut self.skip,
                )),
            }
        }
        others
    }

    /// The body's fields (or the body whole) into `others`, but a field no request line can
    /// name; the body's kind.
    fn body_fields(&mut self, body: &Body, others: &mut Vec<Arg>) -> Option<BodyKind> {
        let (fields, kind) = body_args(
            self.cx,
            &mut self.reader,
            body,
            &mut self.notes,
            &mut self.skip,
        );
        for f in fields {
            if let Place::Field(w) = &f.place
                && !wire_name_fits(w)
            {
                let n = note(
                    "body_field",
                    format!("body field `{w}` has a name a request line cannot hold"),
                );
                self.unsendable(f.required, n);
                continue;
            }
            others.push(f);
        }
        kind
    }
}

/// The operation's base URL: its own servers', else the document's.
fn base_of(cx: &Context<'_>, op: &Operation<'_>) -> Result<String, Vec<Note>> {
    match op
        .servers
        .and_then(|s| server::of_servers(s, &cx.doc.origin).ok())
    {
        Some(b) => Ok(b),
        None => cx.base.clone().map_err(|e| vec![note("no_server", e)]),
    }
}

/// The row's `auth`: `--auth` when given, else the parameter that carries the credential,
/// else the operation's security; and what could not be mapped.
fn auth_of(
    cx: &Context<'_>,
    op: &Operation<'_>,
    credential_param: Option<&(In, String)>,
) -> (String, Vec<String>) {
    match (&cx.options.auth, credential_param) {
        (Some(a), _) => (a.clone(), Vec::new()),
        (None, Some((location, name))) => {
            let env = format!("{}_{}", cx.env_base, crate::import::auth::env_part(name));
            let env = env.trim_start_matches('_').to_string();
            let auth = if *location == In::Query {
                format!("query:{name}={env}")
            } else {
                format!("headers:{}", json!({ name.as_str(): format!("${env}") }))
            };
            (auth, Vec::new())
        }
        (None, None) => cx.schemes.auth_for(op.security),
    }
}

/// `--category`, else the operation's first tag, else the API's name, as a category.
fn category_of(cx: &Context<'_>, op: &Operation<'_>) -> String {
    match &cx.options.category {
        Some(c) => c.clone(),
        None => op
            .tags
            .first()
            .map(|t| slug(t))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| slug(&cx.title)),
    }
}

/// The operation's summary as the row's ask, when it reads as one (two words or more, at
/// most 100 characters).
fn asks_of(op: &Operation<'_>) -> Vec<String> {
    let ask = text::plain(&op.summary)
        .trim_end_matches(['.', ' '])
        .to_lowercase();
    if ask.split_whitespace().count() >= 2 && ask.chars().count() <= 100 {
        vec![ask]
    } else {
        Vec::new()
    }
}

/// The target: base URL, the path with `$N` for its parameters, and one query expression.
fn target(method: &str, base: &str, path: &str, args: &[Arg]) -> Result<String, String> {
    let slot = |name: &str| {
        args.iter()
            .position(|a| a.place == Place::Path(name.to_string()))
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
        match slot(name) {
            Some(s) => url.push_str(&s),
            None => push_literal(&mut url, &rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    push_literal(&mut url, rest);
    let query: Vec<String> = args
        .iter()
        .filter_map(|a| match &a.place {
            Place::Query(wire, mode) => Some(format!(
                "{wire}{}",
                match mode {
                    Mode::Plain => "",
                    Mode::Explode => "*",
                    Mode::Brackets => "[]",
                }
            )),
            _ => None,
        })
        .collect();
    if !query.is_empty() {
        let op = if url.contains('?') { '&' } else { '?' };
        url.push_str(&format!("{{{op}{}}}", query.join(",")));
    }
    let target = format!("{method} {url}");
    HttpTarget::parse(&target).map_err(|e| format!("{}: {}", e.message, e.help))?;
    Ok(target)
}

/// The payload: a header line and a body line, as the arguments' places say.
fn request_lines(args: &[Arg], body: Option<BodyKind>) -> String {
    let item = |wire: &str, name: &str| {
        if wire == name {
            name.to_string()
        } else {
            format!("{wire}={name}")
        }
    };
    let mut lines = Vec::new();
    let headers: Vec<String> = args
        .iter()
        .filter_map(|a| match &a.place {
            Place::Header(w) => Some(item(w, &a.name)),
            _ => None,
        })
        .collect();
    if !headers.is_empty() {
        lines.push(format!("{{header:{}}}", headers.join(",")));
    }
    let fields: Vec<String> = args
        .iter()
        .filter_map(|a| match &a.place {
            Place::Field(w) => Some(item(w, &a.name)),
            Place::Body => Some(a.name.clone()),
            _ => None,
        })
        .collect();
    if let (Some(kind), false) = (body, fields.is_empty()) {
        lines.push(format!("{{{}:{}}}", kind.name(), fields.join(",")));
    }
    lines.join("\n")
}

/// A name a request line can hold as it is (no `,`, `=`, braces or line break).
fn wire_name_fits(name: &str) -> bool {
    !name.is_empty() && !name.contains([',', '=', '{', '}', '\n', '\r'])
}

/// A query or header parameter that carries the credential, by the names APIs give it.
fn is_credential(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "token"
            | "access_token"
            | "auth_token"
            | "api_key"
            | "apikey"
            | "api-key"
            | "x-api-key"
            | "x-auth-token"
    )
}

/// One `input_schema` name per argument. The query's names stay (the URL expression sends
/// the name it reads); a path parameter that shares one becomes `path_NAME` (its slot is by
/// position), a header `header_NAME`, a body field `body_NAME`.
fn unique_names(path: &mut [Arg], named: &mut [Arg]) {
    let mut taken: Vec<String> = named
        .iter()
        .filter(|a| matches!(a.place, Place::Query(..)))
        .map(|a| a.name.clone())
        .collect();
    let fresh = |a: &mut Arg, prefix: &str, taken: &mut Vec<String>| {
        if taken.contains(&a.name) {
            let original = a.name.clone();
            let mut name = format!("{prefix}_{original}");
            let mut n = 2;
            while taken.contains(&name) {
                name = format!("{prefix}_{original}_{n}");
                n += 1;
            }
            a.name = name;
        }
        taken.push(a.name.clone());
    };
    for a in path.iter_mut() {
        fresh(a, "path", &mut taken);
    }
    for a in named.iter_mut() {
        match a.place {
            Place::Query(..) => {}
            Place::Header(_) => fresh(a, "header", &mut taken),
            _ => fresh(a, "body", &mut taken),
        }
    }
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

/// `input_schema`: every argument in positional order, the required ones required; cut to size, and
/// simplified when the validator cannot compile it.
fn input_schema(args: &[Arg], notes: &mut Vec<Note>) -> Json {
    let mut props = Map::new();
    for a in args {
        props.insert(a.name.clone(), a.schema.clone());
    }
    let mut s = json!({"type": "object", "properties": props});
    let required: Vec<String> = args
        .iter()
        .filter(|a| a.required)
        .map(|a| a.name.clone())
        .collect();
    if !required.is_empty() {
        s["required"] = json!(required);
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
    // The leading arguments the document has examples of: every required one, and the
    // optional ones after them up to the first without.
    let k = args.iter().take_while(|a| !a.examples.is_empty()).count();
    if k == 0 || args.iter().skip(k).any(|a| a.required) {
        return Vec::new();
    }
    let all = args.len();
    let args = &args[..k];
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
            // Only the very last argument may contain a pipe: the pieces beyond the schema's
            // properties join into it.
            if (i + 1 < all) && p.contains('|') {
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
