//! Row keys for operations: from the `operationId` (`issues/create` → `ISSUES_CREATE`,
//! `getPetById` → `GET_PET_BY_ID`), else the method and the path, behind the prefix; made
//! valid (`^[A-Z][A-Z0-9_]{1,63}$`) and unique without depending on the order operations
//! come in, so a re-import gives every operation the key it had.

use crate::row::is_valid_key;
use sha2::{Digest, Sha256};

/// Words of an identifier: split at anything not a letter or digit and where case changes
/// (`getHTTPResponse2` → get, HTTP, Response2).
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in s.split(|c: char| !c.is_ascii_alphanumeric()) {
        let chars: Vec<char> = part.chars().collect();
        let mut word = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let boundary = match prev {
                Some(p) if c.is_ascii_uppercase() => {
                    p.is_ascii_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
                }
                _ => false,
            };
            if boundary && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            word.push(c.to_ascii_uppercase());
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out
}

/// Six hex digits of SHA-256: a stable tag for what a key stands for.
fn tag(what: &str) -> String {
    hex::encode(&Sha256::digest(what.as_bytes())[..3]).to_ascii_uppercase()
}

/// A valid key from `prefix` and `name` words; `what` (the operation) is hashed into a
/// suffix when the words must be cut to fit 64 characters.
pub fn make(prefix: &str, name: &[String], what: &str) -> String {
    let mut parts: Vec<String> = words(prefix);
    parts.extend(name.iter().cloned());
    let mut key = parts.join("_");
    if key.is_empty() {
        key = "OP".into();
    }
    if !key.starts_with(|c: char| c.is_ascii_uppercase()) {
        key = format!("OP_{key}");
    }
    if key.len() < 2 {
        key.push_str("_OP");
    }
    if key.len() > 64 {
        let mut cut = key[..57].trim_end_matches('_').to_string();
        cut.push('_');
        cut.push_str(&tag(what));
        key = cut;
    }
    debug_assert!(is_valid_key(&key), "{key}");
    key
}

/// `key` told apart for `what`: the same key with a tag of `what` (cut to fit).
pub fn with_tag(key: &str, what: &str) -> String {
    let tag = tag(what);
    let room = 64 - tag.len() - 1;
    let head = if key.len() > room {
        key[..room].trim_end_matches('_')
    } else {
        key
    };
    format!("{head}_{tag}")
}

/// The words a key is made of: the `operationId`'s, else the method's and the path's
/// (`GET /pets/{petId}` → GET, PETS, PET, ID).
pub fn name_words(operation_id: Option<&str>, method: &str, path: &str) -> Vec<String> {
    let from_id = operation_id.map(words).unwrap_or_default();
    if !from_id.is_empty() {
        return from_id;
    }
    let mut w = vec![method.to_ascii_uppercase()];
    w.extend(words(path));
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_ids_and_paths() {
        let k = |prefix: &str, id: Option<&str>, m: &str, p: &str| {
            make(prefix, &name_words(id, m, p), &format!("{m} {p}"))
        };
        assert_eq!(
            k("github", Some("issues/create"), "post", "/x"),
            "GITHUB_ISSUES_CREATE"
        );
        assert_eq!(k("", Some("getPetById"), "get", "/x"), "GET_PET_BY_ID");
        assert_eq!(
            k("", Some("getHTTPResponse2"), "get", "/x"),
            "GET_HTTP_RESPONSE2"
        );
        assert_eq!(k("", None, "get", "/pets/{petId}"), "GET_PETS_PET_ID");
        assert_eq!(k("", Some("123go"), "get", "/x"), "OP_123GO");
        assert_eq!(k("", Some("!!"), "delete", "/"), "DELETE");
        let long = k("PREFIX", Some(&"very-long-name-".repeat(8)), "get", "/x");
        assert!(long.len() <= 64 && is_valid_key(&long), "{long}");
        let other = k("PREFIX", Some(&"very-long-name-".repeat(8)), "get", "/y");
        assert_ne!(long, other, "cut keys keep a tag of their operation");
        let tagged = with_tag(&"A".repeat(64), "GET /a");
        assert!(tagged.len() <= 64 && is_valid_key(&tagged), "{tagged}");
    }
}
