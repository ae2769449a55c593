//! `/api/dispatch` (ask, contract, run-now, confirm, the counts, the registry; and `POST` to
//! invoke) and `/openapi.json` (`/metrics` is `metrics.rs`).

use super::{ApiError, AppState, authenticate};
use crate::access::auth::{self, Caller};
use crate::dispatch::{self, DispatchError, InvokeRequest, Invoked, Live};
use crate::search::ask;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use std::path::Path;

#[derive(Debug, Deserialize)]
pub(super) struct DispatchQuery {
    ask: Option<String>,
    key: Option<String>,
    format: Option<String>,
    confirm: Option<String>,
    map: Option<String>,
    registry: Option<String>,
    /// With `registry`: only the rows of this category.
    category: Option<String>,
    limit: Option<usize>,
    /// Run-now: the key to invoke.
    invoke: Option<String>,
    /// Run-now: the `a|b` body.
    body: Option<String>,
    /// A capability token carried in the URL (run-now links, contracts).
    share: Option<String>,
    /// With `confirm`: the receipt's inclusion proof against the latest signed checkpoint.
    proof: Option<String>,
}

const QUERY_HELP: &str = "use ?ask=…, ?key=K&format=markdown|json, ?invoke=K&body=…&share=TOKEN, ?confirm=inv_…[&proof=1], ?map=1 or ?registry=1[&category=C]";

/// The caller of a GET: a `share` token in the URL when there is one (a run-now link is
/// the whole credential; headers are then not read), else the request's headers.
fn get_caller(
    state: &AppState,
    headers: &HeaderMap,
    share: Option<&str>,
) -> Result<Caller, ApiError> {
    match share {
        Some(token) => Ok(auth::authenticate_share(state.keys(), token)?),
        None => authenticate(state.keys(), headers),
    }
}

/// The formats a contract comes in.
const FORMATS: [&str; 3] = ["markdown", "md", "json"];

/// The most candidates an ask returns.
pub const MAX_ASK_LIMIT: usize = 100;

/// Every parameter is checked whichever form is asked, so a malformed one is never ignored.
fn check_query(q: &DispatchQuery) -> Result<(), ApiError> {
    if let Some(f) = q.format.as_deref()
        && !FORMATS.contains(&f)
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_format",
            format!("format `{f}` is not offered"),
            "use format=markdown or format=json",
        ));
    }
    if let Some(c) = q.category.as_deref()
        && !crate::row::is_category(c)
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("`category={c}` is not a category name"),
            "send ?registry=1&category=NAME, NAME in lowercase letters, digits and dashes",
        ));
    }
    if q.limit.is_some_and(|l| l > MAX_ASK_LIMIT) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("limit is at most {MAX_ASK_LIMIT}"),
            "ask for fewer candidates",
        ));
    }
    if let Some(id) = q.confirm.as_deref() {
        dispatch::checked_receipt_id(id)?;
    }
    Ok(())
}

pub(super) async fn dispatch_get(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    query: Result<Query<DispatchQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            e.body_text(),
            QUERY_HELP,
        )
    })?;
    check_query(&q)?;
    let live = state.live();
    if let Some(key) = q.invoke {
        // Run-now: a model whose only tool is fetching a URL can still run a row.
        let caller = get_caller(&state, &headers, q.share.as_deref())?;
        let request = InvokeRequest {
            key,
            body: q.body,
            args: None,
            repairs: None,
        };
        let done = state
            .dispatcher()
            .dispatch(&caller, request)
            .await
            .map_err(|e| with_proof(&state, e))?;
        return Ok(invoked_response(&state, &done));
    }
    if let Some(text) = &q.ask {
        return ask_get(&state, &live, &headers, text, &q);
    }
    if let Some(key) = q.key {
        let caller = get_caller(&state, &headers, q.share.as_deref())?;
        return contract(
            &state,
            &live,
            &caller,
            &key,
            q.format.as_deref().unwrap_or("markdown"),
        )
        .await;
    }
    if let Some(id) = q.confirm {
        limit_keyless(&state, &headers, &extensions)?;
        let with_proof = q.proof.as_deref().is_some_and(|p| p != "0");
        return confirm(&state, &id, with_proof).await;
    }
    if q.map.is_some() {
        return Ok(axum::Json(json!({
            "commit": live.info.commit,
            "counts": live.info.counts,
        }))
        .into_response());
    }
    if q.registry.is_some() {
        return registry(&state, q.category).await;
    }
    Ok(forms(&state, &live))
}

/// `?ask=…`: the answer, its links carrying shares of the caller's credential when it asked
/// with one (a share link, or a header that holds); a credential that does not hold asks as
/// anyone does.
fn ask_get(
    state: &AppState,
    live: &crate::dispatch::Live,
    headers: &HeaderMap,
    text: &str,
    q: &DispatchQuery,
) -> Result<Response, ApiError> {
    let mut answer = ask::answer(
        &live.searcher,
        text,
        q.limit.unwrap_or(12),
        &state.inner.base,
    )
    .map_err(|e| ApiError::internal("search failed", e))?;
    let caller = get_caller(state, headers, q.share.as_deref()).unwrap_or(Caller::Anonymous);
    if caller == Caller::Anonymous {
        return Ok(axum::Json(answer).into_response());
    }
    // Only the links the dispatcher made, each for its own row: a row's `what` is its
    // author's text, and is left as it is.
    let share = |url: &str, key: &str| super::share::share_link(state, live, &caller, url, key);
    if let Some(best) = answer.best.as_mut() {
        best.run_now_url = share(&best.run_now_url, &best.key);
        best.contract_url = share(&best.contract_url, &best.key);
    }
    for c in &mut answer.candidates {
        c.run_now_url = share(&c.run_now_url, &c.hit.key);
    }
    Ok(private(axum::Json(answer).into_response()))
}

/// `?registry=1`: the site's registry, or one category's rows of it in the registry's
/// order, with the build's commit.
async fn registry(state: &AppState, category: Option<String>) -> Result<Response, ApiError> {
    let path = state.site().join("registry.json");
    let Some(category) = category else {
        return site_file(&path, "application/json").await;
    };
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| ApiError::internal("a site file is missing", e.into()))?;
    let mut doc: Json = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::internal("the registry is not JSON", e.into()))?;
    if let Some(rows) = doc.get_mut("rows").and_then(Json::as_array_mut) {
        rows.retain(|r| {
            crate::row::category_name(r["category"].as_str().unwrap_or_default()) == category
        });
    }
    doc["category"] = json!(category);
    Ok(axum::Json(doc).into_response())
}

/// Nothing asked: what can be asked here.
fn forms(state: &AppState, live: &crate::dispatch::Live) -> Response {
    let base = &state.inner.base;
    axum::Json(json!({
        "dispatcher": "capdir",
        "commit": live.info.commit,
        "forms": {
            "ask": format!("{base}/api/dispatch?ask=what+you+need"),
            "contract": format!("{base}/api/dispatch?key=KEY&format=markdown"),
            "run_now": format!("{base}/api/dispatch?invoke=KEY&body=a|b&share=TOKEN"),
            "invoke": format!("POST {base}/api/dispatch {{\"key\": \"KEY\", \"body\": \"a|b\"}}"),
            "confirm": format!("{base}/api/dispatch?confirm=inv_…"),
            "map": format!("{base}/api/dispatch?map=1"),
            "registry": format!("{base}/api/dispatch?registry=1"),
        },
        "openapi": format!("{base}/openapi.json"),
    }))
    .into_response()
}

async fn site_file(path: &Path, content_type: &'static str) -> Result<Response, ApiError> {
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok(([(header::CONTENT_TYPE, content_type)], bytes).into_response()),
        Err(e) => Err(ApiError::internal(
            "a site file is missing",
            anyhow::anyhow!("{}: {e}", path.display()),
        )),
    }
}

async fn contract(
    state: &AppState,
    live: &Live,
    caller: &Caller,
    key: &str,
    format: &str,
) -> Result<Response, ApiError> {
    let (ext, content_type) = match format {
        "markdown" | "md" => ("md", "text/markdown; charset=utf-8"),
        "json" => ("json", "application/json"),
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_format",
                format!("format `{other}` is not offered"),
                "use format=markdown or format=json",
            ));
        }
    };
    // Only keys the catalogue knows reach the file system: no path is built from raw input.
    let known = live.invoker.rows().get(key);
    if known.is_none() && !live.tombstones.contains_key(key) {
        return Err(DispatchError::unknown_key(live.invoker.rows(), key).into());
    }
    let path = state.site().join("k").join(format!("{key}.{ext}"));
    let mut response = site_file(&path, content_type).await?;
    let Some(callable) = known else {
        // A removed key answers with its tombstone: when, by which commit, what replaced it.
        *response.status_mut() = StatusCode::GONE;
        return Ok(response);
    };
    if *caller == Caller::Anonymous {
        // The static contract as built: it says which kinds of credential the row accepts.
        return Ok(response);
    }
    // Fetched with a credential: what this credential may do with this row, computed now.
    let affordances = state
        .dispatcher()
        .affordances(caller, callable, state.inner.body_limit)
        .await?;
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| ApiError::internal("a site file is missing", e.into()))?;
    if ext == "json" {
        let mut doc: Json = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal("a contract is not JSON", e.into()))?;
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("affordances".into(), json!(affordances));
        }
        let text = super::share::with_shares(state, caller, &doc.to_string(), key);
        return Ok(private(
            ([(header::CONTENT_TYPE, content_type)], text).into_response(),
        ));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    text.push_str(&affordances.markdown());
    let text = super::share::with_shares(state, caller, &text, key);
    Ok(private(
        ([(header::CONTENT_TYPE, content_type)], text).into_response(),
    ))
}

/// A request without a credential counted against its address's keyless allowance: 429 with
/// `Retry-After` once it is spent. A caller with a credential is not limited here.
pub(super) fn limit_keyless(
    state: &AppState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> Result<(), ApiError> {
    // Only a credential that holds counts: any header at all would otherwise lift the limit.
    if matches!(
        authenticate(state.keys(), headers),
        Ok(Caller::Owner | Caller::Token(_))
    ) {
        return Ok(());
    }
    let Some(ip) = crate::serve::peer(extensions) else {
        return Ok(());
    };
    state.inner.confirms.check(ip).map_err(|wait| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "this address has asked for too many keyless confirmations this minute",
            "wait for Retry-After, or confirm with a credential",
        )
        .retry_after(wait)
    })
}

async fn confirm(state: &AppState, id: &str, with_proof: bool) -> Result<Response, ApiError> {
    let r = state.dispatcher().find_receipt(id).await?;
    let mut answer = json!({
        "confirmed": true,
        "receipt": r.draft.id,
        "status": r.draft.status,
        "key": r.draft.key,
        "input_sha256": r.draft.input_sha256,
        "output_sha256": r.draft.output_sha256,
        "contract_sha256": r.draft.contract_sha256,
        "hash": r.hash,
    });
    if with_proof {
        let proof = state.dispatcher().inclusion_proof(r.seq).await?;
        answer["seq"] = json!(r.seq);
        answer["proof"] = json!(proof);
    }
    Ok(axum::Json(answer).into_response())
}

/// Who sends a POST that runs rows: a credential is needed, unless the dispatcher is `--open`.
fn runner_caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let caller = authenticate(state.keys(), headers)?;
    if !state.is_open() {
        auth::require_credential(&caller)?;
    }
    Ok(caller)
}

pub(super) async fn dispatch_post(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let caller = runner_caller(&state, &headers)?;
    let request = read_request(&state, req).await?;
    let done = state
        .dispatcher()
        .dispatch(&caller, request)
        .await
        .map_err(|e| with_proof(&state, e))?;
    Ok(invoked_response(&state, &done))
}

/// An answer made for the caller's credential (share tokens in its links): kept out of
/// shared caches, and varying by the headers a credential comes in.
fn private(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    h.insert(
        header::VARY,
        HeaderValue::from_static("authorization, x-owner-key"),
    );
    response
}

/// A dispatch error as an answer, with the proof of its receipt when it left one.
pub(super) fn with_proof(state: &AppState, e: DispatchError) -> ApiError {
    let proof = e.receipt().map(|r| state.dispatcher().proof(r));
    let api = ApiError::from(e);
    match proof {
        Some(p) => api.with("proof", json!(p)),
        None => api,
    }
}

/// The answer to a successful invocation, with its receipt id in a header as well.
fn invoked_response(state: &AppState, done: &Invoked) -> Response {
    /// The answer to an invocation, written straight from its parts.
    #[derive(Serialize)]
    struct Answer<'a> {
        receipt: &'a str,
        status: &'a str,
        key: &'a str,
        output: &'a str,
        catalogue_commit: &'a str,
        duration_ms: f64,
        truncated: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<&'a crate::invoke::outcome::Usage>,
        proof: dispatch::Proof,
    }
    let receipt = &done.receipt;
    let mut response = axum::Json(Answer {
        receipt: &receipt.draft.id,
        status: &receipt.draft.status,
        key: &receipt.draft.key,
        output: &done.output,
        catalogue_commit: &receipt.draft.catalogue_commit,
        duration_ms: done.duration.as_secs_f64() * 1000.0,
        truncated: done.truncated,
        usage: done.usage.as_ref(),
        proof: state.dispatcher().proof(receipt),
    })
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&receipt.draft.id) {
        response.headers_mut().insert("x-capdir-receipt", v);
    }
    response
}

/// The body of `POST /api/route`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteRequest {
    text: String,
}

/// `POST /api/route {"text"}`: run the router tags of a text, each through the gate with its
/// receipt; the text comes back with each tag replaced.
pub(super) async fn route_post(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let caller = runner_caller(&state, &headers)?;
    let bytes = body_bytes(&state, req).await?;
    let parsed: RouteRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            format!("not a text to route: {e}"),
            r#"send JSON: {"text": "… [SHA256]hello[/SHA256] …"}"#,
        )
    })?;
    let routed = state.dispatcher().route(&caller, &parsed.text).await?;
    Ok(axum::Json(routed).into_response())
}

/// A request's body, refused with 413 over the body limit.
pub(super) async fn body_bytes(
    state: &AppState,
    req: Request,
) -> Result<axum::body::Bytes, ApiError> {
    let limit = state.inner.body_limit;
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is over {limit} bytes"),
                "send less; large inputs belong behind a URL",
            )
        })
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
async fn read_request(state: &AppState, req: Request) -> Result<InvokeRequest, ApiError> {
    let bytes = body_bytes(state, req).await?;
    let parsed: InvokeRequest =
        serde_json::from_slice(&bytes).map_err(|e| bad_body(format!("not an invocation: {e}")))?;
    if parsed.body.is_some() && parsed.args.is_some() {
        return Err(bad_body("give either `body` or `args`, not both"));
    }
    Ok(parsed)
}

/// The OpenAPI document of these routes, naming this dispatcher as its server.
pub(super) async fn openapi(State(state): State<AppState>) -> Response {
    axum::Json(crate::serve::openapi::document(&state.inner.base)).into_response()
}
