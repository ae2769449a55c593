//! References and schemas: `$ref`s followed within the document, and an OpenAPI schema
//! turned into the self-contained JSON Schema (2020-12, what `input_schema` is checked
//! against) a row can carry.
//!
//! A row has no document around it, so every `$ref` is resolved in place. Recursion is cut
//! where a schema would contain itself, and the whole expansion has a depth and a size bound,
//! so no document (however cyclic or deep) makes the importer loop or overflow its stack.
//! OpenAPI's own dialect is translated: 3.0's `nullable`, the boolean `exclusiveMinimum` of
//! 2.0 and 3.0, Swagger's `type: file`; keywords JSON Schema does not know and that only
//! document (`discriminator`, `xml`, `example`, `x-…`) are left out.

use crate::import::text;
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeSet;

/// `$ref`s are followed through at most this many hops (a chain longer is a cycle).
const MAX_HOPS: usize = 32;
/// Schemas nest at most this deep in a row; deeper parts accept any value.
pub const MAX_DEPTH: usize = 16;
/// Schema nodes one expansion may produce: beyond, parts accept any value.
const MAX_NODES: usize = 4_000;
/// Characters of a nested `description` kept.
pub const DESCRIPTION_CHARS: usize = 200;

/// Follows local `$ref`s (`#/components/…`, `#/definitions/…`) in one document.
#[derive(Clone, Copy)]
pub struct Refs<'d> {
    root: &'d Json,
}

impl<'d> Refs<'d> {
    pub fn new(root: &'d Json) -> Refs<'d> {
        Refs { root }
    }

    /// The value a reference names, when it is a pointer into this document.
    pub fn lookup(&self, reference: &str) -> Option<&'d Json> {
        let fragment = reference.strip_prefix('#')?;
        let decoded = percent_encoding::percent_decode_str(fragment).decode_utf8_lossy();
        self.root.pointer(&decoded)
    }

    /// `v`, or what its `$ref` chain ends at. Errors say why a chain could not be followed.
    pub fn follow(&self, mut v: &'d Json) -> Result<&'d Json, String> {
        for _ in 0..MAX_HOPS {
            let Some(reference) = v.get("$ref") else {
                return Ok(v);
            };
            let Some(reference) = reference.as_str() else {
                return Err("`$ref` is not a string".into());
            };
            v = self
                .lookup(reference)
                .ok_or_else(|| unresolved(reference))?;
        }
        Err(format!(
            "`$ref` chain longer than {MAX_HOPS} hops (a cycle?)"
        ))
    }
}

fn unresolved(reference: &str) -> String {
    if reference.starts_with('#') {
        format!("`$ref` `{reference}` points at nothing in the document")
    } else {
        format!(
            "`$ref` `{reference}` is outside the document; only references within it are followed"
        )
    }
}

/// Turns OpenAPI schemas into self-contained JSON Schema, noting what it had to change.
pub struct SchemaReader<'d> {
    refs: Refs<'d>,
    nodes: usize,
    /// What was cut or could not be kept, each once.
    pub notes: BTreeSet<String>,
}

const JSON_TYPES: [&str; 7] = [
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// Keywords that only document or belong to OpenAPI, not to JSON Schema.
fn dropped(keyword: &str) -> bool {
    keyword.starts_with("x-")
        || matches!(
            keyword,
            "discriminator"
                | "xml"
                | "externalDocs"
                | "example"
                | "$schema"
                | "$id"
                | "$anchor"
                | "$dynamicAnchor"
                | "$dynamicRef"
                | "$defs"
                | "definitions"
                | "$comment"
                | "$vocabulary"
                | "additionalItems"
                | "collectionFormat"
                | "in"
                | "name"
        )
}

impl<'d> SchemaReader<'d> {
    pub fn new(refs: Refs<'d>) -> SchemaReader<'d> {
        SchemaReader {
            refs,
            nodes: 0,
            notes: BTreeSet::new(),
        }
    }

    /// `schema` as self-contained JSON Schema. Each call has its own size budget.
    pub fn read(&mut self, schema: &Json) -> Json {
        self.nodes = 0;
        self.convert(schema, &mut Vec::new(), 0)
    }

    fn convert(&mut self, s: &Json, stack: &mut Vec<String>, depth: usize) -> Json {
        let m = match s {
            Json::Bool(b) => return Json::Bool(*b),
            Json::Object(m) => m,
            _ => return json!({}),
        };
        if depth > MAX_DEPTH {
            self.notes.insert(format!(
                "schema nested deeper than {MAX_DEPTH} levels: the deeper parts accept any value"
            ));
            return json!({});
        }
        if self.nodes >= MAX_NODES {
            self.notes.insert(format!(
                "schema larger than {MAX_NODES} nodes: the rest accepts any value"
            ));
            return json!({});
        }
        self.nodes += 1;
        if let Some(r) = m.get("$ref") {
            let Some(r) = r.as_str() else {
                self.notes
                    .insert("a `$ref` that is not a string is left out".into());
                return json!({});
            };
            if stack.iter().any(|seen| seen == r) {
                self.notes.insert(format!(
                    "recursive schema `{r}` is cut where it repeats (any value is accepted there)"
                ));
                return self.siblings(m, stack, depth, Map::new());
            }
            let Some(target) = self.refs.lookup(r) else {
                self.notes.insert(unresolved(r));
                return self.siblings(m, stack, depth, Map::new());
            };
            stack.push(r.to_string());
            let resolved = self.convert(target, stack, depth);
            stack.pop();
            return match resolved {
                Json::Object(base) => self.siblings(m, stack, depth, base),
                other => {
                    let wrapped = self.siblings(m, stack, depth, Map::new());
                    match wrapped {
                        Json::Object(w) if w.is_empty() => other,
                        Json::Object(mut w) => {
                            w.insert("allOf".into(), json!([other]));
                            Json::Object(w)
                        }
                        w => w,
                    }
                }
            };
        }
        Json::Object(self.keywords(m, stack, depth))
    }

    /// A `$ref`'s sibling keywords (a description, a default, …) laid over what it resolved to.
    fn siblings(
        &mut self,
        m: &Map<String, Json>,
        stack: &mut Vec<String>,
        depth: usize,
        mut base: Map<String, Json>,
    ) -> Json {
        let rest: Map<String, Json> = m
            .iter()
            .filter(|(k, _)| k.as_str() != "$ref")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if rest.is_empty() {
            return Json::Object(base);
        }
        let converted = self.keywords(&rest, stack, depth);
        for (k, v) in converted {
            base.insert(k, v);
        }
        Json::Object(base)
    }

    fn keywords(
        &mut self,
        m: &Map<String, Json>,
        stack: &mut Vec<String>,
        depth: usize,
    ) -> Map<String, Json> {
        let mut out = Map::new();
        for (k, v) in m {
            let k = k.as_str();
            if dropped(k) {
                continue;
            }
            let kept = match k {
                "properties" | "patternProperties" | "dependentSchemas" => {
                    let Json::Object(props) = v else { continue };
                    let mut conv = Map::new();
                    for (name, schema) in props {
                        conv.insert(name.clone(), self.convert(schema, stack, depth + 1));
                    }
                    Json::Object(conv)
                }
                "items" => match v {
                    Json::Array(tuple) => {
                        let items: Vec<Json> = tuple
                            .iter()
                            .map(|s| self.convert(s, stack, depth + 1))
                            .collect();
                        out.insert("prefixItems".into(), Json::Array(items));
                        continue;
                    }
                    other => self.convert(other, stack, depth + 1),
                },
                "additionalProperties"
                | "unevaluatedProperties"
                | "unevaluatedItems"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contains"
                | "propertyNames" => {
                    if !(v.is_object() || v.is_boolean()) {
                        continue;
                    }
                    self.convert(v, stack, depth + 1)
                }
                "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                    let Json::Array(list) = v else { continue };
                    if list.is_empty() {
                        continue;
                    }
                    Json::Array(
                        list.iter()
                            .map(|s| self.convert(s, stack, depth + 1))
                            .collect(),
                    )
                }
                _ => match plain_keyword(k, v) {
                    Some(kept) => kept,
                    None => {
                        if k == "type"
                            && let Some(t) = v.as_str()
                        {
                            self.notes.insert(format!(
                                "type `{t}` is not a JSON Schema type; it is left out"
                            ));
                        }
                        continue;
                    }
                },
            };
            out.insert(k.to_string(), kept);
        }
        if m.get("type").and_then(Json::as_str) == Some("file") {
            self.notes
                .insert("a `type: file` value is taken as a string (its contents)".into());
        }
        finish(&mut out, m);
        out
    }
}

/// A keyword whose value is kept as it is when it has the right shape, else left out (so the
/// result always passes the JSON Schema meta-schema).
fn plain_keyword(k: &str, v: &Json) -> Option<Json> {
    let count = |v: &Json| v.as_u64().map(Json::from);
    match k {
        "type" => match v {
            Json::String(t) if JSON_TYPES.contains(&t.as_str()) => Some(v.clone()),
            Json::String(t) if t == "file" => Some(json!("string")),
            Json::Array(ts) => {
                let mut seen: Vec<Json> = Vec::new();
                for t in ts {
                    if t.as_str().is_some_and(|t| JSON_TYPES.contains(&t)) && !seen.contains(t) {
                        seen.push(t.clone());
                    }
                }
                (!seen.is_empty()).then_some(Json::Array(seen))
            }
            _ => None,
        },
        "description" | "title" => v
            .as_str()
            .map(|s| Json::String(text::cut(&text::plain(s), DESCRIPTION_CHARS))),
        "format" | "pattern" | "contentMediaType" | "contentEncoding" => {
            v.as_str().map(|_| v.clone())
        }
        "minimum" | "maximum" => v.is_number().then(|| v.clone()),
        "exclusiveMinimum" | "exclusiveMaximum" => v.is_number().then(|| v.clone()),
        "multipleOf" => v.as_f64().filter(|f| *f > 0.0).map(|_| v.clone()),
        "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
        | "minContains" | "maxContains" => count(v),
        "uniqueItems" | "readOnly" | "writeOnly" | "deprecated" => {
            v.is_boolean().then(|| v.clone())
        }
        "required" => {
            let Json::Array(list) = v else { return None };
            let mut names: Vec<Json> = Vec::new();
            for n in list {
                if n.is_string() && !names.contains(n) {
                    names.push(n.clone());
                }
            }
            Some(Json::Array(names))
        }
        "enum" | "examples" => v.is_array().then(|| v.clone()),
        "default" | "const" => Some(v.clone()),
        "dependentRequired" => v.is_object().then(|| v.clone()),
        // Everything else is unknown to JSON Schema; the meta-schema allows unknown keywords,
        // but a row's schema is for validating arguments: leave them out.
        _ => None,
    }
}

/// Dialect fixes that look at several keywords at once: 3.0's `nullable`, and the boolean
/// `exclusiveMinimum`/`exclusiveMaximum` of 2.0 and 3.0 (which modify `minimum`/`maximum`).
fn finish(out: &mut Map<String, Json>, original: &Map<String, Json>) {
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if original.get(exclusive) == Some(&Json::Bool(true))
            && let Some(n) = out.remove(bound)
        {
            out.insert(exclusive.into(), n);
        }
    }
    if original.get("nullable") == Some(&Json::Bool(true)) {
        match out.get_mut("type") {
            Some(Json::String(t)) if t != "null" => {
                let t = std::mem::take(t);
                out.insert("type".into(), json!([t, "null"]));
            }
            Some(Json::Array(ts)) if !ts.contains(&json!("null")) => ts.push(json!("null")),
            _ => {}
        }
        if let Some(Json::Array(values)) = out.get_mut("enum")
            && !values.contains(&Json::Null)
        {
            values.push(Json::Null);
        }
    }
}

/// The JSON type a schema describes, when it names one or all its alternatives agree.
pub fn json_type(schema: &Json) -> Option<&str> {
    match schema.get("type") {
        Some(Json::String(t)) => return Some(t),
        Some(Json::Array(ts)) => {
            let named: Vec<&str> = ts
                .iter()
                .filter_map(Json::as_str)
                .filter(|t| *t != "null")
                .collect();
            return (named.len() == 1).then(|| named[0]);
        }
        _ => {}
    }
    if schema.get("properties").is_some() {
        return Some("object");
    }
    if schema.get("items").is_some() {
        return Some("array");
    }
    for combinator in ["allOf", "oneOf", "anyOf"] {
        if let Some(Json::Array(list)) = schema.get(combinator) {
            let types: BTreeSet<&str> = list.iter().filter_map(json_type).collect();
            if types.len() == 1
                && (combinator == "allOf" || list.iter().all(|s| json_type(s).is_some()))
            {
                return types.into_iter().next();
            }
        }
    }
    None
}

/// Size of a schema as written, in bytes of compact JSON.
pub fn size(schema: &Json) -> usize {
    serde_json::to_vec(schema).map_or(0, |v| v.len())
}

/// The schema without the keywords `drop` picks (given the keyword, its value and the depth
/// of the schema it is in), wherever they are; property names are never taken for keywords.
fn without(schema: &Json, drop: &dyn Fn(&str, &Json, usize) -> bool, depth: usize) -> Json {
    match schema {
        Json::Object(m) => Json::Object(
            m.iter()
                .filter(|(k, v)| !drop(k, v, depth))
                .map(|(k, v)| {
                    let next = match k.as_str() {
                        "properties" | "patternProperties" | "dependentSchemas" => Json::Object(
                            v.as_object()
                                .map(|props| {
                                    props
                                        .iter()
                                        .map(|(n, s)| (n.clone(), without(s, drop, depth + 1)))
                                        .collect()
                                })
                                .unwrap_or_default(),
                        ),
                        // Values, not schemas.
                        "enum" | "const" | "default" | "examples" | "required" => v.clone(),
                        _ => without(v, drop, depth + 1),
                    };
                    (k.clone(), next)
                })
                .collect(),
        ),
        Json::Array(list) => Json::Array(list.iter().map(|s| without(s, drop, depth)).collect()),
        other => other.clone(),
    }
}

/// Every nested `description` and `title` left out (the arguments keep theirs): the first
/// step when a schema is too large for a row.
pub fn without_nested_docs(schema: &Json) -> Json {
    without(
        schema,
        &|k, _, depth| depth >= 2 && matches!(k, "description" | "title"),
        0,
    )
}

/// Every `description`, `title`, `default` and `examples` left out: the schema without the
/// document's prose.
pub fn without_docs(schema: &Json) -> Json {
    without(
        schema,
        &|k, _, _| matches!(k, "description" | "title" | "default" | "examples"),
        0,
    )
}

/// The schema cut at `levels` of properties: deeper objects and arrays accept any value of
/// their type. The last step when a schema is too large for a row.
pub fn shallow(schema: &Json, levels: usize) -> Json {
    let Json::Object(m) = schema else {
        return schema.clone();
    };
    if levels == 0 {
        let mut keep = Map::new();
        for k in ["type", "description", "enum", "const"] {
            if let Some(v) = m.get(k) {
                keep.insert(k.into(), v.clone());
            }
        }
        return Json::Object(keep);
    }
    Json::Object(
        m.iter()
            .map(|(k, v)| {
                let next = match k.as_str() {
                    "properties" | "patternProperties" => Json::Object(
                        v.as_object()
                            .map(|props| {
                                props
                                    .iter()
                                    .map(|(n, s)| (n.clone(), shallow(s, levels - 1)))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    ),
                    "items" | "additionalProperties" => shallow(v, levels - 1),
                    "allOf" | "anyOf" | "oneOf" | "prefixItems" => Json::Array(
                        v.as_array()
                            .map(|l| l.iter().map(|s| shallow(s, levels - 1)).collect())
                            .unwrap_or_default(),
                    ),
                    _ => v.clone(),
                };
                (k.clone(), next)
            })
            .collect(),
    )
}

/// The schema without `pattern` and `format` anywhere: what is left when a pattern is one the
/// validator cannot compile.
pub fn without_patterns(schema: &Json) -> Json {
    without(
        schema,
        &|k, v, _| matches!(k, "pattern" | "format") && v.is_string(),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(doc: Json, at: &str) -> (Json, BTreeSet<String>) {
        let refs = Refs::new(&doc);
        let mut r = SchemaReader::new(refs);
        let s = doc.pointer(at).expect("schema");
        let out = r.read(s);
        (out, r.notes)
    }

    #[test]
    fn refs_resolve_and_cycles_are_cut() {
        let doc = json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {
                "name": {"type": "string", "nullable": true, "example": "x"},
                "child": {"$ref": "#/components/schemas/Node"},
                "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}}
            }},
            "Tag": {"type": "string", "enum": ["a", "b"], "x-internal": true}
        }}});
        let (out, notes) = read(doc, "/components/schemas/Node");
        assert_eq!(
            out["properties"]["name"],
            json!({"type": ["string", "null"]})
        );
        assert_eq!(
            out["properties"]["tags"]["items"],
            json!({"type": "string", "enum": ["a", "b"]})
        );
        // The child is a Node, whose own child is cut.
        assert_eq!(out["properties"]["child"]["properties"]["child"], json!({}));
        assert!(notes.iter().any(|n| n.contains("recursive")), "{notes:?}");
        jsonschema::meta::validate(&out).expect("valid JSON Schema");
    }

    #[test]
    fn dialect_is_translated() {
        let doc = json!({"s": {"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1, "exclusiveMinimum": true},
            "f": {"type": "file"},
            "w": {"type": "wat"},
            "t": {"type": "array", "items": [{"type": "string"}]},
            "r": {"$ref": "elsewhere.yaml#/X", "description": "kept"}
        }, "required": ["n", "n", 3]}});
        let (out, notes) = read(doc, "/s");
        assert_eq!(
            out["properties"]["n"],
            json!({"type": "integer", "exclusiveMinimum": 1})
        );
        assert_eq!(out["properties"]["f"], json!({"type": "string"}));
        assert_eq!(out["properties"]["w"], json!({}));
        assert_eq!(
            out["properties"]["t"],
            json!({"type": "array", "prefixItems": [{"type": "string"}]})
        );
        assert_eq!(out["properties"]["r"], json!({"description": "kept"}));
        assert_eq!(out["required"], json!(["n"]));
        assert!(
            notes.iter().any(|n| n.contains("outside the document")),
            "{notes:?}"
        );
        jsonschema::meta::validate(&out).expect("valid JSON Schema");
    }

    #[test]
    fn a_ref_chain_that_loops_is_an_error() {
        let doc = json!({"a": {"$ref": "#/b"}, "b": {"$ref": "#/a"}});
        let refs = Refs::new(&doc);
        assert!(refs.follow(&doc["a"]).unwrap_err().contains("cycle"));
        let (out, _) = read(doc, "/a");
        assert_eq!(out, json!({}));
    }

    #[test]
    fn types() {
        assert_eq!(
            json_type(&json!({"oneOf": [{"type": "object"}, {"properties": {}}]})),
            Some("object")
        );
        assert_eq!(
            json_type(&json!({"type": ["string", "null"]})),
            Some("string")
        );
        assert_eq!(json_type(&json!({"anyOf": [{"type": "object"}, {}]})), None);
    }
}
