//! The `capdir` command line: parses arguments and calls into the library.

use capdir::diag::{self, Format};
use capdir::row::RowType;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc rather than glibc's allocator: the dispatcher allocates many small, short-lived
/// buffers across threads (request bodies, JSON, receipts), where glibc's arenas showed up
/// as a tenth of the profile (`_int_malloc`, `_int_free`, `malloc_consolidate`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Check {
        /// The catalogue directory.
        #[arg(default_value = "catalogue")]
        dir: PathBuf,
        /// Output format; `github` is chosen by itself when GITHUB_ACTIONS=true.
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Compare with the catalogue at this Git revision (the pull request's target branch):
        /// new and clean rows must stay clean, legacy rows must not get worse.
        #[arg(long, value_name = "REV")]
        base: Option<String>,
    },
    /// Compile the catalogue into a site: snapshot, index, contracts, pages, projections.
    Build {
        /// The catalogue directory.
        #[arg(default_value = "catalogue")]
        dir: PathBuf,
        /// Where the site goes; replaced atomically.
        #[arg(long, default_value = "site")]
        out: PathBuf,
        /// The dispatcher's public URL, used in contracts and llms.txt.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        base_url: String,
        /// The repository's web address, for links to commits in row histories
        /// (`https://github.com/OWNER/NAME`). Default: the catalogue repository's `origin`
        /// remote when it is a hosted one; `--repo-url ''` turns the links off.
        #[arg(long, value_name = "URL")]
        repo_url: Option<String>,
    },
    /// Ask the catalogue in plain words: the best row and ranked candidates.
    Ask {
        /// The request, e.g. "what time is it".
        #[arg(required_unless_present = "batch")]
        query: Option<String>,
        /// Answer one query per line of FILE, one JSON line each, in input order.
        #[arg(long, value_name = "FILE", conflicts_with = "query")]
        batch: Option<PathBuf>,
        #[arg(long, default_value = "site")]
        site: PathBuf,
        #[arg(long, default_value_t = 12)]
        limit: usize,
        #[arg(long)]
        json: bool,
        /// The dispatcher's URL, for run-now and contract links.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        base_url: String,
    },
    /// Measure search quality on labelled queries (JSON lines: {"query", "keys"}).
    Eval {
        #[arg(long, value_name = "FILE.jsonl")]
        queries: PathBuf,
        #[arg(long, default_value = "site")]
        site: PathBuf,
        /// Fail (exit 1) when MRR@12 is below this.
        #[arg(long)]
        min_mrr: Option<f64>,
        /// Fail (exit 1) when recall@5 is below this.
        #[arg(long)]
        min_recall5: Option<f64>,
        #[arg(long)]
        json: bool,
        /// Field weights to try instead of the defaults, e.g. `key=2,what=1`.
        #[arg(long)]
        boosts: Option<capdir::search::Boosts>,
    },
    /// Write a scaffold row to fill in.
    New {
        /// The new row's key, e.g. WEATHER_NOW.
        key: String,
        /// Which runner executes it.
        #[arg(long = "type", value_parser = parse_type)]
        kind: RowType,
        /// The catalogue directory.
        #[arg(long, default_value = "catalogue")]
        dir: PathBuf,
    },
    /// Invoke one row by key and print its result; exit 1 when it fails or is refused.
    Invoke {
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
    },
    /// Run the dispatcher: ask, contracts, invoke with durable receipts, the static site.
    Serve {
        /// The built site; built from the bundled catalogue first when it has no snapshot.
        #[arg(long, default_value = "site")]
        site: PathBuf,
        /// Where to listen (loopback by default).
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: std::net::SocketAddr,
        /// The receipt ledger: `sqlite:PATH`, or `postgres://user:password@host:port/db` for
        /// several dispatchers sharing one chain (keeps breaker state there too).
        #[arg(
            long,
            env = "CAPDIR_LEDGER",
            hide_env_values = true,
            default_value = "sqlite:data/ledger.sqlite"
        )]
        ledger: String,
        /// The public URL, for the links in answers.
        #[arg(long)]
        base_url: Option<String>,
        /// Where breaker state and the token key live; default `$CAPDIR_DATA`, else `data`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// What `/mcp` lists: `full` (one tool per row) or `meta` (ask, contract, invoke).
        #[arg(long = "mcp", value_name = "PROJECTION", default_value = "full")]
        projection: capdir::mcp::Projection,
        /// Tools per `/mcp` tools/list page.
        #[arg(long, value_name = "N", default_value_t = capdir::mcp::DEFAULT_PAGE_SIZE)]
        mcp_page_size: usize,
        /// Let callers without a credential invoke rows that are not sensitive and use no
        /// credential (for local use).
        #[arg(long)]
        open: bool,
        #[command(flatten)]
        limits: Limits,
    },
    /// Serve the catalogue as an MCP server on standard input and output, as the local owner.
    Mcp {
        /// The built site; built from the bundled catalogue first when it has no snapshot.
        #[arg(long, default_value = "site")]
        site: PathBuf,
        /// What tools/list lists: `full` (one tool per row) or `meta` (ask, contract, invoke).
        #[arg(long = "mcp", value_name = "PROJECTION", default_value = "full")]
        projection: capdir::mcp::Projection,
        /// Tools per tools/list page.
        #[arg(long, value_name = "N", default_value_t = capdir::mcp::DEFAULT_PAGE_SIZE)]
        page_size: usize,
        /// The receipt ledger: `sqlite:PATH`, or `postgres://user:password@host:port/db` for
        /// several dispatchers sharing one chain (keeps breaker state there too).
        #[arg(
            long,
            env = "CAPDIR_LEDGER",
            hide_env_values = true,
            default_value = "sqlite:data/ledger.sqlite"
        )]
        ledger: String,
        /// The dispatcher's public URL, for the links in answers.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        base_url: String,
        /// Where breaker state lives; default `$CAPDIR_DATA`, else `data`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Mint, revoke and list capability tokens.
    Token {
        #[command(subcommand)]
        action: TokenAction,
        /// The receipt ledger, where tokens and revocations are kept: `sqlite:PATH` or
        /// `postgres://user:password@host:port/db`.
        #[arg(
            long,
            env = "CAPDIR_LEDGER",
            hide_env_values = true,
            default_value = "sqlite:data/ledger.sqlite",
            global = true
        )]
        ledger: String,
    },
    /// Check or read the receipt ledger.
    Ledger {
        #[command(subcommand)]
        action: LedgerAction,
        /// The receipt ledger: `sqlite:PATH` or `postgres://user:password@host:port/db`.
        #[arg(
            long,
            env = "CAPDIR_LEDGER",
            hide_env_values = true,
            default_value = "sqlite:data/ledger.sqlite",
            global = true
        )]
        ledger: String,
    },
    /// Show or reset the per-credential circuit breakers.
    Breaker {
        #[command(subcommand)]
        action: BreakerAction,
        /// Where state lives; default `$CAPDIR_DATA`, else `data`.
        #[arg(long, value_name = "DIR", global = true)]
        data: Option<PathBuf>,
        /// With a `postgres://` ledger, the state the dispatchers share there.
        #[arg(long, env = "CAPDIR_LEDGER", hide_env_values = true, global = true)]
        ledger: Option<String>,
    },
}

/// The dispatcher's limits.
#[derive(clap::Args)]
struct Limits {
    /// The largest request body, in bytes (413 above it).
    #[arg(long, default_value_t = capdir::server::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// Invocations running at once before new ones get 503 with Retry-After.
    #[arg(long, default_value_t = 1024)]
    max_inflight: usize,
    /// How long an http row's upstream may take (e.g. 30s); agent rows get four times this.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds)]
    upstream_timeout: Option<u64>,
    /// The most bytes read from an upstream response (http rows cut there; agent rows fail).
    #[arg(long, value_name = "BYTES")]
    response_cap: Option<usize>,
}

#[derive(Subcommand)]
enum TokenAction {
    /// Mint a token; the token alone is the last line printed.
    Mint {
        /// Keys the token may invoke, comma-separated.
        #[arg(long, value_delimiter = ',')]
        keys: Vec<String>,
        /// Categories whose rows the token may invoke, comma-separated.
        #[arg(long, value_delimiter = ',')]
        categories: Vec<String>,
        /// How long the token lives: 30m, 1h, 7d.
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// The dispatcher's base URL; other dispatchers refuse the token.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        audience: String,
        /// The risk ceiling: `high` may run sensitive rows.
        #[arg(long, default_value = "low", value_parser = ["low", "high"])]
        risk: String,
        /// Pin the row's current contract fingerprint (needs exactly one key): a changed row
        /// answers 409 contract_changed.
        #[arg(long)]
        pin: bool,
        /// The only body the token may send.
        #[arg(long, value_name = "S")]
        fixed_body: Option<String>,
        /// The largest input the token may send, in bytes.
        #[arg(long, value_name = "BYTES")]
        max_payload: Option<u64>,
        /// The built site the keys are checked against (and `--pin` reads).
        #[arg(long, default_value = "site")]
        site: PathBuf,
        /// Where the token key lives (unless CAPDIR_TOKEN_KEY is set); default `$CAPDIR_DATA`, else `data`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Revoke a token by id (`tok_…`); every dispatcher on this ledger refuses it from now on.
    Revoke { id: String },
    /// Every token minted or revoked on this ledger.
    List,
}

fn parse_seconds(s: &str) -> Result<u64, String> {
    let secs = s
        .strip_suffix("ms")
        .map(|ms| ms.parse::<u64>().map(|n| n.div_ceil(1000)))
        .unwrap_or_else(|| s.trim_end_matches('s').parse::<u64>())
        .map_err(|_| format!("`{s}` is not a duration; write 30s"))?;
    if secs == 0 {
        return Err("the timeout must be at least 1s".into());
    }
    Ok(secs)
}

#[derive(Subcommand)]
enum BreakerAction {
    /// Every credential with a breaker record, and whether it is open.
    List,
    /// Close the breaker of one credential (its name as `list` shows it).
    Reset { name: String },
}

#[derive(Subcommand)]
enum LedgerAction {
    /// Walk the hash chain; name the first broken link (exit 1).
    Verify,
    /// Print one receipt as JSON.
    Show { id: String },
}

fn parse_type(s: &str) -> Result<RowType, String> {
    RowType::parse(s).ok_or_else(|| format!("`{s}` is not a row type; use fn, http, agent or flow"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { dir, format, base } => check(dir, format, base),
        Command::Build {
            dir,
            out,
            base_url,
            repo_url,
        } => build(dir, out, base_url, repo_url),
        Command::Ask {
            query,
            batch,
            site,
            limit,
            json,
            base_url,
        } => ask(query, batch, site, limit, json, base_url),
        Command::Eval {
            queries,
            site,
            min_mrr,
            min_recall5,
            json,
            boosts,
        } => eval(queries, site, min_mrr, min_recall5, json, boosts),
        Command::New { key, kind, dir } => capdir::scaffold::write_new(&dir, &key, kind).map(|p| {
            println!(
                "wrote {}: fill in every TODO(capdir), then run `capdir check`",
                p.display()
            );
            ExitCode::SUCCESS
        }),
        Command::Invoke {
            key,
            body,
            args,
            catalogue,
            site,
            json,
            data,
            ledger,
        } => breaker_for(ledger.as_deref(), data)
            .and_then(|breaker| {
                capdir::invoke::command(
                    &catalogue,
                    site.as_deref(),
                    breaker,
                    &key,
                    body,
                    args.as_deref(),
                    json,
                )
            })
            .map(|(text, ok)| {
                print!("{text}");
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }),
        Command::Serve {
            site,
            addr,
            ledger,
            base_url,
            data,
            projection,
            mcp_page_size,
            open,
            limits,
        } => serve(
            site,
            addr,
            ledger,
            base_url,
            data,
            capdir::mcp::Options {
                projection,
                page_size: mcp_page_size,
            },
            open,
            limits,
        ),
        Command::Mcp {
            site,
            projection,
            page_size,
            ledger,
            base_url,
            data,
        } => mcp(
            site,
            ledger,
            base_url,
            data,
            capdir::mcp::Options {
                projection,
                page_size,
            },
        ),
        Command::Token { action, ledger } => token_cmd(action, ledger),
        Command::Ledger { action, ledger } => ledger_cmd(action, ledger),
        Command::Breaker {
            action,
            data,
            ledger,
        } => breaker_for(ledger.as_deref(), data).and_then(|b| breaker(action, b)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Logs go to standard error (standard output is the MCP channel of `capdir mcp`).
fn init_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Build the bundled catalogue into `site` when it has no snapshot yet.
fn ensure_site(site: &std::path::Path, base_url: &str) -> anyhow::Result<()> {
    if site.join("catalogue.sqlite").exists() {
        return Ok(());
    }
    tracing::info!(site = %site.display(), "no site yet: building the bundled catalogue");
    let opts = capdir::build::Options {
        base_url: base_url.to_string(),
        ..capdir::build::Options::new("catalogue", site)
    };
    capdir::build::run(&opts).map_err(|e| match e {
        capdir::build::BuildError::Check(d) => {
            anyhow::anyhow!("the catalogue has errors:\n{d}")
        }
        capdir::build::BuildError::Other(e) => e,
    })?;
    Ok(())
}

/// The dispatcher's settings shared by `serve` and `mcp`: the ledger opened (migrated, its
/// writer started on the current runtime) and the breaker state where the ledger keeps it.
async fn settings(
    site: &std::path::Path,
    ledger: &str,
    base_url: String,
    data: Option<PathBuf>,
    mcp: capdir::mcp::Options,
) -> anyhow::Result<capdir::server::Settings> {
    let data = capdir::breaker::data_dir(data);
    let location = capdir::ledger::Location::parse(ledger)?;
    let ledger = location.open().await?;
    tracing::info!(ledger = %location, "ledger open");
    Ok(capdir::server::Settings {
        base_url,
        config: capdir::invoke::InvokerConfig::from_env(location.breaker(&data))
            .map_err(anyhow::Error::msg)?,
        mcp,
        ..capdir::server::Settings::new(site, ledger)
    })
}

#[allow(clippy::too_many_arguments)]
fn serve(
    site: PathBuf,
    addr: std::net::SocketAddr,
    ledger: String,
    base_url: Option<String>,
    data: Option<PathBuf>,
    mcp: capdir::mcp::Options,
    open: bool,
    limits: Limits,
) -> anyhow::Result<ExitCode> {
    init_logs();
    let base_url = base_url.unwrap_or_else(|| format!("http://{addr}"));
    ensure_site(&site, &base_url)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let mut settings = settings(&site, &ledger, base_url, data.clone(), mcp).await?;
        let (token_key, key_source) =
            capdir::token::TokenKey::load(&capdir::breaker::data_dir(data))?;
        let config = &mut settings.config;
        if let Some(secs) = limits.upstream_timeout {
            config.http.timeout = std::time::Duration::from_secs(secs);
            config.agent.timeout = std::time::Duration::from_secs(secs.saturating_mul(4));
        }
        if let Some(cap) = limits.response_cap {
            config.http.max_body_bytes = cap;
            config.agent.max_body_bytes = cap;
        }
        tracing::info!(
            body_limit = limits.body_limit,
            max_inflight = limits.max_inflight,
            upstream_timeout_s = config.http.timeout.as_secs(),
            response_cap = config.http.max_body_bytes,
            token_key = %key_source,
            "limits"
        );
        let settings = capdir::server::Settings {
            owner_key: std::env::var("CAPDIR_OWNER_KEY").ok(),
            token_key: Some(token_key),
            open,
            body_limit: limits.body_limit,
            max_inflight: limits.max_inflight,
            ..settings
        };
        if settings.owner_key.as_deref().unwrap_or("").is_empty() {
            tracing::warn!(
                "CAPDIR_OWNER_KEY is not set: only capability tokens can invoke, and nobody can read every receipt"
            );
        }
        if open {
            tracing::warn!(
                "open mode (--open): callers without a credential may invoke rows that are not sensitive and use no credential"
            );
        } else {
            tracing::info!(
                "closed mode: invoking needs the owner key or a capability token (--open lets anonymous callers run rows that are not sensitive and use no credential)"
            );
        }
        let state = capdir::server::AppState::new(settings)?;
        state.spawn_reloader(std::time::Duration::from_millis(200));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        tracing::info!(addr = %listener.local_addr()?, "serving");
        axum::serve(listener, capdir::server::app(state)).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `capdir mcp`: MCP on standard input and output. The caller is the local owner (it started
/// the process); no owner key is needed, and none is read.
fn mcp(
    site: PathBuf,
    ledger: String,
    base_url: String,
    data: Option<PathBuf>,
    options: capdir::mcp::Options,
) -> anyhow::Result<ExitCode> {
    init_logs();
    ensure_site(&site, &base_url)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let settings = settings(&site, &ledger, base_url, data, options).await?;
        let state = capdir::server::AppState::new(settings)?;
        state.spawn_reloader(std::time::Duration::from_millis(200));
        capdir::mcp::stdio::serve(state).await?;
        Ok(ExitCode::SUCCESS)
    })
}

fn token_cmd(action: TokenAction, ledger: String) -> anyhow::Result<ExitCode> {
    let location = capdir::ledger::Location::parse(&ledger)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(token_on(action, location))
}

async fn token_on(
    action: TokenAction,
    location: capdir::ledger::Location,
) -> anyhow::Result<ExitCode> {
    let ledger = location.open().await?;
    match action {
        TokenAction::Mint {
            keys,
            categories,
            ttl,
            audience,
            risk,
            pin,
            fixed_body,
            max_payload,
            site,
            data,
        } => {
            let request = capdir::mint::Request {
                keys,
                categories,
                ttl,
                audience,
                risk,
                pin,
                fixed_body,
                max_payload,
            };
            let (key, _) = capdir::token::TokenKey::load(&capdir::breaker::data_dir(data))?;
            let minted = capdir::mint::mint(&request, &site, &key, ledger.as_ref()).await?;
            print!("{}", minted.render());
            Ok(ExitCode::SUCCESS)
        }
        TokenAction::Revoke { id } => {
            if !id.starts_with("tok_") {
                eprintln!(
                    "error: `{id}` is not a token id; ids start with tok_ (see `capdir token list`)"
                );
                return Ok(ExitCode::from(2));
            }
            if ledger.revoke(&id).await? {
                println!("revoked {id}: every dispatcher on this ledger refuses it from now on");
            } else {
                println!("{id} was already revoked");
            }
            Ok(ExitCode::SUCCESS)
        }
        TokenAction::List => {
            print!(
                "{}",
                capdir::mint::render_list(&ledger.tokens().await?, chrono::Utc::now().timestamp())
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn ledger_cmd(action: LedgerAction, ledger: String) -> anyhow::Result<ExitCode> {
    let location = capdir::ledger::Location::parse(&ledger)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match action {
        LedgerAction::Verify => match runtime.block_on(location.verify())? {
            capdir::ledger::Verdict::Intact { receipts } => {
                println!("ok: {receipts} receipts, every link holds");
                Ok(ExitCode::SUCCESS)
            }
            capdir::ledger::Verdict::Broken { seq, id, why } => {
                println!("broken at receipt {seq} ({id}): {why}");
                Ok(ExitCode::FAILURE)
            }
        },
        LedgerAction::Show { id } => match runtime.block_on(location.get(&id))? {
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

fn check(dir: PathBuf, format: Option<Format>, base: Option<String>) -> anyhow::Result<ExitCode> {
    let format = format.unwrap_or(
        if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
            Format::Github
        } else {
            Format::Text
        },
    );
    let files = capdir::catalogue::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("cannot read catalogue directory {}: {e}", dir.display()))?;
    let mut checked = capdir::check::check_files(&files);
    if !checked.has_errors() {
        checked
            .diags
            .extend(capdir::check::asks_gate(&checked.rows));
    }
    if let Some(rev) = base {
        let base_files = capdir::git::read_dir_at(&dir, &rev)?;
        capdir::check::against_base(&files, &mut checked, &base_files);
    }
    print!("{}", diag::render(&checked.diags, checked.files, format));
    Ok(if checked.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn build(
    dir: PathBuf,
    out: PathBuf,
    base_url: String,
    repo_url: Option<String>,
) -> anyhow::Result<ExitCode> {
    let opts = capdir::build::Options {
        base_url,
        repo_url,
        progress: true,
        ..capdir::build::Options::new(&dir, &out)
    };
    let started = std::time::Instant::now();
    match capdir::build::run(&opts) {
        Ok(report) => {
            eprint!("{}", report.render());
            eprintln!(
                "built {} rows into {} in {:.2} s",
                report.rows,
                out.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(capdir::build::BuildError::Check(diags)) => {
            print!("{diags}");
            eprintln!("error: the catalogue has errors; nothing was built");
            Ok(ExitCode::FAILURE)
        }
        Err(capdir::build::BuildError::Other(e)) => Err(e),
    }
}

fn open_searcher(site: &std::path::Path) -> anyhow::Result<capdir::search::Searcher> {
    capdir::search::Searcher::open(&site.join("index"))
        .map_err(|e| anyhow::anyhow!("{e:#}; run `capdir build` first"))
}

fn ask(
    query: Option<String>,
    batch: Option<PathBuf>,
    site: PathBuf,
    limit: usize,
    json: bool,
    base_url: String,
) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let searcher = open_searcher(&site)?;
    if let Some(file) = batch {
        let text = std::fs::read_to_string(&file)?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for line in text.lines() {
            let keys: Vec<String> = searcher
                .ask(line, limit)?
                .into_iter()
                .map(|h| h.key)
                .collect();
            writeln!(out, "{}", serde_json::json!({"query": line, "keys": keys}))?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let query = query.unwrap_or_default();
    let answer = capdir::ask::answer(
        &searcher,
        &query,
        limit,
        &capdir::contract::Urls::new(&base_url),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        print!("{}", answer.render());
    }
    Ok(if answer.best.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn eval(
    queries: PathBuf,
    site: PathBuf,
    min_mrr: Option<f64>,
    min_recall5: Option<f64>,
    json: bool,
    boosts: Option<capdir::search::Boosts>,
) -> anyhow::Result<ExitCode> {
    let mut searcher = open_searcher(&site)?;
    if let Some(b) = boosts {
        searcher = searcher.with_boosts(b);
    }
    let labelled = capdir::eval::read_queries(&std::fs::read_to_string(&queries)?)?;
    let figures = capdir::eval::evaluate(&searcher, &labelled)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        print!("{}", figures.render());
    }
    let mut ok = true;
    if let Some(floor) = min_mrr.filter(|f| figures.mrr_at_12 < *f) {
        eprintln!(
            "error: MRR@12 {:.3} is below the floor {floor}",
            figures.mrr_at_12
        );
        ok = false;
    }
    if let Some(floor) = min_recall5.filter(|f| figures.recall_at_5 < *f) {
        eprintln!(
            "error: recall@5 {:.3} is below the floor {floor}",
            figures.recall_at_5
        );
        ok = false;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The breaker state a command uses: the PostgreSQL ledger's when `--ledger` names one,
/// else `<data>/state.sqlite`.
fn breaker_for(
    ledger: Option<&str>,
    data: Option<PathBuf>,
) -> anyhow::Result<capdir::breaker::Breaker> {
    let data = capdir::breaker::data_dir(data);
    Ok(match ledger {
        Some(text) => capdir::ledger::Location::parse(text)?.breaker(&data),
        None => capdir::breaker::Breaker::in_data_dir(&data),
    })
}

fn breaker(action: BreakerAction, breaker: capdir::breaker::Breaker) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match action {
        BreakerAction::List => {
            let states = runtime
                .block_on(breaker.store().list())
                .map_err(anyhow::Error::msg)?;
            print!(
                "{}",
                capdir::breaker::render_list(&states, chrono::Utc::now())
            );
        }
        BreakerAction::Reset { name } => {
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
