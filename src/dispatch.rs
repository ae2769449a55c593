//! One invocation through the gate (DESIGN.md §6–§8): who may run what, the runner, and the
//! receipt written before anyone hears the answer. `POST /api/dispatch` and MCP `tools/call`
//! both come here, so they refuse alike and write the same receipts.

use crate::auth::{self, Caller};
use crate::invoke::Input;
use crate::ledger::{self, Draft, Receipt};
use crate::outcome::Status;
use crate::rowset::Callable;
use crate::server::{ApiError, AppState, Live, find_receipt, unknown_key};
use crate::token::{self, Reason, Target};
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
///
/// The gate runs before any runner, in this order: a credential at all (anonymous callers
/// only under `--open`), capacity (503 `saturated`), then for a capability token: revoked,
/// expired, audience, the row (404 `unknown_key`), scope, contract_changed, risk_ceiling:low,
/// fixed_body, payload_ceiling. Each token refusal answers its literal reason as the code and
/// writes a `REFUSED` receipt.
pub async fn dispatch(
    state: &AppState,
    caller: &Caller,
    request: InvokeRequest,
) -> Result<Invoked, ApiError> {
    if *caller == Caller::Anonymous && !state.inner.open {
        auth::require_credential(caller)?;
    }
    let Ok(_permit) = state.inner.inflight.try_acquire() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "saturated",
            format!(
                "{} invocations are running, the most this dispatcher takes at once",
                state.inner.max_inflight
            ),
            "retry after the pause the Retry-After header gives",
        )
        .retry_after(1));
    };
    // One catalogue for the whole call, even if a reload lands meanwhile.
    let live = state.live();
    let mut request = request;
    let sent_input: Option<String> = match (&request.body, &request.args) {
        (_, Some(args)) => Some(Json::Object(args.clone()).to_string()),
        (Some(body), None) => Some(body.clone()),
        (None, None) => None,
    };
    let gate = Gate {
        state,
        live: &live,
        caller,
        key: &request.key,
        input: sent_input.as_deref().unwrap_or_default(),
    };
    if let Caller::Token(claims) = caller {
        if gate.revoked(&claims.id).await? {
            let message = format!("token {} was revoked", claims.id);
            return Err(gate.refuse(None, Reason::Revoked, message).await);
        }
        if let Err(r) = token::check_holder(
            claims,
            chrono::Utc::now().timestamp(),
            &state.inner.urls.base,
        ) {
            return Err(gate.refuse(None, r.reason, r.message).await);
        }
    }
    let Some(callable) = live.invoker.rows().get(&request.key) else {
        return Err(unknown_key(live.invoker.rows(), &request.key));
    };
    let contract_sha256 = callable.fingerprint.clone();
    match caller {
        Caller::Owner => {}
        Caller::Token(claims) => {
            let target = Target {
                key: &callable.row.key,
                category: &callable.row.category,
                sensitive: callable.row.sensitive,
                fingerprint: &contract_sha256,
            };
            if let Err(r) = token::check_call(claims, target, sent_input.as_deref()) {
                return Err(gate.refuse(Some(callable), r.reason, r.message).await);
            }
            if sent_input.is_none() {
                // A token with a fixed body runs it when the caller sends none.
                request.body = claims.body.clone();
            }
        }
        Caller::Anonymous => {
            if let Some(why) = open_refusal(&callable.row) {
                return Err(gate.refuse_anonymous(callable, why).await);
            }
        }
    }
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
    // What runs: what the caller sent, or the token's fixed body put in its place above.
    let input_text = sent_input
        .or_else(|| request.body.clone())
        .unwrap_or_default();
    let input = match request.args {
        Some(args) => Input::Args(args),
        None => Input::Body(request.body.unwrap_or_default()),
    };
    let secrets = &state.inner.secrets;
    let started_at = now_rfc3339();
    let outcome = live.invoker.invoke(&request.key, input).await;
    let finished_at = now_rfc3339();
    // Redacted once: the receipt stores it and the caller is answered with it.
    let output = crate::secrets::redact(&outcome.output, secrets);
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
        input: crate::secrets::redact(&input_text, secrets),
        output: output.clone(),
    };
    let receipt = append(state, draft).await?;
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
            _ if is_timeout(failure) => (
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                "the upstream did not answer in time; retry later, or repair with \"repairs\": this receipt",
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

/// An upstream that did not answer within the runner's timeout (`ERR:http:fetch:timed out…`).
fn is_timeout(failure: &crate::outcome::Failure) -> bool {
    failure.code.ends_with(":fetch")
        && (failure.detail.starts_with("timed out")
            || failure.detail.starts_with("connect timed out"))
}

/// Why an anonymous caller may not run `row` under `--open`, if it may not.
pub fn open_refusal(row: &crate::row::Row) -> Option<&'static str> {
    if row.sensitive {
        Some("the row is sensitive")
    } else if !row.auth.trim().is_empty() {
        Some("the row uses a credential")
    } else {
        None
    }
}

/// Make a receipt durable and count it.
async fn append(state: &AppState, draft: Draft) -> Result<Receipt, ApiError> {
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
        *by.entry((receipt.draft.status.clone(), receipt.draft.runner.clone()))
            .or_default() += 1;
    }
    tracing::info!(
        receipt = %receipt.draft.id,
        seq = receipt.seq,
        key = %receipt.draft.key,
        runner = %receipt.draft.runner,
        actor = %receipt.draft.actor,
        status = %receipt.draft.status,
        error = receipt.draft.error_code.as_deref().unwrap_or(""),
        commit = %receipt.draft.catalogue_commit,
        "invoked"
    );
    Ok(receipt)
}

/// One call at the gate: what a refusal's receipt is made of.
struct Gate<'a> {
    state: &'a AppState,
    live: &'a Live,
    caller: &'a Caller,
    key: &'a str,
    input: &'a str,
}

impl Gate<'_> {
    async fn revoked(&self, id: &str) -> Result<bool, ApiError> {
        self.state
            .inner
            .ledger
            .is_revoked(id)
            .await
            .map_err(|e| ApiError::internal("the revocation list could not be read", e))
    }

    /// The receipt of a refusal: nothing ran, the reason is its error code.
    async fn receipt(
        &self,
        callable: Option<&Callable>,
        code: &str,
        message: &str,
    ) -> Result<Receipt, ApiError> {
        let secrets = &self.state.inner.secrets;
        let output = format!("ERR:{code}:{message}");
        let now = now_rfc3339();
        let draft = Draft {
            id: ledger::new_id(),
            key: self.key.to_string(),
            actor: self.caller.actor(),
            runner: callable.map_or("none", |c| c.row.runner_name()).to_string(),
            trace_id: uuid::Uuid::new_v4().simple().to_string(),
            started_at: now.clone(),
            finished_at: now,
            status: Status::Refused.as_str().into(),
            error_code: Some(code.to_string()),
            cost_usd: None,
            input_sha256: ledger::sha256_hex(self.input),
            output_sha256: ledger::sha256_hex(&output),
            contract_sha256: callable.map(|c| c.fingerprint.clone()).unwrap_or_default(),
            catalogue_commit: self.live.info.commit.clone(),
            repairs: None,
            input: crate::secrets::redact(self.input, secrets),
            output: crate::secrets::redact(&output, secrets),
        };
        append(self.state, draft).await
    }

    /// A token refused at the gate: the literal reason as the code, with its receipt.
    async fn refuse(
        &self,
        callable: Option<&Callable>,
        reason: Reason,
        message: String,
    ) -> ApiError {
        let code = reason.as_str();
        match self.receipt(callable, code, &message).await {
            Ok(receipt) => ApiError::new(reason.status(), code, message, reason.how_to_fix())
                .with("receipt", json!(receipt.draft.id))
                .with("status", json!(receipt.draft.status))
                .with("reason", json!(code)),
            Err(e) => e,
        }
    }

    /// An anonymous caller under `--open` asking for a row it may not run.
    async fn refuse_anonymous(&self, callable: &Callable, why: &str) -> ApiError {
        let message = format!(
            "{why}: without a credential, --open allows only rows that are not sensitive and use no credential"
        );
        match self.receipt(Some(callable), "anonymous", &message).await {
            Ok(receipt) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                message,
                "send the owner key or a capability token that covers this row",
            )
            .with("receipt", json!(receipt.draft.id))
            .with("status", json!(receipt.draft.status))
            .with("reason", json!("anonymous")),
            Err(e) => e,
        }
    }
}
