//! The command line: `main.rs` parses nothing itself and calls [`run`]. One file per command,
//! each with its arguments (`Args`) and what it does (`run`); this file only dispatches and
//! holds what several commands share (logs, the bundled build, where state lives).

mod approvals;
mod ask;
mod breaker;
mod build;
mod check;
mod eval;
mod import;
mod invoke;
mod key;
mod ledger;
mod mcp;
mod new;
mod otel;
mod route;
mod serve;
mod share;
mod templates;
pub mod token;

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
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
    Check(check::Args),
    /// Compile the catalogue into a site: snapshot, index, contracts, pages, projections.
    Build(build::Args),
    /// Ask the catalogue in plain words: the best row and ranked candidates.
    Ask(ask::Args),
    /// Measure search quality on labelled queries (JSON lines: {"query", "keys"}).
    Eval(eval::Args),
    /// Write a scaffold row to fill in.
    New(new::Args),
    /// Write capdir's page templates and static files into a folder to restyle the site.
    Templates(templates::Args),
    /// Write rows from what already exists: `import openapi FILE|URL`, `import mcp`.
    Import(import::Args),
    /// Invoke one row by key and print its result; exit 1 when it fails or is refused.
    Invoke(invoke::Args),
    /// Run the dispatcher: ask, contracts, invoke with durable receipts, the static site.
    Serve(serve::Args),
    /// Serve the catalogue as an MCP server on standard input and output, as the local owner.
    Mcp(mcp::Args),
    /// Run the router tags ([KEY]args[/KEY]) of a text as the local owner, with receipts.
    Route(route::Args),
    /// Mint, revoke and list capability tokens.
    Token(token::Args),
    /// Print one starting URL for a model that can only fetch URLs (a share token in it).
    Share(share::Args),
    /// The calls waiting for a person's approval on a running dispatcher: list, show,
    /// approve, deny.
    Approvals(approvals::Args),
    /// Check or read the receipt ledger; verify a checkpoint and proofs offline.
    Ledger(ledger::Args),
    /// Make a signing key for builds or for the receipt log, and print its public key.
    Key(key::Args),
    /// Show or reset the per-credential circuit breakers.
    Breaker(breaker::Args),
}

/// Parse the command line and run the command; errors print their cause chain and exit 2.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_) | Command::Mcp(_)) {
        no_huge_pages();
    }
    let result = match cli.command {
        Command::Check(a) => check::run(a),
        Command::Build(a) => build::run(a),
        Command::Ask(a) => ask::run(a),
        Command::Eval(a) => eval::run(a),
        Command::New(a) => new::run(a),
        Command::Templates(a) => templates::run(a),
        Command::Import(a) => import::run(a),
        Command::Invoke(a) => invoke::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Mcp(a) => mcp::run(a),
        Command::Route(a) => route::run(a),
        Command::Token(a) => token::run(a),
        Command::Share(a) => share::run(a),
        Command::Approvals(a) => approvals::run(a),
        Command::Ledger(a) => ledger::run(a),
        Command::Key(a) => key::run(a),
        Command::Breaker(a) => breaker::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A command that runs and ends asks the kernel for no transparent huge pages. mimalloc asks
/// for them, and the kernel then zeroes 2 MiB at the first touch of each new region: a
/// process that grows its heap once and exits pays for pages it never uses (most of a one-row
/// rebuild's system time, seen with perf over `bench/build.sh`'s rebuilds). A dispatcher keeps them: it lives long
/// enough to use what it faults in.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments and touches no memory of ours; a
    // kernel without it returns an error, which changes nothing.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// `--ledger`, as `serve`, `mcp`, `token` and `ledger` take it.
#[derive(clap::Args)]
struct LedgerArg {
    /// The receipt ledger: `sqlite:PATH`, or `postgres://user:password@host:port/db` for
    /// several dispatchers sharing one chain (keeps breaker state and tokens there too).
    #[arg(
        long = "ledger",
        value_name = "LEDGER",
        env = "CAPDIR_LEDGER",
        hide_env_values = true,
        default_value = "sqlite:data/ledger.sqlite",
        global = true
    )]
    url: String,
}

/// Success or failure as an exit code.
fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Logs and traces (`otel.rs`), kept until the command ends.
fn init_logs() -> anyhow::Result<otel::Telemetry> {
    otel::init()
}

/// Build the bundled catalogue into `site` when it has no snapshot yet.
fn ensure_site(site: &Path, base_url: &str) -> anyhow::Result<()> {
    if site.join("catalogue.sqlite").exists() {
        return Ok(());
    }
    tracing::info!(site = %site.display(), "no site yet: building the bundled catalogue");
    let opts = crate::build::Options {
        dispatcher_url: base_url.to_string(),
        ..crate::build::Options::new("catalogue", site)
    };
    crate::build::run(&opts).map_err(|e| match e {
        crate::build::BuildError::Check(d) => {
            anyhow::anyhow!("the catalogue has errors:\n{d}")
        }
        crate::build::BuildError::Other(e) => e,
    })?;
    Ok(())
}

/// The breaker state a command uses: the PostgreSQL ledger's when `--ledger` names one,
/// else `<data>/state.sqlite`.
fn breaker_for(
    ledger: Option<&str>,
    data: Option<PathBuf>,
) -> anyhow::Result<crate::invoke::breaker::Breaker> {
    let data = crate::invoke::breaker::data_dir(data);
    Ok(match ledger {
        Some(text) => crate::ledger::Location::parse(text)?.breaker(&data),
        None => crate::invoke::breaker::Breaker::in_data_dir(&data),
    })
}

/// A runtime on this thread, for commands that make a few async calls.
fn current_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Where rows' requests may go, for `serve` and `invoke`.
#[derive(clap::Args, Clone)]
pub(super) struct EgressArgs {
    /// Addresses beyond the public internet rows may reach: `loopback`, `private`,
    /// `link-local`, networks like `10.1.0.0/16`, comma-separated (default: none).
    #[arg(long, value_name = "LIST", env = "CAPDIR_ALLOW_EGRESS", default_value = "none", value_parser = crate::invoke::egress::Egress::parse)]
    allow_egress: crate::invoke::egress::Egress,
    /// An operator's bindings file (the format of catalogue/bindings.yaml) that narrows the
    /// catalogue's: a credential goes only where both allow.
    #[arg(long, value_name = "FILE")]
    bindings: Option<std::path::PathBuf>,
}

impl EgressArgs {
    /// `config` with the egress policy and the operator's narrowing applied.
    pub(super) fn apply(&self, config: &mut crate::invoke::InvokerConfig) -> anyhow::Result<()> {
        config.egress = self.allow_egress.clone();
        if let Some(path) = &self.bindings {
            let bytes = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("--bindings {}: {e}", path.display()))?;
            let narrowing = crate::row::binding::Bindings::parse(&bytes).map_err(|e| {
                anyhow::anyhow!(
                    "--bindings {}:{}:{}: {}",
                    path.display(),
                    e.line,
                    e.col,
                    e.message
                )
            })?;
            if let Some((env, problem)) = narrowing.problems().into_iter().next() {
                anyhow::bail!("--bindings {}: {env}: {problem}", path.display());
            }
            config.narrowing = Some(std::sync::Arc::new(narrowing));
        }
        Ok(())
    }
}
