//! `capdir import mcp`: one row per tool of an MCP server, written into a catalogue directory.

use crate::import::mcp::{self, Change, Options};
use crate::row::mcp::McpServer;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  capdir import mcp --prefix EVERYTHING -- npx -y @modelcontextprotocol/server-everything@2026.8.31\n  capdir import mcp --url https://mcp.example.com/mcp --auth bearer:EXAMPLE_TOKEN --category example"
)]
pub(super) struct Args {
    /// A Streamable HTTP endpoint, instead of a command after `--`.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    url: Option<String>,
    /// Put in front of every key: `--prefix everything` makes `EVERYTHING_ECHO`.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Every row's category (lowercase letters, digits and dashes).
    #[arg(long, default_value = "")]
    category: String,
    /// The catalogue directory to write the rows into.
    #[arg(long, default_value = "catalogue")]
    out: PathBuf,
    /// The credential, by environment-variable name, written into every row and used to reach
    /// the server now: `env:NAME,NAME` for a command (those variables are put into its
    /// environment), `bearer:ENV`, `basic:ENV`, `headers:{"H":"$ENV"}` or `query:p=ENV` for
    /// --url.
    #[arg(long, default_value = "", value_name = "AUTH")]
    auth: String,
    /// Time to start or reach the server, and for each page of tools/list (e.g. 60s).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
    /// The command that starts the server, after `--`: `-- npx -y @scope/server@1.2.3`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let server = match (a.url, a.command.split_first()) {
        (Some(url), _) => {
            let target = format!("mcp+{url}#tool");
            let parsed = crate::row::mcp::McpTarget::parse(&target)
                .map_err(|e| anyhow::anyhow!("--url {url}: {} ({})", e.message, e.help))?;
            parsed.server
        }
        (None, Some((command, args))) => McpServer::Stdio {
            command: command.clone(),
            args: args.to_vec(),
        },
        (None, None) => anyhow::bail!(
            "name the server: `capdir import mcp -- COMMAND ARG…` for one started as a command, or `--url URL`"
        ),
    };
    let options = Options {
        server,
        auth: a.auth,
        prefix: a.prefix,
        category: a.category,
        out: a.out,
        timeout: std::time::Duration::from_secs(a.timeout.max(1)),
    };
    let report = super::current_thread()?.block_on(mcp::import(&options))?;
    let name = if report.server.name.is_empty() {
        options.server.to_string()
    } else {
        format!("{} {}", report.server.name, report.server.version)
    };
    let (mut written, mut unchanged) = (0, 0);
    for e in &report.rows {
        let what = match e.change {
            Change::Written => {
                written += 1;
                "wrote"
            }
            Change::Unchanged => {
                unchanged += 1;
                "unchanged"
            }
        };
        println!(
            "{what} {}/{}.yaml  (tool {})",
            options.out.display(),
            e.key,
            e.tool
        );
    }
    for s in &report.skipped {
        println!("skipped tool {}: {}", s.tool, s.reason);
    }
    for (key, tool) in &report.stale {
        println!(
            "not from this import: {key} (tool {tool}; the server no longer lists it under this key — delete the file if it is gone)"
        );
    }
    print!(
        "{}",
        super::import::bindings_summary(&report.bindings, &options.out, false)
    );
    println!(
        "{name}: {} tools, {written} written, {unchanged} unchanged, {} skipped",
        report.rows.len() + report.skipped.len(),
        report.skipped.len()
    );
    Ok(super::exit(report.skipped.is_empty()))
}
