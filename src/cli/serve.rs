//! `capdir serve`: the dispatcher on a socket, with the site built first when there is none.

use crate::dispatch::Follower;
use crate::serve::mcp::{self, Projection};
use crate::serve::{AppState, Settings};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The built site; built from the bundled catalogue first when it has no snapshot.
    #[arg(long, default_value = "site")]
    site: PathBuf,
    /// Where to listen (loopback by default).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: std::net::SocketAddr,
    #[command(flatten)]
    ledger: super::LedgerArg,
    /// The public URL, for the links in answers.
    #[arg(long)]
    base_url: Option<String>,
    /// Where breaker state and the token key live; default `$CAPDIR_DATA`, else `data`.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// What `/mcp` lists: `full` (one tool per row) or `meta` (ask, contract, invoke).
    #[arg(long = "mcp", value_name = "PROJECTION", default_value = "full")]
    projection: Projection,
    /// Tools per `/mcp` tools/list page.
    #[arg(long, value_name = "N", default_value_t = mcp::DEFAULT_PAGE_SIZE)]
    mcp_page_size: usize,
    /// Let callers without a credential invoke rows that are not sensitive and use no
    /// credential (for local use).
    #[arg(long)]
    open: bool,
    /// Answer `/metrics` without the owner key (for a scraper that cannot send one; the
    /// counts show what the dispatcher runs).
    #[arg(long)]
    public_metrics: bool,
    /// Follow a site published on a static host (`https://owner.github.io/catalogue/`):
    /// fetch its build into --site, verified file by file against its `build.json`, and
    /// poll for newer builds. How N dispatchers stay on one build with no shared disk.
    #[arg(long, value_name = "URL")]
    follow: Option<String>,
    /// With --follow: serve only builds signed by this public key (`NAME+ID+KEY`, as `capdir
    /// key new` prints it, or a file holding it), or by keys a build it signed hands trust
    /// to; refuse unsigned, wrongly signed, older (rollback) and expired (freeze) builds.
    #[arg(long, value_name = "KEY", requires = "follow")]
    trust: Option<String>,
    /// How often to poll the followed site (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, default_value = "30s")]
    follow_interval: u64,
    /// The catalogue (a directory in a Git work tree) the site is built from: brought up to
    /// date in --site before serving (changed in place when it can be), and where --write
    /// commits.
    #[arg(long, value_name = "DIR", conflicts_with = "follow")]
    catalogue: Option<PathBuf>,
    /// Take writes (`PUT`/`PATCH`/`DELETE /api/directory/KEY`) from the owner key and tokens
    /// minted with --write: `direct` commits on the current branch and serves the row on the
    /// next request; `propose` commits on a branch `capdir/KEY-…` pushed to `origin` for
    /// review. Off unless given.
    #[arg(long, value_name = "MODE", requires = "catalogue")]
    write: Option<crate::write::Mode>,
    #[command(flatten)]
    limits: Limits,
    #[command(flatten)]
    egress: super::EgressArgs,
    #[command(flatten)]
    log: LogArgs,
}

/// The receipt log's signed checkpoints.
#[derive(clap::Args)]
struct LogArgs {
    /// The key the receipt log's checkpoints are signed with (as `capdir key new` writes it;
    /// or $CAPDIR_LOG_KEY holding the key itself). Default `<data>/log.key`, made at the first
    /// start and named for the dispatcher's address (`HOST:PORT/ledger`). Not the token key,
    /// not a build key.
    #[arg(long, value_name = "FILE")]
    log_key: Option<PathBuf>,
    /// How often a checkpoint is signed while the log grows (e.g. 60s); one is also signed on
    /// demand (`GET /api/ledger/checkpoint`).
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, default_value = "60s")]
    checkpoint_every: u64,
    /// Where each checkpoint is also written, as `SIZE` and `latest`, so `capdir build
    /// --checkpoints DIR` can publish copies; default `<data>/checkpoints`.
    #[arg(long, value_name = "DIR")]
    checkpoints: Option<PathBuf>,
}

impl LogArgs {
    /// The log as the dispatcher keeps it: its key (read, given, or made) and where copies go.
    fn open(self, data: &Path, base_url: &str) -> anyhow::Result<crate::dispatch::log::Log> {
        let origin = format!(
            "{}/ledger",
            base_url
                .split_once("://")
                .map_or(base_url, |(_, rest)| rest)
                .trim_end_matches('/')
        );
        let (key, source) = match super::key::read_from(self.log_key.as_deref(), "CAPDIR_LOG_KEY")?
        {
            Some(key) => (key, "given"),
            None => super::key::read_or_make(&data.join("log.key"), &origin)?,
        };
        tracing::info!(key = %key.verifier(), source, "receipt log: checkpoints are signed with this key");
        let dir = self.checkpoints.unwrap_or_else(|| data.join("checkpoints"));
        Ok(crate::dispatch::log::Log::new(key, Some(dir)))
    }
}

/// The dispatcher's limits.
#[derive(clap::Args)]
struct Limits {
    /// The largest request body, in bytes (413 above it).
    #[arg(long, default_value_t = crate::serve::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// Invocations running at once before new ones get 503 with Retry-After.
    #[arg(long, default_value_t = 1024)]
    max_inflight: usize,
    /// How long an http row's upstream (or an MCP tool call) may take (e.g. 30s); agent rows
    /// get four times this.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds)]
    upstream_timeout: Option<u64>,
    /// The most bytes read from an upstream response (http rows cut there; agent rows fail).
    #[arg(long, value_name = "BYTES")]
    response_cap: Option<usize>,
    /// How long a client may take to send a request's headers (and to begin its first
    /// request) before its connection is closed.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, default_value = "10s")]
    header_timeout: u64,
    /// How long a request's body may take to arrive whole; past it the request gets 408.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, default_value = "30s")]
    body_timeout: u64,
    /// How long a connection may stay open with no request in flight (responses that stream,
    /// like `GET /mcp`, count as in flight). On HTTP/1 the header timeout also bounds the
    /// wait for the next request.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, default_value = "60s")]
    idle_timeout: u64,
    /// Connections served at once before new ones get 503 with Retry-After; default and
    /// ceiling: the open-file limit less a reserve (a quarter of it, 32 to 1024).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// How long a call waits for a person's approval before it expires (e.g. 15m).
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl_secs, default_value = "15m")]
    approval_ttl: u64,
}

/// A public key given as its text or as a file holding it.
fn read_public_key(text: &str) -> anyhow::Result<crate::trust::note::Verifier> {
    let text = match Path::new(text).is_file() {
        true => std::fs::read_to_string(text)?,
        false => text.to_string(),
    };
    Ok(crate::trust::note::Verifier::parse(&text)?)
}

fn parse_ttl_secs(s: &str) -> Result<u64, String> {
    crate::access::duration::parse_ttl(s).map(|n| n as u64)
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

/// Follow `url` into `site` before serving: the first build must arrive (a few tries, a
/// second apart) unless `site` already holds one, which then serves until the next poll.
async fn first_sync(
    url: &str,
    site: &Path,
    trust: Option<crate::dispatch::TrustConfig>,
) -> anyhow::Result<Follower> {
    let follower = Follower::new(url, site, trust)?;
    // With --trust, a build left in the site is served only when a trusted key signed it.
    let held = site.join("catalogue.sqlite").exists() && follower.held().is_some();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match follower.poll().await {
            // A held build serves until a later poll brings a newer one.
            Ok(_) => return Ok(follower),
            Err(_) if held => return Ok(follower),
            Err(e) if attempt == 5 => {
                let shown = follower.shown_url().to_string();
                return Err(e.context(format!("no build could be fetched from {shown}")));
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
        }
    }
}

/// The dispatcher's settings shared by `serve` and `mcp`: the ledger opened (migrated, its
/// writer started on the current runtime) and the breaker state where the ledger keeps it.
pub(super) async fn settings(
    site: &Path,
    ledger: &str,
    base_url: String,
    data: Option<PathBuf>,
    mcp: mcp::Options,
) -> anyhow::Result<Settings> {
    let data = crate::invoke::breaker::data_dir(data);
    let location = crate::ledger::Location::parse(ledger)?;
    let ledger = location.open().await?;
    tracing::info!(ledger = %location, "ledger open");
    Ok(Settings {
        base_url,
        config: crate::invoke::InvokerConfig::from_env(location.breaker(&data))
            .map_err(anyhow::Error::msg)?,
        mcp,
        ..Settings::new(site, ledger)
    })
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let _telemetry = super::init_logs()?;
    let base_url = a
        .base_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", a.addr));
    crate::serve::ledger_outside_site(&a.site, &a.ledger.url)?;
    let data_dir = crate::invoke::breaker::data_dir(a.data.clone());
    crate::serve::data_outside_site(&a.site, &data_dir)?;
    let checkpoint_every = std::time::Duration::from_secs(a.log.checkpoint_every);
    let log = a.log.open(&data_dir, &base_url)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let source = Source {
        follow: a.follow.as_deref(),
        trust: a.trust.as_deref(),
        catalogue: a.catalogue.as_deref(),
        write: a.write,
    };
    let (follower, write) = site_source(source, &a.site, &data_dir, &base_url, &runtime)?;
    let options = mcp::Options {
        projection: a.projection,
        page_size: a.mcp_page_size,
    };
    let Args {
        site,
        addr,
        ledger,
        data,
        open,
        public_metrics,
        limits,
        follow_interval,
        egress,
        ..
    } = a;
    runtime.block_on(async move {
        let mut settings = settings(&site, &ledger.url, base_url, data.clone(), options).await?;
        let (token_key, key_source) =
            crate::access::token::TokenKey::load(&crate::invoke::breaker::data_dir(data))?;
        egress.apply(&mut settings.config)?;
        upstream_limits(&mut settings.config, &limits);
        let (connections, file_limit) = connection_limits(&limits);
        let config = &settings.config;
        tracing::info!(
            body_limit = limits.body_limit,
            max_inflight = limits.max_inflight,
            header_timeout_s = limits.header_timeout,
            body_timeout_s = limits.body_timeout,
            idle_timeout_s = limits.idle_timeout,
            max_connections = connections.max_connections,
            file_limit,
            upstream_timeout_s = config.http.timeout.as_secs(),
            response_cap = config.http.max_body_bytes,
            token_key = %key_source,
            "limits"
        );
        let settings = Settings {
            owner_key: std::env::var("CAPDIR_OWNER_KEY").ok(),
            token_key: Some(token_key),
            open,
            public_metrics,
            body_limit: limits.body_limit,
            max_inflight: limits.max_inflight,
            approval_ttl: std::time::Duration::from_secs(limits.approval_ttl),
            write,
            ..settings
        };
        say_who_may_invoke(&settings);
        let state = AppState::new(settings)?;
        state.spawn_reloader(std::time::Duration::from_millis(200));
        state.dispatcher().keep_log(log);
        state.dispatcher().spawn_checkpoints(checkpoint_every);
        if let Some(f) = follower {
            let every = std::time::Duration::from_secs(follow_interval);
            state.dispatcher().follow(Arc::new(f), every);
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        tracing::info!(addr = %listener.local_addr()?, "serving");
        crate::serve::listen::serve(listener, crate::serve::app(state), connections).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// What `capdir serve` was told to serve from.
struct Source<'a> {
    follow: Option<&'a str>,
    trust: Option<&'a str>,
    catalogue: Option<&'a Path>,
    write: Option<crate::write::Mode>,
}

/// Where the served site comes from: a publisher followed (`--follow`, its first build
/// fetched now), a catalogue built in place (and written to, with `--write`), or the site
/// as it is (the bundled catalogue's, built when there is none).
fn site_source(
    a: Source<'_>,
    site: &Path,
    data_dir: &Path,
    base_url: &str,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<(Option<Follower>, Option<crate::write::Ready>)> {
    match (a.follow, a.catalogue) {
        (Some(url), _) => {
            let trust = match a.trust {
                Some(key) => Some(crate::dispatch::TrustConfig {
                    root: read_public_key(key)?,
                    file: data_dir.join("follow-trust.json"),
                }),
                None => None,
            };
            Ok((Some(runtime.block_on(first_sync(url, site, trust))?), None))
        }
        (None, Some(catalogue)) => {
            let options = crate::build::Options {
                dispatcher_url: base_url.to_string(),
                ..crate::build::Options::new(catalogue, site)
            };
            let built = |e: crate::build::BuildError| match e {
                crate::build::BuildError::Check(d) => {
                    anyhow::anyhow!("the catalogue has errors:\n{d}")
                }
                crate::build::BuildError::Other(e) => e,
            };
            match a.write {
                Some(mode) => {
                    let write = crate::write::Ready::open(mode, options).map_err(built)?;
                    tracing::info!(mode = mode.as_str(), catalogue = %catalogue.display(), "writes on");
                    Ok((None, Some(write)))
                }
                None => {
                    crate::build::incremental::open_current(&options).map_err(built)?;
                    Ok((None, None))
                }
            }
        }
        (None, None) => {
            super::ensure_site(site, base_url)?;
            Ok((None, None))
        }
    }
}

/// `--upstream-timeout` and `--response-cap` over the runners' defaults (an agent's call
/// gets four times the timeout).
fn upstream_limits(config: &mut crate::invoke::InvokerConfig, limits: &Limits) {
    if let Some(secs) = limits.upstream_timeout {
        config.http.timeout = std::time::Duration::from_secs(secs);
        config.agent.timeout = std::time::Duration::from_secs(secs.saturating_mul(4));
        config.mcp.timeout = std::time::Duration::from_secs(secs);
    }
    if let Some(cap) = limits.response_cap {
        config.http.max_body_bytes = cap;
        config.agent.max_body_bytes = cap;
        config.mcp.max_output_bytes = cap;
    }
}

/// The limits of callers' connections, `--max-connections` lowered to what the open-file
/// limit leaves room for; and that limit.
fn connection_limits(limits: &Limits) -> (crate::serve::listen::ConnectionLimits, Option<u64>) {
    let file_limit = crate::serve::listen::open_file_limit();
    let budget = crate::serve::listen::connection_budget(file_limit);
    let max_connections = limits.max_connections.map_or(budget, |n| {
        usize::try_from(n).unwrap_or(usize::MAX).min(budget)
    });
    if limits.max_connections.is_some_and(|n| n > budget as u64) {
        tracing::warn!(
            max_connections,
            file_limit,
            "--max-connections lowered to what the open-file limit leaves room for"
        );
    }
    let connections = crate::serve::listen::ConnectionLimits {
        header_timeout: std::time::Duration::from_secs(limits.header_timeout),
        body_timeout: std::time::Duration::from_secs(limits.body_timeout),
        idle_timeout: std::time::Duration::from_secs(limits.idle_timeout),
        max_connections,
    };
    (connections, file_limit)
}

/// Who may invoke, said at start: the owner key or tokens, and anonymous callers under `--open`.
fn say_who_may_invoke(settings: &Settings) {
    if settings.owner_key.as_deref().unwrap_or("").is_empty() {
        tracing::warn!(
            "CAPDIR_OWNER_KEY is not set: only capability tokens can invoke, and nobody can read every receipt"
        );
    }
    if settings.open {
        tracing::warn!(
            "open mode (--open): callers without a credential may invoke rows that are not sensitive and use no credential"
        );
    } else {
        tracing::info!(
            "closed mode: invoking needs the owner key or a capability token (--open lets anonymous callers run rows that are not sensitive and use no credential)"
        );
    }
}
