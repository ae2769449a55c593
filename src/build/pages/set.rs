//! The templates a build renders with: capdir's own, embedded in the binary, each replaced
//! by the file of the same name in the catalogue's `templates/` folder when it has one, and
//! new pages added from it. Rendered with tera at run time, so a site owner restyles their
//! catalogue without recompiling capdir.

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
pub(super) type Files = BTreeMap<String, Vec<u8>>;

/// The templates of one build, parsed.
pub struct Templates {
    pub(super) tera: Tera,
    /// Where the catalogue's own templates were read from; none: capdir's alone.
    pub dir: Option<PathBuf>,
    /// The catalogue's files that differ from capdir's (or are new), by name
    /// (`row.html`, `static/logo.svg`).
    pub(super) overrides: Files,
    /// Pages the catalogue adds (`about.html`), each rendered to the site's root.
    pub(super) added: Vec<String>,
    /// Every template's source, by name, for diagnostics.
    pub(super) sources: HashMap<String, String>,
}

/// Why a catalogue's templates cannot be used: every problem, each with file and line.
#[derive(Debug, thiserror::Error)]
#[error("{}", render(.0))]
pub struct TemplateErrors(pub Vec<Diagnostic>);

fn render(diags: &[Diagnostic]) -> String {
    diags.iter().map(Diagnostic::render_text).collect()
}

impl Templates {
    /// Render template `name` with `page` as its context.
    pub fn render(&self, name: &str, page: &impl Serialize) -> Result<String> {
        let context = tera::Context::from_serialize(page)
            .with_context(|| format!("making the context of {name}"))?;
        self.tera
            .render(name, &context)
            .map_err(|e| anyhow::anyhow!("rendering {name}: {}", chain(&e)))
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

/// tera as the pages use it: HTML escaped in `.html` templates with capdir's escaper,
/// capdir's filters, and no reading of the environment.
pub(super) fn engine() -> Tera {
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

/// An error and its causes, one after the other.
pub(super) fn chain(e: &tera::Error) -> String {
    use std::error::Error as _;
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
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
        let text = super::chain(&err);
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
        let diags = crate::build::pages::lint::check(&t, &|name: &str| {
            std::path::PathBuf::from("templates").join(name)
        });
        assert!(diags.is_empty(), "{diags:?}");
    }
}
