//! MCP (DESIGN.md §9): the catalogue as a Model Context Protocol server, so an agent host can
//! list and call rows as tools without knowing capdir's HTTP API.
//!
//! This module holds what both transports share: reading a JSON-RPC 2.0 message, version
//! negotiation, the two projections of the catalogue (`full`: one tool per enabled,
//! planner-visible row; `meta`: ask, contract and invoke, whose size does not grow with the
//! catalogue), cursor pagination, `tools/call` through [`Dispatcher::dispatch`](crate::dispatch::Dispatcher::dispatch) (the same gate and
//! receipts as `POST /api/dispatch`), and the sessions that remember which tool list a client
//! has seen so a reload can tell it the list changed. [`http`] is Streamable HTTP at `/mcp`;
//! [`stdio`] is newline-delimited JSON-RPC on standard input and output (`capdir mcp`).

pub mod http;
pub mod stdio;

use crate::access::auth::Caller;
use crate::build::projection::{self, REPAIRS};
use crate::dispatch::{DispatchError, InvokeRequest, Live};
use crate::search::ask;
use crate::serve::{ApiError, AppState};
use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::{Map, Value as Json, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// The protocol revisions spoken, newest first. A client asking for another one is answered
/// with the newest, as the lifecycle's version negotiation says.
pub const PROTOCOL_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// Tools per `tools/list` page unless configured otherwise.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// A session unused for this long is forgotten (its id then answers 404).
const SESSION_IDLE: Duration = Duration::from_secs(60 * 60);

/// At most this many HTTP sessions are kept: idle ones are dropped to make room, and past it a
/// new session is refused (503) rather than one taken from another holder.
const MAX_SESSIONS: usize = 10_000;

/// Sessions one holder (a credential; anonymous callers per address) may keep open at once.
const MAX_SESSIONS_PER_HOLDER: usize = 64;

/// Sessions all anonymous holders together may keep: past it the longest idle anonymous one
/// ends, so anonymous callers from many addresses never fill the table credentials need.
const MAX_ANONYMOUS_SESSIONS: usize = MAX_SESSIONS / 4;

/// Which view of the catalogue the tools are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Projection {
    /// One tool per enabled, planner-visible row.
    #[default]
    Full,
    /// `ask`, `contract` and `invoke`: a fixed, small list whatever the catalogue's size.
    Meta,
}

impl Projection {
    pub fn as_str(self) -> &'static str {
        match self {
            Projection::Full => "full",
            Projection::Meta => "meta",
        }
    }
}

impl FromStr for Projection {
    type Err = String;

    fn from_str(s: &str) -> Result<Projection, String> {
        match s {
            "full" => Ok(Projection::Full),
            "meta" => Ok(Projection::Meta),
            other => Err(format!(
                "`{other}` is not a projection; use full (one tool per row) or meta (ask, contract, invoke)"
            )),
        }
    }
}

/// How an MCP endpoint is set up.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub projection: Projection,
    /// Tools per `tools/list` page.
    pub page_size: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            projection: Projection::Full,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

/// The projected tools of one catalogue, sorted by name, and a digest that changes when any
/// definition does.
pub struct ToolList {
    pub tools: Vec<Json>,
    pub digest: String,
}

impl ToolList {
    fn new(mut tools: Vec<Json>) -> ToolList {
        tools.sort_by(|a, b| tool_name(a).cmp(tool_name(b)));
        let digest = hex::encode(Sha256::digest(Json::Array(tools.clone()).to_string()));
        ToolList { tools, digest }
    }
}

fn tool_name(tool: &Json) -> &str {
    tool["name"].as_str().unwrap_or_default()
}

/// What one MCP endpoint serves and remembers.
pub struct Endpoint {
    options: Options,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The full projection of the catalogue last asked about; rebuilt after a reload.
    full: Mutex<Option<(Arc<Live>, Arc<ToolList>)>>,
    meta: Arc<ToolList>,
}

impl Endpoint {
    pub fn new(options: Options) -> Endpoint {
        Endpoint {
            options: Options {
                page_size: options.page_size.max(1),
                ..options
            },
            sessions: Mutex::new(HashMap::new()),
            full: Mutex::new(None),
            meta: Arc::new(ToolList::new(meta_tools())),
        }
    }

    pub fn options(&self) -> Options {
        self.options
    }

    /// The tools `live` projects to.
    pub fn tools(&self, live: &Arc<Live>) -> Arc<ToolList> {
        if self.options.projection == Projection::Meta {
            return self.meta.clone();
        }
        let mut cached = self.full.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, list)) = cached.as_ref()
            && Arc::ptr_eq(seen, live)
        {
            return list.clone();
        }
        let rows = live.invoker.rows();
        let tools = rows
            .keys()
            .into_iter()
            .filter_map(|k| rows.row(k))
            .filter(|r| r.enabled && r.planner_visible)
            .map(projection::mcp_tool)
            .collect();
        let list = Arc::new(ToolList::new(tools));
        *cached = Some((live.clone(), list.clone()));
        list
    }

    /// Start a session after `initialize`; its id is random and unguessable.
    /// A new session for `holder` (who opened it, as `Caller::actor` names callers). Each
    /// holder keeps at most `MAX_SESSIONS_PER_HOLDER`: past that its own longest-idle session
    /// ends, never another holder's. When the whole table is full of sessions in use, the new
    /// one is refused (`None`) rather than taken from someone else.
    fn open_session(
        &self,
        holder: &str,
        version: &str,
        known: String,
    ) -> Option<(String, Arc<Session>)> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let session = Arc::new(Session::new(holder, version, known));
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let held: Vec<(&String, &Arc<Session>)> = sessions
            .iter()
            .filter(|(_, s)| s.holder == holder)
            .collect();
        if held.len() >= MAX_SESSIONS_PER_HOLDER
            && let Some(oldest) = held
                .iter()
                .max_by_key(|(_, s)| s.idle())
                .map(|(k, _)| (*k).clone())
            && let Some(s) = sessions.remove(&oldest)
        {
            s.close_stream();
        }
        if holder.starts_with("anonymous") {
            let anonymous: Vec<(&String, &Arc<Session>)> = sessions
                .iter()
                .filter(|(_, s)| s.holder.starts_with("anonymous"))
                .collect();
            if anonymous.len() >= MAX_ANONYMOUS_SESSIONS
                && let Some(oldest) = anonymous
                    .iter()
                    .max_by_key(|(_, s)| s.idle())
                    .map(|(k, _)| (*k).clone())
                && let Some(s) = sessions.remove(&oldest)
            {
                s.close_stream();
            }
        }
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, s| {
                let keep = s.idle() < SESSION_IDLE;
                if !keep {
                    s.close_stream();
                }
                keep
            });
        }
        if sessions.len() >= MAX_SESSIONS {
            return None;
        }
        sessions.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The live session with this id, touched, if `holder` opened it: a session id is no
    /// credential, and one caller cannot use (or end) another's session.
    fn session(&self, id: &str, holder: &str) -> Option<Arc<Session>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        match sessions.get(id) {
            Some(s) if s.holder != holder => None,
            Some(s) if s.idle() < SESSION_IDLE => {
                s.touch();
                Some(s.clone())
            }
            Some(_) => {
                if let Some(s) = sessions.remove(id) {
                    s.close_stream();
                }
                None
            }
            None => None,
        }
    }

    fn end_session(&self, id: &str, holder: &str) -> bool {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.get(id).is_none_or(|s| s.holder != holder) {
            return false;
        }
        sessions.remove(id).map(|s| s.close_stream()).is_some()
    }
}

/// One client's session: the negotiated version, and the tool list it has seen.
pub struct Session {
    /// Who opened it (`Caller::actor`, with the peer address for anonymous callers).
    holder: String,
    pub version: String,
    /// Digest of the tool list the client last saw (at `initialize` or `tools/list`).
    known: Mutex<String>,
    last_seen: Mutex<Instant>,
    /// Closes the session's open GET stream when replaced or dropped: a message goes out on one
    /// stream only.
    stream: Mutex<Option<oneshot::Sender<()>>>,
}

impl Session {
    fn new(holder: &str, version: &str, known: String) -> Session {
        Session {
            holder: holder.to_string(),
            version: version.to_string(),
            known: Mutex::new(known),
            last_seen: Mutex::new(Instant::now()),
            stream: Mutex::new(None),
        }
    }

    fn idle(&self) -> Duration {
        self.last_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Record that the client now knows the list with `digest`; true when that is news.
    fn learn(&self, digest: &str) -> bool {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if *known == digest {
            return false;
        }
        *known = digest.to_string();
        true
    }

    /// End the open GET stream, if any.
    fn close_stream(&self) {
        self.stream.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// A receiver that fires when a newer stream replaces this one.
    fn replace_stream(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        *self.stream.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        rx
    }
}

/// Wait until the catalogue's tools differ from what `session` last saw, and record that the
/// client is being told. False when the dispatcher stops reloading.
pub(crate) async fn tools_changed(
    state: &AppState,
    session: &Session,
    reloads: &mut watch::Receiver<u64>,
) -> bool {
    loop {
        if state.inner.mcp.options.projection == Projection::Full {
            let list = state.inner.mcp.tools(&state.live());
            if session.learn(&list.digest) {
                return true;
            }
        }
        if reloads.changed().await.is_err() {
            return false;
        }
    }
}

/// The notification a client gets when the tool list changed.
pub fn list_changed_notification() -> Json {
    json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
}

/// A JSON-RPC error: a code from the specification, a message, and for capdir's own refusals
/// the error document with its stable code in `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Json>,
}

impl RpcError {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;

    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn with_data(mut self, data: Json) -> RpcError {
        self.data = Some(data);
        self
    }

    /// The error response to the request `id` (`null` when it could not be read).
    pub fn response(&self, id: &Json) -> Json {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            error["data"] = d.clone();
        }
        json!({"jsonrpc": "2.0", "id": id, "error": error})
    }
}

/// One message from a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Json,
        method: String,
        params: Option<Json>,
    },
    Notification {
        method: String,
        params: Option<Json>,
    },
    /// An answer to a request of ours; capdir sends none, so these are accepted and dropped.
    Response,
}

/// A message that could not be read: the error to answer with, and the id to answer to
/// (`null` when none could be read).
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    pub id: Json,
    pub error: RpcError,
}

impl Unreadable {
    /// The error response to send back.
    pub fn response(&self) -> Json {
        self.error.response(&self.id)
    }
}

/// Read one JSON-RPC message.
pub fn parse(bytes: &[u8]) -> Result<Message, Box<Unreadable>> {
    let value: Json = serde_json::from_slice(bytes).map_err(|e| Unreadable {
        id: Json::Null,
        error: RpcError::new(RpcError::PARSE, format!("not JSON: {e}")),
    })?;
    let invalid = |id: Json, why: &str| {
        Err(Box::new(Unreadable {
            id,
            error: RpcError::new(RpcError::INVALID_REQUEST, format!("invalid request: {why}")),
        }))
    };
    let obj = match value {
        Json::Object(obj) => obj,
        Json::Array(_) => {
            return invalid(
                Json::Null,
                "batches are not part of this protocol revision; send one message per request",
            );
        }
        _ => return invalid(Json::Null, "a message is a JSON object"),
    };
    let id = obj.get("id").cloned();
    // MCP request ids are strings or integers; anything else is not echoed back.
    let valid_id = |id: &Json| id.is_string() || id.is_i64() || id.is_u64();
    let echo = id.clone().filter(valid_id).unwrap_or(Json::Null);
    if obj.get("jsonrpc").and_then(Json::as_str) != Some("2.0") {
        return invalid(echo, "`jsonrpc` must be \"2.0\"");
    }
    if let Some(method) = obj.get("method") {
        let Some(method) = method.as_str() else {
            return invalid(echo, "`method` must be a string");
        };
        let params = obj.get("params").cloned();
        if params.as_ref().is_some_and(|p| !p.is_object()) {
            return invalid(echo, "`params` must be an object");
        }
        return match id {
            None => Ok(Message::Notification {
                method: method.to_string(),
                params,
            }),
            Some(id) if valid_id(&id) => Ok(Message::Request {
                id,
                method: method.to_string(),
                params,
            }),
            Some(_) => invalid(Json::Null, "`id` must be a string or an integer"),
        };
    }
    if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) {
        return Ok(Message::Response);
    }
    invalid(echo, "neither a request, a notification nor a response")
}

/// The version to answer an `initialize` asking for `requested` with.
pub fn negotiate(requested: &str) -> &'static str {
    PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(PROTOCOL_VERSIONS[0])
}

/// Answer `initialize`: the negotiated version and the result to send.
fn initialize(state: &AppState, params: Option<&Json>) -> Result<(&'static str, Json), RpcError> {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Json::as_str)
        .ok_or_else(|| {
            RpcError::new(
                RpcError::INVALID_PARAMS,
                "initialize needs params.protocolVersion",
            )
            .with_data(json!({"supported": PROTOCOL_VERSIONS}))
        })?;
    let version = negotiate(requested);
    let projection = state.inner.mcp.options.projection;
    let instructions = match projection {
        Projection::Full => {
            "Each tool is one capability of the catalogue. Every call goes through the dispatcher's gate and writes a receipt; its id is the `receipt` field of the result."
        }
        Projection::Meta => {
            "Call `ask` with the request in plain words, read the best row's `contract`, then `invoke` it by key. Every invocation writes a receipt; its id is the `receipt` field of the result."
        }
    };
    Ok((
        version,
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": projection == Projection::Full}},
            "serverInfo": {
                "name": "capdir",
                "title": format!("capdir catalogue ({} projection)", projection.as_str()),
                "version": env!("CARGO_PKG_VERSION"),
            },
            "instructions": instructions,
        }),
    ))
}

/// Answer one request of an initialized session (`initialize` is the transports' business,
/// since it makes the session).
pub(crate) async fn answer(
    state: &AppState,
    session: &Session,
    caller: &Caller,
    method: &str,
    params: Option<&Json>,
) -> Result<Json, RpcError> {
    match method {
        "ping" => Ok(json!({})),
        "tools/list" => list_tools(state, session, params),
        "tools/call" => call_tool(state, caller, params).await,
        "initialize" => Err(RpcError::new(
            RpcError::INVALID_REQUEST,
            "this session is already initialized; start a new one to initialize again",
        )),
        other => Err(RpcError::new(
            RpcError::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
        )
        .with_data(json!({"methods": ["initialize", "ping", "tools/list", "tools/call"]}))),
    }
}

const CURSOR: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// One page of tools. The cursor is the last name of the previous page, so paging stays in
/// order across a reload (a tool added behind the cursor shows on the next full listing).
fn list_tools(
    state: &AppState,
    session: &Session,
    params: Option<&Json>,
) -> Result<Json, RpcError> {
    let list = state.inner.mcp.tools(&state.live());
    let bad_cursor = || {
        RpcError::new(
            RpcError::INVALID_PARAMS,
            "invalid cursor: pass back a nextCursor exactly as received",
        )
    };
    let after = match params.and_then(|p| p.get("cursor")) {
        None | Some(Json::Null) => None,
        Some(Json::String(c)) => {
            let bytes = CURSOR.decode(c).map_err(|_| bad_cursor())?;
            Some(String::from_utf8(bytes).map_err(|_| bad_cursor())?)
        }
        Some(_) => return Err(bad_cursor()),
    };
    let start = match &after {
        Some(last) => list
            .tools
            .partition_point(|t| tool_name(t) <= last.as_str()),
        None => {
            // A client reading the list from the top now knows this version of it.
            session.learn(&list.digest);
            0
        }
    };
    let end = (start + state.inner.mcp.options.page_size).min(list.tools.len());
    let page = &list.tools[start..end];
    let mut result = json!({"tools": page});
    if end < list.tools.len()
        && let Some(last) = page.last()
    {
        result["nextCursor"] = json!(CURSOR.encode(tool_name(last)));
    }
    Ok(result)
}

/// The meta projection's tools: definitions that stay the same whatever the catalogue holds.
fn meta_tools() -> Vec<Json> {
    vec![
        json!({
            "name": "ask",
            "title": "ask the catalogue",
            "description": "Find the capability for a request in plain words: the best row (its key, what it does, its contract URL) and up to `limit` ranked candidates. Start here.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The request in plain words, e.g. \"sha256 hash of this text\"."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "How many candidates (default 12)."},
                },
                "required": ["query"],
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
        }),
        json!({
            "name": "contract",
            "title": "read a row's contract",
            "description": "The contract of one row by key: what it does, when to use it, its arguments (the ARGS line and input schema), an example, risk and credential. Read it before invoking; don't infer a row from memory.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": "The row's key, e.g. SHA256."},
                    "format": {"type": "string", "enum": ["markdown", "json"], "description": "markdown (default) or json."},
                },
                "required": ["key"],
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
        }),
        json!({
            "name": "invoke",
            "title": "invoke a row",
            "description": "Run one row by key with its arguments, as its contract says: `body` is one string split on `|` into $1, $2, …; or `args` names them (rows with an input schema). Returns the output and the receipt id.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": "The row's key, e.g. SHA256."},
                    "body": {"type": "string", "description": "The arguments as one string, pieces split on `|`."},
                    "args": {"type": "object", "description": "The arguments by name (instead of body)."},
                    "repairs": {"type": "string", "description": "The receipt id of a failed invocation this one corrects."},
                },
                "required": ["key"],
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true},
        }),
    ]
}

/// A tool result: the document as text (for the model) and as structured content.
fn tool_result(document: Json, is_error: bool) -> Json {
    json!({
        "content": [{"type": "text", "text": document.to_string()}],
        "structuredContent": document,
        "isError": is_error,
    })
}

fn tool_error(e: &ApiError) -> Json {
    tool_result(e.to_json(), true)
}

fn bad_arguments(message: impl Into<String>, fix: &str) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_body", message, fix)
}

async fn call_tool(
    state: &AppState,
    caller: &Caller,
    params: Option<&Json>,
) -> Result<Json, RpcError> {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Json::as_str)
        .ok_or_else(|| RpcError::new(RpcError::INVALID_PARAMS, "tools/call needs params.name"))?;
    let arguments = match params.and_then(|p| p.get("arguments")) {
        None | Some(Json::Null) => Map::new(),
        Some(Json::Object(m)) => m.clone(),
        Some(_) => {
            return Err(RpcError::new(
                RpcError::INVALID_PARAMS,
                "params.arguments must be an object",
            ));
        }
    };
    match state.inner.mcp.options.projection {
        Projection::Full => call_row(state, caller, name, arguments).await,
        Projection::Meta => match name {
            "ask" => Ok(meta_ask(state, &arguments)),
            "contract" => Ok(meta_contract(state, &arguments).await),
            "invoke" => Ok(meta_invoke(state, caller, arguments).await),
            other => Err(unknown_tool(other, &["ask", "contract", "invoke"])),
        },
    }
}

fn unknown_tool(name: &str, did_you_mean: &[&str]) -> RpcError {
    RpcError::new(RpcError::INVALID_PARAMS, format!("unknown tool: {name}"))
        .with_data(json!({"code": "unknown_key", "did_you_mean": did_you_mean}))
}

/// `full`: the tool is a row; its arguments are the row's `args` (typed rows) or `{"body"}`.
async fn call_row(
    state: &AppState,
    caller: &Caller,
    name: &str,
    mut arguments: Map<String, Json>,
) -> Result<Json, RpcError> {
    let live = state.live();
    let Some(callable) = live.invoker.rows().get(name) else {
        let suggestions = live.invoker.rows().did_you_mean(name);
        let refs: Vec<&str> = suggestions.iter().map(String::as_str).collect();
        return Err(unknown_tool(name, &refs));
    };
    // `repairs` names the failed call this one corrects, unless the row has an argument of
    // that name itself (then it is the row's).
    let own = callable
        .row
        .input_schema
        .as_ref()
        .and_then(|s| s.get("properties"))
        .is_some_and(|p| p.get(REPAIRS).is_some());
    let repairs = match (own, arguments.get(REPAIRS)) {
        (true, _) | (false, None) => None,
        (false, Some(Json::String(id))) => Some(id.clone()),
        (false, Some(_)) => {
            return Ok(tool_error(&bad_arguments(
                "`repairs` must be a receipt id (inv_…)",
                "name the failed invocation this one corrects, as its receipt says",
            )));
        }
    };
    if !own {
        arguments.remove(REPAIRS);
    }
    let request = if callable.row.input_schema.is_some() {
        InvokeRequest {
            key: name.to_string(),
            body: None,
            args: Some(arguments),
            repairs,
        }
    } else {
        let body = match arguments.remove("body") {
            None => None,
            Some(Json::String(s)) => Some(s),
            Some(_) => {
                return Ok(tool_error(&bad_arguments(
                    "`body` must be a string",
                    "send the arguments as one string, pieces split on `|`",
                )));
            }
        };
        if let Some(extra) = arguments.keys().next() {
            return Ok(tool_error(&bad_arguments(
                format!("{name} takes `body` (and `repairs`); `{extra}` is not one"),
                "send the arguments as one string in `body`, pieces split on `|`",
            )));
        }
        InvokeRequest {
            key: name.to_string(),
            body,
            args: None,
            repairs,
        }
    };
    drop(live);
    Ok(invoke(state, caller, request).await)
}

/// Through the dispatcher's one path: gate, runner, durable receipt, metrics.
async fn invoke(state: &AppState, caller: &Caller, request: InvokeRequest) -> Json {
    match state.dispatcher().dispatch(caller, request).await {
        Ok(done) => tool_result(state.dispatcher().answer_json(&Ok(done)), false),
        // Waiting for a person is not a failure: the result says so, with where to poll. Not
        // elicitation: it asks the calling client's own user, who would approve their own call.
        Err(e @ DispatchError::PendingApproval { .. }) => {
            tool_result(crate::serve::api::with_proof(state, e).to_json(), false)
        }
        Err(e) => tool_error(&crate::serve::api::with_proof(state, e)),
    }
}

fn string_arg<'a>(arguments: &'a Map<String, Json>, name: &str) -> Result<&'a str, ApiError> {
    match arguments.get(name) {
        Some(Json::String(s)) => Ok(s),
        Some(_) => Err(bad_arguments(
            format!("`{name}` must be a string"),
            "see the tool's input schema",
        )),
        None => Err(bad_arguments(
            format!("`{name}` is required"),
            "see the tool's input schema",
        )),
    }
}

fn meta_ask(state: &AppState, arguments: &Map<String, Json>) -> Json {
    let query = match string_arg(arguments, "query") {
        Ok(q) => q,
        Err(e) => return tool_error(&e),
    };
    let limit = match arguments.get("limit") {
        None | Some(Json::Null) => 12,
        Some(v) => match v.as_u64() {
            Some(n) => n as usize,
            None => {
                return tool_error(&bad_arguments(
                    "`limit` must be a positive integer",
                    "send a limit from 1 to 100, or none",
                ));
            }
        },
    };
    let live = state.live();
    match ask::answer(&live.searcher, query, limit, &state.inner.base) {
        Ok(answer) => tool_result(serde_json::to_value(answer).unwrap_or_default(), false),
        Err(e) => tool_error(&ApiError::internal("search failed", e)),
    }
}

async fn meta_contract(state: &AppState, arguments: &Map<String, Json>) -> Json {
    let key = match string_arg(arguments, "key") {
        Ok(k) => k,
        Err(e) => return tool_error(&e),
    };
    let ext = match arguments.get("format").and_then(Json::as_str) {
        None | Some("markdown") | Some("md") => "md",
        Some("json") => "json",
        Some(other) => {
            return tool_error(&bad_arguments(
                format!("format `{other}` is not offered"),
                "use format markdown or json",
            ));
        }
    };
    let live = state.live();
    let known = live.invoker.rows().get(key).is_some();
    // Only keys the catalogue knows reach the file system: no path is built from raw input.
    if !known && !live.tombstones.contains_key(key) {
        return tool_error(&DispatchError::unknown_key(live.invoker.rows(), key).into());
    }
    let path = state.site().join("k").join(format!("{key}.{ext}"));
    match tokio::fs::read_to_string(&path).await {
        // A removed key answers with its tombstone, as an error: there is nothing to invoke.
        Ok(text) => json!({
            "content": [{"type": "text", "text": text}],
            "isError": !known,
        }),
        Err(e) => tool_error(&ApiError::internal(
            "a site file is missing",
            anyhow::anyhow!("{}: {e}", path.display()),
        )),
    }
}

async fn meta_invoke(state: &AppState, caller: &Caller, arguments: Map<String, Json>) -> Json {
    let request: InvokeRequest = match serde_json::from_value(Json::Object(arguments)) {
        Ok(r) => r,
        Err(e) => {
            return tool_error(&bad_arguments(
                format!("not an invocation: {e}"),
                r#"send {"key": "SHA256", "body": "a|b"} or {"key": …, "args": {…}}"#,
            ));
        }
    };
    if request.body.is_some() && request.args.is_some() {
        return tool_error(&bad_arguments(
            "give either `body` or `args`, not both",
            r#"send {"key": "SHA256", "body": "a|b"} or {"key": …, "args": {…}}"#,
        ));
    }
    invoke(state, caller, request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_code(bytes: &str) -> i64 {
        parse(bytes.as_bytes()).expect_err("an error").error.code
    }

    #[test]
    fn messages_are_told_apart() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#),
            Ok(Message::Request {
                id: json!(7),
                method: "ping".into(),
                params: None
            })
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Message::Notification {
                method: "notifications/initialized".into(),
                params: None
            })
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Message::Response)
        );
    }

    #[test]
    fn malformed_messages_have_json_rpc_codes() {
        assert_eq!(err_code("{not json"), RpcError::PARSE);
        assert_eq!(err_code("[]"), RpcError::INVALID_REQUEST);
        assert_eq!(
            err_code(r#"{"id":1,"method":"ping"}"#),
            RpcError::INVALID_REQUEST
        );
        assert_eq!(
            err_code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            RpcError::INVALID_REQUEST
        );
        assert_eq!(
            err_code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#),
            RpcError::INVALID_REQUEST
        );
        // The id is echoed when it could be read.
        let unreadable = parse(br#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#).unwrap_err();
        assert_eq!(unreadable.id, json!("x"));
        // Ids are strings or integers (MCP): a fraction or an object is not one, nor echoed.
        assert_eq!(
            err_code(r#"{"jsonrpc":"2.0","id":2.5e-42,"method":"ping"}"#),
            RpcError::INVALID_REQUEST
        );
        let odd = parse(br#"{"jsonrpc":"1.0","id":{"a":1},"method":"ping"}"#).unwrap_err();
        assert_eq!(odd.id, Json::Null);
    }

    #[test]
    fn version_negotiation_answers_the_same_or_the_newest() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2025-11-25"), "2025-11-25");
        assert_eq!(negotiate("2024-11-05"), PROTOCOL_VERSIONS[0]);
        assert_eq!(negotiate("zzz"), PROTOCOL_VERSIONS[0]);
    }

    #[test]
    fn meta_tools_are_sorted_and_fixed() {
        let list = ToolList::new(meta_tools());
        let names: Vec<&str> = list.tools.iter().map(tool_name).collect();
        assert_eq!(names, ["ask", "contract", "invoke"]);
        assert_eq!(list.digest, ToolList::new(meta_tools()).digest);
    }
}
