//! The static site, served from the live site directory.

use super::receipt::PAGE_POLICY;
use super::{ApiError, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The static site. Hand-written rather than tower-http's `ServeDir`, whose `fs` feature
/// needs crates this build cannot fetch offline; it serves files by path, fresh per request.
pub(super) async fn static_file(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    let rel = uri.path().trim_start_matches('/');
    let decoded = percent_encoding::percent_decode_str(rel).decode_utf8_lossy();
    let safe = decoded
        .split('/')
        .all(|part| part != ".." && part != "." && !part.contains('\\'));
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("nothing at /{rel}"),
            "start at / or ask with /api/dispatch?ask=…",
        )
        .into_response()
    };
    if !safe || decoded.contains('\0') || decoded.ends_with(".sqlite") {
        return not_found();
    }
    let mut path = state.site().join(decoded.as_ref());
    if decoded.is_empty() || decoded.ends_with('/') {
        path = path.join("index.html");
    }
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(_) => match tokio::fs::read(path.join("index.html")).await {
            Ok(b) => {
                path = path.join("index.html");
                b
            }
            Err(_) => return not_found(),
        },
    };
    let content_type = match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("md") => "text/markdown; charset=utf-8",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("txt") => "text/plain; charset=utf-8",
        Some("xml") => "application/xml",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    let mut response = ([(header::CONTENT_TYPE, content_type)], Body::from(bytes)).into_response();
    if content_type.starts_with("text/html") {
        response.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_POLICY),
        );
    }
    response
}
