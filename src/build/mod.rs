//! `capdir build`: the catalogue compiled into a site, one named step per output, each timed.
//!
//! check → index → history → snapshot → pages → projections, the history walked on its own
//! thread alongside the first two, and the snapshot and projections alongside the pages.
//! Everything is written into a temporary directory beside the target and swapped into place
//! at the end, so a failed build leaves the previous site untouched and a server reading the
//! site never sees half of one.

pub mod checked;
pub mod contract;
pub mod git;
pub mod history;
pub mod incremental;
pub mod manifest;
pub mod pages;
pub mod parts;
pub mod projection;
pub mod sign;
pub mod site;
pub mod snapshot;

use crate::build::contract::{Contract, Tombstone};
use crate::laps::Laps;
use crate::row::Row;
use crate::row::catalogue;
use crate::row::diag::{Format, render};
use crate::row::urls::Urls;
use anyhow::{Context as _, Result, anyhow};
use history::History;
use pages::{Common, SiteMeta};
use snapshot::{BuildInfo, Counts};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a site keeps the history it was built from, so a rebuild walks only newer commits.
pub const HISTORY_CACHE: &str = ".history.json";

/// The steps, in order; also the names `fail_after` accepts.
pub const STEPS: &[&str] = &[
    "check",
    "index",
    "history",
    "snapshot",
    "pages",
    "projections",
    "manifest",
];

#[derive(Debug, Clone)]
pub struct Options {
    pub catalogue: PathBuf,
    pub out: PathBuf,
    /// Where the dispatcher answers, for run-now, invoke, receipt and confirm links; empty
    /// when the catalogue has no public dispatcher (pages and contracts then say so).
    pub dispatcher_url: String,
    /// Where the static site is published, for the links to its files (llms.txt, sitemap,
    /// registry, contracts); `None` or empty: where the dispatcher is.
    pub site_url: Option<String>,
    /// The repository's web address, for links to commits; `None` reads it from the
    /// catalogue repository's `origin` remote (no links when that is not a hosted one).
    pub repo_url: Option<String>,
    /// Draw a progress bar (only when stderr is a terminal).
    pub progress: bool,
    /// Stop with an error after this step: how tests prove a failed build changes nothing.
    pub fail_after: Option<String>,
    /// The folder of templates over capdir's own; `None`: the catalogue's `templates/`
    /// folder beside it, when there is one.
    pub templates: Option<PathBuf>,
}

impl Options {
    pub fn new(catalogue: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Options {
        Options {
            catalogue: catalogue.into(),
            out: out.into(),
            dispatcher_url: "http://127.0.0.1:8080".into(),
            site_url: None,
            repo_url: None,
            progress: false,
            fail_after: None,
            templates: None,
        }
    }
}

/// What a successful build did.
#[derive(Debug, Default)]
pub struct Report {
    pub steps: Vec<(&'static str, Duration, String)>,
    pub warnings: Vec<String>,
    pub rows: usize,
    pub info: Option<BuildInfo>,
}

impl Report {
    /// One line per step: name, time, and what it did.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        for (name, t, what) in &self.steps {
            s.push_str(&format!(
                "  {name:<12} {:>9.1} ms  {what}\n",
                t.as_secs_f64() * 1000.0
            ));
        }
        s
    }
}

/// Why a build did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the catalogue has errors; nothing was built\n{0}")]
    Check(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The build's steps as its report gives them, each with what it made; and the step after
/// which a test asked the build to stop (`--fail-after`).
struct Steps {
    report: Report,
    laps: Laps,
    fail_after: Option<String>,
}

impl Steps {
    fn new(fail_after: Option<String>) -> Steps {
        Steps {
            report: Report::default(),
            laps: Laps::default(),
            fail_after,
        }
    }

    /// The step `name` ends now, having made `what`.
    fn done(&mut self, name: &'static str, what: String) -> Result<()> {
        let took = self.laps.running();
        self.took(name, took, what)
    }

    /// A step that ran on its own thread and took `took`; the next step is timed from now.
    fn took(&mut self, name: &'static str, took: Duration, what: String) -> Result<()> {
        self.laps.took(name, took);
        self.report.steps.push((name, took, what));
        if self.fail_after.as_deref() == Some(name) {
            return Err(anyhow!("build stopped after step `{name}` as asked"));
        }
        Ok(())
    }
}

/// The templates a build of `opts` renders with, through their gate: a template that does
/// not parse or names a field the page lacks stops the build as a row's error does.
pub(crate) fn read_templates(opts: &Options) -> Result<pages::Templates, BuildError> {
    pages::Templates::for_catalogue(&opts.catalogue, opts.templates.as_deref()).map_err(|e| {
        match e.downcast::<pages::TemplateErrors>() {
            Ok(refused) => BuildError::Check(refused.to_string()),
            Err(e) => BuildError::Other(e),
        }
    })
}

/// The catalogue's files, read and through the gate (an error lists every problem), with the
/// files it found clean.
pub(crate) fn read_checked(
    catalogue: &Path,
) -> Result<(crate::check::Checked, checked::Clean), BuildError> {
    gate(read_files(catalogue, None)?, None).map(|g| (g.checked, g.clean))
}

/// What the gate said of a catalogue's files.
pub(crate) struct Gated {
    pub checked: crate::check::Checked,
    /// The files it found clean.
    pub clean: checked::Clean,
    /// The names of the files it took as checked before, byte for byte: each one's row is the
    /// snapshot's row of that file (`Clean::reuse`).
    pub reused: Vec<String>,
    /// How many of those it did not read, for their stamps.
    pub unread: usize,
}

/// A catalogue's files as read for the gate.
pub(crate) struct Read {
    pub files: Vec<catalogue::SourceFile>,
    /// The digest of each file's bytes.
    pub digests: Vec<checked::Digest>,
    /// Each file's stamp, when it had settled before it was read.
    pub stamps: Vec<Option<checked::Stamp>>,
    /// The files left unread: `clean` lists each with the stamp it has.
    pub unread: Vec<PathBuf>,
}

impl Read {
    /// A file read from `read_at` on, with its digest and stamp.
    fn push(&mut self, (file, meta): catalogue::Opened, read_at: std::time::SystemTime) {
        self.digests.push(checked::bytes_digest(&file));
        self.stamps.push(checked::Stamp::settled(&meta, read_at));
        self.files.push(file);
    }
}

/// The catalogue's files, but those `clean` (the site's list of clean files) has with the
/// stamp they have now.
pub(crate) fn read_files(
    catalogue: &Path,
    clean: Option<&checked::Clean>,
) -> Result<Read, BuildError> {
    let read_at = std::time::SystemTime::now();
    let (files, unread) = catalogue::read_dir_except(catalogue, |name, entry| {
        clean.is_some_and(|c| entry.metadata().is_ok_and(|m| c.unchanged(name, &m)))
    })
    .with_context(|| format!("cannot read catalogue directory {}", catalogue.display()))?;
    let mut read = Read {
        files: Vec::with_capacity(files.len()),
        digests: Vec::with_capacity(files.len()),
        stamps: Vec::with_capacity(files.len()),
        unread,
    };
    for opened in files {
        read.push(opened, read_at);
    }
    Ok(read)
}

/// The files of `read` through the gate: an error lists every problem. With `before` (the
/// clean files of the site's last gate, and the rows its snapshot holds), a file it lists with
/// the same bytes and row is not checked again by the rules of one file (`checked`), and a
/// file left unread for its stamp has the snapshot's row (or is read now, when the snapshot
/// holds another). The rows of files left unread are not among the rows returned: they are
/// the snapshot's, named in `reused` (and their spans should read their files).
pub(crate) fn gate(
    mut read: Read,
    before: Option<(&checked::Clean, &[Row])>,
) -> Result<Gated, BuildError> {
    let row_of: crate::FastMap<&str, &Row> = before
        .into_iter()
        .flat_map(|(_, rows)| rows)
        .filter_map(|r| Some((r.path.file_name()?.to_str()?, r)))
        .collect();
    // The files left unread: the snapshot's row of each, or the file read after all.
    let read_at = std::time::SystemTime::now();
    // The snapshot's rows themselves, not copies (a copy of each of 10,000 rows was a third
    // of the gate, and the copies were freed again).
    let mut unread_rows: Vec<&Row> = Vec::with_capacity(read.unread.len());
    // The files taken as checked (these first, then those read whose bytes are as checked):
    // their entries of the list carry over.
    let mut reused = Vec::with_capacity(read.unread.len());
    for path in std::mem::take(&mut read.unread) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let taken = row_of
            .get(name)
            .copied()
            .filter(|&row| before.is_some_and(|(clean, _)| clean.takes_unread(&path, row)));
        match taken {
            Some(row) => {
                reused.push(name.to_string());
                unread_rows.push(row);
            }
            None => {
                let opened = catalogue::read_file(path.clone())
                    .with_context(|| format!("reading {}", path.display()))?;
                read.push(opened, read_at);
            }
        }
    }
    let unread = unread_rows.len();
    let reused = std::sync::Mutex::new(reused);
    let Read {
        files,
        digests,
        stamps,
        ..
    } = read;
    let checked = match before {
        None => crate::check::check_files_known(&files, &|_| None, &unread_rows),
        Some((clean, _)) => {
            let digest_of: crate::FastMap<&Path, &checked::Digest> = files
                .iter()
                .zip(&digests)
                .map(|(f, d)| (f.path.as_path(), d))
                .collect();
            crate::check::check_files_known(
                &files,
                &|file| {
                    let row = clean.reuse(
                        file,
                        digest_of.get(file.path.as_path())?,
                        row_of.get(file.file_name()).copied(),
                    )?;
                    reused
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(file.file_name().to_string());
                    Some(row)
                },
                &unread_rows,
            )
        }
    };
    if checked.has_errors() {
        return Err(BuildError::Check(render(
            &checked.diags,
            checked.files,
            Format::Text,
        )));
    }
    let reused = reused.into_inner().unwrap_or_else(|p| p.into_inner());
    let kept = before
        .map(|(clean, _)| clean.only(&reused))
        .unwrap_or_default();
    let clean = checked::Clean::of(&files, &digests, &stamps, &checked, kept);
    Ok(Gated {
        checked,
        clean,
        reused,
        unread,
    })
}

/// The site's copy of the catalogue's credential bindings: what the dispatcher enforces on
/// the wire, and what the site publishes of where each credential may go.
pub const BINDINGS_JSON: &str = "bindings.json";

fn write_bindings(site: &Path, bindings: &crate::row::binding::Bindings) -> Result<()> {
    std::fs::write(
        site.join(BINDINGS_JSON),
        serde_json::to_string_pretty(bindings)? + "\n",
    )
    .with_context(|| format!("writing {BINDINGS_JSON}"))
}

/// The bindings a built site carries. A site without them (built by an older capdir), or
/// with a file that does not read, binds nothing: no credential goes anywhere.
pub fn site_bindings(site: &Path) -> crate::row::binding::Bindings {
    std::fs::read(site.join(BINDINGS_JSON))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Tombstones for row files the history saw deleted and the catalogue no longer has.
/// `is_live` says whether the catalogue has a row of a key.
pub fn tombstones(
    history: &History,
    is_live: impl Fn(&str) -> bool,
    urls: &Urls,
) -> Vec<Tombstone> {
    history
        .files
        .iter()
        .filter(|(file, _)| file.as_str() != crate::row::binding::FILE)
        .filter_map(|(file, changes)| {
            let key = Path::new(file).file_stem()?.to_str()?;
            if is_live(key) {
                return None;
            }
            Tombstone::from_history(key, changes, urls)
        })
        .collect()
}

/// Build the catalogue `opts.catalogue` into the site `opts.out`, one step after another (the
/// history walk alongside check and index, the projections alongside index and history, the
/// snapshot alongside the pages), into a directory beside it that replaces it whole at the end.
pub fn run(opts: &Options) -> Result<Report, BuildError> {
    let mut steps = Steps::new(opts.fail_after.clone());
    let spare = history::SpareWalker::default();
    let walk = walk_history(opts, &spare);
    let (checked, clean) = read_checked(&opts.catalogue)?;
    let templates = read_templates(opts)?;
    steps.report.warnings.extend(
        checked
            .diags
            .iter()
            .filter(|d| !d.is_error())
            .map(|d| d.render_text().trim_end().to_string()),
    );
    steps.done("check", format!("{} rows", checked.rows.len()))?;
    let tmp = crate::atomic::dir_beside(&opts.out).map_err(anyhow::Error::from)?;
    let plan = Plan::new(opts, checked, &templates);
    let result = std::thread::scope(|s| -> Result<(BuildInfo, Vec<manifest::Entry>)> {
        let projections = s.spawn(|| plan.write_projections(&tmp, &templates));
        let indexed = crate::search::build_index(&tmp.join("index"), &plan.enabled)?;
        steps.done("index", format!("{indexed} rows"))?;
        // Rather than wait, this thread walks part of what the history walk has left.
        spare.help();
        let history = joined(walk, &mut steps)?;
        let mut info = plan.head_info.clone();
        info.history_partial = history.partial;
        let live: std::collections::HashSet<&str> =
            plan.all_rows.iter().map(|r| r.key.as_str()).collect();
        let tombs = tombstones(&history, |k| live.contains(k), &plan.urls);
        let common = plan.common(&info, &templates);
        let (snapshot, pages) = plan.pages_and_snapshot(opts, &tmp, &history, &tombs, &common);
        let (pages_took, snapshot_took) = (steps.laps.running(), snapshot?);
        let projections_took = projections
            .join()
            .unwrap_or_else(|_| Err(anyhow!("the projections thread panicked")))?;
        let (all, tombstones) = (plan.all_rows.len(), tombs.len());
        let what = format!("{all} rows, {tombstones} tombstones, alongside pages");
        steps.took("snapshot", snapshot_took, what)?;
        let (rows, written) = pages?;
        let what = format!(
            "{rows} contracts ×3 ({} files unchanged, linked; {} rows not rendered again), {tombstones} tombstones",
            written.linked, written.unchanged_rows,
        );
        steps.took("pages", pages_took, what)?;
        let what = "registry, counts, mcp/tools, llms.txt, sitemap, alongside index and history";
        steps.took("projections", projections_took, what.into())?;
        Ok((info, written.entries))
    });
    let result = result.and_then(|(info, hashed)| {
        finish(opts, &tmp, &plan.made, &clean, &info, &hashed, &mut steps)?;
        Ok(info)
    });
    let info = match result {
        Ok(info) => info,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e.into());
        }
    };
    crate::atomic::swap_dir(&tmp, &opts.out)
        .with_context(|| format!("moving the new site to {}", opts.out.display()))?;
    steps.report.rows = plan.all_rows.len();
    steps.report.info = Some(info);
    Ok(steps.report)
}

/// The history walk, started: it needs only the repository, so it runs alongside check and
/// index, on half the cores (on two, one walker: a second one contending with check for a
/// core makes the step no shorter and costs CPU the rest of the build wants).
fn walk_history(
    opts: &Options,
    helper: &history::SpareWalker,
) -> std::thread::JoinHandle<(History, Duration)> {
    let (dir, cache) = (opts.catalogue.clone(), opts.out.join(HISTORY_CACHE));
    let walkers = crate::cores() / 2;
    let helper = helper.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let history = history::read_cached(&dir, Some(&cache), walkers, Some(&helper));
        (history, started.elapsed())
    })
}

/// The history walk's end: its warnings (no Git, a shallow clone) and its step.
fn joined(
    walk: std::thread::JoinHandle<(History, Duration)>,
    steps: &mut Steps,
) -> Result<History> {
    let (history, took) = walk
        .join()
        .map_err(|_| anyhow!("the history walk panicked"))?;
    if let Some(why) = &history.missing {
        steps
            .report
            .warnings
            .push(format!("no Git history ({why}); rows get no dates"));
    }
    if history.partial {
        steps.report.warnings.push(
            "shallow clone: history is partial, created_at may be later than the truth".into(),
        );
    }
    let helped = match history.commits_helped {
        0 => String::new(),
        n => format!(" ({n} of them by the index's thread once done)"),
    };
    let what = format!(
        "{} commits walked, alongside check and index{helped}",
        history.commits_walked
    );
    steps.took("history", took, what)?;
    Ok(history)
}

/// Last, the manifest of every file written: what a following dispatcher fetches. Beside it
/// (hidden, so in no manifest) how the site was made, for the next incremental rebuild.
fn finish(
    opts: &Options,
    tmp: &Path,
    made: &incremental::Made,
    clean: &checked::Clean,
    info: &BuildInfo,
    hashed: &[manifest::Entry],
    steps: &mut Steps,
) -> Result<()> {
    made.save(tmp)?;
    clean.write(tmp)?;
    let previous = opts.out.is_dir().then_some(opts.out.as_path());
    let manifest = manifest::write(tmp, &info.commit, previous, hashed)?;
    steps.done(
        "manifest",
        format!("{} files in {}", manifest.files.len(), manifest::FILE),
    )
}

/// What every step after `check` reads: the rows, the counts, HEAD, how the site is made
/// (its addresses), the contract fingerprints and the categories.
struct Plan {
    bindings: crate::row::binding::Bindings,
    all_rows: Vec<Row>,
    enabled: Vec<Row>,
    counts: Counts,
    /// The build as HEAD gives it, before the history says whether it is partial.
    head_info: BuildInfo,
    made: incremental::Made,
    urls: Urls,
    /// Contract fingerprints over the enabled rows, as a dispatcher computes them.
    prints: std::collections::HashMap<String, String>,
    categories: Vec<String>,
}

impl Plan {
    fn new(opts: &Options, checked: crate::check::Checked, templates: &pages::Templates) -> Plan {
        let all_rows = checked.rows;
        let enabled: Vec<Row> = all_rows.iter().filter(|r| r.enabled).cloned().collect();
        let counts = Counts::of(&all_rows);
        let head = history::head(&opts.catalogue);
        let head_info = BuildInfo {
            commit: head.as_ref().map(|h| h.sha.clone()).unwrap_or_default(),
            date: head.as_ref().map(|h| h.date.clone()).unwrap_or_default(),
            capdir_version: env!("CARGO_PKG_VERSION").to_string(),
            history_partial: false,
            counts: counts.clone(),
        };
        let made = incremental::Made::of(opts, templates);
        let urls = made.urls();
        let prints = crate::row::call::fingerprints(&enabled);
        let mut categories: Vec<String> = enabled
            .iter()
            .map(|r| crate::row::category_name(&r.category).to_string())
            .collect();
        categories.sort();
        categories.dedup();
        Plan {
            bindings: checked.bindings,
            all_rows,
            enabled,
            counts,
            head_info,
            made,
            urls,
            prints,
            categories,
        }
    }

    /// What every page's layout needs, for the build `info`.
    fn common<'a>(&'a self, info: &'a BuildInfo, templates: &'a pages::Templates) -> Common<'a> {
        Common {
            site: SiteMeta::default_for(&self.counts),
            counts: &self.counts,
            build: info,
            repo_url: self.made.repo_url.clone(),
            dispatcher: self.urls.dispatcher.clone(),
            templates,
        }
    }

    /// The projections, the bindings and the layouts of the parts: known once the rows are
    /// checked and HEAD is read, so they are written alongside index and history, on the core
    /// the history walk leaves idle when check and index finish first.
    fn write_projections(&self, tmp: &Path, templates: &pages::Templates) -> Result<Duration> {
        let started = Instant::now();
        let common = self.common(&self.head_info, templates);
        let enabled: Vec<&Row> = self.enabled.iter().collect();
        let layouts = site::write_projections(
            tmp,
            &enabled,
            &common,
            &self.urls,
            &self.categories,
            &self.prints,
            None,
        )?;
        parts::Layouts::save(tmp, &layouts)?;
        write_bindings(tmp, &self.bindings)?;
        Ok(started.elapsed())
    }

    /// The snapshot on a thread of its own alongside the pages, filling the core the pages
    /// leave idle while one thread writes the index pages: each one's time, or its error.
    fn pages_and_snapshot(
        &self,
        opts: &Options,
        tmp: &Path,
        history: &History,
        tombs: &[Tombstone],
        common: &Common,
    ) -> (Result<Duration>, Result<(usize, site::Written)>) {
        std::thread::scope(|s| {
            let side = s.spawn(|| self.write_snapshot(opts, tmp, history, tombs, common.build));
            let pages = self.write_pages(opts, tmp, history, tombs, common);
            let side = side
                .join()
                .unwrap_or_else(|_| Err(anyhow!("the snapshot thread panicked")));
            (side, pages)
        })
    }

    /// The history's cache and the SQLite snapshot.
    fn write_snapshot(
        &self,
        opts: &Options,
        tmp: &Path,
        history: &History,
        tombs: &[Tombstone],
        info: &BuildInfo,
    ) -> Result<Duration> {
        let started = Instant::now();
        if history.missing.is_none() {
            history::save_cache(history, &opts.catalogue, &tmp.join(HISTORY_CACHE))?;
        }
        snapshot::write(
            &tmp.join(snapshot::FILE),
            &self.all_rows,
            history,
            tombs,
            info,
            &self.prints,
        )?;
        Ok(started.elapsed())
    }

    /// Every contract (its three files), the pages that list the rows, and the tombstones:
    /// how many contracts, and what was written.
    fn write_pages(
        &self,
        opts: &Options,
        tmp: &Path,
        history: &History,
        tombs: &[Tombstone],
        common: &Common,
    ) -> Result<(usize, site::Written)> {
        let contracts: Vec<Contract> = self
            .enabled
            .iter()
            .map(|r| {
                let file = r.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let print = &self.prints[&r.key];
                Contract::new(r, history.of(file), &self.urls, print, &self.bindings)
            })
            .collect();
        let bar = progress_bar(opts.progress, contracts.len() as u64);
        let previous = opts.out.is_dir().then_some(opts.out.as_path());
        let listings: Vec<pages::Listing> = contracts.iter().map(pages::Listing::of).collect();
        let enabled: Vec<&Row> = self.enabled.iter().collect();
        // The index and category pages on a thread of their own beside the contracts'
        // workers, which take their rows in batches and so leave it its share.
        let written = std::thread::scope(|s| {
            let others = s.spawn(|| {
                site::write_pages(
                    tmp,
                    common,
                    &enabled,
                    &listings,
                    tombs,
                    &self.bindings,
                    None,
                )
            });
            let written = site::write_contracts(tmp, previous, common, &contracts, &|n| bar.inc(n));
            let others = others
                .join()
                .unwrap_or_else(|_| Err(anyhow!("the index pages' thread panicked")));
            written.and_then(|w| others.map(|()| w))
        })?;
        bar.finish_and_clear();
        for t in tombs {
            site::write_tombstone(tmp, common, t)?;
        }
        Ok((contracts.len(), written))
    }
}

fn progress_bar(wanted: bool, len: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !wanted || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template("  pages {bar:40} {pos}/{len} {eta}")
    {
        bar.set_style(style);
    }
    bar
}
