//! The `agent` runner: one OpenAI-compatible chat-completions call.
//!
//! The system prompt is the payloads of the row's `includes` (prompt-block rows) in order, then
//! the row's own payload, joined with blank lines; the user message is the call's body. Where
//! a request goes is named by the target's prefix (`AgentConfig::route`): `gw:provider/model`
//! goes to the configured gateway as `provider/model`, `PROVIDER:model` to that provider's
//! endpoint as `model`, any other id to the direct endpoint. Token usage is recorded from the response, and priced when a price
//! table names the model, so every receipt can say what a call cost.

use super::{Call, Ran, RunFuture, Runner, fetch_reason, read_capped, scrub, truncate_chars};
use crate::build::projection;
use crate::invoke::Input;
use crate::invoke::authority::Via;
use crate::invoke::outcome::{Failure, Usage};
use crate::row::Row;
use crate::row::credential::Credential;
use serde::Deserialize;
use serde_json::{Value as Json, json};
use std::collections::HashMap;
use std::time::Duration;
use tracing::Instrument as _;

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

/// OpenAI-compatible providers a target may name by prefix without configuration: name,
/// base URL, the variable holding the key (empty: none). A row's `auth: bearer:ENV` still
/// names its own key.
pub const PROVIDERS: &[(&str, &str, &str)] = &[
    ("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    ("xai", "https://api.x.ai/v1", "XAI_API_KEY"),
    ("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    ("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    (
        "deepseek",
        "https://api.deepseek.com/v1",
        "DEEPSEEK_API_KEY",
    ),
    (
        "openrouter",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
    ),
    (
        "together",
        "https://api.together.xyz/v1",
        "TOGETHER_API_KEY",
    ),
    ("ollama", "http://127.0.0.1:11434/v1", ""),
];

/// One entry of `CAPDIR_PROVIDERS`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderSetting {
    base_url: String,
    #[serde(default)]
    key_env: String,
}

/// How agent rows reach a model.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// For model ids without `gw:`.
    pub direct: Endpoint,
    /// For `gw:provider/model` ids; without one, such rows fail `agent:no_gateway`.
    pub gateway: Option<Endpoint>,
    /// Provider name → endpoint, for `PROVIDER:model` targets: the well-known
    /// OpenAI-compatible providers (`PROVIDERS`), changed and added to by `CAPDIR_PROVIDERS`.
    pub providers: HashMap<String, Endpoint>,
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
            providers: PROVIDERS
                .iter()
                .map(|(name, base_url, key_env)| {
                    (
                        name.to_string(),
                        Endpoint {
                            base_url: base_url.to_string(),
                            key_env: key_env.to_string(),
                        },
                    )
                })
                .collect(),
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
        if let Some(table) = get("CAPDIR_PROVIDERS") {
            let set: HashMap<String, ProviderSetting> = serde_json::from_str(&table).map_err(|e| {
                format!(
                    "CAPDIR_PROVIDERS is not a provider table ({e}); write {{\"name\": {{\"base_url\": \"https://host/v1\", \"key_env\": \"NAME_API_KEY\"}}}}"
                )
            })?;
            for (name, p) in set {
                if name == "gw"
                    || name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(format!(
                        "CAPDIR_PROVIDERS: `{name}` is not a provider name (lower-case letters, digits and `-`; not `gw`)"
                    ));
                }
                let key_env = if p.key_env.is_empty() {
                    p.key_env
                } else {
                    env_name("CAPDIR_PROVIDERS", p.key_env)?
                };
                cfg.providers.insert(
                    name,
                    Endpoint {
                        base_url: p.base_url,
                        key_env,
                    },
                );
            }
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

    /// The endpoint and the model name to send, for a row's target: `gw:provider/model` to
    /// the gateway, `PROVIDER:model` to a known provider, anything else (`gpt-4o-mini`, or an
    /// id with a colon no provider claims, like `ft:gpt-4o:org::id`) whole to the direct
    /// endpoint.
    pub fn route<'t>(&self, target: &'t str) -> Result<(&Endpoint, &'t str), Failure> {
        if let Some(model) = target.strip_prefix("gw:") {
            let gw = self.gateway.as_ref().ok_or_else(|| {
                Failure::new(
                    "agent:no_gateway",
                    format!("{target} goes through a gateway; set CAPDIR_GATEWAY_BASE_URL"),
                )
            })?;
            return Ok((gw, model));
        }
        if let Some((name, model)) = target.split_once(':')
            && let Some(endpoint) = self.providers.get(name)
            && !model.is_empty()
        {
            return Ok((endpoint, model));
        }
        Ok((&self.direct, target))
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

/// The names of the meta tools an agent gets when its listing is too large to send.
pub const META_TOOLS: [&str; 3] = ["ask", "contract", "invoke"];

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
    /// The most tools listed to the model one by one; past this, or past `tool_bytes` of
    /// definitions, it gets the meta tools `ask`, `contract` and `invoke` over the same rows.
    pub tools: usize,
    pub tool_bytes: usize,
}

impl Default for AgentLimits {
    fn default() -> AgentLimits {
        AgentLimits {
            turns: 8,
            tool_calls: crate::row::call::AGENT_TOOL_CALLS,
            tokens: 200_000,
            cost_usd: 1.0,
            wall: Duration::from_secs(300),
            tools: 64,
            tool_bytes: 64 * 1024,
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
    tools
}

/// What the model is offered: each tool, or (for a listing over the limits) the meta tools.
fn listing(tools: &[&Row], limits: &AgentLimits) -> (Vec<Json>, bool) {
    let each: Vec<Json> = tools.iter().map(|r| tool_definition(r)).collect();
    let bytes: usize = each.iter().map(|d| d.to_string().len()).sum();
    if each.len() <= limits.tools && bytes <= limits.tool_bytes {
        return (each, false);
    }
    let function = |name: &str, description: String, properties: Json, required: &[&str]| {
        json!({"type": "function", "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        }})
    };
    let n = tools.len();
    let meta = vec![
        function(
            "ask",
            format!(
                "Find tools for a task among your {n} tools: plain words in, the best keys with what each does out (best first)."
            ),
            json!({"query": {"type": "string", "description": "the task in plain words"}}),
            &["query"],
        ),
        function(
            "contract",
            "A tool's description and its arguments' JSON Schema, by key: read it before invoking."
                .into(),
            json!({"key": {"type": "string"}}),
            &["key"],
        ),
        function(
            "invoke",
            "Run a tool by key; `arguments` is the object its contract describes.".into(),
            json!({"key": {"type": "string"}, "arguments": {"type": "object"}}),
            &["key", "arguments"],
        ),
    ];
    (meta, true)
}

/// How many candidates a meta `ask` answers with.
const ASK_ANSWERS: usize = 8;

/// A meta `ask`: the agent's tools that best match `query`, by the build's search index when
/// the invoker has one (its answers outside the agent's tools left out), else by an index of
/// the tools built for this run.
fn meta_ask(
    call: &Call<'_>,
    tools: &[&Row],
    query: &str,
    own: &mut Option<crate::search::Searcher>,
) -> String {
    let allowed: std::collections::HashSet<&str> = tools.iter().map(|r| r.key.as_str()).collect();
    let hits = match call.invoker.search() {
        Some(s) => s.ask(query, 200),
        None => {
            if own.is_none() {
                let rows: Vec<Row> = tools.iter().map(|r| (*r).clone()).collect();
                match crate::search::Searcher::in_memory(&rows) {
                    Ok(s) => *own = Some(s),
                    Err(e) => return format!("ERR:ask:{e:#}"),
                }
            }
            own.as_ref()
                .map_or(Ok(Vec::new()), |s| s.ask(query, ASK_ANSWERS))
        }
    };
    match hits {
        Err(e) => format!("ERR:ask:{e:#}"),
        Ok(hits) => {
            let found: Vec<Json> = hits
                .into_iter()
                .filter(|h| allowed.contains(h.key.as_str()))
                .take(ASK_ANSWERS)
                .map(|h| json!({"key": h.key, "what": h.what}))
                .collect();
            Json::Array(found).to_string()
        }
    }
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
/// `req` with the trace context when `url` is an origin the owner bound a credential to
/// (as the http runner sends it).
fn traced(call: &Call<'_>, url: &str, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    let Ok(to) = url::Url::parse(url) else {
        return req;
    };
    if !call.invoker.bindings().names_origin(&to) {
        return req;
    }
    let mut trace = reqwest::header::HeaderMap::new();
    crate::telemetry::propagate(&tracing::Span::current(), &mut trace);
    req.headers(trace)
}

async fn route_reply(
    call: &Call<'_>,
    context: &crate::invoke::authority::CallContext,
    reply: &str,
    usage: &mut Usage,
) -> String {
    let found = super::router_tags(reply).await;
    let mut outputs = Vec::with_capacity(found.len());
    for tag in &found {
        let o = super::run_nested(
            call.invoker,
            context,
            Via::Tag,
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

/// A call of one of the meta tools, its arguments read.
enum Meta {
    Ask(String),
    Contract(String),
    /// The key and its arguments as JSON text.
    Invoke(String, String),
}

fn meta_call(name: &str, arguments: &str) -> Result<Meta, String> {
    let parsed: Json = serde_json::from_str(if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    })
    .map_err(|e| format!("arguments are not JSON: {e}"))?;
    let text = |field: &str| {
        parsed[field]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("`{name}` takes a string `{field}`"))
    };
    match name {
        "ask" => Ok(Meta::Ask(text("query")?)),
        "contract" => Ok(Meta::Contract(text("key")?)),
        "invoke" => {
            let args = match &parsed["arguments"] {
                Json::Null => "{}".to_string(),
                a @ Json::Object(_) => a.to_string(),
                _ => return Err("`invoke` takes an object `arguments`".into()),
            };
            Ok(Meta::Invoke(text("key")?, args))
        }
        other => Err(format!(
            "`{other}` is not a tool here: use ask, contract or invoke"
        )),
    }
}

/// What the model is told of a key that is not one of its tools; it never runs.
fn not_a_tool(call: &Call<'_>, key: &str) -> String {
    format!(
        "ERR:refused:`{key}` is not one of this agent's tools (its categories: {})",
        call.callable.row.allowed_categories.join(", ")
    )
}

impl AgentRunner {
    /// One tool call of the model: `name` run as a nested call under the caller's authority
    /// when it is one of `tools`; its output, or why it did not run, as text for the model.
    async fn tool_call(
        &self,
        call: &Call<'_>,
        context: &crate::invoke::authority::CallContext,
        tools: &[&Row],
        name: &str,
        arguments: &str,
        usage: &mut Usage,
    ) -> String {
        let Some(row) = tools.iter().find(|r| r.key == name) else {
            return not_a_tool(call, name);
        };
        match tool_input(row, arguments) {
            Err(why) => format!("ERR:bad_args:{why}"),
            Ok(input) => {
                let o = super::run_nested(call.invoker, context, Via::Tool, name, input, arguments)
                    .await;
                if let Some(u) = &o.usage {
                    usage.add(u);
                }
                o.output
            }
        }
    }

    /// One chat completion: the assistant message and the usage.
    /// `request` sent to the model's endpoint, in a client span of its own.
    async fn complete(
        &self,
        call: &Call<'_>,
        endpoint: &Endpoint,
        request: &Json,
    ) -> Result<(Json, Usage), Failure> {
        let model = request["model"].as_str().unwrap_or_default();
        let span = tracing::info_span!(
            "model",
            otel.name = %format!("chat {model}"),
            otel.kind = "client",
            gen_ai.request.model = model,
            http.response.status_code = tracing::field::Empty,
        );
        self.complete_in(call, endpoint, request)
            .instrument(span)
            .await
    }

    async fn complete_in(
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
        let mut req = traced(call, &url, self.client.post(&url).json(request));
        let mut secrets = Vec::new();
        let breaker = call.invoker.breaker();
        let mut admitted = None;
        // The row's own `auth: bearer:ENV` names the key its endpoint takes; else the
        // endpoint's configured one.
        // The endpoint's own key is the operator's, bound to it by the provider table; a row's
        // own key goes there only if the bindings say it may.
        let key_env = match Credential::parse(&call.callable.row.auth) {
            Ok(Some(c @ Credential::Bearer { .. })) => {
                let to = url::Url::parse(&url)
                    .map_err(|e| Failure::new("agent:bad_endpoint", format!("{url}: {e}")))?;
                super::admit_credential(call, &c, Some((&to, "POST")))?;
                c.name()
            }
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
        tracing::Span::current().record("http.response.status_code", status.as_u16());
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

    /// What one tool call of the model gets back: a meta tool's answer (ask, contract,
    /// invoke) when the tools are listed through them, else the named row's nested call.
    async fn answer_tool(
        &self,
        asked: Asked<'_, '_>,
        tc: &Json,
        own_index: &mut Option<crate::search::Searcher>,
        usage: &mut Usage,
    ) -> String {
        let Asked {
            call,
            context,
            tools,
            meta,
        } = asked;
        let name = tc["function"]["name"].as_str().unwrap_or_default();
        let arguments = tc["function"]["arguments"].as_str().unwrap_or_default();
        if !meta {
            return self
                .tool_call(call, context, tools, name, arguments, usage)
                .await;
        }
        match meta_call(name, arguments) {
            Err(why) => format!("ERR:bad_args:{why}"),
            Ok(Meta::Ask(query)) => meta_ask(call, tools, &query, own_index),
            Ok(Meta::Contract(key)) => match tools.iter().find(|r| r.key == key) {
                Some(row) => tool_definition(row)["function"].to_string(),
                None => not_a_tool(call, &key),
            },
            Ok(Meta::Invoke(key, arguments)) => {
                self.tool_call(call, context, tools, &key, &arguments, usage)
                    .await
            }
        }
    }

    /// One chat completion, or, for a row with `allowed_categories`, a tool-calling loop: each
    /// tool call a nested call of the row it names, under the caller's authority (the gate and
    /// a receipt below the agent's), its output (or refusal) handed back to the model, until
    /// the model answers without tools or a limit is hit. Usage is summed over every turn and
    /// every nested call.
    async fn chat(&self, call: Call<'_>) -> Result<Ran, Failure> {
        let target = call.callable.row.target.trim();
        let (endpoint, model) = self.config.route(target)?;
        let mut messages = opening(&call)?;
        let tools = if call.callable.row.allowed_categories.is_empty() {
            Vec::new()
        } else {
            tools_of(&call)
        };
        let limits = self.config.limits;
        let (definitions, meta) = listing(&tools, &limits);
        let mut own_index = None;
        let mut context = call.context.clone();
        context.stack.push(call.callable.row.key.clone());
        if context.stack.len() > super::flow::MAX_DEPTH {
            return Err(Failure::new(
                "flow:too_deep",
                format!("calls nest more than {} deep", super::flow::MAX_DEPTH),
            ));
        }
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
                let content = reply(&call, &context, &message, &mut usage).await;
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
                let asked = Asked {
                    call: &call,
                    context: &context,
                    tools: &tools,
                    meta,
                };
                let output = self
                    .answer_tool(asked, &tc, &mut own_index, &mut usage)
                    .await;
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

/// The tools of one agent call as its tool calls are answered.
#[derive(Clone, Copy)]
struct Asked<'c, 'a> {
    call: &'c Call<'a>,
    context: &'c crate::invoke::authority::CallContext,
    tools: &'c [&'a Row],
    /// The tools are listed through the meta tools (ask, contract, invoke).
    meta: bool,
}

/// The conversation's start: the system prompt (when the row has one) and the caller's
/// arguments as the user's message.
fn opening(call: &Call<'_>) -> Result<Vec<Json>, Failure> {
    let system = system_prompt(call)?;
    let mut messages = Vec::with_capacity(2);
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": call.args.join("|")}));
    Ok(messages)
}

/// The model's answer as text, its router tags run first for a row with `route_reply`.
async fn reply(
    call: &Call<'_>,
    context: &crate::invoke::authority::CallContext,
    message: &Json,
    usage: &mut Usage,
) -> String {
    let content = match message.get("content") {
        Some(Json::String(s)) => s.clone(),
        None | Some(Json::Null) => String::new(),
        Some(other) => other.to_string(),
    };
    if call.callable.row.route_reply {
        route_reply(call, context, &content, usage).await
    } else {
        content
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_prefixes_name_endpoints() {
        let vars: HashMap<&str, &str> = [(
            "CAPDIR_PROVIDERS",
            r#"{"local": {"base_url": "http://127.0.0.1:9/v1", "key_env": "LOCAL_KEY"}, "xai": {"base_url": "http://127.0.0.1:10/v1"}}"#,
        )]
        .into();
        let cfg = AgentConfig::from_lookup(&|n| vars.get(n).map(|v| v.to_string())).unwrap();
        let (ep, model) = cfg.route("local:tiny-1").unwrap();
        assert_eq!(
            (ep.base_url.as_str(), ep.key_env.as_str(), model),
            ("http://127.0.0.1:9/v1", "LOCAL_KEY", "tiny-1")
        );
        // A configured provider replaces the built-in one of its name.
        let (ep, model) = cfg.route("xai:grok-4").unwrap();
        assert_eq!(
            (ep.base_url.as_str(), ep.key_env.as_str(), model),
            ("http://127.0.0.1:10/v1", "", "grok-4")
        );
        let (ep, model) = cfg.route("groq:llama-3.3-70b").unwrap();
        assert_eq!(
            (ep.key_env.as_str(), model),
            ("GROQ_API_KEY", "llama-3.3-70b")
        );
        // No provider claims `ft`: the whole id goes to the direct endpoint.
        let (ep, model) = cfg.route("ft:gpt-4o:org::abc").unwrap();
        assert_eq!((ep, model), (&cfg.direct, "ft:gpt-4o:org::abc"));
        assert_eq!(cfg.route("gpt-4o-mini").unwrap().1, "gpt-4o-mini");
        for bad in [
            r#"{"gw": {"base_url": "x"}}"#,
            r#"{"Bad Name": {"base_url": "x"}}"#,
            r#"{"p": {"base_url": "x", "key_env": "lower"}}"#,
            r#"{"p": {"url": "x"}}"#,
        ] {
            let vars: HashMap<&str, &str> = [("CAPDIR_PROVIDERS", bad)].into();
            assert!(
                AgentConfig::from_lookup(&|n| vars.get(n).map(|v| v.to_string())).is_err(),
                "{bad}"
            );
        }
    }

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
