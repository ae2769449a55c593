//! Reading an OpenAPI document: JSON or YAML text into one JSON value, which of the three
//! versions it is, and errors that say where (the file, its line and column, or the JSON
//! pointer of the part that is wrong).

use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

/// The versions the importer reads; they differ in where things are (Swagger 2.0 keeps the
/// server in `host`, the body among the parameters) and in their schema dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Swagger2,
    OpenApi30,
    /// 3.1 and later 3.x: schemas are JSON Schema 2020-12.
    OpenApi31,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::Swagger2 => "Swagger 2.0",
            Version::OpenApi30 => "OpenAPI 3.0",
            Version::OpenApi31 => "OpenAPI 3.1",
        }
    }
}

/// A document, parsed and recognised.
#[derive(Debug, Clone)]
pub struct Document {
    pub root: Json,
    pub version: Version,
    /// Where it came from (a path or a URL), for messages and for relative server URLs.
    pub origin: String,
}

/// Why a document cannot be imported at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}{}: {message}", where_(.line_col, .pointer))]
pub struct DocumentError {
    pub origin: String,
    pub line_col: Option<(usize, usize)>,
    /// The JSON pointer of the part at fault, when the text parsed.
    pub pointer: Option<String>,
    pub message: String,
}

fn where_(line_col: &Option<(usize, usize)>, pointer: &Option<String>) -> String {
    match (line_col, pointer) {
        (Some((l, c)), _) => format!(":{l}:{c}"),
        (None, Some(p)) => format!(" at {}", if p.is_empty() { "/" } else { p }),
        (None, None) => String::new(),
    }
}

impl DocumentError {
    pub fn at(origin: &str, pointer: &str, message: impl Into<String>) -> DocumentError {
        DocumentError {
            origin: origin.to_string(),
            line_col: None,
            pointer: Some(pointer.to_string()),
            message: message.into(),
        }
    }
}

/// Parse `text` (JSON when it starts with `{`, else YAML, which also reads JSON) and
/// recognise its version.
pub fn parse(text: &str, origin: &str) -> Result<Document, DocumentError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Json>(text).map_err(|e| DocumentError {
            origin: origin.to_string(),
            line_col: Some((e.line(), e.column())),
            pointer: None,
            message: format!("not valid JSON: {e}"),
        })?
    } else {
        let mut yaml: Yaml = serde_yaml::from_str(text).map_err(|e| {
            let msg = e.to_string();
            DocumentError {
                origin: origin.to_string(),
                line_col: e.location().map(|l| (l.line(), l.column())),
                pointer: None,
                message: format!(
                    "not valid YAML or JSON: {}",
                    msg.split(" at line ").next().unwrap_or(&msg)
                ),
            }
        })?;
        // `<<: *base` merge keys are common in hand-written YAML documents.
        let _ = yaml.apply_merge();
        yaml_to_json(yaml)
    };
    recognise(root, origin)
}

fn recognise(root: Json, origin: &str) -> Result<Document, DocumentError> {
    let Json::Object(map) = &root else {
        return Err(DocumentError::at(
            origin,
            "",
            format!(
                "an OpenAPI document is a mapping with `openapi` (or `swagger`) and `paths`; this is {}",
                kind(&root)
            ),
        ));
    };
    let version = match (map.get("openapi"), map.get("swagger")) {
        (Some(v), _) => {
            let v = version_text(v);
            if v.starts_with("3.0") {
                Version::OpenApi30
            } else if v.starts_with("3.") {
                Version::OpenApi31
            } else {
                return Err(DocumentError::at(
                    origin,
                    "/openapi",
                    format!("OpenAPI version `{v}` is not one the importer reads (3.0, 3.1)"),
                ));
            }
        }
        (None, Some(v)) => {
            let v = version_text(v);
            if v != "2.0" {
                return Err(DocumentError::at(
                    origin,
                    "/swagger",
                    format!("Swagger version `{v}` is not one the importer reads (2.0)"),
                ));
            }
            Version::Swagger2
        }
        (None, None) => {
            return Err(DocumentError::at(
                origin,
                "",
                "not an OpenAPI document: it has no `openapi` or `swagger` field",
            ));
        }
    };
    match map.get("paths") {
        None | Some(Json::Object(_)) => {}
        Some(Json::Null) if version == Version::OpenApi31 => {}
        Some(other) => {
            return Err(DocumentError::at(
                origin,
                "/paths",
                format!("`paths` must be a mapping of paths, found {}", kind(other)),
            ));
        }
    }
    if map.get("paths").is_none() && version != Version::OpenApi31 {
        return Err(DocumentError::at(
            origin,
            "",
            format!("a {} document needs `paths`", version.name()),
        ));
    }
    Ok(Document {
        root,
        version,
        origin: origin.to_string(),
    })
}

fn version_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.trim().to_string(),
        other => other.to_string(),
    }
}

/// What kind of JSON value this is, for messages.
pub fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

/// YAML as JSON: keys become strings (`200:` is a response code), tags are dropped, numbers
/// JSON cannot hold become null.
fn yaml_to_json(v: Yaml) -> Json {
    match v {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Json::Null, Json::Number)
            }
        }
        Yaml::String(s) => Json::String(s),
        Yaml::Sequence(items) => Json::Array(items.into_iter().map(yaml_to_json).collect()),
        Yaml::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = match k {
                    Yaml::String(s) => s,
                    Yaml::Number(n) => n.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    Yaml::Null => "null".to_string(),
                    other => serde_yaml::to_string(&other)
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                };
                out.insert(key, yaml_to_json(v));
            }
            Json::Object(out)
        }
        Yaml::Tagged(t) => yaml_to_json(t.value),
    }
}

/// `~` and `/` escaped for one step of a JSON pointer.
pub fn escape_pointer(part: &str) -> String {
    part.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_errors() {
        let d = parse("openapi: 3.1.0\npaths: {}\n", "a.yaml").expect("3.1");
        assert_eq!(d.version, Version::OpenApi31);
        let d = parse(r#"{"swagger": "2.0", "paths": {}}"#, "a.json").expect("2.0");
        assert_eq!(d.version, Version::Swagger2);
        let d = parse("openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        200: {description: ok}\n", "a.yaml").expect("3.0");
        assert!(d.root["paths"]["/a"]["get"]["responses"]["200"].is_object());

        let e = parse("{\"openapi\": \"3.0.0\",\n \"paths\": [}", "bad.json").unwrap_err();
        assert_eq!(e.line_col, Some((2, 12)));
        assert!(
            e.to_string().starts_with("bad.json:2:12: not valid JSON"),
            "{e}"
        );
        let e = parse("paths: {}\n", "x.yaml").unwrap_err();
        assert!(e.to_string().contains("no `openapi` or `swagger`"), "{e}");
        let e = parse("openapi: 3.0.0\npaths: 3\n", "x.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.yaml at /paths: `paths` must be a mapping of paths, found a number"
        );
        assert!(parse("- a\n- b\n", "x.yaml").is_err());
        assert!(parse("key: [unclosed\n", "x.yaml").is_err());
    }
}
