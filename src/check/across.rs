//! The rules across rows: a key once, every row named exists, what one row can reach (a
//! sensitive row, more calls than one call may make, itself).

use crate::row::call;
use crate::row::diag::{Diagnostic, did_you_mean};
use crate::row::flow;
use crate::row::{Row, RowType, line_col};
use std::collections::{BTreeMap, HashMap};

/// Rules across rows: duplicates, includes, flow steps, what a row can reach, the worst case
/// of one call, and cycles.
pub fn check_across(rows: &[&Row]) -> Vec<Diagnostic> {
    let mut d = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_key.entry(&r.key).or_default().push(r);
    }
    duplicates(&by_key, &mut d);
    let edges = references(rows, &by_key, &mut d);
    sensitive_reach(rows, &edges, &by_key, &mut d);
    call_budgets(rows, &by_key, &mut d);
    for r in rows.iter().filter(|r| r.kind == RowType::Flow) {
        if let Some(cycle) = find_cycle(&r.key, &edges) {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.content_at(r.parsed.payload_line),
                "flow_cycle",
                format!("flow calls itself: {}", cycle.join(" → ")),
                "break the cycle: a flow may not reach itself through its steps",
            ));
        }
    }
    d
}

/// Every file after the first of one key.
fn duplicates(by_key: &BTreeMap<&str, Vec<&Row>>, d: &mut Vec<Diagnostic>) {
    for same in by_key.values().filter(|v| v.len() > 1) {
        for r in &same[1..] {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.value("key"),
                "duplicate_key",
                format!(
                    "key `{}` is already defined in {}",
                    r.key,
                    same[0].path.display()
                ),
                "keep one file per key: remove or rename one of them",
            ));
        }
    }
}

/// Includes and flow steps that name no row; and each flow's steps, by flow.
fn references<'a>(
    rows: &[&'a Row],
    by_key: &BTreeMap<&str, Vec<&Row>>,
    d: &mut Vec<Diagnostic>,
) -> HashMap<&'a str, Vec<String>> {
    let keys: Vec<&str> = by_key.keys().copied().collect();
    let suggest = |k: &str| match did_you_mean(k, keys.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None => "add that row, or fix the key".to_string(),
    };
    let mut edges: HashMap<&str, Vec<String>> = HashMap::new();
    for r in rows {
        for (i, inc) in r.includes.iter().enumerate() {
            if !by_key.contains_key(inc.as_str()) {
                d.push(Diagnostic::error(
                    &r.path,
                    r.spans.item("includes", i),
                    "unknown_include",
                    format!("included row `{inc}` does not exist"),
                    suggest(inc),
                ));
            }
        }
        if r.kind != RowType::Flow {
            continue;
        }
        let Ok(f) = flow::parse(r.payload()) else {
            continue;
        };
        for k in f.keys() {
            if !by_key.contains_key(k) {
                let offset = r.payload().find(&format!("{k}:")).unwrap_or(0);
                let (line, col) = line_col(r.payload().as_bytes(), offset);
                let base = r.spans.content_at(r.parsed.payload_line + line - 1);
                d.push(Diagnostic::error(
                    &r.path,
                    (base.0, base.1 + col - 1),
                    "unknown_flow_step",
                    format!("flow step calls `{k}`, which is not in the catalogue"),
                    suggest(k),
                ));
            }
        }
        edges
            .entry(&r.key)
            .or_default()
            .extend(f.keys().map(str::to_string));
    }
    edges
}

/// What runs under a row's authority (a flow's steps, an agent's tool categories): a row
/// that can run a sensitive one is sensitive too.
fn sensitive_reach(
    rows: &[&Row],
    edges: &HashMap<&str, Vec<String>>,
    by_key: &BTreeMap<&str, Vec<&Row>>,
    d: &mut Vec<Diagnostic>,
) {
    for r in rows.iter().filter(|r| !r.sensitive) {
        if let Some(path) = reaches_sensitive(r, edges, by_key) {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.key("type"),
                "reaches_sensitive",
                format!(
                    "`{}` can run the sensitive row `{}` ({}) but is not marked sensitive",
                    r.key,
                    path.last().copied().unwrap_or_default(),
                    path.join(" → ")
                ),
                "mark this row `sensitive: true` (with an input_schema): a row that can reach a sensitive one is as risky as it",
            ));
        }
    }
}

/// What one call may set going, its whole tree in the worst case, within the budget.
fn call_budgets(rows: &[&Row], by_key: &BTreeMap<&str, Vec<&Row>>, d: &mut Vec<Diagnostic>) {
    let firsts: HashMap<&str, &Row> = by_key
        .iter()
        .filter_map(|(k, v)| Some((*k, *v.first()?)))
        .collect();
    for r in rows.iter().filter(|r| call::makes_nested_calls(r)) {
        let worst = call::worst_case_calls(&r.key, &firsts);
        if worst > call::MAX_TREE_CALLS {
            d.push(Diagnostic::error(
                &r.path,
                r.spans.key("type"),
                "call_budget",
                format!(
                    "one call of `{}` can make {} nested calls in the worst case; one call may make at most {}",
                    r.key,
                    if worst == u64::MAX { "unbounded".to_string() } else { worst.to_string() },
                    call::MAX_TREE_CALLS
                ),
                "make fewer steps or smaller fan-outs, or split the work into calls of their own (each of an agent's tool calls counts as its costliest tool)",
            ));
        }
    }
}

/// A sensitive row `row` can run, and the path to it: through a flow's steps (and theirs),
/// among the categories an agent's tools are limited to (`*`: every category), or anywhere in
/// the catalogue for an agent whose reply is routed (a tag may name any key).
fn reaches_sensitive<'a>(
    row: &'a Row,
    edges: &'a HashMap<&'a str, Vec<String>>,
    by_key: &BTreeMap<&'a str, Vec<&'a Row>>,
) -> Option<Vec<&'a str>> {
    if row.kind == RowType::Agent && (!row.allowed_categories.is_empty() || row.route_reply) {
        // A routed reply's tags may name any row of the catalogue; tools, those offered.
        let hit = by_key
            .values()
            .flatten()
            .find(|other| other.sensitive && (row.route_reply || row.offers_tool(other)))?;
        return Some(vec![row.key.as_str(), hit.key.as_str()]);
    }
    let mut seen = std::collections::HashSet::new();
    let mut todo: Vec<Vec<&str>> = vec![vec![row.key.as_str()]];
    while let Some(path) = todo.pop() {
        let last = *path.last()?;
        for next in edges.get(last).into_iter().flatten() {
            let Some(target) = by_key.get(next.as_str()).and_then(|v| v.first()) else {
                continue;
            };
            if !seen.insert(target.key.as_str()) {
                continue;
            }
            let mut longer = path.clone();
            longer.push(target.key.as_str());
            if target.sensitive {
                return Some(longer);
            }
            todo.push(longer);
        }
    }
    None
}

/// A path from `start` back to itself, if there is one.
fn find_cycle<'a>(
    start: &'a str,
    edges: &'a HashMap<&'a str, Vec<String>>,
) -> Option<Vec<&'a str>> {
    fn walk<'a>(
        node: &'a str,
        start: &'a str,
        edges: &'a HashMap<&'a str, Vec<String>>,
        path: &mut Vec<&'a str>,
        seen: &mut std::collections::HashSet<&'a str>,
    ) -> bool {
        for next in edges.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            let next = next.as_str();
            if next == start {
                path.push(next);
                return true;
            }
            if seen.insert(next) {
                path.push(next);
                if walk(next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start];
    let mut seen = std::collections::HashSet::new();
    walk(start, start, edges, &mut path, &mut seen).then_some(path)
}
