//! `capdir invoke`: load and check the catalogue (or a built site's snapshot), invoke one row,
//! print the outcome; exit 1 when it failed or was refused.

use crate::invoke::rowset::RowSet;
use crate::invoke::{Input, Invoker, InvokerConfig};
use serde_json::Value as Json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
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
    /// Invoke against a built site's snapshot instead of the catalogue directory.
    #[arg(long, value_name = "DIR", conflicts_with = "catalogue")]
    site: Option<PathBuf>,
    /// Print the outcome as JSON: key, status, output, usage, error.
    #[arg(long)]
    json: bool,
    /// Where state lives (breaker); default `$CAPDIR_DATA`, else `data`.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// With a `postgres://` ledger, breaker state is shared with the dispatchers there.
    #[arg(long, env = "CAPDIR_LEDGER", hide_env_values = true)]
    ledger: Option<String>,
    #[command(flatten)]
    egress: super::EgressArgs,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let breaker = super::breaker_for(a.ledger.as_deref(), a.data)?;
    let input = match (a.body, a.args) {
        (Some(_), Some(_)) => {
            anyhow::bail!("give either a body (`a|b`) or --args JSON, not both")
        }
        (None, Some(text)) => match serde_json::from_str::<Json>(&text) {
            Ok(Json::Object(obj)) => Input::Args(obj),
            Ok(_) => anyhow::bail!(
                "--args must be a JSON object of arguments by name, e.g. {{\"text\": \"hi\"}}"
            ),
            Err(e) => anyhow::bail!("--args is not JSON: {e}"),
        },
        (body, None) => Input::Body(body.unwrap_or_default()),
    };
    let (rows, bindings) = match &a.site {
        Some(site) => (RowSet::from_site(site)?, crate::build::site_bindings(site)),
        None => {
            let bindings = std::fs::read(a.catalogue.join(crate::row::binding::FILE))
                .ok()
                .and_then(|b| crate::row::binding::Bindings::parse(&b).ok())
                .unwrap_or_default();
            (RowSet::from_dir(&a.catalogue)?, bindings)
        }
    };
    let mut config = InvokerConfig::from_env(breaker).map_err(anyhow::Error::msg)?;
    config.bindings = std::sync::Arc::new(bindings);
    a.egress.apply(&mut config)?;
    let invoker = Invoker::new(rows, config).map_err(anyhow::Error::msg)?;
    let outcome = super::current_thread()?.block_on(invoker.invoke(&a.key, input));
    let mut text = if a.json {
        serde_json::to_string(&outcome)?
    } else {
        outcome.output.clone()
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print!("{text}");
    Ok(super::exit(outcome.is_success()))
}
