//! Writing values as YAML the way hand-written rows look: block mappings, short lists of
//! plain words in brackets, strings plain where YAML reads them back as the same string and
//! double-quoted otherwise. Deterministic, so re-importing writes the same bytes.

use serde_json::Value as Json;
use std::fmt::Write as _;

/// Lists of scalars up to this width are written `[a, b]`, longer ones one item a line.
const FLOW_WIDTH: usize = 72;

/// `s` as a YAML scalar: plain when that reads back as this string (in a flow collection
/// when `flow`), else double-quoted.
pub fn scalar(s: &str, flow: bool) -> String {
    if is_plain(s, flow) {
        s.to_string()
    } else {
        quoted(s)
    }
}

fn is_plain(s: &str, flow: bool) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first.is_ascii_alphabetic() || first == '_' || first == '/' || first == '$') {
        return false;
    }
    if s.ends_with([' ', ':']) || s.contains(": ") || s.contains(" #") || s.contains('#') {
        return false;
    }
    let specials = ["true", "false", "null", "yes", "no", "on", "off", "y", "n"];
    if specials.iter().any(|w| s.eq_ignore_ascii_case(w)) {
        return false;
    }
    s.bytes().all(|b| {
        (0x20..0x7f).contains(&b)
            && b != b'"'
            && b != b'\\'
            && !(flow && matches!(b, b',' | b'[' | b']' | b'{' | b'}'))
    })
}

/// A double-quoted YAML string. Besides JSON's escapes, the characters YAML would read as a
/// line break or not at all (U+0085, U+2028, U+2029, U+FEFF, C1 controls) are escaped.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn scalar_value(v: &Json, flow: bool) -> Option<String> {
    match v {
        Json::Null => Some("null".into()),
        Json::Bool(b) => Some(b.to_string()),
        Json::Number(n) => Some(n.to_string()),
        Json::String(s) => Some(scalar(s, flow)),
        Json::Array(a) if a.is_empty() => Some("[]".into()),
        Json::Object(m) if m.is_empty() => Some("{}".into()),
        _ => None,
    }
}

/// `[a, b]` when every item is a scalar and the whole is short.
fn flow_list(items: &[Json]) -> Option<String> {
    let parts: Option<Vec<String>> = items
        .iter()
        .map(|i| match i {
            Json::Array(_) | Json::Object(_) => None,
            other => scalar_value(other, true),
        })
        .collect();
    let text = format!("[{}]", parts?.join(", "));
    (text.len() <= FLOW_WIDTH).then_some(text)
}

/// Any value in flow style (for lists nested directly in lists).
fn flow(v: &Json) -> String {
    match v {
        Json::Array(items) => format!(
            "[{}]",
            items.iter().map(flow).collect::<Vec<_>>().join(", ")
        ),
        Json::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", scalar(k, true), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => scalar_value(other, true).unwrap_or_default(),
    }
}

/// Write `name: value` at `indent` spaces, the value's lines below it when it is a mapping
/// or a long list.
pub fn field(out: &mut String, indent: usize, name: &str, v: &Json) {
    let pad = " ".repeat(indent);
    let name = scalar(name, false);
    if let Some(s) = scalar_value(v, false) {
        let _ = writeln!(out, "{pad}{name}: {s}");
        return;
    }
    match v {
        Json::Object(m) => {
            let _ = writeln!(out, "{pad}{name}:");
            for (k, v) in m {
                field(out, indent + 2, k, v);
            }
        }
        Json::Array(items) => {
            if let Some(text) = flow_list(items) {
                let _ = writeln!(out, "{pad}{name}: {text}");
                return;
            }
            let _ = writeln!(out, "{pad}{name}:");
            for item in items {
                list_item(out, indent + 2, item);
            }
        }
        _ => {}
    }
}

/// Write one `- item` at `indent`.
pub fn list_item(out: &mut String, indent: usize, v: &Json) {
    let pad = " ".repeat(indent);
    if let Some(s) = scalar_value(v, false) {
        let _ = writeln!(out, "{pad}- {s}");
        return;
    }
    match v {
        Json::Object(m) => {
            // The first field on the dash's line, the rest aligned under it.
            let mut first = true;
            for (k, v) in m {
                let mut one = String::new();
                field(&mut one, indent + 2, k, v);
                if first {
                    let _ = write!(out, "{pad}- {}", &one[indent + 2..]);
                    first = false;
                } else {
                    out.push_str(&one);
                }
            }
        }
        Json::Array(_) => {
            let _ = writeln!(out, "{pad}- {}", flow(v));
        }
        _ => {}
    }
}

/// A literal block (`name: |`) of lines, which must not be empty or start with a space.
pub fn block(out: &mut String, name: &str, lines: &[String]) {
    let _ = writeln!(out, "{name}: |");
    for line in lines {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn round_trip(v: &Json) -> Json {
        let mut out = String::new();
        field(&mut out, 0, "v", v);
        let back: serde_yaml::Value =
            serde_yaml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        serde_json::to_value(&back["v"]).expect("json")
    }

    #[test]
    fn scalars() {
        assert_eq!(scalar("owner", false), "owner");
        assert_eq!(scalar("bearer:GITHUB_TOKEN", false), "bearer:GITHUB_TOKEN");
        assert_eq!(scalar("true", false), "\"true\"");
        assert_eq!(scalar("+1", false), "\"+1\"");
        assert_eq!(scalar("a, b", true), "\"a, b\"");
        assert_eq!(scalar("a: b", false), "\"a: b\"");
        assert_eq!(scalar("x\u{2028}y", false), "\"x\\u2028y\"");
    }

    #[test]
    fn structures() {
        let v = json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"]},
            "b": {"oneOf": [{"type": "string"}, {"type": "integer"}], "default": null}},
            "required": ["a"], "examples": [[1, [2]], {}]});
        assert_eq!(round_trip(&v), v);
        let mut out = String::new();
        field(&mut out, 0, "s", &v);
        assert_eq!(
            out,
            "s:\n  type: object\n  properties:\n    a:\n      type: string\n      enum: [x, \"y\"]\n    b:\n      oneOf:\n        - type: string\n        - type: integer\n      default: null\n  required: [a]\n  examples:\n    - [1, [2]]\n    - {}\n"
        );
    }

    fn json_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(Json::from),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            // `(?s)`: `.` takes line breaks too, which YAML would fold if left unescaped.
            "(?s).{0,12}".prop_map(Json::String),
            "[a-z:#, \\-\\[\\]{}'\"|>\n\r\t\u{85}\u{2028}\u{feff}]{0,8}".prop_map(Json::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..5)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the value, YAML reads back exactly what was written.
        #[test]
        fn any_value_reads_back(v in json_value()) {
            prop_assert_eq!(round_trip(&v), v);
        }
    }
}
