//! An operation's arguments: each parameter the row can send (its schema, with the
//! parameter's description on top, and the document's examples of it, and where it goes), and
//! the request body's fields, one argument each (JSON, form or multipart), or the body whole as
//! one argument when it has no fields to name. What cannot be sent is a note, or, when the
//! operation requires it, a reason not to import the operation.

use crate::import::docstring;
use crate::import::document::Version;
use crate::import::operation::{Body, In, Param};
use crate::import::parts::{ARG_DESCRIPTION_CHARS, Arg, Context, Place, note};
use crate::import::schema::{self, SchemaReader};
use crate::import::{Note, text};
use crate::row::expand::{BodyKind, Mode};
use crate::row::template::COMPONENT;
use serde_json::{Map, Value as Json, json};

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

/// An argument from a parameter: its schema (the parameter's description on top), and the
/// document's examples of it. Lists are sent as one comma-separated value; objects cannot
/// be sent in one slot.
pub(super) fn param_arg(
    cx: &Context<'_>,
    reader: &mut SchemaReader<'_>,
    p: &Param<'_>,
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> Option<Arg> {
    let raw = raw_schema(cx, p);
    let mut schema = reader.read(&raw);
    let kind = schema::json_type(&schema).map(str::to_string);
    // Only a list, an object or a value of any type has a way to be spread on the wire.
    let mode = if matches!(kind.as_deref(), Some("array" | "object") | None) {
        list_mode(cx, p, notes)
    } else {
        Mode::Plain
    };
    match (kind.as_deref(), p.location) {
        // A path piece is one `$N` slot: a list goes as one comma-separated value.
        (Some("array"), In::Path) => {
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
        (Some("object"), In::Path | In::Header | In::Cookie) => {
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
    schema = with_description(schema, p);
    if p.def.get("deprecated") == Some(&Json::Bool(true))
        && let Json::Object(m) = &mut schema
    {
        m.insert("deprecated".into(), json!(true));
    }
    let place = match p.location {
        In::Path => Place::Path(p.name.clone()),
        In::Query => Place::Query(
            percent_encoding::utf8_percent_encode(&p.name, COMPONENT).to_string(),
            mode,
        ),
        In::Header => Place::Header(p.name.clone()),
        In::Cookie | In::FormData => Place::Field(p.name.clone()),
    };
    Some(Arg {
        name: p.name.clone(),
        schema,
        examples: param_examples(cx, p, &raw),
        place,
        required: p.required,
    })
}

/// A parameter's schema as the document writes it: Swagger 2.0's parameter itself (less
/// what only a parameter has), else its `schema` or its first media type's.
fn raw_schema(cx: &Context<'_>, p: &Param<'_>) -> Json {
    match cx.doc.version {
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
    }
}

/// `schema` described by the parameter's description and the schema's own, joined when both
/// say something different, cut to [`ARG_DESCRIPTION_CHARS`].
fn with_description(schema: Json, p: &Param<'_>) -> Json {
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
    if joined.is_empty() {
        schema
    } else {
        described(schema, &text::cut(&joined, ARG_DESCRIPTION_CHARS))
    }
}

/// Every example the document gives of a parameter, a path piece's list as one
/// comma-separated value.
fn param_examples(cx: &Context<'_>, p: &Param<'_>, raw: &Json) -> Vec<Json> {
    let mut examples = Vec::new();
    examples.extend(p.def.get("example").cloned());
    examples.extend(p.def.get("x-example").cloned());
    examples.extend(named_examples(cx, p.def.get("examples")));
    examples.extend(raw.get("example").cloned());
    if let Some(Json::Array(list)) = raw.get("examples") {
        examples.extend(list.iter().cloned());
    }
    examples
        .into_iter()
        .map(|e| match e {
            // A path piece is one comma-separated value; elsewhere a list stays a list.
            Json::Array(items) if p.location == In::Path => Json::String(
                items
                    .iter()
                    .map(piece)
                    .collect::<Option<Vec<_>>>()
                    .map(|v| v.join(","))
                    .unwrap_or_default(),
            ),
            other => other,
        })
        .collect()
}

/// How a query parameter's list or object goes on the wire (OpenAPI's `style` and
/// `explode`, Swagger 2.0's `collectionFormat`); a delimiter other than the comma is sent as
/// commas, and said.
fn list_mode(cx: &Context<'_>, p: &Param<'_>, notes: &mut Vec<Note>) -> Mode {
    let str_of = |k: &str| p.def.get(k).and_then(Json::as_str);
    let odd = |notes: &mut Vec<Note>, how: &str| {
        notes.push(note(
            "list_format",
            format!(
                "list parameter `{}` is sent comma-separated; the document asks for {how}",
                p.name
            ),
        ))
    };
    match cx.doc.version {
        Version::Swagger2 => match str_of("collectionFormat") {
            Some("multi") => Mode::Explode,
            None | Some("csv") => Mode::Plain,
            Some(other) => {
                odd(notes, other);
                Mode::Plain
            }
        },
        _ => {
            let explode = p.def.get("explode").and_then(Json::as_bool);
            match str_of("style") {
                Some("deepObject") => Mode::Brackets,
                None | Some("form") if p.location == In::Query => {
                    if explode == Some(false) {
                        Mode::Plain
                    } else {
                        Mode::Explode
                    }
                }
                Some(s @ ("spaceDelimited" | "pipeDelimited")) => {
                    odd(notes, s);
                    Mode::Plain
                }
                _ if explode == Some(true) => Mode::Explode,
                _ => Mode::Plain,
            }
        }
    }
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

/// A media type without its parameters, lower-cased.
fn essence(media: &str) -> String {
    media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn is_json_media(media: &str) -> bool {
    let m = essence(media);
    m == "application/json" || m.ends_with("+json") || m.ends_with("/json") || m == "*/*"
}

/// The media types a body can be sent as, best first.
fn media_rank(media: &str) -> Option<(u8, BodyKind)> {
    let m = essence(media);
    if m == "application/json" {
        Some((0, BodyKind::Json))
    } else if is_json_media(&m) {
        Some((1, BodyKind::Json))
    } else if m == "application/x-www-form-urlencoded" {
        Some((2, BodyKind::Form))
    } else if m == "multipart/form-data" {
        Some((3, BodyKind::Multipart))
    } else if m.starts_with("text/plain") {
        Some((4, BodyKind::Whole))
    } else {
        None
    }
}

/// A field that carries a file, which rows do not send.
fn is_file(schema: &Json) -> bool {
    matches!(
        schema.get("format").and_then(Json::as_str),
        Some("binary" | "base64" | "byte")
    ) && schema::json_type(schema) == Some("string")
        || schema.get("type").and_then(Json::as_str) == Some("file")
        || schema.get("contentMediaType").is_some()
}

/// The body's arguments and how it is sent: a field per argument for a JSON object with
/// properties, a form or a multipart form; else the whole body as one argument. What cannot be
/// sent is a note (and a reason not to import, when the operation requires it).
pub(super) fn body_args(
    cx: &Context<'_>,
    reader: &mut SchemaReader<'_>,
    body: &Body<'_>,
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> (Vec<Arg>, Option<BodyKind>) {
    let declared = match body {
        Body::Form {
            required,
            multipart,
            fields,
        } => return form_args(cx, reader, (*required, *multipart), fields, notes, skip),
        Body::Content {
            required,
            description,
            content,
        } => Declared::of_content(cx, *required, description, content),
        Body::Schema {
            required,
            description,
            param,
            consumes,
        } => Declared::of_parameter(*required, description, param, consumes),
    };
    let declared = match declared {
        Ok(d) => d,
        Err(what) => return unsupported(body_required(body), what, notes, skip),
    };
    let Declared {
        required,
        description,
        raw_schema,
        mut examples,
        kind,
    } = declared;
    let schema = reader.read(&raw_schema);
    if let Some(e) = raw_schema.get("example").cloned() {
        examples.push(e);
    }
    let props = schema
        .get("properties")
        .and_then(Json::as_object)
        .filter(|p| !p.is_empty());
    let object = matches!(schema::json_type(&schema), None | Some("object"));
    let composed = ["oneOf", "anyOf", "allOf"]
        .iter()
        .any(|k| schema.get(*k).is_some());
    match (kind, props) {
        (BodyKind::Json | BodyKind::Form | BodyKind::Multipart, Some(props))
            if object && !composed =>
        {
            let example = examples.first().and_then(Json::as_object);
            let args = field_args(&schema, props, (required, kind), example, notes, skip);
            (args, Some(kind))
        }
        (BodyKind::Form | BodyKind::Multipart, _) => {
            if props.is_none() && object && !composed {
                // A form that declares no fields: nothing to send, nothing lost.
                return (Vec::new(), None);
            }
            unsupported(
                required,
                "as a form whose fields are not named (a composed schema) cannot be sent field by field".into(),
                notes,
                skip,
            )
        }
        _ => whole_body(kind, schema, required, &description, examples).map_or_else(
            |what| unsupported(required, what, notes, skip),
            |a| (vec![a], Some(BodyKind::Whole)),
        ),
    }
}

/// A body of a kind rows cannot send: a reason not to import when it is required, else a
/// note (and the row sends no body).
fn unsupported(
    required: bool,
    what: String,
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> (Vec<Arg>, Option<BodyKind>) {
    if required {
        skip.push(note("body_media", format!("required request body {what}")));
    } else {
        notes.push(note(
            "body_media",
            format!("optional request body {what}; the row sends none"),
        ));
    }
    (Vec::new(), None)
}

/// A body as the document declares it (OpenAPI 3's `requestBody` in the media type rows send
/// best, or Swagger 2.0's `in: body` parameter), before its schema is read.
struct Declared {
    required: bool,
    description: String,
    raw_schema: Json,
    examples: Vec<Json>,
    kind: BodyKind,
}

impl Declared {
    /// OpenAPI 3's `requestBody` in the media type rows send best, or why none can be sent.
    fn of_content(
        cx: &Context<'_>,
        required: bool,
        description: &str,
        content: &Map<String, Json>,
    ) -> Result<Declared, String> {
        let best = content
            .keys()
            .filter_map(|m| media_rank(m).map(|(r, k)| (r, k, m)))
            .min_by_key(|(r, _, _)| *r);
        let Some((_, kind, media)) = best else {
            let kinds: Vec<&str> = content.keys().map(String::as_str).collect();
            let kinds = if kinds.is_empty() {
                "nothing".to_string()
            } else {
                kinds.join(", ")
            };
            return Err(format!(
                "as {kinds} cannot be sent: rows send JSON, form, multipart or text bodies"
            ));
        };
        let m = &content[media.as_str()];
        let mut examples: Vec<Json> = m.get("example").cloned().into_iter().collect();
        examples.extend(named_examples(cx, m.get("examples")));
        Ok(Declared {
            required,
            description: description.to_string(),
            raw_schema: m.get("schema").cloned().unwrap_or_else(|| json!({})),
            examples,
            kind,
        })
    }

    /// Swagger 2.0's `in: body` parameter, sent as JSON, or why it cannot be.
    fn of_parameter(
        required: bool,
        description: &str,
        param: &Map<String, Json>,
        consumes: &[String],
    ) -> Result<Declared, String> {
        if !consumes.is_empty() && !consumes.iter().any(|c| is_json_media(c)) {
            return Err(format!(
                "as {} cannot be sent: a Swagger 2.0 body parameter is sent as JSON",
                consumes.join(", ")
            ));
        }
        let mut examples: Vec<Json> = Vec::new();
        if let Some(Json::Object(x)) = param.get("x-examples") {
            examples.extend(x.values().cloned());
        }
        Ok(Declared {
            required,
            description: description.to_string(),
            raw_schema: param.get("schema").cloned().unwrap_or_else(|| json!({})),
            examples,
            kind: BodyKind::Json,
        })
    }
}

/// Whether the operation requires its body.
fn body_required(body: &Body<'_>) -> bool {
    match body {
        Body::Content { required, .. }
        | Body::Schema { required, .. }
        | Body::Form { required, .. } => *required,
    }
}

/// Swagger 2.0's `in: formData` parameters as the fields of a form (or multipart) body; a
/// file is not sent.
fn form_args(
    cx: &Context<'_>,
    reader: &mut SchemaReader<'_>,
    (required, multipart): (bool, bool),
    fields: &[Param<'_>],
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> (Vec<Arg>, Option<BodyKind>) {
    let mut args = Vec::new();
    for f in fields {
        let mut f = f.clone();
        if !required {
            f.required = false;
        }
        let file = f.def.get("type").and_then(Json::as_str) == Some("file");
        if file {
            file_note(&f.name, f.required, notes, skip);
            continue;
        }
        if let Some(mut a) = param_arg(cx, reader, &f, notes, skip) {
            a.place = Place::Field(f.name.clone());
            args.push(a);
        }
    }
    let kind = if multipart {
        BodyKind::Multipart
    } else {
        BodyKind::Form
    };
    (args, Some(kind))
}

/// An argument per property of an object body (a file field of a form is not sent); its
/// example from the body's first.
fn field_args(
    schema: &Json,
    props: &Map<String, Json>,
    (required, kind): (bool, BodyKind),
    example: Option<&Map<String, Json>>,
    notes: &mut Vec<Note>,
    skip: &mut Vec<Note>,
) -> Vec<Arg> {
    let required_fields: Vec<&str> = schema
        .get("required")
        .and_then(Json::as_array)
        .map(|r| r.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let mut args = Vec::new();
    for (name, field) in props {
        let field_required = required && required_fields.contains(&name.as_str());
        if kind != BodyKind::Json && is_file(field) {
            file_note(name, field_required, notes, skip);
            continue;
        }
        let described_field = match field.get("description").and_then(Json::as_str) {
            Some(d) => described(
                field.clone(),
                &text::cut(&text::plain(d), ARG_DESCRIPTION_CHARS),
            ),
            None => field.clone(),
        };
        args.push(Arg {
            name: name.clone(),
            schema: described_field,
            examples: example
                .and_then(|e| e.get(name))
                .cloned()
                .into_iter()
                .collect(),
            place: Place::Field(name.clone()),
            required: field_required,
        });
    }
    args
}

fn file_note(name: &str, required: bool, notes: &mut Vec<Note>, skip: &mut Vec<Note>) {
    let n = note(
        "file_field",
        format!("form field `{name}` is a file, which rows do not send"),
    );
    if required {
        skip.push(n);
    } else {
        notes.push(n);
    }
}

/// The body as one argument: a JSON document with no fields to name (a list, a composed
/// schema, any value) or text.
fn whole_body(
    kind: BodyKind,
    mut schema: Json,
    required: bool,
    description: &str,
    examples: Vec<Json>,
) -> Result<Arg, String> {
    let text_body = kind == BodyKind::Whole;
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
                return Err(format!(
                    "is a JSON {other}, which the row cannot encode from an argument"
                ));
            }
        }
        if let Json::Object(m) = &mut schema
            && m.get("type").and_then(Json::as_str).is_none()
            && let Some(t) = schema::json_type(&Json::Object(m.clone())).map(str::to_string)
        {
            m.insert("type".into(), json!(t));
        }
    }
    let fields = docstring::body_fields(&schema);
    let mut d = if text_body {
        "The request body, as text".to_string()
    } else {
        format!("The request body as JSON{fields}")
    };
    let description = text::plain(description);
    if !description.is_empty() {
        d = format!("{d}. {description}");
    }
    let schema = described(schema, &text::cut(&d, ARG_DESCRIPTION_CHARS));
    Ok(Arg {
        name: "body".to_string(),
        schema,
        examples,
        place: Place::Body,
        required,
    })
}

/// A JSON value as one argument piece: text as it is, anything else as JSON.
pub(super) fn piece(v: &Json) -> Option<String> {
    match v {
        Json::Null => None,
        Json::String(s) => Some(s.clone()),
        other => serde_json::to_string(other).ok(),
    }
}
