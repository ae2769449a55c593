//! The dispatcher (DESIGN.md §6): one HTTP front for asking, reading contracts, invoking with a
//! durable receipt, confirming a receipt, the counts, MCP (`/mcp`, in `mcp::http`) and the
//! static site.
//!
//! `app(state)` builds the whole router so tests drive it in-process with `oneshot`. The rows
//! and the search index live behind an `ArcSwap`: a poller notices a new build and swaps them
//! in whole, so every request sees one catalogue from start to end and none fails during the
//! swap. Files of the site are opened by path on every request, because a build replaces the
//! site directory by exchanging it.

use crate::ask;
use crate::auth::{self, Caller, Keys, authenticate};
use crate::contract::Urls;
use crate::dispatch;
use crate::invoke::{Invoker, InvokerConfig};
use crate::ledger::{Ledger, Receipt};
use crate::mcp;
use crate::rowset::RowSet;
use crate::search::Searcher;
use crate::snapshot::{self, BuildInfo};
use crate::token::TokenKey;
use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{Semaphore, watch};

/// The largest request body accepted by default.
pub const DEFAULT_BODY_LIMIT: usize = 256 * 1024;

/// One error answer: a status, a stable code, a message and how to fix it. Boxed so the
/// `Result`s that carry it stay small.
#[derive(Debug)]
pub struct ApiError(Box<ErrorBody>);

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
        body.insert(
            "error".into(),
            json!({"code": e.code, "message": e.message, "how_to_fix": e.how_to_fix}),
        );
        body.extend(e.extra.clone());
        Json::Object(body)
    }

    pub(crate) fn internal(what: &str, e: anyhow::Error) -> ApiError {
        // The detail goes to the log; the client gets the stable code only.
        tracing::error!(error = %format!("{e:#}"), "{what}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("{what}; see the dispatcher's log"),
            "retry shortly; if it persists, tell the dispatcher's operator",
        )
        .retry_after(5)
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

/// What one build of the site gives the dispatcher; replaced whole on reload.
pub struct Live {
    pub invoker: Invoker,
    pub searcher: Searcher,
    pub info: BuildInfo,
    /// Removed keys and what replaced them.
    pub tombstones: HashMap<String, Option<String>>,
    stamp: Option<Stamp>,
}

/// How the poller tells one `catalogue.sqlite` from another.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        inode,
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

impl Live {
    /// Load the snapshot and index of a built site.
    pub fn load(site: &Path, config: &InvokerConfig) -> anyhow::Result<Live> {
        let before = stamp(&site.join("catalogue.sqlite"));
        let snap = snapshot::open(&site.join("catalogue.sqlite"))?;
        let searcher = Searcher::open(&site.join("index"))?;
        let rows = RowSet::from_rows(snap.rows.into_iter().filter(|r| r.enabled).collect());
        let invoker = Invoker::new(rows, config.clone()).map_err(anyhow::Error::msg)?;
        Ok(Live {
            invoker,
            searcher,
            info: snap.info,
            tombstones: snap.tombstones.into_iter().collect(),
            stamp: before,
        })
    }
}

/// Counters for `/metrics`.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) requests: AtomicU64,
    pub(crate) reloads: AtomicU64,
    /// (status, runner) → invocations.
    pub(crate) invocations: Mutex<BTreeMap<(String, String), u64>>,
}

/// Everything a handler needs; cloning clones `Arc`s.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) site: PathBuf,
    pub(crate) live: ArcSwap<Live>,
    pub(crate) config: InvokerConfig,
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) keys: Keys,
    /// `keys.secret_values()`, taken once: every receipt and answer is redacted with them.
    pub(crate) secrets: crate::secrets::Known,
    pub(crate) open: bool,
    pub(crate) urls: Urls,
    pub(crate) body_limit: usize,
    pub(crate) max_inflight: usize,
    pub(crate) inflight: Semaphore,
    pub(crate) metrics: Metrics,
    /// Bumped after every reload, so MCP streams can tell their clients the tools changed.
    pub(crate) reloads: watch::Sender<u64>,
    pub(crate) mcp: mcp::Endpoint,
}

/// How a dispatcher is set up.
pub struct Settings {
    pub site: PathBuf,
    pub ledger: Arc<dyn Ledger>,
    /// `CAPDIR_OWNER_KEY`; without it nobody is the owner.
    pub owner_key: Option<String>,
    /// The key capability tokens are signed with; without it every token is refused.
    pub token_key: Option<TokenKey>,
    /// `capdir serve --open`: anonymous callers may invoke rows that are not sensitive and
    /// use no credential (for local use).
    pub open: bool,
    /// The dispatcher's public URL: links in answers, and the audience tokens must name.
    pub base_url: String,
    pub config: InvokerConfig,
    pub body_limit: usize,
    /// Invocations running at once before new ones get 503.
    pub max_inflight: usize,
    /// What `/mcp` lists: one tool per row, or the ask/contract/invoke trio.
    pub mcp: mcp::Options,
}

impl Settings {
    pub fn new(site: impl Into<PathBuf>, ledger: Arc<dyn Ledger>) -> Settings {
        Settings {
            site: site.into(),
            ledger,
            owner_key: None,
            token_key: None,
            open: false,
            base_url: "http://127.0.0.1:8080".into(),
            config: InvokerConfig::default(),
            body_limit: DEFAULT_BODY_LIMIT,
            max_inflight: 1024,
            mcp: mcp::Options::default(),
        }
    }
}

impl AppState {
    pub fn new(settings: Settings) -> anyhow::Result<AppState> {
        let live = Live::load(&settings.site, &settings.config)?;
        let keys = Keys {
            owner: settings.owner_key.filter(|k| !k.is_empty()),
            token: settings.token_key,
        };
        Ok(AppState {
            inner: Arc::new(Shared {
                secrets: crate::secrets::Known::new(keys.secret_values()),
                site: settings.site,
                live: ArcSwap::from_pointee(live),
                config: settings.config,
                ledger: settings.ledger,
                keys,
                open: settings.open,
                urls: Urls::new(&settings.base_url),
                body_limit: settings.body_limit,
                max_inflight: settings.max_inflight,
                inflight: Semaphore::new(settings.max_inflight),
                metrics: Metrics::default(),
                reloads: watch::Sender::new(0),
                mcp: mcp::Endpoint::new(settings.mcp),
            }),
        })
    }

    /// What credentials are checked against (for `auth::authenticate`).
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Whether anonymous callers may invoke rows that are not sensitive and use no credential.
    pub fn is_open(&self) -> bool {
        self.inner.open
    }

    /// The ledger receipts and token revocations live in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.inner.ledger
    }

    /// The catalogue requests see now.
    pub fn live(&self) -> Arc<Live> {
        self.inner.live.load_full()
    }

    /// Reload when `catalogue.sqlite` changed; true when a new build was swapped in. A build
    /// that cannot be read yet keeps the old one serving; the next poll tries again.
    pub fn reload_if_changed(&self) -> bool {
        let path = self.inner.site.join("catalogue.sqlite");
        let now = stamp(&path);
        if now.is_none() || now == self.inner.live.load().stamp {
            return false;
        }
        match Live::load(&self.inner.site, &self.inner.config) {
            Ok(live) => {
                tracing::info!(
                    commit = %live.info.commit,
                    rows = live.invoker.rows().len(),
                    "reloaded the site"
                );
                self.inner.live.store(Arc::new(live));
                self.inner.metrics.reloads.fetch_add(1, Ordering::Relaxed);
                self.inner.reloads.send_modify(|n| *n += 1);
                true
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "new site not readable yet");
                false
            }
        }
    }

    /// A receiver that changes after every reload.
    pub fn subscribe_reloads(&self) -> watch::Receiver<u64> {
        self.inner.reloads.subscribe()
    }

    /// Poll the site every `every` for a new build, until the runtime stops.
    pub fn spawn_reloader(&self, every: Duration) {
        let state = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let s = state.clone();
                let _ = tokio::task::spawn_blocking(move || s.reload_if_changed()).await;
            }
        });
    }
}

/// The dispatcher's routes.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/api/dispatch", get(dispatch_get).post(dispatch_post))
        .route("/receipt/{id}", get(receipt).post(receipt_form))
        .route("/metrics", get(metrics))
        .route(
            "/mcp",
            get(mcp::http::open_stream)
                .post(mcp::http::post)
                .delete(mcp::http::end_session),
        )
        .route("/openapi.json", get(openapi))
        .fallback(get(static_file))
        .layer(count_requests(state.inner.clone()))
        .with_state(state)
}

/// Counts every request for `/metrics`; a plain map over the request, no boxed middleware.
fn count_requests(
    inner: Arc<Shared>,
) -> tower::util::MapRequestLayer<impl Fn(Request) -> Request + Clone> {
    tower::util::MapRequestLayer::new(move |req: Request| {
        inner.metrics.requests.fetch_add(1, Ordering::Relaxed);
        req
    })
}

#[derive(Debug, Deserialize)]
struct DispatchQuery {
    ask: Option<String>,
    key: Option<String>,
    format: Option<String>,
    confirm: Option<String>,
    map: Option<String>,
    registry: Option<String>,
    limit: Option<usize>,
    /// Run-now: the key to invoke.
    invoke: Option<String>,
    /// Run-now: the `a|b` body.
    body: Option<String>,
    /// A capability token carried in the URL (run-now links, contracts).
    share: Option<String>,
}

const QUERY_HELP: &str = "use ?ask=…, ?key=K&format=markdown|json, ?invoke=K&body=…&share=TOKEN, ?confirm=inv_…, ?map=1 or ?registry=1";

/// The caller of a GET: a `share` token in the URL when there is one (a run-now link is
/// the whole credential; headers are then not read), else the request's headers.
fn get_caller(
    state: &AppState,
    headers: &HeaderMap,
    share: Option<&str>,
) -> Result<Caller, ApiError> {
    match share {
        Some(token) => auth::authenticate_share(state.keys(), token),
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
    if q.limit.is_some_and(|l| l > MAX_ASK_LIMIT) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("limit is at most {MAX_ASK_LIMIT}"),
            "ask for fewer candidates",
        ));
    }
    if let Some(id) = q.confirm.as_deref() {
        checked_receipt_id(id)?;
    }
    Ok(())
}

async fn dispatch_get(
    State(state): State<AppState>,
    headers: HeaderMap,
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
        let request = dispatch::InvokeRequest {
            key,
            body: q.body,
            args: None,
            repairs: None,
        };
        let done = dispatch::dispatch(&state, &caller, request).await?;
        return Ok(invoked_response(&done));
    }
    if let Some(text) = q.ask {
        let answer = ask::answer(
            &live.searcher,
            &text,
            q.limit.unwrap_or(12),
            &state.inner.urls,
        )
        .map_err(|e| ApiError::internal("search failed", e))?;
        return Ok(axum::Json(answer).into_response());
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
        return confirm(&state, &id).await;
    }
    if q.map.is_some() {
        return Ok(axum::Json(json!({
            "commit": live.info.commit,
            "counts": live.info.counts,
        }))
        .into_response());
    }
    if q.registry.is_some() {
        return site_file(&state.inner.site.join("registry.json"), "application/json").await;
    }
    // Nothing asked: what can be asked here.
    let base = &state.inner.urls.base;
    Ok(axum::Json(json!({
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
    .into_response())
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
        return Err(unknown_key(live.invoker.rows(), key));
    }
    let path = state.inner.site.join("k").join(format!("{key}.{ext}"));
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
    let affordances = crate::affordance::of(state, caller, &callable.row).await?;
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| ApiError::internal("a site file is missing", e.into()))?;
    if ext == "json" {
        let mut doc: Json = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal("a contract is not JSON", e.into()))?;
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("affordances".into(), json!(affordances));
        }
        return Ok(axum::Json(doc).into_response());
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    text.push_str(&affordances.markdown());
    Ok(([(header::CONTENT_TYPE, content_type)], text).into_response())
}

pub(crate) fn unknown_key(rows: &RowSet, key: &str) -> ApiError {
    let suggestions = rows.did_you_mean(key);
    let fix = if suggestions.is_empty() {
        "ask in plain words with ?ask=… to find the key".to_string()
    } else {
        format!("did you mean {}?", suggestions.join(", "))
    };
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_key",
        format!("no row has the key `{key}`"),
        fix,
    )
    .with("did_you_mean", json!(suggestions))
}

fn checked_receipt_id(id: &str) -> Result<&str, ApiError> {
    let ok = id.strip_prefix("inv_").is_some_and(|rest| {
        !rest.is_empty() && rest.len() <= 64 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    if ok {
        Ok(id)
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_receipt_id",
            "a receipt id is `inv_` followed by letters and digits",
            "use the `receipt` field of an invocation's answer",
        ))
    }
}

pub(crate) async fn find_receipt(state: &AppState, id: &str) -> Result<Receipt, ApiError> {
    let id = checked_receipt_id(id)?;
    let found = state
        .inner
        .ledger
        .get(id)
        .await
        .map_err(|e| ApiError::internal("ledger read failed", e))?;
    found.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_receipt",
            "no receipt has this id",
            "check the id; receipts are never deleted",
        )
    })
}

async fn confirm(state: &AppState, id: &str) -> Result<Response, ApiError> {
    let r = find_receipt(state, id).await?;
    Ok(axum::Json(json!({
        "confirmed": true,
        "receipt": r.draft.id,
        "status": r.draft.status,
        "key": r.draft.key,
        "input_sha256": r.draft.input_sha256,
        "output_sha256": r.draft.output_sha256,
        "contract_sha256": r.draft.contract_sha256,
        "hash": r.hash,
    }))
    .into_response())
}

async fn receipt(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if wants_html {
        return Ok(receipt_page(&state, &id, &headers).await);
    }
    let caller = authenticate(state.keys(), &headers)?;
    auth::require_credential(&caller)?;
    let r = find_receipt(&state, &id).await?;
    may_read_receipt(&caller, &r)?;
    Ok(axum::Json(r).into_response())
}

/// Who may read a full receipt: the owner, or the token whose invocation it records.
fn may_read_receipt(caller: &Caller, r: &Receipt) -> Result<(), ApiError> {
    auth::require_credential(caller)?;
    if matches!(caller, Caller::Token(_) if r.draft.actor == caller.actor()) {
        return Ok(());
    }
    auth::require_owner(caller)
}

/// What the receipt page's form sends: the owner key or a token typed into the page.
#[derive(Deserialize)]
struct CredentialForm {
    #[serde(default)]
    credential: String,
}

/// `POST /receipt/{id}` from the page's form: the credential arrives as a form field (a
/// browser cannot put a typed key into a header of a plain navigation) and is checked exactly
/// as the header would be.
async fn receipt_form(
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
    let found = find_receipt(state, id).await;
    let caller = authenticate(state.keys(), headers);
    let (receipt, full, refusal) = match found {
        Err(e) => (None, false, Some(e)),
        Ok(r) => match caller.and_then(|c| match c {
            Caller::Anonymous => Ok(false),
            c => may_read_receipt(&c, &r).map(|()| true),
        }) {
            Ok(true) => (
                Some(serde_json::to_value(&r).unwrap_or_default()),
                true,
                None,
            ),
            Ok(false) => (Some(keyless(&r)), false, None),
            Err(e) => (Some(keyless(&r)), false, Some(e)),
        },
    };
    let page = crate::site::ReceiptPage {
        id,
        receipt,
        full,
        error: refusal.as_ref().map(|e| crate::site::PageError {
            code: e.0.code,
            message: &e.0.message,
            how_to_fix: &e.0.how_to_fix,
        }),
    };
    let status = refusal.as_ref().map_or(StatusCode::OK, |e| e.0.status);
    html_page(state, status, &page)
}

fn html_page(state: &AppState, status: StatusCode, page: &crate::site::ReceiptPage) -> Response {
    match crate::site::receipt_page(&state.live().info, page) {
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
const PAGE_POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

async fn dispatch_post(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let caller = authenticate(state.keys(), &headers)?;
    if !state.is_open() {
        auth::require_credential(&caller)?;
    }
    let request = dispatch::read_request(&state, req).await?;
    let done = dispatch::dispatch(&state, &caller, request).await?;
    Ok(invoked_response(&done))
}

/// The answer to a successful invocation, with its receipt id in a header as well.
fn invoked_response(done: &dispatch::Invoked) -> Response {
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
    })
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&receipt.draft.id) {
        response.headers_mut().insert("x-capdir-receipt", v);
    }
    response
}

/// The OpenAPI document of these routes, naming this dispatcher as its server.
async fn openapi(State(state): State<AppState>) -> Response {
    axum::Json(crate::openapi::document(&state.inner.urls.base)).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    let m = &state.inner.metrics;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP capdir_requests_total HTTP requests received.\n# TYPE capdir_requests_total counter\ncapdir_requests_total {}",
        m.requests.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP capdir_reloads_total New builds swapped in.\n# TYPE capdir_reloads_total counter\ncapdir_reloads_total {}",
        m.reloads.load(Ordering::Relaxed)
    );
    out.push_str("# HELP capdir_invocations_total Invocations by status and runner.\n# TYPE capdir_invocations_total counter\n");
    for ((status, runner), n) in m
        .invocations
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        let _ = writeln!(
            out,
            "capdir_invocations_total{{status=\"{status}\",runner=\"{runner}\"}} {n}"
        );
    }
    let (commits, seconds) = state.inner.ledger.commit_stats();
    let _ = writeln!(
        out,
        "# HELP capdir_ledger_commit_seconds Time spent committing receipt batches.\n# TYPE capdir_ledger_commit_seconds summary\ncapdir_ledger_commit_seconds_sum {seconds}\ncapdir_ledger_commit_seconds_count {commits}"
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The static site. Hand-written rather than tower-http's `ServeDir`, whose `fs` feature
/// needs crates this build cannot fetch offline; it serves files by path, fresh per request.
async fn static_file(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
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
    let mut path = state.inner.site.join(decoded.as_ref());
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
