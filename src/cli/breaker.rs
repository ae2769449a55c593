//! `capdir breaker list|reset`: the per-credential circuit breakers.

use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Action,
    /// Where state lives; default `$CAPDIR_DATA`, else `data`.
    #[arg(long, value_name = "DIR", global = true)]
    data: Option<PathBuf>,
    /// With a `postgres://` ledger, the state the dispatchers share there.
    #[arg(long, env = "CAPDIR_LEDGER", hide_env_values = true, global = true)]
    ledger: Option<String>,
}

#[derive(Subcommand)]
enum Action {
    /// Every credential with a breaker record, and whether it is open.
    List,
    /// Close the breaker of one credential (its name as `list` shows it).
    Reset { name: String },
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let breaker = super::breaker_for(a.ledger.as_deref(), a.data)?;
    let runtime = super::current_thread()?;
    match a.action {
        Action::List => {
            let states = runtime
                .block_on(breaker.store().list())
                .map_err(anyhow::Error::msg)?;
            print!(
                "{}",
                crate::invoke::breaker::render_list(&states, chrono::Utc::now())
            );
        }
        Action::Reset { name } => {
            if runtime
                .block_on(breaker.reset(&name))
                .map_err(anyhow::Error::msg)?
            {
                println!("breaker for {name} closed");
            } else {
                println!("{name} had no breaker record; nothing to reset");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
