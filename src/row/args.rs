//! Arguments: the `a|b|c` body, and its typed form when a row declares an `input_schema`.
//!
//! Positional pieces map to the schema's properties in declared order, are coerced to the
//! declared types (`"37.77"` → 37.77) and validated before anything runs, so a bad call is
//! refused with the argument's name instead of reaching a runner.

use serde_json::{Map, Value as Json};

/// Split a body on `|`: the pieces `$1`, `$2`, … refer to. An empty body has no pieces.
pub fn split_body(body: &str) -> Vec<String> {
    if body.is_empty() {
        Vec::new()
    } else {
        body.split('|').map(str::to_string).collect()
    }
}

/// The schema's properties in declared order, with their sub-schemas.
pub fn properties(schema: &Json) -> Vec<(&str, &Json)> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

fn declared_type(prop: &Json) -> Option<&str> {
    match prop.get("type") {
        Some(Json::String(t)) => Some(t),
        Some(Json::Array(ts)) => ts.iter().filter_map(Json::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// A piece as the type its property declares; unchanged text when it does not parse, so the
/// validator names the argument and the expected type.
fn coerce(piece: &str, prop: &Json) -> Json {
    let text = piece.trim();
    let parsed = match declared_type(prop) {
        Some("number") => text
            .parse::<f64>()
            .ok()
            .and_then(|f| serde_json::Number::from_f64(f).map(Json::Number)),
        Some("integer") => text.parse::<i64>().ok().map(Json::from),
        Some("boolean") => match text {
            "true" => Some(Json::Bool(true)),
            "false" => Some(Json::Bool(false)),
            _ => None,
        },
        Some("array") | Some("object") => serde_json::from_str(text).ok(),
        None => variant_value(text, prop),
        _ => None,
    };
    parsed.unwrap_or_else(|| Json::String(piece.to_string()))
}

/// A property with no type of its own but `anyOf`/`oneOf` variants (`{"anyOf": [{"type":
/// "object"}, {"type": "integer"}]}`): the piece as JSON when it parses as a value of one of
/// the variants' types other than text, so an object or a number reaches the validator as one.
fn variant_value(text: &str, prop: &Json) -> Option<Json> {
    let variants = prop
        .get("anyOf")
        .or_else(|| prop.get("oneOf"))
        .and_then(Json::as_array)?;
    let types: Vec<&str> = variants.iter().filter_map(declared_type).collect();
    let value: Json = serde_json::from_str(text).ok()?;
    let fits = match &value {
        Json::Object(_) => types.contains(&"object"),
        Json::Array(_) => types.contains(&"array"),
        Json::Bool(_) => types.contains(&"boolean"),
        Json::Number(n) => {
            types.contains(&"number") || (types.contains(&"integer") && (n.is_i64() || n.is_u64()))
        }
        _ => false,
    };
    fits.then_some(value)
}

/// Map positional pieces onto the schema's properties. Extra pieces join into the last
/// property with the pipe put back, as `$N+` does; empty pieces are left out.
pub fn positional_to_object(schema: &Json, pieces: &[String]) -> Map<String, Json> {
    let props = properties(schema);
    let mut obj = Map::new();
    for (i, (name, prop)) in props.iter().enumerate() {
        let piece = if i + 1 == props.len() && pieces.len() > props.len() {
            pieces[i..].join("|")
        } else {
            match pieces.get(i) {
                Some(p) => p.clone(),
                None => break,
            }
        };
        if !piece.is_empty() {
            obj.insert(name.to_string(), coerce(&piece, prop));
        }
    }
    obj
}

/// The pieces an argument object stands for, in the schema's declared order.
pub fn object_to_positional(schema: &Json, obj: &Map<String, Json>) -> Vec<String> {
    let props = properties(schema);
    let mut pieces: Vec<String> = props
        .iter()
        .map(|(name, _)| match obj.get(*name) {
            None | Some(Json::Null) => String::new(),
            Some(Json::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        })
        .collect();
    while pieces.last().is_some_and(String::is_empty) {
        pieces.pop();
    }
    pieces
}

/// Check `schema` itself: a valid JSON Schema, and an object schema with properties, since
/// positional arguments map onto them.
/// Where in `schema` the meta-schema check fails (a JSON pointer), if it fails.
pub fn schema_fault(schema: &Json) -> Option<String> {
    jsonschema::meta::validate(schema)
        .err()
        .map(|e| e.instance_path().to_string())
}

pub fn check_schema(schema: &Json) -> Result<(), String> {
    if let Err(e) = jsonschema::meta::validate(schema) {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(" at `{at}`")
        };
        return Err(format!("is not a valid JSON Schema{at}: {e}"));
    }
    if schema.get("type").and_then(Json::as_str) != Some("object") {
        return Err("must have `type: object` at the top level: `type: object`, its properties are the arguments".into());
    }
    if !schema.get("properties").is_some_and(Json::is_object) {
        return Err("must list the arguments under `properties`, in positional order".into());
    }
    jsonschema::validator_for(schema).map_err(|e| format!("cannot be compiled: {e}"))?;
    Ok(())
}

/// A compiled schema, validating argument objects and naming the argument at fault.
pub struct ArgSchema {
    schema: Json,
    validator: jsonschema::Validator,
}

impl ArgSchema {
    pub fn compile(schema: &Json) -> Result<ArgSchema, String> {
        check_schema(schema)?;
        let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
        Ok(ArgSchema {
            schema: schema.clone(),
            validator,
        })
    }

    pub fn schema(&self) -> &Json {
        &self.schema
    }

    /// Every problem with `args`, each naming the argument: `lat: 123.0 is greater than …`.
    pub fn problems(&self, args: &Json) -> Vec<String> {
        self.validator
            .iter_errors(args)
            .map(|e| {
                let path = e.instance_path().to_string();
                let name = path.trim_start_matches('/');
                if name.is_empty() {
                    e.to_string()
                } else {
                    format!("{name}: {e}")
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Json {
        json!({"type": "object", "properties": {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number"},
            "note": {"type": "string"}
        }, "required": ["lat", "lon"]})
    }

    #[test]
    fn maps_and_coerces() {
        let obj = positional_to_object(&schema(), &split_body("37.77|-122.42|a|b"));
        assert_eq!(
            Json::Object(obj.clone()),
            json!({"lat": 37.77, "lon": -122.42, "note": "a|b"})
        );
        assert_eq!(
            object_to_positional(&schema(), &obj),
            vec!["37.77", "-122.42", "a|b"]
        );
    }

    #[test]
    fn variants_take_their_type() {
        let s = json!({"type": "object", "properties": {
            "address": {"anyOf": [{"type": "object"}, {"type": "string", "enum": [""]}]},
            "created": {"anyOf": [{"type": "object"}, {"type": "integer"}]},
            "note": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
        }});
        let obj = positional_to_object(&s, &split_body(r#"{"city":"X"}|5|{"a":1}"#));
        assert_eq!(
            Json::Object(obj),
            json!({"address": {"city": "X"}, "created": 5, "note": "{\"a\":1}"})
        );
    }

    #[test]
    fn names_the_argument() {
        let s = ArgSchema::compile(&schema()).unwrap();
        let args = Json::Object(positional_to_object(&s.schema, &split_body("123|x")));
        let problems = s.problems(&args);
        assert!(
            problems.iter().any(|p| p.starts_with("lat:")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("lon:")),
            "{problems:?}"
        );
        assert!(s.problems(&json!({"lat": 1, "lon": 2})).is_empty());
    }

    #[test]
    fn bad_schemas() {
        assert!(check_schema(&json!({"type": "objekt"})).is_err());
        assert!(
            check_schema(&json!({"type": "object", "properties": {"a": {"type": 7}}})).is_err()
        );
        assert!(check_schema(&schema()).is_ok());
    }
}
