//! The static site: contracts in three formats, index and category pages, search in the
//! browser, tombstones, and the machine projections (registry, counts, MCP tools, llms.txt,
//! sitemap). Everything is rendered from the build's rows with embedded tera templates, so
//! the binary needs no files beside it, and the site needs no server.

use crate::contract::{Contract, Tombstone, Urls};
use crate::projection;
use crate::row::Row;
use crate::snapshot::{BuildInfo, Counts};
use anyhow::{Context as _, Result};
use pulldown_cmark::{Event, Options, Parser, html};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use tera::Tera;

/// The templates, compiled into the binary.
pub fn tera() -> Result<Tera> {
    let mut t = Tera::default();
    t.add_raw_templates(vec![
        ("contract.md", include_str!("../templates/contract.md")),
        ("tombstone.md", include_str!("../templates/tombstone.md")),
        ("layout.html", include_str!("../templates/layout.html")),
        ("row.html", include_str!("../templates/row.html")),
        ("index.html", include_str!("../templates/index.html")),
        ("category.html", include_str!("../templates/category.html")),
        ("search.html", include_str!("../templates/search.html")),
    ])
    .context("compiling templates")?;
    t.autoescape_on(vec![".html"]);
    Ok(t)
}

const STYLE: &str = include_str!("../templates/static/style.css");
const SEARCH_JS: &str = include_str!("../templates/static/search.js");

/// Markdown to HTML. Raw HTML in the source is shown as text, never passed through: row
/// text comes from contributors and must not inject markup into the site.
pub fn markdown_to_html(md: &str) -> String {
    let parser = Parser::new_ext(md, Options::ENABLE_TABLES).map(|e| match e {
        Event::Html(s) | Event::InlineHtml(s) => Event::Text(s),
        other => other,
    });
    let mut out = String::with_capacity(md.len() * 2);
    html::push_html(&mut out, parser);
    out
}

/// What every page's layout needs.
#[derive(Serialize)]
pub struct Common<'a> {
    pub site: SiteMeta,
    pub counts: &'a Counts,
    pub build: &'a BuildInfo,
}

#[derive(Serialize, Clone)]
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

fn context(common: &Common, root: &str) -> Result<tera::Context> {
    let mut ctx = tera::Context::from_serialize(common)?;
    ctx.insert("root", root);
    Ok(ctx)
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// The three contract files of one row.
pub fn render_contract(
    tera: &Tera,
    common: &Common,
    c: &Contract,
) -> Result<(String, String, String)> {
    let mut md_ctx = tera::Context::new();
    md_ctx.insert("c", c);
    let md = tera.render("contract.md", &md_ctx)?;
    let json = serde_json::to_string_pretty(c)? + "\n";
    let mut ctx = context(common, "../")?;
    ctx.insert("key", &c.key);
    ctx.insert("category", &c.category);
    ctx.insert("body", &markdown_to_html(&md));
    let page = tera.render("row.html", &ctx)?;
    Ok((md, json, page))
}

/// Write `k/KEY.{md,json,html}` for every contract, on all cores.
pub fn write_contracts(
    out: &Path,
    tera: &Tera,
    common: &Common,
    contracts: &[Contract],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    let dir = out.join("k");
    std::fs::create_dir_all(&dir)?;
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    let chunk = contracts.len().div_ceil(workers).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = contracts
            .chunks(chunk)
            .map(|part| {
                let dir = &dir;
                s.spawn(move || -> Result<()> {
                    for c in part {
                        let (md, json, page) = render_contract(tera, common, c)
                            .with_context(|| format!("rendering the contract of {}", c.key))?;
                        write(&dir.join(format!("{}.md", c.key)), md)?;
                        write(&dir.join(format!("{}.json", c.key)), json)?;
                        write(&dir.join(format!("{}.html", c.key)), page)?;
                        progress(1);
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a page worker panicked")))
        })
    })
}

/// Write a tombstone's three files.
pub fn write_tombstone(out: &Path, tera: &Tera, common: &Common, t: &Tombstone) -> Result<()> {
    let mut md_ctx = tera::Context::new();
    md_ctx.insert("t", t);
    let md = tera.render("tombstone.md", &md_ctx)?;
    let mut ctx = context(common, "../")?;
    ctx.insert("key", &t.key);
    ctx.insert("category", "");
    ctx.insert("body", &markdown_to_html(&md));
    let dir = out.join("k");
    std::fs::create_dir_all(&dir)?;
    let mut json = serde_json::to_value(t)?;
    json["removed"] = json!(true);
    write(&dir.join(format!("{}.md", t.key)), md)?;
    write(
        &dir.join(format!("{}.json", t.key)),
        serde_json::to_string_pretty(&json)? + "\n",
    )?;
    write(
        &dir.join(format!("{}.html", t.key)),
        tera.render("row.html", &ctx)?,
    )
}

#[derive(Serialize)]
struct RowSummary<'a> {
    key: &'a str,
    what: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    risk: &'a str,
    updated_at: &'a str,
}

#[derive(Serialize)]
struct Category<'a> {
    name: String,
    rows: Vec<RowSummary<'a>>,
}

fn summary(c: &Contract) -> RowSummary<'_> {
    RowSummary {
        key: &c.key,
        what: &c.what,
        kind: c.kind,
        risk: c.risk,
        updated_at: c.updated_at.as_deref().unwrap_or(""),
    }
}

/// Index, category pages, the no-JavaScript search page, assets and the browser's index.
pub fn write_pages(
    out: &Path,
    tera: &Tera,
    common: &Common,
    rows: &[Row],
    contracts: &[Contract],
) -> Result<()> {
    let mut by_cat: BTreeMap<String, Vec<RowSummary>> = BTreeMap::new();
    for c in contracts {
        let name = if c.category.is_empty() {
            "uncategorized".to_string()
        } else {
            c.category.clone()
        };
        by_cat.entry(name).or_default().push(summary(c));
    }
    let mut recent: Vec<RowSummary> = contracts.iter().map(summary).collect();
    recent.sort_by(|a, b| b.updated_at.cmp(a.updated_at).then(a.key.cmp(b.key)));
    recent.truncate(12);
    let categories: Vec<Category> = by_cat
        .into_iter()
        .map(|(name, rows)| Category { name, rows })
        .collect();

    let mut ctx = context(common, "")?;
    ctx.insert("categories", &categories);
    ctx.insert("recent", &recent);
    write(&out.join("index.html"), tera.render("index.html", &ctx)?)?;

    let all: Vec<RowSummary> = contracts.iter().map(summary).collect();
    let mut ctx = context(common, "")?;
    ctx.insert("rows", &all);
    write(&out.join("search.html"), tera.render("search.html", &ctx)?)?;

    std::fs::create_dir_all(out.join("c"))?;
    for cat in &categories {
        let mut ctx = context(common, "../")?;
        ctx.insert("category", cat);
        write(
            &out.join("c").join(format!("{}.html", cat.name)),
            tera.render("category.html", &ctx)?,
        )?;
    }
    std::fs::create_dir_all(out.join("static"))?;
    write(&out.join("static/style.css"), STYLE)?;
    write(&out.join("static/search.js"), SEARCH_JS)?;

    // The browser's index: key, category, what, and the words of when-to-use and asks.
    let index: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            let mut extra = r.doc().when_to_use.clone().unwrap_or_default();
            for a in &r.asks {
                extra.push(' ');
                extra.push_str(a);
            }
            [
                r.key.clone(),
                r.category.clone(),
                r.what().to_string(),
                extra,
            ]
        })
        .collect();
    write(
        &out.join("search.json"),
        serde_json::to_string(&json!({"v": 1, "rows": index}))?,
    )?;
    Ok(())
}

/// registry.json, counts.json, mcp/tools.json, llms.txt and sitemap.xml.
pub fn write_projections(
    out: &Path,
    rows: &[Row],
    common: &Common,
    urls: &Urls,
    categories: &[String],
) -> Result<()> {
    let registry: Vec<_> = rows
        .iter()
        .filter(|r| !r.is_test_shaped())
        .map(projection::registry_entry)
        .collect();
    write(
        &out.join("registry.json"),
        serde_json::to_string(&json!({"commit": common.build.commit, "rows": registry}))? + "\n",
    )?;
    write(
        &out.join("counts.json"),
        serde_json::to_string_pretty(common.counts)? + "\n",
    )?;
    std::fs::create_dir_all(out.join("mcp"))?;
    let tools: Vec<_> = rows
        .iter()
        .filter(|r| r.planner_visible)
        .map(projection::mcp_tool)
        .collect();
    write(
        &out.join("mcp/tools.json"),
        serde_json::to_string_pretty(&json!({"tools": tools}))? + "\n",
    )?;

    let mut llms = format!("# {}\n\n> {}\n\n", common.site.title, common.site.summary);
    llms.push_str(&format!(
        "Ask in plain words at {base}/api/dispatch?ask=…, read one contract, invoke by key with POST {base}/api/dispatch. Read the contract; don't infer a row from memory.\n",
        base = urls.base
    ));
    let mut by_cat: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_cat
            .entry(if r.category.is_empty() {
                "uncategorized"
            } else {
                &r.category
            })
            .or_default()
            .push(r);
    }
    for (cat, rs) in by_cat {
        llms.push_str(&format!("\n## {cat}\n\n"));
        for r in rs {
            llms.push_str(&projection::llms_line(r, &urls.base));
            llms.push('\n');
        }
    }
    write(&out.join("llms.txt"), llms)?;

    let mut sitemap = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
    );
    let mut url = |path: &str| {
        sitemap.push_str(&format!(
            "  <url><loc>{}/{}</loc></url>\n",
            urls.base,
            xml_escape(path)
        ))
    };
    url("index.html");
    for c in categories {
        url(&format!("c/{c}.html"));
    }
    for r in rows {
        url(&format!("k/{}.html", r.key));
    }
    sitemap.push_str("</urlset>\n");
    write(&out.join("sitemap.xml"), sitemap)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
