//! `capdir check`: the gate, as pull requests and CI run it.

use crate::row::diag::{self, Format};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The catalogue directory.
    #[arg(default_value = "catalogue")]
    dir: PathBuf,
    /// Output format; `github` is chosen by itself when GITHUB_ACTIONS=true.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Compare with the catalogue at this Git revision (the pull request's target branch):
    /// new and clean rows must stay clean, legacy rows must not get worse.
    #[arg(long, value_name = "REV")]
    base: Option<String>,
    /// The templates a build would use over capdir's own (default: the `templates/`
    /// folder beside the catalogue, when there is one): checked too.
    #[arg(long, value_name = "DIR")]
    templates: Option<PathBuf>,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let format = a.format.unwrap_or(
        if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
            Format::Github
        } else {
            Format::Text
        },
    );
    let dir = a.dir;
    let files = crate::row::catalogue::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("cannot read catalogue directory {}: {e}", dir.display()))?;
    let mut checked = crate::check::check_files(&files);
    if !checked.has_errors() {
        checked.diags.extend(crate::check::asks_gate(&checked.rows));
    }
    if let Some(rev) = a.base {
        let base_files = crate::build::git::read_dir_at(&dir, &rev)?;
        crate::check::against_base(&files, &mut checked, &base_files);
    }
    checked.diags.extend(crate::build::pages::check_templates(
        &dir,
        a.templates.as_deref(),
    )?);
    print!("{}", diag::render(&checked.diags, checked.files, format));
    // On GitHub every finding also goes to the step summary: annotations stop at ten a level.
    if format == Format::Github
        && let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty())
    {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&summary)
            .and_then(|mut f| {
                f.write_all(diag::step_summary(&checked.diags, checked.files).as_bytes())
            })
            .map_err(|e| anyhow::anyhow!("writing the step summary {}: {e}", summary.display()))?;
    }
    Ok(super::exit(!checked.has_errors()))
}
