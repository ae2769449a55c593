//! `PUT`, `PATCH` and `DELETE /api/directory/KEY`: the write API over HTTP. The work is
//! `write::Writer`'s; here a request becomes a `write::Request` (the body's format from its
//! `Content-Type`, the message and the replacement from the query) and its outcome a status
//! and a JSON body: 201 with the commit on the current branch (`--write direct`), 202 with
//! the branch pushed for review (`--write propose`).

use super::{ApiError, AppState, authenticate, sent_credential};
use crate::row::diag::Diagnostic;
use crate::write::{self, Format, Mode, Op, WriteError, Written};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteQuery {
    /// The commit message; generated when none.
    message: Option<String>,
    /// `DELETE`: the key that replaces the removed row (its tombstone's `Replaced-by:`).
    replaced_by: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadQuery {
    /// `yaml` (the file as stored, the default) or `json` (its fields, with the file).
    format: Option<String>,
}

/// `GET /api/directory/KEY`: the row as stored at the catalogue's HEAD, with the commit it came
/// from and its ETag, which a write sends back as `If-Match`. Rows are public, as the
/// catalogue is: no credential is needed to read one.
pub(super) async fn get_row(
    State(state): State<AppState>,
    Path(key): Path<String>,
    query: Result<Query<ReadQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query.map(|Query(q)| q).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            e.body_text(),
            "use ?format=yaml or ?format=json",
        )
    })?;
    let Some(writer) = state.writer() else {
        return Err(WriteError::Off.into());
    };
    let stored = writer.read(&key).await?;
    let mut response = match q.format.as_deref() {
        None | Some("yaml") => (
            [(header::CONTENT_TYPE, "application/yaml; charset=utf-8")],
            stored.text.clone(),
        )
            .into_response(),
        Some("json") => {
            let fields: serde_json::Value = serde_yaml::from_slice(&stored.text)
                .map_err(|e| ApiError::internal("the stored row is not YAML", e.into()))?;
            axum::Json(json!({
                "key": stored.key,
                "path": stored.path,
                "commit": stored.commit,
                "etag": stored.etag,
                "row": fields,
                "yaml": String::from_utf8_lossy(&stored.text),
            }))
            .into_response()
        }
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_format",
                format!("format `{other}` is not offered"),
                "use ?format=yaml or ?format=json",
            ));
        }
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&stored.etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&stored.commit) {
        h.insert("x-capdir-commit", v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// `GET /api/directory`: the fields a row has, from the row schema: their names, types,
/// defaults, which a write may set, and the schema itself.
pub(super) async fn fields() -> Response {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/row.schema.json")).unwrap_or_default();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let fields: Vec<serde_json::Value> = schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, p)| {
                    json!({
                        "name": name,
                        "type": p.get("type").cloned().unwrap_or(json!("any")),
                        "default": p.get("default"),
                        "required": required.contains(&name.as_str()),
                        // The key is the path's; every other field is the body's to set.
                        "writable": name != "key",
                        "description": p.get("description"),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    axum::Json(json!({
        "fields": fields,
        "read": "GET /api/directory/KEY (?format=yaml|json): the row as stored, with its ETag",
        "write": "PUT (the whole row) or PATCH (the fields sent) /api/directory/KEY with If-Match: ETAG; DELETE removes it",
        "schema": schema,
    }))
    .into_response()
}

pub(super) async fn put(
    state: State<AppState>,
    key: Path<String>,
    query: Result<Query<WriteQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    with_body(state, key, query, req, |body, format| Op::Put {
        body,
        format,
    })
    .await
}

pub(super) async fn patch(
    state: State<AppState>,
    key: Path<String>,
    query: Result<Query<WriteQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    with_body(state, key, query, req, |body, format| Op::Patch {
        body,
        format,
    })
    .await
}

pub(super) async fn delete(
    State(state): State<AppState>,
    Path(key): Path<String>,
    query: Result<Query<WriteQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = checked_query(query)?;
    let op = Op::Delete {
        replaced_by: q.replaced_by.filter(|r| !r.trim().is_empty()),
    };
    run(&state, &headers, key, op, q.message).await
}

fn checked_query(
    query: Result<Query<WriteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<WriteQuery, ApiError> {
    query.map(|Query(q)| q).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            e.body_text(),
            "use ?message=… (and for DELETE ?replaced_by=KEY)",
        )
    })
}

async fn with_body(
    State(state): State<AppState>,
    Path(key): Path<String>,
    query: Result<Query<WriteQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
    op: impl FnOnce(Vec<u8>, Format) -> Op,
) -> Result<Response, ApiError> {
    let q = checked_query(query)?;
    if q.replaced_by.is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "replaced_by names the replacement of a removed row",
            "send replaced_by with DELETE",
        ));
    }
    let headers = req.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let Some(format) = Format::of_content_type(content_type) else {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "a row is sent as YAML or JSON, not {}",
                content_type.unwrap_or("?")
            ),
            "send Content-Type: application/yaml or application/json",
        ));
    };
    // Who asks is known before the body is read: a caller without a credential is not
    // made to send a row first.
    authenticate(state.keys(), &headers)?;
    let body = super::api::body_bytes(&state, req).await?;
    run(&state, &headers, key, op(body.to_vec(), format), q.message).await
}

async fn run(
    state: &AppState,
    headers: &HeaderMap,
    key: String,
    op: Op,
    message: Option<String>,
) -> Result<Response, ApiError> {
    let caller = authenticate(state.keys(), headers)?;
    let Some(writer) = state.writer() else {
        // Say who may not before saying writes are off: without a credential, no one may.
        if sent_credential(headers).is_none() {
            return Err(WriteError::Denied(crate::access::auth::Denied::NoCredential).into());
        }
        return Err(WriteError::Off.into());
    };
    let written = writer
        .write(
            &caller,
            write::Request {
                key,
                op,
                message: message.filter(|m| !m.is_empty()),
                if_match: headers
                    .get(header::IF_MATCH)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            },
        )
        .await?;
    Ok(answer(state, &written))
}

/// 201 with the commit (`direct`: live now), or 202 with the branch pushed for review; 200
/// when the row already was what was sent and nothing was committed.
fn answer(state: &AppState, w: &Written) -> Response {
    let base = &state.inner.base;
    let contract_url = format!("{base}/api/dispatch?key={}&format=markdown", w.key);
    let mut body = json!({
        "key": w.key,
        "mode": w.mode.as_str(),
        "change": w.change.map_or("unchanged", |c| c.as_str()),
        "commit": w.commit,
        "receipt": w.receipt.draft.id,
        "contract_url": contract_url,
        "took_ms": (w.took.as_secs_f64() * 1000.0 * 10.0).round() / 10.0,
    });
    if !w.warnings.is_empty() {
        body["warnings"] = json!(w.warnings.iter().map(diagnostic).collect::<Vec<_>>());
    }
    let status = match w.mode {
        // Nothing to commit: the row already was what was sent.
        _ if w.change.is_none() => StatusCode::OK,
        Mode::Direct => StatusCode::CREATED,
        Mode::Propose => {
            body["branch"] = json!(w.branch);
            body["pushed"] = json!(w.pushed);
            StatusCode::ACCEPTED
        }
    };
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&w.receipt.draft.id) {
        headers.insert("x-capdir-receipt", v);
    }
    if w.mode == Mode::Direct
        && let Ok(v) = HeaderValue::from_str(&contract_url)
    {
        headers.insert(header::LOCATION, v);
    }
    response
}

/// A diagnostic as the answer shows it.
fn diagnostic(d: &Diagnostic) -> serde_json::Value {
    json!({
        "path": d.path.to_string_lossy().replace('\\', "/"),
        "line": d.line,
        "column": d.col,
        "severity": d.severity,
        "code": d.code,
        "message": d.message,
        "help": d.help,
    })
}

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> ApiError {
        use crate::write::BodyError;
        let status = match &e {
            WriteError::Off => StatusCode::FORBIDDEN,
            WriteError::Precondition { .. } => StatusCode::PRECONDITION_FAILED,
            WriteError::Denied(d) => super::error::denied_status(d),
            WriteError::Token { reason, .. } => super::error::reason_status(*reason),
            WriteError::BadKey { .. } | WriteError::Body(_) | WriteError::BadMessage(_) => {
                StatusCode::BAD_REQUEST
            }
            WriteError::UnknownKey { .. } => StatusCode::NOT_FOUND,
            WriteError::Refused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            WriteError::Dirty { .. } | WriteError::Conflict { .. } => StatusCode::CONFLICT,
            WriteError::NotLive { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            WriteError::PushFailed { .. } => StatusCode::BAD_GATEWAY,
            WriteError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        };
        let mut api = ApiError::new(status, e.code(), e.message(), e.how_to_fix());
        match &e {
            WriteError::Body(BodyError::Malformed {
                line: Some(l),
                column: Some(c),
                ..
            }) => {
                api = api.with("line", json!(l)).with("column", json!(c));
            }
            WriteError::Refused { diagnostics, .. } => {
                api = api.with(
                    "diagnostics",
                    json!(diagnostics.iter().map(diagnostic).collect::<Vec<_>>()),
                );
            }
            WriteError::UnknownKey { did_you_mean, .. } => {
                api = api.with("did_you_mean", json!(did_you_mean));
            }
            WriteError::NotLive { commit } => api = api.with("commit", json!(commit)),
            WriteError::Precondition { current, .. } => api = api.with("etag", json!(current)),
            WriteError::PushFailed { branch } => api = api.with("branch", json!(branch)),
            WriteError::Unavailable { .. } => api = api.retry_after(5),
            _ => {}
        }
        if let Some(r) = e.receipt() {
            api = api
                .with("receipt", json!(r.draft.id))
                .with("status", json!(r.draft.status))
                .with("reason", json!(r.draft.error_code));
        }
        api
    }
}
