//! `capdir ledger verify|show`: walk the receipt chain, or read one receipt.

use crate::ledger::{Location, Verdict};
use clap::Subcommand;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    ledger: super::LedgerArg,
}

#[derive(Subcommand)]
enum Action {
    /// Walk the hash chain; name the first broken link (exit 1).
    Verify,
    /// Print one receipt as JSON.
    Show {
        id: String,
        /// With the receipts of the calls it made, nested under `children` (a flow's steps).
        #[arg(long)]
        tree: bool,
    },
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let location = Location::parse(&a.ledger.url)?;
    let runtime = super::current_thread()?;
    match a.action {
        Action::Verify => match runtime.block_on(location.verify())? {
            Verdict::Intact { receipts } => {
                println!("ok: {receipts} receipts, every link holds");
                Ok(ExitCode::SUCCESS)
            }
            Verdict::Broken { seq, id, why } => {
                println!("broken at receipt {seq} ({id}): {why}");
                Ok(ExitCode::FAILURE)
            }
        },
        Action::Show { id, tree } => match runtime.block_on(location.get(&id))? {
            Some(r) if tree => {
                let root = r.draft.root.clone().unwrap_or_else(|| r.draft.id.clone());
                let below = runtime.block_on(location.tree(&root))?;
                let node = crate::ledger::nest(r, &below);
                println!("{}", serde_json::to_string_pretty(&node)?);
                Ok(ExitCode::SUCCESS)
            }
            Some(r) => {
                println!("{}", serde_json::to_string_pretty(&r)?);
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("no receipt {id} in {location}");
                Ok(ExitCode::FAILURE)
            }
        },
    }
}
