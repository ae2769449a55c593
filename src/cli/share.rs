//! `capdir share --keys K|--categories C [--ttl 10m]`: one starting URL for a model that can
//! only fetch URLs: the dispatcher's ask address with a share token in it (a capability token
//! of risk low, recorded in the ledger like any, revocable by its id). Every link the answers
//! give it then carries a share of that token.

use super::token::{Request, mint};
use crate::access::token::TokenKey;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Keys the links may run, comma-separated.
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    /// Categories whose rows the links may run, comma-separated.
    #[arg(long, value_delimiter = ',')]
    categories: Vec<String>,
    /// How long the starting URL works: 10m, 1h.
    #[arg(long, default_value = "10m")]
    ttl: String,
    /// The dispatcher's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    audience: String,
    /// The built site the keys are checked against.
    #[arg(long, default_value = "site")]
    site: PathBuf,
    /// Where the token key lives (unless CAPDIR_TOKEN_KEY is set).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    #[command(flatten)]
    ledger: super::LedgerArg,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let location = crate::ledger::Location::parse(&a.ledger.url)?;
    super::current_thread()?.block_on(async move {
        let ledger = location.open().await?;
        let (key, _) = TokenKey::load(&crate::invoke::breaker::data_dir(a.data))?;
        let request = Request {
            keys: a.keys,
            categories: a.categories,
            ttl: a.ttl,
            audience: a.audience,
            risk: "low".into(),
            repeat_window: "10m".into(),
            ..Request::default()
        };
        let minted = mint(&request, &a.site, &key, ledger.as_ref()).await?;
        let base = minted.claims.aud.trim_end_matches('/');
        eprintln!(
            "share {} covers {} until {}; revoke it with `capdir token revoke {}`",
            minted.claims.id,
            minted.claims.scope_text(),
            minted.claims.expires_at(),
            minted.claims.id
        );
        // `ask=` comes last: the model appends what it needs, in words.
        println!("{base}/api/dispatch?share={}&ask=", minted.token);
        Ok(ExitCode::SUCCESS)
    })
}
