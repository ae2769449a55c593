//! One MCP client session with one server, on the official Rust SDK (`rmcp`): start or reach
//! the server, `initialize`, list its tools (every page), call one, and end it.
//!
//! The runner keeps these in its session cache; `capdir import mcp` opens one to list tools.
//! Everything that can wait has a deadline, and every failure is a named `Failure`
//! (`mcp:spawn`, `mcp:connect`, `mcp:timeout`, `mcp:closed`, `mcp:rpc`, `mcp:protocol`), so a
//! server that hangs or dies is an answer, never a hang. A server started as a command leads a
//! process group of its own, killed (the group, so `npx`'s child goes too) when the
//! `Connection` is dropped, and on Linux is killed by the kernel if capdir dies first.

use crate::invoke::outcome::Failure;
use crate::invoke::runner::USER_AGENT;
use reqwest::header::HeaderMap;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    PaginatedRequestParams, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a session goes, with everything applied: the command with the environment it gets,
/// or the URL with its headers. Two calls share a session only when these are equal.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A command, started with exactly `env` as its environment.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A Streamable HTTP endpoint; `headers` go with every request.
    Http { url: String, headers: HeaderMap },
}

impl Endpoint {
    /// A digest naming the endpoint with its credentials, for the session cache (the values
    /// are hashed, never kept as text beside the session).
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        let mut part = |s: &[u8]| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s);
        };
        match self {
            Endpoint::Stdio { command, args, env } => {
                part(b"stdio");
                part(command.as_bytes());
                for a in args {
                    part(a.as_bytes());
                }
                part(b"env");
                for (k, v) in env {
                    part(k.as_bytes());
                    part(v.as_bytes());
                }
            }
            Endpoint::Http { url, headers } => {
                part(b"http");
                part(url.as_bytes());
                for (k, v) in headers {
                    part(k.as_str().as_bytes());
                    part(v.as_bytes());
                }
            }
        }
        hex::encode(h.finalize())
    }
}

/// What a server said about itself in `initialize`.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
}

/// A live session with one MCP server.
pub struct Connection {
    service: RunningService<RoleClient, ClientConfig>,
    /// The process group of a server started as a command (its pid: it leads the group).
    group: Option<u32>,
    /// The last bytes the server wrote on standard error, quoted when it fails.
    stderr: Arc<Mutex<String>>,
}

/// How much of a server's standard error is kept to quote in a failure.
const STDERR_TAIL: usize = 600;

/// The most pages of `tools/list` followed: a server that keeps answering a cursor is cut off.
pub const MAX_PAGES: usize = 100;

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("capdir", env!("CARGO_PKG_VERSION")),
    )
}

impl Connection {
    /// Start or reach the server and finish `initialize` within `timeout`.
    /// A server over HTTP is reached only at an address `egress` allows.
    pub async fn open(
        endpoint: &Endpoint,
        timeout: Duration,
        egress: &crate::invoke::egress::Egress,
    ) -> Result<Connection, Failure> {
        match endpoint {
            Endpoint::Stdio { command, args, env } => {
                Connection::spawn(command, args, env, timeout).await
            }
            Endpoint::Http { url, headers } => {
                Connection::reach(url, headers, timeout, egress).await
            }
        }
    }

    async fn spawn(
        command: &str,
        args: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<Connection, Failure> {
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true);
        // Its own group, so killing it takes what it started (`npx` runs the server as a child).
        #[cfg(unix)]
        cmd.process_group(0);
        // And if capdir itself is killed (no Drop runs), the kernel kills the server: a server
        // that ignores the end of its input would otherwise outlive the dispatcher. (Linux
        // sends it when the spawning thread ends: here a runtime's worker or the main thread.)
        #[cfg(target_os = "linux")]
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2),
        // which is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (child, stderr) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Failure::new("mcp:spawn", format!("cannot start `{command}`: {e}")))?;
        let group = child.id();
        let tail = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = stderr {
            tokio::spawn(keep_tail(stderr, tail.clone(), command.to_string()));
        }
        // Until `initialize` is answered the group is killed by this guard, whatever happens.
        let mut guard = GroupGuard(group);
        let service = handshake(child, timeout, &tail).await?;
        guard.0 = None;
        Ok(Connection {
            service,
            group,
            stderr: tail,
        })
    }

    async fn reach(
        url: &str,
        headers: &HeaderMap,
        timeout: Duration,
        egress: &crate::invoke::egress::Egress,
    ) -> Result<Connection, Failure> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Failure::new("mcp:bad_target", format!("{url}: {e}")))?;
        egress
            .check_url(&parsed)
            .map_err(|why| Failure::new("egress:refused", why))?;
        let client = crate::invoke::runner::http::client_builder()
            .user_agent(USER_AGENT)
            .dns_resolver(crate::invoke::egress::Resolver::shared(egress))
            // A proxy from the environment would resolve the target itself, past the resolver.
            .no_proxy()
            .connect_timeout(timeout)
            // A credential in a header must not follow a redirect to another host.
            .redirect(reqwest::redirect::Policy::none())
            .default_headers(headers.clone())
            .build()
            .map_err(|e| {
                Failure::new("mcp:connect", format!("cannot build the HTTP client: {e}"))
            })?;
        let config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url,
            );
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let tail = Arc::new(Mutex::new(String::new()));
        let service = handshake(transport, timeout, &tail).await?;
        Ok(Connection {
            service,
            group: None,
            stderr: tail,
        })
    }

    /// Is the session still usable (its transport open)?
    pub fn is_alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// The server's name and version from `initialize`.
    pub fn server_info(&self) -> ServerInfo {
        self.service
            .peer()
            .peer_info()
            .and_then(|p| p.server_info.clone())
            .map(|i| ServerInfo {
                name: i.name,
                version: i.version,
            })
            .unwrap_or_default()
    }

    /// Every tool the server lists, following `nextCursor` (at most [`MAX_PAGES`] pages, each
    /// within `timeout`).
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<Tool>, Failure> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = tokio::time::timeout(timeout, self.service.peer().list_tools(params))
                .await
                .map_err(|_| timed_out("tools/list", timeout))?
                .map_err(|e| self.service_failure(e))?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
        Err(Failure::new(
            "mcp:protocol",
            format!("tools/list still had a next page after {MAX_PAGES} pages"),
        ))
    }

    /// Call `tool` with `arguments`; the server's answer within `timeout`, or why not.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Map<String, Json>,
        timeout: Duration,
    ) -> Result<CallToolResult, Failure> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        tokio::time::timeout(timeout, self.service.peer().call_tool(params))
            .await
            .map_err(|_| timed_out(&format!("tools/call {tool}"), timeout))?
            .map_err(|e| self.service_failure(e))
    }

    fn service_failure(&self, e: ServiceError) -> Failure {
        match e {
            ServiceError::McpError(data) => {
                Failure::new("mcp:rpc", format!("{}: {}", data.code.0, data.message))
            }
            ServiceError::Timeout { timeout } => timed_out("the request", timeout),
            ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. } => Failure::new(
                "mcp:closed",
                with_stderr(format!("the server closed the session ({e})"), &self.stderr),
            ),
            other => Failure::new("mcp:protocol", other.to_string()),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        kill_group(self.group);
    }
}

/// Kills a process group when dropped (unless emptied first).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// SIGKILL to the whole group a server leads. Synchronous: it works in `Drop`, with or without
/// a runtime (the SDK's own cleanup is a task, which a runtime shutting down may never run).
fn kill_group(group: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = group.and_then(|g| i32::try_from(g).ok()).filter(|g| *g > 1) {
        // SAFETY: kill(2) has no memory effects; a negative pid names the group this
        // connection's server leads (made with process_group(0) at spawn).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = group;
}

async fn handshake<T, E, A>(
    transport: T,
    timeout: Duration,
    stderr: &Arc<Mutex<String>>,
) -> Result<RunningService<RoleClient, ClientConfig>, Failure>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(timeout, rmcp::serve_client(client_config(), transport)).await {
        Err(_) => Err(timed_out("initialize", timeout)),
        Ok(Err(e)) => Err(Failure::new(
            "mcp:connect",
            with_stderr(format!("initialize failed: {e}"), stderr),
        )),
        Ok(Ok(service)) => Ok(service),
    }
}

fn timed_out(what: &str, timeout: Duration) -> Failure {
    Failure::new(
        "mcp:timeout",
        format!(
            "timed out after {} ms waiting for {what}",
            timeout.as_millis()
        ),
    )
}

/// `message`, and the last line the server wrote on standard error, if any.
fn with_stderr(message: String, stderr: &Mutex<String>) -> String {
    let tail = stderr.lock().unwrap_or_else(|p| p.into_inner());
    match tail.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(line) => format!("{message}; the server's last words: {}", line.trim()),
        None => message,
    }
}

/// Read a server's standard error to the end, logging it at debug and keeping its tail.
async fn keep_tail(
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<String>>,
    command: String,
) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&buf[..n]);
        tracing::debug!(server = %command, "{}", text.trim_end());
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        t.push_str(&text);
        if t.len() > STDERR_TAIL {
            let mut cut = t.len() - STDERR_TAIL;
            while !t.is_char_boundary(cut) {
                cut += 1;
            }
            t.drain(..cut);
        }
    }
}
