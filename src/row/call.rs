//! What calling a row takes, read off the row alone: its contract fingerprint, how many
//! arguments it needs, and the example call it offers.
//!
//! The contract fingerprint hashes only the fields that change the call, so a token pinned to
//! a contract survives documentation edits but not a changed target or payload.

use crate::row::template::highest_slot;
use crate::row::{Row, RowType};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

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
    let mut callable = callable;
    // Said only when set, so rows that do not route keep the fingerprints they had.
    if row.route_reply {
        callable["route_reply"] = json!(true);
    }
    hex::encode(Sha256::digest(callable.to_string().as_bytes()))
}

/// How many `$N` pieces a call of `row` must send: the highest slot over its templates.
pub fn needed_args(row: &Row) -> usize {
    // An agent's payload is its system prompt, sent as written (a prompt may mention `$1`
    // as text); the user message carries the arguments, so it needs no slots filled.
    match row.kind {
        RowType::Agent => 0,
        // An MCP target is no template; its payload, if any, is the arguments' JSON template.
        RowType::Http if row.is_mcp() => highest_slot(row.payload()),
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

/// Does a call of `row` stay inside the dispatcher? Its runner computes (`fn`, a builtin) or
/// only composes (`flow`: its steps are calls of their own). Any other runner reaches an
/// upstream API, a model or an MCP server, where a call may change something.
pub fn stays_inside(row: &Row) -> bool {
    matches!(row.runner_name(), "fn" | "flow")
}

/// Does calling `row` make calls of other rows (a flow's steps, an agent's tool calls or the
/// tags of its reply)? Only such a call needs an authority over nested calls.
pub fn makes_nested_calls(row: &Row) -> bool {
    match row.kind {
        RowType::Flow => true,
        RowType::Agent => !row.allowed_categories.is_empty() || row.route_reply,
        RowType::Fn | RowType::Http => false,
    }
}

/// The rows `row` composes: a flow's step keys and an agent's included blocks, in order.
pub fn composed(row: &Row) -> Vec<String> {
    match row.kind {
        RowType::Flow => crate::row::flow::parse(row.payload())
            .map(|f| f.keys().map(str::to_string).collect())
            .unwrap_or_default(),
        RowType::Agent => row.includes.clone(),
        _ => Vec::new(),
    }
}

/// Every row's contract fingerprint over a set of rows, covering what each composes: a flow's
/// steps, an agent's included blocks and (with `allowed_categories`) its tool listing, theirs
/// in turn. A pinned token then sees a change
/// anywhere in the tree as a changed contract. A row that composes nothing (or only rows the
/// set lacks) keeps `fingerprint(row)`; a cycle (in a set that was not checked) is cut where it
/// closes.
pub fn fingerprints<'a>(rows: impl IntoIterator<Item = &'a Row>) -> HashMap<String, String> {
    fingerprints_of(rows, None)
}

/// [`fingerprints`] of the rows named in `wanted` only (and of what they compose, which they
/// need), over the whole set `rows`: what an incremental rebuild recomputes after a few rows
/// changed ([`dependents`] says which). The same value as the whole computation gives.
pub fn fingerprints_of<'a>(
    rows: impl IntoIterator<Item = &'a Row>,
    wanted: Option<&[&str]>,
) -> HashMap<String, String> {
    let by_key: HashMap<&str, &Row> = rows.into_iter().map(|r| (r.key.as_str(), r)).collect();
    let mut done: HashMap<String, String> = HashMap::new();
    fn of<'r>(
        key: &'r str,
        by_key: &HashMap<&'r str, &'r Row>,
        done: &mut HashMap<String, String>,
        path: &mut Vec<&'r str>,
    ) -> Option<String> {
        if let Some(f) = done.get(key) {
            return Some(f.clone());
        }
        let row = by_key.get(key)?;
        if path.contains(&key) {
            return Some(fingerprint(row));
        }
        path.push(key);
        // An agent with tools composes its tool listing too: the rows of its categories.
        let mut parts_of = composed(row);
        if row.kind == RowType::Agent && !row.allowed_categories.is_empty() {
            let mut tools: Vec<String> = by_key
                .values()
                .filter(|r| row.offers_tool(r))
                .map(|r| r.key.clone())
                .collect();
            tools.sort();
            parts_of.extend(tools);
        }
        let parts: Vec<String> = parts_of
            .iter()
            .filter_map(|k| {
                let k = by_key.get_key_value(k.as_str())?.0;
                of(k, by_key, done, path)
            })
            .collect();
        path.pop();
        let own = fingerprint(row);
        let print = if parts.is_empty() {
            own
        } else {
            let mut h = Sha256::new();
            h.update(own.as_bytes());
            for p in &parts {
                h.update(b"\n");
                h.update(p.as_bytes());
            }
            hex::encode(h.finalize())
        };
        done.insert(key.to_string(), print.clone());
        Some(print)
    }
    // In key order, so a cycle (two agents listing each other) is cut in the same place on
    // every machine that computes it from the same rows. A subset is computed in the same
    // order: where a cycle is cut depends on which of its rows is reached first.
    let mut keys: Vec<&str> = by_key.keys().copied().collect();
    keys.sort_unstable();
    match wanted {
        None => {
            for k in keys {
                of(k, &by_key, &mut done, &mut Vec::new());
            }
            done
        }
        Some(wanted) => {
            // A row on a cycle gets the print its place in the whole walk gives it only if
            // the walk reaches the cycle's rows in the same order: walk every row that comes
            // before a wanted one and composes something, then the wanted ones.
            let wanted: std::collections::HashSet<&str> = wanted.iter().copied().collect();
            let last = keys.iter().rposition(|k| wanted.contains(k));
            for k in keys.iter().take(last.map_or(0, |l| l + 1)) {
                let row = by_key[k];
                if wanted.contains(k) || composes_anything(row) {
                    of(k, &by_key, &mut done, &mut Vec::new());
                }
            }
            done.retain(|k, _| wanted.contains(k.as_str()));
            done
        }
    }
}

/// Does `row`'s fingerprint cover other rows' (a flow's steps, included blocks, tools)?
fn composes_anything(row: &Row) -> bool {
    match row.kind {
        RowType::Flow => true,
        RowType::Agent => !row.includes.is_empty() || !row.allowed_categories.is_empty(),
        RowType::Fn | RowType::Http => false,
    }
}

/// The keys of `rows` whose fingerprint may change when the rows named in `changed` change
/// (are added, edited or removed): those rows, and every row that composes one of them,
/// directly or through others; an agent with tools is always included (its tool listing
/// follows the catalogue's categories).
pub fn dependents<'a>(
    rows: impl IntoIterator<Item = &'a Row>,
    changed: &[&str],
) -> std::collections::BTreeSet<String> {
    let mut composed_by: HashMap<String, Vec<&str>> = HashMap::new();
    let mut out: std::collections::BTreeSet<String> =
        changed.iter().map(|k| k.to_string()).collect();
    for row in rows {
        if row.kind == RowType::Agent && !row.allowed_categories.is_empty() {
            out.insert(row.key.clone());
        }
        if composes_anything(row) {
            for part in composed(row) {
                composed_by.entry(part).or_default().push(&row.key);
            }
        }
    }
    let mut todo: Vec<String> = out.iter().cloned().collect();
    while let Some(key) = todo.pop() {
        for user in composed_by.get(&key).into_iter().flatten() {
            if out.insert(user.to_string()) {
                todo.push(user.to_string());
            }
        }
    }
    out
}

/// The most nested calls one call may make, its whole tree counted (every flow step, fan-out
/// branch, agent tool call and router tag, at any depth). The gate refuses a row whose worst
/// case exceeds it (`call_budget`), and the dispatcher stops a tree that reaches it as it runs.
pub const MAX_TREE_CALLS: u64 = 256;

/// The tool calls an agent run may make by default (the runner's `agent:tool_call_limit`); the
/// gate's worst case for an agent with tools counts this many.
pub const AGENT_TOOL_CALLS: usize = 16;

/// The most nested calls a call of `key` can make in the worst case, over the rows `by_key`:
/// a flow's steps and branches, each with what it makes in turn; an agent's tool calls (its
/// limit times the costliest tool it offers, an agent among them counted as one call); the tags of a routed reply (`route::MAX_TAGS`
/// calls: a tag may name any row, so what those make is bounded at run time by
/// [`MAX_TREE_CALLS`] instead). Saturates instead of overflowing. A
/// cycle adds nothing where it closes: a flow cycle is the gate's `flow_cycle`, and an agent
/// reaching itself through tools or tags is bounded at run time by [`MAX_TREE_CALLS`].
pub fn worst_case_calls(key: &str, by_key: &HashMap<&str, &Row>) -> u64 {
    fn of<'r>(
        key: &'r str,
        by_key: &HashMap<&str, &'r Row>,
        done: &mut HashMap<&'r str, u64>,
        path: &mut Vec<&'r str>,
    ) -> u64 {
        if let Some(n) = done.get(key) {
            return *n;
        }
        let Some(row) = by_key.get(key).copied() else {
            return 0;
        };
        if path.contains(&row.key.as_str()) {
            return 0;
        }
        path.push(row.key.as_str());
        // One call of `t` and what it makes in turn.
        let each = |t: &'r Row, done: &mut HashMap<&'r str, u64>, path: &mut Vec<&'r str>| {
            1u64.saturating_add(of(t.key.as_str(), by_key, done, path))
        };
        let mut total: u64 = 0;
        match row.kind {
            RowType::Flow => {
                if let Ok(flow) = crate::row::flow::parse(row.payload()) {
                    let steps: Vec<&'r Row> =
                        flow.keys().filter_map(|k| by_key.get(k).copied()).collect();
                    // A step the set lacks still costs its own call.
                    let missing = flow.keys().count() - steps.len();
                    total = total.saturating_add(missing as u64);
                    for step in steps {
                        total = total.saturating_add(each(step, done, path));
                    }
                }
            }
            RowType::Agent => {
                if !row.allowed_categories.is_empty() {
                    let tools: Vec<&'r Row> = by_key
                        .values()
                        .copied()
                        .filter(|t| row.offers_tool(t))
                        .collect();
                    // A tool that is itself an agent counts as its one call: what it makes
                    // is a model's choice again, bounded as the tree runs.
                    let tool = tools
                        .into_iter()
                        .map(|t| match t.kind {
                            RowType::Agent => 1,
                            _ => each(t, done, path),
                        })
                        .max()
                        .unwrap_or(0);
                    total = total.saturating_add(tool.saturating_mul(AGENT_TOOL_CALLS as u64));
                }
                if row.route_reply {
                    // A tag may name any row: which ones is the model's choice, not the row's,
                    // so the tags count as calls here and what the tagged rows make in turn
                    // is bounded as the tree runs.
                    total = total.saturating_add(crate::row::route::MAX_TAGS as u64);
                }
            }
            RowType::Fn | RowType::Http => {}
        }
        path.pop();
        done.insert(row.key.as_str(), total);
        total
    }
    of(key, by_key, &mut HashMap::new(), &mut Vec::new())
}
