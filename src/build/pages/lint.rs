//! The gate of a catalogue's templates, before any build publishes them: each page template
//! is walked with the fields its page has (a sample page in which every field is there), so
//! a field that does not exist, a filter tera lacks, a function that reads the machine or a
//! field marked `safe` is named with its file and line; then each page is rendered with its
//! sample, which finds what a walk cannot (a filter given the wrong kind of value).

use super::sample;
use super::set::{Templates, chain};
use crate::row::diag::Diagnostic;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use tera::ast::{Expr, ExprVal, FunctionCall, Node};

/// The filters a template may use: tera's own and capdir's.
const FILTERS: &[&str] = &[
    "upper",
    "lower",
    "trim",
    "trim_start",
    "trim_end",
    "trim_start_matches",
    "trim_end_matches",
    "truncate",
    "wordcount",
    "replace",
    "capitalize",
    "title",
    "linebreaksbr",
    "indent",
    "striptags",
    "spaceless",
    "escape",
    "escape_xml",
    "addslashes",
    "split",
    "int",
    "float",
    "first",
    "last",
    "nth",
    "join",
    "sort",
    "unique",
    "slice",
    "group_by",
    "filter",
    "map",
    "concat",
    "abs",
    "pluralize",
    "round",
    "length",
    "reverse",
    "json_encode",
    "as_str",
    "get",
    "default",
    "safe",
    "short",
    "brief",
];

/// The functions a template may call: none reads the machine (`get_env` is refused).
const FUNCTIONS: &[&str] = &["range", "throw"];

/// Every problem of the templates in `t`.
pub(super) fn check(t: &Templates, path_of: &dyn Fn(&str) -> PathBuf) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for (page, context) in sample::pages(t) {
        let mut walk = Walk {
            t,
            path_of,
            diags: &mut diags,
            seen: HashSet::new(),
        };
        let scope = Scope::of(&context);
        walk.template(&page, &scope);
        if let Err(e) = t.render(&page, &context) {
            let path = path_of(&page);
            if !diags.iter().any(|d| d.path == path) {
                diags.push(Diagnostic::error(
                    &path,
                    (0, 0),
                    "template_render",
                    format!("{page} does not render with a sample page: {e}"),
                    "use the fields the page has (README: Restyling the site) and filters on values they take",
                ));
            }
        }
    }
    diags.sort_by(|a, b| (&a.path, a.line, a.col).cmp(&(&b.path, b.line, b.col)));
    diags.dedup_by(|a, b| {
        a.path == b.path && a.line == b.line && a.code == b.code && a.message == b.message
    });
    diags
}

/// A parse failure as a diagnostic: tera names the template and, in its message, the line
/// and column (`--> 3:12`).
pub(super) fn parse_error(
    e: &tera::Error,
    sources: &HashMap<String, String>,
    path_of: &dyn Fn(&str) -> PathBuf,
) -> Diagnostic {
    let text = chain(e);
    let name = sources
        .keys()
        .filter(|n| text.contains(&format!("'{n}'")))
        .max_by_key(|n| n.len())
        .cloned()
        .unwrap_or_default();
    let at = text
        .split("--> ")
        .nth(1)
        .and_then(|rest| {
            let (line, rest) = rest.split_once(':')?;
            let col: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Some((line.trim().parse().ok()?, col.parse().ok()?))
        })
        .unwrap_or((0, 0));
    let message = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Diagnostic::error(
        &path_of(&name),
        at,
        "template_parse",
        message,
        "fix the tag tera names (tera's syntax: https://keats.github.io/tera/docs/)",
    )
}

/// What a name stands for where it is read: a value of the sample page, or something whose
/// fields cannot be known (a macro's argument, a computed value).
#[derive(Clone)]
enum Shape<'v> {
    Known(&'v Value),
    Any,
}

/// The names in scope: the page's fields, then loop and `set` variables.
#[derive(Clone)]
struct Scope<'v> {
    names: HashMap<String, Shape<'v>>,
    /// Loop variables over HTML capdir rendered itself (`for t in troubleshooting_html`).
    html: HashSet<String>,
}

impl<'v> Scope<'v> {
    fn of(context: &'v Value) -> Scope<'v> {
        let names = context
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), Shape::Known(v)))
                    .collect()
            })
            .unwrap_or_default();
        Scope {
            names,
            html: HashSet::new(),
        }
    }

    fn with(&self, name: &str, shape: Shape<'v>) -> Scope<'v> {
        let mut s = self.clone();
        s.names.insert(name.to_string(), shape);
        s
    }
}

struct Walk<'a, 'd> {
    t: &'a Templates,
    path_of: &'a dyn Fn(&str) -> PathBuf,
    diags: &'d mut Vec<Diagnostic>,
    /// Templates being walked, so an include of itself stops.
    seen: HashSet<String>,
}

/// Where a template is being read: its name and source, for diagnostics.
struct At<'a> {
    name: &'a str,
    source: &'a str,
}

impl<'a> Walk<'a, '_> {
    /// Walk template `name` (its parents' blocks too) with `scope`.
    fn template<'v>(&mut self, name: &str, scope: &Scope<'v>) {
        if !self.seen.insert(name.to_string()) {
            return;
        }
        let Some((tpl, source)) = self.t.template(name) else {
            return;
        };
        let at = At { name, source };
        let mut scope = scope.clone();
        self.nodes(&at, &tpl.ast, &mut scope);
        for parent in &tpl.parents {
            if let Some((p, psource)) = self.t.template(parent) {
                let pat = At {
                    name: parent,
                    source: psource,
                };
                let mut pscope = scope.clone();
                self.nodes(&pat, &p.ast, &mut pscope);
            }
        }
        self.seen.remove(name);
    }

    fn nodes<'v>(&mut self, at: &At, nodes: &[Node], scope: &mut Scope<'v>) {
        for node in nodes {
            self.node(at, node, scope);
        }
    }

    fn node<'v>(&mut self, at: &At, node: &Node, scope: &mut Scope<'v>) {
        match node {
            Node::VariableBlock(_, e) => self.expr(at, e, scope),
            Node::Set(_, set) => {
                self.expr(at, &set.value, scope);
                let shape = match (&set.value.val, set.value.filters.is_empty()) {
                    (ExprVal::Ident(path), true) => self.resolve(scope, path).unwrap_or(Shape::Any),
                    _ => Shape::Any,
                };
                scope.names.insert(set.key.clone(), shape);
            }
            Node::Include(_, names, _) => {
                for n in names {
                    self.template(n, scope);
                }
            }
            Node::Block(_, block, _) => self.nodes(at, &block.body, &mut scope.clone()),
            Node::FilterSection(_, section, _) => {
                self.call(at, &section.filter, true, scope);
                if section.filter.name == "safe" {
                    self.unsafe_here(at);
                }
                self.nodes(at, &section.body, &mut scope.clone());
            }
            Node::Forloop(_, l, _) => {
                self.expr(at, &l.container, scope);
                let container = match &l.container.val {
                    ExprVal::Ident(path) if l.container.filters.is_empty() => {
                        self.resolve(scope, path).unwrap_or(Shape::Any)
                    }
                    _ => Shape::Any,
                };
                let item = match container {
                    Shape::Known(Value::Array(a)) => a.first().map_or(Shape::Any, Shape::Known),
                    Shape::Known(Value::Object(o)) if l.key.is_some() => {
                        o.values().next().map_or(Shape::Any, Shape::Known)
                    }
                    _ => Shape::Any,
                };
                let mut inner = scope.with(&l.value, item).with("loop", Shape::Any);
                inner.html.remove(&l.value);
                if matches!(&l.container.val, ExprVal::Ident(p) if is_html(p)) {
                    inner.html.insert(l.value.clone());
                }
                if let Some(k) = &l.key {
                    inner = inner.with(k, Shape::Any);
                }
                self.nodes(at, &l.body, &mut inner);
                if let Some(empty) = &l.empty_body {
                    self.nodes(at, empty, &mut scope.clone());
                }
            }
            Node::If(i, _) => {
                for (_, cond, body) in &i.conditions {
                    self.expr(at, cond, scope);
                    self.nodes(at, body, &mut scope.clone());
                }
                if let Some((_, body)) = &i.otherwise {
                    self.nodes(at, body, &mut scope.clone());
                }
            }
            Node::MacroDefinition(_, m, _) => {
                let mut inner = scope.clone();
                for arg in m.args.keys() {
                    inner = inner.with(arg, Shape::Any);
                }
                self.nodes(at, &m.body, &mut inner);
            }
            _ => {}
        }
    }

    fn expr(&mut self, at: &At, e: &Expr, scope: &Scope) {
        for f in &e.filters {
            self.call(at, f, true, scope);
            let rendered = match &e.val {
                ExprVal::Ident(p) => is_html(p) || scope.html.contains(p.as_str()),
                _ => false,
            };
            if f.name == "safe" && !rendered {
                self.unsafe_here(at);
            }
        }
        match &e.val {
            ExprVal::Ident(path) => self.ident(at, path, scope),
            ExprVal::Math(m) => {
                self.expr(at, &m.lhs, scope);
                self.expr(at, &m.rhs, scope);
            }
            ExprVal::Logic(l) => {
                self.expr(at, &l.lhs, scope);
                self.expr(at, &l.rhs, scope);
            }
            ExprVal::In(i) => {
                self.expr(at, &i.lhs, scope);
                self.expr(at, &i.rhs, scope);
            }
            ExprVal::Test(t) => {
                self.ident(at, &t.ident, scope);
                for a in &t.args {
                    self.expr(at, a, scope);
                }
            }
            ExprVal::FunctionCall(f) => self.call(at, f, false, scope),
            ExprVal::MacroCall(m) => {
                for a in m.args.values() {
                    self.expr(at, a, scope);
                }
            }
            ExprVal::Array(items) => {
                for i in items {
                    self.expr(at, i, scope);
                }
            }
            ExprVal::StringConcat(s) => {
                for v in &s.values {
                    if let ExprVal::Ident(path) = v {
                        self.ident(at, path, scope);
                    }
                }
            }
            _ => {}
        }
    }

    fn unsafe_here(&mut self, at: &At) {
        self.flag(
            at,
            "safe",
            "template_unsafe",
            "`safe` turns off escaping here: a row's text could write markup into the page".into(),
            "remove `safe`: only the fields capdir renders to HTML itself (ending in _html) may be marked safe",
        );
    }

    /// A filter (`filter`) or a function call, and its arguments.
    fn call(&mut self, at: &At, f: &FunctionCall, filter: bool, scope: &Scope) {
        let (known, code, what) = if filter {
            (FILTERS, "template_unknown_filter", "filter")
        } else {
            (FUNCTIONS, "template_function", "function")
        };
        if !known.contains(&f.name.as_str()) {
            let message = if f.name == "get_env" {
                "get_env is refused: a template cannot read the environment (it holds the build's secrets)".to_string()
            } else {
                format!("no {what} `{}` in capdir's templates", f.name)
            };
            self.flag(
                at,
                &f.name,
                code,
                message,
                if filter {
                    "use one of tera's filters or capdir's `short` and `brief`"
                } else {
                    "templates may call `range` and `throw` only: give the page's fields instead"
                },
            );
        }
        for a in f.args.values() {
            self.expr(at, a, scope);
        }
    }

    /// A dotted name read by the template: its first part must be in scope, and each part
    /// after it a field of what is before it.
    fn ident(&mut self, at: &At, path: &str, scope: &Scope) {
        if path.starts_with("__tera") {
            return;
        }
        if self.resolve(scope, path).is_none() {
            self.flag(
                at,
                path,
                "template_unknown_field",
                format!("`{path}` is not a field of the page {}", at.name),
                "use a field the page has (README: Restyling the site lists them); a typo reads as nothing in `if`",
            );
        }
    }

    /// What `path` names in `scope`; `None` when a part of it does not exist.
    fn resolve<'v>(&self, scope: &Scope<'v>, path: &str) -> Option<Shape<'v>> {
        let parts = split(path);
        let (first, rest) = parts.split_first()?;
        let mut shape = scope.names.get(first.as_str())?.clone();
        for part in rest {
            shape = match shape {
                Shape::Any => return Some(Shape::Any),
                Shape::Known(Value::Null) => return Some(Shape::Any),
                Shape::Known(Value::Object(o)) => Shape::Known(o.get(part.as_str())?),
                Shape::Known(Value::Array(a)) => {
                    let _: usize = part.parse().ok()?;
                    a.first().map_or(Shape::Any, Shape::Known)
                }
                Shape::Known(_) => return None,
            };
        }
        Some(shape)
    }

    fn flag(&mut self, at: &At, needle: &str, code: &'static str, message: String, help: &str) {
        let place = find(at.source, needle);
        self.diags.push(Diagnostic::error(
            &(self.path_of)(at.name),
            place,
            code,
            message,
            help,
        ));
    }
}

/// Whether a name is a field capdir rendered to HTML itself (`may_invoke_html`).
fn is_html(path: &str) -> bool {
    path.ends_with("_html")
}

/// The parts of a dotted name: `c.arguments[0].name` and `c.arguments.0.name` are both
/// `c`, `arguments`, `0`, `name`; a part in brackets that is no number or string stops it.
fn split(path: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for piece in path.split('.') {
        let mut rest = piece;
        if let Some(i) = rest.find('[') {
            parts.push(rest[..i].to_string());
            rest = &rest[i..];
            while let Some(inner) = rest.strip_prefix('[') {
                let Some(end) = inner.find(']') else { break };
                let key = inner[..end].trim_matches(|c| c == '"' || c == '\'');
                parts.push(key.to_string());
                rest = &inner[end + 1..];
            }
        } else {
            parts.push(rest.to_string());
        }
    }
    parts
}

/// The line and column (1-based) of the first place `needle` is read in `source` (in a tag),
/// else of its first occurrence; `(0, 0)` when it is not there at all.
pub(super) fn find(source: &str, needle: &str) -> (usize, usize) {
    let bare = needle.split('[').next().unwrap_or(needle);
    let at = source
        .match_indices(bare)
        .map(|(i, _)| i)
        .find(|&i| {
            let before = source[..i].rfind(['{', '}']).map(|j| &source[j..=j]);
            before == Some("{")
        })
        .or_else(|| source.find(bare));
    let Some(at) = at else { return (0, 0) };
    let line = source[..at].matches('\n').count() + 1;
    let col = at - source[..at].rfind('\n').map_or(0, |j| j + 1) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::{find, split};

    #[test]
    fn names_split_on_dots_and_brackets() {
        assert_eq!(
            split("c.arguments[0].name"),
            ["c", "arguments", "0", "name"]
        );
        assert_eq!(
            split("c.arguments.4.position"),
            ["c", "arguments", "4", "position"]
        );
        assert_eq!(split("r[\"key\"]"), ["r", "key"]);
    }

    #[test]
    fn a_name_is_found_where_a_tag_reads_it() {
        let src = "<p>c.key</p>\n<h1>{{ c.key }}</h1>";
        assert_eq!(find(src, "c.key"), (2, 8));
        assert_eq!(find(src, "nothing"), (0, 0));
    }
}
