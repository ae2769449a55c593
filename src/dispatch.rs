//! One invocation through the gate (DESIGN.md §6–§8): who may run what, the runner, and the
//! receipt written before anyone hears the answer. `POST /api/dispatch` and MCP `tools/call`
//! both come here, so they refuse alike and write the same receipts.

use crate::auth::{self, Caller};
use crate::invoke::Input;
use crate::ledger::{self, Draft, Receipt};
use crate::outcome::Status;
use crate::server::{ApiError, AppState, find_receipt, unknown_key};
use axum::extract::Request;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value as Json, json};
use std::time::Duration;

/// A finished invocation whose receipt is durable.
#[derive(Debug)]
pub struct Invoked {
    pub receipt: Receipt,
    /// The output as the caller may see it (secrets redacted).
    pub output: String,
    pub duration: Duration,
    pub truncated: bool,
}

/// The body of `POST /api/dispatch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvokeRequest {
    pub key: String,
    pub body: Option<String>,
    pub args: Option<serde_json::Map<String, Json>>,
    pub repairs: Option<String>,
}

fn bad_body(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_body",
        message,
        r#"send JSON: {"key": "SHA256", "body": "a|b"} or {"key": …, "args": {…}}"#,
    )
}

/// Read and parse an invocation body, refusing one over the body limit with 413.
pub async fn read_request(state: &AppState, req: Request) -> Result<InvokeRequest, ApiError> {
    let limit = state.inner.body_limit;
    let bytes = axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is over {limit} bytes"),
                "send less; large inputs belong behind a URL",
            )
        })?;
    let parsed: InvokeRequest =
        serde_json::from_slice(&bytes).map_err(|e| bad_body(format!("not an invocation: {e}")))?;
    if parsed.body.is_some() && parsed.args.is_some() {
        return Err(bad_body("give either `body` or `args`, not both"));
    }
    Ok(parsed)
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Run one invocation for `caller`: the gate, the runner, the receipt (durable before this
/// returns), the metrics. A refusal or a runner failure is an `ApiError` that names its receipt.
pub async fn dispatch(
    state: &AppState,
    caller: &Caller,
    request: InvokeRequest,
) -> Result<Invoked, ApiError> {
    auth::require_owner(caller)?;
    let Ok(_permit) = state.inner.inflight.try_acquire() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "saturated",
            "too many invocations are running",
            "retry after a short pause",
        ));
    };
    // One catalogue for the whole call, even if a reload lands meanwhile.
    let live = state.live();
    let Some(callable) = live.invoker.rows().get(&request.key) else {
        return Err(unknown_key(live.invoker.rows(), &request.key));
    };
    let contract_sha256 = callable.fingerprint.clone();
    if let Some(repairs) = &request.repairs {
        let earlier = find_receipt(state, repairs).await.map_err(|e| {
            if e.code() == "unknown_receipt" {
                ApiError::new(
                    StatusCode::CONFLICT,
                    "repairs_unknown",
                    format!("`repairs` names {repairs}, which has no receipt"),
                    "name the failed invocation this one corrects",
                )
            } else {
                e
            }
        })?;
        if earlier.draft.status != Status::Failed.as_str()
            && earlier.draft.status != Status::Refused.as_str()
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "repairs_not_failed",
                format!("{repairs} did not fail ({})", earlier.draft.status),
                "only a FAILED or REFUSED invocation can be repaired",
            ));
        }
    }
    let input_text = match (&request.body, &request.args) {
        (_, Some(args)) => Json::Object(args.clone()).to_string(),
        (body, None) => body.clone().unwrap_or_default(),
    };
    let input = match request.args {
        Some(args) => Input::Args(args),
        None => Input::Body(request.body.unwrap_or_default()),
    };
    let started_at = now_rfc3339();
    let outcome = live.invoker.invoke(&request.key, input).await;
    let finished_at = now_rfc3339();
    // Redacted once: the receipt stores it and the caller is answered with it.
    let output = crate::secrets::redact(&outcome.output, &[]);
    let draft = Draft {
        id: ledger::new_id(),
        key: outcome.key.clone(),
        actor: caller.actor(),
        runner: outcome.runner.clone(),
        trace_id: uuid::Uuid::new_v4().simple().to_string(),
        started_at,
        finished_at,
        status: outcome.status.as_str().into(),
        error_code: outcome.error_code().map(str::to_string),
        cost_usd: outcome.usage.as_ref().and_then(|u| u.cost_usd),
        input_sha256: ledger::sha256_hex(&input_text),
        output_sha256: ledger::sha256_hex(&outcome.output),
        contract_sha256,
        catalogue_commit: live.info.commit.clone(),
        repairs: request.repairs,
        input: crate::secrets::redact(&input_text, &[]),
        output: output.clone(),
    };
    let receipt = state
        .inner
        .ledger
        .append(draft)
        .await
        .map_err(|e| ApiError::internal("the receipt could not be written", e))?;
    {
        let mut by = state
            .inner
            .metrics
            .invocations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *by.entry((outcome.status.as_str().to_string(), outcome.runner.clone()))
            .or_default() += 1;
    }
    tracing::info!(
        receipt = %receipt.draft.id,
        seq = receipt.seq,
        key = %receipt.draft.key,
        runner = %receipt.draft.runner,
        status = %receipt.draft.status,
        commit = %receipt.draft.catalogue_commit,
        "invoked"
    );
    if let Some(failure) = &outcome.error {
        let (status, code, fix) = match outcome.status {
            Status::Refused if failure.code.starts_with("breaker") => (
                StatusCode::SERVICE_UNAVAILABLE,
                "breaker_open",
                "the upstream credential is resting; retry later",
            ),
            Status::Refused => (
                StatusCode::BAD_REQUEST,
                "refused",
                "read the row's contract (its ARGS line) and send the arguments it needs",
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                "upstream_failed",
                "the row ran and failed; retry, or repair it with \"repairs\": this receipt",
            ),
        };
        return Err(ApiError::new(status, code, output.clone(), fix)
            .with("receipt", json!(receipt.draft.id))
            .with("status", json!(receipt.draft.status))
            .with("reason", json!(failure.code)));
    }
    Ok(Invoked {
        receipt,
        output,
        duration: outcome.duration,
        truncated: outcome.truncated,
    })
}
