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
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let opts = crate::build::Options {
        dispatcher_url: a.dispatcher_url,
        site_url: a.site_url,
        repo_url: a.repo_url,
        progress: true,
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
