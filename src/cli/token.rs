//! `capdir token mint|revoke|list`: turn the command line's wishes into signed claims,
//! checked against the built site, recorded in the ledger (claims only, never the token).
//!
//! Minting lives with the command, not in `access/`: it reads a built site and writes the
//! ledger, and the ledger already depends on `access/` for the claims it stores.

use crate::access::token::{self, Claims, Risk, TokenKey};
use crate::access::watch;
use crate::access::watch::Watch;
use crate::invoke::rowset::RowSet;
use crate::ledger::{Ledger, Location, TokenEntry};
use anyhow::{Result, bail};
use clap::Subcommand;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    ledger: super::LedgerArg,
}

// Made once per run from the command line: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Action {
    /// Mint a token; the token alone is the last line printed.
    Mint {
        #[command(flatten)]
        request: Request,
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

pub(super) fn run(a: Args) -> Result<ExitCode> {
    let location = Location::parse(&a.ledger.url)?;
    super::current_thread()?.block_on(run_on(a.action, location))
}

async fn run_on(action: Action, location: Location) -> Result<ExitCode> {
    let ledger = location.open().await?;
    match action {
        Action::Mint {
            request,
            site,
            data,
        } => {
            let (key, _) = TokenKey::load(&crate::invoke::breaker::data_dir(data))?;
            let minted = mint(&request, &site, &key, ledger.as_ref()).await?;
            print!("{}", minted.render());
            Ok(ExitCode::SUCCESS)
        }
        Action::Revoke { id } => {
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
        Action::List => {
            print!(
                "{}",
                render_list(&ledger.tokens().await?, chrono::Utc::now().timestamp())
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What `capdir token mint` was asked for.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Request {
    /// Keys the token may invoke, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub keys: Vec<String>,
    /// Categories whose rows the token may invoke, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub categories: Vec<String>,
    /// Keys and categories whose rows the token may write through the write API (`capdir
    /// serve --write`), comma-separated: `SHA256,text` (a key may name a row still to
    /// create; a category covers rows that stay in it).
    #[arg(long, value_delimiter = ',', value_name = "KEYS|CATEGORIES")]
    pub write: Vec<String>,
    /// How long the token lives: 30m, 1h, 7d.
    #[arg(long, default_value = "1h")]
    pub ttl: String,
    /// The dispatcher's base URL; other dispatchers refuse the token.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub audience: String,
    /// The risk ceiling: `high` may run sensitive rows.
    #[arg(long, default_value = "low", value_parser = ["low", "high"])]
    pub risk: String,
    /// Pin the row's current contract fingerprint (needs exactly one key): a changed row
    /// answers 409 contract_changed.
    #[arg(long)]
    pub pin: bool,
    /// The only body the token may send.
    #[arg(long, value_name = "S")]
    pub fixed_body: Option<String>,
    /// The largest input the token may send, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_payload: Option<u64>,
    /// Credentials (variable names, comma-separated) the token's writes may bring into a row
    /// or keep while changing where it sends them; the bindings still decide where they go.
    #[arg(long, value_delimiter = ',', value_name = "ENV")]
    pub credentials: Vec<String>,
    /// Every call of this token waits for a person's approval (`capdir approvals`).
    #[arg(long)]
    pub approval: bool,
    /// The token may see the calls waiting for approval and decide them.
    #[arg(long)]
    pub approver: bool,
    /// At most this many calls per period: 10/min, 100/h, 5/30s.
    #[arg(long, value_name = "N/PERIOD")]
    pub rate: Option<String>,
    /// At most this many calls per UTC day.
    #[arg(long, value_name = "N")]
    pub daily: Option<u64>,
    /// At most this many calls of any one row over the token's life.
    #[arg(long, value_name = "N")]
    pub per_row: Option<u64>,
    /// At most this much model cost, in US dollars (from the agent price table).
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<String>,
    /// The loop breaker: the same key with the same arguments at most N times in
    /// --repeat-window.
    #[arg(long, value_name = "N")]
    pub max_repeats: Option<u64>,
    /// The window --max-repeats counts in.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub repeat_window: String,
}

impl Request {
    /// The watcher's part of the claims: approval, approver and the limits.
    fn watch(&self) -> Result<Watch> {
        let positive = |what: &str, n: Option<u64>| match n {
            Some(0) => bail!("{what} must be above zero"),
            n => Ok(n),
        };
        let max_repeats = match positive("--max-repeats", self.max_repeats)? {
            Some(calls) => Some(watch::Rate {
                calls,
                per_secs: crate::access::duration::parse_ttl(&self.repeat_window)
                    .map_err(|e| anyhow::anyhow!("--repeat-window: {e}"))?
                    as u64,
            }),
            None => None,
        };
        Ok(Watch {
            approval: self.approval,
            approver: self.approver,
            rate: self
                .rate
                .as_deref()
                .map(watch::parse_rate)
                .transpose()
                .map_err(|e| anyhow::anyhow!("--rate: {e}"))?,
            daily: positive("--daily", self.daily)?,
            per_row: positive("--per-row", self.per_row)?,
            max_cost_micro_usd: self
                .max_cost
                .as_deref()
                .map(watch::parse_usd)
                .transpose()
                .map_err(|e| anyhow::anyhow!("--max-cost: {e}"))?,
            max_repeats,
        })
    }
}

/// A minted token and its claims.
#[derive(Debug, Clone)]
pub struct Minted {
    pub claims: Claims,
    pub token: String,
}

impl Minted {
    /// What `mint` prints: a summary, then the token alone on the last line.
    pub fn render(&self) -> String {
        let c = &self.claims;
        let mut s = String::new();
        let _ = writeln!(s, "id:        {}", c.id);
        let _ = writeln!(s, "scope:     {}", c.scope_text());
        let _ = writeln!(s, "expires:   {}", c.expires_at());
        let _ = writeln!(s, "audience:  {}", c.aud);
        let _ = writeln!(s, "risk:      {}", c.risk.as_str());
        if let Some(pin) = &c.pin {
            let _ = writeln!(s, "pinned:    {pin}");
        }
        if let Some(b) = &c.body {
            let _ = writeln!(s, "body:      fixed, {} bytes", b.len());
        }
        if let Some(m) = c.max_payload {
            let _ = writeln!(s, "payload:   at most {m} bytes");
        }
        if !c.watch.is_empty() {
            let _ = writeln!(s, "watch:     {}", c.watch.text());
        }
        s.push_str("revoke with `capdir token revoke ");
        s.push_str(&c.id);
        s.push_str("`; the token follows, keep it secret:\n");
        s.push_str(&self.token);
        s.push('\n');
        s
    }
}

/// Check the request against the site, sign it and record its claims in `ledger`.
pub async fn mint(
    req: &Request,
    site: &Path,
    key: &TokenKey,
    ledger: &dyn Ledger,
) -> Result<Minted> {
    let keys: Vec<String> = clean(&req.keys);
    let categories: Vec<String> = clean(&req.categories);
    let write: Vec<String> = clean(&req.write);
    let credentials: Vec<String> = clean(&req.credentials);
    if let Some(bad) = credentials
        .iter()
        .find(|c| !crate::row::credential::is_env_name(c))
    {
        bail!(
            "--credentials takes environment-variable names (`GITHUB_TOKEN`); `{bad}` is not one"
        );
    }
    if !credentials.is_empty() && write.is_empty() {
        bail!("--credentials widens a write scope: give --write too");
    }
    let watch = req.watch()?;
    if keys.is_empty() && categories.is_empty() && write.is_empty() && !watch.approver {
        bail!("a token needs a scope: --keys A,B, --categories x,y, --write A,x and/or --approver");
    }
    if let Some(bad) = write
        .iter()
        .find(|w| !crate::row::is_valid_key(w) && !crate::row::is_category(w))
    {
        bail!(
            "--write takes keys (`GITHUB_LIST_ISSUES`) and categories (`text-tools`); `{bad}` is neither"
        );
    }
    let risk = Risk::parse(&req.risk)
        .ok_or_else(|| anyhow::anyhow!("--risk is low or high, not `{}`", req.risk))?;
    let ttl = crate::access::duration::parse_ttl(&req.ttl).map_err(anyhow::Error::msg)?;
    let audience = req.audience.trim().trim_end_matches('/').to_string();
    if !(audience.starts_with("http://") || audience.starts_with("https://")) {
        bail!("--audience is the dispatcher's base URL, e.g. https://capdir.example.org");
    }
    if req.pin && (keys.len() != 1 || !categories.is_empty()) {
        bail!("--pin pins one row's contract: give exactly one key in --keys and no --categories");
    }
    let has_site = site.join("catalogue.sqlite").exists();
    let mut pin = None;
    if has_site {
        let rows = RowSet::from_site(site)?;
        for k in &keys {
            if rows.get(k).is_none() {
                let dym = rows.did_you_mean(k);
                let hint = if dym.is_empty() {
                    String::new()
                } else {
                    format!("; did you mean {}?", dym.join(", "))
                };
                bail!("no row has the key `{k}` in {}{hint}", site.display());
            }
        }
        if req.pin {
            pin = rows.get(&keys[0]).map(|c| c.fingerprint.clone());
        }
    } else if req.pin {
        bail!(
            "--pin reads the row's fingerprint from the built site, and {} has none; run `capdir build` or pass --site",
            site.display()
        );
    }
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        id: token::new_id(),
        iat: now,
        exp: now.saturating_add(ttl),
        aud: audience,
        keys,
        categories,
        write,
        risk,
        pin,
        body: req.fixed_body.clone(),
        max_payload: req.max_payload,
        credentials,
        watch,
        parent: None,
    };
    let token = key.sign(&claims);
    ledger.record_token(&claims).await?;
    Ok(Minted { claims, token })
}

fn clean(list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = list
        .iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    out.dedup();
    out
}

/// `capdir token list`: one line per token.
pub fn render_list(entries: &[TokenEntry], now: i64) -> String {
    if entries.is_empty() {
        return "no tokens minted or revoked on this ledger\n".into();
    }
    let mut s = String::new();
    for e in entries {
        let state = match (&e.revoked_at, &e.claims) {
            (Some(at), _) => format!("revoked {at}"),
            (None, Some(c)) if c.exp <= now => format!("expired {}", c.expires_at()),
            (None, Some(c)) => format!("live until {}", c.expires_at()),
            (None, None) => "unknown".into(),
        };
        let detail = match &e.claims {
            Some(c) => format!(
                "{} · risk {} · {}{}{}",
                c.scope_text(),
                c.risk.as_str(),
                c.aud,
                if c.pin.is_some() { " · pinned" } else { "" },
                if c.watch.is_empty() {
                    String::new()
                } else {
                    format!(" · {}", c.watch.text())
                }
            ),
            None => "minted elsewhere".into(),
        };
        let _ = writeln!(s, "{}  {state}  {detail}", e.id);
    }
    s
}
