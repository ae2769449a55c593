//! Row keys for operations: from the `operationId` (`issues/create` → `ISSUES_CREATE`,
//! `getPetById` → `GET_PET_BY_ID`), else the method and the path, behind the prefix; made
//! valid (`^[A-Z][A-Z0-9_]{1,63}$`) and unique without depending on the order operations
//! come in, so a re-import gives every operation the key it had.

use crate::import::Note;
use crate::import::parts::Draft;
use crate::row::is_valid_key;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

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

/// Unique keys for the drafts, independent of the order operations come in: of several
/// operations with the same key, the first by path and method keeps it and the others get a
/// tag of theirs; a key a row not from this document holds is tagged too.
pub fn assign(prefix: &str, drafts: &mut [Draft], taken: impl Fn(&str) -> bool) -> Vec<String> {
    let base: Vec<String> = drafts
        .iter()
        .map(|d| make(prefix, &d.name, &d.operation))
        .collect();
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, k) in base.iter().enumerate() {
        groups.entry(k.as_str()).or_default().push(i);
    }
    let mut keys = base.clone();
    for members in groups.values() {
        let mut members = members.clone();
        members.sort_by(|a, b| {
            let (pa, pb) = (&drafts[*a].operation, &drafts[*b].operation);
            let path = |s: &str| {
                s.split_once(' ')
                    .map(|(m, p)| (p.to_string(), m.to_string()))
            };
            path(pa).cmp(&path(pb))
        });
        for (n, &i) in members.iter().enumerate() {
            if n > 0 {
                keys[i] = with_tag(&base[i], &drafts[i].operation);
                drafts[i].notes.push(Note {
                    kind: "key",
                    message: format!(
                        "key {} is taken by another operation of the document ({}); this one is {}",
                        base[i], drafts[members[0]].operation, keys[i]
                    ),
                });
            }
        }
    }
    let mut used: BTreeSet<String> = BTreeSet::new();
    for (i, k) in keys.iter_mut().enumerate() {
        if taken(k) {
            let tagged = with_tag(k, &drafts[i].operation);
            drafts[i].notes.push(Note {
                kind: "key",
                message: format!(
                    "key {k} belongs to a row not imported from this document; this one is {tagged}"
                ),
            });
            *k = tagged;
        }
        // Tags of different operations could meet; a counter settles it.
        let mut candidate = k.clone();
        let mut n = 2;
        while used.contains(&candidate) || taken(&candidate) {
            candidate = with_tag(k, &format!("{} {n}", drafts[i].operation));
            n += 1;
        }
        *k = candidate.clone();
        used.insert(candidate);
    }
    keys
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
