//! `capdir mcp`: MCP on standard input and output. The caller is the local owner (it started
//! the process); no owner key is needed, and none is read.

use crate::serve::AppState;
use crate::serve::mcp::{self, Projection};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The built site; built from the bundled catalogue first when it has no snapshot.
    #[arg(long, default_value = "site")]
    site: PathBuf,
    /// What tools/list lists: `full` (one tool per row) or `meta` (ask, contract, invoke).
    #[arg(long = "mcp", value_name = "PROJECTION", default_value = "full")]
    projection: Projection,
    /// Tools per tools/list page.
    #[arg(long, value_name = "N", default_value_t = mcp::DEFAULT_PAGE_SIZE)]
    page_size: usize,
    #[command(flatten)]
    ledger: super::LedgerArg,
    /// The dispatcher's public URL, for the links in answers.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base_url: String,
    /// Where breaker state lives; default `$CAPDIR_DATA`, else `data`.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    #[command(flatten)]
    egress: super::EgressArgs,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let _telemetry = super::init_logs()?;
    super::ensure_site(&a.site, &a.base_url)?;
    let options = mcp::Options {
        projection: a.projection,
        page_size: a.page_size,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let mut settings =
            super::serve::settings(&a.site, &a.ledger.url, a.base_url, a.data, options).await?;
        a.egress.apply(&mut settings.config)?;
        let state = AppState::new(settings)?;
        state.spawn_reloader(std::time::Duration::from_millis(200));
        mcp::stdio::serve(state).await?;
        Ok(ExitCode::SUCCESS)
    })
}
