//! `capdir route [TEXT|-]`: run the router tags (`[KEY]args[/KEY]`) of a text as the local
//! owner, each through the dispatcher's gate with a receipt in the ledger, and print the text
//! with each tag replaced; exit 1 when a tag did not succeed.

use crate::serve::AppState;
use crate::serve::mcp;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The text, or `-` (or nothing) to read it from standard input.
    text: Option<String>,
    /// The built site; built from the bundled catalogue first when it has no snapshot.
    #[arg(long, default_value = "site")]
    site: PathBuf,
    #[command(flatten)]
    ledger: super::LedgerArg,
    /// Where breaker state lives; default `$CAPDIR_DATA`, else `data`.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Print the routed text and every tag's receipt as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let text = match a.text.as_deref() {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        Some(t) => t.to_string(),
    };
    let base_url = "http://127.0.0.1:8080".to_string();
    super::ensure_site(&a.site, &base_url)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let settings = super::serve::settings(
            &a.site,
            &a.ledger.url,
            base_url,
            a.data,
            mcp::Options::default(),
        )
        .await?;
        let state = AppState::new(settings)?;
        let routed = state
            .dispatcher()
            .route(&crate::access::auth::Caller::Owner, &text)
            .await?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&routed)?);
        } else {
            print!("{}", routed.text);
            if !routed.text.ends_with('\n') {
                println!();
            }
        }
        Ok(super::exit(routed.tags.iter().all(|t| t.error.is_none())))
    })
}
