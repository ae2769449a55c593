//! The site's pages: tera templates (`templates/`, embedded in the binary as defaults, each
//! overridable by the catalogue's own `templates/` folder: [`Templates`]) and the page each
//! is rendered with, a struct whose fields are what its template reads (listed for site
//! owners in the README). Text is escaped for HTML always: only what capdir itself rendered
//! from markdown (the fields ending in `_html`) is marked `safe`, and the gate refuses
//! `safe` on anything else.

mod graph;
mod lint;
mod load;
pub mod machine;
mod sample;
mod set;

pub use sample::RECEIPT_FIELDS;
pub use set::{ASSETS, FIXED, OVERRIDABLE, TemplateErrors, Templates, beside, escape_html};

use crate::build::contract::{Contract, Tombstone};
use crate::build::snapshot::{BuildInfo, Counts};
use crate::row::Row;
use crate::row::diag::Diagnostic;
use anyhow::Result;
use serde::Serialize;

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
#[derive(Clone, Copy, Serialize)]
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

/// A row's contract as a page (`k/KEY.html`).
#[derive(Serialize)]
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

/// A removed row as a page.
#[derive(Serialize)]
pub struct TombstonePage<'a> {
    pub f: Frame<'a>,
    pub t: &'a Tombstone,
    /// The page of the commit that removed it, when the repository's address is known.
    pub removed_url: Option<&'a str>,
}

/// `index.html`.
#[derive(Serialize)]
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
#[derive(Serialize)]
pub struct CategoryPage<'a> {
    pub f: &'a Frame<'a>,
    pub category: &'a Category<'a>,
    pub all_categories: &'a [&'a str],
}

/// `search.html`: every row by category, for a reader without JavaScript.
#[derive(Serialize)]
pub struct SearchPage<'a> {
    pub f: Frame<'a>,
    pub categories: &'a [Category<'a>],
}

/// `credentials.html`.
#[derive(Serialize)]
pub struct CredentialsPage<'a> {
    pub f: Frame<'a>,
    pub credentials: Vec<BoundCredential<'a>>,
    pub refused: Vec<Refused<'a>>,
}

/// The dispatcher's page of one receipt.
#[derive(Serialize)]
pub struct ReceiptHtml<'a> {
    pub f: Frame<'a>,
    pub id: &'a str,
    pub r: Option<&'a serde_json::Value>,
    pub full: bool,
    pub error: Option<&'a PageError<'a>>,
}

/// What the gate says of the templates a build of `catalogue` would use (`dir`, or the
/// folder beside it): nothing when they parse and read only fields their pages have.
pub fn check_templates(
    catalogue: &std::path::Path,
    dir: Option<&std::path::Path>,
) -> anyhow::Result<Vec<Diagnostic>> {
    match Templates::for_catalogue(catalogue, dir) {
        Ok(_) => Ok(Vec::new()),
        Err(e) => match e.downcast::<TemplateErrors>() {
            Ok(TemplateErrors(diags)) => Ok(diags),
            Err(e) => Err(e),
        },
    }
}

/// What every page's layout needs.
pub struct Common<'a> {
    pub site: SiteMeta,
    pub counts: &'a Counts,
    pub build: &'a BuildInfo,
    /// The repository's web address, for commit links.
    pub repo_url: Option<String>,
    /// The dispatcher's public address; none when the catalogue has no public dispatcher.
    pub dispatcher: Option<String>,
    /// What the pages are rendered with.
    pub templates: &'a Templates,
}

#[derive(Clone)]
pub struct SiteMeta {
    pub title: String,
    pub summary: String,
}

impl SiteMeta {
    pub fn default_for(counts: &Counts) -> SiteMeta {
        SiteMeta {
            title: "capdir catalogue".into(),
            summary: format!(
                "{} capabilities an agent can ask for in plain words, read as a small contract, and invoke by key with a receipt. Kept as data in Git.",
                counts.enabled.value
            ),
        }
    }
}

/// What the index, category and search pages say of one row: read from its contract in a
/// full build, from the row and its history in an incremental one.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listing {
    pub key: String,
    pub category: String,
    pub what: String,
    pub kind: &'static str,
    pub risk: &'static str,
    pub created_at: String,
    pub updated_at: String,
    /// The subject of the last commit that changed the row.
    pub subject: String,
    /// How many commits changed it.
    pub changes: usize,
}

impl Listing {
    pub fn of(c: &Contract) -> Listing {
        Listing {
            key: c.key.clone(),
            category: c.category.clone(),
            what: c.what.clone(),
            kind: c.kind,
            risk: c.risk,
            created_at: c.created_at.clone().unwrap_or_default(),
            updated_at: c.updated_at.clone().unwrap_or_default(),
            subject: c
                .history
                .first()
                .map(|h| h.subject.clone())
                .unwrap_or_default(),
            changes: c.history.len(),
        }
    }

    /// The same as [`Listing::of`] the row's contract gives, without making the contract.
    pub fn new(row: &Row, history: &[crate::build::history::Change]) -> Listing {
        Listing {
            key: row.key.clone(),
            category: row.category.clone(),
            what: row.doc().what.clone().unwrap_or_default(),
            kind: row.kind.as_str(),
            risk: if row.sensitive { "high" } else { "low" },
            created_at: history
                .last()
                .map(|c| c.commit.date.clone())
                .unwrap_or_default(),
            updated_at: history
                .first()
                .map(|c| c.commit.date.clone())
                .unwrap_or_default(),
            subject: history
                .first()
                .map(|c| c.commit.subject.clone())
                .unwrap_or_default(),
            changes: history.len(),
        }
    }
}

/// A category and its rows, in listing order.
#[derive(serde::Serialize)]
pub struct Category<'a> {
    pub name: String,
    pub rows: Vec<&'a Listing>,
}

/// One bound credential on the credentials page.
#[derive(serde::Serialize)]
pub struct BoundCredential<'a> {
    pub env: &'a str,
    pub origins: Vec<String>,
    pub methods: &'a [String],
    /// The rows the binding lets use it (none: any row).
    pub keys: &'a [String],
    pub categories: &'a [String],
    /// The enabled rows that name it and may use it.
    pub rows: Vec<&'a str>,
}

/// A credential rows name that no binding lets them use, and those rows.
#[derive(serde::Serialize)]
pub struct Refused<'a> {
    pub env: String,
    pub code: &'static str,
    pub rows: Vec<&'a str>,
}

/// What the dispatcher's receipt page shows.
pub struct ReceiptPage<'a> {
    pub id: &'a str,
    /// The receipt's fields: all of them for `full`, else the keyless confirmation's.
    pub receipt: Option<serde_json::Value>,
    pub full: bool,
    /// Why the full receipt is not shown, when a credential was refused or nothing was found.
    pub error: Option<PageError<'a>>,
}

/// An error on a page, with the same code, message and fix as the JSON answer.
#[derive(serde::Serialize)]
pub struct PageError<'a> {
    pub code: &'a str,
    pub message: &'a str,
    pub how_to_fix: &'a str,
}

/// The receipt page the dispatcher serves at `/receipt/inv_…`, in the site's layout.
/// Rendered with capdir's own templates (parsed once): the receipt page is fixed, and the
/// dispatcher reads no templates from the site it serves.
pub fn receipt_page(info: &BuildInfo, page: &ReceiptPage) -> Result<String> {
    static BUILTIN: std::sync::OnceLock<Templates> = std::sync::OnceLock::new();
    let templates = BUILTIN.get_or_init(Templates::builtin);
    let common = Common {
        site: SiteMeta::default_for(&info.counts),
        counts: &info.counts,
        build: info,
        repo_url: None,
        dispatcher: None,
        templates,
    };
    // A field the receipt lacks (a keyless confirmation has fewer) shows as nothing.
    let receipt = page.receipt.clone().map(|mut r| {
        if let Some(fields) = r.as_object_mut() {
            for name in RECEIPT_FIELDS {
                fields
                    .entry(name.to_string())
                    .or_insert(serde_json::Value::Null);
            }
        }
        r
    });
    let html = ReceiptHtml {
        f: Frame::of(&common, "/"),
        id: page.id,
        r: receipt.as_ref(),
        full: page.full,
        error: page.error.as_ref(),
    };
    templates.render("receipt.html", &html)
}
