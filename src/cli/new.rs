//! `capdir new`: a scaffold row to fill in.

use crate::row::RowType;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The new row's key, e.g. WEATHER_NOW.
    key: String,
    /// Which runner executes it.
    #[arg(long = "type", value_parser = parse_type)]
    kind: RowType,
    /// The catalogue directory.
    #[arg(long, default_value = "catalogue")]
    dir: PathBuf,
}

fn parse_type(s: &str) -> Result<RowType, String> {
    RowType::parse(s).ok_or_else(|| format!("`{s}` is not a row type; use fn, http, agent or flow"))
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let path = crate::check::scaffold::write_new(&a.dir, &a.key, a.kind)?;
    println!(
        "wrote {}: fill in every TODO(capdir), then run `capdir check`",
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}
