//! `/receipt/ID`: the full receipt for a caller who may read it, as JSON or as a page in the
//! site's layout, and the page's form that sends a typed credential.

use super::{ApiError, AppState, authenticate};
use crate::access::auth::{self, Caller};
use crate::dispatch::Dispatcher;
use crate::ledger::Receipt;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

pub(super) async fn receipt(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
) -> Result<Response, ApiError> {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if wants_html {
        // Without a key the page is the keyless confirmation: limited per address alike.
        super::api::limit_keyless(&state, &headers, &extensions)?;
        return Ok(receipt_page(&state, &id, &headers).await);
    }
    let caller = authenticate(state.keys(), &headers)?;
    auth::require_credential(&caller)?;
    let r = state.dispatcher().find_receipt(&id).await?;
    may_read_receipt(state.dispatcher(), &caller, &r).await?;
    // With the receipts of the calls it made below it, when it made any (a flow's steps).
    let tree = state.dispatcher().receipt_tree(r).await?;
    Ok(axum::Json(tree).into_response())
}

/// Who may read a full receipt: the owner, or the token whose invocation it records while
/// that token still holds (not revoked, not expired, minted for this dispatcher), as the gate
/// of an invocation would judge it.
async fn may_read_receipt(
    dispatcher: &Dispatcher,
    caller: &Caller,
    r: &Receipt,
) -> Result<(), ApiError> {
    auth::require_credential(caller)?;
    if let Caller::Token(claims) = caller {
        if let Some(refused) = dispatcher.holder_refusal(claims).await? {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                refused.reason.as_str(),
                refused.message,
                refused.reason.how_to_fix(),
            ));
        }
        // A share is receipted as the caller it came from, but reads no full receipt: one
        // link must not open every receipt of that caller (it confirms keylessly).
        if claims.parent.is_none() && r.draft.actor == caller.actor() {
            return Ok(());
        }
    }
    Ok(auth::require_owner(caller)?)
}

/// Whether a page may show `r` in full to `caller`: false for anonymous callers, who see
/// the keyless confirmation.
async fn may_read(
    dispatcher: &Dispatcher,
    caller: Result<Caller, ApiError>,
    r: &Receipt,
) -> Result<bool, ApiError> {
    match caller? {
        Caller::Anonymous => Ok(false),
        c => may_read_receipt(dispatcher, &c, r).await.map(|()| true),
    }
}

/// What the receipt page's form sends: the owner key or a token typed into the page.
#[derive(Deserialize)]
pub(super) struct CredentialForm {
    #[serde(default)]
    credential: String,
}

/// `POST /receipt/{id}` from the page's form: the credential arrives as a form field (a
/// browser cannot put a typed key into a header of a plain navigation) and is checked exactly
/// as the header would be.
pub(super) async fn receipt_form(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    form: Result<axum::Form<CredentialForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let mut headers = HeaderMap::new();
    if let Ok(axum::Form(f)) = form
        && !f.credential.trim().is_empty()
        && let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", f.credential.trim()))
    {
        headers.insert(header::AUTHORIZATION, v);
    }
    receipt_page(&state, &id, &headers).await
}

/// The receipt as a page in the site's layout: the full receipt for a caller who may read
/// it, else the keyless confirmation (status and hashes, as `?confirm=` gives anyone) with a
/// form for the key; refusals and unknown ids show the same code and fix as the JSON answer.
async fn receipt_page(state: &AppState, id: &str, headers: &HeaderMap) -> Response {
    let keyless = |r: &Receipt| {
        json!({
            "key": r.draft.key,
            "status": r.draft.status,
            "input_sha256": r.draft.input_sha256,
            "output_sha256": r.draft.output_sha256,
            "contract_sha256": r.draft.contract_sha256,
            "hash": r.hash,
        })
    };
    let found = state
        .dispatcher()
        .find_receipt(id)
        .await
        .map_err(ApiError::from);
    let caller = authenticate(state.keys(), headers);
    let (receipt, full, refusal) = match found {
        Err(e) => (None, false, Some(e)),
        Ok(r) => match may_read(state.dispatcher(), caller, &r).await {
            // The full receipt, with the receipts of the calls it made (a flow's steps).
            Ok(true) => match state.dispatcher().receipt_tree(r).await {
                Ok(tree) => (
                    Some(serde_json::to_value(&tree).unwrap_or_default()),
                    true,
                    None,
                ),
                Err(e) => (None, false, Some(ApiError::from(e))),
            },
            Ok(false) => (Some(keyless(&r)), false, None),
            Err(e) => (Some(keyless(&r)), false, Some(e)),
        },
    };
    let page = crate::build::pages::ReceiptPage {
        id,
        receipt,
        full,
        error: refusal.as_ref().map(|e| crate::build::pages::PageError {
            code: e.0.code,
            message: &e.0.message,
            how_to_fix: &e.0.how_to_fix,
        }),
    };
    let status = refusal.as_ref().map_or(StatusCode::OK, |e| e.0.status);
    html_page(state, status, &page)
}

fn html_page(
    state: &AppState,
    status: StatusCode,
    page: &crate::build::pages::ReceiptPage,
) -> Response {
    match crate::build::pages::receipt_page(&state.live().info, page) {
        Ok(html) => (
            status,
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                // A full receipt carries the call's input and output: keep it out of caches.
                (header::CACHE_CONTROL, "no-store"),
                (header::CONTENT_SECURITY_POLICY, PAGE_POLICY),
            ],
            html,
        )
            .into_response(),
        Err(e) => ApiError::internal("rendering the receipt page failed", e).into_response(),
    }
}

/// Pages load nothing from elsewhere and run only the site's own scripts.
pub(super) const PAGE_POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
