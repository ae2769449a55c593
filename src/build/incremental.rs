//! A built site changed in place, a few rows at a time: the rebuild a row written through the
//! dispatcher's write API gets, and `capdir build` after a `git pull` that brought a few
//! commits.
//!
//! A full build (`build::run`) makes every file again in a directory beside the site and swaps
//! it in: for one row changed out of ten thousand, most of a second spent on rows that did not
//! change. Here the site is held in memory ([`Built`]: its rows, their history and
//! fingerprints, the search index, the tombstones) and a change is applied in two parts:
//!
//! - [`Built::apply`]: what a request about the changed rows reads: their contract files
//!   (and those of rows whose fingerprint covers them), tombstones, the search index, then the
//!   snapshot (last: a dispatcher that reloads watches it). It returns what a dispatcher
//!   swaps into its live build, so the row is served on the next request.
//! - [`Pages::write`]: the files that list every row (index, category and search pages,
//!   registry, llms.txt, MCP tools, sitemap, counts) and the manifest. A dispatcher runs it
//!   after answering, once for however many writes landed meanwhile; `capdir build` runs it
//!   before returning.
//!
//! The result holds what a full build of the same commit holds, file for file, but for the
//! bytes of the search index (other segments; the same answers up to BM25 counting deleted
//! documents, see `search::update`) and of the snapshot (the same rows), and the lists beside
//! (`.page-inputs` grows a line per changed row). A site can only be changed this way when it
//! was made by this capdir with the same options (`.build-options.json` says how it was made)
//! and its index has the `id` field; otherwise, and for large changes, a full build runs.

use crate::build::checked::Clean;
use crate::build::contract::{Contract, Tombstone};
use crate::build::history::{self, History};
use crate::build::pages::Templates;
use crate::build::pages::{Common, Listing, SiteMeta};
use crate::build::site;
use crate::build::snapshot::{self, BuildInfo, Counts};
use crate::build::{BuildError, HISTORY_CACHE, Options, git, manifest, parts, tombstones};
use crate::laps::Laps;
use crate::row::Row;
use crate::row::urls::Urls;
use crate::search::Searcher;
use crate::search::update::IndexState;
use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod open;

/// How a site was made, kept beside it (hidden, so in no manifest).
pub const MADE_FILE: &str = ".build-options.json";

/// In [`Built::touched`]: every file of the site may have changed.
const EVERY_FILE: &str = "*";

/// A change of more rows than this (or of a tenth of the catalogue, when that is more) is
/// made by a full build: past it, rewriting everything costs less than changing in place.
const MAX_ROWS_CHANGED: usize = 200;

/// How a site was made: a rebuild changes a site in place only when it would make it the
/// same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    pub capdir_version: String,
    pub dispatcher_url: String,
    pub site_url: Option<String>,
    /// The repository's web address as resolved (given, or from the `origin` remote).
    pub repo_url: Option<String>,
    /// The digest of the templates and static files, when the catalogue overrides any of
    /// capdir's: a changed template rewrites every page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub templates: Option<String>,
}

impl Made {
    /// How `opts` make a site with `templates`.
    pub fn of(opts: &Options, templates: &Templates) -> Made {
        let repo_url = match &opts.repo_url {
            Some(u) if !u.trim().is_empty() => Some(u.trim().trim_end_matches('/').to_string()),
            Some(_) => None,
            None => git::origin_web_url(&opts.catalogue),
        };
        Made {
            capdir_version: env!("CARGO_PKG_VERSION").to_string(),
            dispatcher_url: opts.dispatcher_url.clone(),
            site_url: opts.site_url.clone(),
            repo_url,
            templates: (!templates.is_builtin()).then(|| templates.digest()),
        }
    }

    pub fn urls(&self) -> Urls {
        Urls::new(&self.dispatcher_url)
            .with_site(self.site_url.as_deref())
            .with_repo(self.repo_url.clone())
    }

    pub fn save(&self, site: &Path) -> Result<()> {
        std::fs::write(site.join(MADE_FILE), serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", site.join(MADE_FILE).display()))
    }

    fn read(site: &Path) -> Option<Made> {
        serde_json::from_slice(&std::fs::read(site.join(MADE_FILE)).ok()?).ok()
    }
}

/// Rows to change in a site: new or edited ones, as parsed from their files, and the keys
/// of rows whose files are gone (or whose tombstone changed).
#[derive(Debug, Default)]
pub struct Delta {
    pub upserts: Vec<Row>,
    pub removed: Vec<String>,
}

impl Delta {
    pub fn len(&self) -> usize {
        self.upserts.len() + self.removed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A site opened for changing in place, or why it needs a full build.
pub enum Opened {
    /// The site as built, and what the work tree and history changed since.
    Ready(Box<Built>, Delta),
    Full(String),
}

/// What a dispatcher needs to serve a change: the rows to add or replace (enabled ones), the
/// keys to drop (removed or disabled rows), the fingerprints that changed, and the new
/// index, build facts and tombstones.
pub struct Applied {
    pub rows: Vec<Row>,
    pub gone: Vec<String>,
    pub prints: HashMap<String, String>,
    pub searcher: Searcher,
    pub info: BuildInfo,
    pub tombstones: HashMap<String, Option<String>>,
    /// The time each part took.
    pub steps: Vec<(&'static str, Duration)>,
}

/// What [`Built::apply_rows`] changed: the keys of the rows changed, the fingerprints that
/// changed, and the keys of rows gone (removed or disabled).
struct RowsApplied {
    changed: Vec<String>,
    prints_changed: HashMap<String, String>,
    gone: Vec<String>,
}

/// A built site held in memory, ready to be changed a few rows at a time.
pub struct Built {
    catalogue: PathBuf,
    out: PathBuf,
    urls: Urls,
    repo_url: Option<String>,
    /// What the pages are rendered with.
    templates: Arc<Templates>,
    /// Every row of the catalogue the site was built from, by key.
    rows: BTreeMap<String, Arc<Row>>,
    /// The catalogue's history up to the commit the site was built from (and, for changes
    /// not yet applied, the commits that made them).
    pub history: History,
    /// The fingerprints of the enabled rows.
    prints: HashMap<String, String>,
    index: IndexState,
    info: BuildInfo,
    tombstones: BTreeMap<String, Tombstone>,
    /// The files of the catalogue the gate found clean when the site was opened.
    clean: Clean,
    /// Whether that list differs from the one the site holds.
    clean_changed: bool,
    /// How many of them it took as checked before (`build::checked`), and how many of those
    /// it did not read for their stamps.
    reused: usize,
    unread: usize,
    /// Files changed since the manifest was last written, relative to the site.
    touched: BTreeSet<String>,
    /// Category pages changed since the pages were last written.
    stale: Stale,
    /// What the rules across rows say of `rows`, when a gate has worked it out (the write
    /// path keeps it from one write to the next).
    pub across: Option<Vec<crate::row::diag::Diagnostic>>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("out", &self.out)
            .field("rows", &self.rows.len())
            .field("commit", &self.info.commit)
            .finish_non_exhaustive()
    }
}

impl Built {
    /// The site directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// Whether the site on disk is still the one this model holds (no other build replaced
    /// it since).
    pub fn holds_site(&self) -> bool {
        self.index.is_in(&self.out.join("index"))
    }

    /// The catalogue directory.
    pub fn catalogue(&self) -> &Path {
        &self.catalogue
    }

    /// The commit the site was built from.
    pub fn commit(&self) -> &str {
        &self.info.commit
    }

    /// The row of `key`, as the site holds it.
    pub fn row(&self, key: &str) -> Option<&Row> {
        self.rows.get(key).map(|r| &**r)
    }

    /// Every row, by key.
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.rows.values().map(|r| &**r)
    }

    pub fn urls(&self) -> &Urls {
        &self.urls
    }

    /// The search index as the site holds it, searchable.
    pub fn searcher(&self) -> Result<Searcher> {
        self.index.searcher()
    }

    /// The search index with `upserts` and `removed` changed, in memory only (nothing is
    /// written): what the write gate asks the new rows' asks of before anything changes.
    pub fn stage_index(&self, upserts: &[&Row], removed: &[&str]) -> Result<IndexState> {
        self.index
            .change(upserts, removed, |k| self.rows.get(k).map(|r| &**r))
    }

    /// The rows of `delta` into this model (rows, counts, stale pages, fingerprints), and
    /// the contracts of the rows it changes written: what [`Built::apply`] does beside the
    /// index.
    fn apply_rows(
        &mut self,
        delta: &Delta,
        head: Option<&history::CommitInfo>,
        steps: &mut Laps,
    ) -> Result<RowsApplied> {
        let changed: Vec<String> = delta
            .upserts
            .iter()
            .map(|r| r.key.clone())
            .chain(delta.removed.iter().cloned())
            .collect();
        // The caller says what the rules across the changed rows are, when it knows.
        self.across = None;
        self.take_rows(delta, head, &changed);
        let (prints_changed, gone) = self.fingerprint_again(&changed);
        steps.lap("fingerprints");
        self.write_contracts(delta, &prints_changed, &gone)?;
        steps.lap("contracts");
        Ok(RowsApplied {
            changed,
            prints_changed,
            gone,
        })
    }

    /// The rows changed into the model, with the build's commit and counts, and the pages
    /// they make stale marked. A category page lists its rows and names every category beside
    /// the counts: the pages of the changed rows' categories (before and after) change, and
    /// every page when the categories or the counts do.
    fn take_rows(&mut self, delta: &Delta, head: Option<&history::CommitInfo>, changed: &[String]) {
        if self.stale.layouts.is_none() {
            self.stale.layouts = Some(parts::Layouts::take(&self.out));
        }
        let (counts_before, names_before) = (self.info.counts.clone(), self.category_names());
        self.stale.mark(&self.rows, changed);
        for key in &delta.removed {
            self.rows.remove(key);
        }
        for row in &delta.upserts {
            self.rows.insert(row.key.clone(), Arc::new(row.clone()));
            self.tombstones.remove(&row.key);
        }
        if let Some(head) = head {
            self.info.commit.clone_from(&head.sha);
            self.info.date.clone_from(&head.date);
        }
        self.info.counts = Counts::of(self.rows.values().map(|r| &**r));
        self.stale.mark(&self.rows, changed);
        if self.info.counts != counts_before || self.category_names() != names_before {
            self.stale.every = true;
        }
    }

    /// The fingerprints of the rows changed and of those composing them: those that changed,
    /// and the changed keys whose row is gone (removed or disabled).
    fn fingerprint_again(&mut self, changed: &[String]) -> (HashMap<String, String>, Vec<String>) {
        let enabled: Vec<&Row> = self
            .rows
            .values()
            .filter(|r| r.enabled)
            .map(|r| &**r)
            .collect();
        let changed_refs: Vec<&str> = changed.iter().map(String::as_str).collect();
        let reach = crate::row::call::dependents(enabled.iter().copied(), &changed_refs);
        let wanted: Vec<&str> = reach
            .iter()
            .map(String::as_str)
            .filter(|k| self.rows.get(*k).is_some_and(|r| r.enabled))
            .collect();
        let fresh = crate::row::call::fingerprints_of(enabled.iter().copied(), Some(&wanted));
        let mut prints_changed = HashMap::new();
        for (k, p) in fresh {
            if self.prints.get(&k) != Some(&p) {
                // Its registry entry names its fingerprint.
                self.stale.keys.insert(k.clone());
                prints_changed.insert(k.clone(), p.clone());
                self.prints.insert(k, p);
            }
        }
        let mut gone: Vec<String> = Vec::new();
        for key in changed {
            if !self.rows.get(key).is_some_and(|r| r.enabled) {
                self.prints.remove(key);
                gone.push(key.clone());
            }
        }
        (prints_changed, gone)
    }

    /// The contracts of the rows changed and of the rows whose fingerprint changed; for a row
    /// gone, a tombstone when the history shows the file deleted, else its pages removed (a
    /// disabled row has none in a full build).
    fn write_contracts(
        &mut self,
        delta: &Delta,
        prints_changed: &HashMap<String, String>,
        gone: &[String],
    ) -> Result<()> {
        let common = Common {
            site: SiteMeta::default_for(&self.info.counts),
            counts: &self.info.counts,
            build: &self.info,
            repo_url: self.repo_url.clone(),
            dispatcher: self.urls.dispatcher.clone(),
            templates: &self.templates,
        };
        // The site's bindings are the catalogue's: `open` builds in full when they differ.
        let bindings = super::site_bindings(&self.out);
        let mut rendered: BTreeSet<&str> = BTreeSet::new();
        let mut inputs = Vec::new();
        let to_render = delta
            .upserts
            .iter()
            .map(|r| r.key.as_str())
            .chain(prints_changed.keys().map(String::as_str));
        for key in to_render {
            let Some(row) = self.rows.get(key).filter(|r| r.enabled) else {
                continue;
            };
            if !rendered.insert(key) {
                continue;
            }
            let contract = Contract::new(
                row,
                self.history.of(file_name(row)),
                &self.urls,
                &self.prints[key],
                &bindings,
            );
            let digest = site::replace_contract(&self.out, &common, &contract)?;
            inputs.push((key.to_string(), Some(digest)));
            for ext in ["md", "json", "html"] {
                self.touched.insert(format!("k/{key}.{ext}"));
            }
        }
        for key in gone {
            let file = self.file_of(key);
            let tomb = (!self.rows.contains_key(key))
                .then(|| Tombstone::from_history(key, self.history.of(&file), &self.urls))
                .flatten();
            match &tomb {
                Some(t) => write_tombstone(&self.out, &common, t)?,
                None => {
                    for ext in ["md", "json", "html"] {
                        let _ = std::fs::remove_file(self.out.join(format!("k/{key}.{ext}")));
                    }
                }
            }
            for ext in ["md", "json", "html"] {
                self.touched.insert(format!("k/{key}.{ext}"));
            }
            inputs.push((key.clone(), None));
            match tomb {
                Some(t) => self.tombstones.insert(key.clone(), t),
                None => self.tombstones.remove(key),
            };
        }
        site::append_page_inputs(&self.out, &inputs)
    }

    /// The snapshot's rows, fingerprints, tombstones and build facts brought up to date.
    fn update_snapshot(
        &self,
        delta: &Delta,
        changed: &[String],
        prints_changed: &HashMap<String, String>,
    ) -> Result<()> {
        let upserted: Vec<&Row> = delta
            .upserts
            .iter()
            .filter_map(|r| self.rows.get(&r.key).map(|r| &**r))
            .collect();
        let print_only: Vec<(&str, &str)> = prints_changed
            .iter()
            .filter(|(k, _)| !changed.contains(k))
            .map(|(k, p)| (k.as_str(), p.as_str()))
            .collect();
        let removed: Vec<&str> = delta
            .removed
            .iter()
            .map(String::as_str)
            .filter(|k| !self.rows.contains_key(*k))
            .collect();
        let tomb_changes: Vec<(&str, Option<&Tombstone>)> = changed
            .iter()
            .map(|k| (k.as_str(), self.tombstones.get(k)))
            .collect();
        snapshot::update(
            &self.out.join(snapshot::FILE),
            &snapshot::Update {
                rows: upserted,
                removed,
                prints: print_only,
                tombstones: tomb_changes,
                info: &self.info,
            },
            &self.history,
            &self.prints,
        )
    }

    /// Apply `delta` to the site on disk and to this model: see the module's comment for
    /// what is written, in which order. `self.history` must already hold the commits that
    /// made the change; `staged` is the index [`Built::stage_index`] made for this very
    /// change, if any. The build facts name `head`.
    pub fn apply(
        &mut self,
        delta: Delta,
        staged: Option<IndexState>,
        head: Option<&history::CommitInfo>,
    ) -> Result<Applied> {
        let mut steps = Laps::default();
        // The index is changed in memory on a thread of its own while the rows, their
        // fingerprints and their contracts are: the two take about as long, and neither needs
        // the other. A change of the index that
        // fails now fails after the contracts were written: `capdir build` then builds anew,
        // and a write (which stages its index first) never gets here without one.
        let (staged, done) = std::thread::scope(|s| {
            let staged = staged.ok_or_else(|| {
                let index = self.index.clone();
                let delta = &delta;
                // The rows the index holds of the keys changed, as they are before the change.
                let held: crate::FastMap<String, Arc<Row>> = delta
                    .upserts
                    .iter()
                    .filter_map(|r| Some((r.key.clone(), Arc::clone(self.rows.get(&r.key)?))))
                    .collect();
                s.spawn(move || {
                    let clock = Instant::now();
                    let upserts: Vec<&Row> = delta.upserts.iter().collect();
                    let removed: Vec<&str> = delta.removed.iter().map(String::as_str).collect();
                    index
                        .change(&upserts, &removed, |k| held.get(k).map(|r| &**r))
                        .map(|i| (i, clock.elapsed()))
                })
            });
            let done = self.apply_rows(&delta, head, &mut steps);
            let staged = match staged {
                Ok(staged) => Ok((staged, Duration::ZERO)),
                Err(thread) => thread
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("changing the index panicked"))),
            };
            (staged, done)
        });
        let (staged, took) = staged?;
        steps.steps.insert(0, ("index", took));
        let RowsApplied {
            changed,
            prints_changed,
            gone,
        } = done?;
        steps.restart();
        staged.write(&self.out.join("index"), &self.index)?;
        self.touched.insert("index/".into());
        self.index = staged;
        steps.lap("index written");

        // The snapshot last: a dispatcher that reloads on its own watches it.
        self.update_snapshot(&delta, &changed, &prints_changed)?;
        self.touched.insert(snapshot::FILE.into());
        steps.lap("snapshot");

        let rows = delta
            .upserts
            .into_iter()
            .filter(|r| r.enabled)
            .collect::<Vec<Row>>();
        Ok(Applied {
            rows,
            gone,
            prints: prints_changed,
            searcher: self.index.searcher()?,
            info: self.info.clone(),
            tombstones: self
                .tombstones
                .iter()
                .map(|(k, t)| (k.clone(), t.replaced_by.clone()))
                .collect(),
            steps: steps.steps,
        })
    }

    /// The categories the site lists: those of its enabled rows.
    fn category_names(&self) -> BTreeSet<String> {
        let names: BTreeSet<&str> = self
            .rows
            .values()
            .filter(|r| r.enabled)
            .map(|r| crate::row::category_name(&r.category))
            .collect();
        names.into_iter().map(String::from).collect()
    }

    /// The file name of the row `key` (or of the file it was read from, when gone).
    fn file_of(&self, key: &str) -> String {
        self.rows.get(key).map_or_else(
            || {
                ["yaml", "yml"]
                    .iter()
                    .map(|ext| format!("{key}.{ext}"))
                    .find(|f| !self.history.of(f).is_empty())
                    .unwrap_or_else(|| format!("{key}.yaml"))
            },
            |r| file_name(r).to_string(),
        )
    }

    /// What [`Pages::write`] needs, taken now: the files changed since the last pages were
    /// written go with it.
    pub fn pages(&mut self) -> Pages {
        let enabled: Vec<Arc<Row>> = self.rows.values().filter(|r| r.enabled).cloned().collect();
        let listings = enabled
            .iter()
            .map(|r| Listing::new(r, self.history.of(file_name(r))))
            .collect();
        Pages {
            out: self.out.clone(),
            rows: enabled,
            listings,
            tombstones: self.tombstones.values().cloned().collect(),
            prints: self.prints.clone(),
            info: self.info.clone(),
            urls: self.urls.clone(),
            repo_url: self.repo_url.clone(),
            templates: self.templates.clone(),
            touched: std::mem::take(&mut self.touched),
            stale: std::mem::take(&mut self.stale),
        }
    }

    /// After listing pages that failed to be written: the next ones hash every file of the
    /// site into the manifest, since which files the failed run had changed is not known.
    pub fn pages_failed(&mut self) {
        self.touched.insert(EVERY_FILE.into());
        self.stale.every = true;
        self.stale.every_row = true;
    }

    /// Save the history this model holds as the site's history cache, so a later build walks
    /// only newer commits, and the files the gate found clean as the site's list of them.
    pub fn save_history(&self) -> Result<()> {
        history::save_cache(
            &self.history,
            &self.catalogue,
            &self.out.join(HISTORY_CACHE),
        )?;
        self.clean.write(&self.out)
    }
}

/// What a change made stale: every page, or the category pages of `names`; and the parts of
/// the rows `keys` in the files written a part per row ([`parts`]), or of every row. With
/// the layouts of those files as the last pages left them, taken from the site when the first
/// change since was applied.
#[derive(Debug, Default)]
struct Stale {
    every: bool,
    names: BTreeSet<String>,
    keys: BTreeSet<String>,
    every_row: bool,
    layouts: Option<parts::Layouts>,
}

impl Stale {
    /// The rows of `keys` are stale, and the categories of those `rows` has.
    fn mark(&mut self, rows: &BTreeMap<String, Arc<Row>>, keys: &[String]) {
        self.keys.extend(keys.iter().cloned());
        for row in keys.iter().filter_map(|k| rows.get(k)) {
            self.names
                .insert(crate::row::category_name(&row.category).to_string());
        }
    }

    /// The categories to render: `None` for every one.
    fn only(&self) -> Option<&BTreeSet<String>> {
        (!self.every).then_some(&self.names)
    }
}

/// The name of the file a row was read from.
fn file_name(row: &Row) -> &str {
    row.path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Write a tombstone's three files in place, each replaced whole.
fn write_tombstone(out: &Path, common: &Common, t: &Tombstone) -> Result<()> {
    let scratch = scratch_beside(out)?;
    let made = site::write_tombstone(&scratch, common, t).and_then(|()| {
        for ext in ["md", "json", "html"] {
            let name = format!("k/{}.{ext}", t.key);
            std::fs::rename(scratch.join(&name), out.join(&name))?;
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&scratch);
    made
}

/// A fresh, empty directory beside `out` (on its file system, so files move by renaming).
fn scratch_beside(out: &Path) -> Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("site");
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = parent.join(format!(".{name}.update-{}-{n}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The files that list every row, to be written after a change: taken from a [`Built`] in a
/// moment, written without holding it.
pub struct Pages {
    out: PathBuf,
    rows: Vec<Arc<Row>>,
    listings: Vec<Listing>,
    tombstones: Vec<Tombstone>,
    prints: HashMap<String, String>,
    info: BuildInfo,
    urls: Urls,
    repo_url: Option<String>,
    templates: Arc<Templates>,
    touched: BTreeSet<String>,
    stale: Stale,
}

impl Pages {
    /// Render the pages and projections beside the site, move each into place (renamed
    /// over the old one), drop the category pages of categories gone, and update the
    /// manifest with every file changed since it was last written.
    pub fn write(self) -> Result<Duration> {
        let out = self.out.clone();
        self.write_over(|| manifest::Manifest::read(&out))
    }

    /// [`Pages::write`], with the manifest as it was before them from `before` (read before
    /// the change was applied, say: nothing but the pages write it).
    pub fn write_over(
        self,
        before: impl FnOnce() -> Option<manifest::Manifest>,
    ) -> Result<Duration> {
        let started = Instant::now();
        let scratch = scratch_beside(&self.out)?;
        let every = self.touched.contains(EVERY_FILE);
        // The files the change wrote before the pages (the snapshot, the index, contracts) are
        // hashed for the manifest while the pages are rendered, on whatever core those leave
        // (at 10,000 rows the snapshot alone is 9 MB, and hashing it came after the pages).
        let (written, early) = std::thread::scope(|s| {
            let early = (!every).then(|| {
                s.spawn(|| {
                    let mut files = self.touched.clone();
                    // The index directory's files changed as a whole: those there now.
                    if files.remove("index/")
                        && let Ok(entries) = std::fs::read_dir(self.out.join("index"))
                    {
                        for e in entries.flatten() {
                            if let Some(name) =
                                e.file_name().to_str().filter(|n| !n.starts_with('.'))
                            {
                                files.insert(format!("index/{name}"));
                            }
                        }
                    }
                    manifest::hash(&self.out, &files)
                })
            });
            let written = self.render(&scratch);
            (written, early.map(|h| h.join()))
        });
        let _ = std::fs::remove_dir_all(&scratch);
        let written = written?;
        let Some(early) = early else {
            manifest::write(&self.out, &self.info.commit, None, &[])?;
            return Ok(started.elapsed());
        };
        let mut hashed =
            early.unwrap_or_else(|_| Err(anyhow::anyhow!("hashing the changed files panicked")))?;
        let before = before();
        // The index's files the manifest had that are there no more.
        if self.touched.contains("index/")
            && let Some(m) = &before
        {
            let now: BTreeSet<&str> = hashed.iter().map(|(p, _)| p.as_str()).collect();
            let gone: Vec<String> = m
                .files
                .iter()
                .filter(|e| e.path.starts_with("index/") && !now.contains(e.path.as_str()))
                .map(|e| e.path.clone())
                .collect();
            hashed.extend(gone.into_iter().map(|p| (p, None)));
        }
        // Then the pages' files (after the others: a path hashed twice takes the later).
        hashed.extend(manifest::hash(&self.out, &written)?);
        manifest::update_with(&self.out, &self.info.commit, hashed, before)?;
        Ok(started.elapsed())
    }

    /// Write the pages into `scratch`, then move them into the site; the paths written.
    fn render(&self, scratch: &Path) -> Result<BTreeSet<String>> {
        let common = Common {
            site: SiteMeta::default_for(&self.info.counts),
            counts: &self.info.counts,
            build: &self.info,
            repo_url: self.repo_url.clone(),
            dispatcher: self.urls.dispatcher.clone(),
            templates: &self.templates,
        };
        let rows: Vec<&Row> = self.rows.iter().map(|r| &**r).collect();
        let mut categories: Vec<String> = rows
            .iter()
            .map(|r| crate::row::category_name(&r.category).to_string())
            .collect();
        categories.sort();
        categories.dedup();
        // The pages and the projections side by side, as a full build writes them; the parts
        // of the rows not changed since the site's files were written are copied from them.
        let reuse = self.stale.layouts.as_ref().map(|layouts| parts::Reuse {
            site: &self.out,
            layouts,
            changed: &self.stale.keys,
        });
        let reuse = reuse.as_ref().filter(|_| !self.stale.every_row);
        let layouts_written = std::thread::scope(|s| -> Result<_> {
            let projections = s.spawn(|| {
                site::write_projections(
                    scratch,
                    &rows,
                    &common,
                    &self.urls,
                    &categories,
                    &self.prints,
                    reuse,
                )
            });
            site::write_pages(
                scratch,
                &common,
                &rows,
                &self.listings,
                &self.tombstones,
                &crate::build::site_bindings(&self.out),
                self.stale.only(),
            )?;
            projections
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the projections thread panicked")))
        })?;
        let mut written = BTreeSet::new();
        let mut dirs = vec![scratch.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let path = entry.path();
                let rel = path
                    .strip_prefix(scratch)
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                if entry.file_type()?.is_dir() {
                    std::fs::create_dir_all(self.out.join(&rel))?;
                    dirs.push(path);
                } else {
                    std::fs::rename(&path, self.out.join(&rel))
                        .with_context(|| format!("moving {rel} into the site"))?;
                    written.insert(rel);
                }
            }
        }
        // Their layouts, with the stamps they have in their place.
        parts::Layouts::save(&self.out, &layouts_written)?;
        // Category pages of categories no row has any more.
        let pages: BTreeSet<String> = categories.iter().map(|c| format!("{c}.html")).collect();
        if let Ok(entries) = std::fs::read_dir(self.out.join("c")) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let rel = format!("c/{name}");
                if !name.starts_with('.') && !pages.contains(&name) {
                    let _ = std::fs::remove_file(e.path());
                    written.insert(rel);
                }
            }
        }
        Ok(written)
    }
}

/// What `capdir build` did when it changed the site in place.
#[derive(Debug)]
pub struct Updated {
    pub changed: usize,
    pub steps: Vec<(&'static str, Duration, String)>,
}

/// `capdir build` over a site it can change in place: open it, apply what changed, write
/// the pages and the history cache. `Ok(None)` when a full build is needed (and why is
/// logged). For a process that ends after it: the model it held is not freed.
pub fn build(opts: &Options) -> Result<Option<Updated>, BuildError> {
    Ok(catch_up(opts)?.map(|(built, updated)| {
        // The model (every row twice over, the index's vocabulary, the history) is left for the
        // process's end to free: `capdir build` has answered and ends. A thread that freed it
        // raced the exit's unmapping of the same pages, each unmapped page shot down on both
        // cores.
        std::mem::forget(built);
        updated
    }))
}

/// [`build`], keeping the site it changed open for more changes.
pub fn catch_up(opts: &Options) -> Result<Option<(Built, Updated)>, BuildError> {
    let started = Instant::now();
    let (mut built, delta) = match Built::open(opts)? {
        Opened::Ready(b, d) => (*b, d),
        Opened::Full(why) => {
            tracing::info!(reason = %why, "full build");
            return Ok(None);
        }
    };
    let mut steps = vec![(
        "open",
        started.elapsed(),
        format!(
            "{} rows checked ({} files unchanged since checked, {} of them not read), {} changed since commit {}",
            built.rows.len(),
            built.reused,
            built.unread,
            delta.len(),
            short(built.commit())
        ),
    )];
    let head = built.history.head.clone();
    let changed = delta.len();
    let same_commit = head.as_ref().is_none_or(|h| h.sha == built.commit());
    if delta.is_empty() && same_commit {
        // A site made before the list, or one whose list went stale, gets it now.
        if built.clean_changed {
            built.clean.write(&built.out)?;
        }
        return Ok(Some((built, Updated { changed, steps })));
    }
    let clock = Instant::now();
    // The manifest (a line per file of the site: 30,000 at 10,000 rows) is read while the
    // change is applied on the other core: nothing before the pages writes it.
    let manifest = {
        let out = built.out.clone();
        std::thread::spawn(move || manifest::Manifest::read(&out))
    };
    let applied = built.apply(delta, None, head.as_deref())?;
    steps.push((
        "apply",
        clock.elapsed(),
        applied
            .steps
            .iter()
            .map(|(n, t)| format!("{n} {:.1} ms", t.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    // The history cache and the list of clean files (hidden files, in no manifest) are saved
    // while the pages are written: the manifest's reading and writing leave a core idle.
    let pages = built.pages();
    let (took, saved) = std::thread::scope(|s| {
        let saved = s.spawn(|| {
            let clock = Instant::now();
            built.save_history().map(|()| clock.elapsed())
        });
        let took = pages.write_over(|| manifest.join().ok().flatten());
        let saved = saved
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("saving the history panicked")));
        (took, saved)
    });
    steps.push((
        "pages",
        took?,
        "index, categories, search, projections, manifest".into(),
    ));
    steps.push((
        "history",
        saved?,
        "cache and clean files saved, beside the pages".into(),
    ));
    Ok(Some((built, Updated { changed, steps })))
}

/// The site of `opts` brought up to the catalogue (changed in place, or built anew) and
/// held open for changes: what a dispatcher that writes rows starts from.
pub fn open_current(opts: &Options) -> Result<Built, BuildError> {
    match catch_up(opts) {
        Ok(Some((built, _))) => return Ok(built),
        Ok(None) => {}
        Err(BuildError::Check(d)) => return Err(BuildError::Check(d)),
        Err(BuildError::Other(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "changing the site in place failed; building it anew");
        }
    }
    crate::build::run(opts)?;
    match Built::open(opts)? {
        Opened::Ready(built, _) => Ok(*built),
        Opened::Full(why) => Err(BuildError::Other(anyhow::anyhow!(
            "the site just built cannot be changed in place: {why}"
        ))),
    }
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}
