//! What a write request's body makes of a row file: `PUT` sends the row (YAML, kept as sent,
//! or JSON, written as YAML), `PATCH` sends some of its fields (YAML or JSON; `null` removes
//! a field) merged into the file as it is at `HEAD`.
//!
//! A body that does not read as the format it claims is refused here with its line and
//! column, before anything else; whether the row it makes is a good row is the gate's to say.

use crate::row::diag::did_you_mean;
use crate::row::{FIELDS, MAX_ROW_BYTES};
use serde_yaml::{Mapping, Value};

/// How a body is written, from the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// `application/json` (or `+json`) is JSON; YAML types, `text/plain` and none are YAML.
    pub fn of_content_type(content_type: Option<&str>) -> Option<Format> {
        let essence = content_type
            .unwrap_or("application/yaml")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => Some(Format::Json),
            e if e.ends_with("+json") => Some(Format::Json),
            "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml"
            | "text/plain" | "" => Some(Format::Yaml),
            _ => None,
        }
    }
}

/// Why a body was refused before the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// It does not read as its format, or is not a mapping; where, when known.
    Malformed {
        message: String,
        line: Option<usize>,
        column: Option<usize>,
    },
    /// A `PATCH` naming fields a row does not have.
    NoRecognizedFields {
        unknown: Vec<String>,
        suggestions: Vec<String>,
    },
    /// A `PATCH` that would change the key (the file name).
    KeyChange { sent: String },
}

impl BodyError {
    fn malformed(message: impl Into<String>) -> BodyError {
        BodyError::Malformed {
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

/// A body read as a mapping of fields, with where a syntax error is.
fn mapping(bytes: &[u8], format: Format) -> Result<Mapping, BodyError> {
    if bytes.len() > MAX_ROW_BYTES {
        return Err(BodyError::malformed(format!(
            "the row is {} bytes; a row file may have {MAX_ROW_BYTES}",
            bytes.len()
        )));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = crate::row::line_col(bytes, e.valid_up_to());
        BodyError::Malformed {
            message: "the body is not UTF-8 text".into(),
            line: Some(line),
            column: Some(column),
        }
    })?;
    let value: Value = match format {
        Format::Yaml => serde_yaml::from_str(text).map_err(|e| {
            let at = e.location();
            BodyError::Malformed {
                message: format!("the body is not YAML: {e}"),
                line: at.as_ref().map(|l| l.line()),
                column: at.as_ref().map(|l| l.column()),
            }
        })?,
        Format::Json => {
            let json: serde_json::Value =
                serde_json::from_str(text).map_err(|e| BodyError::Malformed {
                    message: format!("the body is not JSON: {e}"),
                    line: Some(e.line()),
                    column: Some(e.column()),
                })?;
            serde_yaml::to_value(json).map_err(|e| BodyError::malformed(e.to_string()))?
        }
    };
    match value {
        Value::Mapping(m) => Ok(m),
        Value::Null => Err(BodyError::malformed(
            "the body is empty; send the row's fields",
        )),
        _ => Err(BodyError::malformed(
            "the body is not a mapping of the row's fields",
        )),
    }
}

/// The row file a `PUT` of `bytes` makes for `key`: YAML as sent (its comments kept), with
/// `key: KEY` put first when it says no key; JSON written as YAML in the order sent.
pub fn put(key: &str, bytes: &[u8], format: Format) -> Result<(Vec<u8>, Mapping), BodyError> {
    let mut fields = mapping(bytes, format)?;
    let has_key = fields.contains_key("key");
    let text = match format {
        Format::Yaml if has_key => bytes.to_vec(),
        Format::Yaml => {
            let mut text = format!("key: {key}\n").into_bytes();
            text.extend_from_slice(bytes);
            text
        }
        Format::Json => {
            if !has_key {
                let mut with_key = Mapping::new();
                with_key.insert("key".into(), key.into());
                with_key.extend(fields.clone());
                fields = with_key;
            }
            to_yaml(&fields)?
        }
    };
    if !has_key {
        fields.insert("key".into(), key.into());
    }
    Ok((text, fields))
}

/// The row file a `PATCH` of `bytes` makes of `current` (the file as it is): the fields
/// sent replace those of the file, a `null` removes one, the file's other fields keep their
/// order, and the comment lines at its top stay. Also the names of the fields changed.
pub fn patch(
    key: &str,
    current: &[u8],
    bytes: &[u8],
    format: Format,
) -> Result<(Vec<u8>, Mapping, Vec<String>), BodyError> {
    let changes = mapping(bytes, format)?;
    let mut unknown = Vec::new();
    let mut names = Vec::new();
    for name in changes.keys() {
        let name = name.as_str().unwrap_or("?").to_string();
        if !FIELDS.contains(&name.as_str()) {
            unknown.push(name);
        } else {
            names.push(name);
        }
    }
    if !unknown.is_empty() {
        let suggestions = unknown
            .iter()
            .filter_map(|u| did_you_mean(u, FIELDS.iter().copied()))
            .map(str::to_string)
            .collect();
        return Err(BodyError::NoRecognizedFields {
            unknown,
            suggestions,
        });
    }
    if let Some(sent) = changes.get("key")
        && sent.as_str() != Some(key)
    {
        return Err(BodyError::KeyChange {
            sent: serde_yaml::to_string(sent)
                .unwrap_or_default()
                .trim()
                .to_string(),
        });
    }
    let mut fields = mapping(current, Format::Yaml)?;
    for (name, value) in changes {
        if value.is_null() {
            fields.remove(&name);
        } else {
            fields.insert(name, value);
        }
    }
    let head: String = String::from_utf8_lossy(current)
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut text = head.into_bytes();
    text.extend(to_yaml(&fields)?);
    Ok((text, fields, names))
}

fn to_yaml(fields: &Mapping) -> Result<Vec<u8>, BodyError> {
    serde_yaml::to_string(fields)
        .map(String::into_bytes)
        .map_err(|e| BodyError::malformed(format!("the row cannot be written as YAML: {e}")))
}

/// The `category` and `sensitive` of a mapping of row fields, as far as they read.
pub fn category_and_risk(fields: &Mapping) -> (String, bool) {
    let category = fields
        .get("category")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let sensitive = fields
        .get("sensitive")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    (category, sensitive)
}

/// Whether the row starts a command where the dispatcher runs: an MCP server over stdio.
pub fn runs_command(fields: &Mapping) -> bool {
    fields
        .get("target")
        .and_then(Value::as_str)
        .is_some_and(|t| t.trim_start().starts_with("mcp+stdio:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW: &str = "# yaml-language-server: $schema=../schema/row.schema.json\nkey: ECHO_IT\ntype: fn\ntarget: echo\ncategory: text\ncontent: |\n  # WHAT: Echoes.\n  [\"$1\"]\nasks:\n  - echo my words # a comment\n";

    #[test]
    fn yaml_is_kept_as_sent_and_json_becomes_yaml() {
        let (text, _) = put("ECHO_IT", ROW.as_bytes(), Format::Yaml).expect("put");
        assert_eq!(text, ROW.as_bytes());
        let json =
            r##"{"type": "fn", "target": "echo", "content": "# WHAT: Echoes.\n[\"$1\"]\n"}"##;
        let (text, fields) = put("ECHO_IT", json.as_bytes(), Format::Json).expect("put");
        let text = String::from_utf8(text).expect("utf8");
        assert!(text.starts_with("key: ECHO_IT\ntype: fn\n"), "{text}");
        assert!(text.contains("content: |"), "{text}");
        let parsed = crate::row::parse_row(std::path::Path::new("ECHO_IT.yaml"), text.as_bytes());
        assert!(parsed.diags.is_empty(), "{:?}", parsed.diags);
        assert_eq!(parsed.row.expect("row").payload(), "[\"$1\"]");
        assert_eq!(fields.get("key").and_then(Value::as_str), Some("ECHO_IT"));
    }

    #[test]
    fn bad_bodies_say_where() {
        let e = put("K", b"key: K\ntype: [fn\n", Format::Yaml).expect_err("yaml");
        assert!(
            matches!(
                e,
                BodyError::Malformed {
                    line: Some(_),
                    column: Some(_),
                    ..
                }
            ),
            "{e:?}"
        );
        let e = put("K", b"{\n  \"type\": fn\n}", Format::Json).expect_err("json");
        assert!(
            matches!(
                e,
                BodyError::Malformed {
                    line: Some(2),
                    column: Some(_),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(put("K", b"- a\n- b\n", Format::Yaml).is_err());
    }

    #[test]
    fn patch_merges_fields_and_refuses_unknown_ones() {
        let (text, _, names) = patch(
            "ECHO_IT",
            ROW.as_bytes(),
            br#"{"category": "words", "asks": null}"#,
            Format::Json,
        )
        .expect("patch");
        let text = String::from_utf8(text).expect("utf8");
        assert!(text.starts_with("# yaml-language-server"), "{text}");
        assert!(
            text.contains("category: words") && !text.contains("asks"),
            "{text}"
        );
        assert_eq!(names, ["category", "asks"]);
        let e =
            patch("ECHO_IT", ROW.as_bytes(), b"categroy: x\n", Format::Yaml).expect_err("unknown");
        assert_eq!(
            e,
            BodyError::NoRecognizedFields {
                unknown: vec!["categroy".into()],
                suggestions: vec!["category".into()],
            }
        );
        let e = patch("ECHO_IT", ROW.as_bytes(), b"key: OTHER\n", Format::Yaml).expect_err("key");
        assert!(matches!(e, BodyError::KeyChange { .. }));
    }
}
