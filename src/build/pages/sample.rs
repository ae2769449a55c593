//! A sample of every page, each field there (options given, lists not empty): what the gate
//! walks a catalogue's templates with, and renders them with, before a build uses them.

use super::set::Templates;
use super::{
    BoundCredential, Category, CategoryPage, Common, CredentialsPage, Frame, IndexPage, Links,
    Listing, PageError, ReceiptHtml, Refused, RowPage, SearchPage, SiteMeta, TombstonePage,
};
use crate::build::contract::{Argument, BoundTo, Contract, HistoryLine, Tombstone};
use crate::build::snapshot::{BuildInfo, Counts};
use crate::row::binding::Bindings;
use serde::Serialize;
use serde_json::{Value, json};

/// The fields of a receipt its page reads; a receipt without one shows nothing there.
pub const RECEIPT_FIELDS: &[&str] = &[
    "id",
    "seq",
    "key",
    "status",
    "error_code",
    "actor",
    "runner",
    "started_at",
    "finished_at",
    "cost_usd",
    "trace_id",
    "catalogue_commit",
    "repairs",
    "repaired_by",
    "parent",
    "children",
    "input",
    "output",
    "input_sha256",
    "output_sha256",
    "contract_sha256",
    "prev_hash",
    "hash",
];

fn value(page: &impl Serialize) -> Value {
    serde_json::to_value(page).unwrap_or(Value::Null)
}

fn history_line() -> HistoryLine {
    HistoryLine {
        sha: "0123456789abcdef0123456789abcdef01234567".into(),
        short: "0123456789".into(),
        date: "2026-01-02T03:04:05Z".into(),
        author: "A. Contributor".into(),
        subject: "Add SAMPLE".into(),
        kind: "created",
        url: Some("https://example.com/commit/0123456789abcdef".into()),
    }
}

/// A contract with every field there.
fn contract() -> Contract {
    let text = "key: SAMPLE\ntype: http\ntarget: \"GET https://api.example.com/items/$1\"\nauth: bearer:SAMPLE_TOKEN\ncategory: items\ncontent: |\n  # WHAT: Fetches one item.\n  # WHEN_TO_USE: When an item is named by id.\n  # ARGS: $1=id\n  # EX: 42\n  # OUTPUT: JSON\n";
    let row = crate::row::parse_row(std::path::Path::new("SAMPLE.yaml"), text.as_bytes()).row;
    let urls = crate::row::urls::Urls::new("https://dispatcher.example.com");
    let mut c = match row {
        Some(row) => Contract::new(&row, &[], &urls, "sample", &Bindings::default()),
        None => unreachable!("the sample row parses"),
    };
    let text = |s: &str| s.to_string();
    c.arguments = vec![Argument {
        position: 1,
        name: text("id"),
        kind: text("string"),
        required: true,
        description: text("The item's id."),
    }];
    c.input_schema = Some(json!({"type": "object"}));
    c.examples = vec![text("42")];
    c.includes = vec![text("OTHER")];
    c.steps = vec![text("OTHER")];
    c.may_invoke = vec![text("`OTHER`")];
    c.troubleshooting = vec![text("`ERR:http:404`: no such item.")];
    c.notes = vec![text("A note.")];
    c.created_at = Some(text("2026-01-02T03:04:05Z"));
    c.updated_at = Some(text("2026-01-02T03:04:05Z"));
    c.history = vec![history_line()];
    c.credential_bindings = vec![BoundTo {
        env: text("SAMPLE_TOKEN"),
        bound: true,
        origins: vec![text("https://api.example.com/")],
        methods: vec![text("GET")],
        refused: Some("row_not_bound"),
    }];
    for url in [
        &mut c.run_now_url,
        &mut c.contract_url,
        &mut c.invoke_url,
        &mut c.receipt_url,
        &mut c.confirm_url,
    ] {
        url.get_or_insert_with(|| text("https://dispatcher.example.com/"));
    }
    c
}

fn tombstone() -> Tombstone {
    Tombstone {
        key: "GONE".into(),
        removed_at: "2026-01-02T03:04:05Z".into(),
        removed_by: "0123456789abcdef0123456789abcdef01234567".into(),
        removed_subject: "Remove GONE".into(),
        replaced_by: Some("SAMPLE".into()),
        history: vec![history_line()],
    }
}

fn receipt() -> Value {
    let mut r = serde_json::Map::new();
    for name in RECEIPT_FIELDS {
        r.insert(name.to_string(), json!(format!("sample {name}")));
    }
    r["seq"] = json!(1);
    r["cost_usd"] = json!(0.0015);
    r["status"] = json!("OK");
    r["repaired_by"] = json!(["inv_a"]);
    r["children"] =
        json!([{"id": "inv_c", "key": "OTHER", "status": "OK", "error_code": "", "children": []}]);
    Value::Object(r)
}

/// What the sample pages are made of.
struct Data {
    counts: Counts,
    info: BuildInfo,
    contract: Contract,
    tombstone: Tombstone,
    listing: Listing,
    receipt: Value,
}

impl Data {
    fn new() -> Data {
        let counts = Counts::of([]);
        let contract = contract();
        Data {
            info: BuildInfo {
                commit: "0123456789abcdef0123456789abcdef01234567".into(),
                date: "2026-01-02T03:04:05Z".into(),
                capdir_version: env!("CARGO_PKG_VERSION").into(),
                history_partial: false,
                counts: counts.clone(),
            },
            counts,
            listing: Listing::of(&contract),
            contract,
            tombstone: tombstone(),
            receipt: receipt(),
        }
    }

    fn common<'a>(&'a self, templates: &'a Templates) -> Common<'a> {
        Common {
            site: SiteMeta::default_for(&self.counts),
            counts: &self.counts,
            build: &self.info,
            repo_url: Some("https://example.com/repo".into()),
            dispatcher: Some("https://dispatcher.example.com".into()),
            templates,
        }
    }
}

/// Each page template with a sample of its page: capdir's, and those the catalogue adds
/// (which are rendered with the index's page).
pub(super) fn pages(t: &Templates) -> Vec<(String, Value)> {
    let data = Data::new();
    let common = data.common(t);
    let categories = [Category {
        name: "items".into(),
        rows: vec![&data.listing],
    }];
    let index = value(&IndexPage {
        f: Frame::of(&common, ""),
        counts: &data.counts,
        categories: &categories,
        added: vec![&data.listing],
        changed: vec![&data.listing],
        removed: vec![&data.tombstone],
        bound_credentials: 1,
    });
    let mut out = contract_pages(&common, &data);
    out.extend(list_pages(&common, &categories));
    out.push(("index.html", index.clone()));
    out.push(("receipt.html", receipt_page(&common, &data.receipt)));
    let mut out: Vec<(String, Value)> = out.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
    for added in t.added() {
        out.push((added.clone(), index.clone()));
    }
    out
}

/// A row's pages and a removed row's.
fn contract_pages(common: &Common, data: &Data) -> Vec<(&'static str, Value)> {
    let (c, t) = (&data.contract, &data.tombstone);
    let frame = Frame::contract(common);
    vec![
        (
            "row.html",
            value(&RowPage {
                f: &frame,
                c,
                u: Links::of(c),
                call: "curl …".into(),
                schema: "{}".into(),
                api: "https://dispatcher.example.com/",
                troubleshooting_html: vec!["<code>ERR</code>".into()],
                may_invoke_html: "<code>OTHER</code>".into(),
            }),
        ),
        (
            "tombstone.html",
            value(&TombstonePage {
                f: Frame::contract(common),
                t,
                removed_url: Some("https://example.com/commit/0123"),
            }),
        ),
    ]
}

/// The pages that list rows: a category's, the search page, the credentials page.
fn list_pages(common: &Common, categories: &[Category]) -> Vec<(&'static str, Value)> {
    let methods = vec!["GET".to_string()];
    let keys = vec!["SAMPLE".to_string()];
    vec![
        (
            "category.html",
            value(&CategoryPage {
                f: &Frame::counted(common, "../"),
                category: &categories[0],
                all_categories: &["items", "other"],
            }),
        ),
        (
            "search.html",
            value(&SearchPage {
                f: Frame::of(common, ""),
                categories,
            }),
        ),
        (
            "credentials.html",
            value(&CredentialsPage {
                f: Frame::of(common, ""),
                credentials: vec![BoundCredential {
                    env: "SAMPLE_TOKEN",
                    origins: vec!["https://api.example.com/".into()],
                    methods: &methods,
                    keys: &keys,
                    categories: &keys,
                    rows: vec!["SAMPLE"],
                }],
                refused: vec![Refused {
                    env: "OTHER_TOKEN".into(),
                    code: "unbound_credential",
                    rows: vec!["OTHER"],
                }],
            }),
        ),
    ]
}

fn receipt_page(common: &Common, receipt: &Value) -> Value {
    value(&ReceiptHtml {
        f: Frame::of(common, "/"),
        id: "inv_sample",
        r: Some(receipt),
        full: true,
        error: Some(&PageError {
            code: "unknown_receipt",
            message: "no such receipt",
            how_to_fix: "check the id",
        }),
    })
}
