//! The `fn` runner's builtins: small, pure, documented functions an agent can call by key.
//!
//! They live with the row because they are the vocabulary of a `fn` row's `target`, as
//! templates are of its payload: the gate checks that a target names one, the `fn` runner
//! calls it. Each works on its arguments alone (the clock and a random source aside): no
//! network, no files, nothing beyond the row.
//!
//! Each takes the string arguments produced by the row's JSON array template and returns text,
//! or an error message that the runner turns into `ERR:fn:<name>:…`.

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// One builtin: its name (a row's `target`), what it does, its arguments, and the function.
pub struct Builtin {
    pub name: &'static str,
    pub doc: &'static str,
    pub args: &'static str,
    pub run: fn(&[String]) -> Result<String, String>,
}

/// Every builtin, by name.
pub static BUILTINS: &[Builtin] = &[
    Builtin {
        name: "now",
        doc: "Current UTC time, RFC 3339 with seconds.",
        args: "none",
        run: now,
    },
    Builtin {
        name: "echo",
        doc: "Its arguments joined with `|`, unchanged.",
        args: "any",
        run: echo,
    },
    Builtin {
        name: "sha256",
        doc: "Lower-case hex SHA-256 of the UTF-8 text.",
        args: "text",
        run: sha256,
    },
    Builtin {
        name: "uuid",
        doc: "A random version-4 UUID.",
        args: "none",
        run: uuid,
    },
    Builtin {
        name: "base64_encode",
        doc: "Standard base64 (with padding) of the UTF-8 text.",
        args: "text",
        run: base64_encode,
    },
    Builtin {
        name: "base64_decode",
        doc: "Decodes standard or URL-safe base64 to UTF-8 text.",
        args: "base64 text",
        run: base64_decode,
    },
    Builtin {
        name: "json_get",
        doc: "The value at a dotted path (`a.b.0.c`) in a JSON document; strings come back bare, other values as JSON.",
        args: "json, path",
        run: json_get,
    },
    Builtin {
        name: "last_reply_of",
        doc: "Content of the last message by a role (default `assistant`) in a JSON chat transcript `[{role, content}]`.",
        args: "transcript, role?",
        run: last_reply_of,
    },
    Builtin {
        name: "upper",
        doc: "Upper-case text.",
        args: "text",
        run: upper,
    },
    Builtin {
        name: "lower",
        doc: "Lower-case text.",
        args: "text",
        run: lower,
    },
    Builtin {
        name: "regex_extract",
        doc: "First match of a regular expression in text; capture group 1 when the pattern has one.",
        args: "pattern, text",
        run: regex_extract,
    },
    Builtin {
        name: "length",
        doc: "Number of characters (Unicode scalar values) in the text.",
        args: "text",
        run: length,
    },
    Builtin {
        name: "url_encode",
        doc: "Percent-encodes text for a URL component.",
        args: "text",
        run: url_encode,
    },
    Builtin {
        name: "url_decode",
        doc: "Decodes percent-encoded text.",
        args: "text",
        run: url_decode,
    },
    Builtin {
        name: "trim",
        doc: "Text without leading and trailing white space.",
        args: "text",
        run: trim,
    },
    Builtin {
        name: "word_count",
        doc: "Number of white-space separated words.",
        args: "text",
        run: word_count,
    },
];

pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

fn arg(args: &[String], i: usize, name: &str) -> Result<String, String> {
    args.get(i)
        .cloned()
        .ok_or_else(|| format!("missing argument {} ({name})", i + 1))
}

fn now(_: &[String]) -> Result<String, String> {
    Ok(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

fn echo(args: &[String]) -> Result<String, String> {
    Ok(args.join("|"))
}

fn sha256(args: &[String]) -> Result<String, String> {
    Ok(hex::encode(Sha256::digest(
        arg(args, 0, "text")?.as_bytes(),
    )))
}

fn uuid(_: &[String]) -> Result<String, String> {
    Ok(uuid::Uuid::new_v4().to_string())
}

fn base64_encode(args: &[String]) -> Result<String, String> {
    Ok(base64::engine::general_purpose::STANDARD.encode(arg(args, 0, "text")?))
}

fn base64_decode(args: &[String]) -> Result<String, String> {
    let text = arg(args, 0, "base64 text")?;
    let t = text.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(t)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(t))
        .or_else(|_| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(t.trim_end_matches('='))
        })
        .map_err(|e| format!("not base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "decoded bytes are not UTF-8 text".to_string())
}

fn json_get(args: &[String]) -> Result<String, String> {
    let doc: serde_json::Value =
        serde_json::from_str(&arg(args, 0, "json")?).map_err(|e| format!("not JSON: {e}"))?;
    let path = args.get(1).map(String::as_str).unwrap_or("");
    let mut cur = &doc;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        cur = match cur {
            serde_json::Value::Array(items) => {
                part.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            serde_json::Value::Object(map) => map.get(part),
            _ => None,
        }
        .ok_or_else(|| format!("path `{path}` not found (at `{part}`)"))?;
    }
    Ok(match cur {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

fn last_reply_of(args: &[String]) -> Result<String, String> {
    let transcript: serde_json::Value =
        serde_json::from_str(&arg(args, 0, "transcript")?).map_err(|e| format!("not JSON: {e}"))?;
    let role = args
        .get(1)
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .unwrap_or("assistant");
    let messages = transcript
        .as_array()
        .or_else(|| transcript.get("messages").and_then(|m| m.as_array()))
        .ok_or("transcript must be a JSON array of {role, content} messages")?;
    messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(|r| r.as_str()) == Some(role))
        .map(|m| match m.get("content") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
        .ok_or_else(|| format!("no message with role `{role}`"))
}

fn upper(args: &[String]) -> Result<String, String> {
    Ok(arg(args, 0, "text")?.to_uppercase())
}

fn lower(args: &[String]) -> Result<String, String> {
    Ok(arg(args, 0, "text")?.to_lowercase())
}

fn regex_extract(args: &[String]) -> Result<String, String> {
    let pattern = arg(args, 0, "pattern")?;
    let text = arg(args, 1, "text")?;
    let re = regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("bad pattern: {e}"))?;
    let caps = re.captures(&text).ok_or("no match")?;
    Ok(caps
        .get(1)
        .or_else(|| caps.get(0))
        .map(|m| m.as_str().to_string())
        .unwrap_or_default())
}

fn length(args: &[String]) -> Result<String, String> {
    Ok(arg(args, 0, "text")?.chars().count().to_string())
}

fn url_encode(args: &[String]) -> Result<String, String> {
    Ok(percent_encoding::utf8_percent_encode(
        &arg(args, 0, "text")?,
        crate::row::template::COMPONENT,
    )
    .to_string())
}

fn url_decode(args: &[String]) -> Result<String, String> {
    let text = arg(args, 0, "text")?.replace('+', " ");
    percent_encoding::percent_decode_str(&text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| "decoded bytes are not UTF-8 text".to_string())
}

fn trim(args: &[String]) -> Result<String, String> {
    Ok(arg(args, 0, "text")?.trim().to_string())
}

fn word_count(args: &[String]) -> Result<String, String> {
    Ok(arg(args, 0, "text")?.split_whitespace().count().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &[&str]) -> Result<String, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        (find(name).expect("builtin").run)(&args)
    }

    #[test]
    fn each_builtin() {
        assert_eq!(call("echo", &["a", "b"]).unwrap(), "a|b");
        assert_eq!(
            call("sha256", &["abc"]).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(call("uuid", &[]).unwrap().len(), 36);
        assert_eq!(call("base64_encode", &["hello"]).unwrap(), "aGVsbG8=");
        assert_eq!(call("base64_decode", &["aGVsbG8="]).unwrap(), "hello");
        assert_eq!(
            call("json_get", &[r#"{"a":{"b":[1,{"c":"x"}]}}"#, "a.b.1.c"]).unwrap(),
            "x"
        );
        assert_eq!(call("json_get", &[r#"{"a":[1,2]}"#, "a"]).unwrap(), "[1,2]");
        assert!(call("json_get", &[r#"{"a":1}"#, "b"]).is_err());
        let t = r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"one"},{"role":"assistant","content":"two"}]"#;
        assert_eq!(call("last_reply_of", &[t]).unwrap(), "two");
        assert_eq!(call("last_reply_of", &[t, "user"]).unwrap(), "hi");
        assert_eq!(call("upper", &["aé"]).unwrap(), "AÉ");
        assert_eq!(call("lower", &["AÉ"]).unwrap(), "aé");
        assert_eq!(
            call("regex_extract", &[r"(\d+) apples", "I have 12 apples"]).unwrap(),
            "12"
        );
        assert_eq!(call("regex_extract", &[r"\d+", "x 42 y"]).unwrap(), "42");
        assert_eq!(call("length", &["héllo"]).unwrap(), "5");
        assert_eq!(call("url_encode", &["a b&c/d"]).unwrap(), "a%20b%26c%2Fd");
        assert_eq!(call("url_decode", &["a%20b%26c"]).unwrap(), "a b&c");
        assert_eq!(call("trim", &["  x  "]).unwrap(), "x");
        assert_eq!(call("word_count", &["one two  three\n"]).unwrap(), "3");
        assert!(call("now", &[]).unwrap().ends_with('Z'));
        assert!(call("sha256", &[]).is_err());
    }
}
