//! Argument templates (DESIGN.md §2): `$N`, `$N+`, `$PREV`, `$NAME`, `$$NAME`.
//!
//! Escaping follows the slot's position so an argument can never leave its slot: percent-encoding
//! in a URL, JSON-string escaping in a JSON template (a slot outside a JSON string becomes a JSON
//! scalar or a quoted string), raw in plain text. `$$` inserts without escaping, for values the
//! row author trusts (a flow binding that is already JSON). One pass, no allocation per token.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use std::collections::HashMap;

/// Everything but RFC 3986 unreserved characters is encoded in a URL slot.
pub const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Where the template's text is going, which decides how slots are escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Url,
    Json,
    Raw,
}

impl Context {
    /// JSON when the template looks like a JSON document, raw otherwise.
    pub fn for_body(template: &str) -> Context {
        let t = template.trim_start();
        if t.starts_with('{') || t.starts_with('[') {
            Context::Json
        } else {
            Context::Raw
        }
    }
}

/// The values slots resolve to.
#[derive(Debug, Default, Clone, Copy)]
pub struct Vars<'a> {
    pub args: &'a [String],
    pub prev: Option<&'a str>,
    pub bindings: Option<&'a HashMap<String, String>>,
}

/// A call with fewer pieces than the template's highest `$N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingArgs {
    pub needed: usize,
    pub got: usize,
}

enum Token<'t> {
    Text(&'t str),
    Slot {
        raw: bool,
        slot: Slot<'t>,
        source: &'t str,
    },
}

enum Slot<'t> {
    Arg(usize),
    ArgRest(usize),
    Prev,
    Name(&'t str),
}

/// Split a template into text and slots.
fn tokens(t: &str) -> impl Iterator<Item = Token<'_>> {
    let b = t.as_bytes();
    let mut i = 0;
    let mut text_start = 0;
    std::iter::from_fn(move || {
        while i < b.len() {
            if b[i] != b'$' {
                i += 1;
                continue;
            }
            let start = i;
            let mut j = i + 1;
            let raw = b.get(j) == Some(&b'$');
            if raw {
                j += 1;
            }
            let slot;
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                let d = j;
                while b.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
                let n: usize = t[d..j].parse().unwrap_or(usize::MAX);
                if n == 0 || n == usize::MAX {
                    i = j;
                    continue;
                }
                if b.get(j) == Some(&b'+') {
                    j += 1;
                    slot = Slot::ArgRest(n);
                } else {
                    slot = Slot::Arg(n);
                }
            } else if b
                .get(j)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
            {
                let s = j;
                while b
                    .get(j)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    j += 1;
                }
                let name = &t[s..j];
                slot = if name == "PREV" {
                    Slot::Prev
                } else {
                    Slot::Name(name)
                };
            } else {
                i = j.max(i + 1);
                continue;
            }
            if start > text_start {
                let text = &t[text_start..start];
                text_start = start;
                return Some(Token::Text(text));
            }
            i = j;
            text_start = j;
            return Some(Token::Slot {
                raw,
                slot,
                source: &t[start..j],
            });
        }
        if text_start < b.len() {
            let text = &t[text_start..];
            text_start = b.len();
            return Some(Token::Text(text));
        }
        None
    })
}

/// The highest `$N` (or `$N+`) the template uses: how many pieces a call must send.
pub fn highest_slot(template: &str) -> usize {
    tokens(template)
        .filter_map(|t| match t {
            Token::Slot {
                slot: Slot::Arg(n) | Slot::ArgRest(n),
                ..
            } => Some(n),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Names (`$NAME`, not `$PREV` or `$N`) the template refers to.
pub fn names(template: &str) -> Vec<&str> {
    tokens(template)
        .filter_map(|t| match t {
            Token::Slot {
                slot: Slot::Name(n),
                ..
            } => Some(n),
            _ => None,
        })
        .collect()
}

/// Fill the template's slots. Refused when the call has fewer pieces than the highest `$N`.
pub fn render(template: &str, ctx: Context, vars: Vars<'_>) -> Result<String, MissingArgs> {
    let needed = highest_slot(template);
    if vars.args.len() < needed {
        return Err(MissingArgs {
            needed,
            got: vars.args.len(),
        });
    }
    let mut out = String::with_capacity(template.len() + 32);
    let mut in_string = false;
    let mut escaped = false;
    for token in tokens(template) {
        match token {
            Token::Text(text) => {
                out.push_str(text);
                if ctx == Context::Json {
                    for c in text.bytes() {
                        if escaped {
                            escaped = false;
                        } else if in_string && c == b'\\' {
                            escaped = true;
                        } else if c == b'"' {
                            in_string = !in_string;
                        }
                    }
                }
            }
            Token::Slot { raw, slot, source } => {
                let value: Option<std::borrow::Cow<'_, str>> = match slot {
                    Slot::Arg(n) => vars.args.get(n - 1).map(|s| s.as_str().into()),
                    Slot::ArgRest(n) => Some(vars.args[n - 1..].join("|").into()),
                    Slot::Prev => vars.prev.map(Into::into),
                    Slot::Name(name) => vars
                        .bindings
                        .and_then(|b| b.get(name))
                        .map(|s| s.as_str().into()),
                };
                let Some(value) = value else {
                    // An unresolved name stays literal, so the author sees it in the output.
                    out.push_str(source);
                    continue;
                };
                if raw {
                    out.push_str(&value);
                    continue;
                }
                match ctx {
                    Context::Raw => out.push_str(&value),
                    Context::Url => {
                        out.extend(percent_encoding::utf8_percent_encode(&value, COMPONENT))
                    }
                    Context::Json if in_string => push_json_escaped(&mut out, &value),
                    Context::Json => push_json_scalar(&mut out, &value),
                }
            }
        }
    }
    Ok(out)
}

/// The value's JSON string form without the surrounding quotes.
fn push_json_escaped(out: &mut String, value: &str) {
    let quoted = serde_json::Value::String(value.to_string()).to_string();
    out.push_str(&quoted[1..quoted.len() - 1]);
}

/// A slot outside any JSON string: a number, boolean or null goes in as itself, anything
/// else as a quoted JSON string, so the document's structure cannot change.
fn push_json_scalar(out: &mut String, value: &str) {
    let v = value.trim();
    let is_scalar = matches!(v, "true" | "false" | "null")
        || (!v.is_empty() && serde_json::from_str::<serde_json::Number>(v).is_ok());
    if is_scalar {
        out.push_str(v);
    } else {
        out.push_str(&serde_json::Value::String(value.to_string()).to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn slots() {
        let a = args(&["a b", "c/d", "e", "f|g"]);
        let v = Vars {
            args: &a,
            ..Default::default()
        };
        assert_eq!(render("x $1 $3+", Context::Raw, v).unwrap(), "x a b e|f|g");
        assert_eq!(
            render("/r/$1/$2?q=$3", Context::Url, v).unwrap(),
            "/r/a%20b/c%2Fd?q=e"
        );
        assert_eq!(
            render(r#"{"t":"$1","n":$3}"#, Context::Json, v).unwrap(),
            r#"{"t":"a b","n":"e"}"#
        );
        assert_eq!(
            render("$UNSET and $$ and $0", Context::Raw, v).unwrap(),
            "$UNSET and $$ and $0"
        );
        assert_eq!(
            render("$2", Context::Raw, Vars { args: &a[..1], ..v }),
            Err(MissingArgs { needed: 2, got: 1 })
        );
    }

    #[test]
    fn json_escaping_and_scalars() {
        let a = args(&["he said \"hi\"\n", "42", "true"]);
        let v = Vars {
            args: &a,
            ..Default::default()
        };
        assert_eq!(
            render(r#"["$1", $2, $3]"#, Context::Json, v).unwrap(),
            r#"["he said \"hi\"\n", 42, true]"#
        );
        let evil = args(&["1, \"x\": 2"]);
        let out = render(r#"{"n": $1}"#, Context::Json, Vars { args: &evil, ..v }).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed.as_object().unwrap().len(), 1);
    }

    #[test]
    fn prev_bindings_and_raw() {
        let mut b = HashMap::new();
        b.insert("H".to_string(), "{\"k\":1}".to_string());
        let a = args(&[]);
        let v = Vars {
            args: &a,
            prev: Some("p\"q"),
            bindings: Some(&b),
        };
        assert_eq!(
            render(r#"["$PREV", $$H, "$H"]"#, Context::Json, v).unwrap(),
            r#"["p\"q", {"k":1}, "{\"k\":1}"]"#
        );
        assert_eq!(highest_slot("$2 $10+ $$3"), 10);
        assert_eq!(names("$A $PREV $1 $$B"), vec!["A", "B"]);
    }
}
