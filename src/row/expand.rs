//! Named arguments in `http` rows (DESIGN.md §2, "Named arguments"): what a positional `$N`
//! cannot say — a query parameter or path piece sent only when given, a body built field by
//! field from the arguments that are present, a header from an argument.
//!
//! - In the target, RFC 6570 expressions of three operators: `{?a,b}` (form-style query,
//!   `?a=1&b=2` with the absent left out), `{&a,b}` (continues a query) and `{/a}` (a path
//!   piece). A name may end in `*` (explode, RFC 6570) or in `[]`, capdir's one addition: the
//!   bracket convention (`expand[]=x`, `created[gte]=5`; OpenAPI's `deepObject`, Stripe's).
//! - In the payload, request lines instead of a body template, one per line: `{json:a,b}`,
//!   `{form:a,b}`, `{multipart:a,b}` or `{body:a}` for the body (at most one), and
//!   `{header:Name=a}` for headers. An item `wire=name` sends argument `name` as `wire`.
//!
//! The values are the row's arguments by name (its `input_schema`'s properties; positional
//! pieces put on them in order). Every value is encoded for where it lands — percent-encoded in
//! a URL, form-encoded, a JSON value, a multipart part, a header value that may hold no control
//! character — so an argument never leaves its slot. Caller-chosen object keys are the one
//! place a bracket could move a value (`a]&[b`); a key with `[` or `]` is refused.
//!
//! Old rows never meet any of this: a target has no `{?`, `{&` or `{/`, and a payload is
//! request lines only when every line of it is one.

use crate::row::template::COMPONENT;
use percent_encoding::{percent_decode_str, utf8_percent_encode};
use serde_json::{Map, Value as Json};

/// How a name in an expression is expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// RFC 6570 without explode: a list `a,b`, an object `k1,v1,k2,v2`.
    Plain,
    /// RFC 6570 `*`: a list repeats the name, an object's members become parameters.
    Explode,
    /// `[]`: the bracket convention, `name[]=a`, `name[k]=v`, nested as deep as the value.
    Brackets,
}

/// One name of an expression: the argument it reads and the name it is sent under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// As sent: a query or form field name, a header name. In a URL, as written (encoded).
    pub wire: String,
    /// The argument (an `input_schema` property).
    pub arg: String,
    pub mode: Mode,
}

/// A URL expression's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Query,
    QueryMore,
    Path,
}

/// A target's URL, cut into literal text and expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<'u> {
    Text(&'u str),
    Expr(Op, Vec<Item>),
}

/// How the body is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Json,
    Form,
    Multipart,
    /// One argument is the whole body: JSON when it is an object or list, else text.
    Whole,
}

impl BodyKind {
    pub fn name(self) -> &'static str {
        match self {
            BodyKind::Json => "json",
            BodyKind::Form => "form",
            BodyKind::Multipart => "multipart",
            BodyKind::Whole => "body",
        }
    }
}

/// A payload of request lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    pub headers: Vec<Item>,
    pub body: Option<(BodyKind, Vec<Item>)>,
}

/// A request's body as built: its content type and bytes (text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub content_type: String,
    pub text: String,
}

/// Whether `url` holds an expression (so old targets are read exactly as before).
pub fn has_url_expressions(url: &str) -> bool {
    url.contains("{?") || url.contains("{&") || url.contains("{/")
}

/// Cut `url` into text and expressions; an expression that does not parse is an error.
pub fn url_parts(url: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = url;
    while let Some(open) = find_expression(rest) {
        if open > 0 {
            parts.push(Part::Text(&rest[..open]));
        }
        let Some(len) = rest[open..].find('}') else {
            return Err(format!("`{}` is not closed with `}}`", &rest[open..]));
        };
        let inner = &rest[open + 1..open + len];
        let op = match inner.as_bytes().first() {
            Some(b'?') => Op::Query,
            Some(b'&') => Op::QueryMore,
            _ => Op::Path,
        };
        let mut items = Vec::new();
        for spec in inner[1..].split(',') {
            items.push(url_item(spec).map_err(|e| format!("in `{{{inner}}}`: {e}"))?);
        }
        parts.push(Part::Expr(op, items));
        rest = &rest[open + len + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    Ok(parts)
}

fn find_expression(s: &str) -> Option<usize> {
    ["{?", "{&", "{/"].iter().filter_map(|p| s.find(p)).min()
}

/// `name`, `name*` or `name[]`; the name RFC 6570's varname (letters, digits, `_`, `.`,
/// percent-encoded bytes) or `-`.
fn url_item(spec: &str) -> Result<Item, String> {
    let (name, mode) = if let Some(n) = spec.strip_suffix("[]") {
        (n, Mode::Brackets)
    } else if let Some(n) = spec.strip_suffix('*') {
        (n, Mode::Explode)
    } else {
        (spec, Mode::Plain)
    };
    if name.is_empty() {
        return Err("an empty name".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '~' | '%')))
    {
        return Err(format!(
            "`{name}` holds `{c}`: a name is letters, digits, `_`, `.`, `-`, `~` or percent-encoded bytes (`{}` and `*` or `[]` after it are the only modifiers)",
            if c == ':' {
                "`:N` is not supported;"
            } else {
                ""
            }
        ));
    }
    let arg = percent_decode_str(name)
        .decode_utf8()
        .map_err(|_| format!("`{name}` is not UTF-8 once decoded"))?
        .to_string();
    Ok(Item {
        wire: name.to_string(),
        arg,
        mode,
    })
}

const BODY_OPS: [(&str, BodyKind); 4] = [
    ("json", BodyKind::Json),
    ("form", BodyKind::Form),
    ("multipart", BodyKind::Multipart),
    ("body", BodyKind::Whole),
];

/// The payload as request lines: `None` when it is a body template (any line that is not a
/// `{op:…}` line), else the lines or what is wrong with them.
pub fn lines(payload: &str) -> Option<Result<Lines, String>> {
    let mut any = false;
    for line in payload.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let op = line
            .strip_prefix('{')
            .and_then(|l| l.split_once(':'))
            .map(|(op, _)| op);
        let known = op.is_some_and(|op| op == "header" || BODY_OPS.iter().any(|(n, _)| *n == op));
        if !known || !line.ends_with('}') {
            return None;
        }
        any = true;
    }
    any.then(|| parse_lines(payload))
}

fn parse_lines(payload: &str) -> Result<Lines, String> {
    let mut out = Lines::default();
    for line in payload.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let inner = &line[1..line.len() - 1];
        let (op, list) = inner.split_once(':').unwrap_or((inner, ""));
        let mut items = Vec::new();
        for spec in list.split(',').map(str::trim) {
            if spec.is_empty() {
                return Err(format!("`{line}` has an empty item"));
            }
            let (wire, arg) = spec.split_once('=').unwrap_or((spec, spec));
            let (wire, arg) = (wire.trim(), arg.trim());
            if wire.is_empty() || arg.is_empty() || wire.contains(['{', '}']) {
                return Err(format!("`{spec}` in `{line}` is not `name` or `wire=name`"));
            }
            items.push(Item {
                wire: wire.to_string(),
                arg: arg.to_string(),
                mode: Mode::Brackets,
            });
        }
        if op == "header" {
            for i in &items {
                header_name_problem(&i.wire)?;
            }
            out.headers.extend(items);
            continue;
        }
        let kind = BODY_OPS
            .iter()
            .find(|(n, _)| *n == op)
            .map(|(_, k)| *k)
            .ok_or_else(|| format!("`{op}` is not json, form, multipart, body or header"))?;
        if let Some((before, _)) = &out.body {
            return Err(format!(
                "two body lines (`{}` and `{op}`): a request has one body",
                before.name()
            ));
        }
        if kind == BodyKind::Whole && items.len() != 1 {
            return Err(format!(
                "`{line}`: `body` takes one argument, the whole body"
            ));
        }
        out.body = Some((kind, items));
    }
    Ok(out)
}

/// Headers an argument may not set: the body's framing and type are the request's own, the
/// credential is `auth`'s.
const RESERVED_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "content-type",
    "authorization",
    "cookie",
];

/// Why `name` cannot be a header an argument sets, if it cannot.
pub fn header_name_problem(name: &str) -> Result<(), String> {
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!("`{name}` is not a header name"));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "header `{name}` cannot come from an argument (the request sets it; a credential goes in `auth`)"
        ));
    }
    Ok(())
}

/// What is wrong with a row's expressions and request lines, each as (message, help):
/// syntax, and names its `input_schema` does not declare.
pub fn problems(url: &str, payload: &str, schema: Option<&Json>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut used: Vec<String> = Vec::new();
    if has_url_expressions(url) {
        match url_parts(url) {
            Ok(parts) => {
                for p in parts {
                    if let Part::Expr(_, items) = p {
                        used.extend(items.into_iter().map(|i| i.arg));
                    }
                }
            }
            Err(e) => out.push((
                format!("the target's expression {e}"),
                "write `{?name,other}`, `{&name}` or `{/name}`; `name*` explodes, `name[]` sends brackets".into(),
            )),
        }
    }
    if let Some(parsed) = lines(payload) {
        match parsed {
            Ok(l) => {
                used.extend(l.headers.into_iter().map(|i| i.arg));
                if let Some((_, items)) = l.body {
                    used.extend(items.into_iter().map(|i| i.arg));
                }
            }
            Err(e) => out.push((
                format!("request lines: {e}"),
                "one per line: `{json:a,b}`, `{form:a,b}`, `{multipart:a}`, `{body:a}`, `{header:X-Name=a}`".into(),
            )),
        }
    }
    if used.is_empty() {
        return out;
    }
    let props: Vec<&str> = schema
        .map(crate::row::args::properties)
        .unwrap_or_default()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for name in used {
        if !props.contains(&name.as_str()) {
            out.push((
                format!(
                    "`{name}` is named in the template but `input_schema` declares no such argument"
                ),
                if props.is_empty() {
                    "declare the arguments under `input_schema.properties`".to_string()
                } else if let Some(s) = crate::row::diag::did_you_mean(&name, props.iter().copied())
                {
                    format!("did you mean `{s}`?")
                } else {
                    format!("declare it, or use one of {}", props.join(", "))
                },
            ));
        }
    }
    out
}

/// A value's `[key]` path flattened to `(name, text)` pairs by the bracket convention: a list
/// of scalars as `name[]`, of anything else as `name[0]`, an object's members as `name[key]`.
/// `null` is an empty value. A key holding `[` or `]` is refused: it could move the value.
pub fn flatten(name: &str, value: &Json, out: &mut Vec<(String, String)>) -> Result<(), String> {
    match value {
        Json::Array(items) => {
            let scalars = items.iter().all(|v| !v.is_array() && !v.is_object());
            for (i, v) in items.iter().enumerate() {
                let key = if scalars {
                    format!("{name}[]")
                } else {
                    format!("{name}[{i}]")
                };
                flatten(&key, v, out)?;
            }
        }
        Json::Object(members) => {
            for (k, v) in members {
                if k.contains(['[', ']']) {
                    return Err(format!(
                        "{name}: the key `{k}` holds a bracket, which the bracket convention cannot send"
                    ));
                }
                flatten(&format!("{name}[{k}]"), v, out)?;
            }
        }
        scalar => out.push((name.to_string(), scalar_text(scalar))),
    }
    Ok(())
}

/// A scalar as text: a string as it is, `null` empty, anything else its JSON.
fn scalar_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        other => other.to_string(),
    }
}

fn present<'a>(args: &'a Map<String, Json>, item: &Item) -> Option<&'a Json> {
    args.get(&item.arg).filter(|v| {
        !v.is_null()
            && !matches!(v, Json::Array(a) if a.is_empty())
            && !matches!(v, Json::Object(o) if o.is_empty())
    })
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// The URL with its expressions expanded from `args` (positional `$N` already rendered).
pub fn expand_url(url: &str, args: &Map<String, Json>) -> Result<String, String> {
    if !has_url_expressions(url) {
        return Ok(url.to_string());
    }
    let mut out = String::with_capacity(url.len() + 32);
    for part in url_parts(url)? {
        let (op, items) = match part {
            Part::Text(t) => {
                out.push_str(t);
                continue;
            }
            Part::Expr(op, items) => (op, items),
        };
        let mut first = true;
        for item in &items {
            let Some(value) = present(args, item) else {
                continue;
            };
            if op == Op::Path {
                out.push('/');
                out.push_str(&path_value(value, item.mode));
                continue;
            }
            for (k, v) in query_pairs(item, value)? {
                out.push(if op == Op::Query && first { '?' } else { '&' });
                first = false;
                out.push_str(&k);
                out.push('=');
                out.push_str(&v);
            }
        }
    }
    Ok(out)
}

fn path_value(value: &Json, mode: Mode) -> String {
    let sep = if mode == Mode::Explode { "/" } else { "," };
    match value {
        Json::Array(items) => items
            .iter()
            .map(|v| enc(&scalar_text(v)))
            .collect::<Vec<_>>()
            .join(sep),
        Json::Object(m) => m
            .iter()
            .map(|(k, v)| match mode {
                Mode::Explode => format!("{}={}", enc(k), enc(&scalar_text(v))),
                _ => format!("{},{}", enc(k), enc(&scalar_text(v))),
            })
            .collect::<Vec<_>>()
            .join(sep),
        scalar => enc(&scalar_text(scalar)),
    }
}

/// The encoded `(key, value)` pairs one item adds to a query.
fn query_pairs(item: &Item, value: &Json) -> Result<Vec<(String, String)>, String> {
    let scalar = |v: &Json| enc(&scalar_text(v));
    Ok(match (item.mode, value) {
        (Mode::Brackets, _) => {
            let mut flat = Vec::new();
            flatten(&item.arg, value, &mut flat)?;
            flat.into_iter()
                .map(|(k, v)| {
                    // The name as written (already encoded), its brackets encoded after it.
                    let key = format!("{}{}", item.wire, enc(&k[item.arg.len()..]));
                    (key, enc(&v))
                })
                .collect()
        }
        (Mode::Explode, Json::Array(items)) => items
            .iter()
            .map(|v| (item.wire.clone(), scalar(v)))
            .collect(),
        (Mode::Explode, Json::Object(m)) => m.iter().map(|(k, v)| (enc(k), scalar(v))).collect(),
        (Mode::Plain, Json::Array(items)) => vec![(
            item.wire.clone(),
            items.iter().map(scalar).collect::<Vec<_>>().join(","),
        )],
        (Mode::Plain, Json::Object(m)) => vec![(
            item.wire.clone(),
            m.iter()
                .map(|(k, v)| format!("{},{}", enc(k), scalar(v)))
                .collect::<Vec<_>>()
                .join(","),
        )],
        (_, v) => vec![(item.wire.clone(), scalar(v))],
    })
}

/// The headers request lines set, from `args`: a value with a control character (a line
/// break that would start another header) is refused.
pub fn headers(lines: &Lines, args: &Map<String, Json>) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for item in &lines.headers {
        let Some(value) = present(args, item) else {
            continue;
        };
        let text = match value {
            Json::Array(items) => items.iter().map(scalar_text).collect::<Vec<_>>().join(","),
            other => scalar_text(other),
        };
        if text.chars().any(|c| c.is_control()) {
            return Err(format!(
                "{}: a header value cannot hold a control character (a line break would start another header)",
                item.arg
            ));
        }
        out.push((item.wire.clone(), text));
    }
    Ok(out)
}

/// The body request lines build from `args`; none when no field of it is present.
pub fn body(lines: &Lines, args: &Map<String, Json>) -> Result<Option<Body>, String> {
    let Some((kind, items)) = &lines.body else {
        return Ok(None);
    };
    let fields: Vec<(&Item, &Json)> = items
        .iter()
        .filter_map(|i| present(args, i).map(|v| (i, v)))
        .collect();
    if fields.is_empty() {
        return Ok(None);
    }
    let body = match kind {
        BodyKind::Whole => {
            let value = fields[0].1;
            match value {
                Json::String(s) => Body {
                    content_type: if is_json_document(s) {
                        "application/json".into()
                    } else {
                        "text/plain; charset=utf-8".into()
                    },
                    text: s.clone(),
                },
                other => Body {
                    content_type: "application/json".into(),
                    text: other.to_string(),
                },
            }
        }
        BodyKind::Json => {
            let obj: Map<String, Json> = fields
                .iter()
                .map(|(i, v)| (i.wire.clone(), (*v).clone()))
                .collect();
            Body {
                content_type: "application/json".into(),
                text: Json::Object(obj).to_string(),
            }
        }
        BodyKind::Form => {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in flat_fields(&fields)? {
                form.append_pair(&k, &v);
            }
            Body {
                content_type: "application/x-www-form-urlencoded".into(),
                text: form.finish(),
            }
        }
        BodyKind::Multipart => multipart(&flat_fields(&fields)?),
    };
    Ok(Some(body))
}

fn flat_fields(fields: &[(&Item, &Json)]) -> Result<Vec<(String, String)>, String> {
    let mut flat = Vec::new();
    for (item, value) in fields {
        flatten(&item.wire, value, &mut flat)?;
    }
    Ok(flat)
}

/// `multipart/form-data` of text fields, with a boundary no value holds. A name is quoted,
/// its `"`, CR and LF percent-encoded as the HTML standard does.
fn multipart(fields: &[(String, String)]) -> Body {
    let boundary = loop {
        let b = format!("capdir-{}", uuid::Uuid::new_v4().simple());
        if !fields.iter().any(|(k, v)| k.contains(&b) || v.contains(&b)) {
            break b;
        }
    };
    let mut text = String::new();
    for (name, value) in fields {
        let name = name
            .replace('"', "%22")
            .replace('\r', "%0D")
            .replace('\n', "%0A");
        text.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    text.push_str(&format!("--{boundary}--\r\n"));
    Body {
        content_type: format!("multipart/form-data; boundary={boundary}"),
        text,
    }
}

fn is_json_document(body: &str) -> bool {
    let t = body.trim_start();
    (t.starts_with('{') || t.starts_with('['))
        && serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Json) -> Map<String, Json> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn query_path_and_brackets() {
        let url = "https://a.example/v1/items{/id}{?limit,starting_after,expand[],tag*}";
        let a = args(json!({"limit": 3, "expand": ["customer", "x y"], "tag": ["a", "b&c"]}));
        assert_eq!(
            expand_url(url, &a).unwrap(),
            "https://a.example/v1/items?limit=3&expand%5B%5D=customer&expand%5B%5D=x%20y&tag=a&tag=b%26c"
        );
        let a = args(json!({"id": "a/b", "starting_after": "c_1"}));
        assert_eq!(
            expand_url(url, &a).unwrap(),
            "https://a.example/v1/items/a%2Fb?starting_after=c_1"
        );
        assert_eq!(
            expand_url(
                "https://a.example/x?fixed=1{&created[]}",
                &args(json!({"created": {"gte": 5}}))
            )
            .unwrap(),
            "https://a.example/x?fixed=1&created%5Bgte%5D=5"
        );
        assert_eq!(
            expand_url(url, &Map::new()).unwrap(),
            "https://a.example/v1/items"
        );
        assert!(url_parts("https://a.example/{?a:3}").is_err());
        assert!(url_parts("https://a.example/{?a").is_err());
        // Old targets: braces that open no expression stay text.
        assert!(!has_url_expressions("https://a.example/{x}"));
    }

    #[test]
    fn request_lines() {
        assert_eq!(lines(r#"{"a": "$1"}"#), None);
        assert_eq!(lines("$1+"), None);
        assert_eq!(lines("{form:a}\ntext"), None);
        let l = lines("{header:Idempotency-Key=key}\n{form:name,expand=body_expand}")
            .unwrap()
            .unwrap();
        assert_eq!(l.headers[0].wire, "Idempotency-Key");
        let a =
            args(json!({"key": "k1", "name": "A&B=c", "body_expand": ["x"], "metadata": {"n": 1}}));
        let b = body(&l, &a).unwrap().unwrap();
        assert_eq!(b.content_type, "application/x-www-form-urlencoded");
        assert_eq!(b.text, "name=A%26B%3Dc&expand%5B%5D=x");
        assert_eq!(
            headers(&l, &a).unwrap(),
            vec![("Idempotency-Key".into(), "k1".into())]
        );
        assert!(lines("{form:a}\n{json:b}").unwrap().is_err());
        assert!(lines("{header:Authorization=a}").unwrap().is_err());
        assert!(lines("{body:a,b}").unwrap().is_err());
    }

    #[test]
    fn nothing_escapes_its_slot() {
        let l = lines("{header:X-A=a}\n{form:f}").unwrap().unwrap();
        assert!(headers(&l, &args(json!({"a": "v\r\nX-Evil: 1"}))).is_err());
        assert!(body(&l, &args(json!({"f": {"a]&x=1&[b": 1}}))).is_err());
        let b = body(&l, &args(json!({"f": "1&admin=true"})))
            .unwrap()
            .unwrap();
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(b.text.as_bytes())
            .into_owned()
            .collect();
        assert_eq!(pairs, vec![("f".to_string(), "1&admin=true".to_string())]);
        let j = lines("{json:f}").unwrap().unwrap();
        let b = body(&j, &args(json!({"f": "\",\"admin\":true,\"x\":\""})))
            .unwrap()
            .unwrap();
        let v: Json = serde_json::from_str(&b.text).unwrap();
        assert_eq!(v.as_object().map(Map::len), Some(1));
        let u = expand_url(
            "https://a.example/x{?q}",
            &args(json!({"q": "1&admin=true#x"})),
        )
        .unwrap();
        assert_eq!(u, "https://a.example/x?q=1%26admin%3Dtrue%23x");
    }

    #[test]
    fn problems_name_undeclared_arguments() {
        let schema = json!({"type": "object", "properties": {"a": {}}});
        assert!(problems("https://x.example/{?a}", "{form:a}", Some(&schema)).is_empty());
        let p = problems("https://x.example/{?a,b}", "{json:c=a}", Some(&schema));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].0.contains("`b`"));
    }
}
