//! The receipt log as a transparency log over HTTP: its latest signed checkpoint (issued on
//! demand when the log has grown), a kept one by size, the log's public key, and the proof
//! that one tree size extends another. All keyless: anyone may audit the log, and a
//! checkpoint or a proof says nothing a receipt's keyless confirmation does not. Anonymous
//! callers share the per-address limit of keyless confirms, since each answer reads the
//! ledger.

use super::{ApiError, AppState};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(super) struct CheckpointQuery {
    size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ConsistencyQuery {
    from: u64,
    to: u64,
}

fn text(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn bad_query(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_query",
        e.to_string(),
        "send numbers: ?size=N, or ?from=OLD&to=NEW",
    )
}

/// `GET /api/ledger/checkpoint[?size=N]`: the signed note.
pub(super) async fn checkpoint(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    query: Result<Query<CheckpointQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| bad_query(e.body_text()))?;
    super::api::limit_keyless(&state, &headers, &extensions)?;
    let d = state.dispatcher();
    let note = match q.size {
        Some(size) => d.checkpoint_at(size).await?,
        None => d.checkpoint().await?.1,
    };
    Ok(text(note))
}

/// `GET /api/ledger/key`: the key checkpoints are signed with (`NAME+ID+KEY`).
pub(super) async fn key(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(text(format!("{}\n", state.dispatcher().log_key()?)))
}

/// `GET /api/ledger/consistency?from=OLD&to=NEW`: the proof that the log at NEW extends the
/// log at OLD.
pub(super) async fn consistency(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    query: Result<Query<ConsistencyQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| bad_query(e.body_text()))?;
    super::api::limit_keyless(&state, &headers, &extensions)?;
    let proof = state.dispatcher().consistency_proof(q.from, q.to).await?;
    Ok(axum::Json(proof).into_response())
}
