//! stdio (MCP 2025-06-18 "Transports"): one JSON-RPC message per line on standard input, one
//! per line on standard output, logs on standard error only. `capdir mcp` runs this as the local
//! owner: the process was started by whoever owns the machine, so there is no credential to
//! check, and its receipts go to the same ledger as the command line's.
//!
//! Requests run concurrently (a slow call does not hold up a ping); one writer task owns
//! standard output so lines never interleave. After `initialize`, a watcher sends
//! `notifications/tools/list_changed` whenever a reload changed the tools. At end of input the
//! requests under way finish and are answered before the process exits.

use super::{Message, RpcError, Session, answer, initialize, list_changed_notification};
use crate::access::auth::Caller;
use crate::serve::AppState;
use serde_json::{Value as Json, json};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument as _;

/// Serve MCP on this process's standard input and output until the input ends.
pub async fn serve(state: AppState) -> anyhow::Result<()> {
    serve_on(state, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serve MCP over any pair of byte streams (tests use in-memory pipes).
pub async fn serve_on<R, W>(state: AppState, input: R, output: W) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, mut lines_out) = mpsc::unbounded_channel::<Json>();
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(message) = lines_out.recv().await {
            let mut line = message.to_string();
            line.push('\n');
            output.write_all(line.as_bytes()).await?;
            output.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut session: Option<Arc<Session>> = None;
    let mut requests = JoinSet::new();
    let mut watcher = None;
    let mut input = BufReader::new(input).lines();
    let limit = state.inner.body_limit;
    while let Some(line) = input.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > limit {
            let e = RpcError::new(
                RpcError::INVALID_REQUEST,
                format!("the message is over {limit} bytes"),
            );
            let _ = out.send(e.response(&Json::Null));
            continue;
        }
        let message = match super::parse(line.as_bytes()) {
            Ok(m) => m,
            Err(u) => {
                let _ = out.send(u.response());
                continue;
            }
        };
        let Message::Request { id, method, params } = message else {
            // Notifications (`initialized`, `cancelled`) and answers need no reply.
            continue;
        };
        if method == "initialize" && session.is_none() {
            match initialize(&state, params.as_ref()) {
                Ok((version, result)) => {
                    let known = state.inner.mcp.tools(&state.live()).digest.clone();
                    let s = Arc::new(Session::new("stdio", version, known));
                    let _ = out.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
                    watcher = Some(tokio::spawn(watch_tools(
                        state.clone(),
                        s.clone(),
                        out.clone(),
                    )));
                    session = Some(s);
                }
                Err(e) => {
                    let _ = out.send(e.response(&id));
                }
            }
            continue;
        }
        let Some(s) = session.clone() else {
            if method == "ping" {
                let _ = out.send(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            } else {
                let e = RpcError::new(RpcError::INVALID_REQUEST, "send initialize first");
                let _ = out.send(e.response(&id));
            }
            continue;
        };
        let (state, out) = (state.clone(), out.clone());
        // Each request a span of its own, as an HTTP request's is: the calls it makes below it.
        let span =
            tracing::info_span!("mcp", otel.name = %format!("mcp {method}"), otel.kind = "server");
        requests.spawn(
            async move {
                let body = match answer(&state, &s, &Caller::Owner, &method, params.as_ref()).await
                {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err(e) => e.response(&id),
                };
                let _ = out.send(body);
            }
            .instrument(span),
        );
        // Reap finished calls as we go so the set does not grow with the session.
        while requests.try_join_next().is_some() {}
    }
    while requests.join_next().await.is_some() {}
    if let Some(w) = watcher {
        w.abort();
        let _ = w.await;
    }
    drop(out);
    writer.await??;
    Ok(())
}

/// Tell the client each time a reload changed the tools.
async fn watch_tools(state: AppState, session: Arc<Session>, out: mpsc::UnboundedSender<Json>) {
    let mut reloads = state.subscribe_reloads();
    while super::tools_changed(&state, &session, &mut reloads).await {
        if out.send(list_changed_notification()).is_err() {
            return;
        }
    }
}
