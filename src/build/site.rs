//! The static site: contracts in three formats, index and category pages, search in the
//! browser, tombstones, and the machine projections (registry, counts, MCP tools, llms.txt,
//! sitemap). Everything is rendered from the build's rows with the build's [`Templates`]
//! (capdir's own, each overridable by the catalogue's `templates/` folder), and the site
//! needs no server.

use crate::build::contract::{Contract, Tombstone};
use crate::build::pages::{
    self, BoundCredential, Category, Common, Frame, Links, Listing, Refused, Templates,
};
use crate::build::{parts, projection};
use crate::row::Row;
use crate::row::binding::Bindings;
use crate::row::urls::Urls;
use anyhow::{Context as _, Result};
use pulldown_cmark::{Event, Options, Parser, html};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

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

/// One line of markdown (backticks, emphasis) as inline HTML, without the paragraph.
fn inline_markdown(md: &str) -> String {
    let html = markdown_to_html(md);
    let trimmed = html.trim_end();
    trimmed
        .strip_prefix("<p>")
        .and_then(|s| s.strip_suffix("</p>"))
        .unwrap_or(trimmed)
        .to_string()
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A string as one POSIX shell word in single quotes.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The example call a reader copies: curl against the dispatcher, the key from the
/// environment (never written into the page).
pub fn example_call(c: &Contract) -> String {
    // Without a public dispatcher, the call goes to one the reader runs (`capdir serve`).
    let url = c
        .invoke_url
        .as_deref()
        .unwrap_or("http://127.0.0.1:8080/api/dispatch");
    format!(
        "curl -sS {} \\\n  -H \"Authorization: Bearer $CAPDIR_OWNER_KEY\" \\\n  -H 'content-type: application/json' \\\n  -d {}",
        shell_quote(url),
        shell_quote(&c.example_request)
    )
}

/// Renders contracts one after another, in the frame every row's page shares.
struct Renderer<'f> {
    frame: &'f Frame<'f>,
    templates: &'f Templates,
    /// Where a page's form sends a call: the public dispatcher, or the site's own.
    api: String,
    /// Troubleshooting and credential lines as HTML: the same few lines recur on every row
    /// of a type, so each is converted once.
    inline: HashMap<String, String>,
}

/// Where a site keeps, per row, a digest of all its contract files were made from.
pub const PAGE_INPUTS: &str = ".page-inputs";
const PAGE_INPUTS_HEAD: &str =
    "# capdir page inputs 1: KEY, SHA-256 of the contract JSON and what the pages share\n";

/// The digests a previous site's contract files were made from, by key; none when it has
/// no list, or one of another format.
fn read_page_inputs(site: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(site.join(PAGE_INPUTS)).unwrap_or_default();
    let Some(body) = text.strip_prefix(PAGE_INPUTS_HEAD) else {
        return HashMap::new();
    };
    body.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, d)| (k.to_string(), d.to_string()))
        .collect()
}

/// Hard-link `KEY.md`, `.json` and `.html` from `old` into `dir`: all three, or none.
fn link_contract(old: &Path, dir: &Path, key: &str) -> bool {
    let names = ["md", "json", "html"].map(|ext| format!("{key}.{ext}"));
    for (i, name) in names.iter().enumerate() {
        if std::fs::hard_link(old.join(name), dir.join(name)).is_err() {
            // The new site must not keep a link it would later write through.
            for made in &names[..i] {
                let _ = std::fs::remove_file(dir.join(made));
            }
            return false;
        }
    }
    true
}

impl<'f> Renderer<'f> {
    fn new(frame: &'f Frame<'f>, templates: &'f Templates) -> Renderer<'f> {
        let api = match frame.dispatcher {
            "" => frame.root.to_string(),
            d => format!("{d}/"),
        };
        Renderer {
            frame,
            templates,
            api,
            inline: HashMap::new(),
        }
    }

    fn inline(&mut self, md: &str) -> String {
        if let Some(html) = self.inline.get(md) {
            return html.clone();
        }
        let html = inline_markdown(md);
        self.inline.insert(md.to_string(), html.clone());
        html
    }

    /// The markdown and HTML pages of contract `c`.
    fn contract(&mut self, c: &Contract) -> Result<(String, String)> {
        let troubleshooting_html = c.troubleshooting.iter().map(|t| self.inline(t)).collect();
        let may_invoke: Vec<String> = c.may_invoke.iter().map(|m| self.inline(m)).collect();
        let schema = match &c.input_schema {
            Some(s) => serde_json::to_string_pretty(s)?,
            None => String::new(),
        };
        let u = Links::of(c);
        let md = pages::machine::contract(c, u);
        let page = pages::RowPage {
            f: self.frame,
            c,
            u,
            call: example_call(c),
            schema,
            api: &self.api,
            troubleshooting_html,
            may_invoke_html: may_invoke.join("; "),
        };
        Ok((md, self.templates.render("row.html", &page)?))
    }
}

/// What [`write_contracts`] did: files hard-linked from the previous site rather than
/// written, rows whose inputs had not changed, linked without rendering, and the manifest
/// entry of every file it wrote, hashed from the bytes in hand (the manifest then reads
/// none of them back).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub linked: usize,
    pub unchanged_rows: usize,
    pub entries: Vec<super::manifest::Entry>,
}

/// Write `k/KEY.{md,json,html}` for every contract, on all cores.
///
/// Files that would be identical to those at the same place in `previous` (the site this
/// build replaces) are hard-linked to them instead of written: a rebuild after one row
/// changes creates no new inode for the other rows and writes none of their bytes, and
/// removing the old site then frees nothing those rows still use. A row whose inputs (its
/// contract JSON, the frame its pages share, the templates, capdir's version) have the
/// digest the previous site lists in [`PAGE_INPUTS`] is not even rendered; any other file
/// is linked only after comparing it with the old one.
pub fn write_contracts(
    out: &Path,
    previous: Option<&Path>,
    common: &Common,
    contracts: &[Contract],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Written> {
    let dir = out.join("k");
    std::fs::create_dir_all(&dir)?;
    let old_dir = previous.map(|p| p.join("k")).filter(|d| d.is_dir());
    let frame = Frame::contract(common);
    let writer = ContractWriter {
        old_inputs: old_dir
            .as_ref()
            .and(previous)
            .map(read_page_inputs)
            .unwrap_or_default(),
        shared: inputs_digest(&frame, common.templates)?,
        dir,
        old_dir,
        progress,
    };
    let workers = crate::cores().min(8);
    // Workers take the next batch as they finish one: a worker that shares its core with
    // another thread of the build does less, not the same share as the others.
    let batches: Vec<&[Contract]> = contracts.chunks(32).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let take = || batches.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers.min(batches.len()).max(1))
            .map(|_| {
                let (writer, take, frame) = (&writer, &take, &frame);
                s.spawn(move || -> Result<(Written, Vec<(String, String)>)> {
                    let mut renderer = Renderer::new(frame, common.templates);
                    let (mut done, mut inputs) = (Written::default(), Vec::new());
                    while let Some(batch) = take() {
                        for c in *batch {
                            let digest = writer.write(&mut renderer, c, &mut done)?;
                            inputs.push((c.key.clone(), digest));
                        }
                    }
                    Ok((done, inputs))
                })
            })
            .collect();
        let (mut all, mut inputs) = (Written::default(), Vec::with_capacity(contracts.len()));
        for h in handles {
            let (done, made) = h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a page worker panicked")))?;
            all.linked += done.linked;
            all.unchanged_rows += done.unchanged_rows;
            all.entries.extend(done.entries);
            inputs.extend(made);
        }
        inputs.sort_unstable();
        let mut list = String::from(PAGE_INPUTS_HEAD);
        for (key, digest) in inputs {
            list.push_str(&format!("{key} {digest}\n"));
        }
        write(&out.join(PAGE_INPUTS), list)?;
        Ok(all)
    })
}

/// Render contract `c`'s three files into `out/k`, each replaced whole (written beside, then
/// renamed over the old one): how an incremental rebuild changes one row's pages in a site
/// that may be served meanwhile. Returns the digest [`PAGE_INPUTS`] lists for the row.
pub fn replace_contract(out: &Path, common: &Common, c: &Contract) -> Result<String> {
    let frame = Frame::contract(common);
    let json = serde_json::to_string_pretty(c)? + "\n";
    let digest = hex::encode(
        inputs_digest(&frame, common.templates)?
            .chain_update(json.as_bytes())
            .finalize(),
    );
    let mut renderer = Renderer::new(&frame, common.templates);
    let (md, html) = renderer
        .contract(c)
        .with_context(|| format!("rendering the contract of {}", c.key))?;
    let dir = out.join("k");
    std::fs::create_dir_all(&dir)?;
    for (ext, bytes) in [("md", md), ("json", json), ("html", html)] {
        crate::atomic::write(&dir.join(format!("{}.{ext}", c.key)), bytes.as_bytes())?;
    }
    Ok(digest)
}

/// Add to a site's [`PAGE_INPUTS`] what the pages of `rows` are now made from (a digest, or
/// `-` for a row whose pages are gone): a later line for a key overrides an earlier one, so
/// an incremental rebuild appends rather than writing the whole list again.
pub fn append_page_inputs(out: &Path, rows: &[(String, Option<String>)]) -> Result<()> {
    use std::io::Write as _;
    if rows.is_empty() {
        return Ok(());
    }
    let path = out.join(PAGE_INPUTS);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut text = String::new();
    for (key, digest) in rows {
        text.push_str(&format!("{key} {}\n", digest.as_deref().unwrap_or("-")));
    }
    file.write_all(text.as_bytes())
        .with_context(|| format!("appending to {}", path.display()))
}

/// The digest of what every contract's pages are made from besides the contract: capdir's
/// version, the templates, and the frame they share.
fn inputs_digest(frame: &Frame, templates: &Templates) -> Result<Sha256> {
    let mut shared = Sha256::new();
    shared.update(env!("CARGO_PKG_VERSION"));
    shared.update(templates.digest());
    shared.update(serde_json::to_vec(frame)?);
    Ok(shared)
}

/// What the page workers share: where the files go, the previous site's files and the
/// digests they were made from, and the digest of the inputs all rows share.
struct ContractWriter<'p> {
    dir: std::path::PathBuf,
    old_dir: Option<std::path::PathBuf>,
    old_inputs: HashMap<String, String>,
    shared: Sha256,
    progress: &'p (dyn Fn(u64) + Sync),
}

impl ContractWriter<'_> {
    /// Write contract `c`'s three files, or link them from the previous site; returns the
    /// digest of its inputs.
    fn write(&self, renderer: &mut Renderer, c: &Contract, done: &mut Written) -> Result<String> {
        let json = serde_json::to_string_pretty(c)? + "\n";
        let digest = hex::encode(self.shared.clone().chain_update(json.as_bytes()).finalize());
        let same = self.old_inputs.get(&c.key) == Some(&digest);
        if let Some(old) = self.old_dir.as_ref().filter(|_| same)
            && link_contract(old, &self.dir, &c.key)
        {
            done.linked += 3;
            done.unchanged_rows += 1;
        } else {
            let (md, page) = renderer
                .contract(c)
                .with_context(|| format!("rendering the contract of {}", c.key))?;
            for (ext, bytes) in [("md", md), ("json", json), ("html", page)] {
                let name = format!("{}.{ext}", c.key);
                let old = self.old_dir.as_ref().map(|d| d.join(&name));
                if write_or_link(&self.dir.join(&name), bytes.as_bytes(), old.as_deref())? {
                    done.linked += 1;
                } else {
                    done.entries.push(super::manifest::Entry {
                        path: format!("k/{name}"),
                        size: bytes.len() as u64,
                        sha256: hex::encode(Sha256::digest(bytes.as_bytes())),
                    });
                }
            }
        }
        (self.progress)(1);
        Ok(digest)
    }
}

/// Write `bytes` to `path`, or hard-link `path` to `old` when `old` holds exactly `bytes`.
/// True when it linked.
fn write_or_link(path: &Path, bytes: &[u8], old: Option<&Path>) -> Result<bool> {
    if let Some(old) = old
        && std::fs::metadata(old).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && std::fs::read(old).is_ok_and(|held| held == bytes)
        && std::fs::hard_link(old, path).is_ok()
    {
        return Ok(true);
    }
    write(path, bytes)?;
    Ok(false)
}

/// Write a tombstone's three files.
pub fn write_tombstone(out: &Path, common: &Common, t: &Tombstone) -> Result<()> {
    let md = pages::machine::tombstone(t);
    let page = pages::TombstonePage {
        f: Frame::contract(common),
        t,
        removed_url: t
            .history
            .iter()
            .find(|h| h.sha == t.removed_by)
            .and_then(|h| h.url.as_deref()),
    };
    let page = common.templates.render("tombstone.html", &page)?;
    let dir = out.join("k");
    std::fs::create_dir_all(&dir)?;
    let mut json = serde_json::to_value(t)?;
    json["removed"] = json!(true);
    write(&dir.join(format!("{}.md", t.key)), md)?;
    write(
        &dir.join(format!("{}.json", t.key)),
        serde_json::to_string_pretty(&json)? + "\n",
    )?;
    write(&dir.join(format!("{}.html", t.key)), page)
}

/// How many rows the index's "recently" lists show.
const RECENT: usize = 8;

/// The page that lists where each credential may go.
pub const CREDENTIALS_PAGE: &str = "credentials.html";

/// `credentials.html`: every credential `bindings` bind, where it may go and which of `rows`
/// use it; and any credential a row names that is not bound for it (calls refused).
fn write_credentials(
    out: &Path,
    common: &Common,
    rows: &[&Row],
    bindings: &Bindings,
) -> Result<()> {
    let mut credentials: BTreeMap<&str, BoundCredential> = bindings
        .credentials
        .iter()
        .map(|(env, b)| {
            let bound = BoundCredential {
                env,
                origins: b
                    .origins
                    .iter()
                    .map(|o| crate::build::contract::shown_origin(o))
                    .collect(),
                methods: &b.methods,
                keys: &b.keys,
                categories: &b.categories,
                rows: Vec::new(),
            };
            (env.as_str(), bound)
        })
        .collect();
    let mut refused: BTreeMap<(String, &'static str), Vec<&str>> = BTreeMap::new();
    let mut rows: Vec<&Row> = rows.to_vec();
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    for row in rows {
        for b in crate::build::contract::bound_to(row, bindings) {
            match (b.refused, credentials.get_mut(b.env.as_str())) {
                (None, Some(c)) => c.rows.push(&row.key),
                (code, _) => refused
                    .entry((b.env, code.unwrap_or("unbound_credential")))
                    .or_default()
                    .push(&row.key),
            }
        }
    }
    let credentials: Vec<BoundCredential> = credentials.into_values().collect();
    let refused: Vec<Refused> = refused
        .into_iter()
        .map(|((env, code), rows)| Refused { env, code, rows })
        .collect();
    let page = pages::CredentialsPage {
        f: Frame::of(common, ""),
        credentials,
        refused,
    };
    write(
        &out.join(CREDENTIALS_PAGE),
        common.templates.render(CREDENTIALS_PAGE, &page)?,
    )
}

/// Index, category pages (every one, or only the categories named in `only`), the
/// no-JavaScript search page, the credentials page, assets and the browser's index.
#[allow(clippy::too_many_arguments)]
pub fn write_pages(
    out: &Path,
    common: &Common,
    rows: &[&Row],
    listings: &[Listing],
    tombstones: &[Tombstone],
    bindings: &Bindings,
    only: Option<&BTreeSet<String>>,
) -> Result<()> {
    let mut by_cat: BTreeMap<String, Vec<&Listing>> = BTreeMap::new();
    for c in listings {
        let name = crate::row::category_name(&c.category).to_string();
        by_cat.entry(name).or_default().push(c);
    }
    let seqs: HashMap<&str, Option<i64>> = rows.iter().map(|r| (r.key.as_str(), r.seq)).collect();
    let seq = |key: &str| seqs.get(key).copied().flatten();
    for rows in by_cat.values_mut() {
        rows.sort_by(|a, b| {
            crate::row::listing_order(seq(&a.key), &a.key)
                .cmp(&crate::row::listing_order(seq(&b.key), &b.key))
        });
    }
    // Newest first; the key breaks ties so the same commit builds the same page.
    let mut added: Vec<&Listing> = listings
        .iter()
        .filter(|c| !c.created_at.is_empty())
        .collect();
    added.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.key.cmp(&b.key)));
    added.truncate(RECENT);
    let mut changed: Vec<&Listing> = listings.iter().filter(|c| c.changes > 1).collect();
    changed.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.key.cmp(&b.key)));
    changed.truncate(RECENT);
    let mut removed: Vec<&Tombstone> = tombstones.iter().collect();
    removed.sort_by(|a, b| b.removed_at.cmp(&a.removed_at).then(a.key.cmp(&b.key)));
    removed.truncate(RECENT);
    let categories: Vec<Category> = by_cat
        .into_iter()
        .map(|(name, rows)| Category { name, rows })
        .collect();
    let names: Vec<&str> = categories.iter().map(|c| c.name.as_str()).collect();

    let index = pages::IndexPage {
        f: Frame::of(common, ""),
        counts: common.counts,
        categories: &categories,
        added,
        changed,
        removed,
        bound_credentials: bindings.credentials.len(),
    };
    write(
        &out.join("index.html"),
        common.templates.render("index.html", &index)?,
    )?;
    for name in common.templates.added() {
        write(&out.join(name), common.templates.render(name, &index)?)?;
    }
    write_credentials(out, common, rows, bindings)?;
    let search = pages::SearchPage {
        f: Frame::of(common, ""),
        categories: &categories,
    };
    write(
        &out.join("search.html"),
        common.templates.render("search.html", &search)?,
    )?;

    std::fs::create_dir_all(out.join("c"))?;
    let frame = Frame::counted(common, "../");
    for category in categories
        .iter()
        .filter(|c| only.is_none_or(|names| names.contains(&c.name)))
    {
        let page = pages::CategoryPage {
            f: &frame,
            category,
            all_categories: &names,
        };
        write(
            &out.join("c").join(format!("{}.html", category.name)),
            common.templates.render("category.html", &page)?,
        )?;
    }
    std::fs::create_dir_all(out.join("static"))?;
    for (name, bytes) in common.templates.assets() {
        write(&out.join("static").join(name), bytes)?;
    }

    Ok(())
}

/// registry.json, counts.json, mcp/tools.json, llms.txt, sitemap.xml and the MCP registry's
/// server.json descriptions.
pub fn write_projections(
    out: &Path,
    rows: &[&Row],
    common: &Common,
    urls: &Urls,
    categories: &[String],
    prints: &HashMap<String, String>,
    reuse: Option<&parts::Reuse>,
) -> Result<Vec<(&'static str, parts::Layout)>> {
    // The MCP tools (the largest of these files: every row's schema, pretty-printed) are
    // written on a thread of their own, beside the rest.
    std::thread::scope(|s| -> Result<_> {
        let tools = s.spawn(|| write_mcp_tools(out, rows, reuse));
        let registry = write_registry(out, rows, common, urls, prints, reuse)?;
        // These are rendered whole, and written unless the site has them as they are.
        let site = reuse.map(|r| r.site);
        let counts = serde_json::to_string_pretty(common.counts)? + "\n";
        write_unless_same(out, site, "counts.json", counts.as_bytes())?;
        write_unless_same(
            out,
            site,
            "llms.txt",
            llms_txt(rows, common, urls).as_bytes(),
        )?;
        let map = sitemap(rows, urls, categories);
        write_unless_same(out, site, "sitemap.xml", map.as_bytes())?;
        write_server_json(out, site, rows, common, urls)?;
        let search = write_search_index(out, rows, reuse)?;
        let tools = tools
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("writing the MCP tools panicked")))?;
        Ok(vec![
            (MCP_TOOLS, tools.layout),
            (REGISTRY, registry.layout),
            (SEARCH_INDEX, search.layout),
        ])
    })
}

/// The MCP registry's descriptions: `server.json` (the catalogue, at its dispatcher's
/// `/mcp`), and `mcp/servers/KEY.json` for each row that forwards to an MCP server; a
/// description of a row that is gone or no longer forwards is removed.
fn write_server_json(
    out: &Path,
    site: Option<&Path>,
    rows: &[&Row],
    common: &Common,
    urls: &Urls,
) -> Result<()> {
    let version = projection::registry_version(&common.build.commit, &common.build.date);
    let own =
        projection::catalogue_server_json(urls, &common.site.title, &common.site.summary, &version);
    let text = serde_json::to_string_pretty(&own)? + "\n";
    write_unless_same(out, site, "server.json", text.as_bytes())?;
    let dir = out.join(SERVERS);
    std::fs::create_dir_all(&dir)?;
    let mut kept = std::collections::HashSet::new();
    for row in rows {
        let Some(entry) = projection::row_server_json(row, urls, &version) else {
            continue;
        };
        let name = format!("{}.json", row.key);
        let text = serde_json::to_string_pretty(&entry)? + "\n";
        write_unless_same(out, site, &format!("{SERVERS}/{name}"), text.as_bytes())?;
        kept.insert(name);
    }
    for file in std::fs::read_dir(&dir)? {
        let file = file?;
        if !kept.contains(file.file_name().to_string_lossy().as_ref()) {
            std::fs::remove_file(file.path())?;
        }
    }
    Ok(())
}

/// Where the registry descriptions of the rows that forward to MCP servers go.
const SERVERS: &str = "mcp/servers";

/// Write `bytes` as `out`'s file `rel`, unless `site` has them there already.
fn write_unless_same(out: &Path, site: Option<&Path>, rel: &str, bytes: &[u8]) -> Result<()> {
    if site.is_some_and(|site| std::fs::read(site.join(rel)).is_ok_and(|old| old == bytes)) {
        return Ok(());
    }
    write(&out.join(rel), bytes)
}

/// The projections written a part per row ([`parts`]).
const MCP_TOOLS: &str = "mcp/tools.json";
const REGISTRY: &str = "registry.json";
const SEARCH_INDEX: &str = "search.json";

/// `search.json`, the browser's index: `{"v": 1, "rows": [...]}` with the key, category,
/// what, and the words of when-to-use and asks of each row, a part per row.
fn write_search_index(
    out: &Path,
    rows: &[&Row],
    reuse: Option<&parts::Reuse>,
) -> Result<parts::Written> {
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    parts::write(
        out,
        SEARCH_INDEX,
        (b"{\"v\":1,\"rows\":[", b",", b"]}"),
        &keys,
        |i| {
            let r = rows[i];
            let mut extra = r.doc().when_to_use.clone().unwrap_or_default();
            for a in &r.asks {
                extra.push(' ');
                extra.push_str(a);
            }
            let row = [r.key.as_str(), r.category.as_str(), r.what(), &extra];
            Ok(serde_json::to_vec(&row)?)
        },
        reuse,
    )
}

/// `mcp/tools.json`: the tool of every row planners see, pretty-printed as
/// `{"tools": [...]}` is, a part per tool.
fn write_mcp_tools(
    out: &Path,
    rows: &[&Row],
    reuse: Option<&parts::Reuse>,
) -> Result<parts::Written> {
    std::fs::create_dir_all(out.join("mcp"))?;
    let tools: Vec<&Row> = rows.iter().copied().filter(|r| r.planner_visible).collect();
    let keys: Vec<&str> = tools.iter().map(|r| r.key.as_str()).collect();
    let frame: (&[u8], &[u8], &[u8]) = if tools.is_empty() {
        (b"{\n  \"tools\": []\n}\n", b"", b"")
    } else {
        (b"{\n  \"tools\": [\n    ", b",\n    ", b"\n  ]\n}\n")
    };
    parts::write(
        out,
        MCP_TOOLS,
        frame,
        &keys,
        |i| parts::pretty_at(&projection::McpTool::of(tools[i]), "    "),
        reuse,
    )
}

/// `registry.json`: the commit, and the entry of every row but test-shaped ones, in listing
/// order: `{"commit": ..., "rows": [...]}`, a part per entry.
fn write_registry(
    out: &Path,
    rows: &[&Row],
    common: &Common,
    urls: &Urls,
    prints: &HashMap<String, String>,
    reuse: Option<&parts::Reuse>,
) -> Result<parts::Written> {
    let mut listed: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| !r.is_test_shaped())
        .collect();
    listed.sort_by(|a, b| {
        crate::row::listing_order(a.seq, &a.key).cmp(&crate::row::listing_order(b.seq, &b.key))
    });
    let keys: Vec<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    let mut head = b"{\"commit\":".to_vec();
    serde_json::to_writer(&mut head, &common.build.commit)?;
    head.extend_from_slice(b",\"rows\":[");
    parts::write(
        out,
        REGISTRY,
        (&head, b",", b"]}\n"),
        &keys,
        |i| {
            let r = listed[i];
            let print = prints
                .get(&r.key)
                .with_context(|| format!("no fingerprint of {}", r.key))?;
            Ok(serde_json::to_vec(&projection::registry_entry(
                r, urls, print,
            ))?)
        },
        reuse,
    )
}

/// `llms.txt`: how to ask and invoke, then every row's contract line by category.
fn llms_txt(rows: &[&Row], common: &Common, urls: &Urls) -> String {
    let mut llms = format!("# {}\n\n> {}\n\n", common.site.title, common.site.summary);
    match urls.dispatcher.as_deref() {
        Some(base) => llms.push_str(&format!(
            "Ask in plain words at {base}/api/dispatch?ask=…, read one contract, invoke by key with POST {base}/api/dispatch. Read the contract; don't infer a row from memory.\n"
        )),
        None => llms.push_str(&format!(
            "This catalogue has no public dispatcher: read the contracts below, and run one with `capdir serve` on this site ({}) to ask and invoke. Read the contract; don't infer a row from memory.\n",
            urls.site_file("")
        )),
    }
    let mut by_cat: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_cat
            .entry(crate::row::category_name(&r.category))
            .or_default()
            .push(r);
    }
    for (cat, rs) in by_cat {
        llms.push_str(&format!("\n## {cat}\n\n"));
        for r in rs {
            projection::push_llms_line(&mut llms, r, urls);
            llms.push('\n');
        }
    }
    llms
}

/// `sitemap.xml`: the index, every category page and every row page.
fn sitemap(rows: &[&Row], urls: &Urls, categories: &[String]) -> String {
    let mut sitemap = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
    );
    let mut url = |path: &str| {
        sitemap.push_str(&format!(
            "  <url><loc>{}</loc></url>\n",
            xml_escape(&urls.site_file(path))
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
    sitemap
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod part_tests;
