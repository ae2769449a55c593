//! The site's pages as askama templates (`templates/`), compiled into the binary: each
//! page is a struct whose fields are what its template reads, checked when capdir is
//! compiled. Text is escaped for HTML by [`HtmlEntities`] (named in `askama.toml`), always:
//! only what capdir itself rendered from markdown is marked `|safe`.

use crate::build::contract::{Contract, Tombstone, first_ten};
use crate::build::site::{BoundCredential, Category, Common, Listing, PageError, Refused};
use crate::build::snapshot::Counts;
use serde::Serialize;
use std::fmt::{self, Write};

/// The template files, hashed into every row's page inputs: a row whose contract is
/// unchanged keeps its pages only while the templates they were made with are the same.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("contract.md", include_str!("../../templates/contract.md")),
    ("tombstone.md", include_str!("../../templates/tombstone.md")),
    ("layout.html", include_str!("../../templates/layout.html")),
    ("history.html", include_str!("../../templates/history.html")),
    ("row.html", include_str!("../../templates/row.html")),
    (
        "tombstone.html",
        include_str!("../../templates/tombstone.html"),
    ),
    ("index.html", include_str!("../../templates/index.html")),
    (
        "category.html",
        include_str!("../../templates/category.html"),
    ),
    ("search.html", include_str!("../../templates/search.html")),
    ("receipt.html", include_str!("../../templates/receipt.html")),
    (
        "credentials.html",
        include_str!("../../templates/credentials.html"),
    ),
];

/// HTML escaping for text and attribute values: `& < > " '` as the entities the site has
/// always written (`&amp; &lt; &gt; &quot; &#39;`), where askama's own escaper writes numeric
/// ones (`&#60;`); `/` is left alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct HtmlEntities;

impl askama::filters::Escaper for HtmlEntities {
    fn write_escaped_str<W: Write>(&self, mut dest: W, s: &str) -> fmt::Result {
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
            dest.write_str(&s[plain..i])?;
            dest.write_str(entity)?;
            plain = i + 1;
        }
        dest.write_str(&s[plain..])
    }
}

/// `x.short()` in a template: the day of an RFC 3339 time, or an abbreviated commit.
pub trait Short {
    fn short(&self) -> &str;
}

impl Short for str {
    fn short(&self) -> &str {
        first_ten(self)
    }
}

/// What the layout shows around every page.
#[derive(Serialize)]
pub struct Frame<'a> {
    /// The way back to the site's root from the page (`""`, `"../"`, `"/"`).
    pub root: &'a str,
    pub title: &'a str,
    pub summary: &'a str,
    /// How many capabilities the search box offers; none on a row's pages.
    pub enabled: Option<usize>,
    /// The commit the site was built from; none on pages that must not change with every
    /// commit (a row's, a category's): they say the index names it.
    pub built: Option<Built<'a>>,
    pub version: &'a str,
    /// The repository's web address, for commit links (`""`: none).
    pub repo_url: &'a str,
    /// The dispatcher's public address (`""`: the catalogue has none).
    pub dispatcher: &'a str,
}

#[derive(Serialize)]
pub struct Built<'a> {
    /// Empty outside Git.
    pub commit: &'a str,
    pub date: &'a str,
}

impl<'a> Frame<'a> {
    /// The frame of a page that names the catalogue's commit and counts.
    pub fn of(common: &'a Common, root: &'a str) -> Frame<'a> {
        Frame {
            built: Some(Built {
                commit: &common.build.commit,
                date: &common.build.date,
            }),
            ..Frame::counted(common, root)
        }
    }

    /// The frame of a page that names the counts but not the commit (a category's).
    pub fn counted(common: &'a Common, root: &'a str) -> Frame<'a> {
        Frame {
            root,
            title: &common.site.title,
            summary: &common.site.summary,
            enabled: Some(common.counts.enabled.value),
            built: None,
            version: &common.build.capdir_version,
            repo_url: common.repo_url.as_deref().unwrap_or_default(),
            dispatcher: common.dispatcher.as_deref().unwrap_or_default(),
        }
    }

    /// The frame of a row's pages and a tombstone's. It holds nothing of the catalogue as a
    /// whole: not the commit, and not the counts (the summary and the search box's
    /// placeholder say none here). So a row's pages change only when the row or its history
    /// does: adding or removing another row rewrites no other row's pages, which is what
    /// lets an incremental rebuild touch the pages of the rows it changed and no others.
    pub fn contract(common: &'a Common) -> Frame<'a> {
        Frame {
            summary: SUMMARY,
            enabled: None,
            ..Frame::counted(common, "../")
        }
    }
}

/// What the catalogue is, without its counts (the index page says how many).
const SUMMARY: &str = "Capabilities an agent can ask for in plain words, read as a small contract, and invoke by key with a receipt. Kept as data in Git.";

/// A contract's addresses on the public dispatcher, each `""` when it has none.
#[derive(Clone, Copy)]
pub struct Links<'a> {
    pub run_now: &'a str,
    pub contract: &'a str,
    pub invoke: &'a str,
    pub receipt: &'a str,
    pub confirm: &'a str,
}

impl<'a> Links<'a> {
    pub fn of(c: &'a Contract) -> Links<'a> {
        let link = |u: &'a Option<String>| u.as_deref().unwrap_or_default();
        Links {
            run_now: link(&c.run_now_url),
            contract: link(&c.contract_url),
            invoke: link(&c.invoke_url),
            receipt: link(&c.receipt_url),
            confirm: link(&c.confirm_url),
        }
    }
}

/// A row's contract as markdown (`k/KEY.md`).
#[derive(askama::Template)]
#[template(path = "contract.md", escape = "none")]
pub struct ContractMarkdown<'a> {
    pub c: &'a Contract,
    pub u: Links<'a>,
}

/// A row's contract as a page (`k/KEY.html`).
#[derive(askama::Template)]
#[template(path = "row.html")]
pub struct RowPage<'a> {
    pub f: &'a Frame<'a>,
    pub c: &'a Contract,
    pub u: Links<'a>,
    /// The example call, as a reader copies it.
    pub call: String,
    /// The input schema, pretty-printed (`""`: none).
    pub schema: String,
    /// Where the page's form sends a call: the public dispatcher's root, or the site's.
    pub api: &'a str,
    /// Troubleshooting lines, rendered from markdown.
    pub troubleshooting_html: Vec<String>,
    /// The rows it may invoke, rendered from markdown.
    pub may_invoke_html: String,
}

/// A removed row as markdown.
#[derive(askama::Template)]
#[template(path = "tombstone.md", escape = "none")]
pub struct TombstoneMarkdown<'a> {
    pub t: &'a Tombstone,
}

/// A removed row as a page.
#[derive(askama::Template)]
#[template(path = "tombstone.html")]
pub struct TombstonePage<'a> {
    pub f: Frame<'a>,
    pub t: &'a Tombstone,
    /// The page of the commit that removed it, when the repository's address is known.
    pub removed_url: Option<&'a str>,
}

/// `index.html`.
#[derive(askama::Template)]
#[template(path = "index.html")]
pub struct IndexPage<'a> {
    pub f: Frame<'a>,
    pub counts: &'a Counts,
    pub categories: &'a [Category<'a>],
    pub added: Vec<&'a Listing>,
    pub changed: Vec<&'a Listing>,
    pub removed: Vec<&'a Tombstone>,
    pub bound_credentials: usize,
}

/// `c/NAME.html`.
#[derive(askama::Template)]
#[template(path = "category.html")]
pub struct CategoryPage<'a> {
    pub f: &'a Frame<'a>,
    pub category: &'a Category<'a>,
    pub all_categories: &'a [&'a str],
}

/// `search.html`: every row by category, for a reader without JavaScript.
#[derive(askama::Template)]
#[template(path = "search.html")]
pub struct SearchPage<'a> {
    pub f: Frame<'a>,
    pub categories: &'a [Category<'a>],
}

/// `credentials.html`.
#[derive(askama::Template)]
#[template(path = "credentials.html")]
pub struct CredentialsPage<'a> {
    pub f: Frame<'a>,
    pub credentials: Vec<BoundCredential<'a>>,
    pub refused: Vec<Refused<'a>>,
}

/// The dispatcher's page of one receipt.
#[derive(askama::Template)]
#[template(path = "receipt.html")]
pub struct ReceiptHtml<'a> {
    pub f: Frame<'a>,
    pub id: &'a str,
    pub r: Option<Shown<'a>>,
    pub full: bool,
    pub error: Option<&'a PageError<'a>>,
}

/// A JSON value as a page shows it (the receipt's fields): a string as itself, a number as
/// its digits, null or absent as nothing.
#[derive(Clone, Copy)]
pub struct Shown<'a>(pub &'a serde_json::Value);

static NULL: serde_json::Value = serde_json::Value::Null;

impl<'a> Shown<'a> {
    /// Field `name` of an object; nothing when there is none.
    pub fn get(&self, name: &str) -> Shown<'a> {
        Shown(self.0.get(name).unwrap_or(&NULL))
    }

    /// Whether the page shows it at all: not null, false, zero or empty.
    pub fn truthy(&self) -> bool {
        use serde_json::Value;
        match self.0 {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
        }
    }

    /// The elements of an array; none for anything else.
    pub fn items(&self) -> Vec<Shown<'a>> {
        self.0
            .as_array()
            .map(|a| a.iter().map(Shown).collect())
            .unwrap_or_default()
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use serde_json::Value;
        match self.0 {
            Value::Null => Ok(()),
            Value::String(s) => f.write_str(s),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => write!(f, "{i}"),
                (_, Some(u), _) => write!(f, "{u}"),
                (_, _, Some(x)) => write!(f, "{x}"),
                _ => write!(f, "{n}"),
            },
            Value::Bool(b) => write!(f, "{b}"),
            Value::Array(a) => {
                f.write_char('[')?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", Shown(v))?;
                }
                f.write_char(']')
            }
            Value::Object(_) => f.write_str("[object]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HtmlEntities, Shown};
    use askama::filters::Escaper as _;
    use serde_json::json;

    /// `s` as the pages' escaper writes it.
    fn escape_html(s: &str) -> String {
        let mut out = String::new();
        HtmlEntities.write_escaped_str(&mut out, s).unwrap();
        out
    }

    #[test]
    fn escaping_covers_markup_and_quotes_and_keeps_slashes() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a> é/"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt; é/"
        );
        assert_eq!(escape_html("plain"), "plain");
    }

    /// A receipt's fields as the page shows them: strings as they are, numbers as their
    /// digits (a float's shortest form), nothing for null or an absent field, arrays as
    /// their elements; and shown at all only when not null, false, zero or empty.
    #[test]
    fn receipt_fields_show_as_text_and_nothing_for_null() {
        let r = json!({
            "key": "ECHO", "seq": 42, "cost_usd": 0.0015, "repairs": null, "ok": true,
            "repaired_by": ["inv_a", "inv_b"], "zero": 0, "none": 0.0, "empty": "",
            "children": [{"id": "inv_c"}], "nested": {"a": 1}, "no": []
        });
        let r = Shown(&r);
        let shown = |name: &str| r.get(name).to_string();
        assert_eq!(shown("key"), "ECHO");
        assert_eq!(shown("seq"), "42");
        assert_eq!(shown("cost_usd"), "0.0015");
        assert_eq!(shown("repairs"), "");
        assert_eq!(shown("absent"), "");
        assert_eq!(shown("ok"), "true");
        assert_eq!(shown("repaired_by"), "[inv_a, inv_b]");
        assert_eq!(shown("nested"), "[object]");
        let truthy: Vec<&str> = [
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
        ]
        .into_iter()
        .filter(|n| r.get(n).truthy())
        .collect();
        assert_eq!(
            truthy,
            [
                "key",
                "seq",
                "cost_usd",
                "ok",
                "repaired_by",
                "children",
                "nested"
            ]
        );
        let ids: Vec<String> = r
            .get("repaired_by")
            .items()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ids, ["inv_a", "inv_b"]);
        assert_eq!(r.get("children").items()[0].get("id").to_string(), "inv_c");
        assert!(r.get("key").items().is_empty(), "a string has no items");
    }
}
