//! What calling a row takes, read off the row alone: its contract fingerprint, how many
//! arguments it needs, and the example call it offers.
//!
//! The contract fingerprint hashes only the fields that change the call, so a token pinned to
//! a contract survives documentation edits but not a changed target or payload.

use crate::row::template::highest_slot;
use crate::row::{Row, RowType};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

/// Recursively sorted keys, so the same schema always hashes the same.
fn canonical(v: &Json) -> Json {
    match v {
        Json::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Json::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect(),
            )
        }
        Json::Array(a) => Json::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// SHA-256 over the callable fields: key, type, runner, target, auth, category, input_schema,
/// sensitive, includes and the executable payload. Docstring, examples and asks are left out.
pub fn fingerprint(row: &Row) -> String {
    let callable = json!({
        "key": row.key,
        "type": row.kind.as_str(),
        "runner": row.runner_name(),
        "target": row.target.trim(),
        "auth": row.auth.trim(),
        "category": row.category,
        "input_schema": row.input_schema.as_ref().map(canonical),
        "sensitive": row.sensitive,
        "includes": row.includes,
        "payload": row.payload(),
    });
    hex::encode(Sha256::digest(callable.to_string().as_bytes()))
}

/// How many `$N` pieces a call of `row` must send: the highest slot over its templates.
pub fn needed_args(row: &Row) -> usize {
    // An agent's payload is its system prompt, sent as written (a prompt may mention `$1`
    // as text); the user message carries the arguments, so it needs no slots filled.
    match row.kind {
        RowType::Agent => 0,
        RowType::Http => highest_slot(row.payload()).max(highest_slot(&row.target)),
        RowType::Fn | RowType::Flow => highest_slot(row.payload()),
    }
}

/// The example argument string a row offers: its `# EX:` line, else its first example.
pub fn example_of(row: &Row) -> String {
    row.doc()
        .ex
        .clone()
        .filter(|e| !e.trim().is_empty() && !e.starts_with('('))
        .or_else(|| row.examples.first().cloned())
        .unwrap_or_default()
}
