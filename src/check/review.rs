//! What a pull request changes in what rows *do*, shown to its reviewer (`capdir check
//! --base REF`): every row whose contract fingerprint changes, with the callable difference
//! named (the target, the credential and where its secret may go, the input schema, the
//! runner, the executable payload; for a flow or an agent, the composed rows that changed).
//! A pinned token stops a changed row at call time; this shows the change at review time, so
//! a "rug pull" (a row that keeps its name and docs but calls somewhere else) has to get past
//! a person. A change to the docstring, the examples or the asks changes no fingerprint and
//! shows nothing. Each is a notice: it fails nothing, it asks for a look.

use crate::row::Row;
use crate::row::binding::Bindings;
use crate::row::call::{composed, fingerprints};
use crate::row::credential::Credential;
use crate::row::diag::Diagnostic;
use std::collections::{BTreeSet, HashMap};

/// The diagnostic code of a callable change.
pub const CODE: &str = "callable_change";

/// One notice per row of `now` whose fingerprint differs from its fingerprint in `base` (or
/// that is new), naming what changed.
pub fn callable_changes(
    base: &[Row],
    now: &[Row],
    base_bindings: &Bindings,
    bindings: &Bindings,
) -> Vec<Diagnostic> {
    let before = fingerprints(base);
    let after = fingerprints(now);
    let old: HashMap<&str, &Row> = base.iter().map(|r| (r.key.as_str(), r)).collect();
    let mut out = Vec::new();
    for row in now {
        if before.get(&row.key) == after.get(&row.key) {
            continue;
        }
        let (field, changes) = match old.get(row.key.as_str()) {
            None => ("key", vec![new_row(row, bindings)]),
            Some(was) => {
                let mut changes = differences(was, row, base_bindings, bindings, &before, &after);
                if changes.is_empty() {
                    // What the fingerprint covers beyond the row's own fields: an agent's tool
                    // listing (`allowed_categories`), which other rows join or leave.
                    changes.push((
                        "key",
                        "the rows it may call changed (its tool list or what those rows do)"
                            .to_string(),
                    ));
                }
                (
                    changes.first().map_or("key", |c| c.0),
                    changes.into_iter().map(|c| c.1).collect(),
                )
            }
        };
        let at = row.spans.value(field);
        out.push(Diagnostic::notice(
            &row.path,
            at,
            CODE,
            format!("{} calls differently: {}", row.key, changes.join("; ")),
            "review what the row now does before merging; tokens pinned to its old contract will refuse it (409 contract_changed)",
        ));
    }
    out
}

/// Where a row's credential may be sent, by the bindings.
fn destinations(row: &Row, bindings: &Bindings) -> String {
    let envs = Credential::parse(&row.auth)
        .ok()
        .flatten()
        .map(|c| c.envs())
        .unwrap_or_default();
    if envs.is_empty() {
        return "no credential".into();
    }
    envs.iter()
        .map(|env| match bindings.credentials.get(env) {
            Some(b) => format!("{env} → {}", b.origins.join(", ")),
            None => format!("{env} → unbound"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn new_row(row: &Row, bindings: &Bindings) -> String {
    format!(
        "new {} row, target `{}`, credential {}",
        row.kind.as_str(),
        row.target.trim(),
        match row.auth.trim() {
            "" => "none".to_string(),
            auth => format!("`{auth}` ({})", destinations(row, bindings)),
        }
    )
}

/// The input schema's properties and required names, for a short account of its change.
fn schema_outline(row: &Row) -> (BTreeSet<String>, BTreeSet<String>) {
    let Some(schema) = &row.input_schema else {
        return Default::default();
    };
    let names = |v: Option<&serde_json::Value>| -> BTreeSet<String> {
        match v {
            Some(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect(),
            _ => BTreeSet::new(),
        }
    };
    (
        names(schema.get("properties")),
        names(schema.get("required")),
    )
}

/// Each changed callable field: the YAML field to point at, and what changed.
fn differences(
    was: &Row,
    row: &Row,
    base_bindings: &Bindings,
    bindings: &Bindings,
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut changed = |field: &'static str, what: &str, a: &str, b: &str| {
        if a != b {
            out.push((field, format!("{what} `{a}` → `{b}`")));
        }
    };
    changed("type", "type", was.kind.as_str(), row.kind.as_str());
    changed("runner", "runner", was.runner_name(), row.runner_name());
    changed("target", "target", was.target.trim(), row.target.trim());
    changed("auth", "credential", was.auth.trim(), row.auth.trim());
    changed("category", "category", &was.category, &row.category);
    changed(
        "sensitive",
        "sensitive",
        &was.sensitive.to_string(),
        &row.sensitive.to_string(),
    );
    let (dest_was, dest_now) = (
        destinations(was, base_bindings),
        destinations(row, bindings),
    );
    if dest_was != dest_now {
        out.push((
            "auth",
            format!("its secret may go to {dest_was} → {dest_now}"),
        ));
    }
    if was.input_schema != row.input_schema {
        out.push(("input_schema", schema_change(was, row)));
    }
    if was.payload().trim() != row.payload().trim() {
        let what = match row.kind.as_str() {
            "flow" => "the flow's steps",
            "agent" => "the agent's system prompt",
            "fn" => "the fn's argument template",
            _ => "the request body template",
        };
        out.push((
            "content",
            format!(
                "{what} changed:\n{}",
                line_diff(was.payload(), row.payload())
            ),
        ));
    }
    if was.includes != row.includes {
        out.push((
            "includes",
            format!(
                "includes `{}` → `{}`",
                was.includes.join(", "),
                row.includes.join(", ")
            ),
        ));
    }
    if was.route_reply != row.route_reply {
        out.push((
            "route_reply",
            format!("route_reply {} → {}", was.route_reply, row.route_reply),
        ));
    }
    // A flow or agent whose own fields are the same can still call differently: a row it
    // composes changed.
    let steps: Vec<String> = composed(row)
        .into_iter()
        .filter(|k| before.get(k) != after.get(k))
        .collect();
    if !steps.is_empty() {
        out.push((
            "content",
            format!("the rows it calls changed: {}", steps.join(", ")),
        ));
    }
    out
}

/// What changed in the input schema: the properties added and dropped, those now
/// required, or its constraints.
fn schema_change(was: &Row, row: &Row) -> String {
    let ((props_was, req_was), (props_now, req_now)) = (schema_outline(was), schema_outline(row));
    let list = |s: BTreeSet<&String>| s.into_iter().cloned().collect::<Vec<_>>().join(", ");
    let mut said = Vec::new();
    let added = list(props_now.difference(&props_was).collect());
    let removed = list(props_was.difference(&props_now).collect());
    let newly_required = list(req_now.difference(&req_was).collect());
    if !added.is_empty() {
        said.push(format!("adds {added}"));
    }
    if !removed.is_empty() {
        said.push(format!("drops {removed}"));
    }
    if !newly_required.is_empty() {
        said.push(format!("now requires {newly_required}"));
    }
    if said.is_empty() {
        said.push("constraints changed".into());
    }
    format!("input schema {}", said.join(", "))
}

/// The lines that differ between two payloads, `-` before and `+` after (at most a few).
fn line_diff(a: &str, b: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) =
        (a.trim().lines().collect(), b.trim().lines().collect());
    let removed = old
        .iter()
        .filter(|l| !new.contains(l))
        .map(|l| format!("- {l}"));
    let added = new
        .iter()
        .filter(|l| !old.contains(l))
        .map(|l| format!("+ {l}"));
    let lines: Vec<String> = removed.chain(added).collect();
    if lines.is_empty() {
        return "the same lines, in another order or repeated".into();
    }
    let shown = lines.iter().take(6).cloned().collect::<Vec<_>>().join("\n");
    match lines.len() {
        n if n > 6 => format!("{shown}\n… {} more lines", n - 6),
        _ => shown,
    }
}
