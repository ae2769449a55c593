//! The `capdir` command line: parses arguments and calls into the library.

use capdir::diag::{self, Format};
use capdir::row::RowType;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "capdir",
    version,
    about = "A catalogue of capabilities for AI agents, kept as data in Git"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every row of a catalogue; report all problems with file:line:col and a code.
    Check {
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
    },
    /// Compile the catalogue into a site: snapshot, index, contracts, pages, projections.
    Build {
        /// The catalogue directory.
        #[arg(default_value = "catalogue")]
        dir: PathBuf,
        /// Where the site goes; replaced atomically.
        #[arg(long, default_value = "site")]
        out: PathBuf,
        /// The dispatcher's public URL, used in contracts and llms.txt.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        base_url: String,
    },
    /// Write a scaffold row to fill in.
    New {
        /// The new row's key, e.g. WEATHER_NOW.
        key: String,
        /// Which runner executes it.
        #[arg(long = "type", value_parser = parse_type)]
        kind: RowType,
        /// The catalogue directory.
        #[arg(long, default_value = "catalogue")]
        dir: PathBuf,
    },
}

fn parse_type(s: &str) -> Result<RowType, String> {
    RowType::parse(s).ok_or_else(|| format!("`{s}` is not a row type; use fn, http, agent or flow"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { dir, format, base } => check(dir, format, base),
        Command::Build { dir, out, base_url } => build(dir, out, base_url),
        Command::New { key, kind, dir } => capdir::scaffold::write_new(&dir, &key, kind).map(|p| {
            println!(
                "wrote {}: fill in every TODO(capdir), then run `capdir check`",
                p.display()
            );
            ExitCode::SUCCESS
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn check(dir: PathBuf, format: Option<Format>, base: Option<String>) -> anyhow::Result<ExitCode> {
    let format = format.unwrap_or(
        if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
            Format::Github
        } else {
            Format::Text
        },
    );
    let files = capdir::catalogue::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("cannot read catalogue directory {}: {e}", dir.display()))?;
    let mut checked = capdir::check::check_files(&files);
    if let Some(rev) = base {
        let base_files = capdir::git::read_dir_at(&dir, &rev)?;
        capdir::check::against_base(&files, &mut checked, &base_files);
    }
    print!("{}", diag::render(&checked.diags, checked.files, format));
    Ok(if checked.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn build(dir: PathBuf, out: PathBuf, base_url: String) -> anyhow::Result<ExitCode> {
    let opts = capdir::build::Options {
        base_url,
        progress: true,
        ..capdir::build::Options::new(&dir, &out)
    };
    let started = std::time::Instant::now();
    match capdir::build::run(&opts) {
        Ok(report) => {
            eprint!("{}", report.render());
            eprintln!(
                "built {} rows into {} in {:.2} s",
                report.rows,
                out.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(capdir::build::BuildError::Check(diags)) => {
            print!("{diags}");
            eprintln!("error: the catalogue has errors; nothing was built");
            Ok(ExitCode::FAILURE)
        }
        Err(capdir::build::BuildError::Other(e)) => Err(e),
    }
}
