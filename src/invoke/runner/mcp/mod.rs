//! The `mcp` runner: a `type: http` row with `runner: mcp` forwards its call to one tool of an
//! MCP server (`tools/call`), and answers with what the tool returned.
//!
//! The target (`row::mcp`) names the server — a command (`mcp+stdio:`) or a Streamable HTTP
//! endpoint (`mcp+https://`) — and the tool. The tool's arguments are the row's arguments by
//! name: the positional pieces put on `input_schema`'s properties and typed as `prepare`
//! validated them, or, when the row has a payload, that JSON object template rendered.
//!
//! Credentials: a command gets a bare environment — a few variables a program needs to run
//! (`PATH`, `HOME`, the locale, …, plus the names in `CAPDIR_MCP_ENV`) and the variables the
//! row's `auth: env:A,B` names — never the dispatcher's owner key, token key or ledger URL. An
//! HTTP endpoint gets the row's `bearer:`/`basic:`/`headers:`/`query:` credential, applied as
//! the `http` runner applies it. Either way the values are scrubbed from what comes back.
//!
//! Sessions are kept per server and credential (`sessions.rs`), so only a server's first call
//! starts it. Results: the text parts of the tool's `content`, joined by newlines (other parts
//! named in brackets; `structuredContent` when there is no content); `isError: true` is the
//! failure `mcp:tool_error` with that text.

pub mod client;
pub mod sessions;

use super::{Call, Environment, Ran, RunFuture, Runner, scrub, truncate_chars};
use crate::invoke::outcome::Failure;
use crate::row::args::positional_to_object;
use crate::row::credential::{Credential, is_env_name};
use crate::row::mcp::{McpServer, RUNNER};
use crate::row::template::{self, Context, Vars};
use client::Endpoint;
use reqwest::header::HeaderMap;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value as Json};
use sessions::Sessions;
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::Instrument as _;

/// Variables every server started as a command gets from the dispatcher's environment, when
/// set: what a program needs to find itself and its files and to read text.
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
];

/// The operator's additions to [`BASE_ENV`], comma-separated (a proxy, `NODE_OPTIONS`, …).
pub const PASS_ENV: &str = "CAPDIR_MCP_ENV";

/// Limits of the MCP runner.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// Time to start or reach a server and finish `initialize`.
    pub connect_timeout: Duration,
    /// Time for one `tools/call` (and one page of `tools/list`).
    pub timeout: Duration,
    /// Bytes of a result kept; the rest is cut and the outcome marked truncated.
    pub max_output_bytes: usize,
    /// Characters of a tool's error text quoted in `ERR:mcp:tool_error:`.
    pub error_chars: usize,
    /// Sessions kept open at once (one per server and credential).
    pub max_sessions: usize,
    /// A session unused this long is closed when the next call looks.
    pub idle: Duration,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            // Long enough for `npx -y` to fetch a package on a first start.
            connect_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(30),
            max_output_bytes: 1024 * 1024,
            error_chars: 512,
            max_sessions: 16,
            idle: Duration::from_secs(300),
        }
    }
}

pub struct McpRunner {
    config: McpConfig,
    sessions: Sessions,
}

impl McpRunner {
    pub fn new(config: McpConfig, egress: crate::invoke::egress::Egress) -> McpRunner {
        McpRunner {
            sessions: Sessions::new(config.max_sessions, config.idle, egress),
            config,
        }
    }

    /// The sessions this runner keeps.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }
}

impl Runner for McpRunner {
    fn name(&self) -> &'static str {
        RUNNER
    }

    fn run<'a>(&'a self, call: Call<'a>) -> RunFuture<'a> {
        Box::pin(async move {
            match self.call(call).await {
                Ok(ran) => ran,
                Err(f) => Ran::fail(f),
            }
        })
    }
}

impl McpRunner {
    async fn call(&self, call: Call<'_>) -> Result<Ran, Failure> {
        let row = &call.callable.row;
        let target = match &call.callable.mcp_target {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(Failure::new("mcp:bad_target", &e.message)),
            None => {
                return Err(Failure::new(
                    "mcp:bad_target",
                    format!("{} has no MCP target", row.key),
                ));
            }
        };
        let credential = match &call.callable.credential {
            Ok(c) => c.as_ref(),
            Err(e) if e.code == "unknown_auth_prefix" => {
                let prefix = row.auth.trim().split(':').next().unwrap_or_default();
                return Err(Failure::new("auth:unknown_prefix", prefix));
            }
            Err(e) => return Err(Failure::new("auth:bad", &e.message)),
        };
        if let Some(c) = credential {
            // Bound first: a credential goes only where the owner bound it, or is never read.
            match &target.server {
                McpServer::Stdio { .. } => super::admit_credential(&call, c, None)?,
                McpServer::Http { url } => {
                    let url = url::Url::parse(url)
                        .map_err(|e| Failure::new("mcp:bad_target", format!("{url}: {e}")))?;
                    super::admit_credential(&call, c, Some((&url, "POST")))?;
                }
            }
        }
        let (endpoint, secrets) = endpoint(&target.server, credential, call.invoker.env())?;
        let arguments = arguments(&call)?;
        let cfg = &self.config;
        let clean = |f: Failure| Failure::new(f.code, scrub(f.detail, &secrets));
        let connection = self
            .sessions
            .get(&endpoint, cfg.connect_timeout)
            .await
            .map_err(clean)?;
        let span = tracing::info_span!(
            "mcp",
            otel.name = %format!("tools/call {}", target.tool),
            otel.kind = "client",
            gen_ai.tool.name = %target.tool,
        );
        let result = match connection
            .call_tool(&target.tool, arguments, cfg.timeout)
            .instrument(span)
            .await
        {
            Ok(r) => r,
            Err(f) => {
                if f.code == "mcp:closed" {
                    self.sessions.forget(&endpoint, &connection).await;
                }
                return Err(clean(f));
            }
        };
        let text = scrub(result_text(&result), &secrets);
        if result.is_error == Some(true) {
            return Err(Failure::new(
                "mcp:tool_error",
                truncate_chars(&text, cfg.error_chars),
            ));
        }
        Ok(capped(text, cfg.max_output_bytes))
    }
}

/// Where calls to `server` go with `credential` applied (its values read from `env`), and the
/// secret values applied, to scrub from what comes back. `capdir import mcp` reaches a server
/// the same way its rows will.
pub fn endpoint(
    server: &McpServer,
    credential: Option<&Credential>,
    env: &Environment,
) -> Result<(Endpoint, Vec<String>), Failure> {
    let mut secrets = Vec::new();
    match server {
        McpServer::Stdio { command, args } => {
            let mut vars = base_env();
            match credential {
                None => {}
                Some(Credential::Env { names }) => {
                    for name in names {
                        let value = env.require(name)?;
                        secrets.push(value.clone());
                        vars.insert(name.clone(), value);
                    }
                }
                Some(other) => {
                    return Err(Failure::new(
                        "auth:bad",
                        format!(
                            "`{}:` applies to HTTP requests; a server started as a command takes `env:NAME`",
                            other.form()
                        ),
                    ));
                }
            }
            let endpoint = Endpoint::Stdio {
                command: command.clone(),
                args: args.clone(),
                env: vars.into_iter().collect(),
            };
            Ok((endpoint, secrets))
        }
        McpServer::Http { url } => {
            let mut url = reqwest::Url::parse(url)
                .map_err(|e| Failure::new("mcp:bad_target", format!("{url}: {e}")))?;
            let mut headers = HeaderMap::new();
            if let Some(c) = credential {
                super::http::apply_credential(c, env, None, &mut url, &mut headers, &mut secrets)?;
            }
            let endpoint = Endpoint::Http {
                url: url.to_string(),
                headers,
            };
            Ok((endpoint, secrets))
        }
    }
}

/// [`BASE_ENV`] and the names in `CAPDIR_MCP_ENV`, as the dispatcher's environment has them.
fn base_env() -> BTreeMap<String, String> {
    let extra = std::env::var(PASS_ENV).unwrap_or_default();
    BASE_ENV
        .iter()
        .map(|n| n.to_string())
        .chain(
            extra
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| is_env_name(n)),
        )
        .filter_map(|n| std::env::var(&n).ok().map(|v| (n, v)))
        .collect()
}

/// The tool's arguments: the payload's JSON object template rendered, else the pieces on the
/// schema's properties (typed as `prepare` validated them), else none.
fn arguments(call: &Call<'_>) -> Result<Map<String, Json>, Failure> {
    let row = &call.callable.row;
    let payload = row.payload().trim();
    if !payload.is_empty() {
        let vars = Vars {
            args: call.args,
            ..Default::default()
        };
        let text = template::render(payload, Context::Json, vars).map_err(|m| {
            Failure::new(
                "missing_args",
                format!("the template needs {} arguments, got {}", m.needed, m.got),
            )
        })?;
        return match serde_json::from_str::<Json>(&text) {
            Ok(Json::Object(obj)) => Ok(obj),
            _ => Err(Failure::new(
                "mcp:bad_args",
                "the payload did not render to a JSON object of arguments",
            )),
        };
    }
    Ok(row
        .input_schema
        .as_ref()
        .map(|s| positional_to_object(s, call.args))
        .unwrap_or_default())
}

/// What a tool answered, as text: its text parts joined by newlines; other parts named in
/// brackets; its `structuredContent` when it has no content.
pub fn result_text(result: &CallToolResult) -> String {
    let value = serde_json::to_value(result).unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    for part in value["content"].as_array().into_iter().flatten() {
        let kind = part["type"].as_str().unwrap_or("unknown");
        let text = match kind {
            "text" => part["text"].as_str().unwrap_or_default().to_string(),
            "image" | "audio" => format!(
                "[{kind} {}, {} bytes of base64]",
                part["mimeType"].as_str().unwrap_or("?"),
                part["data"].as_str().map_or(0, str::len)
            ),
            "resource_link" => format!(
                "[resource link {}]",
                part["uri"].as_str().unwrap_or_default()
            ),
            "resource" => {
                let r = &part["resource"];
                match r["text"].as_str() {
                    Some(t) => t.to_string(),
                    None => format!(
                        "[resource {} ({}), {} bytes of base64]",
                        r["uri"].as_str().unwrap_or_default(),
                        r["mimeType"].as_str().unwrap_or("?"),
                        r["blob"].as_str().map_or(0, str::len)
                    ),
                }
            }
            other => format!("[{other} content]"),
        };
        parts.push(text);
    }
    if parts.is_empty()
        && let Some(structured) = value.get("structuredContent")
    {
        return structured.to_string();
    }
    parts.join("\n")
}

/// `text` cut at `cap` bytes (on a character boundary), saying so.
fn capped(mut text: String, cap: usize) -> Ran {
    if text.len() <= cap {
        return Ran::ok(text);
    }
    let mut cut = cap;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("\n[capdir: result truncated at {cap} bytes]"));
    Ran {
        result: Ok(text),
        usage: Default::default(),
        truncated: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: Json) -> CallToolResult {
        serde_json::from_value(v).expect("a CallToolResult")
    }

    #[test]
    fn text_parts_join_and_others_are_named() {
        let r = result(json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
            {"type": "resource_link", "uri": "test://x", "name": "x"},
            {"type": "text", "text": "two"}
        ]}));
        assert_eq!(
            result_text(&r),
            "one\n[image image/png, 4 bytes of base64]\ninside\n[resource link test://x]\ntwo"
        );
        let s = result(json!({"content": [], "structuredContent": {"t": 1}}));
        assert_eq!(result_text(&s), r#"{"t":1}"#);
    }

    #[test]
    fn long_results_are_cut_on_a_character_boundary() {
        let ran = capped("héllo".repeat(10), 8);
        assert!(ran.truncated);
        let text = ran.result.unwrap();
        assert!(
            text.starts_with("hélloh\n[capdir: result truncated at 8 bytes]"),
            "{text}"
        );
        assert!(capped("short".into(), 8).result.unwrap() == "short");
    }
}
