//! What each template reaches (the page it extends, the templates it includes and imports,
//! the macros it calls), so the gate can refuse a cycle: tera follows each of these until
//! it comes back to where it started, and a page that reaches a cycle it is not part of, or
//! a macro that calls itself, would recurse until the stack runs out.
//!
//! A recursive macro is refused with the rest: nothing stops one at a depth, and the fields
//! of capdir's pages are shallow enough to write out.

use std::collections::{BTreeMap, HashMap};
use tera::Template;
use tera::ast::{Expr, ExprVal, FunctionCall, Node};

/// A cycle: the template it is found in, what names the first step in its text, and the
/// steps (`_a.html includes _b.html includes _a.html`).
pub(super) struct Cycle {
    pub template: String,
    pub needle: String,
    pub steps: String,
}

/// One step from a template or a macro: how (`extends`, `includes`…) and to what.
struct Step {
    how: &'static str,
    to: String,
}

/// The first cycle among `sources` (by name), if there is one. A template that does not
/// parse reaches nothing here: tera names it afterwards.
pub(super) fn cycle(sources: &HashMap<String, String>) -> Option<Cycle> {
    let parsed: BTreeMap<&str, Template> = sources
        .iter()
        .filter_map(|(n, text)| Some((n.as_str(), Template::new(n, None, text).ok()?)))
        .collect();
    let graph = steps(&parsed);
    for start in graph.keys() {
        if let Some(path) = back_to(&graph, start) {
            let template = start.split("::").next().unwrap_or(start).to_string();
            let needle = path[0].to.rsplit("::").next().unwrap_or("").to_string();
            let mut steps = start.clone();
            for s in &path {
                steps.push_str(&format!(" {} {}", s.how, s.to));
            }
            return Some(Cycle {
                template,
                needle,
                steps,
            });
        }
    }
    None
}

/// The steps out of every template (`T`) and macro (`T::m`).
fn steps(parsed: &BTreeMap<&str, Template>) -> BTreeMap<String, Vec<Step>> {
    let mut graph = BTreeMap::new();
    for (&name, t) in parsed {
        let mut out = Vec::new();
        if let Some(p) = &t.parent {
            out.push(Step {
                how: "extends",
                to: p.clone(),
            });
        }
        for (file, _) in &t.imported_macro_files {
            out.push(Step {
                how: "imports",
                to: file.clone(),
            });
        }
        let from = Reach { parsed, t };
        from.nodes(&t.ast, &mut out);
        graph.insert(name.to_string(), out);
        for (m, def) in &t.macros {
            let mut out = Vec::new();
            from.nodes(&def.body, &mut out);
            graph.insert(format!("{name}::{m}"), out);
        }
    }
    graph
}

/// A path of steps from `start` back to it, if one exists (depth first, without recursion:
/// the graph is a catalogue's to make as deep as it likes).
fn back_to<'g>(graph: &'g BTreeMap<String, Vec<Step>>, start: &str) -> Option<Vec<&'g Step>> {
    let mut path: Vec<&Step> = Vec::new();
    let mut next: Vec<std::slice::Iter<Step>> = vec![graph.get(start)?.iter()];
    let mut seen = std::collections::HashSet::new();
    while let Some(iter) = next.last_mut() {
        let Some(step) = iter.next() else {
            next.pop();
            path.pop();
            continue;
        };
        if step.to == start {
            path.push(step);
            return Some(path);
        }
        if !seen.insert(step.to.as_str()) {
            continue;
        }
        if let Some(out) = graph.get(&step.to) {
            path.push(step);
            next.push(out.iter());
        }
    }
    None
}

/// Reading one template's nodes for what they include and call.
struct Reach<'a> {
    parsed: &'a BTreeMap<&'a str, Template>,
    t: &'a Template,
}

impl Reach<'_> {
    fn nodes(&self, nodes: &[Node], out: &mut Vec<Step>) {
        for node in nodes {
            match node {
                Node::VariableBlock(_, e) => self.expr(e, out),
                Node::Set(_, set) => self.expr(&set.value, out),
                Node::Include(_, names, _) => out.extend(names.iter().map(|n| Step {
                    how: "includes",
                    to: n.clone(),
                })),
                Node::Block(_, block, _) => self.nodes(&block.body, out),
                Node::FilterSection(_, section, _) => {
                    self.call(&section.filter, out);
                    self.nodes(&section.body, out);
                }
                Node::Forloop(_, l, _) => {
                    self.expr(&l.container, out);
                    self.nodes(&l.body, out);
                    if let Some(empty) = &l.empty_body {
                        self.nodes(empty, out);
                    }
                }
                Node::If(i, _) => {
                    for (_, cond, body) in &i.conditions {
                        self.expr(cond, out);
                        self.nodes(body, out);
                    }
                    if let Some((_, body)) = &i.otherwise {
                        self.nodes(body, out);
                    }
                }
                // A macro's body is its own node of the graph.
                _ => {}
            }
        }
    }

    fn expr(&self, e: &Expr, out: &mut Vec<Step>) {
        for f in &e.filters {
            self.call(f, out);
        }
        self.val(&e.val, out);
    }

    fn val(&self, v: &ExprVal, out: &mut Vec<Step>) {
        match v {
            ExprVal::Math(m) => {
                self.expr(&m.lhs, out);
                self.expr(&m.rhs, out);
            }
            ExprVal::Logic(l) => {
                self.expr(&l.lhs, out);
                self.expr(&l.rhs, out);
            }
            ExprVal::In(i) => {
                self.expr(&i.lhs, out);
                self.expr(&i.rhs, out);
            }
            ExprVal::Test(t) => t.args.iter().for_each(|a| self.expr(a, out)),
            ExprVal::FunctionCall(f) => self.call(f, out),
            ExprVal::Array(items) => items.iter().for_each(|i| self.expr(i, out)),
            ExprVal::StringConcat(s) => s.values.iter().for_each(|v| self.val(v, out)),
            ExprVal::MacroCall(m) => {
                m.args.values().for_each(|a| self.expr(a, out));
                if let Some(file) = self.file_of(&m.namespace) {
                    out.push(Step {
                        how: "calls",
                        to: format!("{file}::{}", m.name),
                    });
                }
            }
            _ => {}
        }
    }

    fn call(&self, f: &FunctionCall, out: &mut Vec<Step>) {
        f.args.values().for_each(|a| self.expr(a, out));
    }

    /// The template a macro namespace names here: `self`, one this template imports, or
    /// one that an imported template imports (tera makes those visible too).
    fn file_of(&self, namespace: &str) -> Option<String> {
        if namespace == "self" {
            return Some(self.t.name.clone());
        }
        let mut queue: Vec<&Template> = vec![self.t];
        let mut seen = std::collections::HashSet::new();
        while let Some(t) = queue.pop() {
            if !seen.insert(t.name.as_str()) {
                continue;
            }
            for (file, ns) in &t.imported_macro_files {
                if ns == namespace {
                    return Some(file.clone());
                }
                queue.extend(self.parsed.get(file.as_str()));
            }
        }
        None
    }
}
