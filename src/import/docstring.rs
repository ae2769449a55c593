//! The docstring of an imported row: WHAT from the summary, WHEN_TO_USE from the description,
//! ARGS naming the arguments in order, EX from the document's example, OUTPUT from the success
//! response; markdown made plain and each line cut to its budget.

use crate::import::operation::Operation;
use crate::import::parts::{Arg, Place};
use crate::import::{schema, text};
use serde_json::Value as Json;

/// Docstring budgets, in characters: a contract stays a few KB, and a planner reads these
/// lines in every candidate it weighs.
pub const WHAT_CHARS: usize = 160;
pub const WHEN_CHARS: usize = 480;
pub const ARGS_CHARS: usize = 400;
pub const OUTPUT_CHARS: usize = 240;
/// `: title (required), body, labels` for an object schema with properties.
pub fn body_fields(schema: &Json) -> String {
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

/// The `#` lines: WHAT, WHEN_TO_USE, ARGS, EX, OUTPUT, each cut to its budget.
pub(super) fn lines(
    title: &str,
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
            title,
            op.label()
        )
    } else {
        description
    };
    if op.deprecated {
        when = format!("Deprecated by the API. {when}");
    }
    let when = text::cut(&when, WHEN_CHARS);
    let args_line = text::cut(&args_line(args), ARGS_CHARS);
    let ex = match example {
        Some(e) => e.clone(),
        None if args.is_empty() => "(no arguments)".to_string(),
        None => "(none in the document)".to_string(),
    };
    let output = output_line(op);
    let output = text::cut(&output, OUTPUT_CHARS);
    vec![
        format!("# WHAT: {what}"),
        format!("# WHEN_TO_USE: {when}"),
        format!("# ARGS: {args_line}"),
        format!("# EX: {ex}"),
        format!("# OUTPUT: {output}"),
    ]
}

/// The ARGS line: the required arguments by position (`a|b`), then the optional ones, which a
/// call sends by name (`args`) or further along in the same order.
fn args_line(args: &[Arg]) -> String {
    let what_of = |a: &Arg| match a.place {
        Place::Body if schema::json_type(&a.schema) == Some("string") => " (text)".to_string(),
        Place::Body => format!(" (JSON{})", body_fields(&a.schema)),
        _ => String::new(),
    };
    let required: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| a.required)
        .map(|(i, a)| format!("${}={}{}", i + 1, a.name, what_of(a)))
        .collect();
    let optional: Vec<String> = args
        .iter()
        .filter(|a| !a.required)
        .map(|a| format!("{}{}", a.name, what_of(a)))
        .collect();
    match (required.is_empty(), optional.is_empty()) {
        (true, true) => "none".to_string(),
        (false, true) => required.join(", "),
        (true, false) => format!("optional, by name: {}", optional.join(", ")),
        (false, false) => format!(
            "{}; optional, by name: {}",
            required.join(", "),
            optional.join(", ")
        ),
    }
}

/// The OUTPUT line: the success response's status, media type and description.
fn output_line(op: &Operation<'_>) -> String {
    match &op.success {
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
    }
}
