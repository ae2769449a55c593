//! An operation's arguments: each parameter the row can send (its schema, with the
//! parameter's description on top, and the document's examples of it), and the request body as
//! one JSON (or text) argument. What cannot be sent is a note, or, when the operation requires
//! it, a reason not to import the operation.

use crate::import::docstring;
use crate::import::document::Version;
use crate::import::draft::{ARG_DESCRIPTION_CHARS, Arg, Context, note};
use crate::import::operation::{Body, In, Param};
use crate::import::schema::{self, SchemaReader};
use crate::import::{Note, text};
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
pub(super) fn body_arg(
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
    let fields = docstring::body_fields(&schema);
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

/// A JSON value as one argument piece: text as it is, anything else as JSON.
pub(super) fn piece(v: &Json) -> Option<String> {
    match v {
        Json::Null => None,
        Json::String(s) => Some(s.clone()),
        other => serde_json::to_string(other).ok(),
    }
}
