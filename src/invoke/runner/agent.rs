//! The `agent` runner: one OpenAI-compatible chat-completions call.
//!
//! The system prompt is the payloads of the row's `includes` (prompt-block rows) in order, then
//! the row's own payload, joined with blank lines; the user message is the call's body. A model
//! id `gw:provider/model` goes to the configured gateway as `provider/model`; any other id goes
//! to the direct endpoint. Token usage is recorded from the response, and priced when a price
//! table names the model, so every receipt can say what a call cost.

use super::{Call, Ran, RunFuture, Runner, fetch_reason, read_capped, scrub, truncate_chars};
use crate::build::projection;
use crate::invoke::Input;
use crate::invoke::outcome::{Failure, Usage};
use crate::row::Row;
use crate::row::credential::Credential;
use serde::Deserialize;
use serde_json::{Value as Json, json};
use std::collections::HashMap;
use std::time::Duration;

/// Where chat-completions requests go, and which environment variable holds the API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Base URL without `/chat/completions`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Variable holding the key, sent as `Authorization: Bearer`; empty = send no key.
    pub key_env: String,
}

/// US dollars per one million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per 1M prompt (input) tokens.
    pub input: f64,
    /// Per 1M completion (output) tokens.
    pub output: f64,
}

impl Price {
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input + completion_tokens as f64 * self.output) / 1_000_000.0
    }
}

/// How agent rows reach a model.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// For model ids without `gw:`.
    pub direct: Endpoint,
    /// For `gw:provider/model` ids; without one, such rows fail `agent:no_gateway`.
    pub gateway: Option<Endpoint>,
    /// Model id (as in the row's target, or as sent) → price.
    pub prices: HashMap<String, Price>,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// How far one run of an agent with tools may go.
    pub limits: AgentLimits,
    pub max_body_bytes: usize,
    pub error_body_chars: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            direct: Endpoint {
                base_url: "https://api.openai.com/v1".into(),
                key_env: "OPENAI_API_KEY".into(),
            },
            gateway: None,
            prices: HashMap::new(),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(120),
            limits: AgentLimits::default(),
            max_body_bytes: 4 * 1024 * 1024,
            error_body_chars: 512,
        }
    }
}

impl AgentConfig {
    /// From `CAPDIR_AGENT_BASE_URL`, `CAPDIR_AGENT_KEY_ENV` (default `OPENAI_API_KEY`),
    /// `CAPDIR_GATEWAY_BASE_URL`, `CAPDIR_GATEWAY_KEY_ENV` (default `CAPDIR_GATEWAY_KEY`) and
    /// `CAPDIR_AGENT_PRICES` (JSON: `{"model": {"input": 0.15, "output": 0.6}}`).
    pub fn from_env() -> Result<AgentConfig, String> {
        Self::from_lookup(&|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<AgentConfig, String> {
        let mut cfg = AgentConfig::default();
        if let Some(url) = get("CAPDIR_AGENT_BASE_URL") {
            cfg.direct.base_url = url;
        }
        if let Some(env) = get("CAPDIR_AGENT_KEY_ENV") {
            cfg.direct.key_env = env_name("CAPDIR_AGENT_KEY_ENV", env)?;
        }
        if let Some(url) = get("CAPDIR_GATEWAY_BASE_URL") {
            let key_env = match get("CAPDIR_GATEWAY_KEY_ENV") {
                Some(env) => env_name("CAPDIR_GATEWAY_KEY_ENV", env)?,
                None => "CAPDIR_GATEWAY_KEY".into(),
            };
            cfg.gateway = Some(Endpoint {
                base_url: url,
                key_env,
            });
        }
        if let Some(table) = get("CAPDIR_AGENT_PRICES") {
            cfg.prices = serde_json::from_str(&table).map_err(|e| {
                format!(
                    "CAPDIR_AGENT_PRICES is not a price table ({e}); write {{\"model\": {{\"input\": 0.15, \"output\": 0.6}}}} in USD per 1M tokens"
                )
            })?;
        }
        Ok(cfg)
    }

    /// The endpoint and the model name to send, for a row's target.
    pub fn route<'t>(&self, target: &'t str) -> Result<(&Endpoint, &'t str), Failure> {
        match target.strip_prefix("gw:") {
            Some(model) => {
                let gw = self.gateway.as_ref().ok_or_else(|| {
                    Failure::new(
                        "agent:no_gateway",
                        format!("{target} goes through a gateway; set CAPDIR_GATEWAY_BASE_URL"),
                    )
                })?;
                Ok((gw, model))
            }
            None => Ok((&self.direct, target)),
        }
    }

    fn price(&self, target: &str, sent: &str) -> Option<&Price> {
        self.prices.get(target).or_else(|| self.prices.get(sent))
    }
}

fn env_name(setting: &str, value: String) -> Result<String, String> {
    if crate::row::credential::is_env_name(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{setting} must name an environment variable (A-Z, 0-9, _), not hold a key"
        ))
    }
}

pub struct AgentRunner {
    client: reqwest::Client,
    config: AgentConfig,
}

impl AgentRunner {
    pub fn new(config: AgentConfig) -> Result<AgentRunner, String> {
        Ok(AgentRunner {
            client: super::http::client(config.connect_timeout, config.timeout)?,
            config,
        })
    }
}

impl Runner for AgentRunner {
    fn name(&self) -> &'static str {
        "agent"
    }

    fn run<'a>(&'a self, call: Call<'a>) -> RunFuture<'a> {
        Box::pin(async move {
            match self.chat(call).await {
                Ok(ran) => ran,
                Err(f) => Ran::fail(f),
            }
        })
    }
}

/// The included blocks in order, then the row's payload, joined with blank lines.
pub fn system_prompt(call: &Call<'_>) -> Result<String, Failure> {
    let row = &call.callable.row;
    let mut parts: Vec<&str> = Vec::with_capacity(row.includes.len() + 1);
    for key in &row.includes {
        let block = call
            .invoker
            .rows()
            .row(key)
            .ok_or_else(|| Failure::new("agent:unknown_include", key))?;
        parts.push(block.payload());
    }
    parts.push(row.payload());
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n"))
}

/// The most tools listed to the model; the rest of its categories are left out.
pub const MAX_TOOLS: usize = 64;

/// How far one run of an agent with tools may go; hitting a limit ends the run with its named
/// failure, the usage so far in its receipt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentLimits {
    /// Answers from the model (`agent:turn_limit`).
    pub turns: usize,
    /// Tool calls over the run (`agent:tool_call_limit`).
    pub tool_calls: usize,
    /// Prompt and completion tokens over the run (`agent:token_limit`).
    pub tokens: u64,
    /// US dollars over the run, where the price table prices the model (`agent:cost_limit`).
    pub cost_usd: f64,
    /// Time for the whole run, tool calls included (`agent:time_limit`).
    pub wall: Duration,
}

impl Default for AgentLimits {
    fn default() -> AgentLimits {
        AgentLimits {
            turns: 8,
            tool_calls: 16,
            tokens: 200_000,
            cost_usd: 1.0,
            wall: Duration::from_secs(300),
        }
    }
}

impl AgentLimits {
    /// The limit `usage` and `elapsed` have passed, if one.
    fn passed(&self, usage: &Usage, elapsed: Duration) -> Option<Failure> {
        let tokens = usage.prompt_tokens + usage.completion_tokens;
        if tokens > self.tokens {
            return Some(Failure::new(
                "agent:token_limit",
                format!(
                    "{tokens} tokens, more than the {} a run may use",
                    self.tokens
                ),
            ));
        }
        if let Some(cost) = usage.cost_usd.filter(|c| *c > self.cost_usd) {
            return Some(Failure::new(
                "agent:cost_limit",
                format!(
                    "{cost:.4} USD, more than the {} a run may cost",
                    self.cost_usd
                ),
            ));
        }
        (elapsed > self.wall).then(|| {
            Failure::new(
                "agent:time_limit",
                format!("more than {} s", self.wall.as_secs()),
            )
        })
    }
}

/// The rows an agent with `allowed_categories` may call: enabled, visible to planners, in one
/// of its categories (`*`: any), not itself; ordered by `planner_rank`, then `seq`, then key.
pub fn tools_of<'a>(call: &Call<'a>) -> Vec<&'a Row> {
    let me = &call.callable.row;
    let rows = call.invoker.rows();
    let mut tools: Vec<&Row> = rows
        .keys()
        .into_iter()
        .filter_map(|k| rows.row(k))
        .filter(|r| me.offers_tool(r))
        .collect();
    tools.sort_by(|a, b| {
        (a.planner_rank, a.seq.is_none(), a.seq, &a.key).cmp(&(
            b.planner_rank,
            b.seq.is_none(),
            b.seq,
            &b.key,
        ))
    });
    tools.truncate(MAX_TOOLS);
    tools
}

/// A row as an OpenAI-style function tool, described as the MCP full projection describes it.
fn tool_definition(row: &Row) -> Json {
    json!({"type": "function", "function": {
        "name": row.key,
        "description": projection::tool_description(row),
        "parameters": projection::tool_arguments(row),
    }})
}

/// One tool call's arguments as the callee takes them: by name for a typed row, else the
/// `body` string.
fn tool_input(row: &Row, arguments: &str) -> Result<Input, String> {
    let parsed: Json = if arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(arguments).map_err(|e| format!("arguments are not JSON: {e}"))?
    };
    let Json::Object(obj) = parsed else {
        return Err("arguments must be a JSON object".into());
    };
    if row.input_schema.is_some() {
        return Ok(Input::Args(obj));
    }
    match obj.get("body") {
        None | Some(Json::Null) => Ok(Input::Body(String::new())),
        Some(Json::String(b)) => Ok(Input::Body(b.clone())),
        Some(_) => Err("`body` must be a string".into()),
    }
}

/// The reply with each router tag (`[KEY]args[/KEY]`) run as a nested call under the caller's
/// authority and replaced by its output (or its refusal). What a tag answers is not run again.
async fn route_reply(
    call: &Call<'_>,
    context: &crate::invoke::authority::CallContext,
    reply: &str,
    usage: &mut Usage,
) -> String {
    let found = crate::row::route::tags(reply);
    let mut outputs = Vec::with_capacity(found.len());
    for tag in &found {
        let o = super::run_nested(
            call.invoker,
            context,
            tag.key,
            Input::Body(tag.args.to_string()),
            tag.args,
        )
        .await;
        if let Some(u) = &o.usage {
            usage.add(u);
        }
        outputs.push(o.output);
    }
    crate::row::route::replace(reply, &found, &outputs)
}

impl AgentRunner {
    /// One chat completion: the assistant message and the usage.
    async fn complete(
        &self,
        call: &Call<'_>,
        endpoint: &Endpoint,
        request: &Json,
    ) -> Result<(Json, Usage), Failure> {
        let cfg = &self.config;
        let target = call.callable.row.target.trim();
        let model = request["model"].as_str().unwrap_or_default();
        let url = format!(
            "{}/chat/completions",
            endpoint.base_url.trim_end_matches('/')
        );
        let mut req = self.client.post(&url).json(request);
        let mut secrets = Vec::new();
        let breaker = call.invoker.breaker();
        let mut admitted = None;
        // The row's own `auth: bearer:ENV` names the key its endpoint takes; else the
        // endpoint's configured one.
        let key_env = match Credential::parse(&call.callable.row.auth) {
            Ok(Some(Credential::Bearer { env })) => env,
            _ => endpoint.key_env.clone(),
        };
        if !key_env.is_empty() {
            let key = call.invoker.env().require(&key_env)?;
            admitted = Some(breaker.admit(&key_env).await?);
            req = req.bearer_auth(&key);
            secrets.push(key);
        }
        let mut resp = req.send().await.map_err(|e| {
            Failure::new(
                "agent:fetch",
                scrub(fetch_reason(e, cfg.connect_timeout, cfg.timeout), &secrets),
            )
        })?;
        let status = resp.status();
        if let Some(before) = admitted {
            breaker.record(&key_env, status.as_u16(), before).await;
        }
        let (body, truncated) = read_capped(&mut resp, cfg.max_body_bytes)
            .await
            .map_err(|e| {
                Failure::new(
                    "agent:fetch",
                    scrub(fetch_reason(e, cfg.connect_timeout, cfg.timeout), &secrets),
                )
            })?;
        let body = scrub(body, &secrets);
        if !status.is_success() {
            return Err(Failure::new(
                format!("agent:{}", status.as_u16()),
                truncate_chars(&body, cfg.error_body_chars),
            ));
        }
        if truncated {
            return Err(Failure::new(
                "agent:bad_response",
                format!("response larger than {} bytes", cfg.max_body_bytes),
            ));
        }
        let parsed: Json = serde_json::from_str(&body).map_err(|e| {
            Failure::new(
                "agent:bad_response",
                format!("not JSON ({e}): {}", truncate_chars(&body, 200)),
            )
        })?;
        let message = parsed
            .pointer("/choices/0/message")
            .cloned()
            .ok_or_else(|| Failure::new("agent:bad_response", "no choices[0].message"))?;
        let tokens = |field: &str| {
            parsed
                .pointer(&format!("/usage/{field}"))
                .and_then(Json::as_u64)
                .unwrap_or(0)
        };
        let (prompt_tokens, completion_tokens) =
            (tokens("prompt_tokens"), tokens("completion_tokens"));
        let usage = Usage {
            prompt_tokens,
            completion_tokens,
            cost_usd: cfg
                .price(target, model)
                .map(|p| p.cost(prompt_tokens, completion_tokens)),
        };
        Ok((message, usage))
    }

    /// One chat completion, or, for a row with `allowed_categories`, a tool-calling loop: each
    /// tool call a nested call of the row it names, under the caller's authority (the gate and
    /// a receipt below the agent's), its output (or refusal) handed back to the model, until
    /// the model answers without tools or a limit is hit. Usage is summed over every turn and
    /// every nested call.
    async fn chat(&self, call: Call<'_>) -> Result<Ran, Failure> {
        let target = call.callable.row.target.trim();
        let (endpoint, model) = self.config.route(target)?;
        let system = system_prompt(&call)?;
        let user = call.args.join("|");
        let mut messages = Vec::with_capacity(2);
        if !system.is_empty() {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": user}));
        let tools = if call.callable.row.allowed_categories.is_empty() {
            Vec::new()
        } else {
            tools_of(&call)
        };
        let definitions: Vec<Json> = tools.iter().map(|r| tool_definition(r)).collect();
        let mut context = call.context.clone();
        context.stack.push(call.callable.row.key.clone());
        if context.stack.len() > super::flow::MAX_DEPTH {
            return Err(Failure::new(
                "flow:too_deep",
                format!("calls nest more than {} deep", super::flow::MAX_DEPTH),
            ));
        }
        let limits = self.config.limits;
        let started = std::time::Instant::now();
        let mut usage = Usage::default();
        let mut made = 0usize;
        let stop = |failure: Failure, usage: Usage| Ran {
            result: Err(failure),
            usage,
            truncated: false,
        };
        for _ in 0..limits.turns {
            let mut request = json!({"model": model, "messages": messages});
            if !definitions.is_empty() {
                request["tools"] = json!(definitions);
            }
            let (message, u) = match self.complete(&call, endpoint, &request).await {
                Ok(m) => m,
                Err(f) => return Ok(stop(f, usage)),
            };
            usage.add(&u);
            if let Some(f) = limits.passed(&usage, started.elapsed()) {
                return Ok(stop(f, usage));
            }
            let tool_calls = message
                .get("tool_calls")
                .and_then(Json::as_array)
                .filter(|c| !c.is_empty() && !definitions.is_empty())
                .cloned();
            let Some(tool_calls) = tool_calls else {
                let content = match message.get("content") {
                    Some(Json::String(s)) => s.clone(),
                    None | Some(Json::Null) => String::new(),
                    Some(other) => other.to_string(),
                };
                let content = if call.callable.row.route_reply {
                    route_reply(&call, &context, &content, &mut usage).await
                } else {
                    content
                };
                return Ok(Ran {
                    result: Ok(content),
                    usage,
                    truncated: false,
                });
            };
            messages.push(message);
            for tc in tool_calls {
                made += 1;
                if made > limits.tool_calls {
                    return Ok(stop(
                        Failure::new(
                            "agent:tool_call_limit",
                            format!("more than {} tool calls", limits.tool_calls),
                        ),
                        usage,
                    ));
                }
                if let Some(f) = limits.passed(&usage, started.elapsed()) {
                    return Ok(stop(f, usage));
                }
                let id = tc["id"].as_str().unwrap_or_default().to_string();
                let name = tc["function"]["name"].as_str().unwrap_or_default();
                let arguments = tc["function"]["arguments"].as_str().unwrap_or_default();
                let output = match tools.iter().find(|r| r.key == name) {
                    None => format!(
                        "ERR:refused:`{name}` is not one of this agent's tools (its categories: {})",
                        call.callable.row.allowed_categories.join(", ")
                    ),
                    Some(row) => match tool_input(row, arguments) {
                        Err(why) => format!("ERR:bad_args:{why}"),
                        Ok(input) => {
                            let o =
                                super::run_nested(call.invoker, &context, name, input, arguments)
                                    .await;
                            if let Some(u) = &o.usage {
                                usage.add(u);
                            }
                            o.output
                        }
                    },
                };
                // What a tool answers goes back to the model as text; it is never run.
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
        }
        Ok(stop(
            Failure::new(
                "agent:turn_limit",
                format!("no answer after {} turns", limits.turns),
            ),
            usage,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_variables() {
        let vars: HashMap<&str, &str> = [
            ("CAPDIR_AGENT_BASE_URL", "http://127.0.0.1:9/v1"),
            ("CAPDIR_AGENT_KEY_ENV", "MY_KEY"),
            ("CAPDIR_GATEWAY_BASE_URL", "http://127.0.0.1:8/gw"),
            (
                "CAPDIR_AGENT_PRICES",
                r#"{"gw:openai/gpt-4o-mini": {"input": 0.15, "output": 0.6}}"#,
            ),
        ]
        .into_iter()
        .collect();
        let cfg = AgentConfig::from_lookup(&|n| vars.get(n).map(|v| v.to_string())).unwrap();
        assert_eq!(cfg.direct.key_env, "MY_KEY");
        let (ep, model) = cfg.route("gw:openai/gpt-4o-mini").unwrap();
        assert_eq!(
            (ep.base_url.as_str(), model),
            ("http://127.0.0.1:8/gw", "openai/gpt-4o-mini")
        );
        assert_eq!(ep.key_env, "CAPDIR_GATEWAY_KEY");
        let (ep, model) = cfg.route("gpt-4o").unwrap();
        assert_eq!(
            (ep.base_url.as_str(), model),
            ("http://127.0.0.1:9/v1", "gpt-4o")
        );
        let p = cfg
            .price("gw:openai/gpt-4o-mini", "openai/gpt-4o-mini")
            .unwrap();
        assert!((p.cost(1_000_000, 2_000_000) - 1.35).abs() < 1e-9);

        let bad = AgentConfig::from_lookup(&|n| {
            (n == "CAPDIR_AGENT_KEY_ENV").then(|| "sk-abc".to_string())
        });
        assert!(bad.is_err());
        let no_gw = AgentConfig::default().route("gw:x/y").unwrap_err();
        assert_eq!(no_gw.code, "agent:no_gateway");
    }
}
