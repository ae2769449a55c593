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
use crate::auth::{self, authenticate};
use crate::contract::Urls;
use crate::dispatch;
use crate::invoke::{Invoker, InvokerConfig};
use crate::ledger::{Ledger, Receipt};
use crate::mcp;
use crate::rowset::RowSet;
use crate::search::Searcher;
use crate::snapshot::{self, BuildInfo};
use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
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
        }))
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
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), axum::Json(self.to_json())).into_response()
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
    pub(crate) owner_key: Option<String>,
    pub(crate) urls: Urls,
    pub(crate) body_limit: usize,
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
    /// `CAPDIR_OWNER_KEY`; without it nobody may invoke.
    pub owner_key: Option<String>,
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
        Ok(AppState {
            inner: Arc::new(Shared {
                site: settings.site,
                live: ArcSwap::from_pointee(live),
                config: settings.config,
                ledger: settings.ledger,
                owner_key: settings.owner_key.filter(|k| !k.is_empty()),
                urls: Urls::new(&settings.base_url),
                body_limit: settings.body_limit,
                inflight: Semaphore::new(settings.max_inflight),
                metrics: Metrics::default(),
                reloads: watch::Sender::new(0),
                mcp: mcp::Endpoint::new(settings.mcp),
            }),
        })
    }

    /// The owner key, when one is set.
    pub fn owner_key(&self) -> Option<&str> {
        self.inner.owner_key.as_deref()
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
        .route("/receipt/{id}", get(receipt))
        .route("/metrics", get(metrics))
        .route(
            "/mcp",
            get(mcp::http::open_stream)
                .post(mcp::http::post)
                .delete(mcp::http::end_session),
        )
        .fallback(get(static_file))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

async fn count_requests(
    State(state): State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    state.inner.metrics.requests.fetch_add(1, Ordering::Relaxed);
    next.run(req).await
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
}

async fn dispatch_get(
    State(state): State<AppState>,
    query: Result<Query<DispatchQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            e.body_text(),
            "use ?ask=…, ?key=K&format=markdown|json, ?confirm=inv_…, ?map=1 or ?registry=1",
        )
    })?;
    let live = state.live();
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
        return contract(
            &state,
            &live,
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
    Err(ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_query",
        "nothing asked",
        "use ?ask=…, ?key=K&format=markdown|json, ?confirm=inv_…, ?map=1 or ?registry=1",
    ))
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
    let known = live.invoker.rows().get(key).is_some();
    if !known && !live.tombstones.contains_key(key) {
        return Err(unknown_key(live.invoker.rows(), key));
    }
    let path = state.inner.site.join("k").join(format!("{key}.{ext}"));
    let mut response = site_file(&path, content_type).await?;
    if !known {
        // A removed key answers with its tombstone: when, by which commit, what replaced it.
        *response.status_mut() = StatusCode::GONE;
    }
    Ok(response)
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
    auth::require_owner(&authenticate(state.owner_key(), &headers)?)?;
    let r = find_receipt(&state, &id).await?;
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if wants_html {
        let pretty = serde_json::to_string_pretty(&r).unwrap_or_default();
        let html = format!(
            "<!doctype html><meta charset=utf-8><title>{id}</title><h1>Receipt {id}</h1><pre>{}</pre>",
            html_escape(&pretty),
            id = html_escape(&r.draft.id)
        );
        return Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response());
    }
    Ok(axum::Json(r).into_response())
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn dispatch_post(
    State(state): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let caller = authenticate(state.owner_key(), &headers)?;
    auth::require_owner(&caller)?;
    let request = dispatch::read_request(&state, req).await?;
    let done = dispatch::dispatch(&state, &caller, request).await?;
    let receipt = &done.receipt;
    let mut response = axum::Json(json!({
        "receipt": receipt.draft.id,
        "status": receipt.draft.status,
        "key": receipt.draft.key,
        "output": done.output,
        "catalogue_commit": receipt.draft.catalogue_commit,
        "duration_ms": done.duration.as_secs_f64() * 1000.0,
        "truncated": done.truncated,
    }))
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&receipt.draft.id) {
        response.headers_mut().insert("x-capdir-receipt", v);
    }
    Ok(response)
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
    ([(header::CONTENT_TYPE, content_type)], Body::from(bytes)).into_response()
}
