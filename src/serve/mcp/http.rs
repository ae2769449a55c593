//! Streamable HTTP at `/mcp` (MCP 2025-06-18 "Transports"): a POST carries one JSON-RPC
//! message and a request is answered with one JSON object; a GET opens the session's
//! server-sent-event stream, on which `notifications/tools/list_changed` follows a reload; a
//! DELETE ends the session.
//!
//! The checks before any message is read, in order: the `Origin` header (DNS rebinding), the
//! credential (`serve::authenticate`, the same as every other endpoint), `Accept`, then the
//! session id and the `MCP-Protocol-Version` header. A refusal at this level is an HTTP error
//! whose body is a JSON-RPC error with capdir's error document (stable code, how to fix) in
//! `data`.

use super::{Message, PROTOCOL_VERSIONS, RpcError, Session, answer, initialize};
use crate::access::auth::Caller;
use crate::serve::{ApiError, AppState, authenticate};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// The session id header, set on the `initialize` answer and sent back on every request.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The negotiated protocol version, sent by the client on every request after `initialize`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

fn json_response(status: StatusCode, body: &Json) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A refusal before a message is answered: the request's id (when known) and why.
struct MessageRefusal {
    id: Json,
    error: ApiError,
}

impl MessageRefusal {
    fn new(id: &Json, error: ApiError) -> MessageRefusal {
        MessageRefusal {
            id: id.clone(),
            error,
        }
    }
}

impl IntoResponse for MessageRefusal {
    fn into_response(self) -> Response {
        refuse(&self.id, self.error)
    }
}

/// An HTTP-level refusal: the status of `e`, a JSON-RPC error naming its stable code.
fn refuse(id: &Json, e: ApiError) -> Response {
    let document = e.to_json();
    let message = document["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let rpc = RpcError {
        code: RpcError::INVALID_REQUEST,
        message,
        data: Some(document),
    };
    json_response(e.status(), &rpc.response(id))
}

/// Browsers send `Origin`; a page on another site must not reach a local dispatcher through
/// DNS rebinding. Allowed: no `Origin`, a loopback origin, or the dispatcher's own base URL.
fn origin_allowed(headers: &HeaderMap, base: &str) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(origin) = origin
        .to_str()
        .ok()
        .and_then(|o| reqwest::Url::parse(o).ok())
    else {
        return false;
    };
    if matches!(origin.host_str(), Some("localhost" | "127.0.0.1" | "[::1]")) {
        return true;
    }
    reqwest::Url::parse(base).is_ok_and(|b| b.origin() == origin.origin())
}

/// Does `Accept` allow `wanted`? A request without `Accept` takes anything.
fn accepts(headers: &HeaderMap, wanted: &str) -> bool {
    let Some(accept) = headers.get(header::ACCEPT) else {
        return true;
    };
    let major = wanted.split('/').next().unwrap_or_default();
    accept.to_str().is_ok_and(|a| {
        a.split(',').any(|part| {
            let t = part.split(';').next().unwrap_or_default().trim();
            t == wanted || t == "*/*" || t.strip_suffix("/*") == Some(major)
        })
    })
}

/// Who holds the sessions a caller opens: its credential (`Caller::actor`); anonymous callers
/// per peer address, so one cannot use up or end another's.
fn holder(caller: &Caller, extensions: &axum::http::Extensions) -> String {
    match (caller, crate::serve::peer(extensions)) {
        // An IPv6 client holds a /64 of addresses: the network is the holder.
        (Caller::Anonymous, Some(std::net::IpAddr::V6(v6))) => {
            let s = v6.segments();
            format!("anonymous@{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        (Caller::Anonymous, Some(ip)) => format!("anonymous@{ip}"),
        _ => caller.actor(),
    }
}

/// `gate`, and who holds the sessions this caller opens.
fn gate_holder(
    state: &AppState,
    headers: &HeaderMap,
    req: &Request,
) -> Result<(Caller, String), MessageRefusal> {
    let caller = gate(state, headers)?;
    let holder = holder(&caller, req.extensions());
    Ok((caller, holder))
}

/// Origin and credential: who is calling, or the refusal.
fn gate(state: &AppState, headers: &HeaderMap) -> Result<Caller, MessageRefusal> {
    if !origin_allowed(headers, &state.inner.base) {
        return Err(MessageRefusal::new(
            &Json::Null,
            ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                "requests from this Origin are not accepted",
                "call /mcp from the dispatcher's own origin or from loopback",
            ),
        ));
    }
    authenticate(state.keys(), headers).map_err(|e| MessageRefusal::new(&Json::Null, e))
}

fn not_acceptable(wanted: &str) -> Response {
    refuse(
        &Json::Null,
        ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "not_acceptable",
            format!("this answer is {wanted}, which the Accept header does not allow"),
            "send `Accept: application/json, text/event-stream`",
        ),
    )
}

/// The session a request names, and a protocol version header that agrees with it.
fn session_of(
    state: &AppState,
    headers: &HeaderMap,
    holder: &str,
    id: &Json,
) -> Result<Arc<Session>, MessageRefusal> {
    let Some(sid) = headers.get(SESSION_HEADER) else {
        return Err(MessageRefusal::new(
            id,
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_session",
                "this request has no Mcp-Session-Id header",
                "send initialize first, then the Mcp-Session-Id it answers with on every request",
            ),
        ));
    };
    let session = sid
        .to_str()
        .ok()
        .and_then(|sid| state.inner.mcp.session(sid, holder))
        .ok_or_else(|| {
            MessageRefusal::new(
                id,
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "unknown_session",
                    "no session has this Mcp-Session-Id (it ended or expired)",
                    "send initialize again, without a session id, to start a new session",
                ),
            )
        })?;
    if let Some(sent) = headers.get(VERSION_HEADER) {
        let sent = sent.to_str().unwrap_or_default();
        let problem = if !PROTOCOL_VERSIONS.contains(&sent) {
            Some(format!(
                "MCP-Protocol-Version `{sent}` is not supported (supported: {})",
                PROTOCOL_VERSIONS.join(", ")
            ))
        } else if sent != session.version {
            Some(format!(
                "MCP-Protocol-Version `{sent}` is not the version this session negotiated ({})",
                session.version
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            return Err(MessageRefusal::new(
                id,
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_protocol_version",
                    message,
                    "send the protocolVersion that initialize answered with",
                ),
            ));
        }
    }
    Ok(session)
}

/// `POST /mcp`: one JSON-RPC message.
pub async fn post(State(state): State<AppState>, headers: HeaderMap, req: Request) -> Response {
    let (caller, holder) = match gate_holder(&state, &headers, &req) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    if !accepts(&headers, "application/json") {
        return not_acceptable("application/json");
    }
    let limit = state.inner.body_limit;
    let Ok(bytes) = axum::body::to_bytes(req.into_body(), limit).await else {
        return refuse(
            &Json::Null,
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the message is over {limit} bytes"),
                "send less; large inputs belong behind a URL",
            ),
        );
    };
    let message = match super::parse(&bytes) {
        Ok(m) => m,
        Err(u) => return json_response(StatusCode::BAD_REQUEST, &u.response()),
    };
    if let Message::Request { id, method, params } = &message
        && method == "initialize"
    {
        return match initialize(&state, params.as_ref()) {
            Ok((version, result)) => {
                let known = state.inner.mcp.tools(&state.live()).digest.clone();
                let Some((sid, _)) = state.inner.mcp.open_session(&holder, version, known) else {
                    return refuse(
                        id,
                        ApiError::new(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "saturated",
                            "this dispatcher holds as many MCP sessions as it keeps",
                            "try again later, or end sessions you no longer use (DELETE /mcp)",
                        )
                        .retry_after(5),
                    );
                };
                let mut response = json_response(
                    StatusCode::OK,
                    &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                );
                if let Ok(v) = HeaderValue::from_str(&sid) {
                    response.headers_mut().insert(SESSION_HEADER, v);
                }
                response
            }
            Err(e) => json_response(StatusCode::OK, &e.response(id)),
        };
    }
    let id = match &message {
        Message::Request { id, .. } => id.clone(),
        _ => Json::Null,
    };
    let session = match session_of(&state, &headers, &holder, &id) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match message {
        Message::Request { id, method, params } => {
            let body = match answer(&state, &session, &caller, &method, params.as_ref()).await {
                Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                Err(e) => e.response(&id),
            };
            json_response(StatusCode::OK, &body)
        }
        // `notifications/initialized`, `notifications/cancelled` (calls are not cancelled
        // half-way: the receipt is written either way) and answers: accepted.
        Message::Notification { .. } | Message::Response => StatusCode::ACCEPTED.into_response(),
    }
}

/// What one GET stream waits on.
struct Listening {
    state: AppState,
    session: Arc<Session>,
    reloads: watch::Receiver<u64>,
    replaced: oneshot::Receiver<()>,
}

impl Listening {
    /// The next notification, or `None` when the stream should end.
    async fn next(&mut self) -> Option<Event> {
        let changed = tokio::select! {
            changed = super::tools_changed(&self.state, &self.session, &mut self.reloads) => changed,
            _ = &mut self.replaced => false,
        };
        changed.then(|| {
            Event::default()
                .event("message")
                .data(super::list_changed_notification().to_string())
        })
    }
}

/// `GET /mcp`: the session's stream of server messages (today: tools/list_changed).
pub async fn open_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let (_, holder) = match gate_holder(&state, &headers, &req) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    if !accepts(&headers, "text/event-stream") {
        return not_acceptable("text/event-stream");
    }
    let session = match session_of(&state, &headers, &holder, &Json::Null) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let listening = Listening {
        replaced: session.replace_stream(),
        reloads: state.subscribe_reloads(),
        state,
        session,
    };
    let events = futures_util::stream::unfold(listening, |mut l| async move {
        l.next().await.map(|e| (Ok::<_, Infallible>(e), l))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `DELETE /mcp`: end the session.
pub async fn end_session(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let (_, holder) = match gate_holder(&state, &headers, &req) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return refuse(
            &Json::Null,
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_session",
                "DELETE needs the Mcp-Session-Id header of the session to end",
                "send the Mcp-Session-Id that initialize answered with",
            ),
        );
    };
    if state.inner.mcp.end_session(sid, &holder) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        refuse(
            &Json::Null,
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_session",
                "no session has this Mcp-Session-Id (it ended or expired)",
                "nothing to end",
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn origins() {
        let base = "https://capdir.example.org";
        assert!(origin_allowed(&HeaderMap::new(), base));
        assert!(origin_allowed(
            &with(header::ORIGIN, "http://localhost:3000"),
            base
        ));
        assert!(origin_allowed(
            &with(header::ORIGIN, "http://127.0.0.1:8080"),
            base
        ));
        assert!(origin_allowed(
            &with(header::ORIGIN, "http://[::1]:8080"),
            base
        ));
        assert!(origin_allowed(
            &with(header::ORIGIN, "https://capdir.example.org"),
            base
        ));
        assert!(!origin_allowed(
            &with(header::ORIGIN, "https://evil.example"),
            base
        ));
        assert!(!origin_allowed(
            &with(header::ORIGIN, "http://capdir.example.org"),
            base
        ));
        assert!(!origin_allowed(&with(header::ORIGIN, "null"), base));
    }

    #[test]
    fn accept_headers() {
        assert!(accepts(&HeaderMap::new(), "application/json"));
        let both = with(header::ACCEPT, "application/json, text/event-stream");
        assert!(accepts(&both, "application/json") && accepts(&both, "text/event-stream"));
        assert!(accepts(&with(header::ACCEPT, "*/*"), "text/event-stream"));
        assert!(accepts(
            &with(header::ACCEPT, "text/*;q=0.5"),
            "text/event-stream"
        ));
        assert!(!accepts(
            &with(header::ACCEPT, "text/html"),
            "application/json"
        ));
    }
}
