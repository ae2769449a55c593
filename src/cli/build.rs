//! `capdir build`: the catalogue compiled into a site, each step's time reported.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The catalogue directory.
    #[arg(default_value = "catalogue")]
    dir: PathBuf,
    /// Where the site goes; replaced atomically.
    #[arg(long, default_value = "site")]
    out: PathBuf,
    /// The dispatcher's public URL, for run-now, invoke, receipt and confirm links. Empty
    /// (`--dispatcher-url ''`): the catalogue has no public dispatcher, and its pages and
    /// contracts say how to run one. `--base-url` is the same flag's older name.
    #[arg(
        long,
        visible_alias = "base-url",
        value_name = "URL",
        default_value = "http://127.0.0.1:8080"
    )]
    dispatcher_url: String,
    /// Where the static site is published (e.g. the GitHub Pages address), for links to its
    /// files in llms.txt, sitemap.xml, registry.json and the contracts. Default: the
    /// dispatcher's URL (a dispatcher serves the site too).
    #[arg(long, value_name = "URL")]
    site_url: Option<String>,
    /// The repository's web address, for links to commits in row histories
    /// (`https://github.com/OWNER/NAME`). Default: the catalogue repository's `origin`
    /// remote when it is a hosted one; `--repo-url ''` turns the links off.
    #[arg(long, value_name = "URL")]
    repo_url: Option<String>,
    /// Build every file anew even when the site could be changed in place (by default a
    /// site built before by this capdir with the same options gets only what changed).
    #[arg(long)]
    full: bool,
    /// Templates and static files over capdir's own, file by file (default: the
    /// `templates/` folder beside the catalogue, when there is one).
    #[arg(long, value_name = "DIR")]
    templates: Option<PathBuf>,
    #[command(flatten)]
    publish: Publish,
}

/// What a published build carries beyond the catalogue: a signature, checkpoints of a
/// dispatcher's receipt log.
#[derive(clap::Args)]
struct Publish {
    /// Sign the build with this private key (`capdir key new`); give it twice, old key and
    /// new, during a rotation. `$CAPDIR_SIGNING_KEY` may hold the key itself instead (a
    /// repository secret in CI).
    #[arg(long, value_name = "FILE")]
    sign: Vec<PathBuf>,
    /// How long followers accept the signed build; past it they refuse it as stale (a
    /// frozen host), so publish more often than this (e.g. 7d, 36h).
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_duration)]
    expires_in: i64,
    /// A public key followers trust from this build on (a rotation; repeat for several).
    /// The build must be signed by a key they trust now.
    #[arg(long, value_name = "KEY")]
    next_key: Vec<String>,
    /// The build number a signed build carries, instead of the catalogue's commit count
    /// (it must only grow: followers refuse a lower one).
    #[arg(long, value_name = "N")]
    build_number: Option<u64>,
    /// Copy a dispatcher's receipt-log checkpoints (`serve --checkpoints DIR`) into
    /// `ledger/checkpoints/` of the site, so copies outlive the dispatcher.
    #[arg(long, value_name = "DIR")]
    checkpoints: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<i64, String> {
    crate::access::duration::parse_ttl(s)
}

impl Publish {
    /// After the build: the checkpoints copied in (and into the manifest), then the signature.
    fn apply(self, catalogue: &std::path::Path, out: &std::path::Path) -> anyhow::Result<()> {
        use crate::build::{manifest, sign};
        if let Some(dir) = &self.checkpoints {
            let touched = copy_checkpoints(dir, out)?;
            let commit = manifest::Manifest::read(out)
                .map(|m| m.commit)
                .unwrap_or_default();
            manifest::update(out, &commit, &touched)?;
            eprintln!("  {} checkpoints in ledger/checkpoints/", touched.len());
        }
        let keys = match (
            self.sign.is_empty(),
            super::key::read_from(None, "CAPDIR_SIGNING_KEY")?,
        ) {
            (false, _) => self
                .sign
                .iter()
                .map(|f| super::key::read(f))
                .collect::<anyhow::Result<Vec<_>>>()?,
            (true, Some(key)) => vec![key],
            (true, None) => return Ok(()),
        };
        let next_keys = self
            .next_key
            .iter()
            .map(|k| crate::trust::note::Verifier::parse(k))
            .collect::<Result<Vec<_>, _>>()?;
        let number = match self.build_number {
            Some(n) => n,
            None => sign::build_number(catalogue)?,
        };
        let expires = (chrono::Utc::now() + chrono::Duration::seconds(self.expires_in))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        sign::sign(
            out,
            &sign::Signing {
                keys: &keys,
                number,
                expires: expires.clone(),
                next_keys,
            },
        )?;
        eprintln!(
            "  signed build {number} (expires {expires}) with {}",
            keys.iter()
                .map(|k| k.verifier().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        );
        Ok(())
    }
}

/// Copy the checkpoint files of `dir` (named by their size, and `latest`) into the site;
/// returns the paths written, relative to the site.
fn copy_checkpoints(
    dir: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    use anyhow::Context as _;
    let target = out.join("ledger/checkpoints");
    std::fs::create_dir_all(&target)?;
    let mut touched = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        let is_checkpoint = name == "latest"
            || (!name.is_empty() && name.len() <= 20 && name.bytes().all(|b| b.is_ascii_digit()));
        if !is_checkpoint || !entry.file_type()?.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(entry.path())?;
        crate::trust::checkpoint::Checkpoint::parse(
            crate::trust::note::split(&text)
                .map(|(t, _)| t)
                .unwrap_or_default(),
        )
        .with_context(|| format!("{} is not a signed checkpoint", entry.path().display()))?;
        std::fs::write(target.join(&name), text)?;
        touched.insert(format!("ledger/checkpoints/{name}"));
    }
    Ok(touched)
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let (catalogue, out, publish) = (a.dir.clone(), a.out.clone(), a.publish);
    let code = build(
        a.dir,
        a.out,
        a.dispatcher_url,
        a.site_url,
        a.repo_url,
        a.full,
        a.templates,
    )?;
    if code == ExitCode::SUCCESS {
        publish.apply(&catalogue, &out)?;
    }
    Ok(code)
}

fn build(
    dir: PathBuf,
    out: PathBuf,
    dispatcher_url: String,
    site_url: Option<String>,
    repo_url: Option<String>,
    full: bool,
    templates: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let a = Built { dir, out, full };
    let opts = crate::build::Options {
        dispatcher_url,
        site_url,
        repo_url,
        progress: true,
        templates,
        ..crate::build::Options::new(&a.dir, &a.out)
    };
    let started = std::time::Instant::now();
    if !a.full {
        match crate::build::incremental::build(&opts) {
            Ok(Some(done)) => {
                for (name, t, what) in &done.steps {
                    eprintln!("  {name:<12} {:>9.1} ms  {what}", t.as_secs_f64() * 1000.0);
                }
                eprintln!(
                    "changed {} rows of {} in place in {:.2} s",
                    done.changed,
                    a.out.display(),
                    started.elapsed().as_secs_f64()
                );
                return Ok(ExitCode::SUCCESS);
            }
            Ok(None) => {}
            Err(crate::build::BuildError::Check(diags)) => {
                print!("{diags}");
                eprintln!("error: the catalogue has errors; nothing was built");
                return Ok(ExitCode::FAILURE);
            }
            // A change in place that failed halfway is made whole by a full build.
            Err(crate::build::BuildError::Other(e)) => {
                eprintln!("warning: changing the site in place failed ({e:#}); building it anew");
            }
        }
    }
    match crate::build::run(&opts) {
        Ok(report) => {
            eprint!("{}", report.render());
            eprintln!(
                "built {} rows into {} in {:.2} s",
                report.rows,
                a.out.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(crate::build::BuildError::Check(diags)) => {
            print!("{diags}");
            eprintln!("error: the catalogue has errors; nothing was built");
            Ok(ExitCode::FAILURE)
        }
        Err(crate::build::BuildError::Other(e)) => Err(e),
    }
}

/// Where a build reads and writes.
struct Built {
    dir: PathBuf,
    out: PathBuf,
    full: bool,
}
