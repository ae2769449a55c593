//! The templates a build renders with: capdir's own, embedded in the binary, each replaced
//! by the file of the same name in the catalogue's `templates/` folder when it has one, and
//! new pages added from it. Rendered with tera at run time, so a site owner restyles their
//! catalogue without recompiling capdir.

use super::{graph, lint};
use crate::row::diag::Diagnostic;
use anyhow::{Context as _, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tera::{Tera, Value};

/// The pages a catalogue may override, file by file, as capdir ships them.
pub const OVERRIDABLE: &[(&str, &str)] = &[
    (
        "layout.html",
        include_str!("../../../templates/layout.html"),
    ),
    (
        "history.html",
        include_str!("../../../templates/history.html"),
    ),
    ("row.html", include_str!("../../../templates/row.html")),
    (
        "tombstone.html",
        include_str!("../../../templates/tombstone.html"),
    ),
    ("index.html", include_str!("../../../templates/index.html")),
    (
        "category.html",
        include_str!("../../../templates/category.html"),
    ),
    (
        "search.html",
        include_str!("../../../templates/search.html"),
    ),
    (
        "credentials.html",
        include_str!("../../../templates/credentials.html"),
    ),
];

/// Pages capdir keeps fixed: the contract markdown agents read (and a removed row's), whose
/// form the dispatcher and agents rely on, written by capdir's own code ([`super::machine`]);
/// and the receipt page, which the dispatcher renders itself from its own copy. A
/// catalogue's file of one of these names is refused unless it is the same as capdir's
/// template (the markdown forms have none).
pub const FIXED: &[(&str, Option<&str>)] = &[
    ("contract.md", None),
    ("tombstone.md", None),
    (
        "receipt.html",
        Some(include_str!("../../../templates/receipt.html")),
    ),
];

/// The site's static files as capdir ships them (`static/`), each overridable; a catalogue
/// may add others.
pub const ASSETS: &[(&str, &[u8])] = &[
    (
        "style.css",
        include_bytes!("../../../templates/static/style.css"),
    ),
    (
        "search.js",
        include_bytes!("../../../templates/static/search.js"),
    ),
    ("row.js", include_bytes!("../../../templates/static/row.js")),
];

/// A catalogue's template and static files by name (`row.html`, `static/logo.svg`).
type Files = BTreeMap<String, Vec<u8>>;

/// The largest template or static file read from a catalogue.
const MAX_FILE: u64 = 4 << 20;

/// The templates of one build, parsed.
pub struct Templates {
    tera: Tera,
    /// Where the catalogue's own templates were read from; none: capdir's alone.
    pub dir: Option<PathBuf>,
    /// The catalogue's files that differ from capdir's (or are new), by name
    /// (`row.html`, `static/logo.svg`).
    overrides: Files,
    /// Pages the catalogue adds (`about.html`), each rendered to the site's root.
    added: Vec<String>,
    /// Every template's source, by name, for diagnostics.
    sources: HashMap<String, String>,
}

/// Why a catalogue's templates cannot be used: every problem, each with file and line.
#[derive(Debug, thiserror::Error)]
#[error("{}", render(.0))]
pub struct TemplateErrors(pub Vec<Diagnostic>);

fn render(diags: &[Diagnostic]) -> String {
    diags.iter().map(Diagnostic::render_text).collect()
}

impl Templates {
    /// capdir's own templates.
    pub fn builtin() -> Templates {
        Templates::from_files(None, BTreeMap::new())
            .unwrap_or_else(|refused| panic!("capdir's own templates are refused: {refused}"))
    }

    /// The templates a build of `catalogue` renders with: `dir` when given, else the
    /// `templates/` folder beside the catalogue when there is one, over capdir's own.
    pub fn for_catalogue(catalogue: &Path, dir: Option<&Path>) -> Result<Templates> {
        let dir = match dir {
            Some(d) => Some(d.to_path_buf()),
            None => beside(catalogue).filter(|d| d.is_dir()),
        };
        let Some(dir) = dir else {
            return Ok(Templates::builtin());
        };
        let (files, mut diags) = read_folder(&dir)?;
        match Templates::from_files(Some(dir), files) {
            Ok(t) if diags.is_empty() => Ok(t),
            Ok(_) => Err(TemplateErrors(diags).into()),
            Err(TemplateErrors(more)) => {
                diags.extend(more);
                Err(TemplateErrors(diags).into())
            }
        }
    }

    /// The templates of `files` (a catalogue's folder as read: `row.html`, `static/x.css`
    /// by name) over capdir's, through their gate.
    pub fn of_files(files: Files) -> Result<Templates, TemplateErrors> {
        Templates::from_files(None, files)
    }

    /// The templates of `files` (the catalogue's, by name) over capdir's, checked.
    fn from_files(dir: Option<PathBuf>, files: Files) -> Result<Templates, TemplateErrors> {
        let path_of = |name: &str| match &dir {
            Some(d) => d.join(name),
            None => PathBuf::from("templates").join(name),
        };
        let mut diags = Vec::new();
        let mut overrides = BTreeMap::new();
        let mut sources: HashMap<String, String> = OVERRIDABLE
            .iter()
            .copied()
            .chain(FIXED.iter().filter_map(|&(n, t)| Some((n, t?))))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let mut added = Vec::new();
        for (name, bytes) in files {
            if let Some(asset) = name.strip_prefix("static/") {
                if ASSETS.iter().all(|(n, b)| *n != asset || *b != bytes) {
                    overrides.insert(name, bytes);
                }
                continue;
            }
            let Ok(text) = String::from_utf8(bytes) else {
                diags.push(Diagnostic::error(
                    &path_of(&name),
                    (0, 0),
                    "template_not_utf8",
                    "the template is not UTF-8 text",
                    "save the template as UTF-8",
                ));
                continue;
            };
            if let Some(at) = too_deep(&text) {
                diags.push(Diagnostic::error(
                    &path_of(&name),
                    at,
                    "template_too_deep",
                    format!(
                        "nested more than {MAX_DEPTH} deep (brackets in a tag, or tags in tags)"
                    ),
                    "flatten it: set a variable, or split the page with include",
                ));
                continue;
            }
            if let Some((_, fixed)) = FIXED.iter().find(|(n, _)| *n == name) {
                if Some(text.as_str()) != *fixed {
                    diags.push(Diagnostic::error(
                        &path_of(&name),
                        (0, 0),
                        "template_fixed",
                        format!("{name} is fixed by capdir and cannot be overridden"),
                        "remove the file: agents and the dispatcher rely on this form (restyle the pages with layout.html, row.html and static/style.css)",
                    ));
                }
                continue;
            }
            match OVERRIDABLE.iter().find(|(n, _)| *n == name) {
                Some((_, builtin)) if text == *builtin => continue,
                Some(_) => {}
                None if name.starts_with('_') => {}
                None => added.push(name.clone()),
            }
            overrides.insert(name.clone(), text.clone().into_bytes());
            sources.insert(name, text);
        }
        if let Some(c) = graph::cycle(&sources) {
            let at = lint::find(&sources[&c.template], &c.needle);
            diags.push(Diagnostic::error(
                &path_of(&c.template),
                at,
                "template_cycle",
                format!("the templates go round for ever: {}", c.steps),
                "break the cycle: a page cannot reach itself by extends, include or import, nor a macro call itself (write the levels out: the pages' fields are shallow)",
            ));
            return Err(TemplateErrors(diags));
        }
        let mut tera = engine();
        let mut ordered: Vec<(&str, &str)> = sources
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        ordered.sort();
        if let Err(e) = tera.add_raw_templates(ordered) {
            diags.push(lint::parse_error(&e, &sources, &path_of));
            return Err(TemplateErrors(diags));
        }
        added.sort();
        let templates = Templates {
            tera,
            dir: dir.clone(),
            overrides,
            added,
            sources,
        };
        // capdir's own templates pass the gate (a test walks them): only a catalogue's are
        // walked at each build.
        if !templates.is_builtin() {
            diags.extend(lint::check(&templates, &path_of));
        }
        if diags.is_empty() {
            Ok(templates)
        } else {
            Err(TemplateErrors(diags))
        }
    }

    /// Render template `name` with `page` as its context.
    pub fn render(&self, name: &str, page: &impl Serialize) -> Result<String> {
        let context = tera::Context::from_serialize(page)
            .with_context(|| format!("making the context of {name}"))?;
        self.tera
            .render(name, &context)
            .map_err(|e| anyhow::anyhow!("rendering {name}: {}", lint::chain(&e)))
    }

    /// A template's parsed form, and its source (`None`: no such template).
    pub(super) fn template(&self, name: &str) -> Option<(&tera::Template, &str)> {
        let t = self.tera.get_template(name).ok()?;
        Some((t, self.sources.get(name)?.as_str()))
    }

    /// Pages the catalogue adds, each rendered to `NAME.html` at the site's root.
    pub fn added(&self) -> &[String] {
        &self.added
    }

    /// Whether the catalogue overrides nothing: the pages are capdir's own.
    pub fn is_builtin(&self) -> bool {
        self.overrides.is_empty()
    }

    /// The site's static files: capdir's, each replaced by the catalogue's of the same name,
    /// and the catalogue's others.
    pub fn assets(&self) -> Vec<(&str, &[u8])> {
        let mut out: BTreeMap<&str, &[u8]> = ASSETS.iter().copied().collect();
        for (name, bytes) in &self.overrides {
            if let Some(asset) = name.strip_prefix("static/") {
                out.insert(asset, bytes);
            }
        }
        out.into_iter().collect()
    }

    /// A digest of every template and static file the pages are made with.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        let mut names: Vec<&String> = self.sources.keys().collect();
        names.sort();
        for name in names {
            let text = &self.sources[name];
            h.update(format!("\0{name}\0{}\0", text.len()));
            h.update(text);
        }
        for (name, bytes) in self.assets() {
            h.update(format!("\0static/{name}\0{}\0", bytes.len()));
            h.update(bytes);
        }
        hex::encode(h.finalize())
    }
}

/// How deep a template may nest brackets in a tag, or tags (`if`, `for`, `block`…) in tags:
/// tera's parser and renderer, and the gate's walk, recurse once a level, and a template
/// from a catalogue must not be able to run them out of stack.
const MAX_DEPTH: usize = 64;

/// Where `text` first nests deeper than [`MAX_DEPTH`] (line, column), if it does.
fn too_deep(text: &str) -> Option<(usize, usize)> {
    const OPEN: &[&str] = &["if", "for", "block", "filter", "macro", "raw"];
    let (mut tags, mut in_tag) = (0usize, false);
    let mut brackets = 0usize;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let next = bytes.get(i + 1).copied();
        match (b, next) {
            (b'{', Some(b'{' | b'%')) if !in_tag => {
                in_tag = true;
                if next == Some(b'%') {
                    let word: String = text[i + 2..]
                        .trim_start_matches(['-', ' ', '\t', '\n', '\r'])
                        .chars()
                        .take_while(char::is_ascii_alphabetic)
                        .collect();
                    if OPEN.contains(&word.as_str()) {
                        tags += 1;
                    } else if word.starts_with("end") {
                        tags = tags.saturating_sub(1);
                    }
                }
            }
            (b'}' | b'%', Some(b'}')) if in_tag => {
                in_tag = false;
                brackets = 0;
            }
            (b'(' | b'[', _) if in_tag => brackets += 1,
            (b')' | b']', _) if in_tag => brackets = brackets.saturating_sub(1),
            _ => {}
        }
        if tags > MAX_DEPTH || brackets > MAX_DEPTH {
            let line = text[..i].matches('\n').count() + 1;
            let col = i - text[..i].rfind('\n').map_or(0, |j| j + 1) + 1;
            return Some((line, col));
        }
    }
    None
}

/// tera as the pages use it: HTML escaped in `.html` templates with capdir's escaper,
/// capdir's filters, and no reading of the environment.
fn engine() -> Tera {
    let mut tera = Tera::default();
    tera.autoescape_on(vec![".html"]);
    tera.set_escape_fn(escape_html);
    tera.register_filter("short", short);
    tera.register_filter("brief", brief);
    // Templates come from the catalogue's repository: they read the page, not the machine
    // (a build in CI runs beside the signing key).
    tera.register_function("get_env", refuse_env);
    tera
}

/// The `templates/` folder beside a catalogue directory.
pub fn beside(catalogue: &Path) -> Option<PathBuf> {
    match catalogue.file_name() {
        Some(_) => Some(catalogue.parent()?.join("templates")),
        // `.` or `..`: named by where it is.
        None => Some(
            std::fs::canonicalize(catalogue)
                .ok()?
                .parent()?
                .join("templates"),
        ),
    }
}

/// The templates (`*.html` at the top) and static files (`static/*`) of a folder. Only
/// regular files are read: a link could point anywhere on the machine that builds.
fn read_folder(dir: &Path) -> Result<(Files, Vec<Diagnostic>)> {
    let mut files = BTreeMap::new();
    let mut diags = Vec::new();
    for (sub, prefix) in [(dir.to_path_buf(), ""), (dir.join("static"), "static/")] {
        let entries = match std::fs::read_dir(&sub) {
            Ok(e) => e,
            Err(e) if prefix.is_empty() || e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("reading {}", sub.display()));
            }
            Err(_) => continue,
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", sub.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let wanted = !name.starts_with('.')
                && (!prefix.is_empty()
                    || name.ends_with(".html")
                    || FIXED.iter().any(|(n, _)| *n == name));
            if !wanted || meta.is_dir() {
                continue;
            }
            if !meta.is_file() {
                diags.push(Diagnostic::error(
                    &path,
                    (0, 0),
                    "template_not_a_file",
                    "a template or static file must be a regular file, not a link",
                    "replace the link with the file itself",
                ));
                continue;
            }
            if meta.len() > MAX_FILE {
                diags.push(Diagnostic::error(
                    &path,
                    (0, 0),
                    "template_too_large",
                    format!(
                        "{} bytes, over the {MAX_FILE} a template may have",
                        meta.len()
                    ),
                    "keep large files (images, fonts) out of templates/ and link to them",
                ));
                continue;
            }
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            files.insert(format!("{prefix}{name}"), bytes);
        }
    }
    Ok((files, diags))
}

/// HTML escaping for text and attribute values: `& < > " '` as named entities
/// (`&amp; &lt; &gt; &quot; &#39;`); `/` is left alone.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let entity = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        out.push_str(entity);
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out
}

/// `x | short`: the day of an RFC 3339 time, or an abbreviated commit.
fn short(value: &Value, _: &HashMap<String, Value>) -> tera::Result<Value> {
    match value {
        Value::String(s) => Ok(Value::String(crate::build::contract::first_ten(s).into())),
        other => Err(tera::Error::msg(format!(
            "the short filter takes text, not {other}"
        ))),
    }
}

/// `x | brief`: an argument's description as a list shows it (cut at 160 graphemes).
fn brief(value: &Value, _: &HashMap<String, Value>) -> tera::Result<Value> {
    match value {
        Value::String(s) => Ok(Value::String(crate::build::contract::brief(s).into_owned())),
        other => Err(tera::Error::msg(format!(
            "the brief filter takes text, not {other}"
        ))),
    }
}

fn refuse_env(_: &HashMap<String, Value>) -> tera::Result<Value> {
    Err(tera::Error::msg(
        "get_env is refused: a template cannot read the environment (it holds the build's secrets)",
    ))
}

#[cfg(test)]
mod tests {
    use super::{Templates, engine, escape_html};
    use serde_json::json;

    #[test]
    fn escaping_covers_markup_and_quotes_and_keeps_slashes() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a> é/"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt; é/"
        );
        assert_eq!(escape_html("plain"), "plain");
    }

    /// The gate refuses `get_env` by name; the engine refuses it too, for a call the walk
    /// could not see.
    #[test]
    fn the_engine_cannot_read_the_environment() {
        let mut tera = engine();
        tera.add_raw_template("x.html", r#"{{ get_env(name="PATH") }}"#)
            .unwrap();
        let path = std::env::var("PATH").unwrap_or_default();
        let err = tera
            .render("x.html", &tera::Context::new())
            .expect_err("get_env renders");
        let text = super::lint::chain(&err);
        assert!(text.contains("get_env is refused"), "{text}");
        assert!(path.is_empty() || !text.contains(&path));
    }

    /// A receipt's fields as its page shows them: strings as they are, numbers as their
    /// digits (a float's shortest form), nothing for null or an absent field, and a field
    /// shown at all only when not null, false, zero or empty.
    #[test]
    fn receipt_fields_show_as_text_and_nothing_for_null() {
        let mut tera = engine();
        tera.add_raw_template(
            "r.html",
            "{{ r.key }}|{{ r.seq }}|{{ r.cost_usd }}|{{ r.repairs }}|{{ r.ok }}|{{ r.repaired_by }}|{{ r.nested }}|{% for n in names %}{% if r[n] %}{{ n }} {% endif %}{% endfor %}|{% for id in r.repaired_by %}{{ id }},{% endfor %}|{{ r.children.0.id }}",
        )
        .unwrap();
        let r = json!({
            "key": "ECHO", "seq": 42, "cost_usd": 0.0015, "repairs": null, "ok": true,
            "repaired_by": ["inv_a", "inv_b"], "zero": 0, "none": 0.0, "empty": "",
            "children": [{"id": "inv_c"}], "nested": {"a": 1}, "no": []
        });
        let names = [
            "key",
            "seq",
            "cost_usd",
            "repairs",
            "ok",
            "repaired_by",
            "zero",
            "none",
            "empty",
            "children",
            "nested",
            "no",
            "absent",
        ];
        let page = tera
            .render(
                "r.html",
                &tera::Context::from_serialize(json!({"r": r, "names": names})).unwrap(),
            )
            .unwrap();
        assert_eq!(
            page,
            "ECHO|42|0.0015||true|[inv_a, inv_b]|[object]|key seq cost_usd ok repaired_by children nested |inv_a,inv_b,|inv_c"
        );
    }

    /// Nesting that would run tera (or the gate's walk) out of stack is refused first.
    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let deep = |inner: String| {
            let mut files = std::collections::BTreeMap::new();
            let row =
                format!("{{% extends \"layout.html\" %}}{{% block main %}}{inner}{{% endblock %}}");
            files.insert("row.html".to_string(), row.into_bytes());
            Templates::of_files(files)
        };
        let parens = format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000));
        let ifs = format!(
            "{}x{}",
            "{% if c.key %}".repeat(5000),
            "{% endif %}".repeat(5000)
        );
        let nots = format!("{{% if {}c.key %}}x{{% endif %}}", "not ".repeat(5000));
        for inner in [parens, ifs] {
            let refused = deep(inner).err().expect("refused");
            assert_eq!(refused.0[0].code, "template_too_deep", "{refused}");
        }
        // Not nesting by brackets or tags: a long chain tera takes or refuses, without a crash.
        let _ = deep(nots);
        let shallow = format!("{{{{ {}1{} }}}}", "(".repeat(8), ")".repeat(8));
        assert!(deep(shallow).is_ok());
    }

    /// A page extending a cycle it is not part of sends tera round the cycle for ever; the
    /// gate names the cycle instead (found by the suite's proptest as a stack overflow).
    #[test]
    fn a_cycle_of_templates_is_refused_not_a_stack_overflow() {
        let of = |pairs: &[(&str, &str)]| {
            let files = pairs
                .iter()
                .map(|(n, t)| (n.to_string(), t.as_bytes().to_vec()))
                .collect();
            Templates::of_files(files)
        };
        let own = "{% extends \"layout.html\" %}{% block main %}x{% endblock %}";
        let refused = of(&[("layout.html", own)]).err().expect("refused");
        assert_eq!(refused.0[0].code, "template_cycle", "{refused}");
        assert!(refused.0[0].path.ends_with("layout.html"), "{refused}");
        let two = [
            ("layout.html", "{% extends \"_base.html\" %}"),
            ("_base.html", "{% extends \"layout.html\" %}"),
        ];
        let refused = of(&two).err().expect("refused");
        assert_eq!(refused.0[0].code, "template_cycle", "{refused}");
        assert!(
            refused.0[0]
                .message
                .contains("_base.html extends layout.html extends _base.html"),
            "{refused}"
        );
        let includes = [
            ("_a.html", "a{% include \"_b.html\" %}"),
            ("_b.html", "b{% include \"_a.html\" %}"),
            (
                "row.html",
                "{% extends \"layout.html\" %}{% block main %}{% include \"_a.html\" %}{% endblock %}",
            ),
        ];
        let imports = [
            (
                "_m.html",
                "{% import \"_n.html\" as n %}{% macro m() %}m{% endmacro %}",
            ),
            (
                "_n.html",
                "{% import \"_m.html\" as m %}{% macro n() %}n{% endmacro %}",
            ),
            ("row.html", "{% import \"_m.html\" as m %}{{ m::m() }}"),
        ];
        let calls = [
            (
                "row.html",
                "{% import \"_t.html\" as t %}{% extends \"layout.html\" %}{% block main %}{{ t::tree(n=c) }}{% endblock %}",
            ),
            (
                "_t.html",
                "{% macro tree(n) %}{% for a in n.arguments %}{{ self::tree(n=a) }}{% endfor %}{% endmacro %}",
            ),
        ];
        for (set, steps) in [
            (&includes[..], "_a.html includes _b.html includes _a.html"),
            (&imports[..], "_m.html imports _n.html imports _m.html"),
            (&calls[..], "_t.html::tree calls _t.html::tree"),
        ] {
            let refused = of(set).err().expect("refused");
            assert_eq!(refused.0[0].code, "template_cycle", "{refused}");
            assert!(refused.0[0].message.contains(steps), "{refused}");
        }
        let chain = [
            ("_base.html", "{% block main %}{% endblock %}"),
            ("_part.html", "part"),
            (
                "_t.html",
                "{% macro leaf() %}x{% endmacro %}{% macro two() %}{{ self::leaf() }}{{ self::leaf() }}{% endmacro %}",
            ),
            (
                "row.html",
                "{% import \"_t.html\" as t %}{% extends \"layout.html\" %}{% block main %}{{ t::two() }}{% include \"_part.html\" %}{% include \"_part.html\" %}{% endblock %}",
            ),
        ];
        assert!(of(&chain).is_ok(), "{:?}", of(&chain).err());
    }

    #[test]
    fn capdir_s_own_templates_pass_their_gate() {
        let t = Templates::builtin();
        assert!(t.is_builtin());
        assert!(t.added().is_empty());
        let diags = super::lint::check(&t, &|name: &str| {
            std::path::PathBuf::from("templates").join(name)
        });
        assert!(diags.is_empty(), "{diags:?}");
    }
}
