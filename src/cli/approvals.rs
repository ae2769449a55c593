//! `capdir approvals list|show|approve|deny`: the queue of calls waiting for a person, read
//! and decided through a running dispatcher's API (the run needs the dispatcher's runners and
//! secrets, so the CLI never runs a call itself). The credential is the owner key
//! (`CAPDIR_OWNER_KEY`) or an approver token (`CAPDIR_TOKEN`, minted with `--approver`).

use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use serde_json::{Value as Json, json};
use std::fmt::Write as _;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Action,
    /// The dispatcher's base URL.
    #[arg(
        long,
        env = "CAPDIR_DISPATCHER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    dispatcher: String,
}

#[derive(Subcommand)]
enum Action {
    /// The calls waiting for a decision, oldest first.
    List,
    /// One approval: the call, its arguments, its decision and its result.
    Show { id: String },
    /// Approve a call: the dispatcher runs it once, as its caller, and answers its result.
    Approve {
        id: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// Deny a call: it never runs; its caller's poll answers approval_denied.
    Deny {
        id: String,
        #[arg(long)]
        note: Option<String>,
    },
}

pub(super) fn run(a: Args) -> Result<ExitCode> {
    let credential = std::env::var("CAPDIR_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| {
            std::env::var("CAPDIR_OWNER_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        });
    let Some(credential) = credential else {
        bail!("set CAPDIR_OWNER_KEY, or CAPDIR_TOKEN to a token minted with --approver");
    };
    let base = a.dispatcher.trim_end_matches('/').to_string();
    super::current_thread()?.block_on(async move {
        let client = crate::invoke::runner::http::client_builder()
            .timeout(std::time::Duration::from_secs(330))
            .build()?;
        let call = |method: reqwest::Method, path: String, body: Option<Json>| {
            let mut req = client
                .request(method, format!("{base}{path}"))
                .bearer_auth(&credential);
            if let Some(b) = body {
                req = req.json(&b);
            }
            req.send()
        };
        let (status, body) = match &a.action {
            Action::List => {
                read(call(reqwest::Method::GET, "/api/approvals".into(), None).await).await?
            }
            Action::Show { id } => {
                read(call(reqwest::Method::GET, format!("/api/approvals/{id}"), None).await).await?
            }
            Action::Approve { id, note } | Action::Deny { id, note } => {
                let decision = if matches!(a.action, Action::Approve { .. }) {
                    "approve"
                } else {
                    "deny"
                };
                let body = json!({"decision": decision, "note": note});
                read(
                    call(
                        reqwest::Method::POST,
                        format!("/api/approvals/{id}"),
                        Some(body),
                    )
                    .await,
                )
                .await?
            }
        };
        if !status.is_success() {
            let e = &body["error"];
            eprintln!(
                "error: {} ({}): {}",
                e["message"].as_str().unwrap_or("refused"),
                e["code"].as_str().unwrap_or("?"),
                e["how_to_fix"].as_str().unwrap_or("")
            );
            return Ok(ExitCode::FAILURE);
        }
        match a.action {
            Action::List => print!("{}", render_list(&body)),
            _ => println!("{}", serde_json::to_string_pretty(&body)?),
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn read(sent: reqwest::Result<reqwest::Response>) -> Result<(reqwest::StatusCode, Json)> {
    let response =
        sent.context("the dispatcher did not answer (is `capdir serve` running there?)")?;
    let status = response.status();
    let body = response
        .json()
        .await
        .with_context(|| format!("the dispatcher answered {status} with no JSON"))?;
    Ok((status, body))
}

/// One line per pending call.
fn render_list(body: &Json) -> String {
    let pending = body["pending"].as_array().cloned().unwrap_or_default();
    if pending.is_empty() {
        return "no call is waiting for approval\n".into();
    }
    let mut s = String::new();
    for p in &pending {
        let _ = writeln!(
            s,
            "{}  {}  by {}  {} s ago  expires {}  args {}{}",
            p["approval"].as_str().unwrap_or(""),
            p["key"].as_str().unwrap_or(""),
            p["caller"].as_str().unwrap_or(""),
            p["age_secs"],
            p["expires_at"].as_str().unwrap_or(""),
            p["arguments"],
            if p["contract_current"] == json!(false) {
                "  (row changed: cannot be approved)"
            } else {
                ""
            }
        );
    }
    s
}
