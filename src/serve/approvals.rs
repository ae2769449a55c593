//! The watcher over HTTP: the queue of calls waiting for a person (`GET /api/approvals`), one
//! approval (`GET /api/approvals/{id}`), a decision (`POST /api/approvals/{id}`), the caller's
//! poll (`GET /api/approvals/{id}/result?wait=30s`) and the page a person decides on
//! (`/approvals`, which follows the queue without a reload). The work is `dispatch`'s.

use super::{ApiError, AppState, authenticate};
use crate::dispatch::Poll;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// The longest a poll waits for a change.
const MAX_WAIT: Duration = Duration::from_secs(60);

pub(super) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = authenticate(state.keys(), &headers)?;
    let pending = state.dispatcher().pending_approvals(&caller).await?;
    Ok(no_store(
        axum::Json(json!({ "pending": pending })).into_response(),
    ))
}

pub(super) async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = authenticate(state.keys(), &headers)?;
    let view = state.dispatcher().approval(&caller, &id).await?;
    Ok(no_store(axum::Json(view).into_response()))
}

/// The body of a decision.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: String,
    note: Option<String>,
}

pub(super) async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let caller = authenticate(state.keys(), &headers)?;
    let bytes = super::api::body_bytes(&state, req).await?;
    let body: DecisionBody =
        serde_json::from_slice(&bytes).map_err(|e| bad_decision(e.to_string()))?;
    let approve = match body.decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => return Err(bad_decision(format!("`{other}` is not a decision"))),
    };
    // On a task of its own: a decider who hangs up does not cut the approved run short.
    let dispatcher = state.dispatcher().clone();
    let decided =
        tokio::spawn(async move { dispatcher.decide(&caller, &id, approve, body.note).await })
            .await
            .map_err(|e| ApiError::internal("the decision stopped", e.into()))?;
    Ok(no_store(axum::Json(decided?).into_response()))
}

fn bad_decision(message: String) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_decision",
        message,
        r#"send JSON: {"decision": "approve" | "deny", "note": "why"}"#,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PollQuery {
    /// How long to wait for a change: `30s`, `1m` (at most a minute).
    wait: Option<String>,
}

pub(super) async fn result(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<PollQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            e.body_text(),
            "poll with ?wait=30s, or nothing",
        )
    })?;
    let wait = match q.wait.as_deref() {
        None => Duration::ZERO,
        Some(w) => crate::access::duration::parse_ttl(w)
            .map(|s| Duration::from_secs(s as u64).min(MAX_WAIT))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e, "use ?wait=30s"))?,
    };
    let caller = authenticate(state.keys(), &headers)?;
    match state.dispatcher().poll_approval(&caller, &id, wait).await? {
        Poll::Ran(answer) => Ok(no_store(axum::Json(answer).into_response())),
        Poll::Waiting(view) => {
            let status = if view.decision.is_some() {
                "APPROVED_RUNNING"
            } else {
                crate::dispatch::PENDING_APPROVAL
            };
            let mut response = (
                StatusCode::ACCEPTED,
                axum::Json(json!({
                    "status": status,
                    "approval": view.approval,
                    "expires_at": view.expires_at,
                    "poll_url": format!("{}/api/approvals/{}/result", state.inner.base, view.approval),
                })),
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(2u64));
            Ok(no_store(response))
        }
    }
}

/// The page a person decides on. It holds no data: its script asks the API with the key
/// the person types, kept in this tab's session storage only.
pub(super) async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, super::receipt::PAGE_POLICY),
        ],
        include_str!("assets/approvals.html"),
    )
        .into_response()
}

pub(super) async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("assets/approvals.js"),
    )
        .into_response()
}

pub(super) async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("assets/approvals.css"),
    )
        .into_response()
}

fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    response
}
