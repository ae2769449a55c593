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
    /// Invoke one row by key and print its result; exit 1 when it fails or is refused.
    Invoke {
        /// The row's key, e.g. SHA256.
        key: String,
        /// The arguments as one string, split on `|`: `37.77|-122.42`.
        body: Option<String>,
        /// The arguments by name, as a JSON object (instead of BODY).
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// The catalogue directory.
        #[arg(long, default_value = "catalogue")]
        catalogue: PathBuf,
        /// Print the outcome as JSON: key, status, output, usage, error.
        #[arg(long)]
        json: bool,
        /// Where state lives (breaker); default `$CAPDIR_DATA`, else `data`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Show or reset the per-credential circuit breakers.
    Breaker {
        #[command(subcommand)]
        action: BreakerAction,
        /// Where state lives; default `$CAPDIR_DATA`, else `data`.
        #[arg(long, value_name = "DIR", global = true)]
        data: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BreakerAction {
    /// Every credential with a breaker record, and whether it is open.
    List,
    /// Close the breaker of one credential (its name as `list` shows it).
    Reset { name: String },
}

fn parse_type(s: &str) -> Result<RowType, String> {
    RowType::parse(s).ok_or_else(|| format!("`{s}` is not a row type; use fn, http, agent or flow"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { dir, format, base } => check(dir, format, base),
        Command::New { key, kind, dir } => capdir::scaffold::write_new(&dir, &key, kind).map(|p| {
            println!(
                "wrote {}: fill in every TODO(capdir), then run `capdir check`",
                p.display()
            );
            ExitCode::SUCCESS
        }),
        Command::Invoke {
            key,
            body,
            args,
            catalogue,
            json,
            data,
        } => capdir::invoke::command(
            &catalogue,
            &capdir::breaker::data_dir(data),
            &key,
            body,
            args.as_deref(),
            json,
        )
        .map(|(text, ok)| {
            print!("{text}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }),
        Command::Breaker { action, data } => breaker(action, capdir::breaker::data_dir(data)),
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

fn breaker(action: BreakerAction, data: PathBuf) -> anyhow::Result<ExitCode> {
    let breaker = capdir::breaker::Breaker::in_data_dir(&data);
    match action {
        BreakerAction::List => {
            let states = breaker.store().list().map_err(anyhow::Error::msg)?;
            print!(
                "{}",
                capdir::breaker::render_list(&states, chrono::Utc::now())
            );
        }
        BreakerAction::Reset { name } => {
            if breaker.reset(&name).map_err(anyhow::Error::msg)? {
                println!("breaker for {name} closed");
            } else {
                println!("{name} had no breaker record; nothing to reset");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
