//! Every error the dispatcher answers over HTTP: a status, a stable code, a message and how to
//! fix it, as `{"error": {"code", "message", "how_to_fix"}, …}`. The domain's errors
//! (`DispatchError`, `Denied`) become one here, and only here is a status chosen for them.

use crate::access::auth::Denied;
use crate::access::token::Reason;
use crate::dispatch::{DispatchError, Failure};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};

/// One error answer. Boxed so the `Result`s that carry it stay small.
#[derive(Debug)]
pub struct ApiError(pub(crate) Box<ErrorBody>);

/// What an `ApiError` says.
#[derive(Debug)]
pub struct ErrorBody {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub how_to_fix: String,
    /// Extra top-level fields (`did_you_mean`, `receipt`).
    pub extra: serde_json::Map<String, Json>,
    /// Seconds for a `Retry-After` header (503 answers).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
        how_to_fix: impl Into<String>,
    ) -> ApiError {
        ApiError(Box::new(ErrorBody {
            status,
            code,
            message: message.into(),
            how_to_fix: how_to_fix.into(),
            extra: serde_json::Map::new(),
            retry_after: None,
        }))
    }

    /// Tell the client when to try again (`Retry-After`, seconds).
    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.0.retry_after = Some(seconds);
        self
    }

    pub(crate) fn with(mut self, field: &str, value: Json) -> ApiError {
        self.0.extra.insert(field.to_string(), value);
        self
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.0.code
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The JSON body: `{"error": {"code", "message", "how_to_fix"}}` and the extra fields.
    /// MCP tool errors carry the same document.
    pub fn to_json(&self) -> Json {
        let e = &self.0;
        let mut body = serde_json::Map::new();
        if e.status == StatusCode::ACCEPTED {
            // Not an error: a call waiting for a person. The ticket's fields, and what to do.
            body.extend(e.extra.clone());
            body.insert("message".into(), json!(e.message));
            body.insert("how_to_fix".into(), json!(e.how_to_fix));
            return Json::Object(body);
        }
        body.insert(
            "error".into(),
            json!({"code": e.code, "message": e.message, "how_to_fix": e.how_to_fix}),
        );
        body.extend(e.extra.clone());
        Json::Object(body)
    }

    pub(crate) fn internal(what: &'static str, e: anyhow::Error) -> ApiError {
        DispatchError::unavailable(what, e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.0.retry_after;
        let mut response = (self.status(), axum::Json(self.to_json())).into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The status a token refusal answers with.
pub(super) fn reason_status(reason: Reason) -> StatusCode {
    match reason {
        Reason::Expired => StatusCode::UNAUTHORIZED,
        Reason::ContractChanged => StatusCode::CONFLICT,
        Reason::PayloadCeiling => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::FORBIDDEN,
    }
}

/// The status a refusal about an approval answers with.
fn approval_status(code: &str) -> StatusCode {
    match code {
        "bad_approval_id" => StatusCode::BAD_REQUEST,
        "unknown_approval" => StatusCode::NOT_FOUND,
        "not_approver" | "self_approval" | "approval_denied" => StatusCode::FORBIDDEN,
        _ => StatusCode::CONFLICT,
    }
}

pub(super) fn denied_status(d: &Denied) -> StatusCode {
    match d {
        Denied::NoCredential | Denied::NoOwnerKey => StatusCode::UNAUTHORIZED,
        Denied::Forbidden { .. } => StatusCode::FORBIDDEN,
    }
}

impl From<Denied> for ApiError {
    fn from(d: Denied) -> ApiError {
        ApiError::new(denied_status(&d), d.code(), d.message(), d.how_to_fix())
    }
}

impl From<DispatchError> for ApiError {
    fn from(e: DispatchError) -> ApiError {
        let status = match &e {
            DispatchError::Denied(d) => denied_status(d),
            DispatchError::Saturated { .. } | DispatchError::Unavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            DispatchError::UnknownKey { .. }
            | DispatchError::UnknownReceipt
            | DispatchError::NoLog
            | DispatchError::NoCheckpoint(_) => StatusCode::NOT_FOUND,
            DispatchError::BadTreeSizes { .. } => StatusCode::BAD_REQUEST,
            DispatchError::Token { reason, .. } => reason_status(*reason),
            DispatchError::Anonymous { .. } => StatusCode::UNAUTHORIZED,
            DispatchError::RepairsUnknown { .. } | DispatchError::RepairsNotFailed { .. } => {
                StatusCode::CONFLICT
            }
            DispatchError::BadReceiptId => StatusCode::BAD_REQUEST,
            DispatchError::Failed { kind, .. } => match kind {
                Failure::BreakerOpen => StatusCode::SERVICE_UNAVAILABLE,
                Failure::Refused => StatusCode::BAD_REQUEST,
                Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
                Failure::Upstream => StatusCode::BAD_GATEWAY,
            },
            DispatchError::PendingApproval { .. } => StatusCode::ACCEPTED,
            DispatchError::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            DispatchError::Approval(r) => approval_status(r.code),
        };
        let mut api = ApiError::new(status, e.code(), e.message(), e.how_to_fix());
        match &e {
            DispatchError::Saturated { .. } => api = api.retry_after(1),
            DispatchError::Unavailable { .. } => api = api.retry_after(5),
            DispatchError::UnknownKey { did_you_mean, .. } => {
                api = api.with("did_you_mean", json!(did_you_mean));
            }
            DispatchError::Limited { retry_after, .. } => api = api.retry_after(*retry_after),
            DispatchError::PendingApproval { ticket, .. } => {
                if let Json::Object(fields) = json!(ticket) {
                    api.0.extra.extend(fields);
                }
                return api;
            }
            _ => {}
        }
        if let (Some(receipt), Some(reason)) = (e.receipt(), e.reason()) {
            api = api
                .with("receipt", json!(receipt.draft.id))
                .with("status", json!(receipt.draft.status))
                .with("reason", json!(reason));
        }
        if let Some(usage) = e.usage() {
            api = api.with("usage", json!(usage));
        }
        api
    }
}
