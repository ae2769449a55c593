//! `capdir import openapi FILE|URL`, `capdir import mcp` and `capdir import server-json
//! FILE|URL` (an MCP registry entry, reached as `import mcp` would): read the document or reach the
//! server, let `import` plan the rows (it writes nothing), write them here, and report: for a
//! document what could not be mapped, per operation on standard error and the summary on
//! standard output (or everything as one JSON document with `--json`); for a server each row
//! and each tool left out.

use crate::import::mcp::{self, Change};
use crate::import::{self, Options, Report, Status};
use crate::row::mcp::McpServer;
use anyhow::{Context as _, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    source: Source,
}

#[derive(clap::Subcommand)]
enum Source {
    /// One `http` row per operation of an OpenAPI document (3.0, 3.1 or Swagger 2.0; JSON or
    /// YAML). Re-importing the same document changes nothing.
    Openapi(OpenApi),
    /// One row per tool of an MCP server (a command after `--`, or --url), each forwarding its
    /// call to that tool (`runner: mcp`).
    Mcp(Mcp),
    /// One row per tool of the server an MCP registry entry (`server.json`) describes: its
    /// first remote, else its first package started over stdio (`npx`, `uvx`, `dnx`,
    /// `docker`), reached as `capdir import mcp` would.
    ServerJson(ServerJsonArgs),
}

#[derive(clap::Args)]
#[command(after_help = "Examples:
  capdir import server-json server.json --prefix WEATHER
  capdir import server-json https://registry.modelcontextprotocol.io/v0/servers/ID --package 0")]
struct ServerJsonArgs {
    /// The entry: a file, or an http(s) URL (a registry API's answer for one server works too).
    entry: String,
    /// Use this remote (0 is the first) instead of the first one.
    #[arg(long, value_name = "N", conflicts_with = "package")]
    remote: Option<usize>,
    /// Use this package (0 is the first) instead of the first remote.
    #[arg(long, value_name = "N")]
    package: Option<usize>,
    /// Let the entry give its runtime (`docker run`, `npx`, …) arguments of its own: they can
    /// change what runs and where (a `docker run` flag can mount the host).
    #[arg(long)]
    runtime_arguments: bool,
    /// Put in front of every key and of the variables the remote's headers are sent from.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Every row's category (lowercase letters, digits and dashes).
    #[arg(long, default_value = "")]
    category: String,
    /// The catalogue directory to write the rows into.
    #[arg(long, default_value = "catalogue")]
    out: PathBuf,
    /// The credential to reach the server with now, and to write into the rows (as for
    /// `capdir import mcp`). Without it the rows name what the entry asks for, and the server
    /// is reached with no credential: an entry never decides which secrets leave this machine.
    #[arg(long, value_name = "AUTH")]
    auth: Option<String>,
    /// Addresses beyond the public internet the import may reach the entry's remote at:
    /// `loopback`, `private`, networks (as `capdir serve --allow-egress`).
    #[arg(long, value_name = "LIST", default_value = "none", value_parser = crate::invoke::egress::Egress::parse)]
    allow_egress: crate::invoke::egress::Egress,
    /// Time to start or reach the server, and for each page of tools/list (e.g. 60s).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
}

#[derive(clap::Args)]
struct OpenApi {
    /// The document: a file, or an http(s) URL to fetch.
    document: String,
    /// Put in front of every key and credential variable: `GITHUB` → `GITHUB_ISSUES_CREATE`,
    /// `GITHUB_TOKEN`.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Every row's category (default: the operation's first tag).
    #[arg(long)]
    category: Option<String>,
    /// Only operations with this tag, or whose path matches this glob (`/repos/*/*/issues*`;
    /// `*` within a segment, `**` across). Repeat for several.
    #[arg(long, value_name = "TAG|PATH-GLOB")]
    only: Vec<String>,
    /// The catalogue directory the rows go to.
    #[arg(long, default_value = "catalogue")]
    out: PathBuf,
    /// The API's base URL, instead of the document's servers (or host and basePath).
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Every row's `auth` (e.g. `bearer:GITHUB_TOKEN`), instead of the document's security.
    #[arg(long, value_name = "AUTH")]
    auth: Option<String>,
    /// Delete rows this document imported earlier whose operation is gone (or got another
    /// key); without it they are kept and reported.
    #[arg(long)]
    prune: bool,
    /// Overwrite rows edited by hand since they were imported.
    #[arg(long)]
    force: bool,
    /// Plan and report, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON on standard output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  capdir import mcp --prefix EVERYTHING -- npx -y @modelcontextprotocol/server-everything@2026.8.31\n  capdir import mcp --url https://mcp.example.com/mcp --auth bearer:EXAMPLE_TOKEN --category example"
)]
struct Mcp {
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

/// A document larger than this is refused before it is parsed.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024 * 1024;

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.source {
        Source::Openapi(o) => openapi(o),
        Source::Mcp(m) => from_mcp(m),
        Source::ServerJson(e) => from_server_json(e),
    }
}

fn openapi(a: OpenApi) -> anyhow::Result<ExitCode> {
    if let Some(c) = &a.category
        && !crate::row::is_category(c)
    {
        bail!("--category `{c}` is not lowercase letters, digits and dashes");
    }
    let text = read_document(&a.document)?;
    let doc = import::document::parse(&text, &a.document)?;
    drop(text);
    let existing = if a.out.is_dir() {
        crate::row::catalogue::read_dir(&a.out)
            .with_context(|| format!("cannot read {}", a.out.display()))?
    } else {
        Vec::new()
    };
    let options = Options {
        prefix: a.prefix,
        category: a.category,
        only: a.only,
        server: a.server,
        auth: a.auth,
        prune: a.prune,
        force: a.force,
    };
    let plan = import::import(&doc, &options, &existing, &a.out)?;
    if !a.dry_run {
        write(&a.out, &plan.writes, &plan.deletes)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&plan.report)?);
    } else {
        eprint!("{}", per_operation(&plan.report));
        print!("{}", summary(&plan.report, &a.out, a.dry_run));
    }
    // The rows were written (they pass the gate); the catalogue around them now does not.
    Ok(super::exit(plan.report.catalogue_problems.is_empty()))
}

fn from_mcp(a: Mcp) -> anyhow::Result<ExitCode> {
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
    let options = mcp::Options {
        server,
        auth: a.auth,
        prefix: a.prefix,
        category: a.category,
        out: a.out,
        timeout: Duration::from_secs(a.timeout.max(1)),
        // The operator names the server on its own command line: any address it gives is
        // its own, and so is the credential it hands over.
        egress: crate::invoke::egress::Egress::unrestricted(),
        reach_with_auth: true,
    };
    write_mcp(&options)
}

fn from_server_json(a: ServerJsonArgs) -> anyhow::Result<ExitCode> {
    use crate::row::server_json::{self, Pick};
    let text = read_document(&a.entry)?;
    let entry = server_json::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", a.entry))?;
    let pick = match (a.remote, a.package) {
        (Some(i), _) => Pick::Remote(i),
        (None, Some(i)) => Pick::Package(i),
        (None, None) => Pick::Auto,
    };
    let launch = server_json::launch(&entry, pick, &a.prefix, a.runtime_arguments)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.entry))?;
    eprintln!(
        "{} {}: reaching {}",
        entry.name, entry.version, launch.server
    );
    let options = mcp::Options {
        server: launch.server,
        reach_with_auth: a.auth.is_some(),
        auth: a.auth.unwrap_or(launch.auth),
        prefix: a.prefix,
        category: a.category,
        out: a.out,
        timeout: Duration::from_secs(a.timeout.max(1)),
        egress: a.allow_egress,
    };
    write_mcp(&options)
}

/// Plan the rows of one MCP server, write them, and report each row and each tool left out.
fn write_mcp(options: &mcp::Options) -> anyhow::Result<ExitCode> {
    let plan = super::current_thread()?.block_on(mcp::import(options))?;
    write(&options.out, &plan.writes, &[])?;
    let report = plan.report;
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
        bindings_summary(&report.bindings, &options.out, false)
    );
    println!(
        "{name}: {} tools, {written} written, {unchanged} unchanged, {} skipped",
        report.rows.len() + report.skipped.len(),
        report.skipped.len()
    );
    Ok(super::exit(report.skipped.is_empty()))
}

/// A document by file name or http(s) URL, refused over `MAX_DOCUMENT_BYTES`.
fn read_document(document: &str) -> anyhow::Result<String> {
    if document.starts_with("http://") || document.starts_with("https://") {
        return super::current_thread()?.block_on(fetch(document));
    }
    let bytes =
        std::fs::read(document).with_context(|| format!("cannot read the document {document}"))?;
    if bytes.len() > MAX_DOCUMENT_BYTES {
        bail!("{document}: larger than {MAX_DOCUMENT_BYTES} bytes");
    }
    String::from_utf8(bytes).with_context(|| format!("{document} is not UTF-8 text"))
}

async fn fetch(url: &str) -> anyhow::Result<String> {
    let client = crate::invoke::runner::http::client_builder()
        .user_agent(concat!("capdir/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("cannot fetch {url}"))?;
    if !resp.status().is_success() {
        bail!("{url} answered {}", resp.status());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .with_context(|| format!("reading {url}"))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            bail!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes");
        }
    }
    String::from_utf8(body).with_context(|| format!("{url} is not UTF-8 text"))
}

/// Write each file beside itself and rename it into place, so a reader never sees half a row.
fn write(dir: &Path, writes: &[(String, String)], deletes: &[String]) -> anyhow::Result<()> {
    if writes.is_empty() && deletes.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in writes {
        crate::atomic::write(&dir.join(name), text.as_bytes()).context("cannot write a row")?;
    }
    for name in deletes {
        let path = dir.join(name);
        std::fs::remove_file(&path).with_context(|| format!("cannot delete {}", path.display()))?;
    }
    Ok(())
}

/// One line per operation with something to say.
fn per_operation(r: &Report) -> String {
    let mut s = String::new();
    for n in &r.document_notes {
        s.push_str(&format!("{}: {}: {}\n", r.document, n.kind, n.message));
    }
    for row in &r.rows {
        for n in &row.notes {
            s.push_str(&format!(
                "{} ({}): {}: {}\n",
                row.key, row.operation, n.kind, n.message
            ));
        }
        if row.status == Status::KeptEdited {
            s.push_str(&format!(
                "{} ({}): edited by hand since it was imported: kept (--force overwrites)\n",
                row.key, row.operation
            ));
        }
    }
    for sk in &r.skipped {
        let what = if sk.operation.is_empty() {
            sk.pointer.as_str()
        } else {
            sk.operation.as_str()
        };
        for n in &sk.notes {
            s.push_str(&format!(
                "not imported: {what}: {}: {}\n",
                n.kind, n.message
            ));
        }
    }
    for g in &r.gone {
        s.push_str(&format!(
            "{} ({}): {}: {}\n",
            g.key,
            g.operation,
            g.reason,
            g.action.replace('_', " ")
        ));
    }
    for p in &r.catalogue_problems {
        s.push_str(&format!("catalogue: {p}\n"));
    }
    s
}

/// Which credential the rows use, bound to which origins in `bindings.yaml` (for review).
pub(super) fn bindings_summary(
    bound: &[import::bindings::Bound],
    out: &Path,
    dry_run: bool,
) -> String {
    let file = out.join(crate::row::binding::FILE);
    let mut s = String::new();
    for b in bound {
        let rows = if b.rows == 1 { "row" } else { "rows" };
        let origins = b.origins.join(", ");
        let line = match b.status {
            "new" => format!(
                "{} {} to {origins} for its {} {rows} (keys:) in {}: review it\n",
                if dry_run { "would bind" } else { "bound" },
                b.env,
                b.rows,
                file.display()
            ),
            "extended" => {
                let mut added = Vec::new();
                if !b.added_origins.is_empty() {
                    added.push(format!("origins {}", b.added_origins.join(", ")));
                }
                if b.added_keys > 0 {
                    let of = if b.added_keys == 1 { "row" } else { "rows" };
                    added.push(format!("the keys of {} {of}", b.added_keys));
                }
                format!(
                    "{}: {} {} to its binding in {} (its {} {rows} call {origins}): review it\n",
                    b.env,
                    if dry_run { "would add" } else { "added" },
                    added.join(" and "),
                    file.display(),
                    b.rows
                )
            }
            _ => format!(
                "{} is already bound to {origins} for its {} {rows} in {}\n",
                b.env,
                b.rows,
                file.display()
            ),
        };
        s.push_str(&line);
    }
    s
}

/// The counts, the notes by kind, the credentials.
fn summary(r: &Report, out: &Path, dry_run: bool) -> String {
    let mut s = format!(
        "{} {} ({}) into {}: {} operations, {} selected; rows: {} new, {} changed, {} unchanged, {} kept (edited by hand); {} not imported; {} gone from the document\n",
        if dry_run { "would import" } else { "imported" },
        r.document,
        r.version,
        out.display(),
        r.operations,
        r.selected,
        r.count(Status::New),
        r.count(Status::Changed),
        r.count(Status::Unchanged),
        r.count(Status::KeptEdited),
        r.skipped.len(),
        r.gone.len(),
    );
    if r.selected > 0 {
        let reachable = r.fully_reachable();
        s.push_str(&format!(
            "every parameter reachable: {reachable} of {} selected operations ({:.1}%)\n",
            r.selected,
            100.0 * reachable as f64 / r.selected as f64
        ));
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for n in r.rows.iter().flat_map(|row| &row.notes) {
        *kinds.entry(n.kind).or_default() += 1;
    }
    if !kinds.is_empty() {
        let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        s.push_str(&format!(
            "not mapped as written (rows affected, details on stderr): {}\n",
            list.join(", ")
        ));
    }
    let mut skipped: BTreeMap<&str, usize> = BTreeMap::new();
    for n in r.skipped.iter().filter_map(|sk| sk.notes.first()) {
        *skipped.entry(n.kind).or_default() += 1;
    }
    if !skipped.is_empty() {
        let list: Vec<String> = skipped.iter().map(|(k, n)| format!("{k} {n}")).collect();
        s.push_str(&format!(
            "not imported, by first reason: {}\n",
            list.join(", ")
        ));
    }
    for (name, how) in &r.schemes {
        s.push_str(&format!("security scheme {name}: {how}\n"));
    }
    s.push_str(&bindings_summary(&r.bindings, out, dry_run));
    if !r.asks_left_out.is_empty() {
        s.push_str(&format!(
            "asks left out: {} (the catalogue's search does not rank their row in its top {})\n",
            r.asks_left_out.len(),
            crate::check::ASK_TOP
        ));
    }
    if !r.catalogue_problems.is_empty() {
        s.push_str(&format!(
            "with these rows the catalogue fails the gate where it passed before: {} problem(s), on stderr; \
             rephrase those asks, or import elsewhere (--out) or fewer operations (--only)\n",
            r.catalogue_problems.len()
        ));
    }
    s
}
